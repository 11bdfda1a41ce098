"""The fused PARALL loop: the two passes per sweep in a while loop, control on the device.

A sweep is the factor pass (`factor_kernel.factor_pass`) then the variable
pass (`variable_kernel.var_pass`); no XLA kernel runs between them, the
loop's control living in cells the kernels write (`control.Control`).
Messages, totals and marginals are updated in place. The while loop tests
the control cells once per trip of several sweeps.

Compile time. The passes are jitted on their own and the loop's first sweep
primes it (no variable pass before the loop), so each kernel is lowered once
however many sweeps a trip unrolls.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from fastlbp.core import equations
from fastlbp.core.graph import FactorGraph
from fastlbp.engines.fused.control import BAD, IT, MAX_ITERS, PRIMED, Control, last_delta
from fastlbp.engines.fused.factor_kernel import factor_pass
from fastlbp.engines.fused.kernel_math import count_of
from fastlbp.engines.fused.layout import FusedLayout
from fastlbp.engines.fused.tuning import NUM_WARPS
from fastlbp.engines.fused.variable_kernel import var_pass
from fastlbp.engines.loop import Controls, RunResult


def kernel_params(layout: FusedLayout, graph: FactorGraph, dtype) -> tuple[jax.Array, ...]:
    """The factor pass's operands: `equations.factor_params` per factor of a row
    (`FusedLayout.seg_factor`, (2 Rf,) each; empty places take factor 0's).

    is AND (int32), q, r and k1 - k0: the kernels form 1 - q and 1 - r themselves
    (`kernel_math.row_params`), three loads per slot less.
    """
    rf = layout.seg_factor
    p = equations.factor_params(graph, dtype, jnp.where(rf >= 0, rf, 0))
    return p.is_and.astype(jnp.int32), p.q, p.r, p.k1 - p.k0


def run_loop(graph: FactorGraph, layout: FusedLayout, messages: jax.Array, evidence: jax.Array,
             controls: Controls, *, unroll: int = 1, interpret: bool = False, num_warps: int = NUM_WARPS,
             var_warps: int | None = None) -> RunResult:
    """PARALL to convergence with the fused kernels (call inside jit).

    A trip of the while loop runs `unroll` sweeps, rounded up to an even
    number so that the sweeps' parities alternate across trips. A sweep that
    does not go ahead (converged, out of iterations, a conflict) leaves
    everything as it is, so the extra sweeps change nothing.

    Args:
        graph: the factor graph.
        layout: its layout (`layout.build`).
        messages: (E,) warm start, factor-to-variable log-odds in the round's dtype.
        evidence: (V,) evidence log-odds.
        controls: tol, max_iters, damping (device scalars).
        unroll: sweeps per while-loop trip (static).
        interpret: run the kernels in the Pallas interpreter (CPU).
        num_warps, var_warps: warps per program of the factor and the variable kernel
            (`var_warps` None: the factor kernel's).
    """
    tol, max_iters, damping = controls
    dtype = messages.dtype
    slots = jnp.zeros((layout.num_slots,), dtype).at[layout.edge_slot].set(messages)
    kv = layout.kvar_var
    evidence_k = jnp.where(kv >= 0, evidence.astype(dtype)[jnp.where(kv >= 0, kv, 0)], 0)
    params = kernel_params(layout, graph, dtype)
    vk = layout.num_kvars
    sweeps = unroll + unroll % 2
    last = (sweeps - 1) % 2
    parities = [jnp.full((1,), k % 2, jnp.int32) for k in range(2)]
    control = Control.start(tol, max_iters, damping, dtype, last, layout.variables.wide_rows,
                            layout.factors.wide_rows)

    # The loop's first sweep primes it: with the factor pass idle (messages kept), its
    # variable pass forms the totals and marginals of the incoming messages. So each kernel
    # has one call site in the whole loop and is lowered and compiled once.

    def active(state):
        c = state[-1]
        primed = c.ctl[PRIMED + last] > 0
        go = c.ctl[IT + last] < c.ctl[MAX_ITERS]
        go = go & (last_delta(c, last) >= c.limits[0]) & (c.ctl[BAD + last] == 0)
        return ~primed | go

    def body(state):
        msgs, totals, p, control = state
        for k in range(sweeps):
            control = dataclasses.replace(control, parity=parities[k % 2])
            msgs, control = factor_pass(layout, msgs, totals, params, control, interpret, num_warps)
            totals, p, control = var_pass(layout, msgs, evidence_k, totals, p, control, interpret,
                                          var_warps or num_warps)
        return msgs, totals, p, control

    state = (slots, jnp.zeros((2 * vk,), dtype), jnp.zeros((vk,), dtype), control)
    slots, totals, p, control = jax.lax.while_loop(active, body, state)
    fin, cnt = totals[0::2], count_of(totals[1::2])
    k = layout.var_kvar
    c = cnt[k]
    lo = equations.log_odds(fin[k], c & 3, c >> 2)
    delta = last_delta(control, last)
    conflict = control.ctl[BAD + last] > 0
    return RunResult(messages=slots[layout.edge_slot], log_odds=lo, marginals=jax.nn.sigmoid(lo),
                     iterations=control.ctl[IT + last], converged=(delta < control.limits[0]) & ~conflict,
                     delta=delta, conflict=conflict)


def one_at_a_time(fun):
    """`fun`, which under `jax.vmap` runs the batch's problems one after another (`lax.map`).

    Batching the kernels instead (Pallas adds a grid axis) would give every
    problem its own control cells, but the in-kernel wait of wide factor rows
    counts on no more waiting chunks than the GPU holds at once (`chunks_wait`),
    which a batch of problems could exceed: the GPU would hang.
    """
    batched = jax.custom_batching.custom_vmap(fun)

    @batched.def_vmap
    def _(axis_size, in_batched, *args):
        def one(i):
            return fun(*(jax.tree.map(lambda x, b: x[i] if b else x, arg, flags)
                         for arg, flags in zip(args, in_batched, strict=True)))

        out = jax.lax.map(one, jnp.arange(axis_size))
        return out, jax.tree.map(lambda _: True, out)

    return batched


def run(graph: FactorGraph, layout: FusedLayout, messages: jax.Array, evidence: jax.Array, controls: Controls,
        *, unroll: int, interpret: bool, num_warps: int, var_warps: int) -> RunResult:
    """`run_loop`, one problem after another under `jax.vmap` (`one_at_a_time`): the runner's `run`."""
    loop = functools.partial(run_loop, unroll=unroll, interpret=interpret, num_warps=num_warps,
                             var_warps=var_warps)
    return one_at_a_time(loop)(graph, layout, messages, evidence, controls)


__all__ = ["kernel_params", "run_loop", "one_at_a_time", "run"]
