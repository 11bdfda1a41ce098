"""Message math written for Pallas kernels and plain jnp alike (one implementation for every engine).

The Triton lowering cannot splat a Python infinity into a tensor, so
constants are built with `full_like`.
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


def log_rho(hn, q, r, q1, r1):
    """log rho of a factor's body messages, from the head's variable-to-factor log-odds `hn`.

    rho = (h0 (1-r) + h1 r) / (h0 (1-q) + h1 q), both parts divided by
    max(h0, h1) so that u = min(h0, h1) / max(h0, h1) = e^-|hn|; a part whose
    constant is 0 is exactly u (log -|hn|). NaN where hn is NaN or both parts
    vanish (a hard head the factor rules out). Two transcendental evaluations.
    """
    num, den, extra, undefined = _rho_parts(hn, jnp.exp(-jnp.abs(hn)), q, r, q1, r1)
    return jnp.where(undefined, jnp.full_like(hn, jnp.nan), jnp.log(num / den) + extra)


def _rho_parts(hn, u, q, r, q1, r1):
    """rho = num / den * e^extra, and where rho is undefined (`log_rho`); u = e^-|hn|."""
    zero = jnp.zeros_like(hn)
    one = jnp.ones_like(hn)
    ax = jnp.abs(hn)
    up = hn >= 0
    b_num = jnp.where(up, r, r1)
    b_den = jnp.where(up, q, q1)
    num_u = b_num == 0
    den_u = b_den == 0
    num = jnp.where(num_u, one, jnp.where(up, r1, r) * u + b_num)
    den = jnp.where(den_u, one, jnp.where(up, q1, q) * u + b_den)
    extra = jnp.where(num_u == den_u, zero, jnp.where(num_u, -ax, ax))
    return num, den, extra, jnp.isnan(hn) | (num_u & den_u & (ax == jnp.inf))


def terms_and_rho(a, is_head, q, r, q1, r1):
    """log sigmoid(a) on body edges and `log_rho(a, ...)` on head edges, sharing two transcendentals.

    A body edge needs e^-|a| and log1p of it, a head edge e^-|hn| and the log
    of a ratio; a GPU lane runs both sides of a `where`, so one exp and one
    log1p serve both. The head's log is +-log1p((hi - lo) / lo) (lo, hi: the
    smaller and larger part, + where num >= den), as exact as log(num / den):
    the argument is never near -1.

    Args:
        a: log-odds; a body edge's +-(variable-to-factor message), the head's own.
        is_head: bool mask.
        q, r, q1, r1: the factor's constants (`factor_messages`).

    Returns:
        (log sigmoid(a), log rho): the first where not `is_head`, the second
        where `is_head`; the other entries are unspecified.
    """
    e = jnp.exp(-jnp.abs(a))
    num, den, extra, undefined = _rho_parts(a, e, q, r, q1, r1)
    lo = jnp.minimum(num, den)
    shared = log1p_nonneg(jnp.where(is_head, quotient(jnp.maximum(num, den) - lo, lo), e))
    lr = jnp.where(num >= den, shared, -shared) + extra
    return jnp.minimum(a, 0) - shared, jnp.where(undefined, jnp.full_like(a, jnp.nan), lr)


def factor_messages(is_head, is_and, c, hn, q, r, q1, r1, k1, k0):
    """New factor-to-variable log-odds from the head's message `hn` (`messages_from_rho`)."""
    return messages_from_rho(is_head, is_and, c, log_rho(hn, q, r, q1, r1), q, r, q1, r1, k1, k0)


def messages_from_rho(is_head, is_and, c, lr, q, r, q1, r1, k1, k0):
    """New factor-to-variable log-odds (docs/DESIGN.md section 4).

    With t = e^c (the others decide nothing) and 1 - t, the head's message is
    log g1 - log g0, g1 = q (1-t) + r t, g0 = (1-q)(1-t) + (1-r) t; a body
    edge's is +-log(1 - t + t rho) (+ for AND, - for OR), where
    rho = (h0 (1-r) + h1 r) / (h0 (1-q) + h1 q) depends on the factor and the
    head's variable-to-factor message h only (`log_rho`). Sums of non-negative
    parts in the linear domain, so no cancellation; where a zero coefficient
    would let an underflowing e^c decide the result (g1 = r e^c when q = 0),
    that part is kept as a log instead, so no message turns hard by underflow.
    Three transcendental evaluations per edge: expm1(c), one exp (e^c for
    the head, e^(c + log rho) for a body edge) and one log.

    Args:
        is_head, is_and: bool masks.
        c: log of the product over the other body edges (<= 0, -inf: one is 0).
        lr: log rho of the edge's factor (`log_rho`; NaN: no rho).
        q, r, q1, r1: q, r, 1-q, 1-r of the factor (`kernels.factor_params`).
        k1, k0: log r where q = 0, else log q where r = 0, else 0 (k1); the
            same for 1-q and 1-r (k0).

    Returns:
        Log-odds; NaN where the incoming messages contradict the factor.
    """
    zero = jnp.zeros_like(c)
    one = jnp.ones_like(c)
    big = jnp.full_like(c, 700.0 if c.dtype == jnp.float64 else 80.0)  # e^big is finite
    omt = zero - jnp.expm1(c)  # +0.0 at c = 0 (g1 / -0.0 would be -inf)
    z = c + lr
    e = jnp.exp(jnp.where(is_head, c, jnp.minimum(z, big)))  # head: t = e^c; body: e^z
    # Head: log(g1 / g0), a zero coefficient's part moved into `head_add`.
    g1 = jnp.where(q == 0, one, jnp.where(r == 0, omt, q * omt + r * e))
    g0 = jnp.where(q1 == 0, one, jnp.where(r1 == 0, omt, q1 * omt + r1 * e))
    head_add = k1 - k0 + jnp.where(q == 0, c, jnp.where(q1 == 0, -c, zero))
    # Body edges divide 1 by 1: their e may be huge, a divisor the fast path does not take.
    x = jnp.where(is_head, quotient(jnp.where(is_head, g1, one), jnp.where(is_head, g0, one)), omt + e)
    out = jnp.log(x) + jnp.where(is_head, head_add, zero)
    # log(1 - t + e^z) is z when t = 1, and z to the last bit when e^z is huge; e^z may underflow.
    body = jnp.where((z > big) | (c == 0), z, out)
    return jnp.where(is_head, out, jnp.where(is_and, body, -body))
