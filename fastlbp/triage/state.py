"""The triage session: a state machine of labels, skips, focus and undo over one model.

The session is event-sourced. Every action that changes state (label, undo,
skip, jump) is appended to its journal (`fastlbp.triage.journal`) and
committed *before* the user is told it was accepted; after each round the
session also stores a snapshot (`fastlbp.triage.snapshot`), so that a resume
runs one round for any number of labels. A kill at any moment therefore
loses at most an action that was never acknowledged. A label that
contradicts the model (probability 0) is removed from the journal again and
reported; so is an action the journal cannot store (a full disk): it is not
applied.

`Triage` is this module's state and actions, with three mixins, each in its
own module:

    state_opening.py    `open` (new, resumed, recovered sessions) and `close`
    state_replay.py     the journal's events replayed or walked, the snapshot stored and restored
    state_settings.py   `change_settings`: other inference settings, journaled

    t = Triage.open(model, "race.triage.db", graph_path="race.json", settings=Settings())
    t.current               # variable index of the alarm on top (or jumped to)
    t.label(True)           # -> Outcome with the round's time
    t.explain(t.current)    # strongest derivations
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from fastlbp.core.errors import ContradictoryEvidence
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.core.text import safe_name
from fastlbp.inference.explain import Explanation, clause_index, explain, explain_name
from fastlbp.inference.ranking import alarm_vars, order_alarms
from fastlbp.triage.evidence import Learning, OnlineRules, Started
from fastlbp.triage.journal import Journal, SessionWriteError
from fastlbp.triage.outcome import Outcome, RoundInfo, how_made, not_saved
from fastlbp.triage.state_opening import OpeningMixin
from fastlbp.triage.state_replay import ReplayMixin
from fastlbp.triage.state_settings import SettingsMixin, session_for

__all__ = ["Triage"]


class Triage(OpeningMixin, ReplayMixin, SettingsMixin):
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
        self.session = session_for(model, settings, order, order_source)
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
            return not_saved("label", err.message)
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
            return not_saved("skip", err.message)
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
            return not_saved("undo", err.message)
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
            return not_saved("jump", err.message)
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

