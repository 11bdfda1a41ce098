"""Explanations (`fastlbp.inference.explain`): derivations ranked by their clause's marginal, the
factor neighbours of a graph without provenance, and the clause index a session builds once."""

import numpy as np
import pytest
from conftest import DATA
from triage_support import demo_model, hand_model

from fastlbp.inference.explain import MAX_BODY_SHOWN, Derivation, Explanation, clause_index
from fastlbp.inference.session import Session
from fastlbp.io.loading import load
from fastlbp.triage import explain, format_explanation


def test_explain_ranks_derivations_by_clause_marginal():
    model = hand_model()
    s = Session(model)
    p = s.run().marginals
    race2 = model.index["race(2)"]
    ex = explain(model, p, race2, k=5)
    assert ex.kind == "derivation" and ex.total == 2
    clause_var = model.meta["clause_var"]
    assert [d.rule for d in ex.derivations] == ["R1", "R2"]  # p(R1#1) = .9*.5 > p(R2#2) = .6*.5
    assert ex.derivations[0].probability == pytest.approx(p[clause_var[1]])
    assert [b for b, _ in ex.derivations[0].body] == ["in(a)", "in(b)"]
    assert ex.derivations[0].rule_text == "race(y) :- in(x), in(y)"
    text = format_explanation(ex)
    assert "R1" in text and "<- in(b)" in text
    assert explain(model, p, race2, k=1).derivations[0].rule == "R1"
    assert "input tuple" in format_explanation(explain(model, p, model.index["in(a)"]))


def test_explain_without_derivation_shows_factor_neighbours():
    model = load(DATA / "weblech" / "graph.causal_fg")
    p = Session(model).run().marginals
    v = model.index["87"]
    ex = explain(model, p, v)
    assert ex.kind == "factor" and ex.derivations
    heads = np.asarray(model.graph.factor_head)
    a = int(np.flatnonzero(heads == v)[0])
    off = np.asarray(model.graph.factor_offsets)
    body = [model.var_names[u] for u in np.asarray(model.graph.edge_var)[off[a] + 1: off[a + 1]]]
    assert [b for b, _ in ex.derivations[0].body] == body
    assert "factor neighbours" in format_explanation(ex)


def test_clause_index_gives_the_same_explanations():
    model = demo_model()
    p = Session(model, max_iters=300).run().marginals
    index = clause_index(model.meta["derivation"])
    for v in range(model.num_vars):
        assert explain(model, p, v, clauses_by_head=index) == explain(model, p, v)


def test_long_bodies_are_cut():
    body = [(f"in({i})", 0.5) for i in range(MAX_BODY_SHOWN + 3)]
    ex = Explanation("race(1)", 0.5, [Derivation("R0", None, 0.5, body)], 1, "derivation")
    lines = format_explanation(ex).splitlines()
    assert sum("<- in(" in ln for ln in lines) == MAX_BODY_SHOWN and lines[-1].strip() == "... and 3 more"


def _four_ways():
    """race has four derivations of different strength and one that closes a cycle (dropped);
    other(1) depends on nothing an alarm needs (pruned)."""
    from datalog.bayesnet import to_model
    from datalog.derivation import from_clauses

    return to_model(from_clauses(
        [("R0", "race", ["a"]), ("R1", "race", ["b"]), ("R2", "race", ["c"]), ("R3", "race", ["d"]),
         ("R4", "back", ["race"]), ("R5", "race", ["back"]), ("R6", "other(1)", ["a", "c"])],
        rules={"R0": 0.3, "R1": 0.9, "R2": 0.6, "R3": 0.2, "R4": 1.0, "R5": 1.0, "R6": 0.5},
        priors={"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.5}, alarms=["race"]), compress=True)


def test_why_orders_by_contribution_and_never_lists_a_derivation_of_probability_zero():
    model = _four_ways()
    s = Session(model)
    s.label("b", False)  # R1, the strongest a priori, can no longer hold
    p = s.run().marginals
    ex = explain(model, p, model.index["race"], k=3)
    assert [d.rule for d in ex.derivations] == ["R2", "R0", "R3"]
    probs = [d.probability for d in ex.derivations]
    assert probs == sorted(probs, reverse=True) and min(probs) > 0
    assert (ex.total, ex.zero, ex.dropped) == (5, 1, 1)
    text = format_explanation(ex)
    assert "strongest of 3 derivation(s) that can hold (1 holds with P = 0; 1 dropped by cycle " \
           "elimination)" in text
    assert "R1" not in text
    # Everything ruled out: nothing is listed, and the header says so.
    s.label("a", False), s.label("c", False), s.label("d", False)
    p = s.run().marginals
    ex = explain(model, p, model.index["race"], k=3)
    assert ex.derivations == [] and "none of its 5 derivation(s) can hold" in format_explanation(ex)


def test_why_explains_any_tuple_even_one_compression_removed():
    from fastlbp.inference.explain import explain_name

    model = _four_ways()
    p = Session(model).run().marginals
    ex = explain_name(model, p, "other(1)")
    assert "pruned by compression" in ex.note and ex.derivations[0].rule == "R6"
    # No alarm depends on other(1): its belief is the forward one, 0.5 * P(a) * P(c).
    assert ex.probability == pytest.approx(0.5 * 0.5 * 0.5)
    assert ex.derivations[0].probability == pytest.approx(ex.probability)
    assert "other(1): pruned by compression" in format_explanation(ex)
    assert explain_name(model, p, "race") == explain(model, p, model.index["race"])
    with pytest.raises(KeyError):
        explain_name(model, p, "nosuch")


def test_triage_jump_and_why_take_any_tuple_name(tmp_path):
    """`jump race(1, 2)`-style names find the alarm; a tuple that is no alarm is named as such; `why X`
    explains any tuple, one compression pruned included."""
    import io

    from fastlbp.core.settings import Settings
    from fastlbp.triage import Terminal, Triage

    t = Triage.open(_four_ways(), tmp_path / "s.db", settings=Settings(max_iters=300))
    assert t.find(" race ") == t.model.index["race"]
    out = t.jump("other(1)")
    assert not out.accepted and "other(1) is a tuple of the graph but not an alarm" in out.message
    assert "pruned by compression" in out.message and "`why other(1)`" in out.message
    assert t.explain("other(1)").derivations[0].rule == "R6"
    stdout = io.StringIO()
    Terminal(t, io.StringIO("why other(1)\nwhy nosuch\nq\n"), stdout).run()
    text = stdout.getvalue()
    assert "other(1)   P(true) = 0.125000" in text and "R6" in text and "no tuple 'nosuch'" in text
    t.close()


def test_why_names_the_prior_of_a_derived_tuple_that_is_also_an_input():
    from datalog.bayesnet import to_model
    from datalog.derivation import from_clauses

    model = to_model(from_clauses([("R0", "a", ["b"])], rules={"R0": 0.5}, priors={"a": 0.2, "b": 0.5},
                                  alarms=["a"]), compress=True)
    p = Session(model).run().marginals
    ex = explain(model, p, model.index["a"])
    assert ex.prior == 0.2 and "also an input tuple with prior 0.200000" in format_explanation(ex)
    assert explain(model, p, model.index["b"]).prior is None
