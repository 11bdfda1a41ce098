"""SARIF for CI (`fastlbp.io.sarif_ci`): fingerprints, baselines, code flows, no local paths."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from test_sarif import RACE, check

from fastlbp.core.errors import InputError
from fastlbp.inference import ranking
from fastlbp.inference.explain import explain, explain_name
from fastlbp.io import sarif
from fastlbp.io.loading import load
from fastlbp.io.sarif_ci import (
    FINGERPRINT_KEY,
    LEGACY_KEY,
    fingerprint,
    legacy_fingerprint,
    read_baseline,
    shown_path,
)


def race_doc(tmp_path, change=None, name="race.json", **kw):
    """The race example's SARIF after `change(doc)` of its derivation.json."""
    doc = json.loads(RACE.read_text())
    if change is not None:
        change(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    model = load(path)
    r = ranking.rank(model)
    return model, r, check(sarif.to_sarif(r, model, source=str(path), **kw))


def keys(doc):
    return {res["properties"]["alarm"]: res["partialFingerprints"][FINGERPRINT_KEY]
            for res in doc["runs"][0]["results"]}


def test_fingerprints_are_stable_across_runs_and_rule_probabilities(tmp_path):
    _, _, a = race_doc(tmp_path)
    _, _, b = race_doc(tmp_path)
    assert keys(a) == keys(b) and len(set(keys(a).values())) == len(keys(a)) == 6

    def weaker(doc):
        doc["rules"]["Rrace"]["probability"] = 0.3
    _, r, c = race_doc(tmp_path, weaker, "weaker.json")
    assert keys(c) == keys(a)
    # The change moved the ranking (the fingerprint does not follow rank or probability).
    before = [x["properties"]["alarm"] for x in a["runs"][0]["results"]]
    assert [x["properties"]["alarm"] for x in c["runs"][0]["results"]] != before
    assert fingerprint("race(1,4)") == keys(a)["race(1,4)"] == legacy_fingerprint("race(1, 4)")
    assert fingerprint("race(1, 4)") != keys(a)["race(1,4)"]  # another name: another tuple
    assert "primaryLocationLineHash" not in json.dumps(a)  # GitHub's own key, computed by upload-sarif


def test_no_absolute_path_of_this_machine(tmp_path):
    _, _, doc = race_doc(tmp_path)
    text = json.dumps(doc)
    for local in {str(tmp_path), str(Path.cwd()), os.path.expanduser("~"), str(RACE.parent), "file:"}:
        assert local not in text, local
    assert doc["runs"][0]["invocations"][0]["properties"]["graph"] == "race.json"  # outside the cwd
    assert doc["runs"][0]["originalUriBaseIds"]["%SRCROOT%"] == {"description": {
        "text": sarif.SRCROOT_DESCRIPTION}}


def test_shown_path(tmp_path):
    (tmp_path / "src").mkdir()
    assert shown_path(tmp_path / "src" / "g.json", tmp_path) == "src/g.json"
    assert shown_path(tmp_path / "g.json", tmp_path / "src") == "g.json"
    assert shown_path("data/race.json") == "data/race.json"


def test_every_derived_alarm_has_the_strongest_derivation_as_a_code_flow(tmp_path):
    model, r, doc = race_doc(tmp_path)
    for res, a in zip(doc["runs"][0]["results"], r.alarms, strict=True):
        (flow,) = res["codeFlows"]
        steps = flow["threadFlows"][0]["locations"]
        names = [s["location"]["logicalLocations"][0]["name"] for s in steps]
        assert names[-1] == a.alarm  # the alarm is the last step
        assert [s["executionOrder"] for s in steps] == list(range(1, len(steps) + 1))
        # The step before the alarm is the last body tuple of its strongest derivation; every body tuple of
        # it is a step.
        ex = explain(model, r.marginals, a.var, k=1)
        body = [n for n, _ in ex.derivations[0].body]
        assert names[-len(body) - 1:-1] == body
        # Every step is a tuple of the graph, derived by the strongest derivation of a later step.
        for n in names[:-1]:
            explain_name(model, r.marginals, n)
        located = [s for s in steps if "physicalLocation" in s["location"]]
        assert located, a.alarm  # race.json locates accesses and sources
    # leak(3) has two derivations: the flow follows the stronger (the reference: clause marginals).
    dg = model.meta["derivation"]
    clause_var = np.asarray(model.meta["clause_var"])
    clauses = np.flatnonzero(np.asarray(dg.clause_head) == dg.tuple_index["leak(3)"])
    strongest = clauses[np.argmax(r.marginals[clause_var[clauses]])]
    body = {dg.tuples[int(b)] for b in dg.clause_body(strongest)}
    leak = next(x for x in doc["runs"][0]["results"] if x["properties"]["alarm"] == "leak(3)")
    names = {s["location"]["logicalLocations"][0]["name"]
             for s in leak["codeFlows"][0]["threadFlows"][0]["locations"]}
    assert body <= names
    other = {dg.tuples[int(b)] for c in clauses if c != strongest for b in dg.clause_body(c)} - body
    assert not other & names


def test_baseline_states(tmp_path):
    _, _, old = race_doc(tmp_path)
    base_path = tmp_path / "old.sarif"
    base_path.write_text(sarif.dumps(old))
    base = read_baseline(base_path)
    assert set(base) == set(keys(old).values())

    _, _, same = race_doc(tmp_path, baseline=base)
    assert {x["baselineState"] for x in same["runs"][0]["results"]} == {"unchanged"}

    def change(doc):
        # race(6,5) disappears (its clause goes), a new alarm race(6,1) comes, race(1,4) weakens a lot.
        i = doc["tuples"].index("race(6,5)")
        doc["tuples"][i] = "race(6,1)"
        doc["alarms"][doc["alarms"].index("race(6,5)")] = "race(6,1)"
        doc["locations"].pop("race(6,5)", None)
        doc.get("truth", {}).pop("race(6,5)", None)
        doc["inputs"]["unlocked(4)"] = 0.05
    model, r, new = race_doc(tmp_path, change, "new.json", baseline=base)
    states = {x["properties"]["alarm"]: x["baselineState"] for x in new["runs"][0]["results"]}
    assert states["race(6,1)"] == "new" and states["race(6,5)"] == "absent"
    assert states["race(1,4)"] == "updated"
    assert states["leak(3)"] == states["leak(9)"] == "unchanged"
    absent = next(x for x in new["runs"][0]["results"] if x["baselineState"] == "absent")
    assert absent["kind"] == "pass" and absent["level"] == "none"
    assert sarif.states(new) == {"new": 1, "unchanged": sum(v == "unchanged" for v in states.values()),
                                 "updated": sum(v == "updated" for v in states.values()), "absent": 1}


@pytest.mark.parametrize("text,message", [("{", "not JSON"), ("[]", "no \"runs\""),
                                          ('{"runs": [{"results": [{"ruleId": "x"}]}]}', "properties.alarm")])
def test_bad_baselines_are_input_errors(tmp_path, text, message):
    path = tmp_path / "b.sarif"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_baseline(path)
    with pytest.raises(InputError, match="cannot read"):
        read_baseline(tmp_path / "missing.sarif")


def test_an_alarm_whose_derivations_hold_with_p_0_still_has_a_flow():
    model = load(RACE)
    r = ranking.rank(model, {model.index["unlocked(1)"]: False})  # race(1,4) and race(1,2) cannot hold
    doc = check(sarif.to_sarif(r, model))
    results = {x["properties"]["alarm"]: x for x in doc["runs"][0]["results"]}
    assert results["race(1,4)"]["properties"]["probability"] == 0.0
    for alarm in ("race(1,4)", "race(1,2)"):
        steps = results[alarm]["codeFlows"][0]["threadFlows"][0]["locations"]
        names = [s["location"]["logicalLocations"][0]["name"] for s in steps]
        assert "unlocked(1)" in names and names[-1] == alarm


# Fingerprints of names that differ in white space, old baselines (issue 41, item 3) ---------------------

def test_alarms_that_differ_only_in_white_space_are_two_alarms(tmp_path):
    """v1 removed white space: race(a b,4), a new alarm, took race(ab,4)'s fingerprint and was "updated"."""
    assert fingerprint("race(a b,4)") != fingerprint("race(ab,4)")
    assert legacy_fingerprint("race(a b,4)") == legacy_fingerprint("race(ab,4)")  # what v1 did

    def old(doc):
        text = json.dumps(doc).replace("race(1,4)", "race(ab,4)")
        doc.clear()
        doc.update(json.loads(text))

    def new(doc):
        old(doc)
        text = json.dumps(doc).replace("race(1,2)", "race(a b,4)")
        doc.clear()
        doc.update(json.loads(text))

    _, _, before = race_doc(tmp_path, old, "old.json")
    base_path = tmp_path / "old.sarif"
    base_path.write_text(sarif.dumps(before))
    _, _, after = race_doc(tmp_path, new, "new.json", baseline=read_baseline(base_path))
    states = {x["properties"]["alarm"]: x["baselineState"] for x in after["runs"][0]["results"]}
    assert states["race(a b,4)"] == "new" and states["race(1,2)"] == "absent"
    assert states["race(ab,4)"] == "unchanged"


def test_a_baseline_of_v1_fingerprints_still_matches(tmp_path):
    _, _, old = race_doc(tmp_path)
    for res in old["runs"][0]["results"]:
        alarm = res["properties"].pop("alarm")  # matched by the old key alone
        res["partialFingerprints"] = {LEGACY_KEY: legacy_fingerprint(alarm)}
    base_path = tmp_path / "v1.sarif"
    base_path.write_text(json.dumps(old))
    _, _, now = race_doc(tmp_path, baseline=read_baseline(base_path))
    assert {x["baselineState"] for x in now["runs"][0]["results"]} == {"unchanged"}


# Malformed baselines (issue 41, items 13, 14, a byte order mark) ----------------------------------------

def _with_result(change):
    """A baseline of one result (race(9,9), which the race example lacks: absent) after `change(result)`."""
    res = {"ruleId": "race", "level": "warning", "message": {"text": "race(9,9)"},
           "locations": [{"physicalLocation": {
               "artifactLocation": {"uri": "src/a.c", "uriBaseId": "%SRCROOT%"},
               "region": {"startLine": 3, "startColumn": 2}}}],
           "partialFingerprints": {FINGERPRINT_KEY: fingerprint("race(9,9)")},
           "properties": {"alarm": "race(9,9)", "probability": 0.5}}
    change(res)
    return json.dumps({"version": "2.1.0", "runs": [{"results": [res]}]})


def _set(key, value):
    def change(res):
        res[key] = value
    return change


MALFORMED = {
    "fingerprints an array": (_with_result(_set("partialFingerprints", [1, 2])),
                              "partialFingerprints is not an object"),
    "properties an array": (_with_result(_set("properties", [1])), "properties is not an object"),
    "ruleId an object": (_with_result(_set("ruleId", {"a": 1})), "ruleId is not a string"),
    "level a number": (_with_result(_set("level", 3)), "level is not a string"),
    "locations an object": (_with_result(_set("locations", {"a": 1})), "locations is not an array"),
    "a location a number": (_with_result(_set("locations", [7])), "locations[0] is not an object"),
    "results a number": ('{"runs": [{"results": 5}]}', "results is not an array"),
    "results an object": ('{"runs": [{"results": {"a": 1}}]}', "results is not an array"),
    "nested 100,000 deep": ('{"runs": [{"results": [' + "[" * 100_000 + "]" * 100_000 + "]}]}",
                            "nested too deeply"),
    "not UTF-8": ('{"runs": [{"results": []}], "x": "\udcff"}', "cannot read the baseline"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_baselines_are_input_errors(tmp_path, case):
    text, message = MALFORMED[case]
    path = tmp_path / "b.sarif"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(InputError, match=re.escape(message)) as err:
        read_baseline(path)
    assert str(err.value).startswith(f"{path}")


def test_an_absent_result_keeps_only_valid_sarif(tmp_path):
    """A baseline's region of startLine -3 was copied into the log, which then failed SARIF's schema."""
    def change(res):
        res["locations"][0]["physicalLocation"]["region"] = {"startLine": -3, "startColumn": 2,
                                                             "endLine": 1.5}
        res["locations"].append({"physicalLocation": {"artifactLocation": {"uri": 5}},
                                 "message": {"text": 1}})
        res["locations"].append({"logicalLocations": [{"name": "race(9,9)", "kind": 3}, "x"]})
        res["message"] = {"text": ["not text"]}
        res["partialFingerprints"]["other/v1"] = 7
        res["properties"].update({"tags": "not an array", "nested": {"a": [1]}, "probability": float("nan")})
    path = tmp_path / "b.sarif"
    path.write_text(_with_result(change))
    _, _, doc = race_doc(tmp_path, baseline=read_baseline(path))  # `check` validates against the schema
    (absent,) = [x for x in doc["runs"][0]["results"] if x["baselineState"] == "absent"]
    assert absent["locations"] == [
        {"physicalLocation": {"artifactLocation": {"uri": "src/a.c", "uriBaseId": "%SRCROOT%"}}},
        {"logicalLocations": [{"name": "race(9,9)"}]}]
    assert absent["properties"] == {"alarm": "race(9,9)"}
    assert absent["partialFingerprints"] == {FINGERPRINT_KEY: fingerprint("race(9,9)")}
    assert absent["message"] == {"text": "race(9,9): no longer reported"}


def test_a_baseline_with_a_byte_order_mark_is_read(tmp_path):
    _, _, old = race_doc(tmp_path)
    path = tmp_path / "bom.sarif"
    path.write_bytes(b"\xef\xbb\xbf" + sarif.dumps(old).encode())
    assert set(read_baseline(path)) == set(keys(old).values())


def test_a_baseline_that_never_ends_is_read_under_the_limit():
    """`rank --baseline /dev/zero` read 3 GB in 9 s; every other file option stops at 256 MiB."""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    with pytest.raises(InputError, match="cannot read the baseline: not a regular file, and its size "
                                         "exceeds"):
        read_baseline("/dev/zero")
