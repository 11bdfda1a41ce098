"""PGMax 0.6.1 encoding (benchmarks/pgmax_model.py) against fastlbp's PARALL and exact marginals.

Skipped where PGMax is not installed (CI): locally `pip install --no-deps pgmax==0.6.1 numba`.

PGMax's logical factors cut log(exp(a) - exp(b)) off at a - b < 1e-4 (see
the module docstring), which is PGMax's error, not the encoding's; the
exactness tests therefore run with that cut-off at 1e-15
(`logminusexp_eps`), and separate tests pin down PGMax as shipped.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
pm = pytest.importorskip("pgmax_model", reason="pgmax (and numba) not installed")

import reference  # noqa: E402
from graphs import evidence_from_labels, random_factors, random_polytree  # noqa: E402

from fastlbp.core.graph import AND, OR, Factor, from_factors  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines import parall  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")

SEEDS = st.integers(0, 2**32 - 1)


def bingo_like(factors: list[Factor], rng: np.random.Generator, soft: bool = False) -> list[Factor]:
    """Same structure, probabilities of the fast logical encodings: AND p2 = 0, OR p1 = 1."""
    out = []
    for f in factors:
        if not f.body:
            out.append(Factor(f.kind, f.head, (), *([float(rng.uniform(0.05, 0.95))] * 2))
                       if soft else f)
        elif f.kind == AND:
            p1 = float(rng.uniform(0.5, 0.999)) if soft or rng.random() < 0.5 else 1.0
            out.append(Factor(AND, f.head, f.body, p1, 0.0))
        else:
            p2 = float(rng.uniform(0.01, 0.5)) if soft or rng.random() < 0.5 else 0.0
            out.append(Factor(OR, f.head, f.body, 1.0, p2))
    return out


def parall_run(graph, evidence=None, messages=None, **settings):
    """fastlbp's PARALL round with `Settings(**settings)` (tol=0: exactly max_iters iterations)."""
    return parall.run(graph, evidence, messages, settings=Settings(**settings))


def pgmax_marginals(factors, num_vars, iters, **kw):
    fg, _, enc = pm.build_pgmax(from_factors(factors, num_vars), **kw)
    return pm.run_pgmax(fg, iters), enc


def exact_cutoff():
    return pm.logminusexp_eps(1e-15)


@settings(max_examples=6, deadline=None)
@given(SEEDS)
def test_bingo_like_trees_exact(seed):
    with exact_cutoff():
        _test_bingo_like_trees_exact(seed)


def _test_bingo_like_trees_exact(seed):
    rng = np.random.default_rng(seed)
    factors = bingo_like(random_polytree(rng, 9, hard=0.3), rng)
    got, enc = pgmax_marginals(factors, 9, 30)
    assert enc.counts["enum"] == enc.counts["chain"] == 0  # only the logical factors
    assert enc.iteration_exact
    np.testing.assert_allclose(got, reference.exact_marginals(factors, 9), atol=1e-9)


@settings(max_examples=4, deadline=None)
@given(SEEDS)
def test_general_trees_exact_enum_and_chain(seed):
    with exact_cutoff():
        _test_general_trees_exact_enum_and_chain(seed)


def _test_general_trees_exact_enum_and_chain(seed):
    rng = np.random.default_rng(seed)
    factors = random_polytree(rng, 9, hard=0.3)
    exact = reference.exact_marginals(factors, 9)
    for enum_max, used in ((8, "enum"), (1, "chain")):
        got, enc = pgmax_marginals(factors, 9, 40, enum_max=enum_max)
        general = sum(1 for f in factors if f.body and f.p1 != f.p2
                      and not (f.kind == AND and f.p2 == 0) and not (f.kind == OR and f.p1 == 1))
        assert enc.counts[used] == general
        np.testing.assert_allclose(got, exact, atol=1e-9)


@settings(max_examples=4, deadline=None)
@given(SEEDS)
def test_tree_with_soft_evidence_exact(seed):
    with exact_cutoff():
        _test_tree_with_soft_evidence_exact(seed)


def _test_tree_with_soft_evidence_exact(seed):
    rng = np.random.default_rng(seed)
    factors = bingo_like(random_polytree(rng, 9, hard=0.2), rng)
    evidence = np.zeros(9)
    evidence[rng.choice(9, size=3, replace=False)] = rng.uniform(-6, 6, size=3)
    # Evidence L on v is a unary factor with P(v) = sigmoid(L) for the enumeration.
    unary = [Factor(AND, v, (), *([float(1 / (1 + np.exp(-evidence[v])))] * 2))
             for v in np.flatnonzero(evidence)]
    exact = reference.exact_marginals(factors + unary, 9)
    fg, _, _ = pm.build_pgmax(from_factors(factors, 9), evidence=evidence)
    np.testing.assert_allclose(pm.run_pgmax(fg, 30), exact, atol=1e-9)


@settings(max_examples=3, deadline=None)
@given(SEEDS)
def test_loopy_iteration_by_iteration(seed):
    with exact_cutoff():
        _test_loopy_iteration_by_iteration(seed)


def _test_loopy_iteration_by_iteration(seed):
    """From `init_messages`, fastlbp's PARALL iteration k is PGMax's iteration k."""
    rng = np.random.default_rng(seed)
    factors = bingo_like(random_factors(rng, 10, 14, hard=0.0), rng, soft=True)
    graph = from_factors(factors, 10)
    fg, _, enc = pm.build_pgmax(graph)
    for iters in (1, 6):
        ours = parall_run(graph, messages=jnp.asarray(enc.init_messages), tol=0, max_iters=iters)
        np.testing.assert_allclose(pm.run_pgmax(fg, iters), np.asarray(ours.marginals), atol=1e-9)


def test_repeated_variable_sets_get_neutral_variables():
    with exact_cutoff():
        _test_repeated_variable_sets_get_neutral_variables()


def _test_repeated_variable_sets_get_neutral_variables():
    factors = [
        Factor(AND, 0, (1,), 1.0, 0.0), Factor(AND, 1, (0,), 1.0, 0.0),  # logical, same set {0, 1}
        Factor(AND, 2, (3,), 0.3, 0.6), Factor(OR, 3, (2,), 0.2, 0.7),  # enumerated, same set {2, 3}
        Factor(OR, 2, (3,), 0.9, 0.4),  # a third one over {2, 3}
        Factor(AND, 0, (), 0.7, 0.7), Factor(AND, 1, (), 0.4, 0.4), Factor(AND, 3, (), 0.8, 0.8),
    ]
    graph = from_factors(factors, 4)
    fg, _, enc = pm.build_pgmax(graph)
    assert enc.counts["neutral_coins"] == 3
    for iters in (1, 3, 5):
        ours = parall_run(graph, messages=jnp.asarray(enc.init_messages), tol=0, max_iters=iters)
        np.testing.assert_allclose(pm.run_pgmax(fg, iters), np.asarray(ours.marginals), atol=1e-12)


def test_bingo_model_as_shipped():
    """PGMax as shipped on a synthetic Bingo model: no NaN, within its 1e-4 cut-off of fastlbp."""
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate

    model = to_model(generate(factor_edges=3000, seed=1))
    fg, _, enc = pm.build_pgmax(model)
    assert enc.counts["and"] > 0 and enc.counts["or"] > 0 and enc.counts["enum"] == 0
    ours = np.asarray(parall_run(model.graph, messages=jnp.asarray(enc.init_messages), tol=0,
                                 max_iters=100).marginals)
    for dtype, atol in ((jnp.float64, 2e-4), (jnp.float32, 1e-3)):
        got = np.asarray(pm.PGMaxRunner(fg, 100, dtype=dtype).run(), np.float64)
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, ours, atol=atol)


def test_pgmax_cutoff_zeroes_small_probabilities():
    """Documents PGMax's cut-off: an OR head true with probability 5e-5 comes out exactly 0."""
    factors = [Factor(AND, 0, (), 5e-5, 5e-5), Factor(OR, 1, (0,), 1.0, 0.0)]
    got, _ = pgmax_marginals(factors, 2, 5)
    assert got[0] == pytest.approx(5e-5, rel=1e-9)
    assert got[1] == 0.0  # exact: 5e-5
    np.testing.assert_allclose(reference.exact_marginals(factors, 2), [5e-5, 5e-5], rtol=1e-12)


def test_pgmax_nan_on_deterministic_loopy_graph():
    """Documents PGMax's NaN: a cut-off message of -inf becomes inf - inf in its normalization."""
    f = Factor
    factors = [
        f(AND, 0, (5, 6, 9), 1.0, 0.0), f(OR, 0, (), 0.6428774806048426, 0.6428774806048426),
        f(OR, 1, (2, 0, 3, 5), 1.0, 0.0), f(AND, 9, (6, 3, 8, 7), 0.8358081236600989, 0.0),
        f(OR, 8, (2, 3), 1.0, 0.0), f(OR, 8, (5, 6, 3), 1.0, 0.0), f(OR, 2, (6, 4, 1), 1.0, 0.0),
        f(AND, 4, (6,), 1.0, 0.0), f(AND, 0, (2, 9), 0.6897419788833306, 0.0), f(AND, 6, (3,), 1.0, 0.0),
        f(AND, 8, (4, 9, 6, 2), 1.0, 0.0), f(AND, 5, (2,), 1.0, 0.0),
    ]
    got, _ = pgmax_marginals(factors, 10, 10)
    ours = parall_run(from_factors(factors, 10), tol=0, max_iters=10)
    assert np.isnan(got).any()
    assert not np.isnan(np.asarray(ours.marginals)).any() and not bool(ours.conflict)


def test_pgmax_nan_on_hard_false_label():
    """Documents PGMax's NaN under hard evidence: a tuple labelled false (an OR head) poisons the graph.

    The exact answer exists (fastlbp matches it); PGMax needs evidence of at
    most ~10 in log-odds to stay finite, i.e. no hard labels at all.
    """
    factors = [
        Factor(OR, 0, (4,), 1.0, 0.065), Factor(AND, 1, (), 0.734, 0.734),
        Factor(AND, 2, (), 0.117, 0.117), Factor(AND, 3, (), 0.184, 0.184), Factor(AND, 4, (), 0.204, 0.204),
        Factor(AND, 5, (1,), 0.943, 0.0), Factor(AND, 6, (8, 4, 2, 3), 0.74, 0.0),
        Factor(AND, 7, (), 0.104, 0.104), Factor(OR, 8, (5, 7), 1.0, 0.449),
    ]
    labels = {1: True, 8: False}
    graph = from_factors(factors, 9)
    fg, _, _ = pm.build_pgmax(graph, evidence=evidence_from_labels(9, labels))
    assert np.isnan(pm.run_pgmax(fg, 30)).all()
    ours = parall_run(graph, evidence_from_labels(9, labels), tol=0, max_iters=30)
    np.testing.assert_allclose(np.asarray(ours.marginals), reference.exact_marginals(factors, 9, labels),
                               atol=1e-12)


def test_only_unary_factors():
    factors = [Factor(AND, 0, (), 0.3, 0.3), Factor(OR, 1, (0,), 0.6, 0.6)]
    got, enc = pgmax_marginals(factors, 2, 3)
    assert enc.counts["unary"] == 2 and enc.num_pgmax_edges == 0
    np.testing.assert_allclose(got, [0.3, 0.6], atol=1e-12)
