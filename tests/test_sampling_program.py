"""The device sampler's one program per graph (`fastlbp.engines.sampling_program`): against enumeration
under labels (the host path's cases, tilt included), and no compile as labels come."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from reference import Contradiction, exact_marginals
from test_engines_sampling import bingo_network, probability_of, random_dag

from fastlbp.core.errors import ContradictoryEvidence
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.settings import Settings
from fastlbp.engines import sampling_program
from fastlbp.engines.sampling import Sampler, TooFewSamples, sample_marginals


def union(cases):
    """The disjoint union of the cases' graphs: (factors, variables, offset of each case).

    Labels in one component leave the others unlabelled, so each case's posterior is the union's
    restricted to its component, and one compiled program serves every case."""
    factors, offsets, n = [], [], 0
    for case_factors, num, *_ in cases:
        offsets.append(n)
        factors += [Factor(f.kind, f.head + n, tuple(u + n for u in f.body), f.p1, f.p2)
                    for f in case_factors]
        n += num
    return factors, n, offsets


def device_coverage(cases, samples=1 << 17):
    """(marginals beyond 4 standard errors, compared, positive label sets refused, zero-probability sets
    answered, compiles) of the device program on the cases' union, one label set at a time."""
    factors, total, offsets = union(cases)
    graph = from_factors(factors, total)
    sampler = Sampler(graph, host=False)
    beyond = compared = refused = answered = 0
    for (case_factors, n, labels, seed), off in zip(cases, offsets, strict=True):
        try:
            exact = exact_marginals(case_factors, n, labels)
        except Contradiction:
            exact = None
        cfg = Settings(samples=samples, seed=seed, target_se=0, max_samples=samples * 8)
        shifted = {v + off: t for v, t in labels.items()}
        try:
            result = sample_marginals(graph, shifted, cfg, sampler=sampler, rows=np.arange(off, off + n))
        except (TooFewSamples, ContradictoryEvidence):
            refused += exact is not None
            continue
        if exact is None:
            answered += 1
            continue
        m, se = result.marginals[off:off + n], result.stderr[off:off + n]
        assert np.all(se > 0) and np.all(result.lower[off:off + n] <= m) and not np.isnan(m).any()
        beyond += int(np.count_nonzero(np.abs(m - exact) > 4 * se))
        compared += n
    return beyond, compared, refused, answered, sampler.compiles


@pytest.mark.slow
def test_device_random_dags_coverage():
    """The host path's random-DAG cases (1-3 labels on any variable, hard 0/1 parameters) through the
    device program: within 4 standard errors of enumeration on at least 99% of the marginals, every
    positive label set answered, every zero-probability one refused, one compile for all 60."""
    cases = []
    for seed in range(60):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(3, 14))
        factors = random_dag(rng, n)
        labels = {int(v): bool(rng.integers(2)) for v in rng.choice(n, size=int(rng.integers(1, 4)),
                                                                  replace=False)}
        cases.append((factors, n, labels, seed))
    beyond, compared, refused, answered, compiles = device_coverage(cases)
    assert compared > 300 and beyond <= 0.01 * compared, (beyond, compared)
    assert refused == 0 and answered == 0 and compiles == 1


@pytest.mark.slow
def test_device_improbable_labels_coverage():
    """Label sets of probability 1e-3 to 1e-12 on Bingo-style networks (the host path's cases): the
    device path tilts its proposal (a probe from the prior leaves too few effective samples) and stays
    within 4 standard errors on at least 99% of the marginals, refusing no positive set."""
    cases = []
    for seed in range(24):
        rng = np.random.default_rng(seed)
        for _ in range(20):
            factors, n, derived = bingo_network(rng)
            if n > 15:
                continue
            labels = {int(t): bool(rng.integers(2))
                      for t in rng.choice(derived, size=int(rng.integers(1, 4)), replace=False)}
            prob = probability_of(factors, n, labels)
            if 1e-12 <= prob <= 1e-3 or prob == 0:
                cases.append((factors, n, labels, seed))
                break
    beyond, compared, refused, answered, compiles = device_coverage(cases, samples=100_000)
    assert len(cases) >= 15 and compared > 150
    assert beyond <= 0.01 * compared and refused == 0 and answered == 0, (beyond, compared, refused)
    assert compiles == 1


def many_alarms(num_alarms: int, num_inputs: int = 40, seed: int = 0):
    """Inputs with priors; each alarm the OR of two clauses, each the AND of two inputs and a rule coin."""
    rng = np.random.default_rng(seed)
    factors = [Factor(AND, v, (), float(rng.choice([0.5, 0.9, 0.99])), 0.0) for v in range(num_inputs)]
    v, alarms = num_inputs, []
    for _ in range(num_alarms):
        clauses = []
        for _ in range(2):
            body = tuple(int(u) for u in rng.choice(num_inputs, size=2, replace=False))
            factors.append(Factor(AND, v, body, float(rng.choice([0.9, 0.999])), 0.0))
            clauses.append(v)
            v += 1
        factors.append(Factor(OR, v, tuple(clauses), 1.0, 0.0))
        alarms.append(v)
        v += 1
    return from_factors(factors, v), alarms


@pytest.mark.slow
def test_no_compile_across_a_thousand_labels():
    """A session labelling 1,000 alarms, 1 to 9 a round, on the device path: the program is compiled
    once (reserved for every alarm) and no label set, label count, seed or tilt compiles anything after."""
    import jax

    compiles = collections.Counter()

    def count(event, duration, fun_name=None, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles[fun_name] += 1

    jax.monitoring.register_event_duration_secs_listener(count)
    graph, alarms = many_alarms(1000)
    sampler = Sampler(graph, host=False, samples_hint=2048)
    sampler.reserve(alarms)
    sampler.warm()
    settings = Settings(samples=2048, max_samples=2048, min_accepted=1, target_se=0)
    sample_marginals(graph, {alarms[0]: True}, settings, sampler=sampler)
    before = sum(compiles.values())
    rng = np.random.default_rng(1)
    labels = {}
    # 1,000 labels in rounds of 1 to 9 new ones (every label count from 1 to 1,000 passes by).
    i = 0
    while i < len(alarms):
        step = 1 + i % 9
        for alarm in alarms[i:i + step]:
            labels[alarm] = bool(rng.random() < 0.7)
        i += step
        try:
            sample_marginals(graph, labels, settings.replace(seed=i), sampler=sampler)
        except (TooFewSamples, ContradictoryEvidence):
            pass
    assert sum(compiles.values()) == before, compiles
    assert sampler.compiles == 1


@pytest.mark.parametrize("n", [300, sampling_program.UNROLL_STEPS + 50])
def test_program_equals_its_steps_on_a_chain(n):
    """A chain of n levels (each tuple one clause on the one before): two shapes (the root, the rest)
    whatever the depth, one step per level, and each row the AND of the row above and its coin, with
    the steps as straight-line code (300) and in the loop (past UNROLL_STEPS)."""
    import jax
    import jax.numpy as jnp

    factors = [Factor(AND, 0, (), 0.9, 0.0)] + [Factor(AND, v, (v - 1,), 0.999, 0.0) for v in range(1, n)]
    graph = from_factors(factors, n)
    sampler = Sampler(graph, host=False)
    program = sampler.program
    assert sorted(program.shapes) == [(1, 0), (1, 1)] and program.steps == n
    coins_fn, propagate = sampler.stages(program.batch_words)
    with jax.enable_x64(True):
        coins = np.asarray(coins_fn(sampler.arrays, jnp.array([3, 7], jnp.uint32), jnp.uint32(0)))
        state = np.asarray(propagate(sampler.arrays, jnp.asarray(coins)))
    row_of = sampler.plan.row_of
    expected = np.full(coins.shape[1], 0xFFFFFFFF, np.uint32)
    for s in range(program.steps):
        cls = program.classes[program.step_class[s]]
        coin = coins[cls.coin1[program.step_index[s], 0]]
        expected = expected & coin
        assert program.step_start[s] == row_of[s]
        np.testing.assert_array_equal(state[row_of[s]], expected)


def test_steps_cover_each_level_in_order():
    """Every level's rows are covered once, in order, by steps within the padding and size bounds."""
    rng = np.random.default_rng(4)
    factors = random_dag(rng, 400, max_body=40)
    plan = Sampler(from_factors(factors, 400), host=True).plan
    for groups in plan.levels:
        steps = sampling_program._level_steps(groups)
        nxt = groups[0].start
        for first, rows, width, parts in steps:
            assert first == nxt and rows == sum(hi - lo for _, lo, hi in parts)
            r = 1 << max(rows - 1, 0).bit_length()
            real = sum((hi - lo) * max(g.rows.shape[1], 1) for g, lo, hi in parts)
            assert r * width <= sampling_program.STEP_READS
            assert len(parts) == 1 or r * max(width, 1) <= max(sampling_program.PAD_FACTOR * real,
                                                               sampling_program.SMALL_READS)
            nxt += rows
        assert nxt == groups[-1].start + groups[-1].size
