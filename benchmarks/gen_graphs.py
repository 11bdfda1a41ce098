"""Generates synthetic Bingo-like derivation graphs and prints their sizes and timings.

Examples:
    python benchmarks/gen_graphs.py --factor-edges 500000 --seed 0
    python benchmarks/gen_graphs.py --preset ftp --preset ftpx10
    python benchmarks/gen_graphs.py --all-presets --factor-edges 50000 --factor-edges 5000000

Per graph: BN vertices/edges (Table 1's counts), factor-graph variables and
edges (from datalog.bayesnet.to_model), tuples, clauses, alarms, the tails
(max derivations per tuple, max reuse of a tuple), and the seconds spent in
generate, to_model and sample_truth.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datalog import synthetic  # noqa: E402
from datalog.bayesnet import to_model  # noqa: E402


def measure(seed: int, **size) -> dict:
    t0 = time.perf_counter()
    dg = synthetic.generate(seed=seed, **size)
    t1 = time.perf_counter()
    graph = to_model(dg).graph
    t2 = time.perf_counter()
    truth = synthetic.sample_truth(dg, seed)
    t3 = time.perf_counter()
    vertices, edges = synthetic.bn_sizes(dg)
    derivations = np.bincount(dg.clause_head)[len(dg.priors):]
    reuse = np.bincount(dg.body, minlength=dg.num_tuples)
    return {
        "graph": ", ".join(f"{k}={v}" for k, v in size.items()),
        "bn_vertices": vertices, "bn_edges": edges,
        "fg_vars": graph.num_vars, "fg_edges": graph.num_edges,
        "tuples": dg.num_tuples, "clauses": dg.num_clauses, "alarms": len(dg.alarms),
        "max_deriv": int(derivations.max()), "max_reuse": int(reuse.max()),
        "true_alarms": float(truth[dg.alarms].mean()),
        "generate_s": t1 - t0, "to_model_s": t2 - t1, "sample_s": t3 - t2,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factor-edges", type=float, action="append", default=[],
                        help="target factor-graph edges (repeatable; 5e6 is fine)")
    parser.add_argument("--preset", action="append", default=[], choices=list(synthetic.PRESETS),
                        help="a Table 1 preset or <name>x10 (repeatable)")
    parser.add_argument("--all-presets", action="store_true", help="every Table 1 preset")
    parser.add_argument("--x10", action="store_true", help="with --all-presets: also the x10 presets")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    presets = list(args.preset)
    if args.all_presets:
        presets += list(synthetic.TABLE1) + ([f"{p}x10" for p in synthetic.TABLE1] if args.x10 else [])
    jobs = [{"preset": p} for p in presets] + [{"factor_edges": int(f)} for f in args.factor_edges]
    if not jobs:
        parser.error("give --factor-edges, --preset or --all-presets")
    header = ("graph", "bn_vertices", "bn_edges", "fg_vars", "fg_edges", "tuples", "clauses", "alarms",
              "max_deriv", "max_reuse", "true_alarms", "generate_s", "to_model_s", "sample_s")
    print("  ".join(header))
    for job in jobs:
        row = measure(args.seed, **job)
        print("  ".join(f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in header),
              flush=True)


if __name__ == "__main__":
    main()
