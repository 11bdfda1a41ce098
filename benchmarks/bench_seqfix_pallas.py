"""SEQFIX and TOPO with the persistent Pallas kernel against the XLA chunk loop.

(`fastlbp/engines/persistent.py` against `fastlbp/engines/chunked.py`, on one chunk plan each.)

    python benchmarks/bench_seqfix_pallas.py --sizes 50000 500000 ftp

Per size (factor-graph edges, or `ftp` = the paper's ftp preset): the schedule
is compiled twice (Pallas: 64-slot chunks; XLA: the width its cost model
picks), both engines run 3 iterations from cold and their marginals are
compared, then: µs per iteration, a cold round to tol 1e-6 (at most 1000
iterations) and a warm round after labelling the top alarm false (at most 300), each timed
after compilation. A table is printed last; details go to
$OUT/bench_seqfix_pallas.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

# The schedules cost models take the platform as an argument; this benchmark runs where JAX runs.
GPU = jax.default_backend() == "gpu"
import numpy as np  # noqa: E402
from common import bingo_model, environment, write_json  # noqa: E402

import schedules  # noqa: E402
from fastlbp.engines import chunked, persistent  # noqa: E402
from fastlbp.engines.loop import controls  # noqa: E402


def _model(size: str):
    if size == "ftp":
        from datalog.bayesnet import to_model
        from datalog.synthetic import generate

        return to_model(generate(preset="ftp", seed=0))
    return bingo_model(int(size))


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out.messages)
    return time.perf_counter() - t0, out


def bench(size: str, strategies, xla_iters: int, width: int, warps: int, atomic: bool) -> list[dict]:
    model = _model(size)
    graph = jax.device_put(model.graph)
    interpret = jax.devices()[0].platform != "gpu"
    rows = []
    for strategy in strategies:
        t0 = time.perf_counter()
        comp_p = schedules.compile_schedule(model, f"{strategy}:width={width}", gpu=GPU)
        analysis_s = time.perf_counter() - t0
        comp_x = schedules.compile_schedule(model, strategy, gpu=GPU)
        run_p = persistent.runner_for(model.graph, comp_p.plan, f"{strategy}/persistent",
                                       interpret=interpret, num_warps=warps, atomic=atomic)
        run_x = chunked.runner_for(model.graph, comp_x.plan, f"{strategy}/chunked",
                                    unroll=8 if not interpret else 1)
        m0 = jnp.zeros((graph.num_edges,), jnp.float64)
        ev0 = jnp.zeros((graph.num_vars,), jnp.float64)

        def call(runner, msgs, ev, tol, iters):
            return runner(graph, msgs, ev, controls(tol, iters, 0.0, jnp.float64))

        t0 = time.perf_counter()
        jax.block_until_ready(call(run_p, m0, ev0, 0.0, 1).messages)
        compile_p = time.perf_counter() - t0
        _, a = _timed(call, run_p, m0, ev0, 0.0, 3)
        jax.block_until_ready(call(run_x, m0, ev0, 0.0, 1).messages)
        _, b = _timed(call, run_x, m0, ev0, 0.0, 3)
        diff = float(jnp.max(jnp.abs(a.marginals - b.marginals)))
        t_p, _ = _timed(call, run_p, m0, ev0, 0.0, 5)
        t_x, _ = _timed(call, run_x, m0, ev0, 0.0, xla_iters)
        cold_s, cold = _timed(call, run_p, m0, ev0, 1e-6, 1000)
        alarms = np.asarray(model.alarms, np.int64)
        top = int(alarms[np.argmax(np.asarray(cold.marginals)[alarms])]) if alarms.size else 0
        ev = ev0.at[top].set(-jnp.inf)
        warm_s, warm = _timed(call, run_p, cold.messages, ev, 1e-6, 300)
        row = {
            "size": size, "edges": graph.num_edges, "strategy": strategy,
            "chunks_pallas": comp_p.plan.num_chunks, "chunks_xla": comp_x.plan.num_chunks,
            "width_xla": comp_x.plan.width, "batches": int(comp_p.analyses[0].num_batches),
            "analysis_s": analysis_s, "compile_pallas_s": compile_p,
            "max_abs_diff_3_iters": diff,
            "us_per_iter_pallas": t_p / 5 * 1e6, "us_per_iter_xla": t_x / xla_iters * 1e6,
            "cold_round_s": cold_s, "cold_iters": int(cold.iterations),
            "cold_converged": bool(cold.converged), "warm_round_s": warm_s,
            "warm_iters": int(warm.iterations), "warm_converged": bool(warm.converged),
        }
        rows.append(row)
        print(row, flush=True)
    return rows


def sweep(size: str, strategy: str, widths, warps, atomic: bool) -> list[dict]:
    """µs per iteration of the persistent kernel per chunk width and warp count, and its
    largest marginal difference from the XLA chunk loop after 3 iterations."""
    model = _model(size)
    graph = jax.device_put(model.graph)
    interpret = jax.devices()[0].platform != "gpu"
    m0 = jnp.zeros((graph.num_edges,), jnp.float64)
    ev0 = jnp.zeros((graph.num_vars,), jnp.float64)

    def args(iters):
        return (graph, m0, ev0, controls(0.0, iters, 0.0, jnp.float64))

    ref = chunked.runner_for(model.graph, schedules.compile_schedule(model, strategy, gpu=GPU).plan,
                              f"{strategy}/chunked")(*args(3)).marginals
    rows = []
    for w in widths:
        comp = schedules.compile_schedule(model, f"{strategy}:width={w}", gpu=GPU)
        for nw in warps:
            run = persistent.runner_for(model.graph, comp.plan, f"{strategy}/persistent",
                                         interpret=interpret, num_warps=nw, atomic=atomic)
            diff = float(jnp.max(jnp.abs(run(*args(3)).marginals - ref)))
            t0 = time.perf_counter()
            jax.block_until_ready(run(*args(5)).messages)
            t = (time.perf_counter() - t0) / 5
            row = {"size": size, "strategy": strategy, "width": w, "warps": nw, "atomic": atomic,
                   "chunks": comp.plan.num_chunks, "ms_per_iter": t * 1e3,
                   "us_per_chunk": t / comp.plan.num_chunks * 1e6, "max_abs_diff_3_iters": diff}
            rows.append(row)
            print(row, flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["50000", "500000", "ftp"])
    ap.add_argument("--strategies", nargs="+", default=["seqfix", "topo"])
    ap.add_argument("--xla-iters", type=int, default=2)
    ap.add_argument("--sweep-widths", type=int, nargs="*", help="only time these chunk widths ...")
    ap.add_argument("--sweep-warps", type=int, nargs="*", default=[4], help="... with these warp counts")
    ap.add_argument("--atomic", action="store_true", help="the GPU kernel with atomic run sums")
    ap.add_argument("--width", type=int, default=persistent.WIDTH, help="chunk width of the Pallas plan")
    ap.add_argument("--warps", type=int, default=persistent.NUM_WARPS)
    args = ap.parse_args(argv)
    env = environment()
    print(f"# {env['device']} jax {env['jax']}", flush=True)
    if args.sweep_widths:
        rows = [r for size in args.sizes for strategy in args.strategies
                for r in sweep(size, strategy, args.sweep_widths, args.sweep_warps, args.atomic)]
        write_json("sweep_seqfix_pallas.json", {"env": env, "rows": rows})
        for r in rows:
            print(f"{r['size']:>7} {r['strategy']:>7} W={r['width']:<4} warps={r['warps']:<2} "
                  f"chunks {r['chunks']:>6}  {r['ms_per_iter']:8.1f} ms/it  "
                  f"{r['us_per_chunk']:6.1f} us/chunk  |d| {r['max_abs_diff_3_iters']:.1e}")
        return 0
    rows = []
    for size in args.sizes:
        rows += bench(size, args.strategies, args.xla_iters, args.width, args.warps, args.atomic)
    write_json("bench_seqfix_pallas.json", {"env": env, "rows": rows})
    print(f"{'size':>7} {'strategy':>8} {'batches':>8} {'chunks':>7} {'ms/it pallas':>12} {'ms/it xla':>9} "
          f"{'x':>5} {'cold s (it)':>13} {'warm ms (it)':>13} {'|d|':>8}")
    for r in rows:
        speedup = r["us_per_iter_xla"] / r["us_per_iter_pallas"]
        print(f"{r['size']:>7} {r['strategy']:>8} {r['batches']:>8} {r['chunks_pallas']:>7} "
              f"{r['us_per_iter_pallas'] / 1e3:>12.2f} {r['us_per_iter_xla'] / 1e3:>9.1f} {speedup:>5.1f} "
              f"{r['cold_round_s']:>8.3f} ({r['cold_iters']:>3}) {r['warm_round_s'] * 1e3:>8.1f} "
              f"({r['warm_iters']:>3}) {r['max_abs_diff_3_iters']:>8.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
