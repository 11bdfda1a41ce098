"""One table per choice (issue 39): a new input format or update strategy is its own code plus one row of
its table (`datalog.io.FORMATS`; `fastlbp.core.plan.STRATEGIES` with its order in
`schedules.orders.BUILDERS`), and every command then takes it. CONTRIBUTING.md shows the same two rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import schedules
from datalog import formats
from datalog import io as datalog_io
from fastlbp.cli import get_app
from fastlbp.cli.graphs import GraphFormat
from fastlbp.core import plan as core_plan
from fastlbp.core.settings import Settings
from schedules import orders

runner = CliRunner()
WEBLECH = str(Path(__file__).resolve().parents[1] / "data" / "weblech.json")


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
    monkeypatch.setitem(core_plan.STRATEGIES, "reverse",
                        core_plan.Strategy("reverse", "SEQFIX's order backwards"))
    monkeypatch.setitem(orders.BUILDERS, "reverse", reverse_order)


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
    plan = core_plan.make_plan(Settings(schedule="reverse:chunked"))
    assert plan.schedule.strategy == "reverse" and not plan.schedule.parallel


def test_an_unknown_strategy_names_the_table():
    res = runner.invoke(get_app(), ["rank", WEBLECH, "--schedule", "nosuch"])
    assert res.exit_code == 2
    assert ", ".join(core_plan.STRATEGIES) in " ".join(res.output.split())


def test_the_help_is_made_from_the_strategy_table():
    res = runner.invoke(get_app(), ["rank", "--help"], env={"COLUMNS": "400"})
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", res.output).split())
    for s in core_plan.STRATEGIES.values():
        assert f"{s.name} ({s.help})" in text


def test_describe_names_the_engine_the_plan_runs():
    model = datalog_io.load(WEBLECH)
    parall = core_plan.make_plan(Settings(schedule="parall", backend="fused_interpret"), platform="cpu")
    assert schedules.describe(model, parall)["engine"] == "parall/fused"
    seq = core_plan.make_plan(Settings(schedule="seqfix:chunked", backend="fused_interpret"), platform="cpu")
    assert schedules.describe(model, seq)["engine"] == "persistent"
    assert schedules.describe(model, "seqfix:chunked")["engine"] == "chunked"
    assert schedules.describe(model, "parall")["engine"] == "parall"
