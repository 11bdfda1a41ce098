"""PARALL benchmark: µs per iteration, compile time and the memory-traffic floor.

Usage (one call on the GPU; on a CPU use small sizes):

    python benchmarks/bench_parall.py --sizes 50000 500000 5000000 --iters 200

For every size and precision it builds a synthetic Bingo-like graph, checks
float64 against float32 and against a short CPU run where that is cheap,
times 200 PARALL iterations in one jitted loop (tol = 0 so the loop runs them
all), measures the compile time of that loop, and compares with the floor:
the bytes one iteration must move over the copy bandwidth measured in the
same process. Details go to $OUT/bench_parall.json; a table is printed last.
"""

from __future__ import annotations

import argparse
import functools
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

from fastlbp import engine  # noqa: E402


def bench_size(factor_edges: int, iters: int, bandwidth: float, variants: dict) -> list[dict]:
    t0 = time.perf_counter()
    model = bingo_model(factor_edges, seed=0)
    gen_s = time.perf_counter() - t0
    graph = jax.device_put(model.graph)
    rows = []
    results = {}
    for dtype_name, dtype in (("f64", jnp.float64), ("f32", jnp.float32)):
        for name, runner in variants.items():
            msgs = engine.init(graph, dtype)
            ev = jnp.zeros((graph.num_vars,), dtype)
            args = (graph, msgs, ev, jnp.asarray(0.0, dtype), jnp.asarray(iters, jnp.int32),
                    jnp.asarray(0.0, dtype))
            # Host-side preparation once per graph (the fused layout), timed apart from compiling.
            t0 = time.perf_counter()
            if hasattr(runner, "prepare"):
                runner.prepare(graph, dtype)
            prepare_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            compiled = runner.lower(*args).compile()
            compile_s = time.perf_counter() - t0
            med, times = timed(compiled, *args, repeats=5)
            res = compiled(*args)
            results[(name, dtype_name)] = np.asarray(res.marginals)
            per_iter = med / iters
            floor_s = floor_bytes(graph, jnp.dtype(dtype).itemsize) / bandwidth
            rows.append({
                "factor_edges": graph.num_edges, "vars": graph.num_vars, "factors": graph.num_factors,
                "variant": name, "precision": dtype_name, "iters": int(res.iterations),
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
    ap.add_argument("--variants", nargs="+", default=["xla", "fused"],
                    help="first one is the reference for |d|; see the list in main()")
    args = ap.parse_args(argv)

    env = environment()
    bandwidth = copy_bandwidth(2 << 30) if jax.devices()[0].platform == "gpu" else copy_bandwidth(1 << 27)
    print(f"# {env['device']} jax {env['jax']}  copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    from fastlbp import fused

    gpu = jax.devices()[0].platform == "gpu"
    all_variants = {
        "xla": lambda: engine.parall_runner("xla", 1),
        "xla-unroll4": lambda: engine.parall_runner("xla", 4),
        "scatter": lambda: engine.parall_runner("scatter", 1),
        "pallas": lambda: engine.parall_runner("pallas" if gpu else "pallas_interpret", 1),
        "fused": lambda: fused.runner(1, interpret=not gpu),
        "fused-unroll4": lambda: fused.runner(4, interpret=not gpu),
        "fused-t256": lambda: fused.runner(1, interpret=not gpu, tile=256, num_warps=4),
        "fused-t1024": lambda: fused.runner(1, interpret=not gpu, tile=1024, num_warps=8),
        "fused-w4": lambda: fused.runner(1, interpret=not gpu, num_warps=4),
        "fused-unroll4-w4": lambda: fused.runner(4, interpret=not gpu, num_warps=4),
        "fused-unroll8": lambda: fused.runner(8, interpret=not gpu),
        "fused-unroll4-t256-w8": lambda: fused.runner(4, interpret=not gpu, tile=256, num_warps=8),
        "fused-unroll4-w16": lambda: fused.runner(4, interpret=not gpu, num_warps=16),
        "fused-unroll4-t1024-w16": lambda: fused.runner(4, interpret=not gpu, tile=1024,
                                                        num_warps=16),
    }
    # Earlier versions of fused.py to compare with in the same process (not committed):
    # benchmarks/_old_NAME.py gives the variant NAME-unroll8.
    for old in sorted(Path(__file__).parent.glob("_old_*.py")):
        import importlib.util

        spec = importlib.util.spec_from_file_location(old.stem, old)
        module = importlib.util.module_from_spec(spec)
        sys.modules[old.stem] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        all_variants[f"{old.stem[5:]}-unroll8"] = functools.partial(module.runner, 8, not gpu)
    # fused-u{unroll}-t{tile}-w{warps}[-v{var tile}][-x{var warps}], e.g. fused-u4-t128-w4-v1024-x16
    for name in args.variants:
        m = re.fullmatch(r"fused-u(\d+)-t(\d+)-w(\d+)(?:-v(\d+))?(?:-x(\d+))?", name)
        if m:
            u, t, w, v, x = (int(g) if g else None for g in m.groups())
            all_variants[name] = functools.partial(fused.runner, u, not gpu, t, w, v, x)
    unknown = set(args.variants) - set(all_variants)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; choose from {sorted(all_variants)}")
    variants = {name: all_variants[name]() for name in args.variants}
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
