"""The schedule analysis' definitions written out edge by edge with explicit read sets N_E: the
reference `schedules.analysis`'s array algorithms are tested against (small graphs only)."""

from __future__ import annotations

import numpy as np

from fastlbp.core.graph import FactorGraph
from schedules.orders import Order


def _compact(lev: np.ndarray) -> np.ndarray:
    """Levels renumbered 0..k-1 in order (the analysis' batches are dense)."""
    return np.unique(lev, return_inverse=True)[1].astype(np.int64).reshape(lev.shape)



def reads_of(graph: FactorGraph) -> list[set[int]]:
    """N_E(e) for every edge (explicit sets; small graphs only)."""
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor)
    ev = np.asarray(g.edge_var)
    off = np.asarray(g.factor_offsets)
    by_var: dict[int, list[int]] = {}
    for e, v in enumerate(ev):
        by_var.setdefault(int(v), []).append(e)
    out = []
    for e in range(ef.size):
        a, v = int(ef[e]), int(ev[e])
        r = set()
        for e2 in range(off[a], off[a + 1]):
            w = int(ev[e2])
            if w == v:
                continue
            r.update(x for x in by_var[w] if ef[x] != a)
        out.append(r)
    return out


def is_valid(graph: FactorGraph, order: Order, batch: np.ndarray) -> bool:
    """Whether batches realise the order exactly (new iff preceding) for every read."""
    rank = order.rank
    for e, rd in enumerate(reads_of(graph)):
        for e2 in rd:
            if rank[e2] < rank[e] and not batch[e2] < batch[e]:
                return False
            if rank[e2] >= rank[e] and not batch[e2] >= batch[e]:
                return False
    return True


def brute_levelling(graph: FactorGraph, order: Order) -> np.ndarray:
    """The levelling formula evaluated edge by edge in rank order (total orders)."""
    reads = reads_of(graph)
    readers: list[set[int]] = [set() for _ in reads]
    for e, rd in enumerate(reads):
        for e2 in rd:
            readers[e2].add(e)
    rank = order.rank
    lev = np.zeros(rank.size, np.int64)
    for e in np.argsort(rank, kind="stable"):
        lo = [lev[x] + 1 for x in reads[e] if rank[x] < rank[e]]
        lo += [lev[x] for x in readers[e] if rank[x] < rank[e]]
        lev[e] = max(lo, default=0)
    return _compact(lev)
