"""Unbiased marginals by ancestral sampling, 32 worlds per machine word, labels by rejection.

    result = sample_marginals(model, labels={v: True}, settings=Settings(samples=10**6, seed=1))
    result.marginals, result.stderr, result.info["accepted"]

The network (`sampling_plan`): every variable x is a deterministic function of
its factor's body and independent coins, x = cond ? coin(p1) : coin(p2).
Bit i of a state word is world i, so a level of the network is, for a whole
word of 32 worlds at once, a gather of the body's words, a bitwise AND/OR
reduction over the body and two coin words (none where a group's coins are
all 0 or all 1: a Bingo tuple is x = cond, a clause x = cond & coin). The
device program runs every level of a batch of words in one jitted call
(levels unrolled, each group one dense gather with fixed shapes, one state
update per level); batches run until `settings.samples` worlds are drawn. A
world is accepted when every labelled variable has its label (the AND of the
labels' match words), and marginals are popcount(x & accepted) /
popcount(accepted).

Coins. A word whose bits are independent Bernoulli(p) is built from random
words r_1, r_2, ... by the binary expansion p = 0.b_1 b_2 ... b_K: bit i is
[0.r_1[i] r_2[i] ... < p], which from the last digit up is

    X_{K+1} = 0,   X_k = b_k ? (r_k | X_{k+1}) : (r_k & X_{k+1})

(r_k and its complement are equally distributed). With K = the position of
p's last nonzero digit the coin is exactly Bernoulli(p) for the float64 p:
K = 1 for p = 1/2, 53 for p in [1/2, 1) with a full mantissa (0.9, 0.999),
at most 64 for p >= 2^-12; smaller p are truncated at 64 digits (bias below
2^-64 = 5.4e-20, absolute; `sampling_plan.MAX_DIGITS`). p in {0, 1} needs no
random word. A bit is decided at the first digit where r_k[i] == b_k, so
after k digits only 2^-k of the bits are open: `sampling_coins` draws 12
words for every coin word and the rest only for the 0.78% of words with an
open bit (compacted), giving bit for bit the coins of the full expansion.

Random words are Threefry-2x32 (the hash behind `jax.random`) of counters
(coin, digit pair, global word index) under the key of `jax.random.key(seed)`,
computed on the device (never uploaded), so a run is deterministic given the
seed and does not depend on the batch size. State words are uint32: JAX's
64-bit integers are pairs of 32-bit operations on the GPU, with the same bytes
moved per world, so uint64 would gain nothing.

Measured (benchmarks/bench_sampling.py, 2^20 worlds, synthetic graphs), before the coins' head and
tail: on the H200 0.040 s at 0.05M edges, 0.354 s at 0.5M (1.5e12 edge-worlds/s, 11% of the memory
floor) and 3.52 s at 5M; with every p rounded to 10 binary digits the 0.5M run took 0.180 s (the
53 random words of the exact coins were half of the time). On this 2-core CPU (loaded, 65,536
worlds): 0.05M edges 2.08 s before, 1.01 s after (coins 0.80 s, propagation 0.14 s); 0.5M edges
28.5 s before, 10.7 s after.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fastlbp.constraints import conflicting_labels
from fastlbp.engines import sampling_plan
from fastlbp.engines.marginals import Marginals
from fastlbp.engines.sampling_coins import HEAD_DIGITS, coin_words, threefry2x32
from fastlbp.engines.sampling_plan import FIRST_COIN, ONE_COIN, ONES_ROW, ZERO_COIN, NotABayesNet, Plan
from fastlbp.errors import ContradictoryEvidence, InferenceError
from fastlbp.graph import AND, FactorGraph
from fastlbp.settings import Settings

WORD_BITS = 32
_ONES = 0xFFFFFFFF
# Largest batch: 2^14 words = 524,288 worlds; the state of a batch is (V + 2, words) uint32.
MAX_BATCH_WORDS = 1 << 14
# Bytes the batch's state, coins and largest gather may take (the batch shrinks to fit): an eighth of
# the device's memory where it says (a GPU), else 256 MiB. On the H200 at 0.5M edges a 256 MiB budget
# gave batches of 128 words (4,096 worlds) and a run bound by kernel launches (69 levels per batch).
BATCH_BYTES = 1 << 28


def _batch_budget() -> int:
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001  (a backend without memory statistics)
        stats = {}
    return max(BATCH_BYTES, int(stats.get("bytes_limit", 0)) // 8)


class TooFewSamples(InferenceError):
    """Fewer worlds than `settings.min_accepted` agree with the labels: the estimates would be noise."""

    def __init__(self, accepted: int, drawn: int, needed: int):
        self.accepted, self.drawn, self.needed = accepted, drawn, needed
        super().__init__(f"sampling: only {accepted} of {drawn} worlds agree with the labels (at least "
                         f"{needed} needed for estimates; min_accepted); draw more (--samples "
                         f"{_suggest(accepted, drawn, needed)}) or use --method exact")


def _suggest(accepted: int, drawn: int, needed: int) -> int:
    rate = max(accepted, 1) / drawn
    return int(min(10 ** math.ceil(math.log10(2 * needed / rate)), 10**15))


def _coins(coin_arrays, coin_meta, key, words):
    """(C, W) uint32 coin words of a batch: rows ZERO_COIN, ONE_COIN, then the buckets' soft coins.

    Args:
        coin_arrays: per bucket (bits (2, n) uint32, ids (n,) uint32, need (n,) int32).
        coin_meta: per bucket (pairs, coins needing more than the head's digits); with the head's
            digits and the tail's capacity (None: from the expected count).
        key: (2,) uint32.
        words: (W,) uint32 global word indices.
    """
    buckets, head_digits, capacity = coin_meta
    rows = FIRST_COIN + sum(int(ids.shape[0]) for _, ids, _ in coin_arrays)
    coins = jnp.zeros((rows, words.shape[0]), jnp.uint32).at[ONE_COIN].set(np.uint32(_ONES))
    start = FIRST_COIN
    for (bits, ids, need), (pairs, long_coins) in zip(coin_arrays, buckets, strict=True):
        # Written in place (not concatenated): the coins take their final 4 bytes a word only once.
        x = coin_words(key, bits, ids, need, words, pairs, head_digits, long_coins, capacity)
        coins = lax.dynamic_update_slice(coins, x, (start, 0))
        start += int(ids.shape[0])
    return coins


def _propagate(level_arrays, levels, num_rows, coins):
    """(V+2, W) uint32 state words of a batch, level by level (module docstring)."""
    width = coins.shape[1]
    state = jnp.zeros((num_rows, width), jnp.uint32).at[ONES_ROW].set(np.uint32(_ONES))
    for groups, arrays in zip(levels, level_arrays, strict=True):
        xs = []
        for (kind, _, hard1, hard2), (rows, c1, c2) in zip(groups, arrays, strict=True):
            if rows.shape[1] == 0:
                xs.append(coins[c1])  # (n, W)
                continue
            body = state[rows]  # (n, w, W)
            op = lax.bitwise_and if kind == AND else lax.bitwise_or
            init = np.uint32(_ONES if kind == AND else 0)
            xs.append(_select(lax.reduce(body, init, op, (1,)), coins, c1, c2, hard1, hard2))
        # A level's groups write consecutive rows: one update of the state per level, not per group.
        x = jnp.concatenate(xs) if len(xs) > 1 else xs[0]
        state = lax.dynamic_update_slice(state, x, (groups[0][1], 0))
    return state


def _select(cond, coins, c1, c2, hard1, hard2):
    """cond ? coin1 : coin2 per bit; a group whose coins are all 0 or all 1 (`hard`) reads none."""
    one = {ONE_COIN: np.uint32(_ONES), ZERO_COIN: np.uint32(0)}
    x1 = coins[c1] if hard1 is None else one[hard1]
    x2 = coins[c2] if hard2 is None else one[hard2]
    return (cond & x1) | (~cond & x2)


def _tally(state, labels, valid_worlds):
    """(V+2,) popcounts of x & accepted per state row, and the accepted worlds of a batch."""
    width = state.shape[1]
    lab_rows, lab_flip = labels  # (L,) int32 rows, (L,) uint32 0 (label true) or all ones (false)
    match = state[lab_rows] ^ lab_flip[:, None]  # (L, W) ones where the world has the label
    accepted = lax.reduce(match, np.uint32(_ONES), lax.bitwise_and, (0,))  # (W,)
    # Worlds past `samples` in the last batch are never accepted.
    idx = jnp.arange(width, dtype=jnp.int64) * WORD_BITS
    room = jnp.clip(valid_worlds - idx, 0, WORD_BITS)
    keep = jnp.where(room >= WORD_BITS, np.uint32(_ONES),
                     ((jnp.uint32(1) << room.astype(jnp.uint32)) - np.uint32(1)).astype(jnp.uint32))
    accepted = accepted & keep
    counts = lax.population_count(state & accepted[None, :]).astype(jnp.int64).sum(axis=1)
    return counts, lax.population_count(accepted).astype(jnp.int64).sum()


def _batch(coin_arrays, level_arrays, meta, key, first_word, labels, valid_worlds):
    """One batch: (V+2,) popcounts of x & accepted per state row, and accepted worlds."""
    coin_meta, levels, num_rows, width = meta
    words = first_word + jnp.arange(width, dtype=jnp.uint32)  # (W,)
    coins = _coins(coin_arrays, coin_meta, key, words)
    return _tally(_propagate(level_arrays, levels, num_rows, coins), labels, valid_worlds)


def _hard(coin_rows: np.ndarray):
    """ONE_COIN or ZERO_COIN when every row of a group's coins is that one, else None."""
    for row in (ONE_COIN, ZERO_COIN):
        if coin_rows.size and np.all(coin_rows == row):
            return row
    return None


class Sampler:
    """A compiled sampler for one graph: `sampler(labels, samples, seed) -> (counts, accepted, drawn)`.

    Args:
        graph: a Bayesian-network factor graph (`sampling_plan`).
        var_names: names for error messages.
        batch_words: words (32 worlds each) per device call; None: the largest power of two that fits
            the budget (`_batch_budget`), at most MAX_BATCH_WORDS.
        head_digits: random words drawn for every coin word (even; `sampling_coins`); the coins do
            not depend on it, only the time does.
        tail_capacity: words one round of the coins' tail finishes (None: the expected count plus
            8 standard deviations); the coins do not depend on it (a small one only adds rounds).
        widths: padded body widths of the level groups (`sampling_plan.width_classes`; default powers
            of two): fewer widths, fewer groups per level, more padding.
    """

    def __init__(self, graph: FactorGraph, var_names=None, batch_words: int | None = None, *,
                 head_digits: int = HEAD_DIGITS, tail_capacity: int | None = None,
                 widths: tuple[int, ...] | None = None):
        if head_digits < 2 or head_digits % 2:
            raise ValueError(f"head_digits must be even and at least 2, got {head_digits}")
        t0 = time.perf_counter()
        self.graph = graph
        self.plan: Plan = sampling_plan.build(graph, var_names, widths)
        self.plan_seconds = time.perf_counter() - t0
        plan = self.plan
        widest = max((g.size * max(g.rows.shape[1], 1) for lv in plan.levels for g in lv), default=1)
        longs = [int(np.count_nonzero(b.need > head_digits)) for b in plan.buckets]
        # Bytes per word: the coin words, and the larger of what lives beside them while they are drawn
        # (the head's X0 and X1, uint64, of the coins that go on to a tail) and while the levels run
        # (the state and the largest gather).
        per_word = 4 * plan.coins + max(8 * sum(longs), 4 * plan.num_rows + 8 * widest)
        fit = max(1, _batch_budget() // per_word)
        self.batch_words = int(batch_words or min(MAX_BATCH_WORDS, 1 << int(math.log2(fit))))
        self._meta_levels = tuple(tuple((g.kind, g.start, _hard(g.coin1), _hard(g.coin2)) for g in lv)
                                  for lv in plan.levels)
        self._coin_meta = (tuple((b.pairs, n) for b, n in zip(plan.buckets, longs, strict=True)),
                           head_digits, tail_capacity)
        self._arrays = ([tuple(jnp.asarray(a) for a in (b.bits, b.ids, b.need)) for b in plan.buckets],
                        [[tuple(jnp.asarray(a) for a in (g.rows, g.coin1, g.coin2)) for g in lv]
                         for lv in plan.levels])
        self._runs = {}

    def _run(self, width: int):
        # One compiled program per batch width (a power of two, so few widths ever occur).
        if width not in self._runs:
            meta = (self._coin_meta, self._meta_levels, self.plan.num_rows, width)
            self._runs[width] = jax.jit(lambda arrays, key, first, labels, valid: _batch(
                arrays[0], arrays[1], meta, key, first, labels, valid))
        return self._runs[width]

    def stages(self, width: int):
        """Jitted stages of one batch of `width` words, for timing them apart (benchmarks).

        Returns:
            coins(arrays, key, first_word) -> (C, W) coin words;
            propagate(arrays, coins) -> (V+2, W) state words.
        """
        coin_meta, levels, rows = self._coin_meta, self._meta_levels, self.plan.num_rows
        coins = jax.jit(lambda arrays, key, first: _coins(
            arrays[0], coin_meta, key, first + jnp.arange(width, dtype=jnp.uint32)))
        propagate = jax.jit(lambda arrays, c: _propagate(arrays[1], levels, rows, c))
        return coins, propagate

    def __call__(self, labels: dict[int, bool] | None, samples: int, seed: int, *,
                 until_accepted: int = 0, max_samples: int | None = None):
        """Draws `samples` worlds, then more while fewer than `until_accepted` agree with the labels.

        Drawing goes on in rounds that double the worlds drawn so far, up to `max_samples` in all
        (default `samples`). The stopping rule looks only at how many worlds were accepted, never at
        their values, so the accepted worlds stay independent draws of the labelled posterior and
        the ratio estimates stay unbiased given their number. Counters continue across rounds
        (world i is the same world whatever the rounds), so a run is deterministic given the seed.

        Returns:
            (V,) int64 counts of x=1 among accepted worlds, accepted, drawn.
        """
        plan = self.plan
        labels = labels or {}
        # Padded to a power of two (at least 8) with the all-ones row labelled true, which every world
        # satisfies: the batch kernel's shapes stay the same as labels come, so a triage session or
        # `simulate --method sample` compiles once, not once per label (avrora: 20 s a round before).
        slots = max(8, 1 << max(len(labels) - 1, 0).bit_length())
        rows = np.full(slots, ONES_ROW, np.int32)
        flips = np.zeros(slots, np.uint32)
        rows[:len(labels)] = [plan.row_of[v] for v in labels]
        flips[:len(labels)] = [0 if t else _ONES for t in labels.values()]
        lab_rows, lab_flip = jnp.asarray(rows), jnp.asarray(flips)
        key = jax.random.key_data(jax.random.key(seed)).astype(jnp.uint32).reshape(-1)[-2:]
        most = max(int(samples), int(max_samples or 0))
        if -(-most // WORD_BITS) >= 2**32:
            raise InferenceError(f"sampling: at most {2**32 * WORD_BITS} worlds per run, asked {most}")
        counts = jnp.zeros(plan.num_rows, jnp.int64)
        accepted = jnp.zeros((), jnp.int64)
        drawn, target = 0, int(samples)
        while True:
            counts, accepted = self._draw(key, drawn, target, (lab_rows, lab_flip), counts, accepted)
            drawn = target
            if drawn >= most or not until_accepted or int(accepted) >= until_accepted:
                break
            target = min(most, 2 * drawn)
        counts, accepted = jax.device_get((counts, accepted))
        return np.asarray(counts)[plan.row_of], int(accepted), int(drawn)

    def _draw(self, key, start: int, stop: int, labels, counts, accepted):
        """Adds worlds start..stop-1 (start a multiple of 32) to the counts."""
        first_word, total_words = start // WORD_BITS, -(-stop // WORD_BITS)
        width = min(self.batch_words, 1 << max(0, (total_words - first_word - 1).bit_length()))
        run = self._run(width)
        for first in range(first_word, total_words, width):
            # Worlds beyond `stop` (the rest of the last word or batch) are masked out.
            valid = jnp.asarray(min(stop - first * WORD_BITS, width * WORD_BITS), jnp.int64)
            c, a = run(self._arrays, key, jnp.asarray(first, jnp.uint32), labels, valid)
            counts, accepted = counts + c, accepted + a
        return counts, accepted


def _graph_and_names(model_or_graph):
    if isinstance(model_or_graph, FactorGraph):
        return model_or_graph, None
    return model_or_graph.graph, model_or_graph.var_names


def sample_marginals(model_or_graph, labels: dict[int, bool] | None = None,
                     settings: Settings | None = None, *, sampler: Sampler | None = None) -> Marginals:
    """Marginals of every variable by ancestral sampling with rejection of the labels.

    Args:
        model_or_graph: a `Model` or a `FactorGraph` that is a Bayesian network (one factor per
            head, no cycle; derivation-graph models after cycle elimination are).
        labels: {variable index: truth}.
        settings: `samples` (worlds drawn), `seed`, `min_accepted` and `max_samples` (with
            fewer than `min_accepted` worlds accepted, drawing goes on, doubling, up to
            `max_samples` worlds) are read.
        sampler: a `Sampler` already built for this graph (reused across label sets).

    Returns:
        `Marginals` with method "sample": float64 estimates, their binomial standard errors
        sqrt(p (1 - p) / accepted) and info {samples, accepted, effective_samples, worlds_per_second,
        batch_words, levels, coins, edges, plan_seconds}.

    Raises:
        ContradictoryEvidence: the hard constraints prove the labels have probability 0 (a
            conflicting subset named). A contradiction propagation cannot prove leaves no world
            accepted and raises TooFewSamples instead.
        TooFewSamples: fewer than `settings.min_accepted` of `max_samples` worlds agree with the labels.
        NotABayesNet: a variable heads several factors, or the factors have a cycle.
    """
    t0 = time.perf_counter()
    settings = settings or Settings()
    graph, names = _graph_and_names(model_or_graph)
    labels = {int(v): bool(t) for v, t in (labels or {}).items()}
    if labels:
        core = conflicting_labels(graph, labels)
        if core is not None:
            raise ContradictoryEvidence({(names[v] if names is not None else str(v)): t
                                         for v, t in core.items()})
    sampler = sampler or Sampler(graph, names)
    t1 = time.perf_counter()
    counts, accepted, drawn = sampler(labels, int(settings.samples), int(settings.seed),
                                      until_accepted=int(settings.min_accepted),
                                      max_samples=int(settings.max_samples))
    draw_seconds = time.perf_counter() - t1
    if accepted < settings.min_accepted:
        raise TooFewSamples(accepted, drawn, int(settings.min_accepted))
    p = counts.astype(np.float64) / accepted
    with np.errstate(divide="ignore"):
        log_odds = np.log(p) - np.log1p(-p)
    stderr = np.sqrt(p * (1.0 - p) / accepted)
    plan = sampler.plan
    info = {"samples": drawn, "accepted": accepted, "effective_samples": accepted,
            "worlds_per_second": drawn / draw_seconds if draw_seconds > 0 else float("inf"),
            "batch_words": sampler.batch_words, "levels": len(plan.levels), "coins": plan.coins,
            "edges": plan.edges, "plan_seconds": sampler.plan_seconds}
    return Marginals(method="sample", marginals=p, log_odds=log_odds, stderr=stderr,
                     seconds=time.perf_counter() - t0, info=info)


__all__ = ["sample_marginals", "Sampler", "TooFewSamples", "NotABayesNet", "threefry2x32"]
