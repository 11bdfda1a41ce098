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

A factor with more edges than W (total orders) is spread over consecutive
chunks of its own: the leading chunks only add their share of the factor's
body sums into a carried accumulator (ACCP), the last chunk, which holds the
head and the written edges, adds the accumulator (ACCF) and writes. This is
exact for the same reason: the chunks in between write only edges that the
run does not read.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from fastlbp.core.graph import FactorGraph

# Rows of a chunk: the edge, its variable and factor, the run (segment) inside the chunk,
# the slot of the run's head edge, whether to write the edge, the accumulator the slot adds
# its body term to (0; 1 = none), the accumulator the slot's run reads (0; 1 = none).
EDGE, VAR, FACTOR, SEG, HEAD, WRITE, ACCP, ACCF = range(8)
ROWS = 8
NO_ACC = 1


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ChunkPlan:
    """The device plan: a pytree of int32 arrays passed to jit as an argument.

    Attributes:
        chunks: (P, C, 8, W) int32; P plans (one per iteration of a cycle: 1 except
            SEQRND), C chunks per iteration, W slots per chunk. Padding slots
            point at the dummy edge E (variable V, factor 0, segment W, no write,
            no accumulator).
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

    chunks: np.ndarray  # (C, 8, W) int32
    batch_sizes: np.ndarray  # (B,) edges per batch
    slots_used: int  # slots holding an edge (the rest is padding)


def _runs(graph: FactorGraph, batch: np.ndarray, rank: np.ndarray, total: bool,
          most_writes: int | None = None):
    g = graph.to_numpy()
    ef = np.asarray(g.edge_factor, np.int64)
    off = np.asarray(g.factor_offsets, np.int64)
    eid = np.arange(ef.size)
    span = int(rank.max(initial=0)) + 1
    if total and (int(batch.max(initial=0)) + 1) * span < (1 << 62):
        # Distinct ranks: (batch, rank) decides; one sort of one key instead of a four-key lexsort
        # (four sorts).
        order = np.argsort(batch * span + rank, kind="stable")
    else:
        order = np.lexsort((eid, ef, rank, batch))
    b, f, r = batch[order], ef[order], rank[order]
    new_run = np.ones(order.size, bool)
    new_run[1:] = (b[1:] != b[:-1]) | (f[1:] != f[:-1]) | (r[1:] != r[:-1] if not total else False)
    # A run must be consecutive in the order: with distinct ranks, a factor's edges in one batch
    # separated by another factor's edge start a new run (the sort already interleaves them).
    if most_writes:
        # A run writes at most `most_writes` edges (they and the head share its last chunk).
        start = np.flatnonzero(new_run)
        pos = np.arange(order.size) - start[np.cumsum(new_run) - 1]
        new_run |= (pos % most_writes) == 0
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
    """The smallest width: 2 for total orders (big factors are split), else the largest
    stage-in-a-batch."""
    if total:
        return 2
    return int(_atom_costs(graph, batch, rank, total)[0].max(initial=1))


def pack(graph: FactorGraph, batch: np.ndarray, rank: np.ndarray, total: bool,
         width: int) -> ChunkLayout:
    """Packs batches into chunks of `width` slots (greedy, in order)."""
    if width < min_width(graph, batch, rank, total):
        raise ValueError(f"width {width} is below the largest stage in a batch")
    order, run_of, run_factor, run_batch, new_atom, off = _runs(
        graph, batch, rank, total, most_writes=width - 1 if total else None)
    num_edges = order.size
    num_vars = graph.num_vars
    cost = off[run_factor + 1] - off[run_factor]
    atom = np.cumsum(new_atom) - 1
    atom_cost = np.bincount(atom, weights=cost).astype(np.int64)
    atom_batch = run_batch[new_atom]
    # Greedy, atom by atom: a new chunk at each batch and whenever the next atom does not fit;
    # an atom wider than a chunk (a big factor, total orders) takes ceil(cost / W) chunks of
    # its own, the last one full.
    # Python lists: an item of a numpy array costs ~3x from Python.
    atom_chunk = [0] * atom_cost.size
    atom_base = [0] * atom_cost.size
    chunk, used, prev_b = -1, width, -1
    for i, (c, bb) in enumerate(zip(atom_cost.tolist(), atom_batch.tolist(), strict=True)):
        if c > width:
            pieces = -(-c // width)
            atom_chunk[i] = chunk + 1
            atom_base[i] = pieces * width - c  # leading padding, so the last chunk is full
            chunk += pieces
            used = width
            prev_b = bb
            continue
        if bb != prev_b or used + c > width:
            chunk += 1
            used = 0
            prev_b = bb
        atom_chunk[i] = chunk
        atom_base[i] = used
        used += c
    atom_chunk = np.asarray(atom_chunk, np.int64)
    atom_base = np.asarray(atom_base, np.int64)
    num_chunks = chunk + 1
    # Slot of each run: atoms hold consecutive runs.
    first_run_of_atom = np.flatnonzero(new_atom)
    run_in_atom_base = np.cumsum(cost) - cost
    run_in_atom_base = run_in_atom_base - run_in_atom_base[first_run_of_atom][atom]
    run_lin = atom_chunk[atom] * width + atom_base[atom] + run_in_atom_base  # linear slot
    run_big = atom_cost[atom] > width
    # Segment ids: runs numbered inside their (last) chunk.
    run_chunk_last = (run_lin + cost - 1) // width
    first_in_chunk = np.ones(cost.size, bool)
    first_in_chunk[1:] = run_chunk_last[1:] != run_chunk_last[:-1]
    idx = np.arange(cost.size)
    run_seg = idx - idx[first_in_chunk][np.cumsum(first_in_chunk) - 1]

    g = graph.to_numpy()
    ev = np.asarray(g.edge_var, np.int64)
    ef = np.asarray(g.edge_factor, np.int64)
    is_head = np.asarray(g.edge_is_head, bool)
    written = np.zeros(num_edges, np.int64) - 1
    written[order] = run_of
    # T slots of each run: the factor's edges, unwritten body first, then the head, then the
    # written edges (so a big run's last chunk holds the head and everything it writes).
    total_slots = int(cost.sum())
    r = np.repeat(np.arange(cost.size), cost)
    edge = off[run_factor[r]] + (np.arange(total_slots) - np.repeat(np.cumsum(cost) - cost, cost))
    is_w = written[edge] == r
    key = np.where(is_w, 2, np.where(is_head[edge], 1, 0))
    # By (run, key, edge): a run's edges are ascending already, so one stable sort of run and key
    # (nearly sorted) instead of a three-key lexsort.
    o = np.argsort(r * 3 + key, kind="stable")
    edge, is_w = edge[o], is_w[o]
    lin = run_lin[r] + (np.arange(total_slots) - np.repeat(np.cumsum(cost) - cost, cost))
    c, slot = lin // width, lin % width
    head_lin = np.zeros(cost.size, np.int64)
    head_lin[r[is_head[edge]]] = lin[is_head[edge]]
    out = np.empty((num_chunks, ROWS, width), np.int32)  # every entry fits (edges < 2^31)
    out[:, EDGE] = num_edges
    out[:, VAR] = num_vars
    out[:, FACTOR] = 0
    out[:, SEG] = width
    out[:, HEAD] = 0
    out[:, WRITE] = 0
    out[:, ACCP] = NO_ACC
    out[:, ACCF] = NO_ACC
    out[c, EDGE, slot] = edge
    out[c, VAR, slot] = ev[edge]
    out[c, FACTOR, slot] = ef[edge]
    out[c, SEG, slot] = run_seg[r]
    out[c, HEAD, slot] = head_lin[r] % width
    out[c, WRITE, slot] = is_w
    big = run_big[r]
    last = c == run_chunk_last[r]
    out[c, ACCP, slot] = np.where(big & ~last, 0, NO_ACC)
    out[c, ACCF, slot] = np.where(big & last, 0, NO_ACC)
    # Slots of a big run's leading chunks are not a segment of their own, and none is a head
    # there (the head sits in the last chunk).
    out[c[big & ~last], SEG, slot[big & ~last]] = width
    out[c[big & ~last], HEAD, slot[big & ~last]] = -1
    sizes = np.bincount(batch, minlength=int(batch.max(initial=-1)) + 1)
    return ChunkLayout(out, sizes, total_slots)


def choose_width(graph: FactorGraph, batch: np.ndarray, rank: np.ndarray, total: bool,
                 per_slot: float) -> int:
    """A power-of-two width minimising chunks * (1 + per_slot * width) (a launch-cost model).

    Chunks per width are estimated as sum over batches of ceil(slots / width).
    """
    cost, atom_batch = _atom_costs(graph, batch, rank, total)
    per_batch = np.bincount(atom_batch, weights=cost)
    lo = min_width(graph, batch, rank, total)
    w = 1 << int(np.ceil(np.log2(max(lo, 1))))
    best, best_cost = w, np.inf
    while True:
        est = np.ceil(per_batch / w).sum() * (1 + per_slot * w)
        if est < best_cost:
            best, best_cost = w, est
        if w >= per_batch.max(initial=1):
            return best
        w *= 2


def stack(layouts: list[ChunkLayout], num_edges: int, num_vars: int) -> ChunkPlan:
    """One plan from per-iteration layouts (same width), padded to the same chunk count."""
    width = layouts[0].chunks.shape[-1]
    most = max(lay.chunks.shape[0] for lay in layouts)
    out = np.empty((len(layouts), most, ROWS, width), np.int32)
    pad = np.zeros((ROWS, width), np.int32)
    pad[EDGE] = num_edges
    pad[VAR] = num_vars
    pad[SEG] = width
    pad[ACCP] = NO_ACC
    pad[ACCF] = NO_ACC
    out[:] = pad
    for i, lay in enumerate(layouts):
        out[i, : lay.chunks.shape[0]] = lay.chunks
    return ChunkPlan(out)
