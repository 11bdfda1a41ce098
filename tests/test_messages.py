"""The factor-message equations (`equations.edge_messages`) against their log-space form.

The engines evaluate DESIGN.md section 4 mostly in the linear domain (five
transcendental evaluations per edge in the fused kernels: `terms_and_rho`
shares two between the body terms and the head's log rho). The reference here is the textbook
log-space evaluation (every product a sum of logs, every sum a logaddexp),
in numpy float64: slower, but it has no underflow to guard against. Every
combination of special values (hard messages, c = 0 and -inf, deterministic
parameters, log-odds past the underflow of e^x) is checked, and random ones.
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from fastlbp.core.equations import edge_messages, messages_from_rho, terms_and_rho
from fastlbp.core.logspace import log1p_nonneg, quotient

PROBS = [0.0, 1.0, 0.5, 1e-12, 1 - 1e-12, 0.99, 0.01, 0.3, 1e-200]
C_VALUES = [0.0, -0.0, -np.inf, -1e-300, -1e-20, -1e-8, -0.6931, -50.0, -800.0, -3000.0]
H_VALUES = [0.0, np.inf, -np.inf, np.nan, 1e-20, 40.0, -40.0, 800.0, -800.0, 3000.0]


def log_space(is_head, is_and, c, hn, q, r):
    """DESIGN.md section 4 in log space (numpy, float64)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lq, l1mq, lr, l1mr = np.log(q), np.log1p(-q), np.log(r), np.log1p(-r)
        l1c = np.where(c > -0.6931, np.log(-np.expm1(c)), np.log1p(-np.exp(c)))
        g1 = np.logaddexp(lq + l1c, lr + c)
        g0 = np.logaddexp(l1mq + l1c, l1mr + c)
        h1 = -np.logaddexp(0, -hn)
        h0 = -np.logaddexp(0, hn)
        k_fixed = np.logaddexp(h0 + l1mq, h1 + lq)
        k_free = np.logaddexp(h0 + g0, h1 + g1)
        return np.where(is_head, g1 - g0, np.where(is_and, k_free - k_fixed, k_fixed - k_free))


def linear(is_head, is_and, c, hn, q, r, dtype=jnp.float64, shared=False):
    """`edge_messages`; `shared`: log rho from `terms_and_rho` (the fused kernels' path)."""
    q1, r1 = 1 - q, 1 - r
    with np.errstate(divide="ignore"):
        k1 = np.where(q == 0, np.log(r), np.where(r == 0, np.log(q), 0.0))
        k0 = np.where(q1 == 0, np.log(r1), np.where(r1 == 0, np.log(q1), 0.0))
    c, hn, q, r, q1, r1, k1, k0 = (jnp.asarray(x, dtype) for x in (c, hn, q, r, q1, r1, k1, k0))
    is_head, is_and = jnp.asarray(is_head), jnp.asarray(is_and)
    if shared:
        _, lr = terms_and_rho(hn, jnp.ones_like(is_head), q, r, q1, r1)
        out = messages_from_rho(is_head, is_and, c, lr, q, r, q1, r1, k1, k0)
    else:
        out = edge_messages(is_head, is_and, c, hn, q, r, q1, r1, k1, k0)
    return np.asarray(out, np.float64)


def compare(args, rel: float = 1e-12):
    for shared in (False, True):
        _compare(args, rel, shared)


def _compare(args, rel, shared):
    got, want = linear(*args, shared=shared), log_space(*args)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    both = ~np.isnan(got)
    hard = both & (np.isinf(got) | np.isinf(want))
    np.testing.assert_array_equal(got[hard], want[hard])
    soft = both & ~hard
    err = np.abs(got[soft] - want[soft]) / (1 + np.abs(want[soft]))
    worst = int(np.argmax(err)) if err.size else 0
    assert err.size == 0 or err[worst] < rel, (
        err[worst], [np.asarray(a)[soft][worst] for a in args], got[soft][worst], want[soft][worst])


def test_every_combination_of_special_values():
    grid = np.array(list(itertools.product([False, True], [False, True], C_VALUES, H_VALUES, PROBS, PROBS)),
                    dtype=object)
    is_head, is_and = grid[:, 0].astype(bool), grid[:, 1].astype(bool)
    c, hn, q, r = (grid[:, k].astype(np.float64) for k in range(2, 6))
    compare((is_head, is_and, c, hn, q, r))


@pytest.mark.parametrize("seed", range(3))
def test_random_values(seed):
    rng = np.random.default_rng(seed)
    n = 50_000
    q = np.where(rng.random(n) < 0.3, rng.choice(PROBS, n), rng.random(n))
    r = np.where(rng.random(n) < 0.3, rng.choice(PROBS, n), rng.random(n))
    c = np.where(rng.random(n) < 0.3, rng.choice(C_VALUES, n),
                 -rng.exponential(1, n) * rng.choice([1e-9, 1e-3, 1, 30, 1000], n))
    hn = np.where(rng.random(n) < 0.3, rng.choice(H_VALUES, n),
                  rng.normal(0, 1, n) * rng.choice([1e-3, 1, 10, 100, 1000], n))
    compare((rng.random(n) < 0.3, rng.random(n) < 0.5, c, hn, q, r))


def test_an_underflowing_product_stays_soft():
    """g0 = e^c for a deterministic OR (p1 = 1, p2 = 0): e^-3000 underflows, the message must not."""
    c = np.array([-3000.0])
    got = linear(np.array([True]), np.array([False]), c, np.array([0.0]), np.array([1.0]), np.array([0.0]))
    assert np.isfinite(got[0]) and abs(got[0] - 3000.0) < 1e-9


def test_float32_on_moderate_values():
    rng = np.random.default_rng(7)
    n = 20_000
    args = (rng.random(n) < 0.3, rng.random(n) < 0.5, -rng.exponential(2, n), rng.normal(0, 5, n),
            rng.uniform(0.01, 0.99, n), rng.uniform(0.01, 0.99, n))
    got = linear(*args, dtype=jnp.float32)
    want = log_space(*args)
    assert np.max(np.abs(got - want) / (1 + np.abs(want))) < 1e-5


def test_shared_body_terms_are_log_sigmoid():
    """`terms_and_rho`'s body side is log sigmoid to the last bits, tiny terms included."""
    rng = np.random.default_rng(3)
    a = np.concatenate([H_VALUES, rng.normal(0, 1, 20_000) * rng.choice([1e-300, 1e-9, 1, 30, 800], 20_000)])
    q, r = rng.choice(PROBS, a.size), rng.random(a.size)
    consts = (jnp.asarray(x) for x in (q, r, 1 - q, 1 - r))
    body, _ = terms_and_rho(jnp.asarray(a), jnp.zeros(a.size, bool), *consts)
    with np.errstate(invalid="ignore"):
        want = -np.logaddexp(0.0, -a)
    got = np.asarray(body)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok & np.isinf(want)], want[ok & np.isinf(want)])
    soft = ok & ~np.isinf(want)
    assert np.all(np.abs(got[soft] - want[soft]) <= 4e-16 * np.abs(want[soft]) + 1e-300)


# No subnormals: XLA on the CPU flushes them to zero (the GPU does not, in float64).
SPECIAL = [0.0, -0.0, 1e-300, 1e-292, 1e-200, 1e-17, 2e-17, 1e-10, 0.5, 1.0, 2.0, 1e200, 1e300,
           np.inf, np.nan]


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_quotient_is_ieee_division(dtype):
    """`quotient` (no zero dividend reaches the division) gives exactly num / den."""
    rng = np.random.default_rng(0)
    pairs = np.array(list(itertools.product(SPECIAL, SPECIAL)))
    span = 700 if dtype == jnp.float64 else 80
    rand = np.exp(rng.uniform(-span, span, size=(2000, 2)))
    with np.errstate(over="ignore"):
        num, den = np.concatenate([pairs, rand]).T.astype(dtype)
    tiny = np.finfo(dtype).tiny
    num, den = (np.where(np.abs(x) < tiny, 0, x).astype(dtype) for x in (num, den))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        want = num / den
    want = np.where(np.abs(want) < tiny, 0, want)  # a subnormal quotient: flushed on the CPU
    got = np.asarray(quotient(jnp.asarray(num), jnp.asarray(den)))
    np.testing.assert_array_equal(got, want)


def test_log1p_nonneg_is_log1p():
    """`log1p_nonneg` returns tiny arguments themselves: exactly what log1p rounds them to."""
    rng = np.random.default_rng(1)
    y = np.concatenate([SPECIAL, np.exp(rng.uniform(-745, 700, 5000)), rng.uniform(0, 1e-15, 1000)])
    got = np.asarray(log1p_nonneg(jnp.asarray(y)))
    np.testing.assert_array_max_ulp(got[np.isfinite(y)], np.log1p(y[np.isfinite(y)]), maxulp=1)
    assert np.isnan(got[np.isnan(y)]).all() and (got[y == np.inf] == np.inf).all()
    small = (y > 0) & (y <= 1e-17)
    np.testing.assert_array_equal(got[small], np.log1p(y[small]))
