"""fastlbp.engines.exact: bucket elimination against enumeration, LBP on trees, refusals."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import reference
from exact_support import arena_copies
from graphs import evidence_from_labels, random_factors, random_labels, random_polytree
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from fastlbp.core.errors import ContradictoryEvidence, InferenceError, SettingsError
from fastlbp.core.graph import AND, OR, Factor, from_arrays, from_factors
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.engines import parall
from fastlbp.engines.exact import Engine, ExactTooWide, binarize, engine_for, exact_marginals, kernels, plan
from fastlbp.engines.exact.eliminate import Arena
from fastlbp.io.loading import load

ROOT = Path(__file__).resolve().parents[1]


def check(factors, num_vars, labels, host_below=None, chunks=None):
    """exact_marginals == enumeration within 1e-10, contradictions included."""
    graph = from_factors(factors, num_vars)
    kw = {} if host_below is None else {"host_below": host_below}
    if chunks is not None:
        kw = {"engine": Engine(graph, host_below, chunks)}
    try:
        expect = reference.exact_marginals(factors, num_vars, labels)
    except reference.Contradiction:
        with pytest.raises(ContradictoryEvidence if labels else InferenceError):
            exact_marginals(graph, labels, **kw)
        return None
    got = exact_marginals(graph, labels, **kw)
    np.testing.assert_allclose(got.marginals, expect, rtol=0, atol=1e-10)
    with np.errstate(divide="ignore", invalid="ignore"):
        expect_lo = np.log(expect) - np.log1p(-expect)
    finite = np.abs(expect_lo) < 20
    np.testing.assert_allclose(got.log_odds[finite], expect_lo[finite], rtol=0, atol=1e-8)
    assert np.all(expect[np.isposinf(got.log_odds)] > 1 - 1e-12)
    assert np.all(expect[np.isneginf(got.log_odds)] < 1e-12)
    for v, truth in labels.items():
        assert got.log_odds[v] == (np.inf if truth else -np.inf)
    assert got.method == "exact" and np.all(got.stderr == 0)
    return got


@hsettings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num_vars=st.integers(1, 12), num_factors=st.integers(1, 16),
       max_body=st.integers(0, 6), hard=st.sampled_from([0.0, 0.3, 0.7]), labelled=st.booleans())
def test_random_factor_graphs_match_enumeration(seed, num_vars, num_factors, max_body, hard, labelled):
    rng = np.random.default_rng(seed)
    factors = random_factors(rng, num_vars, num_factors, max_body=max_body, hard=hard)
    labels = random_labels(rng, num_vars, most=3) if labelled else {}
    check(factors, num_vars, labels)


@pytest.mark.slow
@hsettings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), labelled=st.booleans())
def test_device_path_matches_enumeration(seed, labelled):
    """Every bucket as jitted XLA kernels (host_below=0), not numpy."""
    rng = np.random.default_rng(seed)
    factors = random_factors(rng, 8, 10, max_body=4, hard=0.3)
    labels = random_labels(rng, 8, most=3) if labelled else {}
    check(factors, 8, labels, host_below=0)


@pytest.mark.slow
@hsettings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), labelled=st.booleans(), host_below=st.sampled_from([0, 4, 16, 64]),
       chunks=st.sampled_from([(2,), (2, 8), (4, 32)]))
def test_chunked_device_path_matches_enumeration(seed, labelled, host_below, chunks):
    """Tiny chunk classes: every device bucket spans several chunks, separators longer than a chunk are
    combined across chunks, and host buckets below device parents get their separators sent down."""
    rng = np.random.default_rng(seed)
    num_vars = int(rng.integers(4, 11))
    factors = random_factors(rng, num_vars, num_vars + 3, max_body=4, hard=0.3)
    labels = random_labels(rng, num_vars, most=3) if labelled else {}
    check(factors, num_vars, labels, host_below=host_below, chunks=chunks)


def tiny_chain():
    """v3 (prior 1/2) -> v2 -> v1 -> v0, each v_i = AND(v_{i+1}) with p1 = 1e-200, p2 = 0: P(v_i = 1) is
    1e-200^(3-i) / 2, down to 5e-601, far below float64's range; v0 is eliminated first, so v0's belief
    needs the separator value v1 = 1 of v1's bucket, 1e-400 next to bins of weight about 1."""
    return [Factor(AND, 3, (), 0.5, 0.5)] + [Factor(AND, i, (i + 1,), 1e-200, 0.0) for i in range(3)]


@pytest.mark.parametrize("host_below,chunks", [(2**62, None), (0, (2,)), (0, (4, 16))])
def test_tiny_probabilities_keep_their_log_odds(host_below, chunks):
    """Each bin is summed with its own maximum first: a global maximum would round 1e-400 to 0 and give
    v0 a log-odds of -inf instead of log(5e-601)."""
    graph = from_factors(tiny_chain(), 4)
    engine = Engine(graph, host_below, chunks or kernels.CHUNKS)
    got = exact_marginals(graph, engine=engine)
    expect = [np.log(0.5) + (3 - i) * np.log(1e-200) for i in range(3)] + [0.0]
    np.testing.assert_allclose(got.log_odds, expect, rtol=1e-12)
    assert got.info["device_buckets"] == (4 if host_below == 0 else 0)


@pytest.mark.slow
def test_new_labels_compile_nothing():
    """After the first call on a graph, calls with other label sets (other plans, other ranks) reuse the
    compiled kernels: the arena, the descriptor table and the transfers keep their shapes."""
    graph = from_factors(grid(6), 36)
    engine = Engine(graph, host_below=2**4, chunks=(16, 64), warm=True)
    rng = np.random.default_rng(5)
    first = exact_marginals(graph, {35: True}, engine=engine)
    assert first.info["device_buckets"] > 0
    before = kernels.compiled()
    for k in (0, 1, 2, 4, 7, 10):
        labels = {int(v): bool(rng.integers(2)) for v in rng.choice(36, k, replace=False)}
        try:
            got = exact_marginals(graph, labels, engine=engine)
        except ContradictoryEvidence:
            continue
        np.testing.assert_allclose(got.marginals, exact_marginals(graph, labels, host_below=2**62).marginals,
                                   rtol=0, atol=1e-12)
    assert kernels.compiled() == before


def test_random_graphs_compile_a_bounded_number_of_kernels():
    """Kernels are keyed by size class and the arena's shape (25 % size classes), never by ranks or labels:
    12 random graphs of 6-14 variables with random labels compile, per arena shape, one kernel of each
    kind per size class up to the largest bucket (`kernels.warm`), and nothing else."""
    rng = np.random.default_rng(11)
    before = kernels.compiled()
    shapes: dict = {}
    for _ in range(12):
        num_vars = int(rng.integers(6, 15))
        graph = from_factors(random_factors(rng, num_vars, num_vars + 4, max_body=4, hard=0.0), num_vars)
        engine = Engine(graph, host_below=0, chunks=(4, 32), warm=True)
        for k in (0, 2):
            try:
                exact_marginals(graph, random_labels(rng, num_vars, most=k), engine=engine)
            except ContradictoryEvidence:
                pass
        shape = (engine.arena.size, engine.arena.rows, engine.arena.read, engine.arena.write)
        shapes[shape] = max(shapes.get(shape, 0), engine.arena.warmed[2])
    after = kernels.compiled()
    grown = {k: after[k] - before[k] for k in after}
    keys = sum(len({kernels.chunk_of(2**r, (4, 32)) for r in range(1, int(largest).bit_length())})
               for largest in shapes.values())
    assert len(shapes) <= 8
    for kind in ("forward", "reduce", "belief"):
        assert 0 < grown[kind] <= keys
    assert grown["read"] + grown["write"] <= 2 * len(shapes)


def test_int64_indices_match_enumeration(monkeypatch):
    """Arenas of 2^31 entries and more (16 GiB) index in int64: the same kernels with int64 descriptors."""
    import jax.numpy as jnp

    monkeypatch.setattr(kernels, "index_dtype", lambda size: jnp.int64)
    rng = np.random.default_rng(3)
    factors = random_factors(rng, 8, 11, max_body=4, hard=0.2)
    check(factors, 8, {2: True}, host_below=0, chunks=(4,))


def test_kernels_never_copy_the_arena():
    """A kernel that reads a chunk and writes the arena in one fusion order XLA cannot do in place makes
    it copy the whole arena per chunk (188 ms instead of 5 ms for a 2^17 bucket on a CPU)."""
    assert arena_copies() == {"forward": 0, "reduce": 0, "belief": 0}


def test_arena_size_classes():
    sizes = [Arena.size_class(n) for n in range(1, 5000)]
    assert all(s >= n for n, s in zip(range(1, 5000), sizes, strict=True))
    assert all(s <= max(2, 1.25 * n) for n, s in zip(range(1, 5000), sizes, strict=True))
    assert len(set(sizes)) <= 4 * 13


def test_engine_is_kept_per_graph():
    graph = from_factors(grid(4), 16)
    assert engine_for(graph) is engine_for(graph)
    assert engine_for(graph, host_below=0) is not engine_for(from_factors(grid(4), 16), host_below=0)


def test_plans_are_reused_per_labelled_set():
    """Same labelled variables, other values: the same plan and layout; another set: a fresh min-fill plan,
    the same one `plan` gives for the clamped tables."""
    factors = grid(5)
    graph = from_factors(factors, 25)
    engine = Engine(graph, host_below=2**62)
    a = exact_marginals(graph, {24: True, 3: False}, engine=engine)
    programs = {id(v[1]) for v in engine._plans.values()}
    b = exact_marginals(graph, {24: False, 3: True}, engine=engine)
    assert {id(v[1]) for v in engine._plans.values()} == programs and len(engine._plans) == 1
    assert not np.allclose(a.marginals, b.marginals)
    exact_marginals(graph, {12: True}, engine=engine)
    bz = binarize(factors, 25)
    fresh = plan([tuple(v for v in t.scope if v != 12) for t in bz.tables], [v for v in range(25) if v != 12])
    got = engine._plans[next(k for k in engine._plans if k[0] == frozenset({12}))][0]
    assert np.array_equal(got.order, fresh.order) and got.scopes == fresh.scopes


@pytest.mark.slow
def test_device_and_host_agree_on_a_grid():
    graph = from_factors(grid(6), 36)
    host = exact_marginals(graph, {35: True, 7: False}, host_below=2**62)
    device = exact_marginals(graph, {35: True, 7: False}, host_below=2**5)
    assert device.info["device_buckets"] > 0 and host.info["device_buckets"] == 0
    np.testing.assert_allclose(device.marginals, host.marginals, rtol=0, atol=1e-13)


def reconvergent(rng, num_vars, max_parents, hard):
    """A random DAG (one factor per variable, parents among earlier ones): derivations share ancestors."""
    factors = []
    for v in range(num_vars):
        k = int(rng.integers(0, min(v, max_parents) + 1))
        body = tuple(int(x) for x in rng.choice(v, size=k, replace=False)) if k else ()
        p = [float(rng.integers(0, 2)) if rng.random() < hard else float(rng.uniform(0.02, 0.98))
             for _ in "ab"]
        if not body:
            factors.append(Factor(AND, v, (), p[0], p[0]))
        else:
            factors.append(Factor(AND if rng.random() < 0.5 else OR, v, body, p[0], p[1]))
    return factors


@hsettings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num_vars=st.integers(4, 16), labelled=st.booleans())
def test_reconvergent_dags_match_enumeration(seed, num_vars, labelled):
    rng = np.random.default_rng(seed)
    factors = reconvergent(rng, num_vars, max_parents=4, hard=0.2)
    labels = random_labels(rng, num_vars, most=3) if labelled else {}
    check(factors, num_vars, labels)


@hsettings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), fan_in=st.integers(8, 12), labelled=st.booleans())
def test_wide_factors_match_enumeration(seed, fan_in, labelled):
    """Fan-in up to 12 on graphs of up to 18 variables: the chains of auxiliary variables."""
    rng = np.random.default_rng(seed)
    num_vars = fan_in + 6
    factors = reconvergent(rng, num_vars, max_parents=3, hard=0.1)
    for _ in range(2):
        head = int(rng.integers(num_vars))
        others = [v for v in range(num_vars) if v != head]
        body = tuple(int(x) for x in rng.choice(others, fan_in, replace=False))
        factors.append(Factor(int(rng.integers(2)), head, body, float(rng.uniform(0.6, 1)),
                              float(rng.uniform(0, 0.4))))
    labels = random_labels(rng, num_vars, most=2) if labelled else {}
    got = check(factors, num_vars, labels)
    if got is not None:
        assert got.info["aux_vars"] == sum(max(len(f.body) - 2, 0) for f in factors)


def test_binarized_factor_sums_to_the_factor():
    """The chain's product summed over its auxiliary variables is the factor's table, both kinds."""
    for kind in (AND, OR):
        f = Factor(kind, 0, (1, 2, 3, 4), 0.9, 0.2)
        bz = binarize([f], 5)
        assert bz.num_total == 7 and all(len(t.scope) <= 3 for t in bz.tables)
        for x in itertools.product((0, 1), repeat=5):
            total = 0.0
            for aux in itertools.product((0, 1), repeat=2):
                world = x + aux
                w = 1.0
                for t in bz.tables:
                    w *= t.values[tuple(world[v] for v in t.scope)]
                total += w
            cond = all(x[1:]) if kind == AND else any(x[1:])
            p = 0.9 if cond else 0.2
            assert total == pytest.approx(p if x[0] else 1 - p, abs=1e-15)


def test_a_variable_listed_twice_is_one_axis():
    """Graphs refuse repeated variables, but `binarize.table` merges them (the diagonal) all the same."""
    bz = binarize([Factor(AND, 0, (1, 1, 2), 0.8, 0.1)], 3)
    assert [t.scope for t in bz.tables] == [(1, 3), (3, 2, 0)]
    np.testing.assert_array_equal(bz.tables[0].values, [[1, 0], [0, 1]])


def test_unused_variable_is_one_half():
    graph = from_arrays([AND], [0], [0, 0], [], [0.3], [0.3], num_vars=3, check_coverage=False)
    got = exact_marginals(graph)
    np.testing.assert_allclose(got.marginals, [0.3, 0.5, 0.5], atol=1e-15)


@pytest.mark.slow
@hsettings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num_vars=st.integers(2, 40), labelled=st.booleans())
def test_polytrees_match_lbp(seed, num_vars, labelled):
    """LBP is exact on trees: PARALL at tol 1e-12 agrees with bucket elimination."""
    rng = np.random.default_rng(seed)
    factors = random_polytree(rng, num_vars, hard=0.0)
    labels = random_labels(rng, num_vars, most=3) if labelled else {}
    graph = from_factors(factors, num_vars)
    got = exact_marginals(graph, labels)
    lbp = parall.run(graph, evidence_from_labels(num_vars, labels),
                     settings=Settings(tol=1e-12, max_iters=10 * num_vars + 10))
    assert bool(lbp.converged)
    np.testing.assert_allclose(got.marginals, np.asarray(lbp.marginals), rtol=0, atol=1e-10)


def grid(n):
    """An n x n grid Bayesian network (each cell an OR of its upper and left neighbours): width ~n."""
    factors = []
    for i in range(n):
        for j in range(n):
            up, left = (i - 1) * n + j if i else None, i * n + j - 1 if j else None
            body = tuple(v for v in (up, left) if v is not None)
            v = i * n + j
            factors.append(Factor(OR, v, body, 0.9, 0.1) if body else Factor(AND, v, (), 0.3, 0.3))
    return factors


def test_too_wide_is_refused_before_any_device_work():
    factors = grid(12)
    graph = from_factors(factors, 144)
    with pytest.raises(ExactTooWide) as err:
        exact_marginals(graph, settings=Settings(exact_memory=4096))
    message = str(err.value)
    assert "induced width" in message and "--method sample" in message and "4 KiB" in message
    assert isinstance(err.value, SettingsError)
    # A budget that holds the plan runs it (and agrees with LBP's corner: the grid's first cell is an input).
    got = exact_marginals(graph)
    assert got.info["width"] >= 12 and got.marginals[0] == pytest.approx(0.3, abs=1e-15)


def test_full_plan_over_budget_names_its_width_and_memory():
    factors = grid(8)
    graph = from_factors(factors, 64)
    p = plan([t.scope for t in binarize(factors, 64).tables], range(64))
    budget = int(p.bytes_needed) - 1
    assert 2 ** (p.width + 1) * 8 <= budget  # every single table fits, all of them together do not
    with pytest.raises(ExactTooWide, match=f"induced width {p.width} .*--method sample") as err:
        exact_marginals(graph, settings=Settings(exact_memory=budget))
    assert err.value.width == p.width and err.value.needed == p.bytes_needed


def test_min_degree_plan_is_a_valid_bucket_tree():
    factors = grid(5)
    scopes = [t.scope for t in binarize(factors, 25).tables]
    for heuristic in ("min-fill", "min-degree"):
        p = plan(scopes, range(25), heuristic)
        for i, s in enumerate(p.scopes):
            assert s[-1] == p.order[i]
            if p.parent[i] >= 0:
                assert set(s[:-1]) <= set(p.scopes[p.parent[i]]) and p.parent[i] > i


def test_contradictory_labels_are_named():
    # x0 = x1 AND x2 deterministically; x0 true with x1 false is impossible.
    factors = [Factor(AND, 1, (), 0.5, 0.5), Factor(AND, 2, (), 0.5, 0.5), Factor(AND, 3, (), 0.5, 0.5),
               Factor(AND, 0, (1, 2), 1.0, 0.0)]
    graph = from_factors(factors, 4)
    model = Model(graph, ("alarm", "a", "b", "c"))
    with pytest.raises(ContradictoryEvidence) as err:
        exact_marginals(model, {0: True, 1: False, 3: True})
    assert err.value.labels == {"alarm": True, "a": False}
    with pytest.raises(ContradictoryEvidence):
        exact_marginals(graph, {0: True, 2: False})
    got = exact_marginals(model, {0: True})
    np.testing.assert_allclose(got.marginals, [1.0, 1.0, 1.0, 0.5], atol=1e-15)
    with pytest.raises(SettingsError, match="variable 7"):
        exact_marginals(graph, {7: True})


@pytest.mark.slow
def test_weblech_is_refused_with_its_width():
    """weblech's min-fill width after binarisation is 65 (min-degree 77): 2^66 entries, refused."""
    model = load(ROOT / "data" / "weblech.json")
    with pytest.raises(ExactTooWide) as err:
        exact_marginals(model, settings=Settings(exact_memory=2**30))
    message = str(err.value)
    assert "induced width at least 27" in message and "1 GiB" in message and "--method sample" in message


@hsettings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40),
       heuristic=st.sampled_from(["min-fill", "min-degree"]), cap=st.sampled_from([None, 3, 6]))
def test_orders_with_sets_equal_orders_with_bit_sets(seed, n, heuristic, cap):
    # Large graphs order with Python sets (bit sets grow with the graph: avrora ran over 400 s); the
    # order, the ties and the refusal must be the same as with bit sets.
    from fastlbp.engines.exact.order import elimination_order

    rng = np.random.default_rng(seed)
    scopes = [tuple(int(v) for v in rng.choice(n, size=int(rng.integers(1, min(n, 4) + 1)), replace=False))
              for _ in range(int(rng.integers(0, 2 * n)))]
    variables = [int(v) for v in rng.permutation(n)]
    bits = elimination_order(scopes, variables, heuristic, cap, sets=False)
    with_sets = elimination_order(scopes, variables, heuristic, cap, sets=True)
    assert (bits is None) == (with_sets is None)
    if bits is not None:
        assert bits.tolist() == with_sets.tolist()


def test_large_graphs_order_by_min_degree(monkeypatch):
    # min-fill is quadratic around hub tuples (avrora ran over 5 minutes); from MIN_FILL_BELOW free
    # variables the order is min-degree's, and a refusal says so.
    import fastlbp.engines.exact as exact

    assert Engine.heuristic(exact.MIN_FILL_BELOW - 1) == "min-fill"
    assert Engine.heuristic(exact.MIN_FILL_BELOW) == "min-degree"
    graph = from_factors(grid(10), 100)
    by_min_fill = exact_marginals(graph, engine=Engine(graph))
    assert by_min_fill.info["heuristic"] == "min-fill"
    monkeypatch.setattr(exact, "MIN_FILL_BELOW", 10)
    with pytest.raises(ExactTooWide, match=r"\(min-degree order\)"):
        exact_marginals(graph, settings=Settings(exact_memory=4096), engine=Engine(graph))
    got = exact_marginals(graph, engine=Engine(graph))
    assert got.info["heuristic"] == "min-degree"
    np.testing.assert_allclose(got.marginals, by_min_fill.marginals, atol=1e-12)


@hsettings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num_vars=st.integers(1, 12), num_factors=st.integers(1, 16),
       runs=st.integers(1, 5), labelled=st.booleans())
def test_a_batch_of_parameter_values_equals_one_run_each(seed, num_vars, num_factors, runs, labelled):
    """`exact_marginals_many` (the host passes over a batch of table values, learning's E-steps) gives each
    run what `exact_marginals` gives it alone, and runs whose evidence is impossible raise as one would."""
    from fastlbp.engines.exact import exact_marginals_many

    rng = np.random.default_rng(seed)
    factors = random_factors(rng, num_vars, num_factors, max_body=4, hard=0.3)
    labels = random_labels(rng, num_vars, most=3) if labelled else {}
    graph = from_factors(factors, num_vars)
    engine = Engine(graph)
    flats = np.repeat(engine.logflat[None], runs, axis=0)
    soft = np.isfinite(engine.logflat) & (engine.logflat < 0)  # entries of neither 0 nor 1: reweighted
    flats[:, soft] += rng.normal(0, 0.5, (runs, int(soft.sum())))
    alone = []
    for k in range(runs):
        one = Engine(graph)
        one.logflat = flats[k].copy()
        try:
            alone.append(exact_marginals(graph, labels, engine=one))
        except (ContradictoryEvidence, InferenceError) as err:
            alone.append(err)
    if any(isinstance(a, Exception) for a in alone):
        with pytest.raises((ContradictoryEvidence, InferenceError)):
            exact_marginals_many(graph, labels, None, engine, flats)
        return
    marginals, log_evidence = exact_marginals_many(graph, labels, None, engine, flats)
    for k, a in enumerate(alone):
        np.testing.assert_allclose(marginals[k], a.marginals, rtol=0, atol=1e-12)
        np.testing.assert_allclose(log_evidence[k], a.info["log_evidence"], rtol=1e-12, atol=1e-12)
