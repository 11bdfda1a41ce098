"""The bit-packed sampler (`fastlbp.engines.sampling`) against enumeration and a one-world sampler."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from reference import Contradiction, exact_marginals

from datalog.bayesnet import to_model
from datalog.synthetic import layered
from fastlbp.core.constraints import conflicting_labels
from fastlbp.core.errors import ContradictoryEvidence, InferenceError, SettingsError
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.settings import Settings
from fastlbp.engines import sampling, sampling_plan
from fastlbp.engines.sampling import NoConsistentWorld, NotABayesNet, Sampler, TooFewSamples, sample_marginals
from tests.graphs import far_evidence, random_polytree

SAMPLES = 1 << 17


def random_dag(rng: np.random.Generator, num_vars: int, max_body: int = 6) -> list[Factor]:
    """One factor per variable over earlier variables: reconvergent paths, wide bodies, hard parameters."""
    factors = []
    for v in range(num_vars):
        def prob():
            r = rng.random()
            return float(rng.integers(0, 2)) if r < 0.25 else (0.5 if r < 0.3 else float(rng.uniform(0, 1)))
        if v < 2 or rng.random() < 0.25:
            p = prob()
            factors.append(Factor(int(rng.integers(2)), v, (), p, p))
            continue
        k = int(rng.integers(1, min(max_body, v) + 1))
        body = tuple(int(u) for u in rng.choice(v, size=k, replace=False))
        factors.append(Factor(AND if rng.random() < 0.5 else OR, v, body, prob(), prob()))
    perm = rng.permutation(num_vars)  # variable numbers not in topological order
    return [Factor(f.kind, int(perm[f.head]), tuple(int(perm[u]) for u in f.body), f.p1, f.p2)
            for f in factors]


def probability_of(factors, num_vars, labels) -> float:
    """P(labels) by the chain rule over exact conditional marginals."""
    prob, given_ = 1.0, {}
    for v, t in labels.items():
        try:
            m = exact_marginals(factors, num_vars, given_)[v]
        except Contradiction:
            return 0.0
        prob *= m if t else 1.0 - m
        given_[v] = t
    return prob


def assert_within(result, exact, sigmas=5.0):
    exact = np.clip(exact, 0.0, 1.0)
    err = np.abs(result.marginals - exact)
    assert np.all(result.stderr > 0), result.stderr  # honest at 0 and 1: never a standard error of 0
    assert np.all(err <= sigmas * result.stderr + 1e-12), (result.marginals, exact, result.stderr)
    assert np.all(result.lower <= result.marginals) and np.all(result.marginals <= result.upper)


def check_graph(factors, num_vars, labels, seed, host=True):
    graph = from_factors(factors, num_vars)
    cfg = Settings(samples=SAMPLES, seed=seed, min_accepted=1000, target_se=0, max_samples=SAMPLES * 8)
    sampler = Sampler(graph, host=host)
    try:
        exact = exact_marginals(factors, num_vars, labels)
    except Contradiction:
        with pytest.raises((ContradictoryEvidence, NoConsistentWorld)):
            sample_marginals(graph, labels, cfg, sampler=sampler)
        return
    prob = probability_of(factors, num_vars, labels)
    try:
        result = sample_marginals(graph, labels, cfg, sampler=sampler)
    except TooFewSamples as err:
        # Positive labels the sampler cannot reach: only when rejection would keep almost nothing too.
        assert err.effective < 1000 and err.drawn == cfg.max_samples
        assert prob * cfg.max_samples < 3000, prob
        return
    assert result.info["samples"] >= SAMPLES and result.info["effective_samples"] >= 1000
    assert_within(result, exact)


def coverage(cases, samples=1 << 17):
    """Runs the host sampler on (factors, num_vars, labels, seed) cases against enumeration.

    Returns: (marginals beyond 4 standard errors, marginals compared, positive label sets refused,
    zero-probability label sets answered).
    """
    beyond = compared = refused = answered = 0
    for factors, n, labels, seed in cases:
        graph = from_factors(factors, n)
        try:
            exact = exact_marginals(factors, n, labels)
        except Contradiction:
            exact = None
        cfg = Settings(samples=samples, seed=seed, target_se=0, max_samples=samples * 8)
        try:
            result = sample_marginals(graph, labels, cfg, sampler=Sampler(graph, host=True))
        except (TooFewSamples, ContradictoryEvidence):
            refused += exact is not None
            continue
        if exact is None:
            answered += 1
            continue
        assert np.all(result.stderr > 0) and np.all(result.lower <= result.marginals)
        beyond += int(np.count_nonzero(np.abs(result.marginals - exact) > 4 * result.stderr))
        compared += n
    return beyond, compared, refused, answered


@pytest.mark.slow
def test_random_dags_coverage():
    """Random DAGs (reconvergent paths, hard 0/1 parameters) with 1-3 labels on any variable: the
    importance sampler is within 4 of its standard errors of enumeration on at least 99% of the
    marginals, answers every label set of positive probability and refuses every one of probability 0.
    Measured over 200 seeds: 10 of 1,330 marginals beyond 4 SE (in 4 graphs whose posterior sits on
    worlds the proposal rarely draws; the same from the tilted mixture as from the prior alone), 0
    refused, 41 of 41 zero-probability sets refused."""
    cases = []
    for seed in range(60):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(3, 14))
        factors = random_dag(rng, n)
        labels = {int(v): bool(rng.integers(2)) for v in rng.choice(n, size=int(rng.integers(1, 4)),
                                                                  replace=False)}
        cases.append((factors, n, labels, seed))
    beyond, compared, refused, answered = coverage(cases)
    assert compared > 300 and beyond <= 0.01 * compared, (beyond, compared)
    assert refused == 0 and answered == 0


RULE_P = (1 - 1e-3, 1 - 1e-4, 0.999, 0.9, 0.5, 0.1, 1e-3, 1e-4)


def bingo_network(rng, n_inputs=3, n_tuples=5):
    """Inputs with priors, clauses AND(body) & coin(rule p), tuples OR of their clauses.

    Returns: (factors, number of variables, derived tuples)."""
    factors, tuples, derived, v = [], [], [], 0
    for _ in range(n_inputs):
        factors.append(Factor(AND, v, (), float(rng.choice([0.5, 0.9, 0.99, 0.999])), 0.0))
        tuples.append(v)
        v += 1
    for _ in range(n_tuples):
        head, v = v, v + 1
        clauses = []
        for _ in range(int(rng.integers(1, 3))):
            size = int(rng.integers(1, min(3, len(tuples)) + 1))
            body = tuple(int(u) for u in rng.choice(tuples, size=size, replace=False))
            factors.append(Factor(AND, v, body, float(rng.choice(RULE_P)), 0.0))
            clauses.append(v)
            v += 1
        factors.append(Factor(OR, head, tuple(clauses), 1.0, 0.0))
        tuples.append(head)
        derived.append(head)
    return factors, v, derived


@pytest.mark.slow
def test_improbable_labels_coverage():
    """Bingo-style networks with label sets of probability 1e-3 to 1e-12 (rejection would keep 10^2 to
    10^-7 of 10^5 worlds) or exactly 0. On these 24 cases: 0 of 277 marginals beyond 4 SE, no positive
    set refused, every zero-probability set refused. From the prior alone (no tilt): 4 of 236 beyond
    4 SE, 3 refused with too few effective samples (their improbability sits upstream of the labels)."""
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
    beyond, compared, refused, answered = coverage(cases, samples=100_000)
    assert len(cases) >= 15 and compared > 150
    assert beyond <= 0.01 * compared and refused == 0 and answered == 0, (beyond, compared, refused)


@pytest.mark.slow
@hsettings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_polytrees_within_five_standard_errors(seed):
    rng = np.random.default_rng(seed)
    factors = random_polytree(rng, 10)
    check_graph(factors, 10, {int(rng.integers(10)): bool(rng.integers(2))}, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 3])
def test_derivation_graph_models(seed):
    # Bingo-like derivation graphs (clauses sharing body tuples) after cycle elimination and to_model.
    model = to_model(layered(num_inputs=4, layers=2, width=3, seed=seed), compress=True)
    assert model.num_vars <= 22
    factors = model.graph.factors()
    cfg = Settings(samples=SAMPLES, seed=seed, target_se=0)
    assert_within(sample_marginals(model, None, cfg), exact_marginals(factors, model.num_vars))
    labels = {int(a): bool(i % 2) for i, a in enumerate(model.alarms[:2])}
    assert_within(sample_marginals(model, labels, cfg), exact_marginals(factors, model.num_vars, labels))


def test_too_few_effective_samples_is_refused():
    # P(x0 = 1) = 1e-4 and x0 is an input: its label weighs every world 1e-4 alike, so the weights are
    # even (effective = drawn); a label on x1 = OR(x0) with p1 = 1, p2 = 0 needs x0 (rejection-like).
    factors = [Factor(AND, 0, (), 1e-3, 1e-3), Factor(OR, 1, (0,), 1.0, 0.0), Factor(AND, 2, (1,), 0.5, 0.0),
               Factor(AND, 3, (2,), 0.5, 0.0)]
    graph = from_factors(factors, 4)
    even = sample_marginals(graph, {0: True}, Settings(samples=10_240, max_samples=10_240, target_se=0))
    assert even.info["effective_samples"] == pytest.approx(10_240)
    assert_within(even, exact_marginals(factors, 4, {0: True}))
    cfg = Settings(samples=10_240, max_samples=10_240, min_accepted=100)
    with pytest.raises(TooFewSamples) as info:
        sample_marginals(graph, {3: True}, cfg, sampler=Sampler(graph, tilt=False))
    err = info.value
    assert isinstance(err, InferenceError) and not isinstance(err, NoConsistentWorld)
    assert err.drawn == 10_240 and 0 < err.effective < 100
    assert "effective samples of 10240 worlds" in str(err) and "--method exact" in str(err)
    # The tilted proposal (the default) draws x0 = 1 in about half of its worlds instead.
    tilted = sample_marginals(graph, {3: True}, cfg)
    assert tilted.info["tilted_coins"] > 0 and tilted.info["effective_samples"] > 1000
    assert_within(tilted, exact_marginals(factors, 4, {3: True}))


def test_evidence_far_below_an_input_is_looked_ahead_at():
    # Two chains of 8 and 9 clauses (rule probability 1e-3) from an input s (prior 0.5) derive `end`;
    # `end` labelled true needs s. The prior proposal never draws a firing chain (1e-24 a world); the
    # tilted half of the mixture fires each coin with 0.999 and finds P(s | end) = 1.
    graph, end = far_evidence()
    cfg = Settings(samples=1 << 14, max_samples=1 << 14, target_se=0, min_accepted=100)
    with pytest.raises(TooFewSamples):
        sample_marginals(graph, {end: True}, cfg, sampler=Sampler(graph, tilt=False))
    result = sample_marginals(graph, {end: True}, cfg)
    assert result.marginals[0] == 1.0 and result.info["effective_samples"] > 1000
    # Within 0.01, not within its SE: the worlds where only the longer chain fires (posterior 1e-3)
    # have Q about 1.6e-5, so 2^14 worlds rarely hold one (2^20 worlds: 0.99904 for 0.99900).
    expect = exact_marginals(graph.factors(), graph.num_vars, {end: True})
    assert np.abs(result.marginals - expect).max() < 0.01


def test_improbable_labels_are_weights_not_rejections():
    # A tuple derived by three clauses of p = 0.999 whose bodies always hold, labelled false: rejection
    # keeps 1e-9 of the worlds; importance weights give every world the same weight 1e-9, so all of
    # them count, and the clauses' marginals are exact.
    factors = [Factor(AND, 0, (), 1.0, 1.0)]
    factors += [Factor(AND, 1 + i, (0,), 0.999, 0.0) for i in range(3)]
    factors += [Factor(OR, 4, (1, 2, 3), 1.0, 0.0), Factor(AND, 5, (4,), 0.3, 0.0),
                Factor(AND, 6, (), 0.4, 0.4)]
    graph = from_factors(factors, 7)
    labels = {4: False}
    assert probability_of(factors, 7, labels) == pytest.approx(1e-9, rel=1e-6)
    result = sample_marginals(graph, labels, Settings(samples=4096, target_se=0))
    assert result.info["effective_samples"] == pytest.approx(4096)
    np.testing.assert_allclose(result.marginals[:6], [1, 0, 0, 0, 0, 0], atol=1e-12)
    # Labelled true: the clauses' expectations given at least one fires, 0.999 / (1 - 1e-9) each.
    result = sample_marginals(graph, {4: True}, Settings(samples=4096, target_se=0))
    np.testing.assert_allclose(result.marginals[1:4], 0.999 / (1 - 1e-9), rtol=1e-12)
    assert_within(result, exact_marginals(factors, 7, {4: True}))


def test_honest_interval_at_zero():
    # x1 = OR(x0) with P(x0) = 1e-9: 4096 worlds never see x1; its standard error is not 0, and the
    # Wilson interval's upper end is about 3.84 / 4096.
    factors = [Factor(AND, 0, (), 1e-9, 1e-9), Factor(OR, 1, (0,), 1.0, 0.0)]
    result = sample_marginals(from_factors(factors, 2), None, Settings(samples=4096, target_se=0))
    assert result.marginals[1] == 0.0
    z2 = sampling.Z95**2
    assert result.stderr[1] > 0 and result.upper[1] == pytest.approx(z2 / (4096 + z2))
    lower, upper = sampling.wilson(np.array([0.0, 0.5, 1.0]), 100)
    assert lower[0] == 0 and upper[2] == 1 and 0.4 < lower[1] < 0.5 < upper[1] < 0.6


@pytest.mark.slow
def test_target_se_draws_more_until_reached():
    # A fair coin's marginal has SE 0.5 / sqrt(n): 0.002 needs 62,500 worlds, 4 doublings of 4,096.
    factors = [Factor(AND, 0, (), 0.5, 0.5), Factor(OR, 1, (0,), 0.9, 0.2)]
    graph = from_factors(factors, 2)
    result = sample_marginals(graph, None, Settings(samples=4096, target_se=0.002, max_samples=10**6))
    assert result.info["samples"] == 4096 * 16 and result.info["max_stderr"] <= 0.002
    # Within the budget only: max_samples stops it, and the output says how far it got.
    capped = sample_marginals(graph, None, Settings(samples=4096, target_se=0.002, max_samples=8192))
    assert capped.info["samples"] == 8192 and capped.info["max_stderr"] > 0.002


def test_time_budget_ends_the_doubling_and_says_so():
    # One word per round on a fair coin: the target (SE 0.002) needs 16 doublings; a budget of ~0 s
    # stops after the first draw, and the status line says the time budget, not the worlds, ran out.
    from fastlbp.inference.methods import describe
    from fastlbp.inference.session import Round

    factors = [Factor(AND, 0, (), 0.5, 0.5), Factor(OR, 1, (0,), 0.9, 0.2)]
    graph = from_factors(factors, 2)
    base = Settings(samples=4096, target_se=0.002, max_samples=10**6)
    timed = sample_marginals(graph, None, base.replace(sample_seconds=1e-9))
    assert timed.info["samples"] == 4096 and timed.info["stopped"] == "time"
    assert timed.info["max_stderr"] > 0.002
    untimed = sample_marginals(graph, None, base.replace(sample_seconds=0.0, max_samples=8192))
    assert untimed.info["samples"] == 8192 and untimed.info["stopped"] == "worlds"
    fields = {f: None for f in Round.__dataclass_fields__}
    line = describe(Round(**{**fields, "method": "sample", "info": timed.info}))
    assert "s budget" in line and "not reached" in line
    with pytest.raises(SettingsError):
        Settings(sample_seconds=-1)


def test_contradictory_labels_named():
    # x = a exactly (a hard AND of one body variable): x=1, a=0 is ruled out by propagation.
    factors = [Factor(AND, 0, (), 0.3, 0.3), Factor(AND, 1, (0,), 1.0, 0.0), Factor(AND, 2, (), 0.5, 0.5)]
    graph = from_factors(factors, 3)
    with pytest.raises(ContradictoryEvidence) as info:
        sample_marginals(graph, {1: True, 0: False, 2: True}, Settings(samples=1000))
    assert info.value.labels == {"1": True, "0": False}


def test_contradiction_propagation_cannot_prove_has_no_consistent_world():
    # The four 2-clauses over a, b: each is satisfiable alone, so arc consistency removes nothing,
    # yet together they have no model; every world weighs 0 and the sampler says so, naming the labels.
    a, b, na, nb = 0, 1, 2, 3
    factors = [Factor(AND, a, (), 0.5, 0.5), Factor(AND, b, (), 0.5, 0.5),
               Factor(AND, na, (a,), 0.0, 1.0), Factor(AND, nb, (b,), 0.0, 1.0)]
    clauses = [(a, b), (a, nb), (na, b), (na, nb)]
    factors += [Factor(OR, 4 + i, c, 1.0, 0.0) for i, c in enumerate(clauses)]
    graph = from_factors(factors, 8)
    labels = {4 + i: True for i in range(4)}
    with pytest.raises(Contradiction):
        exact_marginals(factors, 8, labels)
    assert conflicting_labels(graph, labels) is None
    with pytest.raises(NoConsistentWorld) as info:
        sample_marginals(graph, labels, Settings(samples=5000, max_samples=5000))
    assert info.value.drawn == 5024 and "4=true" in str(info.value)


@pytest.mark.slow
def test_deterministic_by_seed_rounds_and_batch_size():
    rng = np.random.default_rng(7)
    factors = random_dag(rng, 12)
    graph = from_factors(factors, 12)
    labels = {int(factors[-1].head): True}
    cfg = Settings(samples=100_003, seed=5, target_se=0)
    for host in (True, False):
        one = sample_marginals(graph, labels, cfg, sampler=Sampler(graph, host=host))
        two = sample_marginals(graph, labels, cfg, sampler=Sampler(graph, host=host))
        np.testing.assert_array_equal(one.marginals, two.marginals)
        other = sample_marginals(graph, labels, cfg.replace(seed=6), sampler=Sampler(graph, host=host))
        assert not np.array_equal(one.marginals, other.marginals)
    # Device counters are global word indices: small batches draw the very same worlds.
    small = Sampler(graph, batch_words=64, host=False)(None, 100_003, 5)
    big = Sampler(graph, host=False)(None, 100_003, 5)
    assert small.drawn == big.drawn == 100_032
    np.testing.assert_array_equal(small.s1, big.s1)


@pytest.mark.slow
def test_host_and_device_agree():
    """The host path (numpy, Philox) and the device path (jitted, Threefry) draw different worlds of
    the same distribution: their estimates agree within their standard errors, labels included."""
    model = to_model(layered(num_inputs=6, layers=3, width=5, seed=2), compress=True)
    labels = {int(a): i % 2 == 0 for i, a in enumerate(model.alarms[:3])}
    cfg = Settings(samples=1 << 16, seed=1, target_se=0)
    host = sample_marginals(model, labels, cfg, sampler=Sampler(model.graph, host=True))
    device = sample_marginals(model, labels, cfg, sampler=Sampler(model.graph, host=False))
    assert host.info["path"] == "host" and device.info["path"] == "device"
    se = np.sqrt(host.stderr**2 + device.stderr**2)
    assert np.all(np.abs(host.marginals - device.marginals) <= 5 * se)


def one_world_sampler(factors, num_vars, labels, samples, seed):
    """Each world alone, bit by bit, from the same random words: (V,) counts among accepted, accepted."""
    import jax

    key = np.asarray(jax.random.key_data(jax.random.key(seed)), np.uint32).reshape(-1)[-2:]
    by_head = {f.head: f for f in factors}
    order, seen = [], set()

    def visit(v):
        if v in seen:
            return
        seen.add(v)
        for u in by_head[v].body if v in by_head else ():
            visit(u)
        order.append(v)

    for v in range(num_vars):
        visit(v)

    def coin(cid, p, world):
        if p <= 0 or p >= 1:
            return p >= 1
        k = int(sampling_plan.digits_needed(np.array([p]))[0])
        d = sampling_plan.digits(np.array([p]), k)[:, 0]
        word, bit = np.uint32(world // 32), world % 32
        u = []  # this world's uniform digits
        for j in range((k + 1) // 2):
            r0, r1 = sampling.threefry2x32(key[0], key[1], np.uint32(cid * 32 + j), word)
            u += [(int(r0) >> bit) & 1, (int(r1) >> bit) & 1]
        for i in range(k):  # [0.v < 0.d] with v = 1 - u: the first digit where v differs from d decides
            if 1 - u[i] != d[i]:
                return bool(d[i])
        return False

    counts, accepted = np.zeros(num_vars, np.int64), 0
    with np.errstate(over="ignore"):
        for world in range(samples):
            x = {}
            for v in order:
                f = by_head.get(v)
                if f is None:
                    x[v] = coin(2 * v, 0.5, world)
                    continue
                if not f.body:  # the plan's convention: a bodiless factor's coin is coin 2v
                    x[v] = coin(2 * v, f.p1 if f.kind == AND else f.p2, world)
                    continue
                vals = [x[u] for u in f.body]
                cond = all(vals) if f.kind == AND else any(vals)
                x[v] = coin(2 * v, f.p1, world) if cond else coin(2 * v + 1, f.p2, world)
            if all(x[v] == t for v, t in labels.items()):
                accepted += 1
                counts += np.array([x[v] for v in range(num_vars)])
    return counts, accepted


@pytest.mark.slow
def test_bit_packing_matches_one_world_at_a_time():
    rng = np.random.default_rng(3)
    factors = random_dag(rng, 7, max_body=3)
    factors = [f for f in factors if f.head != 6]  # a variable with no factor: a fair coin
    graph = from_factors(factors, 7)
    expected = one_world_sampler(factors, 7, {}, 200, seed=11)
    tally = Sampler(graph, host=False)(None, 200, 11)
    assert tally.drawn == 224 and tally.w1 == 224  # whole words: 7 of 32 worlds
    expected_224 = one_world_sampler(factors, 7, {}, 224, seed=11)
    np.testing.assert_array_equal(tally.s1, expected_224[0])
    assert expected[1] == 200


def test_digits_exact():
    p = np.array([0.5, 0.9, 0.999, 0.25, 1e-3, 2.0**-60, 0.0, 1.0, 1e-10])
    need = sampling_plan.digits_needed(p)
    assert list(need[:4]) == [1, 53, 53, 2]
    assert need[6] == need[7] == 0 and need[5] == 60 and need[8] == 64  # 2^-60 exact, 1e-10 truncated
    d = sampling_plan.digits(p[:6], 64)
    back = (d * 2.0 ** -np.arange(1, 65)[:, None]).sum(axis=0)
    np.testing.assert_array_equal(back, p[:6])


def test_not_a_bayes_net_refused():
    two_heads = [Factor(AND, 0, (), 0.3, 0.3), Factor(OR, 0, (1,), 0.9, 0.1), Factor(AND, 1, (), 0.5, 0.5)]
    with pytest.raises(NotABayesNet, match="head of 2 factors"):
        sample_marginals(from_factors(two_heads, 2), None, Settings(samples=100))
    cycle = [Factor(AND, 0, (1,), 0.3, 0.2), Factor(OR, 1, (0,), 0.9, 0.1)]
    with pytest.raises(NotABayesNet, match="cycle"):
        sample_marginals(from_factors(cycle, 2), None, Settings(samples=100))


def test_new_labels_compile_nothing():
    """A triage session or `simulate --method sample` adds a label per round: the label arrays are
    padded to a capacity (16 labels, 256 body entries), so after the first labelled call new label sets
    compile nothing on the device."""
    import collections

    import jax

    compiles = collections.Counter()

    def count(event, duration, fun_name=None, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles[fun_name] += 1

    jax.monitoring.register_event_duration_secs_listener(count)
    model = to_model(layered(num_inputs=6, layers=2, width=6, seed=0))
    sampler = Sampler(model.graph, model.var_names, host=False)
    settings = Settings(method="sample", samples=4096, seed=1, max_samples=4096, min_accepted=1, target_se=0)
    first = int(model.alarms[-1])
    sample_marginals(model, {first: True}, settings, sampler=sampler)
    before = sum(compiles.values())
    labels = {first: True}
    for alarm in list(model.alarms)[:8]:
        labels[int(alarm)] = False
        try:
            sample_marginals(model, labels, settings, sampler=sampler)
        except (TooFewSamples, ContradictoryEvidence):
            pass
    assert sum(compiles.values()) == before, compiles
