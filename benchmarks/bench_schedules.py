"""SEQFIX / TOPO benchmark: batches, analysis time, µs per iteration, rounds to 1e-6.

Both engines: relaxation of whole sweeps (the default, fastlbp/engines/relaxed.py;
a strategy name alone) and the chunk loop (`NAME:chunked`, fastlbp/engines/chunked.py),
as `fastlbp.engines.make_runner` picks them for `Settings(schedule=NAME)`.

Usage (one call on the GPU; on a CPU use small sizes):

    python benchmarks/bench_schedules.py                       # 0.05M, 0.5M, ftp, 5M edges
    python benchmarks/bench_schedules.py --sizes 50000 --quick # CPU smoke test

For every size (factor-graph edges; `ftp` = the paper's ftp preset, ~0.69M)
it builds a synthetic Bingo-like graph (datalog.synthetic) and, for SEQFIX and TOPO:

* batches per iteration with levelling and with Algorithm 3, analysis seconds;
* chunks per iteration, chunk width, packing seconds (chunk loop), relaxation
  passes of the first cold and warm iterations (relaxation), compile seconds;
* µs per iteration (tol = 0, a few iterations, after compiling);
* a cold round to tol 1e-6 (at most 1000 iterations) and a warm round after
  labelling the most likely alarm false, both timed end to end on the device.
  Rounds whose estimated time exceeds --round-budget seconds are capped (the
  cap is reported; `converged` says whether it finished).

Exactness on the device, f64 messages within 1e-10 (relative to 1 + |log-odds|)
after 3 iterations: at
every size relaxation against the chunk loop; on the smallest size also the
levelling plan against the Algorithm 3 plan and against a plan of 2-slot
chunks (every split of a batch must keep results).
Details go to $OUT/bench_schedules.json (rewritten after every size); a table
is printed last.

`--setup-only` times the host side only (no rounds, no device): per size the model
build, and per strategy the runner's set-up (what `Session(model, schedule=NAME)`
plans), the exact levelling of its order (`schedules.analysis.levelling`, and how it
ran: a walk, compiled by numba where installed, or stage by stage) and, for
`NAME:chunked`, the chunk plan's analysis and packing:

    python benchmarks/bench_schedules.py --setup-only --sizes 2000000 5000000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # graphs: evidence_from_labels

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import environment, write_json  # noqa: E402
from graphs import evidence_from_labels  # noqa: E402

from datalog.bayesnet import to_model  # noqa: E402
from datalog.synthetic import generate  # noqa: E402
from fastlbp import engines  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines import relaxed  # noqa: E402
from fastlbp.engines.loop import controls, init  # noqa: E402
from schedules import analysis  # noqa: E402


@jax.jit
def sweep_with_passes(graph, layout, messages, evidence):
    """One relaxed sweep and the passes it took (`relaxed.sweep`, jitted)."""
    return relaxed.sweep(graph, layout, messages, evidence)[:2]


def make_model(size: str, seed: int = 0):
    """A synthetic model: `size` is a number of factor-graph edges or a datalog preset name."""
    if size.isdigit():
        return to_model(generate(factor_edges=int(size), seed=seed)), "datalog.synthetic"
    return to_model(generate(preset=size, seed=seed)), f"datalog.synthetic preset {size}"


def _evidence(graph, labels=None):
    return jnp.asarray(evidence_from_labels(graph.num_vars, labels or {}))


def _timed_call(runner, graph, msgs, ev, tol, iters):
    """One round of at most `iters` iterations to `tol`, timed end to end with its results, and the
    runner for the next rounds (`Runner.step`: a relaxation runner's finished successor)."""
    t0 = time.perf_counter()
    res, runner = runner.step(graph, msgs, ev, controls(tol, iters, 0.0, msgs.dtype))
    jax.block_until_ready(res.marginals)
    return res, time.perf_counter() - t0, runner


def _runner(model, name: str):
    return engines.make_runner(model, Settings(schedule=name))


def bench_strategy(model, graph_dev, name: str, budget: float, quick: bool) -> dict:
    graph = model.graph if hasattr(model, "graph") else model
    row: dict = {"strategy": name}
    t0 = time.perf_counter()
    runner = _runner(model, name)  # levelling (the default)
    row["setup_s"] = round(time.perf_counter() - t0, 3)
    comp = runner.info.compiled  # schedules.Relaxation or schedules.Compiled
    relax = runner.name.endswith("/relaxed")
    row["engine"] = runner.name.split("/")[-1]
    # Relaxation plans without levels (a bound); the levels are measured here for the table.
    lev = (comp.analysis or analysis.levelling(graph, comp.order)) if relax else comp.analyses[0]
    if relax:
        row["level_bound"] = comp.bound
        row["first_budget"] = comp.budget
    row["batches_levelling"] = lev.num_batches
    row["analysis_s_levelling"] = round(lev.seconds, 3)
    a3 = analysis.algorithm3(graph, lev.order)
    row["batches_algorithm3"] = a3.num_batches
    row["analysis_s_algorithm3"] = round(a3.seconds, 3)
    if not relax:
        row["chunks_per_iteration"] = comp.plan.num_chunks
        row["chunk_width"] = comp.plan.width
        row["pack_s"] = round(comp.pack_seconds, 3)
        row["unroll"] = runner.info.unroll
    else:
        row["chunks_per_iteration"] = row["chunk_width"] = "-"
        row["virtual_edges"] = comp.plan.virtual_edges

    zeros = init(graph_dev)
    ev = _evidence(graph)
    few = 2 if quick else 5
    t0 = time.perf_counter()
    res, _, runner = _timed_call(runner, graph_dev, zeros, ev, 0.0, 1)
    row["compile_and_first_s"] = round(time.perf_counter() - t0, 3)
    _, secs, runner = _timed_call(runner, graph_dev, zeros, ev, 0.0, few)
    per_iter = secs / few
    row["us_per_iteration"] = round(per_iter * 1e6, 1)
    if not relax:
        row["us_per_chunk"] = round(per_iter * 1e6 / max(comp.plan.num_chunks, 1), 2)

    cap = int(max(1, min(1000, budget / max(per_iter, 1e-9))))
    row["round_iteration_cap"] = cap
    res, secs, runner = _timed_call(runner, graph_dev, zeros, ev, 1e-6, cap)
    row["cold_round_s"] = round(secs, 4)
    row["cold_iterations"] = int(res.iterations)
    row["cold_converged"] = bool(res.converged)
    # Warm round: label the most likely alarm (or variable) false, continue from the messages.
    marg = np.asarray(res.marginals)
    alarms = list(getattr(model, "alarms", ()) or range(graph.num_vars))
    cand = [a for a in alarms if marg[a] < 1 - 1e-9] or alarms
    top = int(max(cand, key=lambda a: marg[a]))
    ev1 = _evidence(graph, {top: False})
    # A warm iteration can cost more than a cold one (relaxation needs more passes after a
    # label), so the warm cap comes from a few warm iterations.
    _, secs, runner = _timed_call(runner, graph_dev, res.messages, ev1, 0.0, few)
    cap = int(max(1, min(1000, budget / max(secs / few, 1e-9))))
    row["warm_iteration_cap"] = cap
    res2, secs2, runner = _timed_call(runner, graph_dev, res.messages, ev1, 1e-6, cap)
    row["warm_label"] = top
    row["warm_round_s"] = round(secs2, 4)
    row["warm_iterations"] = int(res2.iterations)
    row["warm_converged"] = bool(res2.converged)
    row["warm_conflict"] = bool(res2.conflict)
    if relax:
        row["passes_cold"] = _passes(graph_dev, runner.layout, zeros, ev)
        row["passes_warm"] = _passes(graph_dev, runner.layout, res.messages, ev1)
    return row


def _passes(graph_dev, layout, msgs, ev, iterations: int = 5) -> list[int]:
    """Relaxation passes of the first iterations from `msgs` (`layout`: the relaxed runner's)."""
    out = []
    for _ in range(iterations):
        msgs, passes = sweep_with_passes(graph_dev, layout, msgs, ev)
        out.append(int(passes))
    return out


def check_exactness(model, graph_dev, name: str, plans: bool) -> dict:
    """Relaxation vs the chunk loop; with `plans` also the levelling plan vs Algorithm 3's and
    vs 2-slot chunks. 3 iterations, f64."""
    graph = model.graph if hasattr(model, "graph") else model
    zeros = init(graph_dev)
    ev = _evidence(graph)
    out = {}
    base, _, _ = _timed_call(_runner(model, name), graph_dev, zeros, ev, 0.0, 3)
    name = name.split(":")[0]
    others = [f"{name}:chunked"] + ([f"{name}:algorithm3:chunked", f"{name}:width=2:chunked"]
                                    if plans else [])
    for other in others:
        res, _, _ = _timed_call(_runner(model, other), graph_dev, zeros, ev, 0.0, 3)
        a, b = np.asarray(base.messages), np.asarray(res.messages)
        fin = np.isfinite(a) & np.isfinite(b)
        # Relative to 1 + |log-odds|: relaxation stops when no message moves by 1e-12 of that.
        rel = np.abs(a[fin] - b[fin]) / (1 + np.abs(b[fin]))
        out[other] = {
            "max_message_diff": float(np.max(np.abs(a[fin] - b[fin]), initial=0.0)),
            "max_relative_message_diff": float(np.max(rel, initial=0.0)),
            "infinities_agree": bool(np.array_equal(a[~fin], b[~fin])),
            "max_marginal_diff": float(np.max(np.abs(np.asarray(base.marginals)
                                                     - np.asarray(res.marginals)))),
        }
        out[other]["ok"] = out[other]["max_relative_message_diff"] < 1e-10 and out[other]["infinities_agree"]
    return out


def setup_row(model, name: str) -> dict:
    """Host-side set-up of one strategy: the runner, the exact levelling, the chunk plan."""
    graph = model.graph if hasattr(model, "graph") else model
    row: dict = {"strategy": name}
    t0 = time.perf_counter()
    runner = _runner(model, name)
    row["setup_s"] = round(time.perf_counter() - t0, 3)
    row["engine"] = runner.name.split("/")[-1]
    comp = runner.info["compiled"]
    order = comp.order if hasattr(comp, "order") else comp.analyses[0].order
    if hasattr(comp, "pack_seconds"):
        row["analysis_s"] = round(sum(a.seconds for a in comp.analyses), 3)
        row["pack_s"] = round(comp.pack_seconds, 3)
    lev = analysis.levelling(graph, order)
    row.update(levels=lev.num_batches, levelling_s=round(lev.seconds, 3), levelling_how=lev.how)
    return row


def main_setup(args) -> None:
    report = {"environment": environment(), "sizes": {}}
    rows = []
    for size in args.sizes:
        t0 = time.perf_counter()
        model, source = make_model(size)
        graph = model.graph if hasattr(model, "graph") else model
        entry = {"source": source, "edges": graph.num_edges, "model_s": round(time.perf_counter() - t0, 2),
                 "strategies": {}}
        for name in args.strategies:
            row = setup_row(model, name)
            row.update(size=size, edges=graph.num_edges, model_s=entry["model_s"])
            entry["strategies"][name] = row
            rows.append(row)
            print(f"[{size} {name}] {row}", flush=True)
        report["sizes"][size] = entry
        write_json("bench_schedules_setup.json", report)
    print(f"\n{'size':>8} {'edges':>9} {'model s':>8} {'strategy':>15} {'engine':>8} {'setup s':>8} "
          f"{'levels':>7} {'levelling s':>11} {'how':>6} {'pack s':>7}")
    for r in rows:
        print(f"{r['size']:>8} {r['edges']:>9} {r['model_s']:>8} {r['strategy']:>15} {r['engine']:>8} "
              f"{r['setup_s']:>8} {r['levels']:>7} {r['levelling_s']:>11} {r['levelling_how']:>6} "
              f"{r.get('pack_s', '-'):>7}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["50000", "500000", "ftp", "5000000"],
                   help="factor-graph edges or datalog presets (e.g. ftp)")
    p.add_argument("--strategies", nargs="+", default=["seqfix", "topo", "seqfix:chunked", "topo:chunked"])
    p.add_argument("--round-budget", type=float, default=20.0,
                   help="most seconds one round may take (iterations are capped to fit)")
    p.add_argument("--quick", action="store_true", help="small budget, fewer timing iterations")
    p.add_argument("--no-check", action="store_true", help="skip the exactness check")
    p.add_argument("--setup-only", action="store_true",
                   help="host-side set-up times only (model, runner, levelling, packing); no rounds")
    args = p.parse_args(argv)
    if args.setup_only:
        return main_setup(args)
    budget = 2.0 if args.quick else args.round_budget
    report = {"environment": environment(), "sizes": {}}
    rows = []
    for i, size in enumerate(args.sizes):
        t0 = time.perf_counter()
        model, source = make_model(size)
        graph = model.graph if hasattr(model, "graph") else model
        gen_s = time.perf_counter() - t0
        graph_dev = jax.device_put(graph)
        entry = {"source": source, "edges": graph.num_edges, "variables": graph.num_vars,
                 "factors": graph.num_factors, "generate_s": round(gen_s, 2), "strategies": {}}
        for name in args.strategies:
            row = bench_strategy(model, graph_dev, name, budget, args.quick)
            row["size"] = size
            row["edges"] = graph.num_edges
            if not args.no_check and ":chunked" not in name:
                row["exactness"] = check_exactness(model, graph_dev, name, plans=i == 0)
            entry["strategies"][name] = row
            rows.append(row)
            print(f"[{size} {name}] {row}", flush=True)
        report["sizes"][size] = entry
        write_json("bench_schedules.json", report)

    print()
    head = (f"{'size':>8} {'edges':>9} {'strategy':>15} {'lev':>6} {'alg3':>6} {'anal s':>7} "
            f"{'chunks':>6} {'W':>5} {'us/it':>9} {'cold s':>8} {'it':>4} {'warm s':>8} {'it':>4}"
            f" {'exact':>5} passes cold/warm")
    print(head)
    for r in rows:
        exact = r.get("exactness")
        ok = "-" if exact is None else ("yes" if all(v["ok"] for v in exact.values()) else "NO")
        passes = f"{r['passes_cold']}/{r['passes_warm']}" if "passes_cold" in r else ""
        print(f"{r['size']:>8} {r['edges']:>9} {r['strategy']:>15} {r['batches_levelling']:>6} "
              f"{r['batches_algorithm3']:>6} {r['analysis_s_levelling']:>7} "
              f"{r['chunks_per_iteration']:>6} {r['chunk_width']:>5} {r['us_per_iteration']:>9} "
              f"{r['cold_round_s']:>8} {r['cold_iterations']:>4} {r['warm_round_s']:>8} "
              f"{r['warm_iterations']:>4} {ok:>5} {passes}")
    print(f"device: {report['environment']['device']}")


if __name__ == "__main__":
    main()
