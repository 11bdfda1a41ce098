"""The sampler's host path: numpy, no compilation, for graphs of at most `sampling.HOST_EDGES` reads.

    coins = host_coins(coin_arrays, rng, width)                  # (C, W) coin words from numpy's Philox
    state = propagate(np, level_arrays, levels, num_rows, coins, masks)   # (V + 2, W) state words
    sums = batch_sums(np, state, labels, valid_worlds)           # (s1, s2, w1, w2, top, positive)
    acc = add_batch_sums(np, acc, sums)

The module docstring of `fastlbp.engines.sampling` says what the words hold: bit i of a state word is
world i, a level is a gather of its body's words, an AND or OR reduction and a select between two coin
words, and a labelled run weighs each world by the labels (`fastlbp.engines.importance`). These are the
same steps as the device program's (`fastlbp.engines.sampling_program`), drawn from numpy's Philox
words instead of Threefry's; `Sampler(host=True)` runs them a batch at a time. `xp` is numpy here (the
jax.numpy branches trace the same steps: one `lax.gather` per body).
"""

from __future__ import annotations

import numpy as np
from jax import lax

from fastlbp.core.graph import AND
from fastlbp.engines import importance
from fastlbp.engines.sampling_bits import (
    _LN2,
    WORD_BITS,
    _rows_dot,
    _unpack,
    combine_scaled_sums,
    scale_exponent,
)
from fastlbp.engines.sampling_plan import FIRST_COIN, ONE_COIN, ONES_ROW, ZERO_COIN

_ONES = 0xFFFFFFFF

# Digits every host coin word gets before the undecided ones are compacted (as the device's head).
_HOST_HEAD_PAIRS = 6


def host_coins(coin_arrays, rng: np.random.Generator, width: int) -> np.ndarray:
    """(C, W) uint32 coin words on the host: the digit recurrence of `sampling_coins` on numpy's words.

    Every coin word draws `_HOST_HEAD_PAIRS` digit pairs; then only the (coin, word) pairs with an
    undecided bit go on, compacted, until each is decided or its p has no digit left (then 0).
    """
    rows = FIRST_COIN + sum(int(ids.shape[0]) for _, ids, _ in coin_arrays)
    coins = np.zeros((rows, width), np.uint32)
    coins[ONE_COIN] = _ONES
    start = FIRST_COIN
    for bits, ids, need in coin_arrays:
        n = ids.shape[0]
        acc = np.zeros((n, width), np.uint32)
        und = np.full((n, width), _ONES, np.uint32)
        digits = int(need.max()) if n else 0
        shifts = np.uint32(31) - (np.arange(64, dtype=np.uint32) & np.uint32(31))
        for k in range(min(digits, 2 * _HOST_HEAD_PAIRS)):
            d = np.uint32(0) - ((bits[k // 32] >> shifts[k]) & np.uint32(1))  # (n,) all ones where digit is 1
            r = rng.integers(0, 1 << 32, size=(n, width), dtype=np.uint32)
            acc |= und & r & d[:, None]
            und &= r ^ d[:, None]
        und[need <= 2 * _HOST_HEAD_PAIRS] = 0
        coin, word = np.nonzero(und)
        u, a = und[coin, word], acc[coin, word]
        for k in range(2 * _HOST_HEAD_PAIRS, digits):
            live = (u != 0) & (need[coin] > k)
            if not live.any():
                break
            coin, word, u, a = coin[live], word[live], u[live], a[live]
            d = np.uint32(0) - ((bits[k // 32, coin] >> shifts[k]) & np.uint32(1))
            r = rng.integers(0, 1 << 32, size=coin.shape[0], dtype=np.uint32)
            a = a | (u & r & d)
            u = u & (r ^ d)
            acc[coin, word] = a
        coins[start:start + n] = acc
        start += n
    return coins


def _take_rows(xp, table, idx):
    """table[idx] along axis 0 for an integer index array of any shape: (*idx.shape, W).

    On the device one `lax.gather` primitive: `jnp` indexing traced 8 ms a call (660 calls, 5 of the
    10 s that tracing avrora's batch took on this CPU, every run before the compiled program loads).
    """
    if xp is np:
        return table[idx]
    dims = lax.GatherDimensionNumbers(offset_dims=(idx.ndim,), collapsed_slice_dims=(0,),
                                      start_index_map=(0,))
    return lax.gather(table, lax.expand_dims(idx, (idx.ndim,)), dims, (1, table.shape[1]),
                      mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _set_rows(xp, state, start: int, x):
    if xp is np:
        state[start:start + x.shape[0]] = x
        return state
    return lax.dynamic_update_slice(state, x, (start, 0))


def propagate(xp, level_arrays, levels, num_rows, coins, masks=None, conditions=False):
    """(V+2, W) uint32 state words of a batch, level by level (module docstring).

    Args:
        xp: numpy (host) or jax.numpy (device).
        masks: None, or the labels' (force_and, force_or, cond_rows) (R,) uint32 row masks
            (`importance.LabelArrays`): a deferred parent's row holds its condition, and a labelled
            row its label, before the next level reads it.
        conditions: also return the (V+2, W) words of each variable's condition (all ones for an
            empty body), which tell a tilted proposal's weights which coin a world drew.
    """
    width = coins.shape[1]
    state = xp.zeros((num_rows, width), np.uint32)
    state = _set_rows(xp, state, ONES_ROW, xp.full((1, width), _ONES, np.uint32))
    conds = xp.zeros((num_rows, width), np.uint32) if conditions else None
    for groups, arrays in zip(levels, level_arrays, strict=True):
        xs, cs = [], []
        for (kind, start, hard1, hard2), (rows, c1, c2) in zip(groups, arrays, strict=True):
            if rows.shape[1] == 0:
                cond, x = None, _take_rows(xp, coins, c1)  # (n, W)
            else:
                body = _take_rows(xp, state, rows)  # (n, w, W)
                if xp is np:
                    cond = (np.bitwise_and if kind == AND else np.bitwise_or).reduce(body, axis=1)
                else:
                    op = lax.bitwise_and if kind == AND else lax.bitwise_or
                    cond = lax.reduce(body, np.uint32(_ONES if kind == AND else 0), op, (1,))
                x = _select(xp, cond, coins, c1, c2, hard1, hard2)
            if conditions:
                cs.append(xp.full(x.shape, _ONES, np.uint32) if cond is None else cond)
            if masks is not None:
                keep = masks[2][start:start + rows.shape[0], None]  # deferred parents hold cond
                x = (keep if cond is None else cond & keep) | (x & ~keep)
            xs.append(x)
        # A level's groups write consecutive rows: one update of the state per level, not per group.
        x = xp.concatenate(xs) if len(xs) > 1 else xs[0]
        first = groups[0][1]
        if conditions:
            conds = _set_rows(xp, conds, first, xp.concatenate(cs) if len(cs) > 1 else cs[0])
        if masks is not None:
            end = first + x.shape[0]
            x = (x & masks[0][first:end, None]) | masks[1][first:end, None]
        state = _set_rows(xp, state, first, x)
    return (state, conds) if conditions else state


def _select(xp, cond, coins, c1, c2, hard1, hard2):
    """cond ? coin1 : coin2 per bit; a group whose coins are all 0 or all 1 (`hard`) reads none."""
    if hard1 == ONE_COIN and hard2 == ZERO_COIN:
        return cond  # a Bingo tuple
    if hard2 == ZERO_COIN:
        return cond & (np.uint32(_ONES) if hard1 == ONE_COIN else (
            np.uint32(0) if hard1 == ZERO_COIN else _take_rows(xp, coins, c1)))  # a clause: cond & coin
    one = {ONE_COIN: np.uint32(_ONES), ZERO_COIN: np.uint32(0)}
    x1 = _take_rows(xp, coins, c1) if hard1 is None else one[hard1]
    x2 = _take_rows(xp, coins, c2) if hard2 is None else one[hard2]
    return (cond & x1) | (~cond & x2)


def batch_sums(xp, state, labels, valid_worlds, extra_log_w=None):
    """A batch's weighted sums: (s1 (R,), s2 (R,), w1, w2, k, positive).

    s1 = sum_w w [x], s2 = sum_w w^2 [x] per state row, w1 = sum w, w2 = sum w^2 with the weights
    scaled by 2^-k (k: the least integer with 2^k at least the batch's largest weight,
    `sampling_bits.scale_exponent`); positive counts the worlds of positive weight. Without labels
    (`labels` None) every valid world weighs 1 (popcounts).
    """
    rows, width = state.shape
    idx = xp.arange(width * WORD_BITS)
    ok = idx < valid_worlds  # (N,) worlds past the run's last in the last batch weigh nothing
    if labels is None:
        room = xp.clip(valid_worlds - xp.arange(width) * WORD_BITS, 0, WORD_BITS)
        keep = xp.where(room >= WORD_BITS, np.uint32(_ONES),
                        ((np.uint32(1) << xp.minimum(room, 31).astype(np.uint32)) - np.uint32(1)))
        counts = xp.bitwise_count(state & keep[None, :].astype(np.uint32)).astype(np.float64).sum(axis=1)
        n = ok.sum().astype(np.float64)
        return counts, counts, n, n, xp.zeros((), np.float64), ok.sum()
    entry_row, deferred, valid = labels[8], labels[9], labels[12]
    log_w, expected = importance.weigh(xp, _unpack(xp, state[entry_row]), labels)
    if extra_log_w is not None:
        log_w = log_w + extra_log_w  # a tilted proposal's P / Q (`proposal.mixture_log_w`)
    log_w = xp.where(ok, log_w, -np.inf)
    top = scale_exponent(xp, log_w.max())  # the batch's scale 2^top (`sampling_bits.combine_scaled_sums`)
    scale = xp.where(top > -np.inf, top * _LN2, 0.0)
    omega = xp.where(log_w > -np.inf, xp.exp(log_w - scale), 0.0)  # (N,) in [0, 1]
    omega2 = omega * omega
    both = _rows_dot(xp, state, xp.stack([omega, omega2], axis=1))
    s1, s2 = both[:, 0], both[:, 1]
    # Deferred parents' rows hold their condition: their sums are the expectations' instead.
    e1, e2 = expected @ omega, expected @ omega2
    target = xp.where(deferred & valid, entry_row, rows)
    if xp is np:
        d = target < rows
        s1[target[d]], s2[target[d]] = e1[d], e2[d]
    else:
        s1 = s1.at[target].set(e1, mode="drop")
        s2 = s2.at[target].set(e2, mode="drop")
    return s1, s2, omega.sum(), omega2.sum(), top, (log_w > -np.inf).sum()


def add_batch_sums(xp, acc, batch):
    """Two sets of weighted sums with their own scales, on the larger one
    (`sampling_bits.combine_scaled_sums`)."""
    return batch if acc is None else combine_scaled_sums(xp, acc, batch)


def hard_coin(coin_rows: np.ndarray):
    """ONE_COIN or ZERO_COIN when every row of a group's coins is that one, else None."""
    for row in (ONE_COIN, ZERO_COIN):
        if coin_rows.size and np.all(coin_rows == row):
            return row
    return None


__all__ = ["host_coins", "propagate", "batch_sums", "add_batch_sums", "hard_coin"]
