"""Host-side cost of a schedule at a size (CPU): batches per iteration and seconds of each analysis,
and the relaxation plan's build time and reader-group edges.

    python benchmarks/probes/analysis_sizes.py 5000000 ftp
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common, bench_schedules
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_schedules import make_model  # noqa: E402

from schedules import analysis, orders, relax_plan  # noqa: E402


def main(argv=None) -> int:
    sizes = (sys.argv[1:] if argv is None else argv) or ["500000"]
    print(f"{'size':>9} {'edges':>9} {'strategy':>8} {'levels':>8} {'s':>6} {'alg3':>8} {'s':>6} "
          f"{'relax build s':>13} {'virtual edges':>13}")
    for size in sizes:
        model, _ = make_model(size)
        g = model.graph
        for name, make in (("seqfix", orders.seqfix), ("topo", orders.topo)):
            order = make(g)
            lev = analysis.levelling(g, order)
            a3 = analysis.algorithm3(g, order)
            t0 = time.perf_counter()
            plan = relax_plan.build(g, order, lev.num_batches)
            build_s = time.perf_counter() - t0
            print(f"{size:>9} {g.num_edges:>9} {name:>8} {lev.num_batches:>8} {lev.seconds:>6.1f} "
                  f"{a3.num_batches:>8} {a3.seconds:>6.1f} {build_s:>13.1f} {plan.virtual_edges:>13}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
