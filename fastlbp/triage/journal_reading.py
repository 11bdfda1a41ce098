"""Reading a triage session file as it is, without changing it, and saying what is wrong with it.

A session file is only ever used by the process holding its lock
(`fastlbp.triage.lock`), and only read as it is: `classify` says what is at
a path, `read_contents` checks every value against what the journal writes
(`fastlbp.triage.journal_format`), a damaged file is reported and left
untouched (`damaged`), a file that is not a session is never replaced
(`not_a_session`, `check_target`), and a file of a newer journal version is
refused (`newer`). `--recover` starts a new session from the valid events
`read_file` finds, keeping the damaged file at `backup_path`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path

from fastlbp.core.errors import InputError
from fastlbp.triage.journal_format import (
    JOURNAL_VERSION,
    KINDS,
    MASTER,
    OPTIONAL_MASTER,
    SQLITE_MAGIC,
    TABLES,
    UNREADABLE,
    Row,
)

# Errors --------------------------------------------------------------------

def backup_path(path: str | os.PathLike) -> Path:
    """Where `--recover` keeps a damaged session: `S.damaged`, else `S.damaged.1`, ... (never reused)."""
    p = Path(path)
    candidate = p.with_name(p.name + ".damaged")
    n = 0
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = p.with_name(f"{p.name}.damaged.{n}")
    return candidate


def damaged(path: str | os.PathLike, problem: str, replaceable: bool) -> InputError:
    """The error for a session that cannot be resumed as it is, with the ways on.

    Args:
        problem: what is wrong (e.g. "event 3 (label): truth 'false' is not 0 or 1").
        replaceable: the file is a triage session `--fresh` may replace (`Contents.recognised`).
    """
    fresh = ", or --fresh to start over" if replaceable else ""
    return InputError(str(path), None, f"the session is damaged: {problem}. The file is left as it is; "
                                       f"use --recover to start a new session from the events before the "
                                       f"damage (this file is kept as {backup_path(path).name}){fresh}")


def not_a_session(path: str | os.PathLike, reason: str) -> InputError:
    return InputError(str(path), None, f"not a triage session file ({reason}); it is never replaced: "
                                       f"choose another --session")


def newer(path: str | os.PathLike, version: int) -> InputError:
    return InputError(str(path), None, f"the session was written by a newer fastlbp (journal version "
                                       f"{version}; this one reads versions up to {JOURNAL_VERSION}): "
                                       f"upgrade fastlbp to resume it")


# Reading a file as it is --------------------------------------------------------

def classify(path: str | os.PathLike) -> tuple[str, str]:
    """What is at `path`, without changing it: (kind, reason).

    kind is "missing", "empty" (a 0-byte file), "session" (an SQLite
    database with a meta or an events table, or whose schema cannot be read:
    a damaged session), or "foreign" (anything else; `reason` says what).
    """
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return "missing", ""
    if not p.is_file():
        return "foreign", "not a regular file"
    try:
        with open(p, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as err:
        return "foreign", f"cannot be read: {err.strerror or err}"
    if not head:
        return "empty", ""
    if head != SQLITE_MAGIC:
        return "foreign", "not an SQLite database"
    conn = _connect_for_reading(p)
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except UNREADABLE:
        return "session", ""
    finally:
        conn.close()
    if not tables & set(TABLES):
        return "foreign", "an SQLite database without a triage journal's tables"
    return "session", ""


def session_kind(path: str | os.PathLike, missing: str) -> str:
    """`classify`'s kind of a file that must be a session: "empty" or "session".

    Args:
        missing: what to say when there is nothing at `path`.

    Raises:
        InputError: nothing at `path`, or a file that is not a session.
    """
    kind, reason = classify(path)
    if kind == "missing":
        raise InputError(str(path), None, missing)
    if kind == "foreign":
        raise not_a_session(path, reason)
    return kind


def _connect_for_reading(p: Path) -> sqlite3.Connection:
    # Not mode=ro: a read-only connection cannot roll back the journal of a writer killed
    # mid-commit and reports the file unreadable; reading only never writes otherwise.
    return sqlite3.connect(p, isolation_level=None)


@dataclasses.dataclass
class Contents:
    """What a session file holds, each value checked against what the journal writes.

    Attributes:
        meta: its meta entries that are text (all of them, in a sound file).
        rows: (seq, kind, alarm, truth, at) the events up to the first bad one, in order.
        total: how many events the file has (None when they cannot be counted).
        version: the journal version, or None when missing or not a number.
        structure: a problem of the tables themselves (unreadable, missing, pages failing SQLite's
            quick_check), or None.
        meta_problem: the first problem of the meta entries, or None.
        events_problem: the first problem of the events, or None.
        recognised: an SQLite database with both tables and a version or fingerprint in its
            meta: a triage session that `--fresh` may replace (or an empty file).
    """

    meta: dict[str, str] = dataclasses.field(default_factory=dict)
    rows: list[Row] = dataclasses.field(default_factory=list)
    total: int | None = 0
    version: int | None = None
    structure: str | None = None
    meta_problem: str | None = None
    events_problem: str | None = None
    recognised: bool = False

    @property
    def problem(self) -> str | None:
        return self.structure or self.meta_problem or self.events_problem


def read_contents(conn: sqlite3.Connection, names: Mapping[str, int] | None = None) -> Contents:
    """Reads and checks a journal's tables; never raises for what it finds (see `Contents`).

    Args:
        names: the model's variables by name; given, every event's alarm must be one.
    """
    out = Contents()
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except UNREADABLE as err:
        out.structure, out.total = f"it cannot be read as a database ({err})", None
        return out
    missing = [t for t in TABLES if t not in tables]
    if missing:
        out.structure = f"it has no {' and no '.join(missing)} table"
    else:
        # A damaged page the reads below skip (an index, the AUTOINCREMENT counter) still fails every
        # write: fuzzing found sessions that read cleanly and then refused each label.
        out.structure = schema_problem(conn) or _integrity_problem(conn)
    if "meta" in tables:
        _read_meta(conn, out)
    if "events" in tables:
        _read_events(conn, out, names)
    out.recognised = not missing and ("version" in out.meta or "fingerprint" in out.meta)
    return out


def schema_problem(conn: sqlite3.Connection) -> str | None:
    """How the file's schema (`sqlite_master`, whole) differs from a journal's (`MASTER`), or None."""
    try:
        found = [(t, n, tb, sql) for t, n, tb, sql in
                 conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")]
    except UNREADABLE as err:
        return f"its schema cannot be read ({err})"
    have = set(found)
    extra = [row for row in found if row not in MASTER | OPTIONAL_MASTER]
    if extra:
        kind, name, _, _ = extra[0]
        shown = name if isinstance(name, str) else repr(name)
        changed = {n for _, n, _, _ in MASTER | OPTIONAL_MASTER}
        why = ("whose definition is not a triage journal's" if shown in changed else
               "that a triage journal never has (only the journal's own schema is trusted: a trigger or a "
               "view can change what is stored)")
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        return f"its schema has {kind} {shown[:80]!r} {why}{more}"
    missing = sorted(name for kind, name, _, _ in MASTER - have if kind == "table")
    if missing:
        return f"its schema lacks the table {missing[0]!r}"
    return None


def _integrity_problem(conn: sqlite3.Connection) -> str | None:
    """What SQLite's quick_check finds wrong with the file's pages, or None (0.09 s for 10^5 events)."""
    try:
        found = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
    except UNREADABLE as err:
        found = [str(err)]
    if found == ["ok"]:
        return None
    text = "; ".join(" ".join(f.replace("*** in database main ***", "").split()) for f in found)
    return f"it fails SQLite's integrity check ({text[:200]})"


def _read_meta(conn: sqlite3.Connection, out: Contents) -> None:
    try:
        rows = conn.execute("SELECT key, value FROM meta").fetchall()
    except UNREADABLE as err:
        out.meta_problem = f"its meta table cannot be read ({err})"
        return
    for key, value in rows:
        if type(key) is not str or type(value) is not str:
            out.meta_problem = out.meta_problem or f"meta entry {key!r} is {value!r}, not text"
            continue
        out.meta[key] = value
    raw = out.meta.get("version")
    if raw is None:
        out.meta_problem = out.meta_problem or "its meta has no version"
    elif not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        out.meta_problem = out.meta_problem or f"its version {raw!r} is not a positive integer"
    else:
        out.version = int(raw)


def _read_events(conn: sqlite3.Connection, out: Contents, names: Mapping[str, int] | None) -> None:
    try:
        out.total = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    except UNREADABLE:
        out.total = None
    try:
        for row in conn.execute("SELECT seq, kind, alarm, truth, at FROM events ORDER BY seq"):
            problem = check_event(row, names)
            if problem:
                out.events_problem = problem
                return
            seq, kind, alarm, truth, at = row
            out.rows.append((seq, kind, alarm, None if truth is None else bool(truth), float(at)))
    except UNREADABLE as err:
        out.events_problem = f"the events after the first {len(out.rows)} cannot be read ({err})"


def check_event(row: tuple, names: Mapping[str, int] | None = None) -> str | None:
    """The problem of one stored event (seq, kind, alarm, truth, at), or None if it is as written."""
    seq, kind, alarm, truth, at = row
    if type(seq) is not int:
        return f"event number {seq!r} is not an integer"
    if kind not in KINDS:
        return f"event {seq}: unknown kind {kind!r} (expected {', '.join(KINDS)})"
    if kind == "undo":
        if alarm is not None:
            return f"event {seq} (undo): names an alarm ({alarm!r})"
    elif kind == "settings":
        if type(alarm) is not str:  # its JSON is checked by `fastlbp.triage.stored.check_changes`
            return f"event {seq} (settings): {alarm!r} is not text"
    elif type(alarm) is not str:
        return f"event {seq} ({kind}): alarm {alarm!r} is not a name"
    elif names is not None and alarm not in names:
        return f"event {seq} ({kind}): {alarm!r} is not a variable of the graph"
    if kind == "label":
        if type(truth) is not int or truth not in (0, 1):
            return f"event {seq} (label): truth {truth!r} is not 0 or 1"
    elif truth is not None:
        return f"event {seq} ({kind}): holds a truth ({truth!r})"
    if type(at) not in (int, float) or not math.isfinite(at):
        return f"event {seq}: time {at!r} is not a number"
    return None


def read_file(path: str | os.PathLike, names: Mapping[str, int] | None = None) -> Contents:
    """`read_contents` of the file at `path` (an SQLite file: `classify` says "session")."""
    conn = _connect_for_reading(Path(path))
    try:
        return read_contents(conn, names)
    except UNREADABLE as err:  # opening itself failed
        return Contents(total=None, structure=f"it cannot be read as a database ({err})")
    finally:
        conn.close()



def check_target(path: str | os.PathLike, overwrite: bool) -> None:
    """Checks that a new session may be written at `path`: nothing there, or (`overwrite`) a session.

    Raises:
        InputError: a session there and not `overwrite`, or a file that is not a
            session (never replaced).
    """
    kind, reason = classify(path)
    if kind == "missing":
        return
    if kind == "foreign":
        raise not_a_session(path, reason)
    if not overwrite:
        raise InputError(str(path), None, "a triage session exists here: pass --resume to continue it or "
                                          "--fresh to start over")
    if kind == "session" and not read_file(path).recognised:
        raise InputError(str(path), None, "--fresh replaces only triage session files, and this one "
                                          "cannot be read as one (its tables or its meta are missing or "
                                          "unreadable): use --recover, which keeps it, or choose another "
                                          "--session")

