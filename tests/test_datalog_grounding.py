"""Grounding with clingo (`datalog.grounding`): the clause set equals a naive evaluator's on random
programs; every construct; every error; both readers (aspif, Python observer) agree; writing."""

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from datalog import grounding, souffle
from datalog import io as datalog_io
from datalog.grounding import GroundOptions
from fastlbp.core.errors import InputError

# A naive evaluator: the reference ------------------------------------------------------------------


def _match(pattern, values, env):
    """Extends `env` so that `pattern` (a tuple of Var/Const/Wildcard) matches `values`, or None."""
    env = dict(env)
    for a, v in zip(pattern, values, strict=True):
        if isinstance(a, souffle.Const):
            if a.value != v:
                return None
        elif isinstance(a, souffle.Var):
            if env.setdefault(a.name, v) != v:
                return None
    return env


def _value(term, env):
    return term.value if isinstance(term, souffle.Const) else env[term.name]


_OPS = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _instances(rule, model):
    """Every (env, body tuples) of `rule` whose positive atoms are in `model` and conditions hold."""
    envs = [({}, ())]
    for atom in rule.positive:
        envs = [(e2, body + ((atom.relation, t),)) for env, body in envs for t in model[atom.relation]
                if (e2 := _match(atom.args, t, env)) is not None]
    pending = list(rule.comparisons)
    out = []
    for env, body in envs:
        env = dict(env)
        # equalities bind in any order
        eqs = [c for c in pending if c.op == "="]
        for _ in range(len(eqs) + 1):
            for c in eqs:
                for a, b in ((c.left, c.right), (c.right, c.left)):
                    if isinstance(a, souffle.Var) and a.name not in env and (
                            isinstance(b, souffle.Const) or b.name in env):
                        env[a.name] = _value(b, env)
        if not all(_OPS[c.op](_value(c.left, env), _value(c.right, env)) for c in pending):
            continue
        if any(_match(a.args, t, env) is not None for a in rule.negative for t in model[a.relation]):
            continue
        out.append((env, body))
    return out


def _name(rel, values):
    return f"{rel}({','.join(map(str, values))})"


def naive(program, facts):
    """The least (perfect) model stratum by stratum, and the clause set {(rule, head, frozenset(body))}."""
    model = {r: set() for r in program.decls}
    for rel, ts in facts.items():
        model[rel].update(ts)
    for stratum in program.strata:
        rules = [r for r in program.rules if r.head.relation in stratum]
        changed = True
        while changed:
            changed = False
            for rule in rules:
                for env, _ in _instances(rule, model):
                    t = tuple(_value(a, env) for a in rule.head.args)
                    if t not in model[rule.head.relation]:
                        model[rule.head.relation].add(t)
                        changed = True
    clauses = set()
    for rule in program.rules:
        for env, body in _instances(rule, model):
            head = _name(rule.head.relation, [_value(a, env) for a in rule.head.args])
            clauses.add((f"R{rule.index}", head, frozenset(_name(r, t) for r, t in body)))
    return model, clauses


def clause_set(dg):
    # Rules by index (R0: the first in file order); their names are tested in test_datalog_souffle_rules.py.
    return {(f"R{int(dg.clause_rule[c])}", dg.tuples[int(dg.clause_head[c])],
             frozenset(dg.tuples[int(t)] for t in dg.clause_body(c))) for c in range(dg.num_clauses)}


def ground_text(text, facts=None, **options):
    """Grounds program `text` with facts {relation: [tuples]} written to a temporary facts directory."""
    with tempfile.TemporaryDirectory() as d:
        program = souffle.parse(text, str(Path(d) / "p.dl"))
        for rel in program.inputs:
            rows = (facts or {}).get(rel, [])
            (Path(d) / f"{rel}.facts").write_text("".join("\t".join(map(str, t)) + "\n" for t in rows))
        return grounding.ground(program, GroundOptions(facts=d, **options)).graph


# Random programs from a small family ---------------------------------------------------------------

DECLS = """.decl e(a: number, b: number)
.decl f(a: number)
.input e, f
.decl p(a: number, b: number)
.decl q(a: number)
.decl r(a: number, b: number)
.output q, r
"""
ARITY = {"e": 2, "f": 1, "p": 2, "q": 1, "r": 2}
# Strata p < q < r: a head may use its own stratum and lower ones positively, lower ones negated.
POSITIVE = {"p": "efp", "q": "efpq", "r": "efpqr"}
NEGATIVE = {"p": "ef", "q": "efp", "r": "efpq"}
VARS = "xyzw"


@st.composite
def rules(draw):
    head = draw(st.sampled_from("pqr"))
    body, bound = [], []
    for _ in range(draw(st.integers(1, 3))):
        rel = draw(st.sampled_from(POSITIVE[head]))
        args = []
        for _ in range(ARITY[rel]):
            kind = draw(st.integers(0, 9))
            if kind < 7:
                v = draw(st.sampled_from(VARS))
                args.append(v)
                bound.append(v)
            elif kind < 9:
                args.append(str(draw(st.integers(0, 3))))
            else:
                args.append("_")
        body.append(f"{rel}({', '.join(args)})")
    bound = sorted(set(bound))

    def term(allow_wild):
        choices = [v for v in bound] + ["0", "1", "2"] + (["_"] if allow_wild else [])
        return draw(st.sampled_from(choices))

    if draw(st.booleans()):
        rel = draw(st.sampled_from(NEGATIVE[head]))
        body.append(f"!{rel}({', '.join(term(True) for _ in range(ARITY[rel]))})")
    if bound and draw(st.booleans()):
        op = draw(st.sampled_from(souffle.COMPARISONS))
        body.append(f"{draw(st.sampled_from(bound))} {op} {term(False)}")
    if bound and draw(st.integers(0, 4)) == 0:
        fresh = "v"  # bound by an equality only
        body.append(f"{fresh} = {draw(st.sampled_from(bound))}")
        bound = bound + [fresh]
    head_args = [term(False) for _ in range(ARITY[head])]
    return f"{head}({', '.join(head_args)}) :- {', '.join(body)}."


@st.composite
def programs(draw):
    text = DECLS + "\n".join(draw(st.lists(rules(), min_size=1, max_size=5))) + "\n"
    if draw(st.booleans()):  # facts in the program text, of an input and of a derived relation
        text += f"f({draw(st.integers(0, 4))}).\np({draw(st.integers(0, 3))}, {draw(st.integers(0, 3))}).\n"
    pairs = st.tuples(st.integers(0, 4), st.integers(0, 4))
    facts = {"e": sorted(draw(st.sets(pairs, max_size=12))),
             "f": sorted((x,) for x in draw(st.sets(st.integers(0, 4), max_size=4)))}
    return text, facts


def _ground_or_none(text, facts, reader):
    try:
        return ground_text(text, facts, reader=reader)
    except InputError as err:
        assert "derives nothing" in str(err)
        return None


@hsettings(max_examples=60, deadline=None)
@given(programs())
def test_random_programs_clause_set_equals_naive_evaluator(case):
    text, facts = case
    program = souffle.parse(text, "p.dl")
    all_facts = {r: {tuple(t) for t in ts} for r, ts in facts.items()}
    for fact in program.facts:
        all_facts.setdefault(fact.atom.relation, set()).add(fact.values)
    model, expected = naive(program, all_facts)
    graphs = [_ground_or_none(text, facts, reader) for reader in grounding.READERS]
    if not expected:
        assert graphs == [None, None]
        return
    for dg in graphs:
        assert clause_set(dg) == expected
        assert dg.num_clauses == len(expected)  # identical instances merged
        alarms = {dg.tuples[a] for a in dg.alarms}
        assert alarms == {_name(r, t) for r in ("q", "r") for t in model[r]}
        # inputs that clauses also derive carry a prior, so they stay inputs
        derived = {dg.tuples[h] for h in dg.clause_head}
        inputs = {_name(r, t) for r, ts in all_facts.items() for t in ts}
        assert {dg.tuples[t] for t in dg.priors} == derived & inputs


# Constructs ------------------------------------------------------------------------------------------

TC = """.decl edge(a: number, b: number)
.input edge
.decl path(a: number, b: number)
.output path
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z).
"""


def test_transitive_closure_clauses():
    dg = ground_text(TC, {"edge": [(1, 2), (2, 3)]})
    assert clause_set(dg) == {
        ("R0", "path(1,2)", frozenset({"edge(1,2)"})),
        ("R0", "path(2,3)", frozenset({"edge(2,3)"})),
        ("R1", "path(1,3)", frozenset({"path(1,2)", "edge(2,3)"})),
    }
    assert [r.text for r in dg.rules] == ["path(x, y) :- edge(x, y).",
                                          "path(x, z) :- path(x, y), edge(y, z)."]
    assert {dg.tuples[a] for a in dg.alarms} == {"path(1,2)", "path(2,3)", "path(1,3)"}
    assert dg.priors == {}


def test_wildcard_and_body_only_variables_make_distinct_clauses():
    text = """.decl e(a: number, b: number)
.input e
.decl s(a: number)
.decl t(a: number)
.output s
s(x) :- e(x, _).
t(x) :- e(x, y).
"""
    dg = ground_text(text, {"e": [(1, 2), (1, 3)]})
    assert clause_set(dg) == {
        ("R0", "s(1)", frozenset({"e(1,2)"})), ("R0", "s(1)", frozenset({"e(1,3)"})),
        ("R1", "t(1)", frozenset({"e(1,2)"})), ("R1", "t(1)", frozenset({"e(1,3)"})),
    }


def test_identical_instances_are_one_clause():
    text = """.decl e(a: number, b: number)
.input e
.decl s(a: number)
.output s
s(x) :- e(x, y), e(x, z).
"""
    dg = ground_text(text, {"e": [(1, 2), (1, 3)]})
    # y=2,z=3 and y=3,z=2 have the same body set; y=z gives a body of one tuple
    assert clause_set(dg) == {("R0", "s(1)", frozenset({"e(1,2)", "e(1,3)"})),
                              ("R0", "s(1)", frozenset({"e(1,2)"})), ("R0", "s(1)", frozenset({"e(1,3)"}))}
    assert dg.num_clauses == 3


def test_negation_of_input_and_of_lower_stratum_decided_against_facts():
    text = """.decl e(a: number, b: number)
.decl blocked(a: number)
.input e, blocked
.decl path(a: number, b: number)
.decl open(a: number, b: number)
.decl alone(a: number)
.output open, alone
path(x, y) :- e(x, y), !blocked(y).
path(x, z) :- path(x, y), e(y, z), !blocked(z).
open(x, y) :- e(x, y), !path(y, x).
alone(x) :- e(x, _), !e(_, x).
"""
    dg = ground_text(text, {"e": [(1, 2), (2, 3), (3, 1), (3, 4)], "blocked": [(4,)]})
    got = clause_set(dg)
    # path: 1->2->3->1 reachable, 4 blocked; path(y,x) holds for every edge of the cycle, not for (3,4)
    assert ("R2", "open(3,4)", frozenset({"e(3,4)"})) in got
    assert not any(h.startswith("open(1") or h.startswith("open(2") for _, h, _ in got)
    assert not any(h.startswith("path(") and h.endswith(",4)") for _, h, _ in got)
    assert not any(h.startswith("alone") for _, h, _ in got)  # every node has an incoming edge
    program = souffle.parse(text)
    _, expected = naive(program, {"e": {(1, 2), (2, 3), (3, 1), (3, 4)}, "blocked": {(4,)}})
    assert got == expected


@pytest.mark.parametrize("op,expected", [("=", {1}), ("!=", {2, 3}), ("<", {1, 2}), ("<=", {1, 2}),
                                         (">", {3}), (">=", {3})])
def test_comparisons(op, expected):
    rhs = {"=": "y", "!=": "y", "<": "3", "<=": "2", ">": "2", ">=": "3"}[op]
    text = f""".decl e(a: number, b: number)
.input e
.decl s(a: number)
.output s
s(x) :- e(x, y), x {op} {rhs}.
"""
    dg = ground_text(text, {"e": [(1, 1), (2, 1), (3, 1)]})
    assert {dg.tuples[h] for h in dg.clause_head} == {f"s({x})" for x in expected}


def test_symbols_constants_program_facts_and_equality_binding():
    text = """.decl call(f: symbol, g: symbol)
.decl reach(f: symbol)
.decl entry(f: symbol)
.input call
.output reach
entry("main").
reach("init").
reach(f) :- entry(f).
reach(g) :- reach(f), call(f, g), g != "exit".
reach(h) :- call("main", g), h = g.
"""
    dg = ground_text(text, {"call": [("main", "a b"), ("a b", "exit"), ("a b", 'q"uote')]})
    got = clause_set(dg)
    assert ("R0", "reach(main)", frozenset({"entry(main)"})) in got
    assert ("R1", "reach(a b)", frozenset({"reach(main)", "call(main,a b)"})) in got
    assert ("R1", 'reach(q"uote)', frozenset({"reach(a b)", 'call(a b,q"uote)'})) in got
    assert ("R2", "reach(a b)", frozenset({"call(main,a b)"})) in got
    assert not any(h == "reach(exit)" for _, h, _ in got)
    # reach("init") is a fact of a derived relation: an input with a prior; alarms include it
    alarms = {dg.tuples[a] for a in dg.alarms}
    assert "reach(init)" in alarms and "reach(main)" in alarms


def test_fact_that_is_also_derived_keeps_its_prior():
    text = TC + "path(1, 3).\n"
    dg = ground_text(text, {"edge": [(1, 2), (2, 3)]})
    assert {dg.tuples[t]: p for t, p in dg.priors.items()} == {"path(1,3)": 1.0}


def test_nullary_relations():
    text = """.decl go()
.decl e(a: number)
.input go, e
.decl done()
.output done
done() :- go(), e(x).
"""
    with tempfile.TemporaryDirectory() as d:
        Path(d, "go.facts").write_text("\n")
        Path(d, "e.facts").write_text("1\n2\n")
        dg = grounding.ground(souffle.parse(text, "p.dl"), GroundOptions(facts=d)).graph
    # e(x) shares no variable with the rest: an existence check of its own (datalog.souffle_project).
    assert clause_set(dg) == {("R0", "done()", frozenset({"go()", "exists{e(x)}()"})),
                              ("R1", "exists{e(x)}()", frozenset({"e(1)"})),
                              ("R1", "exists{e(x)}()", frozenset({"e(2)"}))}
    assert [r.probability for r in dg.rules] == [0.999, 1.0]  # the existence check is deterministic


def test_rule_probabilities_priors_and_alarm_relations(tmp_path):
    (tmp_path / "edge.facts").write_text("1\t2\n2\t3\n")
    (tmp_path / "rp.txt").write_text("R1: 0.5\n\n# comment\nR0: 0.75\n")
    (tmp_path / "priors.txt").write_text("edge(1,2) 0.25\n")
    program = souffle.parse(TC, "p.dl")
    dg = grounding.ground(program, GroundOptions(facts=tmp_path, rule_prob=tmp_path / "rp.txt",
                                                 priors=tmp_path / "priors.txt", alarms=("edge",))).graph
    assert [r.probability for r in dg.rules] == [0.75, 0.5]  # Rk: rule k in file order
    assert {dg.tuples[t]: p for t, p in dg.priors.items()} == {"edge(1,2)": 0.25}
    assert {dg.tuples[a] for a in dg.alarms} == {"edge(1,2)", "edge(2,3)"}
    dg = grounding.ground(program, GroundOptions(facts=tmp_path)).graph
    assert all(r.probability == 0.999 for r in dg.rules)


def test_progress_goes_to_the_callback(tmp_path):
    (tmp_path / "edge.facts").write_text("1\t2\n")
    lines = []
    grounding.ground(souffle.parse(TC, "p.dl"), GroundOptions(facts=tmp_path, progress=lines.append))
    assert any("1 input tuples" in x or "read 1 input" in x for x in lines)
    assert any("clingo" in x for x in lines) and any("clauses" in x for x in lines)


def test_translation_uses_externals_and_fact_copies_for_negation():
    program = souffle.parse(""".decl e(a: number)
.input e
.decl s(a: number)
s(x) :- e(x), !e(_), x < 3.
""")
    text = grounding.translate(program, {"e": [(1,), (2,)]})
    assert "#external p0(X0) : i0(X0)." in text
    assert "not m0(_)" in text and "m0(X0) :- i0(X0)." in text
    assert "k(0)" in text


@pytest.mark.parametrize("reader", grounding.READERS)
def test_readers_agree_on_a_larger_graph(reader):
    rng = np.random.default_rng(3)
    edges = {(int(a), int(b)) for a, b in rng.integers(0, 40, size=(120, 2))}
    text = TC + "path(x, x) :- edge(x, _), !edge(_, x).\n"
    dg = ground_text(text, {"edge": sorted(edges)}, reader=reader)
    _, expected = naive(souffle.parse(text), {"edge": edges})
    assert clause_set(dg) == expected


# Writing -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("out", ["g.json", "g.json.gz", "g.npz", "bingo_dir"])
def test_write_reads_back_the_same_clauses(tmp_path, out):
    dg = ground_text(TC + "path(1, 3).\n", {"edge": [(1, 2), (2, 3), (3, 1)]}, alarms=("path",))
    notes = datalog_io.write_derivation(dg, tmp_path / out)
    assert notes[0].startswith("wrote")
    back, _ = datalog_io.read_derivation(tmp_path / out)
    assert clause_set(back) == clause_set(dg)
    assert {back.tuples[a] for a in back.alarms} == {dg.tuples[a] for a in dg.alarms}
    assert {back.tuples[t]: p for t, p in back.priors.items()} == {"path(1,3)": 1.0}


def test_load_program_gives_a_model(tmp_path):
    (tmp_path / "p.dl").write_text(TC)
    (tmp_path / "edge.facts").write_text("1\t2\n2\t3\n")
    model = grounding.load_program(tmp_path / "p.dl", options=GroundOptions(facts=tmp_path))
    assert {model.var_names[a] for a in model.alarms} == {"path(1,2)", "path(2,3)", "path(1,3)"}


# Errors --------------------------------------------------------------------------------------------

def _error(text, files=None, **options):
    with tempfile.TemporaryDirectory() as d:
        for name, content in (files or {}).items():
            Path(d, name).write_text(content)
        program = souffle.parse(text, str(Path(d, "p.dl")))
        with pytest.raises(InputError) as info:
            grounding.ground(program, GroundOptions(facts=d, **{k: Path(d, v) if k in ("rule_prob", "priors")
                                                                 else v for k, v in options.items()}))
        return str(info.value).replace(d, "D")


def test_missing_facts_file_and_directory(tmp_path):
    assert _error(TC) == ("D/edge.facts: no such file: the facts of input relation 'edge' (.input at "
                          "D/p.dl:2); an empty file means no facts")
    program = souffle.parse(TC, "p.dl")
    with pytest.raises(InputError, match="no such file or directory"):
        grounding.ground(program, GroundOptions(facts=tmp_path / "nope"))
    (tmp_path / "f").write_text("")
    with pytest.raises(InputError, match="is not a directory"):
        grounding.ground(program, GroundOptions(facts=tmp_path / "f"))


@pytest.mark.parametrize("content,message", [
    ("1\t2\n3\n", "D/edge.facts:2: expected 2 tab-separated fields (a, b), got 1: '3'"),
    ("1\t2\n1 2\n", "D/edge.facts:2: expected 2 tab-separated fields (a, b), got 1: '1 2'"),
    ("1\tx\n", "D/edge.facts:1: attribute 'b' is a number, got 'x'"),
    ("1\t99999999999\n", "D/edge.facts:1: number 99999999999 of attribute 'b' is out of range"),
    ("1\t2\t3\n", "D/edge.facts:1: expected 2 tab-separated fields (a, b), got 3"),
])
def test_malformed_facts_name_file_and_line(content, message):
    assert _error(TC, {"edge.facts": content}).startswith(message)


def test_facts_numbers_in_other_notations_and_empty_lines():
    with tempfile.TemporaryDirectory() as d:
        Path(d, "edge.facts").write_text("0x1\t+2\n\n0b11\t-4\r\n")
        dg = grounding.ground(souffle.parse(TC, "p.dl"), GroundOptions(facts=d)).graph
    assert {dg.tuples[h] for h in dg.clause_head} == {"path(1,2)", "path(3,-4)"}


def test_nothing_derived():
    assert "derives nothing from these facts" in _error(TC, {"edge.facts": ""})


@pytest.mark.parametrize("content,message", [
    ("R0: 0.5\nR7: 0.1\n", "D/rp.txt:2: no rule 'R7' in D/p.dl (`fastlbp rules D/p.dl` lists its rules' "
                           "names; R0..R1 by file order)"),
    ("R0 0.5\n", "D/rp.txt:1: malformed line, expected 'Rk: probability'"),
    ("R0: 1.5\n", "D/rp.txt:1: probability of rule R0 1.5 is not a probability in [0, 1]"),
    ("R0: 0.5\nR0: 0.6\n", "D/rp.txt:2: the probability of rule 'R0' is 0.6 here but 0.5 on line 1"),
])
def test_bad_rule_probabilities(content, message):
    got = _error(TC, {"edge.facts": "1\t2\n", "rp.txt": content}, rule_prob="rp.txt")
    assert got.startswith(message), got


@pytest.mark.parametrize("content,message", [
    ("path(1,2) 0.5\n", "D/pr.txt:1: 'path(1,2)' is not an input tuple"),
    ("edge(9,9) 0.5\n", "D/pr.txt:1: 'edge(9,9)' is not an input tuple"),
    ("edge(1,2) x\n", "D/pr.txt:1: prior of edge(1,2) 'x' is not a number"),
    ("0.5\n", "D/pr.txt:1: malformed line, expected 'TUPLE probability'"),
])
def test_bad_priors(content, message):
    got = _error(TC, {"edge.facts": "1\t2\n", "pr.txt": content}, priors="pr.txt")
    assert got.startswith(message), got


def test_unknown_alarm_relation():
    got = _error(TC, {"edge.facts": "1\t2\n"}, alarms=("nope",))
    assert "alarm relation 'nope' is not declared in the program (relations: edge, path)" in got


def test_symbols_that_would_give_two_tuples_one_name():
    text = """.decl e(a: symbol, b: symbol)
.input e
.decl s(a: symbol, b: symbol)
s(x, y) :- e(x, y).
"""
    got = _error(text, {"e.facts": "a,b\tc\na\tb,c\n"})
    assert 'two different tuples, e("a,b","c") and e("a","b,c"), are both named \'e(a,b,c)\'' in got


def test_unknown_reader():
    with pytest.raises(ValueError, match="reader"):
        grounding.ground(souffle.parse(TC), GroundOptions(reader="nope"))


def test_all_instances_of_a_rule_family_small_exhaustive():
    """Every edge set on 3 nodes: the closure's clauses equal the naive evaluator's (both readers)."""
    pairs = [(a, b) for a in range(3) for b in range(3)]
    program = souffle.parse(TC)
    for bits in itertools.islice(itertools.product((0, 1), repeat=len(pairs)), 0, 512, 37):
        edges = {p for p, b in zip(pairs, bits, strict=True) if b}
        if not edges:
            continue
        _, expected = naive(program, {"edge": edges})
        assert clause_set(ground_text(TC, {"edge": sorted(edges)})) == expected
