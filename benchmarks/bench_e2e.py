"""End to end: `fastlbp rank GRAPH` as a user runs it, by stage, cold and warm caches, with memory.

    python benchmarks/bench_e2e.py                                    # shipped examples, CPU-sized
    python benchmarks/bench_e2e.py --sizes 5e6,2e7,1e8 --schedules parall,seqfix    # the H200 run
    python benchmarks/bench_e2e.py --examples none --sizes 2e5 --repeats 2 --out /tmp/e2e

Each run is a fresh `python -m fastlbp rank GRAPH --top 5 --timings -q` subprocess
(its stdout discarded), so imports, JAX's start, loading, the session's set-up,
compiling and the round are all in the wall time. Per graph and schedule:

    cold   an empty cache folder (FASTLBP_CACHE): the model is parsed and built,
           the loop compiled, and both caches are written
    warm   the same folder again (`--repeats` times; the fastest and the median
           are kept): the model comes from the model cache, the loop from JAX's
           compilation cache

The stages come from `--timings` (stderr): imports (from `import fastlbp` to the
command), load (`model cache hit`, or `loading` + `storing in the model cache`),
jax start, session (the engine's plan and layout, the graph to the device), first
round (of it: JAX's trace, lower, compile or cache load; the rest is the round),
output. `python + rest` is the wall time no stage covers (the interpreter's start,
typer, exit). Host peak RSS is the child's (`os.wait4`); device bytes per edge
from JAX's `peak_bytes_in_use` where the device reports it (GPUs; not the CPU).

Synthetic graphs (`--sizes`, factor-graph edges; 5e6 is fine) are generated once
by `datalog.synthetic.generate(factor_edges=N, seed=0)` into a temporary folder
(or `--graphs DIR`, kept and reused) as derivation.json; generating and writing
them is timed too. Results go to `$OUT/bench_e2e.json` (or `--out DIR`); a short
table is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXAMPLES = ("data/weblech.json", "data/avrora.json.gz", "data/ftp.json.gz")
STAGE = re.compile(r"\s*(.+?) (\d+(?:\.\d+)?) s$")


def parse_timings(stderr: str) -> tuple[dict[str, float], dict[str, float]]:
    """The `timings:` and `memory:` lines of `fastlbp rank --timings` as {stage: seconds}, {fact: number}."""
    stages, memory = {}, {}
    for line in stderr.splitlines():
        if line.startswith("timings: "):
            for part in line[len("timings: "):].split(", "):
                m = STAGE.match(part)
                if m:
                    stages[m.group(1).strip()] = float(m.group(2))
        elif line.startswith("memory: "):
            for part in line[len("memory: "):].split(", "):
                name, _, value = part.rpartition(" ")
                try:
                    memory[name.strip()] = float(value)
                except ValueError:
                    pass
    return stages, memory


def run_rank(graph: Path, schedule: str, cache: Path | None, timeout: float, extra: list[str]) -> dict:
    """One `fastlbp rank` subprocess: wall seconds, its stages, peak RSS, exit status."""
    env = dict(os.environ, FASTLBP_CACHE=str(cache) if cache else "off", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "fastlbp", "rank", str(graph), "--top", "5", "--schedule", schedule,
           "--timings", "-q", *extra]
    with tempfile.TemporaryFile() as err, open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=null, stderr=err, env=env, cwd=ROOT)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    stages, memory = parse_timings(stderr)
    out = {"wall_s": wall, "rc": proc.returncode, "stages": stages, "memory": memory,
           "host_peak_rss_bytes": usage.ru_maxrss * 1024}
    if proc.returncode != 0:
        out["stderr_tail"] = stderr[-2000:]
    return out


def generate(edges: int, path: Path) -> dict:
    """Writes derivation.json of `generate(factor_edges=edges, seed=0)` to `path`; its sizes and times."""
    from datalog import formats, synthetic

    t0 = time.perf_counter()
    dg = synthetic.generate(factor_edges=edges, seed=0)
    t1 = time.perf_counter()
    formats.save_json(dg, path)
    t2 = time.perf_counter()
    return {"factor_edges_target": edges, "tuples": dg.num_tuples, "clauses": dg.num_clauses,
            "alarms": int(len(dg.alarms)), "generate_s": t1 - t0, "write_s": t2 - t1,
            "file_bytes": path.stat().st_size}


def synthetic_graph(edges: float, folder: Path, timeout: float) -> tuple[Path, dict]:
    """derivation.json of `edges` factor-graph edges in `folder`, made once, in a subprocess of its own
    (this process stays small and never touches the device)."""
    n = int(edges)
    path = folder / f"synthetic-{n}.json"
    info_path = folder / f"synthetic-{n}.info.json"
    if not (path.exists() and info_path.exists()):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--generate", str(n), str(path)], check=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=timeout)
        info = json.loads(info_path.read_text())
        info["process_s"] = time.perf_counter() - t0
        info_path.write_text(json.dumps(info))
    return path, json.loads(info_path.read_text())


def environment() -> dict:
    """Device, JAX and Python versions, from a subprocess (this one never starts JAX: on a GPU it would
    take the memory the runs need)."""
    code = ("import json, platform, jax; d = jax.devices()[0]; print(json.dumps({'device': f'{d.platform}:"
            "{getattr(d, \"device_kind\", d)}', 'jax': jax.__version__, 'python': platform.python_version(), "
            "'cpus': __import__('os').cpu_count()}))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        env = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.CalledProcessError, ValueError, IndexError):
        env = {}
    env["date"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return env


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        return {"rc": runs[-1]["rc"] if runs else None}
    walls = [r["wall_s"] for r in ok]
    best = min(ok, key=lambda r: r["wall_s"])
    return {"wall_min_s": min(walls), "wall_median_s": statistics.median(walls), "stages": best["stages"],
            "memory": best["memory"], "host_peak_rss_bytes": max(r["host_peak_rss_bytes"] for r in ok),
            "runs": len(ok), "failed": len(runs) - len(ok)}


def derived(entry: dict) -> dict:
    """The round (first round less JAX's compile work), what no stage covers, bytes per edge."""
    s = entry.get("stages", {})
    out = {}
    if "first round" in s:
        compile_s = sum(v for k, v in s.items() if k.startswith("first round: jit "))
        out["round_s"] = max(s["first round"] - compile_s, 0.0)
    covered = sum(v for k, v in s.items() if k in TOP_STAGES or is_load(k))
    if "wall_min_s" in entry:
        out["python_rest_s"] = max(entry["wall_min_s"] - covered, 0.0)
    mem = entry.get("memory", {})
    edges = mem.get("edges")
    if edges:
        out["host_bytes_per_edge"] = entry["host_peak_rss_bytes"] / edges
        if mem.get("device_peak_bytes"):
            out["device_bytes_per_edge"] = mem["device_peak_bytes"] / edges
    return out


TOP_STAGES = ("imports", "jax start", "labels", "session", "first round", "output")


def is_load(stage: str) -> bool:
    """`load: checking the model cache`, `load: loading`, ... (not JAX's events within them)."""
    return stage.startswith("load: ") and "jit " not in stage


def baseline(repeats: int) -> float:
    """Fastest `python -c "import jax; jax.numpy.zeros(1).block_until_ready()"`: JAX's own start."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import jax; jax.numpy.zeros(1).block_until_ready()"],
                       check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def table(results: list[dict], jax_start: float) -> str:
    cols = ("graph", "schedule", "cache", "wall", "imports", "load", "jax", "session", "compile", "round",
            "rest", "rss/edge", "dev/edge")
    rows = [cols]
    for r in results:
        for cache in ("cold", "warm"):
            e = r.get(cache)
            if not e:
                continue
            if "wall_min_s" not in e:
                rows.append((r["graph"], r["schedule"], cache, f"failed rc={e.get('rc')}", *[""] * 9))
                continue
            s, d = e["stages"], e["derived"]
            load = sum(v for k, v in s.items() if is_load(k))
            comp = sum(v for k, v in s.items() if "jit " in k)

            def f(x):
                return "" if x is None else f"{x:.2f}"

            rows.append((r["graph"], r["schedule"], cache, f(e["wall_min_s"]), f(s.get("imports")), f(load),
                         f(s.get("jax start")), f(s.get("session")), f(comp), f(d.get("round_s")),
                         f(d.get("python_rest_s")),
                         f"{d['host_bytes_per_edge']:.0f}" if "host_bytes_per_edge" in d else "",
                         f"{d['device_bytes_per_edge']:.0f}" if "device_bytes_per_edge" in d else ""))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(cols))]
    lines = ["  ".join(str(c).rjust(w) if i > 2 else str(c).ljust(w) for i, (c, w) in
                       enumerate(zip(row, widths, strict=True))) for row in rows]
    lines.append(f"seconds; bytes per factor-graph edge. JAX's own start (import jax, one array): "
                 f"{jax_start:.2f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--generate"]:  # the generating subprocess
        path = Path(sys.argv[3])
        info = generate(int(sys.argv[2]), path)
        path.with_suffix(".info.json").write_text(json.dumps(info))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", default=",".join(EXAMPLES),
                    help="comma-separated graphs to rank ('none' for none); default the shipped examples")
    ap.add_argument("--sizes", default="", help="comma-separated factor-graph edge counts, e.g. 5e6,2e7,1e8")
    ap.add_argument("--schedules", default="parall", help="comma-separated schedules, e.g. parall,seqfix")
    ap.add_argument("--repeats", type=int, default=3, help="warm runs per graph and schedule")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    ap.add_argument("--graphs", type=Path, default=None, help="folder for the synthetic graphs (kept)")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default $OUT, else ./out)")
    ap.add_argument("--backend", default=None, help="passed as --backend to fastlbp rank")
    args = ap.parse_args(argv)

    out_dir = args.out or Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = ["--backend", args.backend] if args.backend else []
    work = Path(tempfile.mkdtemp(prefix="bench_e2e-"))
    graphs_dir = args.graphs or work / "graphs"
    graphs_dir.mkdir(parents=True, exist_ok=True)

    graphs: list[tuple[str, Path, dict]] = []
    if args.examples and args.examples != "none":
        graphs += [(Path(g).name, ROOT / g, {}) for g in args.examples.split(",") if g]
    for size in filter(None, args.sizes.split(",")):
        path, info = synthetic_graph(float(size), graphs_dir, args.timeout)
        print(f"generated {path.name}: {info['generate_s']:.1f} s, written in {info['write_s']:.1f} s",
              flush=True)
        graphs.append((f"synthetic {float(size):.0e}", path, info))

    jax_start = baseline(3)
    results = []
    for name, path, info in graphs:
        for schedule in filter(None, args.schedules.split(",")):
            cache = work / f"cache-{len(results)}"
            cold = summarize([run_rank(path, schedule, cache, args.timeout, extra)])
            warm = summarize([run_rank(path, schedule, cache, args.timeout, extra)
                              for _ in range(args.repeats)])
            for e in (cold, warm):
                e["derived"] = derived(e)
            entry = {"graph": name, "path": str(path), "schedule": schedule, "synthetic": info,
                     "cold": cold, "warm": warm}
            results.append(entry)
            print(f"{name} {schedule}: cold {cold.get('wall_min_s', float('nan')):.2f} s, "
                  f"warm {warm.get('wall_min_s', float('nan')):.2f} s", flush=True)
            for e in (cold, warm):
                if e.get("failed") or "wall_min_s" not in e:
                    print(f"  failed run(s): rc={e.get('rc')}", flush=True)

    report = {"environment": environment(), "jax_start_s": jax_start, "results": results}
    path = out_dir / "bench_e2e.json"
    path.write_text(json.dumps(report, indent=1))
    print(table(results, jax_start))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
