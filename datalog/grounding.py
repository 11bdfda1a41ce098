"""Grounding a Datalog program with clingo: every rule instance of the least model as a clause.

    dg = datalog.grounding.ground_file("taint.dl", GroundOptions(facts="facts/")).graph
    notes = datalog.io.write_derivation(dg, "taint.json")    # or a Bingo directory
    model = datalog.grounding.load_program("taint.dl", options=GroundOptions(facts="facts/"))

What a clause is (Bingo's convention): rule k of the program (file order,
0-based) is `Rk`; each ground instance of it in the least model is a clause
`Rk: body => head`, its body the ground positive atoms (inputs and derived
tuples alike). Negations and comparisons are conditions the grounder checks,
not body members. Identical (rule, head, body set) instances are one clause.
Tuples are named `rel(v1,...,vn)` with values as in the facts files.

How (clingo, PyPI `clingo`, grounds; we only translate and read back):

* every fact (from `DIR/rel.facts` of an `.input` relation, or from the
  program text) becomes a clingo fact `iN(...)`, and the tuple itself an
  `#external pN(...) : iN(...)`: an external may be true or false, so the
  grounder keeps every rule instance over it instead of collapsing the least
  model to facts (with plain facts it keeps no rule at all);
* rule k gets one more body atom, the external `k(k)`: it says which rule a
  ground rule came from (clingo merges nothing across rules then) and keeps
  even a rule with an empty positive body from becoming a fact;
* a wildcard `_` in a positive atom becomes a fresh variable: clingo projects
  anonymous variables away (one auxiliary atom for all values), which would
  merge clauses whose bodies differ;
* a negated atom `!r(...)` reads `not mN(...)`, where `mN` is a copy of r
  computed from the `iN` facts alone (copies of r's rules and of everything
  r depends on); those are plain facts to clingo, so the negation is decided
  while grounding, against the actual least model, never left open;
* comparisons are clingo's own and are decided while grounding too.

The ground program comes back through clingo's ground-program observer
interface, by one of two readers (the same rules either way, tests check):
"aspif" (default) registers clingo's C++ aspif backend
(`Control.register_backend`, the observer interface implemented in C++,
writing a temporary file) and parses it with numpy; "observer" registers a
Python `clingo.Observer` (`rule(choice, head, body)`, `output_atom(symbol,
atom)`, `external(atom, value)`). Both pass `replace=True`, so clingo
builds no solver program. Measured on this 2-core CPU (transitive closure,
0.65M ground rules): grounding with the aspif backend 1.6 s plus 1.2 s to
parse; a Python observer's callbacks cost about 12 us per rule on top
(8 s), so it serves as the cross-check, not the default.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import tempfile
import time
from collections.abc import Callable

import numpy as np

from datalog import aspif, formats, ground_inputs, locations, souffle, souffle_values
from datalog.annotations import split_tuple
from datalog.aspif import Ground
from datalog.derivation import (
    DEFAULT_INPUT_PRIOR,
    DEFAULT_RULE_PROBABILITY,
    DerivationGraph,
    Rule,
    merge_duplicates,
)
from datalog.ground_inputs import read_facts  # noqa: F401  (part of this module's API)
from datalog.ground_process import (  # noqa: F401  (the limit and its error are part of this module's API)
    BYTES_PER_INSTANCE,
    SYMBOL_MEMORY_SHARE,
    FunctorLimits,
    GroundingLimit,
    GroundingTooLarge,
    _control,
    _ground_watched,
    _run,
    _too_large,
    default_max_rule_instances,
    rule_instance_limit,
)
from datalog.reading import shown
from datalog.translation import _quote, translate  # noqa: F401  (translate is part of this module's API)
from fastlbp.core.errors import InputError
from fastlbp.core.model import Model
from fastlbp.core.outputs import cannot_write
from fastlbp.core.resources import memory_limit

READERS = ("aspif", "observer")


@dataclasses.dataclass(frozen=True)
class GroundOptions:
    """How to ground a program (the options of `fastlbp ground` and of loading a `.dl` file).

    Attributes:
        facts: the directory of the `.input` relations' `REL.facts` files;
            None for the current directory (as Soufflé's -F).
        rule_prob: a file of lines `Rk: p` (Bingo's rule-prob.txt); rules
            not named get 0.999.
        alarms: the relations whose tuples are alarms; None for every
            `.output` relation.
        priors: a file of lines `TUPLE p` giving input tuples a prior
            (default 1.0).
        progress: called with a line of progress (reading, grounding,
            sizes); None for silence. The library never prints.
        reader: "aspif" (clingo's C++ backend, fast) or "observer" (a
            Python observer; the cross-check).
        max_rule_instances: grounding stops with `GroundingTooLarge` past
            this many rule instances; None: `default_max_rule_instances()`
            (from the memory the process may use: the machine's, ulimit -v, the cgroup's); 0: no limit.
        locations: a relation REL(point, file, line[, column]) of program
            points' source positions: every tuple is located at the points
            among its arguments (`datalog.locations`; derivation.json's
            "locations"). None: no locations.
    """

    facts: str | os.PathLike | None = None
    rule_prob: str | os.PathLike | None = None
    alarms: tuple[str, ...] | None = None
    priors: str | os.PathLike | None = None
    progress: Callable[[str], None] | None = None
    reader: str = "aspif"
    max_rule_instances: int | None = None
    locations: str | None = None


class NothingDerived(InputError):
    """The program derives nothing from its facts (no clause, no alarm): there is no graph to write."""


@dataclasses.dataclass
class Grounding:
    """What `ground` made: the derivation graph and what it took.

    Attributes:
        graph: the derivation graph (duplicates merged).
        facts: input tuples read (files and program text).
        ground_rules: rule instances clingo reported (before merging duplicates).
        seconds: wall times of reading the facts ("facts"), translating
            ("translate"), clingo's grounding ("clingo"), reading the ground
            program back ("read") and building the graph ("graph").
    """

    graph: DerivationGraph
    facts: int
    ground_rules: int
    seconds: dict[str, float]


# Reading the ground program back --------------------------------------------

def _ground_aspif(text: str, seconds: dict[str, float], limit: int = 0,
                  on_limit: Callable[[int], Exception] | None = None, where: str = "<program>",
                  limits: FunctorLimits | None = None) -> Ground:
    import clingo

    t0 = time.perf_counter()
    log: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="fastlbp-ground-") as tmp:
            out = os.path.join(tmp, "ground.aspif")
            if limit:
                # Grounding cannot be interrupted from Python: only a separate process can be stopped
                # when it outgrows the limit (a cross product of 10^4 facts needed about 90 GB).
                _ground_watched(text, out, limit, on_limit, where, limits)
            else:
                ctl = _control(log)
                ctl.register_backend(clingo.BackendType.Aspif, out, replace=True)
                _run(ctl, text, log, limits)
                del ctl  # flushes and closes the file
            full = _nearly_full(tmp)
            t1 = time.perf_counter()
            g = None if full else aspif.parse_file(out)
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise cannot_write(os.path.join(tempfile.gettempdir(), "fastlbp-ground-*"), err) from None
        full = True  # the program's text for the grounding process did not fit: the same as clingo's output
    if full:
        # clingo says nothing when a write fails: its output is cut short, and a cut at a line's end parses.
        raise InputError(tempfile.gettempdir(), None, "cannot write: No space left on device (clingo's "
                         "ground program, written here while grounding, may be cut short; free some space "
                         "or set TMPDIR to a folder with room)")
    seconds["clingo"] = t1 - t0
    seconds["read"] = time.perf_counter() - t1
    return g


def _nearly_full(folder: str) -> bool:
    """Whether the disk holding `folder` has under 64 KiB left for us (a write there may have failed)."""
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):  # no statvfs (Windows): not known
        return False
    blocks = st.f_bfree if hasattr(os, "geteuid") and os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize < 1 << 16


def _ground_observer(text: str, seconds: dict[str, float], limits: FunctorLimits | None = None) -> Ground:
    import clingo

    t0 = time.perf_counter()
    class Collect(clingo.Observer):
        def __init__(self):
            self.heads, self.bodies, self.names, self.externals = [], [], {}, []

        def rule(self, choice, head, body):
            if choice or len(head) != 1:
                raise RuntimeError(f"unexpected ground rule (choice {choice}, {len(head)} heads)")
            self.heads.append(head[0])
            self.bodies.append(body)

        def weight_rule(self, choice, head, lower_bound, body):
            raise RuntimeError("unexpected weight rule in the ground program")

        def output_atom(self, symbol, atom):
            if atom and symbol.type == clingo.SymbolType.Function and symbol.name[:1] in ("p", "k"):
                self.names[atom] = symbol

        def external(self, atom, value):
            self.externals.append(atom)

    log: list[str] = []
    obs = Collect()
    ctl = _control(log)
    ctl.register_observer(obs, replace=True)
    _run(ctl, text, log, limits)
    t1 = time.perf_counter()
    seconds["clingo"] = t1 - t0
    atoms, preds, args = [], [], []
    for atom, sym in obs.names.items():
        atoms.append(atom)
        preds.append(sym.name)
        args.append("(" + ",".join(str(a.number) if a.type == clingo.SymbolType.Number else _quote(a.string)
                                   for a in sym.arguments) + ")" if sym.arguments else "")
    offsets = np.zeros(len(obs.heads) + 1, np.int64)
    np.cumsum([len(b) for b in obs.bodies], out=offsets[1:])
    lits = np.fromiter((x for b in obs.bodies for x in b), np.int64, int(offsets[-1]))
    seconds["read"] = time.perf_counter() - t1
    return Ground(np.array(obs.heads, np.int32), offsets, lits.astype(np.int32), np.array(atoms, np.int64),
                  preds, args, np.array(obs.externals, np.int64))


_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"|(-?[0-9]+)')
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)


def _unquote(text: str) -> str:
    if "\\" not in text:
        return text
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def _tuple_names(program: souffle.Program, g: Ground, size: int) -> tuple[np.ndarray, np.ndarray,
                                                                          np.ndarray]:
    """By atom (arrays of `size`): its tuple name `rel(v1,...)` (object, None if none), its relation
    index and the rule it marks (-1 if none)."""
    rels = list(program.decls)
    name_of = np.full(size, None, object)
    rel_of = np.full(size, -1, np.int64)
    rule_of = np.full(size, -1, np.int64)
    if not g.preds:
        return name_of, rel_of, rule_of
    pred_arr = np.array(g.preds)
    for pred in np.unique(pred_arr).tolist():
        idx = np.flatnonzero(pred_arr == pred)
        atoms = g.atoms[idx]
        args = [g.args[i] for i in idx.tolist()]
        if pred == "k":
            rule_of[atoms] = [int(a[1:-1]) for a in args]
            continue
        i = int(pred[1:])
        rel = rels[i]
        rel_of[atoms] = i
        if program.decls[rel].arity == 0:
            names = [rel + "()"] * len(args)
        elif any(t in program.records or t in program.adts
                 or t in (souffle_values.UNSIGNED, souffle_values.FLOAT) for t in program.decls[rel].types):
            types = program.decls[rel].types
            names = [rel + "(" + ",".join(_typed_shown(v, ty, program.records, program.adts)
                                          for v, ty in zip(_clingo_value(a), types, strict=True)) + ")"
                     for a in args]
        elif all(t == souffle.NUMBER for t in program.decls[rel].types):
            names = [rel + a for a in args]  # clingo writes numbers as the facts files do
        else:
            # Without a backslash no string holds a quote, so dropping the quotes gives the name (a
            # regex pass per tuple took 14 s of hmmer's 1.1M tuples).
            names = [rel + a.replace('"', "") if "\\" not in a else
                     f"{rel}({','.join(_unquote(q) if n == '' else n for q, n in _ARG.findall(a[1:-1]))})"
                     for a in args]
        name_of[atoms] = names
    return name_of, rel_of, rule_of


_CLINGO_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|-?[0-9]+|[(),]|[a-z_][A-Za-z0-9_]*')


def _clingo_value(text: str):
    """A value as clingo writes it (numbers, strings, tuples, `nil`): int, str, tuple or None (nil)."""
    tokens = _CLINGO_TOKEN.findall(text)
    pos = 0

    def value():
        nonlocal pos
        t = tokens[pos]
        pos += 1
        if t == "(":
            items = []
            while tokens[pos] != ")":
                items.append(value())
                if tokens[pos] == ",":
                    pos += 1
            pos += 1
            return tuple(items)
        if t.startswith('"'):
            return _unquote(t[1:-1])
        if t == "nil":
            return None
        return int(t)

    return value()


def _typed_shown(v, ty: str, records: dict, adts: dict | None = None) -> str:
    """A value of type `ty` as Soufflé writes it in a .csv: unsigned and float decoded, records `[1, a]`
    (their fields by their types), nil `nil`, ADT values `$Branch(a, b)` (`$Branch` without fields)."""
    adts = adts or {}
    if ty in (souffle_values.UNSIGNED, souffle_values.FLOAT):
        return souffle_values.shown(souffle_values.decode(v, ty), ty)
    if ty in records and isinstance(v, tuple):
        return "[" + ", ".join(_typed_shown(x, fty, records, adts)
                               for x, (_, fty) in zip(v, records[ty], strict=True)) + "]"
    if ty in adts and isinstance(v, tuple):
        branch, fields = v[0], v[1:]
        types = adts[ty][branch]
        inner = ", ".join(_typed_shown(x, fty, records, adts)
                          for x, (_, fty) in zip(fields, types, strict=True))
        return f"${branch}" + (f"({inner})" if fields else "")
    return _shown_value(v)


def _shown_value(v) -> str:
    """A value as Soufflé writes it in a .csv: records `[1, a]`, nil `nil`."""
    if v is None:
        return "nil"
    if isinstance(v, tuple):
        return "[" + ", ".join(map(_shown_value, v)) + "]"
    return str(v)


# The derivation graph -------------------------------------------------------

def _graph(program: souffle.Program, g: Ground, options: GroundOptions) -> tuple[DerivationGraph, int]:
    """The derivation graph of a ground program, and how many rule instances it came from."""
    path = program.path
    max_atom = max(int(g.atoms.max(initial=0)), int(g.heads.max(initial=0)),
                   int(np.abs(g.lits).max(initial=0)), int(g.externals.max(initial=0)))
    name_of, rel_of, rule_of = _tuple_names(program, g, max_atom + 1)
    if g.lits.size and g.lits.min() <= 0:
        raise RuntimeError("a negation was left open by grounding (a negative body literal)")
    owner = np.repeat(np.arange(g.heads.size, dtype=np.int32 if g.heads.size < 2**31 else np.int64),
                      np.diff(g.offsets))
    is_marker = rule_of[g.lits] >= 0
    n_markers = np.bincount(owner[is_marker], minlength=g.heads.size)
    lens = np.diff(g.offsets)
    clause = n_markers == 1
    if np.any((n_markers != 1) & (lens > 0)):
        raise RuntimeError("a ground rule without exactly one rule marker")
    c_rule = np.zeros(g.heads.size, np.int64)
    c_rule[owner[is_marker]] = rule_of[g.lits[is_marker]]
    keep_lit = ~is_marker & clause[owner]
    body_atoms = g.lits[keep_lit]
    body_owner = owner[keep_lit]
    heads = g.heads[clause]
    c_rule = c_rule[clause]
    new_index = np.cumsum(clause) - 1
    body_owner = new_index[body_owner]
    offsets = np.zeros(heads.size + 1, np.int64)
    np.cumsum(np.bincount(body_owner, minlength=heads.size), out=offsets[1:])

    externals = g.externals[np.not_equal(name_of[g.externals], None)]
    rels = list(program.decls)
    alarm_rels = options.alarms if options.alarms is not None else tuple(program.outputs)
    for rel in alarm_rels:
        if rel not in program.decls:
            raise InputError(str(path), None, f"alarm relation {rel!r} is not declared in the program "
                             f"(relations: {', '.join(rels)})")
    alarm_atoms = np.flatnonzero(np.isin(rel_of, [rels.index(r) for r in alarm_rels]))
    priors_given = {}
    if options.priors:
        inputs = dict(zip(name_of[externals].tolist(), externals.tolist(), strict=True))
        priors_given = ground_inputs.priors(options.priors, inputs)

    used = np.zeros(max_atom + 1, bool)
    used[heads] = True
    used[body_atoms] = True
    used[alarm_atoms] = True
    derived = np.zeros(max_atom + 1, bool)
    derived[heads] = True
    atoms = np.flatnonzero(used)
    names = name_of[atoms].tolist()
    if None in names:
        raise RuntimeError("clingo introduced auxiliary atoms in the clauses (atom "
                           f"{atoms[names.index(None)]})")
    tuple_of = np.full(max_atom + 1, -1, np.int64)
    tuple_of[atoms] = np.arange(atoms.size)
    if len(set(names)) != len(names):
        seen: dict[str, int] = {}
        where = {a: i for i, a in enumerate(g.atoms.tolist())}
        for a, n in zip(atoms.tolist(), names, strict=True):
            if n in seen:
                first, second = (rels[rel_of[x]] + g.args[where[x]] for x in (seen[n], a))
                raise InputError(str(path), None, f"two different tuples, {first} and {second}, are both "
                                 f"named {shown(n)}: a symbol value holds ','; tuple names must tell tuples "
                                 "apart")
            seen[n] = a
    # An input tuple that clauses also derive needs its prior written down (else it counts as derived only).
    priors = {int(tuple_of[a]): p for a, p in priors_given.items() if used[a]}
    for a in externals[derived[externals]].tolist():
        priors.setdefault(int(tuple_of[a]), DEFAULT_INPUT_PRIOR)
    probs = ground_inputs.rule_probabilities(options.rule_prob, program) if options.rule_prob else {}
    rules = [Rule(r.name, probs.get(r.index, 1.0 if r.auxiliary else DEFAULT_RULE_PROBABILITY), r.text)
             for r in program.rules]
    return DerivationGraph(
        tuples=names, rules=rules, clause_rule=c_rule.astype(np.int32),
        clause_head=tuple_of[heads].astype(np.int32), body_offsets=offsets,
        body=tuple_of[body_atoms].astype(np.int32), priors=priors,
        alarms=tuple_of[alarm_atoms].astype(np.int32), source=path), int(clause.sum())


def ground(program: souffle.Program, options: GroundOptions | None = None) -> Grounding:
    """Grounds a parsed program over its facts; see the module docstring.

    Raises:
        InputError: facts, rule probabilities or priors malformed (file and
            line), an alarm relation not declared, or nothing derived.
    """
    options = options or GroundOptions()
    if options.reader not in READERS:
        raise ValueError(f"reader {options.reader!r}: choose one of {', '.join(READERS)}")
    say = options.progress or (lambda msg: None)
    seconds = {}
    t0 = time.perf_counter()
    if options.locations is not None:
        locations.check_relation(program, options.locations)
    facts = ground_inputs.read_facts(program, options.facts)
    located_points = facts.get(options.locations, []) if options.locations is not None else []
    n_facts = sum(map(len, facts.values()))
    t1 = time.perf_counter()
    seconds["facts"] = t1 - t0
    say(f"read {n_facts:,} input tuples of {len(facts)} relations in {seconds['facts']:.2f} s")
    text = translate(program, facts)
    sizes = {rel: len(ts) for rel, ts in facts.items()}
    del facts
    t2 = time.perf_counter()
    seconds["translate"] = t2 - t1
    memory = None
    if options.max_rule_instances is None:
        limit, memory = rule_instance_limit()
        basis = f"--max-rule-instances, by default from {memory}" if memory else "--max-rule-instances"
    else:
        limit, basis = int(options.max_rule_instances), "--max-rule-instances"
        memory = memory_limit()
    limits = FunctorLimits(values=limit, basis=basis,
                           chars=memory.bytes // SYMBOL_MEMORY_SHARE if memory is not None else 0,
                           chars_basis=f"1/{SYMBOL_MEMORY_SHARE} of {memory}" if memory is not None else "",
                           memory=str(memory or ""))
    where = str(program.path or "<program>")
    try:
        if options.reader == "aspif":
            g = _ground_aspif(text, seconds, limit,
                              lambda count: _too_large(program, count, limit, sizes, memory=memory), where,
                              limits)
        else:
            g = _ground_observer(text, seconds, limits)
    except GroundingLimit as err:  # clingo ran in this process (no limit, or the observer)
        note = f" (this process may use {memory})" if memory is not None and "memory" in str(err) else ""
        raise InputError(where, None, f"{err}{note}") from None
    except MemoryError:  # reading clingo's ground program back, under a limit of the process's
        raise InputError(where, None, f"ran out of memory reading the ground program back (this process may "
                         f"use {memory or 'an unknown amount'}); lower --max-rule-instances or give the "
                         "process more memory") from None
    del text
    t3 = time.perf_counter()
    try:
        dg, n_rules = _graph(program, g, options)
    except MemoryError:  # a limit of the process's (ulimit -v, a cgroup) below the grounding's
        raise InputError(where, None, f"ran out of memory building the derivation graph of {len(g.heads):,} "
                         f"rule instances (this process may use {memory or 'an unknown amount'}); lower "
                         "--max-rule-instances or give the process more memory") from None
    del g
    say(f"grounded {program.path or 'the program'} with clingo: {n_rules:,} rule instances in "
        f"{seconds['clingo']:.2f} s, read back in {seconds['read']:.2f} s")
    dg = merge_duplicates(dg).graph
    seconds["graph"] = time.perf_counter() - t3
    if dg.num_clauses == 0 and len(dg.alarms) == 0:
        raise NothingDerived(str(program.path), None, "the program derives nothing from these facts: no rule "
                         "instance holds, so there is no derivation graph (check --facts and the .input "
                         "relations)")
    say(f"derivation graph: {dg.num_tuples:,} tuples, {dg.num_clauses:,} clauses, {len(dg.alarms):,} alarms "
        f"({seconds['graph']:.2f} s)")
    if options.locations is not None:
        located = _locate(program, dg, options.locations, located_points)
        dg.annotations = {**dg.annotations, "locations": located}
        say(f"located {len(dg.annotations['locations']):,} tuples by {options.locations}")
    return Grounding(dg, n_facts, n_rules, seconds)


def _locate(program: souffle.Program, dg: DerivationGraph, rel: str, rows: list[tuple]) -> dict:
    """derivation.json's "locations" of `dg` from REL's facts `rows` and its derived tuples."""
    derived = [parts[1] for name in dg.tuples if (parts := split_tuple(name)) is not None and parts[0] == rel]
    points = locations.point_locations(rel, [*rows, *derived], str(program.path or "<program>"))
    return locations.locate_tuples(dg.tuples, points, rel)


def ground_file(path: str | os.PathLike, options: GroundOptions | None = None) -> Grounding:
    """`ground` of the program in file `path` (`datalog.souffle.parse_file`)."""
    return ground(souffle.parse_file(path), options)


def load_program(path: str | os.PathLike, *, cycles: str = "cycles", compress: bool = True,
                 max_decompressed: int | None = None, options: GroundOptions | None = None) -> Model:
    """A `.dl` program grounded (`ground_file`) and turned into a model (format "datalog" of `datalog.io`).

    `max_decompressed` does not apply (the program and facts are read whole).
    """
    del max_decompressed
    dg = ground_file(path, options).graph
    return formats.model_from_derivation(dg, {}, compress=compress, cycles=cycles, merged=True)


__all__ = ["GroundOptions", "Grounding", "READERS", "ground", "ground_file", "read_facts", "translate",
           "load_program"]
