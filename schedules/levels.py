"""Exact levelling by one walk along the order, or stage by stage (`schedules.analysis.levelling`).

The levels of an order (paper Section 4.3, `schedules.analysis`) are the least
solution of
    level(e) >= level(e') + 1   for e' in N_E(e) that precede e (e reads its new value),
    level(e) >= level(e'')      for e'' preceding e with e in N_E(e'') (read e's old value),
with one level per stage in a weak order. Every constraint points back in time,
so one walk along the order, *block* by block (a block: a maximal run of one
factor's edges in time order; in a weak order one factor in one stage), meets
each edge after everything it depends on, and gives the least solution
directly. A block reads every variable of its factor once (its *read events*);
per variable the walk keeps the best level written (and read) so far and the
best from another factor than the best's, so a factor never waits for itself
(TOPO, SEQRND and custom orders split factors into several blocks).

Why a walk and not a vectorised sweep per level: the levels are deep. The
synthetic Bingo-like graphs (`datalog.synthetic`) have 1,454 / 9,325 / 30,786
SEQFIX levels at 0.05M / 0.5M / 2M edges (TOPO: 1,632 / 10,423 / 34,569), with
about 30-60 edges per level along a chain of blocks through the hub variables;
a vectorised step per level (or per wave of blocks that share no variable:
55K waves for SEQFIX, 126K for TOPO at 2M edges) costs tens of numpy calls, so
any frontier method is bound to seconds per million edges. The walk costs
less than one numpy call's time per edge and read event in plain Python, and
~100x less compiled by numba (BENCHMARKS.md, "Figures behind the code's choices";
`walk` is written in the subset numba compiles; it is used where numba is
installed and the order is large, `NUMBA_FROM`).

A weak order with large stages (PARALL: one stage) is levelled stage by stage
instead (`by_stages`): a stage reads only earlier stages, so each is one
vectorised step from the per-variable summaries, and the steps are the stages.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastlbp.core.graph import FactorGraph
from schedules.orders import Order, time_order

# The walk compiled by numba from this many edges plus read events (where numba is installed):
# below it the plain walk is quicker than importing numba and loading the compiled walk from its
# cache (BENCHMARKS.md, "Figures behind the code's choices").
NUMBA_FROM = 600_000
# Weak orders go stage by stage when their stages hold this many edges on average: a stage costs
# ~30 numpy calls, as much as walking 20-40 edges and their read events (BENCHMARKS.md, "Figures
# behind the code's choices").
STAGE_EDGES_FROM = 64


@dataclasses.dataclass(frozen=True)
class WalkArrays:
    """An order as blocks and read events in time order (positions in `seq` name edges).

    Attributes:
        seq: (E,) int64 edges in time order (rank, then factor and edge in a weak order).
        block_factor: (B,) int64 factor of each block.
        edge_start: (B + 1,) int64 first position (in `seq`) of each block.
        read_start: (B + 1,) int64 first read event of each block.
        read_var: (R,) int64 variable of each read event.
        read_own: (R,) int64 position of the block's own edge at that variable, -1 when the
            factor's edge there lies in another block.
        edge_var: (E,) int64 variable of each position.
        edge_read: (E,) int64 read event of each position's own variable in its block.
        commit: (B,) bool, the block ends its stage (every block of a total order).
        weak: whether the order has stages (ties of rank).
        num_vars: V.
    """

    seq: np.ndarray
    block_factor: np.ndarray
    edge_start: np.ndarray
    read_start: np.ndarray
    read_var: np.ndarray
    read_own: np.ndarray
    edge_var: np.ndarray
    edge_read: np.ndarray
    commit: np.ndarray
    weak: bool
    num_vars: int

    @property
    def num_blocks(self) -> int:
        return int(self.block_factor.size)

    @property
    def num_stages(self) -> int:
        return int(np.count_nonzero(self.commit))


def walk_arrays(graph: FactorGraph, order: Order) -> WalkArrays:
    """The blocks and read events of `order` (O(E log E) numpy)."""
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor, np.int64)
    ev = np.asarray(g.edge_var, np.int64)
    off = np.asarray(g.factor_offsets, np.int64)
    rank = np.asarray(order.rank, np.int64)
    num_edges = ef.size
    seq = time_order(rank)
    total = seq is not None or order.is_total
    if seq is None:
        seq = np.argsort(rank, kind="stable") if total else np.lexsort((np.arange(num_edges), ef, rank))
    f_seq, r_seq = ef[seq], rank[seq]
    new_block = np.ones(num_edges, bool)
    new_block[1:] = f_seq[1:] != f_seq[:-1]
    if not total:
        new_block[1:] |= r_seq[1:] != r_seq[:-1]
    edge_start = np.append(np.flatnonzero(new_block), num_edges)
    block_of = np.cumsum(new_block) - 1
    block_factor = f_seq[new_block]
    sizes = off[block_factor + 1] - off[block_factor]
    read_start = np.zeros(block_factor.size + 1, np.int64)
    np.cumsum(sizes, out=read_start[1:])
    num_reads = int(read_start[-1])
    read_block = np.repeat(np.arange(block_factor.size), sizes)
    read_edge = np.repeat(off[block_factor] - read_start[:-1], sizes) + np.arange(num_reads)
    pos = np.empty(num_edges, np.int64)
    pos[seq] = np.arange(num_edges)
    own = pos[read_edge]
    read_own = np.where(block_of[own] == read_block, own, -1)
    if total:
        commit = np.ones(block_factor.size, bool)
    else:
        stage = r_seq[new_block]
        commit = np.append(stage[1:] != stage[:-1], True) if stage.size else np.zeros(0, bool)
    return WalkArrays(seq, block_factor, edge_start, read_start, ev[read_edge], read_own, ev[seq],
                      read_start[block_of] + (seq - off[f_seq]), commit, not total, graph.num_vars)


def walk(block_factor, edge_start, read_start, read_var, read_own, edge_var, edge_read, commit, weak,
         lev, wv1, wo1, wv2, rv1, ro1, rv2):
    """The least levels by one walk along the order, block by block (into `lev`, by position).

    Plain Python over lists, or compiled by numba over int64 arrays (the same code).
    Per variable, (wv1, wo1, wv2) hold the best level written so far, its factor and the
    best written by another factor (-1: none); (rv1, ro1, rv2) the same for the levels
    read (a read event's level: the highest level of its block's edges at the other
    variables).

    A weak order's blocks enter the summaries only when their stage is complete (a stage
    reads earlier stages only), with the stage's highest level.
    """
    first = 0
    for b in range(len(block_factor)):
        f = block_factor[b]
        # A: one more than the newest level another factor wrote, before the block, into the
        # block's other variables (the best over read events but the edge's own variable's).
        best = -1
        second = -1
        arg = -1
        for r in range(read_start[b], read_start[b + 1]):
            w = read_var[r]
            x = wv1[w] if wo1[w] != f else wv2[w]
            if x > best:
                second = best
                best = x
                arg = r
            elif x > second:
                second = x
        for e in range(edge_start[b], edge_start[b + 1]):
            level = (second if edge_read[e] == arg else best) + 1
            # B: no lower than an earlier block of another factor that read this edge's old value.
            v = edge_var[e]
            y = rv1[v] if ro1[v] != f else rv2[v]
            if y > level:
                level = y
            lev[e] = level
        if not commit[b]:
            continue
        if weak:
            top = 0
            for e in range(edge_start[first], edge_start[b + 1]):
                if lev[e] > top:
                    top = lev[e]
            for e in range(edge_start[first], edge_start[b + 1]):
                lev[e] = top
        for c in range(first, b + 1):
            g = block_factor[c]
            best = -1
            second = -1
            arg = -1
            for r in range(read_start[c], read_start[c + 1]):
                o = read_own[r]
                x = lev[o] if o >= 0 else -1
                if x > best:
                    second = best
                    best = x
                    arg = r
                elif x > second:
                    second = x
            # The top-2 merge below is written out twice (reads into rv/ro, edges into wv/wo), not as a
            # helper: this is the hot loop in plain Python, where the call makes a merge 1.5x slower (97 vs
            # 64 ns on this CPU, timeit), and numba compiles it either way.
            for r in range(read_start[c], read_start[c + 1]):
                x = second if r == arg else best
                if x < 0:
                    continue
                w = read_var[r]
                if ro1[w] == g:
                    if x > rv1[w]:
                        rv1[w] = x
                elif x > rv1[w]:
                    rv2[w] = rv1[w]
                    rv1[w] = x
                    ro1[w] = g
                elif x > rv2[w]:
                    rv2[w] = x
            for e in range(edge_start[c], edge_start[c + 1]):
                x = lev[e]
                w = edge_var[e]
                if wo1[w] == g:
                    if x > wv1[w]:
                        wv1[w] = x
                elif x > wv1[w]:
                    wv2[w] = wv1[w]
                    wv1[w] = x
                    wo1[w] = g
                elif x > wv2[w]:
                    wv2[w] = x
        first = b + 1


_compiled: list = []


def compiled_walk():
    """`walk` compiled by numba (cached on disk by numba), or None where numba is not installed."""
    if not _compiled:
        try:
            import numba
        except ImportError:
            _compiled.append(None)
        else:
            _compiled.append(numba.njit(cache=True)(walk))
    return _compiled[0]


def _walk_levels(a: WalkArrays, use_numba: bool) -> np.ndarray:
    n, nv = a.seq.size, a.num_vars
    fn = compiled_walk() if use_numba else None
    args = (a.block_factor, a.edge_start, a.read_start, a.read_var, a.read_own, a.edge_var, a.edge_read,
            a.commit)
    if fn is not None:
        lev = np.zeros(n, np.int64)
        state = [np.full(nv, -1, np.int64) for _ in range(6)]
        fn(*args, a.weak, lev, *state)
        return lev
    # Python lists: indexing a numpy array from Python costs ~3x an item of a list.
    lev = [0] * n
    walk(*[x.tolist() for x in args], a.weak, lev, *[[-1] * nv for _ in range(6)])
    return np.asarray(lev, np.int64)


def seg_cummax(x: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Segmented running maximum (segments begin where seg_start is True); x >= -1."""
    if x.size == 0:
        return x
    seg = np.cumsum(seg_start) - 1
    big = np.int64(x.max() + 2)
    return np.maximum.accumulate(x + 2 + seg * big) - 2 - seg * big


def loo_max(x: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Per position, the maximum over the other positions of its segment (-1 if none)."""
    fwd = seg_cummax(x, first)
    bwd = seg_cummax(x[::-1], last[::-1])[::-1]
    left = np.full_like(x, -1)
    right = np.full_like(x, -1)
    left[1:] = np.where(first[1:], -1, fwd[:-1])
    right[:-1] = np.where(last[:-1], -1, bwd[1:])
    return np.maximum(left, right)


class Top2:
    """Per variable, the highest value and the highest from a different owner (factor)."""

    def __init__(self, num_vars: int):
        self.v1 = np.full(num_vars, -1, np.int64)
        self.o1 = np.full(num_vars, -1, np.int64)
        self.v2 = np.full(num_vars, -1, np.int64)

    def excluding(self, var: np.ndarray, owner: np.ndarray) -> np.ndarray:
        return np.where(self.o1[var] != owner, self.v1[var], self.v2[var])

    def merge(self, var: np.ndarray, val: np.ndarray, owner: np.ndarray) -> None:
        keep = val >= 0
        var, val, owner = var[keep], val[keep], owner[keep]
        if var.size == 0:
            return
        o = np.lexsort((-val, var))
        var, val, owner = var[o], val[o], owner[o]
        head = np.ones(var.size, bool)
        head[1:] = var[1:] != var[:-1]
        grp = np.cumsum(head) - 1
        tv, tvar, town = val[head], var[head], owner[head]
        # Best candidate from another owner than the candidates' best, and than the old best.
        c2 = np.full(tv.size, -1, np.int64)
        np.maximum.at(c2, grp, np.where(owner != town[grp], val, -1))
        cx = np.full(tv.size, -1, np.int64)
        np.maximum.at(cx, grp, np.where(owner != self.o1[var], val, -1))
        v1, o1, v2 = self.v1[tvar], self.o1[tvar], self.v2[tvar]
        old_wins = v1 >= tv
        same = o1 == town
        self.v1[tvar] = np.where(old_wins, v1, tv)
        self.o1[tvar] = np.where(old_wins, o1, town)
        self.v2[tvar] = np.where(old_wins, np.maximum(v2, cx),
                                 np.where(same, np.maximum(v2, c2), np.maximum(v1, c2)))


def by_stages(a: WalkArrays) -> np.ndarray:
    """The least levels of a weak order, one vectorised step per stage (levels by position).

    A stage reads only earlier stages' writes and reads (the summaries), and all its edges
    take its highest level, so a stage is settled in one step: no fixpoint inside it.
    """
    n = a.seq.size
    lev = np.zeros(n, np.int64)
    nb = a.num_blocks
    block_read = np.repeat(np.arange(nb), np.diff(a.read_start))
    read_factor = a.block_factor[block_read]
    edge_factor = a.block_factor[np.repeat(np.arange(nb), np.diff(a.edge_start))]
    first = np.zeros(a.read_var.size, bool)
    first[a.read_start[:-1][np.diff(a.read_start) > 0]] = True
    last = np.zeros(a.read_var.size, bool)
    last[a.read_start[1:][np.diff(a.read_start) > 0] - 1] = True
    # A read event's level is the stage's level when its block has an edge at another variable.
    in_block = a.read_own >= 0
    others = (np.diff(a.edge_start)[block_read] - in_block) > 0
    writes, reads = Top2(a.num_vars), Top2(a.num_vars)
    ends = np.flatnonzero(a.commit) + 1
    for b0, b1 in zip(np.append(0, ends[:-1]).tolist(), ends.tolist(), strict=True):
        r0, r1 = int(a.read_start[b0]), int(a.read_start[b1])
        e0, e1 = int(a.edge_start[b0]), int(a.edge_start[b1])
        x = writes.excluding(a.read_var[r0:r1], read_factor[r0:r1])
        up = 1 + loo_max(x, first[r0:r1], last[r0:r1])[a.edge_read[e0:e1] - r0]
        old = reads.excluding(a.edge_var[e0:e1], edge_factor[e0:e1])
        top = int(np.maximum(up, old).max(initial=0))
        lev[e0:e1] = top
        writes.merge(a.edge_var[e0:e1], lev[e0:e1], edge_factor[e0:e1])
        reads.merge(a.read_var[r0:r1], np.where(others[r0:r1], top, -1), read_factor[r0:r1])
    return lev


def compact(lev: np.ndarray) -> np.ndarray:
    """Levels renumbered 0, 1, ... in order, skipping unused ones (a bincount, not a sort)."""
    if lev.size == 0:
        return lev.astype(np.int64)
    used = np.bincount(lev) > 0
    return (np.cumsum(used) - 1)[lev].astype(np.int64)


def levels(graph: FactorGraph, order: Order, algorithm: str = "auto") -> tuple[np.ndarray, str, int]:
    """The exact levels of `order`, compacted to 0..L-1.

    Args:
        algorithm: "walk" (plain Python), "numba" (compiled; the plain walk where numba is not
            installed), "stages" (weak orders only) or "auto": stages for weak orders with
            large stages, else the walk, compiled from `NUMBA_FROM` edges plus read events.

    Returns:
        ((E,) int64 level of each edge, the algorithm used, vectorised steps taken (stages)).
    """
    a = walk_arrays(graph, order)
    if algorithm == "auto":
        if a.weak and a.seq.size >= STAGE_EDGES_FROM * a.num_stages:
            algorithm = "stages"
        else:
            algorithm = "numba" if a.seq.size + a.read_var.size >= NUMBA_FROM else "walk"
    if algorithm == "stages":
        if not a.weak:
            raise ValueError("levelling by stages needs a weak order")
        by_pos, steps = by_stages(a), a.num_stages
    elif algorithm in ("walk", "numba"):
        use = algorithm == "numba" and compiled_walk() is not None
        by_pos, steps, algorithm = _walk_levels(a, use), 0, "numba" if use else "walk"
    else:
        raise ValueError(f"unknown levelling algorithm {algorithm!r}")
    lev = np.empty(a.seq.size, np.int64)
    lev[a.seq] = by_pos
    return compact(lev), algorithm, steps
