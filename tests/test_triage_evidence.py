"""Triage with evidence besides the person's labels (`--labels-from`, `--match`, `--soft-labels`) and with
online learning (`--learn`): shown, stored in the journal, and resumed exactly (`fastlbp.triage.evidence`)."""

import io
import json
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from reference import exact_marginals as enumerate_marginals
from triage_support import FAST, data_home, default_session, demo_model, load_demo, write_demo
from typer.testing import CliRunner

from datalog.rule_probs import apply_rule_probs
from fastlbp.cli import get_app
from fastlbp.core.graph import from_factors
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.engines.exact import exact_marginals
from fastlbp.inference.learn import Learner
from fastlbp.inference.soft import observed_model
from fastlbp.triage import Terminal, Triage, session_labels
from fastlbp.triage.evidence import Learning, StartEvidence
from fastlbp.triage.journal import Journal
from fastlbp.triage.labels import read_labels_or_session
from tests.graphs import random_factors, random_labels

RACE_DOC = json.loads((Path(__file__).resolve().parents[1] / "data" / "race.json").read_text())
# The sampler without its time budget and doubling: the same worlds on every run.
SETTINGS = {"lbp": FAST.replace(method="lbp"), "exact": FAST.replace(method="exact"),
            "sample": FAST.replace(method="sample", samples=4096, target_se=0.0)}


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    data_home(tmp_path, monkeypatch)


def invoke(*args, input="q\n"):
    return CliRunner().invoke(get_app(), [str(a) for a in args], input=input)


def versions(tmp_path):
    """race.json as an old and a new version (race(6,5) renamed race(6,1); leak(3) loses a derivation),
    the old version's labels, a match file for the rename, and a soft-labels file."""
    doc = dict(RACE_DOC)
    doc.pop("truth", None)
    new = json.loads(json.dumps(doc).replace("race(6,5)", "race(6,1)"))
    new["clauses"] = [c for c in new["clauses"] if c != ["Rleak", 35, [36, 32, 34]]]
    old, path = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(doc))
    path.write_text(json.dumps(new))
    labels = tmp_path / "old-labels.txt"
    labels.write_text("race(1,2) false\nrace(6,5) true\nleak(3) true\n")
    match = tmp_path / "match.txt"
    match.write_text("race(6,5)\trace(6,1)\n")
    soft = tmp_path / "soft.txt"
    soft.write_text("race(4,2) 0.8\n")
    return old, path, labels, match, soft


def test_triage_takes_carried_labels_and_soft_evidence_and_keeps_them(tmp_path):
    old, new, labels, match, soft = versions(tmp_path)
    start = ("triage", new, "--labels-from", old, "--old-labels", labels, "--match", match, "--soft-labels",
             soft, "--method", "exact")
    res = invoke(*start, input=f"list all\n/race\nstats\nj race(1,2)\nexport {tmp_path / 'out.txt'}\nq\n")
    assert res.exit_code == 0, res.output
    assert "labels from the old graph: 2 carried, 1 softened (P = 0.9), 0 dropped" in res.stderr
    out = res.stdout
    assert ("evidence: 2 label(s) carried from the older version, 1 softened (P = 0.9), 0 dropped; "
            "1 soft label(s) from --soft-labels") in out
    assert "[0 labelled: 0 true, 0 false | 2 carried, 2 soft | 4 open]" in out
    assert "race(4,2) [soft evidence P=0.8]" in out.replace("  [", " [")
    assert "leak(3) [soft evidence P=0.9]" in out.replace("  [", " [")
    assert "carried  false  race(1,2)" in out and "carried  true   race(6,1)" in out
    assert "race(1,2) has a label carried from the older version" in out
    exported = (tmp_path / "out.txt").read_text()
    assert "race(1,2) false" in exported and "race(6,1) true" in exported
    session = default_session(tmp_path, new)
    assert Journal.open(session).meta()["version"] == "4"
    assert dict(session_labels(session)) == {"race(1,2)": False, "race(6,1)": True}
    # Resumed: the stored evidence, not the files (changed since), and never given again.
    soft.write_text("race(4,2) 0.1\n")
    res = invoke("triage", new, "--resume", "--method", "exact", input="list all\nq\n")
    assert res.exit_code == 0, res.output
    assert "(stored in the session)" in res.stderr and "race(4,2)  [soft evidence P=0.8]" in res.stdout
    res = invoke("triage", new, "--resume", "--soft-labels", soft)
    assert res.exit_code == 2 and "keeps the evidence" in res.output and "Traceback" not in res.output
    # A bad file is `error: FILE:LINE: problem`, exit 2, and starts nothing.
    soft.write_text("race(4,2) 0.8\nrace(9,9) 0.5\n")
    res = invoke("triage", new, "--fresh", "--soft-labels", soft)
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {soft}:2:"), res.output


def test_labels_from_use_the_old_graphs_own_session(tmp_path):
    old, new, *_ = versions(tmp_path)
    assert invoke("triage", old, "--max-iters", "300", "--method", "exact", input="j race(1,2)\nf\nq\n"
                  ).exit_code == 0
    res = invoke("triage", new, "--labels-from", old, "--method", "exact", input="stats\nq\n")
    assert res.exit_code == 0, res.output
    assert "its triage session" in res.stderr and "1 carried, 0 softened" in res.stderr


def evidence_on(model):
    """Two carried labels (an alarm and an input tuple) and soft evidence on two alarms."""
    alarms = [int(a) for a in model.alarms]
    inputs = [v for v in range(model.num_vars) if model.var_names[v].startswith("in")]
    report = {"carried": 2, "softened": 1, "dropped": 0, "confidence": 0.9, "soft_file": 1}
    return StartEvidence.of(model, {alarms[0]: True, inputs[0]: False}, {alarms[1]: 0.9, alarms[2]: 0.25},
                            report)


def play(t):
    for action in ("t", "f", "t", "u", "f", "s", "t"):
        out = {"t": lambda: t.label(True), "f": lambda: t.label(False), "u": t.undo, "s": t.skip}[action]()
        assert out.accepted, out.message


@pytest.mark.parametrize("method", ["lbp", "exact", "sample"])
def test_resume_reproduces_the_marginals_bit_for_bit(tmp_path, method):
    model = demo_model()
    learning = Learning(steps=2)
    t = Triage.open(model, tmp_path / "s.db", settings=SETTINGS[method], evidence=evidence_on(model),
                    learning=learning)
    play(t)
    marginals, ranking, learned = t.marginals.copy(), t.ranking.copy(), t.learned()
    labels, order = dict(t.labels), list(t.order)
    t.close()
    r = Triage.open(demo_model(), tmp_path / "s.db", resume=True, settings=Settings())
    assert r.replay_notes == []
    assert np.array_equal(r.marginals, marginals) and np.array_equal(r.ranking, ranking)
    assert r.labels == labels and r.order == order and r.learned() == learned
    assert r.session.soft == t.session.soft and r.learning == learning
    r.close()


def test_a_label_replaces_soft_evidence_and_undo_brings_it_back(tmp_path):
    model = demo_model()
    ev = evidence_on(model)
    t = Triage.open(model, tmp_path / "s.db", settings=SETTINGS["exact"], evidence=ev)
    soft_var = next(iter(t.start.soft))
    with_soft = t.marginals.copy()
    assert t.label(True, soft_var).accepted
    # The same labels without that tuple's soft evidence.
    rest = {v: p for v, p in t.start.soft.items() if v != soft_var}
    observed, obs = observed_model(t.model, rest)
    plain = exact_marginals(observed, {**t.labels, **obs}, SETTINGS["exact"]).marginals
    np.testing.assert_allclose(t.marginals, plain[:t.model.num_vars], atol=1e-12)
    assert t.undo().accepted
    np.testing.assert_allclose(t.marginals, with_soft, atol=1e-12)
    t.close()


def test_learning_ranks_with_the_probabilities_learned_so_far(tmp_path):
    model = demo_model()
    settings = SETTINGS["exact"]
    t = Triage.open(model, tmp_path / "s.db", settings=settings, learning=Learning(steps=2))
    first = t.current
    out = t.label(False)
    assert out.accepted and out.round.learn_s is not None and "learning" in _round_text(out.round)
    learner = Learner([model], [{first: False}], Learning(steps=2).options(settings))
    learner.run(max_iters=2, information=False)  # as triage's steps after a label
    assert t.learned() == learner.current()
    want = exact_marginals(apply_rule_probs(model, learner.current()), {first: False}, settings).marginals
    np.testing.assert_allclose(t.marginals, want, atol=1e-9)
    assert t.learned() != {r.name: r.probability for r in model.meta["derivation"].rules}
    # An undo restores the probabilities before the label exactly.
    assert t.undo().accepted
    assert t.learned() == {r.name: r.probability for r in model.meta["derivation"].rules}
    text = io.StringIO()
    Terminal(t, io.StringIO("t\nstats\n"), text).run()
    assert "rule probabilities learned from the labels: R" in text.getvalue()
    t.close()


def _round_text(info):
    from fastlbp.triage.terminal import format_round

    return format_round(info)


def test_learning_compiles_nothing_in_the_interactive_loop(tmp_path):
    from fastlbp.engines.exact import kernels

    model = demo_model()
    t = Triage.open(model, tmp_path / "s.db", settings=SETTINGS["lbp"], learning=Learning(steps=2))
    e_step = t.online.learner._posteriors[0].e_step.runner.run
    rounds = t.session.runner.run
    sizes = (e_step._cache_size(), rounds._cache_size())
    play(t)
    assert (e_step._cache_size(), rounds._cache_size()) == sizes
    t.close()
    t = Triage.open(model, tmp_path / "e.db", settings=SETTINGS["exact"], learning=Learning(steps=2))
    assert t.label(True).accepted
    before = kernels.compiled()
    play(t)
    assert kernels.compiled() == before
    t.close()


def test_learn_through_the_command_line_and_resume(tmp_path):
    graph, _ = write_demo(tmp_path)
    args = ("triage", graph, "--max-iters", "300", "--method", "exact")
    res = invoke(*args, "--learn", "--learn-steps", "2", input="t\nf\nstats\nq\n")
    assert res.exit_code == 0, res.output
    assert "learning the rule probabilities from the labels: 2 EM step(s)" in res.stdout
    assert "(learning " in res.stdout and "rule probabilities learned from the labels: R" in res.stdout
    t = Triage.open(load_demo(graph), default_session(tmp_path, graph), resume=True)
    learned = t.learned()
    t.close()
    res = invoke(*args, "--resume", input="stats\nq\n")
    assert res.exit_code == 0, res.output
    assert "learning the rule probabilities: 2 EM step(s) per label (stored in the session)" in res.stderr
    assert invoke(*args, "--resume", "--learn").exit_code == 2
    t = Triage.open(load_demo(graph), default_session(tmp_path, graph), resume=True)
    assert t.learned() == learned
    t.close()


def test_stored_evidence_is_checked_on_resume(tmp_path):
    from triage_support import tamper

    model = demo_model()
    t = Triage.open(model, tmp_path / "s.db", settings=FAST, evidence=evidence_on(model))
    t.close()
    for bad in ('{"labels": [["nope", true]], "soft": [], "report": {}}',
                '{"labels": [], "soft": [["race(1)", 1.5]], "report": {}}', "not json"):
        tamper(tmp_path / "s.db", f"UPDATE meta SET value = '{bad}' WHERE key = 'evidence'")
        with pytest.raises(Exception, match="damaged") as err:
            Triage.open(model, tmp_path / "s.db", resume=True)
        assert "evidence" in str(err.value)


def test_a_session_with_carried_labels_reads_as_labels(tmp_path):
    model = load_demo(write_demo(tmp_path)[0])
    ev = evidence_on(model)
    t = Triage.open(model, tmp_path / "s.db", settings=FAST, evidence=ev)
    assert t.label(False).accepted
    t.close()
    m, labels = read_labels_or_session(tmp_path / "s.db", model)
    names = {m.var_names[v]: x for v, x in labels.items()}
    assert dict(ev.labels).items() <= names.items() and len(names) == 3


pexpect = pytest.importorskip("pexpect")


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_pty_kill_and_resume_with_evidence_and_learning(tmp_path):
    from test_triage_terminal import PROMPT, spawn

    old, new, labels, match, soft = versions(tmp_path)
    child = spawn(tmp_path, str(new), "--labels-from", str(old), "--old-labels", str(labels), "--match",
                  str(match), "--soft-labels", str(soft), "--learn", "--method", "exact")
    child.expect(r"evidence: 2 label\(s\) carried")
    child.expect(PROMPT)
    child.sendline("t")
    child.expect(r"accepted: (\S+) = true")
    first = child.match.group(1)
    child.kill(signal.SIGKILL)  # the moment the label is acknowledged
    child.wait()
    t = Triage.open(load_demo(new), default_session(tmp_path, new), resume=True)
    names = {t.model.var_names[v]: x for v, x in t.labels.items()}
    assert names == {"race(1,2)": False, "race(6,1)": True, first: True}
    assert t.learning == Learning() and len(t.session.soft) == 2
    t.close()


def test_recover_keeps_the_stored_evidence_and_learning(tmp_path):
    from triage_support import tamper

    model = demo_model()
    t = Triage.open(model, tmp_path / "s.db", settings=SETTINGS["exact"], evidence=evidence_on(model),
                    learning=Learning(steps=1))
    play(t)
    t.close()
    tamper(tmp_path / "s.db", "UPDATE events SET truth = 'false' WHERE seq = 3")
    r = Triage.open(model, tmp_path / "s.db", recover=True, settings=Settings())
    assert any("recovered 2 of" in n for n in r.replay_notes)
    assert r.start.evidence == evidence_on(model) and r.learning == Learning(steps=1)
    assert len(r.order) == 2 and r.stats()["carried"] == 2
    r.close()
    assert Journal.open(tmp_path / "s.db").meta()["evidence"] == evidence_on(model).to_json()


@pytest.mark.parametrize("method", ["lbp", "exact"])
def test_learning_refuses_a_label_the_model_rules_out(tmp_path, method):
    from triage_support import hand_model

    model = hand_model()
    t = Triage.open(model, tmp_path / "s.db", settings=SETTINGS[method], learning=Learning(steps=2))
    before, marginals = t.learned(), t.marginals.copy()
    out = t.label(False, model.index["race(1)"])
    assert not out.accepted and "contradictory labels" in out.message
    assert t.learned() == before and np.array_equal(t.marginals, marginals) and t.online.before == []
    assert t.label(True, model.index["race(2)"]).accepted and t.learned() != before
    t.close()


@hsettings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6))
def test_session_evidence_matches_enumeration(seed):
    """Carried labels, soft evidence and a person's labels in a session (exact inference), then resumed:
    the marginals are enumeration's with the labels and a unary factor per soft tuple (within 1e-9)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    factors = random_factors(rng, n, n, hard=0.0)
    model = Model(from_factors(factors, n), tuple(f"x{i}" for i in range(n)), alarms=tuple(range(n)))
    carried = random_labels(rng, n, 1)
    soft = {int(v): float(rng.uniform(0.02, 0.98)) for v in rng.choice(n, size=2, replace=False)}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.db"
        # No hard factors (hard=0.0): every label set has positive probability.
        evidence = StartEvidence.of(model, carried, soft)
        t = Triage.open(model, path, settings=SETTINGS["exact"], evidence=evidence)
        out = t.label(bool(rng.integers(2)))
        labels = dict(t.labels)
        want = enumerate_marginals(factors, n, labels, soft)
        np.testing.assert_allclose(t.marginals, want, rtol=0, atol=1e-9)
        assert out.accepted and set(carried) <= set(labels)
        t.close()
        r = Triage.open(model, path, resume=True)
        assert np.array_equal(r.marginals, t.marginals) and r.labels == labels
        r.close()
