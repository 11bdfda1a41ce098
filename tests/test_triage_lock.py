"""The session lock (`fastlbp.triage.lock`): one process per session file, the holder named,
released on close and (the OS drops the flocks of dead processes) after a kill."""

import os
import socket

import pytest

from fastlbp.core.errors import InputError
from fastlbp.triage.lock import SessionInUse, SessionLock, lock_path


def test_lock_is_exclusive_and_names_its_holder(tmp_path):
    s = tmp_path / "s.db"
    first = SessionLock.acquire(s)
    assert lock_path(s) == tmp_path / "s.db.lock" and lock_path(s).exists()
    # flock is per open file, so a second open in this process is refused like another process.
    with pytest.raises(SessionInUse) as err:
        SessionLock.acquire(s)
    msg = str(err.value)
    assert msg.startswith(f"{s}: ") and f"process {os.getpid()}" in msg
    assert socket.gethostname() in msg and "since 20" in msg
    first.release()
    first.release()  # idempotent
    assert not lock_path(s).exists()
    second = SessionLock.acquire(s)
    second.release()


def test_a_stale_lock_file_does_not_block(tmp_path):
    # What a killed holder leaves: the file, without a flock on it.
    s = tmp_path / "s.db"
    lock_path(s).write_text('{"pid": 1, "host": "gone", "since": "2020-01-01 00:00:00"}')
    lock = SessionLock.acquire(s)
    assert str(os.getpid()) in lock_path(s).read_text()
    lock.release()


def test_an_unreadable_holder_is_still_refused(tmp_path):
    s = tmp_path / "s.db"
    lock = SessionLock.acquire(s)
    with open(lock_path(s), "w") as f:  # a holder caught between truncating and writing
        f.write("garbage")
    with pytest.raises(SessionInUse, match="in use by another process"):
        SessionLock.acquire(s)
    lock.release()


def test_missing_and_read_only_folders_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="folder .* does not exist"):
        SessionLock.acquire(tmp_path / "nope" / "s.db")
    real_open = os.open

    def read_only(path, *args, **kw):
        if str(path).startswith(str(tmp_path)):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kw)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(InputError, match="cannot write in .*Permission denied"):
        SessionLock.acquire(tmp_path / "s.db")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_a_really_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(InputError, match="cannot write in"):
            SessionLock.acquire(ro / "s.db")
    finally:
        ro.chmod(0o755)


def test_a_symbolic_or_hard_link_shares_the_lock(tmp_path):
    # Issue 29 item 5: the lock was named after the path given, so a second process reaching the
    # journal through another name proceeded, and the labels of both were lost after a resume.
    s = tmp_path / "s.db"
    s.write_bytes(b"")
    (tmp_path / "link.db").symlink_to(s)
    (tmp_path / "other").mkdir()
    os.link(s, tmp_path / "other" / "hard.db")
    first = SessionLock.acquire(s)
    for name in (tmp_path / "link.db", tmp_path / "other" / "hard.db"):
        with pytest.raises(SessionInUse, match=f"in use.* by process {os.getpid()}") as err:
            SessionLock.acquire(name)
        assert str(err.value).startswith(f"{name}: ")
    first.release()
    assert not lock_path(s).exists()
    hard = SessionLock.acquire(tmp_path / "other" / "hard.db")  # the hard link first: s.db is refused
    with pytest.raises(SessionInUse, match="through another name of the same file"):
        SessionLock.acquire(s)
    hard.release()
    assert not list(tmp_path.rglob("*.lock"))
    SessionLock.acquire(s).release()


def test_a_symbolic_link_to_a_session_not_made_yet_shares_the_lock(tmp_path):
    (tmp_path / "link.db").symlink_to(tmp_path / "new.db")
    lock = SessionLock.acquire(tmp_path / "new.db")
    with pytest.raises(SessionInUse):
        SessionLock.acquire(tmp_path / "link.db")
    lock.release()


def test_a_full_disk_at_the_lock_is_a_clean_error(tmp_path, monkeypatch):
    from disk_full import lock_files_full

    lock_files_full(monkeypatch)
    with pytest.raises(InputError, match="cannot write in .*No space left on device.*the disk is full"):
        SessionLock.acquire(tmp_path / "s.db")
    assert not lock_path(tmp_path / "s.db").exists()
