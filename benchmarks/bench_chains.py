"""Deep chains under SEQFIX and TOPO (issue 22, section 6): analysis, passes, sweeps, rounds, exactness.

    python benchmarks/bench_chains.py                          # 10^3, 10^4, 10^5 links, SEQFIX and TOPO
    python benchmarks/bench_chains.py --links 1000 --before-up-to 1000   # with the old engine too

A chain x0 -> x1 -> ... -> xn: x0 an input (prior 0.5), each link a noisy AND
(p1 = 0.9, p2 = 0), factors in chain order, so SEQFIX and TOPO carry x0's
prior down the whole chain in one sweep: one level per link, and relaxation
needs a pass per level to settle (the log-odds change at every link). Built
with `fastlbp.core.graph.from_factors`; `--derivation` builds the same chain as a
derivation graph (`datalog.derivation.from_clauses`, one rule of probability
0.9, alarm xn) loaded by `datalog.bayesnet.to_model(compress=True)`: chain
merging makes each clause one variable with its head, so n links stay n + 1
variables and n + 1 factors, the graph `from_factors` builds.

For every length and strategy:

* levelling: levels, seconds, windows walked (`schedules.analysis.levelling`);
  with `--before-up-to N` also the fixpoint alone (the analysis before the walk);
* the runner (`fastlbp.engines.make_runner`): seconds, pass budget, chunk steps
  and width of the chunk plan that finishes unsettled sweeps;
* cost of one relaxation pass and of one chunk-loop step (µs; what
  `schedules.relax_plan.pass_budget` models);
* the first cold iterations one sweep at a time: passes, whether the chunk loop
  redid the sweep, seconds;
* first round (compile + run), cold round to tol 1e-6 (compiled), the whole
  thing end to end (runner + first round), and a warm round after labelling xn
  false (at most --warm-iters iterations: SEQFIX carries it back one link per
  iteration, TOPO in one sweep);
* with `--calibrate SIZE...`: the same pass and step costs on synthetic
  Bingo-like graphs, at the default chunk width and at 4 slots (`--widths`);
* exactness: marginals and messages against the chunk loop (`NAME:chunked`)
  after the cold round's iterations (messages relative to 1 + |log-odds|);
* with `--before-up-to N` (N >= the length), the relaxation without a budget
  (`NAME:budget=LEVELS`, one pass per level: the engine before the hybrid).

Runs on a CPU and on a GPU. Details go to $OUT/bench_chains.json (`--json`;
rewritten after every row); a short table is printed last.
"""

from __future__ import annotations

import argparse
import functools
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

import schedules  # noqa: E402
from fastlbp import engines  # noqa: E402
from fastlbp.core import equations
from fastlbp.core.graph import AND, Factor, from_factors  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines import chunked, relaxed  # noqa: E402
from fastlbp.engines.loop import controls, init  # noqa: E402
from schedules import analysis, relax_plan  # noqa: E402


@functools.partial(jax.jit, static_argnames=("unroll",))
def _sweep_with_stats(graph, layout, messages, evidence, unroll: int = 1):
    """One relaxed sweep, the passes it took and whether the chunk loop redid it."""
    return relaxed.sweep(graph, layout, messages, evidence, unroll=unroll)


def chain(n: int, derivation: bool = False):
    """The chain of `n` links as a model (derivation route) or a bare graph."""
    if not derivation:
        return from_factors([Factor(AND, 0, (), 0.5, 0.5)] + [Factor(AND, i, (i - 1,), 0.9, 0.0)
                                                               for i in range(1, n + 1)])
    from datalog.bayesnet import to_model
    from datalog.derivation import from_clauses

    dg = from_clauses([("R", f"t{i + 1}", [f"t{i}"]) for i in range(n)], rules={"R": 0.9},
                      priors={"t0": 0.5}, alarms=[f"t{n}"])
    return to_model(dg, compress=True)


def _graph(model):
    return getattr(model, "graph", model)


def _round(runner, graph, msgs, ev, tol, iters):
    """(result, seconds, the runner for the next rounds: `Runner.step`'s, finished when a sweep needed it)."""
    t0 = time.perf_counter()
    res, runner = runner.step(graph, msgs, ev, controls(tol, iters, 0.0, msgs.dtype))
    jax.block_until_ready(res.marginals)
    return res, time.perf_counter() - t0, runner


def _best(fn, repeats=3):
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return out, min(times)


def pass_cost_us(graph, layout, ev, passes: int = 10) -> float:
    """µs of one relaxation pass (`passes` in a jitted loop, after compiling)."""

    @jax.jit
    def many(g, lay, msgs, ev):
        inputs = relaxed.pass_inputs(g, lay, msgs, ev)
        return jax.lax.fori_loop(0, passes, lambda _, m: relaxed.relax_pass(g, lay, inputs, m), msgs)

    msgs = init(graph)
    jax.block_until_ready(many(graph, layout, msgs, ev))
    return _best(lambda: many(graph, layout, msgs, ev))[1] / passes * 1e6


def step_cost_us(graph, layout, ev, unroll: int = 1) -> float:
    """µs of one chunk-loop step (a whole chunk sweep over its steps, `unroll` steps per loop trip)."""
    msgs = init(graph)

    @jax.jit
    def one(g, lay, msgs, ev):
        agg = equations.var_aggregates(g, lay.sums, msgs, ev)
        return chunked.sweep(g, lay.chunks, msgs, agg, jnp.int32(0), unroll)

    jax.block_until_ready(one(graph, layout, msgs, ev))
    return _best(lambda: one(graph, layout, msgs, ev))[1] / layout.chunks.num_chunks * 1e6


def sweeps(graph, layout, ev, count: int = 3, unroll: int = 1) -> list[dict]:
    """The first cold iterations one sweep at a time (undamped, as the loop runs them)."""
    msgs = init(graph)
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        msgs, passes, redone = _sweep_with_stats(graph, layout, msgs, ev, unroll=unroll)
        jax.block_until_ready(msgs)
        out.append({"passes": int(passes), "chunk_loop": bool(redone),
                    "seconds": time.perf_counter() - t0})
    return out


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b) / (1 + np.abs(np.where(np.isfinite(b), b, 0)))
    return float(np.max(np.where(same, 0, d), initial=0.0))


def row(n: int, strategy: str, args) -> dict:
    r: dict = {"links": n, "strategy": strategy, "graph": "derivation.json route" if args.derivation
               else "from_factors"}
    t0 = time.perf_counter()
    model = chain(n, args.derivation)
    graph = _graph(model)
    r.update(build_s=time.perf_counter() - t0, edges=graph.num_edges)
    order = schedules.orders_for(graph, schedules.parse_spec(strategy))[0]
    lev = analysis.levelling(graph, order)
    r.update(levels=lev.num_batches, levelling_s=lev.seconds, windows_walked=lev.scans)
    if n <= args.before_up_to:
        r["levelling_fixpoint_alone_s"] = analysis.levelling(graph, order, scan_after=10**9).seconds

    t0 = time.perf_counter()
    runner = engines.make_runner(model, Settings(schedule=strategy))
    r["runner_s"] = time.perf_counter() - t0
    rel = runner.info.compiled
    steps = 0 if rel.chunks is None else rel.chunks.plan.num_chunks
    r.update(engine=runner.name, budget=rel.budget, chunk_steps=steps,
             analysis_s=rel.analysis_seconds, relax_plan_s=rel.plan_seconds,
             pack_s=None if rel.chunks is None else rel.chunks.pack_seconds,
             width=None if rel.chunks is None else rel.chunks.plan.width,
             layout_s=runner.info.layout_seconds)
    gdev = jax.device_put(graph)
    ev = jnp.zeros(graph.num_vars)
    r["pass_us"] = pass_cost_us(gdev, runner.layout, ev)
    unroll = runner.info.unroll
    if runner.layout.chunks is not None:
        r["step_us"] = step_cost_us(gdev, runner.layout, ev, unroll)
    r["sweeps"] = sweeps(gdev, runner.layout, ev, unroll=unroll)

    first, r["first_round_s"], runner = _round(runner, gdev, init(graph), ev, 1e-6, 1000)
    cold, r["cold_round_s"], runner = _round(runner, gdev, init(graph), ev, 1e-6, 1000)
    r.update(end_to_end_s=r["runner_s"] + r["first_round_s"], cold_iterations=int(cold.iterations),
             converged=bool(cold.converged))
    ev1 = jnp.asarray(evidence_from_labels(graph.num_vars, {n: False}))
    warm, r["warm_round_s"], runner = _round(runner, gdev, cold.messages, ev1, 1e-6, args.warm_iters)
    r.update(warm_iterations=int(warm.iterations), warm_converged=bool(warm.converged))

    if args.check:
        ref = engines.make_runner(model, Settings(schedule=f"{strategy}:chunked"))
        iters = int(cold.iterations)
        a, r["chunk_loop_round_s"], ref = _round(ref, gdev, init(graph), ev, 0.0, iters)
        b, _, runner = _round(runner, gdev, init(graph), ev, 0.0, iters)
        r["marginals_vs_chunk_loop"] = float(np.max(np.abs(np.asarray(a.marginals)
                                                           - np.asarray(b.marginals))))
        r["messages_vs_chunk_loop"] = _rel(b.messages, a.messages)
        a2, _, ref = _round(ref, gdev, a.messages, ev1, 0.0, 3)
        b2, _, runner = _round(runner, gdev, b.messages, ev1, 0.0, 3)
        r["warm_messages_vs_chunk_loop"] = _rel(b2.messages, a2.messages)
    if n <= args.before_up_to:
        old = engines.make_runner(model, Settings(schedule=f"{strategy}:budget={max(lev.num_batches, 1)}"))
        assert old.layout.chunks is None
        _, _, old = _round(old, gdev, init(graph), ev, 1e-6, 1000)  # compile
        res, r["before_cold_round_s"], old = _round(old, gdev, init(graph), ev, 1e-6, 1000)
        r["before_passes"] = [s["passes"] for s in sweeps(gdev, old.layout, ev)]
        r["before_marginals_diff"] = float(np.max(np.abs(np.asarray(res.marginals)
                                                         - np.asarray(cold.marginals))))
    return r


def calibrate(size: str, strategy: str, width: int | None) -> dict:
    """Cost of a relaxation pass and of a chunk step on a synthetic Bingo-like graph (`size` edges or a
    datalog preset), the chunk plan of `width` slots (None: the default width)."""
    from common import bingo_model

    from datalog.bayesnet import to_model
    from datalog.synthetic import generate

    model = bingo_model(int(size)) if size.isdigit() else to_model(generate(preset=size))
    spec = f"{strategy}:budget=1" + (f":width={width}" if width else "")
    runner = engines.make_runner(model, Settings(schedule=spec))  # budget 1: the chunk plan is built
    gdev = jax.device_put(model.graph)
    ev = jnp.zeros(model.graph.num_vars)
    lay = runner.layout
    rel = runner.info.compiled
    unroll = runner.info.unroll
    steps, virtual = lay.chunks.num_chunks, rel.plan.virtual_edges
    return {"size": size, "strategy": strategy, "edges": model.graph.num_edges, "virtual_edges": virtual,
            "levels": rel.analysis.num_batches, "width": lay.chunks.width, "chunk_steps": steps,
            "unroll": unroll, "pass_us": pass_cost_us(gdev, lay, ev),
            "step_us": step_cost_us(gdev, lay, ev, unroll),
            "model_budget": relax_plan.pass_budget(steps, lay.chunks.width, virtual,
                                                   jax.default_backend() == "gpu")}


def _fmt(x, unit="s"):
    if x is None:
        return "-"
    return f"{x:.3f} {unit}" if unit == "s" else f"{x:.1f}"


def table(rows: list[dict], calib: list[dict]) -> list[str]:
    out = [f"{'links':>7} {'strategy':>8} {'levels':>7} {'levelling':>10} {'runner':>9} {'budget':>6} "
           f"{'pass µs':>9} {'step µs':>8} {'passes (chunk loop)':>22} {'cold round':>10} {'it':>3} "
           f"{'end to end':>10} {'warm (it)':>14} {'|d| chunk loop':>14} {'before':>10}"]
    for r in rows:
        sw = ",".join(f"{s['passes']}{'*' if s['chunk_loop'] else ''}" for s in r["sweeps"])
        warm = f"{r['warm_round_s']:.3f} s ({r['warm_iterations']})"
        diff = r.get("messages_vs_chunk_loop")
        out.append(
            f"{r['links']:>7,} {r['strategy']:>8} {r['levels']:>7,} {_fmt(r['levelling_s']):>10} "
            f"{_fmt(r['runner_s']):>9} {r['budget']:>6} {r['pass_us']:>9.1f} "
            f"{_fmt(r.get('step_us'), 'us'):>8} {sw:>22} {_fmt(r['cold_round_s']):>10} "
            f"{r['cold_iterations']:>3} {_fmt(r['end_to_end_s']):>10} {warm:>14} "
            f"{'-' if diff is None else f'{diff:.1e}':>14} {_fmt(r.get('before_cold_round_s')):>10}")
    if calib:
        out.append(f"{'size':>8} {'strategy':>8} {'edges':>9} {'virtual':>9} {'levels':>7} {'width':>5} "
                   f"{'steps':>7} {'pass µs':>9} {'step µs':>8} {'sweep/pass':>10} {'model':>6}")
        for c in calib:
            out.append(f"{c['size']:>8} {c['strategy']:>8} {c['edges']:>9,} {c['virtual_edges']:>9,} "
                       f"{c['levels']:>7,} {c['width']:>5} {c['chunk_steps']:>7,} {c['pass_us']:>9.1f} "
                       f"{c['step_us']:>8.2f} {c['chunk_steps'] * c['step_us'] / c['pass_us']:>10.1f} "
                       f"{c['model_budget']:>6}")
        out.append("sweep/pass: chunk sweep time over pass time (the ski-rental budget measured); model: "
                   "what pass_budget estimates")
    out.append("passes: the first three cold sweeps, * = redone by the chunk loop after the budget; "
               "|d|: messages against the chunk loop, relative to 1 + |log-odds|; before: the cold round "
               "without a budget (one pass per level)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--links", type=int, nargs="*", default=[1000, 10_000, 100_000])
    ap.add_argument("--strategies", nargs="+", default=["seqfix", "topo"])
    ap.add_argument("--derivation", action="store_true", help="build the chains as derivation graphs")
    ap.add_argument("--before-up-to", type=int, default=0,
                    help="also run the fixpoint-only analysis and the unbudgeted relaxation up to "
                         "this length")
    ap.add_argument("--warm-iters", type=int, default=20)
    ap.add_argument("--no-check", dest="check", action="store_false")
    ap.add_argument("--calibrate", nargs="*", default=[], metavar="SIZE",
                    help="also time passes and chunk steps on synthetic graphs (edges or a preset)")
    ap.add_argument("--widths", type=int, nargs="*", default=[0, 4],
                    help="chunk widths for --calibrate (0: the default width)")
    ap.add_argument("--json", default="bench_chains.json", help="file name under $OUT")
    args = ap.parse_args(argv)
    payload = {"environment": environment(), "args": vars(args), "rows": [], "calibration": []}
    for size in args.calibrate:
        for strategy in args.strategies:
            for width in args.widths:
                c = calibrate(size, strategy, width or None)
                payload["calibration"].append(c)
                write_json(args.json, payload)
                print(c, flush=True)
    for n in args.links:
        for strategy in args.strategies:
            r = row(n, strategy, args)
            payload["rows"].append(r)
            write_json(args.json, payload)
            print(r, flush=True)
    print("\n".join(table(payload["rows"], payload["calibration"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
