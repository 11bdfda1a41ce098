"""Writing outputs so that an error, a full disk or a kill never leaves a half-written one.

Every file or directory fastlbp writes on request (`rank -o`, `ground -o`,
`convert`, ...) goes through this module:

* `write_atomically` writes a file through a temporary file in the target's
  folder and a rename: a reader sees the old file or the whole new one.
* `write_directory` writes a directory (a Bingo graph) as a temporary sibling
  directory and swaps it in: on Linux with one `renameat2(RENAME_EXCHANGE)`,
  so the name always holds the old or the new directory; elsewhere (or on a
  file system without it) the old directory is renamed aside and the new one
  renamed in, leaving a window of two renames in which the name is missing
  (a kill there leaves both, as hidden siblings `.NAME.*`). Until the new
  directory is complete it holds a marker file, which readers may refuse.
  Where the folder holding an existing directory cannot be written (but the
  directory can), the marker goes into the directory itself while the new
  files are renamed in one by one.

Special targets are written directly, with no temporary: a character device
(`/dev/null`), a FIFO, and the process's own descriptors (`/dev/stdout`,
`/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`, appended to, as a shell's
`>>`). Anything else that is not a regular file (a block device, a socket) is
refused. A symbolic link to a regular file is kept: the file it leads to is
replaced. Nothing is ever renamed over a non-regular file.

An `OSError` becomes `InputError(PATH, None, "cannot write: REASON")` (the
CLI prints `error: PATH: cannot write: REASON`, exit status 2), and nothing is
left behind: the temporary is removed and the old output is as it was.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fastlbp.core.errors import InputError

T = TypeVar("T")

_CHUNK = 1 << 20
# The process's own descriptors: written in place (appending), whatever they lead to.
_FD_ALIAS = re.compile(r"/dev/(stdout|stderr|stdin|fd/\d+)|/proc/(self|thread-self|\d+)/fd/\d+")


def cannot_write(path: str | os.PathLike, err: OSError) -> InputError:
    """`PATH: cannot write: REASON` for an `OSError` met writing `path`."""
    reason = err.strerror or str(err)
    if err.errno == errno.ENOENT and not Path(path).parent.is_dir():
        reason = f"folder {str(Path(path).parent)!r} does not exist"
    return InputError(str(path), None, f"cannot write: {reason}")


def _fd_alias(path: Path) -> bool:
    """Whether `path`, or a link on the way to what it names, is one of the process's descriptors."""
    p = os.path.abspath(path)
    for _ in range(40):
        if _FD_ALIAS.fullmatch(p):
            return True
        try:
            link = os.readlink(p)
        except OSError:
            return False
        p = os.path.normpath(os.path.join(os.path.dirname(p), link))
    return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[:_CHUNK]):]


def _default_mode(directory: bool = False) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def _fsync_files(folder: Path) -> None:
    """Flushes every regular file directly in `folder` to the disk."""
    for entry in folder.iterdir():
        if entry.is_file() and not entry.is_symlink():
            fd = os.open(entry, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _fsync_dir(path: str | os.PathLike) -> None:
    """Makes a rename in `path` durable, best effort: not every system can open or sync a folder, and the
    rename is done (a failure here is not the output's)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _same_owner(tmp: str, old: os.stat_result) -> None:
    """Gives the new file the old one's owner where allowed (as root); else keeps ours."""
    if hasattr(os, "chown") and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.chown(tmp, old.st_uid, old.st_gid)
        except OSError:
            pass


def _kind(mode: int) -> str:
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _write_direct(path: Path, data: bytes, append: bool) -> None:
    flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | (os.O_APPEND if append else 0)
    fd = os.open(path, flags)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def write_file(path: str | os.PathLike, data: str | bytes) -> None:
    """Writes `data` (text goes as UTF-8) to `path` in place, replacing any file there: for a file in the
    folder `write_directory` fills (`OSError`s are left to it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        _write_all(fd, data.encode("utf-8") if isinstance(data, str) else data)
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike, data: str | bytes) -> None:
    """Writes `data` (text goes as UTF-8) to `path`, atomically (see the module's description).

    The new file has the old one's mode (and owner, where allowed), or the
    usual mode for a new file (0666 less the umask).

    Raises:
        InputError: `path` is a directory or a special file other than a
            character device or FIFO, or it cannot be written (nothing is left
            behind then).
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        if _fd_alias(path):
            _write_direct(path, data, append=True)
            return
        try:
            old = os.stat(path)  # follows links: what the name leads to
        except FileNotFoundError:
            old = None
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise InputError(str(path), None, "is a directory; name a file")
        if old is not None and (stat.S_ISCHR(old.st_mode) or stat.S_ISFIFO(old.st_mode)):
            _write_direct(path, data, append=False)
            return
        if old is not None and not stat.S_ISREG(old.st_mode):
            raise InputError(str(path), None, f"is {_kind(old.st_mode)}; name a file, a character device "
                             "or a FIFO")
        target = Path(os.path.realpath(path))  # a link is kept; the file it leads to is replaced
        if old is None:
            try:  # a dangling link: it leads to a name that exists now (a race), never rename over it
                if not stat.S_ISREG(os.lstat(target).st_mode):
                    raise InputError(str(path), None, "leads to something that is not a regular file")
            except FileNotFoundError:
                pass
        _replace_file(target, data, old)
    except OSError as err:
        raise cannot_write(path, err) from None


def _replace_file(target: Path, data: bytes, old: os.stat_result | None) -> None:
    fd, tmp = None, None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        _write_all(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = None
        os.chmod(tmp, (old.st_mode & 0o7777) if old is not None else _default_mode())
        if old is not None:
            _same_owner(tmp, old)
        os.replace(tmp, target)
        tmp = None
        _fsync_dir(target.parent)
    finally:
        if fd is not None:
            os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


# Directories ----------------------------------------------------------------

def _exchange(a: str, b: str) -> bool:
    """Swaps the names `a` and `b` in one step (Linux's renameat2 with RENAME_EXCHANGE); False where the
    system or the file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), b)


def _remove_tree(path: str, marker: str | None) -> None:
    """Removes a temporary directory (a new one not swapped in, or the old one swapped out), `marker` first
    put in and removed last: a kill part-way leaves a hidden directory that readers refuse."""
    import shutil

    try:
        if marker:
            with open(os.path.join(path, marker), "a"):
                pass
        for entry in os.scandir(path):
            if entry.name == marker:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)


def _carry(src: Path, dst: Path) -> None:
    """Copies `src` (a file, link or folder of the old directory) to `dst`, by hard links where possible."""
    import shutil

    def link_or_copy(s, d):
        try:
            os.link(s, d, follow_symlinks=False)
        except OSError:
            shutil.copy2(s, d, follow_symlinks=False)

    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)
    else:
        link_or_copy(src, dst)


_STAGING = ".fastlbp-new."  # `_fill_in_place`'s folder inside the directory (a kill's leftover is dropped)
_MARKER_TEXT = "fastlbp is writing this directory; it is incomplete while this file is here\n"


def _fill_in_place(target: Path, fill: Callable[[Path], T], marker: str, keep: Callable[[str], bool] | None
                   ) -> T:
    """`write_directory` where the folder holding `target` cannot be written: `marker` goes into `target`
    first and stays until every file is in place (each renamed in from a hidden staging folder inside it),
    so a reader meeting a half-replaced directory refuses it. An error before the first rename leaves the
    old directory as it was; after it, the marker stays (the directory is refused until written again)."""
    marker_path = target / marker
    had_marker = os.path.lexists(marker_path)  # an earlier write stopped part-way: it stays until done
    staging, moved = None, False
    try:
        write_file(marker_path, _MARKER_TEXT)
        _fsync_dir(target)
        staging = Path(tempfile.mkdtemp(dir=target, prefix=_STAGING, suffix=".tmp"))
        result = fill(staging)
        _fsync_files(staging)
        new = {entry.name for entry in staging.iterdir()}
        for name in sorted(new):
            moved = True
            os.replace(staging / name, target / name)
        os.rmdir(staging)
        staging = None
        for entry in target.iterdir():  # stale files of the old graph
            kept = keep is not None and keep(entry.name) and not entry.name.startswith(_STAGING)
            if entry.name not in new and entry.name != marker and not kept:
                if entry.is_dir() and not entry.is_symlink():
                    _remove_tree(str(entry), None)
                else:
                    os.unlink(entry)
        _fsync_dir(target)
        os.unlink(marker_path)
        _fsync_dir(target)
        return result
    finally:
        if staging is not None:
            _remove_tree(str(staging), None)
        if not moved and not had_marker and os.path.lexists(marker_path):
            try:
                os.unlink(marker_path)
            except OSError:
                pass


def write_directory(path: str | os.PathLike, fill: Callable[[Path], T], *, marker: str | None = None,
                    keep: Callable[[str], bool] | None = None) -> T:
    """Writes a directory at `path` by `fill(tmp)` into a new sibling `tmp`, then swaps it in; returns what
    `fill` returns.

    `marker` names a file that stays in `tmp` until it is complete (a reader
    that finds it knows the directory is not). Entries of an existing
    directory for which `keep(name)` is true are carried into the new one
    (hard links where possible). The new directory has the old one's mode, or
    the usual one for a new directory; missing parent folders are created.
    Files `fill` writes (with `write_file`) need no temporaries of their own:
    they are synced before the swap. Where the folder holding an existing
    directory cannot be written but the directory can, the files are
    renamed into it one by one, `marker` there until the last one is in. An
    error in `fill` removes `tmp` and leaves the old directory as it was.

    Raises:
        InputError: `path` exists and is not a directory, or something cannot
            be written; also whatever `fill` raises.
    """
    path = Path(path)
    tmp = None
    try:
        if path.exists() and not path.is_dir():
            raise InputError(str(path), None, "exists and is not a directory")
        target = Path(os.path.realpath(path))  # a link to a directory is kept; the directory is replaced
        target.parent.mkdir(parents=True, exist_ok=True)
        old = os.stat(target) if target.is_dir() else None
        try:
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
        except PermissionError:  # a folder we may not write holds a directory we may: write in it
            if old is None or not marker or not os.access(target, os.W_OK | os.X_OK):
                raise
            return _fill_in_place(target, fill, marker, keep)
        if marker:
            write_file(tmp / marker, _MARKER_TEXT)
        if old is not None and keep is not None:
            for entry in sorted(target.iterdir()):
                if entry.name != marker and keep(entry.name) and not entry.name.startswith(_STAGING):
                    _carry(entry, tmp / entry.name)
        result = fill(tmp)
        _fsync_files(tmp)
        os.chmod(tmp, (old.st_mode & 0o7777) if old is not None else _default_mode(directory=True))
        if old is not None:
            _same_owner(str(tmp), old)
        if marker:
            os.unlink(tmp / marker)
        _fsync_dir(tmp)
        if old is None:
            os.rename(tmp, target)
            tmp = None
        elif _exchange(str(tmp), str(target)):
            _fsync_dir(target.parent)  # tmp now names the old directory: removed below
        else:
            aside = tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old")
            os.rename(target, aside)  # over the empty `aside`
            try:
                os.rename(tmp, target)
            except OSError:
                os.rename(aside, target)
                raise
            tmp = Path(aside)
        _fsync_dir(target.parent)
        return result
    except OSError as err:
        raise cannot_write(path, err) from None
    finally:
        if tmp is not None:
            _remove_tree(str(tmp), marker)


__all__ = ["cannot_write", "write_atomically", "write_directory", "write_file"]
