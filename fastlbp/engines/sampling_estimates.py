"""What a sampling run's weighted sums give: estimates, standard errors, honest intervals, or a refusal.

    tally = Tally(s1, s2, w1, w2, drawn, positive)    # from `fastlbp.engines.sampling.Sampler`
    p, se, lower, upper = tally.estimates()

Too few effective samples for estimates is an error, not noise: `TooFewSamples`, and `NoConsistentWorld`
where no world drawn has positive weight (`fastlbp.engines.sampling.sample_marginals` raises them).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastlbp.core.errors import InferenceError

# Two-sided 95% normal quantile of the Wilson intervals.
Z95 = 1.959963984540054


def wilson(p: np.ndarray, n: float, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) Wilson score interval of a proportion p estimated from n (effective) samples."""
    p = np.clip(np.asarray(p, np.float64), 0.0, 1.0)
    if not n > 0:
        return np.zeros_like(p), np.ones_like(p)
    z2n = z * z / n
    center = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * np.sqrt(p * (1 - p) / n + z2n / (4 * n))
    # At p = 0 (1) the lower (upper) end is 0 (1) exactly, not a rounding error away.
    lower = np.where(p <= 0, 0.0, np.clip(center - half, 0.0, 1.0))
    return lower, np.where(p >= 1, 1.0, np.clip(center + half, 0.0, 1.0))


@dataclasses.dataclass(frozen=True)
class Tally:
    """Weighted sums of a run, per variable, and what they give.

    Attributes:
        s1: (V,) float64 sum over worlds of w [x = 1] (weights scaled by a common factor).
        s2: (V,) float64 sum of w^2 [x = 1].
        w1, w2: sum of w, of w^2.
        drawn: worlds drawn.
        positive: worlds of positive weight.
    """

    s1: np.ndarray
    s2: np.ndarray
    w1: float
    w2: float
    drawn: int
    positive: int

    @property
    def effective(self) -> float:
        """Kish's effective sample size (sum w)^2 / sum w^2 (0 with no positive weight)."""
        return self.w1 * self.w1 / self.w2 if self.w2 > 0 else 0.0

    def estimates(self):
        """(p, stderr, lower, upper), each (V,) float64.

        p is the self-normalised estimate; stderr the larger of the delta-method standard error
        sqrt(sum w^2 (x - p)^2) / sum w and the Wilson interval's half-width / 1.96 on the effective
        sample size (never 0 at p = 0 or 1); lower, upper the 95% Wilson interval around p.
        """
        if not self.w1 > 0:
            nan = np.full_like(self.s1, np.nan)
            return nan, nan, nan, nan
        p = np.clip(self.s1 / self.w1, 0.0, 1.0)
        var = np.maximum(self.s2 * (1 - 2 * p) + p * p * self.w2, 0.0) / (self.w1 * self.w1)
        lower, upper = wilson(p, self.effective)
        se = np.maximum(np.sqrt(var), (upper - lower) / (2 * Z95))
        return p, se, np.minimum(lower, p), np.maximum(upper, p)


def _max_se(tally: Tally, rows) -> float:
    """The largest standard error over `rows` (None: every row), computed for those rows only (every
    row's Wilson interval took 2.5 ms a round at ftp's 69K variables, its 1,831 alarms 0.1 ms)."""
    if rows is not None:
        tally = dataclasses.replace(tally, s1=tally.s1[rows], s2=tally.s2[rows])
    _, se, _, _ = tally.estimates()
    return float(np.max(se)) if se.size else 0.0


class TooFewSamples(InferenceError):
    """The labels' weight sits on too few worlds: fewer effective samples than `settings.min_accepted`."""

    def __init__(self, effective: float, drawn: int, needed: int, positive: int | None = None):
        self.accepted, self.effective, self.drawn, self.needed = int(effective), effective, drawn, needed
        self.positive = positive
        of = "" if positive is None else f", {positive} of them of positive weight"
        super().__init__(f"sampling: the labels leave {effective:.0f} effective samples of {drawn} worlds "
                         f"drawn{of} (at least {needed} needed for estimates; min_accepted): they are "
                         "improbable where the sampler draws; use --method exact where the graph allows, or "
                         "draw more (max_samples)")


class NoConsistentWorld(TooFewSamples):
    """No world drawn has positive weight under the labels, and the hard constraints prove nothing."""

    def __init__(self, drawn: int, needed: int, labels: dict[str, bool]):
        self.labels = labels
        InferenceError.__init__(
            self, f"sampling: none of the {drawn} worlds drawn is consistent with the labels "
                  f"({_label_list(labels)}); their probability is 0 or below about 1/{drawn} where the "
                  "sampler draws, which the model's hard constraints could not decide; use --method exact "
                  "where the graph allows")
        self.accepted = self.effective = 0
        self.drawn, self.needed, self.positive = drawn, needed, 0


def _label_list(labels: dict[str, bool], most: int = 6) -> str:
    items = [f"{name}={'true' if t else 'false'}" for name, t in list(labels.items())[:most]]
    return ", ".join(items) + (f", ... ({len(labels)} labels)" if len(labels) > most else "")
