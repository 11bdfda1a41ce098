"""Device bytes per edge of PARALL and SEQFIX sessions, array by array, and the host's peak.

For every size (factor-graph edges of a synthetic Bingo-like graph,
`datalog.synthetic`) and precision it builds a `fastlbp.Session` for PARALL
and one for SEQFIX (backend "auto": on a GPU PARALL runs the fused kernels)
and sums the `nbytes` of every device array the session holds: the graph,
the runner's layout (segment plans, the relaxation plan, the fused rows; a
chunk plan if one was built), the messages and the evidence. Buffers are
counted once (arrays shared between the graph and a layout are not counted
twice). The graph on the device holds only the fields the runner reads
(`Runner.reads`, `fastlbp.engines.device_graph`); the JSON lists them per run
("graph_fields") beside the bytes per edge of each field of the whole graph
("graph_whole"), and every held array's bytes per edge ("arrays_per_edge").
`--backend fused_interpret` measures the fused PARALL layout on a CPU (without
`--round`: the interpreter is far too slow for rounds at these sizes).

With `--round` it also runs a cold round of each (tol 1e-6, at most
`--max-iters` iterations) and reports its time and, on a GPU, JAX's
`memory_stats` (bytes in use and the process's peak so far; PARALL runs
first, so its peak is its own and SEQFIX's is the larger of the two).

Host memory: the peak resident set (`ru_maxrss`) after generating the
derivation graph, after building the model (`datalog.bayesnet.to_model`),
and after each session, less the process's own before the first graph
(Python, JAX, the imports), per edge. On a CPU the "device" arrays are host
memory too.

Usage (the lead's one call on the H200, about 5-8 minutes):

    python benchmarks/bench_memory.py --sizes 1e8 --round

    python benchmarks/bench_memory.py --sizes 2e5 2e6 --precisions f64 f32   # this CPU
    python benchmarks/bench_memory.py --sizes 1e6 --schedules parall seqfix topo
    python benchmarks/bench_memory.py --sizes 1e6 --schedules parall --backend fused_interpret

Details go to $OUT/bench_memory.json (rewritten after every step); a table is
printed last.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import environment, write_json  # noqa: E402

import fastlbp  # noqa: E402
from fastlbp import engines  # noqa: E402


def host_peak() -> int:
    """Peak resident set of this process so far, bytes (Linux: ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def host_now() -> int:
    """Resident set now, bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return 0


def device_stats() -> dict:
    stats = jax.devices()[0].memory_stats() or {}
    return {k: int(stats[k]) for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit") if k in stats}


def _leaves(prefix: str, tree) -> list[tuple[str, jax.Array]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(prefix + jax.tree_util.keystr(path), x) for path, x in flat if isinstance(x, jax.Array)]


def held_arrays(session) -> list[tuple[str, jax.Array]]:
    """(name, array) of every device array a session holds for LBP rounds."""
    out = _leaves("graph", session.graph) + _leaves("layout", session.runner.layout)
    out.append(("messages", session.messages))
    out.append(("evidence", session.evidence()))
    return out


def _buffer(x: jax.Array):
    try:
        return x.unsafe_buffer_pointer()
    except Exception:  # noqa: BLE001  sharded or deleted arrays: count by identity
        return id(x)


def device_bytes(session, edges: int) -> dict:
    """Bytes per edge of the session's device arrays, by array and by group, shared buffers once."""
    seen: set = set()
    per_array: dict[str, float] = {}
    groups: dict[str, int] = {}
    for name, x in held_arrays(session):
        key = _buffer(x)
        if key in seen:
            continue
        seen.add(key)
        per_array[name] = round(x.nbytes / edges, 3)
        group = name.split(".")[0].split("[")[0]
        if group == "layout":
            group = "layout." + name.split(".")[1].split("[")[0] if "." in name else "layout"
        groups[group] = groups.get(group, 0) + x.nbytes
    total = sum(groups.values())
    return {"total_bytes": total, "bytes_per_edge": round(total / edges, 2),
            "groups_per_edge": {k: round(v / edges, 2) for k, v in sorted(groups.items())},
            "arrays_per_edge": dict(sorted(per_array.items(), key=lambda kv: -kv[1]))}


def measure(model, schedule: str, precision: str, args, baseline: int) -> dict:
    edges = model.graph.num_edges
    row: dict = {"schedule": schedule, "precision": precision}
    t0 = time.perf_counter()
    session = fastlbp.Session(model, method="lbp", schedule=schedule, precision=precision,
                              max_iters=args.max_iters, backend=args.backend)
    jax.block_until_ready(session.messages)
    row["session_s"] = round(time.perf_counter() - t0, 2)
    info = session.runner.info
    row["engine"] = (f"engine {session.runner.name}, backend {info.backend}"
                     + (f" ({info.reason})" if info.reason else ""))
    row["device"] = device_bytes(session, edges)
    reads = session.runner.reads
    row["graph_fields"] = "all" if reads is None else sorted(reads)
    row["host_peak_per_edge"] = round((host_peak() - baseline) / edges, 1)
    if args.round:
        t0 = time.perf_counter()
        rnd = session.run(warm=False)
        row["round_s"] = round(time.perf_counter() - t0, 2)
        row["iterations"] = rnd.iterations
        row["converged"] = rnd.converged
        # A finished open relaxation plan now holds its chunk plan: count again.
        row["device_after_round"] = device_bytes(session, edges)
    row["device_stats"] = device_stats()
    del session
    gc.collect()
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["2e5", "2e6"], help="factor-graph edges (1e8 allowed)")
    p.add_argument("--precisions", nargs="+", default=["f64", "f32"])
    p.add_argument("--schedules", nargs="+", default=["parall", "seqfix"])
    p.add_argument("--round", action="store_true", help="also run a cold round of each session")
    p.add_argument("--max-iters", type=int, default=200, help="iteration cap of --round's rounds")
    p.add_argument("--backend", default="auto", help="Settings.backend (fused_interpret: the fused layout "
                   "on a CPU)")
    args = p.parse_args(argv)
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate

    report = {"environment": environment(), "host_baseline": host_peak(), "sizes": {}}
    rows = []
    for size in args.sizes:
        n = int(float(size))
        t0 = time.perf_counter()
        dg = generate(factor_edges=n, seed=0)
        gen_s = time.perf_counter() - t0
        peak_gen = host_peak() - report["host_baseline"]
        t0 = time.perf_counter()
        model = to_model(dg)
        model_s = time.perf_counter() - t0
        del dg
        gc.collect()
        g = model.graph
        edges = g.num_edges
        graph_host = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(g))
        entry = {"edges": edges, "variables": g.num_vars, "factors": g.num_factors,
                 "generate_s": round(gen_s, 2), "model_s": round(model_s, 2),
                 "host_peak_after_generate_per_edge": round(peak_gen / edges, 1),
                 "host_peak_after_model_per_edge": round((host_peak() - report["host_baseline"]) / edges, 1),
                 "host_now_after_model_per_edge": round((host_now() - report["host_baseline"]) / edges, 1),
                 "graph_host_bytes_per_edge": round(graph_host / edges, 2),
                 "graph_whole": {name: round(np.asarray(getattr(g, name)).nbytes / edges, 3)
                                 for name in sorted(engines.GRAPH_FIELDS)}, "runs": []}
        report["sizes"][size] = entry
        print(f"[{size}] {edges} edges, generate {gen_s:.1f} s, model {model_s:.1f} s, host peak "
              f"{entry['host_peak_after_model_per_edge']} B/edge", flush=True)
        for precision in args.precisions:
            for schedule in args.schedules:
                row = measure(model, schedule, precision, args, report["host_baseline"])
                row["size"], row["edges"] = size, edges
                entry["runs"].append(row)
                rows.append(row)
                print(f"[{size} {schedule} {precision}] {row}", flush=True)
                write_json("bench_memory.json", report)
        del model, g
        gc.collect()

    print()
    print(f"{'size':>6} {'edges':>11} {'sched':>7} {'prec':>4} {'dev B/edge':>10} {'after round':>11} "
          f"{'host peak B/edge':>16} {'setup s':>8} {'round s':>8} {'it':>4}  device peak / engine")
    for r in rows:
        after = r.get("device_after_round", {}).get("bytes_per_edge", "-")
        peak = r["device_stats"].get("peak_bytes_in_use")
        peak_s = "-" if peak is None else f"{peak / r['edges']:.1f} B/edge"
        print(f"{r['size']:>6} {r['edges']:>11} {r['schedule']:>7} {r['precision']:>4} "
              f"{r['device']['bytes_per_edge']:>10} {after:>11} {r['host_peak_per_edge']:>16} "
              f"{r['session_s']:>8} {r.get('round_s', '-'):>8} {r.get('iterations', '-'):>4}  {peak_s} / "
              f"{r['engine']}")
        groups = ", ".join(f"{k} {v}" for k, v in r["device"]["groups_per_edge"].items())
        print(f"{'':>6} {'':>11} {'':>7} {'':>4} per edge: {groups}")
    print(f"device: {report['environment']['device']}")


if __name__ == "__main__":
    main()
