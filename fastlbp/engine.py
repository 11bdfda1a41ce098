"""The PARALL engine: `init`, `step`, `run`, `marginals` as pure functions.

One iteration updates every factor-to-variable message from the previous
state (Jacobi). `run` is a single jitted `lax.while_loop` that tests
convergence on the device: the largest change of any marginal below `tol`, or
`max_iters`. The graph, evidence, messages, tol, damping and max_iters are
all traced arguments, so new evidence or new settings never recompile; only a
new shape (another graph size) or dtype does.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp import kernels
from fastlbp.graph import FactorGraph


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RunResult:
    """What `run` returns (all device arrays).

    Attributes:
        messages: (E,) factor-to-variable log-odds after the last iteration.
        log_odds: (V,) marginal log-odds log P(x=1) - log P(x=0).
        marginals: (V,) P(x=1).
        iterations: () int32, iterations run.
        converged: () bool, largest marginal change < tol at the end.
        delta: () largest marginal change in the last iteration.
        conflict: () bool, contradictory evidence (some marginal is NaN).
    """

    messages: jax.Array
    log_odds: jax.Array
    marginals: jax.Array
    iterations: jax.Array
    converged: jax.Array
    delta: jax.Array
    conflict: jax.Array


def init(graph: FactorGraph, dtype=jnp.float64) -> jax.Array:
    """Uniform messages: (E,) zeros (log-odds 0 = m(1) = m(0))."""
    return jnp.zeros((graph.num_edges,), dtype=dtype)


def _damp(new: jax.Array, old: jax.Array, damping: jax.Array) -> jax.Array:
    # Damping in the log domain; a hard (infinite) message is never softened.
    mixed = (1 - damping) * new + damping * old
    return jnp.where(jnp.isfinite(new) & jnp.isfinite(old), mixed, new)


def step(graph: FactorGraph, messages: jax.Array, evidence: jax.Array,
         damping: float | jax.Array = 0.0) -> jax.Array:
    """One PARALL iteration: (graph, messages, evidence) -> messages."""
    agg = kernels.var_aggregates(graph, messages, evidence)
    mu = kernels.var_to_factor(graph, messages, agg)
    new = kernels.factor_to_var(graph, mu)
    return _damp(new, messages, jnp.asarray(damping, messages.dtype))


def marginals(graph: FactorGraph, messages: jax.Array, evidence: jax.Array) -> jax.Array:
    """(V,) P(x=1) from messages and evidence."""
    return jax.nn.sigmoid(log_odds(graph, messages, evidence))


def log_odds(graph: FactorGraph, messages: jax.Array, evidence: jax.Array) -> jax.Array:
    """(V,) marginal log-odds from messages and evidence."""
    return kernels.log_odds_from_aggregates(kernels.var_aggregates(graph, messages, evidence))


def iterate(sweep, graph: FactorGraph, messages: jax.Array, evidence: jax.Array, tol, max_iters,
            damping, *, with_iteration: bool = False) -> RunResult:
    """Runs `sweep(graph, messages, evidence) -> messages` to convergence on the device.

    Shared by every schedule: PARALL passes `step`; a batched schedule passes
    its own sweep. With `with_iteration`, the sweep is called as
    `sweep(graph, messages, evidence, iteration)` (iteration: () int32 from 0),
    e.g. for schedules that change from one iteration to the next (SEQRND).
    Must be called inside jit.
    """
    dtype = messages.dtype
    tol = jnp.asarray(tol, dtype)
    damping = jnp.asarray(damping, dtype)
    lo0 = log_odds(graph, messages, evidence)
    p0 = jax.nn.sigmoid(lo0)

    def cond(state):
        _, _, it, delta, conflict = state
        return (it < max_iters) & (delta >= tol) & ~conflict

    def body(state):
        msgs, p, it, _, _ = state
        swept = sweep(graph, msgs, evidence, it) if with_iteration else sweep(graph, msgs, evidence)
        new = _damp(swept, msgs, damping)
        lo = log_odds(graph, new, evidence)
        p_new = jax.nn.sigmoid(lo)
        conflict = jnp.any(jnp.isnan(p_new))
        delta = jnp.max(jnp.abs(p_new - p), initial=0.0)
        return new, p_new, it + 1, delta, conflict

    state = (messages, p0, jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, dtype),
             jnp.any(jnp.isnan(p0)))
    msgs, p, it, delta, conflict = jax.lax.while_loop(cond, body, state)
    lo = log_odds(graph, msgs, evidence)
    return RunResult(messages=msgs, log_odds=lo, marginals=p, iterations=it,
                     converged=(delta < tol) & ~conflict, delta=delta, conflict=conflict)


BACKENDS = ("xla", "scatter", "pallas", "fused", "pallas_interpret", "fused_interpret")


def default_backend() -> str:
    """The PARALL backend used unless one is forced: `$FASTLBP_BACKEND`, else "xla".

    On the H200 (BENCHMARKS.md) the fused Pallas kernels ("fused") run an
    iteration 3.0x faster than XLA at 0.5M edges and 1.7x at 5M (f64) and
    compile in 1.7-2.3 s (XLA: 0.7-1.4 s), and triage rounds at the ftp size
    take about as long with them (warm median 3.0 vs 2.5 ms); but building
    their layout costs 0.3-0.9 s per graph, which a one-shot `fastlbp rank`
    does not win back, so XLA stays the default on every device and long
    runs and sessions opt in with `FASTLBP_BACKEND=fused` (or
    `backend="fused"`). The segment-sum Pallas kernel ("pallas") is slower
    than XLA and kept for comparison.
    """
    import os

    name = os.environ.get("FASTLBP_BACKEND", "").strip() or "xla"
    from fastlbp.errors import InputError

    if name not in BACKENDS:
        raise InputError("$FASTLBP_BACKEND", None, f"{name!r} is not a backend; choose one of "
                         f"{', '.join(BACKENDS)}")
    if name in ("pallas", "fused") and jax.default_backend() != "gpu":
        raise InputError("$FASTLBP_BACKEND", None, f"{name!r} needs a GPU (this JAX runs on "
                         f"{jax.default_backend()}); {name}_interpret runs the same kernels, slowly")
    return name


def default_unroll() -> int:
    # Several sweeps per while-loop trip saved the trip's ~15 us on the H200
    # for the Pallas path but cost time for the XLA path (BENCHMARKS.md).
    return 1


def _parall_loop(graph, messages, evidence, tol, max_iters, damping, backend: str, unroll: int):
    """PARALL to convergence, carrying the per-variable aggregates between sweeps.

    Each while-loop trip runs `unroll` sweeps; a sweep after convergence
    (or conflict, or max_iters) leaves the state unchanged, so results do
    not depend on `unroll`.
    """
    dtype = messages.dtype
    tol = jnp.asarray(tol, dtype)
    damping = jnp.asarray(damping, dtype)
    evidence = evidence.astype(dtype)
    agg0 = kernels.var_aggregates(graph, messages, evidence, backend)
    p0 = jax.nn.sigmoid(kernels.combine(agg0))
    params = kernels.factor_params(graph, dtype)  # loop-invariant: its logs once per run

    def sweep(state):
        msgs, agg, p, it, delta, conflict = state
        mu = kernels.var_to_factor(graph, msgs, agg)
        finite, is_zero = kernels.factor_inputs(graph, mu)
        fac = kernels.factor_aggregates(graph, finite, is_zero, backend)
        new = _damp(kernels.factor_messages(graph, mu, finite, is_zero, fac, params), msgs, damping)
        agg_new = kernels.var_aggregates(graph, new, evidence, backend)
        p_new = jax.nn.sigmoid(kernels.combine(agg_new))
        conflict_new = jnp.any(jnp.isnan(p_new))
        delta_new = jnp.max(jnp.abs(p_new - p), initial=0.0)
        return new, agg_new, p_new, it + 1, delta_new, conflict_new

    def active(state):
        _, _, _, it, delta, conflict = state
        return (it < max_iters) & (delta >= tol) & ~conflict

    def body(state):
        for _ in range(unroll):
            if unroll == 1:
                state = sweep(state)
            else:
                go = active(state)
                new = sweep(state)
                state = jax.tree_util.tree_map(lambda a, b, go=go: jnp.where(go, a, b), new, state)
        return state

    state = (messages, agg0, p0, jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, dtype),
             jnp.any(jnp.isnan(p0)))
    msgs, agg, p, it, delta, conflict = jax.lax.while_loop(active, body, state)
    return RunResult(messages=msgs, log_odds=kernels.combine(agg), marginals=p, iterations=it,
                     converged=(delta < tol) & ~conflict, delta=delta, conflict=conflict)


_RUNNERS: dict = {}


def parall_runner(backend: str | None = None, unroll: int | None = None):
    """The jitted PARALL loop `(graph, messages, evidence, tol, max_iters, damping) -> RunResult`.

    Args:
        backend: "xla", "scatter", "pallas", "fused" (two Pallas kernels per
            sweep, `fastlbp.fused`), or "pallas_interpret"/"fused_interpret"
            (the same kernels interpreted, for the CPU); None picks the
            faster one for the default device.
        unroll: sweeps per while-loop trip; None picks per device.
    """
    backend = backend or default_backend()
    fused_backend = backend in ("fused", "fused_interpret")
    # Eight sweeps per trip measured fastest for the fused kernels, and now that each kernel
    # is lowered once, no slower to compile than four (BENCHMARKS.md, session 5).
    key = (backend, unroll or (8 if fused_backend else default_unroll()))
    if fused_backend:
        from fastlbp import fused

        return fused.runner(key[1], interpret=key[0] == "fused_interpret")
    if key not in _RUNNERS:
        _RUNNERS[key] = jax.jit(functools.partial(_parall_loop, backend=key[0], unroll=key[1]))
    return _RUNNERS[key]


def _parall_sweep(graph, messages, evidence):
    agg = kernels.var_aggregates(graph, messages, evidence)
    return kernels.factor_to_var(graph, kernels.var_to_factor(graph, messages, agg))


def run(graph: FactorGraph, evidence: jax.Array | np.ndarray | None = None,
        messages: jax.Array | None = None, *, tol: float = 1e-6, max_iters: int = 1000,
        damping: float = 0.0, dtype=jnp.float64, backend: str | None = None) -> RunResult:
    """Runs PARALL to convergence (or `max_iters`) in one jitted loop.

    Args:
        graph: the factor graph.
        evidence: (V,) log-odds (0 none, +inf true, -inf false); None = none.
        messages: (E,) warm start; None = uniform. Its dtype wins over `dtype`.
        tol: stop when the largest marginal change is below this.
        max_iters: most iterations.
        damping: weight of the old message in [0, 1).
        backend: "xla", "pallas" or "pallas_interpret"; None = per device.

    Returns:
        A `RunResult`.
    """
    if messages is None:
        messages = init(graph, dtype)
    dtype = messages.dtype
    if evidence is None:
        evidence = jnp.zeros((graph.num_vars,), dtype)
    return parall_runner(backend)(graph, messages, jnp.asarray(evidence, dtype), jnp.asarray(tol, dtype),
                       jnp.asarray(max_iters, jnp.int32), jnp.asarray(damping, dtype))


def parall_sweep(graph, messages, evidence):
    """One PARALL sweep without damping (for `iterate` and the batched engines)."""
    return _parall_sweep(graph, messages, evidence)


def __getattr__(name):
    # `run_parall_jit`: the default PARALL runner (kept for callers of the first API).
    if name == "run_parall_jit":
        return parall_runner()
    raise AttributeError(name)


__all__ = ["RunResult", "init", "step", "run", "marginals", "log_odds", "iterate", "parall_sweep",
           "parall_runner", "default_backend"]
