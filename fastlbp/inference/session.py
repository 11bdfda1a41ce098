"""`Session`: evidence, messages and settings for repeated, warm-started rounds on one model.

    import fastlbp
    model = fastlbp.load("data/weblech.json")
    session = fastlbp.Session(model, schedule="seqfix")
    session.run()
    session.label("race(13,15)", False)
    result = session.run()            # warm-started from the previous messages
    print(session.marginals()["race(13,15)"])
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp import engines
from fastlbp.core.errors import ContradictoryEvidence, InferenceError, SettingsError
from fastlbp.core.graph import label_codes
from fastlbp.core.jax_setup import float64
from fastlbp.core.model import UNDERIVABLE, Model
from fastlbp.core.plan import Plan, make_plan
from fastlbp.core.settings import CONTROL_FIELDS, Settings, settings_from
from fastlbp.engines.loop import Controls, controls, init
from fastlbp.inference import constraints, lbp_checks, methods
from fastlbp.io.writers import safe_name


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
    method: str = "lbp"  # "lbp", "exact" or "sample" (`Settings.method`)
    stderr: np.ndarray | None = None  # (V,) standard errors of a sampled round
    lower: np.ndarray | None = None  # (V,) 95% interval of a sampled round (Wilson on the effective size)
    upper: np.ndarray | None = None
    info: dict | None = None  # what exact inference or sampling took (`Marginals.info`)
    reason: str | None = None  # why `method="auto"` picked this method (`fastlbp.inference.methods.choose`)
    # Why an LBP round's numbers may mislead (`lbp_checks`): evidence its messages could not carry,
    # a remedy or no convergence, messages still moving; short sentences, () when nothing is suspicious.
    flags: tuple[str, ...] = ()


# Non-convergence remedies (`Settings.remedies`): damping in the log domain, then Bingo's average.
REMEDY_DAMPINGS = (0.5, 0.8)
AVERAGED_ITERATIONS = 100


class Session:
    """Evidence, messages and settings for repeated, warm-started rounds on one model.

    Changing labels, tol, max_iters or damping never recompiles: they are data.
    With `method="exact"` or `"sample"` a round is exact inference or sampling
    from the current labels (no messages, no warm start). With `method="auto"`
    (the default) the first round picks one (`fastlbp.inference.methods.choose`: exact where
    it fits, else sampling where it fits the time budget, else LBP) and the
    session keeps it (`Session.method`); a later round whose labels the sampler
    or exact inference cannot take runs LBP instead and says so in `Round.flags`.

    Args:
        model: the model (`fastlbp.load`).
        settings: the run's `Settings` (default `Settings()`).
        **overrides: single settings by keyword, e.g. `schedule="seqfix"`, `backend="fused"`.
    """

    @float64
    def __init__(self, model: Model, settings: Settings | None = None, *, plan: Plan | None = None,
                 **overrides):
        self._settings = settings_from(settings, **overrides)
        self.model = model
        # "auto" is decided at the first round, with its labels (`methods.choose`).
        self.choice = None if self._settings.method == "auto" else methods.Choice(self._settings.method)
        # LBP's runner (host work once per graph); exact inference and sampling need none.
        # What runs, decided and checked once (the schedule, the kernels, the platform): LBP may be
        # needed by a later round (a fallback), so its plan is checked whatever the method.
        self.plan = (plan or make_plan(self._settings)).placed()
        # LBP's runner, immutable: a round that finishes deferred host work returns the one to keep.
        self.runner = engines.make_runner(model, self.plan) if self._settings.method == "lbp" else None
        self._sampler = None
        # Only the graph's fields the runner reads go to the device (`engines.device_graph`):
        # of the graph's 29.5 bytes per edge (1M Bingo-like edges) the XLA PARALL and SEQFIX
        # engines hold 15.7, TOPO 5.6 and the fused PARALL kernels 4.5; exact inference and
        # sampling read the host graph and hold none.
        reads = self.runner.reads if self.runner is not None else frozenset()
        self.graph = engines.device_graph(model.graph, reads)
        self.labels: dict[int, bool] = dict(model.labels)
        # Soft evidence {variable: p} (`fastlbp.inference.soft`): data like the labels, never compiled in.
        self.soft: dict[int, float] = {}
        self._observed: tuple | None = None  # (soft items, observed model, its labels, its sampler)
        self.messages = init(model.graph, self.dtype)
        self.last: Round | None = None
        self._controls_key: tuple | None = None
        self._controls: Controls | None = None

    def fork(self) -> Session:
        """A session with this one's state and its own labels: a round on it leaves this one as it was
        (a round replaces the messages, `last` and the runner, an immutable `Runner`, never changes
        them in place)."""
        twin = copy.copy(self)
        twin.labels = dict(self.labels)
        return twin

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def method(self) -> str:
        """The method rounds use: `settings.method`, or what "auto" chose ("auto" before the first round)."""
        return self.choice.method if self.choice is not None else self._settings.method

    def _ensure_runner(self) -> None:
        """LBP's runner and the device graph it reads, made when a round first needs them."""
        if self.runner is None:
            self.runner = engines.make_runner(self.model, self.plan)
            self.graph = engines.device_graph(self.model.graph, self.runner.reads)

    @float64
    def set_parameters(self, model: Model) -> None:
        """Takes `model`'s factor probabilities: the same graph structure, other p1/p2 (learned rule
        probabilities, `fastlbp.io.rule_probs.apply_rule_probs`).

        They are data to LBP's compiled round (nothing recompiles; the messages are kept as a warm
        start); the sampler's host plan is made again at the next round, exact inference plans per
        graph object (`fastlbp.engines.exact.engine_for`).

        Raises:
            SettingsError: `model`'s graph has another structure.
        """
        old, new = self.model.graph, model.graph
        if (new.num_vars, new.num_factors, new.num_edges) != (old.num_vars, old.num_factors, old.num_edges) \
                or not np.array_equal(np.asarray(new.edge_var), np.asarray(old.edge_var)):
            raise SettingsError("set_parameters needs the same graph structure; start a new Session")
        self.model = model
        if self.runner is not None:
            self.graph = engines.device_graph(model.graph, self.runner.reads)
        self._sampler = None
        self._observed = None  # soft evidence's observed model: made again from the new parameters

    @settings.setter
    def settings(self, new: Settings) -> None:
        """Changes tol, max_iters or damping (data); other changes need a new session."""
        changed = [f.name for f in dataclasses.fields(Settings)
                   if getattr(new, f.name) != getattr(self._settings, f.name)]
        fixed = [name for name in changed if name not in CONTROL_FIELDS]
        if fixed:
            raise SettingsError(f"a session cannot change {', '.join(fixed)}; start a new Session")
        self._settings = new

    @property
    def dtype(self):
        return self._settings.dtype

    # Evidence -------------------------------------------------------------
    def _var(self, name_or_index: str | int) -> int:
        """The variable of an index, a variable name or any tuple of the input graph.

        Raises:
            KeyError: an unknown name, or a tuple without a variable in this
                model (the message says why and how to keep it).
        """
        if isinstance(name_or_index, int | np.integer):
            return int(name_or_index)
        r = self.model.resolve(name_or_index)  # KeyError names an unknown one
        if r.var < 0:
            keep = "" if r.how == UNDERIVABLE else (
                f"; to label it, start a Session on fastlbp.io.loading.keep_tuples(model, [{r.name!r}]), "
                "which keeps it as a variable")
            raise KeyError(f"'{safe_name(r.name)}' is not a variable of this model: {r.reason}{keep}")
        return r.var

    def label(self, name: str | int, truth: bool) -> None:
        """Labels a variable (its index or name) or any tuple of the input graph that is one.

        Raises:
            KeyError: see `_var`; a tuple compression removed needs
                `fastlbp.io.loading.keep_tuples` (or a labels file through
                `fastlbp.io.loading.load_labels`, which does it).
        """
        self.labels[self._var(name)] = bool(truth)

    def unlabel(self, name: str | int) -> None:
        self.labels.pop(self._var(name), None)

    def observe(self, name: str | int, p: float) -> None:
        """Soft evidence on a variable or tuple (see `label`): an independent observation that it is
        true, of likelihood ratio p / (1 - p) (`fastlbp.inference.soft`); p strictly in (0, 1)."""
        from fastlbp.inference.soft import check_soft

        v = self._var(name)
        self.soft[v] = check_soft({v: p}, self.model.num_vars)[v]

    @float64
    def evidence(self, labels: dict[int, bool] | None = None) -> jax.Array:
        """(V,) evidence log-odds on the device (+-inf where labelled, log(p / (1 - p)) where observed
        softly and not labelled)."""
        labels = self.labels if labels is None else labels
        # One byte per variable crosses to the device, not eight: at 0.2M variables that
        # was 0.9 ms of a 5 ms round.
        hard = _evidence_from_codes(jnp.asarray(label_codes(self.model.num_vars, labels)), self.dtype)
        if not self.soft:
            return hard
        from fastlbp.inference.soft import check_soft, soft_log_odds

        soft = soft_log_odds(self.model.num_vars, check_soft(self.soft, self.model.num_vars))
        return hard + jnp.asarray(soft, self.dtype)  # +-inf + finite: a label wins

    # Inference ------------------------------------------------------------
    @float64
    def controls(self) -> Controls:
        """tol, max_iters and damping on the device, sent again only when one changes: each
        host-to-device copy costs 0.15-0.25 ms on the H200 machine, a round three of them."""
        s = self._settings
        key = (s.tol, s.max_iters, s.damping, s.precision)
        if self._controls_key != key:
            self._controls_key = key
            self._controls = controls(s.tol, s.max_iters, s.damping, self.dtype)
        return self._controls

    @float64
    def run(self, *, warm: bool = True) -> Round:
        """Runs one round to convergence, warm-started from the last messages.

        Raises:
            ContradictoryEvidence: the labels have probability 0 (proved by
                the model's hard constraints, `fastlbp.inference.constraints`); names a
                minimal conflicting subset. Messages are left unchanged.
            InferenceError: LBP met a conflict the hard constraints do not
                imply (a numerical failure); the labels are kept.
        """
        start = time.perf_counter()
        if self.choice is None:
            self.choice = methods.choose(self.model, self._settings, self.labels)
            self._sampler = self.choice.sampler
        fallback = None
        if self.method != "lbp":
            from fastlbp.engines.exact import ExactTooWide
            from fastlbp.engines.sampling import TooFewSamples

            try:
                rnd = self._reference_round()
                self.last = dataclasses.replace(rnd, seconds=time.perf_counter() - start,
                                                reason=self.choice.reason or None)
                return self.last
            except (TooFewSamples, ExactTooWide) as err:
                if self._settings.method != "auto":
                    raise
                # The labels are beyond the chosen method: this round is LBP's, and says so.
                fallback = f"{self.method} refused these labels ({err}); LBP answered instead"
        self._ensure_runner()
        msgs = self.messages if warm else init(self.model.graph, self.dtype)
        evidence = self.evidence()  # once per run: the remedies' extra rounds reuse it
        result, rnd = self._round(msgs, self.controls(), evidence)
        s = self._settings
        if not rnd.converged and s.remedies and s.tol > 0:
            result, rnd = self._remedy(result, rnd, evidence)
        self.messages = result.messages
        flags = self._flags(result, rnd) + ((fallback,) if fallback else ())
        self.last = dataclasses.replace(rnd, seconds=time.perf_counter() - start, flags=flags,
                                        reason=self.choice.reason or None)
        return self.last

    def _flags(self, result, rnd: Round) -> tuple[str, ...]:
        """`lbp_checks.check_round` of a round: from its messages around the labelled and hard variables."""
        # The log-odds of the messages: an averaged round's own are the average's.
        lo = rnd.log_odds if rnd.remedy is None or rnd.converged else np.asarray(
            jax.device_get(result.log_odds), np.float64)
        return lbp_checks.check_round(
            self.model.graph, result.messages, lo, self.labels, dtype=self.dtype, converged=rnd.converged,
            iterations=rnd.iterations, delta=rnd.delta, remedy=rnd.remedy, tol=self._settings.tol,
            var_names=self.model.var_names)

    def _reference_round(self) -> Round:
        """A round of exact inference or sampling (`Settings.method`), from the current labels."""
        from fastlbp.engines import exact, sampling

        if self.soft:
            return self._observed_round()
        if self.method == "exact":
            m = exact.exact_marginals(self.model, self.labels, self._settings)
        else:
            if self._sampler is None:  # its plan and compiled batches serve every label set
                self._sampler = sampling.Sampler(self.model.graph, self.model.var_names)
            if not self._sampler.reserved:
                # Room for every alarm's label (and those given): labels as they come compile nothing.
                self._sampler.reserve(set(self.model.alarms) | set(self.labels))
            m = sampling.sample_marginals(self.model, self.labels, self._settings, sampler=self._sampler)
        return Round(marginals=m.marginals, log_odds=m.log_odds, iterations=0, converged=True, delta=0.0,
                     seconds=m.seconds, method=m.method, stderr=m.stderr, lower=m.lower, upper=m.upper,
                     info=m.info)

    def _observed_round(self) -> Round:
        """Exact inference or sampling with soft evidence: on the graph with an observed child per soft
        variable (`fastlbp.inference.soft.observed_model`), cut back to the model's variables."""
        from fastlbp.engines import exact, sampling
        from fastlbp.inference.soft import check_soft, observed_model

        key = tuple(sorted(check_soft(self.soft, self.model.num_vars).items()))
        if self._observed is None or self._observed[0] != key:
            model, obs = observed_model(self.model, dict(key))
            self._observed = (key, model, obs, None)
        _, model, obs, sampler = self._observed
        labels = {**self.labels, **obs}
        if self.method == "exact":
            m = exact.exact_marginals(model, labels, self._settings)
        else:
            if sampler is None:
                sampler = sampling.Sampler(model.graph, model.var_names)
                sampler.reserve(set(model.alarms) | set(labels))
                self._observed = (key, model, obs, sampler)
            m = sampling.sample_marginals(model, labels, self._settings, sampler=sampler)
        n = self.model.num_vars

        def cut(a):
            return None if a is None else np.asarray(a)[:n]
        return Round(marginals=cut(m.marginals), log_odds=cut(m.log_odds), iterations=0, converged=True,
                     delta=0.0, seconds=m.seconds, method=m.method, stderr=cut(m.stderr), lower=cut(m.lower),
                     upper=cut(m.upper), info=m.info)

    def _round(self, messages, ctl: Controls, evidence: jax.Array):
        """One jitted round from `messages`; (device result, host `Round` without its time)."""
        result, self.runner = self.runner.step(self.graph, messages, evidence, ctl)
        # One transfer for all results: their copies overlap (1 ms less per round at 0.2M
        # variables than one np.asarray after another).
        conflict, lo, marginals, iterations, converged, delta = jax.device_get(
            (result.conflict, result.log_odds, result.marginals, result.iterations, result.converged,
             result.delta))
        if bool(conflict):
            raise self._conflict_error()
        return result, Round(marginals=np.asarray(marginals, dtype=np.float64),
                             log_odds=np.asarray(lo, dtype=np.float64), iterations=int(iterations),
                             converged=bool(converged), delta=float(delta), seconds=0.0)

    def _remedy(self, result, rnd: Round, evidence: jax.Array):
        """A round that did not converge: damped retries from its messages, then Bingo's average.

        Damping 0.5, then 0.8 (in the log domain; those at or below the
        session's own damping are skipped) continue from the last messages; the
        first that converges gives the numbers. Otherwise the marginals of the
        next `AVERAGED_ITERATIONS` iterations are averaged (as Bingo did), and
        the round stays "not converged".
        """
        s = self._settings
        total = rnd.iterations
        for damping in REMEDY_DAMPINGS:
            if damping <= s.damping:
                continue
            result, rnd = self._round(result.messages, controls(s.tol, s.max_iters, damping, self.dtype),
                                      evidence)
            total += rnd.iterations
            if rnd.converged:
                return result, dataclasses.replace(rnd, iterations=total, remedy=f"damping {damping}")
        one = controls(s.tol, 1, s.damping, self.dtype)
        probabilities = []
        for _ in range(AVERAGED_ITERATIONS):
            result, step = self._round(result.messages, one, evidence)
            probabilities.append(step.marginals)
        p = np.mean(probabilities, axis=0)
        with np.errstate(divide="ignore"):
            lo = np.log(p) - np.log1p(-p)
        return result, Round(marginals=p, log_odds=lo, iterations=total + AVERAGED_ITERATIONS,
                             converged=False, delta=rnd.delta, seconds=0.0,
                             remedy=f"average of the last {AVERAGED_ITERATIONS} iterations")

    def _conflict_error(self) -> Exception:
        """What LBP's conflict means: contradictory labels when the hard constraints prove it.

        Decided from the model's hard structure, never from the messages, so a
        label of positive probability is never refused.
        """
        core = constraints.conflicting_labels(self.model.graph, self.labels)
        if core is None:
            return InferenceError("LBP met contradictory messages that the model's hard constraints do not "
                                  "imply (a numerical failure, please report it); the labels are kept")
        return ContradictoryEvidence({self.model.var_names[v]: t for v, t in core.items()})

    def marginals(self) -> dict[str, float]:
        """{variable name: P(=1)} from the last round (runs one if none yet)."""
        rnd = self.last or self.run()
        return dict(zip(self.model.var_names, rnd.marginals.tolist(), strict=True))

    def tuple_marginals(self) -> dict[str, float]:
        """{tuple name: P(=1)} of every tuple of the input graph from the last round (runs one if none).

        A tuple compression merged a clause into is its own variable; a
        constant input is 1.0, an underivable tuple 0.0 and a pruned tuple
        LBP's belief from its parents (`datalog.bayesnet.tuple_marginals`).
        A graph without derivations (a causal factor graph) gives `marginals()`.
        """
        from datalog.bayesnet import tuple_marginals

        rnd = self.last or self.run()
        values = tuple_marginals(self.model, rnd.marginals)
        return dict(zip(self.model.tuple_names, values.tolist(), strict=True))

    def marginal(self, name: str | int) -> float:
        """P(=1) of a variable or of any tuple of the input graph, from the last round (runs one if none).

        Raises:
            KeyError: an unknown name.
        """
        rnd = self.last or self.run()
        if isinstance(name, int | np.integer):
            return float(rnd.marginals[int(name)])
        r = self.model.resolve(name)
        if r.var >= 0:
            return float(rnd.marginals[r.var])
        return self.tuple_marginals()[r.name]


@functools.partial(jax.jit, static_argnums=1)
def _evidence_from_codes(codes: jax.Array, dtype) -> jax.Array:
    """(V,) int8 codes (1 true, -1 false, 0 unlabelled) -> (V,) evidence log-odds of `dtype`."""
    inf = jnp.asarray(jnp.inf, dtype)
    return jnp.where(codes > 0, inf, jnp.where(codes < 0, -inf, jnp.zeros((), dtype)))


@float64
def marginals(model: Model, labels: dict[int, bool] | None = None, settings: Settings | None = None, *,
              soft: dict[int, float] | None = None, **overrides) -> Round:
    """One cold round on `model` with `labels` (or the model's own labels) and `soft` evidence."""
    session = Session(model, settings, **overrides)
    if labels is not None:
        session.labels = dict(labels)
    for v, p in (soft or {}).items():
        session.observe(int(v), p)
    return session.run(warm=False)


__all__ = ["Session", "Round", "marginals", "CONTROL_FIELDS"]
