"""Unbiased marginals by sampling, 32 worlds per machine word, labels as importance weights.

    result = sample_marginals(model, labels={v: True}, settings=Settings(samples=10**5, seed=1))
    result.marginals, result.stderr, result.lower, result.upper, result.info["effective_samples"]

The network (`sampling_plan`): every variable x is a deterministic function of
its factor's body and independent coins, x = cond ? coin(p1) : coin(p2).
Bit i of a state word is world i, so a level of the network is, for a whole
word of 32 worlds at once, a gather of the body's words, a bitwise AND/OR
reduction over the body and two coin words (none where a group's coins are
all 0 or all 1: a Bingo tuple is x = cond, a clause x = cond & coin). The
device program runs every level of a batch of words in one jitted call
(levels unrolled, each group one dense gather with fixed shapes, one state
update per level).

Labels (`fastlbp.engines.importance`): a labelled variable is set to its label
where it is decided, the coins of its deferred parents (its clauses) are summed
out there, and each world carries the exact log weight of the labels. Nothing is
rejected: the estimate is sum w [x] / sum w, its standard error the
self-normalised delta-method one, the effective sample size (sum w)^2 / sum w^2
(Kish), and a 95% Wilson interval on the effective sample size stays honest at
0 and 1 (a marginal estimated at 0 from n worlds gets an upper bound of about
3.8 / n, not a standard error of 0). Without labels every weight is 1 and the
tallies are popcounts. Drawing goes on in rounds that double the worlds drawn
until every reported standard error is at most `Settings.target_se` (and the
effective sample size at least `min_accepted`), within `max_samples` worlds.

Graphs of at most `HOST_EDGES` padded reads per word run on the host in numpy
(`Sampler(host=True)`: no compilation; its coins come from numpy's Philox
generator, the device's from Threefry, each exact), larger ones on the device.

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

Random words on the device are Threefry-2x32 (the hash behind `jax.random`) of
counters (coin, digit pair, global word index) under the key of the seed,
computed on the device (never uploaded), so a run is deterministic given the
seed and does not depend on the batch size. State words are uint32: JAX's
64-bit integers are pairs of 32-bit operations on the GPU, with the same bytes
moved per world, so uint64 would gain nothing.

Its speed against the memory floor, on the H200 and on a CPU: BENCHMARKS.md, "Exact inference and sampling"
(`benchmarks/bench_sampling.py`).

The parts, by role: this module holds `Sampler` (batch sizes, the device program's life, a run's
draws) and `sample_marginals`; `sampling_plan` the network's arrays, `sampling_program` the device
program, `sampling_coins` the device's coins, `sampling_host` the host path's numpy steps,
`sampling_budget` how many worlds a time-bounded run draws (`TimedDrawing`, a base of `Sampler`),
`sampling_estimates` the estimates and the refusals (`TooFewSamples`, `NoConsistentWorld`),
`sampling_weights` the device's label weights and row sums, and `sampling_bits` the bit and scale
arithmetic both paths share.
"""

from __future__ import annotations

import functools
import math
import time

import jax
import numpy as np

from fastlbp.core.constraints import conflicting_labels
from fastlbp.core.errors import ContradictoryEvidence, InferenceError
from fastlbp.core.graph import FactorGraph
from fastlbp.core.jax_setup import float64
from fastlbp.core.settings import Settings
from fastlbp.engines import importance, proposal, sampling_plan, sampling_program, sampling_weights
from fastlbp.engines.marginals import Marginals
from fastlbp.engines.sampling_bits import _unpack
from fastlbp.engines.sampling_budget import TimedDrawing
from fastlbp.engines.sampling_coins import HEAD_DIGITS, digit_bits, threefry2x32
from fastlbp.engines.sampling_estimates import (  # noqa: F401  (part of this API)
    Z95,
    NoConsistentWorld,
    Tally,
    TooFewSamples,
    wilson,
)
from fastlbp.engines.sampling_host import add_batch_sums, batch_sums, hard_coin, host_coins, propagate
from fastlbp.engines.sampling_plan import (
    FIRST_COIN,
    FIRST_ROW,
    NotABayesNet,
    SamplerPlan,
    digits,
    digits_needed,
)

WORD_BITS = 32
_ONES = 0xFFFFFFFF
# Largest batch: 2^14 words = 524,288 worlds; the state of a batch is (V + 2, words) uint32.
MAX_BATCH_WORDS = 1 << 14
# Bytes the batch's state, coins and largest gather may take (the batch shrinks to fit): an eighth of
# the device's memory where it says (a GPU), else 256 MiB. On the H200 at 0.5M edges a 256 MiB budget
# gave batches of 128 words (4,096 worlds) and a run bound by kernel launches (69 levels per batch).
BATCH_BYTES = 1 << 28
# Graphs of at most this many padded reads per world word (`SamplerPlan.edges`) are sampled on the host
# in numpy: no compilation. weblech (2,600 reads) took 6-14 s to plan and compile on the device path's
# first call on this CPU, and 0.2 s on the host for 10^5 worlds.
HOST_EDGES = 20_000
# Bytes a batch may take on a CPU (`per_word` in `Sampler.__init__` times its words): a batch is the
# unit a time-bounded draw is cut in, and larger ones were no faster there. Two runs on this 2-core CPU
# (32 MiB L3): avrora's labelled worlds cost 4.0e-5 s each in batches of 16 and 32 words (4 and 8 MiB)
# and 4.4e-5 at 64; in a busier run 5.5e-5 at 32 words and 7.3e-5 at 64 and 128 (33 MiB, the former
# default: 0.1-0.35 s a batch against an interactive round's 0.4 s). ftp: 1.6-1.7e-4 at 16 and 32
# words, 2.7e-4 at 128.
CPU_BATCH_BYTES = 8 << 20
HOST_BATCH_WORDS = 1 << 9  # 16,384 worlds per host batch
# The device path draws again from the tilted proposal (`proposal`: host work) when the prior's worlds
# leave fewer than this share of their number effective. At 0.05, 4 of 277 marginals of the improbable
# label sets of tests/test_sampling_program.py were beyond 4 standard errors (the prior's worlds missed
# the posterior while looking effective); at 0.5 none.
TILT_BELOW = 0.5
# Fewest worlds `methods.measured_speed` probes the sampler's speed with.
PROBE_WORLDS = 8192


def _batch_budget() -> int:
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001  (a backend without memory statistics)
        stats = {}
    return max(BATCH_BYTES, int(stats.get("bytes_limit", 0)) // 8)


def seed_key(seed: int) -> np.ndarray:
    """(2,) uint32 the Threefry key of `seed`, as `jax.random.key(seed)` makes it (high, low word)."""
    seed = int(seed) % (1 << 64)
    return np.array([seed >> 32, seed & _ONES], np.uint32)


class Sampler(TimedDrawing):
    """A sampler for one graph: `sampler(labels, samples, seed, ...) -> Tally`.

    Args:
        graph: a Bayesian-network factor graph (`sampling_plan`).
        var_names: names for error messages.
        batch_words: words (32 worlds each) per batch; None: on a GPU the power of two at least
            `samples_hint`'s words, within the memory budget (`_batch_budget`) and MAX_BATCH_WORDS;
            on a CPU a 32nd of that, within `CPU_BATCH_BYTES`; on the host HOST_BATCH_WORDS.
        head_digits: random words drawn for every coin word (even; `sampling_coins`); the coins do
            not depend on it, only the time does.
        tail_capacity: words one round of the coins' tail finishes (None: the expected count plus
            8 standard deviations); the coins do not depend on it (a small one only adds rounds).
        widths: padded body widths of the level groups (`sampling_plan.width_classes`; default powers
            of two): fewer widths, fewer groups per level, more padding.
        host: True: numpy on the host, False: the jitted device program; None: the host for graphs
            of at most HOST_EDGES padded reads per word.
        capacity: the device program's fixed label sizes (`sampling_program.Capacity`; default room
            for labels on every variable `reserve` names, else on a few); labels beyond it build the
            program again (one compile, counted in `compiles`).
        tilt: draw the coins above the labels from the proposal of `fastlbp.engines.proposal` (the
            labels' evidence looked ahead at; weights stay exact); False: from the prior. The host
            path tilts every labelled run; the device path draws from the prior first and again from
            the tilt when the prior's worlds leave fewer than `TILT_BELOW` of their number effective
            (most triage rounds do not: the tilt's host work is 0.1-0.25 s at avrora and ftp size),
            decided at half the time budget where the budget cuts the prior's first draw.
        samples_hint: worlds a run usually draws (sizes the device's batches).
    """

    @float64
    def __init__(self, graph: FactorGraph, var_names=None, batch_words: int | None = None, *,
                 head_digits: int = HEAD_DIGITS, tail_capacity: int | None = None,
                 widths: tuple[int, ...] | None = None, host: bool | None = None,
                 capacity: sampling_program.Capacity | None = None, tilt: bool = True,
                 samples_hint: int = 100_000):
        if head_digits < 2 or head_digits % 2:
            raise ValueError(f"head_digits must be even and at least 2, got {head_digits}")
        t0 = time.perf_counter()
        self.graph = graph
        self.tilt = bool(tilt)
        self.tilted_coins = 0  # coins the last labelled run drew from the tilted proposal
        self.stopped = "worlds"  # what ended the last run's doubling: "target", "worlds" or "time"
        self.plan: SamplerPlan = sampling_plan.build(graph, var_names, widths)
        plan = self.plan
        self.host = plan.edges <= HOST_EDGES if host is None else bool(host)
        self.compiles = 0  # device programs compiled by this sampler (one per graph unless labels outgrow it)
        self.compile_seconds = 0.0
        self.world_seconds: float | None = None  # measured seconds per world of the last draw
        # Measured seconds of `unit_worlds` worlds per kind of draw, "plain" (no labels), "weighted"
        # (labels) or "tilted" (the proposal's coins), each as last drawn: a labelled world cost 2-3
        # times an unlabelled one on a CPU, so a round sized by the other kind's speed overran its budget
        # (avrora's first labelled round after the unlabelled one: 0.8 s against 0.4).
        self.unit_seconds: dict[str, float] = {}
        self.tilt_seconds_per_variable: float | None = None  # measured host cost of the last tilt
        self.reserved = False  # `reserve` was called
        self._head_digits, self._tail_capacity = head_digits, tail_capacity
        if self.host:
            self._meta_levels = tuple(tuple((g.kind, g.start, hard_coin(g.coin1), hard_coin(g.coin2))
                                            for g in lv) for lv in plan.levels)
            self.batch_words = int(batch_words or HOST_BATCH_WORDS)
            self._arrays = ([(b.bits, b.ids, b.need) for b in plan.buckets],
                            [[(g.rows, g.coin1, g.coin2) for g in lv] for lv in plan.levels])
        else:
            widest = max((g.size * max(g.rows.shape[1], 1) for lv in plan.levels for g in lv), default=1)
            longs = [int(np.count_nonzero(b.need > head_digits)) for b in plan.buckets]
            # Bytes per word: the coin words, and the larger of what lives beside them while they are
            # drawn (the head's X0 and X1, uint64, of the coins that go on to a tail) and while the
            # steps run (the value and condition words of every row, and the largest gather).
            per_word = 4 * plan.coins + max(8 * sum(longs), 8 * plan.num_rows + 8 * min(
                widest, sampling_program.STEP_READS))
            fit = max(1, _batch_budget() // per_word)
            # On a GPU the usual run in one batch: a step costs about 50 us of loop and launch there
            # whatever its width (H200), so a batch of 4,096 words took 8 ms, 8 of 512 words 30 ms
            # (avrora, 10^5 worlds). On a CPU at least 32 batches, of at most `CPU_BATCH_BYTES`: a
            # round cut to its budget draws whole batches (32 words, 0.045 s with labels at avrora's
            # size on this CPU, where 128 took 0.1-0.35 s against an interactive round's 0.4 s).
            gpu = jax.default_backend() == "gpu"
            per_run = 1 if gpu else 32
            if not gpu:
                fit = max(1, min(fit, CPU_BATCH_BYTES // per_word))
            hint = max(1, int(samples_hint) // (per_run * WORD_BITS))
            self.batch_words = int(batch_words or max(1, min(MAX_BATCH_WORDS, 1 << int(math.log2(fit)),
                                                             1 << max(hint - 1, 0).bit_length())))
            self._capacity = capacity or sampling_program.capacity_for(plan, ())
            self._program: sampling_program.Program | None = None
            self._exe = None
            self._device_arrays = None
        self.plan_seconds = time.perf_counter() - t0

    @property
    def devices_used(self) -> int:
        """Devices a round draws on (a sharded sampler's mesh, `fastlbp.engines.sharded_sampling`)."""
        return 1

    # -- the device program ------------------------------------------------------------------------

    @property
    def program(self) -> sampling_program.Program:
        """The device program (built at first use, again only when labels outgrow its capacity)."""
        if self._program is None:
            # Straight-line steps on the CPU (its loop copied the state through every step: 5x slower
            # at avrora's size), one loop on a GPU (its steps cost launches, not copies).
            platform = jax.default_backend()
            unroll = sampling_program.UNROLL_STEPS if platform == "cpu" else 0
            self._program = sampling_program.build(self.plan, self.batch_words, self._capacity,
                                                   head_digits=self._head_digits,
                                                   tail_capacity=self._tail_capacity, unroll_steps=unroll,
                                                   table_words=sampling_weights.table_words(platform))
            self._device_arrays = self._put(self._program.arrays())
            self._exe = None
        return self._program

    def _put(self, tree):
        """`tree` on the device(s) the compiled round runs on (a sharded sampler: every device of its
        mesh, `fastlbp.engines.sharded_sampling`)."""
        return jax.device_put(tree)

    def _round_function(self, program: sampling_program.Program):
        """The round `_compiled` compiles: one device's (a sharded sampler spreads its batches)."""
        return program.round_function()

    def _compiled(self, data):
        """The compiled round (ahead of time: its compile is timed apart from drawing)."""
        program = self.program
        if self._exe is None:
            t0 = time.perf_counter()
            args = (self._device_arrays, data, seed_key(0), np.uint32(0), np.int32(1), np.int64(1))
            self._exe = jax.jit(self._round_function(program)).lower(*args).compile()
            self.compiles += 1
            self.compile_seconds += time.perf_counter() - t0
        return self._exe

    @float64
    def warm(self) -> None:
        """Compiles the device program now (a session's set-up), so no round pays for it."""
        if not self.host:
            self._compiled(self._put(self.program.round_data({}).astuple()))

    @float64
    def reserve(self, variables) -> None:
        """Room in the device program for labels on all of `variables` at once (a triage session's
        alarms), so that no label set within them compiles again."""
        if not self.host:
            want = sampling_program.capacity_for(self.plan, variables)
            cap = self._capacity
            if want.slots > cap.slots or want.entries > cap.entries:
                self._capacity = sampling_program.Capacity(max(want.slots, cap.slots),
                                                           max(want.entries, cap.entries), cap.tilts)
                self._program = None
        self.reserved = True

    def _round_data(self, labels: dict[int, bool], tilt):
        """The device's per-round arrays; a label set past the capacity grows it (a new program)."""
        slots, entries = importance.needed(self.plan, labels)
        cap = self._capacity
        if slots > cap.slots or entries > cap.entries:
            self.reserve(set(labels))
            grown = self._capacity
            self._capacity = sampling_program.Capacity(max(grown.slots, 2 * cap.slots),
                                                       max(grown.entries, 2 * cap.entries), cap.tilts)
            self._program = None
        return self._put(self.program.round_data(labels, tilt).astuple())

    @property
    @float64
    def arrays(self):
        """The graph's arrays as the device program and its `stages` take them (on the device)."""
        if self.host:
            return jax.device_put(self._stage_program().arrays())
        self.program  # noqa: B018  (built on first use)
        return self._device_arrays

    def _stage_program(self) -> sampling_program.Program:
        """The host path's device program, built only for `stages` (tests compare the two paths)."""
        if getattr(self, "_host_program", None) is None:
            self._host_program = sampling_program.build(
                self.plan, 32, sampling_program.capacity_for(self.plan, ()), head_digits=self._head_digits,
                tail_capacity=self._tail_capacity)
        return self._host_program

    def stages(self, width: int):
        """Jitted stages of one device batch of `width` words, for timing them apart (benchmarks, tests).

        Returns:
            coins(arrays, key, first_word) -> (C, W) coin words;
            propagate(arrays, coins) -> (V+2, W) state words (no labels).
        """
        return (self._stage_program() if self.host else self.program).stages(width)

    # -- drawing -----------------------------------------------------------------------------------

    @float64
    def __call__(self, labels: dict[int, bool] | None, samples: int, seed: int, *, target_se: float = 0.0,
                 min_effective: float = 0.0, max_samples: int | None = None,
                 rows: np.ndarray | None = None, seconds: float = 0.0, on_empty=None) -> Tally:
        """Draws `samples` worlds, then more until the estimates are as precise as asked.

        Drawing goes on in rounds that double the worlds drawn so far, up to `max_samples` in all
        (default `samples`), while the largest standard error over `rows` (default all variables)
        exceeds `target_se` (0: no target) or the effective sample size is below `min_effective`.
        `on_empty()`, if given, is called once when a draw holds no world of positive weight
        (it may raise: the labels' contradiction named before more worlds are drawn in vain).
        `seconds` > 0 bounds the drawing (`draw_size`): a first draw that would overrun it at the
        speed measured for its kind of draw (`unit_seconds`) is cut to the whole batches that fit, at
        least `MIN_WORLDS` (a kind not measured yet draws one batch first, which measures it), and a
        later draw starts only while it is predicted to end within it; `self.stopped` then says
        "time" (the caller decides whether fewer than `min_effective` effective samples are an
        error). A compile is not drawing: the device program is compiled ahead of the first draw,
        and its time is `compile_seconds`. World i is the same world whatever the rounds or batches
        (counters on the device, a stream per batch position on the host), so a run is
        deterministic given the seed.
        """
        labels = {int(v): bool(t) for v, t in (labels or {}).items()}
        weighted = bool(labels)
        key = seed_key(seed)
        samples = -(-max(int(samples), 1) // WORD_BITS) * WORD_BITS  # whole words: a round ends on one
        most = max(samples, -(-int(max_samples or 0) // WORD_BITS) * WORD_BITS)
        if most // WORD_BITS >= 2**32:
            raise InferenceError(f"sampling: at most {2**32 * WORD_BITS} worlds per run, asked {most}")
        if self.host:
            arrays = self.label_arrays(labels) if weighted else None
            la = arrays.astuple() if weighted else None
            tilt = self._proposal(labels, arrays) if weighted and self.tilt else None
            self.tilted_coins = 0 if tilt is None else int(tilt[1][0].size)
            draw = functools.partial(self._draw_host, key, labels=la, seed=seed, tilt=tilt)
            kind = "tilted" if tilt is not None else "weighted" if weighted else "plain"
            return self._drawing(draw, kind, samples, most, target_se, min_effective, rows, seconds,
                                 time.perf_counter(), on_empty)
        start = time.perf_counter()
        data = self._round_data(labels, None)
        compiled = self.compile_seconds
        run = self._compiled(data)
        start += self.compile_seconds - compiled  # a compile is not drawing
        self.tilted_coins = 0
        draw = functools.partial(self._draw_device, run, key, data)
        tilting = weighted and self.tilt
        tried, tilt = False, None

        def low(tally: Tally) -> bool:
            # The prior's worlds leave too few effective: the labels' evidence looked ahead at.
            return tally.effective < TILT_BELOW * tally.drawn

        def tilt_now(tally: Tally) -> bool:
            # Asked when the budget cut the prior's first draw at half of it: a tilt then has the other
            # half (deciding after the whole draw left no time for it on a CPU).
            nonlocal tried, tilt
            if not low(tally):
                return False
            tried, tilt = True, self._affordable_tilt(labels, start, seconds)
            return tilt is not None

        tally = self._drawing(draw, "weighted" if weighted else "plain", samples, most, target_se,
                              min_effective, rows, seconds, start, on_empty,
                              check=tilt_now if tilting and seconds > 0 else None)
        if not tilting or not low(tally):
            return tally
        if not tried:
            tilt = self._affordable_tilt(labels, start, seconds)
        if tilt is None:
            return tally
        # The run drawn again from the tilted mixture within what is left of the round's budget; the
        # better of the two is kept.
        stopped = self.stopped
        tilted_data = self._round_data(labels, tilt)
        draw = functools.partial(self._draw_device, run, key, tilted_data)
        tilted = self._drawing(draw, "tilted", samples, most, target_se, min_effective, rows, seconds, start)
        if tilted.effective >= tally.effective:
            self.tilted_coins = int(np.count_nonzero(tilt.tilted))
            return tilted
        self.stopped = stopped
        return tally

    def _draw_device(self, run, key, data, start: int, stop: int, acc):
        """Adds worlds start..stop-1 (multiples of 32) to `acc` by one call of the compiled round."""
        first_word, total_words = start // WORD_BITS, stop // WORD_BITS
        batches = -(-(total_words - first_word) // self.batch_words)
        batch = run(self._device_arrays, data, key, np.uint32(first_word), np.int32(batches),
                    np.int64(stop - start))
        # Combined on the host (the sums come back anyway): jnp here compiled its small ops at the
        # first doubling of a session, in the middle of the interactive loop.
        batch = tuple(np.asarray(a) for a in jax.device_get(batch))
        return batch if acc is None else add_batch_sums(np, acc, batch)

    def _device_tilt(self, labels: dict[int, bool]):
        """The proposal's `Tilt` for a label set (host work, `proposal.tilted_coins`), or None."""
        plan = self.plan
        arrays = importance.label_arrays(plan, labels)
        sampled = np.ones(plan.num_vars, bool)
        sampled[np.fromiter(labels, np.int64, len(labels))] = False
        sampled[plan.order[np.flatnonzero(arrays.cond_rows[FIRST_ROW:])]] = False  # deferred parents
        tilt = proposal.tilted_coins(plan, labels, sampled)
        return tilt if tilt.tilted.any() else None

    def label_arrays(self, labels: dict[int, bool]) -> importance.LabelArrays:
        """The host path's label arrays of `labels`, unpadded (padding entries cost as much as real
        ones there: 4 real entries padded to 256 took 1.1 s a batch)."""
        return importance.label_arrays(self.plan, labels, tuple(max(n, 1) for n in importance.needed(
            self.plan, labels)))

    def _proposal(self, labels: dict[int, bool], arrays: importance.LabelArrays):
        """The host's tilted coins for a label set (`fastlbp.engines.proposal`): (coin arrays as
        `host_coins` takes them, the tilted variables' (rows, a1, b1, a2, b2)), or None."""
        plan = self.plan
        sampled = np.ones(plan.num_vars, bool)
        sampled[np.fromiter(labels, np.int64, len(labels))] = False
        sampled[plan.order[np.flatnonzero(arrays.cond_rows[FIRST_ROW:])]] = False  # deferred parents
        tilt = proposal.tilted_coins(plan, labels, sampled)
        if not tilt.tilted.any():
            return None
        q = np.stack([tilt.q1, tilt.q2], axis=1).reshape(-1)  # coin 2 v: p1 of v, 2 v + 1: p2
        p = np.stack([plan.p1, plan.p2], axis=1).reshape(-1)
        ids = np.concatenate([b[1] for b in self._arrays[0]]).astype(np.int64)  # coin of each coin row
        moved = np.flatnonzero(q[ids] != p[ids])  # coin rows (less FIRST_COIN) the tilt changes
        bucket = (digit_bits(digits(q[ids[moved]], 64)), ids[moved].astype(np.uint32),
                  digits_needed(q[ids[moved]]).astype(np.int32))
        vs = np.flatnonzero(tilt.tilted)
        return (bucket, FIRST_COIN + moved), (plan.row_of[vs], tilt.a1[vs], tilt.b1[vs], tilt.a2[vs],
                                              tilt.b2[vs])

    def _draw_host(self, key, start: int, stop: int, acc, *, labels, seed: int, tilt=None):
        """Adds worlds start..stop-1 (both multiples of 32) to the sums `acc` (`tilt`: `_proposal`)."""
        first_word, total_words = start // WORD_BITS, stop // WORD_BITS
        width = min(self.batch_words, 1 << max(0, (total_words - first_word - 1).bit_length()))
        for first in range(first_word, total_words, width):
            valid = min(stop - first * WORD_BITS, width * WORD_BITS)
            # A stream per (seed, first word): world i is the same whatever the rounds.
            rng = np.random.Generator(np.random.Philox(key=(first << 64) | (int(seed) % (1 << 64))))
            coins = host_coins(self._arrays[0], rng, width)
            masks = labels[:3] if labels is not None else None
            if tilt is None:
                state, extra = propagate(np, self._arrays[1], self._meta_levels, self.plan.num_rows,
                                          coins, masks), None
            else:
                # Defensive mixture: words of even index keep the prior's coins, odd ones take the
                # tilted coins; every world is weighed against the mixture (`proposal.mixture_log_w`).
                odd = ((first + np.arange(width)) % 2 == 1)[None, :]
                bucket, rows = tilt[0]
                coins[rows] = np.where(odd, host_coins([bucket], rng, width)[FIRST_COIN:], coins[rows])
                state, conds = propagate(np, self._arrays[1], self._meta_levels, self.plan.num_rows,
                                          coins, masks, conditions=True)
                rows = tilt[1][0]
                extra = proposal.mixture_log_w(proposal.proposal_log_w(
                    _unpack(np, state[rows]), _unpack(np, conds[rows]), *tilt[1][1:]))
            batch = batch_sums(np, state, labels, valid, extra)
            acc = add_batch_sums(np, acc, batch)
        return acc


def _graph_and_names(model_or_graph):
    if isinstance(model_or_graph, FactorGraph):
        return model_or_graph, None
    return model_or_graph.graph, model_or_graph.var_names


@float64
def sample_marginals(model_or_graph, labels: dict[int, bool] | None = None,
                     settings: Settings | None = None, *, sampler: Sampler | None = None,
                     rows: np.ndarray | None = None) -> Marginals:
    """Marginals of every variable by sampling, with the labels as importance weights.

    Args:
        model_or_graph: a `Model` or a `FactorGraph` that is a Bayesian network (one factor per
            head, no cycle; derivation-graph models after cycle elimination are).
        labels: {variable index: truth}.
        settings: `samples` (worlds of the first round), `seed`, `target_se` (draw until every
            standard error over `rows` is at most this; 0: no target), `min_accepted` (fewest
            effective samples) and `max_samples` (the budget in worlds) are read.
        sampler: a `Sampler` already built for this graph (reused across label sets).
        rows: (k,) variables whose standard errors `target_se` bounds (default: the model's alarms
            when given a `Model` with alarms, else every variable).

    Returns:
        `Marginals` with method "sample": float64 estimates, standard errors and 95% Wilson
        intervals (`Tally.estimates`), and info {samples, effective_samples, positive_worlds,
        max_samples, target_se, max_stderr, worlds_per_second, path, batch_words, levels, coins,
        edges, plan_seconds}.

    Raises:
        ContradictoryEvidence: the hard constraints prove the labels have probability 0 (a
            conflicting subset named).
        NoConsistentWorld: no world drawn has positive weight and the constraints prove nothing.
        TooFewSamples: fewer than `settings.min_accepted` effective samples within `max_samples`.
        NotABayesNet: a variable heads several factors, or the factors have a cycle.
    """
    t0 = time.perf_counter()
    settings = settings or Settings()
    graph, names = _graph_and_names(model_or_graph)
    labels = {int(v): bool(t) for v, t in (labels or {}).items()}

    def name(v):
        return names[v] if names is not None else str(v)

    def contradiction():
        # Asked only when a draw holds no world of positive weight: a world of positive weight proves
        # the labels consistent, and the check is host work (19 ms a round at ftp's size).
        core = conflicting_labels(graph, labels)
        if core is not None:
            raise ContradictoryEvidence({name(v): t for v, t in core.items()})

    sampler = sampler or Sampler(graph, names)
    if labels and sampler.host:
        contradiction()  # the host's proposal reads the labels before drawing (small graphs: cheap)
    if rows is None and not isinstance(model_or_graph, FactorGraph) and len(model_or_graph.alarms):
        rows = np.asarray(model_or_graph.alarms, np.int64)
    t1 = time.perf_counter()
    tally = sampler(labels, int(settings.samples), int(settings.seed), target_se=float(settings.target_se),
                    min_effective=float(settings.min_accepted), max_samples=int(settings.max_samples),
                    rows=rows, seconds=float(settings.sample_seconds), on_empty=contradiction)
    draw_seconds = time.perf_counter() - t1
    if tally.positive == 0:
        named = {name(v): t for v, t in labels.items()}
        raise NoConsistentWorld(tally.drawn, int(settings.min_accepted), named)
    if tally.effective < settings.min_accepted:
        raise TooFewSamples(tally.effective, tally.drawn, int(settings.min_accepted), tally.positive)
    p, stderr, lower, upper = tally.estimates()
    with np.errstate(divide="ignore"):
        log_odds = np.log(p) - np.log1p(-p)
    plan = sampler.plan
    se_rows = stderr if rows is None else stderr[rows]
    info = {"samples": tally.drawn, "effective_samples": tally.effective, "positive_worlds": tally.positive,
            "max_samples": int(max(settings.max_samples, settings.samples)),
            "target_se": float(settings.target_se),
            "sample_seconds": float(settings.sample_seconds), "stopped": sampler.stopped,
            "max_stderr": float(se_rows.max()) if se_rows.size else 0.0,
            "worlds_per_second": tally.drawn / draw_seconds if draw_seconds > 0 else float("inf"),
            "path": "host" if sampler.host else "device", "tilted_coins": sampler.tilted_coins,
            "batch_words": sampler.batch_words, "devices": sampler.devices_used,
            "levels": len(plan.levels), "coins": plan.coins,
            "edges": plan.edges, "plan_seconds": sampler.plan_seconds}
    return Marginals(method="sample", marginals=p, log_odds=log_odds, stderr=stderr,
                     seconds=time.perf_counter() - t0, info=info, lower=lower, upper=upper)


__all__ = ["sample_marginals", "Sampler", "Tally", "TooFewSamples", "NoConsistentWorld", "NotABayesNet",
           "threefry2x32", "wilson", "seed_key"]
