"""One table per choice (issue 39): a new input format, update strategy or inference method is its own code
plus one row of its table (`datalog.io.FORMATS`; `schedules.plan.STRATEGIES`;
`fastlbp.inference.methods.METHODS`), and everything then takes it. Each test
registers a toy one, runs it through the public API and unregisters it (monkeypatch). CONTRIBUTING.md shows
the same rows."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import fastlbp
import schedules
from datalog import formats
from datalog import io as datalog_io
from fastlbp.cli import get_app
from fastlbp.cli.graphs import GraphFormat
from fastlbp.core.settings import Settings
from fastlbp.inference import methods
from fastlbp.inference import simulate as sim
from fastlbp.inference.method import Method
from fastlbp.inference.rounds import Round
from fastlbp.io import plots, writers
from schedules import orders
from schedules.plan import STRATEGIES, Strategy, make_plan

runner = CliRunner()
WEBLECH = str(Path(__file__).resolve().parents[1] / "data" / "weblech.json")
RACE = str(Path(__file__).resolve().parents[1] / "data" / "race.json")


# A toy format: one clause per line, `HEAD <- BODY BODY ...` (rule R0), and `alarm NAME` lines.

def read_toy(path, *, max_decompressed=None):
    tuples, clauses, alarms = {}, [], []

    def index(name):
        return tuples.setdefault(name, len(tuples))

    for line in open(path, encoding="utf-8"):
        if line.startswith("alarm "):
            alarms.append(line.split()[1])
        elif "<-" in line:
            head, body = line.split("<-")
            clauses.append(["R0", index(head.strip()), [index(b) for b in body.split()]])
    doc = {"format": formats.FORMAT_NAME, "version": formats.FORMAT_VERSION,
           "rules": {"R0": {"probability": 0.9}}, "tuples": list(tuples), "clauses": clauses,
           "alarms": alarms}
    return formats.parse_json(json.dumps(doc), str(path))


def load_toy(path, *, cycles="cycles", compress=True, max_decompressed=None):
    return formats.model_from_derivation(*read_toy(path), compress=compress, cycles=cycles)


TOY = datalog_io.Format("toy", "a toy graph (.toy)", load_toy, (".toy",), read_derivation=read_toy)

TOY_GRAPH = """\
a <-
b <- a
c <- a b
d <- c
d <- b
alarm c
alarm d
"""


@pytest.fixture
def toy_format(monkeypatch, tmp_path):
    monkeypatch.setitem(datalog_io.FORMATS, "toy", TOY)
    path = tmp_path / "g.toy"
    path.write_text(TOY_GRAPH)
    return path


def test_a_format_added_to_the_table_is_read_by_every_command(toy_format, tmp_path):
    assert datalog_io.detect_format(toy_format) == "toy"
    res = runner.invoke(get_app(), ["rank", str(toy_format), "--no-cache", "-f", "json", "--method", "exact"])
    assert res.exit_code == 0, res.output
    assert {a["alarm"] for a in json.loads(res.stdout)["alarms"]} == {"c", "d"}
    # convert reads it through the table's read_derivation and writes any derivation format
    out = tmp_path / "g.json"
    res = runner.invoke(get_app(), ["convert", str(toy_format), str(out)])
    assert res.exit_code == 0, res.output
    dg, _ = datalog_io.read_derivation(out)
    assert sorted(dg.tuples[a] for a in dg.alarms) == ["c", "d"] and dg.num_clauses == 5


def test_an_unknown_suffix_names_the_table_formats(tmp_path):
    path = tmp_path / "g.weird"
    path.write_text("x")
    res = runner.invoke(get_app(), ["info", str(path)])
    assert res.exit_code == 2
    for f in datalog_io.FORMATS.values():
        assert f.what in " ".join(res.output.split())


def test_convert_targets_are_the_writable_formats():
    # `--to` is written out in fastlbp.cli.graphs (--help imports no datalog): the same as the table's.
    writable = [f.name for f in datalog_io.FORMATS.values() if f.write_derivation or f.write_model]
    assert [f.value for f in GraphFormat] == writable


# A toy strategy: SEQFIX's order backwards.

def reverse_order(graph, spec):
    seq = orders.seqfix(graph)
    return [orders.Order(seq.rank.max() - seq.rank, "reverse")]


@pytest.fixture
def toy_strategy(monkeypatch):
    # The one row: name, help, builder (parallel=True would run it on the PARALL engines).
    monkeypatch.setitem(STRATEGIES, "reverse", Strategy("reverse", "SEQFIX's order backwards", reverse_order))


def test_a_strategy_added_to_the_table_runs_end_to_end(toy_strategy):
    res = runner.invoke(get_app(), ["rank", WEBLECH, "--no-cache", "-f", "json", "--method", "lbp",
                                    "--schedule", "reverse", "--tol", "1e-10"])
    assert res.exit_code == 0, res.output
    mine = {a["alarm"]: a["probability"] for a in json.loads(res.stdout)["alarms"]}
    res = runner.invoke(get_app(), ["rank", WEBLECH, "--no-cache", "-f", "json", "--method", "lbp",
                                    "--schedule", "seqfix", "--tol", "1e-10"])
    theirs = {a["alarm"]: a["probability"] for a in json.loads(res.stdout)["alarms"]}
    assert mine.keys() == theirs.keys()  # the same fixed point, reached in another order
    np.testing.assert_allclose([mine[k] for k in theirs], list(theirs.values()), atol=1e-6)
    plan = make_plan(Settings(schedule="reverse:chunked"))
    assert plan.schedule.strategy == "reverse" and not plan.schedule.parallel
    # the library's API takes it too, and describe builds its order through the row
    ranking = fastlbp.rank(fastlbp.load(WEBLECH), {}, settings=Settings(method="lbp", schedule="reverse",
                                                                         tol=1e-10))
    np.testing.assert_allclose([a.probability for a in ranking.alarms],
                               sorted(mine.values(), reverse=True), atol=1e-6)
    assert schedules.describe(fastlbp.load(WEBLECH), "reverse:chunked")["engine"] == "chunked"


def test_an_unknown_strategy_names_the_table():
    res = runner.invoke(get_app(), ["rank", WEBLECH, "--schedule", "nosuch"])
    assert res.exit_code == 2
    assert ", ".join(STRATEGIES) in " ".join(res.output.split())


def test_the_help_is_made_from_the_strategy_table():
    res = runner.invoke(get_app(), ["rank", "--help"], env={"COLUMNS": "400"})
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", res.output).split())
    for s in STRATEGIES.values():
        assert f"{s.name} ({s.help})" in text


def test_describe_names_the_engine_the_plan_runs():
    model = datalog_io.load(WEBLECH)
    parall = make_plan(Settings(schedule="parall", backend="fused_interpret"), platform="cpu")
    assert schedules.describe(model, parall)["engine"] == "parall/fused"
    seq = make_plan(Settings(schedule="seqfix:chunked", backend="fused_interpret"), platform="cpu")
    assert schedules.describe(model, seq)["engine"] == "persistent"
    assert schedules.describe(model, "seqfix:chunked")["engine"] == "chunked"
    assert schedules.describe(model, "parall")["engine"] == "parall"


# A toy method: every tuple's prior probability (exact inference without the labels), the labelled ones
# known. Its own code is the prepared round and the row; the table gets one row.

@dataclasses.dataclass(frozen=True)
class PriorRound:
    name: str = "prior"

    def round(self, inputs):
        from fastlbp.engines.exact import exact_marginals

        m = exact_marginals(inputs.model, {}, inputs.settings)
        p, lo = m.marginals.copy(), m.log_odds.copy()
        for v, truth in inputs.labels.items():
            p[v], lo[v] = float(truth), math.inf if truth else -math.inf
        return Round(p, lo, 0, True, 0.0, m.seconds, method=self.name, info=m.info), self, None

    def with_model(self, model):
        return self


class PriorMethod(Method):
    name = "prior"
    label = "the prior"
    help = "each tuple's probability before any label"
    error_head = "prior"

    def prepare(self, model, plan, sampler=None):
        return PriorRound()

    def describe(self, rnd):
        return "the prior: no label counts"

    def error_cell(self, lower, upper, flags):
        return "no labels"


@pytest.fixture
def toy_method(monkeypatch):
    monkeypatch.setitem(methods.METHODS, "prior", PriorMethod())


def test_a_method_added_to_the_table_runs_and_names_itself(toy_method):
    model = fastlbp.load(RACE)
    exact = fastlbp.rank(model, {}, settings=Settings(method="exact"))
    ranking = fastlbp.rank(model, {}, settings=Settings(method="prior"))
    assert ranking.method == "prior" and ranking.how == "the prior: no label counts"
    assert [a.alarm for a in ranking.alarms] == [a.alarm for a in exact.alarms]  # no labels: the posterior
    table = writers.to_table(ranking)
    assert table.splitlines()[0].split()[2] == "prior" and "no labels" in table.splitlines()[1]
    assert json.loads(writers.to_json(ranking))["method"] == "prior"
    assert writers.caveats(ranking) == []

    session = fastlbp.Session(model, method="prior")
    alarm = model.alarms[0]
    before = session.run().marginals[alarm]
    session.label(int(alarm), True)
    rnd = session.run()
    assert rnd.marginals[alarm] == 1.0 and methods.summary_dict(rnd)["how"] == "the prior: no label counts"
    assert 0 < before < 1

    truth = sim.graph_truth(model)
    result = sim.simulate(model, truth, max_rounds=3, settings=Settings(method="prior"))
    assert result.steps and result.methods == {"prior": len(result.steps)}
    assert {s["method"] for s in result.as_dict()["labels"]} == {"prior"}
    assert "the prior" in sim.to_table(result)
    title = plots.plot_data(result, graph=RACE, settings=Settings(method="prior"))[0].title
    assert title.splitlines()[1] == "race.json: the prior, f64"


def test_an_unknown_method_names_the_table():
    with pytest.raises(fastlbp.SettingsError, match="auto, lbp, exact, sample"):
        fastlbp.Session(fastlbp.load(RACE), method="nosuch")
