"""The per-slot math of the fused kernels (jnp on a program's values; runs inside the kernels).

Per factor, the body terms are log m(1) (AND) or log m(0) (OR) of the
variable-to-factor messages. An edge's "others" sum is S - own term, except for
a dominant term (below S/2; at most one), whose others are summed directly, so
no tiny sum is lost to cancellation (see `kernels.factor_aggregates`). A wide
row's chunks cannot see S, so there the row's smallest term (the only one that
can dominate) plays that part. The messages are `logspace.factor_messages`, as
in `fastlbp.core.equations`.

A variable's total is its finite log-odds sum (float) and a count of +inf and
-inf terms (hard evidence), each saturated at 2 and packed in one int32
(`pos + 4 * neg`, stored as the bits of a float beside the sum: `count_bits`):
leave-one-out only needs to know whether another infinite term remains.

Shapes below are a program's: (n,) for its flat slots, or the rows' shape.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fastlbp.core.logspace import floor_term, log_sigmoid, messages_from_rho, signed, terms_and_rho


def var_to_factor(m, fin, cnt):
    """Variable-to-factor log-odds: the variable's total less the edge's own message.

    Args:
        m: (n,) the edge's factor-to-variable message.
        fin: (n,) its variable's finite sum; cnt: (n,) int32 its packed infinity counts.
    """
    own_pos = (m == jnp.inf).astype(jnp.int32)
    own_neg = (m == -jnp.inf).astype(jnp.int32)
    pos = (cnt & 3) - own_pos > 0
    neg = (cnt >> 2) - own_neg > 0
    finite_own = jnp.where((own_pos + own_neg) > 0, jnp.zeros_like(m), m)
    soft = fin - finite_own
    return signed(pos, neg, soft)


def _split_zero(t, body):
    """A body term's finite part (0 off the body) and whether it is -inf (a zero)."""
    t = jnp.where(body, t, jnp.zeros_like(t))
    zero = t == -jnp.inf
    return jnp.where(zero, jnp.zeros_like(t), t), zero


def body_terms(n, body, is_and):
    """Finite part of the body term and whether it is -inf (a zero)."""
    x = jnp.where(is_and, n, -n)
    return _split_zero(floor_term(log_sigmoid(x), x), body)  # soft stays soft


def body_terms_and_rho(n, is_head, body, is_and, q, r, q1, r1):
    """`body_terms` on body slots and the head's log rho (`logspace.terms_and_rho`: shared exp, log1p)."""
    a = jnp.where(is_head | is_and, n, -n)
    t, lr = terms_and_rho(a, is_head, q, r, q1, r1)
    return (*_split_zero(floor_term(t, a), body), lr)  # soft stays soft


def new_messages(tf, zero, is_min, S, Z, O, lr, is_head, is_and, *params):
    """New factor-to-variable messages (n,) from the slots' terms and their factor's sums.

    Args:
        tf, zero: (n,) the slot's finite body term and whether it is a zero (`body_terms`).
        is_min: (n,) bool, the slot holds its factor's dominant term (its others are `O`).
        S, Z, O, lr: (n,) the factor's sum of finite terms, its count of zeros, its sum
            without the dominant term and its head's log rho, on each of its slots.
        is_head, is_and: (n,) bool.
        params: `row_params` of the slot's factor.
    """
    others_zero = Z - zero.astype(jnp.int32)
    others = jnp.where(is_min, O, S - tf)
    c = jnp.where(others_zero > 0, jnp.full_like(others, -jnp.inf), others)
    return messages_from_rho(is_head, is_and, c, lr, *params)


def damped(new, m, valid, damping):
    """`new` (n,) damped toward the old `m` in the log domain (hard messages undamped); padding 0."""
    mixed = (1 - damping) * new + damping * m
    out = jnp.where(jnp.isfinite(new) & jnp.isfinite(m), mixed, new)
    return jnp.where(valid, out, jnp.zeros_like(out))


def row_params(refs, row):
    """(q, r, 1-q, 1-r, k1 - k0, 0) of the factor rows `row` (`logspace.messages_from_rho`'s)."""
    q, r, k = (ref[row] for ref in refs)
    return q, r, 1 - q, 1 - r, k, jnp.zeros_like(k)


def var_totals(fin, pos, neg, ev):
    """A variable's total and marginal from its messages' sums and its evidence.

    Args:
        fin: (r,) finite sums; pos, neg: (r,) int32 counts of +inf and -inf messages;
        ev: (r,) evidence log-odds.

    Returns:
        (finite sum with evidence, packed counts `pos + 4 neg` (each at most 2), the marginal's
        log-odds).
    """
    fin = fin + jnp.where(jnp.isfinite(ev), ev, jnp.zeros_like(ev))
    pos = pos + (ev == jnp.inf).astype(jnp.int32)
    neg = neg + (ev == -jnp.inf).astype(jnp.int32)
    lo = signed(pos > 0, neg > 0, fin)
    cnt = jnp.minimum(pos, 2) + 4 * jnp.minimum(neg, 2)
    return fin, cnt, lo


def count_bits(count, dtype):
    """int32 counts as floats of `dtype` holding their bits (the totals' second field), so the
    factor kernel reads them back with a bitcast, not a float-to-int conversion with its
    range and NaN checks."""
    itype = jnp.int64 if jnp.dtype(dtype).itemsize == 8 else jnp.int32
    return jax.lax.bitcast_convert_type(count.astype(itype), dtype)


def count_of(bits):
    """The counts `count_bits` stored, as int32."""
    itype = jnp.int64 if bits.dtype.itemsize == 8 else jnp.int32
    return jax.lax.bitcast_convert_type(bits, itype).astype(jnp.int32)


__all__ = ["var_to_factor", "body_terms", "body_terms_and_rho", "new_messages", "damped", "row_params",
           "var_totals", "count_bits", "count_of"]
