"""What a person reads (issue 40): digits their error supports, tables sized to a terminal, caveats
and method lines on stderr as whole sentences, --quiet the same everywhere, SARIF that code scanning
shows (locations of a grounded program, a warning without them, compact JSON, absent results), and
`check` judging order only beyond the reference's error."""

import csv
import dataclasses
import io
import json
import math
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from triage_support import write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.text import format_probability
from fastlbp.inference import check as checking
from fastlbp.inference import methods
from fastlbp.inference.ranking import RankedAlarm, Ranking
from fastlbp.io import sarif, writers

ROOT = Path(__file__).resolve().parents[1]
TAINT = ROOT / "data" / "taint"
TAINT_OPTS = ["--facts", str(TAINT / "facts"), "--rule-prob", str(TAINT / "rule_prob.txt")]
RACE = ROOT / "data" / "race.json"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


# Digits ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("p", "se", "shown"), [
    (0.012940, 0.00036, "0.0129"),   # data/weblech.json's first alarm: SE 0.00036 -> 4 decimals
    (0.93, 0.0035, "0.930"),         # trailing zeros are digits the error supports
    (0.5, 0.02, "0.50"),
    (0.5, 0.3, "0.5"),               # at least one decimal
    (0.999, 0.0011, "0.999"),
    (0.99, 1e-9, "0.990000"),        # never more than an exact value's 6 decimals
    (3.2e-5, 1e-5, "3e-05"),         # below 1e-4 scientific, as every table shows it
    (3.21e-5, 2e-7, "3.21e-05"),
    (1e-7, 1e-9, "1.00e-07"),
    (0.0, 1e-5, "0.00000"),
])
def test_a_sampled_probability_is_rounded_at_the_first_digit_of_its_standard_error(p, se, shown):
    assert format_probability(p, stderr=se) == shown


def test_exact_and_unchecked_probabilities_keep_their_digits():
    assert format_probability(0.01294) == "0.012940"
    assert format_probability(0.01294, stderr=math.nan) == "0.012940"
    assert format_probability(2.5e-7) == "2.500e-07"
    assert format_probability(0.0, -800.0) == "3.668e-348"  # too small to print: from its log-odds
    assert format_probability(0.0, -800.0, stderr=0.01) == "3.668e-348"


def test_the_rank_table_rounds_and_json_csv_keep_full_precision():
    alarm = RankedAlarm(1, "race(1,1)", 0, 0.012940123, -4.33, stderr=0.00036, lower=0.0123, upper=0.0137)
    r = Ranking([alarm], [], 0, True, 0.0, 0.0, 1, method="sample")
    assert writers.to_table(r).splitlines()[1].split()[:2] == ["1", "0.0129"]
    assert json.loads(writers.to_json(r))["alarms"][0]["probability"] == 0.012940123
    assert list(csv.reader(io.StringIO(writers.to_csv(r))))[1][2] == "0.012940123"
    # SARIF's message is for people: rounded the same way; its properties keep the number.
    doc = sarif.to_sarif(r)
    res = doc["runs"][0]["results"][0]
    assert res["message"]["text"] == "race(1,1): P(true) = 0.0129 (rank 1)"
    assert res["properties"]["probability"] == 0.012940123


def test_check_table_rounds_a_sampled_reference_only():
    row = checking.AlarmCheck("a(1)", 0.0123456, 0.012940123, 0.00036, math.log(0.0123456 / (1 - 0.0123456)))
    report = checking.CheckReport("sample", [row], 0.0006, 0.0006, math.nan, 1, 1, "ok", [], None, {})
    line = checking.to_table(report).splitlines()[-1].split()
    assert line[:2] == ["0.012346", "0.0129"]  # LBP's (unchecked) keeps its digits; the sampled one rounds
    exact = dataclasses.replace(report, reference="exact", alarms=[dataclasses.replace(row, stderr=0.0)])
    assert checking.to_table(exact).splitlines()[-1].split()[1] == "0.012940"


# Tables sized to a terminal; caveats on stderr -------------------------------------------------

def test_terminal_rows_from_the_terminal_height(monkeypatch):
    from fastlbp.cli import app

    class Tty:
        def isatty(self):
            return True

    class Pipe:
        def isatty(self):
            return False

    monkeypatch.setenv("LINES", "40")
    assert app.terminal_rows(Tty()) == 40 - app.TABLE_MARGIN
    monkeypatch.setenv("LINES", "6")
    assert app.terminal_rows(Tty()) == app.MIN_TABLE_ROWS
    assert app.terminal_rows(Pipe()) is None


def test_rank_shows_a_terminal_what_fits_and_a_pipe_everything(tmp_path, monkeypatch):
    graph, _ = write_demo(tmp_path)
    piped = invoke("rank", graph)  # CliRunner's stdout is no terminal: every row
    assert piped.exit_code == 0, piped.output
    rows = [ln for ln in piped.stdout.splitlines()[1:] if ln.strip()]
    total = len(rows)
    assert total >= 8 and "more" not in piped.stdout
    import fastlbp.cli.rank as rank_cmd

    monkeypatch.setattr(rank_cmd, "terminal_rows", lambda: 3)  # a terminal with room for 3 rows
    shown = invoke("rank", graph).stdout.splitlines()
    assert len(shown) == 1 + 3 + 1 and shown[-1] == f"... {total - 3} more; --top 0 for all"
    assert len(invoke("rank", graph, "--top", "0").stdout.splitlines()) == 1 + total  # --top 0: all
    assert len(invoke("rank", graph, "--top", "5").stdout.splitlines()) == 1 + 5 + 1  # asked for: given
    out = tmp_path / "ranked.txt"
    assert invoke("rank", graph, "-o", out).exit_code == 0
    assert len(out.read_text().splitlines()) == 1 + total  # a file gets everything
    assert "more" not in invoke("rank", graph, "-f", "json").stdout  # only the table is sliced


@pytest.mark.slow
def test_rank_in_a_pseudo_terminal_of_13_lines_shows_5_rows(tmp_path):
    """The real thing: `fastlbp rank` with its stdout on a pseudo-terminal whose window is 13 x 100."""
    import fcntl
    import pty
    import struct
    import termios

    graph, _ = write_demo(tmp_path)
    main, sub = pty.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 13, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("LINES", "COLUMNS")}
    env.update(FASTLBP_CACHE="off", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "fastlbp", "rank", str(graph), "--method", "exact"],
                            stdout=sub, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
    os.close(sub)
    out = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the other end closed (Linux: EIO)
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    err = proc.communicate(timeout=60)[1].decode()
    os.close(main)
    assert proc.returncode == 0, err
    lines = out.decode().replace("\r\n", "\n").splitlines()
    assert lines[0].split() == ["rank", "probability", "error", "alarm"]
    assert len(lines) == 1 + 5 + 1 and lines[-1].endswith("more; --top 0 for all"), lines
    assert err.splitlines()[-1].startswith("method auto") or "exact inference" in err


@pytest.mark.slow  # LBP's compilation: 6 s on 2 loaded cores
def test_lbp_caveat_is_a_whole_sentence_on_stderr(tmp_path):
    graph, _ = write_demo(tmp_path)
    res = invoke("rank", graph, "--method", "lbp")
    assert res.exit_code == 0, res.output
    assert "approximate" not in res.stdout
    caveat = [ln for ln in res.stderr.splitlines() if "approximate and unchecked" in ln]
    assert caveat == [methods.LBP_CAVEAT] and caveat[0].endswith("the model's own probabilities.")
    assert all(ln.endswith(".") for ln in res.stderr.splitlines() if ln.startswith(("LBP:", "method")))


# --quiet ----------------------------------------------------------------------------------------

@pytest.mark.slow  # seven commands: 8 s on 2 loaded cores
def test_quiet_leaves_only_warnings_everywhere(tmp_path):
    out = tmp_path / "taint.json"
    loud = invoke("ground", TAINT / "taint.dl", *TAINT_OPTS, "-o", out)
    assert loud.exit_code == 0 and "grounded" in loud.stderr and "33 alarms" in loud.stderr
    for flag in ("-q", "--quiet"):
        res = invoke("ground", TAINT / "taint.dl", *TAINT_OPTS, "-o", out, flag)
        assert res.exit_code == 0, res.output
        assert res.stderr == ""
        res = invoke("rank", TAINT / "taint.dl", *TAINT_OPTS, flag, "--top", "3")
        assert res.exit_code == 0 and res.stderr == "", res.stderr  # no grounding, no method lines
        assert res.stdout.splitlines()[0].split()[0] == "rank"
    res = invoke("convert", out, tmp_path / "taint.npz", "-q")
    assert res.exit_code == 0 and res.stderr == ""
    # A warning is not a note: -q keeps it.
    res = invoke("convert", out, tmp_path / "t.causal_fg", "-q")
    assert res.exit_code == 0 and res.stderr.startswith("warning:"), res.stderr
    graph, _ = write_demo(tmp_path)
    res = invoke("rank", graph, "--method", "lbp", "-q")
    assert res.stderr == ""  # the caveat is a note; "unchecked" stays beside every number
    for command in ("marginals", "check"):
        res = invoke(command, graph, "-q")
        assert res.exit_code == 0 and res.stderr == "", (command, res.stderr)
        assert invoke(command, graph).stderr != ""


# SARIF ------------------------------------------------------------------------------------------

def test_locations_relation_gives_a_grounded_program_physical_locations(tmp_path):
    res = invoke("rank", TAINT / "taint.dl", *TAINT_OPTS, "--locations", "callAt", "-f", "sarif")
    assert res.exit_code == 0, res.output
    assert "no source location" not in res.stderr
    assert "\n" not in res.stdout.rstrip("\n") and ": " not in res.stdout[:200]  # compact JSON
    results = json.loads(res.stdout)["runs"][0]["results"]
    assert len(results) == 33
    for r in results:
        # leak(C.m/LINE, ...): located at the call site's file and line
        site = r["properties"]["alarm"][len("leak("):].split(",")[0]
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] == f"src/main/java/app/{site.split('.')[0]}.java"
        assert loc["region"]["startLine"] == int(site.rsplit("/", 1)[1])
    # ground writes them into derivation.json, for any later command
    out = tmp_path / "taint.json"
    res = invoke("ground", TAINT / "taint.dl", *TAINT_OPTS, "--locations", "callAt", "-o", out)
    assert res.exit_code == 0 and "located 368 tuples by callAt" in res.stderr
    doc = json.loads(out.read_text())
    site = "Profile.doGet/19"
    assert doc["locations"][f"call({site},PrintWriter.print)"] == [
        {"file": "src/main/java/app/Profile.java", "line": 19}]
    pretty = invoke("rank", out, "-f", "sarif", "--pretty")
    assert pretty.stdout.startswith("{\n") and json.loads(pretty.stdout) == json.loads(
        invoke("rank", out, "-f", "sarif").stdout)


def test_locations_errors_exit_2(tmp_path):
    x = tmp_path / "x.json"
    res = invoke("ground", TAINT / "taint.dl", *TAINT_OPTS, "--locations", "nowhere", "-o", x)
    assert res.exit_code == 2 and "declares no relation 'nowhere'" in res.stderr, res.stderr
    res = invoke("ground", TAINT / "taint.dl", *TAINT_OPTS, "--locations", "call", "-o", x)
    assert res.exit_code == 2 and "3 or 4" in res.stderr
    facts = tmp_path / "facts"
    facts.mkdir()
    for f in (TAINT / "facts").iterdir():
        (facts / f.name).write_text(f.read_text())
    (facts / "callAt.facts").write_text("Admin.doPost/11\tsrc/A.java\tline eleven\n")
    res = invoke("ground", TAINT / "taint.dl", "--facts", facts, "--locations", "callAt", "-o", x)
    assert res.exit_code == 2 and "error:" in res.stderr and "Traceback" not in res.output
    assert invoke("rank", RACE, "--locations", "callAt").exit_code == 2  # only for a program


def test_sarif_without_locations_warns():
    res = invoke("rank", TAINT / "taint.dl", *TAINT_OPTS, "-f", "sarif", "-q")
    assert res.exit_code == 0
    assert "warning: 33 of 33 SARIF results have no source location" in res.stderr
    assert "--locations REL" in res.stderr
    located = invoke("rank", RACE, "-f", "sarif")
    assert "no source location" not in located.stderr  # data/race.json carries "locations"


def test_unlocated_counts_current_results_only():
    doc = {"runs": [{"results": [
        {"locations": [{"physicalLocation": {}}]}, {"locations": [{"logicalLocations": []}]},
        {"locations": [], "baselineState": "absent"}]}]}
    assert sarif.unlocated(doc) == (1, 2)


# check: order judged beyond the reference's error -------------------------------------------------

def test_ties_within_the_reference_error_are_not_disagreements():
    rng = np.random.default_rng(0)
    ref = 0.76 + rng.normal(0, 0.001, 50)  # 50 alarms equal within a sampled reference's error
    se = np.full(50, 0.0014)
    key = rng.permutation(50).astype(float)  # any order of them is right
    resolved, reversed_ = checking.order_disagreement(key, ref, se)
    assert reversed_ <= 0.1 * max(resolved, 1)
    # An exact reference (SE 0) tells every distinct pair apart: a reversed order is counted in full.
    exact = np.linspace(0.1, 0.9, 20)
    assert checking.order_disagreement(-exact, exact, np.zeros(20)) == (190, 190.0)
    assert checking.order_disagreement(exact, exact, np.zeros(20)) == (190, 0.0)
    assert checking.order_disagreement(np.zeros(20), exact, np.zeros(20)) == (190, 95.0)  # ties: half
    certain = np.array([np.inf, -np.inf, -np.inf, 0.0])  # LBP's log-odds of certain alarms
    with np.errstate(invalid="raise"):
        assert checking.order_disagreement(certain, np.array([.9, .1, .1, .5]), np.zeros(4)) == (5, 0.0)
    # Top k: a tie at the k-th place within the error is no miss.
    ref = np.array([0.9, 0.8, 0.5, 0.5005, 0.1])
    se = np.full(5, 0.001)
    assert checking.top_overlap(np.array([5., 4., 3., 1., 0.]), ref, se, 3) == 3
    assert checking.top_overlap(np.array([5., 4., 0., 1., 3.]), ref, se, 3) == 2


def test_order_disagreement_samples_past_its_limit():
    n = 300
    ref = np.linspace(0, 1, n)
    resolved, reversed_ = checking.order_disagreement(-ref, ref, np.zeros(n), max_alarms=100)
    assert resolved == 100 * 99 // 2 and reversed_ == resolved
