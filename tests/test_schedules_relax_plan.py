"""schedules/relax_plan.py: the reader groups of an order and when relaxation gives up on it."""

import numpy as np
from conftest import DATA
from graphs import random_factors
from hypothesis import given, settings
from hypothesis import strategies as st

from datalog import causal_fg
from schedules import orders, relax_plan


def test_reader_groups_seqfix_one_per_factor_topo_two():
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    g = model.graph
    group, _ = relax_plan.reader_groups(g, orders.seqfix(g))
    assert np.array_equal(group, np.asarray(g.edge_factor))
    group, _ = relax_plan.reader_groups(g, orders.topo(g))
    sizes = np.diff(np.asarray(g.factor_offsets))
    # Head forward, bodies backward: two runs per factor with a body, except where the two
    # runs meet (the last head forward is followed by its own bodies).
    runs = g.num_factors + int(np.sum(sizes > 1))
    assert runs - 1 <= group.max() + 1 <= runs
    # SEQRND splits factors into ~one run per edge: no relaxation plan, the chunk loop runs
    # it (tests/test_engines.py checks the dispatcher's fallback).
    assert relax_plan.build(g, orders.seqrnd(g)[0], 10) is None


def test_seqfix_plan_is_the_graph_topo_plan_a_virtual_graph():
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    g = model.graph
    seqfix = relax_plan.build(g, orders.seqfix(g), 5)
    # The graph serves as its own virtual graph: no second copy of it, nor of the identity `own`.
    assert seqfix.vgraph is None and seqfix.out_edge is None and seqfix.own is None
    assert seqfix.virtual_edges == g.num_edges
    assert int(seqfix.max_passes) == 5
    topo = relax_plan.build(g, orders.topo(g), 0)
    assert topo.virtual_edges > g.num_edges and topo.out_edge.shape == (g.num_edges,)
    assert topo.virtual_edges <= relax_plan.MAX_VIRTUAL_RATIO * g.num_edges
    assert int(topo.max_passes) == 1  # at least one pass


def _virtual_by_from_arrays(g, group_factor, v_off, v_own):
    """The virtual graph as `from_arrays` builds it (the reference for `relax_plan.virtual_graph`)."""
    from fastlbp.core.graph import from_arrays
    sizes = np.diff(v_off)
    body = ~np.asarray(g.edge_is_head, bool)[v_own]
    body_off = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes - 1, out=body_off[1:])
    return from_arrays(np.asarray(g.factor_kind)[group_factor], np.asarray(g.factor_head)[group_factor],
                       body_off, np.asarray(g.edge_var)[v_own[body]], np.asarray(g.p1)[group_factor],
                       np.asarray(g.p2)[group_factor], num_vars=g.num_vars, check_coverage=False)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_virtual_graph_equals_from_arrays(seed):
    import dataclasses

    from fastlbp.core.graph import from_factors
    rng = np.random.default_rng(seed)
    g = from_factors(random_factors(rng, int(rng.integers(2, 12)), int(rng.integers(1, 12)),
                                    max_body=int(rng.integers(1, 6)))).to_numpy()
    f_off = np.asarray(g.factor_offsets, np.int64)
    for o in (orders.topo(g), orders.topo(g, True), orders.seqrnd(g, seed, 1)[0],
              orders.Order(rng.integers(0, 3, g.num_edges), "stages")):
        group, _ = relax_plan.reader_groups(g, o)
        group_factor = np.zeros(int(group.max()) + 1, np.int64)
        group_factor[group] = np.asarray(g.edge_factor)
        sizes = np.diff(f_off)[group_factor]
        v_off = np.zeros(sizes.size + 1, np.int64)
        np.cumsum(sizes, out=v_off[1:])
        v_own = np.repeat(f_off[group_factor] - v_off[:-1], sizes) + np.arange(int(v_off[-1]))
        got = relax_plan.virtual_graph(g, group_factor, v_off, v_own)
        ref = _virtual_by_from_arrays(g, group_factor, v_off, v_own)
        for f in dataclasses.fields(ref):
            a, b = np.asarray(getattr(got, f.name)), np.asarray(getattr(ref, f.name))
            assert a.dtype == b.dtype and np.array_equal(a, b), (o.name, f.name)
