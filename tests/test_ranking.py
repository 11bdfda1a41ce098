"""Ranking (`fastlbp.inference.ranking`): the order of alarms, `rank` against a session's marginals, and
`fastlbp rank` on labels files, bare factor graphs and bad input."""

import dataclasses
import json

import numpy as np
from conftest import DATA
from triage_support import demo_model
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.settings import Settings
from fastlbp.inference import ranking
from fastlbp.inference.session import Session

runner = CliRunner()
WEBLECH = str(DATA / "weblech" / "graph.causal_fg")


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def test_order_is_by_probability_then_input_order():
    p = np.array([0.5, 0.9, 0.5, 0.1, 0.9])
    assert ranking.order_alarms(p, np.array([0, 1, 2, 3, 4])).tolist() == [1, 4, 0, 2, 3]
    assert ranking.order_alarms(p, np.array([3, 2, 4]), exclude=[4]).tolist() == [2, 3]
    # NaN never scrambles the order: it sorts last.
    p = np.array([0.5, np.nan, 0.7])
    assert ranking.order_alarms(p, np.array([0, 1, 2])).tolist() == [2, 0, 1]


def test_rank_matches_session_marginals_and_lists_labels_apart():
    model = demo_model()
    a0 = model.alarms[0]
    r = ranking.rank(model, {a0: False}, top=5)
    s = Session(model)
    s.label(a0, False)
    p = s.run(warm=False).marginals
    expected = sorted((a for a in model.alarms if a != a0), key=lambda a: (-p[a], model.alarms.index(a)))
    assert [a.var for a in r.alarms] == expected[:5]
    assert [a.rank for a in r.alarms] == [1, 2, 3, 4, 5]
    assert r.total_unlabelled == len(model.alarms) - 1
    assert [(a.var, a.truth) for a in r.labelled] == [(a0, False)]
    assert all(r.alarms[i].probability >= r.alarms[i + 1].probability for i in range(4))


def test_rank_takes_settings():
    model = demo_model()
    settings = Settings(method="lbp", precision="f32", max_iters=300)
    r = ranking.rank(model, settings=settings)
    s = Session(model, settings)
    p = s.run(warm=False).marginals
    assert [a.probability for a in r.alarms] == [float(p[a.var]) for a in r.alarms]
    assert r.iterations == s.last.iterations and r.iterations <= 300
    capped = ranking.rank(model, settings=Settings(method="lbp", max_iters=2, remedies=False))
    assert capped.iterations == 2 and not capped.converged


def test_alarm_vars_of_a_model_without_alarms_is_every_variable():
    model = demo_model()
    assert ranking.alarm_vars(model).tolist() == list(model.alarms)
    bare = dataclasses.replace(model, alarms=())
    assert ranking.alarm_vars(bare).tolist() == list(range(model.num_vars))


def test_cli_labels_file_and_model_without_alarms(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("87 false\n")
    res = invoke("rank", WEBLECH, "--labels", labels, "--format", "json", "--method", "lbp",
                 "--schedule", "parall")
    assert res.exit_code == 0, res.output
    assert "ranking every variable" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["labelled"] == [{"alarm": "87", "truth": False}]
    assert len(doc["alarms"]) == 677 and "87" not in {a["alarm"] for a in doc["alarms"]}


def test_cli_bad_input_exit_2(tmp_path):
    res = invoke("rank", tmp_path / "missing.causal_fg")
    assert res.exit_code == 2 and "no such file" in res.stderr and "Traceback" not in res.output
    labels = tmp_path / "labels.txt"
    labels.write_text("87 maybe\n")
    res = invoke("rank", WEBLECH, "--labels", labels)
    assert res.exit_code == 2 and f"{labels}:1:" in res.stderr
