"""Loading: the table of formats (`datalog.io`), detection, `Settings` reaching the loaders, labels files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA

from datalog import causal_fg, formats, npz
from datalog import io as datalog_io
from fastlbp.core.errors import InputError
from fastlbp.core.settings import Settings
from fastlbp.io import loading

EXAMPLES = Path(__file__).resolve().parents[1] / "data"
WEBLECH_FG = DATA / "weblech" / "graph.causal_fg"


def err(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    return info.value


def test_the_table_names_every_format():
    assert set(datalog_io.FORMATS) == {"json", "npz", "bingo", "causal_fg", "datalog"}
    assert loading.detect_format is datalog_io.detect_format


def test_detect_format(tmp_path):
    assert loading.detect_format(tmp_path) == "bingo"
    for name in ("g.json", "G.JSON", "g.json.gz", "g.Json.GZ"):
        assert loading.detect_format(tmp_path / name) == "json", name
    for name in ("g.causal_fg", "g.fg", "g.txt", "json", "g.json.bak"):
        assert loading.detect_format(tmp_path / name) == "causal_fg", name
    for name in ("taint.dl", "T.DL"):
        assert loading.detect_format(tmp_path / name) == "datalog", name
    for name in ("hmmer.npz", "G.NPZ"):
        assert loading.detect_format(tmp_path / name) == "npz", name


def test_each_detected_format_loads(tmp_path):
    json_model = loading.load(EXAMPLES / "presto.json")
    bingo_model = loading.load(EXAMPLES / "presto")
    assert json_model.var_names == bingo_model.var_names and len(json_model.alarms) == 2
    npz.save(formats.read_json(EXAMPLES / "presto.json")[0], tmp_path / "presto.npz")
    npz_model = loading.load(tmp_path / "presto.npz")
    assert npz_model.var_names == json_model.var_names and npz_model.alarms == json_model.alarms
    fg = loading.load(WEBLECH_FG)
    assert (fg.graph.num_vars, fg.graph.num_edges) == (678, 2315)


def test_missing_path(tmp_path):
    e = err(loading.load, tmp_path / "nope.json")
    assert (e.path, e.line, e.message) == (str(tmp_path / "nope.json"), None, "no such file or directory")
    e = err(datalog_io.load, tmp_path / "nope")
    assert e.message == "no such file or directory"


def test_unknown_format(tmp_path):
    e = err(loading.load, WEBLECH_FG, format="xml")
    assert e.path == str(WEBLECH_FG) and "no loader for format 'xml'" in e.message
    assert "causal_fg" in e.message


def test_format_named_overrides_detection(tmp_path):
    p = tmp_path / "graph.txt"  # a name that says no format
    p.write_text((EXAMPLES / "presto.json").read_text())
    assert loading.load(p, format="json").var_names == loading.load(EXAMPLES / "presto.json").var_names
    e = err(loading.load, p)  # without format=, refused by its name (never guessed)
    assert e.path == str(p) and "not a graph fastlbp reads" in e.message
    fg = tmp_path / "graph.fg"
    fg.write_text((EXAMPLES / "presto.json").read_text())
    e = err(loading.load, fg)  # read as a factor graph, it is malformed
    assert e.path == str(fg) and e.line == 1


def test_settings_reach_derivation_loaders():
    path = EXAMPLES / "weblech.json"
    default = loading.load(path)
    assert default.meta["report"]["clauses_dropped_by_cycle_elimination"] == 0
    # Bingo's criterion drops 143 clauses of this acyclic graph; the default drops none.
    bingo = loading.load(path, Settings(cycles="bingo"))
    assert bingo.meta["report"]["clauses_dropped_by_cycle_elimination"] == 143
    full = loading.load(path, Settings(compress=False))
    assert (default.num_vars, full.num_vars) == (456, 696)  # data/README.md: 696 BN vertices
    assert datalog_io.load(path, cycles="bingo", compress=False).num_vars == \
        loading.load(path, Settings(cycles="bingo", compress=False)).num_vars


def test_factor_graphs_ignore_derivation_options():
    plain = causal_fg.load(WEBLECH_FG)
    other = loading.load(WEBLECH_FG, Settings(cycles="bingo", compress=False))
    assert plain.var_names == other.var_names
    for col in ("factor_kind", "factor_offsets", "edge_var", "p1", "p2"):
        assert np.array_equal(np.asarray(getattr(plain.graph, col)), np.asarray(getattr(other.graph, col)))


# Labels files ---------------------------------------------------------------

@pytest.fixture(scope="module")
def weblech():
    return loading.load(WEBLECH_FG)


def test_read_labels(tmp_path, weblech):
    p = tmp_path / "labels.txt"
    p.write_text("# comment\n\n87 false\n  12 TRUE  \n13 1\n14 0\n87 0\n")
    got = loading.read_labels(p, weblech)
    idx = weblech.index
    assert got == {idx["87"]: False, idx["12"]: True, idx["13"]: True, idx["14"]: False}  # a repeat agrees
    assert loading.read_labels(DATA / "weblech" / "label.txt", weblech)
    # A name labelled both ways was "the last wins"; it is an error naming both lines (issue 22).
    p.write_text("# comment\n\n87 false\n  12 TRUE  \n13 1\n14 0\n87 true\n")
    e = err(loading.read_labels, p, weblech)
    assert (e.path, e.line) == (str(p), 7) and e.message == "'87' is labelled true here but false on line 3"


def test_read_labels_names_with_spaces(tmp_path):
    model = loading.load(_json_with_tuple(tmp_path, "a b"))
    p = tmp_path / "labels.txt"
    p.write_text("a b false\n")
    assert loading.read_labels(p, model) == {model.index["a b"]: False}


def _json_with_tuple(tmp_path, name):
    p = tmp_path / "g.json"
    p.write_text(json.dumps({"format": "fastlbp-derivation", "version": 1, "rules": {"R0": 0.9},
                             "clauses": [["R0", name, ["in"]]], "inputs": {"in": 0.5}, "alarms": [name]}))
    return p


@pytest.mark.parametrize("text,line,msg", [
    ("87 false\n87 maybe\n", 2, "expected 'NAME true|false', got '87 maybe'"),
    ("true\n", 1, "expected 'NAME true|false'"),
    ("# c\n87 true\nnope false\n", 3, "unknown variable 'nope'"),
])
def test_read_labels_errors_name_the_line(tmp_path, weblech, text, line, msg):
    p = tmp_path / "labels.txt"
    p.write_text(text)
    e = err(loading.read_labels, p, weblech)
    assert e.path == str(p) and e.line == line and msg in e.message


def test_read_labels_unreadable(tmp_path, weblech):
    e = err(loading.read_labels, tmp_path / "missing.txt", weblech)
    assert e.path == str(tmp_path / "missing.txt")
    p = tmp_path / "bad.txt"
    p.write_bytes(b"87 true\n\xff false\n")
    assert "UTF-8" in err(loading.read_labels, p, weblech).message


@pytest.mark.parametrize("line", ["race(1, 2)\ttrue", "race(1, 2), true", "race(1, 2) ,TRUE",
                                  "race(1, 2)    1", "  race(1, 2),1  "])
def test_labels_file_separators_tab_comma_or_spaces(tmp_path, line):
    model = loading.load(_json_with_tuple(tmp_path, "race(1, 2)"))
    p = tmp_path / "labels.txt"
    p.write_text(line + "\n")
    assert loading.parse_labels(p) == [(1, "race(1, 2)", True)]
    assert loading.read_labels(p, model) == {model.index["race(1, 2)"]: True}


def test_labels_name_any_tuple_of_the_graph(tmp_path):
    """weblech's `aliased(3,2)` (pruned) and an input fact compression removed are labelled by keeping
    them as variables; `read_labels` on the same model says why it cannot and what does."""
    model = loading.load(EXAMPLES / "weblech.json")
    constant = next(n for n, h in zip(model.tuple_names, model.meta["tuple_how"], strict=True) if h == 1)
    p = tmp_path / "labels.txt"
    p.write_text(f"aliased(3, 2) false\n{constant}\ttrue\n")
    e = err(loading.read_labels, p, model)
    assert e.line == 1 and "pruned by compression" in e.message and "load_labels" in e.message
    kept, labels = loading.load_labels(p, model)
    assert labels == {kept.index["aliased(3,2)"]: False, kept.index[constant]: True}
    assert kept.num_vars > model.num_vars and kept.alarms == tuple(kept.index[model.var_names[a]]
                                                                 for a in model.alarms)
    # A labelled tuple that is a variable already leaves the model as it is.
    p.write_text(f"{model.var_names[model.alarms[0]]} false\n")
    same, labels = loading.load_labels(p, model)
    assert same is model and labels == {model.alarms[0]: False}


def test_load_labels_reports_conflicts_across_spellings(tmp_path):
    model = loading.load(_json_with_tuple(tmp_path, "race(1,2)"))
    p = tmp_path / "labels.txt"
    p.write_text("race(1,2) true\nrace(1, 2)\tfalse\n")
    e = err(loading.load_labels, p, model)
    assert e.line == 2 and "as 'race(1,2)' (the same variable) on line 1" in e.message
