"""The ranking writers (`fastlbp.io.writers`): table, JSON and CSV, directly and through
`fastlbp rank --format` (SARIF: tests/test_sarif.py)."""

import csv
import dataclasses
import io
import json
import math
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from triage_support import load_demo, write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.settings import Settings
from fastlbp.core.text import csv_row, format_probability, relation, safe_name
from fastlbp.inference import methods, ranking
from fastlbp.inference.ranking import LabelledAlarm, RankedAlarm, Ranking
from fastlbp.io import writers

runner = CliRunner()


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def small_ranking(total_unlabelled=3):
    return Ranking([RankedAlarm(1, "race(1,2)", 4, 0.93, 2.5867), RankedAlarm(2, "87", 0, 2.5e-7, -15.2)],
                   [LabelledAlarm("race(3,4)", 5, False, 0.0)], iterations=12, converged=True,
                   delta=1e-7, seconds=0.01, total_unlabelled=total_unlabelled)


def test_relation():
    assert relation("race(1,2)") == "race"
    assert relation("87") == "alarm"


def test_table_json_csv_of_a_ranking():
    r = small_ranking()  # an LBP ranking (Ranking's default method)
    lines = writers.to_table(r).splitlines()
    assert lines[0].split() == ["rank", "probability", "LBP", "alarm"]
    assert lines[1].split() == ["1", "0.930000", "unchecked", "race(1,2)"]
    assert lines[2].split() == ["2", "2.500e-07", "unchecked", "87"]  # small ones keep their magnitude
    assert lines[3] == "... 1 more; --top 0 for all"
    # The table is the table: LBP's caveat is a sentence for stderr (`caveats`), never inside it.
    assert lines[-2:] == ["labelled (1):", "  false  race(3,4)"]
    assert writers.caveats(r) == [methods.LBP_CAVEAT]
    assert methods.LBP_CAVEAT.endswith("gives the model's own probabilities.")
    flagged = dataclasses.replace(r, flags=("LBP did not converge",))
    assert writers.to_table(flagged).splitlines()[1].split()[2] == "FLAGGED"
    assert "LBP did not converge" not in writers.to_table(flagged)  # the command warns on stderr
    assert "(no unlabelled alarms)" in writers.to_table(Ranking([], [], 0, True, 0.0, 0.0, 0))
    doc = json.loads(writers.to_json(r))
    assert doc == writers.to_dict(r)
    assert doc["alarms"][0] == {"rank": 1, "alarm": "race(1,2)", "probability": 0.93, "log_odds": 2.5867}
    assert doc["labelled"] == [{"alarm": "race(3,4)", "truth": False}]
    assert (doc["method"], doc["how"], doc["flags"], doc["reason"]) == ("lbp", "", [], None)
    rows = list(csv.reader(io.StringIO(writers.to_csv(r))))
    assert rows == [["rank", "alarm", "probability", "label", "log_odds", "stderr", "lower", "upper"],
                    ["1", "race(1,2)", "0.93", "", "2.5867", "", "", ""],
                    ["2", "87", "2.5e-07", "", "-15.2", "", "", ""],
                    ["", "race(3,4)", "0.0", "false", "", "", "", ""]]
    assert set(writers.WRITERS) == {"table", "json", "csv"}


def test_table_json_csv_of_an_exact_and_a_sampled_ranking():
    r = small_ranking()
    exact = dataclasses.replace(r, method="exact", how="exact inference (induced width 3)",
                                reason="exact inference: induced width 3 fits 256 MiB")
    lines = writers.to_table(exact).splitlines()
    assert lines[0].split() == ["rank", "probability", "error", "alarm"]
    assert [ln.split() for ln in lines[1:3]] == [["1", "0.930000", "exact", "race(1,2)"],
                                                 ["2", "2.500e-07", "exact", "87"]]
    assert lines[-1] == "  false  race(3,4)"
    assert writers.caveats(exact) == []  # no caveat about LBP
    doc = writers.to_dict(exact)
    assert (doc["method"], doc["how"], doc["reason"]) == ("exact", exact.how, exact.reason)
    sampled = dataclasses.replace(r, method="sample", alarms=[
        dataclasses.replace(r.alarms[0], stderr=0.0035, lower=0.9231, upper=0.9369),
        dataclasses.replace(r.alarms[1], stderr=1e-7, lower=5e-8, upper=4.5e-7)])
    lines = writers.to_table(sampled).splitlines()
    assert lines[0].split() == ["rank", "probability", "95%", "interval", "alarm"]
    # A sampled probability has the digits its standard error supports: SE 0.0035 -> 3 decimals.
    assert lines[1].split() == ["1", "0.930", "[0.9231,", "0.9369]", "race(1,2)"]
    assert lines[2].split() == ["2", "2e-07", "[5.0e-08,", "4.5e-07]", "87"]  # SE 1e-7: one digit
    assert writers.caveats(sampled) == []
    assert json.loads(writers.to_json(sampled))["alarms"][0] == {
        "rank": 1, "alarm": "race(1,2)", "probability": 0.93, "log_odds": 2.5867, "stderr": 0.0035,
        "lower": 0.9231, "upper": 0.9369}
    rows = list(csv.reader(io.StringIO(writers.to_csv(sampled))))
    assert rows[1] == ["1", "race(1,2)", "0.93", "", "2.5867", "0.0035", "0.9231", "0.9369"]
    assert rows[3] == ["", "race(3,4)", "0.0", "false", "", "", "", ""]


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_cli_formats(tmp_path, fmt):
    graph, _ = write_demo(tmp_path)
    res = invoke("rank", graph, "--format", fmt, "--top", "4")
    assert res.exit_code == 0, res.output
    # auto answers the demo graph (width 10) by exact inference, and says so and why on stderr.
    expected = ranking.rank(load_demo(graph), top=4)
    assert expected.method == "exact"
    assert re.search(r"^exact inference \(induced width \d+\), [\d.]+ s\.$", res.stderr, re.M), res.stderr
    assert res.stderr.splitlines()[-1].startswith("method auto: exact inference: induced width")
    names = [a.alarm for a in expected.alarms]
    out = res.stdout
    if fmt == "table":
        lines = out.splitlines()
        assert lines[0].split() == ["rank", "probability", "error", "alarm"]
        assert [ln.split()[2] for ln in lines[1:5]] == ["exact"] * 4
        assert [ln.split()[3] for ln in lines[1:5]] == names
        assert lines[5].endswith("more; --top 0 for all")
        assert "LBP" not in out
    elif fmt == "json":
        doc = json.loads(out)
        assert [a["alarm"] for a in doc["alarms"]] == names
        assert [a["rank"] for a in doc["alarms"]] == [1, 2, 3, 4]
        assert isinstance(doc["iterations"], int) and isinstance(doc["converged"], bool)
        assert doc["alarms"][0]["probability"] == pytest.approx(expected.alarms[0].probability)
        assert doc["method"] == "exact" and doc["how"].startswith("exact inference") and doc["flags"] == []
        assert doc["reason"].startswith("exact inference: induced width")
        assert "stderr" not in doc["alarms"][0]  # only a sampled ranking has errors to give
    else:
        rows = list(csv.DictReader(io.StringIO(out)))
        assert list(rows[0]) == ["rank", "alarm", "probability", "label", "log_odds", "stderr", "lower",
                                 "upper"]
        assert [r["alarm"] for r in rows] == names and rows[0]["rank"] == "1"
        assert all(r["stderr"] == r["lower"] == r["upper"] == "" for r in rows)


def test_cli_table_of_an_lbp_ranking(tmp_path):
    graph, _ = write_demo(tmp_path)
    res = invoke("rank", graph, "--method", "lbp", "--top", "4")
    assert res.exit_code == 0, res.output
    assert re.search(r"^LBP: \d+ iterations, converged, unchecked .*, [\d.]+ s\.$", res.stderr, re.M), \
        res.stderr
    assert "method auto" not in res.stderr
    expected = ranking.rank(load_demo(graph), top=4, settings=Settings(method="lbp"))
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["rank", "probability", "LBP", "alarm"]
    assert [ln.split()[2] for ln in lines[1:5]] == ["unchecked"] * 4
    assert [ln.split()[3] for ln in lines[1:5]] == [a.alarm for a in expected.alarms]
    assert "approximate" not in res.stdout  # the caveat is stderr's, as a whole sentence
    assert methods.LBP_CAVEAT in res.stderr.splitlines()


# Names with control characters ---------------------------------------------------

HOSTILE = ["race\x1b[31m(1,2)\x1b[0m", "a(1)\nb(2)", "c(\r)", "tab\t(1)", "nul\x00", "del\x7f", "csi\x9b2J",
           "line\u2028sep", "bidi\u202e(1)", "lone\ud800", "zwsp\u200b"]


def test_safe_name_escapes_what_a_terminal_would_act_on():
    assert safe_name("race(1,2)") == "race(1,2)"
    assert safe_name("größe(1, «x»)") == "größe(1, «x»)"  # printable non-ASCII stays
    assert safe_name("a\x1b[31mb") == "a\\x1b[31mb"
    assert safe_name("a\nb\r\t") == "a\\nb\\r\\t"
    assert safe_name("\x00\x7f\x9b") == "\\x00\\x7f\\x9b"
    assert safe_name("x\u2028\u202e\u200b") == "x\\u2028\\u202e\\u200b"
    assert safe_name("\ud800") == "\\ud800"
    assert safe_name("\U000e0001") == "\\U000e0001"  # a language tag (format character)
    for name in HOSTILE:
        shown = safe_name(name)
        assert shown.isprintable() and shown.encode("utf-8"), repr(shown)


def hostile_ranking():
    return Ranking([RankedAlarm(i + 1, name, i, 0.5) for i, name in enumerate(HOSTILE)],
                   [LabelledAlarm("lab\x1b]0;pwned\x07", 99, True, 1.0)], iterations=1, converged=True,
                   delta=0.0, seconds=0.0, total_unlabelled=len(HOSTILE))


def test_table_shows_names_safely():
    text = writers.to_table(hostile_ranking())
    assert text.isascii() or all(c.isprintable() or c == "\n" for c in text)
    assert not any(c in text for c in "\x1b\r\x00\x7f\x9b\u2028\u202e\ud800\x07")
    lines = text.splitlines()
    # one line per alarm (a newline in a name adds none), then the labelled ones
    assert len(lines) == 1 + len(HOSTILE) + 3
    assert lines[1].endswith("race\\x1b[31m(1,2)\\x1b[0m") and lines[2].endswith("a(1)\\nb(2)")
    assert lines[-1] == "  true   lab\\x1b]0;pwned\\x07"


def test_csv_and_json_keep_names_faithfully():
    r = hostile_ranking()
    text = writers.to_csv(r)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert [row[1] for row in rows[1:]] == HOSTILE + ["lab\x1b]0;pwned\x07"]
    assert text.count("\n") == len(rows) + 1  # "a(1)\nb(2)" is quoted, not a row of its own
    assert '"c(\r)"' in text and '"race\x1b[31m(1,2)\x1b[0m"' in text  # every control character quoted
    assert csv_row(["x\ry", 1, ""]) == '"x\ry",1,\n'
    doc = json.loads(writers.to_json(r))
    assert [a["alarm"] for a in doc["alarms"]] == HOSTILE
    assert writers.to_json(r).isascii()  # JSON escapes every control character (and the rest)


def test_tiny_probabilities_keep_their_order_and_magnitude():
    # Below float64's range P rounds to 0; the log-odds still order the alarms and give the magnitude.
    r = Ranking([RankedAlarm(1, "a", 0, 0.0, -800.0), RankedAlarm(2, "b", 1, 0.0, -900.0),
                 RankedAlarm(3, "c", 2, 0.0, float("-inf"))], [], 1, True, 0.0, 0.0, 3)
    lines = writers.to_table(r).splitlines()
    assert [ln.split()[1] for ln in lines[1:4]] == ["3.668e-348", "1.364e-391", "0.000000"]
    assert [a["log_odds"] for a in writers.to_dict(r)["alarms"]] == [-800.0, -900.0, None]


def test_ranking_orders_by_log_odds():
    import numpy as np

    from fastlbp.core.graph import AND, Factor, from_factors
    from fastlbp.core.model import Model
    from fastlbp.inference.ranking import rank_alarms

    model = Model(graph=from_factors([Factor(AND, v, (), 0.5, 0.5) for v in range(3)]),
                  var_names=("x", "y", "z"), alarms=(0, 1, 2))
    p = np.array([0.0, 0.0, 0.0])
    lo = np.array([-900.0, -800.0, -850.0])
    assert [a.alarm for a in rank_alarms(model, p, {}, log_odds=lo).alarms] == ["y", "z", "x"]


def _decimal_log10(text: str) -> float:
    """log10 of a printed probability, exact for any exponent ("3.668e-348" is below float64)."""
    from decimal import Decimal

    return float(Decimal(text).log10())


@settings(max_examples=300, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_format_probability_against_the_number(p, q):
    """What is printed reads back as P (6 decimals, or 4 significant digits below 1e-4), in order."""
    text = format_probability(p)
    back = float(text)
    if p >= 1e-4 or p == 0.0:
        assert "e" not in text and abs(back - p) <= 5e-7
    else:
        assert re.fullmatch(r"[1-9]\.\d{3}e-\d\d\d?", text), text
        assert abs(back - p) <= 5e-4 * p
    lo, hi = sorted((p, q))
    assert float(format_probability(lo)) <= float(format_probability(hi))


@settings(max_examples=300, deadline=None)
@given(st.floats(-5000.0, -746.0))
@example(-746.0376)  # mantissa 9.9996: printed "10.000e-325" before rounding carried into the exponent
def test_format_probability_below_float64_from_the_log_odds(log_odds):
    """P = sigmoid(lo) ~ e^lo rounds to 0.0 in float64: the log-odds give mantissa and exponent."""
    text = format_probability(0.0, log_odds)
    assert re.fullmatch(r"[1-9]\.\d{3}e-\d{3,4}", text), text
    exact = log_odds / math.log(10.0)
    assert abs(_decimal_log10(text) - exact) <= 2.2e-4  # 3 decimals of the mantissa: log10(1.0005)
    assert float(format_probability(0.0, log_odds - 1.0).split("e")[1]) <= float(text.split("e")[1])
