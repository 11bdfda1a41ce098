"""SARIF 2.1.0 (`fastlbp.io.sarif`) and the source locations it carries (`datalog.annotations`).

Every log is validated against the official OASIS schema, tests/data/sarif-schema-2.1.0.json
(where it comes from: tests/data/sarif-schema-2.1.0.SOURCE).
"""

import json
import math
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import jsonschema
import numpy as np
import pytest
from conftest import DATA
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from triage_support import hand_model, load_demo, write_demo
from typer.testing import CliRunner

import fastlbp
from datalog import formats
from datalog.annotations import LocationIndex, is_pattern, split_tuple
from datalog.bayesnet import to_model
from datalog.derivation import from_clauses
from fastlbp.cli import get_app
from fastlbp.inference import ranking
from fastlbp.inference.ranking import LabelledAlarm, RankedAlarm, Ranking
from fastlbp.io import sarif
from fastlbp.io.loading import load

RACE = Path(__file__).resolve().parents[1] / "data" / "race.json"
SCHEMA = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
VALIDATOR = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
runner = CliRunner()


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def check(doc: dict) -> dict:
    """Valid SARIF 2.1.0, no NaN or infinity, every file a relative, percent-encoded URI."""
    VALIDATOR.validate(doc)
    json.dumps(doc, allow_nan=False)
    text = json.dumps(doc)
    for uri in re.findall(r'"uri": "([^"]*)"', text):
        parts = urlsplit(uri)
        assert not parts.scheme and not parts.netloc and not uri.startswith("/"), uri
        assert " " not in uri and unquote(uri) != "" and "%" not in uri.replace("%20", ""), uri
    return doc


def small_ranking(total_unlabelled=3):
    return Ranking([RankedAlarm(1, "race(1,2)", 4, 0.93, 2.5867), RankedAlarm(2, "87", 0, 2.5e-7, -15.2)],
                   [LabelledAlarm("race(3,4)", 5, False, 0.0)], iterations=12, converged=True,
                   delta=1e-7, seconds=0.01, total_unlabelled=total_unlabelled)


# Without a model: logical locations only ------------------------------------------------------

def test_sarif_of_a_ranking_without_a_model():
    r = small_ranking()
    doc = check(sarif.to_sarif(r, source="g.json"))
    assert doc["$schema"] == sarif.SARIF_SCHEMA_URI
    run = doc["runs"][0]
    assert run["tool"]["driver"]["version"] == fastlbp.__version__
    rules = run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == ["race", "alarm"]
    # race: the ranked race(1,2) (0.93) and the labelled-false race(3,4) (0) -> mean 0.465
    assert rules[0]["properties"]["mean_probability"] == pytest.approx(0.465)
    assert rules[0]["properties"]["precision"] == "medium" and rules[1]["properties"]["precision"] == "low"
    assert all("security-severity" not in rule["properties"] for rule in rules)
    res = run["results"]
    assert [x["ruleIndex"] for x in res] == [0, 1]
    assert res[0]["rank"] == pytest.approx(93.0)
    assert res[0]["level"] == "warning" and res[1]["level"] == "note"
    assert res[0]["locations"] == [{"logicalLocations": [
        {"name": "race(1,2)", "fullyQualifiedName": "race(1,2)", "kind": "alarm"}]}]
    assert "relatedLocations" not in res[0]
    assert run["invocations"][0]["properties"]["graph"] == "g.json"
    assert run["properties"]["labelled"] == [{"alarm": "race(3,4)", "truth": False}]
    assert sarif.to_sarif(r, version="9.9")["runs"][0]["tool"]["driver"]["version"] == "9.9"
    assert json.loads(sarif.dumps(doc)) == doc


def test_the_schema_rejects_bad_documents():
    doc = check(sarif.to_sarif(ranking.rank(hand_model())))
    for damage in (lambda d: d["runs"][0]["results"][0].__setitem__("rank", 101),
                   lambda d: d["runs"][0]["results"][0].pop("message"),
                   lambda d: d["runs"][0]["results"][0].__setitem__("level", "fatal"),
                   lambda d: d["runs"][0]["results"][0]["locations"][0].__setitem__(
                       "physicalLocation", {"region": {"startLine": 0}})):
        bad = json.loads(json.dumps(doc))
        damage(bad)
        with pytest.raises(jsonschema.ValidationError):
            VALIDATOR.validate(bad)


def test_tiny_probabilities_keep_their_magnitude():
    r = Ranking([RankedAlarm(1, "a", 0, 0.0, -800.0), RankedAlarm(2, "b", 1, 0.0, float("-inf"))],
                [], 1, True, 0.0, 0.0, 2)
    res = check(sarif.to_sarif(r))["runs"][0]["results"]
    assert "3.668e-348" in res[0]["message"]["text"] and res[0]["properties"]["log_odds"] == -800.0
    assert res[1]["properties"]["log_odds"] is None and res[1]["rank"] == 0.0


@hsettings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=12),
                          st.floats(allow_nan=True, allow_infinity=True),
                          st.floats(allow_nan=True, allow_infinity=True)), max_size=6),
       st.lists(st.tuples(st.text(max_size=8), st.booleans()), max_size=3))
def test_any_ranking_gives_a_valid_log(alarms, labelled):
    r = Ranking([RankedAlarm(i + 1, name, i, p, lo) for i, (name, p, lo) in enumerate(alarms)],
                [LabelledAlarm(name, 100 + i, t, float(t)) for i, (name, t) in enumerate(labelled)],
                1, True, 0.0, 0.0, len(alarms))
    doc = check(sarif.to_sarif(r))
    for res, (_, p, _) in zip(doc["runs"][0]["results"], alarms, strict=True):
        assert 0.0 <= res["rank"] <= 100.0
        if math.isfinite(p) and 0.0 <= p <= 1.0:
            assert res["rank"] == pytest.approx(100 * p, abs=1e-6)


def test_precision_levels():
    assert [sarif.precision_level(p) for p in (1.0, 0.9, 0.8999, 0.7, 0.6999, 0.4, 0.3999, 0.0)] == [
        "very-high", "very-high", "high", "high", "medium", "medium", "low", "low"]
    assert sarif.precision_level(float("nan")) == "low"
    order = ["low", "medium", "high", "very-high"]
    ps = np.linspace(0, 1, 101)
    levels = [order.index(sarif.precision_level(p)) for p in ps]
    assert levels == sorted(levels)  # monotone in the mean probability


# Locations: the race example ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def race():
    model = load(RACE)
    r = ranking.rank(model)
    return model, r, check(sarif.to_sarif(r, model, source=str(RACE)))


def test_race_example_alarms_have_their_physical_locations(race):
    model, r, doc = race
    raw = json.loads(RACE.read_text())["locations"]
    assert model.meta["locations"] == raw and model.meta["relations"]["leak"]["security"] is True
    results = doc["runs"][0]["results"]
    assert [x["properties"]["alarm"] for x in results] == [a.alarm for a in r.alarms]
    for res, a in zip(results, r.alarms, strict=True):
        first = raw[a.alarm][0]
        phys = res["locations"][0]["physicalLocation"]
        assert unquote(phys["artifactLocation"]["uri"]) == first["file"]
        assert phys["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert phys["region"] == {"startLine": first["line"], "startColumn": first["column"]}
        assert res["locations"][0]["logicalLocations"][0]["name"] == a.alarm
        assert res["rank"] == pytest.approx(100 * a.probability, abs=1e-5)
        # The alarm's own other locations come first among the related ones.
        others = [unquote(x["physicalLocation"]["artifactLocation"]["uri"]) for x in res["relatedLocations"]]
        assert others[:len(raw[a.alarm]) - 1] == [loc["file"] for loc in raw[a.alarm][1:]]
        assert [x["id"] for x in res["relatedLocations"]] == list(range(len(res["relatedLocations"])))
    leak9 = next(x for x in results if x["properties"]["alarm"] == "leak(9)")
    uri = leak9["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "src/audit/Audit%20Log.java"


def test_related_locations_are_the_strongest_derivation_body(race):
    model, r, doc = race
    results = {x["properties"]["alarm"]: x for x in doc["runs"][0]["results"]}
    messages = [x["message"]["text"] for x in results["race(1,4)"]["relatedLocations"]]
    rested = [m.split(" ")[0] for m in messages[1:]]
    # race(1,4) :- write(1,count), access(4,count), parallel(1,4), unlocked(1), unlocked(4): parallel has
    # no location, access(4,count) none either, so the walk goes on to write(4,count), which derives it.
    assert rested == ["write(1,count)", "unlocked(1)", "unlocked(4)", "write(4,count)"]
    assert all("which race(1,4) rests on" in m for m in messages[1:])
    # leak(3) has two derivations; the related tuples come from the stronger one (reference: the clause
    # variables' marginals directly).
    dg = model.meta["derivation"]
    clause_var = np.asarray(model.meta["clause_var"])
    leak3 = dg.tuple_index["leak(3)"]
    clauses = np.flatnonzero(np.asarray(dg.clause_head) == leak3)
    strongest = clauses[np.argmax(r.marginals[clause_var[clauses]])]
    source = dg.tuples[int(dg.clause_body(strongest)[0])]  # source(7,password) or source(8,token)
    rested = [x["message"]["text"].split(" ")[0] for x in results["leak(3)"]["relatedLocations"]]
    assert rested[0] == source and {"sink(3)"} <= set(rested)


def test_rules_carry_precision_and_security_severity(race):
    model, r, doc = race
    rules = {rule["id"]: rule for rule in doc["runs"][0]["tool"]["driver"]["rules"]}
    for rid, rule in rules.items():
        ps = [a.probability for a in r.alarms if a.alarm.startswith(rid + "(")]
        assert rule["properties"]["alarms"] == len(ps)
        assert rule["properties"]["mean_probability"] == pytest.approx(np.mean(ps))
        assert rule["properties"]["precision"] == sarif.precision_level(np.mean(ps))
    assert rules["leak"]["properties"]["security-severity"] == "7.5"
    assert "security" in rules["leak"]["properties"]["tags"]
    assert "security-severity" not in rules["race"]["properties"]
    assert "security" not in rules["race"]["properties"]["tags"]
    assert rules["race"]["shortDescription"]["text"].startswith("Two threads")
    assert rules["leak"]["help"]["text"].startswith("Do not log")


def test_precision_counts_every_alarm_not_only_the_top_ones(race):
    model, _, _ = race
    top = ranking.rank(model, top=1)
    doc = check(sarif.to_sarif(top, model))
    (rule,) = doc["runs"][0]["tool"]["driver"]["rules"]
    alarms = [v for v in model.alarms if sarif.relation(model.var_names[v]) == rule["id"]]
    assert rule["properties"]["alarms"] == len(alarms)
    assert rule["properties"]["mean_probability"] == pytest.approx(np.mean(top.marginals[alarms]))


def test_a_labelled_alarm_counts_as_its_label(race):
    model, _, _ = race
    v = model.index["race(1,4)"]
    r = ranking.rank(model, {v: False})
    rules = sarif.to_sarif(r, model)["runs"][0]["tool"]["driver"]["rules"]
    rule = next(x for x in rules if x["id"] == "race")
    others = [a.probability for a in r.alarms if a.alarm.startswith("race(")]
    assert rule["properties"]["mean_probability"] == pytest.approx(np.mean(others + [0.0]))


def test_cli_sarif_of_the_race_example():
    res = invoke("rank", RACE, "--format", "sarif")
    assert res.exit_code == 0, res.output
    doc = check(json.loads(res.stdout))
    results = doc["runs"][0]["results"]
    assert len(results) == 6 and all("physicalLocation" in x["locations"][0] for x in results)
    assert doc["runs"][0]["invocations"][0]["properties"]["graph"] == "data/race.json"  # relative


@pytest.mark.parametrize("top", [None, 4])
def test_cli_sarif_of_a_graph_without_locations(tmp_path, top):
    graph, _ = write_demo(tmp_path)
    res = invoke("rank", graph, "--format", "sarif", *(["--top", top] if top else []))
    assert res.exit_code == 0, res.output
    doc = check(json.loads(res.stdout))
    expected = ranking.rank(load_demo(graph), top=top)
    results = doc["runs"][0]["results"]
    assert [x["properties"]["alarm"] for x in results] == [a.alarm for a in expected.alarms]
    assert [x["properties"]["rank"] for x in results] == list(range(1, len(results) + 1))
    assert {x["ruleId"] for x in results} == {"race"}
    assert results[0]["rank"] == pytest.approx(100 * expected.alarms[0].probability, abs=1e-5)
    assert "P(true)" in results[0]["message"]["text"]
    assert all(list(x["locations"][0]) == ["logicalLocations"] and "relatedLocations" not in x
               for x in results)
    rule = doc["runs"][0]["tool"]["driver"]["rules"][0]
    assert rule["properties"]["alarms"] == expected.total_unlabelled


# The walk to located tuples ------------------------------------------------------------------------

def chain_model():
    """a(1) :- m(1), in(2).  m(1) :- m2(1).  m2(1) :- in(1), in(3).  Weaker: a(1) :- in(4)."""
    dg = from_clauses([("R", "a(1)", ["m(1)", "in(2)"]), ("R", "m(1)", ["m2(1)"]),
                       ("R", "m2(1)", ["in(1)", "in(3)"]), ("W", "a(1)", ["in(4)"])],
                      rules={"R": 0.9, "W": 0.1}, priors={f"in({i})": 0.8 for i in range(1, 5)},
                      alarms=["a(1)"])
    model = to_model(dg)  # uncompressed: every tuple a variable
    return model, ranking.rank(model).marginals


def test_supporting_tuples_walk_past_tuples_without_a_location():
    model, marginals = chain_model()
    a = model.index["a(1)"]

    def located(names):
        return lambda n: n in names
    assert sarif.supporting_tuples(model, marginals, a, located({"in(2)", "in(1)", "in(3)"})) == [
        ("in(2)", pytest.approx(0.8)), ("in(1)", pytest.approx(0.8)), ("in(3)", pytest.approx(0.8))]
    assert [n for n, _ in sarif.supporting_tuples(model, marginals, a, located({"m2(1)", "in(1)"}))] == [
        "m2(1)"]  # a located tuple ends the walk through it
    assert [n for n, _ in sarif.supporting_tuples(model, marginals, a, located({"in(1)", "in(2)"}),
                                                  limit=1)] == ["in(2)"]
    # The weaker derivation's in(4) is never reached; explaining only a(1) stops before m2(1)'s body.
    assert sarif.supporting_tuples(model, marginals, a, located({"in(4)"})) == []
    assert sarif.supporting_tuples(model, marginals, a, located({"in(1)"}), max_explained=2) == []
    assert sarif.supporting_tuples(model, marginals, a, located({"in(1)"}), max_explained=3) == [
        ("in(1)", pytest.approx(0.8))]


# Patterns ---------------------------------------------------------------------------------------------

def test_split_tuple_and_patterns():
    assert split_tuple("race(13, 15)") == ("race", ("13", "15"))
    assert split_tuple("f()") == ("f", ())
    assert split_tuple("87") is None and split_tuple("a(1)b") is None
    assert is_pattern("race(*,*)") and is_pattern("lock(*, 7)") and not is_pattern("race(1,2)")
    assert not is_pattern("race(x*,2)")  # only a whole argument '*' is a wildcard


def reference_lookup(locations: dict, name: str):
    """The rule of `datalog.annotations` spelled out: own name; else fewest '*', then first in the file."""
    if name in locations:
        return locations[name]
    m = re.fullmatch(r"([^()\s]+)\((.*)\)", name)
    if m is None:
        return []
    args = [a.strip() for a in m.group(2).split(",")] if m.group(2).strip() else []
    best = None
    for order, (key, locs) in enumerate(locations.items()):
        k = re.fullmatch(r"([^()\s]+)\((.*)\)", key)
        if k is None or k.group(1) != m.group(1):
            continue
        kargs = [a.strip() for a in k.group(2).split(",")] if k.group(2).strip() else []
        if "*" not in kargs or len(kargs) != len(args):
            continue
        if all(ka == "*" or ka == a for ka, a in zip(kargs, args, strict=True)):
            rank = (kargs.count("*"), order)
            if best is None or rank < best[0]:
                best = (rank, locs)
    return [] if best is None else best[1]


_args = st.lists(st.sampled_from(["1", "2", "x"]), min_size=0, max_size=3)
_names = st.builds(lambda r, a: f"{r}({','.join(a)})", st.sampled_from(["a", "b"]), _args)
_keys = st.builds(lambda r, a: f"{r}({','.join(a)})", st.sampled_from(["a", "b"]),
                  st.lists(st.sampled_from(["1", "2", "*"]), min_size=0, max_size=3))


@hsettings(max_examples=100, deadline=None)
@given(st.lists(_keys, max_size=8, unique=True), st.lists(_names, min_size=1, max_size=6))
def test_pattern_lookup_matches_the_reference(keys, names):
    locations = {k: [{"file": f"f{i}.c", "line": i + 1}] for i, k in enumerate(keys)}
    index = LocationIndex(locations)
    for name in names + keys:
        assert index.lookup(name) == reference_lookup(locations, name), name


# derivation.json: reading, writing, errors ---------------------------------------------------------

DOC = {"format": "fastlbp-derivation", "version": 1, "rules": {"R0": 0.9},
       "clauses": [["R0", "race(1,2)", ["acc(1)", "acc(2)"]]], "alarms": ["race(1,2)"],
       "locations": {"acc(*)": [{"file": "src/A.java", "line": 3}],
                     "race(1,2)": [{"file": "src/A.java", "line": 10, "column": 2, "endLine": 10,
                                    "endColumn": 9, "message": "here"}]},
       "relations": {"race": {"description": "data race", "security": True, "severity": 7}}}


def test_locations_round_trip_through_save_json(tmp_path):
    dg, _ = formats.parse_json(json.dumps(DOC), "x.json")
    assert dg.annotations["locations"] == DOC["locations"]
    assert dg.annotations["relations"] == {"race": {"description": "data race", "security": True,
                                                    "severity": 7.0}}
    for name in ("g.json", "g.json.gz"):
        formats.save_json(dg, tmp_path / name)
        back, _ = formats.read_json(tmp_path / name)
        assert back.annotations == dg.annotations
    model = load(tmp_path / "g.json")
    assert model.meta["locations"] == DOC["locations"]
    json.dumps(model.meta["locations"]), json.dumps(model.meta["relations"])  # JSON-able
    res = check(sarif.to_sarif(ranking.rank(model), model))["runs"][0]["results"][0]
    assert res["locations"][0]["physicalLocation"]["region"] == {"startLine": 10, "startColumn": 2,
                                                                 "endLine": 10, "endColumn": 9}
    assert res["locations"][0]["message"]["text"] == "here"
    assert [x["message"]["text"].split(" ")[0] for x in res["relatedLocations"]] == ["acc(1)", "acc(2)"]
    warnings = formats.save_bingo(dg, tmp_path / "bingo")
    assert any("locations or relations" in w for w in warnings)


def test_a_graph_without_locations_writes_none(tmp_path):
    doc = {k: v for k, v in DOC.items() if k not in ("locations", "relations")}
    dg, _ = formats.parse_json(json.dumps(doc), "x.json")
    assert dg.annotations == {} and '"locations"' not in formats.dumps_json(dg)
    assert "locations" not in formats.model_from_derivation(dg).meta
    assert formats.save_bingo(dg, tmp_path / "b") == []


BAD = [
    ({"locations": {"nope(1)": []}}, "$.locations[\"nope(1)\"]", "not in the graph"),
    ({"locations": []}, "$.locations", "must be an object"),
    ({"locations": {"acc(*)": {"file": "a"}}}, "$.locations[\"acc(*)\"]", "must be an array"),
    ({"locations": {"acc(*)": [{"line": 3}]}}, "[0]", "needs \"file\""),
    ({"locations": {"acc(*)": [{"file": "/abs/a.c"}]}}, ".file", "relative to the source root"),
    ({"locations": {"acc(*)": [{"file": "C:\\\\a.c"}]}}, ".file", "relative to the source root"),
    ({"locations": {"acc(*)": [{"file": "a.c", "line": 0}]}}, ".line", "at least 1"),
    ({"locations": {"acc(*)": [{"file": "a.c", "line": 2.0}]}}, ".line", "must be an integer"),
    ({"locations": {"acc(*)": [{"file": "a.c", "column": 2}]}}, "[0]", "needs a \"line\""),
    ({"locations": {"acc(*)": [{"file": "a.c", "line": 5, "endLine": 4}]}}, "[0]", "before line"),
    ({"locations": {"acc(*)": [{"file": "a.c", "line": 5, "colour": 4}]}}, "[0]", "unknown location field"),
    ({"relations": {"race": {"severity": 5}}}, ".severity", "\"security\": true"),
    ({"relations": {"race": {"security": True, "severity": 11}}}, ".severity", "not in [0, 10]"),
    ({"relations": {"race": {"security": "yes"}}}, ".security", "true or false"),
    ({"relations": {"race": {"level": "high"}}}, "$.relations[\"race\"]", "unknown relation field"),
]


@pytest.mark.parametrize("change,where,message", BAD)
def test_bad_locations_and_relations_are_clean_errors(tmp_path, change, where, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**DOC, **change}))
    res = invoke("rank", path, "--format", "sarif")
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {path}") and where in res.stderr and message in res.stderr
    assert "Traceback" not in res.output


def test_nan_severity_is_an_error(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text(json.dumps({**DOC, "relations": {"race": {"security": True}}})
                    .replace('"security": true', '"security": true, "severity": NaN'))
    res = invoke("rank", path, "--format", "sarif")
    assert res.exit_code == 2 and "not in [0, 10]" in res.stderr


def test_the_derivation_schema_accepts_the_race_example_and_refuses_bad_sections():
    schema = json.loads(formats.SCHEMA_PATH.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(json.loads(RACE.read_text()))
    validator.validate(DOC)
    # Only the reader knows the graph's tuples and compares numbers across fields; JSON Schema takes
    # 2.0 for an integer.
    reader_only = ("nope(1)", "2.0", "endLine")
    for change, _, _ in BAD:
        if not any(x in json.dumps(change) for x in reader_only):
            with pytest.raises(jsonschema.ValidationError):
                validator.validate({**DOC, **change})


_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**20) | st.floats() | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                  max_size=3),
                     max_leaves=8)
_location = st.dictionaries(
    st.sampled_from(["file", "line", "column", "endLine", "endColumn", "message", "x"]),
    _json | st.sampled_from(["a.c", "src/b c.java", "/abs", "C:x", 1, 3]), max_size=5)


@hsettings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from(["acc(1)", "acc(*)", "race(1,2)", "race(*,2)", "zz(*)", "nope"]),
                       st.lists(_location, max_size=3) | _json, max_size=3),
       st.dictionaries(st.sampled_from(["race", "acc"]),
                       st.dictionaries(st.sampled_from(["description", "help", "security", "severity", "y"]),
                                       _json, max_size=4) | _json, max_size=2))
def test_any_locations_and_relations_read_cleanly_or_are_an_input_error(locations, relations):
    """Whatever the sections hold, reading gives a graph whose SARIF is valid, or an InputError."""
    from fastlbp.core.errors import InputError

    text = json.dumps({**DOC, "locations": locations, "relations": relations})
    try:
        dg, where = formats.parse_json(text, "fuzz.json")
    except InputError as err:
        assert str(err).startswith("fuzz.json")
        return
    assert formats.parse_json(formats.dumps_json(dg), "again.json")[0].annotations == dg.annotations
    model = formats.model_from_derivation(dg, where)
    check(sarif.to_sarif(ranking.rank(model), model))
