"""The relaxation plan of a sequential order (host side, numpy): who reads new and old messages.

`fastlbp.engines.relaxed` solves a sequential sweep (SEQFIX, TOPO, custom
orders) by relaxation; this module builds what it reads: every factor's
edges split into *reader groups* (runs of the order that read the same
state), the virtual graph of those groups, and for every virtual edge the
range of its variable's row that holds new messages. See
`fastlbp.engines.relaxed` for the method.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from fastlbp.core.graph import FactorGraph
from schedules.orders import Order, time_order

# Reader groups beyond this many edges per graph edge make a pass too costly
# (SEQRND: nearly one group per edge); those orders keep the chunked engine.
MAX_VIRTUAL_RATIO = 3.0


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RelaxPlan:
    """How one order reads old and new messages (host-built, a jit argument).

    The engine derives each virtual edge's row start (lo = var_offsets[edge_var]), whether
    `split` is the row's end, each row's last position and (SEQFIX) the own edges' read
    positions from the graph once per sweep (`fastlbp.engines.relaxed.pass_inputs`); they
    are not stored.

    Attributes:
        vgraph: the reader groups as factors (Ev edges); None when every factor's
            edges are one run of the order (SEQFIX: the virtual graph is the graph,
            and no second copy of it goes to the device).
        out_edge: (E,) int32 virtual edge that computes each edge's new message
            (None when the virtual graph is the graph).
        read_order: (E,) int32 the rows laid end to end: each variable's
            incoming edges by rank, variables in order (rows are var_offsets).
        split: (Ev,) int32 first row position whose rank is not before the reader
            group's (positions [lo, split) hold new messages).
        own: (Ev,) int32 the virtual edge's own (real) edge; None when the virtual graph
            is the graph (the identity).
        own_pos: (Ev,) int32 read_order position of the own edge; None when the virtual
            graph is the graph (the inverse of read_order).
        own_new: (Ev,) bool, whether the own edge is in [lo, split).
        max_passes: () int32, the most passes a sweep runs: at least the number of levels
            (passes that make the sweep exact: the levels or `level_bound`), or a budget
            below it (`schedules.relaxation_plan`).
    """

    vgraph: FactorGraph | None
    out_edge: jax.Array | None
    read_order: jax.Array
    split: jax.Array
    own: jax.Array | None
    own_pos: jax.Array | None
    own_new: jax.Array
    max_passes: jax.Array

    @property
    def virtual_edges(self) -> int:
        return int(self.split.shape[0])


# The cost model of `pass_budget`, in microseconds: (PASS_FIXED, PASS_PER_EDGE, STEP_FIXED,
# STEP_PER_SLOT): a relaxation pass costs PASS_FIXED + PASS_PER_EDGE per virtual edge, a step of the
# chunk loop STEP_FIXED + STEP_PER_SLOT per slot.
# CPU: this project's 2-core CPU, float64, calibrated by `python benchmarks/bench_chains.py
# --calibrate 50000` (the figures: BENCHMARKS.md, "Figures behind the code's choices").
CPU_COSTS = (50.0, 0.17, 5.0, 0.2)
# GPU: from the H200 figures in BENCHMARKS.md (not yet re-measured with `bash benchmarks/run_all.sh
# chains-calibrate`; the figures: BENCHMARKS.md, "Figures behind the code's choices").
GPU_COSTS = (100.0, 0.0003, 20.0, 0.07)
# Cold SEQFIX sweeps of Bingo-like graphs settle in 3 passes and warm ones in 3-12
# (BENCHMARKS.md): never fewer than 8 passes, whatever the model says.
MIN_BUDGET = 8
# Host microseconds per edge of what `first_budget` defers: the exact levelling and the chunk
# plan. Measured by `python benchmarks/bench_schedules.py --setup-only` (BENCHMARKS.md, "Figures
# behind the code's choices").
PLAN_US_PER_EDGE = 5.0


def level_bound(graph: FactorGraph, order: Order) -> int:
    """An upper bound on the levels of `order` (`schedules.analysis.levelling`), in O(E log E).

    A *block* is a maximal run of one factor's edges that are consecutive in the
    order (one rank in a weak order). An edge depends on (reads the new value
    of) an edge of another factor with a smaller rank, so along a chain of
    dependencies ranks fall strictly and the factor changes at every step: the
    chain leaves every block it enters for good and never steps inside one. A
    chain of d dependencies thus visits d + 1 distinct blocks (and d + 1
    distinct ranks), and relaxation pass d + 1 is exact for its last edge.
    Levelling's own constraints (an earlier reader of an edge's old value, a
    factor's earlier blocks) never step inside a block either, so its levels
    obey the same bound. SEQFIX: one block per factor.

    Returns:
        min(number of blocks, number of distinct ranks), at least 1.
    """
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor, np.int64)
    rank = np.asarray(order.rank, np.int64)
    if ef.size == 0:
        return 1
    seq = time_order(rank)
    if seq is None:
        seq = np.lexsort((ef, rank))
    f_seq, r_seq = ef[seq], rank[seq]
    stage = r_seq[1:] != r_seq[:-1]
    stages = 1 + int(np.count_nonzero(stage))
    # A total order's block spans ranks; a weak order's is one factor in one stage.
    new_block = f_seq[1:] != f_seq[:-1]
    if stages < ef.size:
        new_block |= stage
    return max(1, min(1 + int(np.count_nonzero(new_block)), stages))


def first_budget(edges: int, virtual_edges: int, gpu: bool) -> int:
    """Passes a relaxed sweep may take before the exact levelling and chunk plan are built.

    The same ski rental as `pass_budget`, one level up: a sweep that has not
    settled after b passes makes the runner build the chunk plan (about
    `PLAN_US_PER_EDGE` per edge on the host) and redo the sweep with it, so
    b = the passes that cost as much as building the plan keeps that sweep
    within about twice the cheaper choice, and graphs whose sweeps settle
    (Bingo-like ones: 3-12 passes) never pay for the plan. On a CPU that is
    about 29 passes at any size above 10^4 edges, on a GPU thousands (the cost
    model: `CPU_COSTS`, `GPU_COSTS`).
    """
    pass_fixed, per_edge, _, _ = GPU_COSTS if gpu else CPU_COSTS
    return max(MIN_BUDGET, int(PLAN_US_PER_EDGE * edges / (pass_fixed + per_edge * virtual_edges)))


def pass_budget(chunk_steps: int, width: int, virtual_edges: int, gpu: bool) -> int:
    """Relaxation passes worth running before the chunk loop finishes a sweep.

    A sweep that has not settled after b passes is redone by the chunk loop,
    so it costs b passes plus one chunk sweep. With b = the passes that cost
    one chunk sweep (the ski-rental rule) that is at most twice the cheaper
    of the two engines on that sweep, whichever it is, and a sweep that
    settles in fewer passes never pays for the chunk loop. On a CPU a pass
    is dear and a chunk step cheap, so Bingo-like graphs get the minimum (8)
    and TOPO's first sweeps (60-160 passes) go to the chunk loop; on a GPU a
    pass is launch-bound, so relaxation keeps ~10^3 passes at the ftp size
    (BENCHMARKS.md, "Figures behind the code's choices").

    Args:
        chunk_steps: chunks of one chunk-loop sweep.
        width: slots per chunk.
        virtual_edges: edges of the relaxation's virtual graph (one pass touches each).
        gpu: costs of a GPU (launch-bound steps), else of a CPU.
    """
    pass_fixed, per_edge, step_fixed, per_slot = GPU_COSTS if gpu else CPU_COSTS
    sweep = chunk_steps * (step_fixed + per_slot * width)
    return max(MIN_BUDGET, int(sweep / (pass_fixed + per_edge * virtual_edges)))


def reader_groups(graph: FactorGraph, order: Order) -> tuple[np.ndarray, np.ndarray]:
    """Splits every factor's edges into runs that read the same state.

    Two edges of one factor read the same state iff the same number of
    other factors' edges precede them. In a total order those are the
    factor's *blocks* (maximal runs of its edges consecutive in the order),
    found by one sort (SEQFIX: one per factor).

    Returns:
        group: (E,) int64 group of each edge, groups sorted by (factor, run).
        group_rank: (G,) int64 rank of each group's first edge.
    """
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor, np.int64)
    rank = np.asarray(order.rank, np.int64)
    seq = time_order(rank)  # time order
    if seq is None:
        seq = np.argsort(rank, kind="stable")
    r_seq = rank[seq]
    if not np.any(r_seq[1:] == r_seq[:-1]):
        f_seq = ef[seq]
        start = np.ones(seq.size, bool)
        start[1:] = f_seq[1:] != f_seq[:-1]
        by_factor = np.argsort(f_seq[start], kind="stable")  # blocks by (factor, time)
        gid = np.empty(by_factor.size, np.int64)
        gid[by_factor] = np.arange(by_factor.size)
        group = np.empty(seq.size, np.int64)
        group[seq] = gid[np.cumsum(start) - 1]
        return group, r_seq[start][by_factor]
    span = int(rank.max(initial=0)) + 1
    below_all = np.searchsorted(r_seq, rank, side="left")
    key = ef * span + rank
    below_own = np.searchsorted(np.sort(key), key, side="left") - np.asarray(g.factor_offsets, np.int64)[ef]
    cut = below_all - below_own
    pair = ef * (graph.num_edges + 1) + cut
    uniq, group = np.unique(pair, return_inverse=True)
    group_rank = np.full(uniq.size, np.iinfo(np.int64).max)
    np.minimum.at(group_rank, group, rank)
    return group.astype(np.int64), group_rank


def virtual_graph(g: FactorGraph, group_factor: np.ndarray, v_off: np.ndarray,
                  v_own: np.ndarray) -> FactorGraph:
    """The reader groups as factors: what `fastlbp.core.graph.from_arrays` builds from them, in O(Ev).

    Every group is a copy of its factor (groups sorted by factor), so the graph's arrays
    follow from the real graph's without its checks or its sort by variable: each slot of
    the real variable order becomes one slot per group of its factor, in group order,
    which is the stable variable order of the virtual edges. At 2M edges (TOPO, 3.9M
    virtual edges) `from_arrays` took half the plan's time.

    Args:
        g: the real graph (numpy arrays).
        group_factor: (G,) factor of each group, non-decreasing.
        v_off: (G + 1,) first virtual edge of each group.
        v_own: (Ev,) the real edge of each virtual edge.
    """
    f_off = np.asarray(g.factor_offsets, np.int64)
    ef = np.asarray(g.edge_factor, np.int64)
    num_groups = group_factor.size
    first_group = np.searchsorted(group_factor, np.arange(f_off.size - 1), side="left")
    copies = np.bincount(group_factor, minlength=f_off.size - 1)
    var_edges = np.asarray(g.var_edges, np.int64)
    reps = copies[ef[var_edges]]
    total = int(v_off[-1])
    start = np.cumsum(reps) - reps
    j = np.arange(total) - np.repeat(start, reps)
    slot_edge = np.repeat(var_edges, reps)
    v_var_edges = v_off[np.repeat(first_group[ef[var_edges]], reps) + j] + (slot_edge - f_off[ef[slot_edge]])
    csum = np.zeros(var_edges.size + 1, np.int64)
    np.cumsum(reps, out=csum[1:])
    v_slot = np.empty(total, np.int64)
    v_slot[v_var_edges] = np.arange(total)
    sizes = np.diff(v_off)

    def like(x, field):
        return np.asarray(x).astype(np.asarray(getattr(g, field)).dtype, copy=False)

    return FactorGraph(
        factor_offsets=like(v_off, "factor_offsets"),
        edge_factor=like(np.repeat(np.arange(num_groups), sizes), "edge_factor"),
        edge_var=like(np.asarray(g.edge_var)[v_own], "edge_var"),
        edge_is_head=like(np.asarray(g.edge_is_head)[v_own], "edge_is_head"),
        var_offsets=like(csum[np.asarray(g.var_offsets, np.int64)], "var_offsets"),
        var_edges=like(v_var_edges, "var_edges"),
        slot_var=like(np.repeat(np.asarray(g.slot_var), reps), "slot_var"),
        edge_slot=like(v_slot, "edge_slot"),
        factor_kind=like(np.asarray(g.factor_kind)[group_factor], "factor_kind"),
        factor_head=like(np.asarray(g.factor_head)[group_factor], "factor_head"),
        p1=like(np.asarray(g.p1)[group_factor], "p1"),
        p2=like(np.asarray(g.p2)[group_factor], "p2"),
    )


def build(graph: FactorGraph, order: Order, max_passes: int) -> RelaxPlan | None:
    """The relaxation plan of `order`, or None when it has too many reader groups."""
    g = graph.to_numpy()
    num_edges = graph.num_edges
    f_off = np.asarray(g.factor_offsets, np.int64)
    ef = np.asarray(g.edge_factor, np.int64)
    ev = np.asarray(g.edge_var, np.int64)
    rank = np.asarray(order.rank, np.int64)
    group, group_rank = reader_groups(graph, order)
    num_groups = group_rank.size
    group_factor = np.zeros(num_groups, np.int64)
    group_factor[group] = ef
    sizes = np.diff(f_off)[group_factor]
    if sizes.sum() > MAX_VIRTUAL_RATIO * num_edges:
        return None
    if num_groups == graph.num_factors:
        vgraph, out_edge = graph, np.arange(num_edges)
        v_own = np.arange(num_edges)
    else:
        starts = f_off[group_factor]
        v_off = np.zeros(num_groups + 1, np.int64)
        np.cumsum(sizes, out=v_off[1:])
        # The real edge of every virtual edge.
        v_own = np.repeat(starts - v_off[:-1], sizes) + np.arange(int(v_off[-1]))
        vgraph = virtual_graph(g, group_factor, v_off, v_own)
        out_edge = v_off[group] + (np.arange(num_edges) - f_off[ef])
    v_group = np.repeat(np.arange(num_groups), sizes) if vgraph is not graph else group
    v_var = ev[v_own]

    # Incoming edges of each variable, by rank. Sorted from the variable order (rows by
    # factor), which SEQFIX's ranks already follow, and queried in the virtual graph's
    # variable order: (nearly) sorted keys sort and search in O(E), where random ones sort in
    # O(E log E).
    span = int(rank.max(initial=0)) + 1
    var_edges = np.asarray(g.var_edges, np.int64)
    read_key = ev[var_edges] * span + rank[var_edges]
    o = np.argsort(read_key, kind="stable")
    read_order, read_key = var_edges[o], read_key[o]
    query = v_var * span + group_rank[v_group]
    q_order = np.asarray(vgraph.to_numpy().var_edges, np.int64)
    q_order = q_order[np.argsort(query[q_order], kind="stable")]
    split = np.empty(query.size, np.int64)
    split[q_order] = np.searchsorted(read_key, query[q_order], side="left")
    own_new = rank[v_own] < group_rank[v_group]
    if vgraph is not graph:
        read_pos = np.empty(num_edges, np.int64)
        read_pos[read_order] = np.arange(num_edges)
    # numpy int32 on the host (a jnp conversion compiled one op per shape); the engine's
    # layout puts them on the device once.
    i32 = lambda x: np.asarray(x, np.int32)  # noqa: E731
    same = vgraph is graph
    return RelaxPlan(vgraph=None if same else vgraph, out_edge=None if same else i32(out_edge),
                     read_order=i32(read_order), own_pos=None if same else i32(read_pos[v_own]),
                     split=i32(split), own=None if same else i32(v_own),
                     own_new=np.asarray(own_new), max_passes=np.asarray(max(int(max_passes), 1), np.int32))
