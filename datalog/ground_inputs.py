"""The files a grounding reads besides the program: facts, rule probabilities, input priors.

    facts = datalog.ground_inputs.read_facts(program, "facts/")     # {relation: [tuple]}
    probs = datalog.ground_inputs.rule_probabilities("rule_prob.txt", program)   # {rule index: p}

Each names the file and the line of a problem (`fastlbp.core.errors.InputError`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from datalog import souffle
from datalog.reading import Once, check_probability, rule_prob_lines, shown
from datalog.souffle_values import encode, f32
from fastlbp.core.errors import InputError, check_path, read_text, text_lines

_NUMBER = re.compile(r"[+-]?(?:" + souffle.NUMBER_PATTERN + ")")


def _number(text: str, path: str, line: int, attr: str) -> int:
    s = text.strip()
    if not _NUMBER.fullmatch(s):
        raise InputError(path, line, f"attribute {attr!r} is a number, got {shown(text)}")
    value = souffle.number_value(s)
    if not souffle.INT_MIN <= value <= souffle.INT_MAX:
        raise InputError(path, line, f"number {souffle.number_shown(s)} of attribute {attr!r} is out of "
                         f"range (32-bit signed: {souffle.INT_MIN}..{souffle.INT_MAX})")
    return value


def _unsigned(text: str, path: str, line: int, attr: str) -> int:
    s = text.strip()
    if not _NUMBER.fullmatch(s) or s.startswith("-"):
        raise InputError(path, line, f"attribute {attr!r} is an unsigned, got {shown(text)}")
    value = souffle.number_value(s)
    if value > souffle.UINT_MAX:
        raise InputError(path, line, f"unsigned {souffle.number_shown(s)} of attribute {attr!r} is out of "
                         f"range (0..{souffle.UINT_MAX})")
    return value


def _float(text: str, path: str, line: int, attr: str) -> float:
    try:
        return f32(float(text.strip()))
    except ValueError:
        raise InputError(path, line, f"attribute {attr!r} is a float, got {shown(text)}") from None


_ADT_TOKEN = re.compile(r"\s*(\$[A-Za-z_][A-Za-z0-9_]*|[(),]|[^\s(),]+)")


def _adt_value(text: str, ty: str, program, path: str, line: int):
    """An ADT value of a facts file (`$Mon`, `$Succ($Zero)`, `$Int(3)`) as the translation's tuple
    (branch, fields...); fields of numbers, unsigned, floats and ADTs."""
    tokens = _ADT_TOKEN.findall(text)
    pos = 0

    def value(t: str):
        nonlocal pos
        tok = tokens[pos] if pos < len(tokens) else ""
        pos += 1
        if t in program.adts:
            if not tok.startswith("$") or tok[1:] not in program.adts[t]:
                raise InputError(path, line, f"{shown(text)}: expected a value of type {t!r} ($Branch, "
                                 f"branches: {', '.join(program.adts[t])})")
            fields = program.adts[t][tok[1:]]
            out = [tok[1:]]
            if pos < len(tokens) and tokens[pos] == "(":
                pos += 1
                for k, (_, fty) in enumerate(fields):
                    if k:
                        if pos >= len(tokens) or tokens[pos] != ",":
                            raise InputError(path, line, f"{shown(text)}: expected ',' between fields")
                        pos += 1
                    out.append(value(fty))
                if pos >= len(tokens) or tokens[pos] != ")":
                    raise InputError(path, line, f"{shown(text)}: expected ')' after the fields of {tok}")
                pos += 1
            elif fields:
                raise InputError(path, line, f"{shown(text)}: {tok} has {len(fields)} field(s)")
            return tuple(out)
        if t == souffle.NUMBER:
            return _number(tok, path, line, "a field")
        if t == souffle.UNSIGNED:  # fields as the clingo numbers that stand for them
            return encode(_unsigned(tok, path, line, "a field"), t)
        if t == souffle.FLOAT:
            return encode(_float(tok, path, line, "a field"), t)
        raise InputError(path, line, f"{shown(text)}: an ADT field of type {t!r} in a facts file is not "
                         "supported (numbers, unsigned, floats and ADTs are)")

    v = value(ty)
    if pos != len(tokens):
        raise InputError(path, line, f"{shown(text)}: unexpected text after the value")
    return v


def _adt_facts(program, rel: str, decl, lines: list[str], sep: str, path: str, seen: dict) -> None:
    for ln, line in enumerate(lines, 1):
        if not line:
            continue
        fields = line.split(sep)
        if len(fields) != decl.arity:
            raise InputError(path, ln, f"expected {decl.arity} fields, got {len(fields)}: {shown(line)}")
        row = []
        for f, (a, ty) in zip(fields, decl.attrs, strict=True):
            if ty in program.adts:
                row.append(_adt_value(f, ty, program, path, ln))
            elif ty in souffle.NUMERIC:
                row.append({souffle.NUMBER: _number, souffle.UNSIGNED: _unsigned, souffle.FLOAT: _float}[ty](
                    f, path, ln, a))
            else:
                row.append(f)
        seen[tuple(row)] = None


def read_facts(program: souffle.Program, directory: str | os.PathLike | None) -> dict[str, list[tuple]]:
    """The input tuples of every relation: `.input` relations' `DIR/REL.facts` plus the program's facts.

    A facts file holds one tuple per line, fields separated by tabs (as
    Soufflé writes them); symbol fields are taken as they are, number fields
    are integers (decimal, 0x.., 0b..; 32-bit signed). Empty lines are
    skipped; a nullary relation holds when its file has any line.

    Returns:
        {relation: [tuple of values (int or str)]}, each tuple once, in
        order of first appearance; relations without facts are absent.

    Raises:
        InputError: a missing directory or file, or a malformed line (file and line).
    """
    d = Path(directory) if directory is not None else Path(".")
    out: dict[str, dict[tuple, None]] = {}
    if program.inputs:
        check_path(d)
        if not d.is_dir():
            raise InputError(str(d), None, "is not a directory (--facts names the directory of the "
                             "REL.facts files)")
    for rel, pos in program.inputs.items():
        decl = program.decls[rel]
        if any(t in program.records for t in decl.types):
            raise InputError(str(program.path), pos.line, f"input relation {rel!r} has a record attribute: "
                             "records in facts files are not supported")
        params = program.input_params.get(rel, {})  # .input R(filename="...", delimiter=",")
        path = d / params.get("filename", f"{rel}.facts")
        sep = params.get("delimiter", "\t")
        if not os.path.lexists(path):
            raise InputError(str(path), None, f"no such file: the facts of input relation {rel!r} (.input at "
                             f"{program.path}:{pos.line}); an empty file means no facts")
        spath = str(path)
        lines = text_lines(read_text(path))
        seen = out.setdefault(rel, {})
        if decl.arity == 0:
            if lines:
                if any(line for line in lines):
                    ln = next(i for i, line in enumerate(lines, 1) if line)
                    raise InputError(spath, ln, f"relation {rel!r} has no attributes, so its lines must be "
                                     "empty")
                seen[()] = None
            continue
        if any(t in program.adts for t in decl.types):
            _adt_facts(program, rel, decl, lines, sep, spath, seen)
            continue
        conv = [(name, ty if ty in souffle.NUMERIC else None) for name, ty in decl.attrs]
        arity = decl.arity
        all_symbols = not any(n for _, n in conv)
        for ln, line in enumerate(lines, 1):
            if not line:
                continue
            if len(line) > souffle.MAX_SYMBOL or "\0" in line:  # one C-speed test a line
                for f in line.split(sep):
                    why = souffle.symbol_problem(f)
                    if why is not None:
                        raise InputError(spath, ln, why)
            fields = line.split(sep)
            if len(fields) != arity:
                how = f"{'tab' if sep == chr(9) else repr(sep)}-separated field{'s' if arity > 1 else ''}"
                raise InputError(spath, ln, f"expected {arity} {how} "
                                 f"({', '.join(a for a, _ in conv)}), got {len(fields)}: {shown(line)}")
            if all_symbols:
                seen[tuple(fields)] = None
            else:
                seen[tuple(f if ty is None else _number(f, spath, ln, a) if ty == souffle.NUMBER else
                           _unsigned(f, spath, ln, a) if ty == souffle.UNSIGNED else _float(f, spath, ln, a)
                           for f, (a, ty) in zip(fields, conv, strict=True))] = None
    for fact in program.facts:
        out.setdefault(fact.atom.relation, {})[fact.values] = None
    return {rel: list(ts) for rel, ts in out.items() if ts}



# Rule probabilities and priors -----------------------------------------------

def rule_index(by_name: dict[str, int], name: str) -> int | None:
    """The index of the rule `name` names (`by_name`: {stable name: index}): its stable name
    (`datalog.souffle_rules`, `leak-3fa2c1`), or `Rk`, the k-th rule in file order from 0 (the older
    numbering, kept for files written before it); None for no rule."""
    k = by_name.get(name)
    if k is not None:
        return k
    m = re.fullmatch(r"R(\d+)", name)
    if m is not None and int(m.group(1)) < len(by_name):
        return int(m.group(1))
    return None


def rule_probabilities(path, program: souffle.Program) -> dict[int, float]:
    """{rule index: p} of a rule-probability file (`datalog.reading.rule_prob_lines`), every name a rule
    of `program`: its stable name, or `Rk` by file order (`rule_index`). A rule named both ways (or as
    `R1` and `R01`) must be given one value.

    Raises:
        InputError: what `rule_prob_lines` raises; a name that is no rule of the program, or one rule
            given two values under two names (file and line, both names).
    """
    n = len(program.rules)
    once = Once(path, "the probability of rule")
    names: dict[int, str] = {}
    by_name = {r.name: r.index for r in program.rules}
    for ln, name, prob in rule_prob_lines(path):
        k = rule_index(by_name, name)
        if k is None:
            have = f"R0..R{n - 1} by file order" if n else "none"
            raise InputError(str(path), ln, f"no rule {shown(name)} in {program.path} (`fastlbp rules "
                             f"{program.path}` lists its rules' names; {have})")
        first = names.setdefault(k, name)
        shown_name = name if first == name else f"{name} (= {first})"
        once.set(k, prob, ln, shown_name)
    return once.values


def priors(path, input_names: dict[str, int]) -> dict[int, float]:
    """{atom: prior} from lines `TUPLE p`; each must name an input tuple."""
    p = Path(path)
    once = Once(p, "the prior of")
    for ln, line in enumerate(text_lines(read_text(p)), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        name, _, value = s.rpartition(" ")
        if not name.strip():
            name, _, value = s.rpartition("\t")
        name = name.strip()
        if not name:
            raise InputError(str(p), ln, f"malformed line, expected 'TUPLE probability', got {shown(s)}")
        atom = input_names.get(name)
        if atom is None:
            raise InputError(str(p), ln, f"{shown(name)} is not an input tuple (a fact of the program or "
                             "of a facts file)")
        once.set(atom, check_probability(value, str(p), ln, None, f"prior of {name}"), ln, name)
    return once.values
