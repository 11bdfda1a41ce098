"""The numerics under the message equations, written for Pallas kernels and plain jnp alike.

Exact log sigmoid, guarded divisions, the floor of a soft body term, the
soft cast of probabilities, the convergence measure. The message equations
themselves are `fastlbp.core.equations`. The Triton lowering cannot splat a
Python infinity into a tensor, so constants are built with `full_like`.
"""

from __future__ import annotations

import jax.numpy as jnp

# On the GPU a float64 division leaves its fast path for a subroutine call when the dividend
# is below about 1e-292 (zero included) or the divisor above about 1e292, and libdevice's log1p
# divides its argument by 2 + itself. In the fused factor kernel nearly every warp made that call
# at each of its three divisions: priors and rules with r = 1 make num == den, hard messages make
# e^-|a| = 0. `quotient` and `log1p_nonneg` keep zero dividends out of the divisions (the fused
# float64 sweep's slow-path division calls, docs/benchmark-log.md); their results are IEEE's.


def quotient(num, den):
    """num / den for num >= 0 (or NaN), IEEE's result, with no tiny or zero dividend reaching the division.

    A dividend below 2^-930 (2^-100 in float32) is scaled up by 2^930 (2^100)
    and the quotient back down, and a zero one raised to 2^-930 by a max, which
    the compiler cannot see through (a select between 1 and num it turned into
    num / den and the reciprocal); 0 / den is then 0, or NaN where den is 0 or
    NaN. Subnormal quotients may round twice.
    """
    k = 930 if jnp.dtype(num.dtype).itemsize == 8 else 100
    tiny = jnp.full_like(num, 2.0 ** -k)
    small = num < tiny
    scale = jnp.where(small, jnp.full_like(num, 2.0 ** k), jnp.ones_like(num))
    q = jnp.maximum(num * scale, tiny) / den
    q = q * jnp.where(small, jnp.full_like(num, 2.0 ** -k), jnp.ones_like(num))
    by_zero = jnp.where(den > 0, jnp.zeros_like(num), jnp.full_like(num, jnp.nan))
    return jnp.where(num == 0, by_zero, q)


def log1p_nonneg(y):
    """log1p(y) for y >= 0 (or NaN). Below 1e-17 log1p(y) rounds to y, which is returned undivided."""
    big = y > 1e-17
    return jnp.where(big, jnp.log1p(jnp.where(big, y, jnp.ones_like(y))), y)


def log_sigmoid(x):
    """log(1 / (1 + e^-x)), exact at +-inf."""
    return jnp.minimum(x, 0) - log1p_nonneg(jnp.exp(-jnp.abs(x)))


def term_floor(dtype) -> float:
    """Smallest magnitude of a soft body term: 2^-970 in float64, 2^-102 in float32.

    The body term log m(1) (AND) or log m(0) (OR) of a message with log-odds
    beyond about +-745 (+-103 in float32) rounds to 0, as if the message were
    hard: the factor's "1 - product of the others" then becomes 0 and its
    message to the head turns into a spurious -inf (a derivable alarm with
    probability 0, labels on it refused as contradictory). Floored at this
    magnitude, 1 - e^c stays a normal number even after a multiplication by
    a probability down to the precision's epsilon, so messages turn hard only
    through hard parameters or evidence; a floored message is as extreme as
    the precision can carry (log-odds about -672 in float64, -71 in float32).
    """
    return 2.0 ** -970 if jnp.dtype(dtype).itemsize == 8 else 2.0 ** -102


def floor_term(term, x):
    """A body term `term` = log sigmoid(x), at most -`term_floor` where x is finite (soft)."""
    floor = jnp.full_like(term, -term_floor(term.dtype))
    return jnp.where(jnp.isfinite(x), jnp.minimum(term, floor), term)


def soft_cast(p, dtype):
    """Probabilities (float64) in `dtype`, a positive one kept at `term_floor` or above.

    float32 rounds 5e-321 (or 1 - p for p = 1 - 1e-10, taken from the float64
    value) to 0, a hard parameter the model does not have; and a parameter
    below `term_floor` times a probability of the message equations can fall
    into the subnormals, which GPUs flush to 0. So probabilities below 2^-970
    (2^-102 in float32) count as that much: soft, and as small as the
    precision carries through the equations.
    """
    out = p.astype(dtype)
    least = jnp.full_like(out, term_floor(dtype))
    return jnp.where((p > 0) & (out < least), least, out)


def log_odds_change(lo, lo_old):
    """How much marginals moved in a sweep, for the convergence test; (n,) each.

    The change is |lo - lo_old| / (1 + |lo_old|) in log-odds: relative to the
    size of the log-odds, so a marginal that goes from 1e-16 to 2e-8 (evidence
    arriving at a tuple the labels make likely) counts as moving, where a
    change of probability (2e-8) would have stopped the round before the
    evidence travelled on; near 1/2 it is about 4 times a change of
    probability. 0 where equal (equal infinities too), inf where a marginal
    turns hard.

    Returns:
        (change (0 where either is NaN), whether lo is NaN: a conflict).
    """
    same = lo == lo_old
    both = jnp.isfinite(lo) & jnp.isfinite(lo_old)
    diff = jnp.abs(jnp.where(both, lo - lo_old, jnp.zeros_like(lo)))
    # quotient: a zero change never reaches the division (a slow path of float64 division on GPUs).
    rel = quotient(diff, 1 + jnp.abs(jnp.where(both, lo_old, jnp.zeros_like(lo))))
    d = jnp.where(same | both, rel, jnp.full_like(lo, jnp.inf))
    bad = jnp.isnan(lo) | jnp.isnan(lo_old)
    return jnp.where(bad, jnp.zeros_like(lo), jnp.where(same, jnp.zeros_like(lo), d)), jnp.isnan(lo)


def finite_part(x):
    """x where finite, else 0."""
    return jnp.where(jnp.isfinite(x), x, jnp.zeros_like(x))


def signed(pos, neg, finite):
    """+inf where `pos`, -inf where `neg`, NaN where both (a contradiction), else `finite`."""
    inf = jnp.full_like(finite, jnp.inf)
    ninf = jnp.full_like(finite, -jnp.inf)
    nan = jnp.full_like(finite, jnp.nan)
    return jnp.where(pos, jnp.where(neg, nan, inf), jnp.where(neg, ninf, finite))
