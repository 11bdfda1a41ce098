"""Bingo's triage metrics over a labelling sequence (paper Section 5.1.4, docs/DESIGN.md section 7).

A labelling sequence l_1..l_N (1 = true alarm) is the order in which the user
(or an oracle) labels all N alarms, always taking the top-ranked one. With
t_i the time of round i (the inference whose ranking chose alarm i):

* Rank-100%-T = min{ i | sum_{j<=i} l_j = sum_j l_j }: labels needed to see
  every true alarm (0 when there are none).
* Rank-90%-T = min{ i | 10 sum_{j<=i} l_j >= 9 sum_j l_j }.
* Inversions = sum_i (1 - l_i) sum_{j>i} l_j: false alarms ranked above true
  ones.
* AUC = 1 - Inversions / (N_T N_F): the normalised area under the ROC curve;
  undefined (None) when N_T or N_F is 0, where no pair of a true and a false
  alarm exists.
* TotalTime = sum_{i <= Rank-100%-T} t_i; AverageTime = TotalTime / Rank-100%-T
  (undefined when Rank-100%-T is 0).

A run labels only a prefix l_1..l_n. Two counts say what the rest holds:
`num_alarms` (N) and `num_true` (N_T). A run that stopped once every true
alarm was found (the default: `num_true` = the prefix's true alarms) leaves
only false alarms, which come after every true one: they add no inversions
but count in N_F. A run cut short (`--max-rounds`) leaves true and false
alarms in an order nobody saw: a metric is a number only when every order of
the rest gives the same value (the rank was reached within the prefix, or
the rest is all true or all false), else None ("not reached").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Metrics:
    """The metrics of one labelling run (times in seconds); None where a metric is undefined.

    `rank_100_t`, `rank_90_t`, `inversions` and `auc` are None when the run was
    cut short before they were decided; `auc` also when there are no true or
    no false alarms; `total_time_s` when Rank-100%-T was not reached within the
    labelled rounds; `average_time_s` also when Rank-100%-T is 0.
    """

    rank_100_t: int | None
    rank_90_t: int | None
    inversions: int | None
    auc: float | None
    total_time_s: float | None
    average_time_s: float | None
    num_true: int  # true alarms, labelled or not
    num_false: int  # false alarms, labelled or not
    found: int = 0  # true alarms among the labelled ones
    labelled: int = 0  # labels made (rounds run)
    elapsed_s: float = 0.0  # time of every round run

    @property
    def complete(self) -> bool:
        """Every true alarm was labelled."""
        return self.found == self.num_true

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "complete": self.complete}


def _truths(sequence: Sequence[bool] | np.ndarray) -> np.ndarray:
    return np.asarray(sequence, dtype=np.int64).reshape(-1)


def _rest(l: np.ndarray, num_alarms: int | None, num_true: int | None) -> tuple[int, int]:
    """(true, false) alarms not labelled in the prefix `l`.

    Raises:
        ValueError: counts that no completion of `l` can have.
    """
    found = int(l.sum())
    total = len(l) if num_alarms is None else int(num_alarms)
    n_true = found if num_true is None else int(num_true)
    if total < len(l):
        raise ValueError(f"num_alarms={total} is less than the {len(l)} labels")
    if n_true < found:
        raise ValueError(f"num_true={n_true} is less than the {found} true alarms labelled")
    rest_true = n_true - found
    rest_false = total - len(l) - rest_true
    if rest_false < 0:
        raise ValueError(f"num_true={n_true} leaves {rest_true} true alarms for "
                         f"{total - len(l)} unlabelled ones")
    return rest_true, rest_false


def _determined(l: np.ndarray, rest_true: int, rest_false: int) -> np.ndarray | None:
    """The whole sequence when the prefix `l` fixes it (the rest is all true or all false), else None."""
    if rest_true and rest_false:
        return None
    tail = np.ones(rest_true, np.int64) if rest_true else np.zeros(rest_false, np.int64)
    return np.concatenate([l, tail])


def rank_100_t(sequence: Sequence[bool] | np.ndarray, num_alarms: int | None = None,
               num_true: int | None = None) -> int | None:
    """Labels needed until every true alarm is seen (0 if none is true; None if not decided)."""
    return rank_fraction_t(sequence, 1.0, num_alarms, num_true)


def rank_90_t(sequence: Sequence[bool] | np.ndarray, num_alarms: int | None = None,
              num_true: int | None = None) -> int | None:
    """Labels needed until 90% of the true alarms are seen (None if not decided)."""
    return rank_fraction_t(sequence, 0.9, num_alarms, num_true)


def rank_fraction_t(sequence: Sequence[bool] | np.ndarray, fraction: float, num_alarms: int | None = None,
                    num_true: int | None = None) -> int | None:
    """min{i | sum_{j<=i} l_j >= fraction * N_T}, 1-based; 0 when no alarm is true.

    None when the prefix `sequence` does not reach it and the order of the
    unlabelled rest (true and false alarms, see `num_alarms`, `num_true`)
    would decide it. The 90% case is compared as 10*found >= 9*total in
    integers, as the paper writes it, so that no rounding decides a rank.
    """
    l = _truths(sequence)
    rest_true, rest_false = _rest(l, num_alarms, num_true)
    total = int(l.sum()) + rest_true
    if total == 0:
        return 0
    full = _determined(l, rest_true, rest_false)
    found = np.cumsum(l if full is None else full)
    if fraction == 1.0:
        hit = found == total
    elif fraction == 0.9:
        hit = 10 * found >= 9 * total
    else:
        hit = found >= fraction * total
    if not hit.any():
        return None  # not reached within the prefix, and the rest's order decides it
    return int(np.argmax(hit)) + 1


def inversions(sequence: Sequence[bool] | np.ndarray, num_alarms: int | None = None,
               num_true: int | None = None) -> int | None:
    """sum_i (1 - l_i) * (number of true alarms after position i); None if the rest's order decides it."""
    l = _truths(sequence)
    full = _determined(l, *_rest(l, num_alarms, num_true))
    if full is None:
        return None
    true_after = int(full.sum()) - np.cumsum(full)
    return int(np.sum((1 - full) * true_after))


def auc(sequence: Sequence[bool] | np.ndarray, num_alarms: int | None = None,
        num_true: int | None = None) -> float | None:
    """1 - Inversions / (N_T N_F); None without true or false alarms, or when not decided."""
    l = _truths(sequence)
    rest_true, rest_false = _rest(l, num_alarms, num_true)
    n_true = int(l.sum()) + rest_true
    n_false = len(l) - int(l.sum()) + rest_false
    inv = inversions(l, num_alarms, num_true)
    if n_true == 0 or n_false == 0 or inv is None:
        return None
    return 1.0 - inv / (n_true * n_false)


def summarize(sequence: Sequence[bool] | np.ndarray, round_seconds: Sequence[float] | np.ndarray,
              num_alarms: int | None = None, num_true: int | None = None) -> Metrics:
    """All metrics of one run.

    Args:
        sequence: (n,) truth of the i-th labelled alarm.
        round_seconds: (n,) time of the round that ranked the i-th alarm first.
        num_alarms: all alarms, labelled or not (default n).
        num_true: all true alarms, labelled or not (default: those in
            `sequence`, i.e. the run found every true alarm and the unlabelled
            rest is false).

    Raises:
        ValueError: lengths or counts that do not fit together.
    """
    l = _truths(sequence)
    t = np.asarray(round_seconds, dtype=np.float64).reshape(-1)
    if t.shape != l.shape:
        raise ValueError(f"{len(t)} round times for {len(l)} labels")
    rest_true, rest_false = _rest(l, num_alarms, num_true)
    r100 = rank_100_t(l, num_alarms, num_true)
    # Times exist for the labelled rounds only: TotalTime needs Rank-100%-T among them.
    total = float(t[:r100].sum()) if r100 is not None and r100 <= len(l) else None
    found = int(l.sum())
    return Metrics(
        rank_100_t=r100,
        rank_90_t=rank_90_t(l, num_alarms, num_true),
        inversions=inversions(l, num_alarms, num_true),
        auc=auc(l, num_alarms, num_true),
        total_time_s=total,
        average_time_s=total / r100 if total is not None and r100 else None,
        num_true=found + rest_true,
        num_false=len(l) - found + rest_false,
        found=found,
        labelled=len(l),
        elapsed_s=float(t.sum()),
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
