"""The triage journal: an SQLite file of settings and events that makes a session durable.

A session is event-sourced (`fastlbp.triage.state`): every action that
changes state is appended here and committed before the user is told it was
accepted; inference state is never stored. The file has two tables:

    meta    (key TEXT PRIMARY KEY, value TEXT)   version, fingerprint, graph, settings (JSON), created,
                                                 order (a custom order's text, version 2),
                                                 loading (JSON: cycles, compress; version 3),
                                                 evidence, learn (JSON: `fastlbp.triage.evidence`;
                                                 version 4)
    events  (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT, alarm TEXT, truth INTEGER, at REAL)

`kind` is "label" (alarm, truth 0 or 1), "skip" (alarm), "jump" (alarm),
"undo" (neither) or "settings" (version 3: the session's inference settings
changed on a resume; `alarm` holds the new settings as JSON,
`fastlbp.triage.stored.change_payload`); `at` is the time of the action
(seconds since the epoch).

A third table, made by the first snapshot a session writes, lets a resume
restore the state after many events in one round (`fastlbp.triage.snapshot`):

    snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER, state TEXT, messages BLOB,
              learned BLOB, at REAL)

one row, replaced after each round: what the events up to `seq` came to that
the events alone cannot give back without replaying every round. It is a
cache of the events, never a source of labels: a resume checks it against
the events it covers and replays them all when it does not match. Earlier
releases read a journal with it as before (they ignore the table, so the
version is unchanged) and leave it stale; a stale snapshot is still used for
the events it covers.

A session file is only ever used by the process holding its lock
(`fastlbp.triage.lock`), and only read as it is: every value is checked
against what this module writes (`read_contents`), a damaged file is reported
and left untouched (`damaged`), a file that is not a session is never
replaced, and a file of a newer journal version is refused.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from fastlbp.core.errors import InputError
from fastlbp.core.model import Model
from fastlbp.inference.ranking import alarm_vars
from fastlbp.triage.lock import SessionLock

# Version 2 stores a custom order's text (meta "order") instead of its path. Version 1
# journals resume unless they name a custom order; the settings JSON gained "backend"
# within version 1 (a journal without it resumes with the default backend). Version 3 adds
# "settings" events and the meta "loading"; a journal of version 2 or 1 is raised to 3 when
# its first "settings" event is written (before that, earlier releases still read it). Version 4
# adds the meta "evidence" and "learn" (a session started with --labels-from, --soft-labels or
# --learn); a session without them is still written as version 3, which earlier releases read.
JOURNAL_VERSION = 4
PLAIN_VERSION = 3  # the version of a session without evidence or learning
KINDS = ("label", "skip", "jump", "undo", "settings")
SQLITE_MAGIC = b"SQLite format 3\x00"
TABLES = ("meta", "events")
# What reading a damaged file raises: sqlite3 errors, and UnicodeDecodeError where a flipped byte
# left text (a table name in the schema, a meta value, an event's kind) that is not UTF-8.
UNREADABLE = (sqlite3.DatabaseError, UnicodeDecodeError)

META_SQL = "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
EVENTS_SQL = ("CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,"
              " alarm TEXT, truth INTEGER, at REAL NOT NULL)")
SCHEMA = f"{META_SQL};{EVENTS_SQL};"
# The whole of `sqlite_master` in a journal this module wrote (every version has had this schema):
# (type, name, table, sql). Anything else is refused: a trigger or a view can change what is stored
# after each write (`AFTER INSERT ON events ... SET truth = 1 - truth` made triage say "accepted ...
# = true" while false was stored; issue 41, item 2), and another column type or constraint changes
# what a value reads back as.
MASTER = frozenset({("table", "meta", "meta", META_SQL),
                    ("index", "sqlite_autoindex_meta_1", "meta", None),
                    ("table", "events", "events", EVENTS_SQL),
                    ("table", "sqlite_sequence", "sqlite_sequence",
                     "CREATE TABLE sqlite_sequence(name,seq)")})

# The optional snapshot table (`fastlbp.triage.snapshot`). SQLite keeps it in sqlite_master as
# "CREATE TABLE snapshot (...)": IF NOT EXISTS is not stored.
SNAPSHOT_TABLE = "snapshot"
SNAPSHOT_SQL = ("CREATE TABLE snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL,"
                " state TEXT NOT NULL, messages BLOB, learned BLOB, at REAL NOT NULL)")
SNAPSHOT_SCHEMA = SNAPSHOT_SQL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)
# Rows of `sqlite_master` a journal may have besides `MASTER`: the snapshot table, made by its first
# snapshot (a journal of an earlier release has none).
OPTIONAL_MASTER = frozenset({("table", SNAPSHOT_TABLE, SNAPSHOT_TABLE, SNAPSHOT_SQL)})

# (seq, kind, alarm, truth, at) as stored; `Journal.events` gives the first four.
Row = tuple[int, str, str | None, bool | None, float]


def fingerprint(model: Model) -> str:
    """sha256 of the graph arrays and variable names: a journal only resumes on its own graph."""
    h = hashlib.sha256()
    g = model.graph
    for name in ("factor_offsets", "edge_var", "factor_kind", "p1", "p2"):
        h.update(np.ascontiguousarray(np.asarray(getattr(g, name))).tobytes())
    h.update("\0".join(model.var_names).encode())
    h.update(np.asarray(alarm_vars(model)).tobytes())
    return h.hexdigest()


# Errors --------------------------------------------------------------------

class _NotAsWritten(Exception):
    """A write the file did not store as written (a trigger, a changed schema); rolled back."""


class SessionWriteError(InputError):
    """The session file cannot be written (read-only, disk full, I/O error); nothing was changed."""

    def __init__(self, path: str | os.PathLike, err: BaseException):
        text = str(err) or type(err).__name__
        if isinstance(err, OSError) and err.strerror:
            text = err.strerror
        low = text.lower()
        if "disk i/o" in low or getattr(err, "errno", None) == errno.ENOSPC or "no space" in low:
            text += " (is the disk full?)"
        elif "readonly" in low or "read-only" in low or "permission" in low:
            text += " (is the file or its folder read-only?)"
        super().__init__(str(path), None, f"cannot write the session: {text}")


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


def _connect_for_reading(p: Path) -> sqlite3.Connection:
    # Not mode=ro: a read-only connection cannot roll back the journal of a writer killed
    # mid-commit and reports the file unreadable; reading only never writes otherwise.
    return sqlite3.connect(p, isolation_level=None)


@dataclasses.dataclass
class Contents:
    """What a session file holds, each value checked against what this module writes.

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


def events_digest(rows: Iterable[tuple]) -> str:
    """sha256 of events (seq, kind, alarm, truth, ...) as stored (truth 0, 1 or None): a snapshot's."""
    h = hashlib.sha256()
    for seq, kind, alarm, truth, *_ in rows:
        h.update(f"{seq}\x00{kind}\x00{'' if alarm is None else alarm}\x00"
                 f"{'' if truth is None else int(truth)}\x01".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


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


def _sidecars(p: Path) -> list[Path]:
    """SQLite's files beside a database (a rollback journal, a write-ahead log and its index)."""
    return [p.with_name(p.name + suffix) for suffix in ("-journal", "-wal", "-shm")]


def _sync_folder(folder: Path) -> None:
    """Makes a rename in `folder` durable (POSIX leaves it to an fsync of the folder)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def move_aside(path: Path, backup: Path) -> list[tuple[Path, Path]]:
    """Renames a damaged session (and SQLite's files beside it) to `backup`; returns the moves.

    Raises:
        SessionWriteError: a rename failed (the ones done are undone).
    """
    moved = []
    try:
        for suffix in ("", "-journal", "-wal", "-shm"):
            src = path.with_name(path.name + suffix)
            if src.exists():
                dst = backup.with_name(backup.name + suffix)
                os.rename(src, dst)
                moved.append((src, dst))
    except OSError as err:
        for src, dst in reversed(moved):
            os.rename(dst, src)
        raise SessionWriteError(path, err) from None
    return moved


# The journal ------------------------------------------------------------------

class Journal:
    """The SQLite file: `meta` (key, value) and `events` (seq, kind, alarm, truth, at).

    Each append is its own committed transaction with synchronous=FULL, so a
    returned append survives a kill of the process (and of the machine). A
    journal holds its session's lock (`fastlbp.triage.lock`) until `close`.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, lock: SessionLock | None = None):
        self.path = path
        self.conn = conn
        self.lock = lock

    @classmethod
    def create(cls, path: str | os.PathLike, meta: dict[str, str], *, overwrite: bool = False,
               rows: Iterable[Row] = (), lock: SessionLock | None = None) -> Journal:
        """Writes a new journal of `meta` and `rows` at `path` (replacing a session there if `overwrite`).

        The file is built under a temporary name and renamed into place, so a
        half-made journal is never mistaken for a session and a session being
        replaced stays whole until the new one is.

        Raises:
            SessionInUse: another process holds the session (when `lock` is None).
            InputError: see `check_target`.
            SessionWriteError: the file cannot be written; nothing was changed.
        """
        p = Path(path)
        own = lock is None
        lock = lock or SessionLock.acquire(p)
        try:
            check_target(p, overwrite)
            # Through a symbolic link, the file it names is replaced and the link stays: replacing the
            # link would leave two sessions, the new one here and the old one at the link's target.
            real = Path(os.path.realpath(p))
            tmp = real.with_name(real.name + ".tmp")
            try:
                for leftover in (tmp, *_sidecars(tmp)):
                    leftover.unlink(missing_ok=True)
                conn = sqlite3.connect(tmp)
                try:
                    conn.executescript(SCHEMA)
                    conn.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
                    conn.executemany("INSERT INTO events (kind, alarm, truth, at) VALUES (?, ?, ?, ?)",
                                     [(k, a, None if t is None else int(t), at) for _, k, a, t, at in rows])
                    conn.commit()
                finally:
                    conn.close()
                # A rollback journal left by a killed writer of the file being replaced would be
                # applied to the new file on its first read.
                for leftover in _sidecars(real):
                    leftover.unlink(missing_ok=True)
                os.replace(tmp, real)
                _sync_folder(real.parent)
            except (sqlite3.Error, OSError) as err:
                tmp.unlink(missing_ok=True)
                raise SessionWriteError(p, err) from None
            return cls._connect(p, lock)
        except BaseException:
            if own:
                lock.release()
            raise

    @classmethod
    def open(cls, path: str | os.PathLike, *, lock: SessionLock | None = None) -> Journal:
        """Opens the journal at `path` for appending; its tables and version are checked, not its values.

        Raises:
            SessionInUse: another process holds the session (when `lock` is None).
            InputError: no file, not a session, a newer version, or tables that
                are missing or unreadable (the file is left as it is).
        """
        p = Path(path)
        kind, reason = classify(p)
        if kind == "missing":
            raise InputError(str(p), None, "no triage session to resume (start one without --resume)")
        if kind == "foreign":
            raise not_a_session(p, reason)
        own = lock is None
        lock = lock or SessionLock.acquire(p)
        try:
            contents = Contents(structure="the file is empty") if kind == "empty" else read_file(p)
            if contents.version is not None and contents.version > JOURNAL_VERSION:
                raise newer(p, contents.version)
            if contents.structure:
                raise damaged(p, contents.structure, contents.recognised or kind == "empty")
            return cls._connect(p, lock)
        except BaseException:
            if own:
                lock.release()
            raise

    @classmethod
    def _connect(cls, p: Path, lock: SessionLock | None) -> Journal:
        conn = sqlite3.connect(p, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        return cls(p, conn, lock)

    def read(self, names: Mapping[str, int] | None = None) -> Contents:
        """The file's contents, checked (`read_contents`)."""
        return read_contents(self.conn, names)

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def events(self) -> list[tuple[int, str, str | None, bool | None]]:
        """(seq, kind, alarm, truth) of every event, oldest first.

        Raises:
            InputError: an event is not as this module writes it.
        """
        contents = self.read()
        if contents.events_problem:
            raise damaged(self.path, contents.events_problem, contents.recognised)
        return [row[:4] for row in contents.rows]

    def check_writable(self) -> None:
        """Starts an append and rolls it back, so that an unwritable file fails here, before any label.

        An UPDATE that writes values back unchanged is not enough: SQLite skips
        unchanged records and never opens its rollback journal. An insert does,
        and it writes the journal beside the file at once, so a read-only file,
        a read-only folder and a full disk all fail it (each checked on Linux);
        the rollback leaves the file as it was.

        Raises:
            SessionWriteError: read-only file or folder, full disk, I/O error.
        """
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO events (kind, alarm, truth, at) VALUES ('undo', NULL, NULL, 0)")
        except (sqlite3.Error, OSError) as err:
            raise SessionWriteError(self.path, err) from None
        finally:
            try:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # a failed transaction is rolled back by SQLite itself

    def append(self, kind: str, alarm: str | None = None, truth: bool | None = None) -> int:
        """Appends and commits one event; returns its seq.

        Raises:
            SessionWriteError: not written (or not stored as written: rolled
                back); the journal is as it was.
        """
        row = (kind, alarm, None if truth is None else int(truth))

        def insert() -> int:
            return int(self.conn.execute("INSERT INTO events (kind, alarm, truth, at) VALUES (?, ?, ?, ?)",
                                         (*row, time.time())).lastrowid)

        return self._checked(insert, row)

    def append_settings(self, payload: str) -> int:
        """Appends and commits a "settings" event (and raises the journal's version to 3 if it is lower).

        Raises:
            SessionWriteError: not written; the journal is as it was.
        """

        def insert() -> int:
            self.conn.execute("UPDATE meta SET value = ? WHERE key = 'version' "
                              "AND CAST(value AS INTEGER) < ?", (str(PLAIN_VERSION), PLAIN_VERSION))
            return int(self.conn.execute("INSERT INTO events (kind, alarm, truth, at) "
                                         "VALUES ('settings', ?, NULL, ?)", (payload, time.time())).lastrowid)

        return self._checked(insert, ("settings", payload, None))

    def delete(self, seq: int) -> None:
        """Deletes event `seq` (an undo), committed.

        Raises:
            SessionWriteError: not deleted (or more than it deleted: rolled back).
        """

        def remove() -> int:
            self.conn.execute("DELETE FROM events WHERE seq = ?", (seq,))
            return seq

        self._checked(remove, None)

    def _checked(self, write, row: tuple | None) -> int:
        """Runs `write` (one INSERT of `row`, or with `row` None one DELETE of the seq it returns) in one
        transaction that commits only if the file then holds exactly that: its schema still a journal's
        (`schema_problem`), one event more (fewer) than before, and the event read back as `row` (gone).

        Each check is one indexed read or an aggregate SQLite computes itself, so a label's write stays
        dominated by its fsync.

        Raises:
            SessionWriteError: a failed write, or a file that did not store what was written (rolled back).
        """
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            problem = schema_problem(self.conn)
            (before,) = self.conn.execute("SELECT count(*) FROM events").fetchone()
            seq = write()
            (after,) = self.conn.execute("SELECT count(*) FROM events").fetchone()
            stored = self.conn.execute("SELECT kind, alarm, truth FROM events WHERE seq = ?",
                                       (seq,)).fetchone()
            if problem is None:
                if after != before + (1 if row is not None else -1):
                    problem = (f"the events went from {before} to {after} where one was "
                               f"{'added' if row is not None else 'removed'}")
                elif row is not None and stored != row:
                    problem = f"event {seq} reads back as {stored!r}, not as written ({row!r})"
                elif row is None and stored is not None:
                    problem = f"event {seq} is still there after it was deleted"
            if problem is not None:
                raise _NotAsWritten(f"the file did not store what was written: {problem}; nothing was "
                                    "changed (a session file must hold the journal's schema alone)")
            self.conn.execute("COMMIT")
        except (sqlite3.Error, OSError, _NotAsWritten) as err:
            self._rolled_back(err)
        return seq

    def _rolled_back(self, err: Exception):
        """Rolls back the open transaction, then raises `SessionWriteError` for `err`."""
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # a failed transaction is rolled back by SQLite itself
        raise SessionWriteError(self.path, err) from None

    def write_snapshot(self, state: str, messages: bytes | None, learned: bytes | None) -> int:
        """Replaces the snapshot with one covering every event in the file now; returns its seq.

        `state` is a JSON object; "seq" and "digest" (`events_digest`) of the events it covers are
        added to it, from the events read in the same transaction as the write.

        Raises:
            SessionWriteError: not written; the journal is as it was.
        """
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            problem = schema_problem(self.conn)
            if problem is not None:
                raise _NotAsWritten(f"the snapshot was not written: {problem}")
            self.conn.execute(SNAPSHOT_SCHEMA)
            rows = self.conn.execute("SELECT seq, kind, alarm, truth FROM events ORDER BY seq").fetchall()
            seq = rows[-1][0] if rows else 0
            payload = json.loads(state)
            payload["seq"], payload["digest"] = seq, events_digest(rows)
            self.conn.execute("INSERT OR REPLACE INTO snapshot (id, seq, state, messages, learned, at) "
                              "VALUES (1, ?, ?, ?, ?, ?)",
                              (seq, json.dumps(payload), messages, learned, time.time()))
            self.conn.execute("COMMIT")
        except (sqlite3.Error, OSError, _NotAsWritten) as err:
            self._rolled_back(err)
        return int(seq)

    def read_snapshot(self) -> tuple[tuple | None, str | None]:
        """(seq, state, messages, learned) of the stored snapshot, or None; and why it cannot be used.

        Never raises for what it finds: a missing table is (None, None), a row of
        other types or an unreadable table (None, the problem).
        """
        try:
            found = self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?",
                                      (SNAPSHOT_TABLE,)).fetchone()
            if found is None:
                return None, None
            rows = self.conn.execute("SELECT seq, state, messages, learned FROM snapshot").fetchall()
        except UNREADABLE as err:
            return None, f"its snapshot cannot be read ({err})"
        if len(rows) != 1:
            return None, None if not rows else f"it has {len(rows)} snapshots"
        seq, state, messages, learned = rows[0]
        if type(seq) is not int or type(state) is not str or type(messages) not in (bytes, type(None)) \
                or type(learned) not in (bytes, type(None)):
            return None, "its snapshot is not as written"
        return (seq, state, messages, learned), None

    def close(self) -> None:
        """Closes the file and releases the session's lock (idempotent)."""
        self.conn.close()
        if self.lock is not None:
            self.lock.release()
