"""The triage terminal (`fastlbp.triage.terminal`): the command loop through `fastlbp triage` in
CliRunner, on plain streams, and in a real pseudo-terminal (kill and Ctrl-C lose no
acknowledged label)."""

import io
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from triage_support import data_home, default_session, demo_model, load_demo, write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.settings import Settings
from fastlbp.triage import Terminal, Triage
from fastlbp.triage.outcome import RoundInfo
from fastlbp.triage.terminal import format_round

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    data_home(tmp_path, monkeypatch)


def test_terminal_loop_with_clirunner(tmp_path):
    graph, _ = write_demo(tmp_path)
    keys = "h\nt\n/race(1\nj race(2)\nf\nstats\nbogus\nu\nlist 3\nq\n"
    res = CliRunner().invoke(get_app(), ["triage", str(graph), "--max-iters", "300"], input=keys)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "commands" in out and out.count("accepted:") == 2 and "race(2) = false" in out
    assert "why: strongest of" in out and "P(clause)" in out and "round " in out and " ms" in out
    assert "unknown command 'bogus'" in out and "undid label of race(2)" in out
    assert "labelled 2 (1 true, 1 false)" in out
    assert default_session(tmp_path, graph).exists() and not (tmp_path / "g.json.triage.db").exists()
    res = CliRunner().invoke(get_app(), ["triage", str(graph)], input="q\n")
    assert res.exit_code == 2 and "--resume" in res.stderr
    res = CliRunner().invoke(get_app(), ["triage", str(graph), "--resume"], input="stats\n")
    assert res.exit_code == 0 and "resumed 1 label(s)" in res.stderr and "labelled 1 (1 true" in res.stdout


def test_terminal_unit_io(tmp_path):
    t = Triage.open(demo_model(), tmp_path / "s.db", settings=Settings(max_iters=300))
    out = io.StringIO()
    Terminal(t, io.StringIO("t\n"), out).run()  # end of input = quit
    assert "accepted:" in out.getvalue() and "saved:" in out.getvalue()
    t.close()


def test_format_round():
    assert format_round(None) == ""
    assert format_round(RoundInfo(0.0042, 17, True, 0.0)) == "round 4.2 ms, 17 iterations, converged"
    assert "NOT converged (last change 0.25)" in format_round(RoundInfo(0.1, 300, False, 0.25))


# Through a real pseudo-terminal ------------------------------------------------

pexpect = pytest.importorskip("pexpect")
# The prompt at the start of a line ("moved: race(1) 0.12 -> 0.81" holds "> " too), after any mode
# switch readline writes first (bracketed paste: ESC [ ? 2004 h).
PROMPT = r"\n(?:\x1b\[[0-9;?]*[a-zA-Z])*> "


def spawn(tmp_path, *args, preexec_fn=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", COLUMNS="120")
    return pexpect.spawn(sys.executable, ["-m", "fastlbp", "triage", *args],
                         cwd=str(tmp_path), env=env, encoding="utf-8", timeout=60, preexec_fn=preexec_fn)


# pexpect forks a pty child that execs at once; JAX's threads in this process do not matter.
pytestmark_pty = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


@pytestmark_pty
def test_pty_session_kill_and_resume(tmp_path):
    graph, _ = write_demo(tmp_path)
    child = spawn(tmp_path, str(graph), "--max-iters", "300")
    child.expect(PROMPT)
    child.sendline("t")
    child.expect(r"accepted: (\S+) = true")
    first = child.match.group(1)
    child.expect(PROMPT)
    child.sendline("f")
    child.expect(r"accepted: (\S+) = false")
    second = child.match.group(1)
    # Kill the moment the label is acknowledged, before the prompt returns.
    child.kill(signal.SIGKILL)
    child.wait()
    t = Triage.open(load_demo(graph), default_session(tmp_path, graph), resume=True)
    names = {t.model.var_names[v]: truth for v, truth in t.labels.items()}
    assert names == {first: True, second: False}
    t.close()

    child = spawn(tmp_path, str(graph), "--resume")
    child.expect(r"resumed 2 label\(s\)")
    child.expect(PROMPT)
    child.sendline("u")
    child.expect_exact(f"undid label of {second}")
    child.expect(PROMPT)
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
        child.expect(PROMPT)
        child.sendline(key)
        child.expect(r"accepted: (\S+) = ")
        acknowledged.append(child.match.group(1))
    child.expect(PROMPT)
    child.sendline("t")  # killed while this label may or may not be journaled
    child.kill(signal.SIGKILL)
    child.wait()
    t = Triage.open(load_demo(graph), default_session(tmp_path, graph), resume=True)
    labelled = [t.model.var_names[v] for _, v in t.order]
    assert labelled[:4] == acknowledged and len(labelled) in (4, 5)
    t.close()


@pytestmark_pty
def test_pty_ctrl_c_exits_cleanly(tmp_path):
    graph, _ = write_demo(tmp_path)
    child = spawn(tmp_path, str(graph), "--max-iters", "300")
    child.expect(PROMPT)
    child.sendline("t")
    child.expect("accepted:")
    child.expect(PROMPT)
    child.sendintr()
    child.expect("interrupted; saved:")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    t = Triage.open(load_demo(graph), default_session(tmp_path, graph), resume=True)
    assert len(t.labels) == 1
    t.close()


@pytestmark_pty
def test_pty_ctrl_c_works_when_started_with_sigint_ignored(tmp_path):
    # A process started with SIGINT ignored (a test runner's worker, some IDEs and background jobs)
    # got no KeyboardInterrupt: Ctrl-C at the prompt did nothing. Triage takes the default back.
    import signal

    graph, _ = write_demo(tmp_path)
    child = spawn(tmp_path, str(graph), "--max-iters", "300",
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    child.expect(PROMPT)
    child.sendintr()
    child.expect("interrupted; saved:")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130


def run_triage(tmp_path, *args, input="q\n"):
    """A second `fastlbp triage` process, run to its end."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "fastlbp", "triage", *args], cwd=str(tmp_path), env=env,
                          input=input, capture_output=True, text=True, timeout=120)


@pytestmark_pty
def test_a_session_in_use_is_refused_to_a_second_process(tmp_path):
    graph, _ = write_demo(tmp_path)
    session = default_session(tmp_path, graph)
    holder = spawn(tmp_path, str(graph), "--max-iters", "300")
    holder.expect(PROMPT)
    holder.sendline("t")
    holder.expect(r"accepted: (\S+) = true")
    first = holder.match.group(1)
    holder.expect(PROMPT)
    before = session.read_bytes()
    for flags in (("--fresh",), ("--resume",)):  # the others: test_triage_state.py, in one process
        res = run_triage(tmp_path, str(graph), *flags, input="t\nq\n")
        assert res.returncode == 2, (flags, res.stderr)
        assert res.stderr.startswith(f"error: {session}: "), res.stderr
        assert f"in use by process {holder.pid} on host {socket.gethostname()} since " in res.stderr
        assert "Traceback" not in res.stderr
    assert session.read_bytes() == before  # --fresh replaced nothing
    holder.sendline("f")  # the holder's session still works
    holder.expect(r"accepted: (\S+) = false")
    second = holder.match.group(1)
    # A kill releases the lock (the OS drops the flocks of a dead process).
    holder.kill(signal.SIGKILL)
    holder.wait()
    res = run_triage(tmp_path, str(graph), "--resume", "--max-iters", "300", input="stats\nq\n")
    assert res.returncode == 0, res.stderr
    assert "resumed 2 label(s)" in res.stderr and "labelled 2 (1 true, 1 false)" in res.stdout
    t = Triage.open(load_demo(graph), session, resume=True)
    assert {t.model.var_names[v]: x for v, x in t.labels.items()} == {first: True, second: False}
    t.close()


def test_names_with_escape_sequences_are_shown_escaped(tmp_path):
    # A tuple name from the input must not drive the user's terminal (clear the screen, recolour).
    from datalog.bayesnet import to_model
    from datalog.derivation import DerivationGraph, Rule

    evil = "race(\x1b[2J\x1b[31m1)"
    dg = DerivationGraph(
        tuples=["in(a)", evil], rules=[Rule("R0", 0.9, "race(x) :- in(x)")],
        clause_rule=np.array([0], np.int32), clause_head=np.array([1], np.int32),
        body_offsets=np.array([0, 1]), body=np.array([0], np.int32), priors={0: 0.5},
        alarms=np.array([1], np.int32))
    t = Triage.open(to_model(dg), tmp_path / "s.db", settings=Settings(max_iters=300))
    out = io.StringIO()
    Terminal(t, io.StringIO("list\n/race\nwhy\nt\n"), out).run()
    text = out.getvalue()
    assert "\x1b" not in text and "race(\\x1b[2J\\x1b[31m1)" in text
    t.close()
