"""Families of derivation graphs to learn rule probabilities on, with known true probabilities.

    family = make_family("taint", size="small", graphs=5, held_out=1, seed=0)
    family.train          # models stating `family.stated` (0.999) for every rule, with ground truth
    family.true_p         # {rule name: the probability the truth was drawn with}
    family.held_out[0].model, family.held_out[0].truth   # a graph to rank, its true alarms

A family is one analysis over many random programs: a Datalog program grounded (`datalog.grounding`,
clingo) over random input facts, one set of facts per graph and seed. The analyses were written
independently of the learner (`fastlbp.inference.learn`), so that it can be judged on graphs it
was not tuned on:

    taint      the shipped taint analysis (`data/taint/taint.dl`'s rules) over random web
               applications: groups of 16 servlet handlers sharing a session, a DAO and a cache
    pointsto   a field-sensitive points-to analysis with calls and null dereferences, written for
               these families; its rules `passes` and `pointsTo-...` through parameters always fire
               together (a `passes` tuple is used by that rule alone)
    andersen   Soufflé's test-suite program `example/andersen` (UPL 1.0, Oracle), pointers to
               pointers through loads and stores, over clusters of variables
    synthetic  `datalog.synthetic.generate`'s layered graphs (the generator the learner was first
               developed against), 16 rules

The truth of a graph is one draw of the Bayesian network the model is (`to_model`'s, after cycle
elimination) with the *true* rule probabilities (`sample_world`); its files state `stated` for every
rule instead (0.999: a rule-prob.txt nobody fitted), as issue 43's family did. Each family says
which rules are wrong and in which shape of dependence they feed the alarms (`Family.shapes`):
"direct" (a clause of the rule derives alarms), "chain" (only through other rules' clauses),
"together" (always fires with another rule), "negated" (used only under a negation: no clause of
it reaches an alarm, so labels cannot inform it).

Sizes: "small" (exact inference fits: tens to a few hundred variables per graph), "medium" (a few
thousand variables) and "avrora" (about 20,000 variables per graph, the size of the paper's
avrora), or an int scale (handler groups, modules, clusters, or synthetic BN vertices / 100).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from datalog import grounding, souffle
from datalog.bayesnet import to_model
from datalog.cycles import least_fixpoint
from datalog.derivation import DerivationGraph, Rule
from datalog.synthetic import generate, sample_world
from fastlbp.core.model import Model

FAMILIES = ("taint", "pointsto", "andersen", "synthetic")
SIZES = ("small", "medium", "avrora")
STATED = 0.999  # what every family's files state for every rule
#: The range the wrong rules' true probabilities are drawn from (issue 43's family: 0.5-0.7).
WRONG_RANGE = (0.5, 0.7)

# The rules of data/taint/taint.dl (tests/test_families.py checks that they are the same text, so the
# names, a hash of the text, are those of data/taint/rule_prob.txt).
TAINT = """
.decl new(v: symbol, h: symbol)
.decl assign(to: symbol, from: symbol)
.decl load(to: symbol, base: symbol, f: symbol)
.decl store(base: symbol, f: symbol, from: symbol)
.decl call(c: symbol, m: symbol)
.decl arg(c: symbol, i: number, v: symbol)
.decl ret(c: symbol, v: symbol)
.decl source(m: symbol)
.decl sink(m: symbol, i: number)
.decl sanitizer(m: symbol, i: number)
.input new, assign, load, store, call, arg, ret, source, sink, sanitizer
.decl pointsTo(v: symbol, h: symbol)
.decl heapPointsTo(h: symbol, f: symbol, g: symbol)
.decl tainted(v: symbol)
.decl taintedField(h: symbol, f: symbol)
.decl cleans(m: symbol)
.decl leak(c: symbol, v: symbol)
.output leak
pointsTo(v, h) :- new(v, h).
pointsTo(to, h) :- assign(to, from), pointsTo(from, h).
heapPointsTo(h, f, g) :- store(b, f, v), pointsTo(b, h), pointsTo(v, g).
pointsTo(to, g) :- load(to, b, f), pointsTo(b, h), heapPointsTo(h, f, g).
tainted(v) :- ret(c, v), call(c, m), source(m).
tainted(to) :- assign(to, from), tainted(from).
taintedField(h, f) :- store(b, f, v), tainted(v), pointsTo(b, h).
tainted(to) :- load(to, b, f), pointsTo(b, h), taintedField(h, f).
cleans(m) :- sanitizer(m, _).
tainted(to) :- ret(c, to), call(c, m), arg(c, _, v), tainted(v), !cleans(m), !source(m).
tainted(to) :- ret(c, to), call(c, m), arg(c, i, v), tainted(v), sanitizer(m, k), i != k.
leak(c, v) :- call(c, m), sink(m, i), arg(c, i, v), tainted(v).
"""

# Points-to with calls; alarms: a variable that may point to a null allocation site is dereferenced.
POINTSTO = """
.decl new(v: symbol, h: symbol)
.decl assign(to: symbol, from: symbol)
.decl load(to: symbol, base: symbol, f: symbol)
.decl store(base: symbol, f: symbol, from: symbol)
.decl call(c: symbol, m: symbol)
.decl actual(c: symbol, i: number, v: symbol)
.decl formal(m: symbol, i: number, p: symbol)
.decl deref(v: symbol)
.decl nullSite(h: symbol)
.input new, assign, load, store, call, actual, formal, deref, nullSite
.decl pointsTo(v: symbol, h: symbol)
.decl heapPointsTo(h: symbol, f: symbol, g: symbol)
.decl passes(c: symbol, i: number, p: symbol)
.decl nullDeref(v: symbol)
.output nullDeref
pointsTo(v, h) :- new(v, h).
pointsTo(to, h) :- assign(to, from), pointsTo(from, h).
heapPointsTo(h, f, g) :- store(b, f, v), pointsTo(b, h), pointsTo(v, g).
pointsTo(to, g) :- load(to, b, f), pointsTo(b, h), heapPointsTo(h, f, g).
passes(c, i, p) :- call(c, m), formal(m, i, p).
pointsTo(p, h) :- passes(c, i, p), actual(c, i, v), pointsTo(v, h).
nullDeref(v) :- deref(v), pointsTo(v, h), nullSite(h).
"""

# Soufflé's tests/example/andersen/andersen.dl (commit a1303be; Copyright (c) 2016, Oracle and/or its
# affiliates; Universal Permissive License v 1.0, https://opensource.org/licenses/UPL), its rules as
# written; comments shortened.
ANDERSEN = """
.type var <: symbol
.decl AddressOf(y:var, x:var)
.input AddressOf()
.decl Assign(y:var, x:var)
.input Assign()
.decl Load(y:var, x:var)
.input Load()
.decl Store(y:var, x:var)
.input Store()
.decl PointsTo(y:var, x:var)
.output PointsTo()
PointsTo(y, x) :-
 AddressOf(y, x).
PointsTo(y, x) :-
 Assign(y, z),
 PointsTo(z, x).
PointsTo(y, w) :-
 Load(y, x),
 PointsTo(x, z),
 PointsTo(z, w).
PointsTo(z, w) :-
 Store(y, x),
 PointsTo(y, z),
 PointsTo(x, w).
"""


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a family is.

    Attributes:
        program: the Datalog text (None: `datalog.synthetic`).
        alarm: the alarm relation.
        wrong: {rule index (file order): shape} of the rules whose true probability is drawn from
            `WRONG_RANGE`; every other rule is true at `STATED`.
        right_shapes: {rule index: shape} of the rules stated right, for the report.
        scales: the int scale of each named size.
    """

    program: str | None
    alarm: str
    wrong: dict[int, str]
    right_shapes: dict[int, str]
    scales: dict[str, int]


SPECS: dict[str, Spec] = {
    # R0-R3 points-to, R4-R10 taint, R11 leaks. Wrong: assignments' points-to and taint (chains),
    # loads through the heap (deep chains), library calls (R9) and leaks (R11, direct).
    "taint": Spec(TAINT, "leak", {1: "chain", 3: "chain", 5: "chain", 7: "chain", 9: "chain", 11: "direct"},
                  {0: "chain", 2: "chain", 4: "chain", 6: "chain", 8: "negated", 10: "chain"},
                  {"small": 1, "medium": 12, "avrora": 150}),
    # R4 (passes) only ever feeds R5: the two fire together. R6 derives the alarms.
    "pointsto": Spec(POINTSTO, "nullDeref", {1: "chain", 4: "together", 5: "together", 6: "direct"},
                     {0: "chain", 2: "chain", 3: "chain"}, {"small": 2, "medium": 20, "avrora": 400}),
    "andersen": Spec(ANDERSEN, "PointsTo", {1: "direct", 2: "direct", 3: "direct"}, {0: "direct"},
                     {"small": 3, "medium": 100, "avrora": 1300}),
    # 16 rules; every other one wrong (bench_learn.py's family).
    "synthetic": Spec(None, "race", {r: "mixed" for r in range(0, 16, 2)},
                      {r: "mixed" for r in range(1, 16, 2)}, {"small": 1, "medium": 30, "avrora": 270}),
}


@dataclasses.dataclass
class Graph:
    """One graph of a family.

    Attributes:
        model: the model (stated probabilities; `meta["truth"]` the ground truth of the labelled
            tuples, what `fastlbp.inference.learn.training_labels` learns from).
        truth: the true alarms (variables of `model`).
        world: (T,) bool every tuple's truth in the derivation graph (`model.meta["derivation"]`).
        seed: the seed of its facts and its truth.
    """

    model: Model
    truth: set[int]
    world: np.ndarray
    seed: int


@dataclasses.dataclass
class Family:
    """Graphs of one analysis, stated and true probabilities.

    Attributes:
        name: a key of `SPECS`.
        rules: rule names in the program's order.
        true_p: {rule name: true probability}.
        stated: {rule name: the probability the files state}.
        shapes: {rule name: "direct" | "chain" | "together" | "negated" | "mixed"}.
        wrong: rule names whose stated probability is wrong.
        train: graphs to learn from.
        held_out: graphs to rank with the learned probabilities.
    """

    name: str
    rules: list[str]
    true_p: dict[str, float]
    stated: dict[str, float]
    shapes: dict[str, str]
    wrong: list[str]
    train: list[Graph]
    held_out: list[Graph]


def scale_of(name: str, size: str | int) -> int:
    """The int scale of a named size (or `size` itself)."""
    if isinstance(size, str):
        if size not in SIZES:
            raise ValueError(f"size must be one of {', '.join(SIZES)} or an int, got {size!r}")
        return SPECS[name].scales[size]
    if int(size) < 1:
        raise ValueError(f"a family's scale must be at least 1, got {size}")
    return int(size)


# Random facts ------------------------------------------------------------------------------------

_SOURCES = ["HttpServletRequest.getParameter", "HttpServletRequest.getHeader", "Cookie.getValue"]
_SINKS = ["Statement.executeQuery", "Runtime.exec", "PrintWriter.print", "Files.write", "Logger.info"]
_SANITIZERS = ["Encoder.escapeHtml", "Sql.quote", "Paths.normalize"]
_LIBRARY = {"String.concat": 2, "String.trim": 1, "String.format": 3, "StringBuilder.append": 2,
            "Integer.parseInt": 1, "Map.get": 2}
_SHARED = {"session": ["user", "query", "lastSearch"], "dao": ["sql", "table"], "cache": ["entry", "key"]}


def taint_facts(rng: np.random.Generator, groups: int) -> dict[str, list[tuple]]:
    """Facts of `groups` web applications of 16 handlers each (as data/taint/make_facts.py writes
    one): each handler reads sources, calls library methods and sanitizers, stores to and loads from
    the application's shared objects (heap fields every handler of it reaches) and calls sinks."""
    facts: dict[str, list[tuple]] = {k: [] for k in ("new", "assign", "load", "store", "call", "arg", "ret")}
    facts["source"] = [(m,) for m in _SOURCES]
    facts["sink"] = [(m, 0) for m in _SINKS]
    facts["sanitizer"] = [(m, 0) for m in _SANITIZERS]
    for app in range(groups):
        facts["assign"].append((f"A{app}/cache", f"A{app}/cacheInit"))
        facts["new"].append((f"A{app}/cacheInit", f"A{app}@cache"))
        for h in range(16):
            method = f"A{app}.H{h}"
            count, line = [0], [10]

            def var(method=method, count=count):
                count[0] += 1
                return f"{method}/v{count[0]}"

            def call(m, args, result=True, method=method, line=line, var=var):
                line[0] += int(rng.integers(1, 5))
                c = f"{method}/{line[0]}"
                facts["call"].append((c, m))
                facts["arg"].extend((c, i, a) for i, a in enumerate(args))
                if not result:
                    return None
                v = var()
                facts["ret"].append((c, v))
                return v

            req = f"{method}/req"
            facts["new"].append((req, f"A{app}@request"))
            shared = {}
            objs = sorted(_SHARED)
            for obj in rng.choice(objs, size=int(rng.integers(1, 4)), replace=False):
                v = f"{method}/{obj}"
                if obj == "cache":  # through a static field: one more step of points-to
                    facts["assign"].append((v, f"A{app}/cache"))
                else:
                    facts["new"].append((v, f"A{app}@{obj}"))
                shared[str(obj)] = v
            pool: list[str] = []
            ops = ["source", "const", "lib", "sanitize", "assign", "store", "load", "sink"]
            weights = np.array([3, 2, 4, 2, 2, 3, 3, 3], float)
            for _ in range(int(rng.integers(12, 23))):
                op = ops[int(rng.choice(len(ops), p=weights / weights.sum()))]
                if op == "source" or not pool:
                    pool.append(call(_SOURCES[int(rng.integers(len(_SOURCES)))], [req]))
                elif op == "const":
                    v = var()
                    facts["new"].append((v, f"{method}/str@{line[0]}"))
                    pool.append(v)
                elif op == "lib":
                    m = sorted(_LIBRARY)[int(rng.integers(len(_LIBRARY)))]
                    pool.append(call(m, [pool[int(rng.integers(len(pool)))] for _ in range(_LIBRARY[m])]))
                elif op == "sanitize":
                    pool.append(call(_SANITIZERS[int(rng.integers(len(_SANITIZERS)))],
                                     [pool[int(rng.integers(len(pool)))]]))
                elif op == "assign":
                    v = var()
                    facts["assign"].append((v, pool[int(rng.integers(len(pool)))]))
                    pool.append(v)
                elif op in ("store", "load") and shared:
                    obj = sorted(shared)[int(rng.integers(len(shared)))]
                    field = _SHARED[obj][int(rng.integers(len(_SHARED[obj])))]
                    if op == "store":
                        facts["store"].append((shared[obj], field, pool[int(rng.integers(len(pool)))]))
                    else:
                        v = var()
                        facts["load"].append((v, shared[obj], field))
                        pool.append(v)
                elif op == "sink":
                    recent = pool[-4:]
                    call(_SINKS[int(rng.integers(len(_SINKS)))], [recent[int(rng.integers(len(recent)))]],
                         result=False)
    return facts


def pointsto_facts(rng: np.random.Generator, modules: int) -> dict[str, list[tuple]]:
    """Facts of `modules` modules of 8 methods: each method allocates (some sites null), assigns,
    stores to and loads from a module-wide object's fields, calls other methods of its module
    (arguments to formals) and dereferences some of its variables."""
    facts: dict[str, list[tuple]] = {k: [] for k in ("new", "assign", "load", "store", "call", "actual",
                                                      "formal", "deref", "nullSite")}
    fields = ["f", "g", "next"]
    for mod in range(modules):
        methods = [f"M{mod}.m{i}" for i in range(8)]
        arity = {m: int(rng.integers(1, 3)) for m in methods}
        for m in methods:
            facts["formal"].extend((m, i, f"{m}/p{i}") for i in range(arity[m]))
        shared = f"M{mod}/global"
        facts["new"].append((shared, f"M{mod}@global"))
        sites = 0
        for m in methods:
            pool = [f"{m}/p{i}" for i in range(arity[m])]
            base = f"{m}/g"
            facts["assign"].append((base, shared))
            for k in range(int(rng.integers(6, 12))):
                op = rng.choice(["new", "null", "assign", "store", "load", "call", "deref"],
                                p=[0.12, 0.1, 0.14, 0.16, 0.16, 0.14, 0.18])
                v = f"{m}/v{k}"
                if op in ("new", "null") or not pool:
                    sites += 1
                    h = f"M{mod}@{sites}"
                    facts["new"].append((v, h))
                    if op == "null":
                        facts["nullSite"].append((h,))
                    pool.append(v)
                elif op == "assign":
                    facts["assign"].append((v, pool[int(rng.integers(len(pool)))]))
                    pool.append(v)
                elif op == "store":
                    stored = pool[int(rng.integers(len(pool)))]
                    facts["store"].append((base, fields[int(rng.integers(3))], stored))
                elif op == "load":
                    facts["load"].append((v, base, fields[int(rng.integers(3))]))
                    pool.append(v)
                elif op == "call":
                    callee = methods[int(rng.integers(len(methods)))]
                    c = f"{m}/c{k}"
                    facts["call"].append((c, callee))
                    facts["actual"].extend((c, i, pool[int(rng.integers(len(pool)))])
                                           for i in range(arity[callee]))
                else:
                    facts["deref"].append((pool[int(rng.integers(len(pool)))],))
    return facts


def andersen_facts(rng: np.random.Generator, clusters: int) -> dict[str, list[tuple]]:
    """Facts of `clusters` clusters of 8 variables (address-of, assignments, loads and stores
    inside a cluster) and a few assignments between neighbouring clusters."""
    facts: dict[str, list[tuple]] = {k: [] for k in ("AddressOf", "Assign", "Load", "Store")}
    for c in range(clusters):
        names = [f"c{c}v{i}" for i in range(8)]

        def pair(names=names):
            i, j = rng.choice(8, size=2, replace=False)
            return names[int(i)], names[int(j)]

        for _ in range(5):
            facts["AddressOf"].append(pair())
        for _ in range(3):
            facts["Assign"].append(pair())
        facts["Load"].append(pair())
        facts["Store"].append(pair())
        if c and rng.random() < 0.5:
            facts["Assign"].append((names[int(rng.integers(8))], f"c{c - 1}v{int(rng.integers(8))}"))
    return facts


FACTS = {"taint": taint_facts, "pointsto": pointsto_facts, "andersen": andersen_facts}


# Graphs ------------------------------------------------------------------------------------------

def _ground(name: str, facts: dict[str, list[tuple]]) -> DerivationGraph:
    spec = SPECS[name]
    program = souffle.parse(spec.program, f"<families.{name}>")
    with tempfile.TemporaryDirectory(prefix="fastlbp-family-") as folder:
        for rel, rows in facts.items():
            rows = sorted(set(rows), key=str)
            Path(folder, f"{rel}.facts").write_text("".join("\t".join(map(str, r)) + "\n" for r in rows))
        return grounding.ground(program, grounding.GroundOptions(facts=folder, alarms=(spec.alarm,),
                                                                 max_rule_instances=0)).graph


def rule_names(name: str) -> list[str]:
    """The rule names of a family in program order (those of a graph it grounds)."""
    if SPECS[name].program is None:
        return [f"R{i}" for i in range(16)]
    from datalog.souffle_rules import rule_names as names_of

    return names_of(souffle.parse(SPECS[name].program, f"<families.{name}>").rules)


def true_probabilities(name: str, seed: int = 0) -> dict[str, float]:
    """{rule name: true probability}: the `Spec.wrong` rules drawn from `WRONG_RANGE` (rounded to
    0.01, by `seed`), the others `STATED`."""
    spec = SPECS[name]
    names = rule_names(name)
    rng = np.random.default_rng([seed, 43, FAMILIES.index(name)])
    drawn = np.round(rng.uniform(*WRONG_RANGE, size=len(names)), 2)
    return {n: float(drawn[i]) if i in spec.wrong else STATED for i, n in enumerate(names)}


def acyclic_world(dg: DerivationGraph, seed: int) -> np.ndarray:
    """(T,) bool: one draw of every tuple of the Bayesian network `to_model` makes of `dg` (the
    clauses cycle elimination keeps; a tuple no kept clause derives and no input is false), with
    `dg`'s rule probabilities (`datalog.synthetic.sample_world`)."""
    st = least_fixpoint(dg)
    kept = np.flatnonzero(st.clause_kept)
    offsets = np.asarray(dg.body_offsets, np.int64)
    lens = offsets[kept + 1] - offsets[kept]
    new_off = np.zeros(kept.size + 1, np.int64)
    np.cumsum(lens, out=new_off[1:])
    body = np.concatenate([dg.body[offsets[c]:offsets[c + 1]] for c in kept]) if kept.size else \
        np.zeros(0, np.int32)
    priors = dict(dg.priors)
    priors.update({int(t): 0.0 for t in np.flatnonzero(~st.derivable)})
    sub = DerivationGraph(tuples=dg.tuples, rules=dg.rules, clause_rule=np.asarray(dg.clause_rule)[kept],
                          clause_head=np.asarray(dg.clause_head)[kept], body_offsets=new_off,
                          body=np.asarray(body, np.int32), priors=priors, alarms=dg.alarms)
    return sample_world(sub, seed)[0]


def make_graph(name: str, scale: int, seed: int, true_p: dict[str, float], stated: dict[str, float], *,
               labels: str = "alarms", alarms: int = 0) -> Graph:
    """One graph of family `name`: facts (or a synthetic graph) by `seed`, truth drawn with `true_p`,
    files stating `stated`.

    Args:
        labels: whose truth the model records (`meta["truth"]`): "alarms" (every alarm's, what an
            oracle gives) or "all" (every tuple's).
        alarms: keep only this many alarms, at random (0: all): a held-out graph ranked by
            `simulate` in bounded time.
    """
    if labels not in ("alarms", "all"):
        raise ValueError(f"labels must be 'alarms' or 'all', got {labels!r}")
    if SPECS[name].program is None:
        dg = generate(vertices=100 * scale, seed=seed, layers=6, alarm_layers=2,
                      rule_probabilities=[true_p[f"R{i}"] for i in range(16)])
    else:
        dg = _ground(name, FACTS[name](np.random.default_rng([seed, 4343]), scale))
        dg.rules = [dataclasses.replace(r, probability=true_p[r.name]) for r in dg.rules]
    world = acyclic_world(dg, seed)
    dg.rules = [Rule(r.name, stated[r.name], r.text) for r in dg.rules]
    all_alarms = np.asarray(dg.alarms, np.int64)
    if alarms and alarms < all_alarms.size:
        pick = np.random.default_rng([seed, 7]).choice(all_alarms.size, alarms, replace=False)
        dg.alarms = np.sort(all_alarms[pick]).astype(np.int32)
    if labels == "alarms":
        shown = np.asarray(dg.alarms, np.int64)
    else:
        shown = np.flatnonzero(least_fixpoint(dg).derivable)
    dg.truth = {int(t): bool(world[t]) for t in shown}
    model = to_model(dg, compress=True)
    alarm_set = {int(a) for a in model.alarms}
    truth = {int(v) for v, t in model.meta["truth"].items() if t and int(v) in alarm_set}
    return Graph(model, truth, world, seed)


def make_family(name: str, *, size: str | int = "small", graphs: int = 5, held_out: int = 1, seed: int = 0,
                labels: str = "alarms", held_out_alarms: int = 0) -> Family:
    """`graphs` training graphs and `held_out` graphs of family `name` (`SPECS`), all by `seed`.

    Args:
        size: "small", "medium", "avrora" or an int scale (`Spec.scales`).
        labels: the training graphs' labelled tuples, "alarms" or "all" (`make_graph`).
        held_out_alarms: rank only this many alarms of a held-out graph (0: all).
    """
    if name not in SPECS:
        raise ValueError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    scale = scale_of(name, size)
    spec = SPECS[name]
    true_p = true_probabilities(name, seed)
    names = list(true_p)
    stated = {n: STATED for n in names}
    shapes = {n: {**spec.wrong, **spec.right_shapes}.get(i, "mixed") for i, n in enumerate(names)}
    base = 1000 * seed + 100 * FAMILIES.index(name)
    train = [make_graph(name, scale, base + g, true_p, stated, labels=labels) for g in range(graphs)]
    held = [make_graph(name, scale, base + 50 + g, true_p, stated, alarms=held_out_alarms)
            for g in range(held_out)]
    wrong = [n for i, n in enumerate(names) if i in spec.wrong]
    return Family(name, names, true_p, stated, shapes, wrong, train, held)


__all__ = ["FAMILIES", "SIZES", "SPECS", "STATED", "Family", "Graph", "make_family", "make_graph",
           "true_probabilities", "rule_names", "acyclic_world", "scale_of"]
