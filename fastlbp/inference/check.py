"""How far LBP is from the model's true posterior: LBP's alarm marginals against a reference.

    report = check(model, labels, settings, reference="auto")
    report.verdict, report.max_abs_error, report.spearman

The reference is exact inference (bucket elimination, `fastlbp.engines.exact`)
where the graph's width allows, else ancestral sampling with error bars
(`fastlbp.engines.sampling`). LBP is exact on trees and only approximate on
the networks derivation graphs make (a tuple's derivations share ancestors):
on `data/weblech.json` it puts alarms at 1e-78 to 1e-165 where the model
gives 0.4-1.7 %.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fastlbp.core.jax_setup import float64
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.core.text import format_probability, safe_name
from fastlbp.engines.marginals import Marginals
from fastlbp.inference.methods import METHODS, chooses, method_of, reference_names
from fastlbp.inference.ranking import alarm_vars
from fastlbp.inference.session import Round, Session

# `--reference`: "auto" (the first of the references that takes the graph), then the methods that can be one.
REFERENCES = reference_names()
# The verdict: "warn" when LBP misses the reference by more than this on some alarm (beyond 3
# standard errors of a sampled reference), or orders the alarms unlike it.
MAX_ERROR_OK = 0.05
TOP_K = 10
# Order is judged only where the reference tells two alarms apart: their reference probabilities differ
# by more than RESOLVED_SE combined standard errors (sqrt(se_i^2 + se_j^2)) and by more than RESOLVED_ABS
# (an exact reference's rounding). Closer pairs are ties within the reference's error, and no order of
# them is wrong. (data/avrora.json.gz: LBP is within 0.002 of a sampled reference whose standard errors
# are up to 0.0015, and its 0.76-ish alarms, equal within that error, made a Spearman of 0.45.)
RESOLVED_SE = 2.0
RESOLVED_ABS = 1e-9
# The verdict warns when LBP orders more than this fraction of the resolved pairs the other way (a pair
# LBP ties counts half). 10 % of pairs reversed is a Kendall tau of 0.8 (Spearman about 0.9).
REVERSED_OK = 0.1
# Pairs are counted over at most this many alarms (a fixed sample of them beyond: 4,000 alarms are 8M
# pairs, counted in blocks).
MAX_ORDER_ALARMS = 4000


@dataclasses.dataclass(frozen=True)
class AlarmCheck:
    alarm: str
    lbp: float
    reference: float
    stderr: float
    lbp_log_odds: float = math.nan  # LBP's log-odds: prints a P below float64's range (1e-350) as such

    @property
    def error(self) -> float:
        return abs(self.lbp - self.reference)


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """LBP against a reference over the unlabelled alarms.

    Attributes:
        reference: the reference method's name ("exact" or "sample").
        alarms: per alarm, worst first (by |LBP - reference|).
        max_abs_error, mean_abs_error: over the alarms.
        spearman: rank correlation of LBP's order with the reference's (NaN: fewer than 2 alarms
            or a constant side); descriptive only: it counts ties within the reference's error.
        resolved_pairs: alarm pairs the reference tells apart (`RESOLVED_SE`); reversed_pairs: how many
            of them LBP orders the other way (a tie in LBP counts half). What the verdict judges.
        top_k: k, and how many of LBP's top k are in the reference's top k or tied, within the
            reference's error, with its k-th.
        verdict: "ok" or "warn"; `reasons` says why.
        lbp_round: how the checked method's round went (LBP's unless `method` says otherwise).
        reference_info: what the reference took (width, samples, accepted, seconds).
        method: the checked method's name (LBP's under "auto").
    """

    reference: str
    alarms: list[AlarmCheck]
    max_abs_error: float
    mean_abs_error: float
    spearman: float
    top_k: int
    top_k_overlap: int
    verdict: str
    reasons: list[str]
    lbp_round: Round
    reference_info: dict
    method: str = "lbp"
    resolved_pairs: int = 0
    reversed_pairs: float = 0.0

    def as_dict(self, worst: int = 10) -> dict:
        """The JSON document of `fastlbp check --format json`."""
        return {
            "reference": self.reference,
            "method": self.method,
            "alarms": len(self.alarms),
            "max_abs_error": self.max_abs_error,
            "mean_abs_error": self.mean_abs_error,
            "spearman": None if math.isnan(self.spearman) else self.spearman,
            "resolved_pairs": self.resolved_pairs,
            "reversed_pairs": self.reversed_pairs,
            "top_k": self.top_k,
            "top_k_overlap": self.top_k_overlap,
            "worst": [{"alarm": a.alarm, "lbp": a.lbp, "reference": a.reference, "stderr": a.stderr}
                      for a in self.alarms[:worst]],
            "verdict": self.verdict,
            "reasons": self.reasons,
            "lbp": {"iterations": self.lbp_round.iterations, "converged": self.lbp_round.converged,
                    "remedy": self.lbp_round.remedy},
            "reference_info": {k: v for k, v in self.reference_info.items()
                               if isinstance(v, (int, float, str, bool)) or v is None},
        }


@float64
def reference_marginals(model: Model, labels: dict[int, bool], settings: Settings,
                        reference: str = "auto") -> Marginals:
    """The reference's marginals (`Method.reference_marginals`): exact, sampled, or ("auto") the first of the
    references, in the table's order, that takes the graph (exact where the width allows, else sampled)."""
    from fastlbp.inference.rounds import REFUSALS

    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    tried = [m for m in METHODS.values() if m.reference] if chooses(reference) else [method_of(reference)]
    for m in tried[:-1]:
        try:
            return m.reference_marginals(model, labels, settings)
        except REFUSALS:
            continue
    return tried[-1].reference_marginals(model, labels, settings)


@float64
def check(model: Model, labels: dict[int, bool] | None = None, settings: Settings | None = None,
          reference: str = "auto", top_k: int = TOP_K) -> CheckReport:
    """Runs the checked method and a reference; compares the alarms.

    The checked method is `settings.method`, LBP under "auto" (what LBP's users need measured:
    exact and sampled answers carry their own error); `--method sample --reference exact`
    checks the sampler.

    Raises:
        ContradictoryEvidence: the labels have probability 0.
        ExactTooWide: `reference="exact"` on a graph too wide for the memory budget.
        TooFewSamples: the sampled reference accepted too few worlds.
    """
    settings = settings or Settings()
    labels = dict(model.labels if labels is None else labels)
    if chooses(settings.method):  # the method whose error is not known beside its numbers: LBP
        checked = next(m for m in METHODS.values() if m.unchecked)
    else:
        checked = method_of(settings.method)
    who = checked.label
    session = Session(model, dataclasses.replace(settings, method=checked.name))
    session.labels = dict(labels)
    rnd = session.run(warm=False)
    ref = reference_marginals(model, labels, settings, reference)
    alarms = np.asarray([a for a in alarm_vars(model) if int(a) not in labels], dtype=np.int64)
    lbp_p = rnd.marginals[alarms]
    ref_p = ref.marginals[alarms]
    err = np.abs(lbp_p - ref_p)
    rows = [AlarmCheck(model.var_names[v], float(lbp_p[i]), float(ref_p[i]), float(ref.stderr[v]),
                       float(rnd.log_odds[v])) for i, v in enumerate(alarms)]
    rows.sort(key=lambda a: -a.error)
    spearman = math.nan
    if len(alarms) >= 2 and np.ptp(rnd.log_odds[alarms]) > 0 and np.ptp(ref_p) > 0:
        # LBP's order is its log-odds' (probabilities may round to ties); the reference's its probabilities.
        from scipy import stats  # 1-2 s of imports: only when there is an order to compare

        spearman = float(stats.spearmanr(rnd.log_odds[alarms], ref_p).statistic)
    ref_se = np.nan_to_num(np.asarray(ref.stderr[alarms], dtype=np.float64), nan=0.0)
    lbp_key = np.asarray(rnd.log_odds[alarms], dtype=np.float64)
    resolved, reversed_ = order_disagreement(lbp_key, ref_p, ref_se)
    k = min(top_k, len(alarms))
    overlap = top_overlap(lbp_key, ref_p, ref_se, k)
    # A sampled reference is uncertain: only errors beyond 3 standard errors count against LBP.
    beyond = np.maximum(err - 3 * ref.stderr[alarms], 0.0) if len(alarms) else err
    reasons = []
    if len(alarms) and float(beyond.max()) > MAX_ERROR_OK:
        worst = rows[0]
        reasons.append(f"{who} is off by up to {float(err.max()):.3g} ({safe_name(worst.alarm)}: "
                       f"{format_probability(worst.lbp, worst.lbp_log_odds)} vs "
                       f"{format_probability(worst.reference)})")
    # Orders of magnitude matter even where the absolute error is small (1e-97 for a 1 % alarm).
    low = np.maximum(ref_p - 3 * ref.stderr[alarms], 0.0)
    far = (lbp_p < 0.1 * low) | (lbp_p > 10 * (ref_p + 3 * ref.stderr[alarms]) + 1e-12)
    if far.any():
        i = int(np.argmax(np.where(far, low, -1.0)))
        reasons.append(f"{who} is off by orders of magnitude on {int(far.sum())} alarm(s) "
                       f"({safe_name(model.var_names[alarms[i]])}: "
                       f"{format_probability(float(lbp_p[i]), float(rnd.log_odds[alarms[i]]))} vs "
                       f"{format_probability(float(ref_p[i]))})")
    if resolved and reversed_ > REVERSED_OK * resolved:
        reasons.append(f"{who} orders {reversed_:,g} of the {resolved:,} alarm pairs that the reference "
                       f"tells apart the other way ({reversed_ / resolved:.0%})")
    if k and overlap < k:
        reasons.append(f"{overlap} of {who}'s top {k} are in the reference's top {k}")
    if checked.iterative and not rnd.converged:
        reasons.append(f"{who} did not converge" + (f" (numbers from {rnd.remedy})" if rnd.remedy else ""))
    verdict = "warn" if reasons else "ok"
    return CheckReport(ref.method, rows, float(err.max()) if len(alarms) else 0.0,
                       float(err.mean()) if len(alarms) else 0.0, spearman, k, overlap, verdict, reasons, rnd,
                       {**ref.info, "seconds": ref.seconds}, checked.name, resolved, reversed_)


def _told_apart(ref_i: np.ndarray, ref_j: np.ndarray, se_i: np.ndarray, se_j: np.ndarray) -> np.ndarray:
    """Whether the reference tells i above j: ref_i - ref_j beyond `RESOLVED_SE` combined standard errors
    and beyond `RESOLVED_ABS`."""
    return ref_i - ref_j > np.maximum(RESOLVED_SE * np.sqrt(se_i * se_i + se_j * se_j), RESOLVED_ABS)


def order_disagreement(key: np.ndarray, ref: np.ndarray, ref_se: np.ndarray, *,
                       max_alarms: int = MAX_ORDER_ALARMS) -> tuple[int, float]:
    """How far the checked method's order (`key`, e.g. its log-odds) departs from the reference's, judged
    only where the reference's error allows.

    Args:
        key: (A,) the checked method's ordering key per alarm (higher: more likely).
        ref, ref_se: (A,) the reference's probabilities and standard errors (0 for exact inference).
        max_alarms: count pairs over at most this many alarms (a fixed sample of them beyond).

    Returns:
        (resolved, reversed): the pairs the reference tells apart (`_told_apart`), and how many of
        them `key` orders the other way, a tie in `key` counting half.

    >>> order_disagreement(np.array([2., 1., 0.]), np.array([.5, .51, .9]), np.array([.01, .01, .01]))
    (2, 2.0)
    """
    key, ref, ref_se = (np.asarray(x, dtype=np.float64) for x in (key, ref, ref_se))
    if len(key) > max_alarms:
        pick = np.sort(np.random.default_rng(0).choice(len(key), max_alarms, replace=False))
        key, ref, ref_se = key[pick], ref[pick], ref_se[pick]
    resolved, reversed_ = 0, 0.0
    block = max(1, (1 << 20) // max(len(key), 1))  # about 1M pairs at a time
    for start in range(0, len(key), block):
        rows = slice(start, start + block)
        apart = _told_apart(ref[rows, None], ref[None, :], ref_se[rows, None], ref_se[None, :])
        resolved += int(apart.sum())
        # Compared, not subtracted: log-odds of +-inf (a certain alarm) tie with their equal.
        below, tied = key[rows, None] < key[None, :], key[rows, None] == key[None, :]
        reversed_ += float((apart & below).sum()) + 0.5 * float((apart & tied).sum())
    return resolved, reversed_


def top_overlap(key: np.ndarray, ref: np.ndarray, ref_se: np.ndarray, k: int) -> int:
    """How many of `key`'s top `k` alarms are in the reference's top k: an alarm counts when the reference
    does not tell its k-th most likely alarm above it (`_told_apart`), so a tie at the k-th place within
    the reference's error is no miss."""
    if k <= 0:
        return 0
    top = np.argsort(-key, kind="stable")[:k]
    kth = int(np.argsort(-ref, kind="stable")[k - 1])
    below = _told_apart(ref[kth], ref[top], ref_se[kth], ref_se[top])
    return int(k - below.sum())


def to_table(report: CheckReport, worst: int = 10) -> str:
    """The report for people: the summary, then the alarms LBP misses most (names through `safe_name`)."""
    sp = "n/a" if math.isnan(report.spearman) else f"{report.spearman:.3f}"
    order = "no pair told apart by the reference"
    if report.resolved_pairs:
        order = f"{report.reversed_pairs:,g} of {report.resolved_pairs:,} pairs reversed"
    lines = [
        f"reference        {report.reference}",
        f"alarms           {len(report.alarms)}",
        f"max |error|      {report.max_abs_error:.3g}",
        f"mean |error|     {report.mean_abs_error:.3g}",
        f"Spearman         {sp}",
        f"order            {order} (pairs the reference tells apart beyond {RESOLVED_SE:g} standard errors)",
        f"top {report.top_k} overlap    {report.top_k_overlap} of {report.top_k}",
        f"verdict          {report.verdict}" + (": " + "; ".join(report.reasons) if report.reasons else ""),
        "",
        f"{method_of(report.method).label:>11}  {'reference':>11}  {'stderr':>9}  alarm",
    ]
    sampled = method_of(report.reference).sampled  # its digits are as many as its standard errors support
    for a in report.alarms[:worst]:
        lbp = format_probability(a.lbp, a.lbp_log_odds)
        ref = format_probability(a.reference, stderr=a.stderr if sampled else math.nan)
        lines.append(f"{lbp:>11}  {ref:>11}  {a.stderr:>9.2g}  {safe_name(a.alarm)}")
    return "\n".join(lines) + "\n"


__all__ = ["check", "reference_marginals", "to_table", "order_disagreement", "top_overlap", "CheckReport",
           "AlarmCheck", "REFERENCES"]
