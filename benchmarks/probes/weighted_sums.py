"""The labelled rounds' weighted row sums (`sampling_weights._weighted_sums`) by table width, on random
state words of a graph's size: which `TABLE_WORDS` a platform should take.

    python benchmarks/probes/weighted_sums.py --rows 68701 --words 4096        # ftp's rows, a GPU batch
    python benchmarks/probes/weighted_sums.py --rows 21103 --words 32 --tables 0 8 16 32

Prints one line per table width (0: bits unpacked and selected) and, last, the fastest width.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from fastlbp.engines.sampling_weights import _weighted_sums  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=68701)
    ap.add_argument("--words", type=int, default=4096)
    ap.add_argument("--tables", type=int, nargs="*", default=[0, 4, 8, 16, 32, 64, 256, 1 << 20])
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    state = jnp.asarray(rng.integers(0, 2**32, size=(args.rows, args.words), dtype=np.uint32))
    omega = jnp.asarray(rng.random(32 * args.words))
    times, ref = {}, None
    for tw in args.tables:
        fn = jax.jit(lambda s, o, tw=tw: _weighted_sums(s, o, o * o, tw))
        out = np.asarray(fn(state, omega)[0])
        ref = out if ref is None else ref
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(state, omega))
            best = min(best, time.perf_counter() - t0)
        times[tw] = best
        print(f"table words {tw}: {best * 1e3:.2f} ms, largest relative difference "
              f"{np.abs(out - ref).max() / np.abs(ref).max():.1e}", flush=True)
    print(min(times, key=times.get))


if __name__ == "__main__":
    main()
