"""The triage journal: an SQLite file of settings and events that makes a session durable.

A session is event-sourced (`fastlbp.triage.state`): every action that
changes state is appended here and committed before the user is told it was
accepted; inference state is never stored. The file has two tables:

    meta    (key TEXT PRIMARY KEY, value TEXT)   version, fingerprint, graph, settings (JSON), created
    events  (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT, alarm TEXT, truth INTEGER, at REAL)

`kind` is "label" (alarm, truth), "skip" (alarm), "jump" (alarm) or "undo".
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

import numpy as np

from fastlbp.errors import InputError
from fastlbp.model import Model
from fastlbp.ranking import alarm_vars

# The settings JSON gained "backend" without a new version: a journal without it resumes with
# the default backend (`fastlbp.triage.state.stored_settings`), and older readers ignore the key.
JOURNAL_VERSION = 1


def fingerprint(model: Model) -> str:
    """sha256 of the graph arrays and variable names: a journal only resumes on its own graph."""
    h = hashlib.sha256()
    g = model.graph
    for name in ("factor_offsets", "edge_var", "factor_kind", "p1", "p2"):
        h.update(np.ascontiguousarray(np.asarray(getattr(g, name))).tobytes())
    h.update("\0".join(model.var_names).encode())
    h.update(np.asarray(alarm_vars(model)).tobytes())
    return h.hexdigest()


def default_session_path(graph: str | os.PathLike) -> Path:
    """`GRAPH.triage.db` next to the graph file or directory."""
    p = Path(graph)
    return p.with_name(p.name.rstrip("/") + ".triage.db")


class Journal:
    """The SQLite file: `meta` (key, value) and `events` (seq, kind, alarm, truth, at).

    Each append is its own committed transaction with synchronous=FULL, so a
    returned append survives a kill of the process (and of the machine).
    """

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self.conn = conn

    @classmethod
    def create(cls, path: str | os.PathLike, meta: dict[str, str], *, overwrite: bool = False) -> Journal:
        p = Path(path)
        if p.exists():
            if not overwrite:
                raise InputError(str(p), None, "a triage session exists here: pass --resume to continue "
                                               "it or --fresh to start over")
            p.unlink()
        # Build the file under a temporary name and rename it: a half-made
        # journal is never mistaken for a session.
        tmp = p.with_name(p.name + ".tmp")
        tmp.unlink(missing_ok=True)
        conn = sqlite3.connect(tmp)
        conn.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,"
            " alarm TEXT, truth INTEGER, at REAL NOT NULL);")
        conn.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
        conn.commit()
        conn.close()
        os.replace(tmp, p)
        return cls._connect(p)

    @classmethod
    def open(cls, path: str | os.PathLike) -> Journal:
        p = Path(path)
        if not p.is_file():
            raise InputError(str(p), None, "no triage session to resume (start one without --resume)")
        try:
            j = cls._connect(p)
            j.meta()
        except sqlite3.DatabaseError as err:
            raise InputError(str(p), None, f"not a triage session file ({err})") from None
        return j

    @classmethod
    def _connect(cls, p: Path) -> Journal:
        conn = sqlite3.connect(p, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        return cls(p, conn)

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def events(self) -> list[tuple[int, str, str | None, bool | None]]:
        rows = self.conn.execute("SELECT seq, kind, alarm, truth FROM events ORDER BY seq")
        return [(s, k, a, None if t is None else bool(t)) for s, k, a, t in rows]

    def append(self, kind: str, alarm: str | None = None, truth: bool | None = None) -> int:
        cur = self.conn.execute("INSERT INTO events (kind, alarm, truth, at) VALUES (?, ?, ?, ?)",
                                (kind, alarm, None if truth is None else int(truth), time.time()))
        return int(cur.lastrowid)

    def delete(self, seq: int) -> None:
        self.conn.execute("DELETE FROM events WHERE seq = ?", (seq,))

    def close(self) -> None:
        self.conn.close()

