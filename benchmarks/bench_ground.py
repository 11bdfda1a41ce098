"""Grounding benchmark: a transitive-closure program over random graphs, 10^4 to 10^6 clauses.

    python benchmarks/bench_ground.py           # sizes 1e4 1e5 1e6: a table, and $OUT/bench_ground.json
    python benchmarks/bench_ground.py --sizes 1e4 1e5 --observer-max 1e5 --out ground.json

For each size it writes `tc.dl` (path(x,y) :- edge(x,y). path(x,z) :-
path(x,y), edge(y,z).) and `edge.facts` of a random directed graph with mean
out-degree 3 whose node count is chosen so the ground program has about that
many clauses (every path tuple times the out-degree of its end, plus the
edges), then measures, each in a fresh process:

* ground + write: `datalog.grounding.ground_file` (facts, translation,
  clingo, reading back, the graph with duplicates merged) and writing
  derivation.json (`datalog.io.write_derivation`); seconds of each stage, peak
  memory (RSS) of the process;
* the same with the Python observer reader, up to `--observer-max` clauses
  (its callbacks cost about 12 us per rule, so it is the cross-check, not the
  default);
* the whole pipeline to the first ranking: `fastlbp rank tc.dl --facts DIR
  --top 10` (imports, grounding, loading: cycle elimination and compression,
  JAX compilation, LBP), up to `--rank-max` clauses, wall time and peak memory.

Prints a table; details go to --out (default $OUT/bench_ground.json).
Runs on a CPU (grounding is host work); the rank column uses whatever JAX finds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = """.decl edge(a: number, b: number)
.input edge
.decl path(a: number, b: number)
.output path
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z).
"""
DEGREE = 3


def random_edges(n: int, seed: int = 0) -> np.ndarray:
    """(m, 2) distinct directed edges, about DEGREE per node, no self loops."""
    rng = np.random.default_rng(seed)
    m = DEGREE * n
    pairs = rng.integers(0, n, size=(2 * m, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    pairs = np.unique(pairs, axis=0)
    return pairs[rng.permutation(len(pairs))[:m]]


def clause_count(n: int, edges: np.ndarray) -> int:
    """Clauses of the closure: |edges| + sum over path(x, y) of outdeg(y) (reachability by BFS)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import breadth_first_order

    adj = sp.csr_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    outdeg = np.diff(adj.indptr)
    total = len(edges)
    for x in range(n):
        # nodes reachable from x by one edge or more: successors' BFS orders
        seen = np.zeros(n, bool)
        for s in adj.indices[adj.indptr[x]:adj.indptr[x + 1]]:
            if not seen[s]:
                seen[breadth_first_order(adj, s, return_predecessors=False)] = True
        total += int(outdeg[seen].sum())
    return total


def instance(target: int, seed: int = 0) -> tuple[int, np.ndarray, int]:
    """The node count (bisection) whose closure has about `target` clauses, its edges and the count."""
    lo, hi = 4, 8
    while clause_count(hi, random_edges(hi, seed)) < target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if clause_count(mid, random_edges(mid, seed)) < target:
            lo = mid
        else:
            hi = mid
    edges = random_edges(hi, seed)
    return hi, edges, clause_count(hi, edges)


def child(directory: Path, reader: str) -> dict:
    """Grounds and writes in this process; returns seconds and peak memory."""
    from datalog import grounding
    from datalog import io as datalog_io

    t0 = time.perf_counter()
    options = grounding.GroundOptions(facts=directory, reader=reader)
    result = grounding.ground_file(directory / "tc.dl", options)
    t1 = time.perf_counter()
    datalog_io.write_derivation(result.graph, directory / "tc.json")
    t2 = time.perf_counter()
    return {"clauses": result.graph.num_clauses, "tuples": result.graph.num_tuples,
            "ground_rules": result.ground_rules, "stages": result.seconds, "ground_s": t1 - t0,
            "write_s": t2 - t1, "ground_write_s": t2 - t0,
            "json_mb": (directory / "tc.json").stat().st_size / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(directory: Path, reader: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(directory), "--reader", reader],
                         capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_rank(directory: Path, timeout: float) -> dict:
    """`fastlbp rank tc.dl --facts DIR --top 10` in a fresh process: wall seconds and its peak memory."""
    import threading

    cmd = [sys.executable, "-m", "fastlbp", "rank", str(directory / "tc.dl"), "--facts", str(directory),
           "--top", "10"]
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "FASTLBP_CACHE": "off"})
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # wait4: the child's own peak memory
        seconds = time.perf_counter() - t0
        timed_out = not timer.is_alive()
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().strip().splitlines()[-3:]
    return {"seconds": seconds, "timed_out": timed_out, "exit": proc.returncode,
            "peak_rss_mb": usage.ru_maxrss / 1024, "stderr_tail": tail}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e4, 1e5, 1e6], help="target clause counts")
    ap.add_argument("--observer-max", type=float, default=1e5, help="largest size for the Python observer")
    ap.add_argument("--rank-max", type=float, default=1e6, help="largest size run through `fastlbp rank`")
    ap.add_argument("--rank-timeout", type=float, default=1800, help="seconds before a rank run is stopped")
    ap.add_argument("--out", default=None, help="JSON file (default $OUT/bench_ground.json)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--reader", default="aspif", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.reader)))
        return
    rows = []
    print(f"{'target':>9} {'nodes':>6} {'edges':>6} {'clauses':>9} {'ground+write s':>14} {'clingo s':>8} "
          f"{'read s':>6} {'graph s':>7} {'write s':>7} {'peak MB':>7} {'observer s':>10} {'rank s':>7} "
          f"{'rank MB':>7}", flush=True)
    for size in args.sizes:
        target = int(size)
        n, edges, expected = instance(target, args.seed)
        with tempfile.TemporaryDirectory(prefix="bench-ground-") as tmp:
            d = Path(tmp)
            (d / "tc.dl").write_text(PROGRAM)
            (d / "edge.facts").write_text("".join(f"{a}\t{b}\n" for a, b in edges.tolist()))
            row = {"target": target, "nodes": n, "edges": len(edges), "expected_clauses": expected,
                   "aspif": run_child(d, "aspif")}
            assert row["aspif"]["clauses"] == expected, (row["aspif"]["clauses"], expected)
            if target <= args.observer_max:
                row["observer"] = run_child(d, "observer")
                assert row["observer"]["clauses"] == expected
            if target <= args.rank_max:
                row["rank"] = run_rank(d, args.rank_timeout)
        rows.append(row)
        a, st = row["aspif"], row["aspif"]["stages"]
        obs = f"{row['observer']['ground_write_s']:10.2f}" if "observer" in row else f"{'-':>10}"
        rank = row.get("rank", {})
        rank_s = f"{rank['seconds']:7.1f}" if rank and not rank.get("timed_out") else \
            (f"{'>' + str(int(rank['seconds'])):>7}" if rank else f"{'-':>7}")
        rank_mb = f"{rank['peak_rss_mb']:7.0f}" if rank else f"{'-':>7}"
        print(f"{target:9,} {n:6,} {len(edges):6,} {a['clauses']:9,} {a['ground_write_s']:14.2f} "
              f"{st['clingo']:8.2f} {st['read']:6.2f} {st['graph']:7.2f} {a['write_s']:7.2f} "
              f"{a['peak_rss_mb']:7.0f} {obs} {rank_s} {rank_mb}", flush=True)
    out = Path(args.out) if args.out else Path(os.environ.get("OUT", "out")) / "bench_ground.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    import clingo

    out.write_text(json.dumps({"rows": rows, "environment": {
        "python": platform.python_version(), "clingo": clingo.__version__, "cpus": os.cpu_count(),
        "load_average": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}},
        indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
