"""Table-driven float64 exp, expm1, log and log1p (an experiment; `micro_f64math.py` times them).

Not used by fastlbp: on the H200 they were slower than libdevice's, or
little faster (docs/benchmark-log.md, "How far the two-kernel sweep can go":
2.88 against 3.13 ps per call on the factor kernel's mix).

libdevice's float64 functions evaluate polynomials of degree 11-20 with
their range checks; most of the fused factor kernel's instructions are
theirs. With a small table the polynomials need degree 6-7:

* exp: x = (64 m + j) ln2/64 + r, |r| <= ln2/128; e^x = 2^m T_j (1 + p(r)),
  T_j = 2^(j/64) as a head and a tail. One evaluation gives e^x and e^x - 1
  (`exp_expm1`), the latter as (2^m T_j - 1) + 2^m T_j p, exact to an ulp or two
  for every x.
* log: x = 2^e m, m in [1, 2), c = the nearest of 1 + i/128 (i = 0..128);
  log x = e ln2 + log c + log1p(m / c - 1), with log c as a head and a tail and
  1 / c from the table; |m / c - 1| <= 1/256 needs degree 7. Near x = 1 the
  table adds nothing (c = 1, or c = 2 and e = -1, which cancel exactly).
* log1p(y) = log(1 + y) + (y - ((1 + y) - 1)) / (1 + y), the division by the
  table's 1 / c.

The tables live in one float64 array (`TABLE`, 515 values) that a kernel
takes as an operand and reads with gathers (`Tables.at(ref)`), or that plain
jnp code reads as a constant (`Tables.constant()`). Accuracy against numpy on the CPU: within 2 ulps
(exp 1, expm1 2, log 1, log1p 2 over wide random ranges and special values).
"""

from __future__ import annotations

import decimal
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

EXP_N = 64
LOG_N = 128
_EXP_HI, _EXP_LO, _LOG_INV, _LOG_HI, _LOG_LO = (0, EXP_N, 2 * EXP_N, 2 * EXP_N + LOG_N + 1,
                                                2 * EXP_N + 2 * (LOG_N + 1))
TABLE_SIZE = 2 * EXP_N + 3 * (LOG_N + 1)


_PREC = decimal.Context(prec=60)  # every operation below: decimal's default of 28 digits is too few


def _split(d: decimal.Decimal) -> tuple[float, float]:
    hi = float(d)
    return hi, float(_PREC.subtract(d, decimal.Decimal(hi)))


def _make_table() -> np.ndarray:
    ctx = _PREC
    ln2 = ctx.ln(decimal.Decimal(2))
    t = np.zeros(TABLE_SIZE)
    for j in range(EXP_N):
        hi, lo = _split(ctx.exp(ctx.divide(ctx.multiply(ln2, j), EXP_N)))
        t[_EXP_HI + j], t[_EXP_LO + j] = hi, lo
    for i in range(LOG_N + 1):
        inv = float(ctx.divide(LOG_N, LOG_N + i))  # 1 and 0.5 exactly at the ends
        # log of the reciprocal actually used, so m * inv - 1 and -log(inv) belong together
        hi, lo = _split(ctx.minus(ctx.ln(decimal.Decimal(inv))))
        t[_LOG_INV + i], t[_LOG_HI + i], t[_LOG_LO + i] = inv, hi, lo
    return t


TABLE = _make_table()
_LN2 = _PREC.ln(decimal.Decimal(2))
_LN2_64 = _PREC.divide(_LN2, EXP_N)
# k ln2/64 = k LN2_64_HI + k LN2_64_LO, the first exact for |k| < 2^17 (|x| < 746 gives |k| < 69,000)
LN2_64_HI = float(int(_PREC.multiply(_LN2_64, 2**42))) / 2**42
LN2_64_LO = float(_PREC.subtract(_LN2_64, decimal.Decimal(LN2_64_HI)))
LN2_HI, LN2_LO = _split(_LN2)
INV_LN2_64 = float(_PREC.divide(EXP_N, _LN2))
# e^r - 1 = r + r^2 (1/2 + r/6 + r^2/24 + r^3/120 + r^4/720) for |r| <= ln2/128: error below 2^-64
EXP_POLY = (1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720)
# log1p(r) = r - r^2/2 + r^3 (1/3 - r/4 + r^2/5 - r^3/6 + r^4/7) for |r| <= 1/256: error below 2^-61
LOG_POLY = (1 / 3, -1 / 4, 1 / 5, -1 / 6, 1 / 7)


class Tables(NamedTuple):
    """Where the functions read the table: `lookup(index) -> values`."""

    lookup: Any

    @staticmethod
    def constant() -> Tables:
        table = jnp.asarray(TABLE)
        return Tables(lambda i: table[i])

    @staticmethod
    def at(ref) -> Tables:
        """Gathers from a kernel operand holding `TABLE`."""
        return Tables(lambda i: ref[i])


def _horner(x, coefs):
    acc = jnp.full_like(x, coefs[-1])
    for c in reversed(coefs[:-1]):
        acc = acc * x + c
    return acc


def _pow2(k):
    """2^k as float64 for int32 k in [-1022, 1023]."""
    return jax.lax.bitcast_convert_type(
        jax.lax.shift_left((k + 1023).astype(jnp.int64), jnp.full(k.shape, 52, jnp.int64)), jnp.float64)


def _scale(x, k):
    """x 2^k for int32 |k| <= 2100, in two exact steps (a subnormal result rounds once)."""
    k1 = jax.lax.shift_right_arithmetic(k, jnp.ones_like(k))
    return x * _pow2(k1) * _pow2(k - k1)


def exp_expm1(x, tables: Tables):
    """(e^x, e^x - 1), float64. NaN in, NaN out; e^-inf = 0, e^inf = inf."""
    xc = jnp.minimum(jnp.maximum(x, jnp.full_like(x, -746.0)), jnp.full_like(x, 710.0))
    kf = jnp.floor(xc * INV_LN2_64 + 0.5)
    r = (xc - kf * LN2_64_HI) - kf * LN2_64_LO
    p = r + (r * r) * _horner(r, EXP_POLY)
    k = kf.astype(jnp.int32)
    j = k & (EXP_N - 1)
    m = jax.lax.shift_right_arithmetic(k, jnp.full_like(k, 6))
    hi = tables.lookup(_EXP_HI + j)
    tail = hi * p + tables.lookup(_EXP_LO + j)
    e = _scale(hi + tail, m)
    # Beyond 2^60, e^x - 1 rounds to e^x (and 2^m alone may overflow where e^x does not).
    em1 = jnp.where(m > 60, e, (_scale(hi, m) - 1.0) + _scale(tail, m))
    nan = jnp.isnan(x)
    return jnp.where(nan, x, e), jnp.where(nan, x, em1)


def exp(x, tables: Tables):
    return exp_expm1(x, tables)[0]


def expm1(x, tables: Tables):
    return exp_expm1(x, tables)[1]


def _log_parts(x, tables: Tables):
    """(log x, 1/x to within 2^-8): log x for x > 0 finite; the caller handles the rest."""
    tiny = x < 2.2250738585072014e-308
    xs = jnp.where(tiny, x * 18014398509481984.0, x)  # 2^54: subnormals become normal
    bits = jax.lax.bitcast_convert_type(xs, jnp.int64)
    e = (jax.lax.shift_right_logical(bits, jnp.full(bits.shape, 52, jnp.int64)) - 1023).astype(jnp.int32)
    e = e - jnp.where(tiny, 54, 0).astype(jnp.int32)
    mant = bits & 0x000FFFFFFFFFFFFF
    i = jax.lax.shift_right_logical(mant + (1 << 44), jnp.full(bits.shape, 45, jnp.int64)).astype(jnp.int32)
    m = jax.lax.bitcast_convert_type(mant | 0x3FF0000000000000, jnp.float64)
    inv = tables.lookup(_LOG_INV + i)
    r = m * inv - 1.0
    r2 = r * r
    poly = r - 0.5 * r2 + (r2 * r) * _horner(r, LOG_POLY)
    de = e.astype(jnp.float64)
    head = de * LN2_HI + tables.lookup(_LOG_HI + i)
    tail = de * LN2_LO + tables.lookup(_LOG_LO + i)
    return head + (tail + poly), inv * _pow2(-jnp.clip(e, -1022, 1022))


def log(x, tables: Tables):
    """Natural log, float64: 0 -> -inf, inf -> inf, negative or NaN -> NaN."""
    y, _ = _log_parts(x, tables)
    inf = jnp.full_like(x, jnp.inf)
    y = jnp.where(x == inf, inf, y)
    return jnp.where(x > 0, y, jnp.where(x == 0, -inf, jnp.full_like(x, jnp.nan)))


def log1p(y, tables: Tables):
    """log(1 + y), float64, for y >= -1: the log of the rounded 1 + y, corrected by its rounding."""
    # The max changes no value (y >= -1) but keeps XLA's simplifier from folding (1 + y) - 1 into y
    # on the CPU, which would drop the correction.
    a = jnp.maximum(1.0 + y, jnp.zeros_like(y))
    d = y - (a - 1.0)
    ly, inv_a = _log_parts(a, tables)
    inf = jnp.full_like(a, jnp.inf)
    out = jnp.where(a == inf, inf, ly + d * inv_a)
    return jnp.where(a > 0, out, jnp.where(a == 0, -inf, jnp.full_like(a, jnp.nan)))
