"""Where an interactive round's time goes: a warm-started LBP round after each label, under cProfile.

    python benchmarks/probes/profile_rounds.py --preset ftp --rounds 8

Generates the synthetic graph of a Table 1 size (`datalog.synthetic.generate(preset=...)`), takes its
truth from one ancestral sample, runs a cold round, then labels the top alarm and runs a warm round,
`--rounds` times; prints each round's time, the compiles during warm rounds, and the top functions of
the warm rounds by cumulative time.
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
    ap.add_argument("--preset", default="ftp")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--schedule", default="parall")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()

    import jax
    import jax.monitoring
    import numpy as np

    import fastlbp
    from datalog import synthetic
    from datalog.bayesnet import to_model

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, *a, **k: compiles.append(name) if "backend_compile" in name else None)
    dg = synthetic.generate(preset=args.preset, seed=0)
    truth = synthetic.sample_truth(dg, seed=0)
    model = to_model(dg)  # as benchmarks/bench_rounds.py: alarms keep their tuple index
    print(f"{model.graph.num_edges:,} edges, {model.num_vars:,} variables, {len(model.alarms):,} alarms")
    session = fastlbp.Session(model, method="lbp", schedule=args.schedule)
    t0 = time.perf_counter()
    rnd = session.run()
    print(f"cold round {1e3 * (time.perf_counter() - t0):.1f} ms, {rnd.iterations} it; "
          f"{int(np.isinf(rnd.log_odds).sum()):,} variables with infinite log-odds")
    session.compile_flags()  # as simulate and triage do
    alarm_truth = {int(a): bool(truth[a]) for a in dg.alarms}
    before = len(compiles)
    prof = cProfile.Profile()
    for i in range(args.rounds):
        lo = session.last.log_odds
        unl = [int(a) for a in model.alarms if int(a) not in session.labels]
        top = max(unl, key=lambda a: lo[a])
        session.label(top, alarm_truth[top])
        t0 = time.perf_counter()
        prof.enable()
        rnd = session.run()
        prof.disable()
        print(f"round {i + 1}: {1e3 * (time.perf_counter() - t0):.1f} ms, {rnd.iterations} it, "
              f"flags {len(rnd.flags)}")
    print(f"compiles during warm rounds: {len(compiles) - before}")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
