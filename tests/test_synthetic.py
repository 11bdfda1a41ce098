"""The synthetic Bingo-like derivation-graph generator and ancestral sampling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datalog import synthetic as S
from datalog.bayesnet import to_model
from datalog.derivation import DerivationGraph, Rule


def _arrays(dg: DerivationGraph):
    return (dg.clause_rule, dg.clause_head, dg.body_offsets, dg.body, dg.alarms)


def _same(a: DerivationGraph, b: DerivationGraph) -> bool:
    return (a.tuples == b.tuples and a.rules == b.rules and a.priors == b.priors
            and all(np.array_equal(x, y) for x, y in zip(_arrays(a), _arrays(b), strict=True)))


@pytest.fixture(scope="module")
def mid():
    return S.generate(preset="avrora", seed=3)


def test_deterministic_by_seed():
    assert _same(S.generate(preset="hedc", seed=7), S.generate(preset="hedc", seed=7))
    assert _same(S.generate(factor_edges=20_000, seed=1), S.generate(factor_edges=20_000, seed=1))


def test_different_seeds_differ():
    a, b = S.generate(preset="weblech", seed=0), S.generate(preset="weblech", seed=1)
    assert not _same(a, b)
    assert not np.array_equal(a.body, b.body) or not np.array_equal(a.clause_head, b.clause_head)


@pytest.mark.parametrize("preset", ["weblech", "hedc", "luindex", "avrora"])
def test_preset_sizes(preset):
    dg = S.generate(preset=preset)
    vertices, edges = S.PRESETS[preset]
    graph = to_model(dg).graph
    assert S.bn_sizes(dg) == (vertices, edges)
    assert graph.num_vars == vertices
    assert graph.num_edges == vertices + edges


@pytest.mark.parametrize("target", [5_000, 50_000, 123_457])
def test_factor_edge_target(target):
    graph = to_model(S.generate(factor_edges=target, seed=2)).graph
    assert abs(graph.num_edges - target) <= 0.02 * target


def test_vertices_or_edges_alone():
    v, e = S.bn_sizes(S.generate(vertices=3_000))
    assert v == 3_000 and abs(e / v - S.DEFAULT_EDGE_RATIO) < 0.01
    v, e = S.bn_sizes(S.generate(edges=9_000))
    assert e == 9_000 and abs(e / v - S.DEFAULT_EDGE_RATIO) < 0.01


def test_x10_preset_sizes_are_ten_times():
    assert S.PRESETS["ftpx10"] == (2_111_750, 4_769_150)
    assert S.preset_sizes("weblechx10") == (6_960, 16_550)


@pytest.mark.parametrize("kwargs", [
    {}, {"preset": "weblech", "vertices": 10}, {"preset": "nope"},
    {"vertices": 1_000, "edges": 500}, {"vertices": 1_000, "edges": 6_000}, {"vertices": 20},
])
def test_bad_sizes_raise(kwargs):
    with pytest.raises(ValueError):
        S.generate(**kwargs)


def _check_structure(dg: DerivationGraph, alarm_layers: int = 1) -> None:
    num_t = dg.num_tuples
    lens = np.diff(dg.body_offsets)
    assert lens.min() >= 1 and lens.max() <= 4
    assert len(set(dg.tuples)) == num_t
    # Ids are a topological order: every body tuple precedes its clause's head.
    clause_of_entry = np.repeat(np.arange(dg.num_clauses), lens)
    assert (dg.body < dg.clause_head[clause_of_entry]).all()
    # No body lists a tuple twice.
    for c in range(0, dg.num_clauses, max(1, dg.num_clauses // 500)):
        body = dg.clause_body(c)
        assert len(set(body.tolist())) == len(body)
    # Every derived tuple is derivable: depths are finite (a cycle would raise),
    # and inputs are exactly the tuples with priors.
    depth = S.tuple_layers(dg)
    derived = np.bincount(dg.clause_head, minlength=num_t) > 0
    assert set(dg.priors) == set(np.flatnonzero(~derived).tolist())
    assert set(dg.priors.values()) <= {1.0, 0.999}
    # Alarms: the whole last layer(s), all of relation race, nothing else.
    top = depth.max()
    assert len(dg.alarms) > 0
    assert set(dg.alarms.tolist()) == set(np.flatnonzero(depth > top - alarm_layers).tolist())
    assert all(dg.tuples[a].startswith("race(") for a in dg.alarms)
    assert not any(dg.tuples[t].startswith("race(") for t in np.flatnonzero(depth <= top - alarm_layers))
    assert {r.probability for r in dg.rules} == {0.999}


@pytest.mark.parametrize("preset", ["weblech", "hedc"])
def test_structure_presets(preset):
    _check_structure(S.generate(preset=preset, seed=5))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), vertices=st.integers(80, 4_000), ratio=st.floats(1.2, 3.5),
       layers=st.integers(2, 25), alarm_layers=st.integers(1, 2))
def test_structure_random(seed, vertices, ratio, layers, alarm_layers):
    dg = S.generate(vertices=vertices, edges=round(ratio * vertices), seed=seed, layers=layers,
                    alarm_layers=alarm_layers)
    assert S.bn_sizes(dg) == (vertices, round(ratio * vertices))
    _check_structure(dg, alarm_layers)
    assert S.tuple_layers(dg).max() == min(max(layers, 1 + alarm_layers), dg.num_tuples - len(dg.priors))


def test_cycle_detected():
    dg = DerivationGraph(tuples=["a", "b", "c"], rules=[Rule("R0")], clause_rule=np.zeros(2, np.int32),
                         clause_head=np.array([1, 2], np.int32), body_offsets=np.array([0, 2, 3]),
                         body=np.array([0, 2, 1], np.int32))
    with pytest.raises(ValueError, match="cycle"):
        S.sample_truth(dg)


def test_heavy_tails(mid):
    derivations = np.bincount(mid.clause_head)[len(mid.priors):]
    reuse = np.bincount(mid.body, minlength=mid.num_tuples)
    assert np.median(derivations) <= 3 and derivations.max() >= 100 * np.median(derivations)
    assert reuse.max() >= 300 * max(np.median(reuse), 1)
    assert S.tuple_layers(mid).max() == S.default_layers(36_091)


def test_to_model_builds(mid):
    model = to_model(mid)
    assert model.graph.num_factors == model.graph.num_vars == 36_091
    assert model.alarms == tuple(mid.alarms.tolist())


def _check_world(dg: DerivationGraph, tuples: np.ndarray, clauses: np.ndarray) -> None:
    lens = np.diff(dg.body_offsets)
    clause_of_entry = np.repeat(np.arange(dg.num_clauses), lens)
    all_body = np.bincount(clause_of_entry, weights=tuples[dg.body], minlength=dg.num_clauses) == lens
    assert not (clauses & ~all_body).any()  # a true clause has a true body
    some_clause = np.bincount(dg.clause_head, weights=clauses, minlength=dg.num_tuples) > 0
    derived = np.bincount(dg.clause_head, minlength=dg.num_tuples) > 0
    explicit = np.zeros(dg.num_tuples, bool)
    explicit[list(dg.priors)] = True
    plain = derived & ~explicit
    assert np.array_equal(tuples[plain], some_clause[plain])  # OR of its clauses
    assert (tuples[derived] >= some_clause[derived]).all()
    certain = np.array([t for t, p in dg.priors.items() if p == 1.0 and not derived[t]], dtype=np.int64)
    assert tuples[certain].all()


def test_sample_world_consistent(mid):
    tuples, clauses = S.sample_world(mid, seed=11)
    assert tuples.shape == (mid.num_tuples,) and tuples.dtype == bool
    _check_world(mid, tuples, clauses)
    assert np.array_equal(S.sample_truth(mid, 11), tuples)
    assert not np.array_equal(S.sample_truth(mid, 12), tuples)
    # The rule failures make some clauses with true bodies false (p = 0.999).
    lens = np.diff(mid.body_offsets)
    all_body = np.bincount(np.repeat(np.arange(mid.num_clauses), lens), weights=tuples[mid.body]) == lens
    failed = (all_body & ~clauses).mean() / all_body.mean()
    assert 0.0002 < failed < 0.003


def test_sample_world_matches_model_probabilities():
    """Tuple frequencies over many samples match exact enumeration of the tiny BN."""
    # a (prior 0.6), b (prior 0.5) ; c <- a (0.9) ; c <- a, b (0.7) ; d <- c, b (0.8); c has prior 0.3 too.
    dg = DerivationGraph(
        tuples=["a", "b", "c", "d"], rules=[Rule("R0", 0.9), Rule("R1", 0.7), Rule("R2", 0.8)],
        clause_rule=np.array([0, 1, 2], np.int32), clause_head=np.array([2, 2, 3], np.int32),
        body_offsets=np.array([0, 1, 3, 5]), body=np.array([0, 0, 1, 2, 1], np.int32),
        priors={0: 0.6, 1: 0.5, 2: 0.3})
    samples = np.array([S.sample_truth(dg, s) for s in range(4_000)])
    p_c = 1 - (1 - 0.3) * (1 - 0.6 * (1 - (1 - 0.9) * (1 - 0.7 * 0.5)))
    p_c_given_b = 1 - (1 - 0.3) * (1 - 0.6 * (1 - (1 - 0.9) * (1 - 0.7)))
    expected = np.array([0.6, 0.5, p_c, 0.8 * 0.5 * p_c_given_b])
    assert np.abs(samples.mean(axis=0) - expected).max() < 0.03
    _check_world(dg, *S.sample_world(dg, 0))


def test_rule_probabilities_and_priors_options():
    dg = S.generate(preset="weblech", rule_probabilities=(0.999, 0.9), input_prior=0.95,
                    uncertain_input_fraction=0.5)
    assert [r.probability for r in dg.rules[:4]] == [0.999, 0.9, 0.999, 0.9]
    assert set(dg.priors.values()) == {1.0, 0.95}
    p = np.asarray(to_model(dg).graph.p1)[dg.num_tuples:]
    assert set(np.unique(p).tolist()) <= {0.999, 0.9}


def test_layered_small_graph():
    dg = S.layered(num_inputs=12, layers=2, width=10, seed=3)
    assert _same(dg, S.layered(num_inputs=12, layers=2, width=10, seed=3))
    assert not _same(dg, S.layered(num_inputs=12, layers=2, width=10, seed=4))
    assert dg.tuples[:12] == [f"in({i})" for i in range(12)]
    assert [dg.tuples[a] for a in dg.alarms] == [f"race({i})" for i in range(10)]
    assert set(dg.priors) == set(range(12)) and all(0.6 <= p <= 1.0 for p in dg.priors.values())
    depth = S.tuple_layers(dg)  # a DAG; a tuple's bodies come from earlier layers
    assert depth[:12].tolist() == [0] * 12 and depth[12:22].tolist() == [1] * 10
    assert set(depth[22:].tolist()) == {1, 2}  # race(i) from p1 tuples, or from inputs alone
    for c in range(dg.num_clauses):  # a body lists a tuple at most once
        body = dg.clause_body(c)
        assert len(set(body.tolist())) == len(body) >= 1
    assert len(S.layered(num_inputs=5, layers=3, width=4, num_alarms=7).alarms) == 7
    truth = S.sample_truth(dg, seed=3)
    _check_world(dg, *S.sample_world(dg, 3))
    assert 0 < truth[dg.alarms].sum() < len(dg.alarms)  # the CLI tests' oracle is mixed
