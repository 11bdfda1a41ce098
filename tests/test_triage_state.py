"""The triage state machine (`fastlbp.triage.state`): labels, skips, jumps, undo, exact resume,
refused labels, the settings a session runs with, and no recompilation across rounds."""

import jax.monitoring
import numpy as np
import pytest
from triage_support import demo_model, hand_model

from fastlbp.errors import SettingsError
from fastlbp.settings import Settings
from fastlbp.triage import Triage
from fastlbp.triage.state import stored_settings

COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: COMPILES.append(event) if event.endswith("backend_compile_duration") else None)

FAST = Settings(max_iters=300)


def open_demo(tmp_path, resume=False, settings=FAST, **kw):
    return Triage.open(demo_model(), tmp_path / "s.db", resume=resume, settings=settings, **kw)


def state(t):
    return (dict(t.labels), t.ranking.tolist(), t.marginals.tobytes(), t.current,
            [v for _, v in t.skipped], [v for _, v in t.order])


def test_label_undo_skip_jump(tmp_path):
    t = open_demo(tmp_path)
    first = t.current
    assert first == int(t.ranking[0])
    out = t.label(True)
    assert out.accepted and out.round.iterations > 0 and t.labels == {first: True}
    assert first not in t.ranking.tolist()
    second = t.current
    assert t.skip().accepted and t.current == int(t.ranking[1]) and t.current != second
    last = t.model.var_names[int(t.ranking[-1])]
    assert t.jump(last).accepted and t.current == t.model.index[last]
    assert t.jump("5").accepted and t.current == int(t.ranking[4])
    assert not t.jump("nothing").accepted
    assert not t.jump(t.model.var_names[first]).accepted  # labelled already
    assert t.search("RACE(1")[:1] and all("race(1" in t.model.var_names[v] for v in t.search("race(1"))
    assert t.undo().message.startswith("undid skip")
    assert t.current == second
    p_before = t.marginals.copy()
    assert t.undo().message.startswith("undid label") and t.labels == {}
    assert not np.array_equal(p_before, t.marginals)
    assert not t.undo().accepted
    st = t.stats()
    assert (st["labelled"], st["open"], st["rounds"]) == (0, len(t.model.alarms), 3)
    t.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_resume_is_exact(tmp_path, seed):
    rng = np.random.default_rng(seed)
    t = open_demo(tmp_path)
    for _ in range(8):
        action = rng.choice(["t", "f", "f", "skip", "undo", "jump"])
        if action in ("t", "f"):
            t.label(action == "t")
        elif action == "skip":
            t.skip()
        elif action == "undo":
            t.undo()
        else:
            t.jump(str(rng.integers(1, 5)))
    before = state(t)
    t.close()
    r = open_demo(tmp_path, resume=True)
    assert state(r) == before  # marginals bit for bit
    r.close()


def test_contradictory_label_is_refused_and_not_journaled(tmp_path):
    t = Triage.open(hand_model(), tmp_path / "h.db")
    race1 = t.model.index["race(1)"]
    out = t.label(False, race1)
    assert not out.accepted and "contradictory" in out.message and "race(1)" in out.message
    assert t.labels == {} and [e[1] for e in t.journal.events()] == []
    assert t.label(True, race1).accepted
    t.close()
    r = Triage.open(hand_model(), tmp_path / "h.db", resume=True)
    assert r.labels == {race1: True}
    r.close()


def test_session_runs_with_the_given_settings_and_a_resume_with_the_stored_ones(tmp_path):
    mine = Settings(max_iters=300, damping=0.25, tol=1e-7)
    t = open_demo(tmp_path, settings=mine)
    assert t.settings == mine and t.session.settings == mine
    t.label(True)
    before = state(t)
    t.close()
    # The caller's inference options are ignored on resume; its loading options are kept.
    other = Settings(max_iters=1000, damping=0.0, compress=False, cycles="bingo")
    r = open_demo(tmp_path, resume=True, settings=other)
    assert r.settings == mine.replace(compress=False, cycles="bingo")
    assert r.session.settings.inference() == mine.inference()
    assert state(r) == before
    r.close()


def test_stored_settings():
    caller = Settings(backend="scatter", compress=False)
    # A journal written before the backend was stored resumes with the default backend.
    old = {"schedule": "parall", "precision": "f32", "tol": 1e-5, "max_iters": 300, "damping": 0.0}
    s = stored_settings(old, caller)
    assert s == Settings(precision="f32", tol=1e-5, max_iters=300, compress=False)
    assert s.backend == Settings().backend
    assert stored_settings({**old, "backend": "scatter"}, Settings()).backend == "scatter"
    assert stored_settings({**old, "unknown": 1}, caller) == s  # never reached a session before either
    with pytest.raises(SettingsError):
        stored_settings({**old, "precision": "f16"}, caller)
    with pytest.raises(TypeError):
        stored_settings([1, 2], caller)


def test_no_recompilation_across_rounds(tmp_path):
    t = open_demo(tmp_path)
    t.label(False)  # any one-off host-side helpers compile here
    run = t.session.runner.run
    cache = run._cache_size()
    COMPILES.clear()
    for truth in (True, False, False, True):
        assert t.label(truth).accepted
    t.undo()
    t.skip()
    t.jump("3")
    t.label(True)
    assert COMPILES == [] and run._cache_size() == cache
    t.close()
