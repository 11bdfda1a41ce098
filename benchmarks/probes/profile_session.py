"""Where a session's set-up goes (`Session(model, settings)`): host plans, uploads, device work.

    python benchmarks/probes/profile_session.py --factor-edges 2e7 --schedules seqfix parall

Generates `datalog.synthetic.generate(factor_edges=N, seed=0)`, loads it as `fastlbp rank`
does (chain compression on), starts JAX with one tiny device op (CUDA's own start is not
the session's), then builds each schedule's session twice: the first under cProfile (top
functions by cumulative time printed), the second timed alone, with a device sync after it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--factor-edges", type=float, default=2e6)
    ap.add_argument("--schedules", nargs="+", default=["seqfix", "parall"])
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()

    from datalog.bayesnet import to_model
    from datalog.synthetic import generate

    t0 = time.perf_counter()
    model = to_model(generate(factor_edges=int(args.factor_edges), seed=0), compress=True)
    print(f"model: {model.graph.num_edges:,} edges ({time.perf_counter() - t0:.1f} s)", flush=True)

    import jax
    import jax.numpy as jnp

    from fastlbp.core.settings import Settings
    from fastlbp.inference.session import Session

    # float64 as fastlbp's entry points run it; this script also calls engines and jnp directly
    jax.config.update("jax_enable_x64", True)

    jnp.zeros(1).block_until_ready()
    print(f"device: {jax.devices()[0]}", flush=True)
    for schedule in args.schedules:
        settings = Settings(schedule=schedule)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        session = Session(model, settings=settings)
        jax.block_until_ready(session.messages)
        prof.disable()
        first = time.perf_counter() - t0
        del session
        t0 = time.perf_counter()
        session = Session(model, settings=settings)
        jax.block_until_ready(session.messages)
        again = time.perf_counter() - t0
        print(f"\n== {schedule}: {session.runner.name}, first {first:.2f} s, again {again:.2f} s", flush=True)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)
        del session
    return 0


if __name__ == "__main__":
    sys.exit(main())
