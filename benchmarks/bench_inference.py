"""Inference you can trust, in one call: exact inference against pyAgrum, sampler throughput, `check` on
the shipped examples, and ranking quality of LBP against the true posterior.

    PYTHONPATH=. python benchmarks/bench_inference.py                       # every section
    PYTHONPATH=. python benchmarks/bench_inference.py --sections quality --quality-graphs 4

Sections (`--sections`, comma-separated; default all):

* exact: fastlbp's bucket elimination (`method="exact"`, every variable's marginal) against pyAgrum's
  `LazyPropagation` on n x n noisy-OR grids of growing width (`bench_exact.py`): first call, repeat
  call, the host planning time inside it, pyAgrum's time and the largest difference.
* sampler: worlds and edge-worlds per second at 0.05M, 0.5M and 5M factor-graph edges against the
  memory floor (`bench_sampling.py`).
* check: `fastlbp.inference.check.check` (LBP against exact where the width allows, else sampling) on every
  shipped example in data/, no labels.
* quality: Bingo's loop with an oracle (`fastlbp.inference.simulate.simulate`) ranked by LBP, by exact
  marginals and by sampled marginals on the same graphs: synthetic layered graphs whose truth is drawn
  from the model itself (`datalog.synthetic.sample_truth`, so the model is right and the true posterior
  is the best possible ranking) and the shipped examples with their recorded truth. Rank-100%-T
  (labels to find every true alarm; lower is better) and AUC (higher is better).

A section stops starting new sizes or graphs once `--budget-s` seconds have passed since its start.
JSON under $OUT (default ./out) as bench_inference.json; a short table per section is printed last.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import environment, write_json  # noqa: E402

import fastlbp  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data"
EXAMPLES = ("presto.json", "weblech.json", "avrora.json.gz", "ftp.json.gz")


def section_exact(args, gpu: bool) -> list[dict]:
    import bench_exact

    from fastlbp.core.graph import from_factors
    from fastlbp.engines.exact import exact_marginals

    try:
        import pyagrum  # noqa: F401
        have_agrum = True
    except ImportError:
        have_agrum = False
    sizes = [int(s) for s in args.exact_sizes.split(",")] if args.exact_sizes else (
        list(range(8, 17, 2)) if gpu else list(range(4, 13, 2)))
    rows, start = [], time.perf_counter()
    for n in sizes:
        if time.perf_counter() - start > args.budget_s:
            rows.append({"n": n, "skipped": "budget"})
            continue
        factors = bench_exact.grid(n)
        graph = from_factors(factors, n * n)
        labels = {n * n - 1: True, n // 2: False}
        settings = Settings(exact_memory=None)
        cold, warm, ours = bench_exact.timed(lambda: exact_marginals(graph, labels, settings), args.repeats)
        row = {"n": n, "width": ours.info["width"], "largest_entries": ours.info["largest_entries"],
               "buckets": ours.info["buckets"], "device_buckets": ours.info["device_buckets"],
               "ours_first_s": cold, "ours_repeat_s": warm, "ours_plan_s": ours.info["plan_seconds"]}
        if have_agrum and n <= args.agrum_max:
            bn = bench_exact.pyagrum_net(factors, n * n)
            a_cold, a_warm, theirs = bench_exact.timed(
                lambda: bench_exact.pyagrum_marginals(bn, n * n, labels), args.repeats)
            row.update(pyagrum_s=a_warm, speedup=a_warm / warm,
                       max_abs_diff=float(np.max(np.abs(theirs - ours.marginals))))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def section_sampler(args, gpu: bool) -> list[dict]:
    import bench_sampling
    from common import copy_bandwidth

    worlds = args.worlds or (1 << 20 if gpu else 1 << 16)
    bandwidth = copy_bandwidth(2 << 30 if gpu else 1 << 28)
    sizes = [int(float(s)) for s in args.sampler_sizes.split(",")] if args.sampler_sizes else (
        [50_000, 500_000, 5_000_000] if gpu else [50_000])
    rows, start = [], time.perf_counter()
    for size in sizes:
        if time.perf_counter() - start > args.budget_s:
            rows.append({"factor_edges": size, "skipped": "budget"})
            continue
        row = bench_sampling.bench_one(size, worlds, args.repeats, bandwidth, None)
        row["bandwidth"] = bandwidth
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "all_seconds"}), flush=True)
    return rows


def section_check(args, gpu: bool) -> list[dict]:
    from fastlbp.inference.check import check

    rows, start = [], time.perf_counter()
    settings = Settings(samples=args.check_samples or (10**6 if gpu else 10**5))
    for name in args.examples.split(","):
        if time.perf_counter() - start > args.budget_s:
            rows.append({"graph": name, "skipped": "budget"})
            continue
        model = fastlbp.load(DATA / name)
        t0 = time.perf_counter()
        try:
            report = check(model, {}, settings, "auto")
        except Exception as err:  # noqa: BLE001  (a refusal is a result of the benchmark)
            rows.append({"graph": name, "error": f"{type(err).__name__}: {err}"})
            continue
        row = {"graph": name, "alarms": len(report.alarms), "reference": report.reference,
               "max_abs_error": report.max_abs_error, "mean_abs_error": report.mean_abs_error,
               "spearman": report.spearman, "top_k": report.top_k, "top_k_overlap": report.top_k_overlap,
               "verdict": report.verdict, "reasons": report.reasons, "seconds": time.perf_counter() - t0,
               "reference_seconds": report.reference_info.get("seconds"),
               "reference_width": report.reference_info.get("width"),
               "accepted": report.reference_info.get("accepted")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def quality_graphs(args):
    """(name, model, true alarm variables): synthetic graphs with truth drawn from the model, then the
    shipped examples with their recorded truth.

    The synthetic graphs are `layered` ones with input priors lowered to [0.05, 0.6] (with the default
    priors nearly every alarm comes out true); graphs whose alarms come out all true or all false are
    skipped (any order ranks them alike).
    """
    import dataclasses

    from datalog.bayesnet import to_model
    from datalog.synthetic import layered, sample_truth
    from fastlbp.inference.simulate import graph_truth

    made = 0
    for seed in range(8 * args.quality_graphs):
        if made == args.quality_graphs:
            break
        dg = layered(num_inputs=args.quality_size, layers=3, width=args.quality_size, seed=seed)
        rng = np.random.default_rng(seed)
        priors = {i: float(np.round(rng.uniform(0.05, 0.6), 3)) for i in dg.priors}
        dg = dataclasses.replace(dg, priors=priors)
        truth = sample_truth(dg, seed=1000 + seed)
        model = to_model(dg)
        true = {model.index[dg.tuples[t]] for t in np.asarray(dg.alarms) if truth[t]}
        if 0 < len(true) < len(model.alarms):
            made += 1
            yield f"layered-{args.quality_size}-s{seed}", model, true
    for name in args.examples.split(","):
        model = fastlbp.load(DATA / name)
        true = graph_truth(model)
        if true:
            yield name, model, true


def section_quality(args, gpu: bool) -> list[dict]:
    from fastlbp.inference.simulate import simulate

    rows, start = [], time.perf_counter()
    samples = args.quality_samples or (10**6 if gpu else 10**5)
    for name, model, true in quality_graphs(args):
        for method in ("lbp", "exact", "sample"):
            if time.perf_counter() - start > args.budget_s:
                rows.append({"graph": name, "method": method, "skipped": "budget"})
                continue
            settings = Settings(method=method, samples=samples, seed=1)
            t0 = time.perf_counter()
            row = {"graph": name, "method": method, "alarms": len(model.alarms), "true": len(true)}
            try:
                result = simulate(model, true, settings=settings, max_rounds=args.quality_max_rounds)
            except Exception as err:  # noqa: BLE001  (a refusal is a result of the benchmark)
                row["error"] = f"{type(err).__name__}: {str(err)[:200]}"
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            m = result.metrics
            row.update(rank_100_t=m.rank_100_t, rank_90_t=m.rank_90_t, auc=m.auc, complete=result.complete,
                       found=result.steps[-1].found if result.steps else 0,
                       rounds=len(result.steps), seconds=time.perf_counter() - t0,
                       not_converged=sum(not s.converged for s in result.steps))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _fmt(x, spec: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def print_tables(results: dict, device: str) -> None:
    if "exact" in results:
        print(f"\nexact marginals of every variable, n x n noisy-OR grids, 2 labels ({device})")
        print(f"{'n':>3} {'width':>5} {'largest':>8} {'ours 1st':>9} {'ours rep':>9} {'of it plan':>10} "
              f"{'pyAgrum':>9} {'speed-up':>8} {'max diff':>8}")
        for r in results["exact"]:
            if "skipped" in r or "error" in r:
                print(f"{r['n']:>3} {r.get('skipped') or r.get('error')}")
                continue
            print(f"{r['n']:>3} {r['width']:>5} 2^{int(math.log2(r['largest_entries'])):<6} "
                  f"{r['ours_first_s']:>8.3f}s {r['ours_repeat_s'] * 1e3:>7.1f}ms "
                  f"{r['ours_plan_s'] * 1e3:>8.1f}ms "
                  f"{_fmt(r.get('pyagrum_s', None) and r['pyagrum_s'] * 1e3, '>7.1f')}ms "
                  f"{_fmt(r.get('speedup'), '>7.2f')}x {_fmt(r.get('max_abs_diff'), '>8.1e')}")
    if "sampler" in results:
        print(f"\nsampler, no labels ({device})")
        print(f"{'edges':>9} {'worlds':>8} {'first':>7} {'time':>8} {'edge-worlds/s':>13} {'floor':>8} "
              f"{'of floor':>8}")
        for r in results["sampler"]:
            if "skipped" in r:
                print(f"{r['factor_edges']:>9} skipped")
                continue
            print(f"{r['factor_edges']:>9} {r['worlds']:>8} {r['first_call_s']:>6.1f}s {r['seconds']:>7.4f}s "
                  f"{r['edge_worlds_per_s']:>13.3g} {r['floor_s']:>7.4f}s {r['of_floor']:>8.1%}")
    if "check" in results:
        print(f"\nfastlbp check, no labels ({device})")
        print(f"{'graph':<16} {'ref':<7} {'alarms':>6} {'max err':>8} {'mean err':>8} {'spearman':>8} "
              f"{'top-k':>6} {'verdict':<7} {'seconds':>7}")
        for r in results["check"]:
            if "skipped" in r or "error" in r:
                print(f"{r['graph']:<16} {r.get('skipped') or r.get('error')}")
                continue
            print(f"{r['graph']:<16} {r['reference']:<7} {r['alarms']:>6} {r['max_abs_error']:>8.3g} "
                  f"{r['mean_abs_error']:>8.3g} {_fmt(r['spearman'], '>8.2f')} "
                  f"{r['top_k_overlap']:>2}/{r['top_k']:<3} {r['verdict']:<7} {r['seconds']:>7.1f}")
    if "quality" in results:
        print(f"\nranking quality with an oracle ({device}): Rank-100%-T (lower is better), AUC")
        print(f"{'graph':<20} {'alarms':>6} {'true':>5} {'method':<7} {'rank100':>7} {'rank90':>7} "
              f"{'AUC':>6} {'found':>9} {'seconds':>8}")
        for r in results["quality"]:
            if "skipped" in r or "error" in r:
                why = r.get("skipped") or r["error"][:60]
                print(f"{r['graph']:<20} {'':>6} {'':>5} {r['method']:<7} {why}")
                continue
            print(f"{r['graph']:<20} {r['alarms']:>6} {r['true']:>5} {r['method']:<7} "
                  f"{_fmt(r['rank_100_t'], '>7')} {_fmt(r['rank_90_t'], '>7')} {_fmt(r['auc'], '>6.3f')} "
                  f"{str(r['found']) + '/' + str(r['rounds']):>9} {r['seconds']:>8.1f}")


SECTIONS = {"exact": section_exact, "sampler": section_sampler, "check": section_check,
            "quality": section_quality}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="exact,sampler,check,quality")
    ap.add_argument("--budget-s", type=float, default=150.0, help="seconds after which a section starts "
                    "no new size or graph")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--exact-sizes", default=None, help="grid sides (default 8..16 on a GPU, 4..12 on a CPU)")
    ap.add_argument("--agrum-max", type=int, default=16)
    ap.add_argument("--sampler-sizes", default=None, help="factor-graph edges (default 5e4,5e5,5e6 on a GPU)")
    ap.add_argument("--worlds", type=int, default=None)
    ap.add_argument("--check-samples", type=int, default=None)
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    ap.add_argument("--quality-max-rounds", type=int, default=None,
                    help="labels per quality run (default: until every true alarm is found); a shorter run "
                         "reports the true alarms found in it")
    ap.add_argument("--quality-graphs", type=int, default=6)
    ap.add_argument("--quality-size", type=int, default=12, help="tuples per layer of the synthetic graphs")
    ap.add_argument("--quality-samples", type=int, default=None)
    args = ap.parse_args(argv)
    gpu = jax.default_backend() == "gpu"
    env = environment()
    results: dict = {}
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        try:
            results[name] = SECTIONS[name](args, gpu)
        except Exception:  # noqa: BLE001  (one broken section must not lose the others' figures)
            traceback.print_exc()
            results[name] = [{"error": traceback.format_exc(limit=3)}]
        print(f"section {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    path = write_json("bench_inference.json", {"environment": env, "args": vars(args), **results})
    print(f"JSON: {path}")
    print_tables({k: v for k, v in results.items() if not (len(v) == 1 and set(v[0]) == {"error"})},
                 env["device"])
    return results


if __name__ == "__main__":
    main()
