"""The model cache under issue 41's race: is a model ever served for bytes it was not built from? (item 1)

Two derivation graphs of the same size, A and B (data/race.json, with rule Rrace's probability 0.9 and
0.3), are swapped over `g.json` by a shell loop that writes each atomically, as an analysis writing its
output would:

    while :; do cp A .a && mv .a g.json; cp B .b && mv .b g.json; done

While it runs, `fastlbp info g.json` runs `--info-runs` times (each a cached load that may hash one file
and parse the other). The loop is stopped, A or B (at random) is put in place the same way, and
`fastlbp marginals g.json -f json` must print what `--no-cache` prints for that file; a round where it
does not served a wrong model. The cache folder is kept across rounds, so a wrong entry stays found.

    python benchmarks/reliability_cache_race.py --rounds 200 --seed 1 --out out/cache_race.json

Prints the rounds, the wrong models served and the time; the bound is 0. Before the fix (the file's
status checked, not the bytes read) issue 41 saw 13 wrong in 40 rounds; the race needs a freed inode
number reused within one tick of the file system's clock, so how often it strikes depends on timing.
Measured 2026-11-29 on the 2-core CPU: 200 rounds, 400 `info` runs while swapping, 0 wrong, 13 min;
the code before: 0 wrong in 100 rounds here (tests/test_model_cache.py makes the status equal and shows
the old code serving the other file's model). Linux or macOS (a shell, `cp`, `mv`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RACE = ROOT / "data" / "race.json"
SWAP = 'while :; do cp A.json .a && mv .a g.json; cp B.json .b && mv .b g.json; done'


def _fastlbp(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "FASTLBP_CACHE": str(cache), "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "fastlbp", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _marginals(cwd: Path, cache: Path, *extra: str) -> dict:
    done = _fastlbp(["marginals", "g.json", "-f", "json", *extra], cwd, cache)
    if done.returncode != 0:
        raise RuntimeError(f"fastlbp marginals exited {done.returncode}: {done.stderr}")
    return json.loads(done.stdout)


def _place(cwd: Path, which: str) -> None:
    subprocess.run(["sh", "-c", f"cp {which}.json .p && mv .p g.json"], cwd=cwd, check=True)


def run(rounds: int, workdir: Path, *, info_runs: int = 2, seed: int = 1, report=None) -> dict:
    """Runs `rounds` rounds in `workdir`; returns {"rounds", "wrong", "disturbed" (rounds whose file
    changed while checked, not counted), "info_runs", "seconds"}.

    `report(done, wrong)`, when given, hears the counts after every round."""
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    text = RACE.read_text()
    slow = text.replace('"Rrace": {"probability": 0.9}', '"Rrace": {"probability": 0.3}')
    assert slow != text and len(slow) == len(text)
    (workdir / "A.json").write_text(text)
    (workdir / "B.json").write_text(slow)
    cache = workdir / "cache"
    expected = {}
    for which in "AB":
        _place(workdir, which)
        expected[which] = _marginals(workdir, cache, "--no-cache")
    assert expected["A"] != expected["B"]
    files = {which: (workdir / f"{which}.json").read_bytes() for which in "AB"}

    def in_place() -> str | None:
        data = (workdir / "g.json").read_bytes()
        return next((which for which, held in files.items() if held == data), None)

    wrong = disturbed = 0
    start = time.perf_counter()
    for done in range(rounds):
        # Its own process group: killing it kills the `cp` or `mv` it is running too (killing the shell
        # alone left that one to land after the file was put in place: a round that checked A's
        # answers against B's file, as a wrong model would).
        swapper = subprocess.Popen(["sh", "-c", SWAP], cwd=workdir, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            for _ in range(info_runs):
                _fastlbp(["info", "g.json"], workdir, cache)
        finally:
            os.killpg(swapper.pid, signal.SIGKILL)
            swapper.wait()
        which = rng.choice("AB")
        for _ in range(100):  # until it stays: a rename already under way may still land
            _place(workdir, which)
            time.sleep(0.05)
            if in_place() == which:
                break
        got = _marginals(workdir, cache)
        if in_place() != which:
            disturbed += 1  # the file changed under the check: not counted either way
        else:
            wrong += got != expected[which]
        if report is not None:
            report(done + 1, wrong)
    return {"rounds": rounds, "wrong": wrong, "disturbed": disturbed, "info_runs": info_runs * rounds,
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--info-runs", type=int, default=2,
                        help="fastlbp info runs per round, while swapping")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="also write the result as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fastlbp-cache-race-") as tmp:
        def report(done, wrong):
            if done % 10 == 0:
                print(f"{done} rounds, {wrong} wrong", flush=True)

        result = run(args.rounds, Path(tmp), info_runs=args.info_runs, seed=args.seed, report=report)
    print(f"rounds {result['rounds']}, fastlbp info runs while swapping {result['info_runs']}, "
          f"wrong models served {result['wrong']}, rounds disturbed {result['disturbed']}, "
          f"{result['seconds']} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
