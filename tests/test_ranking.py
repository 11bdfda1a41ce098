"""`fastlbp rank` and the ranking writers (table, JSON, CSV, SARIF 2.1.0)."""

import csv
import io
import json
import os

import jsonschema
import numpy as np
import pytest
from conftest import DATA
from triage_support import demo_model, hand_model, install, write_demo
from typer.testing import CliRunner

from fastlbp import api, ranking
from fastlbp.cli import get_app

runner = CliRunner()
WEBLECH = str(DATA / "weblech" / "graph.causal_fg")


def invoke(*args):
    install()
    return runner.invoke(get_app(), [str(a) for a in args])


def sarif_schemas():
    schemas = [json.loads((DATA / "sarif-2.1.0-subset.schema.json").read_text())]
    full = os.environ.get("FASTLBP_SARIF_SCHEMA")
    if full:
        schemas.append(json.loads(open(full).read()))
    return schemas


def test_order_is_by_probability_then_input_order():
    p = np.array([0.5, 0.9, 0.5, 0.1, 0.9])
    assert ranking.order_alarms(p, np.array([0, 1, 2, 3, 4])).tolist() == [1, 4, 0, 2, 3]
    assert ranking.order_alarms(p, np.array([3, 2, 4]), exclude=[4]).tolist() == [2, 3]


def test_rank_matches_session_marginals_and_lists_labels_apart():
    model = demo_model()
    a0 = model.alarms[0]
    r = ranking.rank(model, {a0: False}, top=5)
    s = api.Session(model)
    s.label(a0, False)
    p = s.run(warm=False).marginals
    expected = sorted((a for a in model.alarms if a != a0), key=lambda a: (-p[a], model.alarms.index(a)))
    assert [a.var for a in r.alarms] == expected[:5]
    assert [a.rank for a in r.alarms] == [1, 2, 3, 4, 5]
    assert r.total_unlabelled == len(model.alarms) - 1
    assert [(a.var, a.truth) for a in r.labelled] == [(a0, False)]
    assert all(r.alarms[i].probability >= r.alarms[i + 1].probability for i in range(4))


def test_relation():
    assert ranking.relation("race(1,2)") == "race"
    assert ranking.relation("87") == "alarm"


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "sarif"])
def test_cli_formats(tmp_path, fmt):
    graph, _ = write_demo(tmp_path)
    res = invoke("rank", graph, "--format", fmt, "--top", "4")
    assert res.exit_code == 0, res.output
    assert "iterations" in res.stderr and "s" in res.stderr.splitlines()[-1]
    model = demo_model()
    expected = ranking.rank(model, top=4)
    names = [a.alarm for a in expected.alarms]
    out = res.stdout
    if fmt == "table":
        lines = out.splitlines()
        assert lines[0].split() == ["rank", "probability", "alarm"]
        assert [ln.split()[2] for ln in lines[1:5]] == names
        assert "more (use --top)" in lines[5]
    elif fmt == "json":
        doc = json.loads(out)
        assert [a["alarm"] for a in doc["alarms"]] == names
        assert [a["rank"] for a in doc["alarms"]] == [1, 2, 3, 4]
        assert isinstance(doc["iterations"], int) and isinstance(doc["converged"], bool)
        assert doc["alarms"][0]["probability"] == pytest.approx(expected.alarms[0].probability)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [r["alarm"] for r in rows] == names and rows[0]["rank"] == "1"
    else:
        doc = json.loads(out)
        for schema in sarif_schemas():
            jsonschema.validate(doc, schema)
        results = doc["runs"][0]["results"]
        assert [r["properties"]["alarm"] for r in results] == names
        assert {r["ruleId"] for r in results} == {"race"}
        assert results[0]["rank"] == pytest.approx(100 * expected.alarms[0].probability, abs=1e-5)
        assert [r["properties"]["rank"] for r in results] == [1, 2, 3, 4]
        assert "P(true)" in results[0]["message"]["text"]


def test_sarif_schema_rejects_bad_documents():
    doc = ranking.to_sarif(ranking.rank(hand_model()))
    schema = sarif_schemas()[0]
    jsonschema.validate(doc, schema)
    bad = json.loads(json.dumps(doc))
    bad["runs"][0]["results"][0]["rank"] = 101
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = json.loads(json.dumps(doc))
    del bad["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_cli_labels_file_and_model_without_alarms(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("87 false\n")
    res = invoke("rank", WEBLECH, "--labels", labels, "--format", "json", "--schedule", "parall")
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
