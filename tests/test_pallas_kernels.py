"""fastlbp.core.pallas_segments: the Pallas segment sums, run by the interpreter on the CPU, against numpy and
the XLA path (PARALL with backend pallas_interpret)."""

import jax.numpy as jnp
import numpy as np
import pytest
import reference
from graphs import check_engine_against_reference, evidence_from_labels, random_factors, random_labels
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlbp.core import pallas_segments
from fastlbp.core.graph import from_factors
from fastlbp.core.settings import Settings
from fastlbp.engines import parall


def _run(graph, evidence=None, messages=None, **settings):
    """One PARALL round with `Settings(**settings)`."""
    return parall.run(graph, evidence, messages, settings=Settings(**settings))


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 200), gather=st.booleans())
def test_segment_sums_match_numpy(seed, n, gather):
    rng = np.random.default_rng(seed)
    num_segments = int(rng.integers(1, n + 2))
    # Heavy-tailed segment sizes: some segments span several blocks.
    seg = np.sort(rng.choice(num_segments, n, p=rng.dirichlet(np.full(num_segments, 0.3))))
    x = rng.normal(scale=50, size=n)
    x[rng.random(n) < 0.1] = np.inf
    x[rng.random(n) < 0.1] = -np.inf
    perm = rng.permutation(n) if gather else np.arange(n)
    src = np.empty(n)
    src[perm] = x
    out = pallas_segments.segment_sum((jnp.asarray(src),), jnp.asarray(seg, jnp.int32),
                                     num_segments=num_segments, split_infinite=True,
                                     gather_index=jnp.asarray(perm, jnp.int32) if gather else None,
                                     interpret=True)
    finite = np.where(np.isfinite(x), x, 0)
    expect = np.stack([np.bincount(seg, finite, num_segments), np.bincount(seg, x == np.inf, num_segments),
                       np.bincount(seg, x == -np.inf, num_segments)], -1)
    np.testing.assert_allclose(np.asarray(out), expect, rtol=1e-12, atol=1e-9)


def test_tiny_segment_next_to_a_large_one_is_exact():
    # A block prefix sum would return 0 for the second segment (cancellation).
    seg = jnp.asarray([0, 0, 1, 1], jnp.int32)
    x = jnp.asarray([-193.0, -1.0, -1e-18, -2e-18])
    out = np.asarray(pallas_segments.segment_sum((x,), seg, num_segments=2, interpret=True))[:, 0]
    assert abs(out[1] + 3e-18) < 1e-32 and out[0] == -194.0


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_pallas_engine_matches_reference(seed):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(2, 9))
    factors = random_factors(rng, V, int(rng.integers(1, 12)))
    labels = random_labels(rng, V)
    g = from_factors(factors, V)
    ev = evidence_from_labels(V, labels)
    result = _run(g, ev, tol=0.0, max_iters=20, backend="pallas_interpret")

    def step(m):
        return _run(g, ev, jnp.asarray(m), tol=0.0, max_iters=1, backend="pallas_interpret").messages

    check_engine_against_reference(factors, V, labels, result, step, iters=20)
    try:
        ref = reference.sequential_lbp(factors, V, labels, None, tol=0.0, max_iters=20)
    except reference.Contradiction:
        return
    if np.max(np.abs(np.asarray(result.marginals) - ref.marginals)) < 1e-10:  # not chaotic
        f32 = _run(g, ev, tol=0.0, max_iters=20, backend="pallas_interpret", precision="f32")
        assert f32.marginals.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(f32.marginals), ref.marginals, atol=2e-4)


@pytest.mark.slow
def test_pallas_engine_with_huge_fan_in():
    from fastlbp.core.graph import AND, Factor
    n = 10_000
    priors = np.linspace(0.9995, 1.0, n)
    factors = [Factor(AND, i + 1, (), float(p), float(p)) for i, p in enumerate(priors)]
    factors.append(Factor(AND, 0, tuple(range(1, n + 1)), 0.999, 0.001))
    g = from_factors(factors)
    xla = _run(g, tol=1e-12, max_iters=5, backend="xla")
    pal = _run(g, tol=1e-12, max_iters=5, backend="pallas_interpret")
    np.testing.assert_allclose(np.asarray(pal.marginals), np.asarray(xla.marginals), atol=1e-12)
