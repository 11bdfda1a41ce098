"""How local the variable kernel's gather of messages can be: 32-byte sectors per gathered message.

    python benchmarks/probes/gather_orders.py --sizes 500000 5000000

Host only (numpy). The fused variable kernel reads each variable's messages
from the factor kernel's slot order (`fused.build`: `variables.slots`), a
permutation that every sweep needs once. For each order of the graph below it
builds the layout and counts, per variable-kernel program (tile of slots), the
distinct sectors its gathered messages fall in, over the number of messages:
1.0 is a random gather, 0.25 a contiguous one of float64 messages.

Orders: the graph's own; factors in breadth-first or depth-first order from
the factors whose head no factor uses (the alarms' side), each variable
numbered by the factor it heads; and either of those with every factor's
head message counted as if stored apart, in factor-row order.
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common import bingo_model, write_json  # noqa: E402

from fastlbp.core.graph import from_arrays  # noqa: E402
from fastlbp.engines import fused  # noqa: E402


def permuted(g, factor_order: np.ndarray, var_order: np.ndarray):
    """The graph with factor k = old factor factor_order[k] and variable k = old var_order[k]."""
    off = np.asarray(g.factor_offsets, np.int64)
    edge_var = np.asarray(g.edge_var, np.int64)
    n_vars = int(np.asarray(g.var_offsets).size - 1)
    new_var = np.empty(n_vars, np.int64)
    new_var[var_order] = np.arange(n_vars)
    lens = np.diff(off)[factor_order]
    new_off = np.concatenate([[0], np.cumsum(lens)])
    edges = np.arange(new_off[-1]) + np.repeat(off[factor_order] - new_off[:-1], lens)
    e = new_var[edge_var[edges]]
    body = np.ones(e.size, bool)
    body[new_off[:-1]] = False
    return from_arrays(np.asarray(g.factor_kind)[factor_order], e[new_off[:-1]],
                       new_off - np.arange(new_off.size), e[body], np.asarray(g.p1)[factor_order],
                       np.asarray(g.p2)[factor_order], num_vars=n_vars)


def producer_orders(g) -> dict:
    """Breadth- and depth-first factor orders over 'factor -> factors heading its body variables'."""
    off = np.asarray(g.factor_offsets, np.int64)
    edge_var = np.asarray(g.edge_var, np.int64)
    head = np.asarray(g.factor_head, np.int64)
    n_vars = int(np.asarray(g.var_offsets).size - 1)
    producer = np.full(n_vars, -1, np.int64)
    producer[head] = np.arange(head.size)
    used = np.zeros(n_vars, bool)
    is_body = np.ones(edge_var.size, bool)
    is_body[off[:-1]] = False
    used[edge_var[is_body]] = True
    roots = np.flatnonzero(~used[head])

    def children(a):
        p = producer[edge_var[off[a] + 1:off[a + 1]]]
        return p[p >= 0]

    def finish(order, seen):
        return np.concatenate([np.asarray(order, np.int64), np.flatnonzero(~seen)])

    seen = np.zeros(head.size, bool)
    seen[roots] = True
    queue, bfs = deque(roots.tolist()), []
    while queue:
        a = queue.popleft()
        bfs.append(a)
        for c in children(a):
            if not seen[c]:
                seen[c] = True
                queue.append(c)
    orders = {"breadth-first": finish(bfs, seen)}
    seen = np.zeros(head.size, bool)
    stack, dfs = roots[::-1].tolist(), []
    while stack:
        a = stack.pop()
        if seen[a]:
            continue
        seen[a] = True
        dfs.append(a)
        stack.extend(c for c in children(a)[::-1] if not seen[c])
    orders["depth-first"] = finish(dfs, seen)
    return orders


def sectors_per_message(graph, tile: int, heads_apart: bool, itemsize: int = 8) -> float:
    layout = fused.build(graph, fused.AUTO_TILE[8], tile)
    slots = np.asarray(layout.variables.slots).reshape(-1, tile)
    per_sector = 32 // itemsize
    head_pos = np.full(layout.num_slots, -1, np.int64)
    if heads_apart:
        heads = np.flatnonzero((np.asarray(layout.slot_role) & 2) > 0)
        head_pos[heads] = np.arange(heads.size)
    sectors = messages = 0
    for row in slots:
        s = row[row >= 0]
        messages += s.size
        h = head_pos[s]
        sectors += np.unique(h[h >= 0] // per_sector).size + np.unique(s[h < 0] // per_sector).size
    return sectors / messages


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[500_000])
    ap.add_argument("--tile", type=int, default=fused.AUTO_VAR_TILE[8], help="variable-kernel tile (slots)")
    args = ap.parse_args(argv)
    rows = []
    for size in args.sizes:
        g = bingo_model(size, seed=0).graph.to_numpy()
        head = np.asarray(g.factor_head, np.int64)
        if np.unique(head).size != head.size or head.size != np.asarray(g.var_offsets).size - 1:
            raise SystemExit("these orders number each variable by the one factor it heads")
        graphs = {"own": g}
        for name, order in producer_orders(g).items():
            graphs[name] = permuted(g, order, head[order])
        for name, graph in graphs.items():
            for apart in (False, True):
                rows.append({"edges": int(g.edge_var.size), "order": name, "heads_apart": apart,
                             "sectors_per_message": sectors_per_message(graph, args.tile, apart)})
                print(f"{rows[-1]['edges']:>9} {name:>14} {'heads apart' if apart else '':>11} "
                      f"{rows[-1]['sectors_per_message']:.3f}", flush=True)
    write_json("gather_orders.json", {"tile": args.tile, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
