"""Exact sums of sorted segments as a few dense gathers and row sums (no atomics).

XLA lowers `segment_sum` to a scatter-add with one atomic per element; on a
GPU that runs at the atomic units' rate, whatever the memory bandwidth. Here
every segment is cut into chunks of W consecutive elements; level 1 gathers
the chunks into a dense (chunks, W) matrix (short rows padded with a zero)
and sums the rows. A segment of one chunk is done; the chunk sums of longer
segments are segments again, summed the same way at the next level, until
every segment is one value. A heavy-tailed graph (segments of 1 to 10^5
elements) needs a handful of levels; every level but the first is small.

Each sum adds only the segment's own values, so no segment is cancelled
against a neighbour's (unlike a prefix-sum difference), and the result does
not depend on the order of atomics (it is deterministic).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

FIRST_WIDTH = 4  # most segments (variables, factors) have 1-4 elements
WIDTH = 16  # chunks of chunks (64 measured slower on the H200: padding)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SegmentPlan:
    """How to sum S sorted segments of a source array.

    Attributes:
        levels: level i is an (C_i, W_i) int32 matrix of indices into the
            previous level's output (level 0: the source) extended by one
            zero at the end (index = its length): row c sums to chunk c.
        final: (S,) int32 index of each segment's sum in the concatenation
            of all levels' outputs, extended by one zero (empty segments).
    """

    levels: tuple[jax.Array, ...]
    final: jax.Array


def build(offsets: np.ndarray, positions: np.ndarray | None, source_size: int,
          first_width: int | None = None, width: int | None = None) -> SegmentPlan:
    """Plans the sums of segments `offsets[s]:offsets[s+1]` of a slot array.

    Args:
        offsets: (S+1,) CSR offsets of the segments over N slots.
        positions: (N,) source index of each slot, or None (slot j = source j).
        source_size: length M of the source array.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    num_segments = offsets.shape[0] - 1
    lengths = np.diff(offsets)
    starts = offsets[:-1]
    # Slot j of a level reads pos[j]; None: the slot itself (level 0 without positions, and every
    # later level, whose slots are the previous level's outputs).
    pos = None if positions is None else np.asarray(positions, dtype=np.int64)
    sentinel = source_size
    width = width or WIDTH
    w = first_width or FIRST_WIDTH

    final = np.full(num_segments, -1, dtype=np.int64)
    active = np.arange(num_segments)  # segments not resolved yet, their data at this level
    levels = []
    level_base = 0  # index of this level's first output in the concatenation
    while active.size:
        n_chunks = -(-lengths // w)
        total = int(n_chunks.sum())
        first_chunk = np.cumsum(n_chunks) - n_chunks
        chunk_seg = np.repeat(np.arange(active.size), n_chunks)
        # Per chunk its first slot and its segment's end; one (chunks, w) matrix of slots (faster than
        # four such matrices).
        chunk_start = starts[chunk_seg] + (np.arange(total) - first_chunk[chunk_seg]) * w
        slot = chunk_start[:, None] + np.arange(w)
        valid = slot < (starts + lengths)[chunk_seg][:, None]
        if pos is None:
            idx = np.where(valid, slot, sentinel)
        else:
            np.minimum(slot, max(pos.shape[0] - 1, 0), out=slot)
            idx = np.where(valid, pos[slot] if pos.size else 0, sentinel)
        levels.append(idx.astype(np.int32))

        one = n_chunks == 1
        final[active[one]] = level_base + first_chunk[one]
        # Segments of several chunks continue with their chunk sums as elements.
        more = n_chunks > 1
        active = active[more]
        lengths = n_chunks[more]
        starts = first_chunk[more]
        pos = None
        sentinel = total
        level_base += total
        w = width
    final[final < 0] = level_base  # empty segments: the trailing zero
    return SegmentPlan(levels=tuple(levels), final=final.astype(np.int32))


def segment_sum(plan: SegmentPlan, values: jax.Array, transform=None) -> jax.Array:
    """Sums the planned segments of `values`.

    Args:
        plan: from `build`.
        values: (M,) source array (any float dtype).
        transform: optional elementwise map applied to the gathered values
            before summing, returning (..., k) columns (e.g. splitting
            log-odds into finite part and infinity counts); fused with the
            gather.

    Returns:
        (S,) sums, or (S, k) with a transform.
    """
    outputs = []
    current = values
    for i, idx in enumerate(plan.levels):
        # Padding indices equal the source length: out of bounds, read as 0
        # (no padded copy of the source).
        rows = jnp.take(current, idx, axis=0, mode="fill", fill_value=0)
        if i == 0 and transform is not None:
            rows = transform(rows)
        current = rows.sum(axis=1)
        outputs.append(current)
    outputs.append(jnp.zeros((1,) + current.shape[1:], current.dtype))
    return jnp.concatenate(outputs)[plan.final]
