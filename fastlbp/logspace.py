"""Message math written for Pallas kernels and plain jnp alike (one implementation for every engine).

The Triton lowering cannot splat a Python infinity into a tensor, so
constants are built with `full_like`.
"""

from __future__ import annotations

import jax.numpy as jnp


def log_sigmoid(x):
    """log(1 / (1 + e^-x)), exact at +-inf."""
    return jnp.minimum(x, 0) - jnp.log1p(jnp.exp(-jnp.abs(x)))


def finite_part(x):
    """x where finite, else 0."""
    return jnp.where(jnp.isfinite(x), x, jnp.zeros_like(x))


def signed(pos, neg, finite):
    """+inf where `pos`, -inf where `neg`, NaN where both (a contradiction), else `finite`."""
    inf = jnp.full_like(finite, jnp.inf)
    ninf = jnp.full_like(finite, -jnp.inf)
    nan = jnp.full_like(finite, jnp.nan)
    return jnp.where(pos, jnp.where(neg, nan, inf), jnp.where(neg, ninf, finite))


def factor_messages(is_head, is_and, c, hn, q, r, q1, r1, k1, k0):
    """New factor-to-variable log-odds (DESIGN.md section 4).

    With t = e^c (the others decide nothing) and 1 - t, the head's message is
    log g1 - log g0, g1 = q (1-t) + r t, g0 = (1-q)(1-t) + (1-r) t; a body
    edge's is +-log(1 - t + t rho) (+ for AND, - for OR), where
    rho = (h0 (1-r) + h1 r) / (h0 (1-q) + h1 q) depends on the factor and the
    head's variable-to-factor message h only. Sums of non-negative parts in
    the linear domain, so no cancellation; where a zero coefficient would let
    an underflowing e^c or e^-|hn| decide the result (g1 = r e^c when q = 0),
    that part is kept as a log instead, so no message turns hard by underflow.
    Eight transcendental evaluations per edge (the log-space form took
    eighteen).

    Args:
        is_head, is_and: bool masks.
        c: log of the product over the other body edges (<= 0, -inf: one is 0).
        hn: log-odds of the head's variable-to-factor message (+-inf: hard).
        q, r, q1, r1: q, r, 1-q, 1-r of the factor (`kernels.factor_params`).
        k1, k0: log r where q = 0, else log q where r = 0, else 0 (k1); the
            same for 1-q and 1-r (k0).

    Returns:
        Log-odds; NaN where the incoming messages contradict the factor.
    """
    zero = jnp.zeros_like(c)
    one = jnp.ones_like(c)
    nan = jnp.full_like(c, jnp.nan)
    big = jnp.full_like(c, 700.0 if c.dtype == jnp.float64 else 80.0)  # e^big is finite
    t = jnp.exp(c)
    omt = zero - jnp.expm1(c)  # +0.0 at c = 0 (g1 / -0.0 would be -inf)
    # Head: log(g1 / g0), a zero coefficient's part moved into `head_add`.
    g1 = jnp.where(q == 0, one, jnp.where(r == 0, omt, q * omt + r * t))
    g0 = jnp.where(q1 == 0, one, jnp.where(r1 == 0, omt, q1 * omt + r1 * t))
    head_add = k1 - k0 + jnp.where(q == 0, c, jnp.where(q1 == 0, -c, zero))
    # Body: log rho, both parts divided by max(h0, h1); u = min(h0, h1) / max(h0, h1).
    ax = jnp.abs(hn)
    u = jnp.exp(-ax)
    up = hn >= 0
    b_num = jnp.where(up, r, r1)
    b_den = jnp.where(up, q, q1)
    # b = 0 leaves the part u exactly (its coefficient is then 1): log = -|hn|.
    num_u = b_num == 0
    den_u = b_den == 0
    num = jnp.where(num_u, one, jnp.where(up, r1, r) * u + b_num)
    den = jnp.where(den_u, one, jnp.where(up, q1, q) * u + b_den)
    log_rho = jnp.log(num / den) + jnp.where(num_u == den_u, zero, jnp.where(num_u, -ax, ax))
    # Both parts zero (a hard head the factor rules out) or an undefined head: no rho.
    log_rho = jnp.where(jnp.isnan(hn) | (num_u & den_u & (ax == jnp.inf)), nan, log_rho)
    z = c + log_rho
    x = jnp.where(is_head, g1 / g0, omt + jnp.exp(jnp.minimum(z, big)))
    out = jnp.log(x) + jnp.where(is_head, head_add, zero)
    # log(1 - t + e^z) is z when t = 1, and z to the last bit when e^z is huge; e^z may underflow.
    body = jnp.where((z > big) | (c == 0), z, out)
    return jnp.where(is_head, out, jnp.where(is_and, body, -body))
