import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlbp.core import equations, segments


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num_segments=st.integers(1, 300), permute=st.booleans())
def test_planned_sums_match_numpy(seed, num_segments, permute):
    rng = np.random.default_rng(seed)
    lengths = np.minimum((rng.pareto(0.7, num_segments) * 2).astype(int), 3000)  # empties and a heavy tail
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n = int(offsets[-1])
    positions = rng.permutation(n) if permute else None
    src = rng.normal(scale=30, size=max(n, 1))
    src[rng.random(src.shape[0]) < 0.05] = np.inf
    plan = segments.build(offsets, positions, src.shape[0])
    out = np.asarray(segments.segment_sum(plan, jnp.asarray(src), transform=equations.split_infinite))
    gathered = src[positions] if permute else src[:n]
    seg = np.repeat(np.arange(num_segments), lengths)
    finite = np.where(np.isfinite(gathered), gathered, 0)
    np.testing.assert_allclose(out[:, 0], np.bincount(seg, finite, num_segments), rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(out[:, 1], np.bincount(seg, gathered == np.inf, num_segments))


def test_tiny_segment_next_to_a_large_one_is_exact():
    plan = segments.build(np.array([0, 2, 4]), None, 4)
    out = np.asarray(segments.segment_sum(plan, jnp.asarray([-193.0, -1.0, -1e-18, -2e-18])))
    assert out[0] == -194.0 and abs(out[1] + 3e-18) < 1e-32
