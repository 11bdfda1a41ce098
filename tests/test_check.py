"""check and `fastlbp check`, `--method` on the commands, the degenerate-marginals warning."""

import json
from pathlib import Path

import numpy as np
import pytest
import reference
from graphs import random_polytree
from typer.testing import CliRunner

from datalog.bayesnet import to_model
from datalog.derivation import DerivationGraph, Rule
from fastlbp.cli import get_app
from fastlbp.core.graph import from_factors
from fastlbp.core.model import Model
from fastlbp.inference import check
from fastlbp.inference.session import Session
from fastlbp.io.loading import load

DATA = Path(__file__).parents[1] / "data"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def _reconvergent():
    # race(1) and race(2) both rest on shared(x): LBP multiplies their evidence as if independent.
    dg = DerivationGraph(
        tuples=["shared(x)", "a(x)", "b(x)", "race(1)", "race(2)"],
        rules=[Rule("R0", 0.6), Rule("R1", 0.6), Rule("R2", 0.9)],
        clause_rule=np.array([0, 1, 2, 2], np.int32),
        clause_head=np.array([1, 2, 3, 4], np.int32),
        body_offsets=np.array([0, 1, 2, 4, 6]),
        body=np.array([0, 0, 1, 2, 1, 2], np.int32),
        priors={0: 0.3},
        alarms=np.array([3, 4], np.int32),
    )
    return to_model(dg, compress=False)


def test_exact_reference_on_a_polytree_agrees_with_lbp():
    rng = np.random.default_rng(3)
    factors = random_polytree(rng, 10, hard=0.0)
    model = Model(graph=from_factors(factors, 10), var_names=tuple(f"x{i}" for i in range(10)),
                  alarms=tuple(range(10)))
    report = check.check(model, {})
    assert report.reference == "exact" and report.verdict == "ok", report.reasons
    assert report.max_abs_error < 1e-6
    np.testing.assert_allclose([a.reference for a in report.alarms],
                               reference.exact_marginals(factors, 10)[[model.index[a.alarm]
                                                                       for a in report.alarms]], atol=1e-10)


def test_reconvergent_paths_are_measured():
    model = _reconvergent()
    report = check.check(model, {model.index["shared(x)"]: True} | {})
    exact = reference.exact_marginals(model.graph.factors(), model.num_vars, {model.index["shared(x)"]: True})
    assert report.reference == "exact"
    for a in report.alarms:
        assert abs(a.reference - exact[model.index[a.alarm]]) < 1e-10
    assert report.max_abs_error == max(a.error for a in report.alarms)


@pytest.mark.slow
def test_weblech_check_with_a_sampled_reference_warns():
    model = load(DATA / "weblech.json")
    report = check.check(model, {}, reference="auto")
    # LBP puts weblech's alarms at 1e-67..1e-275 where the model gives about 1 %.
    assert report.reference == "sample" and report.verdict == "warn"
    assert any("orders of magnitude" in r for r in report.reasons)
    assert all(0.002 < a.reference < 0.03 and a.lbp < 1e-12 for a in report.alarms)
    doc = report.as_dict(3)
    assert set(doc) >= {"reference", "alarms", "max_abs_error", "mean_abs_error", "spearman", "worst",
                        "verdict"} and len(doc["worst"]) == 3
    # Probabilities below float64's range print from their log-odds, never as 0.000000.
    table = check.to_table(report, worst=len(report.alarms))
    assert "0.000000" not in table
    assert any(a.lbp == 0.0 and f"e-{int(-a.lbp_log_odds / np.log(10)) + 1:03d}" in table
               for a in report.alarms)


@pytest.mark.slow
def test_check_command_json_and_refusals():
    res = invoke("check", DATA / "presto.json", "-f", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["reference"] == "exact" and doc["verdict"] == "ok" and doc["max_abs_error"] < 1e-9
    res = invoke("check", DATA / "weblech.json", "--reference", "exact")
    assert res.exit_code == 2 and "induced width" in res.stderr and "--method sample" in res.stderr


def test_method_option_on_rank_and_marginals():
    res = invoke("rank", DATA / "presto.json", "--method", "exact", "-f", "json")
    assert res.exit_code == 0, res.output
    exact = json.loads(res.stdout)
    assert exact["method"] == "exact" and "exact inference" in res.stderr
    lbp = json.loads(invoke("rank", DATA / "presto.json", "-f", "json").stdout)
    # presto's network is a tree: LBP is exact there (its two alarms tie, so compare by name).
    by_name = {a["alarm"]: a["probability"] for a in lbp["alarms"]}
    assert sorted(by_name) == sorted(a["alarm"] for a in exact["alarms"])
    for a in exact["alarms"]:
        assert abs(a["probability"] - by_name[a["alarm"]]) < 1e-9
    res = invoke("marginals", DATA / "presto.json", "--method", "sample", "--samples", "20000", "--seed", "3")
    assert res.exit_code == 0 and "sampling" in res.stderr
    res = invoke("rank", DATA / "presto.json", "--method", "magic")
    assert res.exit_code == 2


def test_rank_warns_when_every_alarm_is_below_1e_12():
    # LBP's warning: weblech's LBP marginals are 1e-67 where the model says 1e-2.
    res = invoke("rank", DATA / "weblech.json", "--top", "3", "--method", "lbp")
    assert res.exit_code == 0 and "fastlbp check" in res.stderr and "below 1e-12" in res.stderr
    from fastlbp.cli.app import degenerate_warning

    assert degenerate_warning([0.3, 0.2, 1e-13], "g") is None
    assert "same probability" in degenerate_warning([0.3, 0.3], "g")  # presto's two alarms, say


def test_rank_top_does_not_warn_when_only_the_shown_alarms_are_equal(tmp_path):
    # a(0), a(1) derived alike (equal P), a(2) by a weaker rule: the top 2 are equal, the ranking is not.
    graph = {"format": "fastlbp-derivation", "version": 1,
             "rules": {"R0": {"probability": 0.9}, "R1": {"probability": 0.5}},
             "tuples": ["in(0)", "a(0)", "a(1)", "a(2)"],
             "clauses": [["R0", 1, [0]], ["R0", 2, [0]], ["R1", 3, [0]]],
             "alarms": ["a(0)", "a(1)", "a(2)"]}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(graph))
    res = invoke("rank", path, "--top", "2", "--method", "lbp")  # the warning is about LBP's numbers
    assert res.exit_code == 0 and "same probability" not in res.stderr, res.stderr
    graph["rules"]["R1"]["probability"] = 0.9  # now every alarm is equal
    path.write_text(json.dumps(graph))
    res = invoke("rank", path, "--top", "2", "--method", "lbp")
    assert res.exit_code == 0 and "same probability" in res.stderr, res.stderr


def test_a_session_of_each_method_agrees_on_a_tree():
    model = load(DATA / "presto.json")
    lbp = Session(model, method="lbp", tol=1e-12).run().marginals
    exact = Session(model, method="exact").run()
    sample = Session(model, method="sample", samples=50_000).run()
    assert exact.method == "exact" and sample.method == "sample"
    np.testing.assert_allclose(exact.marginals, lbp, atol=1e-9)
    assert np.all(np.abs(sample.marginals - exact.marginals) <= 5 * sample.stderr + 1e-12)


def test_the_report_names_the_checked_method():
    # `--method sample --reference exact` checks the sampler: its column and reasons name sampling, not LBP.
    from fastlbp.core.settings import Settings

    model = _reconvergent()
    report = check.check(model, settings=Settings(method="sample", samples=20_000), reference="exact")
    assert report.method == "sample" and report.reference == "exact"
    head = [line for line in check.to_table(report).splitlines() if line.rstrip().endswith("alarm")][0]
    assert head.split()[0] == "sampling" and "LBP" not in check.to_table(report)
    assert check.to_table(check.check(model, reference="exact")).count("LBP") >= 1  # "auto" checks LBP
