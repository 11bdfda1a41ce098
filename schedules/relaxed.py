"""Sequential orders (SEQFIX, TOPO, custom) by fixed-point relaxation of the sweep.

A sequential sweep is a triangular system: the update of edge e reads the
*new* values of the edges ordered before it and the *old* values of the
others. Levelling (schedules.analysis) solves it by substitution, one level
after the other, and on Bingo-like graphs that is ~10^4 dependent steps per
SEQFIX iteration (a tuple used by thousands of clauses chains their updates).
Here the same system is solved by Jacobi relaxation over the whole sweep:

    guess_0 = the old messages
    guess_k = every edge recomputed at once, reading guess_{k-1} for the
              edges ordered before it and the old messages for the others

Pass k gets every edge of level < k exactly, so after L passes (L = the
number of levels) the result *is* the sequential sweep, whatever the graph.
In practice the chains carry almost nothing: a message that flows through a
hub is one term among thousands, or saturated by a hard prior, so the guess
stops changing after a few passes (measured on the H200 benchmarks: 3 per
cold SEQFIX iteration on 0.05M-0.7M-edge graphs, 3-12 after a label; TOPO,
whose sweeps carry evidence forward by design, 40-160). The loop stops
when no message moves by more than `inner_tol` (relative to 1 + |log-odds|)
or after L passes; the result matches the levelled engine and the sequential
reference to ~1e-12 (tests/test_relaxed.py).

Each pass is a PARALL-like sweep. Variable side: the reader of edge e at
variable u sees the old total of u, less its own old message, plus the change
D = guess - old of the edges before it in u's row (incoming edges sorted by
rank). Those prefix sums come from one `cumsum` over all rows laid end to end,
each row's last element carrying minus the row's total change, so the running
sum returns to ~0 at every row end and a row's prefix never cancels against
its neighbours' magnitudes. Factor side: `kernels.factor_to_var`. A factor
whose edges are split into several runs of the order (TOPO: the head edge
forward, the body edges backward) reads different states per run, so each
run (a *reader group*) becomes one copy of the factor in a virtual graph; for
SEQFIX the virtual graph is the graph.

The worst case is L passes per iteration (a chain that carries information
all the way, e.g. a long path updated in path order), slower than the chunk
loop (`NAME:chunked`), which is exact in L cheap steps.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp import engine, kernels, segments
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
        max_passes: () int32, the number of levels: passes that make the sweep exact.
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


def relax_pass(graph: FactorGraph, plan: RelaxPlan, old_split: jax.Array, old_totals: jax.Array,
               base: jax.Array, guess: jax.Array, params: kernels.FactorParams | None = None) -> jax.Array:
    """One relaxation pass: every edge recomputed from `guess` (earlier edges) and the old state.

    Args:
        old_split: (E, 3) `kernels.split_infinite` of the old messages in read order.
        old_totals: (V, 3) per-variable sums of old_split.
        base: (Ev, 3) each virtual edge's variable-to-factor aggregate in the old
            state (evidence included, own message left out).
        guess: (E,) log-odds, factor order.
        params: `kernels.factor_params(plan.vgraph, dtype)` (None: computed here).

    Returns:
        (E,) new log-odds, factor order.
    """
    change = kernels.split_infinite(guess[plan.read_order]) - old_split  # (E, 3) read order
    row_change = segments.segment_sum(graph.var_sums, guess, transform=kernels.split_infinite) - old_totals
    closed = change.at[plan.row_last].add(-row_change, mode="drop", unique_indices=True)
    run = jnp.concatenate([jnp.zeros((1, 3), change.dtype), jnp.cumsum(closed, axis=0)])
    u = plan.vgraph.edge_var
    before = (run[plan.split] - run[plan.lo] + jnp.where(plan.whole[:, None], row_change[u], 0)
              - jnp.where(plan.own_new[:, None], change[plan.own_pos], 0))
    msgs = kernels.factor_to_var(plan.vgraph, kernels.combine(base + before), params=params)
    return msgs if plan.out_edge is None else msgs[plan.out_edge]


def inner_tolerance(dtype) -> float:
    """Default fixed-point tolerance of a sweep: 1e-12 in float64, ~1e-5 in float32."""
    return max(1e-12, 100 * float(jnp.finfo(dtype).eps))


def _moved(new: jax.Array, cur: jax.Array) -> jax.Array:
    """Largest relative move of a message: 0 for equal values (infinities and NaNs too), inf
    when a message turns finite, infinite or NaN.

    A guess may hold NaNs that the sweep does not (a guessed message meets hard
    evidence); they wash out like any wrong guess, so they never stop the loop.
    """
    both = jnp.isfinite(new) & jnp.isfinite(cur)
    rel = jnp.abs(new - cur) / (1 + jnp.abs(jnp.where(both, cur, 0)))
    same = (new == cur) | (jnp.isnan(new) & jnp.isnan(cur))
    d = jnp.where(same, 0, jnp.where(both, rel, jnp.inf))
    return jnp.max(d, initial=0.0)


def sweep(graph: FactorGraph, plan: RelaxPlan, messages, evidence, inner_tol=None):
    """One iteration of the plan's order, solved by relaxation (call inside jit).

    Returns:
        ((E,) new log-odds, () int32 passes used).
    """
    dtype = messages.dtype
    tol = jnp.asarray(inner_tolerance(dtype) if inner_tol is None else inner_tol, dtype)
    old_fo = kernels.split_infinite(messages)
    old_split = old_fo[plan.read_order]
    old_totals = segments.segment_sum(graph.var_sums, messages, transform=kernels.split_infinite)
    agg = old_totals + kernels.split_infinite(evidence.astype(dtype))
    base = agg[plan.vgraph.edge_var] - old_fo[plan.own]
    params = kernels.factor_params(plan.vgraph, dtype)  # the same in every pass

    def cond(state):
        _, moved, k = state
        return (k < plan.max_passes) & (moved > tol)

    def body(state):
        guess, _, k = state
        new = relax_pass(graph, plan, old_split, old_totals, base, guess, params)
        return new, _moved(new, guess), k + 1

    state = (messages, jnp.asarray(jnp.inf, dtype), jnp.asarray(0, jnp.int32))
    new, _, passes = jax.lax.while_loop(cond, body, state)
    return new, passes


@jax.jit
def run_relaxed(graph, plan, messages, evidence, tol, max_iters, damping):
    """Runs the order to convergence (same contract as `engine.run_parall_jit`)."""
    return engine.iterate(lambda g, m, e: sweep(g, plan, m, e)[0], graph, messages, evidence, tol,
                          max_iters, damping)


@jax.jit
def sweep_with_passes(graph, plan, messages, evidence):
    """One sweep and the passes it took (benchmarks, `fastlbp info`)."""
    return sweep(graph, plan, messages, evidence)


def make_runner_fn(plan: RelaxPlan):
    """A function with `engine.run_parall_jit`'s signature running this plan."""
    plan = jax.device_put(plan)

    def runner(graph, messages, evidence, tol, max_iters, damping):
        return run_relaxed(graph, plan, messages, evidence, tol, max_iters, damping)

    runner.relax_plan = plan
    return runner
