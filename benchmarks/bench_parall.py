"""PARALL benchmark: µs per iteration, compile time and the memory-traffic floor.

Usage (one call on the GPU; on a CPU use small sizes):

    python benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200

For every size and precision it builds a synthetic Bingo-like graph, checks
float64 against float32 and against a short CPU run where that is cheap,
times 200 PARALL iterations in one jitted loop (tol = 0 so the loop runs them
all), measures the compile time of that loop, and compares with the floor:
the bytes one iteration must move over the copy bandwidth measured in the
same process. Details go to $OUT/bench_parall.json; a table is printed last.

Variants (`--variants`, the first is the reference for the last column):
`xla`, `scatter`, `pallas` (PARALL on the XLA kernels with that segment-sum
backend, `-unrollN` for N sweeps per while-loop trip) and the fused Pallas
kernels: `fused`, `fused-unrollN`, `fused[-unrollN]-tTILE-wWARPS`, or in full
`fused-uN-tTILE-wWARPS[-vVARTILE][-xVARWARPS]` (slots and warps per factor-
and variable-kernel program; unset ones by precision).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import (  # noqa: E402
    bingo_model,
    copy_bandwidth,
    environment,
    floor_bytes,
    np_close,
    timed,
    write_json,
)

from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines import fused, parall  # noqa: E402
from fastlbp.engines.loop import controls, init  # noqa: E402


def make_variant(name: str, gpu: bool):
    """`(graph, settings) -> Runner` for a variant name (see the module docstring), or None."""
    m = re.fullmatch(r"(xla|scatter|pallas)(?:-unroll(\d+))?", name)
    if m:
        backend = m.group(1) if gpu or m.group(1) != "pallas" else "pallas_interpret"
        unroll = int(m.group(2) or 1)
        return lambda graph, settings: parall.make_runner(graph, settings.replace(backend=backend),
                                                          unroll=unroll)
    m = (re.fullmatch(r"fused(?:-unroll(\d+))?(?:-t(\d+))?(?:-w(\d+))?", name)
         or re.fullmatch(r"fused-u(\d+)-t(\d+)-w(\d+)(?:-v(\d+))?(?:-x(\d+))?", name))
    if m:
        u, t, w, v, x = ([int(g) if g else None for g in m.groups()] + [None, None])[:5]
        return lambda graph, settings: fused.make_runner(graph, settings, unroll=u or 1, interpret=not gpu,
                                                         tile=t, num_warps=w, var_tile=v, var_warps=x)
    return None


def bench_size(factor_edges: int, iters: int, bandwidth: float, variants: dict) -> list[dict]:
    t0 = time.perf_counter()
    model = bingo_model(factor_edges, seed=0)
    gen_s = time.perf_counter() - t0
    graph = jax.device_put(model.graph)
    rows = []
    results = {}
    for dtype_name, dtype in (("f64", jnp.float64), ("f32", jnp.float32)):
        for name, make in variants.items():
            msgs = init(graph, dtype)
            ev = jnp.zeros((graph.num_vars,), dtype)
            # tol = 0: the loop runs all `iters` iterations.
            ctl = controls(0.0, iters, 0.0, dtype)
            # Host-side preparation once per graph (the fused layout), timed apart from compiling.
            t0 = time.perf_counter()
            runner = make(model.graph, Settings(precision=dtype_name))
            prepare_s = time.perf_counter() - t0
            args = (graph, runner.layout, msgs, ev, ctl)
            t0 = time.perf_counter()
            compiled = runner.run.lower(*args).compile()
            compile_s = time.perf_counter() - t0
            med, times = timed(compiled, *args, repeats=5)
            res = compiled(*args)
            results[(name, dtype_name)] = np.asarray(res.marginals)
            per_iter = med / iters
            floor_s = floor_bytes(graph, jnp.dtype(dtype).itemsize) / bandwidth
            rows.append({
                "factor_edges": graph.num_edges, "vars": graph.num_vars, "factors": graph.num_factors,
                "variant": name, "runner": runner.name, "precision": dtype_name, "iters": int(res.iterations),
                "us_per_iter": per_iter * 1e6, "floor_us": floor_s * 1e6,
                "x_floor": per_iter / floor_s, "compile_s": compile_s, "prepare_s": prepare_s,
                "times_s": times, "generate_s": gen_s,
            })
    ref = results[(next(iter(variants)), "f64")]
    for row in rows:
        row["max_abs_diff_vs_f64"] = np_close(results[(row["variant"], row["precision"])], ref)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[50_000, 500_000, 5_000_000])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--variants", nargs="+", default=["xla", "fused-unroll8"],
                    help="the first one is the reference for |d| (names: see above)")
    args = ap.parse_args(argv)

    env = environment()
    bandwidth = copy_bandwidth(2 << 30) if jax.devices()[0].platform == "gpu" else copy_bandwidth(1 << 27)
    print(f"# {env['device']} jax {env['jax']}  copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    gpu = jax.devices()[0].platform == "gpu"
    variants = {name: make_variant(name, gpu) for name in args.variants}
    unknown = sorted(name for name, make in variants.items() if make is None)
    if unknown:
        ap.error(f"unknown variants {unknown}; see --help")
    rows = []
    for size in args.sizes:
        rows += bench_size(size, args.iters, bandwidth, variants)
        print(f"# done {size}", flush=True)
    write_json("bench_parall.json", {"env": env, "copy_bandwidth_Bps": bandwidth, "rows": rows})
    print(f"{'edges':>9} {'variant':>13} {'prec':>4} {'us/iter':>9} {'floor us':>9} {'x floor':>8} "
          f"{'compile s':>9} {'prep s':>6} {'|d| vs f64':>10}")
    for r in rows:
        print(f"{r['factor_edges']:>9} {r['variant']:>13} {r['precision']:>4} {r['us_per_iter']:>9.1f} "
              f"{r['floor_us']:>9.1f} {r['x_floor']:>8.2f} {r['compile_s']:>9.2f} {r['prepare_s']:>6.2f} "
              f"{r['max_abs_diff_vs_f64']:>10.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
