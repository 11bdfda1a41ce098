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
reference to ~1e-12 (tests/test_engines_relaxed.py).

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

The worst case is L passes per iteration, O(E L): a chain that carries
information all the way (a path of 10^5 links updated in path order takes
10^5 passes), where the chunk loop (`fastlbp/engines/chunked.py`) is exact in
L steps of O(W). So a sweep runs at most `plan.max_passes` passes, a budget
below L when the order is deeper than it (`schedules.relax_plan.pass_budget`:
the passes that cost one chunk sweep); a sweep that has not settled by then
is redone from its start state by the chunk loop (`lax.cond` in the same
program), so every sweep is the exact sequential sweep and costs at most
about twice the cheaper engine. Orders with no more levels than the budget
carry no chunk plan. Under `jax.vmap` the condition becomes a select and
both branches run. On this project's 2-core CPU a cold SEQFIX round on a
chain of 10^4 links took ~77 s (10^4 passes of 7.7 ms per sweep) and takes
0.12 s (26 passes, then the chunk loop), 10^5 links 2.4 s
(`benchmarks/bench_chains.py`).
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp

from fastlbp import kernels, segments
from fastlbp.engines import chunked
from fastlbp.engines.loop import Controls, Runner, RunResult, iterate
from fastlbp.graph import FactorGraph
from schedules import plan as P
from schedules.relax_plan import RelaxPlan


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RelaxLayout:
    """The relaxation engine's layout for one order (a jit argument).

    Attributes:
        plan: who reads new and old messages (`schedules.relax_plan.build`).
        sums: segment sums of the graph (its variables' rows).
        vsums: segment sums of the plan's virtual graph (its factors); `sums` when
            the virtual graph is the graph.
        chunks: the order's chunk plan (`schedules.compile_schedule`), which finishes the
            sweeps that `plan.max_passes` passes do not settle; None when the budget is the
            number of levels.
    """

    plan: RelaxPlan
    sums: kernels.Summation
    vsums: kernels.Summation
    chunks: P.Plan | None = None


def relax_pass(graph: FactorGraph, layout: RelaxLayout, old_split: jax.Array, old_totals: jax.Array,
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
    plan = layout.plan
    change = kernels.split_infinite(guess[plan.read_order]) - old_split  # (E, 3) read order
    row_change = segments.segment_sum(layout.sums.var, guess, transform=kernels.split_infinite) - old_totals
    closed = change.at[plan.row_last].add(-row_change, mode="drop", unique_indices=True)
    run = jnp.concatenate([jnp.zeros((1, 3), change.dtype), jnp.cumsum(closed, axis=0)])
    u = plan.vgraph.edge_var
    before = (run[plan.split] - run[plan.lo] + jnp.where(plan.whole[:, None], row_change[u], 0)
              - jnp.where(plan.own_new[:, None], change[plan.own_pos], 0))
    msgs = kernels.factor_to_var(plan.vgraph, layout.vsums, kernels.combine(base + before), params=params)
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


def sweep(graph: FactorGraph, layout: RelaxLayout, messages, evidence, agg=None, iteration=0, inner_tol=None,
          unroll: int = 1):
    """One iteration of the plan's order, solved by relaxation (call inside jit).

    Args:
        messages: (E,) log-odds, the sweep's start state.
        evidence: (V,) log-odds.
        agg: (V, 3) `kernels.var_aggregates` of messages and evidence (the chunk loop's
            start; None: computed here when the layout has a chunk plan).
        iteration: () int32 (the chunk plan's order number: always 0 here).
        unroll: chunks per loop trip of the chunk loop (static).

    Returns:
        ((E,) new log-odds, () int32 passes run, () bool whether the chunk loop redid the sweep).
    """
    plan = layout.plan
    dtype = messages.dtype
    tol = jnp.asarray(inner_tolerance(dtype) if inner_tol is None else inner_tol, dtype)
    old_fo = kernels.split_infinite(messages)
    old_split = old_fo[plan.read_order]
    old_totals = segments.segment_sum(layout.sums.var, messages, transform=kernels.split_infinite)
    agg_rel = old_totals + kernels.split_infinite(evidence.astype(dtype))
    base = agg_rel[plan.vgraph.edge_var] - old_fo[plan.own]
    params = kernels.factor_params(plan.vgraph, dtype)  # the same in every pass

    def cond(state):
        _, moved, k = state
        return (k < plan.max_passes) & (moved > tol)

    def body(state):
        guess, _, k = state
        new = relax_pass(graph, layout, old_split, old_totals, base, guess, params)
        return new, _moved(new, guess), k + 1

    state = (messages, jnp.asarray(jnp.inf, dtype), jnp.asarray(0, jnp.int32))
    new, moved, passes = jax.lax.while_loop(cond, body, state)
    if layout.chunks is None:
        # max_passes is the number of levels: exact by construction.
        return new, passes, jnp.asarray(False)
    unsettled = moved > tol
    if agg is None:
        agg = kernels.var_aggregates(graph, layout.sums, messages, evidence.astype(dtype))

    def level_by_level(_):
        return chunked.sweep(graph, layout.chunks, messages, agg, jnp.asarray(iteration, jnp.int32), unroll)

    new = jax.lax.cond(unsettled, level_by_level, lambda _: new, None)
    return new, passes, unsettled


def _run(graph: FactorGraph, layout: RelaxLayout, messages: jax.Array, evidence: jax.Array,
         ctl: Controls, *, unroll: int = 1) -> RunResult:
    # The sweep recomputes its old totals itself (without the evidence) rather than
    # subtracting the evidence from the loop's aggregates, which would round soft evidence;
    # the loop's aggregates are the chunk loop's start when it redoes a sweep.
    def relaxed(g, lay, msgs, agg, ev, it):
        return sweep(g, lay, msgs, ev, agg, it, unroll=unroll)[0]

    return iterate(relaxed, graph, layout, layout.sums, messages, evidence, ctl)


@functools.cache
def jitted_run(unroll: int = 1):
    """The jitted round `run(graph, layout, messages, evidence, controls)`, the chunk loop (if any)
    running `unroll` chunks per loop trip."""
    return jax.jit(functools.partial(_run, unroll=unroll))


run = jitted_run(1)


@jax.jit
def sweep_with_passes(graph: FactorGraph, layout: RelaxLayout, messages, evidence):
    """One sweep and the passes it took (benchmarks, `fastlbp info`)."""
    return sweep(graph, layout, messages, evidence)[:2]


@functools.partial(jax.jit, static_argnames=("unroll",))
def sweep_with_stats(graph: FactorGraph, layout: RelaxLayout, messages, evidence, unroll: int = 1):
    """One sweep, the passes it took and whether the chunk loop redid it (benchmarks, tests)."""
    return sweep(graph, layout, messages, evidence, unroll=unroll)


def layout_for(graph: FactorGraph, plan: RelaxPlan, chunks: P.Plan | None = None) -> RelaxLayout:
    """The device layout of a relaxation plan and, for a budget below the levels, the order's chunk
    plan (host work, once per graph and order)."""
    sums = kernels.summation(graph, "xla")
    vsums = sums if plan.vgraph is graph else kernels.summation(plan.vgraph, "xla")
    return jax.device_put(RelaxLayout(plan, sums, vsums, chunks))


def make_runner(graph: FactorGraph, plan: RelaxPlan, name: str, *, chunks: P.Plan | None = None,
                unroll: int = 1, info: dict | None = None) -> Runner:
    """A `Runner` for a relaxation plan built by the dispatcher (`schedules.relaxation_plan`).

    Args:
        chunks: the chunk plan that finishes sweeps the budget (`plan.max_passes`) does not settle.
        unroll: chunks per loop trip of that chunk loop.
    """
    start = time.perf_counter()
    layout = layout_for(graph, plan, chunks)
    unroll = unroll if chunks is not None else 1
    return Runner(name=name, layout=layout, run=jitted_run(unroll),
                  info={**(info or {}), "layout_seconds": time.perf_counter() - start,
                        "virtual_edges": plan.virtual_edges, "max_passes": int(plan.max_passes),
                        "chunk_steps": 0 if chunks is None else chunks.num_chunks, "unroll": unroll})


__all__ = ["RelaxLayout", "relax_pass", "inner_tolerance", "sweep", "sweep_with_passes", "sweep_with_stats",
           "run", "jitted_run", "layout_for", "make_runner"]
