"""The labels' weights and the weighted row sums of the device sampler (`sampling_program`).

    log_w = _label_log_w(data, bits_of, n_worlds, capacity)       # (N,) the labels' log weight per world
    e1, e2 = _deferred_sums(data, bits_of, omega, capacity)       # the deferred parents' expectations
    s1, s2 = _weighted_sums(state, omega, omega2)                 # (R,) sums over the worlds per row

`importance.weigh` on the device, over the label slots in use only: loops of dynamic trip count over
chunks of `SLOT_CHUNK` slots and `ENTRY_CHUNK` entries, so a label set costs in proportion to its size,
never to the program's fixed capacity. `data` is `sampling_program.RoundData.astuple()`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from fastlbp.engines import importance
from fastlbp.engines.sampling_bits import _rows_dot

# Label slots and parent entries the weights visit per loop trip: the work is in chunks of these, so a
# label set costs in proportion to its size, never to the capacity.
SLOT_CHUNK = 8
ENTRY_CHUNK = 32


# A log probability of 0 as a finite number: one-hot sums multiply it by 0 (-inf would give NaN), and
# exp of it, or of a sum of up to 10^8 of it, is 0 as exp(-inf) is.
_LOG_ZERO = -1e300
_LOG_ZERO_SUMS = -5e299  # a sum holding at least one `_LOG_ZERO`: below this


def _entry_logs(p):
    """(log p, log(1 - p)) of (E,) probabilities, log 0 as `_LOG_ZERO`."""
    with np.errstate(divide="ignore"):
        return (jnp.maximum(jnp.log(p), _LOG_ZERO), jnp.maximum(jnp.log1p(-p), _LOG_ZERO))


def _one_hot(seg, chunk_slots: int):
    """(S, E) float64 one-hot of each entry's slot in the chunk (a row of zeros for entries out of it):
    sums over a chunk's entries by slot are one small matrix product, not a scatter."""
    return (jnp.arange(chunk_slots, dtype=seg.dtype)[:, None] == seg[None, :]).astype(jnp.float64)


def _slot_terms(data, bits_of, e0, e_end, s0, chunk_slots: int, n_worlds: int):
    """Per-slot sums over one slot chunk's entries [e0, e_end): (fixed parents that hold, fixed parents
    that fail, log z, log y), each (S, N) (`importance.weigh`'s F and the deferred parents' products:
    z = prod (1 - q), y = prod q, with q = p1 or p2 of a deferred parent by its condition)."""
    (_, _, _, _, _, _, _, entry_slot, entry_row, entry_deferred, p1, p2, *_rest) = data
    zeros = jnp.zeros((chunk_slots, n_worlds))

    def trip(k, acc):
        holds, fails, log_z, log_y = acc
        idx = e0 + k * ENTRY_CHUNK + jnp.arange(ENTRY_CHUNK, dtype=jnp.int32)
        ok = idx < e_end
        safe = jnp.where(ok, idx, 0)
        hot = _one_hot(jnp.where(ok, entry_slot[safe] - s0, chunk_slots), chunk_slots)  # (S, E)
        bits = bits_of(entry_row[safe])  # (E, N) bool
        deferred = entry_deferred[safe] & ok
        lq1, l1q1 = _entry_logs(p1[safe])
        lq2, l1q2 = _entry_logs(p2[safe])
        d = deferred[:, None]
        fixed = (~deferred & ok)[:, None]
        log_q = jnp.where(d, jnp.where(bits, lq1[:, None], lq2[:, None]), 0.0)
        log_1mq = jnp.where(d, jnp.where(bits, l1q1[:, None], l1q2[:, None]), 0.0)
        f = jnp.float64
        return (holds + hot @ (fixed & bits).astype(f), fails + hot @ (fixed & ~bits).astype(f),
                log_z + hot @ log_1mq, log_y + hot @ log_q)

    trips = (e_end - e0 + ENTRY_CHUNK - 1) // ENTRY_CHUNK
    holds, fails, log_z, log_y = lax.fori_loop(0, trips, trip, (zeros, zeros, zeros, zeros))
    # Sums of `_LOG_ZERO` back to -inf: a product with a factor 0 is 0.
    return (holds, fails, jnp.where(log_z < _LOG_ZERO_SUMS, -np.inf, log_z),
            jnp.where(log_y < _LOG_ZERO_SUMS, -np.inf, log_y))


def _slot_weights(data, terms, s0, chunk_slots: int):
    """(log P(t = label | world) (S, N), log P(cond), is_or, any, all, log y) of one slot chunk."""
    (_, slots, _, slot_and, log_pa, log_pb, *_rest) = data
    holds, fails, log_z, log_y = terms
    sl = s0 + jnp.arange(chunk_slots, dtype=jnp.int32)
    valid = (sl < slots)[:, None]
    is_or = ~lax.dynamic_slice_in_dim(slot_and, s0, chunk_slots)[:, None]
    pa = lax.dynamic_slice_in_dim(log_pa, s0, chunk_slots)[:, None]
    pb = lax.dynamic_slice_in_dim(log_pb, s0, chunk_slots)[:, None]
    any_fixed, all_fixed = holds > 0.5, fails < 0.5
    log_pc = jnp.where(is_or, jnp.where(any_fixed, 0.0, importance._log1mexp(jnp, log_z)),
                       jnp.where(all_fixed, log_y, -np.inf))
    log_1mpc = jnp.where(is_or, jnp.where(any_fixed, -np.inf, log_z),
                         jnp.where(all_fixed, importance._log1mexp(jnp, log_y), 0.0))
    on = log_pc + pa
    log_ws = jnp.logaddexp(on, log_1mpc + pb)
    log_ws = jnp.where(valid, log_ws, 0.0)
    return log_ws, on, is_or, any_fixed, all_fixed, log_z, log_y


def _label_log_w(data, bits_of, n_worlds: int, cap):
    """(N,) log weight of the labels in each world: a loop over the slot chunks in use."""
    (_, slots, _, _, _, _, offsets, *_rest) = data
    offsets_pad = jnp.concatenate([offsets, jnp.full(SLOT_CHUNK, offsets[-1], offsets.dtype)])

    def chunk(j, log_w):
        s0 = j * SLOT_CHUNK
        e0, e_end = offsets_pad[s0], offsets_pad[s0 + SLOT_CHUNK]
        terms = _slot_terms(data, bits_of, e0, e_end, s0, SLOT_CHUNK, n_worlds)
        log_ws = _slot_weights(data, terms, s0, SLOT_CHUNK)[0]
        return log_w + log_ws.sum(axis=0)

    trips = (slots + SLOT_CHUNK - 1) // SLOT_CHUNK
    return lax.fori_loop(0, trips, chunk, jnp.zeros(n_worlds))


def _deferred_sums(data, bits_of, omega, cap):
    n_worlds = omega.shape[0]
    """(P,) E[parent] sums over worlds weighted by omega and omega^2 for the deferred entries in use."""
    (_, slots, _, _, _, _, offsets, entry_slot, entry_row, entry_deferred, p1, p2, *_rest) = data
    offsets_pad = jnp.concatenate([offsets, jnp.full(SLOT_CHUNK, offsets[-1], offsets.dtype)])
    omega2 = omega * omega
    size = entry_slot.shape[0]

    def chunk(j, acc):
        s0 = j * SLOT_CHUNK
        e0, e_end = offsets_pad[s0], offsets_pad[s0 + SLOT_CHUNK]
        terms = _slot_terms(data, bits_of, e0, e_end, s0, SLOT_CHUNK, n_worlds)
        log_ws, on, is_or, any_fixed, all_fixed, log_z, log_y = _slot_weights(data, terms, s0, SLOT_CHUNK)
        finite = log_ws > -np.inf
        pi = jnp.where(finite, jnp.exp(jnp.minimum(on - jnp.where(finite, log_ws, 0.0), 0.0)), 0.0)
        y = jnp.exp(log_y)
        one_minus_z = -jnp.expm1(log_z)
        one_minus_y = -jnp.expm1(log_y)

        def trip(k, acc):
            e1, e2 = acc
            idx = e0 + k * ENTRY_CHUNK + jnp.arange(ENTRY_CHUNK, dtype=jnp.int32)
            ok = idx < e_end
            safe = jnp.where(ok, idx, 0)
            loc = jnp.clip(entry_slot[safe] - s0, 0, SLOT_CHUNK - 1)
            bits = bits_of(entry_row[safe])
            d = (entry_deferred[safe] & ok)[:, None]
            q = jnp.where(d, jnp.where(bits, p1[safe][:, None], p2[safe][:, None]), 0.0)
            pi_e, y_e = pi[loc], y[loc]
            or_e, any_e, all_e = is_or[loc], any_fixed[loc], all_fixed[loc]
            omz, omy = one_minus_z[loc], one_minus_y[loc]
            some = omz > 0
            e_or = jnp.where(any_e, q, jnp.where(some, pi_e * q / jnp.where(some, omz, 1.0), 0.0))
            e_and = jnp.where(all_e, pi_e + (1.0 - pi_e) * jnp.where(omy > 0, (q - y_e) / jnp.where(
                omy > 0, omy, 1.0), 1.0), q)
            expected = jnp.where(d, jnp.clip(jnp.where(or_e, e_or, e_and), 0.0, 1.0), 0.0)
            target = jnp.where(ok, idx, size)
            return (e1.at[target].set(expected @ omega, mode="drop"),
                    e2.at[target].set(expected @ omega2, mode="drop"))

        trips = (e_end - e0 + ENTRY_CHUNK - 1) // ENTRY_CHUNK
        return lax.fori_loop(0, trips, trip, acc)

    trips = (slots + SLOT_CHUNK - 1) // SLOT_CHUNK
    zero = jnp.zeros(size)
    return lax.fori_loop(0, trips, chunk, (zero, zero))


# Rows whose weighted sums one trip of `_weighted_sums` computes: its byte lookups (rows x 4 words x 2)
# stay below 2^26 float64 (XLA materialised all of them at once: 321 GiB at hmmer's 1.43M rows).
TALLY_LOOKUPS = 1 << 25

# Words of worlds whose byte tables one inner trip of `_weighted_sums` builds and reads, per platform
# (0: no table; each bit unpacked and its weight selected, summed in one fused reduction). A table of
# 16 words (128 KiB) stays in a CPU core's cache: 21K rows by 32 words took 12 ms on this project's
# 2-core CPU against 24 ms with one table for all 32 words. On the H200 at ftp's 69K rows by 4,096
# words (`benchmarks/probes/weighted_sums.py`): 32 words 11.1 ms, one table 18.9 ms, unpacked 15.9 ms.
TABLE_WORDS = {"cpu": 16, "gpu": 32}


def table_words(platform: str) -> int:
    """`TABLE_WORDS` of a platform ("cpu", "gpu", ...; others as the CPU)."""
    return TABLE_WORDS.get(platform, TABLE_WORDS["cpu"])


def _unpacked_dot(state, weights):
    """(R, K) sums of each weight column over the worlds where the row's bit is 1: bits selected, not
    looked up (`_rows_dot`'s result, summed in another order)."""
    rows, width = state.shape
    shifts = jnp.arange(32, dtype=np.uint32)
    bits = ((state[:, :, None] >> shifts) & np.uint32(1)).astype(bool)  # (R, W, 32), fused, never stored
    w = weights.reshape(width, 32, weights.shape[1])
    return jnp.stack([jnp.where(bits, w[None, :, :, j], 0.0).sum(axis=(1, 2))
                      for j in range(weights.shape[1])], axis=1)


def _weighted_sums(state, omega, omega2, words_per_table: int = 0):
    """(R,) sums of omega and of omega^2 over the worlds where each row's bit is 1.

    Args:
        state: (R, W) uint32 state words.
        omega, omega2: (32 W,) float64 weights and their squares.
        words_per_table: words of worlds per byte table (`TABLE_WORDS`); 0: bits unpacked and
            selected. Rows go in chunks of at most `TALLY_LOOKUPS` lookups a trip.
    """
    rows, width = state.shape
    weights = jnp.stack([omega, omega2], axis=1)  # (32 W, 2)
    step = min(width, words_per_table) if words_per_table > 0 else width
    words = -(-width // step) * step
    zero = state[0, 0] & np.uint32(0)  # from an input: XLA does not fold the padding into a constant
    if words > width:  # whole tables: zero words of zero weight
        state = jnp.concatenate([state, jnp.full((rows, words - width), zero, state.dtype)], axis=1)
        weights = jnp.concatenate([weights, jnp.zeros(((words - width) * 32, 2))])
    chunk = max(1, min(rows, TALLY_LOOKUPS // (4 * step)))
    chunk = 1 << (chunk.bit_length() - 1)
    trips = -(-rows // chunk)
    padded = jnp.concatenate([state, jnp.full((trips * chunk - rows, words), zero, state.dtype)]) \
        if trips * chunk > rows else state

    def part_sums(part):
        if words_per_table <= 0:
            return _unpacked_dot(part, weights)
        if step == words:
            return _rows_dot(jnp, part, weights)

        def table(t, acc):
            cols = lax.dynamic_slice_in_dim(part, t * step, step, axis=1)
            w = lax.dynamic_slice_in_dim(weights, t * step * 32, step * 32)
            return acc + _rows_dot(jnp, cols, w)

        return lax.fori_loop(0, words // step, table, jnp.zeros((part.shape[0], 2)))

    def trip(k, out):
        part = lax.dynamic_slice_in_dim(padded, k * chunk, chunk)
        return lax.dynamic_update_slice_in_dim(out, part_sums(part), k * chunk, 0)

    out = lax.fori_loop(0, trips, trip, jnp.zeros((trips * chunk, 2)))
    return out[:rows, 0], out[:rows, 1]
