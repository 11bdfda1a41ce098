"""The batched engine: one jitted loop over iterations and, inside, over fixed-width chunks.

State inside an iteration: the (E,) factor-to-variable log-odds and the (V, 3)
per-variable aggregates of kernels.var_aggregates (finite sum, #+inf, #-inf),
recomputed once per iteration and then kept up to date by scatter-adding each
written message's change. A chunk (plan.py) touches only its own W slots:

    gather the slots' messages and their variables' aggregates
    -> variable-to-factor messages (leave-one-out, exact with +-inf)
    -> per-run factor aggregates (segment sum over W+1 segments)
    -> new factor-to-variable messages (kernels' log-odds formulas)
    -> scatter the written ones and their aggregate changes.

So a chunk costs O(W) and a handful of kernels, with no host sync per batch.
The plan is a jit argument (never a constant); evidence, tol, damping and
max_iters are traced, so changing them does not recompile.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from fastlbp import engine, kernels
from fastlbp.graph import FactorGraph
from fastlbp.logspace import factor_messages
from schedules import plan as P


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
    split_old = kernels.split_infinite(old)
    mu = kernels.combine(agg[var] - split_old)  # variable-to-factor, (W,)

    params = kernels.factor_params(graph, dtype, fac)
    is_and = params.is_and
    is_head = head == jnp.arange(width, dtype=head.dtype)

    log_h1 = jax.nn.log_sigmoid(mu)
    log_h0 = jax.nn.log_sigmoid(-mu)
    term = jnp.where(is_and, log_h1, log_h0)
    term = jnp.where(is_head, 0, term)
    is_zero = (term == -jnp.inf).astype(dtype)
    parts = jnp.stack([jnp.where(is_zero > 0, 0, term), is_zero], -1)
    fsum = jax.ops.segment_sum(parts, seg, num_segments=width + 1, indices_are_sorted=True)
    accp, accf = rows[P.ACCP], rows[P.ACCF]
    total = fsum[seg] + acc[accf]
    finite = parts[:, 0]
    # Exact leave-one-out for a factor's dominant body term (see
    # kernels.factor_aggregates): its edge takes the sum of the other terms
    # directly. A dominant term in a leading chunk of a spread factor is
    # never written, and then no written edge is dominant.
    dominant = ~is_head & (is_zero < 0.5) & (finite < 0.5 * total[:, 0])
    rest = jax.ops.segment_sum(jnp.where(dominant, 0, finite), seg, num_segments=width + 1,
                               indices_are_sorted=True)
    others = jnp.where(dominant, rest[seg] + acc[accf][:, 0], total[:, 0] - finite)
    c = jnp.where(total[:, 1] - is_zero > 0.5, -jnp.inf, others)
    new = factor_messages(is_head, is_and, c, mu[head], *params[1:])

    dummy_edge = msgs.shape[0] - 1
    dummy_var = agg.shape[0] - 1
    msgs = msgs.at[jnp.where(write, edge, dummy_edge)].set(new)
    change = jnp.where(write[:, None], kernels.split_infinite(new) - split_old, 0)
    agg = agg.at[jnp.where(write, var, dummy_var)].add(change)
    # A big factor's last chunk consumed the accumulator; leading chunks add to it.
    acc = acc.at[accf].set(0).at[accp].add(jnp.where((accp == 0)[:, None], parts, 0))
    acc = acc.at[P.NO_ACC].set(0)
    return msgs, agg, acc


def sweep(graph: FactorGraph, plan: P.Plan, messages, evidence, iteration, unroll: int = 1):
    """One iteration: every chunk of plan number `iteration mod P` in order.

    Returns:
        (E,) new messages (undamped; `engine.iterate` damps).
    """
    chunks = plan.chunks[jnp.mod(iteration, plan.chunks.shape[0])]  # (C, 8, W)
    agg = kernels.var_aggregates(graph, messages, evidence)
    agg = jnp.concatenate([agg, jnp.zeros((1, 3), agg.dtype)])
    msgs = jnp.concatenate([messages, jnp.zeros((1,), messages.dtype)])

    def body(i, state):
        return _chunk_update(graph, *state, chunks[i])

    acc = jnp.zeros((2, 2), messages.dtype)
    msgs, _, _ = jax.lax.fori_loop(0, chunks.shape[0], body, (msgs, agg, acc), unroll=unroll)
    return msgs[:-1]


@functools.partial(jax.jit, static_argnames=("unroll",))
def run_batched(graph, plan, messages, evidence, tol, max_iters, damping, unroll: int = 1):
    """Runs the batched schedule to convergence (same contract as engine.run_parall_jit)."""
    def swp(g, m, e, it):
        return sweep(g, plan, m, e, it, unroll)
    return engine.iterate(swp, graph, messages, evidence, tol, max_iters, damping,
                          with_iteration=True)


def make_runner_fn(plan: P.Plan, unroll: int = 1):
    """A function with `engine.run_parall_jit`'s signature running this plan."""
    plan = jax.device_put(plan)

    def runner(graph, messages, evidence, tol, max_iters, damping):
        return run_batched(graph, plan, messages, evidence, tol, max_iters, damping,
                           unroll=unroll)

    runner.plan = plan
    runner.unroll = unroll
    return runner
