"""The triage state machine (`fastlbp.triage.state`): labels, skips, jumps, undo, exact resume,
refused labels, the settings a session runs with, and no recompilation across rounds."""

import json
import os
import time

import jax.monitoring
import numpy as np
import pytest
from triage_support import (
    FAST,
    FailingConnection,
    demo_model,
    hand_model,
    made_session,
    random_action,
    tamper,
    truncate,
)

from fastlbp.core.errors import ContradictoryEvidence, InputError, SettingsError
from fastlbp.core.settings import Settings
from fastlbp.triage import Journal, SessionInUse, Triage
from fastlbp.triage.stored import stored_settings

COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: COMPILES.append(event) if event.endswith("backend_compile_duration") else None)



def open_demo(tmp_path, resume=False, settings=FAST, **kw):
    return Triage.open(demo_model(), tmp_path / "s.db", resume=resume, settings=settings, **kw)


def state(t):
    return (dict(t.labels), t.ranking.tolist(), t.marginals.tobytes(), t.current,
            [v for _, v in t.skipped], [v for _, v in t.order])


def test_label_undo_skip_jump(tmp_path):
    t = open_demo(tmp_path, settings=FAST.replace(method="lbp"))  # a round of iterations per label
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
        random_action(t, rng, ["t", "f", "f", "skip", "undo", "jump"])
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
    t = open_demo(tmp_path, settings=FAST.replace(method="lbp"))  # LBP's runner compiles once
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


def test_an_open_session_is_locked_in_every_mode(tmp_path):
    t = open_demo(tmp_path)
    assert t.label(True).accepted
    before = (tmp_path / "s.db").read_bytes()
    for kw in ({}, {"overwrite": True}, {"resume": True}, {"recover": True}):
        with pytest.raises(SessionInUse, match=f"in use by process {os.getpid()}"):
            open_demo(tmp_path, **kw)
    assert (tmp_path / "s.db").read_bytes() == before and t.label(False).accepted
    t.close()
    r = open_demo(tmp_path, resume=True)
    assert len(r.labels) == 2
    r.close()


# Journals two processes (or a hand) could write, and what a resume makes of them ----------

def append_raw(path, *events):
    """Appends events as another process holding the same file would have."""
    tamper(path, *(f"INSERT INTO events (kind, alarm, truth, at) VALUES "
                   f"('{k}', {'NULL' if a is None else repr(a)}, {'NULL' if v is None else v}, {time.time()})"
                   for k, a, v in events))


def test_replay_is_total(tmp_path):
    # Two processes on one file: A labels x; B, opened after that label, undoes it; A undoes it
    # too. The journal then holds more undos than actions to undo, and every resume crashed with
    # `IndexError: pop from empty list`.
    t = open_demo(tmp_path)
    x = t.model.var_names[t.current]
    assert t.label(True).accepted
    t.close()
    path = tmp_path / "s.db"
    append_raw(path, ("undo", None, None), ("undo", None, None), ("label", x, 0), ("label", x, 1),
               ("jump", x, None), ("skip", x, None))
    before = path.read_bytes()
    r = open_demo(tmp_path, resume=True)
    assert r.labels == {r.model.index[x]: False}  # the first label of x stands, the second is ignored
    notes = " | ".join(r.replay_notes)
    assert len(r.replay_notes) == 4 and "nothing to undo" in notes and "labelled already" in notes, notes
    assert path.read_bytes() == before  # a resume never rewrites the journal
    assert r.undo().accepted and r.labels == {} and not r.undo().accepted
    after = state(r)
    r.close()
    r = open_demo(tmp_path, resume=True)
    assert state(r) == after
    r.close()


def test_a_refused_undo_is_not_journaled(tmp_path, monkeypatch):
    t = open_demo(tmp_path)
    assert t.label(True).accepted
    before, events = state(t), t.journal.events()

    def conflict(**kw):
        raise ContradictoryEvidence({"x": True})

    monkeypatch.setattr(t.session, "run", conflict)
    out = t.undo()
    assert not out.accepted and "contradictory" in out.message
    assert state(t) == before and t.journal.events() == events
    monkeypatch.undo()
    assert t.undo().accepted and t.labels == {}
    t.close()


def test_an_action_that_cannot_be_saved_is_not_applied(tmp_path):
    t = open_demo(tmp_path)
    assert t.label(True).accepted and t.skip().accepted
    before, events = state(t), t.journal.events()
    real = t.journal.conn
    t.journal.conn = FailingConnection(real)
    for action in (lambda: t.label(False), t.skip, t.undo, lambda: t.jump("3")):
        out = action()
        assert not out.accepted and "disk I/O error" in out.message and "not saved" in out.message
        assert state(t) == before
    t.journal.conn = real
    assert t.journal.events() == events
    assert t.label(False).accepted  # the user can try again
    after = state(t)
    t.close()
    r = open_demo(tmp_path, resume=True)
    assert state(r) == after
    r.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_resume_is_exact_when_writes_fail(tmp_path, seed):
    rng = np.random.default_rng(seed)
    make = hand_model if seed == 0 else demo_model  # hand_model has a label the model refuses
    t = Triage.open(make(), tmp_path / "s.db", settings=FAST)
    real = t.journal.conn
    for _ in range(15):
        t.journal.conn = FailingConnection(real) if rng.random() < 0.25 else real
        random_action(t, rng, ["t", "f", "skip", "undo", "undo", "jump"],
                      pick=lambda: None if rng.random() < 0.6 else int(rng.choice(t.alarms)))
    t.journal.conn = real
    before = state(t)
    t.close()
    r = Triage.open(make(), tmp_path / "s.db", resume=True, settings=FAST)
    assert state(r) == before and r.replay_notes == []
    r.close()


# --recover and --fresh on damaged sessions --------------------------------------------------

def labelled_names(t):
    return {t.model.var_names[v]: truth for v, truth in t.labels.items()}


def test_recover_keeps_the_valid_prefix_and_the_damaged_file(tmp_path):
    path = made_session(tmp_path)
    t = Triage.open(demo_model(), path, resume=True, settings=FAST)
    first_two = [(t.model.var_names[v], t.labels[v]) for _, v in t.order[:2]]
    t.close()
    tamper(path, "UPDATE events SET kind = 'erase' WHERE seq = 3")
    damaged = path.read_bytes()
    r = Triage.open(demo_model(), path, recover=True, settings=FAST)
    assert labelled_names(r) == dict(first_two)
    assert any("recovered 2 of 4 events" in n and "s.db.damaged" in n for n in r.replay_notes), r.replay_notes
    assert (tmp_path / "s.db.damaged").read_bytes() == damaged
    assert r.label(True).accepted
    after = state(r)
    r.close()
    r = Triage.open(demo_model(), path, resume=True, settings=FAST)
    assert state(r) == after
    r.close()
    # A second recovery never overwrites the first backup.
    tamper(path, "UPDATE events SET truth = 'false' WHERE seq = 1")
    r = Triage.open(demo_model(), path, recover=True, settings=FAST)
    assert r.labels == {} and (tmp_path / "s.db.damaged.1").exists()
    assert (tmp_path / "s.db.damaged").read_bytes() == damaged
    r.close()


def test_recover_a_truncated_session_and_one_without_settings(tmp_path):
    path = made_session(tmp_path)
    truncate(path)
    r = Triage.open(demo_model(), path, recover=True, settings=FAST)
    assert len(r.labels) <= 3 and (tmp_path / "s.db.damaged").exists()
    r.close()
    path = made_session(tmp_path, "t.db")
    tamper(path, "UPDATE meta SET value = '{oops' WHERE key = 'settings'")
    mine = Settings(max_iters=200)
    r = Triage.open(demo_model(), path, recover=True, settings=mine)
    assert r.settings == mine and len(r.labels) == 3  # the stored settings are lost: the caller's
    assert any("settings" in n for n in r.replay_notes)
    r.close()


def test_recover_an_intact_session_resumes_it(tmp_path):
    path = made_session(tmp_path)
    before = path.read_bytes()
    r = Triage.open(demo_model(), path, recover=True, settings=FAST)
    assert len(r.labels) == 3 and any("nothing to recover" in n for n in r.replay_notes)
    r.close()
    assert path.read_bytes() == before and not (tmp_path / "s.db.damaged").exists()
    with pytest.raises(InputError, match="no triage session"):
        Triage.open(demo_model(), tmp_path / "none.db", recover=True)


def test_fresh_replaces_a_damaged_session(tmp_path):
    path = made_session(tmp_path)
    tamper(path, "UPDATE events SET truth = 'false' WHERE seq = 2")
    t = Triage.open(demo_model(), path, overwrite=True, settings=FAST)
    assert t.labels == {} and t.journal.events() == []
    t.close()


# What a session stores, and what a resume trusts --------------------------------------------

def write_order(path, model, reverse=True):
    edges = range(model.graph.num_edges)
    path.write_text("order total\n" + "".join(f"#{e}\n" for e in (reversed(edges) if reverse else edges)))
    return path


def test_a_custom_order_is_stored_and_its_file_never_read_again(tmp_path):
    model = demo_model()
    order = write_order(tmp_path / "my.order", model)
    content = order.read_text()
    t = Triage.open(model, tmp_path / "s.db", settings=Settings(schedule=f"{order}:chunked", max_iters=300))
    assert t.label(True).accepted and t.label(False).accepted
    before = state(t)
    t.close()
    meta = Journal.open(tmp_path / "s.db").meta()
    assert meta["order"] == content and str(order) not in meta["settings"]
    assert json.loads(meta["settings"])["schedule"].endswith(":chunked")
    order.write_text("not an order at all\n")
    r = Triage.open(model, tmp_path / "s.db", resume=True)
    assert state(r) == before
    r.close()


def test_a_stored_schedule_is_never_opened_as_a_path(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET first line\n")
    path = made_session(tmp_path)
    settings = {**FAST.inference(), "schedule": str(secret)}
    tamper(path, f"UPDATE meta SET value = '{json.dumps(settings)}' WHERE key = 'settings'")
    with pytest.raises(InputError) as err:
        Triage.open(demo_model(), path, resume=True)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "TOPSECRET" not in msg and "schedule" in msg, msg
    # A journal of version 1 stored the path of its custom order: it cannot resume without it.
    tamper(path, "UPDATE meta SET value = '1' WHERE key = 'version'")
    with pytest.raises(InputError, match="schedule") as err:
        Triage.open(demo_model(), path, resume=True)
    assert "TOPSECRET" not in str(err.value)


GOOD = {"schedule": "parall", "precision": "f64", "tol": 1e-6, "max_iters": 300, "damping": 0.0,
        "backend": "xla"}


@pytest.mark.parametrize("bad", [
    {"tol": "1e-6"}, {"tol": float("nan")}, {"tol": float("inf")}, {"max_iters": True}, {"max_iters": "300"},
    {"damping": False}, {"damping": None}, {"precision": None}, {"backend": 1}, {"schedule": 3},
    {"schedule": "parall:bogus"}, {"schedule": "/etc/passwd"}, {"schedule": "custom-order"},
])
def test_stored_settings_are_validated(bad):
    with pytest.raises(SettingsError):
        stored_settings({**GOOD, **bad}, Settings())


@pytest.mark.parametrize("key", ["schedule", "precision", "tol", "max_iters", "damping"])
def test_stored_settings_must_be_complete(key):
    with pytest.raises(SettingsError, match=key):
        stored_settings({k: v for k, v in GOOD.items() if k != key}, Settings())
