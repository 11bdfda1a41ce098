"""schedules/relax_plan.py: the reader groups of an order and when relaxation gives up on it."""

import numpy as np
from conftest import DATA

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
