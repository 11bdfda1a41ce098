"""What a user meets by default in an interactive session: the default method's rounds, cold and warm.

    python benchmarks/bench_interactive.py                                  # avrora, ftp (data/)
    python benchmarks/bench_interactive.py --graphs data/avrora.json.gz --rounds 40 --cli

For each graph, in one process:

1. the device sampler's program: plan, build and compile seconds, steps and shapes (one compile per
   graph: `fastlbp.engines.sampling_program`);
2. its speed against the byte floor: an unlabelled and a labelled draw of `--worlds` worlds against
   `sampling_program.byte_floor` at the copy bandwidth measured in the same run (a device-to-device
   copy of 2 GiB);
3. a session under the default method (`Session(model)`, `method="auto"`): the first round (the
   method's choice, the compile, the first ranking), then `--rounds` rounds each labelling the top
   unlabelled alarm with the graph's ground truth, as `simulate` does; per round its seconds, method,
   worlds, effective samples and whether it tilted; compiles after the first round counted by JAX's
   monitoring events;
4. with `--cli`, `fastlbp rank GRAPH` and `fastlbp simulate GRAPH --max-rounds N` as fresh processes
   (the user's wall time, JAX's persistent compilation cache cold, then warm).

A short table is printed last; the details go to $OUT/interactive.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.common import environment, out_dir  # noqa: E402

COMPILES = collections.Counter()  # compiles on the session's thread
BACKGROUND = collections.Counter()  # compiles in the sessions' warm-up thread (LBP for a fallback)


def _count(event, duration, fun_name=None, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        background = threading.current_thread().name.startswith("fastlbp-warm")
        (BACKGROUND if background else COMPILES)[fun_name] += 1


def copy_bandwidth(bytes_: int = 1 << 31) -> float:
    """Bytes per second of a device-to-device copy (read + write counted), best of 5."""
    x = jnp.zeros(bytes_ // 4, jnp.uint32)
    f = jax.jit(lambda a: a + np.uint32(1))
    jax.block_until_ready(f(x))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        best = min(best, time.perf_counter() - t0)
    return 2 * bytes_ / best


def timed(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def sampler_figures(model, worlds: int, bandwidth: float) -> dict:
    from fastlbp.engines import sampling, sampling_program

    t0 = time.perf_counter()
    sampler = sampling.Sampler(model.graph, model.var_names, host=False, samples_hint=worlds)
    plan_s = time.perf_counter() - t0
    sampler.reserve(model.alarms)
    t0 = time.perf_counter()
    program = sampler.program
    build_s = time.perf_counter() - t0
    sampler.warm()
    out = {"plan_s": plan_s, "build_s": build_s, "compile_s": sampler.compile_seconds,
           "steps": program.steps, "shapes": len(program.shapes), "batch_words": sampler.batch_words,
           "edges": sampler.plan.edges, "variables": sampler.plan.num_vars}
    alarm = int(model.alarms[0])
    truth = bool(model.truth.get(alarm, False)) if getattr(model, "truth", None) else False
    big = 10 * worlds  # throughput: the per-step costs spread over ten times the worlds
    for name, labels, n in (("unlabelled", {}, worlds), ("one label", {alarm: truth}, worlds),
                            ("10x worlds", {}, big)):
        seconds = timed(lambda labels=labels, n=n: sampler(labels, n, 1, max_samples=n), repeats=3)
        floor = sampling_program.byte_floor(sampler.plan, n) / bandwidth
        out[name] = {"worlds": n, "seconds": seconds, "floor_s": floor, "ratio": seconds / floor,
                     "worlds_per_s": n / seconds, "tilted": sampler.tilted_coins}
    return out


def truth_of(model) -> dict[int, bool]:
    from fastlbp.inference.learn import training_labels

    try:
        return training_labels(model)
    except Exception:  # noqa: BLE001  (a graph without ground truth)
        return {}


def independent_check(model, first, worlds: int) -> dict:
    """The first round's alarm marginals against an independent sampled run of `worlds` worlds."""
    from fastlbp.core.settings import Settings
    from fastlbp.engines import sampling

    alarms = np.asarray(model.alarms)
    t0 = time.perf_counter()
    ref = sampling.sample_marginals(model, {}, Settings(samples=worlds, max_samples=worlds, seed=12345,
                                                        target_se=0, sample_seconds=0))
    seconds = time.perf_counter() - t0
    if first.stderr is None:
        return {"skipped": f"the first round is {first.method}"}
    diff = np.abs(first.marginals[alarms] - ref.marginals[alarms])
    se = np.sqrt(first.stderr[alarms] ** 2 + ref.stderr[alarms] ** 2)
    z = diff / np.maximum(se, 1e-300)
    top = set(alarms[np.argsort(-first.log_odds[alarms])[:10]].tolist())
    top_ref = set(alarms[np.argsort(-ref.log_odds[alarms])[:10]].tolist())
    return {"worlds": worlds, "seconds": seconds, "max_abs": float(diff.max()), "max_z": float(z.max()),
            "within_4se": float(np.mean(z <= 4)), "top10_overlap": len(top & top_ref),
            "verdict": "ok" if np.mean(z <= 4) >= 0.99 else "warn"}


def session_rounds(model, rounds: int, reference_worlds: int = 0, profile: str | None = None) -> dict:
    """The default method's session: the first round, then a label per round (the top alarm); with
    `profile` (a file) the labelled rounds run under cProfile, its 30 largest cumulative times printed."""
    from fastlbp.core.settings import Settings
    from fastlbp.inference.session import Session

    truth = truth_of(model)
    before = sum(COMPILES.values())
    t0 = time.perf_counter()
    session = Session(model, Settings().interactive())  # as simulate and triage run it
    session.compile_flags()
    first = session.run()
    first_s = time.perf_counter() - t0
    after_first = sum(COMPILES.values())
    check = independent_check(model, first, reference_worlds) if reference_worlds else None
    after_first = sum(COMPILES.values())
    per = []
    alarms = np.asarray(model.alarms)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    for _ in range(rounds):
        left = [a for a in alarms if int(a) not in session.labels]
        if not left:
            break
        top = max(left, key=lambda a: session.last.log_odds[a])
        session.label(int(top), bool(truth.get(int(top), False)))
        t0 = time.perf_counter()
        rnd = session.run()
        info = rnd.info or {}
        per.append({"seconds": time.perf_counter() - t0, "method": rnd.method, "flags": list(rnd.flags),
                    "samples": info.get("samples"), "effective": info.get("effective_samples"),
                    "max_stderr": info.get("max_stderr"), "tilted": info.get("tilted_coins"),
                    "stopped": info.get("stopped")})
    if profiler is not None:
        import pstats

        profiler.disable()
        profiler.dump_stats(profile)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    secs = [r["seconds"] for r in per]
    return {"first_round_s": first_s, "first_method": first.method, "reason": first.reason,
            "compiles_first": after_first - before,
            "compiles_after_first": sum(COMPILES.values()) - after_first,
            "background_compiles": sum(BACKGROUND.values()),
            "median_s": statistics.median(secs) if secs else None, "max_s": max(secs) if secs else None,
            "methods": collections.Counter(r["method"] for r in per), "check": check, "rounds": per}


def cli_runs(graph: str, rounds: int, timeout: float) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CACHE_HOME": cache}
        for label in ("cold", "warm"):
            for name, args in (("rank", ["rank", graph, "--top", "5", "-f", "json"]),
                               ("simulate", ["simulate", graph, "--max-rounds", str(rounds), "-f", "json"])):
                t0 = time.perf_counter()
                try:
                    proc = subprocess.run([sys.executable, "-m", "fastlbp", *args], capture_output=True,
                                          text=True, timeout=timeout, env=env)
                    rc, tail = proc.returncode, proc.stderr[-1500:]
                except subprocess.TimeoutExpired:
                    rc, tail = "timeout", ""
                out[f"{name} {label}"] = {"seconds": time.perf_counter() - t0, "rc": rc, "stderr": tail}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", nargs="*", default=["data/avrora.json.gz", "data/ftp.json.gz"])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--worlds", type=int, default=100_000)
    ap.add_argument("--cli", action="store_true")
    ap.add_argument("--cli-timeout", type=float, default=300)
    ap.add_argument("--facts", default=None, help="facts directory of a .dl graph")
    ap.add_argument("--reference-worlds", type=int, default=0,
                    help="compare the session's first (unlabelled) round with an independent run of this "
                         "many worlds (another seed)")
    ap.add_argument("--profile", action="store_true",
                    help="run the labelled rounds under cProfile (slower; $OUT/NAME.prof, the top printed)")
    ap.add_argument("--table-words", type=int, default=None,
                    help="the weighted row sums' table words on this platform (sampling_weights.TABLE_WORDS)")
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", True)
    if args.table_words is not None:
        from fastlbp.engines import sampling_weights

        sampling_weights.TABLE_WORDS[jax.default_backend()] = args.table_words
    jax.monitoring.register_event_duration_secs_listener(_count)
    from fastlbp.io.loading import load

    bandwidth = copy_bandwidth()
    details = {"environment": environment(), "copy_bandwidth_GBps": bandwidth / 1e9, "graphs": {}}
    rows = []
    for graph in args.graphs:
        t0 = time.perf_counter()
        if graph.endswith(".dl"):
            from datalog.grounding import GroundOptions

            model = load(graph, datalog=GroundOptions(facts=args.facts or str(Path(graph).parent / "facts")))
        else:
            model = load(graph)
        rec = {"load_s": time.perf_counter() - t0}
        rec["sampler"] = sampler_figures(model, args.worlds, bandwidth)
        print(json.dumps({graph: rec["sampler"]}, default=str), flush=True)
        rec["session"] = session_rounds(
            model, args.rounds, args.reference_worlds,
            profile=str(out_dir() / f"{Path(graph).name}.prof") if args.profile else None)
        if args.cli:
            rec["cli"] = cli_runs(graph, args.rounds, args.cli_timeout)
        details["graphs"][graph] = rec
        s, ss = rec["sampler"], rec["session"]
        rows.append(f"| {Path(graph).name} | {s['compile_s']:.1f} | {s['steps']}/{s['shapes']} | "
                    f"{s['unlabelled']['seconds'] * 1e3:.1f} ({s['unlabelled']['ratio']:.1f}x) | "
                    f"{s['one label']['seconds'] * 1e3:.1f} ({s['one label']['ratio']:.1f}x) | "
                    f"{s['10x worlds']['worlds_per_s'] / 1e6:.1f}M/s ({s['10x worlds']['ratio']:.1f}x) | "
                    f"{ss['first_round_s']:.1f} {ss['first_method']} | "
                    f"{(ss['median_s'] or 0) * 1e3:.0f} / {(ss['max_s'] or 0) * 1e3:.0f} | "
                    f"{ss['compiles_after_first']} (+{ss['background_compiles']} bg) | "
                    f"{dict(ss['methods'])} |")
        print(rows[-1], flush=True)
        (out_dir() / "interactive.json").write_text(json.dumps(details, indent=1, default=str))
    print(f"\n{details['environment']['device']}, copy {bandwidth / 1e9:.0f} GB/s, {args.worlds:,} worlds")
    print("| graph | compile s | steps/shapes | draw ms unlabelled (x floor) | one label (x floor) | "
          "10x worlds: worlds/s (x floor) | first round s | round median / max ms | compiles after first | "
          "methods |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    for graph, rec in details["graphs"].items():
        if rec["session"].get("check"):
            print(f"{Path(graph).name} first round against an independent run: {rec['session']['check']}")
        for name, r in rec.get("cli", {}).items():
            print(f"{Path(graph).name} {name}: {r['seconds']:.1f} s rc {r['rc']}")


if __name__ == "__main__":
    main()
