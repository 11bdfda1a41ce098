"""The triage prompt (`fastlbp.triage.lineinput`, `fastlbp.triage.terminal`): line editing, history and
Tab in a real pseudo-terminal; editing keys from a pipe named, never echoed; the "moved:" line after a
label; `more` and `--all` on long lists; `export`."""

import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from triage_support import FAST, data_home, demo_model, write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.io.loading import read_labels
from fastlbp.triage import Terminal, Triage
from fastlbp.triage.lineinput import has_keys, shown_keys
from fastlbp.triage.terminal import MOVED_OTHERS, format_p, moved_line

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _data_home(tmp_path, monkeypatch):
    data_home(tmp_path, monkeypatch)


def run_terminal(t, keys: str) -> str:
    out = io.StringIO()
    Terminal(t, io.StringIO(keys), out).run()
    return out.getvalue()


# Editing keys where nothing edits the line ----------------------------------------------

def test_editing_keys_from_a_pipe_are_named_not_echoed(tmp_path):
    t = Triage.open(demo_model(), tmp_path / "s.db", settings=FAST)
    text = run_terminal(t, "stat\x1b[D\x1b[Dx\n\x1b[A\n\x1bOB\nSTATS\n")
    t.close()
    assert "\x1b" not in text
    assert "unknown command 'stat<left><left>x': editing keys work only when the input is a terminal" in text
    assert "unknown command '<up>'" in text and "unknown command '<down>'" in text
    assert "labelled 0 (0 true, 0 false)" in text  # STATS: commands are case-blind


def test_shown_keys():
    assert shown_keys("a\x1b[3~b\x1b[5~\x7f") == "a<delete>b<page up><backspace>"
    assert shown_keys("x\x1b[1;5Cy") == "x\\x1b[1;5Cy"  # unknown sequences escaped, whole
    assert shown_keys("\x1b") == "\\x1b" and shown_keys("plain") == "plain"
    assert has_keys("a\x1b[A") and has_keys("ab\x7f") and not has_keys("j race(1)\t")


# The "moved:" line -------------------------------------------------------------------------

def test_moved_line_names_the_alarms_that_moved_most():
    names = [f"race({i})" for i in range(6)]
    before = np.array([0.12, 0.40, 0.5, 0.5, 0.9, 0.3])
    after = np.array([0.81, 0.05, 0.65, 0.2, 0.9, 0.3])
    line = moved_line(before, after, np.arange(6), names)
    assert line == "moved: race(0) 0.12 -> 0.81, race(1) 0.40 -> 0.05, 2 others by > 0.1"
    assert moved_line(before, before, np.arange(6), names) == "moved: no open alarm by more than 0.001"
    assert moved_line(before, after, np.zeros(0, np.int64), names) == "moved: no open alarm left"
    assert format_p(3.2e-5) == "3.2e-05" and format_p(0.99996) == "0.99996" and format_p(1.0) == "1"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=12))
def test_moved_line_against_a_sort(pairs):
    before, after = (np.array(x, np.float64) for x in zip(*pairs, strict=True))
    names = [f"a{i}" for i in range(len(pairs))]
    line = moved_line(before, after, np.arange(len(pairs)), names)
    d = np.abs(after - before)
    ranked = sorted(range(len(pairs)), key=lambda i: (-d[i], i))
    shown = [i for i in ranked[:2] if d[i] >= 1e-3]
    if not shown:
        assert line.startswith("moved: no open alarm")
        return
    named = [p.split(" ")[0] for p in line[len("moved: "):].split(", ") if not p[0].isdigit()]
    assert named == [names[i] for i in shown]
    others = sum(d[i] > MOVED_OTHERS for i in range(len(pairs)) if i not in shown)
    assert (f"{others} other" in line) == (others > 0)


def test_each_label_says_what_moved(tmp_path):
    graph, _ = write_demo(tmp_path)
    res = CliRunner().invoke(get_app(), ["triage", str(graph), "--max-iters", "300"], input="t\nf\nu\nq\n")
    assert res.exit_code == 0, res.output
    assert res.stdout.count("moved: ") == 3  # two labels and an undo
    assert "moved: race(" in res.stdout or "moved: no open alarm" in res.stdout


# Long lists ------------------------------------------------------------------------------

def test_search_and_list_say_how_many_more_and_page(tmp_path):
    graph, _ = write_demo(tmp_path, width=30)
    keys = "/race\nmore\nmore\n/race --all\nlist\nmore\nlist all\nlist x\n/nomatch\nq\n"
    res = CliRunner().invoke(get_app(), ["triage", str(graph), "--max-iters", "300"], input=keys)
    assert res.exit_code == 0, res.output
    blocks = res.stdout.split("\n> ")
    n = int(blocks[1].split(" alarms match")[0].split("\n")[-1])
    assert n > 20
    assert blocks[1].count("\n  #") == 20 and f"... {n - 20} more: `more` shows the next" in blocks[1]
    assert "`/race --all` all of them" in blocks[1]
    assert blocks[2].count("\n  #") + blocks[2].startswith("  #") == n - 20 and "more:" not in blocks[2]
    assert "nothing more to show" in blocks[3]
    assert blocks[4].count("  #") == n and "more:" not in blocks[4]
    assert blocks[5].count("  #") == 10 and f"... {n - 10} more" in blocks[5] and "`list all`" in blocks[5]
    assert blocks[6].count("  #") == min(20, n - 10)
    assert blocks[7].count("  #") == n
    assert "list how many?" in blocks[8] and "no alarm matches 'nomatch'" in blocks[9]


# export ----------------------------------------------------------------------------------

def test_export_writes_labels_rank_reads(tmp_path):
    graph, _ = write_demo(tmp_path)
    out = tmp_path / "labels.txt"
    keys = f"t\nf\nt\nu\nexport {out}\nexport {graph}\nexport\nq\n"
    res = CliRunner().invoke(get_app(), ["triage", str(graph), "--max-iters", "300"], input=keys)
    assert res.exit_code == 0, res.output
    assert f"wrote 2 label(s) to {out}" in res.stdout
    assert "exists and is not a labels file written by export" in res.stdout  # the graph is never replaced
    assert "export to which file?" in res.stdout
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# fastlbp triage labels of ") and len(lines) == 3
    accepted = [w.split(" = ") for w in res.stdout.split("accepted: ")[1:]]
    assert lines[1:] == [f"{a[0]} {a[1].split()[0]}" for a in accepted[:2]]
    from triage_support import load_demo
    model = load_demo(graph)
    assert {model.var_names[v]: x for v, x in read_labels(out, model).items()} == {
        a[0]: a[1].split()[0] == "true" for a in accepted[:2]}


# A real terminal: editing, history, Tab ------------------------------------------------------

pexpect = pytest.importorskip("pexpect")
LEFT, UP = "\x1b[D", "\x1b[A"
# The prompt at the start of a line ("moved: race(1) 0.12 -> 0.81" holds "> " too), after any mode
# switch readline writes first (bracketed paste: ESC [ ? 2004 h).
PROMPT = r"\n(?:\x1b\[[0-9;?]*[a-zA-Z])*> "


def spawn(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", COLUMNS="120", TERM="xterm",
               XDG_DATA_HOME=str(tmp_path / "data"), INPUTRC="/dev/null")
    return pexpect.spawn(sys.executable, ["-m", "fastlbp", "triage", *args],
                         cwd=str(tmp_path), env=env, encoding="utf-8", timeout=60)


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_arrow_keys_edit_and_history_is_kept_across_sessions(tmp_path):
    graph, _ = write_demo(tmp_path)
    child = spawn(tmp_path, str(graph), "--max-iters", "300")
    child.expect(PROMPT)
    child.send("sats" + LEFT * 3 + "t\r")  # left three times, insert t: "stats"
    child.expect(r"labelled 0 \(0 true, 0 false\)")
    child.expect(PROMPT)
    child.send(UP + "\r")  # the last command again
    child.expect(r"labelled 0 \(0 true, 0 false\)")
    child.expect(PROMPT)
    child.send("hel\t\r")  # Tab completes the command
    child.expect("commands \\(a letter")
    child.expect(PROMPT)
    child.sendline("q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "unknown command" not in (child.before or "")
    history = (tmp_path / "data" / "fastlbp" / "triage_history").read_text().split("\n")
    assert [h for h in history if h and not h.startswith("_HiStOrY")] == ["stats", "help", "q"]

    child = spawn(tmp_path, str(graph), "--resume")
    child.expect(PROMPT)
    child.send(UP + UP + UP + "\r")  # three back: "stats", from the session before
    child.expect(r"labelled 0 \(0 true, 0 false\)")
    child.expect(PROMPT)
    child.sendline("q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_tab_completes_commands_and_alarm_names(tmp_path):
    t = Triage.open(demo_model(), tmp_path / "s.db", settings=FAST)
    term = Terminal(t, io.StringIO(""), io.StringIO())
    term.run()
    assert "stats " in term._complete("st", "") and "export " in term._complete("ex", "")
    names = term._complete("race(", "j ")
    assert names == [t.model.var_names[v] for v in t.ranking.tolist()]  # open alarms, by rank
    assert term._complete("race(", "search ") == names and term._complete("x", "t ") == []
    t.close()
