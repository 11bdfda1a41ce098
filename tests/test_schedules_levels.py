"""schedules/levels.py: exact levelling by a walk along the order or stage by stage.

Every way of levelling must give the same levels as the definition (brute force on
small graphs) and as the earlier windowed levelling (`analysis.levelling_windows`),
for every kind of order: total, factors split into blocks, stages, one stage.
"""

import numpy as np
import pytest
import reference_schedules
from graphs import random_factors
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fastlbp.core.graph import AND, Factor, from_factors
from schedules import analysis, levels, orders


def _brute(graph, order) -> np.ndarray:
    """The definition with explicit N_E, stage by stage (one level per stage), compacted."""
    reads = reference_schedules.reads_of(graph)
    rank = np.asarray(order.rank)
    lev = np.zeros(rank.size, np.int64)
    for r in np.unique(rank):
        stage = np.flatnonzero(rank == r)
        lo = [lev[x] + 1 for e in stage for x in reads[e] if rank[x] < r]
        lo += [lev[x] for x in range(rank.size) if rank[x] < r for e in stage if e in reads[x]]
        lev[stage] = max(lo, default=0)
    return np.unique(lev, return_inverse=True)[1].reshape(-1)


def _orders(graph, rng):
    e = graph.num_edges
    return [orders.seqfix(graph), orders.topo(graph), orders.topo(graph, True),
            *orders.seqrnd(graph, int(rng.integers(1 << 30)), 1), orders.parall(graph),
            orders.Order(rng.permutation(e), "total"),
            orders.Order(rng.integers(0, 3, e), "stages"),
            orders.Order(rng.integers(0, max(e // 2, 1), e) * 7 - 5, "gapped stages")]


def _methods(order):
    out = ["walk", "auto"] + (["stages"] if not order.is_total else [])
    return out + (["numba"] if levels.compiled_walk() is not None else [])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), window=st.integers(1, 9))
# Negative stages in one window: (var, rank) keys collided (fixed in analysis._search_last_before).
@example(seed=100000000, window=8)
def test_every_method_gives_the_definitions_levels(seed, window):
    rng = np.random.default_rng(seed)
    graph = from_factors(random_factors(rng, int(rng.integers(2, 10)), int(rng.integers(1, 10)),
                                        max_body=int(rng.integers(1, 6))))
    for o in _orders(graph, rng):
        ref = analysis.levelling_windows(graph, o, window=window).batch
        assert np.array_equal(ref, _brute(graph, o)), o.name
        for m in _methods(o):
            lev, how, _ = levels.levels(graph, o, m)
            assert np.array_equal(lev, ref), (o.name, m, how)
        an = analysis.levelling(graph, o)
        assert np.array_equal(an.batch, ref) and an.num_batches == int(ref.max(initial=-1)) + 1
        assert reference_schedules.is_valid(graph, o, an.batch), o.name


def test_a_wrong_level_is_caught():
    # The comparison above can fail: one edge of a chain moved down a level breaks validity and
    # differs from the walk.
    graph = from_factors([Factor(AND, 0, (), 0.5, 0.5)] + [Factor(AND, i, (i - 1,), 0.9, 0.0)
                                                            for i in range(1, 6)])
    o = orders.seqfix(graph)
    lev, _, _ = levels.levels(graph, o, "walk")
    bad = lev.copy()
    bad[np.argmax(lev)] -= 1
    assert not reference_schedules.is_valid(graph, o, bad)
    assert not np.array_equal(bad, _brute(graph, o))


@pytest.mark.parametrize("name", ["seqfix", "topo", "stages", "parall"])
def test_synthetic_graph_same_levels_as_the_windowed_levelling(name):
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate
    g = to_model(generate(factor_edges=20_000, seed=3)).graph
    stages = np.random.default_rng(0).integers(0, 40, g.num_edges)
    o = {"seqfix": orders.seqfix, "topo": orders.topo, "parall": orders.parall,
         "stages": lambda g: orders.Order(stages, "s")}[name](g)
    ref = analysis.levelling_windows(g, o)
    for m in _methods(o):
        lev, how, steps = levels.levels(g, o, m)
        assert np.array_equal(lev, ref.batch), (m, how)
        assert steps == (levels.walk_arrays(g, o).num_stages if how == "stages" else 0)
    assert ref.num_batches > (100 if name in ("seqfix", "topo") else 0)


def test_deep_chain_one_level_per_link():
    n = 3000
    graph = from_factors([Factor(AND, 0, (), 0.5, 0.5)] + [Factor(AND, i, (i - 1,), 0.9, 0.0)
                                                            for i in range(1, n)])
    for o in (orders.seqfix(graph), orders.topo(graph)):
        an = analysis.levelling(graph, o)
        assert an.num_batches == n and an.how in ("walk", "numba") and an.passes == 0
        assert np.array_equal(an.batch, analysis.levelling_windows(graph, o).batch)


def test_auto_picks_stages_for_large_stages_and_the_walk_otherwise():
    graph = from_factors(random_factors(np.random.default_rng(5), 40, 60))
    e = graph.num_edges
    assert levels.levels(graph, orders.parall(graph))[1] == "stages"
    assert levels.levels(graph, orders.seqfix(graph))[1] in ("walk", "numba")
    tiny = orders.Order(np.arange(e) // 2, "pairs of edges")  # stages of 2 edges: walked
    assert levels.levels(graph, tiny)[1] in ("walk", "numba")
    with pytest.raises(ValueError):
        levels.levels(graph, orders.seqfix(graph), "stages")
    with pytest.raises(ValueError):
        levels.levels(graph, orders.seqfix(graph), "nope")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=60))
def test_compact_is_the_dense_rank(values):
    x = np.asarray(values, np.int64)
    ref = np.unique(x, return_inverse=True)[1].reshape(-1) if x.size else x
    assert np.array_equal(levels.compact(x), ref)


def test_numba_walk_equals_the_plain_walk():
    pytest.importorskip("numba")
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate
    g = to_model(generate(factor_edges=5_000, seed=4)).graph
    for o in (orders.seqfix(g), orders.topo(g), orders.seqrnd(g)[0],
              orders.Order(np.random.default_rng(1).integers(0, 9, g.num_edges), "stages")):
        a, how, _ = levels.levels(g, o, "numba")
        assert how == "numba"
        assert np.array_equal(a, levels.levels(g, o, "walk")[0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-2, 12), max_size=12), st.booleans())
def test_time_order_is_the_stable_argsort_of_a_permutation(values, perm):
    rank = np.random.default_rng(len(values)).permutation(len(values)) if perm else np.asarray(values)
    seq = orders.time_order(rank)
    is_perm = rank.size > 0 and np.array_equal(np.sort(rank), np.arange(rank.size))
    assert (seq is not None) == is_perm
    if seq is not None:
        assert np.array_equal(seq, np.argsort(rank, kind="stable"))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), body_first=st.booleans())
def test_topo_is_heads_by_position_then_bodies_backward(seed, body_first):
    rng = np.random.default_rng(seed)
    g = from_factors(random_factors(rng, int(rng.integers(2, 12)), int(rng.integers(1, 12)))).to_numpy()
    ef, ev = np.asarray(g.edge_factor), np.asarray(g.edge_var)
    is_head = np.asarray(g.edge_is_head)
    tp = orders.topological_positions(g)[np.asarray(g.factor_head)[ef]]
    eid = np.arange(ef.size)
    heads, bodies = np.flatnonzero(is_head), np.flatnonzero(~is_head)
    fwd = heads[np.lexsort((eid[heads], tp[heads]))]
    bwd = bodies[np.lexsort((ev[bodies], ef[bodies], -tp[bodies]))]
    seq = np.concatenate([bwd, fwd] if body_first else [fwd, bwd])
    assert np.array_equal(np.argsort(orders.topo(g, body_first).rank), seq)
