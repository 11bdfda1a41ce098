"""How deep SEQFIX is on a graph: levels with and without write-after-read constraints.

    python benchmarks/probes/seqfix_depth.py ftp 500000 ../shared/data/reference/avrora/graph.causal_fg

Exact levelling (`schedules.analysis.levelling`) counts the batches an
in-place engine needs per SEQFIX iteration. The read-after-write depth alone
(the longest chain of edges that each read the previous one's new message;
a double-buffered engine could do no better) is computed here by one pass over
the factors in file order, keeping each variable's deepest incoming write.
Runs on the CPU.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from schedules import analysis, orders  # noqa: E402


def raw_depth(graph) -> int:
    """Levels of SEQFIX counting read-after-write dependencies only."""
    g = graph.to_numpy()
    off = np.asarray(g.factor_offsets, np.int64)
    ev = np.asarray(g.edge_var, np.int64)
    deepest = np.full(int(ev.max()) + 1, -1, np.int64)  # deepest write into each variable so far
    top = 0
    for f in range(off.size - 1):
        vs = ev[off[f]:off[f + 1]]
        if vs.size == 1:
            depth = np.zeros(1, np.int64)
        else:
            m = deepest[vs]
            i = int(np.argmax(m))
            loo = np.full(vs.size, m[i])
            loo[i] = np.max(np.delete(m, i))  # each edge reads the others' variables
            depth = np.maximum(loo + 1, 0)
        np.maximum.at(deepest, vs, depth)
        top = max(top, int(depth.max()))
    return top + 1


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for name in args or ["ftp"]:
        if name.endswith(".causal_fg"):
            from fastlbp import causal_fg

            graph = causal_fg.load(name).graph
        elif name.isdigit():
            from common import bingo_model

            graph = bingo_model(int(name)).graph
        else:
            from datalog.bayesnet import to_model
            from datalog.synthetic import generate

            graph = to_model(generate(preset=name, seed=0)).graph
        t0 = time.perf_counter()
        raw = raw_depth(graph)
        t1 = time.perf_counter()
        levels = analysis.levelling(graph, orders.seqfix(graph)).num_batches
        t2 = time.perf_counter()
        print(f"{name}: {graph.num_edges:,} edges, SEQFIX levels {levels:,} (levelling, {t2 - t1:.1f} s), "
              f"read-after-write depth {raw:,} ({t1 - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
