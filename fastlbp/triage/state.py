"""The triage session: a state machine of labels, skips, focus and undo over one model.

The session is event-sourced. Every action that changes state (label, undo,
skip, jump) is appended to its journal (`fastlbp.triage.journal`) and
committed *before* the user is told it was accepted; inference state is
never stored. A resume replays the journal: the cold round, then each label
or undo followed by its warm-started round, exactly as they happened, so the
messages, marginals and ranking after a resume are the ones the session had
(bit for bit on the same device). A kill at any moment therefore loses at
most an action that was never acknowledged. A label that contradicts the
model (probability 0) is removed from the journal again and reported.

    t = Triage.open(model, "race.triage.db", graph_path="race.json", settings=Settings())
    t.current               # variable index of the alarm on top (or jumped to)
    t.label(True)           # -> Outcome with the round's time
    t.explain(t.current)    # strongest derivations
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from fastlbp.errors import ContradictoryEvidence, InputError
from fastlbp.model import Model
from fastlbp.ranking import alarm_vars, order_alarms
from fastlbp.session import Session
from fastlbp.settings import Settings
from fastlbp.triage.explain import Explanation, clause_index, explain
from fastlbp.triage.journal import JOURNAL_VERSION, Journal, fingerprint


@dataclasses.dataclass(frozen=True)
class RoundInfo:
    """How one round went, timed around `Session.run` (host view, seconds)."""

    seconds: float
    iterations: int
    converged: bool
    delta: float


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What an action did: `accepted` False means it was refused (`message` says why)."""

    accepted: bool
    message: str
    round: RoundInfo | None = None


class Triage:
    """A triage session over one model: labels, skips, focus, and the journal that makes them durable."""

    def __init__(self, model: Model, journal: Journal, settings: Settings):
        self.model = model
        self.journal = journal
        self.settings = settings
        self.session = Session(model, settings)
        self.alarms = alarm_vars(model)  # (A,) int64
        self.alarm_set = set(self.alarms.tolist())
        self.order: list[tuple[int, int]] = []  # (journal seq, var) of labels, oldest first
        self.skipped: list[tuple[int, int]] = []
        self.focus: int | None = None
        self.rounds: list[RoundInfo] = []
        self._history: list[tuple[str, int, int]] = []  # (kind, seq, var): what undo reverts
        self._ranking: np.ndarray = np.zeros(0, np.int64)
        self._clauses_by_head: dict[int, np.ndarray] | None = None
        self.replay_notes: list[str] = []  # labels the journal held that turned out contradictory

    # Opening --------------------------------------------------------------
    @classmethod
    def open(cls, model: Model, path: str | os.PathLike, *, graph_path: str | None = None,
             resume: bool = False, overwrite: bool = False, settings: Settings | None = None) -> Triage:
        """Starts a new session in `path` or (resume=True) restores the one there.

        The inference settings (`Settings.inference()`: schedule, precision,
        tol, max_iters, damping, backend) are stored in the journal; a resumed
        session runs with the stored ones, so its rounds repeat exactly. A
        journal written before the backend was stored resumes with the default
        backend. Loading settings (cycles, compress) always come from
        `settings`: they shaped `model` before it got here.

        Raises:
            InputError: no session to resume, a session already there (and not
                `overwrite`), a journal made for another graph, or stored
                settings that are not valid.
        """
        settings = settings or Settings()
        fp = fingerprint(model)
        if resume:
            journal = Journal.open(path)
            meta = journal.meta()
            if meta.get("fingerprint") != fp:
                journal.close()
                raise InputError(str(path), None, f"this session was made for another graph "
                                                  f"({meta.get('graph', '?')})")
            try:
                settings = stored_settings(json.loads(meta["settings"]), settings)
            except (KeyError, TypeError, ValueError) as err:
                journal.close()
                raise InputError(str(path), None, f"the session's stored settings are not valid "
                                                  f"({err})") from None
        else:
            journal = Journal.create(path, {
                "version": str(JOURNAL_VERSION), "fingerprint": fp,
                "graph": str(Path(graph_path).resolve()) if graph_path else str(model.source),
                "settings": json.dumps(settings.inference()), "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            }, overwrite=overwrite)
        t = cls(model, journal, settings)
        t._first_round()
        t.replay_notes = t.replay()
        return t

    def close(self) -> None:
        self.journal.close()

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

    def _round(self, warm: bool = True) -> RoundInfo:
        start = time.perf_counter()
        rnd = self.session.run(warm=warm)
        self._ranking = order_alarms(rnd.marginals, self.alarms, exclude=self.session.labels)
        info = RoundInfo(time.perf_counter() - start, rnd.iterations, rnd.converged, rnd.delta)
        self.rounds.append(info)
        return info

    def replay(self) -> list[str]:
        """Re-applies the journal's events (after the cold round); returns notes for the user."""
        notes = []
        for seq, kind, alarm, truth in self.journal.events():
            var = self.model.index.get(alarm) if alarm is not None else None
            if kind == "label":
                out = self._apply_label(seq, var, truth)
                if not out.accepted:
                    notes.append(out.message)
            elif kind == "skip":
                self.skipped.append((seq, var))
                self._history.append(("skip", seq, var))
                self.focus = None
            elif kind == "jump":
                self.focus = var
            elif kind == "undo":
                self._apply_undo()
        return notes

    # Actions --------------------------------------------------------------
    def label(self, truth: bool, var: int | None = None) -> Outcome:
        """Labels `var` (default: the current alarm), journals it, and runs a warm round."""
        var = self.current if var is None else var
        if var is None:
            return Outcome(False, "no alarm left to label")
        if var in self.labels:
            return Outcome(False, f"{self.model.var_names[var]} is labelled already (undo first)")
        seq = self.journal.append("label", self.model.var_names[var], truth)
        return self._apply_label(seq, var, truth)

    def _apply_label(self, seq: int, var: int, truth: bool) -> Outcome:
        name = self.model.var_names[var]
        self.session.label(var, truth)
        try:
            info = self._round()
        except ContradictoryEvidence as err:
            self.session.unlabel(var)
            self.journal.delete(seq)
            return Outcome(False, f"refused {name} = {'true' if truth else 'false'}: {err}")
        self.order.append((seq, var))
        self._history.append(("label", seq, var))
        self.skipped = [(s, v) for s, v in self.skipped if v != var]
        self.focus = None
        return Outcome(True, f"{name} = {'true' if truth else 'false'}", info)

    def skip(self) -> Outcome:
        var = self.current
        if var is None:
            return Outcome(False, "no alarm to skip")
        open_count = len(self._ranking)
        if len({v for _, v in self.skipped} | {var}) >= open_count:
            return Outcome(False, "every open alarm is skipped already; label one or undo a skip")
        seq = self.journal.append("skip", self.model.var_names[var])
        self.skipped.append((seq, var))
        self._history.append(("skip", seq, var))
        self.focus = None
        return Outcome(True, f"skipped {self.model.var_names[var]}")

    def undo(self) -> Outcome:
        """Reverts the last label (with a warm round) or skip."""
        if not self._history:
            return Outcome(False, "nothing to undo")
        self.journal.append("undo")
        return self._apply_undo()

    def _apply_undo(self) -> Outcome:
        kind, seq, var = self._history.pop()
        name = self.model.var_names[var]
        self.focus = None
        if kind == "skip":
            self.skipped = [(s, v) for s, v in self.skipped if s != seq]
            return Outcome(True, f"undid skip of {name}")
        self.order = [(s, v) for s, v in self.order if s != seq]
        self.session.unlabel(var)
        info = self._round()
        return Outcome(True, f"undid label of {name}", info)

    def find(self, query: str) -> int | None:
        """An alarm by exact name, or by its 1-based rank among open alarms."""
        q = query.strip()
        if q in self.model.index and self.model.index[q] in self.alarm_set:
            return self.model.index[q]
        if q.isdigit() and 1 <= int(q) <= len(self._ranking):
            return int(self._ranking[int(q) - 1])
        return None

    def jump(self, query: str) -> Outcome:
        var = self.find(query)
        if var is None:
            hits = self.search(query, limit=5)
            hint = f"; did you mean {', '.join(self.model.var_names[v] for v in hits)}?" if hits else ""
            return Outcome(False, f"no alarm {query!r}{hint}")
        if var in self.labels:
            return Outcome(False, f"{self.model.var_names[var]} is labelled already (undo first)")
        self.journal.append("jump", self.model.var_names[var])
        self.focus = var
        return Outcome(True, f"now at {self.model.var_names[var]}")

    def search(self, text: str, limit: int = 20) -> list[int]:
        """Alarms whose name contains `text` (case-insensitive), open ones by rank, then labelled ones."""
        t = text.strip().lower()
        names = self.model.var_names
        hits = [v for v in self._ranking.tolist() if t in names[v].lower()]
        hits += [v for _, v in self.order if t in names[v].lower()]
        return hits[:limit]

    def explain(self, var: int, k: int = 3) -> Explanation:
        dg = self.model.meta.get("derivation")
        if dg is not None and self._clauses_by_head is None:
            self._clauses_by_head = clause_index(dg)
        return explain(self.model, self.marginals, var, k, clauses_by_head=self._clauses_by_head)

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
        }


def stored_settings(stored: dict, settings: Settings) -> Settings:
    """The `Settings` a resumed session runs with: the journal's inference options over `settings`.

    Args:
        stored: the journal's settings JSON, a `Settings.inference()` dict; one
            written before the backend was stored has no "backend" key.
        settings: the caller's settings; only their loading options (cycles,
            compress) are kept.

    Raises:
        SettingsError: a stored value is not valid (`Settings` checks it).
        TypeError: `stored` is not a dict.
    """
    # Keys other than the inference options (a journal of an older Python caller could hold any
    # keyword it was given) never reached the session before either: they stay ignored.
    if not isinstance(stored, dict):
        raise TypeError(f"expected a JSON object, got {type(stored).__name__}")
    inference = Settings().inference()
    kept = {k: v for k, v in stored.items() if k in inference}
    return Settings(**{**inference, **kept, "cycles": settings.cycles, "compress": settings.compress})
