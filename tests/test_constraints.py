"""constraints and the session's refusals: a label set is refused only when it has probability 0.

Checked against enumeration on random graphs with hard and extreme parameters,
in both precisions, and on the cases that were refused before: a hedc-size
synthetic graph's derivable alarms, a 10^4-input AND labelled true, a prior of
5e-321 in float32, weblech's true alarms in float32.
"""

from pathlib import Path

import numpy as np
import pytest
import reference
from graphs import random_factors
from hypothesis import given, settings
from hypothesis import strategies as st

from datalog.bayesnet import to_model
from datalog.synthetic import generate, sample_truth
from fastlbp.core import constraints
from fastlbp.core.errors import ContradictoryEvidence
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.model import Model
from fastlbp.inference.session import Session
from fastlbp.io.loading import load

# Probabilities whose messages leave float32's range, float64's, or both (1 - p rounds to 0 in
# float32 for the last two), beside hard ones.
EXTREME = (0.0, 1.0, 1e-300, 5e-321, 1e-30, 1e-8, 0.5, 1 - 1e-8, 1 - 1e-12)


def _extreme_factors(rng, num_vars, num_factors):
    factors = random_factors(rng, num_vars, num_factors, hard=0.3)
    out = []
    for f in factors:
        if rng.random() < 0.5:
            p1 = float(rng.choice(EXTREME))
            p2 = p1 if not f.body else float(rng.choice(EXTREME))
            f = Factor(f.kind, f.head, f.body, p1, p2)
        out.append(f)
    return out


def _possible(factors, num_vars, labels) -> bool:
    try:
        reference.exact_marginals(factors, num_vars, labels)
    except reference.Contradiction:
        return False
    return True


def _model(factors, num_vars):
    return Model(graph=from_factors(factors, num_vars), var_names=tuple(f"x{i}" for i in range(num_vars)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_propagation_never_rules_out_a_possible_label_set_and_finds_single_impossible_labels(seed):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(2, 9))
    factors = _extreme_factors(rng, V, int(rng.integers(1, 10)))
    graph = from_factors(factors, V)
    for _ in range(4):
        k = int(rng.integers(0, 4))
        labels = {int(v): bool(rng.integers(2)) for v in rng.choice(V, size=min(k, V), replace=False)}
        possible = _possible(factors, V, labels)
        if possible:
            assert not constraints.contradicts(graph, labels), labels
        else:
            core = constraints.conflicting_labels(graph, labels)
            if core is not None:
                assert not _possible(factors, V, core)  # the named subset is itself impossible


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), precision=st.sampled_from(["f64", "f32"]))
def test_every_possible_label_is_accepted(seed, precision):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(2, 8))
    factors = _extreme_factors(rng, V, int(rng.integers(1, 9)))
    if not _possible(factors, V, {}):
        return
    session = Session(_model(factors, V), method="lbp", precision=precision, max_iters=60)
    for v in range(V):
        for truth in (True, False):
            session.labels = {v: truth}
            if _possible(factors, V, {v: truth}):
                rnd = session.run(warm=False)  # must not raise ContradictoryEvidence
                assert np.all(np.isfinite(rnd.marginals))
                assert rnd.marginals[v] == (1.0 if truth else 0.0)
            else:
                try:
                    session.run(warm=False)
                except ContradictoryEvidence as err:
                    assert err.labels == {f"x{v}": truth}


def test_an_impossible_pair_is_named_exactly():
    # a -> b deterministically; b = false with a = true has probability 0, c is innocent.
    factors = [Factor(AND, 0, (), 0.5, 0.5), Factor(OR, 1, (0,), 1.0, 0.0), Factor(AND, 2, (), 0.5, 0.5)]
    graph = from_factors(factors)
    assert constraints.conflicting_labels(graph, {2: True, 0: True, 1: False}) == {0: True, 1: False}
    assert constraints.conflicting_labels(graph, {0: True, 1: True}) is None


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["f64", "f32"])
def test_derivable_alarms_of_a_hedc_size_graph_are_accepted_as_true(precision):
    # 22 of the first 30 alarms were refused in float64: an OR head whose clauses' messages were
    # beyond -745 rounded "1 - product" to 0 and sent the alarm a hard -inf.
    dg = generate(preset="hedc", seed=1, rule_probabilities=(0.999, 0.95, 0.9, 0.8), input_prior=0.95)
    model = to_model(dg, compress=True)
    session = Session(model, method="lbp", precision=precision)
    first = session.run()
    order = np.argsort(-first.log_odds[list(model.alarms)], kind="stable")
    for k in order[:30]:
        alarm = int(model.alarms[k])
        session.labels = {alarm: True}
        rnd = session.run(warm=False)
        assert rnd.marginals[alarm] == 1.0 and np.all(np.isfinite(rnd.marginals))
    assert np.all(np.isfinite(first.log_odds))  # no soft alarm is "impossible" (log-odds -inf)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["f64", "f32"])
def test_a_wide_and_labelled_true(precision):
    # All 10^4 inputs must then be true: probability 2^-10000, far below either precision.
    n = 10_000
    factors = [Factor(AND, 0, tuple(range(1, n + 1)), 0.9, 0.0)]
    factors += [Factor(AND, v, (), 0.5, 0.5) for v in range(1, n + 1)]
    model = _model(factors, n + 1)
    session = Session(model, method="lbp", precision=precision, tol=1e-9)
    assert np.all(np.isfinite(session.run().log_odds))
    session.label(0, True)
    rnd = session.run()
    assert np.all(rnd.marginals == 1.0)


def test_a_tiny_prior_labelled_true_in_float32():
    factors = [Factor(AND, 0, (), 5e-321, 5e-321), Factor(OR, 1, (0,), 1.0, 0.0)]
    session = Session(_model(factors, 2), method="lbp", precision="f32")
    session.label(1, True)
    assert np.all(session.run().marginals == 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["f64", "f32"])
def test_weblech_true_alarms_are_accepted(precision):
    # 3 of the 4 alarms its truth once had true (race(2,1), race(1,1), race(1,2), race(0,3)) were refused
    # in float32; every alarm is labelled true here, those among them.
    model = load(Path(__file__).parents[1] / "data" / "weblech.json")
    truth = list(model.alarms)
    assert len(truth) == 11
    session = Session(model, method="lbp", precision=precision)
    session.run()
    for alarm in truth:
        session.labels = {int(alarm): True}
        session.run(warm=False)


@pytest.mark.slow
def test_labels_drawn_from_a_sampled_world_are_never_refused():
    dg = generate(preset="weblech", seed=5, rule_probabilities=(0.999, 0.95, 0.9))
    model = to_model(dg)
    world = sample_truth(dg, seed=2)
    session = Session(model, method="lbp", precision="f32", max_iters=200)
    rng = np.random.default_rng(1)
    for t in rng.choice(dg.num_tuples, 30, replace=False):
        session.label(int(t), bool(world[t]))
        session.run()
