"""Log-space helpers written for Pallas kernels (and plain jnp).

The Triton lowering cannot splat a Python infinity into a tensor, so
constants are built with `full_like`; `logaddexp` assumes its arguments are
logs of probabilities (never +inf), so -inf + -inf stays -inf without NaN.
"""

from __future__ import annotations

import jax.numpy as jnp

LOG_HALF = -0.6931471805599453


def log_sigmoid(x):
    """log(1 / (1 + e^-x)), exact at +-inf."""
    return jnp.minimum(x, 0) - jnp.log1p(jnp.exp(-jnp.abs(x)))


def logaddexp(a, b):
    """log(e^a + e^b) for a, b <= 0 (or -inf)."""
    hi = jnp.maximum(a, b)
    return jnp.where(hi == -jnp.inf, hi, hi + jnp.log1p(jnp.exp(-jnp.abs(a - b))))


def log1mexp(c):
    """log(1 - e^c) for c <= 0, accurate at both ends (Maechler 2012)."""
    return jnp.where(c > LOG_HALF, jnp.log(-jnp.expm1(c)), jnp.log1p(-jnp.exp(c)))


def finite_part(x):
    """x where finite, else 0."""
    return jnp.where(jnp.isfinite(x), x, jnp.zeros_like(x))


def signed(pos, neg, finite):
    """+inf where `pos`, -inf where `neg`, NaN where both (a contradiction), else `finite`."""
    inf = jnp.full_like(finite, jnp.inf)
    ninf = jnp.full_like(finite, -jnp.inf)
    nan = jnp.full_like(finite, jnp.nan)
    return jnp.where(pos, jnp.where(neg, nan, inf), jnp.where(neg, ninf, finite))


def factor_messages(is_head, is_and, c, h1, h0, lq, l1mq, lr, l1mr):
    """New factor-to-variable log-odds (DESIGN.md section 4 in log space, as `kernels.factor_messages`).

    Args:
        is_head, is_and: bool masks; c: log of the product over the other body
            edges; h1, h0: log m(1), log m(0) of the head's variable-to-factor
            message; lq .. l1mr: log q, log(1-q), log r, log(1-r) of the factor.
    """
    l1c = log1mexp(c)
    g1 = logaddexp(lq + l1c, lr + c)
    g0 = logaddexp(l1mq + l1c, l1mr + c)
    k_fixed = logaddexp(h0 + l1mq, h1 + lq)
    k_free = logaddexp(h0 + g0, h1 + g1)
    return jnp.where(is_head, g1 - g0, jnp.where(is_and, k_free - k_fixed, k_fixed - k_free))
