"""The sharded engines on 1, 2, 4, ... devices: the sampler's worlds per second, PARALL's iteration.

    python benchmarks/bench_sharded.py --edges 5e6                  # hmmer size, every visible GPU
    python benchmarks/bench_sharded.py --edges 5e6 --edges 1e8      # and 100M edges
    XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu \\
        python benchmarks/bench_sharded.py --edges 2e4 --worlds 32768 --iters 5 --repeats 2   # smoke, CPU

For each size a synthetic Bingo-like network (`datalog.synthetic.generate(factor_edges=N)`,
`to_model(compress=False)`), and for each device count (powers of two up to the visible devices, or
`--devices`):

* the sampler (`sharded_sampling.ShardedSampler`; one device: `sampling.Sampler`), every count with the
  same batch of words (sized for one device's share of a run at the most devices): the median
  seconds of a run of `--worlds` worlds without labels, as worlds per second and the speed-up over
  one device; checked against one device's tallies (no labels, and
  one alarm labelled false) bit for bit;
* PARALL (`sharded_parall`): the median seconds per iteration of `--iters` iterations (tol 0), the
  same with the exchange of the cut's sums left out (the exchange's share is the difference), the
  variables on the cut; the one-device XLA engine's iteration beside it, and the marginals checked
  against it (largest difference of log-odds, relative).

JSON under $OUT (default ./out) as bench_sharded.json; a short table last.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from common import environment, timed, write_json


def _model(factor_edges: int):
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate

    return to_model(generate(factor_edges=factor_edges, seed=0), compress=False)


def _counts(requested, visible: int) -> list[int]:
    if requested:
        return [n for n in requested if n <= visible]
    out, n = [], 1
    while n <= visible:
        out.append(n)
        n *= 2
    return out


def _same(a, b) -> bool:
    return all(np.array_equal(np.asarray(getattr(a, k)), np.asarray(getattr(b, k)))
               for k in ("s1", "s2", "w1", "w2", "drawn", "positive"))


def bench_sampler(model, counts: list[int], worlds: int, repeats: int) -> list[dict]:
    from fastlbp.engines.sampling import Sampler
    from fastlbp.engines.sharded_sampling import ShardedSampler

    graph = model.graph
    # Every count draws batches of the same size, one device's share of a run at the most devices (and
    # within one device's memory budget): a run's batches are split among the devices, one device
    # drawing them all in turn. One plan for all (minutes at 10^8 edges).
    t0 = time.perf_counter()
    one = Sampler(graph, host=False, samples_hint=max(1, worlds // max(counts)))
    plan_s = time.perf_counter() - t0
    width = one.batch_words
    label = {int(model.alarms[0]): False} if len(model.alarms) else {0: False}
    rows, ref = [], None
    for n in counts:
        sampler = one if n == 1 else ShardedSampler.from_sampler(one, n)
        t0 = time.perf_counter()
        sampler.warm()
        compile_s = time.perf_counter() - t0
        plain = sampler(None, worlds, 1)
        labelled = sampler(label, worlds, 2)
        if ref is None:
            ref = (plain, labelled)
        seconds, times = timed(lambda s=sampler: s(None, worlds, 3).w1, repeats=repeats)
        rows.append({"devices": n, "batch_words": width, "worlds": plain.drawn, "plan_s": plan_s,
                     "compile_s": compile_s,
                     "seconds": seconds, "all_seconds": times, "worlds_per_s": plain.drawn / seconds,
                     "same_plain": _same(plain, ref[0]), "same_labelled": _same(labelled, ref[1])})
    for r in rows:
        r["speedup"] = r["worlds_per_s"] / rows[0]["worlds_per_s"]
    return rows


def bench_parall(model, counts: list[int], iters: int, repeats: int) -> list[dict]:
    import jax.numpy as jnp

    from fastlbp.core.settings import Settings
    from fastlbp.engines import loop, make_runner, sharded_parall

    graph = model.graph
    evidence = np.zeros(graph.num_vars)
    if len(model.alarms):
        evidence[int(model.alarms[0])] = -np.inf
    ctl = loop.controls(0.0, iters, 0.0)
    one = make_runner(graph, Settings(backend="xla", schedule="parall", devices=1))
    lean = loop.device_graph(graph, one.reads)
    msgs0, ev = loop.init(graph), jnp.asarray(evidence)
    base_s, _ = timed(lambda: one(lean, msgs0, ev, ctl).log_odds, repeats=repeats)
    ref = np.asarray(one(lean, msgs0, ev, ctl).log_odds)
    rows = []
    for n in counts:
        t0 = time.perf_counter()
        layout = sharded_parall.build(graph, n)
        build_s = time.perf_counter() - t0
        msgs, lev = layout.local_messages(np.zeros(graph.num_edges)), layout.local_evidence(evidence)
        seconds, _ = timed(lambda la=layout, m=msgs, e=lev: la.run_local(m, e, ctl)[1], repeats=repeats)
        # Without a cut there is nothing to exchange: the two programs are the same.
        alone = seconds if layout.parts.cut == 0 else timed(
            lambda la=layout, m=msgs, e=lev: la.run_local(m, e, ctl, exchange=False)[1], repeats=repeats)[0]
        lo = np.asarray(layout.gather(layout.run_local(msgs, lev, ctl)).log_odds)
        both = np.isfinite(lo) & np.isfinite(ref)
        rel = float(np.max(np.abs(lo[both] - ref[both]) / np.maximum(1.0, np.abs(ref[both])), initial=0.0))
        rows.append({"devices": n, "cut_variables": layout.parts.cut,
                     "edges_per_device": layout.parts.edges.tolist(), "build_s": build_s,
                     "iteration_s": seconds / iters, "no_exchange_iteration_s": alone / iters,
                     "exchange_share": max(0.0, 1.0 - alone / seconds),
                     "one_device_xla_iteration_s": base_s / iters, "max_rel_log_odds_diff": rel,
                     "same_infinities": bool(np.array_equal(np.isfinite(lo), np.isfinite(ref)))})
    for r in rows:
        r["speedup"] = rows[0]["iteration_s"] / r["iteration_s"]
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=float, action="append", default=[],
                        help="edges of a generated factor graph (repeatable; default 5e6: hmmer size)")
    parser.add_argument("--devices", type=int, nargs="+", default=None,
                        help="device counts (default: 1, 2, 4, ... up to every visible device)")
    parser.add_argument("--worlds", type=int, default=None,
                        help="worlds per timed sampler run (default 2^22 on a GPU, 2^16 on a CPU)")
    parser.add_argument("--iters", type=int, default=20, help="PARALL iterations per timed run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", choices=["sampler", "parall"], action="append", default=[])
    args = parser.parse_args(argv)
    gpu = jax.default_backend() == "gpu"
    worlds = args.worlds or (1 << 22 if gpu else 1 << 16)
    counts = _counts(args.devices, len(jax.devices()))
    sizes = [int(e) for e in (args.edges or [5e6])]
    results = []
    for size in sizes:
        t0 = time.perf_counter()
        model = _model(size)
        entry = {"factor_edges": model.graph.num_edges, "variables": model.graph.num_vars,
                 "generate_s": time.perf_counter() - t0}
        if "sampler" not in args.skip:
            entry["sampler"] = bench_sampler(model, counts, worlds, args.repeats)
        if "parall" not in args.skip:
            entry["parall"] = bench_parall(model, counts, args.iters, args.repeats)
        results.append(entry)
    payload = {"environment": environment(), "visible_devices": len(jax.devices()), "worlds": worlds,
               "iters": args.iters, "results": results}
    path = write_json("bench_sharded.json", payload)
    print(f"{len(jax.devices())} {jax.default_backend()} device(s); JSON: {path}")
    print(f"{'edges':>11} {'dev':>3} | {'worlds/s':>10} {'x':>5} {'same':>5} | {'iter ms':>9} {'x':>5} "
          f"{'exch':>5} {'cut':>9} {'1-dev ms':>9} {'rel diff':>8}")
    for entry in results:
        smp, par = entry.get("sampler", []), entry.get("parall", [])
        for i in range(max(len(smp), len(par))):
            s = smp[i] if i < len(smp) else None
            p = par[i] if i < len(par) else None
            n = (s or p)["devices"]
            left = (f"{s['worlds_per_s']:>10.3g} {s['speedup']:>5.2f} "
                    f"{str(s['same_plain'] and s['same_labelled']):>5}") if s else " " * 22
            right = (f"{p['iteration_s'] * 1e3:>9.3f} {p['speedup']:>5.2f} {p['exchange_share']:>5.0%} "
                     f"{p['cut_variables']:>9} {p['one_device_xla_iteration_s'] * 1e3:>9.3f} "
                     f"{p['max_rel_log_odds_diff']:>8.1e}") if p else ""
            print(f"{entry['factor_edges']:>11} {n:>3} | {left} | {right}")
    return {"results": results}


if __name__ == "__main__":
    main()
