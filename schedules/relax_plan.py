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
import jax.numpy as jnp
import numpy as np

from fastlbp.graph import FactorGraph, from_arrays
from schedules.orders import Order

# Reader groups beyond this many edges per graph edge make a pass too costly
# (SEQRND: nearly one group per edge); those orders keep the chunked engine.
MAX_VIRTUAL_RATIO = 3.0


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RelaxPlan:
    """How one order reads old and new messages (host-built, a jit argument).

    Attributes:
        vgraph: the reader groups as factors (Ev edges); the graph itself when
            every factor's edges are one run of the order.
        out_edge: (E,) int32 virtual edge that computes each edge's new message
            (None when the virtual graph is the graph).
        read_order: (E,) int32 the rows laid end to end: each variable's
            incoming edges by rank, variables in order (rows are var_offsets).
        row_last: (V,) int32 read_order position of each row's last edge (E for
            an empty row).
        lo: (Ev,) int32 read_order position where the virtual edge's variable's row starts.
        split: (Ev,) int32 first row position whose rank is not before the reader
            group's (positions [lo, split) hold new messages).
        whole: (Ev,) bool, split is the row's end (the prefix includes its last edge).
        own: (Ev,) int32 the virtual edge's own (real) edge.
        own_pos: (Ev,) int32 read_order position of the own edge.
        own_new: (Ev,) bool, whether the own edge is in [lo, split).
        max_passes: () int32, the most passes a sweep runs: the number of levels (passes
            that make the sweep exact), or a budget below it when the chunk loop finishes
            the sweeps it does not settle (`schedules.relaxation_plan`).
    """

    vgraph: FactorGraph
    out_edge: jax.Array
    read_order: jax.Array
    row_last: jax.Array
    lo: jax.Array
    split: jax.Array
    whole: jax.Array
    own: jax.Array
    own_pos: jax.Array
    own_new: jax.Array
    max_passes: jax.Array

    @property
    def virtual_edges(self) -> int:
        return self.vgraph.num_edges


# The cost model of `pass_budget`, in microseconds: (PASS_FIXED, PASS_PER_EDGE, STEP_FIXED,
# STEP_PER_SLOT): a relaxation pass costs PASS_FIXED + PASS_PER_EDGE per virtual edge, a step of the
# chunk loop STEP_FIXED + STEP_PER_SLOT per slot.
# CPU: this project's 2-core CPU, float64 (`python benchmarks/bench_chains.py --calibrate 50000`):
# passes 0.13-0.20 us per virtual edge on chains of 10^3-10^5 links and a 50K-edge synthetic
# graph; chunk steps 4-7 us at 4 slots, 8-25 at 32, 37-94 at 256 (10-13 us at 4 slots on the
# 10^5-link chains, whose arrays leave the caches).
CPU_COSTS = (50.0, 0.17, 5.0, 0.2)
# GPU: from the H200 figures in BENCHMARKS.md (not yet re-measured with `bash benchmarks/run_all.sh
# chains-calibrate`): a SEQFIX pass ~100 us at 50K edges (launch-bound), 196 us at 0.69M and
# ~2.5 ms at 5M; an XLA chunk-loop step 21-28 us at 128 slots (50K) and 38 us at 256 (0.69M).
GPU_COSTS = (100.0, 0.0003, 20.0, 0.07)
# Cold SEQFIX sweeps of Bingo-like graphs settle in 3 passes and warm ones in 3-12
# (BENCHMARKS.md): never fewer than 8 passes, whatever the model says.
MIN_BUDGET = 8
def pass_budget(chunk_steps: int, width: int, virtual_edges: int, gpu: bool) -> int:
    """Relaxation passes worth running before the chunk loop finishes a sweep.

    A sweep that has not settled after b passes is redone by the chunk loop,
    so it costs b passes plus one chunk sweep. With b = the passes that cost
    one chunk sweep (the ski-rental rule) that is at most twice the cheaper
    of the two engines on that sweep, whichever it is, and a sweep that
    settles in fewer passes never pays for the chunk loop. On a CPU a pass
    is dear (0.17 us per edge) and a chunk step cheap, so Bingo-like graphs
    get the minimum (8) and TOPO's first sweeps (60-160 passes) go to the
    chunk loop: a cold TOPO round at 0.5M edges takes 1.7 s instead of 11.3 s
    there; on a GPU a pass is launch-bound and a chunk step ~20 us, so
    relaxation keeps ~10^3 passes at the ftp size.

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
    other factors' edges precede them.

    Returns:
        group: (E,) int64 group of each edge, groups sorted by (factor, run).
        group_rank: (G,) int64 rank of each group's first edge.
    """
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor, np.int64)
    rank = np.asarray(order.rank, np.int64)
    span = int(rank.max(initial=0)) + 1
    below_all = np.searchsorted(np.sort(rank), rank, side="left")
    key = ef * span + rank
    below_own = np.searchsorted(np.sort(key), key, side="left") - np.asarray(g.factor_offsets, np.int64)[ef]
    cut = below_all - below_own
    pair = ef * (graph.num_edges + 1) + cut
    uniq, group = np.unique(pair, return_inverse=True)
    group_rank = np.full(uniq.size, np.iinfo(np.int64).max)
    np.minimum.at(group_rank, group, rank)
    return group.astype(np.int64), group_rank


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
        body = ~np.asarray(g.edge_is_head, bool)[v_own]
        body_off = np.zeros(num_groups + 1, np.int64)
        np.cumsum(sizes - 1, out=body_off[1:])
        vgraph = from_arrays(np.asarray(g.factor_kind)[group_factor], np.asarray(g.factor_head)[group_factor],
                             body_off, ev[v_own[body]], np.asarray(g.p1)[group_factor],
                             np.asarray(g.p2)[group_factor], num_vars=graph.num_vars, check_coverage=False)
        out_edge = v_off[group] + (np.arange(num_edges) - f_off[ef])
    v_group = np.repeat(np.arange(num_groups), sizes) if vgraph is not graph else group
    v_var = ev[v_own]

    read_order = np.lexsort((rank, ev))  # incoming edges of each variable, by rank
    span = int(rank.max(initial=0)) + 1
    read_key = ev[read_order] * span + rank[read_order]  # sorted
    v_off_var = np.asarray(g.var_offsets, np.int64)
    lo = v_off_var[v_var]
    split = np.searchsorted(read_key, v_var * span + group_rank[v_group], side="left")
    row_last = np.where(np.diff(v_off_var) > 0, v_off_var[1:] - 1, num_edges)
    own_new = rank[v_own] < group_rank[v_group]
    read_pos = np.empty(num_edges, np.int64)
    read_pos[read_order] = np.arange(num_edges)
    i32 = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
    return RelaxPlan(vgraph=vgraph, out_edge=None if vgraph is graph else i32(out_edge),
                     read_order=i32(read_order), own_pos=i32(read_pos[v_own]),
                     row_last=i32(row_last), lo=i32(lo), split=i32(split),
                     whole=jnp.asarray(split == v_off_var[v_var + 1]), own=i32(v_own),
                     own_new=jnp.asarray(own_new), max_passes=jnp.asarray(max(int(max_passes), 1), jnp.int32))
