"""Fused PARALL for the GPU: one Pallas kernel per half-sweep.

The XLA engine (`fastlbp.engines.parall`, on `fastlbp.core.equations`) runs an
iteration as about twenty kernels, and at 0.5M edges their launches, not the
bytes, set the time. Here an iteration is mainly two Pallas (Triton) kernels:

* the *factor kernel* reads each factor's messages and its variables'
  totals, forms the variable-to-factor messages, the body terms and their
  exact leave-one-out sums, and writes the new factor-to-variable messages;
* the *variable kernel* sums each variable's incoming messages and its
  evidence into the totals the next factor kernel reads, forms the marginal
  and the largest change of any marginal (the convergence test).

No XLA kernel runs between them: the loop's control lives in device cells
the kernels read and write themselves. On the CPU (tests) the same kernels
run in the Pallas interpreter (`interpret=True`, backend "fused_interpret").

    runner = make_runner(graph, plan)   # the layout, once (host)
    result = runner(graph, messages, evidence, controls)     # a round (jitted)

Modules, from the host down to the kernels:

    tuning           tiles and warps by precision (measured on the H200)
    layout           `build`: the graph's padded rows and programs (`FusedLayout`)
    loop             the while loop of sweeps; one problem at a time under jax.vmap
    control          the loop's control cells on the device (`Control`)
    factor_kernel    `factor_pass`: new messages (and the wide factor rows' chunks)
    variable_kernel  `var_pass`: totals, marginals, the largest change
    kernel_math      the per-slot jnp math both kernels share
    lowering         keeps tracing and lowering the kernels short
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp

from fastlbp.core.settings import Settings
from fastlbp.engines.fused import loop
from fastlbp.engines.fused.control import Control
from fastlbp.engines.fused.factor_kernel import chunks_wait, factor_pass
from fastlbp.engines.fused.layout import FusedLayout, Side, build
from fastlbp.engines.fused.loop import kernel_params, one_at_a_time, run_loop
from fastlbp.engines.fused.tuning import (
    AUTO_TILE,
    AUTO_VAR_TILE,
    AUTO_VAR_WARPS,
    AUTO_WARPS,
    NUM_WARPS,
    TILE,
    UNROLL,
    tuning,
)
from fastlbp.engines.fused.variable_kernel import var_pass
from fastlbp.engines.loop import PARAMS, Runner, RunnerInfo, graph_of
from schedules.plan import Plan, make_plan

NAME = "parall/fused"


@functools.cache
def _jitted(unroll: int, interpret: bool, num_warps: int, var_warps: int):
    """The jitted `loop.run` for one static tuning: one object per tuning, so runners of
    graphs whose layouts have the same shapes share its compilations."""
    return jax.jit(functools.partial(loop.run, unroll=unroll, interpret=interpret, num_warps=num_warps,
                                     var_warps=var_warps))


def make_runner(model, plan: Plan | Settings | None = None, *, unroll: int | None = None,
                interpret: bool | None = None, tile: int | None = None, num_warps: int | None = None,
                var_tile: int | None = None, var_warps: int | None = None) -> Runner:
    """The fused PARALL engine prepared for a model's graph: its layout built once, here, on the host.

    Args:
        model: a model or a concrete factor graph (not traced).
        plan: the run's plan (or settings); its precision picks the tiles and warps, and
            `plan.interpret` the interpreter.
        unroll: sweeps per while-loop trip (rounded up to an even number); None: the
            schedule's `:unroll=N`, else `UNROLL` (measured fastest for these kernels).
        interpret: run the kernels in the Pallas interpreter; None: by the plan.
        tile, num_warps: slots and warps per factor-kernel program; None: by precision
            (`AUTO_TILE`, `AUTO_WARPS`).
        var_tile, var_warps: the same for the variable kernel; None: `tile` if given, else
            `AUTO_VAR_TILE`; `AUTO_VAR_WARPS`.

    Returns:
        `Runner` named "parall/fused": `layout` the `FusedLayout`, `run` the jitted
        `run(graph, layout, messages, evidence, controls) -> RunResult` (under `jax.vmap` it
        runs the batch's problems one after another), `info.tuning` the tile, var_tile,
        num_warps and var_warps. The kernels read the layout's rows; of the graph only the
        factors' parameters (`factor_params`).

    Raises:
        TypeError: the graph is traced.
    """
    if not isinstance(plan, Plan):
        # Asked for directly (tests, benchmarks): these kernels, the interpreter if the settings say so.
        settings = plan or Settings()
        plan = dataclasses.replace(make_plan(settings.replace(backend="auto")), kernels="fused",
                                   interpret=settings.backend == "fused_interpret")
    graph = graph_of(model)
    if interpret is None:
        interpret = plan.interpret
    unroll = unroll or plan.schedule.unroll or UNROLL
    chosen = tuning(jnp.dtype(plan.dtype).itemsize, tile, num_warps, var_tile, var_warps)
    t0 = time.perf_counter()
    layout = jax.block_until_ready(build(graph, chosen["tile"], chosen["var_tile"]))
    seconds = time.perf_counter() - t0
    run = _jitted(unroll, bool(interpret), chosen["num_warps"], chosen["var_warps"])
    info = RunnerInfo(backend="fused_interpret" if interpret else "fused", reason=plan.reason, unroll=unroll,
                      layout_seconds=seconds, tuning=dict(chosen))
    return Runner(name=NAME, layout=layout, run=run, info=info, reads=PARAMS)


__all__ = ["make_runner", "NAME", "FusedLayout", "Side", "Control", "build", "kernel_params", "factor_pass",
           "var_pass", "run_loop", "one_at_a_time", "chunks_wait", "TILE", "NUM_WARPS", "AUTO_TILE",
           "AUTO_WARPS", "AUTO_VAR_TILE", "AUTO_VAR_WARPS", "UNROLL", "tuning"]
