"""Coin words of the sampler (`sampling_coins`): the head and compacted tail == the dense expansion."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from datalog.bayesnet import to_model
from datalog.synthetic import generate
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.engines import sampling_coins, sampling_plan
from fastlbp.engines.sampling import Sampler
from fastlbp.engines.sampling_coins import capacities, coin_words, digit_bits, head, threefry2x32
from fastlbp.engines.sampling_plan import FIRST_COIN

COINS = 12  # coins per example: one shape, few compilations


def dense_coins(key, p, ids, words) -> np.ndarray:
    """(n, W) coin words by the dense backward recurrence over all of p's digits (the former sampler).

    X_{K+1} = 0, X_k = b_k ? (r_k | X_{k+1}) : (r_k & X_{k+1}) with K = digits_needed(p), r_{2j+1},
    r_{2j+2} the two words of threefry2x32(key, 32 id + j, word).
    """
    need = sampling_plan.digits_needed(p)[:, None]
    d = sampling_plan.digits(p, 64)[:, :, None]
    ids = np.asarray(ids, np.uint32)[:, None]
    acc = np.zeros((len(p), len(words)), np.uint32)
    with np.errstate(over="ignore"):
        for k in range(int(need.max(initial=0)) - 1, -1, -1):
            r0, r1 = threefry2x32(key[0], key[1], ids * np.uint32(32) + np.uint32(k // 2), words[None, :])
            r = r0 if k % 2 == 0 else r1
            acc = np.where(k < need, np.where(d[k], r | acc, r & acc), acc)  # digits past need: none
    return acc


@functools.partial(jax.jit, static_argnames=("pairs", "head_digits", "long_coins", "capacity"))
def _coins(key, bits, ids, need, words, pairs, head_digits, long_coins, capacity):
    return coin_words(key, bits, ids, need, words, pairs, head_digits, long_coins, capacity)


def new_coins(key, p, ids, words, head_digits, capacity):
    need = sampling_plan.digits_needed(p)
    pairs = 32
    bits = digit_bits(sampling_plan.digits(p, 64))
    longs = int(np.count_nonzero(need > head_digits))
    arrays = (jnp.asarray(a) for a in (key, bits, ids, need.astype(np.int32), words))
    got = _coins(*arrays, pairs=pairs, head_digits=head_digits, long_coins=longs, capacity=capacity)
    return np.asarray(got)


SPECIAL = [1e-300, 2.0**-60, 2.0**-64, 1e-10, 0.5, 0.25, 0.75, 0.999, 0.9, 0.1, 1 / 3, 1 - 2.0**-53,
           2.0**-53, 0.5 + 2.0**-53, 0.3 + 2.0**-40, 5e-324]


def probabilities():
    full53 = st.integers(2**52, 2**53 - 1).map(lambda m: m * 2.0**-53)  # 53 significant bits in [1/2, 1)
    scaled = st.tuples(full53, st.integers(1, 20)).map(lambda t: t[0] * 2.0**-t[1])
    dyadic = st.tuples(st.integers(1, 2**10 - 1), st.just(10)).map(lambda t: t[0] / 2.0**t[1])
    anyp = st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True)
    return st.one_of(st.sampled_from(SPECIAL), full53, scaled, dyadic, anyp)


@hsettings(max_examples=25, deadline=None)
@given(p=st.lists(probabilities(), min_size=COINS, max_size=COINS),
       width=st.sampled_from([1, 64]), first=st.integers(0, 2**32 - 65),
       head=st.sampled_from([(2, 3), (12, None)]), seed=st.integers(0, 2**32 - 1))
def test_head_and_tail_equal_dense_expansion_bit_for_bit(p, width, first, head, seed):
    # A short head with a tiny capacity (many tail rounds) and the default; widths under and over 32.
    head_digits, capacity = head
    p = np.array(p, np.float64)
    key = np.array([seed & 0xFFFFFFFF, (seed * 2654435761) & 0xFFFFFFFF], np.uint32)
    ids = np.arange(COINS, dtype=np.uint32) * np.uint32(7) + np.uint32(3)
    words = np.uint32(first) + np.arange(width, dtype=np.uint32)
    np.testing.assert_array_equal(new_coins(key, p, ids, words, head_digits, capacity),
                                  dense_coins(key, p, ids, words))


def test_tail_runs_and_capacity_rounds_agree():
    # A head of 2 digits leaves about 87% of the words of 32 bits undecided: the tail does most of the
    # work, in one round (default capacity) or in hundreds (capacity 3); all equal the dense coins.
    p = np.array([0.999, 0.9, 1 / 3, 1e-300, 0.5 + 2.0**-53, 0.7, 0.123456789, 2.0**-30, 0.6, 0.2, 0.45,
                  0.01])
    key = np.array([5, 6], np.uint32)
    ids = np.arange(COINS, dtype=np.uint32)
    words = np.arange(64, dtype=np.uint32) + np.uint32(1000)
    expected = dense_coins(key, p, ids, words)
    bits = jnp.asarray(digit_bits(sampling_plan.digits(p, 64)))
    both = np.asarray(head(jnp.asarray(key), bits, jnp.asarray(ids), jnp.asarray(words), 1,
                   long=jnp.ones(COINS, bool)))
    acc, und = both.astype(np.uint32), (both >> np.uint64(32)).astype(np.uint32) ^ both.astype(np.uint32)
    np.testing.assert_array_equal(acc, head(jnp.asarray(key), bits, jnp.asarray(ids), jnp.asarray(words), 1))
    assert np.count_nonzero(und) > COINS * 64 // 2  # the tail has work
    assert not np.array_equal(acc, expected)  # and the head alone is not the answer
    assert np.all((acc & ~und) == (expected & ~und))  # the bits it decided are final
    for head_digits, capacity in [(2, None), (2, 3), (12, 1)]:
        np.testing.assert_array_equal(new_coins(key, p, ids, words, head_digits, capacity), expected)


def test_frequencies_match_p():
    # Independent of the reference: the share of ones is p within 5 standard errors.
    p = np.array([0.999, 0.9, 0.5, 1 / 3, 0.1, 2.0**-7, 0.3 + 2.0**-40, 0.75, 0.999, 0.6, 0.05,
                  0.5 + 2.0**-53])
    words = np.arange(2048, dtype=np.uint32)
    got = new_coins(np.array([1, 2], np.uint32), p, np.arange(COINS, dtype=np.uint32), words, 12, None)
    ones = np.unpackbits(got.view(np.uint8), axis=1).sum(axis=1)
    n = 2048 * 32
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(ones / n - p) <= 5 * se), (ones / n, p)


def test_capacities_hold_the_undecided_words():
    # The count of words the head leaves undecided stays under the capacity, near the expected count.
    n, width, digits = 400, 512, 8
    bits = jnp.asarray(digit_bits(sampling_plan.digits(np.full(n, 0.999), 64)))
    both = np.asarray(head(jnp.array([9, 9], jnp.uint32), bits, jnp.arange(n, dtype=jnp.uint32),
                           jnp.arange(width, dtype=jnp.uint32), digits // 2, long=jnp.ones(n, bool)))
    und = (both >> np.uint64(32)).astype(np.uint32) ^ both.astype(np.uint32)
    words = np.count_nonzero(und)
    groups = np.count_nonzero(und.reshape(n, -1, 32).any(axis=2))
    cap_groups, cap_words = capacities(n, width, digits)
    expected = n * width * -np.expm1(32 * np.log1p(-(2.0**-digits)))
    assert abs(words - expected) < 5 * np.sqrt(expected)
    assert words <= cap_words and groups <= cap_groups
    assert cap_words < 2 * expected  # slack, not the whole array
    assert capacities(3, 1, 2) == (3, 3)  # never more than there are


def test_digit_bits_round_trip():
    p = np.array([0.999, 1e-300, 0.5, 1 - 2.0**-53, 2.0**-64])
    d = sampling_plan.digits(p, 64)
    b = digit_bits(d)
    back = ((b[:, None, :] >> np.arange(31, -1, -1, dtype=np.uint32)[None, :, None]) & 1).reshape(64, -1)
    np.testing.assert_array_equal(back.astype(bool), d)
    assert b[0, 2] == 1 << 31 and b[1, 4] == 1 and b[0, 4] == 0


@pytest.mark.parametrize("head_digits", [4, 12])
def test_sampler_coin_rows_equal_dense_expansion(head_digits):
    # The plan's buckets (ids, need, row order) wired through the Sampler: each coin row == the dense
    # expansion of its p, for every bucket (p of 1, 2, 3, 5, 10 and 53 digits).
    ps = [0.5, 0.25, 0.375, 0.40625, 0.1337890625, 0.999, 0.9, 1e-300]
    factors = [Factor(AND, i, (), p, p) for i, p in enumerate(ps)]
    factors += [Factor(OR, len(ps) + i, (i,), 0.6, ps[-1 - i]) for i in range(len(ps))]
    graph = from_factors(factors, 2 * len(ps))
    sampler = Sampler(graph, head_digits=head_digits)
    assert [b.pairs for b in sampler.plan.buckets] == list(sampling_plan.PAIR_BUCKETS)
    coins, _ = sampler.stages(8)
    key = jax.random.key_data(jax.random.key(4)).astype(jnp.uint32).reshape(-1)[-2:]
    got = np.asarray(coins(sampler.arrays, key, jnp.uint32(40)))
    row = FIRST_COIN
    words = np.arange(40, 48, dtype=np.uint32)
    p_of = {2 * f.head: (f.p1 if f.body or f.kind == AND else f.p2) for f in factors}
    p_of |= {2 * f.head + 1: f.p2 for f in factors if f.body}
    for b in sampler.plan.buckets:
        p = np.array([p_of[int(i)] for i in b.ids])
        expected = dense_coins(np.asarray(key), p, b.ids, words)
        np.testing.assert_array_equal(got[row: row + b.ids.size], expected)
        row += b.ids.size
    assert row == got.shape[0]


@pytest.mark.slow
def test_bingo_like_graph_coins_equal_dense_expansion():
    # A synthetic derivation graph (p in {0.999} after hard 0 / 1): a few hundred coins, all through the tail.
    model = to_model(generate(factor_edges=3000, seed=1), compress=False)
    sampler = Sampler(model.graph)
    coins, _ = sampler.stages(32)
    key = np.array([11, 12], np.uint32)
    got = np.asarray(coins(sampler.arrays, jnp.asarray(key), jnp.uint32(7)))
    words = np.arange(7, 39, dtype=np.uint32)
    graph = model.graph.to_numpy()
    heads = np.asarray(model.graph.factor_head)
    fo = np.asarray(graph.factor_offsets)
    p1 = dict(zip(heads, np.asarray(graph.p1), strict=True))
    p2 = dict(zip(heads, np.asarray(graph.p2), strict=True))
    body = dict(zip(heads, np.diff(fo) - 1, strict=True))
    kind = dict(zip(heads, np.asarray(graph.factor_kind), strict=True))
    row = FIRST_COIN
    for b in sampler.plan.buckets:
        p = []
        for i in b.ids:
            v = int(i) // 2
            if v not in p1:  # no factor: a fair coin
                p.append(0.5)
            elif int(i) % 2:
                p.append(p2[v])
            else:
                p.append(p1[v] if body[v] or kind[v] == AND else p2[v])
        np.testing.assert_array_equal(got[row: row + b.ids.size], dense_coins(key, np.array(p), b.ids, words))
        row += b.ids.size


def test_module_constants():
    assert sampling_coins.PAIRS_PER_COIN * 2 == sampling_plan.MAX_DIGITS
    assert sampling_coins.HEAD_DIGITS % 2 == 0
