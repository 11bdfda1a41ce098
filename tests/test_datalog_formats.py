"""derivation.json and Bingo directories: round trips, the schema, and every malformed input reported."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datalog import formats
from datalog.derivation import from_clauses
from datalog.io import load
from fastlbp.core.errors import InputError

PRESTO = Path(__file__).parent / "data" / "presto-exceptions"
SCHEMA = json.loads(formats.SCHEMA_PATH.read_text())


def small_graph():
    return from_clauses(
        [("R0", "path(1,2)", ["edge(1,2)"]), ("R1", "path(1,3)", ["path(1,2)", "edge(2,3)"]),
         ("R1", "path(1,3)", ["path(1,2)", "edge(2,3)"]),  # duplicate
         ("R0", "path(2,3)", ["edge(2,3)"])],
        rules={"R0": 0.9, "R1": 0.8}, priors={"edge(2,3)": 0.5},
        alarms=["path(1,3)", "path(2,3)"], labels={"path(2,3)": True},
        truth={"path(1,3)": False, "path(2,3)": True},  # Bingo: alarms not in the oracle are false
    )


def doc(**overrides):
    d = {"format": "fastlbp-derivation", "version": 1, "rules": {"R0": {"probability": 0.9}},
         "clauses": [["R0", "a(1)", ["b(1,2)"]], {"rule": "R0", "head": "c", "body": ["a(1)"]}],
         "alarms": ["c"]}
    d.update(overrides)
    return d


def write(tmp_path, d, name="g.json"):
    p = tmp_path / name
    p.write_text(d if isinstance(d, str) else json.dumps(d))
    return p


def same_graph(a, b):
    assert a.tuples == b.tuples
    assert [(r.name, r.probability) for r in a.rules] == [(r.name, r.probability) for r in b.rules]
    for col in ("clause_rule", "clause_head", "body_offsets", "body", "alarms"):
        assert np.array_equal(np.asarray(getattr(a, col)), np.asarray(getattr(b, col))), col
    assert a.priors == b.priors and a.labels == b.labels and a.truth == b.truth


# Round trips ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_json_round_trip_and_schema(tmp_path, name):
    dg = small_graph()
    p = tmp_path / name
    formats.save_json(dg, p)
    back, _ = formats.read_json(p)
    same_graph(dg, back)
    jsonschema.validate(json.loads(formats.read_text(p)), SCHEMA)
    jsonschema.validate(doc(), SCHEMA)
    model = load(p)
    assert [model.var_names[a] for a in model.alarms] == ["path(1,3)", "path(2,3)"]
    assert {model.var_names[v]: t for v, t in model.labels.items()} == {"path(2,3)": True}
    assert model.meta["report"]["duplicate_clauses_merged"] == 1
    assert "1 duplicate clauses merged (first:" in model.meta["warnings"][0]


def test_bingo_round_trip(tmp_path):
    dg = small_graph()
    formats.save_bingo(dg, tmp_path / "b")
    back, _ = formats.read_bingo(tmp_path / "b")
    same_graph(dg, back)
    lines = (tmp_path / "b" / "named_cons_all.txt").read_text().splitlines()
    assert lines[1] == "R1: NOT path(1,2), NOT edge(2,3), path(1,3)"
    # The duplicate is reported with its line.
    model = load(tmp_path / "b")
    assert "named_cons_all.txt:3" in model.meta["warnings"][0]


def test_presto_bingo_to_json_gives_the_same_model(tmp_path):
    formats.save_json(formats.read_bingo(PRESTO)[0], tmp_path / "p.json")
    a, b = load(PRESTO), load(tmp_path / "p.json")
    assert a.var_names == b.var_names
    assert np.array_equal(a.graph.edge_var, b.graph.edge_var)


def test_json_object_clauses_and_names(tmp_path):
    model = load(write(tmp_path, doc()))
    assert set(model.var_names) >= {"c"}
    dg = model.meta["derivation"]
    assert dg.tuples == ["a(1)", "b(1,2)", "c"]


def test_rule_prob_defaults_and_oracle(tmp_path):
    d = tmp_path / "b"
    d.mkdir()
    (d / "named_cons_all.txt").write_text("R1: NOT a(1,2), b(1)\n\nR2: NOT b(1), c(1)\nR2: NOT a(1,2), d\n")
    (d / "rule-prob.txt").write_text("R1: 0.5\n")
    (d / "base_queries.txt").write_text("c(1)\nd\n")
    (d / "oracle_queries.txt").write_text("d\n")
    dg, _ = formats.read_bingo(d)
    assert [(r.name, r.probability) for r in dg.rules] == [("R1", 0.5), ("R2", 0.999)]
    assert dg.clause_lines.tolist() == [1, 3, 4]
    assert {dg.tuples[t]: v for t, v in dg.truth.items()} == {"c(1)": False, "d": True}
    assert load(d).labels == {}  # ground truth is never evidence


# Malformed inputs: each reported with file and line or JSON path ------------

def err(fn, *args) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args)
    return info.value


BINGO_CASES = [
    ("named_cons_all.txt", "R1: NOT a(1), b(1)\nR1 NOT a(1) b\n", 2, "malformed line"),
    ("named_cons_all.txt", "R1: NOT a(1), b(1)\nR2: NOT a(1), NOT b(1)\n", 2, "missing head"),
    ("named_cons_all.txt", "R1:\n", 1, "missing head"),
    ("named_cons_all.txt", "R1: a(1), b(1)\n", 1, "lacks NOT"),
    ("named_cons_all.txt", "R1: NOT a(1,2, b(1)\n", 1, "malformed line"),
    ("named_cons_all.txt", "\n\n", None, "empty"),
    ("rule-prob.txt", "R1: 1.5\n", 1, "not a probability"),
    ("rule-prob.txt", "R1: 0.5\nR2: nan\n", 2, "not a probability"),
    ("rule-prob.txt", "R1: high\n", 1, "not a number"),
    ("rule-prob.txt", "R1 0.5\n", 1, "malformed line"),
    ("base_queries.txt", "b(1)\nb(2)\n", 2, "not in the graph"),
    ("oracle_queries.txt", "zz\n", 1, "not in the graph"),
    ("input-prob.txt", "a(1): -0.1\n", 1, "not a probability"),
    ("labels.txt", "b(1) maybe\n", 1, "expected"),
]


@pytest.mark.parametrize("fname,text,line,msg", BINGO_CASES)
def test_bingo_errors(tmp_path, fname, text, line, msg):
    (tmp_path / "named_cons_all.txt").write_text("R1: NOT a(1), b(1)\n")
    (tmp_path / fname).write_text(text)
    e = err(load, tmp_path)
    assert e.path.endswith(fname if "empty" not in msg else "named_cons_all.txt")
    assert e.line == line and msg in e.message


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "named_cons_all.txt").write_bytes(b"R1: NOT a(1), b(1)\nR1: NOT a(\xff), b(2)\n")
    e = err(load, tmp_path)
    assert e.line == 2 and "UTF-8" in e.message
    p = tmp_path / "g.json"
    p.write_bytes(json.dumps(doc()).encode()[:-1] + b"\n\xc3(}")
    e = err(load, p)
    assert e.line == 2 and "UTF-8" in e.message


def test_not_a_bingo_directory(tmp_path):
    assert "named_cons_all.txt is missing" in err(load, tmp_path).message


def test_underivable_alarm_is_located(tmp_path):
    (tmp_path / "named_cons_all.txt").write_text("R1: NOT a(1), b(1)\nR1: NOT c, d\nR1: NOT d, c\n")
    (tmp_path / "base_queries.txt").write_text("b(1)\nc\n")
    e = err(load, tmp_path)
    assert e.path.endswith("base_queries.txt") and e.line == 2
    assert "neither an input nor derivable" in e.message
    (tmp_path / "base_queries.txt").write_text("b(1)\n")
    model = load(tmp_path)
    assert model.meta["report"]["underivable_tuples"] == 2 and "neither inputs" in model.meta["warnings"][0]


JSON_CASES = [
    ({"format": "other"}, "$.format", "must be"),
    ({"version": 2}, "$.version", "unsupported version"),
    ({"version": True}, "$.version", "unsupported version"),
    ({"extra": 1}, "$.extra", "unknown field"),
    ({"rules": []}, "$.rules", "must be an object"),
    ({"rules": {"R0": {"probability": 1.5}}}, '$.rules["R0"].probability', "not a probability"),
    ({"rules": {"R0": {"probability": float("nan")}}}, '$.rules["R0"].probability', "not a probability"),
    ({"rules": {"R0": {"probability": "0.5x"}}}, '$.rules["R0"].probability', "not a number"),
    ({"rules": {"R0": {"probability": None}}}, '$.rules["R0"].probability', "must be a number"),
    ({"rules": {"R0": {"prob": 0.5}}}, '$.rules["R0"]', "unknown rule field"),
    ({"clauses": []}, "$.clauses", "empty"),
    ({"clauses": {}}, "$.clauses", "must be an array"),
    ({"clauses": [["R0", "a", ["b"]], ["R9", "a", []]]}, "$.clauses[1][0]", "not defined"),
    ({"clauses": [["R0", "a", ["b"]], ["R0", "a"]]}, "$.clauses[1]", "got 2 items"),
    ({"clauses": [["R0", "a", [True]]]}, "$.clauses[0][2][0]", "got a boolean"),
    ({"clauses": [["R0", "a", "b"]]}, "$.clauses[0][2]", "must be an array"),
    ({"clauses": [{"rule": "R0", "body": []}]}, "$.clauses[0]", "no 'head'"),
    ({"clauses": [{"rule": "R0", "head": None}]}, "$.clauses[0].head", "missing head"),
    ({"clauses": [7]}, "$.clauses[0]", "array or an object"),
    ({"tuples": ["a"], "clauses": [["R0", 0, [1]]]}, "$.clauses[0][2][0]", "out of range"),
    ({"tuples": ["a", "a"]}, "$.tuples[1]", "listed twice"),
    ({"tuples": [1]}, "$.tuples[0]", "must be a string"),
    ({"alarms": ["nope"]}, "$.alarms[0]", "not in the graph"),
    ({"alarms": "c"}, "$.alarms", "must be an array"),
    ({"labels": {"nope": True}}, '$.labels["nope"]', "not in the graph"),
    ({"labels": {"c": "yes"}}, '$.labels["c"]', "true or false"),
    ({"truth": {"c": 1}}, '$.truth["c"]', "true or false"),
    ({"inputs": {"b(1,2)": 2}}, '$.inputs["b(1,2)"]', "not a probability"),
    ({"inputs": {"zz": 0.5}}, '$.inputs["zz"]', "not in the graph"),
]


@pytest.mark.parametrize("override,location,msg", JSON_CASES)
def test_json_errors(tmp_path, override, location, msg):
    p = write(tmp_path, doc(**override))
    e = err(load, p)
    assert e.path == str(p) and e.location == location and msg in e.message, str(e)


def test_json_syntax_error_names_the_line(tmp_path):
    p = write(tmp_path, '{\n "format": "fastlbp-derivation",\n "version": 1,,\n}')
    e = err(load, p)
    assert e.line == 3 and "invalid JSON" in e.message
    e = err(load, write(tmp_path, "[1, 2]"))
    assert e.location == "$" and "must be an object" in e.message


# Generated malformed inputs: the loaders report InputError, never crash -----

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.floats(allow_nan=True),
                      st.text(max_size=6))
json_value = st.recursive(
    json_leaf,
    lambda ch: st.one_of(st.lists(ch, max_size=3), st.dictionaries(st.text(max_size=4), ch, max_size=3)),
    max_leaves=6)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_json_with_a_random_value_anywhere_is_loaded_or_reported(data):
    d = doc(labels={"c": True}, inputs={"b(1,2)": 0.5}, tuples=["a(1)"])
    paths = [p for p in _paths(d) if p]
    path = data.draw(st.sampled_from(paths))
    new = data.draw(json_value)
    node = d
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    text = json.dumps(d)
    try:
        model = formats.model_from_derivation(*formats.parse_json(text, "g.json"))
    except InputError as e:
        assert e.path == "g.json" and (e.location or e.line), str(e)
        assert e.location is None or e.location.startswith("$")
    else:
        assert model.num_vars > 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(alphabet="RNOT :,()ab12\t", max_size=25), min_size=1, max_size=5),
       st.text(alphabet="ab(1,2): .5x", max_size=12))
def test_bingo_with_random_lines_is_loaded_or_reported(tmp_path_factory, lines, query):
    d = tmp_path_factory.mktemp("bingo")
    (d / "named_cons_all.txt").write_text("\n".join(lines) + "\n")
    (d / "base_queries.txt").write_text(query + "\n")
    try:
        model = load(d)
    except InputError as e:
        assert Path(e.path).parent == d or Path(e.path) == d, str(e)
        nonblank = [i for i, s in enumerate(lines, 1) if s.strip()]
        if e.line is not None and e.path.endswith("named_cons_all.txt"):
            assert e.line in nonblank
    else:
        assert model.num_vars > 0
        for name in model.var_names:
            assert name and not math.isnan(len(name))
