"""Rule names and texts of a Soufflé program (issue 40, item 5): `fastlbp rules` lists them, names stay
the same when the program is reordered, and rule-probability files name rules by them (or by `Rk`)."""

import json

import pytest
from typer.testing import CliRunner

from datalog import formats, grounding, souffle
from datalog.ground_inputs import rule_probabilities
from fastlbp.cli import get_app
from fastlbp.core.errors import InputError

COMPONENT = """.comp Graph<N> {
  .decl edge(a: N, b: N)
  .decl reach(a: N, b: N)
  reach(a, b) :- edge(a, b).
}
.init cg = Graph<number>
.init vg = Graph<number>
cg.edge(1, 2). vg.edge(3, 4).
.decl out(a: number)
.output out
out(a) :- cg.reach(a, _) ; vg.reach(_, a).
"""

TC = """.decl edge(a: number, b: number)
.decl path(a: number, b: number)
.output path
edge(1, 2). edge(2, 3).
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z).
"""
# The same program: rules swapped, variables renamed, reformatted, a comment added.
TC_EDITED = """.decl edge(a: number, b: number)
.decl path(a: number, b: number)
.output path
edge(1, 2). edge(2, 3).
// the recursive step first now
path(a, c) :-
    path(a, b),
    edge(b, c).
path(p, q) :- edge(p, q).
"""


def by_text(program):
    return {r.text: r.name for r in program.rules}


def test_component_instances_give_rules_of_their_own_with_qualified_texts():
    p = souffle.parse(COMPONENT, "c.dl")
    texts = [r.text for r in p.rules]
    assert texts == ["cg.reach(a, b) :- cg.edge(a, b).", "vg.reach(a, b) :- vg.edge(a, b).",
                     "out(a) :- cg.reach(a, _).", "out(a) :- vg.reach(_, a)."]
    names = [r.name for r in p.rules]
    assert len(set(names)) == 4
    assert [n.rsplit("-", 1)[0] for n in names] == ["cg.reach", "vg.reach", "out", "out"]
    assert [r.pos.line for r in p.rules] == [4, 4, 11, 11]


def test_names_survive_reordering_renaming_and_reformatting_and_change_with_the_rule():
    before, after = by_text(souffle.parse(TC)), souffle.parse(TC_EDITED)
    assert sorted(before.values()) == sorted(r.name for r in after.rules)
    changed = souffle.parse(TC.replace("path(x, z) :- path(x, y), edge(y, z).",
                                       "path(x, z) :- edge(x, y), path(y, z)."))
    assert changed.rules[0].name == souffle.parse(TC).rules[0].name
    assert changed.rules[1].name != souffle.parse(TC).rules[1].name


def test_a_rule_written_twice_gets_a_second_name():
    p = souffle.parse(TC + "path(u, v) :- edge(u, v).\n")
    assert p.rules[2].name == p.rules[0].name + "-2"


def test_a_probability_file_by_name_survives_a_reordering(tmp_path):
    first = souffle.parse(TC, "p.dl")
    rp = tmp_path / "rp.txt"
    rp.write_text(f"{first.rules[1].name}: 0.5\n")
    for text in (TC, TC_EDITED):
        dg = grounding.ground(souffle.parse(text, "p.dl"), grounding.GroundOptions(rule_prob=rp)).graph
        recursive = next(r for r in dg.rules if "path(" in r.text.split(":-")[1])
        assert recursive.probability == 0.5
        assert [r.probability for r in dg.rules if r is not recursive] == [0.999]


def test_rk_still_names_rule_k_and_two_names_of_one_rule_must_agree(tmp_path):
    p = souffle.parse(TC, "p.dl")
    rp = tmp_path / "rp.txt"
    rp.write_text(f"R1: 0.5\n{p.rules[0].name}: 0.25\nR0: 0.25\n")
    assert rule_probabilities(rp, p) == {1: 0.5, 0: 0.25}
    rp.write_text(f"{p.rules[0].name}: 0.25\nR0: 0.3\n")
    with pytest.raises(InputError) as info:
        rule_probabilities(rp, p)
    assert f"rp.txt:2: the probability of rule 'R0 (= {p.rules[0].name})' is 0.3 here but 0.25 on line 1" \
        in str(info.value)


def test_a_grounded_graph_takes_rk_by_position_and_names_by_name(tmp_path):
    from datalog.rule_probs import apply_rule_probs

    out = tmp_path / "g.json"
    dg = grounding.ground(souffle.parse(TC, "p.dl")).graph
    formats.save_json(dg, out)
    model = formats.load_json(out)
    names = [r.name for r in dg.rules]
    got = apply_rule_probs(model, {"R1": 0.5, names[0]: 0.25, "R7": 0.1})
    assert [r.probability for r in got.meta["derivation"].rules] == [0.25, 0.5]
    assert got.meta["rule_prob"]["absent"] == ["R7"]
    with pytest.raises(InputError, match="two probabilities"):
        apply_rule_probs(model, {"R0": 0.5, names[0]: 0.25})


def test_rules_command_lists_names_places_and_texts(tmp_path):
    prog = tmp_path / "c.dl"
    prog.write_text(COMPONENT)
    runner = CliRunner()
    res = runner.invoke(get_app(), ["rules", str(prog)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["NAME", "WHERE", "P", "RULE"]
    p = souffle.parse_file(prog)
    assert lines[1].split(None, 3) == [p.rules[0].name, f"{prog}:4", "0.999",
                                       "cg.reach(a, b) :- cg.edge(a, b)."]
    rp = tmp_path / "rp.txt"
    rp.write_text("R1: 0.5\n")
    res = runner.invoke(get_app(), ["rules", str(prog), "--rule-prob", str(rp), "-f", "json"])
    listed = json.loads(res.stdout)
    assert [r["probability"] for r in listed] == [0.999, 0.5, 0.999, 0.999]
    assert listed[1] == {"name": p.rules[1].name, "index": 1, "text": "vg.reach(a, b) :- vg.edge(a, b).",
                         "file": str(prog), "line": 4, "probability": 0.5}
    # a graph grounded from it lists the same names and texts
    graph = tmp_path / "g.json"
    formats.save_json(grounding.ground(p).graph, graph)
    res = runner.invoke(get_app(), ["rules", str(graph), "-f", "json"])
    assert [(r["name"], r["text"]) for r in json.loads(res.stdout)] == [(r.name, r.text) for r in p.rules]
    bad = tmp_path / "rp2.txt"
    bad.write_text("reach: 0.5\n")
    res = runner.invoke(get_app(), ["rules", str(prog), "--rule-prob", str(bad)])
    assert res.exit_code == 2 and "rp2.txt:1: no rule 'reach'" in res.stderr and "fastlbp rules" in res.stderr


def test_independent_parts_of_a_body_are_existence_checks_of_their_own():
    # Soufflé's suite, example/independent_body3: a(x) :- b(x), c(y), d(y) made |b| x |c join d| clauses.
    text = """.decl b(x: number)
.decl c(x: number)
.decl d(x: number)
.decl a(x: number)
.decl q(x: number)
.output a, q
b(1). b(2). c(0). c(6). c(7). d(0). d(6). d(9).
a(x) :- b(x), c(y), d(y).
q(x) :- b(x), c(_), d(_), !c(x), x > 1.
q(x) :- b(x), c(x), d(_).
"""
    p = souffle.parse(text, "p.dl")
    assert [r.text for r in p.rules] == [
        "a(x) :- b(x), exists{c(y),d(y)}().",
        "q(x) :- b(x), exists{c(_)}(), exists{d(_)}(), !c(x), x > 1.",
        "q(x) :- b(x), c(x), exists{d(_)}().",
        "exists{c(y),d(y)}() :- c(y), d(y).", "exists{c(_)}() :- c(_).", "exists{d(_)}() :- d(_)."]
    assert [r.auxiliary for r in p.rules] == [False] * 3 + [True] * 3
    dg = grounding.ground(p).graph
    assert sorted(dg.tuples[a] for a in dg.alarms) == ["a(1)", "a(2)", "q(2)"]
    clauses = [(dg.rules[int(dg.clause_rule[c])].text.split(" :-")[0], dg.tuples[int(dg.clause_head[c])])
               for c in range(dg.num_clauses)]
    assert clauses.count(("a(x)", "a(1)")) == 1  # one clause, not one per (c, d) pair
    assert clauses.count(("exists{c(y),d(y)}()", "exists{c(y),d(y)}()")) == 2  # y = 0 and y = 6
    assert [r.probability for r in dg.rules] == [0.999] * 3 + [1.0] * 3
