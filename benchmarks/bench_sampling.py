"""Throughput of the bit-packed sampler (`fastlbp.engines.sampling`) against the memory floor.

    python benchmarks/bench_sampling.py                   # 0.05M, 0.5M, 5M factor-graph edges
    python benchmarks/bench_sampling.py --sizes 50000 --worlds 1048576
    python benchmarks/bench_sampling.py --sizes 500000 --head-digits 8 12 16   # the coins' head
    python benchmarks/bench_sampling.py --sizes 500000 --widths pow2 2,4,16,64,256,1024,4096   # groups

For each size: a synthetic Bingo-like graph (`datalog.synthetic.generate(factor_edges=N)`,
`to_model(compress=False)`), the plan (host), the first call (compilation included), then the
median of timed calls drawing `--worlds` worlds with no labels, and the same batches timed stage by
stage (`Sampler.stages`: the coin words, then the propagation over the levels; the rest of a call is
the tally of accepted worlds; "kernels" counts the fusions of the propagation's compiled program, about
one launch each). Figures: worlds per second,
edge-worlds per second (factor-graph edges x worlds / s) and the memory floor: the bytes a batch
must touch (each state row written once and read once per body entry that reads it, each coin
word written and read once, 4 bytes per word of 32 worlds) over the device's copy bandwidth.
JSON under $OUT (default ./out) as bench_sampling.json; a short table last.
"""

from __future__ import annotations

import argparse
import time

import jax
from common import copy_bandwidth, environment, write_json

from fastlbp.engines.sampling_coins import HEAD_DIGITS


def dyadic(graph, digits: int):
    """The graph with p1, p2 rounded to `digits` binary digits (coins of at most `digits` random words)."""
    import dataclasses

    import numpy as np

    def r(p):
        return np.round(np.asarray(p) * 2.0**digits) / 2.0**digits

    return dataclasses.replace(graph, p1=r(graph.p1), p2=r(graph.p2))


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def stage_seconds(sampler, worlds: int, repeats: int) -> dict:
    """Seconds of the coin words and of the propagation for the batches of one call of `worlds` worlds."""
    import jax.numpy as jnp

    from fastlbp.engines.sampling import WORD_BITS

    words = -(-worlds // WORD_BITS)
    width = min(sampler.batch_words, 1 << max(0, (words - 1).bit_length()))
    batches = -(-words // width)
    coins_fn, propagate_fn = sampler.stages(width)
    key = jnp.array([1, 2], jnp.uint32)
    first = jnp.uint32(0)
    coins_c = coins_fn.lower(sampler.arrays, key, first).compile()
    coins = jax.block_until_ready(coins_c(sampler.arrays, key, first))
    propagate_c = propagate_fn.lower(sampler.arrays, coins).compile()
    entry = propagate_c.as_text().split("\nENTRY", 1)[-1]
    kernels = sum(" fusion(" in line or " custom-call(" in line for line in entry.splitlines())
    coin_s = _median_seconds(lambda: coins_c(sampler.arrays, key, first), repeats)
    propagate_s = _median_seconds(lambda: propagate_c(sampler.arrays, coins), repeats)
    return {"batches": batches, "batch_width": width, "coins_s": coin_s * batches,
            "propagate_s": propagate_s * batches, "propagate_kernels": kernels}


def bench_one(factor_edges: int, worlds: int, repeats: int, bandwidth: float, digits: int | None,
              head_digits: int, widths: tuple[int, ...] | None) -> dict:
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate
    from fastlbp.engines.sampling import WORD_BITS, Sampler

    t0 = time.perf_counter()
    model = to_model(generate(factor_edges=factor_edges, seed=0), compress=False)
    gen_s = time.perf_counter() - t0
    graph = model.graph if digits is None else dyadic(model.graph, digits)
    t0 = time.perf_counter()
    sampler = Sampler(graph, head_digits=head_digits, widths=widths)
    plan_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sampler(None, worlds, 0)
    first_s = time.perf_counter() - t0
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        sampler(None, worlds, r + 1)
        times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    stages = stage_seconds(sampler, worlds, repeats)
    plan = sampler.plan
    words = -(-worlds // WORD_BITS)
    body = graph.num_edges - graph.num_factors  # body entries: one read of a state row each
    # Per word of 32 worlds: V state rows written, `body` rows read, coins written and read once.
    floor_bytes = 4 * words * (graph.num_vars + body + 2 * plan.coins)
    floor_s = floor_bytes / bandwidth
    return {
        "factor_edges": graph.num_edges, "variables": graph.num_vars, "factors": graph.num_factors,
        "levels": len(plan.levels), "groups": sum(len(lv) for lv in plan.levels), "coins": plan.coins,
        "padded_reads_per_word": plan.edges, "digits": digits, "head_digits": head_digits,
        "widths": "pow2" if widths is None else ",".join(map(str, widths)),
        "worlds": words * WORD_BITS, "batch_words": sampler.batch_words,
        "generate_s": gen_s, "plan_s": plan_s, "first_call_s": first_s, "seconds": med, "all_seconds": times,
        **stages,
        "worlds_per_s": words * WORD_BITS / med,
        "edge_worlds_per_s": graph.num_edges * words * WORD_BITS / med,
        "floor_bytes": floor_bytes, "floor_s": floor_s, "of_floor": floor_s / med,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 500_000, 5_000_000])
    parser.add_argument("--worlds", type=int, default=None,
                        help="worlds per timed call (default 2^20 on a GPU, 2^16 on a CPU)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dyadic", type=int, default=None, metavar="K",
                        help="round every p to K binary digits first (a different model: measures what the "
                        "exact coins of 53 digits cost)")
    parser.add_argument("--head-digits", type=int, nargs="+", default=[HEAD_DIGITS], metavar="K",
                        help=f"random words for every coin word before its tail (default {HEAD_DIGITS})")
    parser.add_argument("--widths", nargs="+", default=["pow2"], metavar="W",
                        help="padded body widths of the level groups: pow2 (default) or a list such as "
                        "2,4,16,64,256,1024,4096 (fewer groups, more padding)")
    args = parser.parse_args(argv)
    width_sets = [None if w == "pow2" else tuple(int(x) for x in w.split(",")) for w in args.widths]
    gpu = jax.default_backend() == "gpu"
    worlds = args.worlds or (1 << 20 if gpu else 1 << 16)
    bandwidth = copy_bandwidth(2 << 30 if gpu else 1 << 28)
    rows = [bench_one(n, worlds, args.repeats, bandwidth, args.dyadic, k, w) for n in args.sizes
            for k in args.head_digits for w in width_sets]
    payload = {"environment": environment(), "copy_bandwidth_bytes_per_s": bandwidth, "dyadic": args.dyadic,
               "rows": rows}
    name = "bench_sampling.json" if args.dyadic is None else f"bench_sampling_dyadic{args.dyadic}.json"
    path = write_json(name, payload)
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s; JSON: {path}")
    print(f"{'edges':>9} {'vars':>8} {'levels':>6} {'groups':>6} {'kernels':>7} {'coins':>8} {'head':>4} "
          f"{'worlds':>9} {'first s':>8} {'s':>8} {'coins s':>8} {'prop s':>8} {'worlds/s':>10} "
          f"{'edge-worlds/s':>13} {'floor s':>8} {'of floor':>8}  widths")
    for r in rows:
        print(f"{r['factor_edges']:>9} {r['variables']:>8} {r['levels']:>6} {r['groups']:>6} "
              f"{r['propagate_kernels']:>7} {r['coins']:>8} {r['head_digits']:>4} {r['worlds']:>9} "
              f"{r['first_call_s']:>8.3f} {r['seconds']:>8.4f} "
              f"{r['coins_s']:>8.4f} "
              f"{r['propagate_s']:>8.4f} {r['worlds_per_s']:>10.3g} {r['edge_worlds_per_s']:>13.3g} "
              f"{r['floor_s']:>8.4f} {r['of_floor']:>8.1%}  {r['widths']}")
    return payload


if __name__ == "__main__":
    main()
