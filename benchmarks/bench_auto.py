"""What a user meets by default: `fastlbp rank` under --method auto against --method lbp, and a full
`simulate --method sample` (importance sampling under every label of the run).

    python benchmarks/bench_auto.py                          # weblech, avrora: rank auto vs lbp, warm caches
    python benchmarks/bench_auto.py --simulate data/ftp.json.gz --simulate-timeout 480

Each `rank` runs as its own process (the user's wall time: JAX's start, loading through the model
cache, the method, the output), once to fill the caches and then `--repeats` times warm; the table
gives the fastest warm run. `--simulate` runs `fastlbp simulate GRAPH --method sample -f json` and
reports its rounds. Details go to $OUT (default ./out) as JSON; a short table is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run(args: list[str], timeout: float) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fastlbp", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return time.perf_counter() - t0, proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", nargs="*", default=["data/weblech.json", "data/avrora.json.gz"])
    ap.add_argument("--methods", nargs="*", default=["auto", "lbp"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--simulate", nargs="*", default=[])
    ap.add_argument("--simulate-timeout", type=float, default=480)
    ap.add_argument("--max-rounds", type=int, default=None)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    rows, details = [], {"rank": [], "simulate": []}
    for graph in args.graphs:
        for method in args.methods:
            cmd = ["rank", graph, "--top", "5", "--method", method, "-f", "json"]
            cold, proc = run(cmd, 900)
            warm = []
            for _ in range(args.repeats):
                seconds, proc = run(cmd, 900)
                warm.append(seconds)
            doc = json.loads(proc.stdout) if proc.returncode == 0 else {}
            rec = {"graph": graph, "method": method, "cold_s": cold, "warm_s": warm, "rc": proc.returncode,
                   "chosen": doc.get("method"), "how": doc.get("how"), "reason": doc.get("reason"),
                   "top": doc.get("alarms", [])[:5], "stderr": proc.stderr[-2000:]}
            details["rank"].append(rec)
            how = (rec["how"] or "".join(proc.stderr.strip().splitlines()[-1:]))[:90]
            rows.append(f"| rank {Path(graph).name} | {method} -> {rec['chosen']} | {cold:.1f} | "
                        f"{min(warm):.1f} | {how} |")
            print(rows[-1], flush=True)
    for graph in args.simulate:
        cmd = ["simulate", graph, "--method", "sample", "-f", "json"]
        if args.max_rounds:
            cmd += ["--max-rounds", str(args.max_rounds)]
        try:
            seconds, proc = run(cmd, args.simulate_timeout)
            doc = json.loads(proc.stdout) if proc.returncode == 0 else {}
            rec = {"graph": graph, "seconds": seconds, "rc": proc.returncode, "result": doc,
                   "stderr": proc.stderr[-4000:]}
        except subprocess.TimeoutExpired as err:
            rec = {"graph": graph, "seconds": args.simulate_timeout, "rc": "timeout",
                   "stderr": (err.stderr or b"")[-4000:].decode(errors="replace") if isinstance(
                       err.stderr, bytes) else str(err.stderr)[-4000:]}
            doc = {}
        details["simulate"].append(rec)
        keys = ("rank_100_t", "rank_90_t", "inversions", "auc", "rounds", "total_time_s", "average_time_s",
                "complete")
        rows.append(f"| simulate {Path(graph).name} sample | rc {rec['rc']} | {rec['seconds']:.0f} s | "
                    + ", ".join(f"{k} {doc.get(k)}" for k in keys if k in doc) + " |")
        print(rows[-1], flush=True)
    (out / "bench_auto.json").write_text(json.dumps(details, indent=1, default=str))
    print("\n| run | method | cold s | warm s | how |\n| --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
