"""`lock_files_full`: every write to a `*.lock` file fails with ENOSPC, as on a full disk.

Both ways a lock file can be written fail: through a file object (`os.fdopen`) and through
`os.write`/`os.pwrite` on its descriptor. Other files are written as usual.
"""

from __future__ import annotations

import errno
import io
import os


def _is_lock(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(".lock")
    except OSError:
        return False


def _full(*_):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _FullFile(io.FileIO):
    def write(self, b):
        _full()


def lock_files_full(monkeypatch) -> None:
    real_fdopen, real_write, real_pwrite = os.fdopen, os.write, os.pwrite

    def fdopen(fd, mode="r", buffering=-1, encoding=None, *args, **kw):
        if not _is_lock(fd) or "b" in mode:
            return real_fdopen(fd, mode, buffering, encoding, *args, **kw)
        return io.TextIOWrapper(io.BufferedRandom(_FullFile(fd, "r+")), encoding=encoding or "utf-8")

    monkeypatch.setattr(os, "fdopen", fdopen)
    monkeypatch.setattr(os, "write", lambda fd, data: _full() if _is_lock(fd) else real_write(fd, data))
    monkeypatch.setattr(os, "pwrite",
                        lambda fd, data, at: _full() if _is_lock(fd) else real_pwrite(fd, data, at))
