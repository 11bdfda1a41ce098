"""The sampler's propagation (`Sampler.stages`) against a numpy reference, one variable at a time."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from fastlbp.core.graph import AND, from_factors
from fastlbp.engines import sampling_plan
from fastlbp.engines.sampling import Sampler
from fastlbp.engines.sampling_plan import FIRST_COIN, ONE_COIN, ONES_ROW, ZERO_COIN, ZEROS_ROW
from tests.test_engines_sampling import random_dag

WIDTHS = [None, (2, 4, 16, 64), (8,)]


def reference_state(factors, num_vars, plan, coins: np.ndarray) -> np.ndarray:
    """(V+2, W) state words from the factors themselves, one variable at a time in topological order."""
    row_of_coin = {}
    row = FIRST_COIN
    for b in plan.buckets:
        for i in b.ids:
            row_of_coin[int(i)] = row
            row += 1
    by_head = {f.head: f for f in factors}

    def coin(cid, p):
        return coins[row_of_coin[cid] if 0 < p < 1 else (ONE_COIN if p >= 1 else ZERO_COIN)]

    state = np.zeros((plan.num_rows, coins.shape[1]), np.uint32)
    state[ONES_ROW] = 0xFFFFFFFF
    for v in sorted(range(num_vars), key=lambda v: plan.row_of[v]):
        f = by_head.get(v)
        if f is None:
            x = coin(2 * v, 0.5)
        elif not f.body:
            x = coin(2 * v, f.p1 if f.kind == AND else f.p2)
        else:
            body = state[[plan.row_of[u] for u in f.body]]
            cond = np.bitwise_and.reduce(body) if f.kind == AND else np.bitwise_or.reduce(body)
            x = (cond & coin(2 * v, f.p1)) | (~cond & coin(2 * v + 1, f.p2))
        state[plan.row_of[v]] = x
    return state


@hsettings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 30), max_body=st.sampled_from([3, 6, 30]),
       widths=st.sampled_from(WIDTHS))
def test_propagation_equals_reference(seed, n, max_body, widths):
    rng = np.random.default_rng(seed)
    factors = random_dag(rng, n, max_body=max_body)
    read = {u for f in factors for u in f.body}
    # Some variables read by others head no factor: fair coins.
    factors = [f for f in factors if f.head not in read or rng.random() < 0.9]
    graph = from_factors(factors, n)
    sampler = Sampler(graph, widths=widths)
    coins_fn, propagate = sampler.stages(4)
    coins = coins_fn(sampler.arrays, jnp.array([seed & 0xFFFF, 7], jnp.uint32), jnp.uint32(seed % 1000))
    state = np.asarray(propagate(sampler.arrays, coins))
    expected = reference_state(factors, n, sampler.plan, np.asarray(coins))
    np.testing.assert_array_equal(state, expected)
    assert not state[ZEROS_ROW].any()


def test_width_classes():
    size = np.array([0, 1, 2, 3, 5, 9, 17, 100, 5000])
    np.testing.assert_array_equal(sampling_plan.width_classes(size), [0, 1, 2, 4, 8, 16, 32, 128, 8192])
    np.testing.assert_array_equal(sampling_plan.width_classes(size, (2, 4, 16, 64)),
                                  [0, 2, 2, 4, 16, 16, 64, 128, 8192])
    # Every group of a level writes the rows after the previous one (one state update per level).
    rng = np.random.default_rng(1)
    factors = random_dag(rng, 30, max_body=20)
    plan = sampling_plan.build(from_factors(factors, 30), widths=(2, 4, 16))
    nxt = sampling_plan.FIRST_ROW
    for level in plan.levels:
        for g in level:
            assert g.start == nxt and g.rows.shape[1] in (0, 2, 4, 16, 32)
            nxt += g.size
    assert nxt == plan.num_rows
