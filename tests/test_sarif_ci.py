"""SARIF for CI (`fastlbp.io.sarif_ci`): fingerprints, baselines, code flows, no local paths."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from test_sarif import RACE, check

from fastlbp.core.errors import InputError
from fastlbp.inference import ranking
from fastlbp.inference.explain import explain, explain_name
from fastlbp.io import sarif
from fastlbp.io.loading import load
from fastlbp.io.sarif_ci import FINGERPRINT_KEY, fingerprint, read_baseline, shown_path


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
    assert fingerprint("race(1, 4)") == keys(a)["race(1,4)"]
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
