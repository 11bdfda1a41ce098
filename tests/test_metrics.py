"""Bingo's metrics against their definitions, written out naively, and a run cut short against every
order of the alarms it left unlabelled."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlbp.inference import metrics


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
    # No pair of a true and a false alarm: AUC is undefined, not 1.0; AverageTime divides by 0 labels.
    m = metrics.summarize([0, 0], [1.0, 1.0])
    assert (m.rank_100_t, m.rank_90_t, m.inversions, m.auc, m.total_time_s, m.average_time_s) == (
        0, 0, 0, None, 0.0, None)
    assert m.complete and m.elapsed_s == 2.0


def test_no_false_alarm():
    m = metrics.summarize([1, 1], [1.0, 2.0])
    assert (m.rank_100_t, m.inversions, m.auc, m.total_time_s, m.average_time_s) == (2, 0, None, 3.0, 1.5)


def test_cut_short():
    # avrora's report: 3 rounds, 3 of 16 true alarms found: nothing after the prefix is decided.
    m = metrics.summarize([1, 1, 1], [0.1, 0.1, 0.1], num_alarms=273, num_true=16)
    assert (m.rank_100_t, m.rank_90_t, m.inversions, m.auc, m.total_time_s, m.average_time_s) == (
        None, None, None, None, None, None)
    assert (m.found, m.num_true, m.num_false, m.labelled, m.complete) == (3, 16, 257, 3, False)
    assert m.elapsed_s == pytest.approx(0.3)
    # 9 of 10 found: Rank-90%-T is reached, Rank-100%-T is not.
    m = metrics.summarize([1] * 9 + [0], [1.0] * 10, num_alarms=20, num_true=10)
    assert (m.rank_90_t, m.rank_100_t, m.auc) == (9, None, None)
    # The rest all true: its order cannot matter, every metric is decided (times only up to the prefix).
    m = metrics.summarize([0, 1], [1.0, 1.0], num_alarms=4, num_true=3)
    assert (m.rank_100_t, m.inversions, m.auc, m.total_time_s) == (4, 3, 0.0, None)
    for bad in ((2, 2), (4, 1), (4, 5)):  # too few alarms, fewer true than found, more true than fit
        with pytest.raises(ValueError):
            metrics.summarize([0, 1, 1], [1.0] * 3, num_alarms=bad[0], num_true=bad[1])


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
        assert m.auc == pytest.approx(naive_auc(l + [0] * extra_false))
    else:
        assert m.auc is None
    assert m.total_time_s == sum(times[: m.rank_100_t])
    x, y = metrics.roc_points(l)
    assert list(x + y) == list(range(len(l) + 1)) and y[-1] == nt


def naive_auc(full):
    """The area under the ROC curve by counting pairs: a true alarm ranked above a false one scores 1."""
    trues = [i for i, x in enumerate(full) if x]
    falses = [i for i, x in enumerate(full) if not x]
    if not trues or not falses:
        return None
    return sum(t < f for t in trues for f in falses) / (len(trues) * len(falses))


def completions(prefix, rest_true, rest_false):
    """Every full labelling sequence that starts with `prefix` (each distinct order of the rest)."""
    rest = [1] * rest_true + [0] * rest_false
    for order in set(itertools.permutations(rest)):
        yield list(prefix) + list(order)


def decided(values):
    """The value every completion agrees on, else None (a cut-short run cannot know it)."""
    values = set(values)
    return values.pop() if len(values) == 1 else None


@settings(max_examples=150, deadline=None)
@given(st.lists(st.booleans(), max_size=8), st.integers(0, 4), st.integers(0, 4))
def test_cut_short_against_every_completion(l, rest_true, rest_false):
    l = [int(x) for x in l]
    n_true = sum(l) + rest_true
    full_runs = list(completions(l, rest_true, rest_false))
    m = metrics.summarize(l, np.ones(len(l)), num_alarms=len(l) + rest_true + rest_false, num_true=n_true)
    assert m.rank_100_t == decided(naive_rank(f, 1, 1) for f in full_runs)
    assert m.rank_90_t == decided(naive_rank(f, 9, 10) for f in full_runs)
    assert m.inversions == decided(naive_inversions(f) for f in full_runs)
    aucs = [naive_auc(f) for f in full_runs]
    if m.auc is None:
        assert None in aucs or len({round(a, 12) for a in aucs}) > 1
    else:
        assert all(a == pytest.approx(m.auc) for a in aucs)
    assert m.complete == (rest_true == 0)
    if m.rank_100_t is not None and m.rank_100_t <= len(l):
        assert m.total_time_s == m.rank_100_t
    else:
        assert m.total_time_s is None
