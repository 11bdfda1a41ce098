"""Interactive rounds at the ftp size: label the top alarm with the oracle, warm-started round to tol 1e-6,
new ranking, over a full `simulate` run (docs/DESIGN.md section 9; issue 6 item 5).

Reports the median / p90 / max round time (rounds after the first: each is
label -> warm-started run -> marginals on the host -> new ranking), the cold
first round, compile + schedule setup, TotalTime and AverageTime (Bingo's
metrics: every round up to Rank-100%-T, the cold one included), and how many
XLA compilations happened during the rounds (must be 0). Prints a short table
last; writes every round's details to $OUT/bench_rounds.json (default ./out).

    python benchmarks/bench_rounds.py                       # ftp size (0.69 M edges), SEQFIX
    python benchmarks/bench_rounds.py --small --schedule parall   # CPU smoke run (weblech size)
    python benchmarks/bench_rounds.py --graph G --oracle TRUE_ALARMS
    python benchmarks/bench_rounds.py --schedule parall --backend fused   # the fused kernels (GPU)

Without --graph it generates a synthetic Bingo-like graph of a Table 1 size
with `datalog.synthetic.generate(preset=...)` (ftp: 688,090 factor-graph
edges, 1,831 alarms) and takes the true alarms from one ancestral sample
(`datalog.synthetic.sample_truth`, same seed: 46 true alarms for ftp, seed 0).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.monitoring  # noqa: E402

import fastlbp  # noqa: E402
from fastlbp.core.settings import BACKENDS, Settings  # noqa: E402
from fastlbp.inference import simulate as sim  # noqa: E402
from fastlbp.io.loading import load  # noqa: E402

SMALL_PRESET = "weblech"  # 2,351 edges, 11 alarms (all true with seed 0): a smoke run

COMPILES: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: COMPILES.append(event) if event.endswith("backend_compile_duration") else None)


def build(args):
    if args.graph:
        model = load(args.graph)
        if not args.oracle:
            raise SystemExit("--graph needs --oracle TRUE_ALARMS")
        truth = sim.read_oracle(args.oracle, model)
        return model, truth, str(args.graph)
    from datalog import synthetic
    from datalog.bayesnet import to_model
    preset = SMALL_PRESET if args.small else args.preset
    dg = synthetic.generate(preset=preset, seed=args.seed)
    model = to_model(dg)
    sample = synthetic.sample_truth(dg, seed=args.seed)
    truth = {int(a) for a in dg.alarms if sample[a]}
    return model, truth, f"datalog.synthetic.generate(preset={preset!r}, seed={args.seed})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ftp", help="synthetic graph size: a Table 1 program name")
    ap.add_argument("--small", action="store_true", help=f"preset {SMALL_PRESET} (CPU smoke run)")
    ap.add_argument("--graph", help="a graph file or Bingo directory instead of the generated one")
    ap.add_argument("--oracle", help="true alarms, one per line (with --graph)")
    ap.add_argument("--schedule", default="seqfix")
    ap.add_argument("--method", default="lbp", help="lbp (this benchmark's subject), auto, exact or sample")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--max-iters", type=int, default=1000)
    ap.add_argument("--damping", type=float, default=0.0)
    ap.add_argument("--precision", default="f64", choices=["f64", "f32"])
    ap.add_argument("--backend", default="xla", choices=BACKENDS,
                    help="kernel backend (fused: fused Pallas kernels; persistent kernel with :chunked)")
    ap.add_argument("--max-rounds", type=int, default=None, help="stop the simulate run early")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()

    t0 = time.perf_counter()
    model, truth, source = build(args)
    build_s = time.perf_counter() - t0
    g = model.graph
    print(f"graph: {g.num_edges} edges, {g.num_vars} variables, {len(model.alarms)} alarms, "
          f"{len(truth)} true; built in {build_s:.2f} s", file=sys.stderr)

    at_first_round = []

    def progress(i, step):
        if i == 1:
            at_first_round.append(len(COMPILES))
        if i % 25 == 0:
            print(f"  round {i}: {step.round_s * 1e3:.1f} ms, {step.iterations} it", file=sys.stderr)

    compiles_before = len(COMPILES)
    settings = Settings(method=args.method, schedule=args.schedule, precision=args.precision, tol=args.tol,
                        max_iters=args.max_iters, damping=args.damping, backend=args.backend)
    result = sim.simulate(model, truth, max_rounds=args.max_rounds, on_step=progress, settings=settings)
    compiles_total = len(COMPILES) - compiles_before
    # Round 1 is reported after its ranking; everything compiled since is a
    # recompilation inside the interactive loop.
    compiles_in_rounds = len(COMPILES) - at_first_round[0] if at_first_round else 0

    steps = result.steps
    warm = np.array([s.round_s for s in steps[1:]]) if len(steps) > 1 else np.zeros(0)
    iters = np.array([s.iterations for s in steps[1:]]) if len(steps) > 1 else np.zeros(0)
    m = result.metrics
    summary = {
        "date": datetime.date.today().isoformat(),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "device": str(jax.devices()[0]), "platform": jax.default_backend(),
        "jax": jax.__version__, "fastlbp": fastlbp.__version__, "host": platform.node(),
        "graph": source, "edges": g.num_edges, "variables": g.num_vars, "alarms": len(model.alarms),
        "true_alarms": len(truth), "schedule": args.schedule, "backend": args.backend, "tol": args.tol,
        "max_iters": args.max_iters, "precision": args.precision,
        "build_s": build_s, "compile_and_setup_s": result.compile_s,
        "compilations_total": compiles_total, "compilations_in_warm_rounds": compiles_in_rounds,
        "cold_round_s": steps[0].round_s if steps else None,
        "cold_round_iterations": steps[0].iterations if steps else None,
        "warm_rounds": int(warm.size),
        "warm_round_median_s": float(np.median(warm)) if warm.size else None,
        "warm_round_p90_s": float(np.percentile(warm, 90)) if warm.size else None,
        "warm_round_max_s": float(warm.max()) if warm.size else None,
        "warm_round_median_iterations": float(np.median(iters)) if iters.size else None,
        "not_converged_rounds": sum(not s.converged for s in steps),
        **{k: v for k, v in result.as_dict().items() if k != "labels"},
        "labels": result.as_dict()["labels"],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_rounds.json").write_text(json.dumps(summary, indent=1))

    def ms(x):
        return "-" if x is None else f"{x * 1e3:.2f} ms"

    rows = [
        ("device", summary["device"]),
        ("graph", f"{g.num_edges:,} edges, {len(model.alarms)} alarms ({len(truth)} true)"),
        ("schedule", f"{args.schedule}, backend {args.backend}, tol {args.tol:g}, {args.precision}"),
        ("compile + setup", f"{result.compile_s:.3f} s"),
        ("cold round", f"{ms(summary['cold_round_s'])} ({summary['cold_round_iterations']} it)"),
        ("warm round median", f"{ms(summary['warm_round_median_s'])} "
                              f"({summary['warm_round_median_iterations']} it)"),
        ("warm round p90 / max", f"{ms(summary['warm_round_p90_s'])} / {ms(summary['warm_round_max_s'])}"),
        ("rounds (not converged)", f"{len(steps)} ({summary['not_converged_rounds']})"
                                   + ("" if result.complete else ", stopped early: metrics partial")),
        ("Rank-100%-T / 90%", f"{m.rank_100_t} / {m.rank_90_t}"),
        ("Inversions / AUC", f"{m.inversions} / {m.auc:.4f}"),
        ("TotalTime", f"{m.total_time_s:.3f} s"),
        ("AverageTime", ms(m.average_time_s)),
        ("compilations", f"{compiles_total} in all, {compiles_in_rounds} in warm rounds"),
        ("details", str(out / "bench_rounds.json")),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))


if __name__ == "__main__":
    main()
