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


def _parall_sweep(graph, messages, evidence):
    agg = kernels.var_aggregates(graph, messages, evidence)
    return kernels.factor_to_var(graph, kernels.var_to_factor(graph, messages, agg))


@jax.jit
def _run_parall(graph, messages, evidence, tol, max_iters, damping):
    return iterate(_parall_sweep, graph, messages, evidence, tol, max_iters, damping)


def run(graph: FactorGraph, evidence: jax.Array | np.ndarray | None = None,
        messages: jax.Array | None = None, *, tol: float = 1e-6, max_iters: int = 1000,
        damping: float = 0.0, dtype=jnp.float64) -> RunResult:
    """Runs PARALL to convergence (or `max_iters`) in one jitted loop.

    Args:
        graph: the factor graph.
        evidence: (V,) log-odds (0 none, +inf true, -inf false); None = none.
        messages: (E,) warm start; None = uniform. Its dtype wins over `dtype`.
        tol: stop when the largest marginal change is below this.
        max_iters: most iterations.
        damping: weight of the old message in [0, 1).

    Returns:
        A `RunResult`.
    """
    if messages is None:
        messages = init(graph, dtype)
    dtype = messages.dtype
    if evidence is None:
        evidence = jnp.zeros((graph.num_vars,), dtype)
    return _run_parall(graph, messages, jnp.asarray(evidence, dtype), jnp.asarray(tol, dtype),
                       jnp.asarray(max_iters, jnp.int32), jnp.asarray(damping, dtype))


def parall_sweep(graph, messages, evidence):
    """One PARALL sweep without damping (for `iterate` and the batched engines)."""
    return _parall_sweep(graph, messages, evidence)


run_parall_jit = _run_parall
__all__ = ["RunResult", "init", "step", "run", "marginals", "log_odds", "iterate", "parall_sweep",
           "run_parall_jit"]
