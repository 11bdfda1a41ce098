"""Settings given on a resume (`Triage.change_settings`, `fastlbp triage --resume --schedule ...`): applied
and journaled, replayed exactly, refused with a message when they cannot run, never silently ignored;
the cycle mode a session's graph was read with is stored and used again."""

import json
import sqlite3

import jax
import numpy as np
import pytest
from triage_support import FAST, FailingConnection, data_home, default_session, demo_model, tamper, write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.errors import InputError
from fastlbp.core.settings import Settings
from fastlbp.inference.session import Session
from fastlbp.io.loading import load
from fastlbp.triage import Journal, Triage
from fastlbp.triage.journal_reading import read_file


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    data_home(tmp_path, monkeypatch)


def state(t):
    return ({t.model.var_names[v]: x for v, x in t.labels.items()}, t.settings, t.marginals.tobytes(),
            t.ranking.tolist())


def settings_events(path):
    """The settings of the "settings" events, read without the lock (the session may be open)."""
    return [json.loads(a)["settings"] for _, kind, a, *_ in read_file(path).rows if kind == "settings"]


def test_a_change_is_applied_journaled_and_replayed_exactly(tmp_path):
    path = tmp_path / "s.db"
    lbp = FAST.replace(method="lbp")  # LBP's rounds: warm, so replaying them exactly is the point
    t = Triage.open(demo_model(), path, settings=lbp)
    assert t.label(True).accepted
    out = t.change_settings({"schedule": "seqfix", "damping": 0.2})
    assert out.accepted and out.round is not None
    assert out.message == "settings changed: schedule parall -> seqfix, damping 0.0 -> 0.2"
    assert t.settings == lbp.replace(schedule="seqfix", damping=0.2)
    assert t.label(False).accepted
    out = t.change_settings({"tol": 1e-3})  # a control: the same runner, a warm round
    assert out.accepted and out.message == "settings changed: tol 1e-06 -> 0.001"
    assert t.skip().accepted and t.label(True).accepted
    before = state(t)
    t.close()
    assert [e["schedule"] for e in settings_events(path)] == ["seqfix", "seqfix"]
    assert Journal.open(path).meta()["version"] == "3"
    r = Triage.open(demo_model(), path, resume=True, settings=Settings(schedule="topo"))
    assert state(r) == before and r.replay_notes == []
    r.close()


def test_the_rounds_after_a_change_are_those_of_the_new_settings(tmp_path):
    model = demo_model()
    # LBP: a schedule changes its numbers (auto answers the demo graph exactly, whatever the schedule).
    t = Triage.open(model, tmp_path / "s.db", settings=FAST.replace(method="lbp"))
    assert t.label(True).accepted
    labels = dict(t.labels)
    assert t.change_settings({"schedule": "seqfix"}).accepted
    # The reference: a new Session with the new settings and the same labels, cold.
    s = Session(model, FAST.replace(method="lbp", schedule="seqfix"))
    s.labels = labels
    s.run(warm=False)
    assert np.array_equal(t.marginals, s.last.marginals)
    t.close()


def test_no_change_writes_nothing(tmp_path):
    t = Triage.open(demo_model(), tmp_path / "s.db", settings=FAST)
    out = t.change_settings({"schedule": "parall", "max_iters": 300})
    assert out.accepted and out.message == "no change" and out.round is None
    assert t.journal.events() == []
    t.close()


@pytest.mark.parametrize("changes, words", [
    pytest.param({"backend": "fused"}, [f"refused the settings change (backend {FAST.backend} -> fused)",
                                        "needs a GPU", "the session is unchanged (schedule parall"],
                 marks=pytest.mark.skipif(jax.default_backend() == "gpu", reason="fused runs on a GPU")),
    ({"schedule": "BAD_ORDER"}, ["refused the settings change (the custom order replaced, schedule parall -> "
                                 "custom-order)", "bad.order:2: edge 999999 is out of range"]),
    ({"schedule": "no-such-order-file"}, ["the settings cannot be changed", "no-such-order-file"]),
    ({"damping": 1.5}, ["the settings cannot be changed", "damping"]),
])
def test_settings_that_cannot_run_are_refused_and_nothing_changes(tmp_path, changes, words):
    if changes.get("schedule") == "BAD_ORDER":
        (tmp_path / "bad.order").write_text("order total\n#999999\n")
        changes = {"schedule": str(tmp_path / "bad.order")}
    # LBP's runner is what refuses a backend or an order (auto answers the demo graph exactly).
    t = Triage.open(demo_model(), tmp_path / "s.db", settings=FAST.replace(method="lbp"))
    assert t.label(True).accepted
    before = state(t)
    out = t.change_settings(changes)
    assert not out.accepted
    for w in words:
        assert w in out.message, out.message
    assert state(t) == before and settings_events(tmp_path / "s.db") == []
    assert t.label(False).accepted  # the session goes on
    t.close()


def test_a_change_that_cannot_be_saved_is_not_applied(tmp_path):
    t = Triage.open(demo_model(), tmp_path / "s.db", settings=FAST)
    before = state(t)
    t.journal.conn = FailingConnection(t.journal.conn)
    out = t.change_settings({"schedule": "seqfix"})
    assert not out.accepted and "not saved" in out.message and state(t) == before
    t.journal.conn = t.journal.conn._conn
    t.close()


def test_a_custom_order_given_on_resume_is_stored_as_text(tmp_path):
    model = demo_model()
    order = tmp_path / "my.order"
    order.write_text("order total\n" + "".join(f"#{e}\n" for e in reversed(range(model.graph.num_edges))))
    t = Triage.open(model, tmp_path / "s.db", settings=FAST)
    assert t.label(True).accepted
    out = t.change_settings({"schedule": f"{order}:chunked"})
    assert out.accepted and "schedule parall -> custom-order:chunked" in out.message
    assert "the custom order replaced" in out.message
    before = state(t)
    t.close()
    order.write_text("not an order\n")  # the stored text is used, never the file
    r = Triage.open(model, tmp_path / "s.db", resume=True)
    assert state(r) == before
    r.close()


def test_a_damaged_settings_event_is_reported_and_recovered_before_it(tmp_path):
    path = tmp_path / "s.db"
    t = Triage.open(demo_model(), path, settings=FAST)
    assert t.label(True).accepted and t.change_settings({"schedule": "seqfix"}).accepted
    assert t.label(False).accepted
    t.close()
    tamper(path, "UPDATE events SET alarm = '{\"settings\": {\"schedule\": \"/etc/passwd\"}}' "
                 "WHERE kind = 'settings'")
    with pytest.raises(InputError, match=r"event 2 \(settings\): the settings are not valid"):
        Triage.open(demo_model(), path, resume=True)
    r = Triage.open(demo_model(), path, recover=True, settings=FAST)
    assert len(r.labels) == 1 and r.settings == FAST
    assert "recovered 1 of 3 events" in r.replay_notes[0]
    r.close()


# Through the command line --------------------------------------------------------------------

def triage(*args, input="q\n"):
    return CliRunner().invoke(get_app(), ["triage", *map(str, args)], input=input)


def test_resume_with_other_settings_applies_them_or_refuses(tmp_path):
    graph, _ = write_demo(tmp_path)
    session = default_session(tmp_path, graph)
    # LBP (stored in the session, kept on resume): its runner is what refuses the fused backend below.
    assert triage(graph, "--method", "lbp", "--max-iters", "300", input="t\nq\n").exit_code == 0
    res = triage(graph, "--resume", "--schedule", "seqfix", "--precision", "f32")
    assert res.exit_code == 0, res.output
    assert "settings changed: schedule parall -> seqfix, precision f64 -> f32; saved in the session (round " \
           in res.stderr
    res = triage(graph, "--resume", "--schedule", "seqfix")  # as it is now: said, nothing written
    assert res.exit_code == 0 and "note: the session runs with --schedule as given already" in res.stderr
    assert [(e["schedule"], e["precision"]) for e in settings_events(session)] == [("seqfix", "f32")]
    before = session.read_bytes()
    gpu = jax.default_backend() == "gpu"
    if not gpu:  # the plan refuses GPU kernels on a CPU before the graph loads and the session opens
        res = triage(graph, "--resume", "--backend", "fused")
        assert res.exit_code == 2 and "error: backend 'fused' needs a GPU" in res.stderr
        assert "Traceback" not in res.output
    # A bad schedule: refused before loading as well; nothing is written.
    res = triage(graph, "--resume", "--schedule", "seqfix:bogus")
    assert res.exit_code == 2 and "unknown schedule option" in res.stderr and "Traceback" not in res.output
    assert session.read_bytes() == before
    t = Triage.open(load(graph), session, resume=True)
    assert t.settings.schedule == "seqfix" and t.settings.precision == "f32" and len(t.labels) == 1
    if not gpu:  # through the library, the session refuses the change and stays as it is
        out = t.change_settings({"backend": "fused"})
        assert not out.accepted and "refused the settings change" in out.message
        assert "needs a GPU" in out.message
        assert t.settings.backend == "auto"
    t.close()
    assert session.read_bytes() == before


def test_the_cycle_mode_is_stored_and_a_resume_reads_the_graph_with_it(tmp_path):
    graph, _ = write_demo(tmp_path)
    session = default_session(tmp_path, graph)
    res = triage(graph, "--cycles", "bingo", "--max-iters", "300", input="t\nq\n")
    assert res.exit_code == 0, res.output
    res = triage(graph, "--resume", input="stats\nq\n")  # read with --cycles bingo again
    assert res.exit_code == 0, res.output
    assert "labelled 1 (1 true" in res.stdout
    res = triage(graph, "--resume", "--cycles", "cycles")
    assert res.exit_code == 2 and "made with --cycles bingo" in res.stderr and "--fresh" in res.stderr
    res = triage(graph, "--resume", "--cycles", "bingo")
    assert res.exit_code == 0, res.output
    meta = Journal.open(session).meta()
    assert json.loads(meta["loading"]) == {"cycles": "bingo", "compress": True}


def test_damaged_loading_options_are_damage(tmp_path):
    path = tmp_path / "s.db"
    Triage.open(demo_model(), path, settings=FAST).close()
    tamper(path, "UPDATE meta SET value = '{\"cycles\": \"nope\", \"compress\": 1}' WHERE key = 'loading'")
    with pytest.raises(InputError, match="loading options are not valid"):
        Triage.open(demo_model(), path, resume=True)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM events").fetchone() == (0,)
    conn.close()
