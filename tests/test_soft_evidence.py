"""Soft evidence (`fastlbp.inference.soft`) in every method, against enumeration with unary factors."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from reference import exact_marginals

from fastlbp.core.errors import InputError
from fastlbp.core.graph import from_factors
from fastlbp.core.model import Model
from fastlbp.inference import ranking
from fastlbp.inference.session import Session
from fastlbp.inference.soft import load_soft_labels, observed_graph, parse_soft_labels, soft_log_odds
from fastlbp.io.loading import load
from tests.graphs import random_factors, random_labels, random_polytree


def model_of(factors, n):
    return Model(from_factors(factors, n), tuple(f"x{i}" for i in range(n)), alarms=tuple(range(n)))


def random_soft(rng, n, most=3):
    k = int(rng.integers(1, min(most, n) + 1))
    return {int(v): float(rng.uniform(0.02, 0.98)) for v in rng.choice(n, size=k, replace=False)}


def run(model, labels, soft, **settings):
    s = Session(model, **settings)
    s.labels = dict(labels)
    for v, p in soft.items():
        s.observe(v, p)
    return s.run(warm=False)


def polytree_case(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    factors = random_polytree(rng, n, hard=0.0)
    return factors, n, random_labels(rng, n, 1), random_soft(rng, n)


@hsettings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6))
def test_exact_matches_enumeration(seed):
    """Loopy graphs (reconvergent, shared bodies), labels and soft evidence: within 1e-9."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    factors = random_polytree(rng, n, hard=0.1) if seed % 2 else random_factors(rng, n, n, hard=0.0)
    labels, soft = random_labels(rng, n, 1), random_soft(rng, n)
    try:
        want = exact_marginals(factors, n, labels, soft)
    except ValueError:  # the labels have probability 0
        return
    got = run(model_of(factors, n), labels, soft, method="exact")
    assert got.marginals.shape == (n,)
    np.testing.assert_allclose(got.marginals, want, rtol=0, atol=1e-9)


@hsettings(max_examples=8, deadline=None)
@given(st.integers(0, 10**6))
def test_lbp_is_exact_on_polytrees_with_soft_evidence(seed):
    """On a polytree LBP is exact; soft evidence is a finite evidence log-odds, so it stays exact.
    Seven variables every time: a polytree's arrays then have one shape, and LBP's round compiles once."""
    rng = np.random.default_rng(seed)
    factors = random_polytree(rng, 7, hard=0.0)
    labels, soft = random_labels(rng, 7, 1), random_soft(rng, 7)
    want = exact_marginals(factors, 7, labels, soft)
    got = run(model_of(factors, 7), labels, soft, method="lbp", tol=1e-13, schedule="parall")
    np.testing.assert_allclose(got.marginals, want, rtol=0, atol=1e-9)


def test_sampling_within_four_standard_errors():
    """Random Bayesian networks with a label and soft evidence: sampled marginals within 4 SE of
    enumeration (the sampler weighs each world by the observed children's factors)."""
    beyond = compared = 0
    for seed in range(12):
        factors, n, labels, soft = polytree_case(1000 + seed)
        want = exact_marginals(factors, n, labels, soft)
        got = run(model_of(factors, n), labels, soft, method="sample", samples=1 << 15, seed=seed,
                  target_se=0, min_accepted=100)
        assert np.all(got.stderr > 0)
        free = [v for v in range(n) if v not in labels]
        beyond += int(np.count_nonzero(np.abs(got.marginals - want)[free] > 4 * got.stderr[free]))
        compared += len(free)
    assert compared > 40 and beyond == 0


def test_soft_evidence_moves_a_root_by_its_likelihood_ratio():
    """A root of prior q observed with p has posterior odds q/(1-q) * p/(1-p) in every method."""
    from fastlbp.core.graph import AND, Factor

    model = model_of([Factor(AND, 0, (), 0.3, 0.3), Factor(AND, 1, (0,), 0.9, 0.1)], 2)
    odds = 0.3 / 0.7 * 0.8 / 0.2
    for method in ("exact", "lbp", "sample"):
        got = run(model, {}, {0: 0.8}, method=method, samples=1 << 16, target_se=0)
        tol = 1e-9 if method != "sample" else 4 * got.stderr[0]
        assert got.marginals[0] == pytest.approx(odds / (1 + odds), abs=tol), method
    # p = 0.5 is no evidence; a label wins over soft evidence on the same variable.
    assert run(model, {}, {0: 0.5}, method="exact").marginals[0] == pytest.approx(0.3, abs=1e-12)
    assert run(model, {0: False}, {0: 0.99}, method="lbp").marginals[0] == 0.0


def test_observed_graph_keeps_the_graph_and_adds_leaves():
    rng = np.random.default_rng(3)
    factors = random_factors(rng, 6, 6)
    graph = from_factors(factors, 6)
    out, labels = observed_graph(graph, {4: 0.7, 1: 0.2})
    assert out.factors()[: len(factors)] == graph.factors()
    extra = out.factors()[len(factors):]
    assert [(f.head, f.body, f.p1, f.p2) for f in extra] == [(6, (1,), 0.2, 0.8),
                                                             (7, (4,), 0.7, pytest.approx(0.3))]
    assert labels == {6: True, 7: True}
    np.testing.assert_allclose(soft_log_odds(3, {1: 0.8}), [0, np.log(4), 0])


def test_soft_labels_file(tmp_path):
    path = tmp_path / "soft.txt"
    path.write_text("# confidence of a classifier\nrace(1, 4)\t0.9\nleak(3), 0.25\n\n")
    assert parse_soft_labels(path) == [(2, "race(1, 4)", 0.9), (3, "leak(3)", 0.25)]
    model = load("data/race.json")
    model2, soft, labels = load_soft_labels(path, model, {model.index["leak(9)"]: True})
    assert {model2.var_names[v]: p for v, p in soft.items()} == {"race(1,4)": 0.9, "leak(3)": 0.25}
    assert {model2.var_names[v] for v in labels} == {"leak(9)"}
    r = ranking.rank(model2, labels, soft=soft, settings=None)
    plain = ranking.rank(model2, labels)
    p = {a.alarm: a.probability for a in r.alarms}
    q = {a.alarm: a.probability for a in plain.alarms}
    assert p["race(1,4)"] > q["race(1,4)"] and p["leak(3)"] < q["leak(3)"]


def test_a_pruned_tuple_is_kept(tmp_path):
    doc = json.loads(open("data/race.json").read())
    model = load("data/race.json")
    pruned = [t for t in doc["tuples"] if model.resolve(t).var < 0 and model.resolve(t).how == 2]
    if not pruned:
        pytest.skip("race.json has no pruned tuple")
    path = tmp_path / "soft.txt"
    path.write_text(f"{pruned[0]} 0.7\n")
    model2, soft, _ = load_soft_labels(path, model)
    assert [model2.var_names[v] for v in soft] == [pruned[0]]


@pytest.mark.parametrize("text,message", [("race(1,4) 1", "strictly between 0 and 1"),
                                          ("race(1,4) 0", "strictly between"),
                                          ("race(1,4) high", "expected 'NAME P'"),
                                          ("race(1,4) nan", "expected 'NAME P'"),
                                          ("nope(1) 0.5", "unknown variable"),
                                          ("race(1,4) 0.5\nrace(1, 4) 0.6", "on line 1")])
def test_bad_soft_labels(tmp_path, text, message):
    path = tmp_path / "soft.txt"
    path.write_text(text + "\n")
    with pytest.raises(InputError, match=message) as err:
        load_soft_labels(path, load("data/race.json"))
    assert str(path) in str(err.value)


@pytest.mark.parametrize("method", ["exact", "sample"])
def test_soft_evidence_follows_new_parameters(method):
    """`Session.set_parameters` (learned rule probabilities) with soft evidence: the observed model is
    made from the new parameters, as a fresh session's is."""
    from datalog.bayesnet import to_model
    from datalog.rule_probs import apply_rule_probs
    from datalog.synthetic import layered

    model = to_model(layered(num_inputs=8, layers=2, width=6, seed=5))
    soft = {int(model.alarms[0]): 0.8, int(model.alarms[1]): 0.3}
    settings = {"method": method, "samples": 4096, "target_se": 0.0}
    s = Session(model, **settings)
    for v, p in soft.items():
        s.observe(v, p)
    before = s.run(warm=False).marginals
    new = apply_rule_probs(model, {r.name: 0.5 for r in model.meta["derivation"].rules})
    s.set_parameters(new)
    got = s.run().marginals
    want = run(new, {}, soft, **settings).marginals
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert np.max(np.abs(got - before)) > 0.01
