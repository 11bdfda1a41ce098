"""Regenerates the example derivation graphs in data/ (deterministic; see data/README.md).

    PYTHONPATH=. python data/make_examples.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datalog import formats, synthetic
from datalog.cycles import least_fixpoint

DATA = Path(__file__).resolve().parent
PRESTO = DATA.parent / "tests" / "data" / "presto-exceptions"

# Rule probabilities below 0.999 make the drawn ground truth mixed (with 0.999 almost every
# alarm comes out true); Bingo learns such probabilities from labelled programs.
RULES = (0.999, 0.95, 0.9, 0.8)
EXAMPLES = {
    # name: (generate() keyword arguments, truth seed, also write a Bingo directory)
    "weblech": (dict(preset="weblech", seed=1, rule_probabilities=RULES, input_prior=0.95), 8, True),
    "avrora": (dict(preset="avrora", seed=1, rule_probabilities=RULES, input_prior=0.95), 1, False),
    "ftp": (dict(preset="ftp", seed=1, rule_probabilities=RULES, input_prior=0.95), 1, False),
}


def with_truth(dg, seed):
    world = synthetic.sample_truth(dg, seed)
    dg.truth = {int(a): bool(world[a]) for a in np.asarray(dg.alarms)}
    return dg


def presto():
    dg, _ = formats.read_bingo(PRESTO)
    dg.alarms = np.array([i for i, t in enumerate(dg.tuples) if t.startswith("CatchVH")], np.int32)
    dg.rules = [type(r)(r.name, 0.9) for r in dg.rules]
    dg.source = None
    assert least_fixpoint(dg).derivable.all()
    return with_truth(dg, 0)


def main() -> None:
    dg = presto()
    formats.save_json(dg, DATA / "presto.json")
    formats.save_bingo(dg, DATA / "presto")
    for name, (kwargs, truth_seed, bingo) in EXAMPLES.items():
        dg = with_truth(synthetic.generate(**kwargs), truth_seed)
        big = dg.num_clauses > 10_000
        formats.save_json(dg, DATA / (f"{name}.json.gz" if big else f"{name}.json"))
        if bingo:
            formats.save_bingo(dg, DATA / name)
        t = sum(dg.truth.values())
        print(f"{name}: {dg.num_tuples:,} tuples, {dg.num_clauses:,} clauses, {len(dg.alarms):,} alarms, "
              f"{t} true")


if __name__ == "__main__":
    main()
