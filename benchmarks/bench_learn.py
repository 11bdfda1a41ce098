"""Learning rule probabilities (`fastlbp learn`): recovery of known probabilities and the ranking it buys.

    python benchmarks/bench_learn.py --vertices 3000 --graphs 4            # this CPU, ~minutes
    # the H200, ftp size (~69k variables after compression, ~5,500 alarms, ~180 true):
    python benchmarks/bench_learn.py --preset ftp --graphs 8 --layers 12 --alarm-layers 1 --low 0.6 --high 0.9

A family of synthetic graphs of one "analysis" (`datalog.synthetic.generate`: the same 16 rules,
different seeds) whose truth is one ancestral sample (`sample_truth`) drawn with *true* rule
probabilities: `--wrong` of the rules (every other one by default) at uniform(--low, --high), the
rest at --right; every graph *states* --stated (0.999) for every rule, as a rule-prob.txt that
nobody fitted would. The labels are the alarms' truth only (what an oracle gives).

Leave-one-out over the family: for each fold, `Learner` (EM, `--method` E-step) learns on the other
k-1 graphs, then `simulate` (Bingo's loop, `--sim-method`) ranks the held-out graph with

    stated    the graph's own probabilities (0.999)
    learned   the fold's learned probabilities
    true      the probabilities the truth was drawn with (the ceiling)
    online    stated to start, then `simulate(online=...)`: --online-steps EM steps on the
              held-out graph's labels so far after every label (no other graph; `--online`)

Reported: per rule the true probability, the learned one (mean over folds), the largest error over
folds and the support (clause instances in the k-1 training graphs, mean); per variant Rank-100%-T,
inversions and AUC averaged over the folds whose held-out graph has true alarms (the others are
listed); learning seconds per fold (the first E-step of each graph compiles its LBP round) and
E-steps. JSON under $OUT (default ./out) as bench_learn.json, rewritten after every fold.

generate's default depth (~23 derived layers at 3,000 vertices) leaves almost no alarm true once
rules are at 0.3-0.6, so the family uses --layers 6 with --alarm-layers 2 (about a third to two
thirds of the alarms true).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datalog import synthetic  # noqa: E402
from datalog.bayesnet import to_model  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.inference.learn import Learner, LearnOptions, OnlineOptions, training_labels  # noqa: E402
from fastlbp.inference.simulate import graph_truth, simulate  # noqa: E402
from fastlbp.io.rule_probs import apply_rule_probs  # noqa: E402


def family(args) -> tuple[dict[str, float], list]:
    """(true probabilities by rule name, [(stated model, true model, true alarm vars)])."""
    rng = np.random.default_rng(args.seed)
    num_rules = 2 * (len(synthetic.DERIVED_RELATIONS) + 1)
    wrong = range(num_rules) if args.wrong == "all" else range(0, num_rules, 2)
    true_p = np.full(num_rules, args.right)
    true_p[list(wrong)] = np.round(rng.uniform(args.low, args.high, len(wrong)), 3)
    size = {"preset": args.preset} if args.preset else {"vertices": args.vertices}
    graphs = []
    for g in range(args.graphs):
        dg = synthetic.generate(**size, seed=args.seed * 1000 + g, rule_probabilities=true_p.tolist(),
                                layers=args.layers or None, alarm_layers=args.alarm_layers)
        if args.alarms and args.alarms < len(dg.alarms):  # a random subset: bounded simulate runs
            rng_g = np.random.default_rng(args.seed * 1000 + g)
            pick = rng_g.choice(len(dg.alarms), args.alarms, replace=False)
            dg.alarms = np.sort(np.asarray(dg.alarms)[pick])
        truth = synthetic.sample_truth(dg, args.seed * 1000 + g)
        dg.truth = {int(a): bool(truth[a]) for a in dg.alarms}
        dg.rules = [dataclasses.replace(r, probability=args.stated) for r in dg.rules]
        stated = to_model(dg, compress=True)
        names = [r.name for r in dg.rules]
        true_model = apply_rule_probs(stated, dict(zip(names, true_p.tolist(), strict=True)))
        graphs.append((stated, true_model, graph_truth(stated) or set()))
    return dict(zip([f"R{i}" for i in range(num_rules)], true_p.tolist(), strict=True)), graphs


def _save(payload: dict):
    """Writes bench_learn.json under $OUT (after every fold, so a killed run keeps what it finished)."""
    try:
        from common import environment, write_json
    except ImportError:  # run from elsewhere: stdout only
        return None
    return write_json("bench_learn.json", {**payload, "environment": environment()})


def run_sim(model, truth, settings, online=None, max_rounds=None) -> dict:
    t = time.perf_counter()
    r = simulate(model, truth, settings=settings, online=online, max_rounds=max_rounds)
    m = r.metrics
    return {"rank_100_t": m.rank_100_t, "inversions": m.inversions, "auc": m.auc, "complete": r.complete,
            "rounds": len(r.steps), "seconds": time.perf_counter() - t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=None, help="a synthetic.PRESETS size (weblech ... ftp)")
    ap.add_argument("--vertices", type=int, default=3000, help="BN vertices when no --preset")
    ap.add_argument("--graphs", type=int, default=4)
    ap.add_argument("--layers", type=int, default=6,
                    help="derived layers, 0: generate's default (~23 at 3000 vertices: it leaves almost "
                         "no alarm true once rules are at 0.3-0.6)")
    ap.add_argument("--alarm-layers", type=int, default=2)
    ap.add_argument("--alarms", type=int, default=0,
                    help="keep this many of the alarm layers' tuples as alarms, at random (0: all); "
                         "compression prunes what no kept alarm depends on")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--low", type=float, default=0.3)
    ap.add_argument("--high", type=float, default=0.6)
    ap.add_argument("--right", type=float, default=0.999)
    ap.add_argument("--stated", type=float, default=0.999)
    ap.add_argument("--wrong", choices=["half", "all"], default="half")
    ap.add_argument("--method", default="lbp", help="E-step: exact, sample, lbp, auto")
    ap.add_argument("--em-iters", type=int, default=100)
    ap.add_argument("--em-tol", type=float, default=1e-4)
    ap.add_argument("--prior-strength", type=float, default=2.0)
    ap.add_argument("--sim-method", default="lbp", help="simulate's method")
    ap.add_argument("--online", action="store_true", help="also simulate with online learning")
    ap.add_argument("--online-steps", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=None)
    ap.add_argument("--support", type=int, default=200, help="support at which a rule counts as supported")
    args = ap.parse_args()

    t0 = time.perf_counter()
    true_p, graphs = family(args)
    build_s = time.perf_counter() - t0
    sizes = [(m.num_vars, len(m.alarms), len(t)) for m, _, t in graphs]
    print(f"family: {len(graphs)} graphs (variables, alarms, true alarms): {sizes}; built in {build_s:.1f} s",
          flush=True)
    sim_settings = Settings(method=args.sim_method)
    learn_settings = Settings(seed=args.seed)
    options = LearnOptions(method=args.method, max_iters=args.em_iters, tol=args.em_tol,
                           prior_strength=args.prior_strength, settings=learn_settings)
    folds = []
    for i, (stated, true_model, truth) in enumerate(graphs):
        train = [g for j, g in enumerate(graphs) if j != i]
        t = time.perf_counter()
        learner = Learner([m for m, _, _ in train], [training_labels(m) for m, _, _ in train], options)
        setup_s = time.perf_counter() - t
        result = learner.run()
        learn_s = time.perf_counter() - t
        learned = apply_rule_probs(stated, result.as_dict())
        fold = {"graph": i, "learn_s": learn_s, "setup_s": setup_s, "em_steps": result.iterations,
                "converged": result.converged, "methods": sorted(set(result.methods)),
                "probabilities": result.as_dict(), "support": dict(zip(result.names, result.support.tolist(),
                                                                     strict=True)),
                "num_true": len(truth)}
        if truth:
            variants = {"stated": stated, "learned": learned, "true": true_model}
            for name, model in variants.items():
                fold[name] = run_sim(model, truth, sim_settings, max_rounds=args.max_rounds)
            if args.online:
                online = OnlineOptions(LearnOptions(method=args.method, settings=learn_settings),
                                       steps=args.online_steps)
                fold["online"] = run_sim(stated, truth, sim_settings, online, args.max_rounds)
        folds.append(fold)
        _save({"args": vars(args), "true_p": true_p, "sizes": sizes, "build_s": build_s, "folds": folds,
               "partial": True})
        shown = {k: (fold[k]["rank_100_t"], fold[k]["inversions"]) for k in
                 ("stated", "learned", "true", "online") if k in fold}
        print(f"fold {i}: learned in {learn_s:.2f} s ({result.iterations} steps, "
              f"{'converged' if result.converged else 'not converged'}); true alarms {len(truth)}; "
              f"(Rank-100%-T, inversions) {shown}", flush=True)

    rules = []
    for name, p in true_p.items():
        got = np.array([f["probabilities"].get(name, np.nan) for f in folds])
        sup = np.array([f["support"].get(name, 0) for f in folds])
        rules.append({"rule": name, "true": p, "learned_mean": float(np.nanmean(got)),
                      "max_abs_error": float(np.nanmax(np.abs(got - p))), "support_mean": float(sup.mean()),
                      "support_min": int(sup.min())})
    variants = [v for v in ("stated", "learned", "true", "online") if any(v in f for f in folds)]
    scored = [f for f in folds if f["num_true"]]
    summary = {}
    for v in variants:
        rows = [f[v] for f in scored]
        summary[v] = {k: float(np.mean([r[k] for r in rows if r[k] is not None])) if rows else None
                      for k in ("rank_100_t", "inversions", "auc", "seconds")}
    payload = {"args": vars(args), "true_p": true_p, "sizes": sizes, "build_s": build_s, "folds": folds,
               "rules": rules, "summary": summary,
               "learn_s_mean": float(np.mean([f["learn_s"] for f in folds])),
               "unscored_folds": [f["graph"] for f in folds if not f["num_true"]]}
    path = _save(payload)
    print("\n| rule | true p | learned (mean) | max error | support (mean, min) |")
    print("|---|---|---|---|---|")
    for r in rules:
        print(f"| {r['rule']} | {r['true']:.3f} | {r['learned_mean']:.3f} | {r['max_abs_error']:.3f} | "
              f"{r['support_mean']:.0f}, {r['support_min']} |")
    ok = [r for r in rules if r["support_min"] >= args.support]
    if ok:
        print(f"\nrules with support >= {args.support} in every fold: {len(ok)}, largest error "
              f"{max(r['max_abs_error'] for r in ok):.3f}")
    print(f"\nfolds scored: {len(scored)} of {len(folds)} (the others' held-out graph has no true alarm)")
    print("\n| probabilities | Rank-100%-T | inversions | AUC | simulate s |")
    print("|---|---|---|---|---|")
    for v, s in summary.items():
        print(f"| {v} | {s['rank_100_t']:.1f} | {s['inversions']:.1f} | {s['auc']:.3f} | "
              f"{s['seconds']:.1f} |")
    print(f"\nlearning: {payload['learn_s_mean']:.2f} s per fold on {len(graphs) - 1} graphs "
          f"(E-step {args.method}); {time.perf_counter() - t0:.0f} s in all"
          + (f"; wrote {path}" if path else ""))


if __name__ == "__main__":
    main()
