"""A session's labels outside triage: a labels file (`NAME true|false`), and a session file read as labels.

    session_labels("race.json-3f2a9c01b4de.triage.db")   # [("race(3,4)", True), ...], oldest first
    write_labels("labels.txt", pairs, source="...")        # what `export` writes
    read_labels_or_session(path, model)                    # (model, {var: truth}): a file or a session

A session file is told from a labels file by its first 16 bytes (SQLite's
magic), never by its name. Reading one takes no lock and writes nothing, so
`fastlbp rank --labels SESSION` works while the session is open in triage.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from fastlbp.core.errors import InputError
from fastlbp.core.model import Model
from fastlbp.core.text import safe_name
from fastlbp.io.loading import keep_tuples, load_labels
from fastlbp.triage.evidence import stored_start
from fastlbp.triage.journal_format import JOURNAL_VERSION, SQLITE_MAGIC
from fastlbp.triage.journal_reading import damaged, newer, read_file, session_kind
from fastlbp.triage.stored import meta_problem

# The first line of every labels file `export` writes; only such a file is ever overwritten.
HEADER = "# fastlbp triage labels"


def is_session_file(path: str | os.PathLike) -> bool:
    """Whether `path` is an SQLite file (by its magic bytes): a session, or damage to report as one."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def session_labels(path: str | os.PathLike) -> list[tuple[str, bool]]:
    """The labels a session's journal holds, oldest first, as (alarm name, truth).

    The labels the session started with (`triage --labels-from`: carried from
    an older version of the graph) come first; its soft evidence is no label
    and is left out. The events are replayed by name, as a resume does: a label
    of a labelled alarm is skipped, an undo reverts the last label or skip;
    skips, jumps and settings changes label nothing.

    Raises:
        InputError: not a session file, a damaged one, one of a newer version.
    """
    p = Path(path)
    kind = session_kind(p, "no such file")
    if kind == "empty":
        raise damaged(p, "the file is empty", True)
    contents = read_file(p)
    if contents.version is not None and contents.version > JOURNAL_VERSION:
        raise newer(p, contents.version)
    problem = contents.problem or meta_problem(contents.meta)
    if problem:
        raise damaged(p, problem, contents.recognised)
    # The labels the session started with (carried from an older version) come first; `meta_problem`
    # checked them.
    labels: dict[str, bool] = dict(stored_start(contents.meta)[0].labels)
    history: list[tuple[str, str]] = []  # (kind, name): what an undo reverts
    for _, kind, alarm, truth, _ in contents.rows:
        if kind in ("label", "skip") and alarm not in labels:
            if kind == "label":
                labels[alarm] = bool(truth)
            history.append((kind, alarm))
        elif kind == "undo" and history:
            undone, name = history.pop()
            if undone == "label":
                del labels[name]
    return list(labels.items())


def read_labels_or_session(path: str | os.PathLike, model: Model) -> tuple[Model, dict[int, bool]]:
    """Labels from a labels file (`fastlbp.io.loading.load_labels`) or a triage session.

    A labels file may name any tuple of the input graph: one that compression
    removed is kept by making the model again (`load_labels`), so use the
    model returned, whose variable numbers the labels refer to.

    Returns:
        (the model, {variable index: truth}); the model is `model` itself unless a labelled tuple was
        not a variable of it.

    Raises:
        InputError: as `load_labels` or `session_labels`; a session alarm that is
            not a variable of `model`.
    """
    if not is_session_file(path):
        return load_labels(path, model)
    labels = session_labels(path)
    try:
        # A carried label may name a tuple compression removed here: kept, as a labels file's is.
        model = keep_tuples(model, [name for name, _ in labels])
    except (KeyError, InputError):
        pass  # the loop below names the first that is not a variable
    out = {}
    for name, truth in labels:
        if name not in model.index:
            raise InputError(str(path), None, f"the session labels {safe_name(name)!r}, which is not a "
                                              f"variable of this graph (a session of another graph, or of "
                                              f"this one read with other --cycles?)")
        out[model.index[name]] = truth
    return model, out


def format_labels(labels: list[tuple[str, bool]], source: str, path: str | os.PathLike = "-") -> str:
    """A labels file's text: `HEADER`, then `NAME true|false` lines that `read_labels` reads back.

    Raises:
        InputError: a name a line cannot carry (a line break, surrounding
            spaces, a leading `#`); `path` names the file in the message.
    """
    for name, _ in labels:
        if not name or name != name.strip() or name.startswith("#") or "\n" in name or "\r" in name:
            raise InputError(str(path), None, f"the alarm {safe_name(name)!r} cannot be written as a line "
                                              f"'NAME true|false' (a line break, surrounding spaces or a "
                                              f"leading '#')")
    n_true = sum(truth for _, truth in labels)
    head = (f"{HEADER} of {source}: {len(labels)} labels ({n_true} true, {len(labels) - n_true} false), "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
    lines = [safe_name(head), *(f"{name} {'true' if truth else 'false'}" for name, truth in labels)]
    return "\n".join(lines) + "\n"


def write_labels(path: str | os.PathLike, labels: list[tuple[str, bool]], source: str) -> Path:
    """Writes a labels file at `path` (atomically: a temporary file renamed into place).

    An existing file is replaced only if it is a labels file `export` wrote
    (its first line is `HEADER`): a typo never overwrites a graph or a session.

    Raises:
        InputError: a file there that is not an export, a folder, a name no line
            can carry, or a file that cannot be written.
    """
    p = Path(path)
    text = format_labels(labels, source, p)
    if p.is_dir():
        raise InputError(str(p), None, "is a folder; name a file to write the labels to")
    if p.exists() or p.is_symlink():
        try:
            with open(p, "rb") as f:
                first = f.read(len(HEADER))
        except OSError:
            first = b""
        if first != HEADER.encode():
            raise InputError(str(p), None, "exists and is not a labels file written by export; it is never "
                                           "replaced: choose another name")
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise InputError(str(p), None, f"cannot be written: {err.strerror or err}") from None
    return p
