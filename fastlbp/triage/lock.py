"""One process per session file: an advisory lock (`flock`) on `SESSION.lock` beside it.

Two processes appending to one journal lose each other's labels and write
journals neither would (an undo of the other's label), and a `--fresh` in one
replaced the file under the other. The holder takes an exclusive `flock` on
the sidecar file for as long as the session is open and writes who it is
(pid, host, since when) into it, so that a second process is refused with a
message naming the holder. The OS drops a process's flocks when it ends, also
after SIGKILL, so a lock file left behind by a killed holder blocks nobody.

The lock is a sidecar rather than the database itself: SQLite takes POSIX
(fcntl) locks on byte ranges of the database, which a process loses when it
closes any descriptor of that file, and which NFS maps flock onto.

    lock = SessionLock.acquire("race.json.triage.db")   # SessionInUse if held
    ...
    lock.release()
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from fastlbp.errors import InputError


class SessionInUse(InputError):
    """Another process (or another open `Triage` of this one) holds the session."""


def lock_path(session: str | os.PathLike) -> Path:
    """`SESSION.lock`, beside the session file."""
    p = Path(session)
    return p.with_name(p.name + ".lock")


def unwritable(path: str | os.PathLike, folder: Path, err: OSError) -> InputError:
    """The error for a session whose folder cannot be written (read-only, full, missing)."""
    why = err.strerror or str(err)
    hint = {errno.EACCES: " (is the folder read-only?)", errno.EPERM: " (is the folder read-only?)",
            errno.EROFS: " (a read-only file system)", errno.ENOSPC: " (the disk is full)"}
    return InputError(str(path), None, f"cannot write in {folder}: {why}{hint.get(err.errno, '')}; "
                                       f"choose another --session")


class SessionLock:
    """An exclusive flock on `SESSION.lock`, held until `release` (or the process ends)."""

    def __init__(self, session: Path, file):
        self.session = session
        self.path = lock_path(session)
        self._file = file  # its descriptor carries the flock; closing it (also by GC) releases it

    @classmethod
    def acquire(cls, session: str | os.PathLike) -> SessionLock:
        """Locks `session` for this process, without waiting.

        Raises:
            SessionInUse: another holder; the message names its pid, host and start.
            InputError: the folder does not exist or cannot be written.
        """
        session = Path(session)
        folder = session.parent
        if not folder.is_dir():
            raise InputError(str(session), None, f"the folder {folder} does not exist")
        path = lock_path(session)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as err:
                raise unwritable(session, folder, err) from None
            file = os.fdopen(fd, "r+", encoding="utf-8")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe(file)
                file.close()
                raise SessionInUse(str(session), None, f"the session is in use by {holder}; quit that "
                                                       f"`fastlbp triage` first (or choose another "
                                                       f"--session)") from None
            except OSError as err:
                file.close()
                raise unwritable(session, folder, err) from None
            # A holder that released deletes the file after we opened it: our flock is then on an
            # unlinked file another process could not see. Lock the file the path names now.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            file.close()
        lock = cls(session, file)
        try:
            file.seek(0)
            file.truncate()
            file.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                   "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
            file.flush()
        except OSError as err:
            lock.release()
            raise unwritable(session, folder, err) from None
        return lock

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        """Removes the lock file and drops the lock (idempotent)."""
        if self._file is None:
            return
        # Unlink while still holding the lock, so nobody locks a file about to vanish.
        try:
            if os.path.samestat(os.fstat(self._file.fileno()), os.stat(self.path)):
                self.path.unlink()
        except OSError:
            pass  # a lock file that cannot be removed is harmless: it blocks nobody once closed
        self._file.close()
        self._file = None


def _describe(file) -> str:
    """`process 123 on host h since 2025-01-01 12:00:00`, from the holder's lock file."""
    try:
        file.seek(0)
        info = json.loads(file.read(4096))
        pid, host, since = int(info["pid"]), str(info["host"]), str(info["since"])
    except (OSError, ValueError, KeyError, TypeError):
        # The holder is between truncating the file and writing itself into it.
        return "another process"
    return f"process {pid} on host {host} since {since}"
