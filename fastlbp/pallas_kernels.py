"""Pallas (Triton) kernels for the GPU: sorted segment sums without contention.

XLA lowers `segment_sum` to a scatter with one atomic add per element; with
sorted, heavy-tailed segments (a tuple used by thousands of clauses) the
atomics on one address serialise. This kernel instead gives each program a
block of B consecutive elements, takes a float64 prefix sum inside the block,
and adds one value per segment boundary: at a segment's last element in the
block +prefix, at its first element -(prefix before it). A segment therefore
receives at most two atomic adds per block it touches, whatever its size.

Sums are formed in float64 whatever the message precision (the block prefix
then loses at most ~B ulps of the block's magnitude); counts of infinite
terms are carried as exact small integers in float64 columns.

On the CPU (tests) the same kernel runs with `interpret=True`. In interpret
mode an atomic add with repeated indices keeps only one of them, so the first
and last contributions go in two separate adds, each with unique indices
(lanes without a contribution add 0 to a dummy row).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

BLOCK = 256


def _kernel(num_out: int, split_infinite: bool, block: int, num_segments: int, masked: bool, *refs):
    segp_ref = refs[0]
    x_refs = refs[1 : 1 + (1 if split_infinite else num_out)]
    out_refs = refs[len(refs) - num_out :]
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    base = pl.program_id(0) * block
    seg = segp_ref[pl.ds(base + 1, block)]
    prev = segp_ref[pl.ds(base, block)]
    nxt = segp_ref[pl.ds(base + 2, block)]
    lane = jax.lax.broadcasted_iota(jnp.int32, (block,), 0)
    first = (lane == 0) | (seg != prev)
    last = (lane == block - 1) | (seg != nxt)
    dummy = jnp.full((block,), num_segments, jnp.int32)
    idx_first = jnp.where(first, seg, dummy)
    idx_last = jnp.where(last, seg, dummy)

    if split_infinite:
        x = x_refs[0][pl.ds(base, block)]
        columns = [
            jnp.where(jnp.isfinite(x), x, 0).astype(jnp.float64),
            (x == jnp.inf).astype(jnp.float64),
            (x == -jnp.inf).astype(jnp.float64),
        ]
    else:
        columns = [r[pl.ds(base, block)].astype(jnp.float64) for r in x_refs]
    zero = jnp.zeros((block,), jnp.float64)
    for value, out_ref in zip(columns, out_refs, strict=True):
        prefix = jnp.cumsum(value)
        if masked:
            # Lanes without a contribution issue no atomic at all (no contention on a dummy row).
            plgpu.atomic_add(out_ref, seg, prefix, mask=last)
            plgpu.atomic_add(out_ref, seg, value - prefix, mask=first)
        else:
            plgpu.atomic_add(out_ref, idx_last, jnp.where(last, prefix, zero))
            plgpu.atomic_add(out_ref, idx_first, jnp.where(first, value - prefix, zero))


@functools.partial(jax.jit, static_argnames=("num_segments", "split_infinite", "interpret"))
def segment_sum(columns, segment_ids, *, num_segments: int, split_infinite: bool = False,
                interpret: bool = False):
    """Sums sorted segments with the Pallas kernel.

    Args:
        columns: tuple of (N,) arrays summed per segment; with
            `split_infinite` a single (N,) log-odds array that is split into
            [finite part, #+inf, #-inf].
        segment_ids: (N,) int32, sorted, in [0, num_segments).
        num_segments: S.

    Returns:
        (S, k) float64 sums, k = len(columns) (3 with `split_infinite`).
    """
    from jax.experimental import pallas as pl

    columns = tuple(columns)
    n = segment_ids.shape[0]
    num_out = 3 if split_infinite else len(columns)
    block = BLOCK
    padded = max(block, -(-n // block) * block)
    pad = padded - n
    seg = jnp.concatenate([segment_ids.astype(jnp.int32), jnp.full((pad,), num_segments, jnp.int32)])
    segp = jnp.concatenate([jnp.full((1,), -1, jnp.int32), seg, jnp.full((1,), -1, jnp.int32)])
    xs = [jnp.concatenate([c, jnp.zeros((pad,), c.dtype)]) for c in columns]
    # The kernel adds into its outputs in place, so each call needs fresh
    # zeros. A zero buffer that depends only on loop-invariant data (a
    # constant, the graph's segment ids) is hoisted out of a while loop and
    # then accumulates across iterations (seen on the H200), so each buffer is
    # derived from this call's values: min(|v|, 0) is 0 for every number, and
    # a NaN value (contradiction) is mapped to 0 as well.
    v0 = xs[0][0].astype(jnp.float64)
    fresh = jnp.where(jnp.isnan(v0), 0.0, jnp.minimum(jnp.abs(v0), 0.0))
    zeros = [jnp.full((num_segments + 1,), fresh + jnp.minimum(seg[k], 0).astype(jnp.float64))
             for k in range(num_out)]
    n_in = 1 + len(xs)
    kernel = functools.partial(_kernel, num_out, split_infinite, block, num_segments, not interpret)
    outs = pl.pallas_call(
        kernel,
        grid=(padded // block,),
        out_shape=[jax.ShapeDtypeStruct((num_segments + 1,), jnp.float64)] * num_out,
        input_output_aliases={n_in + k: k for k in range(num_out)},
        interpret=interpret,
    )(segp, *xs, *zeros)
    return jnp.stack([o[:num_segments] for o in outs], axis=-1)
