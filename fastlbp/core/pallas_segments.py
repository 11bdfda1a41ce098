"""Pallas (Triton) kernels for the GPU: sorted segment sums without contention.

XLA lowers `segment_sum` to a scatter with one atomic add per element; with
sorted, heavy-tailed segments (a tuple used by thousands of clauses) the
atomics on one address serialise. Here each program takes a block of B
consecutive elements (optionally gathered through an index array), forms
every segment's partial sum inside the block with a (B, B) same-segment mask,
and the first element of each segment in the block adds that partial with one
atomic. A segment receives one atomic per block it touches, whatever its
size, and a partial never mixes values of different segments: a factor whose
terms are all tiny keeps its tiny sum exactly, whatever sits next to it
(a block prefix sum would cancel it against its neighbours').

Sums are formed in float64 whatever the message precision; counts of
infinite terms are carried as exact small integers in float64 columns. All
columns go to one output buffer (one aliased operand).

On the CPU (tests) the same kernel runs with `interpret=True`. The
interpreter's atomic add keeps one of several equal indices and has no mask,
so there lanes without a contribution add 0 to a per-column dummy slot and
each segment contributes from one lane only (unique indices otherwise).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

BLOCK = 32


def _kernel(num_out: int, split_infinite: bool, gather: bool, block: int, stride: int, masked: bool,
            *refs):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    segp_ref = refs[0]
    n_src = 1 if split_infinite else num_out
    src_refs = refs[1 : 1 + n_src]
    idx_ref = refs[1 + n_src] if gather else None
    out_ref = refs[-1]

    base = pl.program_id(0) * block
    seg = segp_ref[pl.ds(base + 1, block)]
    prev = segp_ref[pl.ds(base, block)]
    lane = jax.lax.broadcasted_iota(jnp.int32, (block,), 0)
    first = (lane == 0) | (seg != prev)
    same = seg[:, None] == seg[None, :]

    if gather:
        idx = idx_ref[pl.ds(base, block)]
        values = [r[idx] for r in src_refs]
    else:
        values = [r[pl.ds(base, block)] for r in src_refs]
    if split_infinite:
        x = values[0]
        columns = [jnp.where(jnp.isfinite(x), x, 0), (x == jnp.inf), (x == -jnp.inf)]
    else:
        columns = values
    for c, value in enumerate(columns):
        value = value.astype(jnp.float64)
        partial = jnp.sum(jnp.where(same, value[None, :], 0.0), axis=1)
        target = seg + c * stride
        if masked:
            plgpu.atomic_add(out_ref, target, partial, mask=first)
        else:
            dummy = jnp.full((block,), c * stride + stride - 1, jnp.int32)
            plgpu.atomic_add(out_ref, jnp.where(first, target, dummy), jnp.where(first, partial, 0.0))


@functools.partial(jax.jit, static_argnames=("num_segments", "split_infinite", "interpret"))
def segment_sum(columns, segment_ids, *, num_segments: int, split_infinite: bool = False,
                gather_index=None, interpret: bool = False):
    """Sums sorted segments with the Pallas kernel.

    Args:
        columns: tuple of arrays summed per segment; with `split_infinite` a
            single log-odds array that is split into [finite part, #+inf,
            #-inf]. Shape (N,), or (M,) when `gather_index` is given.
        segment_ids: (N,) int32, sorted, in [0, num_segments).
        num_segments: S.
        gather_index: optional (N,) int32: element i is columns[.][gather_index[i]].

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
    stride = num_segments + 1  # one dummy slot per column
    seg = jnp.concatenate([segment_ids.astype(jnp.int32), jnp.full((pad,), num_segments, jnp.int32)])
    segp = jnp.concatenate([jnp.full((1,), -1, jnp.int32), seg])
    gather = gather_index is not None
    if gather:
        srcs = list(columns)
        index = jnp.concatenate([gather_index.astype(jnp.int32), jnp.zeros((pad,), jnp.int32)])
        operands = [segp, *srcs, index]
        probe = srcs[0][0]
    else:
        srcs = [jnp.concatenate([c, jnp.zeros((pad,), c.dtype)]) for c in columns]
        operands = [segp, *srcs]
        probe = srcs[0][0]
    # The kernel adds into its output in place, so each call needs a fresh
    # zero buffer. One that depends only on loop-invariant data (a constant,
    # the graph's segment ids) is hoisted out of a while loop and then
    # accumulates across iterations, so the zeros are derived from this
    # call's values: min(|v|, 0) is 0 for every number (NaN mapped to 0 too).
    v0 = probe.astype(jnp.float64)
    fresh = jnp.where(jnp.isnan(v0), 0.0, jnp.minimum(jnp.abs(v0), 0.0))
    zeros = jnp.full((num_out * stride,), fresh)
    kernel = functools.partial(_kernel, num_out, split_infinite, gather, block, stride, not interpret)
    out = pl.pallas_call(
        kernel,
        grid=(padded // block,),
        out_shape=jax.ShapeDtypeStruct((num_out * stride,), jnp.float64),
        input_output_aliases={len(operands): 0},
        interpret=interpret,
    )(*operands, zeros)
    return out.reshape(num_out, stride)[:, :num_segments].T
