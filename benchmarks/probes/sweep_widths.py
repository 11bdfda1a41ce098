"""PARALL µs per iteration for several segment-plan chunk widths (first level, upper levels).

    python benchmarks/probes/sweep_widths.py --sizes 500000 5000000
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common

import jax
import jax.numpy as jnp
from common import bingo_model, timed

from fastlbp import engine, segments


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[500_000])
    ap.add_argument("--widths", nargs="+", default=["2,8", "4,8", "4,16", "8,8", "8,32"])
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    for size in args.sizes:
        for widths in args.widths:
            segments.FIRST_WIDTH, segments.WIDTH = (int(x) for x in widths.split(","))
            g = jax.device_put(bingo_model(size).graph)
            run = engine.parall_runner("xla", 1)
            for dtype in (jnp.float64, jnp.float32):
                a = (g, engine.init(g, dtype), jnp.zeros(g.num_vars, dtype), jnp.asarray(0.0, dtype),
                     jnp.asarray(args.iters, jnp.int32), jnp.asarray(0.0, dtype))
                med, _ = timed(run, *a, repeats=3)
                print(f"{size:>9} widths {widths:>5} {jnp.dtype(dtype).name:>7} "
                      f"levels {len(g.var_sums.levels)}/{len(g.factor_sums.levels)} "
                      f"{med / args.iters * 1e6:8.1f} us/iter", flush=True)


if __name__ == "__main__":
    main()
