"""Counts the kernels (fusions, custom calls, scatters...) in one PARALL while-loop trip.

    python benchmarks/probes/count_kernels.py --size 500000 [--backend fused]
"""

import argparse
import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common

import jax
import jax.numpy as jnp
from common import bingo_model, parall_runner

from fastlbp.engines.loop import controls, init


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=500_000)
    ap.add_argument("--backend", default="xla")
    args = ap.parse_args()
    host = bingo_model(args.size).graph
    g = jax.device_put(host)
    dtype = jnp.float64
    runner = parall_runner(host, args.backend)
    call = (g, runner.layout, init(g, dtype), jnp.zeros(g.num_vars, dtype), controls(0.0, 10, 0.0, dtype))
    text = runner.run.lower(*call).compile().as_text()
    # Split into computations; find the while body(ies).
    comps = re.split(r"\n(?=\S.*\{\s*$)", text, flags=re.M)
    for body in comps:
        ops = collections.Counter()
        for line in body.splitlines():
            # The result type may be a tuple, "(f64[..], s32[..])".
            m = re.search(r"=\s*(?:\([^=]*\)|\S+)\s+(fusion|custom-call|scatter|gather|copy|reduce|sort|"
                          r"all-reduce|dynamic-update-slice|while|conditional)\(", line)
            if m:
                ops[m.group(1)] += 1
        if sum(ops.values()) >= 4:
            print(body.split("\n", 1)[0][:60], dict(ops))


if __name__ == "__main__":
    main()
