"""Changing a triage session's inference settings, on a resume or in replay (a mixin of `Triage`).

Inference settings given on a resume are applied (`change_settings`): a
round with the new settings runs first, then a "settings" event is
journaled, so a later resume switches at the same point and repeats the
rounds exactly; settings that cannot run are refused, and nothing changes.
`session_for` makes the `Session` that a set of settings (and a custom
order) runs.
"""

from __future__ import annotations

import dataclasses
import time

from fastlbp.core.errors import ContradictoryEvidence, InferenceError, InputError, SettingsError
from fastlbp.core.model import Model
from fastlbp.core.settings import CONTROL_FIELDS, Settings
from fastlbp.inference.ranking import order_alarms
from fastlbp.inference.session import Session
from fastlbp.triage.journal import SessionWriteError
from fastlbp.triage.outcome import Outcome, RoundInfo, how_made, not_saved
from fastlbp.triage.stored import change_payload, custom_order, describe_change, settings_text
from schedules.plan import make_plan


class SettingsMixin:
    """`Triage.change_settings`, and the replay of a "settings" event."""

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
            return not_saved("settings change", err.message)
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
            session = session_for(self.session.model, settings, order, source)
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



def session_for(model: Model, settings: Settings, order: str | None, source: str | None) -> Session:
    """The `Session` of `settings`; a custom order runs from its stored text, which its plan carries
    (`schedules.plan.Spec.order`): no path from the session file is ever opened."""
    session = Session(model, settings) if order is None else Session(
        model, settings, plan=make_plan(settings, order=order, source=source))
    session.compile_flags()  # the first label compiles nothing
    return session


def _text(err: Exception) -> str:
    """An error for a message: an input error names its file and line (a custom order's)."""
    return str(err)


def _refused(what: str, err: Exception, kept: Settings) -> Outcome:
    return Outcome(False, f"refused the settings change ({what}): {_text(err)}; the session is unchanged "
                          f"({settings_text(kept)})")

