"""Time the fused kernels one at a time (factor pass, variable pass) per setting.

    python benchmarks/profile_fused.py --size 500000 --configs 128,4,512,8 256,8

A config is TILE,WARPS[,VAR_TILE,VAR_WARPS] (the variable kernel's default to
`fused.AUTO_VAR_TILE` and `fused.AUTO_VAR_WARPS`). Each pass runs 50 times in
a jitted fori_loop on the graph's zero messages (sweep parities alternating);
the table gives µs per call and the compile time of each loop. Passes alone
keep their data in L2 better than in the loop, where they alternate.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from common import bingo_model, write_json  # noqa: E402

from fastlbp.engines import fused  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=500_000)
    ap.add_argument("--configs", nargs="+", default=["512,8", "256,8"])
    ap.add_argument("--dtypes", nargs="+", default=["f64", "f32"])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args(argv)
    interpret = jax.devices()[0].platform != "gpu"
    graph = jax.device_put(bingo_model(args.size).graph)
    rows = []
    for cfg in args.configs:
        parts = [int(x) for x in cfg.split(",")]
        tile, warps = parts[:2]
        var_tile, var_warps = parts[2:4] if len(parts) == 4 else (None, None)
        t0 = time.perf_counter()
        lay = fused.build(graph, tile, var_tile or fused.AUTO_VAR_TILE[8])
        build_s = time.perf_counter() - t0
        f_wide = lay.factors.wide_chunks
        v_wide = lay.variables.wide_chunks
        for dname in args.dtypes:
            dt = {"f64": jnp.float64, "f32": jnp.float32}[dname]
            vw = var_warps or fused.AUTO_VAR_WARPS[jnp.dtype(dt).itemsize]
            msgs = jnp.zeros((lay.num_slots,), dt)
            ev = jnp.zeros((lay.num_kvars,), dt)
            params = fused.kernel_params(lay, graph, dt)
            control = fused.Control.start(0.0, 10**6, 0.0, dt, wide_rows=lay.variables.wide_rows,
                                          factor_wide_rows=lay.factors.wide_rows)
            # A first variable pass primes the control cells and forms the totals.
            totals, p, control = fused.var_pass(lay, msgs, ev, jnp.zeros((2 * lay.num_kvars,), dt), ev,
                                                control, interpret, vw)

            def parity(c, i):
                return dataclasses.replace(c, parity=jnp.full((1,), i % 2, jnp.int32))

            def f_loop(lay, msgs, totals, params, control, reps):
                def body(i, carry):
                    return fused.factor_pass(lay, carry[0], totals, params, parity(carry[1], i), interpret,
                                             warps)
                return jax.lax.fori_loop(0, reps, body, (msgs, control))[0]

            def v_loop(lay, msgs, ev, totals, p, control, reps):
                def body(i, carry):
                    return fused.var_pass(lay, msgs, ev, carry[0], carry[1], parity(carry[2], i), interpret,
                                          vw)
                return jax.lax.fori_loop(0, reps, body, (totals, p, control))[1]

            out = {}
            for name, fn, a in (("factor", f_loop, (lay, msgs, totals, params, control)),
                                ("var", v_loop, (lay, msgs, ev, totals, p, control))):
                t0 = time.perf_counter()
                comp = jax.jit(fn).lower(*a, args.reps).compile()
                c_s = time.perf_counter() - t0
                jax.block_until_ready(comp(*a, args.reps))
                ts = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    jax.block_until_ready(comp(*a, args.reps))
                    ts.append(time.perf_counter() - t0)
                out[name] = (min(ts) / args.reps * 1e6, c_s)
            row = {"config": cfg, "dtype": dname, "slots": lay.num_slots, "kvars": lay.num_kvars,
                   "factor_us": out["factor"][0], "factor_compile_s": out["factor"][1],
                   "var_us": out["var"][0], "var_compile_s": out["var"][1], "build_s": build_s,
                   "wide_factor_chunks": f_wide, "wide_var_chunks": v_wide}
            rows.append(row)
            print(row, flush=True)
    write_json("profile_fused.json", {"size": args.size, "rows": rows})
    print(f"{'config':>12} {'dt':>4} {'factor us':>10} {'var us':>8} {'compile f/v s':>14} "
          f"{'wide chunks f/v':>15}")
    for r in rows:
        print(f"{r['config']:>12} {r['dtype']:>4} {r['factor_us']:>10.1f} {r['var_us']:>8.1f} "
              f"{r['factor_compile_s']:>6.1f}/{r['var_compile_s']:<6.1f} "
              f"{r['wide_factor_chunks']:>4}/{r['wide_var_chunks']:<4}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
