"""Cycle elimination by least-fixpoint stages (Bingo's approach, paper Section 2.2).

Evaluate the derivation graph like the Datalog fixpoint: inputs hold at
stage 0; a clause fires at stage 1 + the largest stage of its body tuples; a
tuple's stage is the first stage at which some clause deriving it fires.
Bingo's criterion keeps a clause iff it fires exactly at its head's stage,
i.e. every body tuple was derived strictly before the head.

Two modes:

* "cycles" (default): the criterion is applied to the clauses that lie on a
  cycle (head and some body tuple in one strongly connected component);
  every other clause that fires is kept. An acyclic graph is left as it is.
* "bingo": the criterion is applied to every clause, as Bingo does; this
  also drops acyclic alternative derivations that come later in the fixpoint.

Either way the result is acyclic (edges between components follow the
condensation order; inside a component stages strictly increase) and every
tuple the fixpoint derives keeps the clause that first derived it, so
exactly the derivable tuples stay derivable. Tuples that are heads of
clauses but never derived (every derivation depends on the tuple itself) are
"neither derived nor input": they and their clauses are dropped and reported.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from datalog.derivation import DerivationGraph


@dataclasses.dataclass(frozen=True)
class Stages:
    """Least-fixpoint stages of a derivation graph (T tuples, C clauses).

    Attributes:
        tuple_stage: (T,) int32, first stage each tuple holds; -1 if never.
        clause_stage: (C,) int32, stage each clause fires; -1 if never.
        is_input: (T,) bool, input tuples (stage 0).
        clause_kept: (C,) bool, clauses that survive cycle elimination.
        on_cycle: (C,) bool, clauses that lie on a cycle.
        mode: "cycles" or "bingo".
    """

    tuple_stage: np.ndarray
    clause_stage: np.ndarray
    is_input: np.ndarray
    clause_kept: np.ndarray
    on_cycle: np.ndarray
    mode: str = "cycles"

    @property
    def derivable(self) -> np.ndarray:
        """(T,) bool: tuples in the least fixpoint."""
        return self.tuple_stage >= 0

    @property
    def num_dropped_clauses(self) -> int:
        return int(self.clause_kept.size - np.count_nonzero(self.clause_kept))


def input_mask(dg: DerivationGraph) -> np.ndarray:
    """(T,) bool: tuples that no clause derives, and tuples given a prior."""
    is_input = np.bincount(np.asarray(dg.clause_head, np.int64), minlength=dg.num_tuples) == 0
    if dg.priors:
        is_input[np.fromiter(dg.priors.keys(), np.int64, len(dg.priors))] = True
    return is_input


def _ranges(offsets: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Concatenation of ranges offsets[i]:offsets[i+1] for i in `items` (vectorised)."""
    starts = offsets[items]
    lens = offsets[items + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    # Position within the output minus the start of its range, plus that range's source start.
    seg_start = np.repeat(np.cumsum(lens) - lens, lens)
    return np.repeat(starts, lens) + (np.arange(total) - seg_start)


MODES = ("cycles", "bingo")


def clauses_on_cycles(dg: DerivationGraph) -> np.ndarray:
    """(C,) bool: clauses whose head and some body tuple share a strongly connected component."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    num_t = dg.num_tuples
    lens = np.diff(np.asarray(dg.body_offsets, np.int64))
    body = np.asarray(dg.body, np.int64)
    head_of_entry = np.repeat(np.asarray(dg.clause_head, np.int64), lens)
    adj = csr_matrix((np.ones(body.size, np.int8), (body, head_of_entry)), shape=(num_t, num_t))
    _, comp = connected_components(adj, directed=True, connection="strong")
    same = comp[body] == comp[head_of_entry]  # includes self-loops
    owner = np.repeat(np.arange(dg.num_clauses), lens)
    return np.bincount(owner[same], minlength=dg.num_clauses) > 0


def least_fixpoint(dg: DerivationGraph, mode: str = "cycles") -> Stages:
    """Computes the stages, frontier by frontier (O(tuples + body entries), numpy per stage).

    Args:
        dg: the derivation graph.
        mode: "cycles" (Bingo's criterion on clauses that lie on cycles) or
            "bingo" (on every clause); see the module docstring.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    num_t, num_c = dg.num_tuples, dg.num_clauses
    heads = np.asarray(dg.clause_head, np.int64)
    offsets = np.asarray(dg.body_offsets, np.int64)
    body = np.asarray(dg.body, np.int64)
    lens = np.diff(offsets)
    body_clause = np.repeat(np.arange(num_c), lens)
    # Tuple -> the body entries naming it (CSR over a stable sort by tuple).
    occ = np.argsort(body, kind="stable")
    occ_clause = body_clause[occ]
    occ_offsets = np.zeros(num_t + 1, np.int64)
    np.cumsum(np.bincount(body, minlength=num_t), out=occ_offsets[1:])

    is_input = input_mask(dg)
    tuple_stage = np.full(num_t, -1, np.int32)
    clause_stage = np.full(num_c, -1, np.int32)
    tuple_stage[is_input] = 0
    waiting = lens.copy()  # body tuples of each clause not derived yet
    frontier = np.flatnonzero(is_input)
    # Clauses with an empty body fire at stage 1 without waiting for anything.
    ready = np.flatnonzero(waiting == 0)
    stage = 0
    while True:
        stage += 1
        touched = occ_clause[_ranges(occ_offsets, frontier)]
        if touched.size:
            uniq, counts = np.unique(touched, return_counts=True)
            waiting[uniq] -= counts
            fired = uniq[waiting[uniq] == 0]
        else:
            fired = np.zeros(0, np.int64)
        if ready is not None:
            fired = np.union1d(fired, ready)
            ready = None
        if fired.size == 0:
            break
        clause_stage[fired] = stage
        new_heads = np.unique(heads[fired])
        new_heads = new_heads[tuple_stage[new_heads] < 0]
        tuple_stage[new_heads] = stage
        frontier = new_heads
    first = (clause_stage >= 0) & (clause_stage == tuple_stage[heads])
    on_cycle = clauses_on_cycles(dg) if num_c else np.zeros(0, bool)
    if mode == "bingo":
        clause_kept = first
    else:
        clause_kept = (clause_stage >= 0) & (first | ~on_cycle)
    return Stages(tuple_stage, clause_stage, is_input, clause_kept, on_cycle, mode)


def is_acyclic(dg: DerivationGraph, clause_kept: np.ndarray) -> bool:
    """Whether the kept clauses form a DAG on tuples (Kahn's algorithm; for tests and checks)."""
    import networkx as nx

    g = nx.DiGraph()
    for c in np.flatnonzero(clause_kept):
        head = int(dg.clause_head[c])
        g.add_node(("t", head))
        g.add_edge(("c", int(c)), ("t", head))
        for b in dg.clause_body(int(c)):
            g.add_edge(("t", int(b)), ("c", int(c)))
    return nx.is_directed_acyclic_graph(g)
