"""Float64 exp, expm1, log and log1p in jnp (an experiment; `micro_f64math.py` times them).

libdevice's float64 functions carry their own range checks and slow paths,
and the five calls are roughly a third of the fused factor kernel's
instructions. These share work instead: one polynomial gives both e^x and
e^x - 1 at the same argument (`exp_expm1`), and log1p is `log` plus a
first-order correction. They trace inside Pallas kernels and as plain jnp;
the coefficients are Python floats, or traced scalars a kernel loaded once
(`Coefficients.load`).

Accuracy, measured against numpy on the CPU and against libdevice by
`micro_f64math.py` on the GPU: within 1-9 units in the last place. On the
CPU, XLA folds (1 + y) - 1 into y, which drops log1p's correction, and
flushes subnormals to zero. They were slower than libdevice's on the H200
(docs/benchmark-log.md: 5.34 against libdevice's 2.54 ps per
call on the factor kernel's mix, 2026-11-22 23:55 UTC) and are not used by fastlbp.
"""

from __future__ import annotations

from math import factorial
from typing import NamedTuple

import jax
import jax.numpy as jnp

LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01  # low 21 bits zero: k * LN2_HI is exact for |k| < 2^21
LN2_LO = 1.90821492927058770002e-10
TINY = 2.2250738585072014e-308  # the smallest normal float64
# e^r - 1 = r + r^2/2 + ... + r^13/13!; the next term is below 2^-57 for |r| <= ln 2 / 2.
EXPM1_TAYLOR = tuple(1.0 / factorial(n) for n in range(1, 14))
# log(1 + f) = 2 atanh(s), s = f / (2 + f), as in fdlibm's e_log.c (Lg1..Lg7).
LOG_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
          2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
          1.479819860511658591e-01)
SQRT_HALF_HI = 0x3FE6A09E  # high word of sqrt(1/2): mantissas are reduced to [sqrt(1/2), sqrt(2))


class Coefficients(NamedTuple):
    """The polynomials' coefficients: Python floats, or scalars a kernel loaded from a ref."""

    expm1: tuple
    log: tuple

    @staticmethod
    def constants() -> Coefficients:
        return Coefficients(EXPM1_TAYLOR, LOG_LG)

    @staticmethod
    def table():
        """The coefficients as one flat float64 list (a kernel operand for `load`)."""
        return [*EXPM1_TAYLOR, *LOG_LG]

    @staticmethod
    def load(ref) -> Coefficients:
        """Scalars loaded from a ref holding `table()`."""
        n = len(EXPM1_TAYLOR)
        vals = [ref[i] for i in range(n + len(LOG_LG))]
        return Coefficients(tuple(vals[:n]), tuple(vals[n:]))


CONSTANTS = Coefficients.constants()


def _horner(x, coefs):
    last = coefs[-1]
    acc = last * jnp.ones_like(x) if isinstance(last, float) else jnp.broadcast_to(last, x.shape)
    for c in reversed(coefs[:-1]):
        acc = acc * x + c
    return acc


def _scale(p, k):
    """p * 2^k for int32 k with |k| < 2100, in two exact steps so subnormal results round once."""
    k1 = jax.lax.shift_right_arithmetic(k, jnp.ones_like(k))
    k2 = k - k1

    def pow2(j):
        return jax.lax.bitcast_convert_type(jax.lax.shift_left((j + 1023).astype(jnp.int64),
                                                               jnp.full(j.shape, 52, jnp.int64)),
                                            jnp.float64)

    return p * pow2(k1) * pow2(k2)


def exp_expm1(x, coef: Coefficients = CONSTANTS):
    """(e^x, e^x - 1), float64, from one polynomial.

    x = k ln 2 + r with |r| <= ln 2 / 2; the polynomial gives e^r - 1, e^x is
    its 1 + scaled by 2^k, and e^x - 1 is the polynomial itself where k = 0
    (|x| < ln 2 / 2, where subtracting 1 would cancel) and e^x - 1 elsewhere.
    NaN in, NaN out.
    """
    xc = jnp.minimum(jnp.maximum(x, jnp.full_like(x, -746.0)), jnp.full_like(x, 710.0))
    kf = jnp.floor(xc * LOG2E + 0.5)
    r = (xc - kf * LN2_HI) - kf * LN2_LO
    em1 = r * _horner(r, coef.expm1)
    k = kf.astype(jnp.int32)
    e = _scale(1.0 + em1, k)
    nan = jnp.isnan(x)
    return jnp.where(nan, x, e), jnp.where(nan, x, jnp.where(k == 0, em1, e - 1.0))


def exp(x, coef: Coefficients = CONSTANTS):
    return exp_expm1(x, coef)[0]


def expm1(x, coef: Coefficients = CONSTANTS):
    return exp_expm1(x, coef)[1]


def log(x, coef: Coefficients = CONSTANTS):
    """Natural log, float64: 0 -> -inf, inf -> inf, negative or NaN -> NaN."""
    tiny = x < TINY
    xs = jnp.where(tiny, x * 18014398509481984.0, x)  # 2^54: subnormals become normal
    bits = jax.lax.bitcast_convert_type(xs, jnp.int64)
    shift = jnp.full(bits.shape, 32, jnp.int64)
    # Add 1 - sqrt(1/2) to the high word, so the exponent field counts from sqrt(1/2).
    hb = bits + jax.lax.shift_left(jnp.full_like(bits, 0x3FF00000 - SQRT_HALF_HI), shift)
    k = (jax.lax.shift_right_arithmetic(hb, jnp.full(bits.shape, 52, jnp.int64)) - 0x3FF).astype(jnp.int32)
    k = k - jnp.where(tiny, 54, 0).astype(jnp.int32)
    mbits = (hb & 0x000FFFFFFFFFFFFF) + jax.lax.shift_left(jnp.full_like(bits, SQRT_HALF_HI), shift)
    f = jax.lax.bitcast_convert_type(mbits, jnp.float64) - 1.0
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    lg = coef.log
    t1 = w * _horner(w, (lg[1], lg[3], lg[5]))
    t2 = z * _horner(w, (lg[0], lg[2], lg[4], lg[6]))
    dk = k.astype(jnp.float64)
    y = s * (hfsq + t1 + t2) + dk * LN2_LO - hfsq + f + dk * LN2_HI
    inf = jnp.full_like(x, jnp.inf)
    y = jnp.where(x == inf, inf, y)
    return jnp.where(x > 0, y, jnp.where(x == 0, -inf, jnp.full_like(x, jnp.nan)))


def log1p(y, coef: Coefficients = CONSTANTS):
    """log(1 + y), float64, for y >= -1: log of the rounded 1 + y, corrected by the rounding."""
    a = 1.0 + y
    # 1 + y lost (y - (a - 1)); log(a + d) = log(a) + d / a to first order, and |d / a| < 2^-53.
    d = y - (a - 1.0)
    corr = jnp.where((a > 0) & (a < jnp.inf), d / a, jnp.zeros_like(a))
    return log(a, coef) + corr
