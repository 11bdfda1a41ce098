"""How a triage session comes back from its journal: the events replayed, or walked up to the snapshot
(a mixin of `Triage`).

The session is event-sourced: its journal's events are the session, and
after each round a snapshot (`fastlbp.triage.snapshot`) stores what the
events alone cannot give back without replaying every round: the messages
that round started from, the method `auto` chose, `--learn`'s probabilities
and the events the model refused. A resume walks the events the snapshot
covers without running a round (labels, skips, focus, undo history,
settings: `_walk`), then runs the last round again from the stored messages
(`_restore`): one round for any number of labels (two when the process was
killed during the last label's round, whose event is replayed after it), and
the messages, marginals and ranking after a resume are the ones the session
had (bit for bit on the same device). A journal without a usable snapshot
(written by an earlier release, edited, recovered) replays every event and
its round (`replay`).

The replay is total: events no single session writes (two processes
appending to one file did: an undo with nothing to undo, a label of a
labelled alarm) are skipped with a note instead of failing the resume.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fastlbp.core.errors import ContradictoryEvidence, InferenceError, SettingsError
from fastlbp.core.text import safe_name
from fastlbp.inference import methods
from fastlbp.inference.session import Session
from fastlbp.triage.journal import SessionWriteError
from fastlbp.triage.outcome import Outcome
from fastlbp.triage.snapshot import Snapshot, Unusable, encode
from fastlbp.triage.state_settings import session_for
from fastlbp.triage.stored import read_change


class ReplayMixin:
    """`Triage.replay` and the snapshot: storing it (`_save`) and restoring from it (`_restore`)."""

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
        if rows:
            self._unsaved = True

        def refusal(seq: int, out: Outcome, prefix: str = "") -> str | None:
            """None for an applied event; else the note of a refused one, which a snapshot keeps."""
            if out.accepted:
                return None
            self._refused[seq] = prefix + out.message
            return self._refused[seq]

        return self._apply_events(
            rows,
            settings=lambda seq, payload: refusal(
                seq, self._apply_settings(*read_change(payload, self.settings)),  # checked on reading
                f"event {seq}: "),
            label=lambda seq, var, truth: refusal(seq, self._apply_label(seq, var, truth, replaying=True)),
            undo=lambda seq: refusal(seq, self._apply_undo(seq, replaying=True)))

    def _walk(self, rows, refused: dict[int, str]) -> list[str]:
        """Applies events (after the session's start) as `replay` does, without a round: labels, skips,
        focus, undo history, settings. `refused`: the events the model refused, skipped with their note.
        Returns the notes for the user."""
        # The settings the last "settings" event names, taken once the walk is done.
        walked = [self.settings, self.custom_order, self.order_file]

        def change(seq: int, payload: str) -> None:
            walked[:] = read_change(payload, walked[0])

        def label(seq: int, var: int, truth: bool) -> None:
            self.session.label(var, truth)
            self._labelled(seq, var)

        def undo(seq: int) -> None:
            kind_undone, done, var = self._history.pop()
            self.focus = None
            if kind_undone == "skip":
                self.skipped = [(s, v) for s, v in self.skipped if s != done]
            else:
                self.order = [(s, v) for s, v in self.order if s != done]
                self.session.unlabel(var)

        notes = self._apply_events(rows, settings=change, label=label, undo=undo, refused=refused)
        settings, order, order_file = walked
        if settings != self.settings or order != self.custom_order:
            # The session the last "settings" event made (`_run_with`), with the evidence so far.
            session = session_for(self.session.model, settings, order, order_file)
            session.labels, session.soft = dict(self.session.labels), dict(self.session.soft)
            self.session, self.settings = session, settings
            self.custom_order, self.order_file = order, order_file
        return notes

    def _apply_events(self, rows, *, settings: Callable[[int, str], str | None],
                      label: Callable[[int, int, bool], str | None], undo: Callable[[int], str | None],
                      refused: dict[int, str] | None = None) -> list[str]:
        """Applies journal events in order, the same way for `replay` and `_walk`; the notes for the user.

        Skips, jumps and the events a single session never writes (an undo with nothing to undo; a label,
        skip or jump of a labelled alarm) are handled here; a settings change, a label and an undo by
        `settings(seq, payload)`, `label(seq, var, truth)` and `undo(seq)`, each returning the note of an
        event it did not apply, or None.

        Args:
            rows: (seq, kind, alarm, truth, ...) events, every alarm a variable of the model.
            refused: {seq: note} events not to apply, each noted.
        """
        notes = []
        refused = refused or {}
        for seq, kind, alarm, truth, *_ in rows:
            var = None if alarm is None or kind == "settings" else self.model.index[alarm]
            note = None
            if seq in refused:
                note = refused[seq]
            elif kind == "settings":
                note = settings(seq, alarm)
            elif var is not None and var in self.labels:
                note = _labelled_note(seq, kind, alarm)
            elif kind == "label":
                note = label(seq, var, truth)
            elif kind == "skip":
                self._skipped(seq, var)
            elif kind == "jump":
                self.focus = var
            elif not self._history:
                note = _nothing_to_undo(seq)
            else:
                note = undo(seq)
            if note is not None:
                notes.append(note)
        return notes


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

