"""A resume in at most two rounds, whatever the session's length (`fastlbp.triage.snapshot`): the state
it restores is the uninterrupted session's (labels, ranking, marginals bit for bit, undo history, skips,
focus, learned probabilities), and a snapshot that does not fit its journal is never trusted."""

import json

import numpy as np
import pytest
from triage_support import FAST, FailingConnection, demo_model, random_action, tamper

from fastlbp.core.errors import InputError
from fastlbp.inference.session import Session
from fastlbp.triage import Triage
from fastlbp.triage.evidence import Learning

LBP = FAST.replace(method="lbp")  # LBP's rounds start from the last one's messages: history matters


@pytest.fixture
def rounds(monkeypatch):
    """Counts `Session.run` calls (every inference round of a triage session is one)."""
    calls = [0]
    run = Session.run

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Session, "run", counted)
    return calls


def model():
    return demo_model(num_alarms=60)


def state(t):
    """Everything a person sees or undo reverts."""
    return (dict(t.labels), t.ranking.tolist(), t.marginals.tobytes(), t.current, list(t.skipped),
            list(t.order), list(t._history), t.settings, t.replay_notes)


def long_session(path, settings, labels=50, seed=0, learning=None):
    """`labels` labels (with skips, jumps and undos among them); returns the open session."""
    rng = np.random.default_rng(seed)
    t = Triage.open(model(), path, settings=settings, learning=learning)
    while len(t.labels) < labels:
        action, out = random_action(t, rng, ["t", "f", "f", "f", "skip", "undo", "jump"])
        assert out.accepted or action not in ("t", "f")
    return t


def go_on(t):
    """A few more actions: their rounds start from the restored messages."""
    t.label(True)
    t.undo()
    t.label(False)
    t.skip()
    t.label(True)
    return state(t)


@pytest.mark.parametrize("settings", [LBP, FAST], ids=["lbp", "default"])
def test_a_50_label_session_resumes_in_one_round_as_it_was(tmp_path, rounds, settings):
    t = long_session(tmp_path / "s.db", settings)
    before = state(t)
    twin = long_session(tmp_path / "twin.db", settings)  # the same actions, never interrupted
    t.close()
    rounds[0] = 0
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=settings)
    assert rounds[0] <= 2 and r.resume_rounds == rounds[0] == 1
    assert state(r) == before
    assert r.session.method == twin.session.method
    assert go_on(r) == go_on(twin)  # later rounds warm-start from the same messages
    r.close()
    twin.close()


def test_a_kill_during_the_last_round_costs_one_more_round(tmp_path, rounds):
    t = long_session(tmp_path / "s.db", LBP, labels=20)
    name = t.model.var_names[t.current]
    twin = long_session(tmp_path / "twin.db", LBP, labels=20)
    assert twin.label(True).accepted
    t.close()
    # Killed after the label was saved, before its round ended (and before its snapshot).
    tamper(tmp_path / "s.db", f"INSERT INTO events (kind, alarm, truth, at) VALUES ('label', '{name}', 1, 0)")
    rounds[0] = 0
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    assert rounds[0] == 2
    assert state(r) == state(twin)
    r.close()
    twin.close()


def learning_session(path):
    t = long_session(path, LBP, labels=8, learning=Learning(steps=2))  # the E-step is LBP's too
    assert t.change_settings({"damping": 0.3}).accepted  # data to the round: warm
    assert t.label(False).accepted
    assert t.change_settings({"schedule": "seqfix"}).accepted  # a new runner: a cold round
    assert t.label(True).accepted and t.undo().accepted and t.skip().accepted
    return t


def learned(t):
    return [p.tobytes() for p in [*t.online.before, t.online.learner.probability]]


def test_settings_changes_and_learning_resume_in_one_round(tmp_path, rounds):
    t = learning_session(tmp_path / "s.db")
    twin = learning_session(tmp_path / "twin.db")
    before = state(t), learned(t)
    t.close()
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    assert r.resume_rounds == 1
    assert (state(r), learned(r)) == before
    # The next labels learn from the same E-step messages; undo brings each label's probabilities back.
    assert (go_on(r), learned(r)) == (go_on(twin), learned(twin))
    assert r.undo().accepted and twin.undo().accepted and learned(r) == learned(twin)
    r.close()
    twin.close()


def test_a_journal_without_a_snapshot_replays_every_round(tmp_path, rounds):
    t = long_session(tmp_path / "s.db", LBP, labels=6)
    before = state(t)
    t.close()
    tamper(tmp_path / "s.db", "DROP TABLE snapshot")  # as an earlier release wrote it
    rounds[0] = 0
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    assert rounds[0] > 6 and state(r) == before  # no note: nothing is wrong with it
    r.close()
    rounds[0] = 0
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)  # the close stored one
    assert rounds[0] == 1 and state(r) == before
    r.close()


@pytest.mark.parametrize("edit", [
    "UPDATE events SET truth = 1 - truth WHERE seq = (SELECT min(seq) FROM events WHERE kind = 'label')",
    "DELETE FROM events WHERE seq = (SELECT min(seq) FROM events WHERE kind = 'label')",
    "UPDATE snapshot SET messages = substr(messages, 1, 16)",
    "UPDATE snapshot SET state = '{\"format\": 1}'",
    "UPDATE snapshot SET seq = seq + 1",
    "UPDATE snapshot SET learned = x'00'",
])
def test_a_snapshot_that_does_not_fit_its_journal_is_not_used(tmp_path, rounds, edit):
    t = long_session(tmp_path / "s.db", LBP, labels=6)
    t.close()
    tamper(tmp_path / "s.db", *([edit] if isinstance(edit, str) else edit))
    rounds[0] = 0
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    assert rounds[0] > 2 and "snapshot was not used" in r.replay_notes[0]
    after = state(r)[:-1]
    r.close()
    # The events are the session: the full replay's state, which the next resume restores in one round.
    tamper(tmp_path / "s.db", "DROP TABLE snapshot")
    full = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    assert state(full)[:-1] == after
    full.close()


def test_a_snapshot_table_of_another_definition_is_damage(tmp_path):
    t = long_session(tmp_path / "s.db", LBP, labels=3)
    labels = dict(t.labels)
    t.close()
    tamper(tmp_path / "s.db", "DROP TABLE snapshot", "CREATE TABLE snapshot (x)",
           "INSERT INTO snapshot VALUES (1)")
    with pytest.raises(InputError, match="table 'snapshot' whose definition is not a triage journal's"):
        Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    r = Triage.open(model(), tmp_path / "s.db", recover=True, settings=LBP)  # the events are kept
    assert r.labels == labels
    r.close()


def test_a_snapshot_holds_no_label(tmp_path):
    t = long_session(tmp_path / "s.db", LBP, labels=3)
    labels = dict(t.labels)
    t.close()
    conn_state = json.dumps({"format": 1, "seq": 0, "digest": "", "refused": [], "choice": None,
                             "dtype": None, "learned": None})
    tamper(tmp_path / "s.db", f"UPDATE snapshot SET state = '{conn_state}', seq = 0")
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    assert r.labels == labels  # the events say what was labelled
    r.close()


def test_refused_events_keep_their_notes(tmp_path, rounds):
    t = Triage.open(model(), tmp_path / "s.db", settings=LBP)
    assert t.label(True).accepted
    t.close()
    # Two processes on one file: an undo with nothing to undo, a second label of a labelled alarm.
    name = t.model.var_names[next(iter(t.labels))]
    tamper(tmp_path / "s.db", "INSERT INTO events (kind, alarm, truth, at) VALUES ('undo', NULL, NULL, 0)",
           "INSERT INTO events (kind, alarm, truth, at) VALUES ('undo', NULL, NULL, 0)",
           f"INSERT INTO events (kind, alarm, truth, at) VALUES ('label', '{name}', 0, 0)")
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    notes, before = r.replay_notes, state(r)
    assert len(notes) == 1 and "nothing to undo" in notes[0]
    r.close()
    rounds[0] = 0
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    assert rounds[0] == 1 and r.replay_notes == notes and state(r) == before
    r.close()


def test_a_snapshot_that_cannot_be_written_loses_nothing(tmp_path, rounds):
    t = long_session(tmp_path / "s.db", LBP, labels=4)
    real = t.journal.conn
    t.journal.conn = FailingConnection(real, fail_on="snapshot")
    out = t.label(False)
    assert out.accepted and "snapshot was not saved" in out.message
    t.journal.conn = real
    before = state(t)
    t.journal.close()  # killed: no snapshot at the close either
    rounds[0] = 0
    r = Triage.open(model(), tmp_path / "s.db", resume=True, settings=LBP)
    assert rounds[0] == 2 and state(r) == before
    r.close()
