"""Bingo's metrics against their definitions, written out naively."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlbp import metrics


def naive_rank(l, frac_num, frac_den):
    total = sum(l)
    if total == 0:
        return 0
    for i in range(1, len(l) + 1):
        if frac_den * sum(l[:i]) >= frac_num * total:
            return i
    raise AssertionError


def naive_inversions(l):
    return sum(1 for i in range(len(l)) for j in range(i + 1, len(l)) if not l[i] and l[j])


def test_paper_example():
    l = [1, 0, 1, 0, 0, 1, 0]
    assert metrics.rank_100_t(l) == 6
    assert metrics.rank_90_t(l) == 6  # 10*2 < 9*3
    assert metrics.inversions(l) == 1 + 1 + 2  # falses at 2, 4, 5 before the trues after them
    assert metrics.auc(l) == pytest.approx(1 - 4 / (3 * 4))
    m = metrics.summarize(l, [1, 2, 3, 4, 5, 6, 7])
    assert m.total_time_s == 21 and m.average_time_s == 3.5
    assert (m.num_true, m.num_false) == (3, 4)


def test_unlabelled_rest_counts_as_false():
    m = metrics.summarize([0, 1], [0.5, 0.5], num_alarms=10)
    assert m.inversions == 1 and m.num_false == 9
    assert m.auc == pytest.approx(1 - 1 / 9)
    with pytest.raises(ValueError):
        metrics.summarize([0, 1], [0.5], num_alarms=10)


def test_no_true_alarm():
    m = metrics.summarize([0, 0], [1.0, 1.0])
    assert (m.rank_100_t, m.rank_90_t, m.inversions, m.auc, m.total_time_s, m.average_time_s) == (
        0, 0, 0, 1.0, 0.0, 0.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=40), st.integers(0, 5))
def test_against_definitions(l, extra_false):
    l = [int(x) for x in l]
    times = np.arange(1, len(l) + 1, dtype=float)
    m = metrics.summarize(l, times, num_alarms=len(l) + extra_false)
    assert m.rank_100_t == naive_rank(l, 1, 1)
    assert m.rank_90_t == naive_rank(l, 9, 10)
    assert m.inversions == naive_inversions(l + [0] * extra_false)
    nt, nf = sum(l), len(l) + extra_false - sum(l)
    if nt and nf:
        assert m.inversions == pytest.approx(nt * nf * (1 - m.auc))
    assert m.total_time_s == sum(times[: m.rank_100_t])
    x, y = metrics.roc_points(l)
    assert list(x + y) == list(range(len(l) + 1)) and y[-1] == nt
