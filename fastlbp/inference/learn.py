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

Graphs are handled one after another; their counts add up per rule name.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

import numpy as np

from datalog.rule_probs import MAX_PRIOR_STRENGTH, RuleLine, clause_factors, rule_names
from fastlbp.core.errors import SettingsError
from fastlbp.core.graph import AND, FactorGraph, from_arrays
from fastlbp.core.jax_setup import float64
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.inference.methods import check_name, chooses, method_of

EPS = 1e-9  # probabilities stay inside (EPS, 1 - EPS): a coin of probability 0 or 1 is a hard constraint
# Anderson acceleration's memory (EM steps whose secants it combines): a few slow directions dominate
# EM where labels leave much unobserved (weblech's 16 rules from 11 alarm labels).
ANDERSON_MEMORY = 5
# A sampled E-step's run converges when no rule's step exceeds this fraction of its Monte Carlo standard
# error (steps below the noise move p by less than the sampler can tell apart).
NOISE_FRACTION = 0.25
# EM (accelerated) hands over to Newton steps on the posterior, with the observed information the run
# computes anyway, once its largest residual has not halved in this many E-steps: on weblech's alarm
# labels Anderson-accelerated EM with a sampled E-step crawled at residuals of 3-6e-3 from its 8th
# E-step on (rules the labels barely inform; the map's steps are rough where worlds change with p).
STALLED = 4
NEWTON_STEPS = 4  # Newton steps at most (one E-step each), with the information of the first point
# Newton steps converge when no rule moves by more than this many Monte Carlo standard errors of the
# posterior's maximum (`Learner.map_noise`): in directions the labels barely inform, the sampler's error
# in the gradient moves the maximum by far more than one EM step's error, and Newton's steps from there
# on are that noise (weblech: steps of 1.2-2.6 errors, 0.02-0.03 in p, after the first).
MAP_NOISE_Z = 3.0
# Once the information is known, a rule whose step is below this fraction of its posterior standard
# deviation has settled: further steps change no interval and no ranking (taint family, 5 small graphs,
# exact E-step: Newton's 4 steps left the rules the labels barely inform moving by 1e-3 to 1e-2 against
# posterior deviations of 0.1-0.3, reported not converged after 18 E-steps; plain EM took 498).
POSTERIOR_FRACTION = 0.05
# The profile check of the intervals (`Learner._profile`): the 95 % likelihood-ratio drop (chi-square(1)'s
# 0.95 quantile, 3.84, halved), the most tries per bound, the most a try moves a bound (times its logit
# distance from the maximum), and the logit past which a bound is 0 or 1.
PROFILE_DROP = 1.92
PROFILE_TRIES = 5
PROFILE_GROWTH = 4.0
PROFILE_EDGE = 12.0
PROFILE_STEPS = 2  # Newton steps toward the profile's maximum per try, stopped once they gain < PROFILE_GAIN
PROFILE_GAIN = 0.05
# Then accelerated EM steps among the others at most, where Newton's still leave the drop over the bound
# (taint family, avrora size: a bound at 0.964 of a rule whose ridge runs flat, within 0.7 nats, to 0.999).
PROFILE_EM_STEPS = 12
# Bisections of a one-sided rule's far bound (`Learner._profile_inward`).
PROFILE_BISECTIONS = 6
# EM from several starts (`Learner._best_start`, exact E-steps, `LearnOptions.starts`): the random starts'
# logit spread (0.5 to 0.98 within one standard deviation of 0.5), and the fewest E-steps per start.
START_SPREAD = 2.0
START_STEPS = 10
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
            points they pass widen the intervals (`_hull`). 1: EM from the current probabilities only.
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
class Augmented:
    """A model with a body variable per clause, and where its clauses are.

    Attributes:
        model: the augmented model (same variables first, then one b_c per clause with a body).
        clause_var: (K,) int64 X_c of each clause (a variable of the original model too).
        body_var: (K,) int64 b_c, -1 for a clause without a body (it always holds).
        factor: (K,) int64 the factor of X_c (whose p1 is the rule's probability).
        rule: (K,) int64 the clause's rule, an index into the graph's rules.
        names: the graph's rule names.
    """

    model: Model
    clause_var: np.ndarray
    body_var: np.ndarray
    factor: np.ndarray
    rule: np.ndarray
    names: list[str]

    def graph_with(self, clause_p: np.ndarray) -> FactorGraph:
        """The augmented graph with clause factors' p1 = clause_p ((K,) float64); p2 too where bodiless."""
        g = self.model.graph
        p1 = np.array(g.p1, np.float64, copy=True)
        p2 = np.array(g.p2, np.float64, copy=True)
        p1[self.factor] = clause_p
        bodiless = self.body_var < 0
        p2[self.factor[bodiless]] = clause_p[bodiless]
        return dataclasses.replace(g, p1=p1, p2=p2)


def augment(model: Model) -> Augmented:
    """Adds b_c = AND(body_c) for every clause with a body and makes X_c = AND(b_c) (module docstring).

    Raises:
        InputError: the model has no rules (not a derivation graph).
    """
    names = rule_names(model)
    factor, rule = clause_factors(model)
    g = model.graph
    off = np.asarray(g.factor_offsets, np.int64)
    ev = np.asarray(g.edge_var, np.int64)
    heads = np.asarray(g.factor_head, np.int64)
    kinds = np.asarray(g.factor_kind, np.int64)
    num_f, num_v = heads.size, model.num_vars
    lens = off[1:] - off[:-1] - 1
    split = np.sort(factor[lens[factor] > 0])
    new_var = np.full(num_f, -1, np.int64)
    new_var[split] = num_v + np.arange(split.size)
    body_var = new_var[factor]
    is_body = np.ones(ev.size, bool)
    is_body[off[:-1]] = False
    owner = np.repeat(np.arange(num_f), lens)
    members = ev[is_body]
    moved = new_var[owner] >= 0  # body entries of split clauses: they go to b_c's factor
    owners = np.concatenate([owner[~moved], split, num_f + np.searchsorted(split, owner[moved])])
    entries = np.concatenate([members[~moved], new_var[split], members[moved]])
    order = np.argsort(owners, kind="stable")
    counts = np.bincount(owners, minlength=num_f + split.size)
    offsets = np.zeros(num_f + split.size + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    ones = np.ones(split.size)
    graph = from_arrays(np.concatenate([kinds, np.full(split.size, AND)]),
                        np.concatenate([heads, new_var[split]]), offsets, entries[order],
                        np.concatenate([np.asarray(g.p1, np.float64), ones]),
                        np.concatenate([np.asarray(g.p2, np.float64), 0 * ones]), num_vars=num_v + split.size)
    var_names = tuple(model.var_names) + tuple(f"{model.var_names[heads[a]]}@body" for a in split)
    aug = Model(graph=graph, var_names=var_names, alarms=model.alarms, labels=dict(model.labels),
                source=model.source, meta={"rule_names": names})
    return Augmented(aug, heads[factor], body_var, factor, rule, names)


def union(augs: Sequence[Augmented], rules: Sequence[np.ndarray], names: Sequence[str],
          labels: Sequence[dict[int, bool]]) -> tuple[Augmented, dict[int, bool], np.ndarray]:
    """The disjoint union of augmented models: graph i's variables shifted by the ones before it.

    Args:
        augs: the augmented models.
        rules: per model, (K_i,) int64 each clause's rule as an index into `names`.
        names: the rule names the union's `Augmented.rule` indexes.
        labels: per model {variable: truth}.

    Returns:
        (the union, its labels, (len(augs) + 1,) int64 variable offsets).
    """
    voff = np.zeros(len(augs) + 1, np.int64)
    np.cumsum([a.model.num_vars for a in augs], out=voff[1:])
    parts = {k: [] for k in ("kind", "head", "lens", "body", "p1", "p2", "clause", "bvar", "factor", "names")}
    foff = 0
    for i, a in enumerate(augs):
        g = a.model.graph
        off = np.asarray(g.factor_offsets, np.int64)
        is_body = np.ones(int(off[-1]), bool)
        is_body[off[:-1]] = False
        parts["kind"].append(np.asarray(g.factor_kind, np.int64))
        parts["head"].append(np.asarray(g.factor_head, np.int64) + voff[i])
        parts["lens"].append(off[1:] - off[:-1] - 1)
        parts["body"].append(np.asarray(g.edge_var, np.int64)[is_body] + voff[i])
        parts["p1"].append(np.asarray(g.p1, np.float64))
        parts["p2"].append(np.asarray(g.p2, np.float64))
        parts["clause"].append(a.clause_var + voff[i])
        parts["bvar"].append(np.where(a.body_var >= 0, a.body_var + voff[i], -1))
        parts["factor"].append(a.factor + foff)
        parts["names"].extend(f"g{i}:{n}" for n in a.model.var_names)
        foff += off.size - 1
    cat = {k: np.concatenate(v) if k != "names" else v for k, v in parts.items()}
    offsets = np.zeros(cat["lens"].size + 1, np.int64)
    np.cumsum(cat["lens"], out=offsets[1:])
    graph = from_arrays(cat["kind"], cat["head"], offsets, cat["body"], cat["p1"], cat["p2"],
                        num_vars=int(voff[-1]))
    merged = {int(v) + int(voff[i]): bool(t) for i, lab in enumerate(labels) for v, t in lab.items()}
    alarms = tuple(int(x) + int(voff[i]) for i, a in enumerate(augs) for x in a.model.alarms)
    model = Model(graph=graph, var_names=tuple(cat["names"]), alarms=alarms, source="union",
                  meta={"rule_names": list(names)})
    return (Augmented(model, cat["clause"], cat["bvar"], cat["factor"], np.concatenate(list(rules)),
                      list(names)), merged, voff)


def e_step_method(model: Model, settings: Settings, labels: dict[int, bool]) -> str:
    """The E-step "auto" learns with on one graph: "exact" where bucket elimination's induced width
    fits (`fastlbp.inference.methods.AUTO_EXACT_MEMORY`, or less where `settings.exact_memory` says
    so) whatever the graph's size, else "lbp".

    Not `methods.choose`'s rule, for two measured reasons (datalog.families, BENCHMARKS.md, issue 43):

    * size: `choose` skips exact above `AUTO_EXACT_VARS` variables to spare a ranking round the
      ordering (about 1 s), but learning runs tens of E-steps, and graphs of independent modules
      (taint, points-to per module) keep a small width at any size (18,000 variables, width < 24);
    * the sampler: under alarm labels its importance weights collapse at the stated probabilities
      (1 to 5 effective worlds of 400,000 on 300 alarm labels, taint and synthetic families), so a
      sampled E-step from there drew to its 10M-world budget, or raised `TooFewSamples`, every step.
      `method="sample"` stays available where the labels are few.
    """
    from fastlbp.engines import exact
    from fastlbp.inference.methods import AUTO_EXACT_MEMORY

    budget = min(exact.memory_budget(settings), AUTO_EXACT_MEMORY)
    most = max(1, int(math.log2(max(budget, exact.BYTES) / exact.BYTES)))
    plan = exact.engine_for(model.graph).plan(frozenset(labels), most)
    return "exact" if plan is not None and plan.bytes_needed <= budget else "lbp"


class _Posterior:
    """P(X_c = 1 | L) and P(b_c = 1 | L) of one graph's clauses at given clause probabilities, by the E-step
    of the method's row (`Method.e_step`, `fastlbp.inference.e_steps`)."""

    @float64
    def __init__(self, aug: Augmented, labels: dict[int, bool], method: str, settings: Settings,
                 rules: np.ndarray):
        self.aug, self.settings = aug, settings
        self.rules = rules  # (K,) each clause's rule, an index into the learner's names
        # "auto": learning's own choice per graph (`e_step_method`), not a ranking round's.
        named = not chooses(method)
        self.method = method_of(method).name if named else e_step_method(aug.model, settings, labels)
        self.row = method_of(self.method)
        self.e_step = self.row.e_step(aug, labels, settings)
        # (K,) standard errors of the last sampled E-step's P(X_c | L) and P(body_c | L) (None: not sampled).
        self.noise: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def labels(self) -> dict[int, bool]:
        return self.e_step.labels

    @labels.setter
    def labels(self, labels: dict[int, bool]) -> None:
        self.e_step.labels = dict(labels)

    @property
    def log_evidence(self) -> float:
        return self.e_step.log_evidence

    @property
    def info(self) -> dict:
        """The last sampled E-step's `Marginals.info` (worlds, effective worlds); {} otherwise."""
        return self.e_step.info

    @float64
    def __call__(self, clause_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """((K,) P(X_c | L), (K,) P(body_c | L)) at clause probabilities clause_p ((K,) float64)."""
        aug = self.aug
        marg, se = self.e_step(clause_p)
        if se is not None:
            body_se = np.where(aug.body_var >= 0, se[np.maximum(aug.body_var, 0)], 0.0)
            self.noise = (se[aug.clause_var], body_se)
        fired = marg[aug.clause_var]
        body = np.where(aug.body_var >= 0, marg[np.maximum(aug.body_var, 0)], 1.0)
        # A sampler's or LBP's estimates may put a clause above its body by noise: X_c implies b_c.
        return fired, np.maximum(body, fired)

    @property
    def batched(self) -> bool:
        """Whether the E-step takes a batch of clause probabilities in one pass (`many`)."""
        return hasattr(self.e_step, "many")

    @float64
    def many(self, clause_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """((B, K) P(X_c | L), (B, K) P(body_c | L), (B,) log P(L)) at each row of clause_p ((B, K)),
        in one pass (`batched` E-steps only)."""
        aug = self.aug
        marg, log_ev = self.e_step.many(clause_p)
        fired = marg[:, aug.clause_var]
        body = np.where(aug.body_var >= 0, marg[:, np.maximum(aug.body_var, 0)], 1.0)
        return fired, np.maximum(body, fired), log_ev


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
            exact E-step evaluated within the 95 % likelihood-ratio drop of the best (`_hull`); else
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


class Learner:
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
        # the best lie inside each rule's profile interval (`_hull`).
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
            x, rounds = self._best_start(x, starts, max(START_STEPS, most // 4), seen)
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
            lower = _quantile(0.025, alpha + 1, beta_ + 1, p)
            upper = _quantile(0.975, alpha + 1, beta_ + 1, p)
            # Near 0 or 1 the central interval can leave out the MAP itself: one-sided there.
            top, bottom = p > upper, p < lower
            lower = np.where(top, _quantile(0.05, alpha + 1, beta_ + 1, p), np.where(bottom, 0.0, lower))
            upper = np.where(bottom, _quantile(0.95, alpha + 1, beta_ + 1, p), np.where(top, 1.0, upper))
            if opts.profile and all(post is not None and method_of(post.method).exact
                                    for post in self._posteriors):
                t = time.perf_counter()
                lower, upper = self._profile(p, cov, lower, upper, clauses > 0, body, seen)
                info_s += time.perf_counter() - t
            lower, upper = _hull(seen, lower, upper, clauses > 0)
        else:
            alpha = self.a + fired
            beta_ = self.b + np.maximum(body - fired, 0.0)
            lower = _quantile(0.025, alpha + 1, beta_ + 1, p)
            upper = _quantile(0.975, alpha + 1, beta_ + 1, p)
            support = np.asarray(body, np.float64).copy()
        return LearnResult(names=self.names, probability=p, prior=self.p0.copy(), fired=fired, body=body,
                           clauses=clauses, support=support, lower=np.asarray(lower, np.float64),
                           upper=np.asarray(upper, np.float64), information=bool(use_info),
                           iterations=iterations, converged=converged, objective=tuple(objective),
                           methods=self.methods(),
                           seconds=seconds, information_seconds=info_s,
                           noise=noise if sampled else None, effective_worlds=effective, starts=starts)

    def _best_start(self, x: np.ndarray, starts: int, steps: int, seen: list) -> tuple[np.ndarray, int]:
        """Accelerated EM from `starts` points at once (`_start_points`), each until it converges or
        stalls (`STALLED`) or after `steps` E-steps, their E-steps one batch per round (`_drive`).

        Returns (the point where the chain of the highest log posterior got, the rounds run); every
        evaluated point goes to `seen`.

        Why: where the labels reach a rule only through others, the log posterior has long flat ridges
        and EM crawls along them to wherever its start leads (taint family, avrora size, 5 graphs: EM
        from the stated 0.999s, from 0.5 and from 4 random points stopped 0.7 nats apart with one rule
        between 0.92 and 0.999, the truth 0.999); the best of several starts is a better maximum, and
        the points they pass show how far the ridge goes (`_hull`).
        """
        num_r = len(self.names)
        rounds = 0
        value: dict[bytes, float] = {}

        def evaluate_many(points):
            nonlocal rounds
            rounds += 1
            fired, body, log_ev = self.counts_many(points)
            replies = []
            for k, point in enumerate(points):
                obj = self.objective(float(log_ev[k]), point)
                value[point.tobytes()] = obj
                seen.append((point.copy(), obj))
                replies.append((self.mstep(fired[k], body[k]), obj, fired[k], body[k], np.zeros(num_r)))
            return replies

        chains = [self._em_chain(point, steps, np.zeros(num_r), stop_when_stalled=True)
                  for point in self._start_points(x, starts)]
        ends = self._drive(chains, evaluate_many)
        best = max((e for e in ends if e[2] is not None), key=lambda e: value[e[2][0].tobytes()])
        return best[0], rounds

    def _start_points(self, x: np.ndarray, starts: int) -> list[np.ndarray]:
        """`starts` points to run EM from: `x`, every rule at 0.5, then random ones (logit normal with
        standard deviation `START_SPREAD`, seeded by `settings.seed`); rules without clauses stay at x."""
        rng = np.random.default_rng(self.options.settings.seed)
        used = np.zeros(len(self.names), bool)
        for rules in self.global_rule:
            used[np.unique(rules)] = True
        points = [np.array(x, np.float64)]
        while len(points) < starts:
            other = (np.full(x.size, 0.5) if len(points) == 1
                     else _sigmoid(rng.normal(0.0, START_SPREAD, x.size)))
            points.append(np.clip(np.where(used, other, x), EPS, 1 - EPS))
        return points

    def _profile(self, p: np.ndarray, cov: np.ndarray, lower: np.ndarray, upper: np.ndarray, used: np.ndarray,
                 body: np.ndarray, seen: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The Laplace interval's bounds checked against the profile posterior (exact E-steps only: they
        give log P(L)), and moved out where it is flatter.

        At a bound b of rule r the others are maximised from below (`_profile_value`: their conditional
        mode under the Laplace approximation or the maximum's, Newton steps, then EM steps); the drop of the
        log posterior from the maximum must be `PROFILE_DROP` (the 95 % likelihood-ratio bound),
        and where the steps already show less they stop. Where it is less, the
        posterior is flatter than its curvature at the maximum says (a curved ridge: rules that reach
        the alarms only jointly), and the bound moves out by sqrt(PROFILE_DROP / drop) of its logit
        distance (at most `PROFILE_GROWTH`), up to `PROFILE_TRIES` times, to 0 or 1 past
        `PROFILE_EDGE` in logit; where the maximum sits at 0 or 1, the far bound is found by bisection
        instead (`_profile_inward`). The bounds advance together, their E-steps one batch per round
        (`_drive`). Evaluated points go to `seen` (point, log posterior).
        """
        lower, upper = np.array(lower, np.float64), np.array(upper, np.float64)
        seen = [] if seen is None else seen

        num_r = len(self.names)

        def evaluate_many(points):
            fired, body, log_ev = self.counts_many(points)
            replies = []
            for k, point in enumerate(points):
                value = self.objective(float(log_ev[k]), point)
                seen.append((point.copy(), value))
                replies.append((self.mstep(fired[k], body[k]), value, fired[k], body[k], np.zeros(num_r)))
            return replies

        top = evaluate_many(p[None])[0][1]
        top = max(top, *(v for _, v in seen))
        logit = np.log(p) - np.log1p(-p)
        bounds = [(r, side, edge) for r in np.flatnonzero(used)
                  for side, edge in ((lower, 0.0), (upper, 1.0)) if 0.0 < side[r] < 1.0]
        near = [(x, top - v) for x, v in seen if top - v < PROFILE_DROP]
        chains = []
        for r, b, edge in bounds:
            # The evaluated point inside the drop that reaches farthest past the Laplace bound (EM's
            # starts crawl along ridges): the search goes on from there.
            sign = -1.0 if edge == 0.0 else 1.0
            past = [(x, d) for x, d in near if sign * (x[r] - b[r]) > 0]
            anchor = max(past, key=lambda xd: sign * xd[0][r]) if past else None
            chains.append(self._profile_bound(int(r), float(b[r]), edge, p, logit, cov, used, top, body,
                                              anchor))
        for (r, b, _), moved in zip(bounds, self._drive(chains, evaluate_many), strict=True):
            b[r] = moved
        return lower, upper

    def _profile_bound(self, r: int, bound: float, edge: float, p: np.ndarray, logit: np.ndarray,
                       cov: np.ndarray, used: np.ndarray, top: float, body: np.ndarray,
                       anchor: tuple[np.ndarray, float] | None = None):
        """One bound of `_profile` as a generator of the points to evaluate, sent back (EM's image, log
        posterior, F, B, noise) for each; returns the bound, moved out where the profile is flatter,
        or, where the maximum sits against 0 or 1 (`_profile_inward`; `body` (R,) the expected bodies
        held), moved in to where it drops by `PROFILE_DROP`. `anchor`: (an evaluated point past the
        bound, its drop) to go on from: its rule r is the bound, and the next tries start from its
        others (taint family: a ridge whose profile dips past the Laplace bound and rises again, EM's
        starts found points on it 0.997 where the truth is 0.999)."""
        target = math.log(bound) - math.log1p(-bound)
        # Fewer than one expected failure (or firing) of its clauses whose body held: the likelihood only
        # rises toward 1 (or 0), and the maximum sits where the prior's pseudo-counts stop it.
        one_sided = body[r] >= 1.0 and min(p[r], 1 - p[r]) * body[r] < 1.0
        if one_sided and (edge == 0.0) == (p[r] > 0.5):
            return (yield from self._profile_inward(r, target, logit, cov, used, top))
        start = None
        if anchor is not None:
            start, drop = anchor
            bound = float(start[r])
            target = logit[r] + (float(np.log(bound) - np.log1p(-bound)) - logit[r]) * min(
                PROFILE_GROWTH, math.sqrt(PROFILE_DROP / max(drop, PROFILE_DROP / PROFILE_GROWTH**2)))
            if abs(target) >= PROFILE_EDGE:
                return edge
        for _ in range(PROFILE_TRIES):
            drop = top - (yield from self._profile_value(r, target, logit, cov, used, top, start))
            if drop >= PROFILE_DROP:
                break
            grow = PROFILE_GROWTH if drop <= 0 else min(PROFILE_GROWTH, math.sqrt(PROFILE_DROP / drop))
            target = logit[r] + (target - logit[r]) * grow
            if abs(target) >= PROFILE_EDGE:
                return edge
            bound = float(_sigmoid(np.array([target]))[0])
        return bound

    def _profile_inward(self, r: int, target: float, logit: np.ndarray, cov: np.ndarray, used: np.ndarray,
                        top: float):
        """The bound of a rule whose maximum sits against 0 or 1, on the side away from it: there the logit's
        curvature vanishes, the Laplace interval is the prior's, and the rule reads "poorly identified"
        however many clauses it has (taint family: 15,616 clauses, learned 1.000, interval [0.368, 1]).
        Bisection in logit between the bound (where the drop must be at least `PROFILE_DROP`) and
        `PROFILE_EDGE` toward the maximum, `PROFILE_BISECTIONS` times; the bound kept is the last point
        known to drop by `PROFILE_DROP` or more (the interval errs wide)."""
        inside = math.copysign(min(abs(logit[r]), PROFILE_EDGE), logit[r])
        outside = target
        if top - (yield from self._profile_value(r, outside, logit, cov, used, top)) < PROFILE_DROP:
            return float(_sigmoid(np.array([outside]))[0])  # the prior's bound holds
        for _ in range(PROFILE_BISECTIONS):
            mid = (inside + outside) / 2
            if top - (yield from self._profile_value(r, mid, logit, cov, used, top)) >= PROFILE_DROP:
                outside = mid
            else:
                inside = mid
        return float(_sigmoid(np.array([outside]))[0])

    def _profile_value(self, r: int, target: float, logit: np.ndarray, cov: np.ndarray, used: np.ndarray,
                       top: float, start: np.ndarray | None = None):
        """The profile posterior at logit p_r = target, from below (a generator of points, as
        `_profile_bound`): the others at their conditional mode under the Laplace approximation, then
        `PROFILE_STEPS` Newton steps among them with r held (the others' covariance given r, the Schur
        complement, as inverse Hessian; at most 1 in logit), then, where those leave the drop over
        `PROFILE_DROP`, up to `PROFILE_EM_STEPS` accelerated EM steps among them; each stage stops once
        the drop is under the bound; with `start` (R,), the others start from its values instead.
        Returns the best log posterior found."""
        others = used.copy()
        others[r] = False
        schur = cov - np.outer(cov[:, r], cov[r]) / cov[r, r]
        conditional = np.where(np.outer(others, others), schur, 0.0)
        x_logit = logit + cov[:, r] / cov[r, r] * (target - logit[r])
        if start is not None:
            x_logit = np.log(start) - np.log1p(-start)
        x_logit[r] = target
        x_logit[~used] = logit[~used]
        x = _sigmoid(x_logit)
        image, value, fired, body, _ = yield x
        # The maximum's others too: on a curved ridge the Laplace approximation's conditional mode can
        # lie off it (taint family: from the maximum's others, with the rule moved from 0.931 to 0.999,
        # 10 EM steps reach 0.19 nats below the top; from the conditional mode 8 steps stayed over 1.92).
        plain = _sigmoid(np.where(np.arange(logit.size) == r, target, logit))
        reply = yield plain
        if reply[1] > value:
            x, (image, value, fired, body, _) = plain, reply
        for _ in range(PROFILE_STEPS):
            if top - value < PROFILE_DROP:
                break
            grad = np.where(others, fired - x * body + self.a - (self.a + self.b) * x, 0.0)
            step = np.clip(conditional @ grad, -1.0, 1.0)
            new = _sigmoid(np.log(x) - np.log1p(-x) + np.where(others, step, 0.0))
            reply = yield new
            gain = reply[1] - value
            if gain > 0:
                x, (image, value, fired, body, _) = new, reply
            if gain < PROFILE_GAIN:
                break
        if top - value >= PROFILE_DROP:
            # Newton's quadratic model failed (a curved ridge): EM from its image of the best point.
            inner = self._em_chain(np.where(others, image, x), PROFILE_EM_STEPS, np.zeros(x.size), True,
                                   held=~others)
            point = next(inner)
            while top - value >= PROFILE_DROP:
                reply = yield point
                value = max(value, reply[1])
                try:
                    point = inner.send(reply)
                except StopIteration:
                    break
            inner.close()
        return value

    def _em(self, x: np.ndarray, evaluate, most: int, count, settled: np.ndarray, stop_when_stalled: bool
            ) -> tuple[np.ndarray, bool, tuple | None]:
        """EM steps (Anderson-accelerated with `options.accelerate`) from `x` until converged, `most`
        E-steps in all (`count()` says how many ran), or, with `stop_when_stalled`, the largest
        residual has not halved in `STALLED` E-steps (`run` describes the safeguards); `evaluate(p)`
        returns (EM's image G(p), objective) and leaves the counts in `_last_counts`, `_last_noise`.

        Returns:
            (p: EM's last image where converged, else the next point to evaluate or the stalled
            point; converged; (point, F, B) of the last E-step, or None if none ran).
        """
        chain = self._em_chain(x, most - count(), settled, stop_when_stalled)
        try:
            point = next(chain)
            while True:
                g, obj = evaluate(point)
                point = chain.send((g, obj, *self._last_counts, self._last_noise))
        except StopIteration as done:
            return done.value

    def _em_chain(self, x: np.ndarray, most: int, settled: np.ndarray, stop_when_stalled: bool,
                  held: np.ndarray | None = None):
        """`_em` as a generator of the points to evaluate, sent back (G(p), objective, F, B, noise) for
        each: several chains (EM from several starts) advance together, their E-steps one batch
        (`_drive`). Converged: no rule's residual above `tol`, `NOISE_FRACTION` of its Monte Carlo
        standard error (sampled E-steps) or `settled` (R,). `held` (R,) bool: rules kept where they are
        (the profile's). Returns what `_em` does."""
        opts = self.options
        dx: list[np.ndarray] = []  # differences of the residuals f and of the images g, oldest first
        dg: list[np.ndarray] = []
        last = None  # (x, g, f, objective) of the last accepted point
        extrapolated = False  # x is Anderson's point, not plain EM's G(last x)
        best, since = math.inf, 0  # the smallest residual yet, E-steps since it last halved
        at = None
        evaluated = 0
        while evaluated < most:
            g, obj, fired, body, noise = yield x
            if held is not None:
                g = np.where(held, x, g)
            evaluated += 1
            at = (x, fired, body)
            f = g - x
            fell = not math.isnan(obj) and last is not None and obj < last[3] - 1e-12 * abs(last[3])
            if extrapolated and (np.linalg.norm(f) > 2 * np.linalg.norm(last[2]) or fell):
                # The extrapolation lost ground: plain EM's step from the last point, memory restarted.
                dx.clear()
                dg.clear()
                x, last, extrapolated = last[1], None, False
                continue
            if np.all(np.abs(f) <= np.maximum(np.maximum(opts.tol, NOISE_FRACTION * noise), settled)):
                return g, True, at
            size = float(np.max(np.abs(f)))
            best, since = (size, 0) if size <= best / 2 else (best, since + 1)
            if stop_when_stalled and since >= STALLED:
                return x, False, at
            if last is not None and opts.accelerate:
                dx.append(f - last[2])
                dg.append(g - last[1])
                del dx[:-ANDERSON_MEMORY], dg[:-ANDERSON_MEMORY]
            last = (x, g, f, obj)
            x, extrapolated = g, bool(dx)
            if dx:
                gamma = np.linalg.lstsq(np.stack(dx, axis=1), f, rcond=1e-10)[0]
                x = np.clip(g - np.stack(dg, axis=1) @ gamma, EPS, 1 - EPS)
        return x, False, at

    def _drive(self, chains: list, evaluate_many) -> list:
        """Advances generators of points (`_em_chain`, the profile's bounds) together: each round the
        points of those still running go to `evaluate_many` ((B, R) -> a list of B replies) as one
        batch. Returns each generator's return value."""
        results: list = [None] * len(chains)
        points: dict[int, np.ndarray] = {}
        for i, chain in enumerate(chains):
            try:
                points[i] = next(chain)
            except StopIteration as done:
                results[i] = done.value
        while points:
            order = list(points)
            replies = evaluate_many(np.stack([points[i] for i in order]))
            points = {}
            for i, reply in zip(order, replies, strict=True):
                try:
                    points[i] = chains[i].send(reply)
                except StopIteration as done:
                    results[i] = done.value
        return results

    def _newton(self, x: np.ndarray, fired: np.ndarray, body: np.ndarray, cov: np.ndarray, used: np.ndarray,
                evaluate, most: int, settled: np.ndarray | float = 0.0) -> tuple[np.ndarray, bool]:
        """Newton steps on log P(L) + log prior in logit p from `x` (F, B its E-step's counts), with the
        posterior covariance `cov` at `x` (`covariance`) kept as the inverse Hessian: the gradient is
        the score F - p B plus the prior's a - (a + b) p (`score`). Each step is one E-step
        (`evaluate`), at most 1 in logit per rule; converged as EM is (`run`). Returns (p, converged)."""
        for _ in range(min(NEWTON_STEPS, most)):
            grad = np.where(used, fired - x * body + self.a - (self.a + self.b) * x, 0.0)
            step = np.clip(cov @ grad, -1.0, 1.0)
            logit = np.log(x) - np.log1p(-x)
            new = _sigmoid(logit + step)
            evaluate(new)
            moved = np.abs(new - x)
            x = new
            fired, body = self._last_counts
            if np.all(moved <= np.maximum(np.maximum(self.options.tol, MAP_NOISE_Z * self.map_noise(x, cov)),
                                          settled)):
                return x, True
        return x, False

    def map_noise(self, probability: np.ndarray, cov: np.ndarray) -> np.ndarray:
        """(R,) the Monte Carlo standard error of the posterior's maximum at `probability`, from the last
        `counts`' sampled E-steps and the posterior covariance `cov` in logit (`covariance`): the
        gradient's error (F_r - p_r B_r, the clauses' errors taken as independent) through the inverse
        Hessian, in p. 0 where no E-step is sampled."""
        var_fired, var_body = getattr(self, "_count_variance", (0.0, 0.0))
        p = np.asarray(probability, np.float64)
        var_grad = np.zeros(p.size) + var_fired + p**2 * var_body
        var_logit = np.einsum("ij,j,ij->i", cov, var_grad, cov)
        return p * (1 - p) * np.sqrt(np.maximum(var_logit, 0.0))

    def methods(self) -> tuple[str, ...]:
        """The E-step's method per graph ("" before its first E-step)."""
        out = [""] * len(self.augs)
        for block, post in zip(self.blocks, self._posteriors, strict=True):
            for i in block:
                out[i] = post.method if post is not None else ""
        return tuple(out)

    def score(self, probability: np.ndarray) -> np.ndarray:
        """(R,) d log P(L) / d logit p_r at rule probabilities `probability` (R,): F_r - p_r B_r (Fisher's
        identity: the expected complete-data score under P(. | L))."""
        fired, body, _ = self.counts(probability)
        return fired - probability * body

    def information(self, probability: np.ndarray, used: np.ndarray | None = None) -> np.ndarray:
        """(R, R) observed information of the labels about logit p at `probability` (R,):
        -d^2 log P(L) / d logit p^2, by central differences of `score` (2 E-steps per rule in `used`,
        `options.step` apart, one batch where the E-steps are `batched`; LBP at
        `options.information_tol`), symmetrised. Rows and columns of
        rules not in `used` (no clauses) are 0."""
        p = np.asarray(probability, np.float64)
        num_r = p.size
        used = np.ones(num_r, bool) if used is None else np.asarray(used, bool)
        logit = np.log(p) - np.log1p(-p)
        h = self.options.step
        hess = np.zeros((num_r, num_r))
        sessions = [post.e_step for post in self._posteriors if post is not None and post.row.iterative]
        kept = [s.settings for s in sessions]
        tight = self.options.information_tol
        for s in sessions:
            s.settings = dataclasses.replace(s.settings, tol=min(s.settings.tol, tight))
        rules = np.flatnonzero(used)
        points = np.repeat(logit[None], 2 * rules.size, axis=0)  # up_r0, down_r0, up_r1, ...
        points[2 * np.arange(rules.size), rules] += h
        points[2 * np.arange(rules.size) + 1, rules] -= h
        points = _sigmoid(points)
        try:
            fired, body, _ = self.counts_many(points)
            score = fired - points * body
            hess[:, rules] = ((score[0::2] - score[1::2]) / (2 * h)).T
        finally:
            for s, old in zip(sessions, kept, strict=True):
                s.settings = old
        hess[~used] = 0.0
        return -(hess + hess.T) / 2

    def covariance(self, probability: np.ndarray, used: np.ndarray | None = None) -> np.ndarray:
        """(R, R) posterior covariance of logit p at `probability` (the MAP, where the Laplace
        approximation holds): the inverse of the labels' `information` plus the prior's precision
        (a + b) p (1 - p) on the diagonal.

        The information's negative eigenvalues (an approximate E-step's noise, or a MAP not quite
        reached) are raised to 0 first, so no rule's posterior is wider than its prior: a direction
        the labels do not inform keeps the prior's width, and the rules along it are reported as
        poorly identified, never as known.
        """
        p = np.asarray(probability, np.float64)
        used = np.ones(p.size, bool) if used is None else np.asarray(used, bool)
        info = self.information(p, used)
        prior = (self.a + self.b) * p * (1 - p)
        cov = np.diag(1 / prior)
        idx = np.flatnonzero(used)
        if idx.size:
            w, v = np.linalg.eigh(info[np.ix_(idx, idx)])
            precision = (v * np.maximum(w, 0.0)) @ v.T + np.diag(prior[idx])
            cov[np.ix_(idx, idx)] = np.linalg.inv(precision)
        return cov


def _hull(seen: list[tuple[np.ndarray, float]], lower: np.ndarray, upper: np.ndarray, used: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """The intervals widened to every evaluated point whose log posterior is within `PROFILE_DROP` of the
    best evaluated: such a point's every coordinate lies inside that rule's 95 % profile interval (the
    profile at it is at least the point's value), wherever the Laplace approximation ends."""
    if not seen:
        return lower, upper
    values = np.array([v for _, v in seen])
    near = np.stack([x for (x, _), ok in zip(seen, values >= values.max() - PROFILE_DROP, strict=True) if ok])
    lower = np.where(used, np.minimum(lower, near.min(axis=0)), lower)
    upper = np.where(used, np.maximum(upper, near.max(axis=0)), upper)
    return lower, upper


def _quantile(q: float, a: np.ndarray, b: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """Beta(a, b)'s q-quantile, never NaN: where scipy's is not finite (a + b past about 1e17, or
    infinite where the information vanished), the normal approximation around the mean (`centre`
    where a or b is infinite), inside [0, 1]."""
    from scipy.stats import beta, norm

    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.array(beta.ppf(q, a, b), np.float64, ndmin=1)
    bad = ~np.isfinite(out)
    if np.any(bad):
        a_, b_ = a.reshape(out.shape)[bad], b.reshape(out.shape)[bad]
        n = a_ + b_
        finite = np.isfinite(n) & (n > 0)
        mean = np.where(finite, a_ / np.where(finite, n, 1.0), np.broadcast_to(centre, out.shape)[bad])
        sd = np.where(finite, np.sqrt(mean * (1 - mean) / np.where(finite, n + 1, 1.0)), 0.0)
        out[bad] = np.clip(mean + norm.ppf(q) * sd, 0.0, 1.0)
    return out.reshape(np.shape(a))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip(1 / (1 + np.exp(-x)), EPS, 1 - EPS)


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
