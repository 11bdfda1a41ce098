"""How far a CPU round is above what any log-space LBP iteration must do (issue 21's CPU goal).

    python benchmarks/probes/cpu_round_floor.py [data/ftp.json.gz] [--repeats 5]

In one process on the graph as `fastlbp rank` loads it: the engine's round from
fresh messages (compiled; the default schedule, PARALL); and a floor loop of the same
iteration count that does only what every log-space LBP iteration must: per edge,
a segment sum over its variable and one over its factor, the two gathers back to
the edges, and three transcendentals (exp, log1p, and one more: the AND/OR
factor's leave-one-out term). No round of that many iterations written with XLA's
segment sums can do less on this machine; wall and process CPU seconds of each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def timed(fn, repeats: int) -> tuple[float, float]:
    """Fastest wall and process-CPU seconds of `fn()` over `repeats` calls (after one warm-up)."""
    fn()
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - w0, time.process_time() - c0))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph", nargs="?", default=str(ROOT / "data" / "ftp.json.gz"))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from fastlbp.core.settings import Settings
    from fastlbp.inference.session import Session
    from fastlbp.io.loading import load

    # float64 as fastlbp's entry points run it; this script also calls engines and jnp directly
    jax.config.update("jax_enable_x64", True)

    model = load(args.graph, Settings())
    g = model.graph
    session = Session(model, settings=Settings())
    rnd = session.run(warm=False)
    iters = int(rnd.iterations)

    def engine():
        session.run(warm=False)

    edge_var = jnp.asarray(g.edge_var, jnp.int32)
    edge_factor = jnp.asarray(g.edge_factor, jnp.int32)
    nv, nf = int(g.num_vars), int(g.num_factors)

    @jax.jit
    def floor(x):
        def body(_, x):
            s_var = jax.ops.segment_sum(x, edge_var, nv, indices_are_sorted=False)
            y = s_var[edge_var] - x
            t = jnp.log1p(-jnp.exp(-jnp.abs(y) - 1.0))
            s_fac = jax.ops.segment_sum(t, edge_factor, nf, indices_are_sorted=True)
            return jnp.log(jnp.abs(s_fac[edge_factor] - t) + 1.0) * 0.5
        return jax.lax.fori_loop(0, iters, body, x)

    x0 = jnp.linspace(-1.0, 1.0, g.num_edges, dtype=jnp.float64)

    def floor_call():
        floor(x0).block_until_ready()

    ew, ec = timed(engine, args.repeats)
    fw, fc = timed(floor_call, args.repeats)
    print(f"graph {Path(args.graph).name}: {g.num_edges:,} edges, {iters} iterations ({session.runner.name})")
    print(f"{'':10} {'wall s':>8} {'CPU s':>8} {'ns/edge-iter (wall)':>20}")
    for name, w, c in (("engine", ew, ec), ("floor", fw, fc)):
        print(f"{name:10} {w:8.3f} {c:8.3f} {w / (iters * g.num_edges) * 1e9:20.1f}")
    print(f"engine / floor: {ew / fw:.2f}x wall, {ec / fc:.2f}x CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
