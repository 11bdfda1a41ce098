"""The bit-packed sampler (`fastlbp.engines.sampling`) against enumeration and a one-world sampler."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from datalog.bayesnet import to_model
from datalog.synthetic import layered
from fastlbp.constraints import conflicting_labels
from fastlbp.engines import sampling, sampling_plan
from fastlbp.engines.sampling import NotABayesNet, Sampler, TooFewSamples, sample_marginals
from fastlbp.errors import ContradictoryEvidence, InferenceError
from fastlbp.graph import AND, OR, Factor, from_factors
from fastlbp.reference import Contradiction, exact_marginals
from fastlbp.settings import Settings
from tests.graphs import random_polytree

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


def assert_within(result, exact, accepted, sigmas=5.0):
    exact = np.clip(exact, 0.0, 1.0)
    se = np.sqrt(exact * (1.0 - exact) / accepted)
    # Where the exact marginal is 0 or 1 the sampler must be exact too (se 0).
    err = np.abs(result.marginals - exact)
    assert np.all(err <= sigmas * se + 1e-12), (result.marginals, exact, se)
    np.testing.assert_allclose(result.stderr, np.sqrt(result.marginals * (1 - result.marginals) / accepted))


def check_graph(factors, num_vars, labels, seed):
    graph = from_factors(factors, num_vars)
    cfg = Settings(samples=SAMPLES, seed=seed, min_accepted=1000)
    try:
        exact = exact_marginals(factors, num_vars, labels)
    except Contradiction:
        with pytest.raises((ContradictoryEvidence, TooFewSamples)):
            sample_marginals(graph, labels, cfg)
        return
    prob = probability_of(factors, num_vars, labels)
    try:
        result = sample_marginals(graph, labels, cfg)
    except TooFewSamples as err:
        assert err.accepted < 1000 and err.drawn == cfg.max_samples
        assert prob * cfg.max_samples < 3000, prob  # 1000 accepted is 14 sigma below 3000 expected
        return
    accepted, drawn = result.info["accepted"], result.info["samples"]
    assert accepted == result.info["effective_samples"]
    if drawn == SAMPLES:  # no extension: the accepted count is binomial
        assert abs(accepted - prob * SAMPLES) <= 5 * np.sqrt(SAMPLES * prob * (1 - prob)) + 1e-9
    else:  # extended by doubling until 1000 agreed
        assert accepted >= 1000 and drawn in {SAMPLES * 2**k for k in range(1, 20)} | {cfg.max_samples}
    assert_within(result, exact, accepted)


@pytest.mark.slow
@hsettings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(3, 13), labelled=st.integers(0, 2))
def test_random_dags_within_five_standard_errors(seed, n, labelled):
    rng = np.random.default_rng(seed)
    factors = random_dag(rng, n)
    labels = {int(v): bool(rng.integers(2)) for v in rng.choice(n, size=labelled, replace=False)}
    check_graph(factors, n, labels, seed)


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
    exact = exact_marginals(factors, model.num_vars)
    result = sample_marginals(model, None, Settings(samples=SAMPLES, seed=seed))
    assert_within(result, exact, SAMPLES)
    alarm = model.alarms[0]
    labels = {alarm: True}
    if probability_of(factors, model.num_vars, labels) * SAMPLES > 3000:
        exact = exact_marginals(factors, model.num_vars, labels)
        result = sample_marginals(model, labels, Settings(samples=SAMPLES, seed=seed))
        assert_within(result, exact, result.info["accepted"])


def test_too_few_accepted_is_refused():
    factors = [Factor(AND, 0, (), 1e-4, 1e-4), Factor(OR, 1, (0,), 0.9, 0.2)]
    graph = from_factors(factors, 2)
    with pytest.raises(TooFewSamples) as info:
        sample_marginals(graph, {0: True}, Settings(samples=10_000, max_samples=10_000, min_accepted=100))
    err = info.value
    assert isinstance(err, InferenceError)
    assert err.drawn == 10_000 and err.accepted < 100
    assert f"only {err.accepted} of 10000 worlds" in str(err)
    assert "--samples" in str(err) and "--method exact" in str(err)


@pytest.mark.slow
def test_rare_labels_draw_more_until_enough_agree():
    # P(x0) = 1e-3: 10,000 worlds accept about 10; drawing doubles until 1000 agree (about 10^6 worlds).
    factors = [Factor(AND, 0, (), 1e-3, 1e-3), Factor(OR, 1, (0,), 0.9, 0.2), Factor(AND, 2, (), 0.5, 0.5),
               Factor(AND, 3, (1, 2), 0.7, 0.1)]
    graph = from_factors(factors, 4)
    labels = {0: True}
    cfg = Settings(samples=10_000, min_accepted=1000, seed=3)
    result = sample_marginals(graph, labels, cfg)
    drawn, accepted = result.info["samples"], result.info["accepted"]
    assert accepted >= 1000 and drawn > 10_000 and drawn in {10_000 * 2**k for k in range(1, 12)}
    # One more doubling was not needed: half as many worlds accepted fewer than 1000.
    counts, half_accepted, _ = Sampler(graph)(labels, drawn // 2, 3)
    assert half_accepted < 1000
    assert_within(result, exact_marginals(factors, 4, labels), accepted)
    # The rounds draw the same worlds as one run of that many.
    counts, once, _ = Sampler(graph, batch_words=32)(labels, drawn, 3)
    assert once == accepted
    np.testing.assert_array_equal(counts / once, result.marginals)
    # max_samples caps the drawing: too few agree, and the error says how many were drawn.
    with pytest.raises(TooFewSamples) as info:
        sample_marginals(graph, labels, cfg.replace(max_samples=40_000))
    assert info.value.drawn == 40_000


def test_contradictory_labels_named():
    # x = a exactly (a hard AND of one body variable): x=1, a=0 is ruled out by propagation.
    factors = [Factor(AND, 0, (), 0.3, 0.3), Factor(AND, 1, (0,), 1.0, 0.0), Factor(AND, 2, (), 0.5, 0.5)]
    graph = from_factors(factors, 3)
    with pytest.raises(ContradictoryEvidence) as info:
        sample_marginals(graph, {1: True, 0: False, 2: True}, Settings(samples=1000))
    assert info.value.labels == {"1": True, "0": False}


def test_contradiction_propagation_cannot_prove_is_too_few():
    # The four 2-clauses over a, b: each is satisfiable alone, so arc consistency removes nothing,
    # yet together they have no model; no world is accepted and the sampler says so.
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
    with pytest.raises(TooFewSamples) as info:
        sample_marginals(graph, labels, Settings(samples=5000))
    assert info.value.accepted == 0


@pytest.mark.slow
def test_deterministic_by_seed_and_batch_size():
    rng = np.random.default_rng(7)
    factors = random_dag(rng, 12)
    graph = from_factors(factors, 12)
    cfg = Settings(samples=100_003, seed=5)
    one = sample_marginals(graph, None, cfg)
    two = sample_marginals(graph, None, cfg)
    np.testing.assert_array_equal(one.marginals, two.marginals)
    other = sample_marginals(graph, None, cfg.replace(seed=6))
    assert not np.array_equal(one.marginals, other.marginals)
    # Counters are global word indices: small batches draw the very same worlds.
    small = Sampler(graph, batch_words=64)
    counts, accepted, drawn = small(None, 100_003, 5)
    assert (accepted, drawn) == (100_003, 100_003)
    np.testing.assert_array_equal(counts / accepted, one.marginals)


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
    labels = {factors[-1].head: True}
    expected = one_world_sampler(factors, 7, labels, 200, seed=11)
    counts, accepted, drawn = Sampler(graph)(labels, 200, 11)
    assert drawn == 200
    assert accepted == expected[1]
    np.testing.assert_array_equal(counts, expected[0])


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
    """A triage session or `simulate --method sample` adds a label per round: the labels are padded to a
    power of two, so after the first call new label sets (1 to 8 labels) compile nothing."""
    import collections

    import jax

    compiles = collections.Counter()

    def count(event, duration, fun_name=None, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles[fun_name] += 1

    jax.monitoring.register_event_duration_secs_listener(count)
    model = to_model(layered(num_inputs=6, layers=2, width=6, seed=0))
    sampler = Sampler(model.graph, model.var_names)
    settings = Settings(method="sample", samples=4096, seed=1, max_samples=4096, min_accepted=1)
    sample_marginals(model, {}, settings, sampler=sampler)
    before = sum(compiles.values())
    labels = {}
    for alarm in list(model.alarms)[:8]:
        labels[int(alarm)] = False
        try:
            sample_marginals(model, labels, settings, sampler=sampler)
        except (TooFewSamples, ContradictoryEvidence):
            pass
    assert sum(compiles.values()) == before, compiles
