"""Dependency analysis: strict weak order on edges -> numbered batches (paper Section 4.3).

Edge e = (a, v) reads N_E(e) = {(a*, v*) : v* in N(a) minus v, a* in N(v*) minus a}
(Definition 4.1). With an order (`orders.Order`, e' precedes e iff
rank(e') < rank(e)) e reads the new value of e' in N_E(e) when e' precedes e and
the old value otherwise. A batch is computed from the state at its start.

* `levelling` (default): exact levelling, the least levels with
      level(e) >= level(e') + 1   for e' in N_E(e) that precede e (reads the new value),
      level(e) >= level(e'')      for e'' preceding e with e in N_E(e'') (read e's old value).
  For a weak order (stages) every stage gets one level, so a stage's edges read
  each other's old values. Computed by one walk along the order (compiled by numba
  where installed) or, for weak orders with large stages, one vectorised step per
  stage: `schedules.levels`, which says why (the orders are thousands of levels deep).
* `algorithm3`: the paper's Algorithm 3, greedy cuts along the order.

Algorithm 3 is vectorised. `levelling(..., window=W)` (or `scan_after=`) runs the
earlier windowed levelling, kept as the reference the tests compare with: time is
the rank; the edges of a factor that are consecutive in the order form a *block*.
A block reads every variable of its factor once (its *read events*); other
factors' writes before the block's first rank are new to it. Inside a window the
levels are a monotone fixpoint iteration from 0 (each pass: segmented prefix
maxima over every variable's writes and reads in time order), which reaches the
least solution after about as many passes as there are levels; a window still
moving after `SCAN_AFTER` passes is instead walked block by block in time order
(the same least solution in one walk).

A factor split into several blocks (TOPO, SEQRND, custom orders) never waits for
its own messages: its later blocks skip the writes and reads of its earlier ones
(N_E excludes the edge's own factor). Algorithm 3 uses N_E exactly.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from fastlbp.core.graph import FactorGraph
from schedules import levels as _levels
from schedules.levels import Top2 as _Top2
from schedules.levels import loo_max as _loo_max
from schedules.levels import seg_cummax as _seg_cummax
from schedules.orders import Order, unique

ANALYSES = ("levelling", "algorithm3")


@dataclasses.dataclass(frozen=True)
class Analysis:
    """Batches of one order.

    Attributes:
        batch: (E,) int64 batch number of each edge (0-based; batches run in order).
        num_batches: number of batches.
        analysis: "levelling" or "algorithm3" (`Spec.analysis`).
        seconds: time the analysis took.
        order: the order analysed.
        passes: vectorised steps: stages levelled one at a time, fixpoint passes (the windowed
            reference), 1 (algorithm3) or 0 (a walk).
        scans: walks along the order: 1 (`levels.walk`), or windows walked (the windowed reference).
        how: how levelling ran: "walk", "numba" (the walk compiled), "stages" or "windows".
    """

    batch: np.ndarray
    num_batches: int
    analysis: str
    seconds: float
    order: Order
    passes: int = 1
    scans: int = 0
    how: str = ""


@dataclasses.dataclass
class _Arrays:
    """The graph and order as flat numpy arrays."""

    ef: np.ndarray  # (E,) int64 factor of each edge
    ev: np.ndarray  # (E,) int64 variable of each edge
    off: np.ndarray  # (F+1,) int64 factor offsets
    rank: np.ndarray  # (E,) int64
    total: bool
    seq: np.ndarray  # (E,) edges by (rank, factor, edge): time order
    cut_ok: np.ndarray  # (E,) bool, a window may start at this position of seq
    num_vars: int

    @classmethod
    def of(cls, graph: FactorGraph, order: Order) -> _Arrays:
        g = graph.to_numpy()
        ef = np.asarray(g.edge_factor, np.int64)
        rank = np.asarray(order.rank, np.int64)
        total = order.is_total
        eid = np.arange(ef.size)
        seq = np.argsort(rank, kind="stable") if total else np.lexsort((eid, ef, rank))
        f_seq, r_seq = ef[seq], rank[seq]
        cut_ok = np.ones(ef.size, bool)
        cut_ok[1:] = (r_seq[1:] != r_seq[:-1]) if not total else (f_seq[1:] != f_seq[:-1])
        return cls(ef, np.asarray(g.edge_var, np.int64), np.asarray(g.factor_offsets, np.int64),
                   rank, total, seq, cut_ok, graph.num_vars)


@dataclasses.dataclass
class _Structure:
    """Blocks, read events and timelines of a window of the order (local edge ids = positions)."""

    edges: np.ndarray  # (n,) global edge ids in time order
    ef: np.ndarray  # (n,)
    ev: np.ndarray  # (n,)
    rank: np.ndarray  # (n,)
    edge_block: np.ndarray  # (n,) local block of each edge
    re_block: np.ndarray  # (R,) read events: block, sorted by block
    re_var: np.ndarray  # (R,) variable read
    re_factor: np.ndarray  # (R,) reading factor
    re_local: np.ndarray  # (R,) local id of the factor's own edge at that variable (-1: outside)
    re_first: np.ndarray  # (R,) first read event of its block
    re_last: np.ndarray  # (R,) last read event of its block
    in_block: np.ndarray  # (R,) the own edge is in the reading block
    edge_re: np.ndarray  # (n,) the read event of the edge's own variable in its block
    wt_order: np.ndarray  # (n,) local edges by (var, rank): write timelines
    wt_seg_start: np.ndarray  # (n,)
    re_wpos: np.ndarray  # (R,) last write position before the block (-1: none)
    rt_order: np.ndarray  # (R,) read events by (var, rank): read timelines
    rt_seg_start: np.ndarray  # (R,)
    unit: np.ndarray | None  # (n,) local stage (weak orders: one level per stage)
    # A factor split into several blocks skips its own earlier messages exactly.
    a_own: np.ndarray  # (Ra,) read events whose own write came before their block
    a_left: np.ndarray  # (Ra,) last write position before the own one (-1: none)
    a_lo: np.ndarray  # (Ra,) writes after the own one up to the block: [a_lo, a_hi]
    a_hi: np.ndarray
    b_edges: np.ndarray  # (Pb,) edges with own earlier read events at their variable
    b_lo: np.ndarray  # (Pb,) read-timeline ranges between those events: [b_lo, b_hi]
    b_hi: np.ndarray
    b_prefix: np.ndarray  # (n,) last read position before the first own one (-1: none)


def _search_last_before(keys_var, keys_rank, var, rank, scale, low):
    """Index of the last (var, rank') < (var, rank) in a (var, rank)-sorted timeline, or -1.

    Keys are var * scale + (rank - low), ranks in [low, low + scale - 2]: order-preserving only with the
    ranks shifted to start at 0 (a custom order's stages may be negative: -5 collided with the ranks of
    the variable before).
    """
    pos = np.searchsorted(keys_var * scale + (keys_rank - low), var * scale + (rank - low), side="left") - 1
    ok = pos >= 0
    ok[ok] &= keys_var[pos[ok]] == var[ok]
    return np.where(ok, pos, -1)


def _structure(G: _Arrays, edges: np.ndarray, local_of: np.ndarray) -> _Structure:
    n = edges.size
    local_of[edges] = np.arange(n)
    ef, ev, rank = G.ef[edges], G.ev[edges], G.rank[edges]
    low = np.int64(G.rank.min()) if G.rank.size else np.int64(0)
    scale = np.int64(G.rank.max()) - low + 2 if G.rank.size else np.int64(2)
    new_block = np.ones(n, bool)
    new_block[1:] = (ef[1:] != ef[:-1]) | (rank[1:] != rank[:-1] if not G.total else False)
    edge_block = np.cumsum(new_block) - 1
    block_thr = rank[new_block]
    block_factor = ef[new_block]
    nb = block_factor.size

    ksz = G.off[block_factor + 1] - G.off[block_factor]
    re_start = np.zeros(nb + 1, np.int64)
    np.cumsum(ksz, out=re_start[1:])
    num_re = int(re_start[-1])
    re_block = np.repeat(np.arange(nb), ksz)
    re_edge = np.repeat(G.off[block_factor] - re_start[:-1], ksz) + np.arange(num_re)
    re_var = G.ev[re_edge]
    re_factor = block_factor[re_block]
    re_local = local_of[re_edge]
    re_first = np.zeros(num_re, bool)
    re_first[re_start[:-1]] = True
    re_last = np.zeros(num_re, bool)
    re_last[re_start[1:] - 1] = True
    in_block = re_local >= 0
    in_block[in_block] &= edge_block[re_local[in_block]] == re_block[in_block]
    edge_re = re_start[edge_block] + (edges - G.off[ef])
    re_thr = block_thr[re_block]

    wt_order = np.lexsort((rank, ev))
    wvar = ev[wt_order]
    wt_seg_start = np.ones(n, bool)
    wt_seg_start[1:] = wvar[1:] != wvar[:-1]
    re_wpos = _search_last_before(wvar, rank[wt_order], re_var, re_thr, scale, low)

    rt_order = np.lexsort((re_thr, re_var))
    rvar = re_var[rt_order]
    rt_seg_start = np.ones(num_re, bool)
    rt_seg_start[1:] = rvar[1:] != rvar[:-1]
    edge_rpos = _search_last_before(rvar, re_thr[rt_order], ev, block_thr[edge_block], scale, low)
    unit = None if G.total else np.unique(rank, return_inverse=True)[1].astype(np.int64)

    # A: a read event whose factor wrote the variable in an earlier block skips that write.
    wt_pos = np.empty(n, np.int64)
    wt_pos[wt_order] = np.arange(n)
    own_j = np.where(re_local >= 0, wt_pos[np.maximum(re_local, 0)], np.iinfo(np.int64).max)
    a_own = np.flatnonzero((re_wpos >= 0) & (own_j <= re_wpos))
    j = own_j[a_own]
    a_left = np.where(wt_seg_start[j], -1, j - 1)
    a_lo, a_hi = j + 1, re_wpos[a_own]

    # B: an edge skips the reads of its variable by its own factor's earlier blocks.
    fb = np.lexsort((np.arange(nb), block_factor))
    bf_sorted = block_factor[fb]
    grp = np.searchsorted(bf_sorted, bf_sorted, side="left")
    block_ord = np.empty(nb, np.int64)
    block_ord[fb] = np.arange(nb) - grp
    e_ord = block_ord[edge_block]
    b_prefix = edge_rpos.copy()
    b_edges = b_lo = b_hi = np.zeros(0, np.int64)
    if e_ord.max(initial=0) > 0:
        rt_pos = np.empty(num_re, np.int64)
        rt_pos[rt_order] = np.arange(num_re)
        has = np.flatnonzero(e_ord > 0)
        cnt = e_ord[has]
        pe = np.repeat(has, cnt)
        i = np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        earlier = fb[np.searchsorted(bf_sorted, ef[pe], side="left") + i]
        own_pos = rt_pos[re_start[earlier] + (edges[pe] - G.off[ef[pe]])]
        o = np.lexsort((own_pos, pe))
        pe, own_pos = pe[o], own_pos[o]
        first = np.ones(pe.size, bool)
        first[1:] = pe[1:] != pe[:-1]
        last = np.ones(pe.size, bool)
        last[:-1] = pe[1:] != pe[:-1]
        b_prefix[pe[first]] = np.where(rt_seg_start[own_pos[first]], -1, own_pos[first] - 1)
        nxt = np.where(last, edge_rpos[pe], np.roll(own_pos, -1) - 1)
        b_edges, b_lo, b_hi = pe, own_pos + 1, nxt
    local_of[edges] = -1
    return _Structure(edges, ef, ev, rank, edge_block, re_block, re_var, re_factor, re_local,
                      re_first, re_last, in_block, edge_re, wt_order, wt_seg_start, re_wpos,
                      rt_order, rt_seg_start, unit, a_own, a_left, a_lo, a_hi, b_edges, b_lo,
                      b_hi, b_prefix)


def _range_max(vals: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(vals[lo..hi]) per range (sparse table); -1 for empty ranges."""
    out = np.full(lo.shape, -1, np.int64)
    ok = hi >= lo
    if not ok.any():
        return out
    lo, hi = lo[ok], hi[ok]
    k = np.floor(np.log2(hi - lo + 1)).astype(np.int64)
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


def _readlev(s: _Structure, lev: np.ndarray) -> np.ndarray:
    """(R,) per read event: the highest level among the block's edges at other variables."""
    val = np.where(s.in_block, lev[np.maximum(s.re_local, 0)], -1)
    return _loo_max(val, s.re_first, s.re_last)


def _level_pass(s: _Structure, lev, x_ext, b_ext) -> np.ndarray:
    # A: one more than the newest level written, before the block, into another variable of
    # the factor by another factor.
    wvals = lev[s.wt_order]
    wmax = _seg_cummax(wvals, s.wt_seg_start)
    x = np.where(s.re_wpos >= 0, wmax[s.re_wpos], -1)
    if s.a_own.size:
        left = np.where(s.a_left >= 0, wmax[np.maximum(s.a_left, 0)], -1)
        x[s.a_own] = np.maximum(left, _range_max(wvals, s.a_lo, s.a_hi))
    x = np.maximum(x, x_ext)
    lev = np.maximum(lev, 1 + _loo_max(x, s.re_first, s.re_last)[s.edge_re])
    # B: no lower than any earlier block of another factor that read this edge's old value.
    rvals = _readlev(s, lev)[s.rt_order]
    rmax = _seg_cummax(rvals, s.rt_seg_start)
    b = np.where(s.b_prefix >= 0, rmax[np.maximum(s.b_prefix, 0)], -1)
    if s.b_edges.size:
        np.maximum.at(b, s.b_edges, _range_max(rvals, s.b_lo, s.b_hi))
    lev = np.maximum(lev, np.maximum(b, b_ext))
    if s.unit is not None:
        top = np.full(int(s.unit.max()) + 1, -1, np.int64)
        np.maximum.at(top, s.unit, lev)
        lev = top[s.unit]
    return lev


def _merge_one(top: dict, var: int, val: int, owner: int) -> None:
    """`_Top2.merge` of one candidate, on a dict var -> [best, its owner, best of another owner]."""
    t = top.get(var)
    if t is None:
        top[var] = [val, owner, -1]
    elif t[1] == owner:
        if val > t[0]:
            t[0] = val
    elif val > t[0]:
        t[2], t[0], t[1] = t[0], val, owner
    elif val > t[2]:
        t[2] = val


def _scan(s: _Structure, x_ext: np.ndarray, b_ext: np.ndarray) -> np.ndarray:
    """The least levels of a window by one walk along the order, block by block.

    The same constraints as `_level_pass`, evaluated in time order: a block's
    levels depend only on earlier blocks (earlier stages in a weak order), so
    one walk gives the least solution that the fixpoint reaches after as many
    passes as the window has levels. Plain Python per read event and edge:
    cheaper than the fixpoint on deep windows (a chain: one level per link).
    """
    n = s.edges.size
    if n == 0:
        return np.zeros(0, np.int64)
    nb = int(s.edge_block[-1]) + 1
    e_start = np.searchsorted(s.edge_block, np.arange(nb + 1)).tolist()
    r_start = np.searchsorted(s.re_block, np.arange(nb + 1)).tolist()
    factor = s.ef[e_start[:-1]].tolist()
    # Weak orders: a stage's blocks read only earlier stages, so the summaries take a stage's
    # levels once the whole stage is known (and equal).
    if s.unit is None:
        commit = [True] * nb
    else:
        stage = s.unit[np.asarray(e_start[:-1])]
        commit = np.append(stage[1:] != stage[:-1], True).tolist()
    re_var, ev, edge_re = s.re_var.tolist(), s.ev.tolist(), s.edge_re.tolist()
    xe, be = x_ext.tolist(), b_ext.tolist()
    own = np.where(s.in_block, s.re_local, -1).tolist()
    unit = None if s.unit is None else s.unit.tolist()
    writes: dict = {}
    reads: dict = {}
    lev = [0] * n
    first = 0  # first block not yet in the summaries
    for b in range(nb):
        f, r0, r1 = factor[b], r_start[b], r_start[b + 1]
        # A: the newest level another factor wrote, before the block, into each variable read.
        best = second = -1
        arg = -1
        for r in range(r0, r1):
            x = xe[r]
            t = writes.get(re_var[r])
            if t is not None:
                y = t[0] if t[1] != f else t[2]
                if y > x:
                    x = y
            if x > best:
                best, second, arg = x, best, r
            elif x > second:
                second = x
        for e in range(e_start[b], e_start[b + 1]):
            level = (second if edge_re[e] == arg else best) + 1
            # B: no lower than an earlier block of another factor that read this edge's old value.
            if be[e] > level:
                level = be[e]
            t = reads.get(ev[e])
            if t is not None:
                y = t[0] if t[1] != f else t[2]
                if y > level:
                    level = y
            lev[e] = level
        if not commit[b]:
            continue
        if unit is not None:
            lo, hi = e_start[first], e_start[b + 1]
            top = max(lev[lo:hi])
            lev[lo:hi] = [top] * (hi - lo)
        for c in range(first, b + 1):
            g, r0, r1 = factor[c], r_start[c], r_start[c + 1]
            # The block's read levels: per variable read, the highest level of its edges at the others.
            best = second = -1
            arg = -1
            for r in range(r0, r1):
                x = lev[own[r]] if own[r] >= 0 else -1
                if x > best:
                    best, second, arg = x, best, r
                elif x > second:
                    second = x
            for r in range(r0, r1):
                x = second if r == arg else best
                if x >= 0:
                    _merge_one(reads, re_var[r], x, g)
            for e in range(e_start[c], e_start[c + 1]):
                _merge_one(writes, ev[e], lev[e], g)
        first = b + 1
    return np.asarray(lev, np.int64)


# Fixpoint passes a window gets before it is walked instead. The walk is plain Python and the
# fixpoint needs one numpy pass per level, so a shallow window settles in a pass or two and
# anything deeper is cheaper to walk; 2 measured fastest (BENCHMARKS.md, "Figures behind the code's choices").
SCAN_AFTER = 2


def levelling(graph: FactorGraph, order: Order, window: int | None = None,
              scan_after: int | None = None, algorithm: str = "auto") -> Analysis:
    """Exact levelling (the default analysis): `schedules.levels.levels`.

    Args:
        window, scan_after: given, the windowed levelling runs instead (`levelling_windows`,
            the earlier implementation, kept as the reference the tests compare with).
        algorithm: `schedules.levels.levels`'s algorithm ("auto", "walk", "numba", "stages").
    """
    if window is not None or scan_after is not None:
        return levelling_windows(graph, order, 1024 if window is None else window, scan_after)
    t0 = time.perf_counter()
    lev, how, steps = _levels.levels(graph, order, algorithm)
    return Analysis(lev, int(lev.max(initial=-1)) + 1, "levelling", time.perf_counter() - t0, order,
                    steps, int(how != "stages"), how)


def levelling_windows(graph: FactorGraph, order: Order, window: int = 1024,
                      scan_after: int | None = None) -> Analysis:
    """Exact levelling window by window along the order (the reference for `levelling`).

    Inside a window of about `window` edges the levels are a fixpoint iteration
    from 0; what earlier windows wrote and read enters through per-variable
    top-2 summaries (the best level, and the best from another factor). A
    window still moving after `scan_after` passes (default `SCAN_AFTER`) is
    deep, and its levels are computed by one walk along the order instead
    (`_scan`, the same least solution): a fixpoint needs one pass per level,
    so a chain of 10^5 links would take 10^5 passes.
    """
    scan_after = SCAN_AFTER if scan_after is None else scan_after
    t0 = time.perf_counter()
    G = _Arrays.of(graph, order)
    num_edges = G.ef.size
    starts = np.flatnonzero(G.cut_ok)
    cuts = unique(starts[np.minimum(np.searchsorted(starts, np.arange(0, num_edges, window)),
                                       starts.size - 1)])
    bounds = np.append(cuts, num_edges)
    local_of = np.full(num_edges, -1, np.int64)
    writes, reads = _Top2(G.num_vars), _Top2(G.num_vars)
    lev_all = np.zeros(num_edges, np.int64)
    passes = scans = 0
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        s = _structure(G, G.seq[lo:hi], local_of)
        x_ext = writes.excluding(s.re_var, s.re_factor)
        b_ext = reads.excluding(s.ev, s.ef)
        lev = np.zeros(s.edges.size, np.int64)
        for _ in range(scan_after):
            new = _level_pass(s, lev, x_ext, b_ext)
            passes += 1
            if np.array_equal(new, lev):
                break
            lev = new
        else:
            lev = _scan(s, x_ext, b_ext)
            scans += 1
        lev_all[s.edges] = lev
        writes.merge(s.ev, lev, s.ef)
        reads.merge(s.re_var, _readlev(s, lev), s.re_factor)
    lev_all = _compact(lev_all)
    return Analysis(lev_all, int(lev_all.max(initial=-1)) + 1, "levelling",
                    time.perf_counter() - t0, order, passes, scans, "windows")


def _compact(lev: np.ndarray) -> np.ndarray:
    return np.unique(lev, return_inverse=True)[1].astype(np.int64).reshape(lev.shape)


def algorithm3(graph: FactorGraph, order: Order) -> Analysis:
    """The paper's Algorithm 3: walk the order, cut a batch when an edge reads one in it."""
    t0 = time.perf_counter()
    G = _Arrays.of(graph, order)
    s = _structure(G, G.seq, np.full(G.ef.size, -1, np.int64))
    # Newest rank written, before the block, by another factor into each variable read.
    p = s.re_wpos
    own = (p >= 0) & (s.wt_order[np.maximum(p, 0)] == s.re_local)
    # Skip the factor's own write; if it was the variable's first, nothing is left.
    ok = (p >= 0) & ~(own & s.wt_seg_start[np.maximum(p, 0)])
    p = np.where(own, p - 1, p)
    x = np.where(ok, s.rank[s.wt_order][np.maximum(p, 0)], -1)
    newest = _loo_max(x, s.re_first, s.re_last)[s.edge_re]  # (E,) in time order
    if s.unit is None:
        keys, need = s.rank, newest
    else:
        keys = unique(s.rank)
        need = np.full(keys.size, -1, np.int64)
        np.maximum.at(need, s.unit, newest)
    cut = _greedy_cuts(keys.tolist(), need.tolist())
    batch = np.empty(G.ef.size, np.int64)
    batch[s.edges] = cut if s.unit is None else cut[s.unit]
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


def analyse(graph: FactorGraph, order: Order, analysis: str = "levelling") -> Analysis:
    if analysis == "levelling":
        return levelling(graph, order)
    if analysis == "algorithm3":
        return algorithm3(graph, order)
    raise ValueError(f"unknown analysis {analysis!r} (expected one of {ANALYSES})")

