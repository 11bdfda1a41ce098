"""`fastlbp ground` and `.dl` programs given to the other commands: ground -> derivation.json -> rank
gives what ranking the program directly gives; errors exit 2 naming file, line and column."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datalog import formats
from fastlbp.cli import get_app

runner = CliRunner()
TAINT = Path(__file__).resolve().parents[1] / "data" / "taint"
OPTS = ["--facts", str(TAINT / "facts"), "--rule-prob", str(TAINT / "rule_prob.txt")]


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def test_ground_then_rank_equals_rank_of_the_program(tmp_path):
    out = tmp_path / "taint.json"
    res = invoke("ground", TAINT / "taint.dl", *OPTS, "-o", out)
    assert res.exit_code == 0, res.output
    assert "325 clauses" in res.stderr and "33 alarms" in res.stderr and f"wrote {out}" in res.stderr
    dg, _ = formats.read_json(out)
    assert dg.num_clauses == 325 and len(dg.alarms) == 33
    assert dg.rules[9].probability == 0.7 and dg.rules[9].name == "tainted-b44c7f"
    assert dg.rules[0].text == "pointsTo(v, h) :- new(v, h)."
    from_json = invoke("rank", out, "--format", "json")
    from_dl = invoke("rank", TAINT / "taint.dl", *OPTS, "--format", "json")
    assert from_json.exit_code == 0 and from_dl.exit_code == 0, from_dl.output
    a, b = json.loads(from_json.stdout), json.loads(from_dl.stdout)
    assert [(x["alarm"], x["probability"]) for x in a["alarms"]] == \
        [(x["alarm"], x["probability"]) for x in b["alarms"]]
    assert len(a["alarms"]) == 33
    assert "grounded" in from_dl.stderr  # grounding's progress on stderr, not in the JSON


def test_ground_to_a_bingo_directory_and_info_of_the_program(tmp_path):
    res = invoke("ground", TAINT / "taint.dl", *OPTS, "--alarms", "leak, tainted", "-o", tmp_path / "bingo")
    assert res.exit_code == 0, res.output
    dg, _ = formats.read_bingo(tmp_path / "bingo")
    assert dg.num_clauses == 325 and len(dg.alarms) > 33
    res = invoke("info", TAINT / "taint.dl", *OPTS, "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["derivation"]["clauses"] == 325


@pytest.mark.parametrize("command", ["check", "simulate"])
def test_other_commands_take_a_program(command, tmp_path):
    oracle = tmp_path / "oracle.txt"
    oracle.write_text("leak(Login.doPost/17,Login.doPost/v3)\n")
    extra = ["--oracle", oracle] if command == "simulate" else []
    res = invoke(command, TAINT / "taint.dl", *OPTS, "--alarms", "leak", *extra)
    assert res.exit_code == 0, res.output


def test_syntax_error_exit_2_file_line_column(tmp_path):
    p = tmp_path / "bad.dl"
    p.write_text(".decl e(x: number)\ne(x) :- e(x) e(x).\n")
    for args in (("ground", p, "-o", tmp_path / "o.json"), ("rank", p)):
        res = invoke(*args)
        assert res.exit_code == 2
        assert f"error: {p}:2:14: expected ',' or '.' after a body literal, got 'e'" in res.stderr
        assert "Traceback" not in res.output
    assert not (tmp_path / "o.json").exists()


def test_facts_errors_exit_2(tmp_path):
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "new.facts").write_text("a\tb\nc\n")
    res = invoke("ground", TAINT / "taint.dl", "--facts", facts, "-o", tmp_path / "o.json")
    assert res.exit_code == 2
    assert f"error: {facts / 'new.facts'}:2: expected 2 tab-separated fields" in res.stderr
    (facts / "new.facts").write_text("")
    res = invoke("ground", TAINT / "taint.dl", "--facts", facts, "-o", tmp_path / "o.json")
    assert res.exit_code == 2 and f"error: {facts / 'assign.facts'}: no such file" in res.stderr


def test_grounding_options_only_for_a_program(tmp_path):
    graph = Path(__file__).resolve().parents[1] / "data" / "presto.json"
    res = invoke("rank", graph, "--facts", tmp_path)
    assert res.exit_code == 2 and "--facts: only for a Datalog program (.dl)" in res.stderr
    res = invoke("ground", TAINT / "taint.dl", *OPTS, "--alarms", " , ", "-o", tmp_path / "o.json")
    assert res.exit_code == 2 and "--alarms: name at least one relation" in res.stderr
    res = invoke("ground", TAINT / "taint.dl", *OPTS, "--alarms", "nope", "-o", tmp_path / "o.json")
    assert res.exit_code == 2 and "alarm relation 'nope' is not declared" in res.stderr


def test_ground_refuses_a_directory_of_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    res = invoke("ground", TAINT / "taint.dl", *OPTS, "-o", tmp_path)
    assert res.exit_code == 2 and "holds other files and no Bingo graph" in res.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"
