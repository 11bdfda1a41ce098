"""The triage journal: the SQLite file of settings and events that makes a session durable.

`Journal` creates a session file, opens one for appending, and writes to it:
each event is its own committed transaction with synchronous=FULL, checked to
be stored as written, so a returned append survives a kill of the process
(and of the machine); a snapshot of the state after a round is written the
same way. The file's format is `fastlbp.triage.journal_format`; reading a
file as it is, and the errors that say what is wrong with one, are
`fastlbp.triage.journal_reading`. `move_aside` keeps a damaged file for
`--recover`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from fastlbp.core.errors import InputError
from fastlbp.triage.journal_format import (
    JOURNAL_VERSION,
    PLAIN_VERSION,
    SCHEMA,
    SNAPSHOT_SCHEMA,
    SNAPSHOT_TABLE,
    UNREADABLE,
    Row,
    events_digest,
)
from fastlbp.triage.journal_reading import (
    Contents,
    check_target,
    damaged,
    newer,
    read_contents,
    read_file,
    schema_problem,
    session_kind,
)
from fastlbp.triage.lock import SessionLock

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



@contextlib.contextmanager
def _held(path: Path, lock: SessionLock | None) -> Iterator[SessionLock]:
    """The session's lock: `lock` (its owner releases it), or one acquired here and released if the body
    raises (else it passes to the journal the body returns).

    Raises:
        SessionInUse: another process holds the session (when `lock` is None).
    """
    own = lock is None
    lock = lock or SessionLock.acquire(path)
    try:
        yield lock
    except BaseException:
        if own:
            lock.release()
        raise


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
        with _held(p, lock) as lock:
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

    @classmethod
    def open(cls, path: str | os.PathLike, *, lock: SessionLock | None = None) -> Journal:
        """Opens the journal at `path` for appending; its tables and version are checked, not its values.

        Raises:
            SessionInUse: another process holds the session (when `lock` is None).
            InputError: no file, not a session, a newer version, or tables that
                are missing or unreadable (the file is left as it is).
        """
        p = Path(path)
        kind = session_kind(p, "no triage session to resume (start one without --resume)")
        with _held(p, lock) as lock:
            contents = Contents(structure="the file is empty") if kind == "empty" else read_file(p)
            if contents.version is not None and contents.version > JOURNAL_VERSION:
                raise newer(p, contents.version)
            if contents.structure:
                raise damaged(p, contents.structure, contents.recognised or kind == "empty")
            return cls._connect(p, lock)

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
            InputError: an event is not as the journal writes it.
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
