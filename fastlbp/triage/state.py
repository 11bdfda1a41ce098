"""The triage session: a state machine of labels, skips, focus and undo over one model.

The session is event-sourced. Every action that changes state (label, undo,
skip, jump) is appended to its journal (`fastlbp.triage.journal`) and
committed *before* the user is told it was accepted. After each round the
session also stores a snapshot (`fastlbp.triage.snapshot`): the messages that
round started from, the method `auto` chose, `--learn`'s probabilities and
the events the model refused. A resume walks the events without running a
round (labels, skips, focus, undo history, settings), then runs the last
round again from the stored messages: one round for any number of labels
(two when the process was killed during the last label's round, whose event
is replayed after it), and the messages, marginals and ranking after a
resume are the ones the session had (bit for bit on the same device). A
journal without a usable snapshot (written by an earlier release, edited,
recovered) replays every event and its round, as before. A kill at any
moment therefore loses at most an action that was never acknowledged. A
label that contradicts the model (probability 0) is removed from the journal
again and reported; so is an action the journal cannot store (a full disk):
it is not applied.

A resume trusts nothing in the file it did not write: every stored value is
checked (`fastlbp.triage.journal.read_contents`, `stored_settings`), a
damaged file is reported and left as it is (`recover=True` starts a new
session from its valid events, keeping it as a backup), and a custom order is
stored as its text, never as a path to open again. The replay is total:
events no single session writes (two processes appending to one file did:
an undo with nothing to undo, a label of a labelled alarm) are skipped with
a note instead of failing the resume.

Inference settings given on a resume are applied (`change_settings`): a
round with the new settings runs first, then a "settings" event is
journaled, so a later resume switches at the same point and repeats the
rounds exactly; settings that cannot run are refused, and nothing changes.

    t = Triage.open(model, "race.triage.db", graph_path="race.json", settings=Settings())
    t.current               # variable index of the alarm on top (or jumped to)
    t.label(True)           # -> Outcome with the round's time
    t.explain(t.current)    # strongest derivations
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np

from fastlbp.core.errors import ContradictoryEvidence, InferenceError, InputError, SettingsError
from fastlbp.core.model import Model
from fastlbp.core.settings import CONTROL_FIELDS, Settings
from fastlbp.core.text import safe_name
from fastlbp.inference import methods
from fastlbp.inference.explain import Explanation, clause_index, explain, explain_name
from fastlbp.inference.ranking import alarm_vars, order_alarms
from fastlbp.inference.session import Session
from fastlbp.triage.evidence import Learning, OnlineRules, Started, StartEvidence, stored_start
from fastlbp.triage.journal import (
    Contents,
    Journal,
    SessionWriteError,
    backup_path,
    check_target,
    classify,
    damaged,
    move_aside,
    not_a_session,
    read_file,
)
from fastlbp.triage.lock import SessionLock
from fastlbp.triage.outcome import Outcome, RoundInfo, how_made
from fastlbp.triage.snapshot import Snapshot, Unusable, decode, encode
from fastlbp.triage.stored import (
    change_payload,
    check_changes,
    check_identity,
    custom_order,
    describe_change,
    meta_problem,
    new_meta,
    read_change,
    settings_text,
    stored_meta,
    stored_settings,
)
from schedules.plan import make_plan

__all__ = ["Triage", "Outcome", "RoundInfo", "stored_settings"]


class Triage:
    """A triage session over one model: labels, skips, focus, and the journal that makes them durable."""

    def __init__(self, model: Model, journal: Journal | None, settings: Settings, *,
                 order: str | None = None, order_source: str | None = None, order_file: str | None = None,
                 start: Started | None = None, learning: Learning | None = None):
        """A session on `model` writing to `journal` (None until `open` has made it).

        Args:
            settings: the inference settings; with a custom order, its schedule is
                `CUSTOM_ORDER[:OPTIONS]` and `order` holds the order's text.
            order_source: the name errors in the order are reported under.
            order_file: the file the custom order was read from (stored with it).
            start: the evidence the session starts with, applied to `model` (`Started.of`).
            learning: `triage --learn`: EM steps after each label (`fastlbp.triage.evidence`).
        """
        self.model = model
        self.journal = journal
        self.settings = settings
        self.custom_order, self.order_file = order, order_file
        self.start = start or Started()
        self.session = _session(model, settings, order, order_source)
        self.session.labels.update({v: t for v, t in self.start.labels.items() if v not in model.labels})
        self.session.soft = dict(self.start.soft)
        self.learning = learning
        self.online = None if learning is None else OnlineRules(model, self.session.labels, learning,
                                                                settings, self.session.soft)
        self.alarms = alarm_vars(model)  # (A,) int64
        self.alarm_set = set(self.alarms.tolist())
        self.order: list[tuple[int, int]] = []  # (journal seq, var) of labels, oldest first
        self.skipped: list[tuple[int, int]] = []
        self.focus: int | None = None
        self.rounds: list[RoundInfo] = []
        self._history: list[tuple[str, int, int]] = []  # (kind, seq, var): what undo reverts
        self._ranking: np.ndarray = np.zeros(0, np.int64)
        self._clauses_by_head: dict[int, np.ndarray] | None = None
        self.replay_notes: list[str] = []  # events of the journal that were not applied, and why
        # Events left in the journal that the model refused, with the note a resume shows (a snapshot
        # stores them: only a round can tell).
        self._refused: dict[int, str] = {}
        # The messages the last round started from (None: a cold round), for the snapshot.
        self._round_input = None
        self._unsaved = False  # events applied since the last snapshot (`close` writes one)
        self.resume_rounds = 0  # rounds a resume ran (`Session.run` calls of the restore and replay)

    # Opening --------------------------------------------------------------
    @classmethod
    def open(cls, model: Model, path: str | os.PathLike, *, graph_path: str | None = None,
             resume: bool = False, overwrite: bool = False, recover: bool = False,
             settings: Settings | None = None, evidence: StartEvidence | None = None,
             learning: Learning | None = None) -> Triage:
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
                learning: Learning | None) -> Triage:
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
    def _resume(cls, model: Model, path: Path, lock: SessionLock, settings: Settings) -> Triage:
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

            def fresh() -> Triage:
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
                 graph_path: str | None) -> Triage:
        kind, reason = classify(path)
        if kind == "missing":
            raise InputError(str(path), None, "no triage session to recover")
        if kind == "foreign":
            raise not_a_session(path, reason)
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

    # The snapshot (`fastlbp.triage.snapshot`) ---------------------------------------
    def _save(self) -> str:
        """Stores the snapshot of the state now; "" or, when it cannot be written, a note for the user.

        A snapshot that cannot be written loses nothing (the events are the session): the next resume
        replays the rounds since the last one stored.
        """
        choice = self.session.choice
        learned = e_steps = None
        if self.online is not None:
            learned = np.stack([*self.online.before, self.online.learner.probability])
            e_steps = self.online.learner.warm_starts()
        messages = None if self._round_input is None else np.asarray(self._round_input)
        state, blob, learned_blob = encode(self._refused, None if choice is None else (choice.method,
                                                                                       choice.reason),
                                           messages, learned, e_steps)
        try:
            self.journal.write_snapshot(state, blob, learned_blob)
        except SessionWriteError as err:
            return f" (the session's snapshot was not saved: {err.message}; a resume replays the rounds " \
                   f"since the last one saved)"
        self._unsaved = False
        return ""

    def _restore(self, rows, snap: Snapshot) -> list[str]:
        """The state of a snapshot and the events after it (`rows`: the journal's): its notes for the user.

        The events the snapshot covers are walked without a round, the last round runs again from its
        stored messages, and the events after the snapshot are replayed (a round per label or undo).

        Raises:
            Unusable: the snapshot does not fit the state its events give (another number of labels
                learned from, messages of another length or precision); `self` is then spent.
        """
        covered = [r for r in rows if r[0] <= snap.seq]
        notes = self._walk(covered, snap.refused)
        if self.online is not None:
            rules = len(self.online.learner.names)
            if snap.learned is None or snap.learned.shape != (len(self.order) + 1, rules):
                raise Unusable("its learned probabilities do not match the labels")
            self.online.before = [p.copy() for p in snap.learned[:-1]]
            self.online.learner.probability = snap.learned[-1].copy()
            try:
                self.online.learner.set_warm_starts(snap.e_steps)
            except SettingsError as err:
                raise Unusable(f"its E-step messages do not fit ({err})") from None
            self.session.set_parameters(self.online.model_now())
        elif snap.learned is not None:
            raise Unusable("it holds learned probabilities, and the session learns none")
        if snap.choice is not None and methods.chooses(self.settings.method):
            self.session.choice = methods.Choice(*snap.choice)
        if snap.messages is not None:
            self.session.messages = _device_messages(snap.messages, self.session, self.model.graph.num_edges)
        start = len(self.rounds)
        try:
            self._round(warm=snap.messages is not None)
        except (ContradictoryEvidence, InferenceError) as err:
            raise Unusable(f"its last round cannot run again ({err})") from None
        self._refused = dict(snap.refused)
        notes += self.replay([r for r in rows if r[0] > snap.seq])
        self.resume_rounds = len(self.rounds) - start
        return notes

    def _walk(self, rows, refused: dict[int, str]) -> list[str]:
        """Applies events (after the session's start) as `replay` does, without a round: labels, skips,
        focus, undo history, settings. `refused`: the events the model refused, skipped with their note.
        Returns the notes for the user."""
        notes = []
        settings, order, order_file = self.settings, self.custom_order, self.order_file
        for seq, kind, alarm, truth, *_ in rows:
            var = None if alarm is None or kind == "settings" else self.model.index[alarm]
            if seq in refused:
                notes.append(refused[seq])
            elif kind == "settings":
                settings, order, order_file = read_change(alarm, settings)
            elif var is not None and var in self.labels:
                notes.append(_labelled_note(seq, kind, alarm))
            elif kind == "label":
                self.session.label(var, truth)
                self._labelled(seq, var)
            elif kind == "skip":
                self._skipped(seq, var)
            elif kind == "jump":
                self.focus = var
            elif not self._history:
                notes.append(_nothing_to_undo(seq))
            else:
                kind_undone, done, var = self._history.pop()
                self.focus = None
                if kind_undone == "skip":
                    self.skipped = [(s, v) for s, v in self.skipped if s != done]
                else:
                    self.order = [(s, v) for s, v in self.order if s != done]
                    self.session.unlabel(var)
        if settings != self.settings or order != self.custom_order:
            # The session the last "settings" event made (`_run_with`), with the evidence so far.
            session = _session(self.session.model, settings, order, order_file)
            session.labels, session.soft = dict(self.session.labels), dict(self.session.soft)
            self.session, self.settings = session, settings
            self.custom_order, self.order_file = order, order_file
        return notes

    # State ----------------------------------------------------------------
    @property
    def labels(self) -> dict[int, bool]:
        return self.session.labels

    @property
    def marginals(self) -> np.ndarray:
        return self.session.last.marginals

    @property
    def ranking(self) -> np.ndarray:
        """(A',) unlabelled alarms by decreasing probability."""
        return self._ranking

    @property
    def current(self) -> int | None:
        """The alarm to label next: the focus if set, else the top one not skipped."""
        if self.focus is not None:
            return self.focus
        skipped = {v for _, v in self.skipped}
        for v in self._ranking.tolist():
            if v not in skipped:
                return v
        return int(self._ranking[0]) if len(self._ranking) else None

    def rank_of(self, var: int) -> int | None:
        hits = np.flatnonzero(self._ranking == var)
        return int(hits[0]) + 1 if hits.size else None

    def _first_round(self) -> None:
        self._round(warm=False)

    def _round(self, warm: bool = True, start: float | None = None, learn_s: float | None = None
               ) -> RoundInfo:
        """A round (from `start`, a `time.perf_counter()` before the learning that preceded it)."""
        start = time.perf_counter() if start is None else start
        given = self.session.messages if warm else None
        rnd = self.session.run(warm=warm)
        self._round_input = given
        self._ranking = order_alarms(rnd.log_odds, self.alarms, exclude=self.session.labels)
        info = RoundInfo(time.perf_counter() - start, rnd.iterations, rnd.converged, rnd.delta, rnd.remedy,
                         how_made(rnd), learn_s)
        self.rounds.append(info)
        return info

    # Settings -------------------------------------------------------------
    def change_settings(self, changes: dict) -> Outcome:
        """Runs on with `changes` to the inference settings (e.g. {"schedule": "seqfix"}), journaled.

        A round with the new settings runs first (warm when only tol,
        max_iters or damping change; else a new runner and a cold round, with
        every label); only then is the change journaled and applied. Settings
        that cannot run (a GPU backend without a GPU, exact inference on a graph
        too wide, a custom order that does not fit) are refused, and the session
        is as it was.

        Args:
            changes: `Settings` fields and values; a schedule may name a custom
                order's file (its text is stored, never its path).

        Returns:
            accepted with "no change" when the settings are the current ones.
        """
        try:
            target = dataclasses.replace(self.settings, **changes)
            if "schedule" in changes:
                target, order, order_file = custom_order(target)
            else:
                order, order_file = self.custom_order, self.order_file
        except (InputError, SettingsError) as err:
            return Outcome(False, f"the settings cannot be changed: {_text(err)}")
        if target == self.settings and order == self.custom_order:
            return Outcome(True, "no change")
        what = self._describe(target, order)
        try:
            prepared = self._run_with(target, order, order_file)
        except (InputError, SettingsError, InferenceError, ContradictoryEvidence) as err:
            return _refused(what, err, self.settings)
        try:
            self.journal.append_settings(change_payload(target, order, order_file))
        except SessionWriteError as err:
            return _not_saved("settings change", err)
        out = self._switch(target, order, order_file, prepared, what)
        return dataclasses.replace(out, message=out.message + self._save())

    def _apply_settings(self, settings: Settings, order: str | None, order_file: str | None) -> Outcome:
        """Replays a "settings" event: a round with `settings`, then the switch (refused: no switch)."""
        what = self._describe(settings, order)
        try:
            prepared = self._run_with(settings, order, order_file)
        except (InputError, SettingsError, InferenceError, ContradictoryEvidence) as err:
            return _refused(what, err, self.settings)
        return self._switch(settings, order, order_file, prepared, what)

    def _describe(self, settings: Settings, order: str | None) -> str:
        what = describe_change(self.settings, settings)
        if order != self.custom_order:
            what = "the custom order replaced" + ("" if what == "no change" else f", {what}")
        return what

    def _switch(self, settings: Settings, order: str | None, order_file: str | None, prepared,
                what: str) -> Outcome:
        session, rnd, seconds, given = prepared
        self.session, self.settings = session, settings
        self._round_input, self._unsaved = given, True
        self.custom_order, self.order_file = order, order_file
        self._ranking = order_alarms(rnd.log_odds, self.alarms, exclude=self.session.labels)
        info = RoundInfo(seconds, rnd.iterations, rnd.converged, rnd.delta, rnd.remedy, how_made(rnd))
        self.rounds.append(info)
        return Outcome(True, f"settings changed: {what}", info)

    def _run_with(self, settings: Settings, order: str | None, source: str | None):
        """(session, round, seconds, the messages it started from or None): a round with `settings` and
        every label, leaving `self` as it is."""
        start = time.perf_counter()
        fixed = order != self.custom_order or any(
            getattr(settings, f.name) != getattr(self.settings, f.name)
            for f in dataclasses.fields(Settings) if f.name not in CONTROL_FIELDS)
        if fixed:
            # The evidence and the probabilities learned so far carry over.
            session = _session(self.session.model, settings, order, source)
            session.labels = dict(self.session.labels)
            session.soft = dict(self.session.soft)
            given = None
            rnd = session.run(warm=False)
        else:
            # tol, max_iters, damping are data to the compiled round: a copy of the session with its
            # messages runs warm, and the session itself stays untouched until the switch.
            session = self.session.fork()
            session.settings = settings
            given = session.messages
            rnd = session.run(warm=True)
        return session, rnd, time.perf_counter() - start, given

    def replay(self, rows) -> list[str]:
        """Re-applies the journal's events (after the cold round); returns notes for the user.

        Total: every journal `read_contents` accepts replays. Events a single
        session never writes (an undo with nothing to undo, a label, skip or
        jump of an alarm that is labelled) are skipped with a note; a label or
        undo the model refuses is noted and left in the file (a resume never
        writes to it).

        Args:
            rows: (seq, kind, alarm, truth, ...) events as `Contents.rows` holds them,
                every alarm a variable of the model.
        """
        notes = []
        for seq, kind, alarm, truth, *_ in rows:
            self._unsaved = True
            refused = None
            var = None if alarm is None or kind == "settings" else self.model.index[alarm]
            if kind == "settings":
                out = self._apply_settings(*read_change(alarm, self.settings))  # checked on reading
                if not out.accepted:
                    refused = f"event {seq}: {out.message}"
            elif var is not None and var in self.labels:
                notes.append(_labelled_note(seq, kind, alarm))
            elif kind == "label":
                out = self._apply_label(seq, var, truth, replaying=True)
                if not out.accepted:
                    refused = out.message
            elif kind == "skip":
                self._skipped(seq, var)
            elif kind == "jump":
                self.focus = var
            elif not self._history:
                notes.append(_nothing_to_undo(seq))
            else:
                out = self._apply_undo(seq, replaying=True)
                if not out.accepted:
                    refused = out.message
            if refused is not None:
                self._refused[seq] = refused
                notes.append(refused)
        return notes

    # Actions --------------------------------------------------------------
    def label(self, truth: bool, var: int | None = None) -> Outcome:
        """Labels `var` (default: the current alarm), journals it, and runs a warm round."""
        var = self.current if var is None else var
        if var is None:
            return Outcome(False, "no alarm left to label")
        if var in self.labels:
            return Outcome(False, self._labelled_already(var))
        try:
            seq = self.journal.append("label", self.model.var_names[var], truth)
        except SessionWriteError as err:
            return _not_saved("label", err)
        refused = len(self._refused)
        return self._saved(self._apply_label(seq, var, truth), refused)

    def _apply_label(self, seq: int, var: int, truth: bool, replaying: bool = False) -> Outcome:
        name = safe_name(self.model.var_names[var])  # for messages; every name shown goes through safe_name
        self.session.label(var, truth)
        start = time.perf_counter()
        learned = False
        try:
            learn_s = None
            if self.online is not None:
                learn_s, learned = self.online.learn(self.session.labels), True
                self.session.set_parameters(self.online.model_now())
            info = self._round(start=start, learn_s=learn_s)
        except ContradictoryEvidence as err:
            self.session.unlabel(var)
            if learned:
                self.online.back()
                self.session.set_parameters(self.online.model_now())
            message = f"refused {name} = {'true' if truth else 'false'}: {err}"
            return Outcome(False, message + ("" if replaying else self._unjournal(seq, message)))
        self._labelled(seq, var)
        return Outcome(True, f"{name} = {'true' if truth else 'false'}", info)

    def _labelled(self, seq: int, var: int) -> None:
        """The bookkeeping of an accepted label (event `seq`) of `var`, which `session.labels` holds."""
        self.order.append((seq, var))
        self._history.append(("label", seq, var))
        self.skipped = [(s, v) for s, v in self.skipped if v != var]
        self.focus = None

    def _skipped(self, seq: int, var: int) -> None:
        self.skipped.append((seq, var))
        self._history.append(("skip", seq, var))
        self.focus = None

    def _saved(self, out: Outcome, refused: int) -> Outcome:
        """`out` of a label or undo, after storing the snapshot where it changed (a note if it could not be).

        Args:
            refused: `len(self._refused)` before the action.
        """
        self._unsaved = True
        if (out.accepted and out.round is not None) or len(self._refused) > refused:
            return dataclasses.replace(out, message=out.message + self._save())
        # No round ran (an undo of a skip) or the event is gone again: a resume replays what follows the
        # stored snapshot without a round, and `close` stores a new one.
        return out

    def skip(self) -> Outcome:
        var = self.current
        if var is None:
            return Outcome(False, "no alarm to skip")
        open_count = len(self._ranking)
        if len({v for _, v in self.skipped} | {var}) >= open_count:
            return Outcome(False, "every open alarm is skipped already; label one or undo a skip")
        try:
            seq = self.journal.append("skip", self.model.var_names[var])
        except SessionWriteError as err:
            return _not_saved("skip", err)
        self._skipped(seq, var)
        self._unsaved = True
        return Outcome(True, f"skipped {safe_name(self.model.var_names[var])}")

    def undo(self) -> Outcome:
        """Reverts the last label (with a warm round) or skip."""
        if not self._history:
            return Outcome(False, "nothing to undo")
        try:
            seq = self.journal.append("undo")
        except SessionWriteError as err:
            return _not_saved("undo", err)
        refused = len(self._refused)
        return self._saved(self._apply_undo(seq), refused)

    def _apply_undo(self, seq: int, replaying: bool = False) -> Outcome:
        entry = self._history.pop()
        kind, done, var = entry
        name = safe_name(self.model.var_names[var])
        focus = self.focus
        self.focus = None
        if kind == "skip":
            self.skipped = [(s, v) for s, v in self.skipped if s != done]
            return Outcome(True, f"undid skip of {name}")
        truth, order = self.labels[var], self.order
        self.order = [(s, v) for s, v in self.order if s != done]
        self.session.unlabel(var)
        learned = None
        if self.online is not None:
            # The probabilities learned before this label come back (no EM step: an undo is exact).
            learned = self.online.back()
            self.session.set_parameters(self.online.model_now())
        try:
            info = self._round()
        except ContradictoryEvidence as err:
            # Removing evidence cannot make it contradictory; should the round say so anyway,
            # the undo is refused like a label, and the session stays as it was.
            self.session.label(var, truth)
            if learned is not None:
                self.online.again(learned)
                self.session.set_parameters(self.online.model_now())
            self.order, self.focus = order, focus
            self._history.append(entry)
            message = f"refused undo of {name}: {err}"
            return Outcome(False, message + ("" if replaying else self._unjournal(seq, message)))
        return Outcome(True, f"undid label of {name}", info)

    def _labelled_already(self, var: int) -> str:
        name = safe_name(self.model.var_names[var])
        if var in self.start.labels and var not in self.model.labels:
            return f"{name} has a label carried from the older version (it stays for this session)"
        return f"{name} is labelled already (undo first)"

    def learned(self) -> dict[str, float]:
        """{rule name: probability} the rounds rank with now (the graph's own without `--learn`)."""
        if self.online is not None:
            return self.online.current()
        dg = self.model.meta.get("derivation")
        return {r.name: r.probability for r in dg.rules} if dg is not None else {}

    def _unjournal(self, seq: int, note: str) -> str:
        """Deletes a refused action's event; a note for the user if it cannot (`note`: what a resume
        says of the event left in the file)."""
        try:
            self.journal.delete(seq)
        except SessionWriteError as err:
            self._refused[seq] = note
            return f" (it stays in the session file, which cannot be written: {err.message}; a resume " \
                   f"refuses it again)"
        return ""

    def find(self, query: str) -> int | None:
        """An alarm by name (`Model.resolve`: spaces the name lacks are forgiven), or by its 1-based rank
        among open alarms."""
        q = query.strip()
        try:
            var = self.model.resolve(q).var
        except KeyError:
            var = -1
        if var in self.alarm_set:
            return var
        if q.isdigit() and 1 <= int(q) <= len(self._ranking):
            return int(self._ranking[int(q) - 1])
        return None

    def _not_an_alarm(self, query: str) -> str:
        """Why `query` is no alarm to jump to: a tuple that is not one (and what became of it), or unknown."""
        try:
            r = self.model.resolve(query.strip())
        except KeyError:
            return ""
        what = f"; it is {r.reason}" if r.reason else ""
        name = safe_name(r.name)
        return f": {name} is a tuple of the graph but not an alarm{what} (`why {name}` explains it)"

    def jump(self, query: str) -> Outcome:
        var = self.find(query)
        if var is None:
            known = self._not_an_alarm(query)
            if known:
                return Outcome(False, f"no alarm {query!r}{known}")
            hits = self.search(query, limit=5)
            shown = ", ".join(safe_name(self.model.var_names[v]) for v in hits)
            hint = f"; did you mean {shown}?" if hits else ""
            return Outcome(False, f"no alarm {query!r}{hint}")
        if var in self.labels:
            return Outcome(False, self._labelled_already(var))
        try:
            self.journal.append("jump", self.model.var_names[var])
        except SessionWriteError as err:
            return _not_saved("jump", err)
        self.focus = var
        self._unsaved = True
        return Outcome(True, f"now at {safe_name(self.model.var_names[var])}")

    def search(self, text: str, limit: int = 20) -> list[int]:
        """Alarms whose name contains `text` (case-insensitive), open ones by rank, then labelled ones,
        then carried ones."""
        t = text.strip().lower()
        names = self.model.var_names
        hits = [v for v in self._ranking.tolist() if t in names[v].lower()]
        hits += [v for _, v in self.order if t in names[v].lower()]
        hits += [v for v in self.start.labels if v in self.alarm_set and t in names[v].lower()]
        return hits[:limit]

    def explain(self, var: int | str, k: int = 3) -> Explanation:
        """The `k` strongest derivations of a variable, or of any tuple of the graph by name.

        Raises:
            KeyError: an unknown name.
        """
        dg = self.model.meta.get("derivation")
        if dg is not None and self._clauses_by_head is None:
            self._clauses_by_head = clause_index(dg)
        # The session's model: its rule probabilities are the learned ones with --learn.
        model = self.session.model
        if isinstance(var, str):
            return explain_name(model, self.marginals, var, k, clauses_by_head=self._clauses_by_head)
        return explain(model, self.marginals, var, k, clauses_by_head=self._clauses_by_head)

    def stats(self) -> dict:
        truths = [self.labels[v] for _, v in self.order]
        times = np.array([r.seconds for r in self.rounds[1:]]) if len(self.rounds) > 1 else np.zeros(0)
        last = self.rounds[-1]
        return {
            "labelled": len(truths), "true": sum(truths), "false": len(truths) - sum(truths),
            "open": len(self._ranking), "skipped": len(self.skipped), "rounds": len(self.rounds),
            "median_round_s": float(np.median(times)) if times.size else None,
            "max_round_s": float(times.max()) if times.size else None,
            "last_iterations": last.iterations, "last_converged": last.converged,
            "session": str(self.journal.path),
            "carried": len(self.start.labels), "soft": len(self.start.soft),
            "learning": self.learning is not None,
        }


def _text(err: Exception) -> str:
    """An error for a message: an input error names its file and line (a custom order's)."""
    return str(err)


def _labelled_note(seq: int, kind: str, alarm: str) -> str:
    return f"skipped event {seq}: {kind} of {safe_name(alarm)}, which is labelled already"


def _nothing_to_undo(seq: int) -> str:
    return f"skipped event {seq}: an undo with nothing to undo"


def _device_messages(messages: np.ndarray, session: Session, edges: int):
    """Stored messages as the session's warm start.

    Raises:
        Unusable: of another length or precision than the session's.
    """
    import jax.numpy as jnp

    from fastlbp.core.jax_setup import float64_context

    if messages.shape != (edges,) or messages.dtype != np.dtype(session.dtype):
        raise Unusable(f"its messages ({messages.size:,} {messages.dtype.name}) are not the session's "
                       f"({edges:,} {np.dtype(session.dtype).name})")
    with float64_context():
        return jnp.asarray(messages)


def _refused(what: str, err: Exception, kept: Settings) -> Outcome:
    return Outcome(False, f"refused the settings change ({what}): {_text(err)}; the session is unchanged "
                          f"({settings_text(kept)})")


def _not_saved(what: str, err: SessionWriteError) -> Outcome:
    return Outcome(False, f"the {what} was not saved, so it is not applied: {err.message}; the session is "
                          f"as it was (try again, or quit)")


def _session(model: Model, settings: Settings, order: str | None, source: str | None) -> Session:
    """The `Session` of `settings`; a custom order runs from its stored text, which its plan carries
    (`schedules.plan.Spec.order`): no path from the session file is ever opened."""
    session = Session(model, settings) if order is None else Session(
        model, settings, plan=make_plan(settings, order=order, source=source))
    session.compile_flags()  # the first label compiles nothing
    return session
