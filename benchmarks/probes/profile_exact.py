"""Where a repeat call of exact inference spends its time (n x n noisy-OR grid, 2 labels).

    PYTHONPATH=. python benchmarks/probes/profile_exact.py --n 12 [--host-below N] [--repeats 20]

Prints the stages of one repeat call (plan lookup and inputs, host forward,
device: upload + kernel rows + download, host backward and marginals), the
number of device kernel calls and host buckets, and a cProfile of the repeats.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # exact_support: arena_copies
from bench_exact import grid  # noqa: E402

from fastlbp.core.graph import from_factors  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines.exact import eliminate, engine_for, exact_marginals  # noqa: E402

# float64 as fastlbp's entry points run it; this script also calls engines and jnp directly
jax.config.update("jax_enable_x64", True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--host-below", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    n = args.n
    graph = from_factors(grid(n), n * n)
    labels = {n * n - 1: True, n // 2: False}
    settings = Settings(exact_memory=None)
    t = time.perf_counter()
    exact_marginals(graph, labels, settings, host_below=args.host_below)
    first = time.perf_counter() - t
    t = time.perf_counter()
    exact_marginals(graph, {**labels, n * n // 2 + n // 2: True}, settings, host_below=args.host_below)
    print(f"new label set {time.perf_counter() - t:.3f} s")
    print(f"first call {first:.3f} s on {jax.devices()[0]}")
    stages = {"device": []}
    real_device = eliminate._device

    def timed_device(*a):
        t0 = time.perf_counter()
        out = real_device(*a)
        stages["device"].append(time.perf_counter() - t0)
        return out

    eliminate._device = timed_device
    totals = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        m = exact_marginals(graph, labels, settings, host_below=args.host_below)
        totals.append(time.perf_counter() - t)
    eng = engine_for(graph, args.host_below)
    prog = next(e[1] for e in eng._plans.values() if e[1] is not None)
    print(f"repeat call median {1e3 * statistics.median(totals):.2f} ms; device part "
          f"{1e3 * statistics.median(stages['device'] or [0]):.2f} ms; plan_seconds "
          f"{1e3 * m.info['plan_seconds']:.2f} ms")
    print(f"buckets {len(prog.plan.order)}, device buckets {prog.device_buckets}, kernel calls "
          f"{len(prog.calls)} ({sorted(set(prog.calls))}), host forward {len(prog.host_forward)}, "
          f"host backward {len(prog.host_backward)}, host marginal groups {len(prog.host_marginals)}, "
          f"inputs {len(prog.src)}, largest {m.info['largest_entries']}")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(args.repeats):
        exact_marginals(graph, labels, settings, host_below=args.host_below)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(12)
    from exact_support import arena_copies

    print("whole-arena copies per kernel:", arena_copies(size=2**20, chunk=2**14))
    per_row(prog, eng.arena)


def per_row(prog, arena):
    """Each row as its own kernel call, timed to completion, grouped by (kind, chunk, chunks of the row)."""
    import collections

    from fastlbp.engines.exact import kernels
    dev, _, _, _ = arena.descriptors(prog)
    luts = kernels.byte_tables()
    buf = arena.buffer
    groups = collections.defaultdict(list)
    for rep in range(3):
        pc = jax.numpy.zeros((), dev.dtype)
        for kind, chunk, nchunks in prog.calls:
            t0 = time.perf_counter()
            buf, pc = getattr(kernels, kind)(buf, dev, pc, luts, chunk=chunk, nchunks=nchunks)
            buf.block_until_ready()
            if rep:
                groups[(kind, chunk, nchunks)].append(time.perf_counter() - t0)
    arena.buffer = buf
    t0 = time.perf_counter()
    for _ in range(10):
        pc = jax.numpy.zeros((), dev.dtype)
        for kind, chunk, nchunks in prog.calls:
            buf, pc = getattr(kernels, kind)(buf, dev, pc, luts, chunk=chunk, nchunks=nchunks)
    buf.block_until_ready()
    arena.buffer = buf
    print(f"rows alone {1e3 * (time.perf_counter() - t0) / 10:.2f} ms for {len(prog.calls)} rows; "
          f"kernels compiled {kernels.compiled()}")
    for key, ts in sorted(groups.items()):
        print(f"  {key}: {len(ts) // 2} rows, median {1e6 * statistics.median(ts):.0f} us")
    np.set_printoptions(precision=3)


if __name__ == "__main__":
    main()
