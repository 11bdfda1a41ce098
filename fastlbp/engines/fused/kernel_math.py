"""The fused kernels' forms of the message equations: `fastlbp.core.equations` on packed operands.

The per-slot math is `fastlbp.core.equations`' (called inside the kernels on
a program's values); here only what the fused layout packs differently:

* A variable's total is its finite log-odds sum (float) and a count of +inf
  and -inf terms (hard evidence), each saturated at 2 and packed in one int32
  (`pos + 4 * neg`, stored as the bits of a float beside the sum:
  `count_bits`): leave-one-out only needs to know whether another infinite
  term remains.
* A factor's constants arrive as q, r and k1 - k0 (`fused.loop.kernel_params`);
  the kernel forms 1 - q and 1 - r (`row_params`), three loads per slot less.
* The body terms and the head's log rho share two transcendental evaluations
  (`equations.body_term_and_rho`, the equations' one twin).
* A wide row's chunks cannot see their factor's sum S, so there the row's
  smallest term (the only one that can dominate, `equations.is_dominant`)
  takes the sum of the others directly.

tests/test_equations_once.py holds these forms to the plain equations on
special and random values. Shapes below are a program's: (n,) for its flat
slots, or the rows' shape.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fastlbp.core import equations


def var_to_factor(m, fin, cnt):
    """`equations.variable_message` from a packed total.

    Args:
        m: (n,) the edge's factor-to-variable message.
        fin: (n,) its variable's finite sum; cnt: (n,) int32 its packed infinity counts.
    """
    return equations.variable_message(fin, cnt & 3, cnt >> 2, m)


def new_messages(tf, zero, is_min, S, Z, O, lr, is_head, is_and, *params):
    """New factor-to-variable messages (n,) from the slots' terms and their factor's sums.

    Args:
        tf, zero: (n,) the slot's finite body term and whether it is a zero (`equations.body_term`).
        is_min: (n,) bool, the slot's others are `O` (its factor's dominant term, or a wide
            row's smallest).
        S, Z, O, lr: (n,) the factor's sum of finite terms, its count of zeros (int32), its sum
            without the dominant term and its head's log rho, on each of its slots.
        is_head, is_and: (n,) bool.
        params: `row_params` of the slot's factor.
    """
    c = equations.others_product(tf, zero.astype(jnp.int32), S, Z, O, is_min)
    return equations.messages_from_rho(is_head, is_and, c, lr, *params)


def damped(new, m, valid, damping):
    """`equations.damp` of `new` (n,) toward the old `m`; 0 on padding."""
    out = equations.damp(new, m, damping)
    return jnp.where(valid, out, jnp.zeros_like(out))


def row_params(refs, row):
    """(q, r, 1-q, 1-r, k1 - k0, 0) of the factor rows `row` (`equations.messages_from_rho`'s).

    1 - q here equals `equations.factor_params`' q1 in float64 (both are 1 - p of the float64
    parameter, and a q raised to `logspace.term_floor` leaves 1 - q = 1); in float32 it is
    formed from the rounded q, so a probability within 2^-25 of 1 acts as 1 (hard) here.
    """
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
    ev_fin, ev_pos, ev_neg = equations.split(ev, jnp.int32)
    fin, pos, neg = fin + ev_fin, pos + ev_pos, neg + ev_neg
    lo = equations.log_odds(fin, pos, neg)
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


__all__ = ["var_to_factor", "new_messages", "damped", "row_params", "var_totals", "count_bits", "count_of"]
