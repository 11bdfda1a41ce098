"""GPU check of the fused Pallas kernels against the XLA engine on random graphs.

    python benchmarks/check_fused.py --graphs 30

Random loopy AND/OR graphs (some factors with hundreds of body edges, hard
evidence, deterministic factors, damping), float64 and float32, with several
tile sizes so the wide-row loop runs too. (Big graphs add width classes and
so compile time; `tests/test_engines_fused.py` runs wide rows at the 512-slot
tile.) Prints the largest marginal difference per setting and exits 1 if
float64 differs by more than 1e-9.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from graphs import random_factors  # noqa: E402

from fastlbp.core import graph as G  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines import fused, loop, parall  # noqa: E402

# float64 as fastlbp's entry points run it; this script also calls engines and jnp directly
jax.config.update("jax_enable_x64", True)

PRECISION = {jnp.float64: "f64", jnp.float32: "f32"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--graphs", type=int, default=30)
    ap.add_argument("--vmap", type=int, default=3,
                    help="on this many graphs, also three evidence sets at once under jax.vmap")
    args = ap.parse_args(argv)
    vmap_worst, vmap_runs = 0.0, 0
    interpret = jax.devices()[0].platform != "gpu"
    worst = {}
    compared, conflicts = {}, {}  # runs compared by marginals, and conflicts reported by both
    waited = {}  # compared runs whose wide factor rows' chunks waited for each other in the factor kernel
    for seed in range(args.graphs):
        rng = np.random.default_rng(seed)
        nv = int(rng.integers(20, 400))
        fs = random_factors(rng, nv, int(nv * rng.uniform(0.8, 2.0)), max_body=int(rng.integers(2, 9)))
        for _ in range(int(rng.integers(0, 3))):
            k = int(rng.integers(10, nv - 1))
            body = tuple(int(v) for v in rng.choice(np.arange(1, nv), size=k, replace=False))
            fs.append(G.Factor(int(rng.integers(2)), 0, body, float(rng.uniform(0.05, 0.95)),
                               float(rng.uniform(0.05, 0.95))))
        g_hard = G.from_factors(fs)
        hard = np.zeros(g_hard.num_vars)
        labelled = rng.choice(g_hard.num_vars, size=min(3, g_hard.num_vars), replace=False)
        hard[labelled] = np.where(rng.random(labelled.size) < 0.5, np.inf, -np.inf)
        # Hard labels and deterministic factors often contradict each other in a random graph
        # (a conflict, where only the report is compared), so every graph is also run with its
        # probabilities kept inside [0.02, 0.98] and the labels as soft evidence, which cannot
        # conflict: its marginals, wide rows included, are always compared.
        soft = np.where(np.isinf(hard), np.sign(hard) * 3.0, 0.0)
        g_soft = G.from_factors([dataclasses.replace(f, p1=min(max(f.p1, 0.02), 0.98),
                                                     p2=min(max(f.p2, 0.02), 0.98)) for f in fs])
        damping = float(rng.choice([0.0, 0.3]))
        for dtype in (jnp.float64, jnp.float32):
            ctl = loop.controls(1e-7, 60, damping, dtype)
            precision = PRECISION[dtype]
            for g, ev in ((g_hard, hard), (g_soft, soft)):
                ev = jnp.asarray(ev, dtype)
                xla = parall.make_runner(g, Settings(backend="xla", precision=precision))
                ref = xla(g, loop.init(g, dtype), ev, ctl)
                for tile in (512, 256, 16, 8):
                    run = fused.make_runner(g, Settings(backend="fused", precision=precision), unroll=1,
                                            interpret=interpret, tile=tile)
                    res = run(g, loop.init(g, dtype), ev, ctl)
                    if bool(ref.conflict) != bool(res.conflict):
                        print(f"seed {seed}: conflict {bool(ref.conflict)} vs {bool(res.conflict)}")
                        return 1
                    key = (jnp.dtype(dtype).name, tile)
                    if bool(ref.conflict):
                        conflicts[key] = conflicts.get(key, 0) + 1
                        continue
                    d = float(jnp.max(jnp.abs(res.marginals.astype(jnp.float64) - ref.marginals)))
                    worst[key] = max(worst.get(key, 0.0), d)
                    side = run.layout.factors  # the layout the run used
                    compared[key] = compared.get(key, 0) + 1
                    waited[key] = waited.get(key, 0) + bool(
                        side.wide_chunks and fused.chunks_wait(side.max_row_chunks, interpret))
                    if int(res.iterations) != int(ref.iterations) and dtype == jnp.float64:
                        print(f"seed {seed} tile {tile}: iterations",
                              int(res.iterations), "vs", int(ref.iterations))
        if seed < args.vmap:  # a batch under jax.vmap runs one problem after another (`fused.one_at_a_time`)
            ctl = loop.controls(1e-7, 60, damping)
            evs = jnp.stack([jnp.asarray(x, jnp.float64) for x in (soft, np.zeros_like(soft), -soft)])
            run = fused.make_runner(g_soft, Settings(backend="fused"), unroll=1, interpret=interpret, tile=16)
            xla = parall.make_runner(g_soft, Settings(backend="xla"))
            m0 = loop.init(g_soft, jnp.float64)
            batched = jax.vmap(lambda e: run(g_soft, m0, e, ctl).marginals)(evs)
            for k in range(evs.shape[0]):
                ref = xla(g_soft, m0, evs[k], ctl)
                vmap_worst = max(vmap_worst, float(jnp.max(jnp.abs(batched[k] - ref.marginals))))
                vmap_runs += 1
    for key, d in sorted(worst.items()):
        print(f"{key[0]:>8} tile {str(key[1]):>5}: max |d marginal| vs XLA engine = {d:.2e} over "
              f"{compared[key]} runs ({waited[key]} with in-kernel waits for wide factor rows; "
              f"{conflicts.get(key, 0)} more conflicts, reported by both)")
    if vmap_runs:
        print(f" float64 tile    16: max |d marginal| vs XLA engine = {vmap_worst:.2e} over {vmap_runs} "
              "runs in batches of 3 under jax.vmap")
    bad = any(k[0] == "float64" and d > 1e-9 for k, d in worst.items()) or vmap_worst > 1e-9
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
