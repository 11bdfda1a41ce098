"""Exact Bernoulli coin words of the sampler: a fixed head of random words, then a compacted tail.

    coins = coin_words(key, bits, ids, need, words, pairs)   # (n, W) uint32; bit i of word w: world 32 w + i

A coin word of p = 0.b_1 b_2 ... b_K (binary, K = the position of p's last
nonzero digit, `sampling_plan.digits_needed`) has in bit i the coin
[0.v_1 v_2 ... < p] of a uniform v; with the random words r_1, r_2, ...
(v_k = 1 - r_k[i], equally distributed) the comparison is decided at the first
digit k where r_k[i] == b_k, and the coin is then b_k; a bit undecided after
all K digits is 0. Forward, over whole words (all ones / all zeros b_k masks):

    acc = 0, und = ~0;   per digit k:  acc |= und & r_k & b_k,   und &= r_k ^ b_k

A bit is still undecided after k digits with probability 2^-k, so most of the
53 digits a float64 p such as 0.999 or 0.9 has are never needed. The head
draws the first `head_digits` words for every coin word (unrolled, one fused
pass; `head`), which leaves a word of 32 bits undecided with probability
1 - (1 - 2^-12)^32 = 0.78% at 12 digits; the tail finishes only those words:
it compacts them (a bit mask per 32 words, an exclusive prefix sum of the
masks' popcounts, two scatters into static capacities of the expected count
plus 8 standard deviations) and runs the remaining digits on the compacted
words until every bit is decided. A round that finds more undecided words than
the capacities hold finishes the first ones and leaves the rest for another
round, so the result never depends on the capacities.

The random words are the ones the dense expansion uses (`threefry2x32` of the
counter pair (32 id + digit pair, global word index) under the run's key,
digit 2j from the first output word and 2j + 1 from the second), and a digit
changes nothing once a bit is decided, so the coin words are bit for bit those
of the dense backward recurrence X_k = b_k ? (r_k | X_{k+1}) : (r_k & X_{k+1})
over all K digits (tests/test_sampling_coins.py).

Measured on this 2-core CPU (loaded; 9,150 coins of p = 0.999): the 27
Threefry pairs of the dense expansion 2.5 s for 2,048 words, head and tail
1.1 s; for 1,024 words a head of 6 pairs 0.19 s (uint32, no tail) or 0.31 s
(uint64, X0 and X1), its tail 0.13 s (0.03 s of it the compaction). The head
unrolled took 0.75 s for 2,048 words, as a loop 1.67 s (each trip writes its
carry back). A head of 8 digits left 15 times the tail (1.8 s in all), 16
digits 1.8 s too (its larger unrolled fusion ran slower per pair on the CPU).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

# Random-word pairs per coin counter block: coin `id` uses counters 32 id + j for its digit pairs j.
PAIRS_PER_COIN = 32
HEAD_DIGITS = 12
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
# Standard deviations of slack in the tail's capacities (a Poisson count above mean + 8 sd: < 1e-12).
_SLACK_SD = 8.0


def _rotl(x, r: int):
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k0, k1, x0, x1):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011, as in `jax.random`): two uint32 words."""
    k2 = k0 ^ k1 ^ np.uint32(0x1BD11BDA)
    ks = (k0, k1, k2)
    x0 = x0 + k0
    x1 = x1 + k1
    for i in range(5):
        for r in _ROTATIONS[4 * (i % 2): 4 * (i % 2) + 4]:
            x0 = x0 + x1
            x1 = _rotl(x1, r)
            x1 = x1 ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _digit_mask(bits, k):
    """All ones where binary digit k + 1 of p is 1 (k from 0; `bits` (2, ...) uint32, digit 1 = bit 31)."""
    if isinstance(k, int):
        word, shift = bits[k // 32], np.uint32(31 - k % 32)
    else:
        word, shift = jnp.where(k < 32, bits[0], bits[1]), (31 - (k & 31)).astype(jnp.uint32)
    return jnp.uint32(0) - ((word >> shift) & np.uint32(1))


def _pair(acc, und, r0, r1, d0, d1):
    """Two digits forward: decided bits take the digit, the others stay undecided."""
    acc = acc | (und & r0 & d0)
    und = und & (r0 ^ d0)
    acc = acc | (und & r1 & d1)
    und = und & (r1 ^ d1)
    return acc, und


def _parity_mask(bits, odd_bits, k, odd):
    """(n, W) digit masks: digit k of `bits` in even words, of `odd_bits` in odd ones (a tilted proposal's
    coins: `fastlbp.engines.sampling_program`); (n, 1) of `bits` alone when `odd_bits` is None."""
    d = _digit_mask(bits, k)[:, None]
    if odd_bits is None:
        return d
    return jnp.where(odd[None, :], _digit_mask(odd_bits, k)[:, None], d)


def head(key, bits, ids, words, pairs: int, long=None, odd_bits=None):
    """The first `pairs` digit pairs of every coin word, unrolled, by the backward recurrence.

    X_{2 pairs + 1} is 0 for the coin if every bit left undecided is 0 (acc) and all ones for the
    coin if they are 1; the two differ in exactly the undecided bits. With `long` both run in one
    uint64 chain (X1 in the high half): one value per word, so XLA computes the Threefry words once
    (two results of one chain were fused into their consumers separately, each computing the chain:
    0.74 s instead of 0.39 s for 9,150 coins by 2,048 words on this CPU).

    Args:
        key: (2,) uint32.
        bits: (2, n) uint32 binary digits 1-64 of each p, most significant first.
        ids: (n,) uint32 coin identifiers.
        words: (W,) uint32 global word indices.
        pairs: digit pairs to draw (static).
        long: None, or (n,) bool: the coins that go on to a tail (the others' undecided bits are 0:
            their halves are equal).
        odd_bits: None, or (2, n) uint32 the digits odd words use instead (another p per coin).

    Returns:
        (n, W) uint32 acc (the coin words when no bit is left undecided), or with `long` (n, W)
        uint64 X1 << 32 | acc, whose halves differ in the undecided bits.
    """
    base = ids[:, None] * np.uint32(PAIRS_PER_COIN)
    shape = (ids.shape[0], words.shape[0])
    undecided = long is not None
    odd = (words & np.uint32(1)) == 1
    if undecided:
        x = jnp.broadcast_to(jnp.where(long, np.uint64(0xFFFFFFFF00000000), np.uint64(0))[:, None], shape)
    else:
        x = jnp.zeros(shape, jnp.uint32)
    for j in range(pairs - 1, -1, -1):
        r0, r1 = threefry2x32(key[0], key[1], base + np.uint32(j), words[None, :])
        for k, r in ((2 * j + 1, r1), (2 * j, r0)):
            d = _parity_mask(bits, odd_bits, k, odd)
            if undecided:
                r, d = r.astype(jnp.uint64), d.astype(jnp.uint64)
                r, d = r | (r << np.uint64(32)), d | (d << np.uint64(32))
            x = (r & x) | (d & (r | x))  # X_k = b_k ? (r_k | X_{k+1}) : (r_k & X_{k+1})
    return x


def capacities(long_coins: int, width: int, head_digits: int) -> tuple[int, int]:
    """Static (groups, words) capacities of one tail round: expected count + 8 sd + 64, to a multiple of 64.

    Args:
        long_coins: coins needing more than `head_digits` digits.
        width: W, words per coin (a power of two); groups are min(32, W) words of one coin.
        head_digits: digits the head drew.
    """
    lanes = min(32, width)
    bit = 2.0 ** -head_digits
    word = -math.expm1(32 * math.log1p(-bit))  # P(a word keeps an undecided bit)
    group = -math.expm1(32 * lanes * math.log1p(-bit))

    def cap(mean):
        return int(64 * math.ceil((mean + _SLACK_SD * math.sqrt(mean) + 64) / 64))

    groups = long_coins * (width // lanes)
    return min(cap(groups * group), groups), min(cap(groups * lanes * word), groups * lanes)


def _compact(und, lanes: int, cap_groups: int, cap_words: int):
    """Flat indices of the first undecided words (fill: und.size), and whether some did not fit.

    Args:
        und: (N,) uint32, N a multiple of `lanes`.
    """
    n = und.shape[0]
    idx_t = jnp.int64 if n >= 2**31 - 1 else jnp.int32
    lane = jnp.arange(lanes, dtype=jnp.uint32)
    flags = (und.reshape(-1, lanes) != 0).astype(jnp.uint32) << lane  # (G, lanes)
    masks = lax.reduce(flags, np.uint32(0), lax.bitwise_or, (1,))  # (G,) one bit per undecided word
    num_groups = masks.shape[0]
    nonzero = masks != 0
    gpos = jnp.cumsum(nonzero, dtype=idx_t) - 1
    gslot = jnp.where(nonzero & (gpos < cap_groups), gpos, cap_groups)
    grp = jnp.full(cap_groups, num_groups, idx_t).at[gslot].set(
        jnp.arange(num_groups, dtype=idx_t), mode="drop")
    mg = masks.at[grp].get(mode="fill", fill_value=0)  # (cap_groups,)
    count = lax.population_count(mg).astype(idx_t)
    offset = jnp.cumsum(count) - count
    below = lax.population_count(mg[:, None] & ((np.uint32(1) << lane) - np.uint32(1))).astype(idx_t)
    flag = ((mg[:, None] >> lane) & np.uint32(1)) != 0
    rank = offset[:, None] + below  # (cap_groups, lanes)
    wslot = jnp.where(flag & (rank < cap_words), rank, cap_words)
    widx = jnp.full(cap_words, n, idx_t).at[wslot.reshape(-1)].set(
        (grp[:, None] * lanes + lane.astype(idx_t)).reshape(-1), mode="drop")
    overflow = (gpos[-1] + 1 > cap_groups) | (count.sum() > cap_words)
    return widx, overflow


def _undecided(both):
    """uint32 bits where the halves of `both` (X1 << 32 | X0) differ."""
    return both.astype(jnp.uint32) ^ (both >> np.uint64(32)).astype(jnp.uint32)


def tail(key, bits, ids, need, words, both, first_pair: int, pairs: int,
         cap_groups: int, cap_words: int, odd_bits=None, odd_need=None):
    """Finishes the undecided bits with digit pairs first_pair .. pairs - 1 (module docstring).

    Args:
        key: (2,) uint32.
        bits: (2, n) uint32 digits of each p.
        ids: (n,) uint32 coin identifiers.
        need: (n,) int32 digits each p has (a bit undecided after them is 0).
        words: (W,) uint32 global word indices.
        both: (n, W) uint64 from `head`: X1 << 32 | acc, halves equal where no bit is undecided.
        first_pair, pairs: static digit-pair range.
        cap_groups, cap_words: static capacities of one round (`capacities`).
        odd_bits, odd_need: None, or the digits and digit counts odd words use (`head`).

    Returns:
        (n, W) uint32 coin words.
    """
    n, width = both.shape
    lanes = min(32, width)

    def round_(carry):
        both, _ = carry
        widx, overflow = _compact(_undecided(both).reshape(-1), lanes, cap_groups, cap_words)
        row, col = widx // width, widx % width  # row n (out of range) past the undecided words
        # The undecided bits again from the gathered words: the compaction stays their one reader,
        # so XLA fuses them into it instead of writing them out (4 bytes a coin word).
        picked = both.at[row, col].get(mode="fill", fill_value=0)
        u, r = _undecided(picked), picked.astype(jnp.uint32)
        coin = jnp.minimum(row, n - 1)
        base, b, left = ids[coin] * np.uint32(PAIRS_PER_COIN), bits[:, coin], need[coin]
        word = words[col]
        if odd_bits is not None:
            odd = ((word & np.uint32(1)) == 1)[None, :]
            b = jnp.where(odd, odd_bits[:, coin], b)
            left = jnp.where(odd[0], odd_need[coin], left)

        def more(s):
            j, u, _ = s
            return (j < pairs) & jnp.any(u != 0)

        def step(s):
            j, u, r = s
            r0, r1 = threefry2x32(key[0], key[1], base + j.astype(jnp.uint32), word)
            r, u = _pair(r, u, r0, r1, _digit_mask(b, 2 * j), _digit_mask(b, 2 * j + 1))
            # Past a p's last digit nothing is left to decide: its undecided bits are 0.
            return j + 1, jnp.where(left <= 2 * j + 2, np.uint32(0), u), r

        _, _, r = lax.while_loop(more, step, (jnp.int32(first_pair), u, r))
        r = r.astype(jnp.uint64)
        return both.at[row, col].set(r | (r << np.uint64(32)), mode="drop"), overflow

    # The head's words are the loop's state: materialized once, read by the compaction and the gathers
    # (2-D: a flat (n W,) head computed its word indices by division, 4x slower on this CPU).
    both, _ = lax.while_loop(lambda c: c[1], round_, (both, jnp.bool_(True)))
    return both.astype(jnp.uint32)


def coin_words(key, bits, ids, need, words, pairs: int, head_digits: int = HEAD_DIGITS,
               long_coins: int | None = None, capacity: int | None = None, odd_bits=None, odd_need=None):
    """(n, W) uint32 words of independent Bernoulli(p) bits for one bucket of coins (module docstring).

    Args:
        key: (2,) uint32.
        bits: (2, n) uint32 binary digits 1-64 of each p.
        ids: (n,) uint32 coin identifiers.
        need: (n,) int32 digits of each p (at most 2 `pairs`).
        words: (W,) uint32 global word indices of the batch.
        pairs: digit pairs of the bucket (static).
        head_digits: digits drawn for every word (even, static).
        long_coins: coins with need > head_digits (static; None: all n).
        capacity: both tail capacities of one round (static; None: `capacities`); small values only
            add rounds.
        odd_bits, odd_need: None, or (2, n) uint32 and (n,) int32 the digits of another p per coin,
            used by the odd words (a tilted proposal's half of the worlds); at most 2 `pairs` digits.
    """
    first = min(pairs, head_digits // 2)
    long_coins = ids.shape[0] if long_coins is None else long_coins
    if first == pairs or long_coins == 0:
        return head(key, bits, ids, words, first, odd_bits=odd_bits)
    # Coins of at most 2 first digits are final after the head: their undecided bits are 0.
    most = need if odd_need is None else jnp.maximum(need, odd_need)
    both = head(key, bits, ids, words, first, long=most > 2 * first, odd_bits=odd_bits)
    cap_groups, cap_words = capacities(long_coins, words.shape[0], 2 * first)
    if capacity is not None:
        cap_groups, cap_words = capacity, capacity
    return tail(key, bits, ids, need, words, both, first, pairs, cap_groups, cap_words, odd_bits, odd_need)


def digit_bits(digits: np.ndarray) -> np.ndarray:
    """(2, n) uint32 words of (64, n) bool binary digits, digit 1 in bit 31 of word 0 (host)."""
    d = np.zeros((64, digits.shape[1]), np.uint64)
    d[: digits.shape[0]] = digits
    weights = np.uint64(1) << np.arange(31, -1, -1, dtype=np.uint64)
    return np.stack([(d[:32] * weights[:, None]).sum(axis=0), (d[32:] * weights[:, None]).sum(axis=0)]
                    ).astype(np.uint32)
