"""PARALL with XLA kernels: every factor-to-variable message from the previous state (Jacobi).

One sweep is the message kernels of `fastlbp.core.equations` (variable-to-factor
messages from the carried per-variable sums, the factors' exact
leave-one-out body sums, the four message kinds); the loop is the shared
`engines.loop.iterate`. The layout is the graph's `equations.Summation` (how
segments are summed: dense gathers and row sums for "xla", a scatter or a
Pallas kernel otherwise), built once per graph.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp.core import equations
from fastlbp.core.graph import FactorGraph
from fastlbp.core.settings import Settings
from fastlbp.engines.loop import (
    SWEEP,
    VAR_SCATTER,
    VAR_SUMS,
    Controls,
    Runner,
    RunnerInfo,
    RunResult,
    controls,
    damp,
    graph_of,
    init,
    iterate,
    plan_for,
)
from schedules.plan import Plan


def sweep(graph: FactorGraph, sums: equations.Summation, messages: jax.Array, agg: jax.Array,
          params: equations.FactorParams | None = None) -> jax.Array:
    """One PARALL sweep without damping.

    Args:
        graph: the factor graph.
        sums: how to sum segments.
        messages: (E,) factor-to-variable log-odds.
        agg: (V, 3) `equations.var_aggregates` of `messages` and the evidence.
        params: `equations.factor_params(graph, dtype)` (loops compute it once).

    Returns:
        (E,) new messages.
    """
    mu = equations.var_to_factor(graph, messages, agg)
    return equations.factor_to_var(graph, sums, mu, params)


def step(graph: FactorGraph, sums: equations.Summation, messages: jax.Array, evidence: jax.Array,
         damping: float | jax.Array = 0.0) -> jax.Array:
    """One damped PARALL iteration: (messages, evidence) -> messages (for tests and probes)."""
    agg = equations.var_aggregates(graph, sums, messages, evidence)
    return damp(sweep(graph, sums, messages, agg), messages, jnp.asarray(damping, messages.dtype))


def _run(graph: FactorGraph, sums: equations.Summation, messages: jax.Array, evidence: jax.Array,
         ctl: Controls, *, unroll: int) -> RunResult:
    params = equations.factor_params(graph, messages.dtype)  # loop-invariant: its logs once per round

    def parall(g, lay, msgs, agg, ev, it):
        return sweep(g, lay, msgs, agg, params)

    return iterate(parall, graph, sums, sums, messages, evidence, ctl, unroll=unroll)


@functools.cache
def jitted_run(unroll: int = 1):
    """The jitted PARALL round `run(graph, sums, messages, evidence, controls)` for `unroll` sweeps per
    while-loop trip (one per value, so runners of the same settings share compilations)."""
    return jax.jit(functools.partial(_run, unroll=unroll))


def make_runner(model, plan: Plan | Settings | None = None, *, unroll: int | None = None) -> Runner:
    """PARALL with the plan's segment sums ("xla", "scatter", "pallas", in the interpreter or not).

    Four sweeps per while-loop trip (`unroll`) saved at most a trip's cost
    per iteration and compiled slower (BENCHMARKS.md, "Figures behind the
    code's choices"), so the
    dispatcher keeps 1 unless the schedule spec says `:unroll=N` (or `unroll`, benchmarks).
    """
    plan = plan_for(model, plan)
    graph = graph_of(model)
    unroll = unroll or plan.schedule.unroll or 1
    start = time.perf_counter()
    kind = plan.summation_name
    sums = jax.device_put(equations.summation(graph, kind))
    reason = plan.reason if plan.kernels == "xla" else None
    info = RunnerInfo(backend=kind, reason=reason, unroll=unroll,
                      layout_seconds=time.perf_counter() - start)
    return Runner(name=f"parall/{kind}", layout=sums, run=jitted_run(unroll), info=info,
                  reads=reads(kind))


def reads(summation: str) -> frozenset[str]:
    """The graph's fields a PARALL round with segment sums by `summation` reads (`Runner.reads`)."""
    return SWEEP | VAR_SUMS | (frozenset() if summation == "xla" else VAR_SCATTER)


def run(graph: FactorGraph, evidence: jax.Array | np.ndarray | None = None,
        messages: jax.Array | None = None, *, settings: Settings | None = None,
        runner: Runner | None = None) -> RunResult:
    """One PARALL round from Python values (tests, scripts): prepares a runner unless given one.

    Args:
        graph: the factor graph.
        evidence: (V,) log-odds (0 none, +inf true, -inf false); None = none.
        messages: (E,) warm start; None = uniform in `settings.precision`. Its dtype wins.
        settings: tol, max_iters, damping, precision, backend (default `Settings()`; the
            backend's segment sums, whatever its kernels: this is the XLA engine).
        runner: a runner made by `make_runner` for this graph (saves rebuilding the layout).
    """
    settings = settings or Settings()
    if messages is None:
        messages = init(graph, settings.dtype)
    dtype = messages.dtype
    if evidence is None:
        evidence = jnp.zeros((graph.num_vars,), dtype)
    if runner is None:
        plan = plan_for(graph, settings)
        runner = make_runner(graph, dataclasses.replace(plan, kernels="xla"))
    return runner(graph, messages, jnp.asarray(evidence, dtype),
                  controls(settings.tol, settings.max_iters, settings.damping, dtype))


__all__ = ["sweep", "step", "make_runner", "run", "jitted_run", "reads"]
