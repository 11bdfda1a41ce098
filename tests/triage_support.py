"""Demo graphs with alarms and derivations for the rank/triage/simulate tests, and a CLI launcher.

Until the derivation.json and Bingo loaders land, CLI tests need a file that
loads into a Model with alarms and a derivation graph: a `*.demo` file holds
the parameters of `fastlbp.demo.layered` as JSON, and `install()` teaches
`fastlbp.api.load` to read it. `python tests/triage_support.py ARGS` is
`fastlbp ARGS` with that loader (for tests through a pseudo-terminal).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from datalog.bayesnet import to_model
from datalog.derivation import DerivationGraph, Rule
from fastlbp import api, demo

DEMO = {"num_inputs": 12, "layers": 2, "width": 10, "seed": 3}


def demo_model(**params):
    return to_model(demo.layered(**{**DEMO, **params}))


def write_demo(dir_: Path, name: str = "g", **params) -> tuple[Path, Path]:
    """Writes `name.demo` and `name.oracle` (its true alarms from one forward sample)."""
    params = {**DEMO, **params}
    graph = dir_ / f"{name}.demo"
    graph.write_text(json.dumps(params))
    dg = demo.layered(**params)
    truth = demo.sample_truth(dg, seed=params["seed"])
    oracle = dir_ / f"{name}.oracle"
    oracle.write_text("".join(f"{dg.tuples[a]}\n" for a in dg.alarms if truth[a]))
    return graph, oracle


def hand_model():
    """A hand-made derivation graph with a label that is impossible.

    in(a) (prior 1) --R0 (p=1)--> race(1); race(2) from in(a) and in(b)
    (prior 0.5) by R1 (p=0.9) or from in(b) alone by R2 (p=0.6).
    race(1) = false contradicts the model.
    """
    dg = DerivationGraph(
        tuples=["in(a)", "in(b)", "race(1)", "race(2)"],
        rules=[Rule("R0", 1.0, "race(x) :- in(x)"), Rule("R1", 0.9, "race(y) :- in(x), in(y)"),
               Rule("R2", 0.6, "race(y) :- in(y)")],
        clause_rule=np.array([0, 1, 2], np.int32),
        clause_head=np.array([2, 3, 3], np.int32),
        body_offsets=np.array([0, 1, 3, 4]),
        body=np.array([0, 0, 1, 1], np.int32),
        priors={0: 1.0, 1: 0.5},
        alarms=np.array([2, 3], np.int32),
    )
    return to_model(dg)


def install() -> None:
    """Makes `fastlbp.api.load` read `*.demo` files."""
    if getattr(api, "_demo_installed", False):
        return
    original = api.LOADERS["causal_fg"]

    def load(path: Path):
        if path.suffix == ".demo":
            model = demo_model(**json.loads(path.read_text()))
            return model
        return original(path)

    api.LOADERS["causal_fg"] = load
    api._demo_installed = True


if __name__ == "__main__":
    install()
    from fastlbp.cli import get_app
    sys.argv[0] = "fastlbp"
    get_app()(prog_name="fastlbp")
