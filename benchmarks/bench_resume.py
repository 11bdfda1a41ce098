"""`triage --resume`: what restoring a session costs, in rounds and seconds, as its labels grow.

    python benchmarks/bench_resume.py --graph data/avrora.json.gz --labels 50 --method lbp
    python benchmarks/bench_resume.py --graph data/avrora.json.gz --labels 50          # the default method

A triage session (`fastlbp.triage.Triage`, a session file in a temporary folder, or `--session`)
labels the top alarm by the graph's ground truth `--labels` times (every `--undo-every`-th action is
an undo followed by the same label again, so the journal holds undos too), and is closed. Then it is
resumed `--repeat` times, each in this process (the model loaded once, as the command line loads it
before it resumes): reported per resume are its seconds, the inference rounds it ran
(`Session.run` calls, counted by a wrapper) and whether it shows what the session showed at the
quit: the same labels, ranking and marginals (bit for bit, or the largest difference). With
`--cli` the command line's resume is timed too, in a fresh process (`fastlbp triage GRAPH --session S
--resume`, "q" on its input): loading and start-up included.

The script reads only the public API, so the same file measures an older checkout (run it with that
checkout first on PYTHONPATH) for a before/after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.environ.get("FASTLBP_ROOT", str(Path(__file__).resolve().parents[1])))

from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.inference import session as session_module  # noqa: E402
from fastlbp.inference.simulate import graph_truth  # noqa: E402
from fastlbp.io.loading import load  # noqa: E402
from fastlbp.triage import Triage  # noqa: E402

RUNS = [0]
_run = session_module.Session.run


def _counted(self, *args, **kwargs):
    RUNS[0] += 1
    return _run(self, *args, **kwargs)


session_module.Session.run = _counted


def make(model, truth: set[int], settings: Settings, path: Path, labels: int, undo_every: int):
    """Labels `labels` alarms (top first, by the truth); returns (state at the quit, round seconds)."""
    t = Triage.open(model, path, settings=settings)
    seconds = []
    done = 0
    action = 0
    while done < labels and t.current is not None:
        action += 1
        var = t.current
        out = t.label(var in truth)
        assert out.accepted, out.message
        seconds.append(out.round.seconds)
        done += 1
        if undo_every and action % undo_every == 0 and done < labels:
            assert t.undo().accepted
            assert t.label(var in truth, var).accepted
    state = (dict(t.labels), t.ranking.copy(), t.marginals.copy())
    t.close()
    return state, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default="data/avrora.json.gz")
    ap.add_argument("--method", default="auto", choices=["auto", "lbp", "exact", "sample"])
    ap.add_argument("--labels", type=int, default=50)
    ap.add_argument("--undo-every", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--session", default=None, help="keep the session here (default: a temporary folder)")
    ap.add_argument("--cli", action="store_true", help="also time the command line's resume")
    ap.add_argument("--resume-only", action="store_true",
                    help="resume the --session given (made by an earlier run, or another checkout) without "
                         "making it: for a before/after on one session file")
    args = ap.parse_args()

    model = load(args.graph)
    truth = graph_truth(model)
    if truth is None:
        sys.exit(f"{args.graph} records no ground truth")
    settings = Settings(method=args.method).interactive()  # as `fastlbp triage` runs its rounds
    with tempfile.TemporaryDirectory() as folder:
        path = Path(args.session) if args.session else Path(folder) / "s.triage.db"
        if args.resume_only:
            labels = ranking = marginals = None
        else:
            path.unlink(missing_ok=True)
            start = time.perf_counter()
            (labels, ranking, marginals), seconds = make(model, truth, settings, path, args.labels,
                                                         args.undo_every)
            made = time.perf_counter() - start
            print(f"{args.graph}  --method {args.method}  {len(labels)} labels  session made in {made:.1f} s "
                  f"(median round {np.median(seconds):.3f} s)", flush=True)
        for i in range(args.repeat):
            RUNS[0] = 0
            start = time.perf_counter()
            r = Triage.open(model, path, resume=True, settings=settings)
            took = time.perf_counter() - start
            if labels is None:
                print(f"resume {i + 1}: {took:.2f} s, {RUNS[0]} rounds, {len(r.labels)} labels", flush=True)
                r.close()
                continue
            same_labels = r.labels == labels
            same_ranking = np.array_equal(r.ranking, ranking)
            diff = float(np.max(np.abs(r.marginals - marginals)))
            print(f"resume {i + 1}: {took:.2f} s, {RUNS[0]} rounds, labels equal {same_labels}, ranking "
                  f"equal {same_ranking}, largest marginal difference {diff:.3g}", flush=True)
            r.close()
        if args.cli:
            env = {**os.environ, "PYTHONPATH": sys.path[0]}
            cmd = [sys.executable, "-m", "fastlbp", "triage", args.graph, "--session", str(path), "--resume"]
            start = time.perf_counter()
            proc = subprocess.run(cmd, input="q\n", text=True, capture_output=True, env=env)
            took = time.perf_counter() - start
            print(f"command line: {' '.join(cmd[2:])}: {took:.2f} s, exit {proc.returncode}", flush=True)
            if proc.returncode:
                print(proc.stderr[-2000:])


if __name__ == "__main__":
    main()
