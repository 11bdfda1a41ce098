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
or after its cap (below); the result matches the levelled engine and the
sequential reference to ~1e-12 (tests/test_engines_relaxed.py).

Each pass is a PARALL-like sweep. Variable side: the reader of edge e at
variable u sees the old total of u, less its own old message, plus the change
D = guess - old of the edges before it in u's row (incoming edges sorted by
rank). Those prefix sums come from one `cumsum` over all rows laid end to end,
each row's last element carrying minus the row's total change, so the running
sum returns to ~0 at every row end and a row's prefix never cancels against
its neighbours' magnitudes. Factor side: `equations.factor_to_var`. A factor
whose edges are split into several runs of the order (TOPO: the head edge
forward, the body edges backward) reads different states per run, so each
run (a *reader group*) becomes one copy of the factor in a virtual graph; for
SEQFIX the virtual graph is the graph.

Why a sweep is exact without knowing L: the sweep is the unique solution of
its triangular system, and a pass that moves no message has reached it (the
loop's stop, up to `inner_tolerance`); any cap at or above L is also exact,
since pass L is. The plan needs no levelling for either: it caps sweeps at
`schedules.relax_plan.level_bound` (the order's blocks, O(E log E), never
below L) when that is within the budget.

The worst case is L passes per iteration, O(E L): a chain that carries
information all the way (a path of 10^5 links updated in path order takes
10^5 passes), where the chunk loop (`fastlbp/engines/chunked.py`) is exact in
L steps of O(W). So a sweep runs at most `plan.max_passes` passes, a budget
below the bound when the order may be deeper than it. The plan starts *open*
(no levels, no chunk plan, budget `relax_plan.first_budget`): a sweep that
has not settled within the budget is not taken, the round stops before it
(`RunResult.unsettled`), and `loop.Runner.step` (through `Runner.finish`) builds the
levelling and chunk plan once, finishes the round and returns the runner that holds them. After that
the budget is `relax_plan.pass_budget` (the passes that cost one chunk sweep)
and a sweep that has not settled by then is redone from its start state by
the chunk loop (`lax.cond` in the same program), so every sweep is the exact
sequential sweep and costs at most about twice the cheaper engine; orders
with no more levels than the budget carry no chunk plan. Under `jax.vmap`
the condition becomes a select and both branches run. Bingo-like graphs
settle in 3-12 passes and never build the chunk plan (what this saves on
deep chains and at set-up: BENCHMARKS.md, `benchmarks/bench_chains.py`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import schedules
from fastlbp.core import equations, segments
from fastlbp.core.graph import FactorGraph
from fastlbp.core.settings import Settings
from fastlbp.engines import chunked
from fastlbp.engines.loop import (
    PARAMS,
    SWEEP,
    VAR_SUMS,
    Controls,
    Runner,
    RunnerInfo,
    RunResult,
    graph_of,
    iterate,
    lean_graph,
    plan_for,
    xla_sums,
)
from schedules import chunk_plan as P
from schedules.plan import Plan
from schedules.relax_plan import RelaxPlan


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RelaxLayout:
    """The relaxation engine's layout for one order (a jit argument).

    Attributes:
        plan: who reads new and old messages (`schedules.relax_plan.build`); its virtual
            graph holds only the fields a sweep reads (`loop.SWEEP`, the others None).
        sums: segment sums of the graph: its variables' rows, and its factors' when the
            virtual graph is the graph (else None).
        vsums: segment sums of the plan's virtual graph (its factors only); None when the
            virtual graph is the graph (`sums` serves both, one copy on the device).
        chunks: the order's chunk plan (`schedules.compile_schedule`), which finishes the
            sweeps that `plan.max_passes` passes do not settle; None when the budget covers
            the levels, or when the plan is open.
        vfactor: (Fv,) int32 the graph's factor of each virtual factor: the virtual graph's
            parameters, variables and head flags are gathered from the graph (`vgraph`)
            rather than held twice; None when the virtual graph is whole or the graph.
        open: (static) `plan.max_passes` is a budget below the level bound and there is no
            chunk plan: a sweep the budget does not settle is reported, not taken
            (`RunResult.unsettled`), and the runner builds the chunk plan.
    """

    plan: RelaxPlan
    sums: equations.Summation
    vsums: equations.Summation | None
    chunks: P.ChunkPlan | None = None
    vfactor: jax.Array | None = None
    open: bool = dataclasses.field(default=False, metadata={"static": True})


class PassInputs(NamedTuple):
    """What every pass of one sweep reads besides the guess (computed once per sweep).

    Attributes:
        old_split: (E, 3) `equations.split_infinite` of the old messages in read order.
        old_totals: (V, 3) per-variable sums of old_split.
        base: (Ev, 3) each virtual edge's variable-to-factor aggregate in the old state
            (evidence included, own message left out).
        vg: the virtual graph (`vgraph`).
        params: `equations.factor_params` of the virtual graph.
        lo: (Ev,) int32 read_order position where the virtual edge's variable's row starts.
        split: (Ev,) int32 `plan.split`, or `own_pos` where the layout left it out (SEQFIX).
        whole: (Ev,) bool, `split` is the row's end (the prefix includes its last edge).
        row_last: (V,) int32 read_order position of each row's last edge (E: an empty row).
        own_pos: (Ev,) int32 read_order position of the virtual edge's own edge.
    """

    old_split: jax.Array
    old_totals: jax.Array
    base: jax.Array
    vg: FactorGraph
    params: equations.FactorParams
    lo: jax.Array
    split: jax.Array
    whole: jax.Array
    row_last: jax.Array
    own_pos: jax.Array


def pass_inputs(graph: FactorGraph, layout: RelaxLayout, messages: jax.Array,
                evidence: jax.Array) -> PassInputs:
    """`PassInputs` of a sweep from `messages` (E,) and `evidence` (V,), in the messages' dtype.

    The row bounds are gathered from the graph here rather than stored in the plan, and
    without a virtual graph (SEQFIX) the own edges' read positions are the inverse of the
    read order, one scatter: 10 bytes per edge less on the device for a few gathers per
    sweep, which runs several passes. Where a SEQFIX layout left `plan.split` out, the
    split is the own position (`split_is_own_position`).
    """
    plan = layout.plan
    vg = vgraph(graph, layout)
    dtype = messages.dtype
    old_fo = equations.split_infinite(messages)
    old_totals = segments.segment_sum(layout.sums.var, messages, transform=equations.split_infinite)
    agg_rel = old_totals + equations.split_infinite(evidence.astype(dtype))
    own = old_fo if plan.own is None else old_fo[plan.own]
    u = vg.edge_var
    off = graph.var_offsets
    num_edges = plan.read_order.shape[0]
    row_last = jnp.where(off[1:] > off[:-1], off[1:] - 1, num_edges).astype(jnp.int32)
    if plan.own_pos is None:
        own_pos = jnp.zeros(num_edges, jnp.int32).at[plan.read_order].set(
            jnp.arange(num_edges, dtype=jnp.int32), unique_indices=True)
    else:
        own_pos = plan.own_pos
    split = own_pos if plan.split is None else plan.split
    return PassInputs(old_split=old_fo[plan.read_order], old_totals=old_totals, base=agg_rel[u] - own,
                      vg=vg, params=equations.factor_params(vg, dtype), lo=off[u], split=split,
                      whole=split == off[u + 1], row_last=row_last, own_pos=own_pos)


def vgraph(graph: FactorGraph, layout: RelaxLayout) -> FactorGraph:
    """The plan's virtual graph: `graph` itself when the plan has none of its own (SEQFIX).

    With `layout.vfactor` the layout holds only the virtual graph's own structure (factor
    offsets, edge factors); a virtual edge's variable and head flag are its own edge's,
    a virtual factor's kind and probabilities its factor's, gathered from `graph` here
    (once per sweep).
    """
    plan = layout.plan
    if plan.vgraph is None:
        return graph
    if layout.vfactor is None:
        return plan.vgraph
    f, own = layout.vfactor, plan.own
    return dataclasses.replace(plan.vgraph, edge_var=graph.edge_var[own],
                               edge_is_head=graph.edge_is_head[own], factor_kind=graph.factor_kind[f],
                               p1=graph.p1[f], p2=graph.p2[f])


def relax_pass(graph: FactorGraph, layout: RelaxLayout, inputs: PassInputs, guess: jax.Array) -> jax.Array:
    """One relaxation pass: every edge recomputed from `guess` (earlier edges) and the old state.

    Args:
        inputs: the sweep's `pass_inputs`.
        guess: (E,) log-odds, factor order.

    Returns:
        (E,) new log-odds, factor order.
    """
    plan = layout.plan
    vg = inputs.vg
    change = equations.split_infinite(guess[plan.read_order]) - inputs.old_split  # (E, 3) read order
    row_change = (segments.segment_sum(layout.sums.var, guess, transform=equations.split_infinite)
                  - inputs.old_totals)
    closed = change.at[inputs.row_last].add(-row_change, mode="drop", unique_indices=True)
    run = jnp.concatenate([jnp.zeros((1, 3), change.dtype), jnp.cumsum(closed, axis=0)])
    before = run[inputs.split] - run[inputs.lo] + jnp.where(inputs.whole[:, None], row_change[vg.edge_var], 0)
    if plan.own_new is not None:  # None: no own edge is new (`split_is_own_position`), the term is 0
        before = before - jnp.where(plan.own_new[:, None], change[inputs.own_pos], 0)
    vsums = layout.sums if layout.vsums is None else layout.vsums
    msgs = equations.factor_to_var(vg, vsums, equations.combine(inputs.base + before), params=inputs.params)
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
        agg: (V, 3) `equations.var_aggregates` of messages and evidence (the chunk loop's
            start; None: computed here when the layout has a chunk plan).
        iteration: () int32 (the chunk plan's order number: always 0 here).
        unroll: chunks per loop trip of the chunk loop (static).

    Returns:
        ((E,) new log-odds, () int32 passes run, () bool whether the chunk loop redid the sweep);
        with an open layout the bool says the sweep did not settle, and the log-odds are then
        the last pass's guess, not the sweep.
    """
    plan = layout.plan
    dtype = messages.dtype
    tol = jnp.asarray(inner_tolerance(dtype) if inner_tol is None else inner_tol, dtype)
    inputs = pass_inputs(graph, layout, messages, evidence)  # the same in every pass

    def cond(state):
        _, moved, k = state
        return (k < plan.max_passes) & (moved > tol)

    def body(state):
        guess, _, k = state
        new = relax_pass(graph, layout, inputs, guess)
        return new, _moved(new, guess), k + 1

    state = (messages, jnp.asarray(jnp.inf, dtype), jnp.asarray(0, jnp.int32))
    new, moved, passes = jax.lax.while_loop(cond, body, state)
    unsettled = moved > tol
    if layout.open:
        # Not exact when unsettled: the caller must not take it (`iterate(flagged=True)`).
        return new, passes, unsettled
    if layout.chunks is None:
        # max_passes is at least the number of levels: exact by construction.
        return new, passes, jnp.asarray(False)
    if agg is None:
        agg = equations.var_aggregates(graph, layout.sums, messages, evidence.astype(dtype))

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
        new, _, unsettled = sweep(g, lay, msgs, ev, agg, it, unroll=unroll)
        return (new, unsettled) if lay.open else new

    return iterate(relaxed, graph, layout, layout.sums, messages, evidence, ctl, flagged=layout.open)


@functools.cache
def jitted_run(unroll: int = 1):
    """The jitted round `run(graph, layout, messages, evidence, controls)`, the chunk loop (if any)
    running `unroll` chunks per loop trip."""
    return jax.jit(functools.partial(_run, unroll=unroll))


run = jitted_run(1)


# The virtual graph's fields gathered from the graph's (`vgraph`), with its PARAMS.
VIRTUAL_FROM_GRAPH = frozenset({"edge_var", "edge_is_head"})


def reads(plan: RelaxPlan) -> frozenset[str]:
    """The graph's fields a round of `plan` reads (`Runner.reads`), the chunk loop's included.

    Without a virtual graph (SEQFIX) a pass is a sweep of the graph itself; with one (TOPO)
    the passes read the virtual graph, whose variables, head flags and parameters come from
    the graph's (`vgraph`), and the graph gives the variables' rows.
    """
    return SWEEP | VAR_SUMS if plan.vgraph is None else PARAMS | VAR_SUMS | VIRTUAL_FROM_GRAPH


def split_is_own_position(plan: RelaxPlan) -> bool:
    """Whether every edge's split is its own read position and no own edge reads new (host, O(E)).

    True for SEQFIX and any order of whole factors without ties: an edge's row holds, before
    its own edge, exactly the edges of the factors ordered before its own (a variable is in a
    factor once), which are the new ones. Then the layout leaves `split` and `own_new` out,
    5 bytes per edge, and a sweep takes the own positions it computes anyway. Orders with
    ties (several factors in one stage) keep them.
    """
    if plan.vgraph is not None:
        return False
    read_order = np.asarray(plan.read_order)
    own_pos = np.empty_like(read_order)
    own_pos[read_order] = np.arange(read_order.size, dtype=read_order.dtype)
    return bool(np.array_equal(np.asarray(plan.split), own_pos) and not np.asarray(plan.own_new).any())


def layout_for(graph: FactorGraph, plan: RelaxPlan, chunks: P.ChunkPlan | None = None, *,
               open: bool = False) -> RelaxLayout:
    """The device layout of a relaxation plan and, for a budget below the levels, the order's chunk
    plan (host work, once per graph and order); `open`: a budget below the level bound and no
    chunk plan yet (`schedules.Relaxation.open`).

    Only what a round reads goes to the device: of the virtual graph its own structure
    (factor offsets and edge factors, the rest gathered from the graph: `vgraph`) and its
    factors' segment plan; the graph's factor plan only when the graph is the virtual
    graph; no split where it is the own position (`split_is_own_position`, SEQFIX: 5 bytes
    per edge). A TOPO layout of 1M Bingo-like edges held 151 bytes per edge with a whole
    virtual graph and both plans of each graph, 80 so (`benchmarks/bench_memory.py --sizes
    1e6 --schedules topo`).
    """
    own = plan.vgraph is None
    sums = xla_sums(graph, factor=own)
    vfactor = None
    if not own:
        vg = plan.vgraph
        vsums = xla_sums(vg, var=False)
        first = np.asarray(plan.own)[np.asarray(vg.factor_offsets)[:-1]]  # a real edge of each group
        vfactor = np.asarray(graph.edge_factor)[first].astype(np.int32)
        plan = dataclasses.replace(plan, vgraph=lean_graph(vg, SWEEP - PARAMS - VIRTUAL_FROM_GRAPH))
    else:
        vsums = None
        if split_is_own_position(plan):
            plan = dataclasses.replace(plan, split=None, own_new=None)
    return jax.device_put(RelaxLayout(plan, sums, vsums, chunks, vfactor=vfactor,
                                      open=open and chunks is None))


def make_runner(model, plan: Plan | Settings | None = None) -> Runner | None:
    """The relaxation runner of the plan's order (`schedules.relaxation_plan`), or None when the
    order cannot be relaxed (several orders, too many reader groups: the chunk loop runs it)."""
    plan = plan_for(model, plan)
    rel = schedules.relaxation_plan(model, plan.schedule, gpu=plan.gpu)
    if rel is None:
        return None
    return runner_for(graph_of(model), rel, f"{plan.schedule.strategy}/relaxed", unroll=plan.chunk_unroll(),
                      gpu=plan.gpu, backend=plan.backend, reason=plan.reason)


def runner_for(graph: FactorGraph, rel, name: str, *, unroll: int = 1, gpu: bool | None = None,
               backend: str = "xla", reason: str | None = None) -> Runner:
    """A `Runner` for a relaxation plan (`schedules.relaxation_plan`).

    An open plan (`rel.open`: a budget below the level bound, no chunk plan) gets the
    runner's `finish`: the first round with a sweep the budget does not settle builds the
    levelling and chunk plan (`schedules.finish`) and finishes with the runner it returns
    (`Runner.step`); rounds whose sweeps settle never pay for it.

    Args:
        rel: `schedules.Relaxation`.
        unroll: chunks per loop trip of the chunk loop (if any).
        gpu: the plan's platform is a GPU (the cost models of `schedules.finish`).
        backend, reason: what the plan asked for and why (relaxation sums with dense gathers).
    """
    start = time.perf_counter()
    chunks = None if rel.chunks is None else rel.chunks.plan
    layout = layout_for(graph, rel.plan, chunks, open=rel.open)
    info = RunnerInfo(backend=backend, reason=reason, unroll=unroll if chunks is not None else 1,
                      layout_seconds=time.perf_counter() - start, compiled=rel)

    def finish() -> Runner:
        t0 = time.perf_counter()
        done = schedules.finish(graph, rel, gpu=gpu)
        plan_chunks = None if done.chunks is None else done.chunks.plan
        # The graph's segment sums and the plan's index arrays are on the device already.
        new = dataclasses.replace(layout, plan=dataclasses.replace(layout.plan, max_passes=jnp.asarray(
            done.budget, jnp.int32)), chunks=None if plan_chunks is None else jax.device_put(plan_chunks),
            open=False)
        use = unroll if plan_chunks is not None else 1
        done_info = dataclasses.replace(info, unroll=use, compiled=done,
                                        finish_seconds=time.perf_counter() - t0)
        return Runner(name=name, layout=new, run=jitted_run(use), info=done_info, reads=reads(rel.plan))

    return Runner(name=name, layout=layout, run=jitted_run(info.unroll), info=info,
                  finish=finish if rel.open else None, reads=reads(rel.plan))


__all__ = ["RelaxLayout", "PassInputs", "pass_inputs", "vgraph", "relax_pass", "inner_tolerance", "sweep",
           "run", "jitted_run", "layout_for", "make_runner",
           "runner_for", "reads",
           "split_is_own_position"]
