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
from fastlbp.inference.ranking import alarm_vars
from fastlbp.inference.session import Round, Session

REFERENCES = ("auto", "exact", "sample")
# The verdict: "warn" when LBP misses the reference by more than this on some alarm (beyond 3
# standard errors of a sampled reference), or orders the alarms unlike it.
MAX_ERROR_OK = 0.05
SPEARMAN_OK = 0.9
TOP_K = 10


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
        reference: "exact" or "sample".
        alarms: per alarm, worst first (by |LBP - reference|).
        max_abs_error, mean_abs_error: over the alarms.
        spearman: rank correlation of LBP's order with the reference's (NaN: fewer than 2 alarms
            or a constant side).
        top_k: k, and how many of LBP's top k are in the reference's top k.
        verdict: "ok" or "warn"; `reasons` says why.
        lbp_round: how the checked method's round went (LBP's unless `method` says otherwise).
        reference_info: what the reference took (width, samples, accepted, seconds).
        method: the checked method: lbp, sample or exact.
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

    def as_dict(self, worst: int = 10) -> dict:
        """The JSON document of `fastlbp check --format json`."""
        return {
            "reference": self.reference,
            "method": self.method,
            "alarms": len(self.alarms),
            "max_abs_error": self.max_abs_error,
            "mean_abs_error": self.mean_abs_error,
            "spearman": None if math.isnan(self.spearman) else self.spearman,
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


# How a report names the checked method.
METHOD_NAMES = {"lbp": "LBP", "sample": "sampling", "exact": "exact inference"}


@float64
def reference_marginals(model: Model, labels: dict[int, bool], settings: Settings,
                        reference: str = "auto") -> Marginals:
    """The reference's marginals: exact, sampled, or ("auto") exact where the width allows, else sampled."""
    from fastlbp.engines import exact, sampling

    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    if reference in ("auto", "exact"):
        try:
            return exact.exact_marginals(model, labels, settings)
        except exact.ExactTooWide:
            if reference == "exact":
                raise
    return sampling.sample_marginals(model, labels, settings)


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
    checked = "lbp" if settings.method == "auto" else settings.method
    who = METHOD_NAMES[checked]
    session = Session(model, dataclasses.replace(settings, method=checked))
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
    k = min(top_k, len(alarms))
    top_lbp = set(alarms[np.argsort(-rnd.log_odds[alarms], kind="stable")[:k]].tolist())
    top_ref = set(alarms[np.argsort(-ref_p, kind="stable")[:k]].tolist())
    overlap = len(top_lbp & top_ref)
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
    if not math.isnan(spearman) and spearman < SPEARMAN_OK:
        reasons.append(f"{who} orders the alarms unlike the reference (Spearman {spearman:.2f})")
    if k and overlap < k:
        reasons.append(f"{overlap} of {who}'s top {k} are in the reference's top {k}")
    if checked == "lbp" and not rnd.converged:
        reasons.append("LBP did not converge" + (f" (numbers from {rnd.remedy})" if rnd.remedy else ""))
    verdict = "warn" if reasons else "ok"
    return CheckReport(ref.method, rows, float(err.max()) if len(alarms) else 0.0,
                       float(err.mean()) if len(alarms) else 0.0, spearman, k, overlap, verdict, reasons, rnd,
                       {**ref.info, "seconds": ref.seconds}, checked)


def to_table(report: CheckReport, worst: int = 10) -> str:
    """The report for people: the summary, then the alarms LBP misses most (names through `safe_name`)."""
    sp = "n/a" if math.isnan(report.spearman) else f"{report.spearman:.3f}"
    lines = [
        f"reference        {report.reference}",
        f"alarms           {len(report.alarms)}",
        f"max |error|      {report.max_abs_error:.3g}",
        f"mean |error|     {report.mean_abs_error:.3g}",
        f"Spearman         {sp}",
        f"top {report.top_k} overlap    {report.top_k_overlap} of {report.top_k}",
        f"verdict          {report.verdict}" + (": " + "; ".join(report.reasons) if report.reasons else ""),
        "",
        f"{'LBP':>11}  {'reference':>11}  {'stderr':>9}  alarm",
    ]
    for a in report.alarms[:worst]:
        lbp, ref = format_probability(a.lbp, a.lbp_log_odds), format_probability(a.reference)
        lines.append(f"{lbp:>11}  {ref:>11}  {a.stderr:>9.2g}  {safe_name(a.alarm)}")
    return "\n".join(lines) + "\n"


__all__ = ["check", "reference_marginals", "to_table", "CheckReport", "AlarmCheck", "REFERENCES"]
