"""Where a triage session lives: a file per graph in the user's data folder, named after the graph.

A session is named after its graph's file name plus a short hash of the
graph's content (`race.json-3f2a9c01b4de.triage.db`), so two graphs named
the same (`bench1/race.json`, `bench2/race.json`) never share a session and
a regenerated graph with other content starts its own. The folder comes from
the caller (the command line resolves `$XDG_DATA_HOME/fastlbp/sessions`): this
module reads no environment. Sessions of earlier releases sat beside the
graph (`GRAPH.triage.db`); one there is still found (`locate`).

    path, note = locate("race.json", Path.home() / ".local/share/fastlbp/sessions")
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from datalog.formats import BINGO_ALARMS, BINGO_CLAUSES, BINGO_INPUT_PROBS, BINGO_RULE_PROBS
from fastlbp.core.errors import InputError

SUFFIX = ".triage.db"
DIGEST_CHARS = 12  # 48 bits of sha256: a collision among one user's graphs is out of reach
# A Bingo directory's graph is these files (the oracle and labels are not part of the graph).
BINGO_GRAPH_FILES = (BINGO_CLAUSES, BINGO_ALARMS, BINGO_RULE_PROBS, BINGO_INPUT_PROBS)
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def graph_digest(graph: str | os.PathLike, inputs: tuple = ()) -> str:
    """The first `DIGEST_CHARS` hex digits of the sha256 of the graph's content.

    A file: its bytes (compressed ones as stored). A directory (Bingo): the
    names and bytes of the files of the graph that are present. hashing a
    file is far quicker than loading it (BENCHMARKS.md, "Figures behind the code's choices").

    Args:
        inputs: more of what the graph is made of: files or folders (a
            Datalog program's facts, rule probabilities; a folder counts with
            every file under it), and text (options such as its alarm relations).

    Raises:
        InputError: the graph or an input cannot be read.
    """
    p = Path(graph)
    h = hashlib.sha256()
    try:
        if p.is_dir():
            _update_from_files(h, [p / name for name in BINGO_GRAPH_FILES if (p / name).is_file()], p)
        else:
            _update_from_file(h, p)
    except OSError as err:
        raise InputError(str(p), None, f"cannot be read: {err.strerror or err}") from None
    for extra in inputs:
        h.update(b"\1")
        if isinstance(extra, str):
            h.update(extra.encode("utf-8", "surrogatepass") + b"\0")
            continue
        q = Path(extra)
        try:
            if q.is_dir():
                _update_from_files(h, sorted(f for f in q.rglob("*") if f.is_file()), q)
            else:
                _update_from_file(h, q)
        except OSError as err:
            raise InputError(str(q), None, f"cannot be read: {err.strerror or err}") from None
    return h.hexdigest()[:DIGEST_CHARS]


def _update_from_files(h, files: list[Path], root: Path) -> None:
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        _update_from_file(h, f)
        h.update(b"\0")


def _update_from_file(h, path: Path) -> None:
    """Adds a regular file's bytes to `h`.

    Raises:
        InputError: not a regular file (a pipe, a device): its bytes cannot be read again to load
            the graph, and a device may never end (`triage /dev/zero` hashed forever; issue 41).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(str(path), None, "not a regular file (a pipe or a device): a session is named "
                             "after its graph's contents, which must be read again; copy it into a file, "
                             "or name a session with --session")
        while chunk := f.read(1 << 20):
            h.update(chunk)


def graph_name(graph: str | os.PathLike) -> str:
    """The graph's file (or directory) name as a safe file-name part: `race.json`, `bingo_dir`."""
    p = Path(graph)
    name = p.name or Path(os.path.abspath(p)).name or "graph"
    return _UNSAFE.sub("_", name)[:80]


def default_session_path(graph: str | os.PathLike, folder: str | os.PathLike, inputs: tuple = ()) -> Path:
    """`FOLDER/NAME-DIGEST.triage.db`: the session of this graph (by name and content) in `folder`.

    Args:
        inputs: more files or folders the graph is made of (`graph_digest`).
    """
    return Path(folder) / f"{graph_name(graph)}-{graph_digest(graph, inputs)}{SUFFIX}"


def legacy_session_path(graph: str | os.PathLike) -> Path:
    """`GRAPH.triage.db` beside the graph: where sessions were kept before they moved to the data folder."""
    p = Path(graph)
    return p.with_name(p.name.rstrip("/") + SUFFIX)


def locate(graph: str | os.PathLike, folder: str | os.PathLike,
           inputs: tuple = ()) -> tuple[Path, str | None]:
    """The session a command on `graph` uses when none is named, and a note when it is an old one.

    The one in `folder` if it exists; else one beside the graph (the old
    default), with a note saying how to move it; else the one in `folder`.
    """
    new = default_session_path(graph, folder, inputs)
    old = legacy_session_path(graph)
    if not _exists(new) and _exists(old):
        return old, (f"note: using the session beside the graph, {old}; new sessions are kept in "
                     f"{Path(folder)} (move it there with `mv {old} {new}`, or name one with --session)")
    return new, None


def namesakes(graph: str | os.PathLike, folder: str | os.PathLike) -> list[Path]:
    """Sessions in `folder` of graphs with this graph's name (any content), newest first."""
    prefix = graph_name(graph) + "-"
    try:
        found = [p for p in Path(folder).iterdir()
                 if p.name.startswith(prefix) and p.name.endswith(SUFFIX)
                 and len(p.name) == len(prefix) + DIGEST_CHARS + len(SUFFIX)]
    except OSError:
        return []

    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    return sorted(found, key=mtime, reverse=True)


def _exists(p: Path) -> bool:
    return p.exists() or p.is_symlink()
