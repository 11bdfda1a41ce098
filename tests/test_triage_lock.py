"""The session lock (`fastlbp.triage.lock`): one process per session file, the holder named,
released on close and (the OS drops the flocks of dead processes) after a kill."""

import os
import socket

import pytest

from fastlbp.errors import InputError
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
