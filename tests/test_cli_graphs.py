"""`fastlbp convert`, `fastlbp info` (`fastlbp.cli.graphs`) and `fastlbp marginals` on derivation graphs."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fastlbp.cli import get_app

PRESTO = Path(__file__).parent / "data" / "presto-exceptions"
runner = CliRunner()


def cli(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def test_convert_round_trip_and_info(tmp_path):
    r = cli("convert", PRESTO, tmp_path / "p.json")
    assert r.exit_code == 0, r.output
    r = cli("convert", tmp_path / "p.json", tmp_path / "bingo")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "bingo" / "named_cons_all.txt").read_text().splitlines() == [
        s for s in (PRESTO / "named_cons_all.txt").read_text().splitlines() if s.strip()]
    r = cli("convert", tmp_path / "p.json", tmp_path / "p.fg")
    assert r.exit_code == 0 and (tmp_path / "p.fg").read_text().split("\n", 1)[0] == "41"
    r = cli("info", tmp_path / "p.json", "--format", "json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["derivation"]["tuples"] == 63 and info["derivation"]["clauses"] == 40
    assert info["derivation"]["rules"] == 9
    assert info["loading"]["clauses_dropped_by_cycle_elimination"] == 0
    assert info["loading"]["merged_tuples"] == 38
    assert info["factor_graph"]["variables"] == 41
    r = cli("info", PRESTO)
    assert r.exit_code == 0 and "tuples merged with their only clause: 38" in " ".join(r.stdout.split())


def test_marginals_on_derivation_json(tmp_path):
    cli("convert", PRESTO, tmp_path / "p.json.gz")
    r = cli("marginals", tmp_path / "p.json.gz")
    assert r.exit_code == 0, r.output
    marg = json.loads(r.stdout.splitlines()[0])["marginals"]
    assert 0.9 < marg["CatchVH(3,4)"] < 1.0


def test_errors_exit_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "fastlbp-derivation", "version": 1, "rules": {}, '
                   '"clauses": [["R0", "a", []]]}')
    for args in (("info", bad), ("marginals", bad), ("convert", bad, tmp_path / "x.json"),
                 ("convert", "data/weblech.causal_fg", tmp_path / "x.json"),
                 ("info", tmp_path / "missing.json")):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output and "error:" in r.output
    r = cli("info", bad)
    assert "$.clauses[0][0]" in r.output and "not defined" in r.output


def test_info_schedule(monkeypatch):
    import schedules

    monkeypatch.delattr(schedules, "describe", raising=False)
    r = cli("info", PRESTO, "--schedule", "seqfix")
    assert r.exit_code == 2 and "schedules.describe is not available" in " ".join(r.output.split())
    seen = {}

    def describe(model, schedule):
        seen["args"] = (model.num_vars, schedule)
        return {"batches": 3, "analysis_seconds": 0.01}

    monkeypatch.setattr(schedules, "describe", describe, raising=False)
    r = cli("info", PRESTO, "--schedule", "seqfix", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["schedule"] == {"batches": 3, "analysis_seconds": 0.01}
    assert seen["args"] == (41, "seqfix")


def test_shipped_examples_load():
    from fastlbp.loading import load

    data = Path(__file__).parent.parent / "data"
    for name in ("presto.json", "presto", "weblech.json", "weblech"):
        model = load(data / name)
        assert model.alarms and len(model.meta["truth"]) == len(model.alarms)
        assert set(model.meta["truth"]) == set(model.alarms)


def test_cycles_option_selects_bingo_mode(tmp_path):
    path = Path(__file__).resolve().parents[1] / "data" / "weblech.json"
    default = cli("info", path, "--format", "json")
    bingo = cli("info", path, "--format", "json", "--cycles", "bingo")
    assert default.exit_code == 0 and bingo.exit_code == 0, bingo.output
    text_default, text_bingo = default.stdout, bingo.stdout
    assert json.loads(text_default) != json.loads(text_bingo)
    assert "143" in text_bingo  # clauses Bingo's criterion drops on this acyclic graph
    # The option is per command: a later command without it is back to the default.
    assert cli("info", path, "--format", "json").stdout == text_default
    # convert eliminates cycles the same way when it writes a factor graph.
    assert cli("convert", path, tmp_path / "d.fg").exit_code == 0
    assert cli("convert", path, tmp_path / "b.fg", "--cycles", "bingo").exit_code == 0
    assert (tmp_path / "d.fg").read_text() != (tmp_path / "b.fg").read_text()
