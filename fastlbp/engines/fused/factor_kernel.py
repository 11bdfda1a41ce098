"""Fused PARALL for the GPU: one Pallas kernel per half-sweep.

The XLA path (`fastlbp.kernels`) runs an iteration as about twenty kernels,
and at 0.5M edges their launches, not the bytes, set the time. Here an
iteration is mainly two Pallas (Triton) kernels:

* the *factor kernel* reads each factor's messages and its variables'
  totals, forms the variable-to-factor messages, the body terms and their
  exact leave-one-out sums, and writes the new factor-to-variable messages;
* the *variable kernel* sums each variable's incoming messages and its
  evidence into the totals the next factor kernel reads, forms the marginal
  and the largest change of any marginal (the convergence test).

Layout (`build`, once per graph, on the host). Both sides use *rows*: a factor
(or a variable) is one row of W slots, W the next power of two of its number
of edges, unused slots padded (-1); on the factor side a row of 4 or 8 slots
may hold two factors (5 and 3 edges, 3 and 1, ...: `PAIRS`), summed apart.
Rows of one width are a *class*; a program takes a tile of R x W = `TILE`
slots of one class (R rows), so every row is reduced inside one program with
no atomics and no mixing of neighbouring rows: a factor whose terms are all
tiny keeps its tiny sum exactly. Rows wider than `TILE` (hub tuples, OR
factors with thousands of derivations) are cut into chunks of `TILE` slots,
one program each (the first programs of the grid); a chunk writes partial
aggregates. On the GPU the chunks of a wide factor row then wait for each
other (an atomic count per row, `Control.factor_done`: chunk programs take
their chunks by ticket as they start, a row's chunks are consecutive, and no
row has more than the GPU holds at once), combine the row's partials (no
subtraction) and write their own messages.
The interpreter runs programs one after another and cannot wait, so there
(and for a row of more chunks than the GPU has SMs) a second kernel over the
wide factors' chunks does that. A wide variable is totalled by the last of
its chunks to finish (an atomic count per row, `Control.done`). So an
iteration is two Pallas kernels on the GPU, and no XLA
kernel runs between them: the loop's control (iterations, the largest change,
a conflict, whether to go on) lives in small device arrays the kernels read
and write themselves (`Control`; the largest change is folded in by atomic
max). Messages, totals and marginals are updated in place. The while loop
tests the control cells once per trip of several sweeps.

* Message slots are the factor rows laid end to end: a factor's edges are
  contiguous, its head first, rows of one width (and so of one size
  class) together. Messages live in this padded order for the whole run
  (`edge_slot` maps a graph edge to its slot); loads and stores of the factor
  kernel are contiguous.
* Variable slots are the variable rows laid end to end; each holds the
  message slot of one of the variable's edges (the dual permutation), so the
  variable kernel gathers its messages. Variables are renumbered in row order
  (`var_kvar`), so the variable kernel's totals are contiguous stores and the
  factor kernel gathers them through `slot_var` (int32).
* A variable's total is its finite log-odds sum (float) and a count of +inf
  and -inf terms (hard evidence), each saturated at 2 and packed in one int32
  (`pos + 4 * neg`, stored as the bits of a float beside the sum): leave-one-out
  only needs to know whether another infinite term remains.
* Each message slot has a role byte (`slot_role`: its row's second factor, a
  head), read beside its variable.

Per factor, the body terms are log m(1) (AND) or log m(0) (OR) of the
variable-to-factor messages. An edge's "others" sum is S - own term, except for
a dominant term (below S/2; at most one), whose others are summed directly, so
no tiny sum is lost to cancellation (see `kernels.factor_aggregates`). A wide
row's chunks cannot see S, so there the row's smallest term (the only one that
can dominate) plays that part. The messages are `logspace.factor_messages`, as
in `fastlbp.kernels`.

Compile time. The factor kernel's per-slot math is written once, on the
program's flat slots; only the row reductions branch on the row width (a
`lax.switch`), since Triton compiles every branch and the math in each of ten
branches took 5 s to compile. The passes are jitted on their own and the
loop's first sweep primes it (no variable pass before the loop), so each
kernel is lowered once however many sweeps a trip unrolls.

On the CPU (tests) the same kernels run with `interpret=True`.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp import kernels
from fastlbp.graph import FactorGraph
from fastlbp.logspace import log_sigmoid, messages_from_rho, quotient, signed, terms_and_rho


def _quiet_triton_dialect_lookup() -> None:
    """Stops MLIR's search for a Python module of the Triton dialect.

    At every Triton op it builds, MLIR's Python bindings look for a module
    named after the dialect ("tt") under their search prefixes, find none and
    do not remember it: thousands of failed imports per kernel, a quarter of
    the fused loop's lowering time. Naming the dialect's own module there ends
    the search; nothing else imports that name.
    """
    import sys

    try:
        from jax._src.lib import triton
    except ImportError:
        return
    dialect = getattr(triton, "dialect", None)
    if dialect is not None:
        sys.modules.setdefault("jaxlib.mlir.dialects.tt", dialect)


_quiet_triton_dialect_lookup()

TILE = 512  # slots per program: a tile of rows of width <= TILE, or a chunk of a wider row
NUM_WARPS = 8
# Runners pick the tile and warps by precision unless told. float64 runs faster with one
# slot per thread, the factor kernel being short of registers (session 5: 20 % less time
# per iteration than two), and with 128-slot tiles of 4 warps rather than 256 of 8 (session
# 6: 4-6 % less at 0.5M and 5M edges on the H200); float32 with two slots per thread
# (BENCHMARKS.md).
AUTO_TILE = {8: 128, 4: 512}
AUTO_WARPS = {8: 4, 4: 8}
# The variable kernel (28-32 registers) takes 512-slot tiles in both precisions: with float64,
# 3-10 % less time per iteration at 0.5M edges than 256 (BENCHMARKS.md, session 6).
AUTO_VAR_TILE = {8: 512, 4: 512}
# Its warps are its own, 8 in both precisions (two slots per thread). float64 used to take the
# factor kernel's 4; 4 and 8 measured alike, 16 slower (BENCHMARKS.md, session 7). It is bound
# by the latency of its gather of messages, not by its instructions.
AUTO_VAR_WARPS = {8: 8, 4: 8}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Side:
    """Rows and programs of one side (factors or variables).

    Attributes:
        slots: (S,) int32. Factor side: kernel variable of each message slot;
            variable side: message slot of each variable slot. -1 = padding.
        prog_class: (P,) int32 branch of each program (index into `widths`;
            len(widths) = a chunk of a wide row).
        prog_row0: (P,) int32 first row of the tile (the row of a chunk).
        prog_head: (P,) int32 first slot of a chunk's row (0 for tiles).
        prog_shift: (P,) int32 log2 of the program's row width (of `tile` for a chunk).
        widths: static, the row widths of the tile classes present.
        tile: static, slots per program (a tile of rows, or a chunk of a wide row).
        wide_first: (max(wide_rows, 1),) int32 first program (= chunk) of each wide row.
        wide_count: (max(wide_rows, 1),) int32 chunks of each wide row.
        wide_chunks: static, programs (the first ones) that take a chunk.
        wide_rows: static, wide rows (the first rows).
        max_row_chunks: static, a power of two >= the chunks of any wide row.
    """

    slots: jax.Array
    prog_class: jax.Array
    prog_row0: jax.Array
    prog_head: jax.Array
    prog_shift: jax.Array
    wide_first: jax.Array
    wide_count: jax.Array
    widths: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    tile: int = dataclasses.field(metadata=dict(static=True))
    wide_chunks: int = dataclasses.field(metadata=dict(static=True))
    wide_rows: int = dataclasses.field(metadata=dict(static=True))
    max_row_chunks: int = dataclasses.field(metadata=dict(static=True))

    @property
    def chunk(self) -> int:
        """Slots per chunk of a wide row: a tile's."""
        return self.tile

    @property
    def partials(self) -> int:
        """Length of a partial-aggregate array: a masked window of `max_row_chunks` stays inside."""
        return self.wide_chunks + self.max_row_chunks

    @property
    def num_programs(self) -> int:
        return int(self.prog_class.shape[0])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FusedLayout:
    """The padded row layout of a factor graph (see the module docstring).

    Attributes:
        factors: factor rows; `factors.slots` is the kernel variable of each
            message slot.
        variables: variable rows; `variables.slots` is a message slot.
        edge_slot: (E,) int32 message slot of each graph edge.
        seg_factor: (2 Rf,) int32 the factors of each factor row: its first (2 row) and
            second (2 row + 1), -1 for none.
        row_split: (Rf,) int32 column of each factor row's second factor (the tile if none).
        slot_role: (S,) int8 of each message slot: 1 if it belongs to its row's second factor,
            + 2 if it is its factor's head (first) slot. The factor kernel reads it beside the
            slot's variable rather than look `row_split` up by row (a dependent load less).
        var_kvar: (V,) int32 kernel variable (variable row) of each variable.
        kvar_var: (Vk,) int32 variable of each variable row (-1 padding row).
    """

    factors: Side
    variables: Side
    edge_slot: jax.Array
    seg_factor: jax.Array
    row_split: jax.Array
    slot_role: jax.Array
    var_kvar: jax.Array
    kvar_var: jax.Array

    @property
    def num_slots(self) -> int:
        return int(self.factors.slots.shape[0])

    @property
    def num_kvars(self) -> int:
        return int(self.kvar_var.shape[0])


# Pairs of item sizes that share a row (`_rows(pair=True)`, factors): a factor of 5 edges
# fills 5 of its row's 8 slots, and one of 3 edges the other 3; most factors of a derivation
# graph have 1-5 edges, so a third of the slots were padding. In this order, exact fits first.
PAIRS = ((5, 3), (6, 2), (7, 1), (3, 1), (5, 2), (5, 1), (6, 1))
PAIRED_WIDTHS = (4, 8)  # the row widths of those pairs (the kernels sum such rows by segment)


def _pairs(sizes: np.ndarray, eligible: np.ndarray):
    """(first, second) items of the shared rows: `PAIRS`, greedily, among `eligible` items."""
    pools = {k: np.flatnonzero(eligible & (sizes == k)) for k in range(1, 8)}
    first, second = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for big, small in PAIRS:
        n = min(pools[big].size, pools[small].size)
        first.append(pools[big][:n])
        second.append(pools[small][:n])
        pools[big], pools[small] = pools[big][n:], pools[small][n:]
    return np.concatenate(first), np.concatenate(second)


def _rows(sizes: np.ndarray, tile: int, pair: bool = False):
    """Packs items of `sizes` slots into rows and programs.

    A row holds one item from its column 0, or (`pair`) two: a second from
    column `split` (the first's size; `PAIRS`).

    Returns:
        row_item: (R,) first item of each row, -1 for padding rows.
        row_slot0: (R,) first slot of each row.
        row_split: (R,) column of the row's second item (the row's width if none).
        item_slot0: (N,) first slot of each item.
        total_slots, widths, the program tables and the wide rows' tables.
    """
    sizes = np.maximum(np.asarray(sizes, np.int64), 1)
    chunk = tile
    width = 1 << np.ceil(np.log2(sizes)).astype(np.int64)
    wide = width > tile
    partner = np.full(sizes.size, -1, np.int64)  # a row's second item, on its first
    if pair:
        first, second = _pairs(sizes, ~wide)
        fits = sizes[first] + sizes[second] <= tile
        first, second = first[fits], second[fits]
        partner[first] = second
        width[first] = 1 << np.ceil(np.log2(sizes[first] + sizes[second])).astype(np.int64)
        width[second] = 0  # placed with its first
    row_item, row_slot0 = [], []
    prog = {"class": [], "slot0": [], "row0": [], "head": [], "shift": []}
    slot = row = 0
    present = [int(w) for w in np.unique(width[~wide])[::-1]]

    # Wide rows first (the longest first), one program per chunk.
    wide_items = np.flatnonzero(wide)
    wide_items = wide_items[np.argsort(-sizes[wide_items], kind="stable")]
    n_chunks = -(-sizes[wide_items] // chunk)
    spans = n_chunks * chunk
    if wide_items.size:
        starts = slot + np.concatenate([[0], np.cumsum(spans)[:-1]])
        row_item.append(wide_items)
        row_slot0.append(starts)
        chunk_row = np.repeat(np.arange(wide_items.size), n_chunks)
        chunk_k = np.arange(int(n_chunks.sum())) - np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks)
        prog["class"].append(np.full(chunk_row.size, len(present)))
        prog["slot0"].append(starts[chunk_row] + chunk * chunk_k)
        prog["row0"].append(row + chunk_row)
        prog["head"].append(starts[chunk_row])
        prog["shift"].append(np.full(chunk_row.size, int(chunk).bit_length() - 1))
        slot += int(spans.sum())
        row += wide_items.size
    present = [w for w in present if w > 0]
    for k, w in enumerate(present):
        items = np.flatnonzero(width == w)
        r = tile // w
        n_rows = -(-items.size // r) * r
        padded = np.full(n_rows, -1, np.int64)
        padded[: items.size] = items
        row_item.append(padded)
        row_slot0.append(slot + w * np.arange(n_rows))
        n_progs = n_rows // r
        prog["class"].append(np.full(n_progs, k))
        prog["slot0"].append(slot + tile * np.arange(n_progs))
        prog["row0"].append(row + r * np.arange(n_progs))
        prog["head"].append(np.zeros(n_progs, np.int64))
        prog["shift"].append(np.full(n_progs, int(w).bit_length() - 1))
        slot += n_rows * w
        row += n_rows
    # Every branch is traced (and the interpreter checks its slices), so the
    # arrays are at least one chunk (slots) or one tile (rows) long.
    if row < tile:
        row_item.append(np.full(tile - row, -1, np.int64))
        row_slot0.append(np.full(tile - row, slot, np.int64))
    slot = max(slot, chunk)
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
    tables = {k: cat(v).astype(np.int32) for k, v in prog.items()}
    row_item, row_slot0 = cat(row_item), cat(row_slot0)
    real = row_item >= 0
    item_slot0 = np.full(sizes.size, -1, np.int64)
    item_slot0[row_item[real]] = row_slot0[real]
    row_split = np.full(row_item.size, tile, np.int64)
    row_second = np.full(row_item.size, -1, np.int64)
    paired = real.copy()
    paired[real] = partner[row_item[real]] >= 0
    row_split[paired] = sizes[row_item[paired]]
    row_second[paired] = partner[row_item[paired]]
    item_slot0[row_second[paired]] = row_slot0[paired] + row_split[paired]
    # Programs' tiles and chunks are laid end to end: the kernels take a program's first
    # slot to be program * tile rather than load it (one dependent load less).
    slot0 = tables.pop("slot0")
    assert np.array_equal(slot0, tile * np.arange(slot0.size))
    if slot >= 2**31 - 1:
        raise ValueError("graph too large for int32 slot indices")
    first = np.concatenate([[0], np.cumsum(n_chunks)[:-1]]) if wide_items.size else np.zeros(1, np.int64)
    count = n_chunks if wide_items.size else np.zeros(1, np.int64)
    most = int(n_chunks.max()) if wide_items.size else 1
    wide_info = (int(n_chunks.sum()), int(wide_items.size), 1 << max(1, (most - 1).bit_length()),
                 first.astype(np.int32), count.astype(np.int32))
    rows = dict(item=row_item, second=row_second, split=row_split, item_slot0=item_slot0)
    return rows, slot, tuple(present), tables, wide_info


def _fill(item_slot0, offsets):
    """Slot of each item element, in CSR order."""
    offsets = np.asarray(offsets, np.int64)
    sizes = np.diff(offsets)
    elem_item = np.repeat(np.arange(sizes.shape[0]), sizes)
    return item_slot0[elem_item] + (np.arange(offsets[-1]) - offsets[:-1][elem_item])


def _slot_role(f_rows: dict, f_off: np.ndarray, n_slots: int) -> np.ndarray:
    """`FusedLayout.slot_role`: bit 1 on the slots of each row's second factor, bit 2 on heads."""
    role = np.zeros(n_slots, np.int8)
    slot0 = f_rows["item_slot0"]  # every factor has a row, and its head is its first slot
    role[slot0] |= 2
    second = np.zeros(slot0.size, bool)
    second[f_rows["second"][f_rows["second"] >= 0]] = True
    role[_fill(slot0, f_off)[np.repeat(second, np.diff(f_off))]] |= 1
    return role


def build(graph: FactorGraph, tile: int = TILE, var_tile: int | None = None) -> FusedLayout:
    """Builds the row layout of `graph` (host side, vectorised numpy).

    `tile` slots per factor-kernel program, `var_tile` (default: `tile`) per
    variable-kernel program.
    """
    var_tile = var_tile or tile
    if any(t < 1 or t & (t - 1) for t in (tile, var_tile)):
        raise ValueError("tiles must be powers of two")
    g = graph.to_numpy()
    f_off = np.asarray(g.factor_offsets, np.int64)
    v_off = np.asarray(g.var_offsets, np.int64)

    # Variables first: their row order is the kernel numbering.
    v_rows, v_slots, v_widths, v_tables, v_wide = _rows(np.diff(v_off), var_tile)
    var_elem_slot = _fill(v_rows["item_slot0"], v_off)
    v_item = v_rows["item"]
    var_row = np.full(v_off.size - 1, -1, np.int64)
    var_row[v_item[v_item >= 0]] = np.flatnonzero(v_item >= 0)

    f_rows, f_slots, f_widths, f_tables, f_wide = _rows(np.diff(f_off), tile, pair=True)
    edge_slot = _fill(f_rows["item_slot0"], f_off)

    slot_var = np.full(f_slots, -1, np.int64)
    slot_var[edge_slot] = var_row[np.asarray(g.edge_var, np.int64)]
    var_slots = np.full(v_slots, -1, np.int64)
    var_slots[var_elem_slot] = edge_slot[np.asarray(g.var_edges, np.int64)]

    def side(slots, widths, tables, wide, tile):
        return Side(slots=jnp.asarray(slots, jnp.int32), prog_class=jnp.asarray(tables["class"]),
                    prog_row0=jnp.asarray(tables["row0"]),
                    prog_head=jnp.asarray(tables["head"]), prog_shift=jnp.asarray(tables["shift"]),
                    wide_first=jnp.asarray(wide[3]),
                    wide_count=jnp.asarray(wide[4]), widths=widths, tile=tile,
                    wide_chunks=wide[0], wide_rows=wide[1], max_row_chunks=wide[2])

    return FusedLayout(
        factors=side(slot_var, f_widths, f_tables, f_wide, tile),
        variables=side(var_slots, v_widths, v_tables, v_wide, var_tile),
        edge_slot=jnp.asarray(edge_slot, jnp.int32),
        seg_factor=jnp.asarray(np.stack([f_rows["item"], f_rows["second"]], axis=1).reshape(-1), jnp.int32),
        row_split=jnp.asarray(f_rows["split"], jnp.int32),
        slot_role=jnp.asarray(_slot_role(f_rows, f_off, f_slots), jnp.int8),
        var_kvar=jnp.asarray(var_row, jnp.int32),
        kvar_var=jnp.asarray(v_item, jnp.int32),
    )


@functools.cache
def _kernel(fn, *static):
    """`fn` with its static arguments bound, one object per setting: JAX then traces and lowers
    a kernel once per jit, not once per call site (the loop calls each kernel once per sweep)."""
    return functools.partial(fn, *static)


# ---------------------------------------------------------------- math (jnp, runs inside kernels)

def _var_to_factor(m, fin, cnt):
    """Variable-to-factor log-odds: the variable's total less the edge's own message."""
    own_pos = (m == jnp.inf).astype(jnp.int32)
    own_neg = (m == -jnp.inf).astype(jnp.int32)
    pos = (cnt & 3) - own_pos > 0
    neg = (cnt >> 2) - own_neg > 0
    finite_own = jnp.where((own_pos + own_neg) > 0, jnp.zeros_like(m), m)
    soft = fin - finite_own
    return signed(pos, neg, soft)


def _split_zero(t, body):
    """A body term's finite part (0 off the body) and whether it is -inf (a zero)."""
    t = jnp.where(body, t, jnp.zeros_like(t))
    zero = t == -jnp.inf
    return jnp.where(zero, jnp.zeros_like(t), t), zero


def _body_terms(n, body, is_and):
    """Finite part of the body term and whether it is -inf (a zero)."""
    return _split_zero(log_sigmoid(jnp.where(is_and, n, -n)), body)


def _terms_and_rho(n, is_head, body, is_and, q, r, q1, r1):
    """`_body_terms` on body slots and the head's log rho (`logspace.terms_and_rho`: shared exp, log1p)."""
    t, lr = terms_and_rho(jnp.where(is_head | is_and, n, -n), is_head, q, r, q1, r1)
    return (*_split_zero(t, body), lr)


def _messages(tf, zero, is_min, S, Z, O, lr, is_head, is_and, *params):
    others_zero = Z - zero.astype(jnp.int32)
    others = jnp.where(is_min, O, S - tf)
    c = jnp.where(others_zero > 0, jnp.full_like(others, -jnp.inf), others)
    return messages_from_rho(is_head, is_and, c, lr, *params)


def _finish(new, m, valid, damping):
    mixed = (1 - damping) * new + damping * m
    out = jnp.where(jnp.isfinite(new) & jnp.isfinite(m), mixed, new)
    return jnp.where(valid, out, jnp.zeros_like(out))


# Loop control lives on the device, in cells written by the kernels themselves, so a
# sweep runs no XLA kernel between the Pallas ones. Sweeps alternate between two sets of
# cells (the parity, a (1,) operand): a sweep reads the last sweep's cells and writes its
# own, so no program reads a cell another program of the same kernel writes.
IT, BAD, PRIMED, MAX_ITERS = 0, 2, 4, 6  # ctl: (8,) int32; IT + parity etc.
# dlt: (2 * DELTA_LANES,) the largest change, DELTA_LANES cells per parity: program k folds its
# change into cell k % DELTA_LANES, so the atomics of thousands of programs do not queue on one.
DELTA_LANES = 32


def _control(ctl_ref, dlt_ref, lim_ref, par):
    """(go, run, it, bad, cells) of the sweep of parity `par`, from the last sweep's cells.

    go: this sweep updates messages (primed, under max_iters, not converged, no
    conflict); run: its variable pass runs (go, or the priming sweep); cells: the
    last sweep's `DELTA_LANES` change cells (their max is the largest change).
    """
    from jax.experimental import pallas as pl

    prev = 1 - par
    it = ctl_ref[IT + prev]
    bad = ctl_ref[BAD + prev]
    primed = ctl_ref[PRIMED + prev] > 0
    cells = dlt_ref[pl.ds(prev * DELTA_LANES, DELTA_LANES)]
    # Whether some cell reaches tol is all a program needs: an int32 max over the lanes (one
    # warp instruction) where the float64 max took five rounds of shuffles, about 50
    # instructions in every warp of every program.
    above = jnp.max((cells >= lim_ref[0]).astype(jnp.int32)) > 0
    go = primed & (it < ctl_ref[MAX_ITERS]) & above & (bad == 0)
    return go, go | ~primed, it, bad, cells


def _count_bits(count, dtype):
    """int32 counts as floats of `dtype` holding their bits (the totals' second field), so the
    factor kernel reads them back with a bitcast, not a float-to-int conversion with its
    range and NaN checks."""
    itype = jnp.int64 if jnp.dtype(dtype).itemsize == 8 else jnp.int32
    return jax.lax.bitcast_convert_type(count.astype(itype), dtype)


def _count_of(bits):
    """The counts `_count_bits` stored, as int32."""
    itype = jnp.int64 if bits.dtype.itemsize == 8 else jnp.int32
    return jax.lax.bitcast_convert_type(bits, itype).astype(jnp.int32)


# ---------------------------------------------------------------- factor kernels

def _incoming(sv_ref, m_ref, tot_ref, sl):
    """A program's slots: their old messages, which are real, and the variable-to-factor messages."""
    sv = sv_ref[sl]
    m = m_ref[sl]
    valid = sv >= 0
    idx = jnp.where(valid, sv, 0)
    # A variable's finite sum and its counts share a 16-byte record: the second load hits
    # the sector the first brought in, halving the random traffic of this gather.
    two = 2 * idx
    return m, valid, _var_to_factor(m, tot_ref[two], _count_of(tot_ref[two + 1]))


def _chunk_inputs(sv_ref, m_ref, tot_ref, start, head, is_and, size):
    """A wide row's chunk: messages, validity, slot ids, head mask, n, terms."""
    from jax.experimental import pallas as pl

    sl = pl.ds(start, size)
    m, valid, n = _incoming(sv_ref, m_ref, tot_ref, sl)
    gidx = start + jax.lax.broadcasted_iota(jnp.int32, (size,), 0)
    is_head = gidx == head
    tf, zero = _body_terms(n, valid & ~is_head, is_and)
    return sl, m, valid, gidx, is_head, n, tf, zero


def _factor_kernel(widths, size, wait, cls_ref, r0_ref, shift_ref, role_ref, sv_ref, m_ref, tot_ref,
                   and_ref, q_ref, r_ref, k_ref, first_ref, count_ref, lim_ref, par_ref, ctl_in,
                   dlt_in, fdone_in, out_ref, ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref, ctl_ref,
                   dlt_ref, fdone_ref):
    """Tiles: new messages. Chunks of wide rows: partial aggregates (index = chunk), then, on
    the GPU, their messages once all of the row's chunks have stored theirs.

    The per-slot math (variable-to-factor messages, body terms, the factor
    messages) is written once, on the flat `size` slots of the program; only
    the row reductions branch on the row width. The Triton compile time grows
    with the code in the branches, so they hold nothing but reductions.
    """
    from jax.experimental import pallas as pl

    pid = pl.program_id(0)
    par = par_ref[0]
    go, run, it, bad, cells = _control(ctl_in, dlt_in, lim_ref, par)

    # Program 0 opens this sweep's control cells; every program reads the last sweep's.
    @pl.when(pid == 0)
    def _():
        ctl_ref[IT + par] = it + go.astype(jnp.int32)
        ctl_ref[BAD + par] = jnp.where(run, 0, bad)
        ctl_ref[PRIMED + par] = 1
        delta = jnp.max(cells)
        dlt_ref[pl.ds(par * DELTA_LANES, DELTA_LANES)] = jnp.full(
            (DELTA_LANES,), jnp.where(go, jnp.zeros_like(delta), delta), delta.dtype)

    # The work does not wait for the control cells: only the stores do (a load and a
    # branch before it would lengthen every program's chain of dependent loads).
    # The wide rows' chunks wait for each other here (`wait` = (a power of two >= any row's
    # chunks, the number of chunks), on the GPU), or leave their messages to `_wide_kernel`
    # (`wait` = (): the interpreter, or rows of more chunks than the GPU surely holds at once).
    spin, work = None, pid
    if wait:
        from jax.experimental.pallas import triton as plgpu

        maxc, chunks = wait
        cells = fdone_ref.shape[0] // 2  # per parity: one per wide row, then the chunk ticket
        # A chunk program takes its chunk by ticket, in the order programs start, so every
        # chunk before it is held by a program that runs: a chunk waits only for chunks that
        # run or will (its row's, no more than the GPU holds at once), whatever order the GPU
        # starts programs in.
        ticket = par * cells + cells - 1
        one = jnp.ones((), jnp.int32)
        work = jax.lax.cond(pid < chunks, lambda: plgpu.atomic_add(fdone_ref, ticket, one), lambda: pid)

        @pl.when(pid == 0)
        def _():
            fdone_ref[(1 - par) * cells + cells - 1] = jnp.zeros((), jnp.int32)  # the next sweep's tickets

        spin = (fdone_ref, first_ref, count_ref, par, maxc)
    _factor_tile(widths, size, work, go, cls_ref, r0_ref, shift_ref, role_ref, sv_ref, m_ref,
                 tot_ref, and_ref, (q_ref, r_ref, k_ref), lim_ref[1], out_ref,
                 ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref, spin)


def _factor_tile(widths, size, pid, go, cls_ref, r0_ref, shift_ref, role_ref, sv_ref, m_ref,
                 tot_ref, and_ref, param_refs, damping, out_ref, ps_ref, pz_ref, pmn_ref, pam_ref, po_ref,
                 plr_ref, spin):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    cls = cls_ref[pid]
    slot0 = pid * size
    shift = shift_ref[pid]  # log2 of the row width (of `size` for a chunk)
    is_chunk = cls >= len(widths)
    sl = pl.ds(slot0, size)
    m, valid, n = _incoming(sv_ref, m_ref, tot_ref, sl)
    lane = jax.lax.broadcasted_iota(jnp.int32, (size,), 0)
    row = r0_ref[pid] + jax.lax.shift_right_logical(lane, shift)
    # A row's second factor (if any) has role bit 1; its parameters follow the first's. A
    # factor's first slot is its head (role bit 2), in a wide row's first chunk.
    role = role_ref[sl].astype(jnp.int32)
    seg = role & 1
    place = 2 * row + seg
    is_and = and_ref[place] > 0
    params = _row_params(param_refs, place)
    is_head = (role & 2) > 0
    body = valid & ~is_head
    # The head's log rho is formed on its own slot, sharing the body terms' exp and log1p,
    # and reaches the row's slots with the row sums.
    tf, zero, lr = _terms_and_rho(n, is_head, body, is_and, *params[:4])
    izero = zero.astype(jnp.int32)

    def tile_branch(w):
        r = size // w

        if w in PAIRED_WIDTHS:
            second = seg.reshape(r, w) > 0

            def total(x):  # each factor's sum, on its slots
                zero = jnp.zeros_like(x)
                a = jnp.sum(jnp.where(second, zero, x), axis=1, keepdims=True, dtype=x.dtype)
                b = jnp.sum(jnp.where(second, x, zero), axis=1, keepdims=True, dtype=x.dtype)
                return jnp.where(second, b, a)
        else:
            def total(x):
                return jnp.broadcast_to(jnp.sum(x, axis=1, keepdims=True, dtype=x.dtype), (r, w))

        def branch():
            t2 = tf.reshape(r, w)
            b2 = body.reshape(r, w) & (izero.reshape(r, w) == 0)
            S = total(t2)
            Z = total(izero.reshape(r, w))
            # The factor's sum is known here, so the dominant term (below half of it) is found
            # without a min/argmin (`kernels.factor_aggregates`).
            dominant = b2 & (t2 < 0.5 * S)
            O = total(jnp.where(dominant, jnp.zeros_like(t2), t2))
            lrow = total(jnp.where(is_head.reshape(r, w), lr.reshape(r, w), jnp.zeros((r, w), lr.dtype)))
            flat = [x.reshape(size) for x in (S, Z, O, lrow)]
            return (*flat, dominant.astype(jnp.int32).reshape(size))

        return branch

    def chunk_branch():
        gidx = slot0 + lane
        cand = body & ~zero
        mn = jnp.min(jnp.where(cand, tf, jnp.ones_like(tf)))
        am = jnp.min(jnp.where(cand & (tf == mn), gidx, jnp.iinfo(jnp.int32).max))
        ps_ref[pid] = jnp.sum(tf)
        pz_ref[pid] = jnp.sum(izero, dtype=jnp.int32)
        pmn_ref[pid] = mn
        pam_ref[pid] = am
        po_ref[pid] = jnp.sum(jnp.where(gidx == am, jnp.zeros_like(tf), tf))
        plr_ref[pid] = jnp.sum(jnp.where(is_head, lr, jnp.zeros_like(lr)))
        if spin is None:
            # A chunk's messages are the wide kernel's; these are overwritten there.
            return tf, izero, tf, tf, izero
        # Every chunk of the row counts itself in (after a barrier, so all its partials are
        # stored; the atomic releases them) and waits until all have, then combines the row's
        # partials (loads past L1) and forms its own messages. Chunks go by ticket in the order
        # programs start (`_factor_kernel`): every chunk before this one is held by a running
        # program, and the row's others follow, fewer than the GPU holds at once, so the wait
        # ends. Cells alternate with the sweep's parity: this sweep resets the last sweep's,
        # whose chunks have all finished with the last kernel.
        fdone_ref, first_ref, count_ref, par, maxc = spin
        plgpu.debug_barrier()
        row = r0_ref[pid]
        cells = fdone_ref.shape[0] // 2  # per parity: one per wide row, then the chunk ticket
        cell = par * cells + row
        one = jnp.ones((), jnp.int32)
        n = count_ref[row]
        seen = plgpu.atomic_add(fdone_ref, cell, one) + one
        # Adding 0 is an atomic read (acquire): the others' partials are visible after it.
        jax.lax.while_loop(lambda k: k < n, lambda k: plgpu.atomic_add(fdone_ref, cell, 0 * one), seen)
        fdone_ref[(1 - par) * cells + row] = 0 * one
        S, Z, O, lrow, am = _combine_partials(
            lambda ref, win: plgpu.load(ref.at[win], volatile=True), first_ref[row], n, maxc,
            ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref)
        S, Z, O, lrow = (jnp.full((size,), x, x.dtype) for x in (S, Z, O, lrow))
        return S, Z, O, lrow, (gidx == am).astype(jnp.int32)

    branches = [tile_branch(w) for w in widths] + [chunk_branch]
    S, Z, O, lrow, dominant = jax.lax.switch(jnp.minimum(cls, len(branches) - 1), branches)
    new = _messages(tf, zero, dominant > 0, S, Z, O, lrow, is_head, is_and, *params)

    # Messages are updated in place, and a wide row's chunk still holds the old ones its
    # wide kernel reads (unless the chunks formed their messages here).
    @pl.when(go & ~is_chunk if spin is None else go)
    def _():
        out_ref[sl] = _finish(new, m, valid, damping)


def _combine_partials(load, first, count, maxc, ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref):
    """A wide factor row's sums from its chunks' partials (`_factor_tile`'s chunk branch).

    Args:
        load: `(ref, window) -> values`, a plain load or one past L1.
        first, count: the row's first chunk (program) and its number of chunks.
        maxc: static, a power of two >= count (the window read).

    Returns:
        (S, Z, O, log rho, the dominant slot): the row's sum of finite terms, its zero count,
        the sum without its smallest term, its head's log rho and that term's slot.
    """
    from jax.experimental import pallas as pl

    lane = jax.lax.broadcasted_iota(jnp.int32, (maxc,), 0)
    mine = lane < count
    win = pl.ds(first, maxc)

    def part(ref, neutral):
        x = load(ref, win)
        return jnp.where(mine, x, jnp.full_like(x, neutral))

    ps, pz, pmn, pam, po, plr = (part(ps_ref, 0), part(pz_ref, 0), part(pmn_ref, 1), part(pam_ref, 0),
                                 part(po_ref, 0), part(plr_ref, 0))
    mn = jnp.min(pmn)
    star = jnp.min(jnp.where(mine & (pmn == mn), lane, maxc))
    is_star = lane == star
    # The chunk holding the smallest term adds its sum without it, the others their
    # whole sums: no subtraction, so a tiny remainder stays exact.
    O = jnp.sum(jnp.where(is_star, po, ps))
    am = jnp.sum(jnp.where(is_star, pam, jnp.zeros_like(pam)))
    return jnp.sum(ps), jnp.sum(pz, dtype=jnp.int32), O, jnp.sum(plr), am


def _wide_kernel(chunk, maxc, r0_ref, head_ref, first_ref, count_ref, sv_ref, tot_ref,
                 and_ref, q_ref, r_ref, k_ref, lim_ref, par_ref, ctl_ref, dlt_ref,
                 ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref, m_ref, out_ref):
    """Messages of one chunk of a wide factor (in place), from its row's chunk partials.

    Every chunk of the row combines the row's partials itself (at most `maxc`
    of them, one masked window), so no other kernel runs between the two passes.
    """
    from jax.experimental import pallas as pl

    # program_id is read outside `pl.when`: the interpreter does not reach into its body.
    pid = pl.program_id(0)
    go = _control(ctl_ref, dlt_ref, lim_ref, par_ref[0])[0]
    row = r0_ref[pid]
    is_and = and_ref[2 * row] > 0  # a wide row holds one factor
    S, Z, O, lrow, am = _combine_partials(lambda ref, win: ref[win], first_ref[row], count_ref[row], maxc,
                                          ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref)
    sl, m, valid, gidx, is_head, n, tf, zero = _chunk_inputs(
        sv_ref, m_ref, tot_ref, pid * chunk, head_ref[pid], is_and, chunk)
    new = _messages(tf, zero, gidx == am, S, Z, O, lrow, is_head, is_and,
                    *_row_params((q_ref, r_ref, k_ref), 2 * row))

    @pl.when(go)
    def _():
        out_ref[sl] = _finish(new, m, valid, lim_ref[1])


def _chunks_wait(max_row_chunks: int, interpret: bool) -> bool:
    """Whether a wide factor row's chunks wait for each other in the factor kernel: on the
    GPU, when every row has no more chunks than the GPU has SMs (each SM holds at least one
    program, and chunks go by ticket as programs start, so all chunks of a row come to run).
    The interpreter runs programs one after another; there the wide kernel forms their
    messages."""
    if interpret:
        return False
    sms = getattr(jax.devices()[0], "core_count", 0) or 0
    return 0 < max_row_chunks <= sms


# The passes are jitted on their own so that JAX traces and lowers each kernel once per
# setting, not at every call site: the loop calls them five times, and lowering a Pallas
# kernel to Triton IR (in Python) took most of the loop's compile time.
@functools.partial(jax.jit, static_argnames=("interpret", "num_warps"))
def factor_pass(layout: FusedLayout, messages, totals, params, control, interpret: bool = False,
                num_warps: int = NUM_WARPS):
    """New factor-to-variable messages (slot order, in place) from messages and variable totals.

    One kernel on the GPU; a second for the chunks of wide factor rows in the interpreter, or
    when a row has more chunks than the GPU has SMs (`_chunks_wait`).

    Args:
        messages: (S,) slot order.
        totals: (2 Vk,) per kernel variable, the finite part of its total, then its packed
            counts (`var_pass`).
        params: (is_and (Rf,) int32, q, r, k1 - k0 (Rf,) floats; `factor_params`).
        control: `Control` of this sweep; the messages change only if the sweep goes ahead.

    Returns:
        (messages, control) after the pass.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    side = layout.factors
    dt = messages.dtype
    nw = side.partials
    cp = plgpu.CompilerParams(num_warps=num_warps, num_stages=1)
    if control.factor_done.shape[0] < 2 * (max(side.wide_rows, 1) + 1):
        raise ValueError("control.factor_done has fewer cells than the layout has wide factor rows")
    wait = ((side.max_row_chunks, side.wide_chunks)
            if side.wide_chunks and _chunks_wait(side.max_row_chunks, interpret) else ())
    kernel = _kernel(_factor_kernel, side.widths, side.tile, wait)
    tables = (side.prog_class, side.prog_row0, side.prog_shift, layout.slot_role)
    operands = (*tables, side.slots, messages, totals, *params, side.wide_first, side.wide_count,
                control.limits, control.parity, control.ctl, control.delta, control.factor_done)
    first = len(operands) - 4  # messages, then the control cells, are updated in place
    out, *partials, ctl, delta, factor_done = pl.pallas_call(
        kernel,
        grid=(side.num_programs,),
        out_shape=(jax.ShapeDtypeStruct(messages.shape, dt), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), jnp.int32), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), jnp.int32), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), dt), jax.ShapeDtypeStruct(control.ctl.shape, jnp.int32),
                   jax.ShapeDtypeStruct(control.delta.shape, dt),
                   jax.ShapeDtypeStruct(control.factor_done.shape, jnp.int32)),
        input_output_aliases={len(tables) + 1: 0, first + 1: 7, first + 2: 8, first + 3: 9},
        interpret=interpret,
        compiler_params=cp,
    )(*operands)
    control = dataclasses.replace(control, ctl=ctl, delta=delta, factor_done=factor_done)
    if not side.wide_chunks or wait:
        return out, control
    # The wide kernel's programs are the factor kernel's first ones (the chunks), so
    # the program tables are passed whole: no slicing kernels between the two passes.
    operands = (side.prog_row0, side.prog_head, side.wide_first, side.wide_count,
                side.slots, totals, *params, control.limits, control.parity, control.ctl, control.delta,
                *partials, out)
    out = pl.pallas_call(
        _kernel(_wide_kernel, side.chunk, side.max_row_chunks),
        grid=(side.wide_chunks,),
        out_shape=jax.ShapeDtypeStruct(messages.shape, dt),
        input_output_aliases={len(operands) - 1: 0},
        interpret=interpret,
        compiler_params=cp,
    )(*operands)
    return out, control


# ---------------------------------------------------------------- variable kernel

def _totals(fin, pos, neg, ev):
    fin = fin + jnp.where(jnp.isfinite(ev), ev, jnp.zeros_like(ev))
    pos = pos + (ev == jnp.inf).astype(jnp.int32)
    neg = neg + (ev == -jnp.inf).astype(jnp.int32)
    lo = signed(pos > 0, neg > 0, fin)
    t = jnp.exp(-jnp.abs(lo))  # in [0, 1]: no huge divisor, and `quotient` keeps 0 undivided
    p = quotient(jnp.where(lo >= 0, jnp.ones_like(t), t), 1 + t)
    cnt = jnp.minimum(pos, 2) + 4 * jnp.minimum(neg, 2)
    return fin, cnt, p


def _change(p, p_old):
    bad = jnp.isnan(p) | jnp.isnan(p_old)
    return jnp.where(bad, jnp.zeros_like(p), jnp.abs(p - p_old)), jnp.isnan(p)


def _var_kernel(widths, tile, maxc, barrier, cls_ref, r0_ref, vs_ref, m_ref, ev_ref, first_ref, count_ref,
                lim_ref, par_ref, _tot, _p, _ctl, _dlt, _done, tot_ref, p_ref, ctl_ref, dlt_ref, done_ref,
                pf_ref, pp_ref, pn_ref):
    """Tiles: totals, marginals (in place), largest change. Chunks of wide rows: partial sums.

    The gather is written once, on the program's flat slots; the branches
    (one per row width) only sum rows and store them. The largest change and
    any undefined marginal reach the sweep's control cells by atomic max. A wide
    row's chunks count themselves done (`Control.done`); the last one sums the
    row's partials, so no second kernel runs for wide rows.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    pid = pl.program_id(0)
    par = par_ref[0]
    go, run, *_ = _control(_ctl, _dlt, lim_ref, par)
    cls = cls_ref[pid]
    row0 = r0_ref[pid]
    vs = vs_ref[pl.ds(pid * tile, tile)]
    valid = vs >= 0
    m = m_ref[jnp.where(valid, vs, 0)]
    m = jnp.where(valid, m, jnp.zeros_like(m))
    fin = jnp.where(jnp.isfinite(m), m, jnp.zeros_like(m))
    pos = (m == jnp.inf).astype(jnp.int32)
    neg = (m == -jnp.inf).astype(jnp.int32)

    def tile_branch(w):
        r = tile // w

        def branch():
            rows = pl.ds(row0, r)
            f, c, p = _totals(jnp.sum(fin.reshape(r, w), axis=1),
                              jnp.sum(pos.reshape(r, w), axis=1, dtype=jnp.int32),
                              jnp.sum(neg.reshape(r, w), axis=1, dtype=jnp.int32), ev_ref[rows])
            d, bad = _change(p, p_ref[rows])

            @pl.when(run)
            def _():
                two = 2 * (row0 + jax.lax.broadcasted_iota(jnp.int32, (r,), 0))
                tot_ref[two] = f
                tot_ref[two + 1] = _count_bits(c, f.dtype)
                p_ref[rows] = p
                _report(plgpu, ctl_ref, dlt_ref, par, pid, go, jnp.max(d), jnp.max(bad.astype(jnp.int32)))

        return branch

    def chunk_branch():
        pf_ref[pid] = jnp.sum(fin)
        pp_ref[pid] = jnp.sum(pos, dtype=jnp.int32)
        pn_ref[pid] = jnp.sum(neg, dtype=jnp.int32)
        # The partials are stored before the count goes up (a barrier, then a release);
        # the chunk that sees all the others done reads them (acquire, loads past L1).
        if barrier:  # the interpreter runs programs one after another, and has no barrier
            plgpu.debug_barrier()
        row = row0  # a wide row's chunks are its programs; wide rows are the first rows
        last = plgpu.atomic_add(done_ref, row, jnp.ones((), jnp.int32)) == count_ref[row] - 1

        @pl.when(last)
        def _():
            done_ref[row] = jnp.zeros((), jnp.int32)  # for the next sweep: every chunk has counted
            _wide_var_total(plgpu, maxc, row, first_ref, count_ref, pf_ref, pp_ref, pn_ref, ev_ref, p_ref,
                            tot_ref, ctl_ref, dlt_ref, par, go, run)

    branches = [tile_branch(w) for w in widths] + [chunk_branch]
    jax.lax.switch(jnp.minimum(cls, len(branches) - 1), branches)


def _report(plgpu, ctl_ref, dlt_ref, par, pid, go, delta, bad):
    """Folds a program's largest change (if the sweep goes ahead) and conflict into the sweep's cells."""
    from jax.experimental import pallas as pl

    @pl.when(go)
    def _():
        plgpu.atomic_max(dlt_ref, par * DELTA_LANES + pid % DELTA_LANES, delta)

    @pl.when(bad > 0)
    def _():
        plgpu.atomic_max(ctl_ref, BAD + par, bad)


def _wide_var_total(plgpu, maxc, row, first_ref, count_ref, pf_ref, pp_ref, pn_ref, ev_ref, p_ref, tot_ref,
                    ctl_ref, dlt_ref, par, go, run):
    """A wide variable's total and marginal from its chunks' partial sums (in place)."""
    from jax.experimental import pallas as pl

    lane = jax.lax.broadcasted_iota(jnp.int32, (maxc,), 0)
    mine = lane < count_ref[row]
    win = pl.ds(first_ref[row], maxc)

    def total(ref):
        x = plgpu.load(ref.at[win], volatile=True)  # written by other programs of this kernel
        return jnp.sum(jnp.where(mine, x, jnp.zeros_like(x)), dtype=x.dtype)

    f, c, p = _totals(total(pf_ref), total(pp_ref), total(pn_ref), ev_ref[row])
    d, bad = _change(p, p_ref[row])

    @pl.when(run)
    def _():
        tot_ref[2 * row] = f
        tot_ref[2 * row + 1] = _count_bits(c, f.dtype)
        p_ref[row] = p
        _report(plgpu, ctl_ref, dlt_ref, par, row, go, d, bad.astype(jnp.int32))


@functools.partial(jax.jit, static_argnames=("interpret", "num_warps"))
def var_pass(layout: FusedLayout, messages, evidence_k, totals, p, control, interpret: bool = False,
             num_warps: int = NUM_WARPS):
    """Variable totals, marginals and the largest marginal change (in place).

    Args:
        messages: (S,) slot order.
        evidence_k: (Vk,) evidence log-odds by kernel variable.
        totals (2 Vk,), p (Vk,): the last totals (each variable's finite sum, then its counts
            of +inf and -inf messages, `pos + 4 neg`, each at most 2) and marginals, in place.
        control: `Control` of this sweep; the pass runs if the sweep goes ahead or primes the loop.

    Returns:
        totals, p and the control after the pass.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    side = layout.variables
    dt = messages.dtype
    nw = side.partials
    cp = plgpu.CompilerParams(num_warps=num_warps, num_stages=1)
    if control.done.shape[0] < max(side.wide_rows, 1):
        raise ValueError("control.done has fewer cells than the layout has wide variable rows")
    state = (totals, p, control.ctl, control.delta, control.done)
    shapes = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in state)
    operands = (side.prog_class, side.prog_row0, side.slots, messages, evidence_k, side.wide_first,
                side.wide_count, control.limits, control.parity, *state)
    first = len(operands) - len(state)
    out = pl.pallas_call(
        _kernel(_var_kernel, side.widths, side.tile, side.max_row_chunks, not interpret),
        grid=(side.num_programs,),
        out_shape=(*shapes, jax.ShapeDtypeStruct((nw,), dt), jax.ShapeDtypeStruct((nw,), jnp.int32),
                   jax.ShapeDtypeStruct((nw,), jnp.int32)),
        input_output_aliases={first + k: k for k in range(len(state))},
        interpret=interpret,
        compiler_params=cp,
    )(*operands)
    totals, p, ctl, delta, done = out[:5]
    return totals, p, dataclasses.replace(control, ctl=ctl, delta=delta, done=done)


# ---------------------------------------------------------------- the loop

def factor_params(layout: FusedLayout, graph: FactorGraph, dtype):
    """Per factor of a row (`FusedLayout.seg_factor`, (2 Rf,)): is AND (int32), q, r and k1 - k0
    (`kernels.factor_params`; empty places take factor 0's). The kernels form 1 - q and 1 - r
    themselves, as `kernels.factor_params` does: three loads per slot less."""
    rf = layout.seg_factor
    rows = jnp.where(rf >= 0, rf, 0)
    p = kernels.factor_params(graph, dtype)
    return tuple(x[rows] for x in (p.is_and.astype(jnp.int32), p.q, p.r, p.k1 - p.k0))


def _row_params(refs, row):
    """(q, r, 1-q, 1-r, k1 - k0, 0) of the factor rows `row` (`logspace.messages_from_rho`'s)."""
    q, r, k = (ref[row] for ref in refs)
    return q, r, 1 - q, 1 - r, k, jnp.zeros_like(k)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Control:
    """The loop's control cells, kept on the device and written by the kernels (`_control`).

    Attributes:
        ctl: (8,) int32: iterations, conflict and primed flags, two cells each
            (one per sweep parity), then max_iters.
        delta: (2 * DELTA_LANES,) float: the largest marginal change, `DELTA_LANES` cells per parity.
        limits: (2,) float: tol, damping.
        parity: (1,) int32: the parity of the sweep that reads this.
        done: (max(wide variable rows, 1),) int32: chunks of each wide variable row done in
            this sweep (the last resets it to 0).
        factor_done: (2 * (max(wide factor rows, 1) + 1),) int32, per sweep parity: the chunks
            of each wide factor row whose partials are stored, then the chunks taken
            (`_factor_kernel`, `_factor_tile`).
    """

    ctl: jax.Array
    delta: jax.Array
    limits: jax.Array
    parity: jax.Array
    done: jax.Array
    factor_done: jax.Array

    @classmethod
    def start(cls, tol, max_iters, damping, dtype, parity: int = 1, wide_rows: int = 1,
              factor_wide_rows: int = 1) -> Control:
        """Cells before the first sweep: not primed, no iterations, change +inf."""
        ctl = jnp.zeros((8,), jnp.int32).at[MAX_ITERS].set(jnp.asarray(max_iters, jnp.int32))
        return cls(ctl=ctl, delta=jnp.full((2 * DELTA_LANES,), jnp.inf, dtype),
                   limits=jnp.stack([jnp.asarray(tol, dtype), jnp.asarray(damping, dtype)]),
                   parity=jnp.full((1,), parity, jnp.int32),
                   done=jnp.zeros((max(wide_rows, 1),), jnp.int32),
                   factor_done=jnp.zeros((2 * (max(factor_wide_rows, 1) + 1),), jnp.int32))


def _last_delta(control: Control, parity: int):
    return jnp.max(control.delta[parity * DELTA_LANES:(parity + 1) * DELTA_LANES])


def run_loop(layout: FusedLayout, graph: FactorGraph, messages, evidence, tol, max_iters, damping,
             unroll: int = 1, interpret: bool = False, num_warps: int = NUM_WARPS,
             var_warps: int | None = None):
    """PARALL to convergence with the fused kernels (call inside jit); returns `engine.RunResult`.

    A trip of the while loop runs `unroll` sweeps, rounded up to an even
    number so that the sweeps' parities alternate across trips. A sweep that
    does not go ahead (converged, out of iterations, a conflict) leaves
    everything as it is, so the extra sweeps change nothing.
    """
    from fastlbp.engine import RunResult

    dtype = messages.dtype
    slots = jnp.zeros((layout.num_slots,), dtype).at[layout.edge_slot].set(messages)
    kv = layout.kvar_var
    evidence_k = jnp.where(kv >= 0, evidence.astype(dtype)[jnp.where(kv >= 0, kv, 0)], 0)
    params = factor_params(layout, graph, dtype)
    vk = layout.num_kvars
    sweeps = unroll + unroll % 2
    last = (sweeps - 1) % 2
    parities = [jnp.full((1,), k % 2, jnp.int32) for k in range(2)]
    control = Control.start(tol, max_iters, damping, dtype, last, layout.variables.wide_rows,
                            layout.factors.wide_rows)

    # The loop's first sweep primes it: with the factor pass idle (messages kept), its
    # variable pass forms the totals and marginals of the incoming messages. So each kernel
    # has one call site in the whole loop and is lowered and compiled once.

    def active(state):
        c = state[-1]
        primed = c.ctl[PRIMED + last] > 0
        go = c.ctl[IT + last] < c.ctl[MAX_ITERS]
        go = go & (_last_delta(c, last) >= c.limits[0]) & (c.ctl[BAD + last] == 0)
        return ~primed | go

    def body(state):
        msgs, totals, p, control = state
        for k in range(sweeps):
            control = dataclasses.replace(control, parity=parities[k % 2])
            msgs, control = factor_pass(layout, msgs, totals, params, control, interpret, num_warps)
            totals, p, control = var_pass(layout, msgs, evidence_k, totals, p, control, interpret,
                                          var_warps or num_warps)
        return msgs, totals, p, control

    state = (slots, jnp.zeros((2 * vk,), dtype), jnp.zeros((vk,), dtype), control)
    slots, totals, p, control = jax.lax.while_loop(active, body, state)
    fin, cnt = totals[0::2], _count_of(totals[1::2])
    k = layout.var_kvar
    c = cnt[k]
    pos, neg = (c & 3) > 0, (c >> 2) > 0
    lo = signed(pos, neg, fin[k])
    delta = _last_delta(control, last)
    conflict = control.ctl[BAD + last] > 0
    return RunResult(messages=slots[layout.edge_slot], log_odds=lo, marginals=p[k],
                     iterations=control.ctl[IT + last], converged=(delta < control.limits[0]) & ~conflict,
                     delta=delta, conflict=conflict)


# ---------------------------------------------------------------- layouts per graph, runners

_LAYOUTS: dict[tuple, tuple[weakref.ref, FusedLayout]] = {}


def layout_for(graph: FactorGraph, tile: int = TILE, var_tile: int | None = None) -> FusedLayout:
    """The graph's layout, built on first use and kept while the graph lives."""
    if isinstance(graph.edge_var, jax.core.Tracer):
        raise TypeError("the fused backend needs a concrete graph (call its runner outside jit)")
    var_tile = var_tile or tile
    key = (id(graph), tile, var_tile)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0]() is graph:
        return hit[1]
    layout = build(graph, tile, var_tile)
    _LAYOUTS[key] = (weakref.ref(graph, lambda _, key=key: _LAYOUTS.pop(key, None)), layout)
    return layout


def one_at_a_time(fun):
    """`fun`, which under `jax.vmap` runs the batch's problems one after another (`lax.map`).

    Batching the kernels instead (Pallas adds a grid axis) would give every
    problem its own control cells, but the in-kernel wait of wide factor rows
    counts on no more waiting chunks than the GPU holds at once (`_chunks_wait`),
    which a batch of problems could exceed: the GPU would hang.
    """
    batched = jax.custom_batching.custom_vmap(fun)

    @batched.def_vmap
    def _(axis_size, in_batched, *args):
        def one(i):
            return fun(*(jax.tree.map(lambda x, b: x[i] if b else x, arg, flags)
                         for arg, flags in zip(args, in_batched, strict=True)))

        out = jax.lax.map(one, jnp.arange(axis_size))
        return out, jax.tree.map(lambda _: True, out)

    return batched


def _run(layout, graph, messages, evidence, tol, max_iters, damping, *, unroll, interpret,
         num_warps=NUM_WARPS, var_warps=None):
    loop = functools.partial(run_loop, unroll=unroll, interpret=interpret, num_warps=num_warps,
                             var_warps=var_warps)
    return one_at_a_time(loop)(layout, graph, messages, evidence, tol, max_iters, damping)


class Runner:
    """`(graph, messages, evidence, tol, max_iters, damping) -> RunResult`, like `engine.parall_runner`.

    The graph's layout is built (once, on the host) when the runner first sees
    the graph; the jitted loop takes it as an argument. `lower(...)` mirrors
    `jax.jit(...).lower(...)` for benchmarks that time compilation. Under
    `jax.vmap` (a batch of evidence sets, say) it runs the problems one after
    another (`one_at_a_time`).
    """

    def __init__(self, unroll: int = 1, interpret: bool = False, tile: int | None = None,
                 num_warps: int | None = None, var_tile: int | None = None, var_warps: int | None = None):
        self.tile = tile
        self.var_warps = var_warps
        self.var_tile = var_tile
        self.num_warps = num_warps
        self._jitted = jax.jit(functools.partial(_run, unroll=unroll, interpret=interpret),
                               static_argnames=("num_warps", "var_warps"))

    def warps_for(self, dtype) -> int:
        """Warps per program for messages of `dtype`: as given, else `AUTO_WARPS` by precision."""
        return self.num_warps or AUTO_WARPS.get(jnp.dtype(dtype).itemsize, NUM_WARPS)

    def var_warps_for(self, dtype) -> int:
        """Warps per variable-kernel program: as given, else `AUTO_VAR_WARPS` by precision."""
        return self.var_warps or AUTO_VAR_WARPS.get(jnp.dtype(dtype).itemsize, NUM_WARPS)

    def tile_for(self, dtype) -> int:
        """Slots per program for messages of `dtype`: as given, else `AUTO_TILE` by precision."""
        return self.tile or AUTO_TILE.get(jnp.dtype(dtype).itemsize, TILE)

    def var_tile_for(self, dtype) -> int:
        """Slots per variable-kernel program: as given, else the factor kernel's if that was
        given, else `AUTO_VAR_TILE` by precision."""
        return self.var_tile or self.tile or AUTO_VAR_TILE.get(jnp.dtype(dtype).itemsize, TILE)

    def prepare(self, graph, dtype) -> FusedLayout:
        """Builds (or finds) the graph's layout for messages of `dtype`: host work done once per graph."""
        return layout_for(graph, self.tile_for(dtype), self.var_tile_for(dtype))

    def __call__(self, graph, messages, evidence, tol, max_iters, damping):
        return self._jitted(self.prepare(graph, messages.dtype), graph, messages, evidence, tol,
                            max_iters, damping, num_warps=self.warps_for(messages.dtype),
                            var_warps=self.var_warps_for(messages.dtype))

    def lower(self, graph, messages, *args):
        dtype = messages.dtype
        lowered = self._jitted.lower(self.prepare(graph, dtype), graph, messages, *args,
                                     num_warps=self.warps_for(dtype), var_warps=self.var_warps_for(dtype))
        prepare = self.prepare

        class _Lowered:
            def compile(self):
                compiled = lowered.compile()
                return lambda g, *a: compiled(prepare(g, dtype), g, *a)

        return _Lowered()


_RUNNERS: dict = {}


def runner(unroll: int = 1, interpret: bool = False, tile: int | None = None,
           num_warps: int | None = None, var_tile: int | None = None, var_warps: int | None = None) -> Runner:
    """A cached `Runner` for these settings (None: by precision, `AUTO_TILE`, `AUTO_WARPS`,
    `AUTO_VAR_TILE`, `AUTO_VAR_WARPS`)."""
    key = (unroll, interpret, tile, num_warps, var_tile, var_warps)
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(*key)
    return _RUNNERS[key]
