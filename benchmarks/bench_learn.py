"""Learning rule probabilities (`fastlbp learn`): recovery of known probabilities and the ranking it buys.

    python benchmarks/bench_learn.py --vertices 3000 --graphs 4            # this CPU, ~minutes
    # issue 32's criterion, on the H200 (ftp size, 8 graphs; folds may be split over calls, see below):
    python benchmarks/bench_learn.py --preset ftp --graphs 8 --alarms 1000

A family of synthetic graphs of one "analysis" (`datalog.synthetic.generate`: the same 16 rules,
different seeds) whose truth is one ancestral sample (`sample_world`) drawn with *true* rule
probabilities: `--wrong` of the rules (every other one by default) at uniform(--low, --high), the
rest at --right; every graph *states* --stated (0.999) for every rule, as a rule-prob.txt that
nobody fitted would.

Labels to learn from (`--labels`): `alarms` (default) gives the truth of every alarm tuple of the
training graphs, what an oracle gives (derivation.json's "truth", oracle_queries.txt); `all` gives
the sampled truth of every tuple (the synthetic world covers them all), an upper bound on what labels
can tell. The held-out graph is ranked over `--alarms` of its alarm tuples chosen at random (all when
0; compression prunes what they do not depend on), so `simulate` stays bounded.

Leave-one-out: for each fold, `Learner` (EM, `--method` E-step) learns on the other k-1 graphs, then
`simulate` (Bingo's loop, `--sim-method`) ranks the held-out graph with

    stated    the graph's own probabilities (0.999)
    learned   the fold's learned probabilities
    true      the probabilities the truth was drawn with (the ceiling)
    online    stated to start, then `simulate(online=...)`: --online-steps EM steps on the
              held-out graph's labels so far after every label (no other graph; `--online`)

Support. A rule's clause count overstates what alarm labels say about it: an alarm that several rules
derive constrains the product of their probabilities, not each. The support reported is the
*informed* count (`LearnResult.support`): how many fully observed clauses (body and firing seen) would
tell as much, from the observed information of the labels with the other rules free; its 95% interval
comes from the same curvature. Recovery is judged on the rules whose informed support passes
--support in every fold (the issue's "support >= 200 clause instances"), and, for comparison, on the
rules with that many clauses.

Splitting over calls (10 minutes each on the device): `--folds 0 1` runs those folds only and writes
bench_learn_folds0-1.json under $OUT (rewritten after every fold); `--summarize A.json B.json ...`
merges fold files and prints the tables without computing. The last thing printed is a short table
of the issue's criteria. Details (per fold: probabilities, supports, intervals, timings, simulate
runs) are in the JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datalog import synthetic  # noqa: E402
from datalog.bayesnet import to_model  # noqa: E402
from datalog.rule_probs import apply_rule_probs  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.inference.learn import Learner, LearnOptions, OnlineOptions, training_labels  # noqa: E402
from fastlbp.inference.simulate import graph_truth, simulate  # noqa: E402

VARIANTS = ("stated", "learned", "true", "online")


def true_probabilities(args) -> dict[str, float]:
    rng = np.random.default_rng(args.seed)
    num_rules = 2 * (len(synthetic.DERIVED_RELATIONS) + 1)
    wrong = range(num_rules) if args.wrong == "all" else range(0, num_rules, 2)
    true_p = np.full(num_rules, args.right)
    true_p[list(wrong)] = np.round(rng.uniform(args.low, args.high, len(wrong)), 3)
    return dict(zip([f"R{i}" for i in range(num_rules)], true_p.tolist(), strict=True))


def make_graph(args, g: int, true_p: dict[str, float]) -> dict:
    """Graph g of the family: {"train": model to learn from, "test": stated model to rank, "true": the
    same with the true probabilities, "truth": its true alarm variables, "size": counts}."""
    size = {"preset": args.preset} if args.preset else {"vertices": args.vertices}
    dg = synthetic.generate(**size, seed=args.seed * 1000 + g, rule_probabilities=list(true_p.values()),
                            layers=args.layers or None, alarm_layers=args.alarm_layers)
    world = synthetic.sample_truth(dg, args.seed * 1000 + g)
    dg.rules = [dataclasses.replace(r, probability=args.stated) for r in dg.rules]
    all_alarms = np.asarray(dg.alarms)
    labelled = np.arange(dg.num_tuples) if args.labels == "all" else all_alarms
    dg.truth = {int(t): bool(world[t]) for t in labelled}
    train = to_model(dg, compress=True)
    if args.alarms and args.alarms < all_alarms.size:  # a random subset: bounded simulate runs
        pick = np.random.default_rng(args.seed * 1000 + g).choice(all_alarms.size, args.alarms, replace=False)
        dg.alarms = np.sort(all_alarms[pick])
    dg.truth = {int(a): bool(world[a]) for a in dg.alarms}
    test = to_model(dg, compress=True)
    truth = graph_truth(test) or set()
    size = {"variables_train": train.num_vars, "labels_train": len(training_labels(train)),
            "alarms_train": int(all_alarms.size), "true_alarms_train": int(world[all_alarms].sum()),
            "variables_test": test.num_vars, "alarms_test": len(test.alarms), "true_alarms_test": len(truth)}
    return {"train": train, "test": test, "true": apply_rule_probs(test, true_p), "truth": truth,
            "size": size}


def run_sim(model, truth, settings, online=None, max_rounds=None) -> dict:
    t = time.perf_counter()
    r = simulate(model, truth, settings=settings, online=online, max_rounds=max_rounds)
    m = r.metrics
    return {"rank_100_t": m.rank_100_t, "inversions": m.inversions, "auc": m.auc, "complete": r.complete,
            "rounds": len(r.steps), "seconds": time.perf_counter() - t}


def run_fold(args, i: int, graphs: list[dict], true_p: dict[str, float]) -> dict:
    train = [g["train"] for j, g in enumerate(graphs) if j != i]
    options = LearnOptions(method=args.method, max_iters=args.em_iters, tol=args.em_tol,
                           prior_strength=args.prior_strength, settings=Settings(seed=args.seed),
                           batch=not args.no_batch)
    t = time.perf_counter()
    learner = Learner(train, [training_labels(m) for m in train], options)
    result = learner.run()
    total_s = time.perf_counter() - t
    held = graphs[i]
    fold = {"graph": i, "learn_s": result.seconds, "information_s": result.information_seconds,
            "total_s": total_s, "em_steps": result.iterations, "converged": result.converged,
            "methods": sorted(set(result.methods)), "num_true": len(held["truth"]),
            **{key: dict(zip(result.names, np.asarray(getattr(result, key)).tolist(), strict=True))
               for key in ("probability", "clauses", "support", "lower", "upper", "body")}}
    print(f"fold {i}: learned on {len(train)} graphs in {result.seconds:.2f} s ({result.iterations} E-steps, "
          f"{'converged' if result.converged else 'NOT converged'}), information "
          f"{result.information_seconds:.2f} s; held-out true alarms {len(held['truth'])}", flush=True)
    if held["truth"] and not args.no_simulate:
        sim = Settings(method=args.sim_method)
        learned = apply_rule_probs(held["test"], result.as_dict())
        for name, model in (("stated", held["test"]), ("learned", learned), ("true", held["true"])):
            fold[name] = run_sim(model, held["truth"], sim, max_rounds=args.max_rounds)
        if args.online:
            online = OnlineOptions(LearnOptions(method=args.method, settings=Settings(seed=args.seed)),
                                   steps=args.online_steps)
            fold["online"] = run_sim(held["test"], held["truth"], sim, online, args.max_rounds)
        shown = {k: (fold[k]["rank_100_t"], fold[k]["inversions"]) for k in VARIANTS if k in fold}
        print(f"fold {i}: (Rank-100%-T, inversions) {shown}", flush=True)
    return fold


def swapped(seeds: int) -> None:
    """Online learning on graphs whose stated probabilities are wrong (issue 32: `simulate --learn` must
    find the true alarms with fewer labels than plain `simulate`): layered(16 inputs, 2 layers, 16
    wide, 2 rules), truth drawn with R0 = 0.9, R1 = 0.15, the file stating them swapped; exact
    inference; 3 EM steps per label from the held-out graph's own labels only."""
    rows = []
    for seed in range(seeds):
        dg = synthetic.layered(num_inputs=16, layers=2, width=16, num_rules=2, max_clauses=2, seed=seed)
        dg.rules = [dataclasses.replace(r, probability=p) for r, p in zip(dg.rules, [0.9, 0.15], strict=True)]
        world = synthetic.sample_truth(dg, seed)
        dg.truth = {int(a): bool(world[a]) for a in dg.alarms}
        dg.rules = [dataclasses.replace(r, probability=p) for r, p in zip(dg.rules, [0.15, 0.9], strict=True)]
        model = to_model(dg, compress=True)
        truth = graph_truth(model)
        if not truth:
            continue
        s = Settings(method="exact")
        online = OnlineOptions(LearnOptions(method="exact"), steps=3)
        row = {"seed": seed, "alarms": len(model.alarms), "true": len(truth),
               "plain": run_sim(model, truth, s)["rank_100_t"],
               "online": run_sim(model, truth, s, online)["rank_100_t"],
               "true_p": run_sim(apply_rule_probs(model, {"R0": 0.9, "R1": 0.15}), truth, s)["rank_100_t"]}
        rows.append(row)
        print(row, flush=True)
    print("\n| graphs | Rank-100%-T plain (stated, wrong) | online (`simulate --learn`) | true "
          "probabilities |")
    print("|---|---|---|---|")
    print(f"| {len(rows)} | {sum(r['plain'] for r in rows)} | {sum(r['online'] for r in rows)} | "
          f"{sum(r['true_p'] for r in rows)} |")


def summarize(payload: dict, threshold: float) -> None:
    """Prints the recovery and ranking tables and, last, the criteria."""
    folds, true_p = payload["folds"], payload["true_p"]
    rules = []
    for name, p in true_p.items():
        got = np.array([f["probability"][name] for f in folds])
        lo, hi = np.array([f["lower"][name] for f in folds]), np.array([f["upper"][name] for f in folds])
        rules.append({"rule": name, "true": p, "learned_mean": float(got.mean()),
                      "max_abs_error": float(np.max(np.abs(got - p))),
                      "clauses_min": int(min(f["clauses"][name] for f in folds)),
                      "support_min": float(min(f["support"][name] for f in folds)),
                      "covered": int(np.sum((lo <= p) & (p <= hi))), "widest": float(np.max(hi - lo))})
    print(f"\nRecovery over {len(folds)} folds (each learned on the other graphs; support = informed "
          "clause instances, interval = 95% from the observed information):")
    print("| rule | true p | learned (mean) | max error | clauses (min) | support (min) | interval covers "
          "truth | widest interval |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rules:
        if max(f["clauses"][r["rule"]] for f in folds) == 0:
            print(f"| {r['rule']} | {r['true']:.3f} | no clauses: prior kept | | 0 | 0 | | |")
            continue
        print(f"| {r['rule']} | {r['true']:.3f} | {r['learned_mean']:.3f} | {r['max_abs_error']:.3f} | "
              f"{r['clauses_min']} | {r['support_min']:.0f} | {r['covered']}/{len(folds)} | "
              f"{r['widest']:.3f} |")
    scored = [f for f in folds if f["num_true"] and "learned" in f]
    summary = {}
    for v in VARIANTS:
        rows = [f[v] for f in scored if v in f]
        if rows:
            summary[v] = {k: float(np.mean([r[k] for r in rows if r[k] is not None]))
                          for k in ("rank_100_t", "inversions", "auc", "seconds")}
    if summary:
        print(f"\nRanking the held-out graph ({len(scored)} of {len(folds)} folds scored; mean):")
        print("| probabilities | Rank-100%-T | inversions | AUC | simulate s |")
        print("|---|---|---|---|---|")
        for v, s in summary.items():
            print(f"| {v} | {s['rank_100_t']:.1f} | {s['inversions']:.1f} | {s['auc']:.3f} | "
                  f"{s['seconds']:.1f} |")
    informed = [r for r in rules if r["support_min"] >= threshold]
    counted = [r for r in rules if r["clauses_min"] >= threshold]
    learn_s = [f["learn_s"] for f in folds]
    info_s = [f["information_s"] for f in folds]
    print(f"\nCriteria (issue 32; {len(folds)} folds of {payload['num_graphs']} graphs, "
          f"{payload['args'].get('preset') or payload['args'].get('vertices')}, labels: "
          f"{payload['args']['labels']}, E-step {payload['args']['method']}, {payload['device']}):")
    print("| criterion | measured | target | met |")
    print("|---|---|---|---|")

    def row(name, measured, target, met):
        print(f"| {name} | {measured} | {target} | {'yes' if met else 'NO'} |")

    for label, group in ((f"informed support >= {threshold:g}", informed),
                         (f"clauses >= {threshold:g} (not all informed)", counted)):
        worst = max((r["max_abs_error"] for r in group), default=float("nan"))
        names = ", ".join(r["rule"] for r in group) or "none"
        row(f"recovery, rules with {label}: {names}", f"max error {worst:.3f}", "<= 0.05",
            bool(group) and worst <= 0.05)
    if {"learned", "true", "stated"} <= summary.keys():
        ratio = summary["learned"]["rank_100_t"] / summary["true"]["rank_100_t"]
        row("Rank-100%-T learned / true", f"{summary['learned']['rank_100_t']:.1f} / "
            f"{summary['true']['rank_100_t']:.1f} = {ratio:.3f}", "<= 1.15", ratio <= 1.15)
        row("Rank-100%-T learned vs stated", f"{summary['learned']['rank_100_t']:.1f} vs "
            f"{summary['stated']['rank_100_t']:.1f}", "fewer",
            summary["learned"]["rank_100_t"] < summary["stated"]["rank_100_t"])
    row(f"learning on {payload['num_graphs'] - 1} graphs (EM), s, mean / max over folds",
        f"{np.mean(learn_s):.1f} / {np.max(learn_s):.1f}", "< 60", max(learn_s) < 60)
    print(f"| information (support, intervals), s, mean | {np.mean(info_s):.1f} | | |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=None, help="a synthetic.PRESETS size (weblech ... ftp)")
    ap.add_argument("--vertices", type=int, default=3000, help="BN vertices when no --preset")
    ap.add_argument("--graphs", type=int, default=4)
    ap.add_argument("--folds", type=int, nargs="*", default=None, help="run only these folds (default all)")
    ap.add_argument("--summarize", nargs="*", default=None, help="merge these fold JSONs; compute nothing")
    ap.add_argument("--layers", type=int, default=6,
                    help="derived layers, 0: generate's default (~23 at 3000 vertices: it leaves almost "
                         "no alarm true once rules are at 0.3-0.6)")
    ap.add_argument("--alarm-layers", type=int, default=2)
    ap.add_argument("--alarms", type=int, default=0,
                    help="rank this many of the held-out graph's alarms, at random (0: all)")
    ap.add_argument("--labels", choices=["alarms", "all"], default="alarms",
                    help="training labels: the alarms' truth, or every tuple's")
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
    ap.add_argument("--no-batch", action="store_true", help="LBP E-step per graph, not over their union")
    ap.add_argument("--no-simulate", action="store_true", help="learning and recovery only")
    ap.add_argument("--online", action="store_true", help="also simulate with online learning")
    ap.add_argument("--online-steps", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=None)
    ap.add_argument("--time-limit", type=float, default=0,
                    help="start no fold that would likely end past this many seconds (0: no limit)")
    ap.add_argument("--support", type=float, default=200, help="informed support at which a rule is judged")
    ap.add_argument("--swapped", type=int, default=0,
                    help="only the online-learning check on this many small graphs, probabilities swapped")
    args = ap.parse_args()

    if args.swapped:
        swapped(args.swapped)
        return
    if args.summarize:
        parts = [json.loads(Path(p).read_text()) for p in args.summarize]
        folds = sorted((f for p in parts for f in p["folds"]), key=lambda f: f["graph"])
        summarize({**parts[0], "folds": folds}, args.support)
        return

    from common import environment, write_json

    t0 = time.perf_counter()
    true_p = true_probabilities(args)
    graphs = [make_graph(args, g, true_p) for g in range(args.graphs)]
    build_s = time.perf_counter() - t0
    print(f"family of {len(graphs)} graphs built in {build_s:.1f} s; true p {true_p}", flush=True)
    for g, x in enumerate(graphs):
        print(f"  graph {g}: {x['size']}", flush=True)
    env = environment()
    which = list(range(len(graphs))) if args.folds is None else args.folds
    name = "bench_learn.json" if args.folds is None else f"bench_learn_folds{'-'.join(map(str, which))}.json"
    payload = {"args": vars(args), "true_p": true_p, "num_graphs": len(graphs),
               "sizes": [x["size"] for x in graphs], "build_s": build_s, "folds": [],
               "device": env["device"], "environment": env}
    path, longest = None, 0.0
    for n, i in enumerate(which):
        spent = time.perf_counter() - t0
        if args.time_limit and spent + 1.2 * longest > args.time_limit:
            print(f"stopping before fold {i}: {spent:.0f} s spent, the longest fold took {longest:.0f} s "
                  f"(--time-limit {args.time_limit:g}); run the rest with --folds "
                  f"{' '.join(map(str, which[n:]))}", flush=True)
            break
        t = time.perf_counter()
        payload["folds"].append(run_fold(args, i, graphs, true_p))
        longest = max(longest, time.perf_counter() - t)
        path = write_json(name, payload)
    if not payload["folds"]:
        return
    summarize(payload, args.support)
    print(f"\n{time.perf_counter() - t0:.0f} s in all; wrote {path}")


if __name__ == "__main__":
    main()
