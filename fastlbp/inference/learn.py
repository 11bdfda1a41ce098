"""Rule probabilities learned from labels: EM on the Bayesian network (docs/DESIGN.md section 15).

    result = learn([model_a, model_b], [labels_a, labels_b], LearnOptions(method="exact"))
    result.probability        # (R,) MAP rule probabilities, rules matched by name over the graphs

The model. A clause c of rule r is X_c = z_c AND body_c with an independent
coin z_c ~ Bernoulli(p_r). Given labels L, the log-likelihood's stationary
points in p_r satisfy sum_c P(X_c | L) = p_r sum_c P(body_c | L); with a prior
density proportional to p^a (1-p)^b (a Beta(a+1, b+1), `a` and `b` pseudo-counts)
the MAP step is

    p_r <- (a_r + F_r) / (a_r + b_r + B_r),   F_r = sum_c P(X_c=1 | L),  B_r = sum_c P(body_c=1 | L)

(EM whose missing data are the coins of clauses whose body holds; coins of
clauses whose body fails are independent of everything and drop out). It
never lowers log P(L) + log prior: `LearnResult.objective` is checked to rise
in the tests, exactly where the E-step is exact.

The E-step needs P(body_c | L), which is no variable of the model. Each clause
with a body gets one (`augment`): b_c = AND(body_c) (p1 = 1) and X_c =
AND(b_c) (p1 = p_r). The joint over the original variables is unchanged (b_c
is a function of the body), and so are LBP's fixed points (b_c passes messages
through unchanged), the induced width (b_c is the last auxiliary of the
clause's binarised chain) and the sampler's worlds. Only p1 of the clause
factors depends on the rule probabilities: every engine gets them as data,
so an EM step plans and compiles nothing new. Each method's E-step is its row's
(`fastlbp.inference.methods.Method.e_step`, `fastlbp.inference.e_steps`):

* exact: one `Engine` per graph (plan and program once); a step rewrites
  the clause tables' log entries in place (`Engine.logflat`).
* sample: the importance sampler with the labels as weights, a fresh host
  plan per step (the coins' probabilities are its data), the same seed every
  step (common random numbers, so steps differ by p, not by noise).
* lbp: LBP prepared once per graph (its runner and compiled round kept),
  warm-started from the last step's messages; a step replaces the device
  graph's p1 only.

Graphs are handled one after another; their counts add up per rule name. Exact
E-steps take a batch of points in one pass, so EM runs from several starts at once
and the information's and the profile's points are batches.

Where the rest lives: the augmented model and a block's posterior in
`learn_model`; EM's chains, starts and Newton steps in `learn_search` (the mixin
`Search`); the information, the profile check of each interval and the hull of
the points evaluated near the top in `learn_intervals` (the mixin `Intervals`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

import numpy as np

from datalog.rule_probs import MAX_PRIOR_STRENGTH, RuleLine
from fastlbp.core.errors import SettingsError
from fastlbp.core.jax_setup import float64
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.inference.learn_intervals import Intervals, beta_quantile, hull
from fastlbp.inference.learn_model import EPS, Augmented, _Posterior, augment, e_step_method, union
from fastlbp.inference.learn_search import START_STEPS, Search
from fastlbp.inference.methods import check_name, chooses, method_of

# Once the information is known, a rule whose step is below this fraction of its posterior standard
# deviation has settled: further steps change no interval and no ranking (taint family, 5 small graphs,
# exact E-step: Newton's 4 steps left the rules the labels barely inform moving by 1e-3 to 1e-2 against
# posterior deviations of 0.1-0.3, reported not converged after 18 E-steps; plain EM took 498).
POSTERIOR_FRACTION = 0.05
# Points of exact E-steps per batch (`Learner.counts_many`): the information's 2 per rule, the profile's
# bounds, EM's starts. On the taint family (avrora size, 2-core CPU) 32 points cost about 5 single runs.
BATCH = 32


@dataclasses.dataclass(frozen=True)
class LearnOptions:
    """How to learn.

    Attributes:
        method: the E-step's inference: "exact", "sample", "lbp", or "auto"
            (per graph: exact where the width fits, else LBP; `e_step_method`).
        max_iters: most EM steps.
        tol: stop when no rule's probability moves by more than this in a step.
        prior_strength: s; a rule whose stated (or `prior`) probability is
            p0 gets pseudo-counts a = s p0, b = s (1 - p0): a rule no clause
            informs keeps p0, a rule with n informative clauses moves from
            p0 at about n / (n + s) of the way to what they say.
        prior: {rule name: p0} overriding the graphs' stated probabilities as
            the prior's centre (and the starting point).
        prior_strengths: {rule name: s} overriding `prior_strength` for those
            rules (`fastlbp learn --prior FILE`'s `Rk: p s` lines).
        settings: inference settings (exact_memory, samples, seed, LBP's
            tol/max_iters/schedule ...).
        accelerate: Anderson acceleration of the EM steps, and with `information` Newton steps once
            EM stalls (`Learner.run`): EM is slow where the labels leave much unobserved (alarms
            only).
        information: after EM, the observed information of the labels about the
            rules (`Learner.information`: 2 more E-steps per rule with clauses),
            which gives each rule's informed support and interval; without it
            they are the complete-data ones (expected bodies held, an upper bound).
        step: the logit step of the information's central differences.
        batch: with the LBP E-step, run the graphs as one disjoint union (`union`): one compiled
            round and one device run per E-step instead of one per graph (LBP's fixed points on
            disjoint components are each graph's own).
        information_tol: LBP's tolerance in the information's E-steps (tighter than a ranking's:
            the differences divide the E-step's error, summed over thousands of clauses, by 2 step).
        e_step_samples: worlds of a sampled E-step (the sampler's seed is `settings.seed`; no time
            limit and no standard-error target, so that with its fixed seed EM is a deterministic map
            of p: common random numbers). 50,000 on weblech's alarm labels: 1,400-4,000 effective
            worlds, 0.7 s on a 2-core CPU.
        profile: with `information` and exact E-steps, check each interval's bounds against the profile
            posterior and move them out where it is flatter than the Laplace approximation says
            (`Learner._profile`: per bound 1 E-step where the Laplace bound holds, at most 9).
        starts: with `information` and exact E-steps, EM from this many points at once (the current
            probabilities, 0.5, random ones; `Learner._best_start`), the best one's maximum kept; the
            points they pass widen the intervals (`hull`). 1: EM from the current probabilities only.
        e_step_min_accepted: fewest effective worlds of a sampled E-step (more are drawn, doubling,
            below it): at the stated probabilities labels can be improbable (weblech: 0.07 % of
            the worlds count, so `Settings.min_accepted`'s 1,000 took 1.6M worlds, 19 s), and EM's
            first steps need no more; the run's last E-steps report their own.
    """

    method: str = "auto"
    max_iters: int = 100
    tol: float = 1e-4
    prior_strength: float = 2.0
    prior: dict[str, float] = dataclasses.field(default_factory=dict)
    prior_strengths: dict[str, float] = dataclasses.field(default_factory=dict)
    settings: Settings = dataclasses.field(default_factory=Settings)
    accelerate: bool = True
    information: bool = True
    step: float = 0.05
    information_tol: float = 1e-9
    batch: bool = True
    e_step_samples: int = 50_000
    e_step_min_accepted: int = 250
    profile: bool = True
    starts: int = 6

    def __post_init__(self):
        check_name(self.method)
        if not self.max_iters >= 1:
            raise SettingsError(f"max_iters must be at least 1, got {self.max_iters}")
        if not self.tol >= 0:
            raise SettingsError(f"tol must be >= 0, got {self.tol}")
        for name, strength in [("", self.prior_strength), *self.prior_strengths.items()]:
            if not 0 < strength <= MAX_PRIOR_STRENGTH:
                raise SettingsError(f"the prior strength{f' of rule {name}' if name else ''} must be a "
                                    f"positive number of at most {MAX_PRIOR_STRENGTH:g} pseudo-counts, got "
                                    f"{strength:g}")
        if not (0 < self.step <= 1):
            raise SettingsError(f"the information's logit step must be in (0, 1], got {self.step}")
        if self.starts < 1:
            raise SettingsError(f"EM needs at least one start, got {self.starts}")
        if self.e_step_samples < 1 or self.e_step_min_accepted < 1:
            raise SettingsError(f"a sampled E-step needs worlds, got {self.e_step_samples} and "
                                f"{self.e_step_min_accepted} effective")

    def e_step_settings(self) -> Settings:
        """The settings of an E-step: `settings` with the sampled E-step's worlds (`e_step_samples`)."""
        return dataclasses.replace(self.settings, samples=self.e_step_samples, target_se=0.0,
                                   sample_seconds=0.0, min_accepted=self.e_step_min_accepted,
                                   max_samples=max(self.settings.max_samples, self.e_step_samples))


@dataclasses.dataclass(frozen=True)
class OnlineOptions:
    """Online learning while labels come (`simulate(..., online=...)`, triage): after every `every`
    labels, `steps` EM steps warm-started from the last probabilities, then the next round ranks with
    the new ones.

    Attributes:
        options: `LearnOptions` (method, prior, settings of the E-step).
        steps: EM steps per update.
        every: labels between updates.
    """

    options: LearnOptions = dataclasses.field(default_factory=LearnOptions)
    steps: int = 3
    every: int = 1

    def __post_init__(self):
        if self.steps < 1 or self.every < 1:
            raise SettingsError(f"online learning needs steps >= 1 and every >= 1, got {self.steps}, "
                                f"{self.every}")


@dataclasses.dataclass(frozen=True)
class LearnResult:
    """Learned rule probabilities and their evidence.

    Attributes:
        names: (R,) rule names (first appearance over the graphs).
        probability: (R,) float64 the MAP probabilities.
        prior: (R,) float64 the prior's centre p0 of each rule (the stated probability unless overridden).
        fired: (R,) float64 expected clauses that fired, sum_c P(X_c | L), at the final step.
        body: (R,) float64 expected clauses whose body held, sum_c P(body_c | L).
        clauses: (R,) int64 clause instances of the rule in the models (pruned clauses excluded:
            nothing labelled depends on them).
        support: (R,) float64 informed clause instances: how many clauses whose body and firing were
            both seen would tell as much about p_r as the labels do, n_r = 1 / (p_r (1 - p_r)
            Var(logit p_r | L)) - (a_r + b_r), with the variance from the observed information
            (`Learner.information`: other rules' probabilities not held fixed, so an alarm that
            several rules derive informs their product, not each). Without `information`: the
            expected bodies held (an upper bound). At most `body` up to the E-step's error.
        lower, upper: (R,) float64 95% interval: with `information`, quantiles of Beta(a + n p + 1,
            b + n (1 - p) + 1), n the support (the posterior of n fully observed clauses at the learned
            rate: the Laplace interval of the observed information, also where p is at 0 or 1; one-sided
            where the central one would leave out p), with exact E-steps and `LearnOptions.profile`
            widened where the profile posterior is flatter (`Learner._profile`) and to every point an
            exact E-step evaluated within the 95 % likelihood-ratio drop of the best (`hull`); else
            of Beta(a + F + 1, b + B - F + 1), the expected counts taken as observed (narrower than the
            truth where the labels leave much missing).
        information: whether support and the intervals come from the observed information.
        iterations: E-steps run (the information's not counted; with several `starts`, a round of theirs, one
            batch, counts one).
        converged: whether the last step moved every probability by at most `tol`.
        objective: per E-step, sum over graphs of log P(L) plus the log prior at the probabilities
            it was taken at (exact E-steps only, else empty): plain EM never lowers it.
        methods: the E-step's method per graph.
        seconds: wall time of EM.
        information_seconds: wall time of the information's E-steps (0 without).
        noise: (R,) float64 the Monte Carlo standard error of each probability where an E-step is
            sampled (else None): of the posterior's maximum (`Learner.map_noise`) with `information`,
            else of the last EM step (`Learner.step_noise`, smaller where EM crawls).
        effective_worlds: the fewest effective worlds of the last sampled E-step over the graphs, or
            None.
        starts: the points EM ran from (`LearnOptions.starts`; 1 unless the E-steps are exact).
    """

    names: tuple[str, ...]
    probability: np.ndarray
    prior: np.ndarray
    fired: np.ndarray
    body: np.ndarray
    clauses: np.ndarray
    support: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    information: bool
    iterations: int
    converged: bool
    objective: tuple[float, ...]
    methods: tuple[str, ...]
    seconds: float
    information_seconds: float = 0.0
    noise: np.ndarray | None = None
    effective_worlds: float | None = None
    starts: int = 1

    def as_dict(self) -> dict[str, float]:
        """{rule name: learned probability}."""
        return dict(zip(self.names, self.probability.tolist(), strict=True))

    def lines(self, wide: float = 0.1) -> list[RuleLine]:
        """The rules as `RuleLine`s with support and interval ("no support, prior kept" for a rule
        without clauses; "poorly identified" where the interval is wider than `wide`)."""
        out = []
        kind = "informed" if self.information else "at most (expected bodies held)"
        for i, name in enumerate(self.names):
            if self.clauses[i] == 0:
                comment = f"{name} no support: no clause of it in the labelled graphs, prior kept"
            else:
                comment = (f"{name} support {self.support[i]:.0f} ({kind}) of {int(self.clauses[i])} "
                           "clauses, "
                           f"expected bodies held {self.body[i]:.1f}, fired {self.fired[i]:.1f}; "
                           f"95% interval [{self.lower[i]:.4f}, {self.upper[i]:.4f}]")
                if self.upper[i] - self.lower[i] > wide:
                    comment += "; poorly identified by these labels"
            out.append(RuleLine(name, float(self.probability[i]), comment))
        return out


class Learner(Search, Intervals):
    """EM over several graphs of one analysis, kept between calls (online learning warm-starts it).

    Args:
        models: models made from derivation graphs (rules matched by name).
        labels: per model {variable: truth}, the evidence.
        options: `LearnOptions`.
        soft: per model {variable: p} soft evidence (`fastlbp.inference.soft`), or None: the E-step's
            posterior conditions on it too, through an observed child per soft variable appended to
            the augmented model (labelled true; its factor's p1 = p, p2 = 1 - p), which leaves the
            clauses' factors and variables where they were.
    """

    def __init__(self, models: Sequence[Model], labels: Sequence[dict[int, bool]],
                 options: LearnOptions | None = None, soft: Sequence[dict[int, float]] | None = None):
        if len(models) != len(labels) or (soft is not None and len(soft) != len(models)):
            raise SettingsError(f"{len(models)} graphs but {len(labels)} label sets"
                                + ("" if soft is None else f" and {len(soft)} soft evidence sets"))
        if not models:
            raise SettingsError("learning needs at least one graph")
        self.options = options or LearnOptions()
        self.augs = [augment(m) for m in models]
        # Soft evidence: the observed children's labels, added to each graph's labels.
        self.observed: list[dict[int, bool]] = [{} for _ in models]
        for i, evidence in enumerate(soft or []):
            if evidence:
                from fastlbp.inference.soft import check_soft, observed_model

                aug = self.augs[i]
                model, self.observed[i] = observed_model(aug.model, check_soft(evidence, models[i].num_vars))
                self.augs[i] = dataclasses.replace(aug, model=dataclasses.replace(model, meta=aug.model.meta))
        names: dict[str, int] = {}
        stated: dict[str, float] = {}
        for m in models:
            for r in m.meta["derivation"].rules:
                names.setdefault(r.name, len(names))
                stated.setdefault(r.name, r.probability)
        self.names = tuple(names)
        self.index = names
        self.global_rule = [np.array([names[n] for n in aug.names], np.int64)[aug.rule] for aug in self.augs]
        p0 = np.array([self.options.prior.get(n, stated[n]) for n in self.names], np.float64)
        self.p0 = np.clip(p0, EPS, 1 - EPS)
        s = np.array([self.options.prior_strengths.get(n, self.options.prior_strength) for n in self.names],
                     np.float64)
        self.a, self.b = s * self.p0, s * (1 - self.p0)
        self.probability = self.p0.copy()
        self.labels = [{**x, **obs} for x, obs in zip(labels, self.observed, strict=True)]
        # E-step blocks: one per graph, or (LBP, batch) one union of all of them.
        together = (not chooses(self.options.method) and method_of(self.options.method).batched_e_steps
                    and self.options.batch and len(models) > 1)
        self.blocks = [list(range(len(models)))] if together else [[i] for i in range(len(models))]
        self._posteriors: list[_Posterior | None] = [None] * len(self.blocks)

    def current(self) -> dict[str, float]:
        """{rule name: probability} now (after the steps run so far)."""
        return dict(zip(self.names, self.probability.tolist(), strict=True))

    def set_labels(self, i: int, labels: dict[int, bool]) -> None:
        """New evidence for graph i (the E-step's engines are kept: labels are data); its soft evidence
        stays."""
        labels = {**labels, **self.observed[i]}
        self.labels[i] = dict(labels)
        b = next(k for k, block in enumerate(self.blocks) if i in block)
        post = self._posteriors[b]
        if post is not None:
            post.labels = self._block(b)[1]

    def warm_starts(self) -> list[np.ndarray | None]:
        """Per E-step block, the LBP messages its next E-step starts from (None where the block's E-step
        is not LBP or has not run): the only state of EM besides `probability` (a triage snapshot
        stores it, `fastlbp.triage.snapshot`)."""
        return [np.asarray(post.e_step.messages) if post is not None and post.e_step.messages is not None
                else None for post in self._posteriors]

    @float64
    def set_warm_starts(self, messages: Sequence[np.ndarray | None]) -> None:
        """Takes `warm_starts()` of a learner of the same graphs, labels and options.

        Raises:
            SettingsError: messages of another count, length or precision.
        """
        import jax.numpy as jnp

        if len(messages) != len(self.blocks):
            raise SettingsError(f"{len(messages)} warm starts for {len(self.blocks)} E-step blocks")
        for b, m in enumerate(messages):
            if m is None:
                continue
            post = self._posterior(b)
            if post.e_step.messages is None:
                raise SettingsError(f"a warm start for block {b}, whose E-step is {post.method}")
            old = post.e_step.messages
            if m.shape != old.shape or np.dtype(m.dtype) != np.dtype(old.dtype):
                raise SettingsError(f"warm start of {m.shape} {m.dtype} for messages of {old.shape} "
                                    f"{old.dtype}")
            post.e_step.messages = jnp.asarray(m)

    def _block(self, b: int) -> tuple[Augmented, dict[int, bool], np.ndarray]:
        """Block b's augmented model, labels and (K,) global rule per clause."""
        block = self.blocks[b]
        if len(block) == 1:
            return self.augs[block[0]], dict(self.labels[block[0]]), self.global_rule[block[0]]
        aug, labels, _ = union([self.augs[i] for i in block], [self.global_rule[i] for i in block],
                               self.names, [self.labels[i] for i in block])
        return aug, labels, aug.rule

    def _posterior(self, b: int) -> _Posterior:
        if self._posteriors[b] is None:
            aug, labels, rules = self._block(b)
            self._posteriors[b] = _Posterior(aug, labels, self.options.method, self.options.e_step_settings(),
                                             rules)
        return self._posteriors[b]

    def counts(self, probability: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """((R,) F, (R,) B, sum of log P(L)) at rule probabilities `probability` (R,)."""
        num_r = len(self.names)
        fired, body = np.zeros(num_r), np.zeros(num_r)
        var_fired, var_body = np.zeros(num_r), np.zeros(num_r)
        log_ev = 0.0
        for b in range(len(self.blocks)):
            post = self._posterior(b)
            f, bo = post(probability[post.rules])
            fired += np.bincount(post.rules, f, minlength=num_r)
            body += np.bincount(post.rules, bo, minlength=num_r)
            log_ev += post.log_evidence
            if post.noise is not None:
                var_fired += np.bincount(post.rules, post.noise[0] ** 2, minlength=num_r)
                var_body += np.bincount(post.rules, post.noise[1] ** 2, minlength=num_r)
        self._count_variance = (var_fired, var_body)
        return fired, body, log_ev

    def batched(self) -> bool:
        """Whether every block's E-step takes a batch of points in one pass (exact inference)."""
        return all(self._posterior(b).batched for b in range(len(self.blocks)))

    def counts_many(self, probability: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`counts` at each row of `probability` (B, R): ((B, R) F, (B, R) B, (B,) log P(L)). One pass per
        `BATCH` rows where the E-steps are `batched` (the same numbers as one `counts` per row, up to
        rounding); else `counts` row after row, in order (LBP's warm starts, the sampler's noise)."""
        points = np.atleast_2d(np.asarray(probability, np.float64))
        if not self.batched():
            rows = [self.counts(x) for x in points]
            return (np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
                    np.array([r[2] for r in rows], np.float64))
        num_r, n = len(self.names), len(points)
        fired, body, log_ev = np.zeros((n, num_r)), np.zeros((n, num_r)), np.zeros(n)
        for b in range(len(self.blocks)):
            post = self._posterior(b)
            for lo in range(0, n, BATCH):
                f, bo, le = post.many(points[lo:lo + BATCH][:, post.rules])
                for k in range(len(le)):
                    fired[lo + k] += np.bincount(post.rules, f[k], minlength=num_r)
                    body[lo + k] += np.bincount(post.rules, bo[k], minlength=num_r)
                log_ev[lo:lo + len(le)] += le
        self._count_variance = (np.zeros(num_r), np.zeros(num_r))
        return fired, body, log_ev

    def step_noise(self, fired: np.ndarray, body: np.ndarray) -> np.ndarray:
        """(R,) the Monte Carlo standard error of `mstep(fired, body)` from the last `counts`' sampled
        E-steps (0 where none is sampled): the delta method on (a + F) / (a + b + B), the clauses'
        errors taken as independent (they share worlds, so this is a scale, not a bound)."""
        var_fired, var_body = getattr(self, "_count_variance", (0.0, 0.0))
        p = self.mstep(fired, body)
        return np.sqrt(var_fired + p**2 * var_body) / (self.a + self.b + body)

    def objective(self, log_evidence: float, probability: np.ndarray) -> float:
        """log P(L) + sum_r a_r log p_r + b_r log(1 - p_r)."""
        return log_evidence + float(np.sum(self.a * np.log(probability) + self.b * np.log1p(-probability)))

    def mstep(self, fired: np.ndarray, body: np.ndarray) -> np.ndarray:
        """The MAP probabilities (R,) from expected counts F and B (R,)."""
        return np.clip((self.a + fired) / (self.a + self.b + body), EPS, 1 - EPS)

    def step(self) -> tuple[np.ndarray, np.ndarray, float]:
        """One EM step from `self.probability`; returns (F, B, log P(L) at the old probabilities)."""
        fired, body, log_ev = self.counts(self.probability)
        self.probability = self.mstep(fired, body)
        return fired, body, log_ev

    def run(self, max_iters: int | None = None, information: bool | None = None) -> LearnResult:
        """EM from the current probabilities until a step moves none by more than `tol` (or `max_iters`
        E-steps).

        EM is a fixed-point iteration p <- G(p) (an E-step, then the M-step). With `options.accelerate`,
        Anderson acceleration (type II, the last `ANDERSON_MEMORY` steps; Walker and Ni 2011): the
        next point is G(p_k) - dG gamma, gamma the least-squares fit of the residual f_k = G(p_k) -
        p_k by the residuals' differences dF, so that directions in which EM crawls (rules the
        labels barely inform) are taken in a few steps; one E-step per iteration. Safeguards: a
        point whose residual is over twice the last one's, or (exact E-step) whose objective fell,
        is replaced by plain EM's step from the last point and the memory restarts, so the exact
        objective never falls from one accepted point to the next.

        Converged: no rule's residual above `tol` or, where the E-step is sampled, above
        `NOISE_FRACTION` of its Monte Carlo standard error (`step_noise`): with the sampler's fixed
        seed EM is a deterministic map, but one whose steps below that noise change nothing the
        sampler can tell. The result then takes the last EM step. With `information` and
        `accelerate`, EM whose largest residual has not halved in `STALLED` E-steps hands over to
        Newton steps (`_newton`) with the information computed there (and kept for the intervals),
        converged once no rule moves by more than `MAP_NOISE_Z` Monte Carlo standard errors of the
        maximum (`map_noise`), `POSTERIOR_FRACTION` of its posterior standard deviation or `tol`.
        Newton steps that do not settle within `NEWTON_STEPS` hand back to accelerated EM from where
        they got (with that settling threshold too), and EM to Newton again when it stalls: the
        information is computed once.

        Then, with `information` (None: `options.information`), the support and intervals from the
        observed information (`covariance`), once, at the result.
        """
        start = time.perf_counter()
        opts = self.options
        most = opts.max_iters if max_iters is None else int(max_iters)
        objective: list[float] = []
        converged = False
        iterations = 0
        fired = body = np.zeros(len(self.names))
        noise = np.zeros(len(self.names))

        # Every point an exact E-step evaluated, with its log posterior: those within `PROFILE_DROP` of
        # the best lie inside each rule's profile interval (`hull`).
        seen: list[tuple[np.ndarray, float]] = []

        def evaluate(p):
            nonlocal iterations, fired, body, noise
            iterations += 1
            fired, body, log_ev = self.counts(p)
            noise = self.step_noise(fired, body)
            self._last_counts, self._last_noise = (fired, body), noise
            obj = math.nan if math.isnan(log_ev) else self.objective(log_ev, p)
            if not math.isnan(obj):
                objective.append(obj)
                seen.append((np.array(p, np.float64), obj))
            return self.mstep(fired, body), obj

        clauses = np.zeros(len(self.names), np.int64)
        for rules in self.global_rule:
            clauses += np.bincount(rules, minlength=len(self.names))
        use_info = opts.information if information is None else information
        newton = use_info and opts.accelerate  # Newton steps need the information the run computes
        x = self.probability
        cov = None
        info_s = 0.0
        settled = np.zeros(len(self.names))  # a step this small changes no conclusion (`POSTERIOR_FRACTION`)
        starts = max(1, int(opts.starts)) if use_info else 1
        if starts > 1 and self.batched():
            # Within the run's E-steps: `max_iters` bounds the starts' rounds too.
            x, rounds = self._best_start(x, starts, min(most, max(START_STEPS, most // 4)), seen)
            iterations += rounds
        else:
            starts = 1
        while iterations < most:
            x, converged, at = self._em(x, evaluate, most, lambda: iterations, settled,
                                        stop_when_stalled=newton)
            if converged or not newton or iterations >= most or at is None:
                break
            x, fired, body = at
            if cov is None:  # the information once, where EM stalled; kept for Newton and the intervals
                t = time.perf_counter()
                cov = self.covariance(x, clauses > 0)
                info_s = time.perf_counter() - t
                settled = POSTERIOR_FRACTION * x * (1 - x) * np.sqrt(np.maximum(np.diag(cov), 0.0))
            x, converged = self._newton(x, fired, body, cov, clauses > 0, evaluate, most - iterations,
                                        settled)
            if converged:
                break
            # Newton's steps with the information of the first point did not settle (the posterior
            # is far from quadratic there): EM (accelerated) again from where they got, Newton again
            # once it stalls, with the same information.
        self.probability = x
        seconds = time.perf_counter() - start - info_s
        p = self.probability.copy()
        sampled = [post.info.get("effective_samples", math.inf) for post in self._posteriors
                   if post is not None and post.noise is not None]
        effective = float(min(sampled)) if sampled else None
        if use_info:
            if cov is None:
                t = time.perf_counter()
                cov = self.covariance(p, clauses > 0)
                info_s = time.perf_counter() - t
            if sampled:
                noise = np.maximum(noise, self.map_noise(p, cov))
            var = np.diag(cov)
            with np.errstate(divide="ignore"):
                support = np.where(clauses > 0, np.maximum(1 / (p * (1 - p) * var) - (self.a + self.b), 0.0),
                                   0.0)
            # The labels tell no more than observing every clause whose body held (the complete data):
            # near 0 or 1 the logit's curvature, a difference of tiny scores, can say far more (taint
            # family: 126,599 "clauses" of a rule with 15,616, an interval leaving out its truth).
            support = np.minimum(support, np.maximum(body, 0.0))
            # The posterior of `support` fully observed clauses at the MAP's rate: the Laplace interval
            # inside (0, 1), and still one where the MAP sits at 0 or 1 (logit p's curvature vanishes).
            alpha, beta_ = self.a + support * p, self.b + support * (1 - p)
            lower = beta_quantile(0.025, alpha + 1, beta_ + 1, p)
            upper = beta_quantile(0.975, alpha + 1, beta_ + 1, p)
            # Near 0 or 1 the central interval can leave out the MAP itself: one-sided there.
            top, bottom = p > upper, p < lower
            lower = np.where(top, beta_quantile(0.05, alpha + 1, beta_ + 1, p), np.where(bottom, 0.0, lower))
            upper = np.where(bottom, beta_quantile(0.95, alpha + 1, beta_ + 1, p), np.where(top, 1.0, upper))
            if opts.profile and all(post is not None and method_of(post.method).exact
                                    for post in self._posteriors):
                t = time.perf_counter()
                lower, upper = self._profile(p, cov, lower, upper, clauses > 0, body, seen)
                info_s += time.perf_counter() - t
            lower, upper = hull(seen, lower, upper, clauses > 0)
        else:
            alpha = self.a + fired
            beta_ = self.b + np.maximum(body - fired, 0.0)
            lower = beta_quantile(0.025, alpha + 1, beta_ + 1, p)
            upper = beta_quantile(0.975, alpha + 1, beta_ + 1, p)
            support = np.asarray(body, np.float64).copy()
        return LearnResult(names=self.names, probability=p, prior=self.p0.copy(), fired=fired, body=body,
                           clauses=clauses, support=support, lower=np.asarray(lower, np.float64),
                           upper=np.asarray(upper, np.float64), information=bool(use_info),
                           iterations=iterations, converged=converged, objective=tuple(objective),
                           methods=self.methods(),
                           seconds=seconds, information_seconds=info_s,
                           noise=noise if sampled else None, effective_worlds=effective, starts=starts)

    def methods(self) -> tuple[str, ...]:
        """The E-step's method per graph ("" before its first E-step)."""
        out = [""] * len(self.augs)
        for block, post in zip(self.blocks, self._posteriors, strict=True):
            for i in block:
                out[i] = post.method if post is not None else ""
        return tuple(out)

def learn(models: Sequence[Model], labels: Sequence[dict[int, bool]] | None = None,
          options: LearnOptions | None = None) -> LearnResult:
    """MAP rule probabilities from the labels of one or many graphs (module docstring).

    Args:
        models: models made from derivation graphs of one analysis (rules matched by name).
        labels: per model {variable: truth}; None: each model's labels and ground truth
            (`model.labels` with `meta["truth"]`).
        options: `LearnOptions`.

    Raises:
        InputError: a model without rules.
        SettingsError: bad options.
        ContradictoryEvidence: a graph's labels have probability 0.
    """
    if labels is None:
        labels = [training_labels(m) for m in models]
    return Learner(models, labels, options).run()


def training_labels(model: Model) -> dict[int, bool]:
    """A model's ground truth and known labels: the evidence to learn from ({variable: truth}).

    The ground truth (`meta["truth"]`: derivation.json's "truth", a Bingo
    directory's oracle_queries.txt) says false for every alarm it does not
    name, as `fastlbp.inference.simulate.graph_truth` reads it; a graph
    without one gives only its labels.
    """
    truth = {int(v): bool(t) for v, t in model.meta.get("truth", {}).items() if int(v) >= 0}
    out = {int(a): truth.get(int(a), False) for a in model.alarms} if truth else {}
    out.update(truth)
    out.update(model.labels)
    return out


__all__ = ["learn", "e_step_method", "Learner", "LearnOptions", "OnlineOptions", "LearnResult", "augment",
           "union", "training_labels"]
