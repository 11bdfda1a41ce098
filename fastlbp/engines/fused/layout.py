"""The padded row layout of a factor graph for the fused kernels (`build`, on the host, once per graph).

Both sides use *rows*: a factor (or a variable) is one row of W slots, W the
next power of two of its number of edges, unused slots padded (-1); on the
factor side a row of 4 or 8 slots may hold two factors (5 and 3 edges, 3 and
1, ...: `PAIRS`), summed apart. Rows of one width are a *class*; a program
takes a tile of R x W slots of one class (R rows), so every row is reduced
inside one program with no atomics and no mixing of neighbouring rows: a
factor whose terms are all tiny keeps its tiny sum exactly. Rows wider than
the tile (hub tuples, OR factors with thousands of derivations) are cut into
chunks of a tile's slots, one program each (the first programs of the grid);
a chunk writes partial aggregates, which the kernels combine
(`factor_kernel`, `variable_kernel`).

* Message slots are the factor rows laid end to end: a factor's edges are
  contiguous, its head first, rows of one width (and so of one size
  class) together. Messages live in this padded order for the whole run
  (`edge_slot` maps a graph edge to its slot); loads and stores of the factor
  kernel are contiguous.
* Variable slots are the variable rows laid end to end; each holds the
  message slot of one of the variable's edges (the dual permutation), so the
  variable kernel gathers its messages. Variables are renumbered in row order
  (`var_kvar`), so the variable kernel's totals are contiguous stores and the
  factor kernel gathers them through the factor side's slots (int32).
* Each message slot has a role byte (`slot_role`: its row's second factor, a
  head), read beside its variable.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp.core.graph import FactorGraph
from fastlbp.engines.fused.tuning import TILE


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

    Args:
        graph: a concrete factor graph (not a tracer: the layout is host work).
        tile: slots per factor-kernel program, a power of two.
        var_tile: slots per variable-kernel program, a power of two (default: `tile`).

    Raises:
        TypeError: `graph` is traced (build the layout outside jit).
        ValueError: a tile is not a power of two, or the graph needs more than int32 slots.
    """
    if isinstance(graph.edge_var, jax.core.Tracer):
        raise TypeError("the fused backend needs a concrete graph (build its runner outside jit)")
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



__all__ = ["Side", "FusedLayout", "PAIRS", "PAIRED_WIDTHS", "build"]
