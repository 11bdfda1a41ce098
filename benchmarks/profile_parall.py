"""Where a PARALL iteration's time goes: each stage and a few primitives, timed alone.

    python benchmarks/profile_parall.py --size 500000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from common import bingo_model, timed  # noqa: E402

from fastlbp import engine, kernels  # noqa: E402


def loop(fn, n):
    """n applications of fn inside one jitted fori_loop (amortises launch)."""
    def body(_, x):
        return fn(x)
    return jax.jit(lambda x: jax.lax.fori_loop(0, n, body, x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, nargs="+", default=[500_000])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    for size in args.size:
        model = bingo_model(size)
        g = jax.device_put(model.graph)
        n = args.reps
        for dtype in (jnp.float64, jnp.float32):
            msgs = engine.init(g, dtype) + 0.1
            ev = jnp.zeros((g.num_vars,), dtype)
            agg = kernels.var_aggregates(g, msgs, ev)
            mu = kernels.var_to_factor(g, msgs, agg)
            stages = {
                "step (full PARALL sweep)": loop(lambda m: engine.parall_sweep(g, m, ev), n),
                "var_aggregates": loop(lambda m: m + kernels.var_aggregates(g, m, ev)[g.edge_var, 0], n),
                "var_to_factor": loop(lambda m: kernels.var_to_factor(g, m, agg), n),
                "factor_to_var": loop(lambda m: kernels.factor_to_var(g, m), n),
                "gather m[var_edges]": loop(lambda m: m[g.var_edges], n),
                "segment_sum (E,) sorted": loop(
                    lambda m: m + jax.ops.segment_sum(m, g.slot_var, g.num_vars,
                                                      indices_are_sorted=True)[g.edge_var], n),
                "segment_sum (E,) unsorted": loop(
                    lambda m: m + jax.ops.segment_sum(m, g.slot_var, g.num_vars)[g.edge_var], n),
                "segment_sum (E,3) sorted": loop(
                    lambda m: m + jax.ops.segment_sum(jnp.stack([m, m, m], -1), g.slot_var, g.num_vars,
                                                      indices_are_sorted=True)[g.edge_var, 0], n),
                "elementwise log_sigmoid+logaddexp": loop(
                    lambda m: jnp.logaddexp(jax.nn.log_sigmoid(m), jax.nn.log_sigmoid(-m)) + m, n),
                "copy m+1": loop(lambda m: m + 1, n),
            }
            print(f"== size {g.num_edges} edges, {jnp.dtype(dtype).name}", flush=True)
            for name, f in stages.items():
                x = mu if name == "factor_to_var" else msgs
                med, _ = timed(f, x, repeats=3)
                print(f"{name:40s} {med / n * 1e6:9.1f} us", flush=True)
            tol = jnp.asarray(0.0, dtype)
            for iters in (50, 200):
                med, _ = timed(engine.parall_runner(), g, msgs, ev, tol, jnp.asarray(iters, jnp.int32),
                               jnp.asarray(0.0, dtype), repeats=3)
                print(f"{'run (while_loop) ' + str(iters) + ' iters':40s} {med / iters * 1e6:9.1f} us")


if __name__ == "__main__":
    main()
