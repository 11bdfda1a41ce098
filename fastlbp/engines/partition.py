"""Factors split into parts of about equal edges with few variables shared between parts (host, numpy).

    part = partition.factor_parts(graph, parts=4)      # (F,) int32 part of each factor
    stats = partition.cut_stats(graph, part, 4)        # edges per part, variables on the cut

The sharded PARALL engine (`sharded_parall`) keeps each factor, with all its edges, on one device, so
factor-side sums never cross devices; a variable whose factors sit on several devices is *on the cut*,
and its incoming messages' sums are exchanged every iteration. The cut is kept small by an order of
the factors (`factor_order`): factors joined by a variable of two factors (in a derivation graph, a
clause's AND factor and its tuple's OR factor) stay together, and these groups follow a reverse
Cuthill-McKee order of the bipartite variable-factor graph (a breadth-first order that keeps each
connected component contiguous, numbering its nodes in bands). The order is then cut into runs of
equal edge counts.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components, reverse_cuthill_mckee

from fastlbp.core.graph import FactorGraph


def factor_order(graph: FactorGraph) -> np.ndarray:
    """(F,) the factors in an order whose runs cut few variables (module docstring).

    Factors joined by a variable of two factors (a derivation graph's clause: its AND factor and the
    OR factor of the tuple it derives) form a group, kept contiguous so that such a variable is never
    on the cut; groups follow each other by their first factor in reverse Cuthill-McKee order of the
    bipartite variable-factor graph, and a group's factors keep that order. On a generated graph of
    1M edges cut in 4, 44K of 267K variables were on the cut; in the plain reverse Cuthill-McKee
    order 208K, in a random order 192K.
    """
    nv, nf = graph.num_vars, graph.num_factors
    var = np.asarray(graph.edge_var, np.int64)
    edge_factor = np.asarray(graph.edge_factor, np.int64)
    fac = nv + edge_factor
    rows = np.concatenate([var, fac])
    cols = np.concatenate([fac, var])
    adj = csr_matrix((np.ones(rows.size, np.int8), (rows, cols)), shape=(nv + nf, nv + nf))
    rcm = reverse_cuthill_mckee(adj, symmetric_mode=True)
    position = np.empty(nf, np.int64)
    position[rcm[rcm >= nv] - nv] = np.arange(nf)
    offsets = np.asarray(graph.var_offsets, np.int64)
    two = np.flatnonzero(np.diff(offsets) == 2)
    slots = np.asarray(graph.var_edges, np.int64)
    pairs = coo_matrix((np.ones(two.size, np.int8), (edge_factor[slots[offsets[two]]],
                                                      edge_factor[slots[offsets[two] + 1]])), shape=(nf, nf))
    _, group = connected_components(pairs, directed=False)
    first = np.full(group.max(initial=0) + 1, nf, np.int64)
    np.minimum.at(first, group, position)
    return np.lexsort((position, first[group]))


def factor_parts(graph: FactorGraph, parts: int, order: np.ndarray | None = None) -> np.ndarray:
    """(F,) int32 the part (0 .. parts-1) of each factor: runs of `order` (default `factor_order`)
    holding about an equal share of the edges each."""
    parts = int(parts)
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    nf = graph.num_factors
    if parts == 1:
        return np.zeros(nf, np.int32)
    order = factor_order(graph) if order is None else np.asarray(order, np.int64)
    sizes = np.diff(np.asarray(graph.factor_offsets, np.int64))[order]
    ends = np.cumsum(sizes)  # edges up to and including each factor of the order
    # A factor goes to the part its middle edge falls in: equal shares of edges, whole factors.
    middle = ends - sizes / 2
    share = np.minimum((middle * parts // max(int(ends[-1]), 1)).astype(np.int64), parts - 1)
    out = np.empty(nf, np.int32)
    out[order] = share
    return out


def cut_stats(graph: FactorGraph, factor_part: np.ndarray, parts: int) -> dict:
    """Edges and factors per part, and the variables on the cut (in the factors of several parts)."""
    part_of_edge = np.asarray(factor_part, np.int64)[np.asarray(graph.edge_factor)]
    pairs = np.unique(np.asarray(graph.edge_var, np.int64) * parts + part_of_edge)
    parts_per_var = np.bincount(pairs // parts, minlength=graph.num_vars)
    return {"edges": np.bincount(part_of_edge, minlength=parts).tolist(),
            "factors": np.bincount(np.asarray(factor_part), minlength=parts).tolist(),
            "cut_variables": int(np.count_nonzero(parts_per_var > 1))}


__all__ = ["factor_order", "factor_parts", "cut_stats"]
