"""Batches -> fixed-width chunks: the device plan of one iteration.

A batch is split into chunks of W slots that run one after another. A chunk
holds whole *runs*: a run is a factor's edges that are updated in one batch
and are consecutive in the order. For each run the chunk carries every edge of
the factor (its variable-to-factor messages are recomputed from the current
state, the paper's GroupVarToFactor) and marks the run's own edges to write.

Splitting a batch keeps its results: edges of a batch are laid out in the
order, and in a total order an edge of a batch never reads an earlier edge of
the same batch (levelling and Algorithm 3 guarantee it), only later ones,
which are written after it read them. In a weak order (stages) edges of one
stage may read each other, so a stage is never split (W grows to fit it).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from fastlbp.graph import FactorGraph

# Rows of a chunk: the edge, its variable and factor, the run (segment) inside the chunk,
# the slot of the run's head edge, whether to write the edge.
EDGE, VAR, FACTOR, SEG, HEAD, WRITE = range(6)
ROWS = 6


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Plan:
    """The device plan: a pytree of int32 arrays passed to jit as an argument.

    Attributes:
        chunks: (P, C, 6, W) int32; P plans (one per iteration of a cycle: 1 except
            SEQRND), C chunks per iteration, W slots per chunk. Padding slots
            point at the dummy edge E (variable V, factor 0, segment W, no write).
    """

    chunks: jax.Array

    @property
    def width(self) -> int:
        return int(self.chunks.shape[-1])

    @property
    def num_chunks(self) -> int:
        return int(self.chunks.shape[1])


@dataclasses.dataclass(frozen=True)
class ChunkLayout:
    """Host-side result of packing one iteration."""

    chunks: np.ndarray  # (C, 6, W) int32
    batch_sizes: np.ndarray  # (B,) edges per batch
    slots_used: int  # slots holding an edge (the rest is padding)


def _runs(graph: FactorGraph, batch: np.ndarray, rank: np.ndarray, total: bool):
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor, np.int64)
    off = np.asarray(g.factor_offsets, np.int64)
    eid = np.arange(ef.size)
    order = np.lexsort((eid, ef, rank, batch))
    b, f, r = batch[order], ef[order], rank[order]
    new_run = np.ones(order.size, bool)
    new_run[1:] = (b[1:] != b[:-1]) | (f[1:] != f[:-1]) | (r[1:] != r[:-1] if not total else False)
    # A run must be consecutive in the order: with distinct ranks, a factor's edges in one batch
    # separated by another factor's edge start a new run (the sort already interleaves them).
    run_of = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    run_factor = f[run_start]
    run_batch = b[run_start]
    run_rank = r[run_start]
    new_atom = np.ones(run_start.size, bool)
    if not total:
        new_atom[1:] = (run_batch[1:] != run_batch[:-1]) | (run_rank[1:] != run_rank[:-1])
    return order, run_of, run_factor, run_batch, new_atom, off


def _atom_costs(graph, batch, rank, total):
    _, _, run_factor, run_batch, new_atom, off = _runs(graph, batch, rank, total)
    cost = off[run_factor + 1] - off[run_factor]
    atom = np.cumsum(new_atom) - 1
    return np.bincount(atom, weights=cost).astype(np.int64), run_batch[new_atom]


def min_width(graph: FactorGraph, batch: np.ndarray, rank: np.ndarray, total: bool) -> int:
    """The smallest width that fits every atom (a run, or a stage's runs in one batch)."""
    return int(_atom_costs(graph, batch, rank, total)[0].max(initial=1))


def pack(graph: FactorGraph, batch: np.ndarray, rank: np.ndarray, total: bool,
         width: int) -> ChunkLayout:
    """Packs batches into chunks of `width` slots (greedy, in order)."""
    order, run_of, run_factor, run_batch, new_atom, off = _runs(graph, batch, rank, total)
    num_edges = order.size
    num_vars = graph.num_vars
    cost = off[run_factor + 1] - off[run_factor]
    atom = np.cumsum(new_atom) - 1
    atom_cost = np.bincount(atom, weights=cost).astype(np.int64)
    atom_batch = run_batch[new_atom]
    if atom_cost.max(initial=0) > width:
        raise ValueError(f"width {width} is below the largest atom ({atom_cost.max()} slots)")
    # Greedy: a new chunk at each batch and whenever the next atom does not fit.
    atom_chunk = np.empty(atom_cost.size, np.int64)
    chunk, used, prev_b = -1, width, -1
    for i, (c, bb) in enumerate(zip(atom_cost.tolist(), atom_batch.tolist(), strict=True)):
        if bb != prev_b or used + c > width:
            chunk += 1
            used = 0
            prev_b = bb
        atom_chunk[i] = chunk
        used += c
    num_chunks = chunk + 1
    run_chunk = atom_chunk[atom]
    # Slot base of each run inside its chunk.
    first_of_chunk = np.ones(run_chunk.size, bool)
    first_of_chunk[1:] = run_chunk[1:] != run_chunk[:-1]
    csum = np.cumsum(cost)
    chunk_base = (csum - cost)[first_of_chunk]
    run_base = (csum - cost) - chunk_base[np.cumsum(first_of_chunk) - 1]
    run_seg = np.arange(run_chunk.size) - np.flatnonzero(first_of_chunk)[np.cumsum(first_of_chunk) - 1]

    g = graph.to_numpy()
    ev = np.asarray(g.edge_var, np.int64)
    ef = np.asarray(g.edge_factor, np.int64)
    out = np.empty((num_chunks, ROWS, width), np.int64)
    out[:, EDGE] = num_edges
    out[:, VAR] = num_vars
    out[:, FACTOR] = 0
    out[:, SEG] = width
    out[:, HEAD] = 0
    out[:, WRITE] = 0
    total_slots = int(cost.sum())
    r = np.repeat(np.arange(cost.size), cost)
    j = np.arange(total_slots) - np.repeat(csum - cost, cost)
    slot = run_base[r] + j
    c = run_chunk[r]
    edge = off[run_factor[r]] + j
    out[c, EDGE, slot] = edge
    out[c, VAR, slot] = ev[edge]
    out[c, FACTOR, slot] = ef[edge]
    out[c, SEG, slot] = run_seg[r]
    out[c, HEAD, slot] = run_base[r]
    # The run's own edges are written.
    e_sorted = order
    er = run_of
    out[run_chunk[er], WRITE, run_base[er] + (e_sorted - off[ef[e_sorted]])] = 1
    sizes = np.bincount(batch, minlength=int(batch.max(initial=-1)) + 1)
    return ChunkLayout(out.astype(np.int32), sizes, total_slots)


def choose_width(graph: FactorGraph, batch: np.ndarray, rank: np.ndarray, total: bool,
                 per_slot: float) -> int:
    """A power-of-two width minimising chunks * (1 + per_slot * width) (a launch-cost model).

    Chunks per width are estimated as sum over batches of ceil(slots / width).
    """
    cost, atom_batch = _atom_costs(graph, batch, rank, total)
    per_batch = np.bincount(atom_batch, weights=cost)
    w = 1 << int(np.ceil(np.log2(max(int(cost.max(initial=1)), 1))))
    best, best_cost = w, np.inf
    while True:
        est = np.ceil(per_batch / w).sum() * (1 + per_slot * w)
        if est < best_cost:
            best, best_cost = w, est
        if w >= per_batch.max(initial=1):
            return best
        w *= 2


def stack(layouts: list[ChunkLayout], num_edges: int, num_vars: int) -> Plan:
    """One plan from per-iteration layouts (same width), padded to the same chunk count."""
    width = layouts[0].chunks.shape[-1]
    most = max(lay.chunks.shape[0] for lay in layouts)
    out = np.empty((len(layouts), most, ROWS, width), np.int32)
    pad = np.zeros((ROWS, width), np.int32)
    pad[EDGE] = num_edges
    pad[VAR] = num_vars
    pad[SEG] = width
    out[:] = pad
    for i, lay in enumerate(layouts):
        out[i, : lay.chunks.shape[0]] = lay.chunks
    return Plan(out)
