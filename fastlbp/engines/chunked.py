"""The chunk loop: one jitted loop over iterations and, inside, over fixed-width chunks of batches.

State inside an iteration: the (E,) factor-to-variable log-odds and the (V, 3)
per-variable aggregates of equations.var_aggregates (finite sum, #+inf, #-inf),
recomputed once per iteration and then kept up to date by scatter-adding each
written message's change. A chunk (plan.py) touches only its own W slots:

    gather the slots' messages and their variables' aggregates
    -> variable-to-factor messages (leave-one-out, exact with +-inf)
    -> per-run factor aggregates (segment sum over W+1 segments)
    -> new factor-to-variable messages (`fastlbp.core.equations`, as every engine)
    -> scatter the written ones and their aggregate changes.

So a chunk costs O(W) and a handful of kernels, with no host sync per batch.
The plan is a jit argument (never a constant); evidence, tol, damping and
max_iters are traced, so changing them does not recompile.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp

import schedules
from fastlbp.core import equations
from fastlbp.core.equations import FIN, NEG, POS
from fastlbp.core.graph import FactorGraph
from fastlbp.core.settings import Settings
from fastlbp.engines.loop import (
    PARAMS,
    VAR_SUMS,
    Controls,
    Runner,
    RunnerInfo,
    RunResult,
    graph_of,
    iterate,
    plan_for,
    xla_sums,
)
from schedules import chunk_plan as P
from schedules.plan import Plan


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ChunkLayout:
    """The chunk loop's layout (a jit argument): the packed chunks and the graph's segment sums
    (the variables' plan only: `loop.xla_sums`)."""

    plan: P.ChunkPlan
    sums: equations.Summation

    @classmethod
    def on_device(cls, graph: FactorGraph, plan: P.ChunkPlan) -> ChunkLayout:
        """The layout of `plan` on `graph`, put on the device (the chunk loop's and the persistent
        kernel's: both sum the variables only)."""
        return jax.device_put(cls(plan, xla_sums(graph, factor=False)))


def _chunk_update(graph: FactorGraph, msgs, agg, acc, rows):
    """Updates the written slots of one chunk.

    Args:
        graph: the factor graph.
        msgs: (E+1,) log-odds, the last entry a dummy edge.
        agg: (V+1, 3) variable aggregates, the last row a dummy variable.
        acc: (2, 2) partial body sums [finite, #zero] of a factor spread over several
            chunks (row 0), row 1 always zero.
        rows: (8, W) int32 chunk (plan.py rows).

    Returns:
        (msgs, agg, acc) after the chunk.
    """
    width = rows.shape[-1]
    edge, var, fac, seg = rows[P.EDGE], rows[P.VAR], rows[P.FACTOR], rows[P.SEG]
    head, write = rows[P.HEAD], rows[P.WRITE] > 0
    dtype = msgs.dtype
    old = msgs[edge]
    split_old = equations.split_infinite(old)
    mine = agg[var]
    mu = equations.variable_message(mine[:, FIN], mine[:, POS], mine[:, NEG], old)  # (W,)

    params = equations.factor_params(graph, dtype, fac)
    is_head = head == jnp.arange(width, dtype=head.dtype)
    finite, zero = equations.body_term(mu, params.is_and, ~is_head)
    is_zero = zero.astype(dtype)
    parts = jnp.stack([finite, is_zero], -1)
    fsum = jax.ops.segment_sum(parts, seg, num_segments=width + 1, indices_are_sorted=True)
    accp, accf = rows[P.ACCP], rows[P.ACCF]
    total = fsum[seg] + acc[accf]
    # A factor spread over several chunks adds the leading chunks' sums (`acc`). A dominant
    # term in a leading chunk is never written, and then no written edge is dominant.
    dominant = equations.is_dominant(finite, total[:, 0])
    rest = jax.ops.segment_sum(jnp.where(dominant, 0, finite), seg, num_segments=width + 1,
                               indices_are_sorted=True)
    c = equations.others_product(finite, is_zero, total[:, 0], total[:, 1], rest[seg] + acc[accf][:, 0],
                                 dominant)
    new = equations.edge_messages(is_head, params.is_and, c, mu[head], *params[1:])

    dummy_edge = msgs.shape[0] - 1
    dummy_var = agg.shape[0] - 1
    msgs = msgs.at[jnp.where(write, edge, dummy_edge)].set(new)
    change = jnp.where(write[:, None], equations.split_infinite(new) - split_old, 0)
    agg = agg.at[jnp.where(write, var, dummy_var)].add(change)
    # A big factor's last chunk consumed the accumulator; leading chunks add to it.
    acc = acc.at[accf].set(0).at[accp].add(jnp.where((accp == 0)[:, None], parts, 0))
    acc = acc.at[P.NO_ACC].set(0)
    return msgs, agg, acc


def sweep(graph: FactorGraph, plan: P.ChunkPlan, messages, agg, iteration, unroll: int = 1):
    """One iteration: every chunk of plan number `iteration mod P` in order.

    Args:
        messages: (E,) log-odds.
        agg: (V, 3) `equations.var_aggregates` of `messages` and the evidence.
        iteration: () int32.

    Returns:
        (E,) new messages (undamped; the loop damps).
    """
    chunks = plan.chunks[jnp.mod(iteration, plan.chunks.shape[0])]  # (C, 8, W)
    agg = jnp.concatenate([agg, jnp.zeros((1, 3), agg.dtype)])
    msgs = jnp.concatenate([messages, jnp.zeros((1,), messages.dtype)])

    def body(i, state):
        return _chunk_update(graph, *state, chunks[i])

    acc = jnp.zeros((2, 2), messages.dtype)
    msgs, _, _ = jax.lax.fori_loop(0, chunks.shape[0], body, (msgs, agg, acc), unroll=unroll)
    return msgs[:-1]


def _run(graph: FactorGraph, layout: ChunkLayout, messages: jax.Array, evidence: jax.Array, ctl: Controls,
         *, unroll: int = 1) -> RunResult:
    def chunked(g, lay, msgs, agg, ev, it):
        return sweep(g, lay.plan, msgs, agg, it, unroll)

    return iterate(chunked, graph, layout, layout.sums, messages, evidence, ctl)


@functools.cache
def jitted_run(unroll: int = 1):
    """The jitted round `run(graph, layout, messages, evidence, controls)` for `unroll` chunks per
    loop trip."""
    return jax.jit(functools.partial(_run, unroll=unroll))


def make_runner(model, plan: Plan | Settings | None = None) -> Runner:
    """The chunk loop of the plan's order(s) (`schedules.compile_schedule`) for a model."""
    plan = plan_for(model, plan)
    compiled = schedules.compile_schedule(model, plan.schedule, gpu=plan.gpu)
    return runner_for(graph_of(model), compiled.plan, f"{plan.schedule.strategy}/chunked",
                      unroll=plan.chunk_unroll(), compiled=compiled, backend=plan.backend,
                      reason=plan.reason)


def runner_for(graph: FactorGraph, plan: P.ChunkPlan, name: str, *, unroll: int = 1, compiled=None,
               backend: str = "xla", reason: str | None = None) -> Runner:
    """A `Runner` for a chunk plan packed by `schedules.compile_schedule` (tests, benchmarks); `backend`
    and `reason` are what the plan asked for and why (the chunk loop sums with dense gathers)."""
    start = time.perf_counter()
    layout = ChunkLayout.on_device(graph, plan)
    seconds = time.perf_counter() - start
    info = RunnerInfo(backend=backend, reason=reason, unroll=unroll, layout_seconds=seconds,
                      compiled=compiled)
    return Runner(name=name, layout=layout, run=jitted_run(unroll), info=info, reads=READS)


# The graph's fields a round reads (`Runner.reads`): the chunks carry their edges, variables and
# factors; the graph gives the factors' parameters and the loop's variable sums.
READS = PARAMS | VAR_SUMS


__all__ = ["ChunkLayout", "sweep", "jitted_run", "make_runner", "runner_for", "READS"]
