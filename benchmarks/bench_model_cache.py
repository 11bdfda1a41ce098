"""The model cache: a fresh load against a load from the cache, in one process.

    python benchmarks/bench_model_cache.py                         # data/ftp.json.gz, data/avrora.json.gz
    python benchmarks/bench_model_cache.py data/weblech.json --repeats 9
    python benchmarks/bench_model_cache.py --root /tmp/before      # another tree: git archive REV | tar -x

For each graph: "cold" is `fastlbp.io.loading.load(path)` without a cache
(parse, validation, cycle elimination, compression, the factor graph's
arrays); "store" the first load with a fresh cache folder (a miss: the cold
load, then the entry written); "warm" a load that the entry answers, and its
two parts: the key (`lookup_key`: the input's sha256, the code digest) and the
entry's read (`read`: open, check the MAC, build the model). Times are the
median (and the fastest) of `--repeats` runs; warm/cold is the ratio to
compare between versions, since the 2-core machine this runs on is shared.
Results go to `$OUT/bench_model_cache.json` (or `--out DIR`); a table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, repeats: int) -> tuple[float, float]:
    """(median, fastest) wall seconds of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def measure(path: Path, repeats: int) -> dict:
    from fastlbp.io import loading, model_cache

    options = {"cycles": "cycles", "compress": True, "max_decompressed": None}
    cold = timed(lambda: loading.load(path), max(1, repeats // 3))
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        store = timed(lambda: loading.load(path, cache_dir=cache), 1)
        entries = [p for p in model_cache.models_dir(cache).iterdir() if p.name != "key"]
        size = sum(p.stat().st_size for p in entries)
        warm = timed(lambda: loading.load(path, cache_dir=cache), repeats)
        key = model_cache.lookup_key(path, "json", options)
        keying = timed(lambda: model_cache.lookup_key(path, "json", options), repeats)
        reading = timed(lambda: model_cache.read(cache, key), repeats)
        assert model_cache.read(cache, key) is not None, "the entry was not read back"
    return {"graph": str(path), "cold": cold, "store": store, "warm": warm, "key": keying,
            "read": reading, "entry_bytes": size, "warm_over_cold": warm[0] / cold[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graphs", nargs="*", default=["data/ftp.json.gz", "data/avrora.json.gz"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree to measure")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    args = parser.parse_args()
    sys.path.insert(0, str(args.root))
    rows = [measure((args.root / g) if not Path(g).is_absolute() else Path(g), args.repeats)
            for g in args.graphs]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_model_cache.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{'graph':24} {'cold':>13} {'store':>7} {'warm':>13} {'key':>13} {'read':>13} {'entry':>8} "
          "warm/cold")
    for r in rows:
        def pair(t):
            return f"{t[0]:6.3f}/{t[1]:6.3f}"
        print(f"{Path(r['graph']).name:24} {pair(r['cold'])} {r['store'][0]:7.3f} {pair(r['warm'])} "
              f"{pair(r['key'])} {pair(r['read'])} {r['entry_bytes'] / 1e6:6.1f}MB {r['warm_over_cold']:.3f}")


if __name__ == "__main__":
    main()
