"""The triage session: state machine, journal and exact resume, explanations, no recompilation,
and the terminal front end through CliRunner and a real pseudo-terminal."""

import io
import os
import signal
import sys
from pathlib import Path

import jax.monitoring
import numpy as np
import pytest
from conftest import DATA
from triage_support import demo_model, hand_model, install, write_demo
from typer.testing import CliRunner

from fastlbp import api, engine
from fastlbp.errors import InputError
from fastlbp.triage import Journal, Terminal, Triage, explain, format_explanation

ROOT = Path(__file__).resolve().parents[1]
COMPILES = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: COMPILES.append(event) if event.endswith("backend_compile_duration") else None)


def open_demo(tmp_path, resume=False, **kw):
    return Triage.open(demo_model(), tmp_path / "s.db", resume=resume, max_iters=300, **kw)


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


def test_journal_refuses_misuse(tmp_path):
    open_demo(tmp_path).close()
    with pytest.raises(InputError, match="--resume"):
        open_demo(tmp_path)
    open_demo(tmp_path, overwrite=True).close()
    with pytest.raises(InputError, match="another graph"):
        Triage.open(demo_model(seed=9), tmp_path / "s.db", resume=True)
    with pytest.raises(InputError, match="no triage session"):
        Triage.open(demo_model(), tmp_path / "none.db", resume=True)
    (tmp_path / "junk.db").write_text("not sqlite at all" * 100)
    with pytest.raises(InputError, match="not a triage session"):
        Journal.open(tmp_path / "junk.db")


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


def test_explain_ranks_derivations_by_clause_marginal():
    model = hand_model()
    s = api.Session(model)
    p = s.run().marginals
    race2 = model.index["race(2)"]
    ex = explain(model, p, race2, k=5)
    assert ex.kind == "derivation" and ex.total == 2
    clause_var = model.meta["clause_var"]
    assert [d.rule for d in ex.derivations] == ["R1", "R2"]  # p(R1#1) = .9*.5 > p(R2#2) = .6*.5
    assert ex.derivations[0].probability == pytest.approx(p[clause_var[1]])
    assert [b for b, _ in ex.derivations[0].body] == ["in(a)", "in(b)"]
    assert ex.derivations[0].rule_text == "race(y) :- in(x), in(y)"
    text = format_explanation(ex)
    assert "R1" in text and "<- in(b)" in text
    assert explain(model, p, race2, k=1).derivations[0].rule == "R1"
    assert "input tuple" in format_explanation(explain(model, p, model.index["in(a)"]))


def test_explain_without_derivation_shows_factor_neighbours():
    from datalog import causal_fg
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    p = api.Session(model).run().marginals
    v = model.index["87"]
    ex = explain(model, p, v)
    assert ex.kind == "factor" and ex.derivations
    heads = np.asarray(model.graph.factor_head)
    a = int(np.flatnonzero(heads == v)[0])
    off = np.asarray(model.graph.factor_offsets)
    body = [model.var_names[u] for u in np.asarray(model.graph.edge_var)[off[a] + 1: off[a + 1]]]
    assert [b for b, _ in ex.derivations[0].body] == body
    assert "factor neighbours" in format_explanation(ex)


def test_no_recompilation_across_rounds(tmp_path):
    t = open_demo(tmp_path)
    t.label(False)  # any one-off host-side helpers compile here
    cache = engine.run_parall_jit._cache_size()
    COMPILES.clear()
    for truth in (True, False, False, True):
        assert t.label(truth).accepted
    t.undo()
    t.skip()
    t.jump("3")
    t.label(True)
    assert COMPILES == [] and engine.run_parall_jit._cache_size() == cache
    t.close()


def test_terminal_loop_with_clirunner(tmp_path):
    install()
    from fastlbp.cli import get_app
    graph, _ = write_demo(tmp_path)
    keys = "h\nt\n/race(1\nj race(2)\nf\nstats\nbogus\nu\nlist 3\nq\n"
    res = CliRunner().invoke(get_app(), ["triage", str(graph), "--max-iters", "300"], input=keys)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "commands" in out and out.count("accepted:") == 2 and "race(2) = false" in out
    assert "why: strongest of" in out and "P(clause)" in out and "round " in out and " ms" in out
    assert "unknown command 'bogus'" in out and "undid label of race(2)" in out
    assert "labelled 2 (1 true, 1 false)" in out
    assert (tmp_path / "g.demo.triage.db").exists()
    res = CliRunner().invoke(get_app(), ["triage", str(graph)], input="q\n")
    assert res.exit_code == 2 and "--resume" in res.stderr
    res = CliRunner().invoke(get_app(), ["triage", str(graph), "--resume"], input="stats\n")
    assert res.exit_code == 0 and "resumed 1 label(s)" in res.stderr and "labelled 1 (1 true" in res.stdout


def test_terminal_unit_io(tmp_path):
    t = open_demo(tmp_path)
    out = io.StringIO()
    Terminal(t, io.StringIO("t\n"), out).run()  # end of input = quit
    assert "accepted:" in out.getvalue() and "saved:" in out.getvalue()
    t.close()


# Through a real pseudo-terminal ------------------------------------------------

pexpect = pytest.importorskip("pexpect")


def spawn(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", COLUMNS="120")
    return pexpect.spawn(sys.executable, [str(ROOT / "tests" / "triage_support.py"), "triage", *args],
                         cwd=str(tmp_path), env=env, encoding="utf-8", timeout=60)


# pexpect forks a pty child that execs at once; JAX's threads in this process do not matter.
pytestmark_pty = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


@pytestmark_pty
def test_pty_session_kill_and_resume(tmp_path):
    graph, _ = write_demo(tmp_path)
    child = spawn(tmp_path, str(graph), "--max-iters", "300")
    child.expect("> ")
    child.sendline("t")
    child.expect(r"accepted: (\S+) = true")
    first = child.match.group(1)
    child.expect("> ")
    child.sendline("f")
    child.expect(r"accepted: (\S+) = false")
    second = child.match.group(1)
    # Kill the moment the label is acknowledged, before the prompt returns.
    child.kill(signal.SIGKILL)
    child.wait()
    t = Triage.open(demo_model(), tmp_path / "g.demo.triage.db", resume=True)
    names = {t.model.var_names[v]: truth for v, truth in t.labels.items()}
    assert names == {first: True, second: False}
    t.close()

    child = spawn(tmp_path, str(graph), "--resume")
    child.expect(r"resumed 2 label\(s\)")
    child.expect("> ")
    child.sendline("u")
    child.expect_exact(f"undid label of {second}")
    child.expect("> ")
    child.sendline("q")
    child.expect("saved:")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


@pytestmark_pty
def test_pty_kill_mid_round_loses_no_acknowledged_label(tmp_path):
    graph, _ = write_demo(tmp_path)
    child = spawn(tmp_path, str(graph), "--max-iters", "300")
    acknowledged = []
    for key in "tftf":
        child.expect("> ")
        child.sendline(key)
        child.expect(r"accepted: (\S+) = ")
        acknowledged.append(child.match.group(1))
    child.expect("> ")
    child.sendline("t")  # killed while this label may or may not be journaled
    child.kill(signal.SIGKILL)
    child.wait()
    t = Triage.open(demo_model(), tmp_path / "g.demo.triage.db", resume=True)
    labelled = [t.model.var_names[v] for _, v in t.order]
    assert labelled[:4] == acknowledged and len(labelled) in (4, 5)
    t.close()


@pytestmark_pty
def test_pty_ctrl_c_exits_cleanly(tmp_path):
    graph, _ = write_demo(tmp_path)
    child = spawn(tmp_path, str(graph), "--max-iters", "300")
    child.expect("> ")
    child.sendline("t")
    child.expect("accepted:")
    child.expect("> ")
    child.sendintr()
    child.expect("interrupted; saved:")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    t = Triage.open(demo_model(), tmp_path / "g.demo.triage.db", resume=True)
    assert len(t.labels) == 1
    t.close()
