"""Start-up: wall time of the commands that run no inference, and whether they import JAX.

    python benchmarks/bench_startup.py                  # median of 5 runs per command
    python benchmarks/bench_startup.py --repeats 9 --out /tmp/startup
    python benchmarks/bench_startup.py --root /tmp/before    # another source tree (git archive REV | tar -x)

Each run is a fresh subprocess (`python -m fastlbp ...`, or `python -c ...` for
the imports), its output discarded, so the interpreter's start, the imports and
the command are all in the wall time. `import jax` alone is the reference: the
commands below it should not pay it (`tests/test_startup_imports.py` checks
that they do not import JAX at all). Whether a command imported JAX is read
from a second run with `-X importtime`. Results go to `$OUT/bench_startup.json`
(or `--out DIR`); a table is printed.

Needs no GPU; on a GPU machine `import jax` also starts CUDA only when a device
is first used, so the table is the same kind of number there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commands(root: Path = ROOT) -> list[tuple[str, list[str]]]:
    """(name, argv) of each measured command, run in `root`; graphs that are not there are left out."""
    fl = [sys.executable, "-m", "fastlbp"]
    cmds = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("import jax", [sys.executable, "-c", "import jax"]),
        ("import fastlbp", [sys.executable, "-c", "import fastlbp"]),
        ("fastlbp --help", fl + ["--help"]),
        ("fastlbp --version", fl + ["--version"]),
        ("fastlbp rank --help", fl + ["rank", "--help"]),
    ]
    for graph in ("data/weblech.json", "data/ftp.json.gz"):
        if (root / graph).exists():
            cmds.append((f"fastlbp info {graph}", fl + ["info", graph]))
    return cmds


def wall(argv: list[str], env: dict, root: Path = ROOT) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def imports_jax(argv: list[str], env: dict, root: Path = ROOT) -> bool:
    """Whether the command imports `jax` (from `python -X importtime`'s report on stderr)."""
    timed = [argv[0], "-X", "importtime", *argv[1:]]
    err = subprocess.run(timed, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, check=True).stderr
    return any(line.rsplit("|", 1)[-1].strip() == "jax" for line in err.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the source tree to run in (`python -m fastlbp` imports its fastlbp)")
    args = parser.parse_args()
    root = args.root.resolve()
    # No compilation or model cache is written by these commands; keep it that way for the ones that would.
    env = dict(os.environ, FASTLBP_CACHE="off")
    rows = []
    for name, argv in commands(root):
        wall(argv, env, root)  # warm the file system cache (the .pyc files)
        times = [wall(argv, env, root) for _ in range(args.repeats)]
        rows.append({"command": name, "median_s": statistics.median(times), "min_s": min(times),
                     "times_s": times, "imports_jax": imports_jax(argv, env, root)})
        print(f"{name:38s} median {rows[-1]['median_s']:.3f} s  min {rows[-1]['min_s']:.3f} s  "
              f"jax {'yes' if rows[-1]['imports_jax'] else 'no'}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_startup.json").write_text(json.dumps(
        {"root": str(root), "repeats": args.repeats, "python": sys.version.split()[0], "cpus": os.cpu_count(),
         "rows": rows},
        indent=2) + "\n")


if __name__ == "__main__":
    main()
