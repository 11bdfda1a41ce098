"""`fastlbp simulate`: the oracle loop, its metrics, and the command."""

import importlib.util
import json

import pytest
from triage_support import demo_model, write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.settings import Settings
from fastlbp.inference import metrics, ranking
from fastlbp.inference import simulate as sim
from fastlbp.inference.session import Session

runner = CliRunner()


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def test_loop_labels_the_top_alarm_each_round(tmp_path):
    graph, oracle = write_demo(tmp_path)
    model = demo_model()
    truth = sim.read_oracle(oracle, model)
    assert 0 < len(truth) < len(model.alarms)
    result = sim.simulate(model, truth, settings=Settings(tol=1e-6, max_iters=300))
    assert result.complete
    # Replay the same labels by hand: each step's alarm must be the top one.
    s = Session(model, tol=1e-6, max_iters=300)
    rnd = s.run(warm=False)
    for step in result.steps:
        top = ranking.order_alarms(rnd.marginals, ranking.alarm_vars(model), exclude=s.labels)[0]
        assert step.var == top and step.probability == rnd.marginals[top]
        assert step.truth == (top in truth)
        s.label(top, step.truth)
        rnd = s.run()
    seq = [st.truth for st in result.steps]
    assert seq[-1] and sum(seq) == len(truth)  # stops at the last true alarm
    assert result.metrics == metrics.summarize(seq, [st.round_s for st in result.steps],
                                               num_alarms=len(model.alarms))
    assert result.metrics.rank_100_t == len(result.steps)


def test_max_rounds_stops_early(tmp_path):
    _, oracle = write_demo(tmp_path)
    model = demo_model()
    truth = sim.read_oracle(oracle, model)
    result = sim.simulate(model, truth, max_rounds=2)
    assert len(result.steps) == 2 and not result.complete
    # Progress: found k of the true alarms after each label.
    assert [s.found for s in result.steps] == [sum(s.truth for s in result.steps[:i + 1]) for i in range(2)]
    assert {s.num_true for s in result.steps} == {len(truth)}
    m = result.metrics
    assert (m.found, m.num_true, m.labelled) == (sum(s.truth for s in result.steps), len(truth), 2)
    doc = result.as_dict()
    assert doc["complete"] is False and doc["rounds"] == 2
    # More true alarms than two rounds can find, and false ones left: nothing is decided.
    assert m.found < len(truth) and m.num_false > 2 - m.found
    for key in ("rank_100_t", "auc", "inversions", "total_time_s", "average_time_s"):
        assert doc[key] is None, key
    table = sim.to_table(result)
    assert "Rank-100%-T       not reached" in table and "AUC               not reached" in table
    assert "(stopped after 2 rounds)" in table


def test_progress_line_counts_true_alarms_found():
    from fastlbp.cli.simulate import progress_line

    step = sim.Step("race(\x1b[2J)", 3, True, 3e-9, 0.0031, 7, True, found=9, num_true=43)
    assert progress_line(12, step) == r"round 12: found 9/43  true   P=3.000e-09  3.1 ms  race(\x1b[2J)"


def test_metrics_undefined_without_true_alarms():
    model = demo_model()
    result = sim.simulate(model, set())
    assert result.complete and result.steps == []
    assert result.as_dict()["auc"] is None and result.metrics.rank_100_t == 0
    assert "undefined (no true or no false alarms)" in sim.to_table(result)


def test_cli_json_and_table(tmp_path):
    graph, oracle = write_demo(tmp_path)
    res = invoke("simulate", graph, "--oracle", oracle, "--format", "json", "--max-iters", "300")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    for key in ("rank_100_t", "rank_90_t", "inversions", "auc", "total_time_s", "average_time_s"):
        assert key in doc
    assert set(doc["labels"][0]) >= {"alarm", "truth", "probability", "round_s"}
    assert doc["rank_100_t"] == len(doc["labels"])
    assert sum(lab["truth"] for lab in doc["labels"]) == len(oracle.read_text().split())
    res = invoke("simulate", graph, "--oracle", oracle, "--max-iters", "300")
    assert res.exit_code == 0, res.output
    assert "Rank-100%-T" in res.stdout and "AverageTime" in res.stdout and "TotalTime" in res.stdout


def test_cli_oracle_defaults_to_the_graphs_truth(tmp_path):
    graph, oracle = write_demo(tmp_path)
    doc = json.loads(graph.read_text())
    names = set(oracle.read_text().split())
    doc["truth"] = {a: a in names for a in doc["alarms"]}
    graph.write_text(json.dumps(doc))
    with_oracle = invoke("simulate", graph, "--oracle", oracle, "-f", "json", "--max-iters", "300")
    default = invoke("simulate", graph, "-f", "json", "--max-iters", "300")
    assert with_oracle.exit_code == 0 and default.exit_code == 0, default.output
    labels = [(lab["alarm"], lab["truth"]) for lab in json.loads(default.stdout)["labels"]]
    assert labels == [(lab["alarm"], lab["truth"]) for lab in json.loads(with_oracle.stdout)["labels"]]
    assert {a for a, t in labels if t} == names
    # A Bingo directory's oracle_queries.txt is its truth too.
    bingo = tmp_path / "bingo"
    assert invoke("convert", graph, bingo, "--to", "bingo").exit_code == 0
    res = invoke("simulate", bingo, "-f", "json", "--max-iters", "300", "-o", tmp_path / "run.json")
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "run.json").read_text())
    assert [(lab["alarm"], lab["truth"]) for lab in got["labels"]] == labels
    # No truth in the graph and no --oracle: a clear error.
    del doc["truth"]
    graph.write_text(json.dumps(doc))
    res = invoke("simulate", graph)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "records no ground truth" in res.stderr and "--oracle" in res.stderr


def test_cli_cut_short_json_says_so(tmp_path):
    graph, oracle = write_demo(tmp_path)
    res = invoke("simulate", graph, "--oracle", oracle, "-f", "json", "--max-rounds", "1")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["complete"] is False and doc["rank_100_t"] is None and doc["auc"] is None
    assert "stopped by --max-rounds" in res.stderr


def test_cli_bad_oracle_names_line(tmp_path):
    graph, oracle = write_demo(tmp_path)
    oracle.write_text("race(1)\nnot_a_tuple(9)\n")
    res = invoke("simulate", graph, "--oracle", oracle)
    assert res.exit_code == 2 and f"{oracle}:2:" in res.stderr and "unknown alarm" in res.stderr
    oracle.write_text("in(1)\n")
    res = invoke("simulate", graph, "--oracle", oracle)
    assert res.exit_code == 2 and "is not an alarm" in res.stderr


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None, reason="matplotlib installed")
def test_plot_without_matplotlib_says_so(tmp_path):
    graph, oracle = write_demo(tmp_path)
    res = invoke("simulate", graph, "--oracle", oracle, "--plot", tmp_path / "plots")
    assert res.exit_code == 2 and "matplotlib" in res.stderr and "fastlbp[plots]" in res.stderr


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_plot_writes_pngs(tmp_path):
    graph, oracle = write_demo(tmp_path)
    res = invoke("simulate", graph, "--oracle", oracle, "--plot", tmp_path / "plots", "--max-iters", "300")
    assert res.exit_code == 0, res.output
    for name in ("roc.png", "true_alarms_over_time.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:4] == b"\x89PNG"


def test_contradicting_oracle_does_not_stop_the_run():
    from triage_support import hand_model
    model = hand_model()
    # race(1) is certain (prior 1, rule 1): an oracle calling it false contradicts the model.
    race2 = model.index["race(2)"]
    result = sim.simulate(model, {race2})
    assert result.complete
    by_alarm = {s.alarm: s for s in result.steps}
    assert by_alarm["race(1)"].evidence_dropped and not by_alarm["race(1)"].truth
    assert by_alarm["race(2)"].truth and not by_alarm["race(2)"].evidence_dropped
    assert result.as_dict()["evidence_dropped"] == ["race(1)"]
    assert "labels not used" in sim.to_table(result)
