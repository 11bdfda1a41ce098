"""A session's labels outside triage (`fastlbp.triage.labels`, `fastlbp triage --export`,
`fastlbp rank --labels SESSION`) and where sessions live (`fastlbp.triage.paths`, the data folder)."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from triage_support import FAST, data_home, default_session, demo_model, made_session, tamper, write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.cli.environment import data_folder
from fastlbp.core.errors import InputError
from fastlbp.io.loading import load, read_labels
from fastlbp.triage import Triage, legacy_session_path, session_labels, write_labels
from fastlbp.triage.labels import format_labels, is_session_file, read_labels_or_session


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    data_home(tmp_path, monkeypatch)


def invoke(*args, input=None):
    return CliRunner().invoke(get_app(), [*map(str, args)], input=input)


# Reading a session's labels -------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(st.lists(st.sampled_from("tfsu"), min_size=1, max_size=14))
def test_session_labels_equal_the_labels_of_a_resumed_session(tmp_path_factory, keys):
    # The reference: the session itself, which replays its journal through the model.
    path = tmp_path_factory.mktemp("s") / "s.db"
    t = Triage.open(demo_model(), path, settings=FAST)
    for k in keys:
        {"t": lambda: t.label(True), "f": lambda: t.label(False), "s": t.skip, "u": t.undo}[k]()
    expected = [(t.model.var_names[v], t.labels[v]) for _, v in t.order]
    t.close()
    assert session_labels(path) == expected


def test_session_labels_skip_settings_and_jumps(tmp_path):
    t = Triage.open(demo_model(), tmp_path / "s.db", settings=FAST)
    names = t.model.var_names
    assert t.jump(names[t.alarms[3]]).accepted and t.label(False).accepted
    assert t.change_settings({"damping": 0.1}).accepted and t.label(True).accepted
    expected = [(names[v], t.labels[v]) for _, v in t.order]
    t.close()
    assert session_labels(tmp_path / "s.db") == expected and expected[0] == (names[t.alarms[3]], False)


def test_damaged_and_foreign_files_are_clean_errors(tmp_path):
    path = made_session(tmp_path)
    tamper(path, "UPDATE events SET truth = 7 WHERE seq = 2")
    with pytest.raises(InputError, match="event 2"):
        session_labels(path)
    with pytest.raises(InputError, match="no such file"):
        session_labels(tmp_path / "none.db")
    (tmp_path / "empty.db").write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        session_labels(tmp_path / "empty.db")
    (tmp_path / "text.db").write_text("race(1) true\n")
    with pytest.raises(InputError, match="not a triage session"):
        session_labels(tmp_path / "text.db")


def test_a_session_is_told_by_its_bytes_not_its_name(tmp_path):
    model = demo_model()
    path = made_session(tmp_path, name="labels.txt")
    assert is_session_file(path) and not is_session_file(tmp_path) and not is_session_file(tmp_path / "x")
    expected = {model.index[n]: x for n, x in session_labels(path)}
    assert read_labels_or_session(path, model) == (model, expected) and len(expected) == 3
    text = tmp_path / "s.db"
    text.write_text(f"{model.var_names[model.alarms[0]]} true\n")
    assert read_labels_or_session(text, model) == (model, {int(model.alarms[0]): True})
    # A session of another graph: its names are not variables here.
    with pytest.raises(InputError, match="not a variable of this graph"):
        read_labels_or_session(path, demo_model(num_inputs=3, width=4, seed=5))


# Writing labels files --------------------------------------------------------------------------

def test_written_labels_read_back_and_only_exports_are_replaced(tmp_path):
    model = demo_model()
    pairs = [(model.var_names[model.alarms[i]], i % 2 == 0) for i in range(4)]
    out = write_labels(tmp_path / "l.txt", pairs, source="test")
    assert read_labels(out, model) == {model.index[n]: x for n, x in pairs}
    write_labels(out, pairs[:1], source="test")  # an export is replaced
    assert read_labels(out, model) == {model.index[pairs[0][0]]: pairs[0][1]}
    other = tmp_path / "notes.txt"
    other.write_text("mine\n")
    with pytest.raises(InputError, match="never replaced"):
        write_labels(other, pairs, source="test")
    assert other.read_text() == "mine\n"
    with pytest.raises(InputError, match="is a folder"):
        write_labels(tmp_path, pairs, source="test")
    with pytest.raises(InputError, match="cannot be written"):
        write_labels(tmp_path / "no" / "l.txt", pairs, source="test")


@pytest.mark.parametrize("name", ["a\nb", " race(1)", "race(1) ", "#race", ""])
def test_names_a_line_cannot_carry_are_refused(name):
    with pytest.raises(InputError, match="cannot be written as a line"):
        format_labels([(name, True)], "test")


# The command line: --export and rank --labels SESSION ------------------------------------------

def test_export_and_rank_with_the_session_as_labels(tmp_path):
    graph, _ = write_demo(tmp_path)
    assert invoke("triage", graph, "--max-iters", "300", input="t\nf\nt\nq\n").exit_code == 0
    session = default_session(tmp_path, graph)
    out = tmp_path / "labels.txt"
    res = invoke("triage", graph, "--export", out)
    assert res.exit_code == 0, res.output
    assert f"wrote 3 label(s) (2 true, 1 false) from {session} to {out}" in res.stderr
    res = invoke("triage", graph, "--export", "-")
    assert res.exit_code == 0 and res.stdout.splitlines()[1:] == out.read_text().splitlines()[1:]
    by_file = invoke("rank", graph, "--labels", out, "-f", "json", "--max-iters", "300")
    by_session = invoke("rank", graph, "--labels", session, "-f", "json", "--max-iters", "300")
    assert by_file.exit_code == 0 and by_session.exit_code == 0, by_session.output
    a, b = json.loads(by_file.stdout), json.loads(by_session.stdout)
    assert a["alarms"] == b["alarms"] and a["labelled"] == b["labelled"] and len(a["labelled"]) == 3
    # The graph is never overwritten; --export needs a session; --fresh excludes it.
    before = graph.read_bytes()
    res = invoke("triage", graph, "--export", graph)
    assert res.exit_code == 2 and "never replaced" in res.stderr and graph.read_bytes() == before
    other, _ = write_demo(tmp_path, name="h")
    res = invoke("triage", other, "--export", out)
    assert res.exit_code == 2 and "no triage session here" in res.stderr
    assert invoke("triage", graph, "--export", out, "--fresh").exit_code == 2


def test_rank_reports_a_damaged_session_cleanly(tmp_path):
    graph, _ = write_demo(tmp_path)
    assert invoke("triage", graph, "--max-iters", "300", input="t\nq\n").exit_code == 0
    session = default_session(tmp_path, graph)
    tamper(session, "DELETE FROM meta WHERE key = 'version'")
    res = invoke("rank", graph, "--labels", session)
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {session}: the session is damaged")
    assert "Traceback" not in res.output


# Where sessions live -----------------------------------------------------------------------------

def test_sessions_go_to_the_data_folder_named_after_the_graph(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    ga, _ = write_demo(a)
    gb, _ = write_demo(b, seed=4)  # the same name, another graph
    for g in (ga, gb):
        assert invoke("triage", g, "--max-iters", "300", input="t\nq\n").exit_code == 0
    folder = tmp_path / "data" / "fastlbp" / "sessions"
    made = sorted(p.name for p in folder.glob("*.triage.db"))
    assert len(made) == 2 and all(n.startswith("g.json-") for n in made)
    assert not list(a.glob("*.db")) and not list(b.glob("*.db"))  # nothing beside the graphs
    assert (tmp_path / "data" / "fastlbp" / "triage_history").exists() is False  # no terminal here
    # Another content under the same name: --resume names the sessions there are.
    ga.write_text(gb.read_text())
    gb.write_text("{}")
    res = invoke("triage", gb, "--resume")
    assert res.exit_code == 2 and "sessions of graphs named g.json with other content" in res.stderr


def test_an_old_session_beside_the_graph_is_still_used(tmp_path):
    graph, _ = write_demo(tmp_path)
    old = legacy_session_path(graph)
    assert invoke("triage", graph, "--session", old, "--max-iters", "300", input="t\nq\n").exit_code == 0
    res = invoke("triage", graph, "--resume", input="stats\nq\n")
    assert res.exit_code == 0, res.output
    assert f"note: using the session beside the graph, {old}" in res.stderr and "mv " in res.stderr
    assert "resumed 1 label(s)" in res.stderr and "labelled 1 (1 true" in res.stdout
    assert not default_session(tmp_path, graph).exists()
    # Moved as the note says, it is found in the data folder.
    new = default_session(tmp_path, graph)
    new.parent.mkdir(parents=True, exist_ok=True)
    old.rename(new)
    res = invoke("triage", graph, "--resume", input="q\n")
    assert res.exit_code == 0 and "beside the graph" not in res.stderr and str(new) in res.stderr


def test_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "x"))
    assert data_folder() == tmp_path / "x" / "fastlbp"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for value in ("", "relative/dir"):  # the XDG specification: ignore relative paths
        monkeypatch.setenv("XDG_DATA_HOME", value)
        assert data_folder() == tmp_path / "home" / ".local" / "share" / "fastlbp"
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocked))
    graph, _ = write_demo(tmp_path)
    res = invoke("triage", graph)
    assert res.exit_code == 2 and "cannot make the sessions folder" in res.stderr
    assert "--session" in res.stderr


def test_load_of_the_graph_matches_the_sessions_hash(tmp_path):
    graph, _ = write_demo(tmp_path)
    assert invoke("triage", graph, "--max-iters", "300", input="t\nq\n").exit_code == 0
    t = Triage.open(load(graph), default_session(tmp_path, graph), resume=True)
    assert len(t.labels) == 1
    t.close()


def test_a_programs_session_is_named_after_its_facts_too(tmp_path):
    import shutil

    taint = Path(__file__).resolve().parents[1] / "data" / "taint"
    shutil.copytree(taint, tmp_path / "taint")
    program, facts = tmp_path / "taint" / "taint.dl", tmp_path / "taint" / "facts"
    opts = ["--facts", facts, "--rule-prob", tmp_path / "taint" / "rule_prob.txt", "--max-iters", "300"]
    assert invoke("triage", program, *opts, input="t\nq\n").exit_code == 0
    folder = tmp_path / "data" / "fastlbp" / "sessions"
    first = sorted(folder.glob("taint.dl-*.triage.db"))
    assert len(first) == 1
    res = invoke("triage", program, *opts, "--resume", input="stats\nq\n")
    assert res.exit_code == 0 and "labelled 1 (1 true" in res.stdout, res.output
    res = invoke("triage", program, *opts, "--resume", "--alarms", "leak")  # other alarms: another graph
    assert res.exit_code == 2 and "no triage session here" in res.stderr
    some = sorted(facts.glob("*.facts"))[0]
    some.write_text(some.read_text() + some.read_text().splitlines()[0] + "\n")  # a fact repeated
    res = invoke("triage", program, *opts, "--resume")
    assert res.exit_code == 2 and "sessions of graphs named taint.dl with other content" in res.stderr
    assert sorted(folder.glob("taint.dl-*.triage.db")) == first
