"""Where a PARALL sweep's time goes: each stage timed alone in a jitted loop.

    python benchmarks/probes/profile_parall.py --size 500000 --backend xla pallas
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common

import jax
import jax.numpy as jnp
from common import bingo_model, parall_runner, timed

from fastlbp.core import equations
from fastlbp.engines.loop import controls, init


def loop(fn, n):
    """n applications of fn inside one jitted fori_loop (amortises launch)."""
    return jax.jit(lambda x: jax.lax.fori_loop(0, n, lambda _, y: fn(y), x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, nargs="+", default=[500_000])
    ap.add_argument("--backend", nargs="+", default=["xla", "scatter"])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    n = args.reps
    for size in args.size:
        host = bingo_model(size).graph
        g = jax.device_put(host)
        for backend in args.backend:
            sums = jax.device_put(equations.summation(host, backend))
            for dtype in (jnp.float64, jnp.float32):
                msgs = init(g, dtype) + 0.1
                ev = jnp.zeros((g.num_vars,), dtype)
                agg = equations.var_aggregates(g, sums, msgs, ev)
                mu = equations.var_to_factor(g, msgs, agg)
                fin, zero = equations.factor_inputs(g, mu)
                fagg = equations.factor_aggregates(g, sums, fin, zero)
                stages = {
                    "var_aggregates": lambda m: m + equations.var_aggregates(g, sums, m, ev)[g.edge_var, 0],
                    "var_to_factor + factor_inputs": lambda m: equations.factor_inputs(
                        g, equations.var_to_factor(g, m, agg))[0],
                    "factor_aggregates": lambda m: m + equations.factor_aggregates(
                        g, sums, m, zero)[g.edge_factor, 0],
                    "factor_messages": lambda m: equations.factor_messages(g, m, fin, zero, fagg),
                    "copy m+1 (loop floor)": lambda m: m + 1,
                }
                print(f"== {g.num_edges} edges, {backend}, {jnp.dtype(dtype).name}", flush=True)
                for name, f in stages.items():
                    med, _ = timed(loop(f, n), msgs if name != "factor_messages" else mu, repeats=3)
                    print(f"{name:34s} {med / n * 1e6:9.1f} us", flush=True)
                for unroll in (1, 4):
                    runner = parall_runner(host, backend, "f64" if dtype == jnp.float64 else "f32", unroll)
                    med, _ = timed(runner, g, msgs, ev, controls(0.0, 100, 0.0, dtype), repeats=3)
                    print(f"{'runner unroll ' + str(unroll):34s} {med / 100 * 1e6:9.1f} us / iteration")


if __name__ == "__main__":
    main()
