"""Soufflé's own test suite through `fastlbp ground`: equal / refused (by construct) / different / crashed.

    python benchmarks/souffle_suite.py                       # ../shared/data/souffle-suite, 2 jobs
    python benchmarks/souffle_suite.py --jobs 4 --show refused --only evaluation/arithm

Each case is grounded as written in its own interpreter (`tests/souffle_conformance.py`); a case is equal when
every `.output` relation's tuples in the derivation graph are exactly Soufflé's expected rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the conformance runner: test code
import souffle_conformance as conformance  # noqa: E402

DEFAULT_SUITE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "souffle-suite"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("suite", nargs="?", default=str(DEFAULT_SUITE))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    ap.add_argument("--only", nargs="*", help="case ids")
    ap.add_argument("--max-rule-instances", type=int, default=5_000_000)
    ap.add_argument("--show", nargs="*", default=["different", "crashed", "timeout"],
                    help="statuses whose cases are listed with their message")
    ap.add_argument("--json", help="write every case's result here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    results = conformance.run_suite(args.suite, args.jobs, args.timeout, args.only, args.max_rule_instances)
    wall = time.perf_counter() - t0
    for r in results:
        if r.status in args.show:
            print(f"{r.status:9s} {r.id}: {r.detail.strip().splitlines()[-1][:300] if r.detail else ''}")
    s = conformance.summarize(results)
    print(f"\n{s['cases']} cases in {wall:.0f} s ({args.jobs} jobs): equal {s['equal']}, refused "
          f"{s['refused']}, different {s['different']}, crashed {s['crashed']}, timeout {s['timeout']}")
    for construct, n in s["refused_by"].items():
        print(f"  refused by {construct}: {n}")
    slow = sorted(results, key=lambda r: -r.seconds)[:5]
    print("slowest: " + ", ".join(f"{r.id} {r.seconds:.1f} s" for r in slow))
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=1))


if __name__ == "__main__":
    main()
