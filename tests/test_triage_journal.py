"""The triage journal (`fastlbp.triage.journal`): refusals, the stored settings, the fingerprint,
and that a session file written in the format of earlier releases still resumes exactly."""

import contextlib
import json
import random
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from triage_support import FAST, FailingConnection, demo_model, made_session, tamper, truncate

from fastlbp.core.errors import InputError
from fastlbp.core.settings import Settings
from fastlbp.inference.session import Session
from fastlbp.triage import Journal, Triage, default_session_path, fingerprint, legacy_session_path
from fastlbp.triage.journal_format import JOURNAL_VERSION, PLAIN_VERSION


def test_journal_refuses_misuse(tmp_path):
    Triage.open(demo_model(), tmp_path / "s.db").close()
    with pytest.raises(InputError, match="--resume"):
        Triage.open(demo_model(), tmp_path / "s.db")
    Triage.open(demo_model(), tmp_path / "s.db", overwrite=True).close()
    with pytest.raises(InputError, match="another graph"):
        Triage.open(demo_model(seed=9), tmp_path / "s.db", resume=True)
    with pytest.raises(InputError, match="no triage session"):
        Triage.open(demo_model(), tmp_path / "none.db", resume=True)
    (tmp_path / "junk.db").write_text("not sqlite at all" * 100)
    with pytest.raises(InputError, match="not a triage session"):
        Journal.open(tmp_path / "junk.db")


def test_meta_holds_the_inference_settings(tmp_path):
    settings = Settings(max_iters=300, damping=0.5, compress=False)
    t = Triage.open(demo_model(), tmp_path / "s.db", graph_path=str(tmp_path / "g.json"), settings=settings)
    t.close()
    meta = Journal.open(tmp_path / "s.db").meta()
    assert json.loads(meta["settings"]) == settings.inference()
    assert set(json.loads(meta["settings"])) == {"schedule", "precision", "tol", "max_iters", "damping",
                                                 "backend", "method", "samples", "max_samples", "seed",
                                                 "min_accepted", "target_se", "sample_seconds"}
    # Version 4 only for a session with evidence or learning (`test_triage_evidence.py`): earlier
    # releases still read this one.
    assert meta["version"] == str(PLAIN_VERSION) and meta["fingerprint"] == fingerprint(demo_model())
    assert meta["graph"] == str((tmp_path / "g.json").resolve())


def test_corrupt_stored_settings_are_an_input_error(tmp_path):
    Triage.open(demo_model(), tmp_path / "s.db").close()
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'settings'", (json.dumps({"damping": 2.0}),))
    conn.commit()
    conn.close()
    with pytest.raises(InputError, match="stored settings"):
        Triage.open(demo_model(), tmp_path / "s.db", resume=True)


def test_appends_are_durable_and_ordered(tmp_path):
    j = Journal.create(tmp_path / "j.db", {"version": "1"})
    assert not (tmp_path / "j.db.tmp").exists()
    a = j.append("label", "race(1)", True)
    b = j.append("skip", "race(2)")
    j.append("undo")
    j.delete(b)
    j.close()
    j = Journal.open(tmp_path / "j.db")
    assert j.events() == [(a, "label", "race(1)", True), (a + 2, "undo", None, None)]
    assert j.meta() == {"version": "1"}
    j.close()


def test_fingerprint_and_default_path(tmp_path):
    assert fingerprint(demo_model()) == fingerprint(demo_model())
    assert fingerprint(demo_model()) != fingerprint(demo_model(seed=9))
    assert legacy_session_path("dir/race.json") == Path("dir/race.json.triage.db")
    assert legacy_session_path("bingo_dir/") == Path("bingo_dir.triage.db")
    # In the data folder: the graph's name and a hash of its content, so namesakes never collide.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "race.json").write_text("{1}")
    (tmp_path / "b" / "race.json").write_text("{2}")
    folder = tmp_path / "sessions"
    pa, pb = (default_session_path(tmp_path / d / "race.json", folder) for d in "ab")
    assert pa.parent == folder and pa.name.startswith("race.json-") and pa.name.endswith(".triage.db")
    assert pa != pb and len(pa.name) == len(pb.name) == len("race.json-") + 12 + len(".triage.db")
    (tmp_path / "b" / "race.json").write_text("{1}")
    assert default_session_path(tmp_path / "b" / "race.json", folder) == pa
    # A Bingo directory: its graph files (not its oracle) make the hash.
    bingo = tmp_path / "bingo"
    bingo.mkdir()
    (bingo / "named_cons_all.txt").write_text("R0: NOT a(1), b(1)\n")
    first = default_session_path(bingo, folder)
    assert first.name.startswith("bingo-")
    (bingo / "oracle_queries.txt").write_text("b(1)\n")
    assert default_session_path(bingo, folder) == first
    (bingo / "base_queries.txt").write_text("b(1)\n")
    assert default_session_path(str(bingo) + "/", folder) != first


def write_old_journal(path, model, settings: dict, events):
    """A session file exactly as releases before the backend was stored wrote it."""
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,"
        " alarm TEXT, truth INTEGER, at REAL NOT NULL);")
    meta = {"version": "1", "fingerprint": fingerprint(model), "graph": "g.json",
            "settings": json.dumps(settings), "created": "2025-01-01 00:00:00"}
    conn.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
    conn.executemany("INSERT INTO events (kind, alarm, truth, at) VALUES (?, ?, ?, ?)",
                     [(k, a, t, time.time()) for k, a, t in events])
    conn.commit()
    conn.close()


def test_a_session_file_of_earlier_releases_resumes(tmp_path):
    model = demo_model()
    names = [model.var_names[v] for v in model.alarms]
    old = {"schedule": "parall", "precision": "f64", "tol": 1e-6, "max_iters": 300, "damping": 0.0}
    write_old_journal(tmp_path / "old.db", model, old,
                      [("label", names[0], 1), ("skip", names[1], None), ("label", names[2], 0),
                       ("jump", names[3], None)])
    t = Triage.open(model, tmp_path / "old.db", resume=True, settings=Settings(backend="scatter"))
    assert t.settings == Settings(max_iters=300)  # the stored options; the backend is the default
    assert t.labels == {model.alarms[0]: True, model.alarms[2]: False}
    assert [v for _, v in t.skipped] == [model.alarms[1]] and t.current == model.alarms[3]
    # The same labels in a fresh session, each followed by a warm round, as the session ran them.
    s = Session(model, max_iters=300)
    s.run(warm=False)
    for v, truth in ((model.alarms[0], True), (model.alarms[2], False)):
        s.label(v, truth)
        s.run()
    assert t.marginals.tobytes() == s.last.marginals.tobytes()
    t.close()


# Damaged and tampered session files --------------------------------------------------------

DAMAGE = {
    # name: (how, words the message must hold, --fresh offered)
    "no events table": (lambda p: tamper(p, "DROP TABLE events"), "no events table", False),
    "no meta table": (lambda p: tamper(p, "DROP TABLE meta"), "no meta table", False),
    "events of other columns": (
        lambda p: tamper(p, "DROP TABLE events", "CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT)"),
        "events", True),
    "truth 'false'": (lambda p: tamper(p, "UPDATE events SET truth = 'false' WHERE seq = 2"),
                      "event 2", True),
    "truth 2": (lambda p: tamper(p, "UPDATE events SET truth = 2 WHERE seq = 2"), "event 2", True),
    "truth on a skip": (lambda p: tamper(p, "UPDATE events SET truth = 1 WHERE seq = 3"), "event 3", True),
    "label without alarm": (lambda p: tamper(p, "UPDATE events SET alarm = NULL WHERE seq = 2"),
                            "event 2", True),
    "alarm not in the graph": (lambda p: tamper(p, "UPDATE events SET alarm = 'nosuch(1)' WHERE seq = 2"),
                               "nosuch(1)", True),
    "unknown kind": (lambda p: tamper(p, "UPDATE events SET kind = 'erase' WHERE seq = 2"), "erase", True),
    "time not a number": (lambda p: tamper(p, "UPDATE events SET at = 'noon' WHERE seq = 2"), "event 2",
                          True),
    "version not a number": (lambda p: tamper(p, "UPDATE meta SET value = 'one' WHERE key = 'version'"),
                             "version", True),
    "no version": (lambda p: tamper(p, "DELETE FROM meta WHERE key = 'version'"), "version", True),
    "no fingerprint": (lambda p: tamper(p, "DELETE FROM meta WHERE key = 'fingerprint'"), "fingerprint",
                       True),
    "meta value a blob": (lambda p: tamper(p, "UPDATE meta SET value = X'00' WHERE key = 'graph'"), "graph",
                          True),
    "settings not JSON": (lambda p: tamper(p, "UPDATE meta SET value = '{oops' WHERE key = 'settings'"),
                          "stored settings", True),
    "truncated": (truncate, "", False),
    # Issue 41, item 2: what sqlite_master holds is checked whole, so nothing can change a write after it.
    "a trigger flipping truths": (
        lambda p: tamper(p, "CREATE TRIGGER flip AFTER INSERT ON events BEGIN "
                            "UPDATE events SET truth = 1 - truth WHERE seq = new.seq; END"),
        "trigger 'flip'", True),
    "a trigger erasing labels": (
        lambda p: tamper(p, "CREATE TRIGGER erase AFTER INSERT ON events BEGIN "
                            "DELETE FROM events WHERE seq < new.seq; END"), "trigger 'erase'", True),
    "a delete trigger": (
        lambda p: tamper(p, "CREATE TRIGGER gone BEFORE DELETE ON events BEGIN DELETE FROM events; END"),
        "trigger 'gone'", True),
    "a view": (lambda p: tamper(p, "CREATE VIEW v AS SELECT * FROM events"), "view 'v'", True),
    "an index": (lambda p: tamper(p, "CREATE INDEX i ON events (alarm)"), "index 'i'", True),
    "another table": (lambda p: tamper(p, "CREATE TABLE notes (x)"), "table 'notes'", True),
    "truth of another type": (
        lambda p: tamper(p, "ALTER TABLE events RENAME TO old",
                         "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
                         "alarm TEXT, truth TEXT, at REAL NOT NULL)",
                         "INSERT INTO events SELECT * FROM old", "DROP TABLE old"),
        "table 'events' whose definition is not a triage journal's", True),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_session_is_reported_and_left_untouched(tmp_path, case):
    how, words, fresh = DAMAGE[case]
    path = made_session(tmp_path)
    how(path)
    before = path.read_bytes()
    for _ in range(2):  # the lock is released after the error: the second try says the same
        with pytest.raises(InputError) as err:
            Triage.open(demo_model(), path, resume=True, settings=FAST)
        msg = str(err.value)
        assert msg.startswith(f"{path}: ") and words in msg, msg
        assert "--recover" in msg and ("--fresh" in msg) == fresh, msg
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]


def test_a_newer_journal_version_is_refused(tmp_path):
    path = made_session(tmp_path)
    tamper(path, "UPDATE meta SET value = '99' WHERE key = 'version'")
    for kw in ({"resume": True}, {"recover": True}):
        with pytest.raises(InputError, match=f"version 99.*reads versions up to {JOURNAL_VERSION}"):
            Triage.open(demo_model(), path, settings=FAST, **kw)


def test_a_file_that_is_not_a_session_is_never_replaced(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text('{"not": "a session"}')
    other = tmp_path / "other.db"
    tamper(other, "CREATE TABLE t (x)")
    folder = tmp_path / "folder"
    folder.mkdir()
    for path in (graph, other, folder):
        before = path.read_bytes() if path.is_file() else None
        for kw in ({}, {"overwrite": True}, {"recover": True}, {"resume": True}):
            with pytest.raises(InputError, match="not a triage session") as err:
                Triage.open(demo_model(), path, settings=FAST, **kw)
            assert str(err.value).startswith(f"{path}: ")
        assert (path.read_bytes() if path.is_file() else None) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "g.json", "other.db"]


def test_stored_truths_are_exactly_0_or_1(tmp_path):
    j = Journal.create(tmp_path / "j.db", {"version": "1"})
    j.append("label", "race(1)", False)
    j.close()
    tamper(tmp_path / "j.db", "UPDATE events SET truth = 'false'")
    j = Journal.open(tmp_path / "j.db")
    with pytest.raises(InputError, match="truth 'false'"):
        j.events()
    j.close()


@pytest.mark.parametrize("error", [sqlite3.OperationalError("disk I/O error"),
                                   OSError(28, "No space left on device")])
def test_a_session_that_cannot_be_written_is_an_error_before_the_first_label(tmp_path, monkeypatch, error):
    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: FailingConnection(real(*a, **kw), error))
    with pytest.raises(InputError, match=f"{tmp_path / 's.db'}: cannot write the session.*"
                                         f"(disk I/O error|No space left)"):
        Triage.open(demo_model(), tmp_path / "s.db", settings=FAST)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.undo()
    path = made_session(tmp_path)
    before = path.read_bytes()
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: FailingConnection(real(*a, **kw), error))
    for kw in ({"resume": True}, {"overwrite": True}):
        with pytest.raises(InputError, match="cannot write the session"):
            Triage.open(demo_model(), path, settings=FAST, **kw)
        assert path.read_bytes() == before


VALUES = [None, 0, 1, 2, -1, 1.5, float("nan"), "", "x", "false", "true", "label", "undo", "skip", "jump",
          b"\x00", "1", "2", "99", '{"schedule": "/dev/zero"}', "[1]", "race(1)"]


def test_random_tampering_is_an_error_or_resumes_and_always_recovers(tmp_path):
    base = made_session(tmp_path, "base.db")
    model = demo_model()
    rng = random.Random(0)
    outcomes = []
    for i in range(24):
        path = tmp_path / f"f{i}.db"
        shutil.copy(base, path)
        conn = sqlite3.connect(path)
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            with contextlib.suppress(sqlite3.Error):
                if r < 0.5:
                    col = rng.choice(["seq", "kind", "alarm", "truth", "at"])
                    conn.execute(f"UPDATE events SET {col} = ? WHERE seq = ?",
                                 (rng.choice(VALUES), rng.randint(1, 4)))
                elif r < 0.8:
                    key = rng.choice(["version", "fingerprint", "graph", "settings", "created", "order"])
                    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, rng.choice(VALUES)))
                else:
                    conn.execute("INSERT INTO events (kind, alarm, truth, at) VALUES (?, ?, ?, 1.0)",
                                 (rng.choice(["undo", "label", "skip", "jump"]),
                                  rng.choice([None, *model.var_names[:12]]), rng.choice([None, 0, 1])))
        conn.commit()
        conn.close()
        try:
            Triage.open(model, path, resume=True, settings=FAST).close()
            outcomes.append("resumed")
        except InputError as err:
            assert str(err).startswith(f"{path}: ")
            outcomes.append("refused")
        try:
            Triage.open(model, path, recover=True, settings=FAST).close()
        except InputError as err:  # only what no recovery can mend
            assert "newer fastlbp" in str(err) or "another graph" in str(err), err
    assert set(outcomes) == {"resumed", "refused"}


# What is stored is what was accepted (issue 41, item 2) ----------------------------------------------

@pytest.mark.parametrize("sql", [
    "CREATE TRIGGER flip AFTER INSERT ON events BEGIN UPDATE events SET truth = 1 - truth "
    "WHERE seq = new.seq; END",
    "CREATE TRIGGER erase AFTER INSERT ON events BEGIN DELETE FROM events WHERE seq < new.seq; END",
    "CREATE TRIGGER more AFTER DELETE ON events BEGIN DELETE FROM events; END",
])
def test_a_write_the_file_does_not_store_as_written_is_rolled_back_and_refused(tmp_path, sql):
    """A trigger made while the session is open (past the check on opening): each write reads back what
    it stored in the same transaction, and commits only if it is what was written."""
    j = Journal.create(tmp_path / "j.db", {"version": "1"})
    first = j.append("label", "race(1)", True)
    tamper(tmp_path / "j.db", sql)
    before = j.conn.execute("SELECT * FROM events").fetchall()
    with pytest.raises(InputError, match="did not store what was written"):
        if "DELETE ON" in sql:
            j.delete(first)
        else:
            j.append("label", "race(2)", True)
    assert j.conn.execute("SELECT * FROM events").fetchall() == before
    j.close()


def test_labels_are_refused_when_the_session_file_changes_them(tmp_path):
    path = tmp_path / "s.db"
    t = Triage.open(demo_model(), path, settings=FAST)
    assert t.label(True).accepted
    tamper(path, "CREATE TRIGGER flip AFTER INSERT ON events BEGIN "
                 "UPDATE events SET truth = 1 - truth WHERE seq = new.seq; END")
    out = t.label(True)
    assert not out.accepted and "did not store what was written" in out.message
    assert len(t.labels) == 1
    t.close()
    rows = sqlite3.connect(path).execute("SELECT kind, truth FROM events").fetchall()
    assert rows == [("label", 1)]
