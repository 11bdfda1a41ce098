"""A time-bounded draw (`fastlbp.engines.sampling_budget`) against a fake clock: no test times anything.

The sampler's clock is replaced by one that only the draws move: every call of the compiled round
advances it by a fixed cost per batch of the kind of worlds drawn (unlabelled, labelled, tilted), and
the proposal's host work by its own. The rounds of an interactive session must stay within their
budget whatever the kind of the previous draw, and must still tilt where the prior's worlds leave
too few effective.
"""

from __future__ import annotations

import dataclasses

from graphs import far_evidence

from datalog.bayesnet import to_model
from datalog.synthetic import layered
from fastlbp.engines import sampling, sampling_budget, sampling_program
from fastlbp.engines.sampling import Sampler

_FIELDS = [f.name for f in dataclasses.fields(sampling_program.RoundData)]
_SLOTS, _TILTED = _FIELDS.index("slots"), _FIELDS.index("tilted")


class FakeClock:
    """`time` as the sampler reads it: `perf_counter()` moves only when a draw or a tilt moves it."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def fake_costs(monkeypatch, sampler: Sampler, per_batch: dict[str, float], tilt_seconds: float = 0.0):
    """The sampler's draws cost `per_batch[kind]` fake seconds a batch ("plain", "weighted", "tilted"),
    a partly drawn batch as much as a whole one, and its tilt `tilt_seconds`. Returns the clock."""
    clock = FakeClock()
    monkeypatch.setattr(sampling, "time", clock)  # a run's start
    monkeypatch.setattr(sampling_budget, "time", clock)  # its draws and tilt
    draw, tilt = sampler._draw_device, sampler._device_tilt

    def timed_draw(run, key, data, start, stop, acc):
        kind = "tilted" if bool(data[_TILTED]) else "weighted" if int(data[_SLOTS]) else "plain"
        clock.now += per_batch[kind] * -(-(stop - start) // (sampler.batch_words * sampling.WORD_BITS))
        return draw(run, key, data, start, stop, acc)

    def timed_tilt(labels):
        clock.now += tilt_seconds
        return tilt(labels)

    monkeypatch.setattr(sampler, "_draw_device", timed_draw)
    monkeypatch.setattr(sampler, "_device_tilt", timed_tilt)
    return clock


def test_draw_size_counts_whole_batches():
    # Batches of 1,024 worlds at 0.1 s: 0.4 s left fits 3 of them (3.45 s with the margin), a partial
    # fourth costs as much as a whole one, and a draw that fits is not cut.
    assert sampling_budget.draw_size(10_000, 1024, 0.1, 0.4) == 3 * 1024
    assert sampling_budget.draw_size(3 * 1024 + 32, 1024, 0.1, 0.4) == 3 * 1024
    assert sampling_budget.draw_size(2048, 1024, 0.1, 0.4) == 2048
    assert sampling_budget.draw_size(3000, 1024, 0.1, 0.25, margin=1.0) == 2048  # 3,000 worlds are 3 batches
    assert sampling_budget.draw_size(10_000, 1024, 0.1, 0.05) == 0  # not even one
    assert sampling_budget.draw_size(10_000, 1024, 0.1, -1.0) == 0
    assert sampling_budget.draw_size(10_000, 1024, None, 0.4) == 1024  # not measured: a batch measures it
    assert sampling_budget.draw_size(0, 1024, 0.1, 0.4) == 0


def labelled_sampler(monkeypatch):
    """A device sampler of a small layered graph, warm for labels on its last alarm, on a fake clock where
    labelled (and tilted) worlds cost three times unlabelled ones: (sampler, alarm, clock)."""
    model = to_model(layered(num_inputs=6, layers=2, width=6, seed=0))
    sampler = Sampler(model.graph, model.var_names, batch_words=32, host=False)
    alarm = int(model.alarms[-1])
    sampler.reserve([alarm])
    sampler.warm()
    return sampler, alarm, fake_costs(monkeypatch, sampler, {"plain": 1.0, "weighted": 3.0, "tilted": 3.0})


def test_a_labelled_round_is_sized_by_labelled_worlds_not_the_last_draw(monkeypatch):
    # Labelled worlds cost three times unlabelled ones (2-3x on a CPU). An unlabelled draw between two
    # labelled rounds must not size the next labelled round: before, it took 2.4 times its budget
    # (avrora's first labelled round after an unlabelled one: 0.8 s for 0.4).
    sampler, alarm, clock = labelled_sampler(monkeypatch)
    sampler({alarm: True}, 2 * 1024, 1)  # labelled worlds timed
    sampler(None, 2 * 1024, 1)  # then unlabelled ones
    budget = 40.0
    start = clock.now
    tally = sampler({alarm: True}, 10**5, 1, seconds=budget, target_se=1e-3)
    elapsed = clock.now - start
    assert sampler.stopped == "time" and sampler.tilted_coins == 0
    assert elapsed <= budget  # whole batches at the labelled speed: 11 of 3 s
    assert tally.drawn >= 8 * 1024  # and the budget used, not a probe's worth


def test_a_round_whose_kind_was_never_drawn_measures_it_before_it_fills_the_budget(monkeypatch):
    # No labelled worlds drawn yet (a session forced to the sampler, no speed probe): the round draws a
    # batch, then what fits at the speed it measured, never `samples` at the unlabelled speed.
    sampler, alarm, clock = labelled_sampler(monkeypatch)
    sampler(None, 2 * 1024, 1, seconds=1000.0)
    start = clock.now
    sampler({alarm: True}, 10**5, 1, seconds=40.0, target_se=1e-3)
    elapsed = clock.now - start
    assert sampler.stopped == "time" and elapsed <= 40.0


def test_a_cut_round_still_tilts_within_its_budget(monkeypatch):
    # The prior's worlds carry no weight. The round's budget fits 13 labelled batches, the tilt's host
    # work costs 4 of them: decided after the whole prior draw (cut to 0.8 of the budget), the tilt no
    # longer fit and the round answered from the prior's worlds (or, with a cheaper tilt, overran by
    # the tilted batch it drew). Decided at half the budget, it tilts and ends within the budget.
    graph, end = far_evidence()
    sampler = Sampler(graph, batch_words=32, host=False)
    sampler.reserve([end])
    sampler.warm()
    clock = fake_costs(monkeypatch, sampler, {"plain": 1.0, "weighted": 3.0, "tilted": 3.0},
                       tilt_seconds=12.0)
    sampler({end: True}, 1024, 1)  # the labelled speed measured (a session's probe)
    sampler.tilt_seconds_per_variable = 12.0 / sampler.plan.num_vars  # and the tilt's
    start = clock.now
    tally = sampler({end: True}, 10**5, 1, seconds=45.0)
    elapsed = clock.now - start
    assert sampler.tilted_coins > 0 and tally.effective > 0
    assert elapsed <= 45.0
