"""Learning on independent families (issue 43): recovery, interval coverage and the held-out ranking.

    python benchmarks/bench_learn_families.py                          # avrora size, 5 graphs, every family
    python benchmarks/bench_learn_families.py --size small --method exact   # where exact inference fits

Per family of `datalog.families` (taint, pointsto, andersen, synthetic): `--graphs` training graphs
and `--held-out` graphs of `--size`, truth drawn with the family's true rule probabilities while
every file states 0.999. `Learner` (`--method` E-step) learns from the training graphs' alarm
labels (`--labels all`: every tuple's); reported: E-steps, seconds (EM, then the information that
gives the intervals), mean |learned - true| over the rules with clauses, the share of those whose
95 % interval covers the true probability, and the rules reported poorly identified (interval wider
than 0.1). Then `simulate` (Bingo's loop, `--sim-method`) ranks each held-out graph (`--alarms` of
its alarms, at random) with the stated, the learned and the true probabilities: Rank-100%-T (labels
until every true alarm is found) and the true alarms found in the first `--first` labels.

The last thing printed is one short table (E-steps: rounds of E-steps; with exact E-steps EM runs from
`LearnOptions.starts` points at once, one batch a round); the details (per family: per rule true / learned /
interval / support / shape, per held-out graph the simulate runs) go to bench_learn_families.json
under --out (default: $OUT, else a new temporary folder). The same command runs on a CPU or a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datalog import families  # noqa: E402
from datalog.rule_probs import apply_rule_probs  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.inference.learn import Learner, LearnOptions, training_labels  # noqa: E402
from fastlbp.inference.simulate import simulate  # noqa: E402

VARIANTS = ("stated", "learned", "true")


def device() -> str:
    import jax

    d = jax.devices()[0]
    return f"{d.platform}:{getattr(d, 'device_kind', d)}"


def rank(model, truth: set[int], settings: Settings, first: int, max_rounds: int | None) -> dict:
    t = time.perf_counter()
    r = simulate(model, truth, settings=settings, max_rounds=max_rounds)
    found_first = sum(s.truth for s in r.steps[:first])
    return {"rank_100_t": r.metrics.rank_100_t, "found_first": int(found_first), "true": len(truth),
            "alarms": r.num_alarms, "rounds": len(r.steps), "complete": r.complete,
            "seconds": time.perf_counter() - t}


def run_family(args, name: str) -> dict:
    t0 = time.perf_counter()
    fam = families.make_family(name, size=args.size, graphs=args.graphs, held_out=args.held_out,
                               seed=args.seed, labels=args.labels, held_out_alarms=args.alarms)
    build_s = time.perf_counter() - t0
    sizes = [g.model.num_vars for g in fam.train]
    labels = [training_labels(g.model) for g in fam.train]
    print(f"{name}: {len(fam.train)} graphs of {min(sizes):,}-{max(sizes):,} variables, "
          f"{sum(map(len, labels)):,} labels ({sum(sum(v.values()) for v in labels):,} true), built in "
          f"{build_s:.1f} s", flush=True)
    options = LearnOptions(method=args.method, settings=Settings(seed=args.seed), max_iters=args.em_iters)
    t = time.perf_counter()
    result = Learner([g.model for g in fam.train], labels, options).run()
    starts = result.starts
    total_s = time.perf_counter() - t
    true = np.array([fam.true_p[n] for n in result.names])
    used = result.clauses > 0
    err = np.abs(result.probability - true)
    covered = (result.lower <= true) & (true <= result.upper)
    poorly = used & (result.upper - result.lower > 0.1)
    out = {"family": name, "build_s": build_s, "variables": sizes, "labels": [len(v) for v in labels],
           "em_steps": result.iterations, "converged": result.converged, "starts": starts,
           "methods": sorted(set(result.methods)),
           "learn_s": result.seconds, "information_s": result.information_seconds, "total_s": total_s,
           "mean_abs_error": float(err[used].mean()) if used.any() else None,
           "mean_abs_error_stated": float(np.abs(result.prior - true)[used].mean()) if used.any() else None,
           "covered": int(covered[used].sum()), "rules_with_clauses": int(used.sum()),
           "poorly_identified": int(poorly.sum()),
           "rules": [{"rule": n, "shape": fam.shapes[n], "true": float(true[i]),
                      "stated": float(result.prior[i]),
                      "learned": float(result.probability[i]), "lower": float(result.lower[i]),
                      "upper": float(result.upper[i]), "support": float(result.support[i]),
                      "clauses": int(result.clauses[i]), "covered": bool(covered[i])}
                     for i, n in enumerate(result.names)],
           "held_out": []}
    print(f"{name}: learned in {result.seconds:.1f} s + information {result.information_seconds:.1f} s, "
          f"{result.iterations} E-steps ({', '.join(out['methods'])}), mean |learned - true| "
          f"{out['mean_abs_error']:.3f} (stated {out['mean_abs_error_stated']:.3f}), intervals cover "
          f"{out['covered']}/{out['rules_with_clauses']}", flush=True)
    for r in out["rules"]:
        print(f"    {r['rule']:<22} {r['shape']:<8} true {r['true']:.3f} learned {r['learned']:.3f} "
              f"[{r['lower']:.3f}, {r['upper']:.3f}] support {r['support']:.0f} of {r['clauses']}",
              flush=True)
    if not args.no_simulate:
        sim = Settings(method=args.sim_method, seed=args.seed)
        for g in fam.held_out:
            if not g.truth:
                continue
            models = {"stated": g.model, "learned": apply_rule_probs(g.model, result.as_dict()),
                      "true": apply_rule_probs(g.model, fam.true_p)}
            row = {v: rank(m, g.truth, sim, args.first, args.max_rounds) for v, m in models.items()}
            out["held_out"].append(row)
            print(f"{name}: held-out graph ({row['true']['alarms']} alarms, {row['true']['true']} true): "
                  + ", ".join(f"{v} Rank-100%-T {row[v]['rank_100_t']} found@{args.first} "
                              f"{row[v]['found_first']}" for v in VARIANTS), flush=True)
    return out


def lbp_bias(args) -> None:
    """The LBP E-step against the exact one on each family at --size (exact must fit): what LBP's EM
    fixed point gets wrong, and whether its intervals say so."""
    rows = []
    for name in args.families:
        fam = families.make_family(name, size=args.size, graphs=args.graphs, held_out=0, seed=args.seed,
                                   labels=args.labels)
        models = [g.model for g in fam.train]
        labels = [training_labels(m) for m in models]
        got = {}
        for method in ("exact", "lbp"):
            t = time.perf_counter()
            options = LearnOptions(method=method, settings=Settings(seed=args.seed))
            got[method] = Learner(models, labels, options).run()
            got[method + "_s"] = time.perf_counter() - t
        e, lb = got["exact"], got["lbp"]
        used = e.clauses > 0
        gap = np.abs(lb.probability - e.probability)[used]
        missed = ((e.probability < lb.lower) | (e.probability > lb.upper))[used]
        true = np.array([fam.true_p[n] for n in e.names])[used]
        rows.append((name, int(used.sum()), float(gap.max()), float(gap.mean()), int(missed.sum()),
                     float(np.abs(e.probability[used] - true).mean()),
                     float(np.abs(lb.probability[used] - true).mean()),
                     e.iterations, lb.iterations, got["exact_s"], got["lbp_s"]))
        print(f"{name}: exact {np.round(e.probability, 3)}\n{name}: lbp   {np.round(lb.probability, 3)}",
              flush=True)
    print(f"\n| family ({args.size}, {args.graphs} graphs) | rules with clauses | max / mean "
          "abs(LBP - exact) | LBP intervals leaving out exact's estimate | mean abs error exact / LBP | "
          "E-steps exact / LBP | s exact / LBP |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.3f} / {r[3]:.3f} | {r[4]} | {r[5]:.3f} / {r[6]:.3f} | "
              f"{r[7]} / {r[8]} | "
              f"{r[9]:.0f} / {r[10]:.0f} |")


def mean(rows: list[dict], variant: str, key: str) -> float:
    vals = [r[variant][key] for r in rows if r[variant][key] is not None]
    return float(np.mean(vals)) if vals else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="*", default=list(families.FAMILIES), choices=families.FAMILIES)
    ap.add_argument("--size", default="avrora", help="small, medium, avrora, or an int scale")
    ap.add_argument("--graphs", type=int, default=5, help="training graphs per family")
    ap.add_argument("--held-out", type=int, default=3,
                    help="held-out graphs per family (Rank-100%%-T and found-first averaged over them: one "
                         "graph's last true alarm decides its Rank-100%%-T)")
    ap.add_argument("--alarms", type=int, default=200, help="alarms of a held-out graph to rank (0: all)")
    ap.add_argument("--labels", choices=["alarms", "all"], default="alarms")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method", default="auto", help="the E-step: auto, exact, sample, lbp")
    ap.add_argument("--em-iters", type=int, default=100)
    ap.add_argument("--sim-method", default="lbp", help="simulate's method")
    ap.add_argument("--first", type=int, default=60, help="true alarms found in this many first labels")
    ap.add_argument("--max-rounds", type=int, default=None)
    ap.add_argument("--no-simulate", action="store_true")
    ap.add_argument("--lbp-bias", action="store_true",
                    help="only compare the LBP E-step's estimates with the exact one's (exact must fit "
                         "--size)")
    ap.add_argument("--out", default=None, help="folder of the JSON (default $OUT, else a temporary one)")
    args = ap.parse_args()
    args.size = int(args.size) if args.size.isdigit() else args.size

    import jax

    jax.config.update("jax_enable_x64", True)
    if args.lbp_bias:
        lbp_bias(args)
        return
    out_dir = Path(args.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="bench_learn_families-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    payload = {"args": vars(args), "device": device(), "date": date,
               "families": []}
    start = time.perf_counter()
    path = out_dir / "bench_learn_families.json"
    for name in args.families:
        payload["families"].append(run_family(args, name))
        path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"\n{time.perf_counter() - start:.0f} s in all on {payload['device']}, {payload['date']}; "
          f"details: {path}")
    covered = sum(f["covered"] for f in payload["families"])
    rules = sum(f["rules_with_clauses"] for f in payload["families"])
    print(f"intervals cover {covered} of {rules} rules with clauses ({100 * covered / max(rules, 1):.0f} %)")
    print(f"\n| family ({args.size}, {args.graphs} graphs) | variables per graph | E-step | E-steps | "
          f"learn s (+ information) | mean abs error (stated) | intervals cover | poorly identified | "
          f"Rank-100%-T stated / learned / true | found in first {args.first}: stated / learned / true |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in payload["families"]:
        rows = f["held_out"]
        ranks = " / ".join(f"{mean(rows, v, 'rank_100_t'):.0f}" for v in VARIANTS) if rows else "-"
        found = " / ".join(f"{mean(rows, v, 'found_first'):.0f}" for v in VARIANTS) if rows else "-"
        print(f"| {f['family']} | {int(np.mean(f['variables'])):,} | {', '.join(f['methods'])} | "
              f"{f['em_steps']} | {f['learn_s']:.0f} (+{f['information_s']:.0f}) | "
              f"{f['mean_abs_error']:.3f} ({f['mean_abs_error_stated']:.3f}) | "
              f"{f['covered']}/{f['rules_with_clauses']} | {f['poorly_identified']} | {ranks} | {found} |")


if __name__ == "__main__":
    main()
