"""Where the fused kernels' compile time goes (fastlbp/engines/fused/).

    python benchmarks/compile_probe.py --sizes 50000 500000 --passes

For each size and precision: the fused PARALL loop's lowering time
(tracing, and the Pallas kernels' Triton IR, in Python), its XLA compile time
(which compiles the Triton IR) and its first call beyond a steady call
(load-time work), apart from building the graph's layout (host work once per
graph, "prep"); with --passes, one factor pass and one variable pass compiled
alone. Details go to $OUT/compile_probe[-TAG].json; a table is printed last.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from common import bingo_model, environment, write_json  # noqa: E402

from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines import fused  # noqa: E402
from fastlbp.engines.loop import controls, init  # noqa: E402

DTYPES = {"f64": jnp.float64, "f32": jnp.float32}


def loop_times(host_graph, graph, dname: str, interpret: bool, unroll: int) -> dict:
    dt = DTYPES[dname]
    t0 = time.perf_counter()
    # The layout: host work once per graph, timed apart.
    runner = fused.make_runner(host_graph, Settings(precision=dname), unroll=unroll, interpret=interpret)
    prepare_s = time.perf_counter() - t0
    a = (graph, runner.layout, init(graph, dt), jnp.zeros((graph.num_vars,), dt), controls(0.0, 10, 0.0, dt))
    t0 = time.perf_counter()
    lowered = runner.run.lower(*a)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    jax.block_until_ready(compiled(*a))
    t3 = time.perf_counter()
    jax.block_until_ready(compiled(*a))
    t4 = time.perf_counter()
    first_extra = (t3 - t2) - (t4 - t3)
    return {"prepare_s": prepare_s, "lower_s": t1 - t0, "compile_s": t2 - t1,
            "first_call_extra_s": first_extra, "total_s": (t2 - t0) + first_extra}


def compile_s(fn, *args) -> float:
    t0 = time.perf_counter()
    jax.jit(fn).lower(*args).compile()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[50_000, 500_000])
    ap.add_argument("--dtypes", nargs="+", default=["f64", "f32"])
    ap.add_argument("--passes", action="store_true", help="compile one factor, one variable pass alone")
    ap.add_argument("--tag", default="")
    ap.add_argument("--unroll", type=int, default=8, help="sweeps per while-loop trip")
    args = ap.parse_args(argv)
    interpret = jax.devices()[0].platform != "gpu"
    rows = []
    for size in args.sizes:
        host_graph = bingo_model(size).graph
        graph = jax.device_put(host_graph)
        for dname in args.dtypes:
            dt = DTYPES[dname]
            row = {"size": graph.num_edges, "dtype": dname,
                   **loop_times(host_graph, graph, dname, interpret, args.unroll)}
            if args.passes:
                tune = fused.tuning(jnp.dtype(dt).itemsize)
                lay = jax.device_put(fused.build(host_graph, tune["tile"], tune["var_tile"]))
                slots = jnp.zeros((lay.num_slots,), dt)
                evk = jnp.zeros((lay.num_kvars,), dt)
                params = fused.kernel_params(lay, graph, dt)
                nw = tune["num_warps"]

                control = fused.Control.start(0.0, 10, 0.0, dt, wide_rows=lay.variables.wide_rows,
                                              factor_wide_rows=lay.factors.wide_rows)

                totals = jnp.zeros((2 * lay.num_kvars,), dt)

                def fpass(lay, m, totals, params, control):
                    return fused.factor_pass(lay, m, totals, params, control, interpret, nw)

                def vpass(lay, m, evk, totals, control):
                    return fused.var_pass(lay, m, evk, totals, evk, control, interpret, tune["var_warps"])

                row["factor_pass_s"] = compile_s(fpass, lay, slots, totals, params, control)
                row["var_pass_s"] = compile_s(vpass, lay, slots, evk, totals, control)
            rows.append(row)
            print(row, flush=True)
    write_json(f"compile_probe{'-' + args.tag if args.tag else ''}.json",
               {"environment": environment(), "rows": rows})
    print(f"compile seconds ({args.tag or 'untagged'})")
    print(f"{'edges':>9} {'dt':>4} {'prep':>5} {'lower':>6} {'compile':>7} {'1st call+':>9} {'total':>6} "
          f"{'factor pass':>11} {'var pass':>8}")
    for r in rows:
        print(f"{r['size']:>9} {r['dtype']:>4} {r['prepare_s']:>5.2f} {r['lower_s']:>6.2f} "
              f"{r['compile_s']:>7.2f} {r['first_call_extra_s']:>9.2f} {r['total_s']:>6.2f} "
              f"{r.get('factor_pass_s', 0):>11.2f} {r.get('var_pass_s', 0):>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
