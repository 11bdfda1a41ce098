"""Update strategies as strict partial orders on factor-to-variable edges (paper Definition 4.1).

An order is stored as a *rank* per edge: e' precedes e iff rank(e') < rank(e).
Ranks describe weak orders (ordered stages); a total order has distinct ranks.
Edge e reads the value e' got in this iteration iff e' precedes e; equal ranks
(one stage) read each other's old values (Jacobi inside a stage).

* PARALL: every rank 0 (the empty order).
* SEQFIX: libDAI's order: factor by factor in file order, inside a factor its
  variables by ascending variable index (= ascending label for causal
  factor-graph files; the head is not necessarily first).
* SEQRND: a seeded random total order per iteration (a cycle of `cycle`
  precomputed orders; iteration i uses order i mod cycle).
* TOPO: a topological order of the Bayesian network (factor a: body -> head):
  head edges in topological order of their heads, then body edges in reverse
  topological order. Directed cycles (general factor graphs) are broken by
  taking the smallest remaining variable. `topo:bodyfirst` runs the backward
  half first.
* Custom file (`read_order_file`): a total order, ordered stages, or
  precedence pairs. Precedence pairs are extended to stages by longest-path
  layering (an edge's stage is the length of the longest chain of pairs ending
  at it), which keeps every pair; a cycle is an error naming an edge on it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from fastlbp.core.errors import InputError, read_text, text_lines
from fastlbp.core.graph import FactorGraph


def unique(x: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array, by one sort.

    numpy 2.4's `np.unique` without return_* options hashes its input, which took
    about 60x a sort's time for 2M int64 values (BENCHMARKS.md, "Figures behind the code's choices").
    """
    s = np.sort(np.asarray(x).ravel())
    keep = np.ones(s.size, bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def time_order(rank: np.ndarray) -> np.ndarray | None:
    """Edges in rank order when the ranks are a permutation of 0..E-1 (every built-in total
    order and total order file), by one scatter instead of a sort; None otherwise.

    A stable argsort of 2M such ranks is the cost it saves (BENCHMARKS.md, "Figures behind the
    code's choices").
    """
    rank = np.asarray(rank)
    n = rank.size
    if n == 0 or int(rank.min()) != 0 or int(rank.max()) != n - 1:
        return None
    seq = np.full(n, -1, np.int64)
    seq[rank] = np.arange(n)
    return seq if bool((seq >= 0).all()) else None


@dataclasses.dataclass(frozen=True)
class Order:
    """A strict weak order on the E edges of a graph.

    Attributes:
        rank: (E,) int64, e' precedes e iff rank[e'] < rank[e].
        name: what it came from (for reports).
    """

    rank: np.ndarray
    name: str

    @property
    def is_total(self) -> bool:
        return bool(unique(self.rank).size == self.rank.size)


def _edge_arrays(graph: FactorGraph):
    g = graph.to_numpy()
    return (np.asarray(g.edge_factor, np.int64), np.asarray(g.edge_var, np.int64),
            np.asarray(g.edge_is_head, bool), np.asarray(g.factor_head, np.int64))


def _rank_of_sequence(seq: np.ndarray) -> np.ndarray:
    rank = np.empty(seq.size, np.int64)
    rank[seq] = np.arange(seq.size)
    return rank


def parall(graph: FactorGraph) -> Order:
    return Order(np.zeros(graph.num_edges, np.int64), "parall")


def seqfix(graph: FactorGraph) -> Order:
    """libDAI's SEQFIX: factors in file order, each factor's variables by ascending index."""
    ef, ev, _, _ = _edge_arrays(graph)
    # One key instead of a two-key lexsort (slower); edges are
    # stored factor by factor, so the keys are nearly sorted.
    return Order(_rank_of_sequence(np.argsort(ef * max(graph.num_vars, 1) + ev, kind="stable")), "seqfix")


def seqrnd(graph: FactorGraph, seed: int = 0, cycle: int = 8) -> list[Order]:
    """`cycle` seeded random total orders (iteration i uses number i mod cycle)."""
    rng = np.random.default_rng(seed)
    return [Order(_rank_of_sequence(rng.permutation(graph.num_edges)), f"seqrnd[{i}]")
            for i in range(cycle)]


def topological_positions(graph: FactorGraph) -> np.ndarray:
    """(V,) int64 position of each variable in a topological order of the Bayesian network.

    Arcs go from every body variable of a factor to its head. Kahn's algorithm by
    depth (vectorised per depth); ties by variable index; a directed cycle is broken
    by releasing the smallest remaining variable.
    """
    ef, ev, is_head, fhead = _edge_arrays(graph)
    num_vars = graph.num_vars
    body = ~is_head
    src = ev[body]
    dst = fhead[ef[body]]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    out_off = np.zeros(num_vars + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_vars), out=out_off[1:])
    indeg = np.bincount(dst, minlength=num_vars)
    done = np.zeros(num_vars, bool)
    depth = np.full(num_vars, -1, np.int64)
    frontier = np.flatnonzero(indeg == 0)
    d = 0
    remaining = num_vars
    while remaining:
        if frontier.size == 0:
            frontier = np.array([np.flatnonzero(~done)[0]])
        depth[frontier] = d
        done[frontier] = True
        remaining -= frontier.size
        starts, ends = out_off[frontier], out_off[frontier + 1]
        lens = ends - starts
        idx = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
        targets = dst[idx]
        np.subtract.at(indeg, targets, 1)
        cand = unique(targets)
        frontier = cand[(indeg[cand] <= 0) & ~done[cand]]
        d += 1
    pos = np.empty(num_vars, np.int64)
    pos[np.lexsort((np.arange(num_vars), depth))] = np.arange(num_vars)
    return pos


def topo(graph: FactorGraph, body_first: bool = False) -> Order:
    """TOPO: head edges forward in topological order, then body edges backward."""
    ef, ev, is_head, fhead = _edge_arrays(graph)
    tp = topological_positions(graph)[fhead[ef]]  # (E,) position of the edge's factor head
    heads = np.flatnonzero(is_head)
    bodies = np.flatnonzero(~is_head)
    fwd = heads[np.argsort(tp[heads], kind="stable")]  # heads are in edge order already
    # By (-position, factor, variable): (factor, variable) first (nearly sorted: edges are stored
    # factor by factor), then stably by position; a three-key lexsort sorts three times.
    bodies = bodies[np.argsort(ef[bodies] * max(graph.num_vars, 1) + ev[bodies], kind="stable")]
    bwd = bodies[np.argsort(-tp[bodies], kind="stable")]
    seq = np.concatenate([bwd, fwd] if body_first else [fwd, bwd])
    return Order(_rank_of_sequence(seq), "topo:bodyfirst" if body_first else "topo")


# --------------------------------------------------------------------------------------------
# Custom order files.

ORDER_FILE_HELP = """\
A custom order file (UTF-8). Blank lines and lines starting with # are ignored.
The first line names the kind: `order total`, `order stages` or `order pairs`.
An edge is written `FACTOR VARIABLE` (0-based factor index in file order, then the
variable's name) or `#E` (edge index E: factor by factor, head first).

  order total     one edge per line, every edge exactly once, first updated first.
  order stages    one edge per line; a line `---` ends a stage. Every edge once.
                  Edges of one stage are updated together (they read each other's
                  old values); a later stage reads the new values of earlier ones.
  order pairs     lines `EDGE < EDGE`: the left edge is updated before the right one
                  (the right one reads its new value). Unlisted edges are free. A
                  cycle is an error. Pairs are extended to stages by longest chains.
"""


def _edge_resolver(graph: FactorGraph, var_names):
    ef, ev, _, _ = _edge_arrays(graph)
    off = np.asarray(graph.factor_offsets, np.int64)
    index = {name: i for i, name in enumerate(var_names)}

    def resolve(text: str, path, line) -> int:
        s = text.strip()
        if s.startswith("#"):
            try:
                e = int(s[1:])
            except ValueError:
                raise InputError(path, line, f"expected an edge '#E', got {s!r}") from None
            if not 0 <= e < ef.size:
                raise InputError(path, line, f"edge {e} is out of range [0, {ef.size})")
            return e
        fac, _, var = s.partition(" ")
        var = var.strip()
        try:
            a = int(fac)
        except ValueError:
            raise InputError(path, line, f"expected 'FACTOR VARIABLE' or '#E', got {s!r}") from None
        if not var:
            raise InputError(path, line, f"expected 'FACTOR VARIABLE' or '#E', got {s!r}")
        if not 0 <= a < off.size - 1:
            raise InputError(path, line, f"factor {a} is out of range [0, {off.size - 1})")
        if var not in index:
            raise InputError(path, line, f"unknown variable {var!r}")
        v = index[var]
        hit = np.flatnonzero(ev[off[a]:off[a + 1]] == v)
        if hit.size == 0:
            raise InputError(path, line, f"variable {var!r} is not in factor {a}")
        return int(off[a] + hit[0])

    return resolve


def _edge_name(graph: FactorGraph, var_names, e: int) -> str:
    ef = int(np.asarray(graph.edge_factor)[e])
    v = int(np.asarray(graph.edge_var)[e])
    return f"edge #{e} (factor {ef}, variable {var_names[v]!r})"


def parse_order(text: str, graph: FactorGraph, var_names, path: str | None = None) -> Order:
    """Parses a custom order (see ORDER_FILE_HELP).

    Raises:
        InputError: naming the file, line and problem (unknown kind, bad edge,
            an edge listed twice or missing, a cycle of precedence pairs).
    """
    resolve = _edge_resolver(graph, var_names)
    num_edges = graph.num_edges
    lines = [(i + 1, ln.strip()) for i, ln in enumerate(text_lines(text))]
    lines = [(n, s) for n, s in lines if s and not (s.startswith("#") and not s[1:2].isdigit())]
    if not lines:
        raise InputError(path, None, "empty order file (expected 'order total|stages|pairs')")
    n0, head = lines[0]
    kind = head.split()
    if len(kind) != 2 or kind[0] != "order" or kind[1] not in ("total", "stages", "pairs"):
        raise InputError(path, n0, f"expected 'order total', 'order stages' or 'order pairs', "
                                   f"got {head!r}")
    kind = kind[1]
    body = lines[1:]
    if kind in ("total", "stages"):
        rank = np.full(num_edges, -1, np.int64)
        first_line = {}
        stage = 0
        pos = 0
        for n, s in body:
            if s == "---" and kind == "stages":
                stage += 1
                continue
            e = resolve(s, path, n)
            if e in first_line:
                raise InputError(path, n, f"{_edge_name(graph, var_names, e)} is listed twice "
                                          f"(first on line {first_line[e]})")
            first_line[e] = n
            rank[e] = pos if kind == "total" else stage
            pos += 1
        missing = np.flatnonzero(rank < 0)
        if missing.size:
            raise InputError(path, None, f"{missing.size} edges are not listed, e.g. "
                                         f"{_edge_name(graph, var_names, int(missing[0]))}")
        if kind == "stages":
            rank = np.unique(rank, return_inverse=True)[1].astype(np.int64)
        return Order(rank, f"file:{path}:{kind}")

    src, dst, where = [], [], []
    for n, s in body:
        left, sep, right = s.partition(" < ")
        if not sep:
            raise InputError(path, n, f"expected 'EDGE < EDGE', got {s!r}")
        a, b = resolve(left, path, n), resolve(right, path, n)
        if a == b:
            raise InputError(path, n, f"{_edge_name(graph, var_names, a)} cannot precede itself")
        src.append(a)
        dst.append(b)
        where.append(n)
    rank = _layer_pairs(np.array(src, np.int64), np.array(dst, np.int64), num_edges)
    if rank is None:
        cyc = _find_cycle(src, dst)
        e = cyc[0]
        chain = " < ".join(f"#{x}" for x in cyc + [e])
        line = where[next(i for i, (a, b) in enumerate(zip(src, dst, strict=True))
                          if a == cyc[0] and b == cyc[1 % len(cyc)])]
        raise InputError(path, line, f"the precedence pairs form a cycle through "
                                     f"{_edge_name(graph, var_names, e)}: {chain}")
    return Order(rank, f"file:{path}:pairs")


def _layer_pairs(src: np.ndarray, dst: np.ndarray, num_edges: int) -> np.ndarray | None:
    """Longest-path layering of the pair DAG; None when the pairs have a cycle."""
    rank = np.zeros(num_edges, np.int64)
    if src.size == 0:
        return rank
    indeg = np.bincount(dst, minlength=num_edges)
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    off = np.zeros(num_edges + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_edges), out=off[1:])
    frontier = np.flatnonzero(indeg == 0)
    seen = 0
    d = 0
    while frontier.size:
        rank[frontier] = d
        seen += frontier.size
        lens = off[frontier + 1] - off[frontier]
        idx = np.repeat(off[frontier] - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
        targets = dst[idx]
        np.subtract.at(indeg, targets, 1)
        cand = unique(targets)
        frontier = cand[indeg[cand] == 0]
        d += 1
    return rank if seen == num_edges else None


def _find_cycle(src, dst) -> list[int]:
    """One directed cycle of the pair graph (iterative DFS; only on the error path)."""
    succ: dict[int, list[int]] = {}
    for a, b in zip(src, dst, strict=True):
        succ.setdefault(a, []).append(b)
    color: dict[int, int] = {}
    for start in succ:
        if color.get(start):
            continue
        stack = [(start, iter(succ.get(start, ())))]
        path = [start]
        color[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
                continue
            c = color.get(nxt, 0)
            if c == 1:
                return path[path.index(nxt):]
            if c == 0:
                color[nxt] = 1
                stack.append((nxt, iter(succ.get(nxt, ()))))
                path.append(nxt)
    raise AssertionError("no cycle found")


def read_order_file(path: str | os.PathLike, graph: FactorGraph, var_names) -> Order:
    p = Path(path)
    # The readers' checks: a BOM dropped, directories and broken links reported, gzip bounded.
    return parse_order(read_text(p), graph, var_names, str(p))
