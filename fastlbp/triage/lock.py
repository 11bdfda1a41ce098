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

The lock belongs to the file, not to the name it was given: the sidecar is
named after the session's resolved path (symbolic links followed, so
`link.db` and `real.db` share `real.db.lock`), and a session file that exists
is also locked by its device and inode, in a per-user folder of the
temporary directory (`inode_lock_folder`), so that two hard links of one
journal, in any folders, collide too. (Hard links opened from two hosts of a
network file system are not caught: inodes are per host there; the resolved
path is.)

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
import stat
import tempfile
import time
from pathlib import Path

from fastlbp.core.errors import InputError


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


def inode_lock_folder() -> Path:
    """Where the locks by device and inode live: `fastlbp-locks-UID` in the temporary directory."""
    return Path(tempfile.gettempdir()) / f"fastlbp-locks-{os.getuid()}"


def _inode_lock_path(session: Path) -> Path | None:
    """The lock by device and inode of `session` (a regular file, symbolic links followed); None when
    there is no such file yet or no private folder for it (the lock by resolved path still holds)."""
    try:
        st = os.stat(session)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    folder = inode_lock_folder()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        own = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(own.st_mode) or own.st_uid != os.getuid() or own.st_mode & 0o022:
        return None  # a folder somebody else made or can write: no locks in it
    return folder / f"{st.st_dev:x}-{st.st_ino}.lock"


class SessionLock:
    """An exclusive flock on `SESSION.lock` (and on the file's inode lock), held until `release`."""

    def __init__(self, session: Path, file, inode_path: Path | None = None, inode_file=None):
        self.session = session
        self.path = lock_path(Path(os.path.realpath(session)))
        self._file = file  # its descriptor carries the flock; closing it (also by GC) releases it
        self.inode_path = inode_path
        self._inode_file = inode_file

    @classmethod
    def acquire(cls, session: str | os.PathLike) -> SessionLock:
        """Locks `session` for this process, without waiting.

        Raises:
            SessionInUse: another holder, also through a symbolic or hard link; the message names its
                pid, host and start.
            InputError: the folder does not exist or cannot be written (also: a full disk).
        """
        session = Path(session)
        folder = session.parent
        if not folder.is_dir():
            raise InputError(str(session), None, f"the folder {folder} does not exist")
        real = Path(os.path.realpath(session))
        if not real.parent.is_dir():
            raise InputError(str(session), None, f"the folder {real.parent} does not exist")
        file = _lock(lock_path(real), session, folder)
        inode_path, inode_file = _inode_lock_path(real), None
        if inode_path is not None:
            try:
                inode_file = _lock(inode_path, session, folder, other_name=True)
            except SessionInUse:
                _release(lock_path(real), file)
                raise
            except InputError:
                inode_path = None  # an unwritable temporary folder: the lock by resolved path still holds
        lock = cls(session, file, inode_path, inode_file)
        try:
            _write_holder(file.fileno())
        except OSError as err:
            lock.release()
            raise unwritable(session, folder, err) from None
        if inode_file is not None:
            try:
                _write_holder(inode_file.fileno())
            except OSError:
                pass  # a full temporary folder: a second process is still refused, as "another process"
        return lock

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        """Removes the lock files and drops the lock (idempotent)."""
        if self._file is None:
            return
        if self._inode_file is not None:
            _release(self.inode_path, self._inode_file)
            self._inode_file = None
        _release(self.path, self._file)
        self._file = None


def _lock(path: Path, session: Path, folder: Path, other_name: bool = False):
    """The open lock file at `path`, flocked by this process.

    Raises:
        SessionInUse: another holder.
        InputError: the file cannot be made.
    """
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
            through = " (through another name of the same file)" if other_name else ""
            raise SessionInUse(str(session), None, f"the session is in use{through} by {holder}; quit "
                                                   f"that `fastlbp triage` first (or choose another "
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
            return file
        file.close()


def _write_holder(fd: int) -> None:
    """Writes who holds the lock (pid, host, since when) into its file, unbuffered: a write that
    fails (a full disk) fails here, never again when the file is closed."""
    os.ftruncate(fd, 0)
    data = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode()
    if os.pwrite(fd, data, 0) != len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _release(path: Path, file) -> None:
    # Unlink while still holding the lock, so nobody locks a file about to vanish.
    try:
        if os.path.samestat(os.fstat(file.fileno()), os.stat(path)):
            path.unlink()
    except OSError:
        pass  # a lock file that cannot be removed is harmless: it blocks nobody once closed
    try:
        file.close()
    except OSError:
        pass  # the descriptor is closed (and the flock dropped) even when a flush fails


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
