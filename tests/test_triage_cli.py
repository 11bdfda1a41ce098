"""`fastlbp triage` (`fastlbp.cli.triage`) on session files that cannot be used as they are:
missing or unwritable folders, full disks, damaged sessions (--recover, --fresh), files that
are not sessions. Each is `error: FILE: problem` and exit status 2, never a traceback."""

import os
import sqlite3

import pytest
from triage_support import FailingConnection, data_home, default_session, made_session, tamper, write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    data_home(tmp_path, monkeypatch)


def triage(*args, input="q\n"):
    return CliRunner().invoke(get_app(), ["triage", *map(str, args), "--max-iters", "300"], input=input)


def assert_clean_error(res, path, *words):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert res.stderr.startswith(f"error: {path}: "), res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


def test_a_session_in_a_missing_folder(tmp_path):
    graph, _ = write_demo(tmp_path)
    session = tmp_path / "nope" / "s.db"
    assert_clean_error(triage(graph, "--session", session), session, "does not exist")
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("error", [sqlite3.OperationalError("disk I/O error"),
                                   OSError(28, "No space left on device")])
def test_a_full_disk_before_the_first_label(tmp_path, monkeypatch, error):
    graph, _ = write_demo(tmp_path)
    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: FailingConnection(real(*a, **kw), error))
    session = default_session(tmp_path, graph)
    assert_clean_error(triage(graph, input="t\nq\n"), session, "cannot write the session")
    assert not session.exists()


class FailingEvents(FailingConnection):
    """Creating and opening the session works; then the disk fills: appending events fails."""

    def execute(self, sql, *args):
        if sql.lstrip().upper().startswith("INSERT INTO EVENTS"):
            raise self.error
        return self._conn.execute(sql, *args)

    def executemany(self, sql, *args):
        return self._conn.executemany(sql, *args)

    def executescript(self, sql):
        return self._conn.executescript(sql)


def test_a_full_disk_mid_session(tmp_path, monkeypatch):
    graph, _ = write_demo(tmp_path)
    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: FailingEvents(real(*a, **kw)))
    res = triage(graph, input="t\nf\nstats\nq\n")
    assert res.exit_code == 0, res.output
    assert "accepted:" not in res.stdout and res.stdout.count("! ") == 2, res.stdout
    assert "not saved" in res.stdout and "disk I/O error" in res.stdout
    assert "labelled 0 (0 true, 0 false)" in res.stdout
    monkeypatch.undo()
    data_home(tmp_path, monkeypatch)
    res = triage(graph, "--resume", input="t\nq\n")
    assert res.exit_code == 0, res.output
    assert "resumed 0 label(s)" in res.stderr and "accepted:" in res.stdout


def test_a_damaged_session_is_reported_then_recovered(tmp_path):
    graph, _ = write_demo(tmp_path)
    session = default_session(tmp_path, graph)
    assert triage(graph, input="t\nf\nt\nq\n").exit_code == 0
    tamper(session, "UPDATE events SET truth = 'false' WHERE seq = 3")
    before = session.read_bytes()
    res = triage(graph, "--resume")
    assert_clean_error(res, session, "event 3", "--recover", "--fresh")
    assert session.read_bytes() == before
    res = triage(graph, "--recover", input="stats\nq\n")
    assert res.exit_code == 0, res.output
    assert "recovered 2 of 3 events" in res.stderr and "labelled 2 (1 true, 1 false)" in res.stdout
    assert session.with_name(session.name + ".damaged").read_bytes() == before
    res = triage(graph, "--fresh", input="stats\nq\n")
    assert res.exit_code == 0 and "labelled 0" in res.stdout


def test_fresh_never_replaces_the_graph(tmp_path):
    graph, _ = write_demo(tmp_path)
    before = graph.read_bytes()
    for flags in ((), ("--fresh",), ("--recover",), ("--resume",)):
        res = triage(graph, "--session", graph, *flags)
        assert_clean_error(res, graph, "not a triage session")
    assert graph.read_bytes() == before


def test_a_newer_session_is_refused(tmp_path):
    graph, _ = write_demo(tmp_path)
    session = made_session(tmp_path)
    tamper(session, "UPDATE meta SET value = '7' WHERE key = 'version'")
    assert_clean_error(triage(graph, "--session", session, "--resume"), session, "version 7", "upgrade")


def test_resume_fresh_and_recover_exclude_each_other(tmp_path):
    graph, _ = write_demo(tmp_path)
    for pair in (("--resume", "--fresh"), ("--resume", "--recover"), ("--fresh", "--recover")):
        res = triage(graph, *pair)
        assert res.exit_code == 2 and "exclude each other" in res.output


def test_a_full_disk_at_the_session_lock(tmp_path, monkeypatch):
    # Issue 29 item 11 (triage): SessionLock.acquire ended in a traceback (the failed flush of the holder's
    # line was raised again by closing the lock file).
    from disk_full import lock_files_full

    graph, _ = write_demo(tmp_path)
    session = tmp_path / "s.db"
    lock_files_full(monkeypatch)
    assert_clean_error(triage(graph, "--session", session, input="t\nq\n"), session, "cannot write in ",
                       "No space left on device (the disk is full)")
    assert not session.exists()


@pytest.mark.parametrize("how", ["symlink", "hard link"])
def test_a_session_held_through_another_name_is_refused(tmp_path, how):
    # Issue 29 item 5: two `triage` processes on one journal through a link both proceeded.
    from fastlbp.triage.lock import SessionLock

    graph, _ = write_demo(tmp_path)
    session = tmp_path / "s.db"
    res = triage(graph, "--session", session, input="t\nq\n")
    assert res.exit_code == 0, res.output
    (tmp_path / "other").mkdir()
    other = tmp_path / "other" / "s.db"
    other.symlink_to(session) if how == "symlink" else os.link(session, other)
    before = session.read_bytes()
    holder = SessionLock.acquire(session)
    try:
        for flags in (("--resume",), ("--fresh",)):
            assert_clean_error(triage(graph, "--session", other, *flags, input="t\nq\n"), other, "in use")
    finally:
        holder.release()
    assert session.read_bytes() == before
    res = triage(graph, "--session", other, "--resume", input="stats\nq\n")
    assert res.exit_code == 0, res.output


def test_fresh_through_a_symlink_keeps_the_link(tmp_path):
    # Replacing the link itself left two sessions: the new one at the link, the old one at its target,
    # which a later --resume through the target's name continued without the new labels.
    graph, _ = write_demo(tmp_path)
    session, link = tmp_path / "s.db", tmp_path / "link.db"
    assert triage(graph, "--session", session, input="t\nq\n").exit_code == 0
    link.symlink_to(session)
    res = triage(graph, "--session", link, "--fresh", input="t\nf\nq\n")
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and link.resolve() == session.resolve()
    res = triage(graph, "--session", session, "--resume", input="stats\nq\n")
    assert res.exit_code == 0, res.output
    assert "labelled 2 (1 true, 1 false)" in res.stdout


def test_a_session_with_a_trigger_is_refused(tmp_path):
    """Issue 41, item 2: the trigger made triage say "accepted ... = true" while false was stored."""
    graph, _ = write_demo(tmp_path)
    session = made_session(tmp_path)
    tamper(session, "CREATE TRIGGER flip AFTER INSERT ON events BEGIN "
                    "UPDATE events SET truth = 1 - truth WHERE seq = new.seq; END")
    before = session.read_bytes()
    assert_clean_error(triage(graph, "--session", session, "--resume", input="t\nq\n"), session,
                       "trigger 'flip'", "--recover")
    assert session.read_bytes() == before


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_graph_that_never_ends_names_no_session():
    """Issue 41's campaign: `triage /dev/zero` hashed the device forever to name its default session."""
    res = triage("/dev/zero")
    assert_clean_error(res, "/dev/zero", "not a regular file")
