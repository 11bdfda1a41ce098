"""Bingo's triage metrics over a labelling sequence (paper Section 5.1.4, docs/DESIGN.md section 7).

A labelling sequence l_1..l_n (1 = true alarm) is the order in which the user
(or an oracle) labelled alarms, always taking the top-ranked one. With t_i the
time of round i (the inference whose ranking chose alarm i):

* Rank-100%-T = min{ i | sum_{j<=i} l_j = sum_j l_j }: labels needed to see
  every true alarm (0 when there are none).
* Rank-90%-T = min{ i | 10 sum_{j<=i} l_j >= 9 sum_j l_j }.
* Inversions = sum_i (1 - l_i) sum_{j>i} l_j: false alarms ranked above true
  ones.
* AUC = 1 - Inversions / (N_T N_F): the normalised area under the ROC curve
  (1.0 when N_T or N_F is 0: no pair can be inverted).
* TotalTime = sum_{i <= Rank-100%-T} t_i; AverageTime = TotalTime / Rank-100%-T.

Alarms never labelled (the run stopped once every true alarm was found) are
all false and would come after every true one: they add no inversions but
count in N_F, so pass `num_alarms` to include them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Metrics:
    """The five metrics of one labelling run (times in seconds)."""

    rank_100_t: int
    rank_90_t: int
    inversions: int
    auc: float
    total_time_s: float
    average_time_s: float
    num_true: int
    num_false: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _truths(sequence: Sequence[bool] | np.ndarray) -> np.ndarray:
    return np.asarray(sequence, dtype=np.int64).reshape(-1)


def rank_100_t(sequence: Sequence[bool] | np.ndarray) -> int:
    """Labels needed until every true alarm of `sequence` is seen (0 if none is true)."""
    return rank_fraction_t(sequence, 1.0)


def rank_90_t(sequence: Sequence[bool] | np.ndarray) -> int:
    """Labels needed until 90% of the true alarms of `sequence` are seen."""
    return rank_fraction_t(sequence, 0.9)


def rank_fraction_t(sequence: Sequence[bool] | np.ndarray, fraction: float) -> int:
    """min{i | sum_{j<=i} l_j >= fraction * sum_j l_j}, 1-based; 0 when no alarm is true.

    The 90% case is compared as 10*found >= 9*total in integers, as the paper
    writes it, so that no rounding decides a rank.
    """
    l = _truths(sequence)
    total = int(l.sum())
    if total == 0:
        return 0
    found = np.cumsum(l)
    if fraction == 1.0:
        hit = found == total
    elif fraction == 0.9:
        hit = 10 * found >= 9 * total
    else:
        hit = found >= fraction * total
    return int(np.argmax(hit)) + 1


def inversions(sequence: Sequence[bool] | np.ndarray) -> int:
    """sum_i (1 - l_i) * (number of true alarms after position i)."""
    l = _truths(sequence)
    true_after = int(l.sum()) - np.cumsum(l)
    return int(np.sum((1 - l) * true_after))


def auc(sequence: Sequence[bool] | np.ndarray, num_alarms: int | None = None) -> float:
    """1 - Inversions / (N_T N_F); unlabelled alarms (num_alarms - len) count as false."""
    l = _truths(sequence)
    n_true = int(l.sum())
    n_false = (len(l) if num_alarms is None else num_alarms) - n_true
    if n_true == 0 or n_false <= 0:
        return 1.0
    return 1.0 - inversions(l) / (n_true * n_false)


def summarize(sequence: Sequence[bool] | np.ndarray, round_seconds: Sequence[float] | np.ndarray,
              num_alarms: int | None = None) -> Metrics:
    """All metrics of one run.

    Args:
        sequence: (n,) truth of the i-th labelled alarm.
        round_seconds: (n,) time of the round that ranked the i-th alarm first.
        num_alarms: all alarms, labelled or not (default n); the unlabelled
            rest count as false alarms.
    """
    l = _truths(sequence)
    t = np.asarray(round_seconds, dtype=np.float64).reshape(-1)
    if t.shape != l.shape:
        raise ValueError(f"{len(t)} round times for {len(l)} labels")
    if num_alarms is not None and num_alarms < len(l):
        raise ValueError(f"num_alarms={num_alarms} is less than the {len(l)} labels")
    r100 = rank_100_t(l)
    total = float(t[:r100].sum())
    n_true = int(l.sum())
    return Metrics(
        rank_100_t=r100,
        rank_90_t=rank_90_t(l),
        inversions=inversions(l),
        auc=auc(l, num_alarms),
        total_time_s=total,
        average_time_s=total / r100 if r100 else 0.0,
        num_true=n_true,
        num_false=(len(l) if num_alarms is None else num_alarms) - n_true,
    )


def roc_points(sequence: Sequence[bool] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ROC curve of the paper's Figure 7: (false found so far, true found so far), from (0, 0).

    Returns:
        x: (n+1,) int64 false alarms seen after i labels; y: (n+1,) int64 true ones.
    """
    l = _truths(sequence)
    y = np.concatenate([[0], np.cumsum(l)])
    x = np.concatenate([[0], np.cumsum(1 - l)])
    return x, y
