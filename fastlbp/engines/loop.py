"""The contract every engine meets, and the one loop they share.

An engine turns a graph and `Settings` into a `Runner` once (host work: the
schedule's analysis, the kernels' layout), then runs rounds as a pure jitted
function of data:

    runner = engines.make_runner(model, settings)          # once per graph
    result = runner(graph, messages, evidence, controls)   # every round

`Runner.layout` is the engine's precomputed layout (a pytree of device
arrays: segment-sum plans, chunk plans, padded rows); it is passed to the
jitted `run` as an argument, never captured as a constant, so a new label or
new controls never recompile. `Controls` carries tol, max_iters and damping
as device scalars for the same reason.

`Runner.reads` names the graph's fields the round reads; the session puts only
those on the device (`device_graph`), so a field no kernel reads costs no
device memory.

`iterate` is the loop: damping in the log domain, the convergence test on
marginals, conflict detection and the iteration cap, with the per-variable
aggregates carried from one sweep to the next. PARALL (XLA), relaxation,
the chunk loop and the persistent Pallas kernel run their sweeps in it; the
fused Pallas kernels implement the same loop inside the kernels (control
cells on the device) and are checked against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp.core import equations, logspace, segments
from fastlbp.core.equations import damp  # the loop's damping is the equations' (one definition)
from fastlbp.core.graph import FactorGraph
from fastlbp.core.settings import Settings
from schedules.plan import Plan, make_plan


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a round returns (all device arrays).

    Attributes:
        messages: (E,) factor-to-variable log-odds after the last iteration.
        log_odds: (V,) marginal log-odds log P(x=1) - log P(x=0).
        marginals: (V,) P(x=1).
        iterations: () int32, iterations run.
        converged: () bool, largest marginal change < tol at the end.
        delta: () largest marginal change in the last iteration (`logspace.log_odds_change`).
        conflict: () bool, contradictory evidence (some marginal is NaN).
        unsettled: () bool or None: a relaxed sweep ran out of its pass budget and the
            layout had no chunk plan to finish it exactly, so the round stopped *before*
            that sweep (`messages` are its start, `iterations` the sweeps completed);
            `Runner.step` builds the chunk plan and finishes the round. None for
            engines whose sweeps are always exact.
    """

    messages: jax.Array
    log_odds: jax.Array
    marginals: jax.Array
    iterations: jax.Array
    converged: jax.Array
    delta: jax.Array
    conflict: jax.Array
    unsettled: jax.Array | None = None


class Controls(NamedTuple):
    """A round's controls as device scalars (data: changing them never recompiles)."""

    tol: jax.Array  # () messages' dtype
    max_iters: jax.Array  # () int32
    damping: jax.Array  # () messages' dtype


def controls(tol: float = 1e-6, max_iters: int = 1000, damping: float = 0.0, dtype=jnp.float64) -> Controls:
    """`Controls` on the device from Python numbers."""
    return Controls(jnp.asarray(tol, dtype), jnp.asarray(max_iters, jnp.int32), jnp.asarray(damping, dtype))


RunFn = Callable[[FactorGraph, Any, jax.Array, jax.Array, Controls], RunResult]


@dataclasses.dataclass(frozen=True)
class RunnerInfo:
    """What preparing a runner decided and took (host facts, for `--verbose`, `fastlbp info` and
    benchmarks).

    Attributes:
        backend: what runs, in `Settings.backend`'s names ("xla", "scatter", "pallas", "fused", or
            *_interpret: `Plan.backend`).
        reason: why "auto" chose them (`schedules.plan.Plan.for_graph`); None when named.
        unroll: sweeps (PARALL) or chunks (chunk loops) per while-loop trip.
        layout_seconds: host time of the layout.
        compiled: the schedule's host analysis: `schedules.Compiled` (chunk loops) or
            `schedules.Relaxation` (relaxation); None for PARALL.
        tuning: the fused kernels' tiles and warps {"tile", "var_tile", "num_warps",
            "var_warps"}, or the persistent kernel's {"num_warps", "atomic"}; empty otherwise.
        finish_seconds: host time of the chunk plan a relaxation runner built when a sweep did
            not settle (`Runner.step`); None before.
        devices: devices a round runs on (PARALL over several: `sharded_parall`).
    """

    backend: str
    reason: str | None = None
    unroll: int = 1
    layout_seconds: float = 0.0
    compiled: Any = None
    tuning: dict = dataclasses.field(default_factory=dict)
    finish_seconds: float | None = None
    devices: int = 1

    @property
    def relaxation(self):
        """The `schedules.Relaxation` of a relaxation runner (budget, bound, open, ...), else None."""
        return self.compiled if hasattr(self.compiled, "bound") else None


@dataclasses.dataclass(frozen=True, eq=False)
class Runner:
    """An engine prepared for one graph: immutable, so sessions (and their copies) share it.

    Attributes:
        name: what runs, e.g. "parall/xla", "seqfix/relaxed", "parall/fused".
        layout: the engine's precomputed layout (a pytree of device arrays, or None).
        run: pure, jitted `run(graph, layout, messages, evidence, controls) -> RunResult`;
            messages (E,) and evidence (V,) are log-odds in the round's dtype.
        info: what the preparation decided and took (`RunnerInfo`).
        finish: None, or host work deferred until a round needs it: `finish() -> Runner`, the
            runner that finishes a round that came back `unsettled` (the relaxation engine's
            chunk plan, `fastlbp.engines.relaxed`). `step` returns that runner; nothing is
            stored in this one.
        reads: the `FactorGraph` fields `run` reads (after `finish` too), or None for all of
            them: `device_graph(graph, reads)` is the graph the runner needs on the device.
    """

    name: str
    layout: Any
    run: RunFn
    info: RunnerInfo
    finish: Callable[[], Runner] | None = None
    reads: frozenset[str] | None = None

    def step(self, graph: FactorGraph, messages: jax.Array, evidence: jax.Array,
             controls: Controls) -> tuple[RunResult, Runner]:
        """A round, and the runner for the next ones (this one, or its `finish`ed successor).

        Pure in the optax sense: the caller keeps the returned runner; a runner whose
        deferred work a round needed returns the runner that did it.
        """
        result = self.run(graph, self.layout, messages, evidence, controls)
        # Only a runner with deferred work asks the device whether it is needed (one
        # scalar transfer per round until then).
        if self.finish is None or result.unsettled is None or not bool(result.unsettled):
            return result, self
        done = self.finish()
        ran = result.iterations
        rest = done.run(graph, done.layout, result.messages, evidence,
                        controls._replace(max_iters=controls.max_iters - ran))
        return dataclasses.replace(rest, iterations=rest.iterations + ran), done

    def __call__(self, graph: FactorGraph, messages: jax.Array, evidence: jax.Array,
                 controls: Controls) -> RunResult:
        """A round (`step` without its successor: a caller that runs several rounds keeps it)."""
        return self.step(graph, messages, evidence, controls)[0]


def graph_of(model) -> FactorGraph:
    """The factor graph of a model, or the graph itself."""
    return model if isinstance(model, FactorGraph) else model.graph


def plan_for(model, plan: Plan | Settings | None = None) -> Plan:
    """`plan` (or the plan of settings, default `Settings()`) placed on JAX's platform and made
    concrete for `model`'s graph (`Plan.for_graph`): what every engine's `make_runner` reads."""
    if not isinstance(plan, Plan):
        plan = make_plan(plan)
    return plan.for_graph(graph_of(model).num_edges)


# The `FactorGraph` fields each part of a round reads (`Runner.reads`, `device_graph`).
# factor_kind, p1 and p2 (`equations.factor_params`): every engine.
PARAMS = frozenset({"factor_kind", "p1", "p2"})
# `equations.var_aggregates` through the "xla" segment plans: var_offsets for `num_vars` only.
VAR_SUMS = frozenset({"var_offsets"})
# ... through a scatter or the Pallas segment sum: the variable order's segment ids and gather.
VAR_SCATTER = frozenset({"slot_var", "var_edges"})
# A PARALL-like sweep, `equations.var_to_factor` then `equations.factor_to_var`.
SWEEP = PARAMS | {"factor_offsets", "edge_factor", "edge_var", "edge_is_head"}
GRAPH_FIELDS = frozenset(f.name for f in dataclasses.fields(FactorGraph))


def lean_graph(graph: FactorGraph, reads: frozenset[str] | None) -> FactorGraph:
    """`graph` with the fields outside `reads` set to None (None: all kept), on the host.

    factor_kind goes as int8: AND/OR compare the same (three bytes a factor less).

    Raises:
        ValueError: `reads` names a field `FactorGraph` does not have.
    """
    if reads is None:
        return graph
    unknown = set(reads) - GRAPH_FIELDS
    if unknown:
        raise ValueError(f"FactorGraph has no field {sorted(unknown)[0]!r}")
    drop = {name: None for name in GRAPH_FIELDS - set(reads)}
    lean = dataclasses.replace(graph, **drop)
    if lean.factor_kind is not None:
        lean = dataclasses.replace(lean, factor_kind=lean.factor_kind.astype(jnp.int8))
    return lean


def xla_sums(graph: FactorGraph, *, var: bool = True, factor: bool = True) -> equations.Summation:
    """`equations.summation(graph, "xla")` with only the plans a round reads (the other None).

    The variables' plan serves `var_aggregates` (every loop); the factors' plan only the
    XLA factor kernels (`equations.factor_to_var`): the chunk loops never read it, and it is
    about 13 bytes per edge (Bingo-like graphs).
    """
    return equations.Summation(
        var=segments.build(np.asarray(graph.var_offsets), np.asarray(graph.var_edges), graph.num_edges)
        if var else None,
        factor=segments.build(np.asarray(graph.factor_offsets), None, graph.num_edges) if factor else None)


def device_graph(graph: FactorGraph, reads: frozenset[str] | None = None) -> FactorGraph:
    """The graph on the device with only the fields in `reads` (`Runner.reads`; None: all).

    The others are None, so a kernel that reads one fails at trace time rather than
    reading a stale array. At 100M Bingo-like edges the XLA engines read neither
    `slot_var`, `edge_slot`, `var_edges` nor `factor_head` (13 bytes per edge), and the
    fused PARALL kernels only factor_kind, p1 and p2 (their layout holds the rest).

    Args:
        graph: the factor graph (numpy or device arrays).
        reads: field names (`Runner.reads`).
    """
    return jax.device_put(lean_graph(graph, reads))


def init(graph: FactorGraph, dtype=jnp.float64) -> jax.Array:
    """Uniform messages: (E,) zeros (log-odds 0 = m(1) = m(0))."""
    return jnp.zeros((graph.num_edges,), dtype=dtype)


# A sweep: (graph, layout, messages, aggregates, evidence, iteration) -> new messages (undamped).
# `aggregates` are the (V, 3) per-variable sums of `messages` and the evidence
# (`equations.var_aggregates`), which the loop has already computed.
Sweep = Callable[[FactorGraph, Any, jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


def iterate(sweep: Sweep, graph: FactorGraph, layout: Any, sums: equations.Summation, messages: jax.Array,
            evidence: jax.Array, ctl: Controls, *, unroll: int = 1, flagged: bool = False,
            aggregates: Callable[[jax.Array], jax.Array] | None = None,
            across: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]] | None = None) -> RunResult:
    """Runs `sweep` to convergence on the device: the loop every engine but the fused one uses.

    A round stops when the largest change of any marginal is below `tol`, at
    `max_iters`, or when some marginal is NaN (contradictory evidence). The
    change is measured on log-odds, relative to their size
    (`logspace.log_odds_change`), so a round cannot stop while evidence still
    moves a tiny marginal by orders of magnitude. Each
    while-loop trip runs `unroll` sweeps; a sweep after the stop leaves the
    state unchanged, so results do not depend on `unroll`. Must be called
    inside jit.

    Args:
        sweep: the engine's sweep (see `Sweep`).
        graph: the factor graph.
        layout: the engine's layout, handed to `sweep`.
        sums: how the loop sums each variable's messages (`equations.Summation`).
        messages: (E,) warm start.
        evidence: (V,) evidence log-odds.
        ctl: tol, max_iters, damping.
        unroll: sweeps per while-loop trip (static).
        flagged: the sweep returns (messages, unsettled): an unsettled sweep is not taken,
            the round stops before it and says so (`RunResult.unsettled`).
        aggregates: messages -> (V, 3) per-variable sums with the evidence (default
            `equations.var_aggregates` over `graph`; a device's part of a sharded graph adds the
            other devices' sums of its variables on the cut, `sharded_parall`).
        across: (largest change, conflict) of this device -> those of every device (a sharded
            round: the loop's test must agree on every device; default: as they are).
    """
    dtype = messages.dtype
    tol = jnp.asarray(ctl.tol, dtype)
    damping = jnp.asarray(ctl.damping, dtype)
    max_iters = ctl.max_iters
    evidence = evidence.astype(dtype)
    if aggregates is None:
        def aggregates(msgs):
            return equations.var_aggregates(graph, sums, msgs, evidence)
    if across is None:
        def across(delta, conflict):
            return delta, conflict
    agg0 = aggregates(messages)
    lo0 = equations.combine(agg0)

    def one(state):
        msgs, agg, lo, it, _, _, _ = state
        out = sweep(graph, layout, msgs, agg, evidence, it)
        new, halt = out if flagged else (out, None)
        new = damp(new, msgs, damping)
        agg_new = aggregates(new)
        lo_new = equations.combine(agg_new)
        change, bad = logspace.log_odds_change(lo_new, lo)
        delta, conflict = across(jnp.max(change, initial=0.0), jnp.any(bad))
        nxt = (new, agg_new, lo_new, it + 1, delta, conflict, state[6])
        if not flagged:
            return nxt
        # An unsettled sweep is not exact: keep the state it started from and stop.
        stopped = state[:6] + (jnp.asarray(True),)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(halt, a, b), stopped, nxt)

    def active(state):
        _, _, _, it, delta, conflict, unsettled = state
        return (it < max_iters) & (delta >= tol) & ~conflict & ~unsettled

    def body(state):
        for _ in range(unroll):
            if unroll == 1:
                state = one(state)
            else:
                go = active(state)
                new = one(state)
                state = jax.tree_util.tree_map(lambda a, b, go=go: jnp.where(go, a, b), new, state)
        return state

    state = (messages, agg0, lo0, jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, dtype),
             across(jnp.asarray(jnp.inf, dtype), jnp.any(jnp.isnan(lo0)))[1], jnp.asarray(False))
    msgs, agg, lo, it, delta, conflict, unsettled = jax.lax.while_loop(active, body, state)
    return RunResult(messages=msgs, log_odds=lo, marginals=jax.nn.sigmoid(lo), iterations=it,
                     converged=(delta < tol) & ~conflict & ~unsettled, delta=delta, conflict=conflict,
                     unsettled=unsettled if flagged else None)


__all__ = ["RunResult", "Controls", "controls", "Runner", "RunnerInfo", "RunFn", "Sweep", "init", "damp",
           "iterate", "device_graph", "lean_graph", "graph_of", "plan_for", "xla_sums", "PARAMS", "VAR_SUMS",
           "VAR_SCATTER", "SWEEP", "GRAPH_FIELDS"]
