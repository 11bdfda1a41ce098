"""Dependency analysis: strict weak order on edges -> numbered batches (paper Section 4.3).

Edge e = (a, v) reads N_E(e) = {(a*, v*) : v* in N(a) minus v, a* in N(v*) minus a}
(Definition 4.1). With an order (`orders.Order`, e' precedes e iff
rank(e') < rank(e)) e reads the new value of e' in N_E(e) when e' precedes e and
the old value otherwise. A batch is computed from the state at its start.

* `levelling` (default): exact levelling, the least levels with
      level(e) >= level(e') + 1   for e' in N_E(e) that precede e (reads the new value),
      level(e) >= level(e'')      for e'' preceding e with e in N_E(e'') (read e's old value).
  For a weak order (stages) every stage gets one level, so a stage's edges read
  each other's old values.
* `algorithm3`: the paper's Algorithm 3, greedy cuts along the order.

Both are vectorised. Time is the rank; the edges of a factor that are
consecutive in the order form a *block*. A block reads every variable of its
factor once (its *read events*); other factors' writes before the block's
first rank are new to it. Levelling is a monotone fixpoint iteration from 0
(each pass: segmented prefix maxima over every variable's writes and reads in
time order), which reaches the least solution after about as many passes as
there are levels.

A factor split into several blocks (TOPO, SEQRND, custom orders) is treated
conservatively by levelling: its later blocks also wait for its own earlier
blocks' messages (a superset of N_E; results stay exact, batches may be a few
more). Algorithm 3 uses N_E exactly.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from fastlbp.graph import FactorGraph
from schedules.orders import Order

ANALYSES = ("levelling", "algorithm3")


@dataclasses.dataclass(frozen=True)
class Analysis:
    """Batches of one order.

    Attributes:
        batch: (E,) int64 batch number of each edge (0-based; batches run in order).
        num_batches: number of batches.
        method: "levelling" or "algorithm3".
        seconds: time the analysis took.
        order: the order analysed.
        passes: fixpoint passes (levelling) or 1.
    """

    batch: np.ndarray
    num_batches: int
    method: str
    seconds: float
    order: Order
    passes: int = 1


@dataclasses.dataclass
class _Structure:
    """Blocks, read events and the per-variable timelines of one order (numpy)."""

    num_edges: int
    rank: np.ndarray  # (E,) int64
    seq: np.ndarray  # (E,) edges sorted by (rank, factor, edge)
    edge_block: np.ndarray  # (E,) block of each edge
    block_thr: np.ndarray  # (NB,) rank of the block's first edge
    block_factor: np.ndarray  # (NB,)
    re_block: np.ndarray  # (R,) read events: block, sorted by block
    re_var: np.ndarray  # (R,) variable read
    re_edge: np.ndarray  # (R,) the factor's own edge at that variable
    re_first: np.ndarray  # (R,) True at the first read event of each block
    re_last: np.ndarray  # (R,) True at the last read event of each block
    edge_re: np.ndarray  # (E,) the read event of the edge's own variable in its block
    wt_edges: np.ndarray  # (E,) edges sorted by (var, rank): the write timelines
    wt_seg_start: np.ndarray  # (E,) True where a variable's writes start
    re_wpos: np.ndarray  # (R,) index into wt_edges of the last write before the block (-1: none)
    rt_order: np.ndarray  # (R,) read events sorted by (var, thr): the read timelines
    rt_seg_start: np.ndarray  # (R,)
    edge_rpos: np.ndarray  # (E,) index into rt_order of the last read of the edge's var before
    #                        its block by another block (-1: none)
    unit: np.ndarray | None  # (E,) rank group for weak orders (one level per group), else None
    # Factors split into several blocks: exclude the factor's own earlier messages exactly.
    a_own: np.ndarray  # (Ra,) read events whose own write came before their block
    a_left: np.ndarray  # (Ra,) last write position before the own one (-1: none)
    a_lo: np.ndarray  # (Ra,) writes after the own one up to the block: [a_lo, a_hi]
    a_hi: np.ndarray
    b_edges: np.ndarray  # (Pb,) edges with own earlier read events at their variable
    b_lo: np.ndarray  # (Pb,) read-timeline ranges between those own events: [b_lo, b_hi]
    b_hi: np.ndarray
    b_prefix: np.ndarray  # (E,) last read position before the first own one (or edge_rpos)


def _seg_cummax(x: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Segmented running maximum (segments begin where seg_start is True); x >= -1."""
    seg = np.cumsum(seg_start) - 1
    big = np.int64(x.max(initial=0) + 2)
    return np.maximum.accumulate(x + 2 + seg * big) - 2 - seg * big


def _loo_max(x: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Per position, the maximum over the other positions of its segment (-1 if none)."""
    fwd = _seg_cummax(x, first)
    bwd = _seg_cummax(x[::-1], last[::-1])[::-1]
    left = np.full_like(x, -1)
    right = np.full_like(x, -1)
    left[1:] = np.where(first[1:], -1, fwd[:-1])
    right[:-1] = np.where(last[:-1], -1, bwd[1:])
    return np.maximum(left, right)


def build_structure(graph: FactorGraph, order: Order) -> _Structure:
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor, np.int64)
    ev = np.asarray(g.edge_var, np.int64)
    off = np.asarray(g.factor_offsets, np.int64)
    num_edges = ef.size
    rank = np.asarray(order.rank, np.int64)
    total = order.is_total
    eid = np.arange(num_edges)
    seq = np.argsort(rank, kind="stable") if total else np.lexsort((eid, ef, rank))
    f_seq = ef[seq]
    r_seq = rank[seq]
    new_block = np.ones(num_edges, bool)
    new_block[1:] = (f_seq[1:] != f_seq[:-1]) | (r_seq[1:] != r_seq[:-1] if not total else False)
    block_of_seq = np.cumsum(new_block) - 1
    edge_block = np.empty(num_edges, np.int64)
    edge_block[seq] = block_of_seq
    block_first = seq[new_block]
    block_thr = rank[block_first]
    block_factor = ef[block_first]

    # Read events: every variable of the block's factor, block by block.
    ksz = off[block_factor + 1] - off[block_factor]
    re_start = np.zeros(ksz.size + 1, np.int64)
    np.cumsum(ksz, out=re_start[1:])
    num_re = int(re_start[-1])
    re_block = np.repeat(np.arange(ksz.size), ksz)
    re_edge = np.repeat(off[block_factor] - re_start[:-1], ksz) + np.arange(num_re)
    re_var = ev[re_edge]
    re_first = np.zeros(num_re, bool)
    re_first[re_start[:-1]] = True
    re_last = np.zeros(num_re, bool)
    re_last[re_start[1:] - 1] = True
    edge_re = re_start[edge_block] + (eid - off[ef])
    re_thr = block_thr[re_block]

    # Write timelines: each variable's incoming edges by rank.
    wt_edges = np.lexsort((rank, ev))
    wkey_var = ev[wt_edges]
    wt_seg_start = np.ones(num_edges, bool)
    wt_seg_start[1:] = wkey_var[1:] != wkey_var[:-1]
    # Last write at var w with rank < thr: search in (var, rank) lexicographic order.
    wkey = wkey_var * (rank.max() + 2) + rank[wt_edges]
    pos = np.searchsorted(wkey, re_var * (rank.max() + 2) + re_thr, side="left") - 1
    valid = (pos >= 0)
    valid[valid] &= wkey_var[pos[valid]] == re_var[valid]
    re_wpos = np.where(valid, pos, -1)

    # Read timelines: each variable's read events by the reading block's rank.
    rt_order = np.lexsort((re_thr, re_var))
    rvar = re_var[rt_order]
    rt_seg_start = np.ones(num_re, bool)
    rt_seg_start[1:] = rvar[1:] != rvar[:-1]
    rkey = rvar * (rank.max() + 2) + re_thr[rt_order]
    thr_e = block_thr[edge_block]
    pos = np.searchsorted(rkey, ev * (rank.max() + 2) + thr_e, side="left") - 1
    valid = pos >= 0
    valid[valid] &= rvar[pos[valid]] == ev[valid]
    edge_rpos = np.where(valid, pos, -1)

    unit = None if total else np.unique(rank, return_inverse=True)[1].astype(np.int64)

    # A: a read event whose factor wrote the variable in an earlier block skips that write.
    wt_pos = np.empty(num_edges, np.int64)
    wt_pos[wt_edges] = np.arange(num_edges)
    own_j = wt_pos[re_edge]
    a_own = np.flatnonzero((re_wpos >= 0) & (own_j <= re_wpos))
    j = own_j[a_own]
    a_left = np.where(wt_seg_start[j], -1, j - 1)
    a_lo, a_hi = j + 1, re_wpos[a_own]

    # B: an edge skips the reads of its variable by its own factor's earlier blocks.
    nb = block_factor.size
    fb = np.lexsort((np.arange(nb), block_factor))  # blocks by factor, then time
    fb_start = np.searchsorted(block_factor[fb], np.arange(off.size - 1))
    block_ord = np.empty(nb, np.int64)
    block_ord[fb] = np.arange(nb) - fb_start[block_factor[fb]]
    e_ord = block_ord[edge_block]
    b_prefix = edge_rpos.copy()
    b_edges = np.zeros(0, np.int64)
    b_lo = b_hi = b_edges
    if e_ord.max(initial=0) > 0:
        rt_pos = np.empty(num_re, np.int64)
        rt_pos[rt_order] = np.arange(num_re)
        has = np.flatnonzero(e_ord > 0)
        cnt = e_ord[has]
        pe = np.repeat(has, cnt)
        i = np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        earlier_block = fb[fb_start[ef[pe]] + i]
        own_pos = rt_pos[re_start[earlier_block] + (pe - off[ef[pe]])]
        o = np.lexsort((own_pos, pe))
        pe, own_pos = pe[o], own_pos[o]
        first = np.ones(pe.size, bool)
        first[1:] = pe[1:] != pe[:-1]
        last = np.ones(pe.size, bool)
        last[:-1] = pe[1:] != pe[:-1]
        seg_first = rt_seg_start[own_pos[first]]
        b_prefix[pe[first]] = np.where(seg_first, -1, own_pos[first] - 1)
        nxt = np.where(last, edge_rpos[pe], np.roll(own_pos, -1) - 1)
        b_edges, b_lo, b_hi = pe, own_pos + 1, nxt
    return _Structure(num_edges, rank, seq, edge_block, block_thr, block_factor, re_block, re_var,
                      re_edge, re_first, re_last, edge_re, wt_edges, wt_seg_start, re_wpos,
                      rt_order, rt_seg_start, edge_rpos, unit, a_own, a_left, a_lo, a_hi,
                      b_edges, b_lo, b_hi, b_prefix)


def _range_max(vals: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(vals[lo..hi]) per range (sparse table); -1 for empty ranges."""
    out = np.full(lo.shape, -1, np.int64)
    ok = hi >= lo
    if not ok.any():
        return out
    lo, hi = lo[ok], hi[ok]
    length = hi - lo + 1
    k = np.floor(np.log2(length)).astype(np.int64)
    best = np.full(lo.shape, -1, np.int64)
    table = vals
    for level in range(int(k.max()) + 1):
        if level:
            step = 1 << (level - 1)
            table = np.maximum(table, np.concatenate([table[step:], np.full(step, -1, np.int64)]))
        sel = k == level
        if sel.any():
            best[sel] = np.maximum(table[lo[sel]], table[hi[sel] - (1 << level) + 1])
    out[ok] = best
    return out


def _level_pass(s: _Structure, lev: np.ndarray) -> np.ndarray:
    # A: one more than the newest level written, before the block, into another variable of
    # the factor.
    wvals = lev[s.wt_edges]
    wmax = _seg_cummax(wvals, s.wt_seg_start)
    x = np.where(s.re_wpos >= 0, wmax[s.re_wpos], -1)
    if s.a_own.size:
        left = np.where(s.a_left >= 0, wmax[np.maximum(s.a_left, 0)], -1)
        x[s.a_own] = np.maximum(left, _range_max(wvals, s.a_lo, s.a_hi))
    a = 1 + _loo_max(x, s.re_first, s.re_last)[s.edge_re]
    lev = np.maximum(lev, a)
    # B: no lower than any earlier block that read this edge's old value.
    in_block = s.edge_block[s.re_edge] == s.re_block
    val = np.where(in_block, lev[s.re_edge], -1)
    readlev = _loo_max(val, s.re_first, s.re_last)
    rvals = readlev[s.rt_order]
    rmax = _seg_cummax(rvals, s.rt_seg_start)
    b = np.where(s.b_prefix >= 0, rmax[s.b_prefix], -1)
    if s.b_edges.size:
        np.maximum.at(b, s.b_edges, _range_max(rvals, s.b_lo, s.b_hi))
    lev = np.maximum(lev, b)
    if s.unit is not None:
        lev = np.maximum.reduceat(lev[np.argsort(s.unit, kind="stable")],
                                  np.searchsorted(np.sort(s.unit), np.arange(s.unit.max() + 1)))[s.unit]
    return lev


def levelling(graph: FactorGraph, order: Order, max_passes: int | None = None) -> Analysis:
    """Exact levelling (the default analysis)."""
    t0 = time.perf_counter()
    s = build_structure(graph, order)
    lev = np.zeros(s.num_edges, np.int64)
    passes = 0
    limit = max_passes or s.num_edges + 2
    while True:
        new = _level_pass(s, lev)
        passes += 1
        if np.array_equal(new, lev) or passes >= limit:
            break
        lev = new
    lev = _compact(new)
    return Analysis(lev, int(lev.max(initial=-1)) + 1, "levelling", time.perf_counter() - t0,
                    order, passes)


def _compact(lev: np.ndarray) -> np.ndarray:
    return np.unique(lev, return_inverse=True)[1].astype(np.int64).reshape(lev.shape)


def algorithm3(graph: FactorGraph, order: Order) -> Analysis:
    """The paper's Algorithm 3: walk the order, cut a batch when an edge reads one in it."""
    t0 = time.perf_counter()
    s = build_structure(graph, order)
    # Newest rank written, before the block, by another factor into each variable read.
    wranks = s.rank[s.wt_edges]
    p = s.re_wpos
    own = (p >= 0) & (s.wt_edges[np.maximum(p, 0)] == s.re_edge)
    # Skip the factor's own write; if it was the variable's first, nothing is left.
    ok = (p >= 0) & ~(own & s.wt_seg_start[np.maximum(p, 0)])
    p = np.where(own, p - 1, p)
    x = np.where(ok, wranks[np.maximum(p, 0)], -1)
    newest = _loo_max(x, s.re_first, s.re_last)[s.edge_re]  # (E,) rank of newest read, or -1
    if s.unit is None:
        keys = s.rank[s.seq]
        need = newest[s.seq]
    else:
        keys = np.unique(s.rank)
        need = np.full(keys.size, -1, np.int64)
        np.maximum.at(need, s.unit, newest)
    cut = _greedy_cuts(keys.tolist(), need.tolist())
    if s.unit is None:
        batch = np.empty(s.num_edges, np.int64)
        batch[s.seq] = cut
    else:
        batch = np.asarray(cut, np.int64)[s.unit]
    return Analysis(batch, int(batch.max(initial=-1)) + 1, "algorithm3", time.perf_counter() - t0,
                    order)


def _greedy_cuts(keys: list[int], need: list[int]) -> np.ndarray:
    out = np.empty(len(keys), np.int64)
    start = -1
    b = -1
    for i, (k, n) in enumerate(zip(keys, need, strict=True)):
        if b < 0 or n >= start:
            b += 1
            start = k
        out[i] = b
    return out


def analyse(graph: FactorGraph, order: Order, method: str = "levelling") -> Analysis:
    if method == "levelling":
        return levelling(graph, order)
    if method == "algorithm3":
        return algorithm3(graph, order)
    raise ValueError(f"unknown analysis {method!r} (expected one of {ANALYSES})")


def group_var_to_factor(graph: FactorGraph, batch: np.ndarray) -> list[np.ndarray]:
    """The paper's Algorithm 4: per batch, the variable-to-factor edges its updates read.

    Returns:
        One (n_i,) int64 array of edges (factor order) per batch: every edge
        (v*, a) with v* a neighbour of a touched factor a other than the updated
        variable (an edge serves both directions, so one index names it).
    """
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor, np.int64)
    off = np.asarray(g.factor_offsets, np.int64)
    out = []
    for b in range(int(batch.max(initial=-1)) + 1):
        s = np.flatnonzero(batch == b)
        touched = np.unique(ef[s])
        sizes = off[touched + 1] - off[touched]
        t = np.repeat(off[touched] - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())
        # Own edge excluded only where a factor updates a single edge of its own in the batch.
        counts = np.bincount(ef[s], minlength=ef.max() + 1)
        single = s[counts[ef[s]] == 1]
        out.append(np.setdiff1d(t, single))
    return out


# ---------------------------------------------------------------------------------------------
# Brute force (tests only): the definitions written out with explicit N_E.

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
