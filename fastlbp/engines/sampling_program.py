"""The device sampler: one compiled program per graph, labels, tilts and seeds as data.

    program = build(plan, batch_words=1024)                 # host, once per graph
    run = program.compile()                                 # one jitted function, traced once
    data = program.round_data(labels, tilt)                 # host numpy, per label set (no shapes change)
    sums = run(program.arrays, data, key, first_word, batches, valid)

A round of a triage session changes a few label entries and nothing else about
the sampler's work (docs/DESIGN.md section 16), so nothing the program's shapes
depend on comes from the labels:

* **Steps by shape class, not unrolled.** The plan's rows are in topological
  order, a level's rows of one padded body width contiguous
  (`sampling_plan.build`). Each (level, width) block is cut into steps of a
  power-of-two number of rows (the binary digits of its size, the last small
  remainder rounded up); the steps of one shape (rows R, width K) are stacked
  into arrays (G, R, K) and one `lax.fori_loop` over all steps in order picks
  the shape with `lax.switch` and its step with a dynamic index. The compiled
  branches are the shapes (about 30 on avrora and ftp, 1 on a chain), not the
  levels or steps (423 groups on avrora took minutes to compile unrolled).
  A step writes R rows at its start (`lax.dynamic_update_slice`); rows past the
  block's end are written again by the steps that own them (the state has R
  spare rows at its end), so padding never reaches a row a later step reads.
* **Labels as data.** `row_code` (rows,) uint8 says per state row whether it is
  labelled, its label and whether it is a deferred parent that holds its
  condition (`fastlbp.engines.importance`); label slots and their parent entries
  are arrays of fixed capacities (`Capacity`) with the counts in use as
  scalars. The labels' weights (`importance` section 14) are computed over the
  slots in use only: loops of dynamic trip count over chunks of `SLOT_CHUNK`
  slots and `ENTRY_CHUNK` entries, so a capacity costs memory, not time.
* **The tilted proposal on the device.** Odd words draw a coin from the tilted
  probability q instead of p (the coin's digits for odd words are data,
  `sampling_coins.coin_words(odd_bits=...)`); every world is weighed by
  P / (P + Q) / 2 over the `Capacity.tilts` most tilted coins
  (`fastlbp.engines.proposal`), from their rows' values and conditions (the
  program keeps each row's condition word beside its value).
* **Batches inside the program.** A call draws `batches` batches of W words in
  a `lax.fori_loop` and returns the weighted sums combined (`Sums`), so a
  round is one device call whatever its number of worlds.

World 32 w + i of global word w is the same whatever the batch size or the
number of calls (Threefry counters of (coin, digit pair, global word)), so a
run is deterministic given the seed and the labels.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fastlbp.core.graph import AND
from fastlbp.engines import importance, proposal
from fastlbp.engines.sampling_bits import _LN2, WORD_BITS, _unpack, combine_scaled_sums, scale_exponent
from fastlbp.engines.sampling_coins import HEAD_DIGITS, capacities, coin_words, digit_bits
from fastlbp.engines.sampling_plan import (
    FIRST_COIN,
    FIRST_ROW,
    ONE_COIN,
    ONES_ROW,
    ZEROS_ROW,
    SamplerPlan,
    digits,
    digits_needed,
)
from fastlbp.engines.sampling_weights import (
    ENTRY_CHUNK,
    SLOT_CHUNK,
    _deferred_sums,
    _label_log_w,
    _weighted_sums,
)

_ONES = np.uint32(0xFFFFFFFF)
# Row codes (`RoundData.row_code`): bit 0 labelled, bit 1 its label, bit 2 a deferred parent (holds cond).
LABELLED, TRUE, DEFERRED = 1, 2, 4
TILT_CHUNK = 64  # tilted rows whose log P / Q one trip adds (`_batch`)
# A step may pad its reads (rows to a power of two, bodies to its widest) to this many times its real
# reads, or to SMALL_READS whatever they are (`_level_steps`).
PAD_FACTOR = 4
SMALL_READS = 1 << 12
# Steps a program on the CPU runs as straight-line code (`build`'s unroll_steps); more run in the loop.
UNROLL_STEPS = 400
# Most body reads one step gathers (rows x padded width): larger blocks are cut into more steps.
STEP_READS = 1 << 15


@dataclasses.dataclass(frozen=True)
class Capacity:
    """Fixed sizes of the per-round data: a label set within them compiles nothing.

    Attributes:
        slots: labelled variables.
        entries: body entries of the labelled variables.
        tilts: tilted variables whose coins odd words draw from q.
    """

    slots: int
    entries: int
    tilts: int


def capacity_for(plan: SamplerPlan, variables, tilts: int = 512) -> Capacity:
    """A capacity holding labels on every one of `variables` at once (a session's alarms), plus room."""
    vs = np.unique(np.fromiter((int(v) for v in variables), np.int64))
    entries = int((plan.body_offsets[vs + 1] - plan.body_offsets[vs]).sum()) if vs.size else 0

    def up(n, chunk):
        return max(chunk, -(-n // chunk) * chunk)

    return Capacity(slots=up(vs.size + 64, SLOT_CHUNK), entries=up(entries + 1024, ENTRY_CHUNK),
                    tilts=int(min(tilts, max(plan.num_vars, 1))))


@dataclasses.dataclass(frozen=True)
class Shape:
    """The steps of one shape, stacked (device arrays after `Program.arrays`).

    Attributes:
        rows: (G, R, K) int32 body state rows of each step's rows (padding: ONES_ROW for AND, ZEROS_ROW
            for OR; K may be 0).
        coin1, coin2: (G, R) int32 coin rows of p1 / p2 of each row.
        is_and: (G, R) bool.
    """

    rows: np.ndarray
    coin1: np.ndarray
    coin2: np.ndarray
    is_and: np.ndarray


def _cap(width: int) -> int:
    """Most rows one step of this width may have (a power of two): STEP_READS body reads."""
    most = max(1, STEP_READS // max(width, 1))
    return 1 << (most.bit_length() - 1)


def _level_steps(groups) -> list[tuple[int, int, int, list]]:
    """The steps of one level: (first row, rows, width, [(group, first, end), ...]) in row order.

    A step takes consecutive rows (the level's groups, narrowest first) while its padded reads (rows
    rounded up to a power of two, times the widest body) stay within PAD_FACTOR times its real reads
    (or SMALL_READS), and within STEP_READS: on the GPU a step costs about 50 us of loop and launch
    whatever its size (H200, avrora), so fewer, padded steps are faster than many exact ones.
    """
    units = []  # (group, first, end) chunks of at most `_cap` rows
    for g in groups:
        w = int(g.rows.shape[1])
        for lo in range(0, g.size, _cap(w)):
            units.append((g, lo, min(g.size, lo + _cap(w))))
    out = []
    i = 0
    while i < len(units):
        g0, lo0, _ = units[i]
        first = g0.start + lo0
        parts, rows, real, width = [], 0, 0, 0
        j = i
        while j < len(units):
            g, lo, hi = units[j]
            w = max(width, int(g.rows.shape[1]))
            n = rows + hi - lo
            r = 1 << max(n - 1, 0).bit_length()
            cost = r * max(w, 1)
            if parts and (cost > max(PAD_FACTOR * (real + (hi - lo) * max(int(g.rows.shape[1]), 1)),
                                     SMALL_READS) or r * w > STEP_READS):
                break
            parts.append(units[j])
            rows, width, real = n, w, real + (hi - lo) * max(int(g.rows.shape[1]), 1)
            j += 1
        out.append((first, rows, width, parts))
        i = j
    return out


@dataclasses.dataclass(frozen=True)
class Program:
    """The device program of one graph: its steps, its coins, its capacities (host numpy).

    Attributes:
        plan: the sampling plan.
        shapes: (R, K) of each shape class, in the order of `classes`.
        classes: the stacked steps of each shape.
        step_class, step_index, step_start: (S,) int32 per step in order: its shape, its index among
            that shape's steps, its first state row.
        state_rows: rows of the state (plan rows plus the largest step's R spare rows).
        batch_words: W, words per batch (a power of two).
        capacity: the per-round data's fixed sizes.
        coin_meta: static description of the coin buckets: ((pairs, long coins), ...).
        digits_of_bucket: (buckets,) binary digits a tilted coin of each bucket may have.
    """

    plan: SamplerPlan
    shapes: tuple[tuple[int, int], ...]
    classes: tuple[Shape, ...]
    step_class: np.ndarray
    step_index: np.ndarray
    step_start: np.ndarray
    state_rows: int
    batch_words: int
    capacity: Capacity
    coin_meta: tuple[tuple[int, int], ...]
    digits_of_bucket: tuple[int, ...]
    head_digits: int = HEAD_DIGITS
    tail_capacity: int | None = None
    unroll_steps: int = 0
    table_words: int = 0  # words per byte table of the weighted row sums (`sampling_weights.TABLE_WORDS`)

    @property
    def steps(self) -> int:
        return int(self.step_class.shape[0])

    def arrays(self):
        """The graph's arrays as the compiled program takes them (host numpy; `jax.device_put` them)."""
        coins = tuple((b.bits, b.ids, b.need) for b in self.plan.buckets)
        classes = tuple((c.rows, c.coin1, c.coin2, c.is_and) for c in self.classes)
        return coins, classes, (self.step_class, self.step_index, self.step_start)

    def round_function(self):
        """The round as a pure function of its arrays (`compile` jits it; `jax.jit(...).lower` too)."""
        return functools.partial(_round, self._static())

    def batch_function(self):
        """One batch as a pure function: (arrays, data, key, words, valid) -> its sums (`Sums` as a tuple),
        `words` the batch's (W,) uint32 global word indices. A sharded round calls it on each device
        (`fastlbp.engines.sharded_sampling`)."""
        return functools.partial(_batch, self._static())

    def stages(self, width: int):
        """Jitted stages of one batch of `width` words without labels (tests, benchmarks):
        coins(arrays, key, first_word) -> (C, W); propagate(arrays, coins) -> (V + 2, W) state words."""
        static = dataclasses.replace(self._static(), width=int(width))
        none = round_data(self, {})

        def coins(arrays, key, first):
            words = first + jnp.arange(width, dtype=jnp.uint32)
            odd_bits, odd_need = jax.tree.map(jnp.asarray, (none.odd_bits, none.odd_need))
            return _coins(static, arrays[0], odd_bits, odd_need, key, words)

        def propagate(arrays, c):
            state = _propagate(static, arrays[1], arrays[2], c, jnp.asarray(none.row_code))[0]
            return state[:static.num_rows]

        return jax.jit(coins), jax.jit(propagate)

    def compile(self):
        """The jitted round: (arrays, data, key, first_word, batches, valid) -> `Sums` as a tuple.

        Args of the returned function:
            arrays: `arrays()` on the device.
            data: `round_data(...)` as a tuple (`RoundData.astuple`).
            key: (2,) uint32 the seed's Threefry key.
            first_word: uint32 global index of the first word.
            batches: int32 batches of `batch_words` words to draw.
            valid: int64 worlds to count (those past it in the last batch weigh nothing).
        """
        return jax.jit(functools.partial(_round, self._static()))

    def _static(self):
        unrolled = runs = None
        if self.steps <= self.unroll_steps:
            unrolled = tuple(zip(self.step_class.tolist(), self.step_index.tolist(), self.step_start.tolist(),
                                 strict=True))
        elif self.unroll_steps:
            cut = np.flatnonzero(np.diff(self.step_class)) + 1
            firsts = np.concatenate([[0], cut]).astype(int)
            ends = np.concatenate([cut, [self.steps]]).astype(int)
            runs = tuple((int(self.step_class[a]), int(a), int(b - a))
                         for a, b in zip(firsts, ends, strict=True))
        return _Static(shapes=self.shapes, state_rows=self.state_rows, num_rows=self.plan.num_rows,
                       width=self.batch_words, coin_meta=self.coin_meta, capacity=self.capacity,
                       head_digits=self.head_digits, tail_capacity=self.tail_capacity, unrolled=unrolled,
                       runs=runs, table_words=self.table_words)

    def round_data(self, labels: dict[int, bool], tilt: proposal.Tilt | None = None,
                   tilt_rows: np.ndarray | None = None) -> RoundData:
        """The per-round arrays of `labels` (and of a tilted proposal), at the program's fixed sizes.

        Raises:
            ValueError: the labels need more slots or entries than the capacity holds.
        """
        return round_data(self, labels, tilt)


@dataclasses.dataclass(frozen=True)
class _Static:
    shapes: tuple[tuple[int, int], ...]
    state_rows: int
    num_rows: int
    width: int
    coin_meta: tuple[tuple[int, int], ...]
    capacity: Capacity
    head_digits: int = HEAD_DIGITS
    tail_capacity: int | None = None
    # The steps unrolled as (shape, index, first row) when there are few (`UNROLL_STEPS`), else None.
    unrolled: tuple[tuple[int, int, int], ...] | None = None
    # Else on the CPU: runs of consecutive steps of one shape, (shape, first step, steps), each its own
    # loop without a switch; None: one loop over every step with a switch (a GPU).
    runs: tuple[tuple[int, int, int], ...] | None = None
    table_words: int = 0


def build(plan: SamplerPlan, batch_words: int, capacity: Capacity, *, head_digits: int = HEAD_DIGITS,
          tail_capacity: int | None = None, unroll_steps: int = 0, table_words: int = 0) -> Program:
    """The program of `plan` (host, once per graph).

    Args:
        plan: `sampling_plan.build`'s plan (rows ordered level, then width).
        batch_words: W, words (32 worlds) per batch, a power of two.
        capacity: the fixed sizes of the per-round data (`capacity_for`).
        head_digits, tail_capacity: the coins' head and tail sizes (`sampling_coins.coin_words`).
        unroll_steps: the steps are straight-line code when there are at most this many (the CPU:
            `UNROLL_STEPS`), else one loop over them (a deep chain compiles one step, not thousands).
        table_words: words of worlds per byte table of the labelled rounds' row sums (0: bits
            unpacked and selected; `sampling_weights.TABLE_WORDS`, by platform).
    """
    steps: list[tuple[int, int, int, tuple]] = []  # (first row, R, K, (rows, coin1, coin2, is_and))
    for groups in plan.levels:
        for first, count, width, parts in _level_steps(groups):
            r = 1 << max(count - 1, 0).bit_length()
            # Rows past the step's own are padding: written here, then by the steps that own them.
            pr = np.full((r, width), ONES_ROW, np.int32)
            p1 = np.zeros(r, np.int32)
            p2 = np.zeros(r, np.int32)
            pa = np.ones(r, bool)
            at = 0
            for g, lo, hi in parts:
                n, w = hi - lo, g.rows.shape[1]
                pr[at:at + n, :w] = g.rows[lo:hi]
                # A narrower body is padded to the step's width with its kind's neutral row.
                pr[at:at + n, w:] = ONES_ROW if g.kind == AND else ZEROS_ROW
                p1[at:at + n], p2[at:at + n], pa[at:at + n] = g.coin1[lo:hi], g.coin2[lo:hi], g.kind == AND
                at += n
            steps.append((first, r, width, (pr, p1, p2, pa)))
    shapes = sorted({(r, k) for _, r, k, _ in steps})
    index = {s: i for i, s in enumerate(shapes)}
    stacks: dict[tuple[int, int], list] = {s: [] for s in shapes}
    step_class, step_index, step_start = [], [], []
    for first, r, k, arrays in steps:
        step_class.append(index[r, k])
        step_index.append(len(stacks[r, k]))
        step_start.append(first)
        stacks[r, k].append(arrays)
    classes = []
    for s in shapes:
        items = stacks[s]
        classes.append(Shape(rows=np.stack([x[0] for x in items]), coin1=np.stack([x[1] for x in items]),
                             coin2=np.stack([x[2] for x in items]), is_and=np.stack([x[3] for x in items])))
    spare = max((r for r, _ in shapes), default=1)
    longs = tuple(int(np.count_nonzero(b.need > head_digits)) for b in plan.buckets)
    coin_meta = tuple((b.pairs, n) for b, n in zip(plan.buckets, longs, strict=True))
    # A tilted coin may have as many digits as its bucket's coins are drawn with: the head's alone
    # where no coin of the bucket goes on to the tail.
    digits_of_bucket = tuple(min(2 * pairs, head_digits) if (pairs * 2 <= head_digits or n == 0)
                             else 2 * pairs for pairs, n in coin_meta)
    return Program(plan=plan, shapes=tuple(shapes), classes=tuple(classes),
                   step_class=np.asarray(step_class, np.int32), step_index=np.asarray(step_index, np.int32),
                   step_start=np.asarray(step_start, np.int32), state_rows=plan.num_rows + spare,
                   batch_words=int(batch_words), capacity=capacity, coin_meta=coin_meta,
                   digits_of_bucket=digits_of_bucket, head_digits=head_digits, tail_capacity=tail_capacity,
                   unroll_steps=unroll_steps, table_words=int(table_words))


@dataclasses.dataclass(frozen=True)
class RoundData:
    """The per-round arrays of one label set and proposal, at the program's fixed sizes (host numpy).

    Attributes:
        row_code: (rows,) uint8 per state row: LABELLED | TRUE | DEFERRED bits.
        slots: int32 label slots in use; entries: int32 entries in use.
        slot_and: (L,) bool the labelled variable's factor is an AND.
        slot_log_pa, slot_log_pb: (L,) float64 log P(coin(p1) = label), log P(coin(p2) = label).
        entry_offsets: (L + 1,) int32 CSR offsets of each slot's entries (constant past the last slot).
        entry_slot: (P,) int32; entry_row: (P,) int32 the parent's state row; entry_deferred: (P,) bool;
        entry_p1, entry_p2: (P,) float64 the parent's own p1, p2.
        odd_bits: per coin bucket (2, n) uint32 the digits odd words draw (p's where not tilted);
        odd_need: per coin bucket (n,) int32.
        tilts: int32 tilted rows in use (the first ones of `tilt_rows`).
        tilt_rows: (T,) int32 state rows of the tilted variables (ONES_ROW for padding);
        tilt_a1, tilt_b1, tilt_a2, tilt_b2: (T,) float64 log P / Q of each coin outcome (0 for padding).
        tilted: bool some coin is tilted (the worlds are weighed against the mixture).
    """

    row_code: np.ndarray
    slots: np.ndarray
    entries: np.ndarray
    slot_and: np.ndarray
    slot_log_pa: np.ndarray
    slot_log_pb: np.ndarray
    entry_offsets: np.ndarray
    entry_slot: np.ndarray
    entry_row: np.ndarray
    entry_deferred: np.ndarray
    entry_p1: np.ndarray
    entry_p2: np.ndarray
    odd_bits: tuple
    odd_need: tuple
    tilts: np.ndarray
    tilt_rows: np.ndarray
    tilt_a1: np.ndarray
    tilt_b1: np.ndarray
    tilt_a2: np.ndarray
    tilt_b2: np.ndarray
    tilted: np.ndarray

    def astuple(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


def round_data(program: Program, labels: dict[int, bool], tilt: proposal.Tilt | None = None) -> RoundData:
    """`Program.round_data`."""
    plan, cap = program.plan, program.capacity
    slots, entries = importance.needed(plan, labels)
    if slots > cap.slots or entries > cap.entries:
        raise ValueError(f"labels need {slots} slots and {entries} entries; the program holds "
                         f"{cap.slots} and {cap.entries}")
    arr = importance.label_arrays(plan, labels, (max(slots, 1), max(entries, 1)))
    code = np.zeros(program.state_rows, np.uint8)
    vs = np.fromiter(labels, np.int64, slots)
    truth = np.fromiter(labels.values(), bool, slots)
    code[plan.row_of[vs]] = LABELLED | np.where(truth, TRUE, 0).astype(np.uint8)
    code[:plan.num_rows][arr.cond_rows != 0] |= DEFERRED

    def pad(a, n, fill, dtype):
        out = np.full(n, fill, dtype)
        out[:min(a.shape[0], n)] = a[:n]
        return out

    counts = np.bincount(arr.entry_slot[:entries], minlength=cap.slots)[:cap.slots] if entries else \
        np.zeros(cap.slots, np.int64)
    offsets = np.zeros(cap.slots + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    odd_bits, odd_need = [], []
    for b in plan.buckets:
        odd_bits.append(b.bits)
        odd_need.append(b.need)
    t_rows = np.full(cap.tilts, ONES_ROW, np.int32)
    t_par = np.zeros((4, cap.tilts))
    tilted, n_tilts = False, 0
    if tilt is not None and tilt.tilted.any():
        odd_bits, odd_need, t_rows, t_par, n_tilts = _device_tilt(program, tilt)
        tilted = n_tilts > 0
    return RoundData(
        row_code=code, slots=np.int32(slots), entries=np.int32(entries),
        slot_and=pad(arr.slot_kind[:slots] == AND, cap.slots, True, bool),
        slot_log_pa=pad(arr.slot_log_pa[:slots], cap.slots, 0.0, np.float64),
        slot_log_pb=pad(arr.slot_log_pb[:slots], cap.slots, 0.0, np.float64),
        entry_offsets=offsets,
        entry_slot=pad(arr.entry_slot[:entries], cap.entries, cap.slots - 1, np.int32),
        entry_row=pad(arr.entry_row[:entries], cap.entries, ONES_ROW, np.int32),
        entry_deferred=pad(arr.entry_deferred[:entries], cap.entries, False, bool),
        entry_p1=pad(arr.entry_p1[:entries], cap.entries, 0.0, np.float64),
        entry_p2=pad(arr.entry_p2[:entries], cap.entries, 0.0, np.float64),
        odd_bits=tuple(odd_bits), odd_need=tuple(odd_need), tilts=np.int32(n_tilts), tilt_rows=t_rows,
        tilt_a1=t_par[0], tilt_b1=t_par[1], tilt_a2=t_par[2], tilt_b2=t_par[3], tilted=np.bool_(tilted))


def _device_tilt(program: Program, tilt: proposal.Tilt):
    """The odd words' coin digits and the tilted rows' log P / Q of a `proposal.Tilt`, on the device's
    terms: at most `Capacity.tilts` variables (the most tilted), each q rounded to the digits its
    coin's bucket draws (`Program.digits_of_bucket`), so the coin drawn is exactly q and the weights
    exact for it."""
    plan, cap = program.plan, program.capacity
    p = np.stack([plan.p1, plan.p2], axis=1).reshape(-1)  # coin 2 v: p1 of v, 2 v + 1: p2
    q = np.stack([tilt.q1, tilt.q2], axis=1).reshape(-1)
    moved = np.flatnonzero(q != p)
    var = moved // 2
    # The most tilted variables: by the larger log ratio of their coins' outcomes.
    score = np.zeros(plan.num_vars)
    size = np.maximum.reduce([np.abs(tilt.a1), np.abs(tilt.b1), np.abs(tilt.a2), np.abs(tilt.b2)])
    score[var] = size[var]
    keep_vars = np.argsort(-score, kind="stable")[:cap.tilts]
    keep_vars = keep_vars[score[keep_vars] > 0]
    keep = np.zeros(plan.num_vars, bool)
    keep[keep_vars] = True
    qq = np.where(keep[np.arange(p.size) // 2], q, p)
    odd_bits, odd_need = [], []
    for b, d in zip(plan.buckets, program.digits_of_bucket, strict=True):
        ids = b.ids.astype(np.int64)
        qb = qq[ids]
        moved_b = qb != p[ids]
        step = 2.0 ** d
        rounded = np.clip(np.round(qb * step) / step, 1.0 / step, 1.0 - 1.0 / step)
        qb = np.where(moved_b, rounded, p[ids])
        qq[ids] = qb
        odd_bits.append(digit_bits(digits(qb, 2 * b.pairs)))
        odd_need.append(np.where(moved_b, digits_needed(qb), b.need).astype(np.int32))
    q1, q2 = qq[0::2], qq[1::2]
    with np.errstate(divide="ignore", invalid="ignore"):
        def logs(pp, qv):
            m = qv != pp
            return (np.where(m, np.log(pp) - np.log(qv), 0.0),
                    np.where(m, np.log1p(-pp) - np.log1p(-qv), 0.0))
        a1, b1 = logs(plan.p1, q1)
        a2, b2 = logs(plan.p2, q2)
    vs = np.flatnonzero((a1 != 0) | (b1 != 0) | (a2 != 0) | (b2 != 0))[:cap.tilts]
    rows = np.full(cap.tilts, ONES_ROW, np.int32)
    par = np.zeros((4, cap.tilts))
    rows[:vs.size] = plan.row_of[vs]
    par[:, :vs.size] = np.stack([a1[vs], b1[vs], a2[vs], b2[vs]])
    return tuple(odd_bits), tuple(odd_need), rows, par, int(vs.size)


# ---------------------------------------------------------------------------------------------------
# The compiled round.

def _coins(static: _Static, coin_arrays, odd_bits, odd_need, key, words):
    """(C, W) uint32 coin words: rows ZERO_COIN, ONE_COIN, then the buckets' soft coins."""
    rows = FIRST_COIN + sum(int(ids.shape[0]) for _, ids, _ in coin_arrays)
    # Zeros made from an input: XLA would fold a constant (rows, W) array at compile time (91 s of
    # avrora's compile on this CPU).
    zero = words[0] & np.uint32(0)
    coins = jnp.full((rows, words.shape[0]), zero, jnp.uint32).at[ONE_COIN].set(_ONES)
    start = FIRST_COIN
    for (bits, ids, need), (pairs, long_coins), ob, on in zip(coin_arrays, static.coin_meta, odd_bits,
                                                               odd_need, strict=True):
        x = coin_words(key, bits, ids, need, words, pairs, static.head_digits, long_coins,
                       static.tail_capacity, ob, on)
        coins = lax.dynamic_update_slice(coins, x, (start, 0))
        start += int(ids.shape[0])
    return coins


def _take(table, idx):
    """table[idx] along axis 0 for an int index array of any shape (one gather primitive)."""
    dims = lax.GatherDimensionNumbers(offset_dims=(idx.ndim,), collapsed_slice_dims=(0,),
                                      start_index_map=(0,))
    return lax.gather(table, lax.expand_dims(idx, (idx.ndim,)), dims, (1, table.shape[1]),
                      mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _propagate(static: _Static, classes, steps, coins, row_code):
    """(state, conds): (rows, W) uint32 value and condition words of every state row."""
    width = coins.shape[1]
    size = static.state_rows
    zero = coins[0, 0] & np.uint32(0)  # from an input, so XLA does not fold the (rows, W) arrays
    # Values in rows [0, S), conditions in [S, 2 S): one buffer, updated in place by every step (two
    # buffers carried through the steps' switch were copied at every step: 250 ms of a 290 ms avrora
    # round on the H200).
    words = jnp.full((2 * size, width), zero, jnp.uint32).at[ONES_ROW].set(_ONES)
    step_class, step_index, step_start = steps
    code = row_code.astype(jnp.uint32)
    labelled = (code & LABELLED) != 0
    force_and = jnp.where(labelled & ((code & TRUE) == 0), np.uint32(0), _ONES)
    force_or = jnp.where(labelled & ((code & TRUE) != 0), _ONES, np.uint32(0))
    hold = jnp.where((code & DEFERRED) != 0, _ONES, np.uint32(0))

    def branch(c, words, g, start):
        r, k = static.shapes[c]
        rows_all, c1_all, c2_all, and_all = classes[c]
        c1 = _take(coins, lax.dynamic_index_in_dim(c1_all, g, keepdims=False))  # (R, W)
        c2 = _take(coins, lax.dynamic_index_in_dim(c2_all, g, keepdims=False))
        if k == 0:
            cond = jnp.full((r, width), _ONES, jnp.uint32)
        else:
            body = _take(words, lax.dynamic_index_in_dim(rows_all, g, keepdims=False))  # (R, K, W)
            all_ = lax.reduce(body, _ONES, lax.bitwise_and, (1,))
            any_ = lax.reduce(body, np.uint32(0), lax.bitwise_or, (1,))
            is_and = lax.dynamic_index_in_dim(and_all, g, keepdims=False)
            cond = jnp.where(is_and[:, None], all_, any_)
        x = (cond & c1) | (~cond & c2)
        keep = lax.dynamic_slice_in_dim(hold, start, r)[:, None]
        x = (cond & keep) | (x & ~keep)
        x = (x & lax.dynamic_slice_in_dim(force_and, start, r)[:, None]) | \
            lax.dynamic_slice_in_dim(force_or, start, r)[:, None]
        words = lax.dynamic_update_slice(words, x, (start, jnp.int32(0)))
        return lax.dynamic_update_slice(words, cond, (start + size, jnp.int32(0)))

    branches = [functools.partial(branch, c) for c in range(len(static.shapes))]

    def step(s, words):
        return lax.switch(step_class[s], branches, words, step_index[s], step_start[s])

    if static.unrolled is not None:
        # Straight-line steps: XLA's CPU backend copied the whole buffer through every step of the
        # loop's switch (about 20 ms a step at avrora's 21K rows x 512 words on this CPU).
        for c, g, start in static.unrolled:
            words = branch(c, words, np.int32(g), np.int32(start))
    elif static.runs is not None:
        # A loop per run of one shape, no switch: XLA's CPU loop updates its one buffer in place then
        # (a deep chain: one run of 10,000 steps).
        for c, first, count in static.runs:
            def run(i, words, c=c, first=first):
                s = first + i
                return branch(c, words, step_index[s], step_start[s])

            words = lax.fori_loop(0, count, run, words) if count > 1 else run(0, words)
    elif branches:
        words = lax.fori_loop(0, step_class.shape[0], step, words)
    return words[:size], words[size:]


def _batch(static: _Static, arrays, data, key, words, valid):
    """The weighted sums of one batch of words: (s1 (rows,), s2 (rows,), w1, w2, top, positive)."""
    coin_arrays, classes, steps = arrays
    (row_code, slots, _, _, _, _, _, entry_slot, entry_row, entry_deferred, _, _,
     odd_bits, odd_need, n_tilts, tilt_rows, a1, b1, a2, b2, tilted) = data
    coins = _coins(static, coin_arrays, odd_bits, odd_need, key, words)
    state, conds = _propagate(static, classes, steps, coins, row_code)
    state = state[:static.num_rows]
    width = static.width
    n_worlds = width * WORD_BITS
    ok = jnp.arange(n_worlds) < valid

    def plain(_):
        room = jnp.clip(valid - jnp.arange(width) * WORD_BITS, 0, WORD_BITS)
        keep = jnp.where(room >= WORD_BITS, _ONES,
                         (np.uint32(1) << jnp.minimum(room, 31).astype(np.uint32)) - np.uint32(1))
        counts = jnp.bitwise_count(state & keep[None, :]).astype(jnp.float64).sum(axis=1)
        n = ok.sum().astype(jnp.float64)
        return counts, counts, n, n, jnp.zeros((), jnp.float64), ok.sum()

    def weighted(_):
        def bits_of(rows):
            return _unpack(jnp, _take(state, rows))

        log_w = _label_log_w(data, bits_of, n_worlds, static.capacity)

        def with_tilt(log_w):
            # log P / Q of the tilted coins a world drew, over the tilted rows in use, a chunk a trip:
            # b2 + x (a2 - b2) + c (b1 - b2) + x c (a1 - b1 - a2 + b2) per row, as three products.
            def trip(k, lr):
                idx = k * TILT_CHUNK + jnp.arange(TILT_CHUNK, dtype=jnp.int32)
                ok = idx < n_tilts
                safe = jnp.where(ok, idx, 0)
                rows = jnp.where(ok, tilt_rows[safe], ONES_ROW)
                x = _unpack(jnp, _take(state, rows))
                c = _unpack(jnp, _take(conds, rows))
                ta1, tb1, ta2, tb2 = (jnp.where(ok, v[safe], 0.0) for v in (a1, b1, a2, b2))
                f = jnp.float64
                return (lr + tb2.sum() + (ta2 - tb2) @ x.astype(f) + (tb1 - tb2) @ c.astype(f)
                        + (ta1 - tb1 - ta2 + tb2) @ (x & c).astype(f))

            trips = (n_tilts + TILT_CHUNK - 1) // TILT_CHUNK
            lr = lax.fori_loop(0, trips, trip, jnp.zeros(n_worlds))
            return log_w - jnp.logaddexp(np.log(proposal.PRIOR_SHARE), np.log1p(-proposal.PRIOR_SHARE) - lr)

        log_w = lax.cond(tilted, with_tilt, lambda lw: lw, log_w)
        log_w = jnp.where(ok, log_w, -np.inf)
        top = scale_exponent(jnp, log_w.max())  # the batch's scale 2^top (`combine_scaled_sums`)
        scale = jnp.where(top > -np.inf, top * _LN2, 0.0)
        omega = jnp.where(log_w > -np.inf, jnp.exp(log_w - scale), 0.0)
        omega2 = omega * omega
        s1, s2 = _weighted_sums(state, omega, omega2, static.table_words)
        e1, e2 = _deferred_sums(data, bits_of, omega, static.capacity)
        in_use = jnp.arange(entry_row.shape[0]) < data[2]
        target = jnp.where(entry_deferred & in_use, entry_row, static.num_rows)
        s1 = s1.at[target].set(e1, mode="drop")
        s2 = s2.at[target].set(e2, mode="drop")
        return s1, s2, omega.sum(), omega2.sum(), top, (log_w > -np.inf).sum()

    return lax.cond((slots > 0) | tilted, weighted, plain, None)


def combine_sums(acc, batch):
    """Two sets of weighted sums with their own scales, on the larger one (jax;
    `sampling_bits.combine_scaled_sums`)."""
    return combine_scaled_sums(jnp, acc, batch)


def _round(static: _Static, arrays, data, key, first_word, batches, valid):
    """`batches` batches of W words from `first_word`: their sums combined (`Program.compile`)."""
    width = static.width
    rows = static.num_rows
    init = (jnp.zeros(rows), jnp.zeros(rows), jnp.zeros(()), jnp.zeros(()), jnp.full((), -np.inf),
            jnp.zeros((), jnp.int64))

    def one(b, acc):
        first = first_word + (b * width).astype(jnp.uint32)
        words = first + jnp.arange(width, dtype=jnp.uint32)
        left = valid - b.astype(jnp.int64) * (width * WORD_BITS)
        batch = _batch(static, arrays, data, key, words, jnp.clip(left, 0, width * WORD_BITS))
        return combine_sums(acc, batch)

    return lax.fori_loop(0, batches, one, init)


def byte_floor(plan: SamplerPlan, worlds: int) -> int:
    """Bytes a round of `worlds` worlds must move at least: every edge read and row written once per
    world word, 4 bytes a word (docs/DESIGN.md section 16)."""
    return 4 * (plan.edges + plan.num_vars) * -(-int(worlds) // WORD_BITS)


def tail_capacities(plan: SamplerPlan, width: int) -> list[tuple[int, int]]:
    """The coin tail's capacities per bucket at `width` words (for memory estimates)."""
    return [capacities(int(np.count_nonzero(b.need > HEAD_DIGITS)), width, HEAD_DIGITS)
            for b in plan.buckets]


__all__ = ["Program", "Capacity", "RoundData", "build", "capacity_for", "round_data", "byte_floor",
           "combine_sums", "LABELLED", "TRUE", "DEFERRED", "ZEROS_ROW", "FIRST_ROW", "math"]
