import jax
import numpy as np
import pytest
from graphs import random_factors

from fastlbp.core.graph import AND, OR, Factor, GraphError, from_arrays, from_factors


def test_csr_layout_and_dual_permutation():
    factors = [Factor(AND, 2, (0, 1), 0.9, 0.0), Factor(OR, 0, (1,), 1.0, 0.0), Factor(AND, 1, (), 0.5, 0.5)]
    g = from_factors(factors)
    assert (g.num_vars, g.num_factors, g.num_edges) == (3, 3, 6)
    assert g.factor_offsets.tolist() == [0, 3, 5, 6]
    assert g.edge_var.tolist() == [2, 0, 1, 0, 1, 1]
    assert g.edge_is_head.tolist() == [True, False, False, True, False, True]
    assert g.edge_factor.tolist() == [0, 0, 0, 1, 1, 2]
    # Variable order: sorted by variable, then by factor.
    assert g.slot_var.tolist() == [0, 0, 1, 1, 1, 2]
    assert g.edge_var[g.var_edges].tolist() == g.slot_var.tolist()
    assert g.edge_slot[g.var_edges].tolist() == list(range(6))
    assert g.var_offsets.tolist() == [0, 2, 5, 6]
    assert g.factors() == factors


def test_random_graphs_round_trip_and_invariants():
    rng = np.random.default_rng(1)
    for _ in range(20):
        V = int(rng.integers(1, 30))
        factors = random_factors(rng, V, int(rng.integers(1, 40)), max_body=6)
        g = from_factors(factors, V)
        assert g.factors() == factors
        assert np.all(np.diff(g.slot_var) >= 0)
        assert np.array_equal(np.sort(g.var_edges), np.arange(g.num_edges))
        for v in range(V):
            slots = range(g.var_offsets[v], g.var_offsets[v + 1])
            assert all(g.edge_var[g.var_edges[s]] == v for s in slots)
        assert g.edge_var.dtype == np.int32 and g.var_edges.dtype == np.int32


def test_graph_is_a_pytree_of_arrays():
    import fastlbp.core.equations  # noqa: F401  (where JAX meets the graph: it registers the pytree)

    g = from_factors([Factor(AND, 0, (), 0.3, 0.3)])
    leaves = jax.tree_util.tree_leaves(g)
    assert len(leaves) >= 12 and all(isinstance(x, np.ndarray) for x in leaves)
    doubled = jax.tree_util.tree_map(lambda x: x, g)
    assert doubled.num_edges == g.num_edges


@pytest.mark.parametrize(
    ("factors", "num_vars", "message"),
    [
        ([Factor(AND, 0, (5,), 0.9, 0.0)], 3, "body variable 5 is out of range"),
        ([Factor(AND, -1, (), 0.9, 0.9)], 3, "head variable -1 is out of range"),
        ([Factor(AND, 0, (1,), 1.5, 0.0)], None, "p1 = 1.5 is not a probability"),
        ([Factor(OR, 0, (1,), 0.5, float("nan"))], None, "p2 = nan is not a probability"),
        ([Factor(AND, 0, (1, 1), 0.5, 0.0)], None, "variable 1 appears twice"),
        ([Factor(AND, 0, (0,), 0.5, 0.0)], None, "variable 0 appears twice"),
        ([Factor(AND, 0, (1,), 0.5, 0.0)], 3, "variable 2 is in no factor"),
        ([Factor(7, 0, (1,), 0.5, 0.0)], None, "unknown kind 7"),
        ([], None, "no factors"),
    ],
)
def test_validation_errors(factors, num_vars, message):
    with pytest.raises(GraphError, match=message):
        from_factors(factors, num_vars)


def test_bad_offsets_rejected():
    with pytest.raises(GraphError, match="CSR offsets"):
        from_arrays([AND], [0], [0, 2], [1], [0.5], [0.5])
