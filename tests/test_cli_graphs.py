"""`fastlbp convert`, `fastlbp info` (`fastlbp.cli.graphs`) and `fastlbp marginals` on derivation graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datalog import formats
from datalog.derivation import from_clauses
from fastlbp.cli import get_app
from fastlbp.core.errors import InputError

PRESTO = Path(__file__).parent / "data" / "presto-exceptions"
runner = CliRunner()


def cli(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def test_convert_round_trip_and_info(tmp_path):
    r = cli("convert", PRESTO, tmp_path / "p.json")
    assert r.exit_code == 0, r.output
    r = cli("convert", tmp_path / "p.json", f"{tmp_path / 'bingo'}/")
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


@pytest.mark.slow
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

    monkeypatch.delitem(schedules._LAZY, "describe")  # the package names its functions lazily
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
    num_vars, plan = seen["args"]  # the run's plan: it says which engine runs (fused, persistent)
    assert (num_vars, plan.schedule.strategy, plan.platform is not None) == (41, "seqfix", True)


def test_shipped_examples_load():
    from fastlbp.io.loading import load

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


def _graph_with_name(tmp_path, name):
    doc = {"format": "fastlbp-derivation", "version": 1, "rules": {"R0": 0.9},
           "clauses": [["R0", name, ["e(1)"]], ["R0", "ok(1)", [name]]], "alarms": ["ok(1)"]}
    p = tmp_path / "g.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("name", ["a(1)\nR9: NOT x, y", "a(1)\r", "a b", "a(1", "a(f(1))",
                                  "NOT x", "a:b", "", "\ufeffa"])
def test_convert_to_bingo_refuses_names_it_cannot_carry(tmp_path, name):
    src = _graph_with_name(tmp_path, name)
    r = cli("convert", src, tmp_path / "bingo", "--to", "bingo")
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and "Traceback" not in r.output
    assert repr(name) in r.output and "Bingo" in r.output
    assert not (tmp_path / "bingo").exists()  # nothing written


@pytest.mark.parametrize("name", ["a(1, 2)", "a(x:y)", "a(\x1b[31m)", "a(\x85)", "a(\x0b\x0c\x1c)", "NOT",
                                  "a(\t)", "é(ü)", "a(\u2028)"])
def test_convert_to_bingo_carries_every_name_it_can(tmp_path, name):
    src = _graph_with_name(tmp_path, name)
    r = cli("convert", src, tmp_path / "bingo", "--to", "bingo")
    assert r.exit_code == 0, r.output
    dg, _ = formats.read_bingo(tmp_path / "bingo")
    assert name in dg.tuples
    assert sorted(dg.tuples) == sorted(formats.read_json(src)[0].tuples)


def test_bingo_isolated_inputs_and_rule_names(tmp_path):
    dg = from_clauses([("R0", "a(1)", ["e(1)"])], rules={"R0": 0.9}, priors={"lone input": 0.5})
    formats.save_bingo(dg, tmp_path / "ok")
    assert "lone input" in formats.read_bingo(tmp_path / "ok")[0].tuples
    for bad in (" lone", "lone\n"):
        dg = from_clauses([("R0", "a(1)", ["e(1)"])], rules={"R0": 0.9}, priors={bad: 0.5})
        with pytest.raises(InputError, match="cannot be written"):
            formats.save_bingo(dg, tmp_path / "bad")
    for rule in ("R 0", "R:0", "R0\n"):
        dg = from_clauses([(rule, "a(1)", ["e(1)"])], rules={rule: 0.9})
        with pytest.raises(InputError, match="rule"):
            formats.save_bingo(dg, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("name", ["a b", "a\tb", "a\nb", "a\u2028b"])
def test_convert_to_causal_fg_refuses_names_with_whitespace(tmp_path, name):
    src = _graph_with_name(tmp_path, name)
    r = cli("convert", src, tmp_path / "g.fg", "--no-compress")
    assert r.exit_code == 2, r.output
    assert repr(name) in r.output and "Traceback" not in r.output
    assert not (tmp_path / "g.fg").exists()


WEBLECH = Path(__file__).resolve().parents[1] / "data" / "weblech.json"


def test_convert_reads_the_format_from_the_name_and_refuses_guesses(tmp_path):
    r = cli("convert", WEBLECH, tmp_path / "weird.txt")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "unknown output format" in r.stderr and ".json.gz" in r.stderr and "--to bingo" in r.stderr
    assert not (tmp_path / "weird.txt").exists()
    # --to names the format of any name; a trailing / or an existing directory is a Bingo directory.
    assert cli("convert", WEBLECH, tmp_path / "weird.txt", "--to", "json").exit_code == 0
    assert formats.read_json(tmp_path / "weird.txt")[0].num_clauses == 391
    assert cli("convert", WEBLECH, f"{tmp_path / 'b1'}/").exit_code == 0
    assert cli("convert", WEBLECH, tmp_path / "b2", "--to", "bingo").exit_code == 0
    (tmp_path / "b3").mkdir()
    assert cli("convert", WEBLECH, tmp_path / "b3").exit_code == 0
    for d in ("b1", "b2", "b3"):
        assert formats.read_bingo(tmp_path / d)[0].num_clauses == 391
    # A directory that is not empty is refused, unless --force (which keeps foreign files).
    (tmp_path / "b1" / "notes.md").write_text("mine")
    r = cli("convert", WEBLECH, f"{tmp_path / 'b1'}/")
    assert r.exit_code == 2 and "is not empty" in r.stderr and "--force" in r.stderr
    r = cli("convert", WEBLECH, f"{tmp_path / 'b1'}/", "--force")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b1" / "notes.md").read_text() == "mine"
    # A file target that is a directory, and the input itself, are refused.
    r = cli("convert", WEBLECH, tmp_path / "b2", "--to", "json")
    assert r.exit_code == 2 and "is a directory" in r.stderr
    assert cli("convert", WEBLECH, tmp_path / "same.json").exit_code == 0
    r = cli("convert", tmp_path / "same.json", tmp_path / "same.json")
    assert r.exit_code == 2 and "is the input" in r.stderr
    # A source whose name says no format is refused by the same rule (not read as a factor graph).
    r = cli("convert", tmp_path / "weird.txt", tmp_path / "w.json")
    assert r.exit_code == 2 and "not a graph fastlbp reads" in r.stderr


def test_rule_texts_survive_json_bingo_json(tmp_path):
    src = json.loads(WEBLECH.read_text())
    src["rules"]["R0"]["text"] = "pt(v,h) :- alloc(v,h,m).   # with a colon: and a # in it"
    src["rules"]["R1"]["text"] = "two\nlines"
    (tmp_path / "g.json").write_text(json.dumps(src))
    r = cli("convert", tmp_path / "g.json", f"{tmp_path / 'b'}/")
    assert r.exit_code == 0, r.output
    assert "1 rule text(s)" in r.stderr and "'R1'" in r.stderr  # the one a line cannot carry is named
    assert (tmp_path / "b" / "rule_dict.txt").exists()
    r = cli("convert", tmp_path / "b", tmp_path / "back.json")
    assert r.exit_code == 0, r.output
    back = json.loads((tmp_path / "back.json").read_text())["rules"]
    assert back["R0"]["text"] == src["rules"]["R0"]["text"]
    assert "text" not in back["R1"]
    others = {k: v for k, v in src["rules"].items() if k != "R1"}
    assert {k: v for k, v in back.items() if k != "R1"} == others
    # Bingo's own rule_dict.txt (a tab after the colon, rules no clause uses) reads too.
    (tmp_path / "b" / "rule_dict.txt").write_text("R0:\tp :- q.\nR99: unused :- rule.\n")
    rules = {r.name: r.text for r in formats.read_bingo(tmp_path / "b")[0].rules}
    assert rules["R0"] == "p :- q." and rules["R2"] is None and "R99" not in rules
    (tmp_path / "b" / "rule_dict.txt").write_text("R0: a\nR0: b\n")
    with pytest.raises(InputError, match="rule_dict.txt:2:.*'a' on line 1"):
        formats.read_bingo(tmp_path / "b")


def test_convert_to_causal_fg_names_what_it_leaves_out(tmp_path):
    r = cli("convert", WEBLECH, tmp_path / "w.fg")
    assert r.exit_code == 0, r.output
    warning = " ".join(r.stderr.split())
    for words in ("11 alarms", "11 ground-truth labels", "16 rule texts",
                  "`fastlbp rank` on it ranks every variable"):
        assert words in warning, words


def test_info_counts_true_labels_and_rounds(monkeypatch):
    r = cli("info", WEBLECH)
    assert r.exit_code == 0, r.output
    assert "ground-truth labels: 11 (7 true)" in " ".join(r.stdout.split())  # data/make_examples.py
    r = cli("info", WEBLECH, "--format", "json")
    assert json.loads(r.stdout)["truth_true"] == 7
    import schedules

    monkeypatch.setattr(schedules, "describe", lambda model, schedule: {
        "analysis_seconds": 0.021925291999650653, "slot_fill": 0.337791313559322, "big_seconds": 12.345678,
        "edges": 1663, "batch_size": {"min": 3, "median": 11.0,
                                      "histogram": {"bin_edges": [0, 1, 2, 4], "counts": [0, 5, 2]}}},
                        raising=False)
    text = " ".join(cli("info", WEBLECH, "--schedule", "seqfix").stdout.split())
    for words in ("analysis_seconds: 21.9 ms", "slot_fill: 0.338", "big_seconds: 12.3 s", "edges: 1,663",
                  "batch_size: min 3, median 11, histogram [1,2): 5, [2,4): 2"):
        assert words in text, words


def test_convert_to_bingo_names_truth_it_cannot_hold(tmp_path):
    doc = json.loads(WEBLECH.read_text())
    doc["truth"][doc["tuples"][0]] = False  # not an alarm: oracle_queries.txt lists true alarms only
    (tmp_path / "g.json").write_text(json.dumps(doc))
    r = cli("convert", tmp_path / "g.json", f"{tmp_path / 'b'}/")
    assert r.exit_code == 0, r.output
    assert "1 ground-truth entries say false for a tuple that is not an alarm" in r.stderr
    r = cli("convert", WEBLECH, f"{tmp_path / 'plain'}/")
    assert r.exit_code == 0 and "warning" not in r.stderr  # weblech's truth names alarms only


def test_convert_of_a_datalog_program_says_to_ground_it(tmp_path):
    program = Path(__file__).parents[1] / "data" / "taint" / "taint.dl"
    r = cli("convert", program, tmp_path / "t.json")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"error: {program}: is a Datalog program, not a graph" in r.stderr
    assert f"fastlbp ground {program} --facts DIR -o {tmp_path / 't.json'}" in r.stderr
    assert not (tmp_path / "t.json").exists()
