"""One contract for LBP, exact inference and sampling: prepare once, then rounds.

    prepared = METHODS["sample"].prepare(model, plan)     # host work, once per model (`methods.METHODS`)
    rnd, prepared, messages = prepared.round(inputs)      # a round from the current evidence

A prepared method is immutable: a round returns the method to keep (LBP's
runner may have finished deferred host work, `fastlbp.engines.loop.Runner.step`;
exact inference and the sampler keep the model they built for soft evidence)
and, for LBP, the messages the next round warm-starts from (None for methods
without messages). A method that cannot take a round's labels raises one of
`REFUSALS`; a session with `method="auto"` then runs LBP's round instead
(`fastlbp.inference.session.Session.run`).

Which method a name means, how it describes itself and what it falls back to is the method table,
`fastlbp.inference.methods.METHODS`; each row's `prepare` makes one of the classes here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp import engines
from fastlbp.core import constraints
from fastlbp.core.errors import ContradictoryEvidence, InferenceError
from fastlbp.core.graph import FactorGraph, label_codes
from fastlbp.core.model import Model
from fastlbp.core.settings import SAMPLE_PATHS, Settings
from fastlbp.engines.exact import ExactTooWide
from fastlbp.engines.loop import Controls, Runner, controls, init
from fastlbp.engines.sampling import TooFewSamples
from fastlbp.inference import lbp_flags
from schedules.plan import Plan

# Non-convergence remedies (`Settings.remedies`): damping in the log domain, then Bingo's average.
REMEDY_DAMPINGS = (0.5, 0.8)
AVERAGED_ITERATIONS = 100

# What a method raises when it cannot take a round's labels (the sampler's effective size, exact's width).
REFUSALS = (TooFewSamples, ExactTooWide)


@dataclasses.dataclass
class Round:
    """One inference round: marginals as numpy on the host, plus how it went."""

    marginals: np.ndarray  # (V,) float64 P(x=1)
    log_odds: np.ndarray  # (V,) float64
    iterations: int
    converged: bool
    delta: float
    seconds: float
    remedy: str | None = None  # what produced the numbers when the round did not converge
    method: str = "lbp"  # the name of the method that made it: a key of `fastlbp.inference.methods.METHODS`
    stderr: np.ndarray | None = None  # (V,) standard errors of a sampled round
    lower: np.ndarray | None = None  # (V,) 95% interval of a sampled round (Wilson on the effective size)
    upper: np.ndarray | None = None
    info: dict | None = None  # what exact inference or sampling took (`Marginals.info`)
    reason: str | None = None  # why `method="auto"` picked this method (`fastlbp.inference.methods.choose`)
    # Why an LBP round's numbers may mislead (`lbp_flags`): evidence its messages could not carry,
    # a remedy or no convergence, messages still moving; short sentences, () when nothing is suspicious.
    flags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a round reads.

    Attributes:
        model: the model.
        labels: {variable: truth}.
        soft: {variable: p} soft evidence (`fastlbp.inference.soft`), checked.
        settings: the run's settings (tol, max_iters, damping, remedies; the sampler's budgets).
        messages: (E,) LBP's warm start, or None (cold: uniform messages).
        evidence: () -> (V,) evidence log-odds on the device (made only by a method that needs it).
        controls: () -> the round's `Controls` on the device (the session keeps them between rounds).
        flags: flag an LBP round whose answer may mislead (`lbp_flags.flag_round`; a learning E-step
            reads no flags).
    """

    model: Model
    labels: dict[int, bool]
    soft: dict[int, float]
    settings: Settings
    messages: jax.Array | None
    evidence: Callable[[], jax.Array]
    controls: Callable[[], Controls]
    flags: bool = True


class Prepared(Protocol):
    """A method prepared for one model (`fastlbp.inference.methods.Method.prepare`)."""

    name: str

    def round(self, inputs: Inputs) -> tuple[Round, Prepared, jax.Array | None]:
        """(the round, the method for the next rounds, LBP's messages or None). Raises `REFUSALS`."""

    def warm(self, inputs: Inputs) -> Prepared:
        """The method with what its rounds run compiled ahead (a fallback's, in a thread); itself where
        nothing compiles ahead."""

    def with_model(self, model: Model) -> Prepared:
        """The method for `model`: the same structure, other factor probabilities (data: no recompile)."""


def _reference_round(m, n: int | None = None) -> Round:
    """The `Round` of exact inference's or the sampler's `Marginals`, cut to the first `n` variables."""

    def cut(a):
        return None if a is None or n is None else np.asarray(a)[:n]

    def keep(a):
        return a if n is None else cut(a)

    return Round(marginals=keep(m.marginals), log_odds=keep(m.log_odds), iterations=0, converged=True,
                 delta=0.0, seconds=m.seconds, method=m.method, stderr=keep(m.stderr), lower=keep(m.lower),
                 upper=keep(m.upper), info=m.info)


@dataclasses.dataclass(frozen=True)
class Observed:
    """The model with an observed child per soft-evidence variable (`fastlbp.inference.soft.observed_model`).

    Attributes:
        key: the soft evidence it was built for, as sorted (variable, p) pairs.
        model: the model with the observed children appended (after the original variables).
        labels: {child: True} of the observations.
    """

    key: tuple
    model: Model
    labels: dict[int, bool]


def _observed(model: Model, soft: dict[int, float], last: Observed | None) -> Observed:
    """`last` when it was built for this soft evidence, else a new `Observed`."""
    from fastlbp.inference.soft import observed_model

    key = tuple(sorted(soft.items()))
    if last is not None and last.key == key:
        return last
    observed, labels = observed_model(model, dict(key))
    return Observed(key, observed, labels)


@dataclasses.dataclass(frozen=True, eq=False)
class Exact:
    """Exact inference (bucket elimination, `fastlbp.engines.exact`): nothing to prepare but soft evidence's
    model (exact inference plans per graph object, so it is kept)."""

    observed: Observed | None = None
    name: str = "exact"

    def round(self, inputs: Inputs) -> tuple[Round, Exact, None]:
        from fastlbp.engines import exact

        if not inputs.soft:
            m = exact.exact_marginals(inputs.model, inputs.labels, inputs.settings)
            return _reference_round(m), self, None
        obs = _observed(inputs.model, inputs.soft, self.observed)
        m = exact.exact_marginals(obs.model, {**inputs.labels, **obs.labels}, inputs.settings)
        return _reference_round(m, inputs.model.num_vars), dataclasses.replace(self, observed=obs), None

    def warm(self, inputs: Inputs) -> Exact:
        return self  # exact inference compiles per graph and label set, at its round

    def with_model(self, model: Model) -> Exact:
        return Exact()


@dataclasses.dataclass(frozen=True, eq=False)
class Sample:
    """Importance sampling (`fastlbp.engines.sampling`): its sampler, with room for every alarm's label.

    The sampler's compiled batches serve every label set (`Sampler.reserve`); it is made (or taken from
    `methods.choose`, which built it to decide) once. Soft evidence samples the observed model with its
    own sampler, kept while the soft evidence stays the same.
    """

    sampler: Any = None  # fastlbp.engines.sampling.Sampler of the model, made at the first round
    observed: Observed | None = None
    observed_sampler: Any = None
    name: str = "sample"

    def round(self, inputs: Inputs) -> tuple[Round, Sample, None]:
        from fastlbp.engines import sampling
        from fastlbp.engines.sharded_sampling import make_sampler

        devices = inputs.settings.devices
        if inputs.soft:
            obs = _observed(inputs.model, inputs.soft, self.observed)
            labels = {**inputs.labels, **obs.labels}
            sampler = self.observed_sampler if obs is self.observed else None
            sampler = sampler or _reserved(make_sampler(obs.model.graph, obs.model.var_names,
                                                        devices=devices), obs.model, labels)
            m = sampling.sample_marginals(obs.model, labels, inputs.settings, sampler=sampler)
            nxt = dataclasses.replace(self, observed=obs, observed_sampler=sampler)
            return _reference_round(m, inputs.model.num_vars), nxt, None
        model = inputs.model
        sampler = self.sampler or make_sampler(model.graph, model.var_names, devices=devices,
                                               host=SAMPLE_PATHS[inputs.settings.sample_path])
        if not sampler.reserved:
            _reserved(sampler, model, inputs.labels)
        m = sampling.sample_marginals(model, inputs.labels, inputs.settings, sampler=sampler)
        return _reference_round(m), (self if sampler is self.sampler else dataclasses.replace(
            self, sampler=sampler)), None

    def warm(self, inputs: Inputs) -> Sample:
        return self  # the sampler is built (and compiled) at its first round

    def with_model(self, model: Model) -> Sample:
        return Sample()  # the sampler's host plan holds the probabilities: made again at the next round


def _devices_info(runner: Runner) -> dict | None:
    """An LBP round's info: the devices its runner spreads over, when more than one (None otherwise)."""
    devices = getattr(runner.info, "devices", 1)
    return {"devices": devices} if devices > 1 else None


def _reserved(sampler, model: Model, labels: dict[int, bool]):
    """`sampler` with room for every alarm's label and those given: labels as they come compile nothing."""
    sampler.reserve(set(model.alarms) | set(labels))
    return sampler


@dataclasses.dataclass(frozen=True, eq=False)
class LBP:
    """Loopy belief propagation: the plan's runner and the graph it reads on the device.

    A round runs to convergence from the given messages; one that does not converge
    (tol > 0, `Settings.remedies`) is retried with damping, then averaged (`_remedy`).
    """

    runner: Runner
    graph: FactorGraph  # on the device, only the fields the runner reads
    # (V,) bool variables hard before any label (`lbp_flags.forced_without_labels`), found by the first
    # round with many hard variables: the round checks skip them.
    forced: np.ndarray | None = None
    name: str = "lbp"

    def round(self, inputs: Inputs) -> tuple[Round, LBP, jax.Array]:
        """Raises:
            ContradictoryEvidence: the labels have probability 0 (proved by the model's hard
                constraints, `fastlbp.core.constraints`), naming a minimal conflicting subset.
            InferenceError: LBP met a conflict the hard constraints do not imply (a numerical failure).
        """
        s = inputs.settings
        msgs = inputs.messages if inputs.messages is not None else init(inputs.model.graph, s.dtype)
        evidence = inputs.evidence()  # once per round: the remedies' extra rounds reuse it
        result, rnd, lbp = self._step(inputs, msgs, inputs.controls(), evidence)
        if not rnd.converged and s.remedies and s.tol > 0:
            result, rnd, lbp = lbp._remedy(inputs, result, rnd, evidence)
        if not inputs.flags:
            return rnd, lbp, result.messages
        if lbp.forced is None and np.count_nonzero(np.isinf(rnd.log_odds)) > lbp_flags.HARD_TO_CHECK:
            lbp = dataclasses.replace(lbp, forced=lbp_flags.forced_without_labels(inputs.model.graph))
        return dataclasses.replace(rnd, flags=lbp._flags(inputs, result, rnd)), lbp, result.messages

    def warm(self, inputs: Inputs) -> LBP:
        """This method with its round compiled (one iteration from uniform messages, result unused):
        the round a fallback later runs compiles nothing (its controls are data)."""
        s = inputs.settings
        one = controls(s.tol, 1, s.damping, s.dtype)
        _, _, lbp = self._step(inputs, init(inputs.model.graph, s.dtype), one, inputs.evidence())
        return lbp

    def with_model(self, model: Model) -> LBP:
        graph = engines.device_graph(model.graph, self.runner.reads)
        return dataclasses.replace(self, graph=graph, forced=None)  # other probabilities: other hard ones

    def _step(self, inputs: Inputs, messages, ctl: Controls, evidence: jax.Array):
        """One jitted round from `messages`: (device result, host `Round` without its time, LBP to keep)."""
        result, runner = self.runner.step(self.graph, messages, evidence, ctl)
        lbp = self if runner is self.runner else dataclasses.replace(self, runner=runner)
        # One transfer for all results: their copies overlap (1 ms less per round at 0.2M
        # variables than one np.asarray after another).
        conflict, lo, marginals, iterations, converged, delta = jax.device_get(
            (result.conflict, result.log_odds, result.marginals, result.iterations, result.converged,
             result.delta))
        if bool(conflict):
            raise _conflict_error(inputs.model, inputs.labels)
        return result, Round(marginals=np.asarray(marginals, dtype=np.float64),
                             log_odds=np.asarray(lo, dtype=np.float64), iterations=int(iterations),
                             converged=bool(converged), delta=float(delta), seconds=0.0,
                             info=_devices_info(runner)), lbp

    def _remedy(self, inputs: Inputs, result, rnd: Round, evidence: jax.Array):
        """A round that did not converge: damped retries from its messages, then Bingo's average.

        Damping 0.5, then 0.8 (in the log domain; those at or below the
        session's own damping are skipped) continue from the last messages; the
        first that converges gives the numbers. Otherwise the marginals of the
        next `AVERAGED_ITERATIONS` iterations are averaged (as Bingo did), and
        the round stays "not converged".
        """
        s, lbp = inputs.settings, self
        total = rnd.iterations
        for damping in REMEDY_DAMPINGS:
            if damping <= s.damping:
                continue
            result, rnd, lbp = lbp._step(inputs, result.messages,
                                         controls(s.tol, s.max_iters, damping, s.dtype), evidence)
            total += rnd.iterations
            if rnd.converged:
                return result, dataclasses.replace(rnd, iterations=total, remedy=f"damping {damping}"), lbp
        one = controls(s.tol, 1, s.damping, s.dtype)
        probabilities = []
        for _ in range(AVERAGED_ITERATIONS):
            result, step, lbp = lbp._step(inputs, result.messages, one, evidence)
            probabilities.append(step.marginals)
        p = np.mean(probabilities, axis=0)
        with np.errstate(divide="ignore"):
            lo = np.log(p) - np.log1p(-p)
        return result, Round(marginals=p, log_odds=lo, iterations=total + AVERAGED_ITERATIONS,
                             converged=False, delta=rnd.delta, seconds=0.0, info=rnd.info,
                             remedy=f"average of the last {AVERAGED_ITERATIONS} iterations"), lbp

    def _flags(self, inputs: Inputs, result, rnd: Round) -> tuple[str, ...]:
        """`lbp_flags.flag_round` of a round: from its messages around the labelled and hard variables."""
        # The log-odds of the messages: an averaged round's own are the average's.
        lo = rnd.log_odds if rnd.remedy is None or rnd.converged else np.asarray(
            jax.device_get(result.log_odds), np.float64)
        s = inputs.settings
        return lbp_flags.flag_round(
            inputs.model.graph, result.messages, lo, inputs.labels, dtype=s.dtype, converged=rnd.converged,
            iterations=rnd.iterations, delta=rnd.delta, remedy=rnd.remedy, tol=s.tol,
            var_names=inputs.model.var_names, forced=self.forced)


def _conflict_error(model: Model, labels: dict[int, bool]) -> Exception:
    """What LBP's conflict means: contradictory labels when the hard constraints prove it.

    Decided from the model's hard structure, never from the messages, so a
    label of positive probability is never refused.
    """
    core = constraints.conflicting_labels(model.graph, labels)
    if core is None:
        return InferenceError("LBP met contradictory messages that the model's hard constraints do not "
                              "imply (a numerical failure, please report it); the labels are kept")
    return ContradictoryEvidence({model.var_names[v]: t for v, t in core.items()})


def prepare_lbp(model: Model, plan: Plan) -> LBP:
    """LBP prepared for `model` under `plan`: the plan's runner and the graph's fields it reads."""
    runner = engines.make_runner(model, plan)
    # Only the graph's fields the runner reads go to the device (`engines.device_graph`):
    # of the graph's 29.5 bytes per edge (1M Bingo-like edges) the XLA PARALL and SEQFIX
    # engines hold 15.7, TOPO 5.6 and the fused PARALL kernels 4.5.
    return LBP(runner, engines.device_graph(model.graph, runner.reads))


def hard_evidence(num_vars: int, labels: dict[int, bool], dtype) -> jax.Array:
    """(V,) evidence log-odds of `labels` on the device: +-inf where labelled, 0 elsewhere."""
    # One byte per variable crosses to the device, not eight: at 0.2M variables that
    # was 0.9 ms of a 5 ms round.
    return _evidence_from_codes(jnp.asarray(label_codes(num_vars, labels)), dtype)


@functools.partial(jax.jit, static_argnums=1)
def _evidence_from_codes(codes: jax.Array, dtype) -> jax.Array:
    """(V,) int8 codes (1 true, -1 false, 0 unlabelled) -> (V,) evidence log-odds of `dtype`."""
    inf = jnp.asarray(jnp.inf, dtype)
    return jnp.where(codes > 0, inf, jnp.where(codes < 0, -inf, jnp.zeros((), dtype)))


__all__ = ["Round", "Inputs", "Prepared", "LBP", "Exact", "Sample", "REFUSALS", "prepare_lbp",
           "hard_evidence", "REMEDY_DAMPINGS", "AVERAGED_ITERATIONS"]
