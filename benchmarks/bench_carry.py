"""Labels carried to the next version against ranking afresh, on synthetic version pairs.

    python benchmarks/bench_carry.py                       # 10 pairs, layered(40, 3, 40), 3% changes
    python benchmarks/bench_carry.py --pairs 20 --change 0.05 --method exact

Each pair: an old graph (`datalog.synthetic.layered`), the new one after a change that removes, adds
and rewires a fraction `--change` of the clauses each (`datalog.versions.next_version`), and one world
drawn by names for both (`datalog.versions.coupled_truths`: an alarm whose derivations did not change
keeps its truth). The old version is triaged to the end (Bingo's loop with the oracle,
`fastlbp.inference.simulate`): the alarms inspected and their truths are the team's labels. On the
new version, the inspections until every true alarm is found (Rank-100%-T of the new run, i.e. its
number of steps) are counted for:

    fresh      no labels (ranking afresh)
    carried    `fastlbp.triage.carry.carry_labels`: unchanged -> label, changed -> soft (--confidence)
    hard only  the carried labels alone (softened ones dropped)
    by name    every old label carried as a label by name, whatever changed (syntactic masking):
               a bug it labels false is never inspected: "missed" counts them

Reported per pair and summed: alarms, true alarms on the new version, labels carried/softened/dropped,
inspections of each variant, bugs missed by name.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datalog.bayesnet import to_model  # noqa: E402
from datalog.synthetic import layered  # noqa: E402
from datalog.versions import coupled_truths, next_version  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.inference.simulate import simulate  # noqa: E402
from fastlbp.triage.carry import carry_labels  # noqa: E402


def inspections(model, truth: dict[str, bool], settings, labels=None, soft=None) -> int:
    """Steps of Bingo's loop on `model` (with `labels` {var: truth} and `soft`) until every true alarm
    not labelled is found."""
    if labels:
        model = dataclasses.replace(model, labels={**model.labels, **labels})
    true = [v for v in model.alarms if truth[model.var_names[v]]]
    return len(simulate(model, true, settings=settings, soft=soft).steps)


def one_pair(seed: int, args, settings) -> dict:
    old = layered(num_inputs=args.inputs, layers=args.layers, width=args.width, seed=seed)
    new = next_version(old, seed=seed, remove=args.change, add=args.change, rewire=args.change)
    truth_old, truth_new = coupled_truths(old, new, seed=seed)
    m_old, m_new = to_model(old), to_model(new)
    true_old = [v for v in m_old.alarms if truth_old[m_old.var_names[v]]]
    steps = simulate(m_old, true_old, settings=settings).steps
    labels = {s.alarm: s.truth for s in steps}
    model, carried = carry_labels(m_old, labels, m_new, confidence=args.confidence)
    by_name = {m_new.index[n]: t for n, t in labels.items() if n in m_new.index}
    missed = sum(1 for v, t in by_name.items() if not t and truth_new[m_new.var_names[v]])
    return {
        "seed": seed, "alarms": len(m_new.alarms),
        "true": sum(truth_new[m_new.var_names[v]] for v in m_new.alarms),
        "old labels": len(labels), "carried": len(carried.carried), "softened": len(carried.softened),
        "dropped": len(carried.dropped),
        "fresh": inspections(m_new, truth_new, settings),
        "with carried": inspections(model, truth_new, settings, carried.labels, carried.soft),
        "hard only": inspections(model, truth_new, settings, carried.labels),
        "by name": inspections(m_new, truth_new, settings, by_name), "missed by name": missed,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--change", type=float, default=0.03, help="fraction of clauses removed, added, rewired")
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--inputs", type=int, default=40)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--width", type=int, default=40)
    ap.add_argument("--method", default="auto")
    args = ap.parse_args(argv)
    settings = Settings(method=args.method)
    cols = ["seed", "alarms", "true", "old labels", "carried", "softened", "dropped", "fresh", "with carried",
            "hard only", "by name", "missed by name"]
    print(" | ".join(cols))
    total = dict.fromkeys(cols[1:], 0)
    start = time.perf_counter()
    for seed in range(args.pairs):
        row = one_pair(seed, args, settings)
        print(" | ".join(str(row[c]) for c in cols), flush=True)
        for c in cols[1:]:
            total[c] += row[c]
    print(" | ".join(["all"] + [str(total[c]) for c in cols[1:]]))
    saved = total["fresh"] - total["with carried"]
    print(f"inspections saved by carried labels: {saved} of {total['fresh']} "
          f"({100 * saved / max(total['fresh'], 1):.0f}%); by name missed {total['missed by name']} bugs; "
          f"{time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
