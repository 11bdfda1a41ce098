"""Ranking quality of LBP, sampling and exact inference, and the importance sampler's coverage.

    python benchmarks/bench_quality.py                          # weblech, avrora, synthetic; coverage
    python benchmarks/bench_quality.py --graphs weblech --methods lbp sample --parts quality
    python benchmarks/bench_quality.py --all                    # + ftp and syn-gen (for a GPU)
    python benchmarks/bench_quality.py --parts coverage --coverage-graphs 100

Part "quality": for each graph and each method (lbp, sample, exact) one full run of Bingo's loop
(`fastlbp.inference.simulate.simulate`) with the graph's ground truth as the oracle: Rank-100%-T, Rank-90%-T,
inversions, AUC, rounds, TotalTime, the rounds' total and mean seconds, whether it completed. A run is
cut short by `--max-rounds` (default 30) or, after the round that passes it, by `--time-budget`
seconds of rounds (compilation before round 1 not counted; default 45 on a CPU, 60 on a GPU); the
table says so. A method that raises mid-run is
reported with its error and the round it stopped at. Exact inference is tried once without labels
first; where its tables do not fit (`ExactTooWide`) the line says "does not fit" with the width.
Sampling rounds record the worlds drawn and the effective sample size of every round.

Graphs: the shipped examples (weblech, avrora; ftp only with `--graphs ftp` or `--all`), any graph file
by path (its own ground truth), and synthetic families whose truth is one ancestral sample of the
model (`datalog.synthetic.sample_truth`, the first truth seed >= the graph's seed with true and false
alarms), built with `to_model(compress=True)` as the loaders do:

    syn-tiny    layered(num_inputs=10, layers=3, width=6)     ~70 variables, exact width ~12
    syn-small   layered(num_inputs=14, layers=3, width=10)    ~90 variables, exact width ~17
    syn-medium  layered(num_inputs=60, layers=6, width=50)    ~850 variables, exact does not fit
    syn-gen     generate(vertices=2000, rule p 0.8-0.99, input prior 0.9, 8 layers, 2 of alarms)
                ~1,600 variables, ~116 alarms (--all; exact's refusal alone takes about a minute on a CPU)

Part "coverage": the importance sampler against enumeration. Many small random Bingo networks
(`layered` with tiny sizes, rule probabilities and priors redrawn from {0.5, 0.9, 0.99, 0.999, 1},
`to_model` with and without compression, at most `--max-vars` variables) are enumerated (the joint
of all 2^V assignments, as `exact_marginals` of tests/reference.py, which checks one label set per
graph). Label sets on derived tuples (not inputs) whose probability (chain rule over the enumerated
conditionals) lies in [1e-12, 1e-3] -- where rejection keeps almost nothing -- are sampled with
`--coverage-worlds` worlds (target_se 0, min_accepted 1); reported: the fraction of unlabelled,
not-determined marginals within 2, 3 and 4 reported standard errors of the exact value and inside
the reported 95% interval, the effective sample sizes, and the worlds rejection would have kept
(P(labels) x worlds). Label sets of probability exactly 0 must be refused (ContradictoryEvidence or
NoConsistentWorld); the count refused / total is reported.

JSON under $OUT (default ./out) as bench_quality.json (rewritten after every run of part 1, so a
killed run keeps what it finished); short markdown tables last.

Measured on the 2-core CPU under load: the defaults take about 6 minutes (quality ~4.5, coverage
~1.5); `--graphs weblech --methods lbp sample` 1.5 minutes. On one H200 `--all --parts quality
--seeds 0` did not fit one 10-minute call (killed at syn-gen's exact refusal, the min-fill order on
the host, about a minute): split it, e.g. `--all --parts quality --graphs weblech avrora ftp`
(~4 min), `--parts quality --graphs syn-tiny syn-small syn-medium syn-gen --seeds 0` (~6 min), then
`--parts coverage` (numpy on the host). Graphs of at most `sampling.HOST_EDGES` padded reads
(weblech, syn-*) are sampled on the host even there.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from pathlib import Path

import jax
import numpy as np
from common import environment, write_json

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = {"weblech": "data/weblech.json", "avrora": "data/avrora.json.gz", "ftp": "data/ftp.json.gz"}
SYNTHETIC = ("syn-tiny", "syn-small", "syn-medium", "syn-gen")
DEFAULT_GRAPHS = ("weblech", "avrora", "syn-tiny", "syn-small", "syn-medium")
ALL_GRAPHS = ("weblech", "avrora", "ftp", *SYNTHETIC)
METHODS = ("lbp", "sample", "exact")


# ---------------------------------------------------------------------------------------------------
# Graphs


def synthetic_graph(family: str, seed: int):
    """The derivation graph of a synthetic family (module docstring)."""
    from datalog.synthetic import generate, layered

    if family == "syn-tiny":
        return layered(num_inputs=10, layers=3, width=6, seed=seed)
    if family == "syn-small":
        return layered(num_inputs=14, layers=3, width=10, seed=seed)
    if family == "syn-medium":
        return layered(num_inputs=60, layers=6, width=50, seed=seed)
    if family == "syn-gen":
        return generate(
            vertices=2000,
            seed=seed,
            rule_probabilities=(0.95, 0.9, 0.8, 0.99),
            input_prior=0.9,
            uncertain_input_fraction=0.5,
            layers=8,
            alarm_layers=2,
        )
    raise ValueError(f"unknown synthetic family {family!r}; known: {', '.join(SYNTHETIC)}")


def synthetic_model(family: str, seed: int):
    """(model, truth seed): the family's graph with alarm truth drawn from the model itself.

    The truth is `sample_truth(dg, s)` for the first s in seed..seed+99 that makes some alarms true
    and some false (the last one tried if none does).
    """
    from datalog.bayesnet import to_model
    from datalog.synthetic import sample_truth

    dg = synthetic_graph(family, seed)
    alarms = np.asarray(dg.alarms, np.int64)
    for truth_seed in range(seed, seed + 100):
        truth = sample_truth(dg, truth_seed)
        n_true = int(truth[alarms].sum())
        if 0 < n_true < alarms.size:
            break
    dg = dataclasses.replace(dg, truth={int(t): bool(truth[t]) for t in alarms})
    return to_model(dg, compress=True), truth_seed


def load_graphs(names, seeds):
    """[(label, model, info)] for the requested graph names (examples, synthetic families, paths)."""
    import fastlbp

    out = []
    for name in names:
        if name in SYNTHETIC:
            for seed in seeds:
                t0 = time.perf_counter()
                model, truth_seed = synthetic_model(name, seed)
                out.append(
                    (
                        f"{name}/s{seed}",
                        model,
                        {
                            "family": name,
                            "seed": seed,
                            "truth_seed": truth_seed,
                            "load_s": time.perf_counter() - t0,
                        },
                    )
                )
            continue
        path = EXAMPLES.get(name, name)
        full = REPO / path if not Path(path).is_absolute() else Path(path)
        if not full.exists():
            raise SystemExit(
                f"error: no graph {name!r} (examples: {', '.join(EXAMPLES)}; synthetic: "
                f"{', '.join(SYNTHETIC)}; or a path)"
            )
        t0 = time.perf_counter()
        model = fastlbp.load(full)
        label = name if name in EXAMPLES else Path(path).name
        out.append((label, model, {"path": str(path), "load_s": time.perf_counter() - t0}))
    return out


# ---------------------------------------------------------------------------------------------------
# Part 1: ranking quality


class _OutOfTime(Exception):
    """Raised from `on_step` to end a run past its time budget (caught here, never seen outside)."""


@contextlib.contextmanager
def recording_sampler(calls: list):
    """Records the info of every `sample_marginals` call the session makes (worlds, ESS, SE, seconds)."""
    from fastlbp.engines import sampling

    original = sampling.sample_marginals

    def wrapped(*args, **kwargs):
        m = original(*args, **kwargs)
        calls.append(
            {
                k: m.info.get(k)
                for k in ("samples", "effective_samples", "positive_worlds", "max_stderr", "path")
            }
            | {"seconds": m.seconds}
        )
        return m

    sampling.sample_marginals = wrapped  # the session looks it up on the module at every round
    try:
        yield calls
    finally:
        sampling.sample_marginals = original


def _error_text(e: BaseException, most: int = 300) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= most else text[: most - 3] + "..."


def exact_fit(model, settings) -> dict:
    """Exact inference without labels once: {"fits": bool, width, seconds, (needed, budget | error)}."""
    from fastlbp.engines.exact import ExactTooWide, exact_marginals

    t0 = time.perf_counter()
    try:
        m = exact_marginals(model, {}, settings)
    except ExactTooWide as e:
        return {
            "fits": False,
            "width": e.width,
            "width_at_least": "at least" in str(e),
            "needed_bytes": e.needed,
            "budget_bytes": e.budget,
            "seconds": time.perf_counter() - t0,
        }
    except Exception as e:  # noqa: BLE001  (reported, never a traceback)
        return {"fits": False, "error": _error_text(e), "seconds": time.perf_counter() - t0}
    return {"fits": True, "width": m.info.get("width"), "seconds": time.perf_counter() - t0}


def run_method(model, truth, method: str, settings, max_rounds: int | None, budget: float | None) -> dict:
    """One `simulate` run; a run cut short or stopped by an error keeps the metrics of its rounds."""
    from fastlbp.inference import metrics
    from fastlbp.inference.ranking import alarm_vars
    from fastlbp.inference.simulate import simulate

    alarms = [int(a) for a in alarm_vars(model) if int(a) not in model.labels]
    need = len(set(truth) & set(alarms))
    steps = []
    start = time.perf_counter()

    def on_step(i, step):
        steps.append(step)
        # The budget counts the rounds' own seconds (compilation before round 1 not included).
        if budget and sum(s.round_s for s in steps) > budget and step.found < step.num_true:
            raise _OutOfTime

    row: dict = {"method": method, "alarms": len(alarms), "true_alarms": need}
    calls: list = []
    with recording_sampler(calls) if method == "sample" else contextlib.nullcontext():
        try:
            result = simulate(model, truth, settings=settings, max_rounds=max_rounds, on_step=on_step)
        except _OutOfTime:
            result, row["stopped"] = None, f"time budget {budget:g} s"
        except Exception as e:  # noqa: BLE001  (a method that raises is a result, not a crash)
            result, row["stopped"] = None, "error"
            row["error"] = _error_text(e)
            row["error_type"] = type(e).__name__
            row["error_round"] = len(steps) + 1
    row["wall_s"] = time.perf_counter() - start
    if result is not None:
        d = result.as_dict()
        labels = d.pop("labels")
        row.update(d)
        row["round_s"] = [x["round_s"] for x in labels]
        row["sequence"] = [x["truth"] for x in labels]
        row["probabilities"] = [x["probability"] for x in labels]
        if not result.complete:
            row["stopped"] = f"max rounds {max_rounds}"
    else:
        m = metrics.summarize(
            [s.truth for s in steps], [s.round_s for s in steps], num_alarms=len(alarms), num_true=need
        )
        row.update(
            {
                "rank_100_t": m.rank_100_t,
                "rank_90_t": m.rank_90_t,
                "inversions": m.inversions,
                "auc": m.auc,
                "total_time_s": m.total_time_s,
                "average_time_s": m.average_time_s,
                "found": m.found,
                "complete": False,
                "rounds": len(steps),
                "elapsed_s": m.elapsed_s,
                "round_s": [s.round_s for s in steps],
                "sequence": [s.truth for s in steps],
                "probabilities": [s.probability for s in steps],
                "not_converged_rounds": sum(not s.converged for s in steps),
            }
        )
    row["mean_round_s"] = row["elapsed_s"] / row["rounds"] if row["rounds"] else None
    if method == "sample":
        # The first call compiles (simulate's max_iters=1 run); the rest are the rounds (+ reruns).
        rounds = calls[1:]
        row["sampling_rounds"] = rounds
        if rounds:
            row["min_effective_samples"] = min(c["effective_samples"] for c in rounds)
            row["max_worlds"] = max(c["samples"] for c in rounds)
            row["last_effective_samples"] = rounds[-1]["effective_samples"]
    return row


def quality(graphs, methods, args, save=None) -> list[dict]:
    """The rows of part 1; `save(rows)` after each (the JSON so far, should a later run be killed)."""
    from fastlbp.core.settings import Settings
    from fastlbp.inference.simulate import graph_truth

    max_rounds = args.max_rounds or None
    rows = []
    for label, model, info in graphs:
        truth = graph_truth(model)
        base = {"graph": label, **info, "variables": model.num_vars, "factor_edges": model.graph.num_edges}
        if truth is None:
            rows.append({**base, "method": "-", "skipped": "no ground truth"})
            continue
        for method in methods:
            settings = Settings(
                method=method,
                schedule=args.schedule,
                samples=args.samples,
                max_samples=max(args.max_samples, args.samples),
                target_se=args.target_se,
                seed=args.seed,
            )
            row = dict(base)
            if method == "exact":
                fit = exact_fit(model, settings)
                row["exact_fit"] = fit
                if not fit["fits"]:
                    row.update({"method": method, "skipped": "does not fit"})
                    rows.append(row)
                    _progress(row, save, rows)
                    continue
            row.update(run_method(model, truth, method, settings, max_rounds, args.time_budget or None))
            rows.append(row)
            _progress(row, save, rows)
    return rows


def _progress(row, save=None, rows=None):
    if save is not None:
        save(rows)
    note = row.get("skipped") or row.get("stopped") or ("complete" if row.get("complete") else "")
    print(
        f"  {row['graph']:<16} {row['method']:<7} rounds {row.get('rounds', '-')!s:>4}  "
        f"R100 {row.get('rank_100_t')!s:>5}  AUC {_f(row.get('auc'), '.3f')}  "
        f"{row.get('wall_s', 0):.1f} s  {note}",
        flush=True,
    )


# ---------------------------------------------------------------------------------------------------
# Part 2: the importance sampler against enumeration

PROBS = np.array([0.5, 0.9, 0.99, 0.999, 1.0])
PROB_WEIGHTS = np.array([0.15, 0.2, 0.2, 0.35, 0.1])


def tiny_network(seed: int, max_vars: int):
    """(model, compress): a small random Bingo network of 4 to `max_vars` variables."""
    from datalog.bayesnet import to_model
    from datalog.derivation import Rule
    from datalog.synthetic import layered

    rng = np.random.default_rng([seed, 0xC0FE])
    for _ in range(200):
        dg = layered(
            num_inputs=int(rng.integers(3, 7)),
            layers=int(rng.integers(2, 4)),
            width=int(rng.integers(2, 4)),
            max_clauses=2,
            max_body=3,
            num_rules=4,
            num_alarms=int(rng.integers(1, 3)),
            seed=int(rng.integers(1 << 31)),
        )
        rules = [Rule(r.name, float(rng.choice(PROBS, p=PROB_WEIGHTS)), r.text) for r in dg.rules]
        priors = {i: float(rng.choice(PROBS, p=PROB_WEIGHTS)) for i in dg.priors}
        dg = dataclasses.replace(dg, rules=rules, priors=priors)
        compress = bool(rng.integers(2))
        try:
            model = to_model(dg, compress=compress)
        except Exception:  # noqa: BLE001  (e.g. an alarm made underivable: draw again)
            continue
        if 4 <= model.num_vars <= max_vars:
            return model, compress
    raise RuntimeError(f"no network of at most {max_vars} variables for seed {seed}")


def joint(graph) -> tuple[np.ndarray, np.ndarray]:
    """((2^V, V) bool states, (2^V,) float64 probabilities): the network's joint by enumeration."""
    from fastlbp.core.graph import AND

    v = graph.num_vars
    states = ((np.arange(2**v)[:, None] >> np.arange(v)) & 1).astype(bool)
    weight = np.ones(2**v)
    for f in graph.factors():
        body = states[:, list(f.body)]
        cond = body.all(axis=1) if f.kind == AND else body.any(axis=1)
        p_true = np.where(cond, f.p1, f.p2)
        weight *= np.where(states[:, f.head], p_true, 1.0 - p_true)
    return states, weight


def chain_probability(states, weight, labels: dict[int, bool]) -> tuple[float, list[float]]:
    """P(labels) as the product of the enumerated conditionals P(l_i | l_1..l_{i-1}), and those factors."""
    match = np.ones(weight.shape[0], bool)
    mass = float(weight.sum())
    p, factors = 1.0, []
    for v, t in labels.items():
        match &= states[:, v] == t
        new = float(weight[match].sum())
        cond = new / mass if mass > 0 else 0.0
        factors.append(cond)
        p *= cond
        mass = new
        if new == 0:
            break
    return p, factors


def coverage(args) -> dict:
    import sys

    sys.path.insert(0, str(REPO / "tests"))  # the enumeration reference is test code
    from reference import exact_marginals as enumerate_marginals

    from fastlbp.core.errors import ContradictoryEvidence
    from fastlbp.core.settings import Settings
    from fastlbp.engines.sampling import NoConsistentWorld, Sampler, TooFewSamples, sample_marginals

    lo, hi = args.coverage_low, args.coverage_high
    sets, zero_sets, positive_refused, checks = [], [], [], []
    t_start = time.perf_counter()
    for g in range(args.coverage_graphs):
        model, compress = tiny_network(args.seed * 100_003 + g, args.max_vars)
        graph = model.graph
        states, weight = joint(graph)
        # Labels on derived tuples (a Bingo label is on an alarm; these are its kin): the weights come
        # from clauses summed out at the label, not from a labelled input's prior.
        tuple_vars = np.unique(np.asarray(model.meta["tuple_var"], np.int64))
        offsets = np.asarray(graph.factor_offsets, np.int64)
        heads = np.asarray(graph.edge_var, np.int64)[offsets[:-1]]
        has_body = np.zeros(graph.num_vars, bool)
        has_body[heads[np.diff(offsets) > 1]] = True
        tuple_vars = tuple_vars[(tuple_vars >= 0)]
        tuple_vars = tuple_vars[has_body[tuple_vars]]
        if tuple_vars.size == 0:
            continue
        p_one = (weight[:, None] * states).sum(axis=0)
        rng = np.random.default_rng([args.seed, g, 0x5E75])
        sampler = Sampler(graph, model.var_names)
        chosen, zeros, seen = [], [], set()
        for _ in range(args.coverage_tries):
            k = int(rng.integers(1, min(7, tuple_vars.size) + 1))
            vs = rng.choice(tuple_vars, size=k, replace=False)
            # Mostly the less likely value of each: improbable label sets.
            less = p_one[vs] < 0.5
            truths = np.where(rng.random(k) < 0.75, less, ~less)
            labels = {int(v): bool(t) for v, t in zip(vs, truths, strict=True)}
            key = tuple(sorted(labels.items()))
            if key in seen:
                continue
            seen.add(key)
            p, _ = chain_probability(states, weight, labels)
            if p == 0.0 and len(zeros) < args.coverage_zero_sets:
                zeros.append(labels)
            elif lo <= p <= hi and len(chosen) < args.coverage_sets:
                chosen.append((labels, p))
            if len(chosen) >= args.coverage_sets and len(zeros) >= args.coverage_zero_sets:
                break
        for i, (labels, p) in enumerate(chosen):
            names = {model.var_names[v]: t for v, t in labels.items()}
            match = np.all([states[:, v] == t for v, t in labels.items()], axis=0)
            exact = (weight * match) @ states / float((weight * match).sum())
            if i == 0:  # the enumeration here against the reference's
                ref = enumerate_marginals(graph.factors(), graph.num_vars, labels)
                checks.append(float(np.max(np.abs(ref - exact))))
            settings = Settings(
                method="sample",
                samples=args.coverage_worlds,
                max_samples=args.coverage_worlds,
                target_se=0.0,
                min_accepted=1,
                seed=g * 1000 + i,
            )
            rec = {
                "graph": g,
                "compress": compress,
                "variables": graph.num_vars,
                "labels": names,
                "p_labels": p,
                "worlds": args.coverage_worlds,
            }
            try:
                m = sample_marginals(graph, labels, settings, sampler=sampler)
            except (ContradictoryEvidence, TooFewSamples) as e:  # NoConsistentWorld is a TooFewSamples
                rec["refused"] = _error_text(e)
                positive_refused.append(rec)
                continue
            free = np.ones(graph.num_vars, bool)
            free[list(labels)] = False
            determined = free & ((exact <= 1e-13) | (exact >= 1 - 1e-13))
            test = free & ~determined
            err = np.abs(m.marginals - exact)
            z = err[test] / m.stderr[test]
            rec.update(
                {
                    "effective_samples": m.info["effective_samples"],
                    "drawn": m.info["samples"],
                    "positive_worlds": m.info["positive_worlds"],
                    "rejection_expected": p * m.info["samples"],
                    "tested": int(test.sum()),
                    "within2": int((z <= 2).sum()),
                    "within3": int((z <= 3).sum()),
                    "within4": int((z <= 4).sum()),
                    "in_interval": int(((exact >= m.lower - 1e-15) & (exact <= m.upper + 1e-15))[test].sum()),
                    "max_z": float(z.max()) if z.size else 0.0,
                    "determined": int(determined.sum()),
                    "determined_max_error": float(err[determined].max(initial=0.0)),
                    "max_abs_error": float(err[free].max(initial=0.0)),
                    "worst": None
                    if not z.size
                    else {
                        "var": model.var_names[int(np.flatnonzero(test)[np.argmax(z)])],
                        "exact": float(exact[test][np.argmax(z)]),
                        "estimate": float(m.marginals[test][np.argmax(z)]),
                        "stderr": float(m.stderr[test][np.argmax(z)]),
                    },
                }
            )
            sets.append(rec)
        for labels in zeros:
            names = {model.var_names[v]: t for v, t in labels.items()}
            rec = {"graph": g, "compress": compress, "labels": names}
            settings = Settings(
                method="sample",
                samples=args.coverage_worlds,
                max_samples=args.coverage_worlds,
                target_se=0.0,
                min_accepted=1,
                seed=g,
            )
            try:
                sample_marginals(graph, labels, settings, sampler=sampler)
                rec["refused"] = None
            except ContradictoryEvidence as e:
                rec["refused"] = "ContradictoryEvidence"
                rec["message"] = _error_text(e)
            except NoConsistentWorld as e:
                rec["refused"] = "NoConsistentWorld"
                rec["message"] = _error_text(e)
            except Exception as e:  # noqa: BLE001
                rec["refused"] = type(e).__name__
                rec["message"] = _error_text(e)
            zero_sets.append(rec)
    return {
        "sets": sets,
        "zero_sets": zero_sets,
        "positive_refused": positive_refused,
        "enumeration_vs_reference_max_diff": max(checks, default=None),
        "settings": {
            "graphs": args.coverage_graphs,
            "sets_per_graph": args.coverage_sets,
            "worlds": args.coverage_worlds,
            "p_range": [lo, hi],
            "max_vars": args.max_vars,
        },
        "seconds": time.perf_counter() - t_start,
        "summary": coverage_summary(sets, zero_sets, positive_refused),
    }


def coverage_summary(sets, zero_sets, positive_refused) -> dict:
    tested = sum(r["tested"] for r in sets)

    def frac(key, rows=sets):
        n = sum(r["tested"] for r in rows)
        return sum(r[key] for r in rows) / n if n else None

    accepted = [r for r in sets if r["effective_samples"] >= 1000]
    ess = np.array([r["effective_samples"] for r in sets]) if sets else np.zeros(0)
    rej = np.array([r["rejection_expected"] for r in sets]) if sets else np.zeros(0)
    by_decade = {}
    for a, b in ((1e-3, 1e-6), (1e-6, 1e-9), (1e-9, 1e-12)):
        rows = [r for r in sets if b <= r["p_labels"] <= a]
        if rows:
            by_decade[f"{b:.0e}..{a:.0e}"] = {
                "sets": len(rows),
                "marginals": sum(r["tested"] for r in rows),
                "within2": frac("within2", rows),
                "within3": frac("within3", rows),
                "in_interval": frac("in_interval", rows),
                "median_ess": float(np.median([r["effective_samples"] for r in rows])),
            }
    return {
        "label_sets": len(sets),
        "marginals": tested,
        "within2": frac("within2"),
        "within3": frac("within3"),
        "within4": frac("within4"),
        "in_interval": frac("in_interval"),
        "sets_beyond4": sum(r["within4"] < r["tested"] for r in sets),
        # What the default min_accepted (1000 effective samples) lets through.
        "accepted_sets": len(accepted),
        "accepted_within2": frac("within2", accepted),
        "accepted_within3": frac("within3", accepted),
        "accepted_beyond4": sum(r["within4"] < r["tested"] for r in accepted),
        "median_ess": float(np.median(ess)) if ess.size else None,
        "min_ess": float(ess.min()) if ess.size else None,
        "sets_ess_below_1000": int((ess < 1000).sum()),
        "median_rejection_accepted": float(np.median(rej)) if rej.size else None,
        "max_rejection_accepted": float(rej.max()) if rej.size else None,
        "p_min": min((r["p_labels"] for r in sets), default=None),
        "p_max": max((r["p_labels"] for r in sets), default=None),
        "determined_wrong": sum(r["determined_max_error"] > 1e-12 for r in sets),
        "zero_sets": len(zero_sets),
        "zero_refused": sum(r["refused"] is not None for r in zero_sets),
        "zero_by_constraints": sum(r["refused"] == "ContradictoryEvidence" for r in zero_sets),
        "positive_refused": len(positive_refused),
        "by_p": by_decade,
    }


# ---------------------------------------------------------------------------------------------------
# Tables


def _f(x, fmt: str, missing: str = "-") -> str:
    return missing if x is None else format(x, fmt)


def _bytes(n) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def note(row: dict) -> str:
    if row.get("skipped") == "does not fit":
        fit = row["exact_fit"]
        if "error" in fit:
            return f"exact refused: {fit['error']}"
        at = ">= " if fit.get("width_at_least") else ""
        return (
            f"does not fit: width {at}{fit['width']}, needs {at}{_bytes(fit['needed_bytes'])} > "
            f"{_bytes(fit['budget_bytes'])} ({fit['seconds']:.1f} s to refuse)"
        )
    if row.get("skipped"):
        return row["skipped"]
    parts = []
    stopped = row.get("stopped")
    if stopped == "error":
        parts.append(f"stopped at round {row['error_round']}: {row['error'][:120]}")
    elif stopped:
        parts.append(f"cut short ({stopped})")
    if row.get("evidence_dropped"):
        parts.append(f"{len(row['evidence_dropped'])} labels dropped (contradict the model)")
    if row.get("not_converged_rounds"):
        parts.append(f"{row['not_converged_rounds']} rounds not converged")
    if row["method"] == "sample" and row.get("min_effective_samples") is not None:
        parts.append(f"ESS min {row['min_effective_samples']:.0f}, worlds max {row['max_worlds']:,}")
    if row["method"] == "exact" and row.get("exact_fit"):
        parts.append(f"width {row['exact_fit']['width']}")
    return "; ".join(parts)


def quality_table(rows) -> list[str]:
    out = [
        "| graph | method | alarms (true) | rounds | found | Rank-100%-T | Rank-90%-T | inversions | AUC | "
        "TotalTime s | rounds s | mean round s | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r.get("skipped"):
            out.append(f"| {r['graph']} | {r['method']} | | | | | | | | | | | {note(r)} |")
            continue
        gap = "n/r"  # not reached: the run was cut short before it was decided
        out.append(
            f"| {r['graph']} | {r['method']} | {r['alarms']} ({r['true_alarms']}) | {r['rounds']} | "
            f"{r['found']}{'' if r['complete'] else ' (cut)'} | {_f(r['rank_100_t'], 'd', gap)} | "
            f"{_f(r['rank_90_t'], 'd', gap)} | {_f(r['inversions'], 'd', gap)} | "
            f"{_f(r['auc'], '.3f', gap)} | {_f(r['total_time_s'], '.2f', gap)} | "
            f"{r['elapsed_s']:.2f} | {_f(r['mean_round_s'], '.3f')} | {note(r)} |"
        )
    return out


def coverage_table(cov) -> list[str]:
    s = cov["summary"]
    pct = lambda x: _f(None if x is None else 100 * x, ".1f")  # noqa: E731
    out = [
        "| label sets (marginals) | P(labels) | worlds | within 2 SE | 3 SE | 4 SE | in 95% interval | "
        "sets beyond 4 SE | median ESS (min) | ESS >= 1000: sets, within 2 / 3 SE, beyond 4 SE | "
        "rejection would keep (median / max) | P = 0 refused | P > 0 refused |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {s['label_sets']} ({s['marginals']}) | {_f(s['p_min'], '.1e')}..{_f(s['p_max'], '.1e')} | "
        f"{cov['settings']['worlds']:,} | {pct(s['within2'])}% | {pct(s['within3'])}% | "
        f"{pct(s['within4'])}% | {pct(s['in_interval'])}% | {s['sets_beyond4']} | "
        f"{_f(s['median_ess'], '.0f')} ({_f(s['min_ess'], '.0f')}) | "
        f"{s['accepted_sets']}: {pct(s['accepted_within2'])}% / {pct(s['accepted_within3'])}%, "
        f"{s['accepted_beyond4']} | {_f(s['median_rejection_accepted'], '.2g')} / "
        f"{_f(s['max_rejection_accepted'], '.2g')} | {s['zero_refused']} / {s['zero_sets']} | "
        f"{s['positive_refused']} |",
    ]
    for band, b in s["by_p"].items():
        out.append(
            f"| {b['sets']} ({b['marginals']}) | {band} | | {pct(b['within2'])}% | {pct(b['within3'])}% | | "
            f"{pct(b['in_interval'])}% | | {b['median_ess']:.0f} | | | | |"
        )
    return out


# ---------------------------------------------------------------------------------------------------


def main(argv=None) -> dict:
    gpu = jax.default_backend() == "gpu"
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:6]),
    )
    parser.add_argument(
        "--parts", nargs="+", choices=("quality", "coverage"), default=["quality", "coverage"]
    )
    parser.add_argument(
        "--graphs",
        nargs="+",
        default=None,
        metavar="G",
        help=f"examples {', '.join(EXAMPLES)}, synthetic {', '.join(SYNTHETIC)}, or paths "
        f"(default {' '.join(DEFAULT_GRAPHS)})",
    )
    parser.add_argument("--all", action="store_true", help=f"every graph: {' '.join(ALL_GRAPHS)} (for a GPU)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the synthetic graphs"
    )
    parser.add_argument("--max-rounds", type=int, default=30, help="labels per run at most (0: no limit)")
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="end a run after the round that takes its rounds past this many seconds (0: none; default 45 "
        "on a CPU, 60 on a GPU)",
    )
    parser.add_argument("--schedule", default="parall", help="LBP's update strategy")
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help="worlds of a sampling round's first draw (default 10^4 on a CPU, 10^5 on a GPU)",
    )
    parser.add_argument(
        "--max-samples", type=int, default=10_000_000, help="worlds per sampling round at most"
    )
    parser.add_argument(
        "--target-se",
        type=float,
        default=None,
        help="sampling draws until every alarm's SE is at most this (default 0.01 on a CPU, "
        "0.0025 on a GPU, as Settings)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the sampler's seed and the coverage graphs' seed"
    )
    parser.add_argument(
        "--coverage-graphs",
        type=int,
        default=None,
        help="random small networks (default 20 on a CPU, 60 on a GPU: they run on the host)",
    )
    parser.add_argument("--coverage-sets", type=int, default=4, help="label sets per network")
    parser.add_argument(
        "--coverage-zero-sets", type=int, default=1, help="label sets of probability 0 per network"
    )
    parser.add_argument(
        "--coverage-tries", type=int, default=400, help="label sets drawn per network to find them"
    )
    parser.add_argument("--coverage-worlds", type=int, default=100_000, help="worlds per coverage label set")
    parser.add_argument("--coverage-low", type=float, default=1e-12, help="least P(labels)")
    parser.add_argument("--coverage-high", type=float, default=1e-3, help="largest P(labels)")
    parser.add_argument("--max-vars", type=int, default=20, help="variables of a coverage network at most")
    args = parser.parse_args(argv)
    if args.time_budget is None:
        args.time_budget = 60.0 if gpu else 45.0
    if args.samples is None:
        args.samples = 100_000 if gpu else 10_000
    if args.target_se is None:
        args.target_se = 0.0025 if gpu else 0.01
    if args.coverage_graphs is None:
        args.coverage_graphs = 60 if gpu else 20
    names = list(ALL_GRAPHS) if args.all else (args.graphs or list(DEFAULT_GRAPHS))

    payload: dict = {"environment": environment(), "args": vars(args)}
    rows, cov = [], None
    t0 = time.perf_counter()
    if "quality" in args.parts:
        print(
            f"quality: {' '.join(names)}; methods {' '.join(args.methods)}; "
            f"max rounds {args.max_rounds or 'none'}, "
            f"time budget {args.time_budget or 'none'} s; sampling {args.samples:,} worlds first, "
            f"target SE {args.target_se}, at most {args.max_samples:,}",
            flush=True,
        )
        graphs = load_graphs(names, args.seeds)
        rows = quality(
            graphs,
            args.methods,
            args,
            save=lambda done: write_json("bench_quality.json", payload | {"quality": done}),
        )
        payload["quality"] = rows
    if "coverage" in args.parts:
        print(
            f"coverage: {args.coverage_graphs} networks of <= {args.max_vars} variables, "
            f"{args.coverage_sets} label sets each with P in "
            f"[{args.coverage_low:g}, {args.coverage_high:g}], "
            f"{args.coverage_worlds:,} worlds",
            flush=True,
        )
        cov = coverage(args)
        payload["coverage"] = cov
    payload["seconds"] = time.perf_counter() - t0
    path = write_json("bench_quality.json", payload)
    print(f"\nJSON: {path} ({payload['seconds']:.0f} s, {payload['environment']['device']})\n")
    if rows:
        print("\n".join(quality_table(rows)))
        print()
    if cov is not None:
        print("\n".join(coverage_table(cov)))
    return payload


if __name__ == "__main__":
    main()
