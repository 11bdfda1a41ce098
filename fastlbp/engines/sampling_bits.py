"""Bit-packed worlds: unpacking state words and weighted sums over the worlds where a row's bit is set.

World 32 w + i of a batch is bit i of state word w (`fastlbp.engines.sampling`).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

WORD_BITS = 32


def _unpack(xp, words):
    """(P, W) uint32 -> (P, 32 W) bool; world 32 w + i is bit i of word w."""
    shifts = xp.arange(WORD_BITS, dtype=np.uint32)
    return ((words[:, :, None] >> shifts) & np.uint32(1)).astype(bool).reshape(words.shape[0], -1)


_BYTE_BITS = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(np.float64)  # (256, 8) bits of a byte


def _rows_dot(xp, state, weights):
    """(R, K) float64 sums over worlds of each weight column where the row's bit is 1.

    A table per byte of the batch (`weights` summed over the set bits of each of the 256 byte values)
    makes the sum one gather per byte instead of 8 multiply-adds per bit: on this 2-core CPU at 4,096
    rows by 32,768 worlds 0.5 s instead of 2.1 s (bits as float32 into a matmul: 0.39 s, inexact).

    Args:
        state: (R, W) uint32 state words; world 32 w + i is bit i of word w.
        weights: (32 W, K) float64.
    """
    rows, width = state.shape
    k = weights.shape[1]
    if xp is np:
        # numpy: the table by batched matmul and one contiguous 1-D take per column, 6x faster than
        # the einsum and a 2-D gather below (900 rows x 10,016 worlds: 0.06 s instead of 0.40 s).
        table = np.matmul(_BYTE_BITS, weights.reshape(width * 4, 8, k))  # (4 W, 256, K)
        table = np.ascontiguousarray(table.reshape(width * 4 * 256, k).T)  # (K, 4 W 256)
        octets = np.ascontiguousarray(state).view(np.uint8).reshape(rows, width * 4)  # little-endian bytes
        idx = np.arange(width * 4, dtype=np.intp) * 256 + octets
        return np.stack([np.take(table[j], idx).sum(axis=1) for j in range(k)], axis=1)
    table = xp.einsum("gbk,vb->gvk", weights.reshape(width * 4, 8, k), _BYTE_BITS)  # (4 W, 256, K)
    table = table.reshape(width * 4 * 256, k)
    octets = lax.bitcast_convert_type(state, jnp.uint8).reshape(rows, width * 4)
    idx = xp.arange(width * 4) * 256 + octets.astype(np.int32)  # (R, 4 W)
    return table[idx].sum(axis=1)


# A batch's weighted sums are kept on a scale of its own, 2^k (`scale_exponent`), and two batches are
# combined on the larger of their scales (`combine_scaled_sums`). With powers of two every rescaling
# product is exact, so a sum is the same bits whether or not the compiler fuses a product into the
# addition (a fused multiply-add): the same batches combined in the same order give the same bits in
# any program, as a round spread over several devices needs (`fastlbp.engines.sharded_sampling`).
# With e^top as the scale instead, XLA's fusion of one combination into a multiply-add changed a sum
# by 1 ulp.
_LN2 = math.log(2.0)


def scale_exponent(xp, top):
    """The least k with k ln 2 >= `top` (a batch's largest log weight), as a float; -inf for -inf."""
    return xp.where(top > -np.inf, xp.ceil(top / _LN2), -np.inf)


def power_of_two(xp, d):
    """2^d for integer-valued d <= 0, exactly (0 below the normal range, and for -inf)."""
    k = xp.clip(xp.where(d > -np.inf, d, -1023.0), -1023.0, 0.0)
    if xp is np:
        out = np.ldexp(1.0, k.astype(np.int64))
    else:
        out = lax.bitcast_convert_type((k.astype(jnp.int64) + 1023) << 52, jnp.float64)
    return xp.where(k >= -1022.0, out, 0.0)


def combine_scaled_sums(xp, acc, batch):
    """Two batches' sums (s1, s2, w1, w2, scale exponent, positive worlds), each on its scale 2^k, on
    the larger scale (numpy or jax)."""
    s1, s2, w1, w2, m, pos = acc
    t1, t2, v1, v2, mb, pb = batch
    top = xp.maximum(m, mb)
    ref = xp.where(top > -np.inf, top, 0.0)
    a = power_of_two(xp, m - ref)
    b = power_of_two(xp, mb - ref)
    return (s1 * a + t1 * b, s2 * (a * a) + t2 * (b * b), w1 * a + v1 * b, w2 * (a * a) + v2 * (b * b),
            top, pos + pb)
