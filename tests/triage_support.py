"""Demo graphs with alarms and derivations for the rank, writers, triage and simulate tests.

`write_demo` writes a small layered derivation graph (`datalog.synthetic.layered`)
as a derivation.json file, which the commands load like any user's graph, and
its oracle; `load_demo` loads that file as the commands do (default
`Settings`: cycle elimination and chain compression). `demo_model` builds
the same graph in memory without compression, for tests that need no file.
`made_session`, `tamper`, `truncate` and `FailingConnection` make session
files, damage them, and make their writes fail as on a full disk;
`random_action` drives a session with random labels, skips, undos and jumps;
`data_home` points the user's data folder into a test's folder and
`default_session` says where the command line keeps a graph's session then.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from datalog import synthetic
from datalog.bayesnet import to_model
from datalog.derivation import DerivationGraph, Rule
from datalog.formats import save_json
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.io.loading import load
from fastlbp.triage import Triage, default_session_path

DEMO = {"num_inputs": 12, "layers": 2, "width": 10, "seed": 3}


def demo_model(**params) -> Model:
    """The demo graph as a model, uncompressed (`to_model`'s defaults)."""
    return to_model(synthetic.layered(**{**DEMO, **params}))


def write_demo(dir_: Path, name: str = "g", **params) -> tuple[Path, Path]:
    """Writes `name.json` (derivation.json) and `name.oracle` (its true alarms from one forward sample)."""
    params = {**DEMO, **params}
    dg = synthetic.layered(**params)
    graph = dir_ / f"{name}.json"
    save_json(dg, graph)
    truth = synthetic.sample_truth(dg, seed=params["seed"])
    oracle = dir_ / f"{name}.oracle"
    oracle.write_text("".join(f"{dg.tuples[a]}\n" for a in dg.alarms if truth[a]))
    return graph, oracle


def load_demo(graph: Path) -> Model:
    """The model the commands make of `graph` (default settings)."""
    return load(graph)


def install() -> None:
    """Nothing to do: the demo graphs are derivation.json files every loader reads.

    Kept while tests/test_simulate.py still calls it.
    """


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


# Session files ------------------------------------------------------------------------

def data_home(tmp_path: Path, monkeypatch) -> Path:
    """Sets $XDG_DATA_HOME to `tmp_path/data` (sessions and history never land in the user's home)."""
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    return home


def default_session(tmp_path: Path, graph: Path) -> Path:
    """The session `fastlbp triage GRAPH` uses with `data_home(tmp_path)`."""
    return default_session_path(graph, tmp_path / "data" / "fastlbp" / "sessions")


FAST = Settings(max_iters=300)


def made_session(tmp_path, name="s.db"):
    """A session of 4 events: label true, label false, skip, label true (seq 1-4)."""
    t = Triage.open(demo_model(), tmp_path / name, settings=FAST)
    assert t.label(True).accepted and t.label(False).accepted
    assert t.skip().accepted and t.label(True).accepted
    t.close()
    return tmp_path / name


def random_action(t: Triage, rng: np.random.Generator, actions, pick=None) -> tuple[str, object]:
    """One action drawn by `rng` from `actions` ("t", "f", "skip", "undo", "jump"; repeats weight them)
    done on session `t`: (the action, its `Outcome`).

    A label ("t", "f") labels the current alarm, or the variable `pick()` returns (None: the current
    one); a jump goes to one of the four top-ranked alarms.
    """
    action = str(rng.choice(actions))
    if action in ("t", "f"):
        return action, t.label(action == "t", None if pick is None else pick())
    if action == "skip":
        return action, t.skip()
    if action == "undo":
        return action, t.undo()
    return action, t.jump(str(rng.integers(1, 5)))


def tamper(path, *sql):
    """Runs SQL statements on a session file as someone editing it by hand would."""
    conn = sqlite3.connect(path)
    for statement in sql:
        conn.execute(statement)
    conn.commit()
    conn.close()


def truncate(path):
    """Cuts a file to a little over half its length, as a full disk or a bad copy would."""
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2 + 100])


class FailingConnection:
    """An sqlite3 connection whose writes fail as on a full disk (reads go through).

    Args:
        fail_on: only writes whose SQL names this (e.g. "snapshot") fail.
    """

    def __init__(self, conn, error: Exception | None = None, fail_on: str = ""):
        self._conn = conn
        self.error = error or sqlite3.OperationalError("disk I/O error")
        self.fail_on = fail_on

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def execute(self, sql, *args):
        writes = sql.lstrip().split()[0].upper() in ("INSERT", "UPDATE", "DELETE", "CREATE")
        if writes and self.fail_on in sql:
            raise self.error
        return self._conn.execute(sql, *args)

    def executemany(self, sql, *args):
        raise self.error

    def executescript(self, sql):
        raise self.error
