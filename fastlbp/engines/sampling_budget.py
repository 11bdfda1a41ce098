"""The time budget of a sampling run: how many worlds a draw takes so that a round ends in time.

    n = draw_size(wanted, unit, unit_seconds, left)   # whole units that fit `left` seconds (pure)

An interactive round (`Settings.interactive`: 0.4 s) must answer within its budget on the machine it
runs on. A draw costs whole units of worlds (a round of the device's batches: a batch partly drawn
costs a whole one), and what a unit costs depends on the kind of worlds: unlabelled ("plain"),
labelled ("weighted": 2-3 times as much on a CPU) or drawn from the tilted proposal ("tilted"). So a
`Sampler` keeps the seconds of a unit per kind, as last measured (`unit_seconds`), and sizes each
draw by its own kind's (`TimedDrawing`); a kind never drawn draws one unit first, which measures it.

A run's first draw (`samples` worlds) is drawn whole where it fits the budget, so its worlds do not
depend on the timing; else in pieces of whole units that fit, at least `MIN_WORLDS`. Later draws
double the worlds while the estimates are not as precise as asked, each only when it is predicted to
end within the budget (`DRAW_MARGIN`). Where the budget cuts a labelled run's first draw, whether the
prior's worlds need the tilted proposal is decided at half the budget, so the tilt has the other half.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from fastlbp.engines.sampling_bits import WORD_BITS
from fastlbp.engines.sampling_estimates import Tally, _max_se

# A draw's predicted seconds are taken this many times over when deciding whether it fits the budget
# (weblech's 0.4 s rounds on a 2-core CPU reached 0.52 s without a margin: the speed's noise).
DRAW_MARGIN = 1.15
# Host seconds of the proposal's sweeps per variable, assumed until a tilt has been timed (H200 host: 0.25 s
# at ftp's 69K variables; `TimedDrawing._affordable_tilt` skips a tilt that would overrun the budget).
TILT_SECONDS_PER_VARIABLE = 4e-6
# Fewest worlds a time-bounded run draws (`Sampler.__call__`'s `seconds`).
MIN_WORLDS = 1024


def draw_size(wanted: int, unit: int, unit_seconds: float | None, left: float,
              margin: float = DRAW_MARGIN) -> int:
    """Worlds of the next piece of a time-bounded draw of `wanted` more worlds.

    A draw costs whole units of `unit` worlds (a round of the device's batches: one partly drawn costs a
    whole one), `unit_seconds` each as last measured for this kind of draw (`Sampler.unit_seconds`).

    Returns:
        `wanted` where its units are predicted to end within `left` seconds (their time taken
        `margin` times over), else the whole units that are (0: none); one unit where the speed is not
        measured yet (None): drawing it measures it.
    """
    if wanted <= 0:
        return 0
    if unit_seconds is None:
        return min(wanted, unit)
    if margin * -(-wanted // unit) * unit_seconds <= left:
        return wanted
    return min(wanted, max(0, int(left / (margin * unit_seconds))) * unit)


class TimedDrawing:
    """The time-bounded drawing of `fastlbp.engines.sampling.Sampler` (a base class of it).

    It reads the sampler's `plan`, `host`, `batch_words`, `devices_used`, `tilt_seconds_per_variable`
    and `_device_tilt`, and keeps `unit_seconds` (seconds of `unit_worlds` worlds per kind of draw, as
    last measured), `world_seconds` (seconds per world of the last draw) and `stopped` (what ended the
    last run: "target", "worlds" or "time").
    """

    def _affordable_tilt(self, labels: dict[int, bool], start: float, seconds: float):
        """The proposal's `Tilt` for `labels` (`_device_tilt`, host work), or None: nothing to tilt, or
        its host work and the fewest tilted worlds a draw takes (`least_worlds`, at the speed of
        labelled ones until tilted ones are timed) would overrun the budget of a round begun at
        `start` (its host work timed, `tilt_seconds_per_variable`)."""
        if seconds > 0:
            tilt_cost = self.plan.num_vars * (self.tilt_seconds_per_variable or TILT_SECONDS_PER_VARIABLE)
            unit = self.unit_seconds.get("tilted", self.unit_seconds.get("weighted", 0.0))
            draw = self.least_worlds // self.unit_worlds * unit
            if time.perf_counter() - start + tilt_cost + DRAW_MARGIN * draw > seconds:
                return None
        t0 = time.perf_counter()
        tilt = self._device_tilt(labels)
        self.tilt_seconds_per_variable = (time.perf_counter() - t0) / max(self.plan.num_vars, 1)
        return tilt

    @property
    def unit_worlds(self) -> int:
        """Worlds a draw's time is counted in: a round of the device's batches (one per device; a
        batch partly drawn costs a whole one), a word on the host (its batches follow the draw)."""
        return WORD_BITS if self.host else self.batch_words * WORD_BITS * self.devices_used

    @property
    def least_worlds(self) -> int:
        """Fewest worlds a time-bounded draw takes: `MIN_WORLDS`, on the device in whole units."""
        return MIN_WORLDS if self.host else -(-MIN_WORLDS // self.unit_worlds) * self.unit_worlds

    def _unit_speed(self, kind: str) -> float | None:
        """Measured seconds of `unit_worlds` worlds of `kind`; on the host, the last draw's speed where
        `kind` has none (a probe there would change the worlds: its streams follow the batches)."""
        measured = self.unit_seconds.get(kind)
        if measured is None and self.host and self.world_seconds:
            return self.world_seconds * WORD_BITS
        return measured

    def _drawing(self, draw, kind: str, samples: int, most: int, target_se: float, min_effective: float,
                 rows, seconds: float, start: float, on_empty=None, check=None) -> Tally:
        """The doubling loop of `__call__` over `draw(start, stop, acc) -> acc`, within `seconds` of
        `start` (0: unbounded).

        The first draw, `samples` worlds, is drawn in pieces of whole units (`draw_size`) where the
        budget cuts it (a first draw that fits is drawn whole, so its worlds do not depend on the
        timing), each piece timed as `kind` (`unit_seconds`). With `check`, a cut first draw stops at
        half the budget and `check(tally)` says whether to end the drawing there.
        """
        plan = self.plan
        unit = self.unit_worlds
        least = self.least_worlds
        acc, drawn = None, 0
        self.stopped = "worlds"

        def timed_draw(stop: int):
            nonlocal acc, drawn, on_empty
            t0 = time.perf_counter()
            acc = draw(drawn, stop, acc)
            spent = time.perf_counter() - t0
            self.world_seconds = spent / (stop - drawn)
            self.unit_seconds[kind] = spent / -(-(stop - drawn) // unit)
            drawn = stop
            s1, s2, w1, w2, _, positive = (np.asarray(a) for a in jax.device_get(acc))
            tally = Tally(s1=s1[plan.row_of], s2=s2[plan.row_of], w1=float(w1), w2=float(w2), drawn=drawn,
                          positive=int(positive))
            if on_empty is not None and tally.positive == 0:
                on_empty, asked = None, on_empty
                asked()
            return tally

        def done(tally: Tally) -> bool:
            if drawn >= most:
                return True
            if tally.effective >= min_effective and tally.positive > 0 and (
                    not target_se or _max_se(tally, rows) <= target_se):
                self.stopped = "target"
                return True
            return False

        # The first draw, in pieces where the budget cuts it.
        share = 0.5 if check is not None else 1.0
        while drawn < samples:
            want = samples - drawn
            if seconds > 0:
                speed = self._unit_speed(kind)
                left = share * seconds - (time.perf_counter() - start)
                piece = want if speed is None and self.host else draw_size(want, unit, speed, left)
                if drawn == 0:
                    piece = max(piece, min(want, least))  # a round answers from at least this many
                if piece == 0:
                    break
            else:
                piece = want
            tally = timed_draw(drawn + piece)
            if share < 1.0 and drawn < samples:
                if check(tally):
                    self.stopped = "time"
                    return tally
                share = 1.0
        if drawn < samples:  # cut by the budget
            if not done(tally):
                self.stopped = "time"
            return tally
        while not done(tally):
            target = min(most, 2 * drawn)
            # The next draw starts only while it is predicted to end within the budget.
            cost = -(-(target - drawn) // unit) * (self._unit_speed(kind) or 0.0)
            if seconds > 0 and time.perf_counter() - start + DRAW_MARGIN * cost > seconds:
                self.stopped = "time"
                break
            tally = timed_draw(target)
        return tally


__all__ = ["draw_size", "TimedDrawing", "DRAW_MARGIN", "MIN_WORLDS", "TILT_SECONDS_PER_VARIABLE"]
