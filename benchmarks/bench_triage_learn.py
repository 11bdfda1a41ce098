"""`triage --learn`: the round a person waits for after each label, with and without online learning.

    python benchmarks/bench_triage_learn.py                           # data/weblech.json, LBP, 20 labels
    python benchmarks/bench_triage_learn.py --graph data/avrora.json.gz --labels 30 --steps 2
    python benchmarks/bench_triage_learn.py --method sample --graph data/weblech.json

A triage session (`fastlbp.triage.Triage`, a session file in a temporary folder) labels the top
alarm by the graph's ground truth `--labels` times: once plain, once with `--learn` (`--steps` EM
steps per label, warm-started, `fastlbp.triage.evidence.OnlineRules`). Reported per variant: the
median and largest round after a label (the learning included), the learning's share, the compiled
programs of LBP's round and of the E-step before and after the labels (nothing may compile as labels
come), the labels until every true alarm was seen in those rounds (Rank-100%-T, if reached), and
the resume: the journal replayed into a new session reaches the same marginals (bit for bit) in the
time printed. Times are ratios to the plain round on the same machine; the device is printed.
Writes bench_triage_learn.json to $OUT (default ./out).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import device_name, write_json  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.inference.simulate import graph_truth  # noqa: E402
from fastlbp.io.loading import load  # noqa: E402
from fastlbp.triage import Triage  # noqa: E402
from fastlbp.triage.evidence import Learning  # noqa: E402


def compiled(t: Triage) -> tuple[int, int]:
    """(LBP round programs, E-step programs) compiled so far (0 where the method compiles none)."""
    rounds = t.session.runner.run._cache_size() if t.session.runner is not None else 0
    e_step = 0
    if t.online is not None and t.online.learner._posteriors[0] is not None:
        post = t.online.learner._posteriors[0]
        runner = getattr(post.e_step, "runner", None)  # an iterative (LBP) E-step's
        if runner is not None:
            e_step = runner.run._cache_size()
    return rounds, e_step


def run(model, truth: set[int], settings: Settings, learning: Learning | None, labels: int, folder: Path):
    path = folder / f"{'learn' if learning else 'plain'}.db"
    start = time.perf_counter()
    t = Triage.open(model, path, settings=settings, learning=learning)
    first = time.perf_counter() - start
    before = compiled(t)
    found = need = len(truth & set(t.ranking.tolist()))
    rank_100 = None
    rounds, learns = [], []
    for i in range(labels):
        var = t.current
        if var is None:
            break
        out = t.label(var in truth)
        assert out.accepted, out.message
        rounds.append(out.round.seconds)
        learns.append(out.round.learn_s or 0.0)
        found -= var in truth
        if found == 0 and rank_100 is None:
            rank_100 = i + 1
    after = compiled(t)
    marginals = t.marginals.copy()
    t.close()
    start = time.perf_counter()
    r = Triage.open(model, path, resume=True, settings=settings)
    resume_s = time.perf_counter() - start
    same = bool(np.array_equal(r.marginals, marginals))
    r.close()
    return {"first_round_s": first, "median_round_s": float(np.median(rounds)), "max_round_s": max(rounds),
            "median_learn_s": float(np.median(learns)), "compiled_before": before, "compiled_after": after,
            "rank_100_t": rank_100, "true_alarms": need, "labels": len(rounds), "resume_s": resume_s,
            "resume_same_marginals": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default=str(Path(__file__).resolve().parents[1] / "data" / "weblech.json"))
    ap.add_argument("--method", default="lbp", choices=["lbp", "exact", "sample", "auto"])
    ap.add_argument("--labels", type=int, default=20)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    model = load(args.graph)
    truth = graph_truth(model)
    if truth is None:
        sys.exit(f"{args.graph} records no ground truth")
    settings = Settings(method=args.method, target_se=0.0)  # sampling: fixed worlds, so resume is exact
    out = {"graph": args.graph, "method": args.method, "steps": args.steps, "device": device_name()}
    with tempfile.TemporaryDirectory() as folder:
        for name, learning in (("plain", None), ("learn", Learning(steps=args.steps))):
            out[name] = run(model, truth, settings, learning, args.labels, Path(folder))
    p, q = out["plain"], out["learn"]
    print(f"{args.graph}  method {args.method}  device {out['device']}  {p['labels']} labels")
    print(f"{'':8} {'median round':>13} {'max round':>10} {'learning':>9} {'compiled before/after':>22} "
          f"{'Rank-100%-T':>12} {'resume':>8} {'same':>5}")
    for name, r in (("plain", p), ("learn", q)):
        print(f"{name:8} {r['median_round_s'] * 1e3:11.1f} ms {r['max_round_s'] * 1e3:7.1f} ms "
              f"{r['median_learn_s'] * 1e3:6.1f} ms {str(r['compiled_before']):>10} -> "
              f"{str(r['compiled_after']):<9} {str(r['rank_100_t']):>12} {r['resume_s']:7.2f}s "
              f"{str(r['resume_same_marginals']):>5}")
    print(f"learn / plain median round: {q['median_round_s'] / p['median_round_s']:.2f}x")
    print(f"wrote {write_json('bench_triage_learn', out)}")


if __name__ == "__main__":
    main()
