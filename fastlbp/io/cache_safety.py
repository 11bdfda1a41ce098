"""Whether a cache folder may be trusted, and the model cache's secret key (no numpy: the CLI checks early).

A cache is never a way to change answers. A folder that another user owns, or
that group or others may write (as ssh refuses such a folder for its keys), is
not used at all, neither read nor written: one line on stderr says why and that
the run goes on without the cache. The same holds for the folder's `models/`
(which must not be a symbolic link) and for the model cache's secret key
`models/key`: 32 random bytes, made on first use with mode 0600, never
readable by group or others. `fastlbp.io.model_cache` signs every entry with it
(HMAC-SHA256), so an entry written by someone without the key is a miss.

    fd = open_models(cache_dir, create=True)    # the checked models/ folder, or None
    key = secret(fd, create=True)               # None: no key yet (create=False)

Both raise `Unsafe` (with the reason) for a folder or key that must not be
trusted; an OSError (a folder that cannot be made or opened) is None: no cache
for that call, silently. Platforms that cannot open files relative to a folder
or tell who owns one (Windows) have no model cache.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

KEY_NAME = "key"
KEY_BYTES = 32
MODELS = "models"

# Open without following a final symbolic link, without blocking on a FIFO, not inherited.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
READ_FLAGS = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC

_warned: set[str] = set()


class Unsafe(Exception):
    """A cache folder (or key) that must not be used; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def supported() -> bool:
    """Whether this platform can check and use a cache folder safely (owners, *at() calls)."""
    return (hasattr(os, "geteuid") and bool(_NOFOLLOW and _DIRECTORY)
            and {os.open, os.mkdir, os.rename, os.unlink, os.stat} <= os.supports_dir_fd
            and os.scandir in os.supports_fd and os.utime in os.supports_fd)


def owner_problem(info: os.stat_result, what: str, *, group_read: bool = False) -> str | None:
    """Why a file or folder with `info` must not be trusted: another owner, or writable by others."""
    if info.st_uid != os.geteuid():
        return f"{what} is owned by another user (uid {info.st_uid}, not {os.geteuid()})"
    if info.st_mode & 0o022:
        return f"{what} is writable by group or others (chmod go-w {what})"
    if group_read and info.st_mode & 0o077:
        return f"{what} is readable by group or others (remove it: a new one is made)"
    return None


def _open_dir(name: str | os.PathLike, what: str, *, dir_fd: int | None = None) -> int:
    """A checked folder's descriptor; `dir_fd` given: `name` inside it, never through a link."""
    flags = os.O_RDONLY | _DIRECTORY | _CLOEXEC | (_NOFOLLOW if dir_fd is not None else 0)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        if dir_fd is not None:
            try:
                if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    raise Unsafe(f"{what} is a symbolic link") from None
            except OSError:
                pass
        raise
    problem = owner_problem(os.fstat(fd), what)
    if problem is not None:
        os.close(fd)
        raise Unsafe(problem)
    return fd


def open_models(cache_dir: str | os.PathLike, *, create: bool) -> int | None:
    """The descriptor of `cache_dir/models`, both folders checked; the caller closes it.

    Returns None where there is none yet (create False) or it cannot be made or
    opened. `create` makes missing folders with mode 0700.

    Raises:
        Unsafe: either folder is another user's or writable by group or others,
            `models` is a symbolic link, or the platform cannot check.
    """
    if not supported():
        raise Unsafe("this platform cannot check who may write the cache folder")
    top = Path(cache_dir)
    try:
        if create:
            top.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = _open_dir(top, str(top))
    except OSError:
        return None
    try:
        if create:
            try:
                os.mkdir(MODELS, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
        return _open_dir(MODELS, str(top / MODELS), dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def secret(models_fd: int, *, create: bool, where: str = MODELS) -> bytes | None:
    """The secret key in the folder `models_fd`, made first when missing and `create`.

    Returns None when there is none (create False) or it cannot be made.

    Raises:
        Unsafe: the key is not a regular file of this user's, readable or
            writable by group or others, or not `KEY_BYTES` long.
    """
    what = f"{where}/{KEY_NAME}"
    try:
        fd = os.open(KEY_NAME, READ_FLAGS, dir_fd=models_fd)
    except FileNotFoundError:
        return _make_secret(models_fd, what) if create else None
    except OSError as err:
        raise Unsafe(f"{what} cannot be opened ({err.strerror}; a symbolic link?)") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unsafe(f"{what} is not a regular file")
        problem = owner_problem(info, what, group_read=True)
        if problem is not None:
            raise Unsafe(problem)
        data = os.read(fd, KEY_BYTES + 1)
    except OSError as err:
        raise Unsafe(f"{what} cannot be read ({err.strerror})") from None
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise Unsafe(f"{what} is not {KEY_BYTES} bytes long (remove it: a new one is made)")
    return data


def _make_secret(models_fd: int, what: str) -> bytes | None:
    """A new key, written whole under a temporary name and linked into place (never replacing one)."""
    tmp = f".tmp-key-{os.urandom(8).hex()}"
    try:
        fd = os.open(tmp, CREATE_FLAGS, 0o600, dir_fd=models_fd)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, KEY_NAME, src_dir_fd=models_fd, dst_dir_fd=models_fd, follow_symlinks=False)
        except FileExistsError:  # another process made one first: use it
            pass
    except OSError:
        return None
    finally:
        try:
            os.unlink(tmp, dir_fd=models_fd)
        except OSError:
            pass
    return secret(models_fd, create=False, where=what.rpartition("/")[0])


def folder_problem(cache_dir: str | os.PathLike) -> str | None:
    """Why `cache_dir` must not be used (`open_models`' checks, nothing made), or None."""
    try:
        fd = open_models(cache_dir, create=False)
        if fd is not None:
            try:
                secret(fd, create=False, where=str(Path(cache_dir) / MODELS))
            finally:
                os.close(fd)
    except Unsafe as err:
        return err.reason
    return None


def warn(cache_dir: str | os.PathLike, reason: str, without: str = "the model cache") -> None:
    """One line on stderr, once per folder and process: why the cache is off, and that the run goes on."""
    where = os.path.abspath(cache_dir)
    if where in _warned:
        return
    _warned.add(where)
    print(f"warning: cache not used: {reason}; running without {without}", file=sys.stderr)


__all__ = ["Unsafe", "open_models", "secret", "folder_problem", "warn", "owner_problem", "supported",
           "KEY_NAME", "KEY_BYTES"]
