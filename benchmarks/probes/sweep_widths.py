"""PARALL µs per iteration for several segment-plan chunk widths (first level, upper levels).

    python benchmarks/probes/sweep_widths.py --sizes 500000 5000000
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common

import jax
import jax.numpy as jnp
from common import bingo_model, parall_runner, timed

from fastlbp.core import segments
from fastlbp.engines.loop import controls, init


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[500_000])
    ap.add_argument("--widths", nargs="+", default=["2,8", "4,8", "4,16", "8,8", "8,32"])
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    for size in args.sizes:
        for widths in args.widths:
            segments.FIRST_WIDTH, segments.WIDTH = (int(x) for x in widths.split(","))
            host = bingo_model(size).graph
            g = jax.device_put(host)
            # The plan reads the widths when the runner builds it (`kernels.summation`).
            runner = parall_runner(host, "xla", unroll=1)
            sums = runner.layout
            for dtype in (jnp.float64, jnp.float32):
                a = (g, init(g, dtype), jnp.zeros(g.num_vars, dtype), controls(0.0, args.iters, 0.0, dtype))
                med, _ = timed(runner, *a, repeats=3)
                print(f"{size:>9} widths {widths:>5} {jnp.dtype(dtype).name:>7} "
                      f"levels {len(sums.var.levels)}/{len(sums.factor.levels)} "
                      f"{med / args.iters * 1e6:8.1f} us/iter", flush=True)


if __name__ == "__main__":
    main()
