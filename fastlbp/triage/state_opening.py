"""Opening and closing a triage session: a new one, a resumed one, a recovered one (a mixin of `Triage`).

A resume trusts nothing in the file it did not write: every stored value is
checked (`fastlbp.triage.journal_reading.read_contents`,
`fastlbp.triage.stored.stored_settings`), a damaged file is reported and left
as it is (`recover=True` starts a new session from its valid events, keeping
it as a backup), and a custom order is stored as its text, never as a path to
open again. A resumed session is restored from its snapshot and the events
after it, or by replaying every event (`fastlbp.triage.state_replay`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Self

from fastlbp.core.errors import InputError, SettingsError
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.triage.evidence import Learning, Started, StartEvidence, stored_start
from fastlbp.triage.journal import Journal, move_aside
from fastlbp.triage.journal_reading import (
    Contents,
    backup_path,
    check_target,
    damaged,
    read_file,
    session_kind,
)
from fastlbp.triage.lock import SessionLock
from fastlbp.triage.snapshot import Unusable, decode
from fastlbp.triage.stored import (
    check_changes,
    check_identity,
    custom_order,
    meta_problem,
    new_meta,
    stored_meta,
)


class OpeningMixin:
    """`Triage.open` (a new session, a resume, a recovery) and `Triage.close`."""

    @classmethod
    def open(cls, model: Model, path: str | os.PathLike, *, graph_path: str | None = None,
             resume: bool = False, overwrite: bool = False, recover: bool = False,
             settings: Settings | None = None, evidence: StartEvidence | None = None,
             learning: Learning | None = None) -> Self:
        """Starts a new session in `path`, or restores (resume) or recovers (recover) the one there.

        The session's file is locked for as long as the returned `Triage` is
        open (`close`): another process, or another `open` in this one, is
        refused. The inference settings (`Settings.inference()`: schedule,
        precision, tol, max_iters, damping, backend) are stored in the journal,
        a custom order as its text; a resumed session runs with the stored
        ones, so its rounds repeat exactly. A journal written before the backend
        was stored resumes with the default backend. Loading settings (cycles,
        compress) always come from `settings`: they shaped `model` before it
        got here.

        Args:
            overwrite: replace a session at `path` (never a file that is not one).
            recover: start a new session at `path` from the valid events of the
                damaged one there (its settings if valid, else `settings`); the
                damaged file is kept as `journal.backup_path(path)`. An intact
                session is simply resumed.
            evidence: a new session's evidence besides the graph's labels (carried labels, soft
                evidence: `fastlbp.triage.evidence.StartEvidence`), on `model` as loaded; stored in
                the journal, so a resume (which takes the stored one) starts from the same.
            learning: a new session learns the rule probabilities from its labels (stored too).

        Raises:
            InputError: no session to resume, a session already there (and not
                `overwrite`), a file that is not a session, a journal made for
                another graph or by a newer version, a damaged journal (the file
                is left as it is), or a file that cannot be written
                (`SessionWriteError`); `SessionInUse` when another holds it.
            ValueError: `recover` with `resume` or `overwrite`.
        """
        if recover and (resume or overwrite):
            raise ValueError("recover excludes resume and overwrite")
        if (resume or recover) and (evidence or learning is not None):
            raise ValueError("a resumed or recovered session keeps its stored evidence and learning")
        settings = settings or Settings()
        path = Path(path)
        lock = SessionLock.acquire(path)
        try:
            if resume:
                return cls._resume(model, path, lock, settings)
            if recover:
                return cls._recover(model, path, lock, settings, graph_path)
            evidence = evidence or StartEvidence()
            return cls._create(model, path, lock, settings, graph_path, overwrite, evidence, learning)
        except BaseException:
            lock.release()  # each opener closes what it opened itself
            raise

    @classmethod
    def _create(cls, model: Model, path: Path, lock: SessionLock, settings: Settings,
                graph_path: str | None, overwrite: bool, evidence: StartEvidence,
                learning: Learning | None) -> Self:
        check_target(path, overwrite)  # before the first round, so that a refusal is quick
        stored, order, order_file = custom_order(settings)
        try:
            model, start = Started.of(evidence, model)
        except SettingsError as err:
            raise InputError(str(path), None, f"the session cannot start: {err}") from None
        meta = new_meta(model, graph_path, stored, order, order_file, evidence, learning)
        t = cls(model, None, stored, order=order, order_source=order_file, order_file=order_file, start=start,
                learning=learning)
        t._first_round()
        # Written only now: a session that cannot start leaves the one it would replace alone.
        t.journal = Journal.create(path, meta, overwrite=overwrite, lock=lock)
        return t

    @classmethod
    def _resume(cls, model: Model, path: Path, lock: SessionLock, settings: Settings) -> Self:
        journal = Journal.open(path, lock=lock)
        try:
            contents = journal.read(model.index)
            try:
                evidence, learning = stored_start(contents.meta)
                model, start = Started.of(evidence, model)
            except SettingsError as err:
                raise damaged(path, str(err), contents.recognised) from None
            check_identity(path, contents, model)
            check_changes(contents, settings)
            problem = contents.meta_problem or meta_problem(contents.meta)
            if problem is None:
                try:
                    stored, order = stored_meta(contents.meta, settings)
                except SettingsError as err:
                    problem = f"the stored settings are not valid ({err})"
            problem = problem or contents.events_problem
            if problem:
                raise damaged(path, problem, contents.recognised)
            journal.check_writable()

            def fresh() -> Self:
                return cls(model, journal, stored, order=order,
                           order_source=f"{path}: its stored custom order",
                           order_file=contents.meta.get("order_file") if order is not None else None,
                           start=start, learning=learning)

            t = fresh()
            row, problem = journal.read_snapshot()
            if row is not None:
                try:
                    t.replay_notes = t._restore(contents.rows, decode(row, contents.rows))
                    return t
                except Unusable as err:
                    problem = str(err)
                    t = fresh()  # the walk changed it
            t._first_round()
            t.replay_notes = t.replay(contents.rows)
            t.resume_rounds = len(t.rounds)
            if problem:
                t.replay_notes.insert(0, f"the session's snapshot was not used ({problem}); every label's "
                                         f"round was replayed")
            return t
        except BaseException:
            journal.lock = None  # `open` releases it
            journal.close()
            raise

    @classmethod
    def _recover(cls, model: Model, path: Path, lock: SessionLock, settings: Settings,
                 graph_path: str | None) -> Self:
        kind = session_kind(path, "no triage session to recover")
        if kind == "empty":
            contents = Contents(structure="the file is empty", recognised=True)
        else:
            contents = read_file(path, model.index)
        notes = []
        try:
            evidence, learning = stored_start(contents.meta)
            model, start = Started.of(evidence, model)
        except SettingsError as err:
            notes.append(f"the stored evidence and learning cannot be used ({err}); the new session starts "
                         f"without them")
            evidence, learning, start = StartEvidence(), None, Started()
        check_identity(path, contents, model)
        check_changes(contents, settings)
        problem = contents.problem or meta_problem(contents.meta)
        try:
            stored, order = stored_meta(contents.meta, settings)
            order_file = contents.meta.get("order_file")
            source = f"{path}: its stored custom order"
        except SettingsError as err:
            problem = problem or f"the stored settings are not valid ({err})"
            notes.append(f"the stored settings cannot be used ({err}); the new session runs with this "
                         f"command's settings")
            stored, order, order_file = custom_order(settings)
            source = order_file
        if problem is None:
            t = cls._resume(model, path, lock, settings)
            t.replay_notes.insert(0, f"nothing to recover: {path} is intact (resumed)")
            return t
        t = cls(model, None, stored, order=order, order_source=source, order_file=order_file, start=start,
                learning=learning)
        t._first_round()
        backup = backup_path(path)
        meta = new_meta(model, graph_path or contents.meta.get("graph"), stored, order, order_file, evidence,
                        learning)
        meta["recovered_from"] = str(backup)
        moved = move_aside(path, backup)
        try:
            t.journal = Journal.create(path, meta, rows=contents.rows, lock=lock)
        except BaseException:
            for src, dst in reversed(moved):
                os.rename(dst, src)
            raise
        total = "?" if contents.total is None else contents.total
        notes.append(f"recovered {len(contents.rows)} of {total} events from {path} ({problem}); the "
                     f"damaged file is kept as {backup}")
        try:
            t.replay_notes = notes + t.replay(contents.rows)
        except BaseException:
            t.journal.lock = None  # `open` releases it
            t.close()
            raise
        return t

    def close(self) -> None:
        """Stores a snapshot of events applied since the last one, then closes the journal and releases the
        session's lock (idempotent)."""
        if self.journal is not None:
            if self._unsaved and self.rounds:
                self._save()
            self.journal.close()
            self._unsaved = False
