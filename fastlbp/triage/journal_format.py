"""The file format of a triage session's journal: its tables, versions and kinds of event.

A session is event-sourced (`fastlbp.triage.state`): every action that
changes state is appended to its journal (`fastlbp.triage.journal.Journal`)
and committed before the user is told it was accepted; inference state is
never stored. The file is SQLite, with two tables:

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
the events it covers (`events_digest`) and replays them all when it does not
match. Earlier releases read a journal with it as before (they ignore the
table, so the version is unchanged) and leave it stale; a stale snapshot is
still used for the events it covers.

This module holds what the reader (`fastlbp.triage.journal_reading`) and the
writer (`fastlbp.triage.journal`) agree on: the SQL, the whole schema a
journal may have, the versions, its JSON values, the graph's fingerprint and the events'
digest.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable

import numpy as np

from fastlbp.core.errors import SettingsError
from fastlbp.core.model import Model
from fastlbp.inference.ranking import alarm_vars

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
# The whole of `sqlite_master` in a journal `fastlbp.triage.journal` wrote (every version has had this
# schema): (type, name, table, sql). Anything else is refused: a trigger or a view can change what is stored
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


def stored_json(text: str):
    """A JSON value the journal stores (a meta entry, a "settings" event's payload), parsed.

    Raises:
        SettingsError: not JSON (a resume reports it as damage).
    """
    try:
        return json.loads(text)
    except ValueError as err:
        raise SettingsError(f"not JSON: {err}") from None


def fingerprint(model: Model) -> str:
    """sha256 of the graph arrays and variable names: a journal only resumes on its own graph."""
    h = hashlib.sha256()
    g = model.graph
    for name in ("factor_offsets", "edge_var", "factor_kind", "p1", "p2"):
        h.update(np.ascontiguousarray(np.asarray(getattr(g, name))).tobytes())
    h.update("\0".join(model.var_names).encode())
    h.update(np.asarray(alarm_vars(model)).tobytes())
    return h.hexdigest()



def events_digest(rows: Iterable[tuple]) -> str:
    """sha256 of events (seq, kind, alarm, truth, ...) as stored (truth 0, 1 or None): a snapshot's."""
    h = hashlib.sha256()
    for seq, kind, alarm, truth, *_ in rows:
        h.update(f"{seq}\x00{kind}\x00{'' if alarm is None else alarm}\x00"
                 f"{'' if truth is None else int(truth)}\x01".encode("utf-8", "surrogatepass"))
    return h.hexdigest()
