"""Reading and writing derivation graphs: derivation.json and Bingo's text files.

`load_json` and `load_bingo` (the formats "json" and "bingo" of
`datalog.io.FORMATS`) return a `Model` after cycle elimination and
compression (`datalog.bayesnet.to_model`), with `meta["warnings"]` and
`meta["report"]` saying what was merged, dropped or removed.

derivation.json (schema: `datalog/derivation.schema.json`, version 1)::

    {"format": "fastlbp-derivation", "version": 1,
     "rules": {"R0": {"probability": 0.9, "text": "path(x,z) :- edge(x,y), path(y,z)."}},
     "tuples": ["edge(1,2)", "path(1,2)"],          # optional: names for integer references
     "clauses": [["R0", 1, [0]],                     # [rule, head, body]; compact form
                 {"rule": "R0", "head": "path(1,2)", "body": ["edge(1,2)"]}],
     "inputs": {"edge(1,2)": 0.999},                # optional priors of input tuples
     "alarms": ["path(1,2)"],                        # optional
     "labels": {"path(1,2)": false},                 # optional known labels (evidence)
     "truth": {"path(1,2)": true},                   # optional ground truth (never evidence)
     "locations": {"path(1,2)": [{"file": "src/a.c", "line": 3}]},   # optional, datalog.annotations
     "relations": {"path": {"description": "...", "security": false}}}  # optional, datalog.annotations

A tuple reference is a name or an index into "tuples"; names not listed in
"tuples" are added. A rule without "probability" has 0.999. A file starting
with gzip's magic bytes is decompressed, up to `max_decompressed` bytes
(`fastlbp.core.errors.decompression_limit`); a leading UTF-8 byte order mark is
dropped. An object repeating a key (JSON would keep the last value) is an error.

Bingo directory: `named_cons_all.txt` (`R12: NOT a(1,2), NOT b(2), c(1,2)`,
body after NOT, head last), optional `base_queries.txt` (alarms, one tuple per
line), `oracle_queries.txt` (true alarms: ground truth), `rule-prob.txt`
(`R12: 0.9`; missing rules get 0.999), `rule_dict.txt` (`R12: TEXT`, the
rules' texts, `datalog.rule_dict`); fastlbp extensions, written only when
needed: `input-prob.txt` (`tuple: prior`) and `labels.txt` (`tuple true|false`).
Each file that is present is read (a directory, a dangling link or a link loop
in its place is an error naming it); a key given twice with different values
is an error naming both lines. `save_bingo` refuses a name these line-based
files cannot carry (`check_bingo_names`), and writes the directory whole before
swapping it in; a directory holding its in-progress marker `.fastlbp-incomplete`
is refused.

Input tuples are the tuples that no clause derives, plus tuples given a prior.
A tuple that clauses derive but that is not derivable from the inputs
(every derivation depends on itself) is "neither derived nor input": it and
its clauses are dropped with a warning, and an alarm or label naming it is an
error. Duplicate clauses (same rule, head and body set) are merged with a
warning; so are repeated body tuples within a clause.
"""

from __future__ import annotations

import gzip
import itertools
import json
import operator
import os
import re
from pathlib import Path

import numpy as np

from datalog.annotations import parse_annotations
from datalog.bayesnet import to_model
from datalog.cycles import least_fixpoint
from datalog.derivation import DEFAULT_RULE_PROBABILITY, Dedup, DerivationGraph, Rule, merge_duplicates
from datalog.reading import (
    Once,
    check_probability,
    json_type,
    loads_json,
    name_value_lines,
    shown,
    text_only,
    unique,
)
from datalog.rule_dict import RULE_DICT, read_rule_dict, write_rule_dict
from fastlbp.core.errors import InputError, read_text, text_lines
from fastlbp.core.model import Model
from fastlbp.core.outputs import write_atomically, write_directory, write_file

FORMAT_NAME = "fastlbp-derivation"
FORMAT_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("derivation.schema.json")

BINGO_CLAUSES = "named_cons_all.txt"
BINGO_ALARMS = "base_queries.txt"
BINGO_ORACLE = "oracle_queries.txt"
BINGO_RULE_PROBS = "rule-prob.txt"
BINGO_INPUT_PROBS = "input-prob.txt"
BINGO_LABELS = "labels.txt"
# In a directory `save_bingo` has not finished (the hidden temporary it fills before swapping it in):
# `read_bingo` refuses a directory holding it. Bingo's own directories never have one.
BINGO_INCOMPLETE = ".fastlbp-incomplete"
# The files `save_bingo` writes or removes; any other entry of a directory it replaces is kept.
BINGO_FILES = frozenset({BINGO_CLAUSES, BINGO_ALARMS, BINGO_ORACLE, BINGO_RULE_PROBS, BINGO_INPUT_PROBS,
                         BINGO_LABELS, RULE_DICT, BINGO_INCOMPLETE})

# (group, tuple index) -> (path, line, JSON location) of the reference, for messages.
Where = dict[tuple[str, int], tuple[str, int | None, str | None]]


# derivation.json -----------------------------------------------------------

class _Tuples:
    """Tuple names and their indices, growing as names are referenced."""

    def __init__(self, names: list[str]):
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}

    def ref(self, value, path, location, *, create: bool) -> int:
        if isinstance(value, str):
            i = self.index.get(value)
            if i is None:
                if not create:
                    raise InputError(path, None, f"tuple {value!r} is not in the graph", location)
                i = self.index[value] = len(self.names)
                self.names.append(value)
            return i
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(self.names):
                raise InputError(path, None, f"tuple index {value} is out of range: \"tuples\" has "
                                 f"{len(self.names)} entries", location)
            return value
        raise InputError(path, None, f"expected a tuple name or index, got {json_type(value)}", location)


def _fast_clauses(clauses, rule_index, num_tuples):
    """Columns of well-formed compact clauses with integer references, or None (then the slow path)."""
    try:
        if not clauses or set(map(type, clauses)) != {list} or set(map(len, clauses)) != {3}:
            return None
        # itemgetter maps run in C; zip(*clauses) would build a 10^6-argument call.
        rule_col, head_col, body_col = (list(map(operator.itemgetter(i), clauses)) for i in range(3))
        rules = np.fromiter(map(rule_index.__getitem__, rule_col), np.int32, len(clauses))
        if set(map(type, head_col)) != {int} or set(map(type, body_col)) != {list}:
            return None
        flat = list(itertools.chain.from_iterable(body_col))
        if flat and set(map(type, flat)) != {int}:
            return None
        heads = np.array(head_col, np.int64)
        body = np.array(flat, np.int64)
        for arr in (heads, body):
            if arr.size and (arr.min() < 0 or arr.max() >= num_tuples):
                return None
        lens = np.fromiter(map(len, body_col), np.int64, len(clauses))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    offsets = np.zeros(len(clauses) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return rules, heads.astype(np.int32), offsets, body.astype(np.int32)


def _slow_clauses(clauses, rule_index, tuples: _Tuples, path):
    rules, heads, offsets, body = [], [], [0], []
    for i, c in enumerate(clauses):
        loc = f"$.clauses[{i}]"
        if isinstance(c, list):
            if len(c) != 3:
                raise InputError(path, None, f"a clause is [rule, head, body], got {len(c)} items", loc)
            rule, head, b = c
            rloc, hloc, bloc = f"{loc}[0]", f"{loc}[1]", f"{loc}[2]"
        elif isinstance(c, dict):
            unique(c, path, loc)
            extra = set(c) - {"rule", "head", "body"}
            if extra:
                raise InputError(path, None, f"unknown clause field {sorted(extra)[0]!r}", loc)
            for key in ("rule", "head"):
                if key not in c:
                    raise InputError(path, None, f"clause has no {key!r}", loc)
            rule, head, b = c["rule"], c["head"], c.get("body", [])
            rloc, hloc, bloc = f"{loc}.rule", f"{loc}.head", f"{loc}.body"
        else:
            raise InputError(path, None, f"a clause must be an array or an object, got {json_type(c)}",
                             loc)
        if not isinstance(rule, str):
            raise InputError(path, None, f"rule must be a rule name (string), got {json_type(rule)}", rloc)
        if rule not in rule_index:
            raise InputError(path, None, f"rule {rule!r} is not defined in \"rules\"", rloc)
        if head is None:
            raise InputError(path, None, "missing head", hloc)
        if not isinstance(b, list):
            raise InputError(path, None, f"body must be an array, got {json_type(b)}", bloc)
        rules.append(rule_index[rule])
        heads.append(tuples.ref(head, path, hloc, create=True))
        body.extend(tuples.ref(t, path, f"{bloc}[{j}]", create=True) for j, t in enumerate(b))
        offsets.append(len(body))
    return (np.array(rules, np.int32), np.array(heads, np.int32), np.array(offsets, np.int64),
            np.array(body, np.int32))


def _expect(value, kind, path, location, what):
    if not isinstance(value, kind):
        names = {dict: "an object", list: "an array", str: "a string"}
        raise InputError(path, None, f"{what} must be {names[kind]}, got {json_type(value)}", location)


TOP_LEVEL = ("format", "version", "rules", "tuples", "clauses", "inputs", "alarms", "labels", "truth",
             "locations", "relations")


def parse_json(text: str, path: str | None = None) -> tuple[DerivationGraph, Where]:
    """Parses derivation.json text into a graph (raw: duplicates and cycles kept).

    Raises:
        InputError: invalid JSON (line), or a wrong type or value (JSON path).
    """
    doc = loads_json(text, path)
    _expect(doc, dict, path, "$", "the document")
    unique(doc, path, "$")
    for key in doc:
        if key not in TOP_LEVEL:
            raise InputError(path, None, f"unknown field {key!r} (expected one of {', '.join(TOP_LEVEL)})",
                             f"$.{key}")
    if doc.get("format") != FORMAT_NAME:
        raise InputError(path, None, f"\"format\" must be {FORMAT_NAME!r}, got {doc.get('format')!r}",
                         "$.format")
    version = doc.get("version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise InputError(path, None, f"unsupported version {version!r} (this fastlbp reads version "
                         f"{FORMAT_VERSION})", "$.version")
    for key in ("rules", "clauses"):
        if key not in doc:
            raise InputError(path, None, f"missing required field {key!r}", "$")

    rules_doc = doc["rules"]
    _expect(rules_doc, dict, path, "$.rules", "\"rules\"")
    unique(rules_doc, path, "$.rules")
    rules = []
    for name, spec in rules_doc.items():
        loc = f"$.rules[{json.dumps(name)}]"
        if isinstance(spec, int | float) and not isinstance(spec, bool):
            spec = {"probability": spec}
        _expect(spec, dict, path, loc, "a rule")
        unique(spec, path, loc)
        extra = set(spec) - {"probability", "text"}
        if extra:
            raise InputError(path, None, f"unknown rule field {sorted(extra)[0]!r}", loc)
        p = spec.get("probability", DEFAULT_RULE_PROBABILITY)
        p = check_probability(p, path, None, f"{loc}.probability", "rule probability")
        text = spec.get("text")
        if text is not None:
            _expect(text, str, path, f"{loc}.text", "rule text")
        rules.append(Rule(name, p, text))
    rule_index = {r.name: i for i, r in enumerate(rules)}

    names_doc = doc.get("tuples", [])
    _expect(names_doc, list, path, "$.tuples", "\"tuples\"")
    for i, n in enumerate(names_doc):
        if not isinstance(n, str):
            raise InputError(path, None, f"a tuple name must be a string, got {json_type(n)}",
                             f"$.tuples[{i}]")
    tuples = _Tuples(list(names_doc))
    if len(tuples.index) != len(tuples.names):
        seen = set()
        for i, n in enumerate(tuples.names):
            if n in seen:
                raise InputError(path, None, f"tuple {n!r} is listed twice", f"$.tuples[{i}]")
            seen.add(n)

    clauses = doc["clauses"]
    _expect(clauses, list, path, "$.clauses", "\"clauses\"")
    if not clauses:
        raise InputError(path, None, "the graph is empty: no clauses", "$.clauses")
    cols = _fast_clauses(clauses, rule_index, len(tuples.names))
    if cols is None:
        cols = _slow_clauses(clauses, rule_index, tuples, path)
    c_rule, c_head, offsets, body = cols
    text_only(tuples.names, "tuple", path, "$.tuples")
    text_only([r.name for r in rules] + [r.text or "" for r in rules], "rule", path, "$.rules")

    where: Where = {}
    priors = {}
    inputs = doc.get("inputs", {})
    _expect(inputs, dict, path, "$.inputs", "\"inputs\"")
    unique(inputs, path, "$.inputs")
    for name, p in inputs.items():
        loc = f"$.inputs[{json.dumps(name)}]"
        t = tuples.ref(name, path, loc, create=False)
        priors[t] = check_probability(p, path, None, loc, "input prior")
    alarms_doc = doc.get("alarms", [])
    _expect(alarms_doc, list, path, "$.alarms", "\"alarms\"")
    alarms = []
    for i, a in enumerate(alarms_doc):
        loc = f"$.alarms[{i}]"
        t = tuples.ref(a, path, loc, create=False)
        if ("alarm", t) not in where:
            where[("alarm", t)] = (path, None, loc)
            alarms.append(t)
    groups = {}
    for key in ("labels", "truth"):
        group = doc.get(key, {})
        _expect(group, dict, path, f"$.{key}", f"\"{key}\"")
        unique(group, path, f"$.{key}")
        out = {}
        for name, v in group.items():
            loc = f"$.{key}[{json.dumps(name)}]"
            t = tuples.ref(name, path, loc, create=False)
            if not isinstance(v, bool):
                raise InputError(path, None, f"a label must be true or false, got {json_type(v)}", loc)
            out[t] = v
            where[(key.rstrip("s"), t)] = (path, None, loc)
        groups[key] = out
    dg = DerivationGraph(
        tuples=tuples.names, rules=rules, clause_rule=c_rule, clause_head=c_head,
        body_offsets=offsets, body=body, priors=priors, alarms=np.array(alarms, np.int32),
        labels=groups["labels"], truth=groups["truth"], source=path,
        annotations=parse_annotations(doc, tuples.index, path),
    )
    return dg, where


def dumps_json(dg: DerivationGraph) -> str:
    """derivation.json text: compact clauses `[rule, head, [body]]` one per line, tuples by index."""
    dump = json.dumps
    rules = ",\n  ".join(
        f"{dump(r.name)}: " + dump({"probability": r.probability, **({"text": r.text} if r.text else {})})
        for r in dg.rules)
    rule_names = [dump(r.name) for r in dg.rules]
    offsets = np.asarray(dg.body_offsets).tolist()
    body = np.asarray(dg.body).tolist()
    clauses = ",\n  ".join(
        f"[{rule_names[r]},{h},[{','.join(map(str, body[offsets[c]:offsets[c + 1]]))}]]"
        for c, (r, h) in enumerate(zip(np.asarray(dg.clause_rule).tolist(),
                                       np.asarray(dg.clause_head).tolist(), strict=True)))
    names = dg.tuples
    parts = [
        f'"format": {dump(FORMAT_NAME)}',
        f'"version": {FORMAT_VERSION}',
        "\"rules\": {\n  " + rules + "\n}",
        "\"tuples\": [\n  " + ",\n  ".join(map(dump, names)) + "\n]",
        "\"clauses\": [\n  " + clauses + "\n]",
    ]
    if dg.priors:
        parts.append("\"inputs\": " + dump({names[t]: p for t, p in sorted(dg.priors.items())}))
    if len(dg.alarms):
        parts.append("\"alarms\": " + dump([names[a] for a in np.asarray(dg.alarms).tolist()]))
    for key, group in (("labels", dg.labels), ("truth", dg.truth)):
        if group:
            parts.append(f"\"{key}\": " + dump({names[t]: v for t, v in group.items()}))
    for key in ("locations", "relations"):  # datalog.annotations: one entry per line
        section = dg.annotations.get(key)
        if section:
            entries = ",\n  ".join(f"{dump(k)}: {dump(v)}" for k, v in section.items())
            parts.append(f"\"{key}\": {{\n  {entries}\n}}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def save_json(dg: DerivationGraph, path: str | os.PathLike) -> None:
    """Writes derivation.json (gzip-compressed when the name ends in .gz), atomically.

    Raises:
        InputError: `path` cannot be written (`fastlbp.core.outputs.write_atomically`:
            the old file is left as it was).
    """
    p = Path(path)
    data = dumps_json(dg).encode("utf-8")
    if p.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    write_atomically(p, data)


def read_json(path: str | os.PathLike, *, max_decompressed: int | None = None
              ) -> tuple[DerivationGraph, Where]:
    """Reads derivation.json (raw graph); `max_decompressed`: `fastlbp.core.errors.decompression_limit`."""
    return parse_json(read_text(path, max_decompressed=max_decompressed), str(path))


# Bingo's text files --------------------------------------------------------

_LIT = r"(?:NOT\s+)?[^\s(),:]+(?:\([^()]*\))?"
_CLAUSE_LINE = re.compile(rf"\s*([^\s:]+)\s*:\s*({_LIT}(?:\s*,\s*{_LIT})*)\s*")
_LITERAL = re.compile(r"(NOT\s+)?([^\s(),:]+(?:\([^()]*\))?)")
# What `read_bingo` reads back unchanged: a tuple in a clause line, a rule name.
_CLAUSE_TUPLE = re.compile(r"[^\s(),:]+(?:\([^()\r\n]*\))?")
_RULE_NAME = re.compile(r"[^\s:]+")


def _lines(path: Path, max_decompressed: int | None):
    for ln, line in enumerate(text_lines(read_text(path, max_decompressed=max_decompressed)), 1):
        s = line.strip()
        if s:
            yield ln, s


def _name_value_lines(path: Path, what: str, max_decompressed: int | None):
    """Lines `NAME: value` (split at the last colon; a Bingo file has no comments)."""
    for ln, _, name, value in name_value_lines(path, f"'NAME: {what}'", comments=False,
                                               max_decompressed=max_decompressed):
        yield ln, name, value.strip()


def read_bingo(directory: str | os.PathLike, *, max_decompressed: int | None = None
               ) -> tuple[DerivationGraph, Where]:
    """Parses a Bingo directory (raw graph: duplicates and cycles kept).

    Every file present is read: one that is a directory, a dangling link or a
    link loop is an error, never skipped. A leading byte order mark is
    dropped. A key given twice with different values (a rule's probability, an
    input's prior, a label) is an error naming both lines.

    Args:
        directory: the Bingo directory.
        max_decompressed: limit for gzip-compressed files (see
            `fastlbp.core.errors.decompression_limit`); None for the default.

    Raises:
        InputError: naming the file, the line and the problem.
    """
    d = Path(directory)
    cons = d / BINGO_CLAUSES
    if os.path.lexists(d / BINGO_INCOMPLETE):
        raise InputError(str(d), None, f"an incomplete Bingo directory: fastlbp was stopped while writing "
                         f"it ({BINGO_INCOMPLETE} is there); write it again")
    if not os.path.lexists(cons):
        raise InputError(str(d), None, f"not a Bingo directory: {BINGO_CLAUSES} is missing")
    cpath = str(cons)
    names: dict[str, int] = {}
    rule_index: dict[str, int] = {}
    c_rule, c_head, offsets, body, lines = [], [], [0], [], []
    for ln, s in _lines(cons, max_decompressed):
        m = _CLAUSE_LINE.fullmatch(s)
        if m is None:
            rule, sep, rest = s.partition(":")
            if not sep:
                msg = "malformed line: expected 'RULE: NOT body1, ..., NOT bodyN, head'"
            elif not rest.strip():
                msg = "missing head: the clause has no tuples"
            else:
                msg = ("malformed line: expected 'RULE: NOT body1, ..., NOT bodyN, head' with tuples "
                       "like name(1,2) separated by commas")
            raise InputError(cpath, ln, f"{msg}; got {shown(s)}")
        lits = _LITERAL.findall(m.group(2))
        if lits[-1][0]:
            raise InputError(cpath, ln, f"missing head: every tuple is negated with NOT, but the last one "
                             f"is the head and has no NOT; got {shown(s)}")
        for neg, t in lits[:-1]:
            if not neg:
                raise InputError(cpath, ln, f"tuple {shown(t)} lacks NOT: only the last tuple, the head, "
                                 "has no NOT")
        rule = m.group(1)
        r = rule_index.setdefault(rule, len(rule_index))
        c_rule.append(r)
        for _, t in lits:
            names.setdefault(t, len(names))
        c_head.append(names[lits[-1][1]])
        body.extend(names[t] for _, t in lits[:-1])
        offsets.append(len(body))
        lines.append(ln)
    if not c_head:
        raise InputError(cpath, None, "the graph is empty: no clauses")

    rp = d / BINGO_RULE_PROBS
    probs = Once(rp, "the probability of rule")
    if os.path.lexists(rp):
        for ln, name, value in _name_value_lines(rp, "probability", max_decompressed):
            p = check_probability(value, str(rp), ln, None, f"probability of rule {shown(name)}")
            probs.set(name, p, ln, name)
    rd = d / RULE_DICT
    texts = read_rule_dict(rd, rule_index, max_decompressed=max_decompressed) if os.path.lexists(rd) else {}
    rules = [Rule(name, probs.values.get(name, DEFAULT_RULE_PROBABILITY), texts.get(name))
             for name in rule_index]

    def tuple_ref(path: Path, ln: int, name: str) -> int:
        if name not in names:
            raise InputError(str(path), ln, f"tuple {shown(name)} is not in the graph ({BINGO_CLAUSES})")
        return names[name]

    where: Where = {}
    ip = d / BINGO_INPUT_PROBS
    priors = Once(ip, "the prior of")
    if os.path.lexists(ip):
        for ln, name, value in _name_value_lines(ip, "prior", max_decompressed):
            # May name a tuple in no clause: an isolated input (derivation.json can hold one).
            t = names.setdefault(name, len(names))
            priors.set(t, check_probability(value, str(ip), ln, None, "input prior"), ln, name)
    alarms = []
    bq = d / BINGO_ALARMS
    if os.path.lexists(bq):
        for ln, s in _lines(bq, max_decompressed):
            t = tuple_ref(bq, ln, s)
            if ("alarm", t) not in where:
                where[("alarm", t)] = (str(bq), ln, None)
                alarms.append(t)
    truth = {}
    oq = d / BINGO_ORACLE
    if os.path.lexists(oq):
        truth = {a: False for a in alarms}
        for ln, s in _lines(oq, max_decompressed):
            t = tuple_ref(oq, ln, s)
            truth[t] = True
            where[("truth", t)] = (str(oq), ln, None)
    lp = d / BINGO_LABELS
    labels = Once(lp, "the label of")
    if os.path.lexists(lp):
        for ln, s in _lines(lp, max_decompressed):
            name, _, value = s.rpartition(" ")
            if not name.strip() or value.lower() not in ("true", "false"):
                raise InputError(str(lp), ln, f"expected 'TUPLE true|false', got {shown(s)}")
            t = tuple_ref(lp, ln, name.strip())
            labels.set(t, value.lower() == "true", ln, name.strip(), _truth)
            where.setdefault(("label", t), (str(lp), ln, None))
    dg = DerivationGraph(
        tuples=list(names), rules=rules, clause_rule=np.array(c_rule, np.int32),
        clause_head=np.array(c_head, np.int32), body_offsets=np.array(offsets, np.int64),
        body=np.array(body, np.int32), priors=priors.values, alarms=np.array(alarms, np.int32),
        labels=labels.values, truth=truth, source=str(d), clause_lines=np.array(lines, np.int32),
    )
    return dg, where


def _truth(value: bool) -> str:
    return "true" if value else "false"


def _bingo_problem(name: str, in_clause: bool) -> str | None:
    """Why Bingo's line-based files cannot carry tuple `name` (None when `read_bingo` reads it back)."""
    if name.startswith("\ufeff"):
        return "it starts with a byte order mark, which readers drop"
    if in_clause:
        if _CLAUSE_TUPLE.fullmatch(name) is None:
            return ("a tuple in a clause line is NAME or NAME(ARGS): no whitespace, ',', ':' or parentheses "
                    "in NAME, no parentheses or line breaks in ARGS")
    elif not name or name != name.strip() or "\n" in name or "\r" in name:
        return "an input's name is one line, with no whitespace at either end"
    return None


def check_bingo_names(dg: DerivationGraph, directory: str | os.PathLike) -> None:
    """Raises `InputError` (naming `directory` and the tuple or rule) if Bingo's files cannot carry a name.

    Clause lines are `RULE: NOT body1, ..., head`, one per line, so a name
    holding a line break, or a tuple name the clause syntax would split, would
    be read back as something else.
    """
    for r in dg.rules:
        if _RULE_NAME.fullmatch(r.name) is None or r.name.startswith("\ufeff"):
            raise InputError(str(directory), None, f"rule {r.name!r} cannot be written in Bingo's format: "
                             "a rule name has no whitespace or ':'; use derivation.json (.json) instead")
    in_clause = np.zeros(dg.num_tuples, bool)
    in_clause[np.asarray(dg.clause_head, np.int64)] = True
    in_clause[np.asarray(dg.body, np.int64)] = True
    written = set(np.flatnonzero(in_clause).tolist()) | set(dg.priors)
    for t in sorted(written):
        problem = _bingo_problem(dg.tuples[t], bool(in_clause[t]))
        if problem is not None:
            raise InputError(str(directory), None, f"tuple {dg.tuples[t]!r} cannot be written in Bingo's "
                             f"format: {problem}; use derivation.json (.json) instead")


def save_bingo(dg: DerivationGraph, directory: str | os.PathLike) -> list[str]:
    """Writes a Bingo directory (creating it); priors and labels go to fastlbp's extra files.

    The directory is written whole as a hidden sibling and swapped in
    (`fastlbp.core.outputs.write_directory`): a reader, an error, a full disk or a
    kill meets the old directory or the new one, never a mix. The entries of
    an existing directory other than the files written here (`BINGO_FILES`)
    are kept; a stale optional file (labels, priors, truth, rule texts the
    graph lacks) is not.

    Returns:
        Warnings: alarms, labels and truth naming a tuple that is in no clause
        cannot be written (Bingo knows only the tuples of its clauses), nor
        can locations and relations (`DerivationGraph.annotations`).

    Raises:
        InputError: a name Bingo's format cannot carry (`check_bingo_names`),
            or the directory cannot be written (`PATH: cannot write: REASON`);
            the old directory is left as it was then.
    """
    d = Path(directory)
    check_bingo_names(dg, d)
    names = dg.tuples
    rule_names = [r.name for r in dg.rules]
    offsets = np.asarray(dg.body_offsets).tolist()
    body = np.asarray(dg.body).tolist()
    out = []
    for c, (r, h) in enumerate(zip(np.asarray(dg.clause_rule).tolist(), np.asarray(dg.clause_head).tolist(),
                                   strict=True)):
        lits = [f"NOT {names[t]}" for t in body[offsets[c]:offsets[c + 1]]] + [names[h]]
        out.append(f"{rule_names[r]}: {', '.join(lits)}")
    in_clause = np.zeros(dg.num_tuples, bool)
    in_clause[np.asarray(dg.clause_head, np.int64)] = True
    in_clause[np.asarray(dg.body, np.int64)] = True
    alarm_list = [a for a in np.asarray(dg.alarms).tolist() if in_clause[a]]
    truth = {t: v for t, v in dg.truth.items() if in_clause[t]}
    labels = {t: v for t, v in dg.labels.items() if in_clause[t]}
    dropped = len(dg.alarms) + len(dg.truth) + len(dg.labels) - len(alarm_list) - len(truth) - len(labels)
    files = {
        BINGO_CLAUSES: "\n".join(out) + "\n",
        BINGO_RULE_PROBS: "".join(f"{r.name}: {r.probability!r}\n" for r in dg.rules),
        BINGO_ALARMS: "".join(f"{names[a]}\n" for a in alarm_list),
        BINGO_ORACLE: "".join(f"{names[t]}\n" for t, v in truth.items() if v) if truth else None,
        BINGO_INPUT_PROBS: "".join(f"{names[t]}: {p!r}\n" for t, p in sorted(dg.priors.items()))
        if dg.priors else None,
        BINGO_LABELS: "".join(f"{names[t]} {'true' if v else 'false'}\n" for t, v in labels.items())
        if labels else None,
    }

    def fill(tmp: Path) -> list[str]:
        for fname, text in files.items():
            if text is not None:
                write_file(tmp / fname, text)
        return write_rule_dict(dg.rules, tmp)  # rule texts, in Bingo's rule_dict.txt

    rule_warnings = write_directory(d, fill, marker=BINGO_INCOMPLETE,
                                    keep=lambda name: name not in BINGO_FILES)
    lost = [key for key in ("locations", "relations") if dg.annotations.get(key)]
    warnings = [f"Bingo's files cannot hold {' or '.join(lost)}, left out"] if lost else []
    warnings += rule_warnings
    if dropped:
        warnings.append(f"{dropped} alarms/labels name tuples that are in no clause; Bingo's files cannot "
                        "hold them, left out")
    unsaid = sum(not v and t not in set(alarm_list) for t, v in truth.items())
    if unsaid:  # oracle_queries.txt lists true alarms; reading it makes every alarm false but those
        warnings.append(f"{unsaid} ground-truth entries say false for a tuple that is not an alarm; "
                        f"{BINGO_ORACLE} lists only true ones, left out")
    return warnings


# Loading to a model --------------------------------------------------------

def _clause_where(dg: DerivationGraph, c: int) -> str:
    if dg.clause_lines is not None:
        return f"{dg.source}/{BINGO_CLAUSES}:{int(dg.clause_lines[c])}"
    return f"{dg.source}: at $.clauses[{c}]"


def clean(dg: DerivationGraph, merged: bool = False) -> tuple[DerivationGraph, dict, list[str]]:
    """Merges duplicate clauses (unless `merged`: the caller did); returns the graph, counts for the
    report, and warnings."""
    dd = Dedup(dg, 0, 0, -1, np.arange(dg.num_clauses)) if merged else merge_duplicates(dg)
    warnings = []
    if dd.duplicate_clauses:
        warnings.append(f"{dd.duplicate_clauses} duplicate clauses merged (first: "
                        f"{_clause_where(dg, dd.first_duplicate)})")
    if dd.duplicate_body_tuples:
        warnings.append(f"{dd.duplicate_body_tuples} repeated body tuples within a clause removed")
    report = {"duplicate_clauses_merged": dd.duplicate_clauses,
              "duplicate_body_tuples_removed": dd.duplicate_body_tuples}
    return dd.graph, report, warnings


def model_from_derivation(dg: DerivationGraph, where: Where | None = None, *,
                          compress: bool = True, cycles: str = "cycles", merged: bool = False) -> Model:
    """Duplicates merged (unless `merged`: `merge_duplicates` made `dg`), cycles eliminated,
    compressed, converted (see `datalog.bayesnet`).

    Raises:
        InputError: an alarm or label names a tuple that is neither an input
            nor derivable (located by `where`).
    """
    dg, report, warnings = clean(dg, merged)
    stages = least_fixpoint(dg, cycles)
    underivable = np.flatnonzero(~stages.derivable)
    if underivable.size:
        for group, t in sorted((where or {}).keys(), key=lambda k: k[1]):
            if not stages.derivable[t]:
                path, line, loc = where[(group, t)]
                raise InputError(path, line, f"{group} {dg.tuples[t]!r} is neither an input nor derivable "
                                 "from the inputs (every derivation of it depends on itself)", loc)
        shown = ", ".join(repr(dg.tuples[t]) for t in underivable[:3])
        warnings.append(f"{underivable.size} tuples are neither inputs nor derivable from the inputs "
                        f"(every derivation depends on the tuple itself), dropped with their clauses: "
                        f"{shown}{', ...' if underivable.size > 3 else ''}")
    model = to_model(dg, compress=compress, cycles=cycles, stages=stages, extra_report=report)
    model.meta["warnings"] = warnings
    model.meta.update(dg.annotations)  # "locations", "relations" (datalog.annotations), JSON-able
    return model


def load_json(path: str | os.PathLike, *, compress: bool = True, cycles: str = "cycles",
              max_decompressed: int | None = None) -> Model:
    """Loads derivation.json into a model (format "json"); see `model_from_derivation`."""
    return model_from_derivation(*read_json(path, max_decompressed=max_decompressed), compress=compress,
                                 cycles=cycles)


def load_bingo(path: str | os.PathLike, *, compress: bool = True, cycles: str = "cycles",
               max_decompressed: int | None = None) -> Model:
    """Loads a Bingo directory into a model (format "bingo"); see `model_from_derivation`."""
    return model_from_derivation(*read_bingo(path, max_decompressed=max_decompressed), compress=compress,
                                 cycles=cycles)

