"""What the variable kernel's gather could cost: XLA gathers and scatters of the real pattern.

    python benchmarks/probes/micro_gather.py --sizes 500000 5000000

The fused variable kernel gathers each edge's message (8 bytes, float64) from
the factor-ordered message array through `layout.variables.slots`, then sums
rows. This times, in one jitted loop of `--reps` repetitions each (so launch
costs are spread), the same number of 8-byte reads done four ways: contiguous
(a copy), through the real variable-slot pattern, through a random
permutation, and the real pattern's scatter (stores instead of loads). The
gap between the real pattern and the variable pass tells what the kernel's
structure (row sums, switch, stores) adds to the gather itself. Prints µs per
pass; details to $OUT/micro_gather.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import bingo_model, environment, timed, write_json  # noqa: E402

from fastlbp.engines import fused  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[500_000, 5_000_000])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--dtype", default="f64", choices=["f64", "f32"])
    args = ap.parse_args(argv)
    dt = {"f64": jnp.float64, "f32": jnp.float32}[args.dtype]
    rows = []
    for size in args.sizes:
        graph = jax.device_put(bingo_model(size).graph)
        lay = fused.build(graph, fused.AUTO_TILE[8], fused.AUTO_VAR_TILE[8])
        vs = np.asarray(lay.variables.slots)
        n_msg = lay.num_slots
        rng = np.random.default_rng(0)
        pattern = {
            "contiguous": np.arange(vs.size) % n_msg,
            "variable slots (real)": np.where(vs >= 0, vs, 0),
            "random": rng.integers(0, n_msg, vs.size),
        }
        msgs = jnp.asarray(rng.standard_normal(n_msg), dt)

        def loop_gather(m, idx):
            def body(_, acc):
                # acc feeds the next gather's indices (an offset that is always 0), so XLA cannot
                # hoist the gather out of the loop
                return acc + m[idx + (acc[0] > 1e300).astype(jnp.int32)]
            return jax.lax.fori_loop(0, args.reps, body, jnp.zeros(idx.shape, m.dtype))

        def loop_scatter(m, idx, vals):
            def body(_, out):
                return out.at[idx].set(vals + out[0])
            return jax.lax.fori_loop(0, args.reps, body, m)

        g = jax.jit(loop_gather)
        for name, idx in pattern.items():
            idx = jnp.asarray(idx, jnp.int32)
            t, _ = timed(g, msgs, idx)
            rows.append({"size": size, "what": f"gather {name}", "n": int(idx.size),
                         "us": t / args.reps * 1e6})
        s = jax.jit(loop_scatter)
        idx = jnp.asarray(pattern["variable slots (real)"], jnp.int32)
        vals = jnp.ones(idx.shape, dt)
        t, _ = timed(s, msgs, idx, vals)
        rows.append({"size": size, "what": "scatter variable slots (real)", "n": int(idx.size),
                     "us": t / args.reps * 1e6})
        print(f"# done {size}", flush=True)
    write_json("micro_gather.json", {"environment": environment(), "dtype": args.dtype, "rows": rows})
    print(f"{'edges':>9} {'what':>32} {'reads':>9} {'us/pass':>8}")
    for r in rows:
        print(f"{r['size']:>9} {r['what']:>32} {r['n']:>9} {r['us']:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
