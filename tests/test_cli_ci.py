"""`fastlbp rank` in a CI job: --fail-on, filters, --baseline/--new-only, --source-root, --soft-labels,
--labels-from (typer's CliRunner)."""

import json

import pytest
from test_sarif import RACE, check
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.io.sarif_ci import FINGERPRINT_KEY

runner = CliRunner()


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def ranked(*args):
    res = invoke("rank", RACE, "-f", "json", "-q", *args)
    assert res.exit_code in (0, 1), res.output
    return res, {a["alarm"]: a["probability"] for a in json.loads(res.stdout)["alarms"]}


@pytest.fixture(scope="module")
def probabilities():
    return ranked()[1]


def test_fail_on_exits_1_exactly_when_an_alarm_passes(probabilities):
    top = max(probabilities.values())
    assert ranked("--fail-on", top)[0].exit_code == 1  # P >= threshold
    res = ranked("--fail-on", min(1.0, top + 1e-6))[0]
    assert res.exit_code == 0 and "fail-on" not in res.stderr
    res = ranked("--fail-on", 0.0)[0]
    assert res.exit_code == 1 and f"fail-on: {len(probabilities)} alarm(s)" in res.stderr
    # The filters decide which alarms can fail the job.
    leaks = max(p for a, p in probabilities.items() if a.startswith("leak"))
    assert ranked("--relation", "race", "--fail-on", leaks)[0].exit_code == (
        1 if any(p >= leaks for a, p in probabilities.items() if a.startswith("race")) else 0)
    assert invoke("rank", RACE, "--fail-on", "1.5").exit_code == 2


def test_relation_and_min_probability_filters(probabilities):
    _, races = ranked("--relation", "race")
    assert races == {a: p for a, p in probabilities.items() if a.startswith("race(")}
    _, both = ranked("--relation", "race", "--relation", "leak", "--min-probability", 0.3)
    assert both == {a: p for a, p in probabilities.items() if p >= 0.3}
    res = invoke("rank", RACE, "-f", "json", "-q", "--min-probability", 0.3, "--top", 1)
    assert len(json.loads(res.stdout)["alarms"]) == 1


def sarif_of(*args, quiet=True):
    res = invoke("rank", *args, "-f", "sarif", *(["-q"] if quiet else []))
    assert res.exit_code == 0, res.output
    return res, check(json.loads(res.stdout))


def test_baseline_and_new_only(tmp_path):
    doc = json.loads(RACE.read_text())
    _, old = sarif_of(RACE)
    base = tmp_path / "old.sarif"
    base.write_text(json.dumps(old))
    # The new version: race(6,5) is gone, race(6,1) comes.
    new = json.loads(json.dumps(doc).replace("race(6,5)", "race(6,1)"))
    path = tmp_path / "new.json"
    path.write_text(json.dumps(new))
    res, now = sarif_of(path, "--baseline", base, quiet=False)
    states = {r["properties"]["alarm"]: r["baselineState"] for r in now["runs"][0]["results"]}
    assert states.pop("race(6,1)") == "new" and states.pop("race(6,5)") == "absent"
    assert set(states.values()) == {"unchanged"}
    assert "baseline: 1 new, 5 unchanged, 0 updated, 1 absent" in res.stderr
    # An absent result says it is gone; the baseline's numbers are marked as the baseline's.
    gone = next(r for r in now["runs"][0]["results"] if r["baselineState"] == "absent")
    old_result = next(r for r in old["runs"][0]["results"] if r["properties"]["alarm"] == "race(6,5)")
    assert gone["message"]["text"].startswith("race(6,5): no longer reported (the baseline's rank ")
    assert "probability" not in gone["properties"] and "rank" not in gone["properties"]
    assert gone["properties"]["baseline"]["probability"] == old_result["properties"]["probability"]
    assert "baseline:" not in sarif_of(path, "--baseline", base)[0].stderr  # -q: counts are a note
    _, only = sarif_of(path, "--baseline", base, "--new-only")
    assert [r["properties"]["alarm"] for r in only["runs"][0]["results"]] == ["race(6,1)"]
    res = invoke("rank", path, "-q", "--baseline", base, "--new-only", "-f", "json")
    assert [a["alarm"] for a in json.loads(res.stdout)["alarms"]] == ["race(6,1)"]
    # A filtered-out alarm is not "absent".
    _, races = sarif_of(RACE, "--baseline", base, "--relation", "race")
    assert {r["baselineState"] for r in races["runs"][0]["results"]} == {"unchanged"}
    assert invoke("rank", RACE, "--new-only").exit_code == 2
    base.write_text("{")
    res = invoke("rank", RACE, "--baseline", base)
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {base}") and "Traceback" not in res.output


def test_two_runs_have_the_same_fingerprints_and_no_local_path(tmp_path):
    _, a = sarif_of(RACE)
    _, b = sarif_of(RACE, "--method", "lbp")
    fa = [r["partialFingerprints"][FINGERPRINT_KEY] for r in a["runs"][0]["results"]]
    fb = {r["partialFingerprints"][FINGERPRINT_KEY] for r in b["runs"][0]["results"]}
    assert len(set(fa)) == 6 and set(fa) == fb
    assert str(RACE.parent) not in json.dumps(a)
    res, c = sarif_of(RACE, "--source-root", RACE.parents[1])
    assert c["runs"][0]["invocations"][0]["properties"]["graph"] == "data/race.json"
    assert "not under --source-root" in res.stderr  # race.json's src/ files are not in this repository
    assert all("codeFlows" in r for r in c["runs"][0]["results"])


def test_soft_labels(tmp_path, probabilities):
    soft = tmp_path / "soft.txt"
    soft.write_text("race(1,2) 0.95\nleak(3)\t0.1\n")
    _, p = ranked("--soft-labels", soft)
    assert p["race(1,2)"] > probabilities["race(1,2)"] and p["leak(3)"] < probabilities["leak(3)"]
    soft.write_text("race(1,2) 0.95\nrace(9,9) 0.5\n")
    res = invoke("rank", RACE, "--soft-labels", soft)
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {soft}:2:")


def test_labels_from_an_old_version(tmp_path, probabilities):
    labels = tmp_path / "old-labels.txt"
    labels.write_text("race(1,2) false\nrace(6,5) true\nleak(3) true\n")
    doc = json.loads(RACE.read_text())
    doc.pop("truth", None)
    # The new version: race(6,5) renamed race(6,1); leak(3) loses one of its two derivations.
    new = json.loads(json.dumps(doc).replace("race(6,5)", "race(6,1)"))
    new["clauses"] = [c for c in new["clauses"] if c != ["Rleak", 35, [36, 32, 34]]]
    path = tmp_path / "new.json"
    path.write_text(json.dumps(new))
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    res = invoke("rank", path, "-f", "json", "--labels-from", old, "--old-labels", labels)
    assert res.exit_code == 0, res.output
    assert "labels from the old graph: 1 carried, 1 softened (P = 0.9), 1 dropped" in res.stderr
    out = json.loads(res.stdout)
    assert {x["alarm"]: x["truth"] for x in out["labelled"]} == {"race(1,2)": False}
    match = tmp_path / "match.txt"
    match.write_text("race(6,5)\trace(6,1)\n")
    res = invoke("rank", path, "-f", "json", "--labels-from", old, "--old-labels", labels,
                 "--match", match)
    assert "2 carried, 1 softened (P = 0.9), 0 dropped" in res.stderr
    assert invoke("rank", path, "--match", match).exit_code == 2
    # Two old tuples onto one new one (issue 41, item 4): race(1,2) false and race(6,5) true contradict.
    match.write_text("race(6,5)\trace(6,1)\nrace(1,2)\trace(6,1)\n")
    res = invoke("rank", path, "-f", "json", "-q", "--labels-from", old, "--old-labels", labels,
                 "--match", match)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {match}: the old labels 'race(1,2)' (false), 'race(6,5)' (true) "
                                 "all become"), res.output


def test_soft_labels_in_marginals_and_simulate(tmp_path):
    soft = tmp_path / "soft.txt"
    soft.write_text("race(1,2) 0.95\n")
    res = invoke("marginals", RACE, "-q", "--soft-labels", soft)
    p = json.loads(res.stdout)["marginals"]["race(1,2)"]
    odds = 0.242757 / (1 - 0.242757) * 19  # the prior's odds (race.json, exact) times p / (1 - p)
    assert p == pytest.approx(odds / (1 + odds), rel=1e-5)
    res = invoke("simulate", RACE, "-q", "-f", "json", "--soft-labels", soft)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["complete"]


def test_info_names_the_backend_and_device():
    import jax

    res = invoke("info", RACE, "--device", "-q", "-f", "json")
    assert res.exit_code == 0, res.output
    rt = json.loads(res.stdout)["runtime"]
    assert rt["backend"] == jax.default_backend() and rt["devices"][0]["kind"] == jax.devices()[0].device_kind
    assert rt["jax"] == jax.__version__
    text = invoke("info", RACE, "--device", "-q").stdout
    kind = jax.devices()[0].device_kind
    assert f"JAX {jax.__version__} runs on {jax.default_backend()}: {len(jax.devices())} x {kind}" in text


def test_soft_labels_keep_the_graphs_own_labels(tmp_path):
    doc = json.loads(RACE.read_text())
    doc["labels"] = {"race(1,2)": True}
    graph = tmp_path / "labelled.json"
    graph.write_text(json.dumps(doc))
    soft = tmp_path / "soft.txt"
    soft.write_text("leak(3) 0.3\n")
    for command in ("marginals", "rank"):
        res = invoke(command, graph, "-f", "json", "-q", "--soft-labels", soft)
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        if command == "marginals":
            assert out["marginals"]["race(1,2)"] == 1.0
        else:
            assert [x["alarm"] for x in out["labelled"]] == ["race(1,2)"]


@pytest.mark.parametrize("text", [
    '{"runs": [{"results": [{"partialFingerprints": [1, 2], "properties": {"alarm": "race(9,9)"}}]}]}',
    '{"runs": [{"results": [{"properties": [1]}]}]}',
    '{"runs": [{"results": [{"ruleId": {"a": 1}, "properties": {"alarm": "race(9,9)"}}]}]}',
    '{"runs": [' + "[" * 100_000 + "]" * 100_000 + "]}",
])
def test_a_malformed_baseline_is_a_clean_error(tmp_path, text):
    """Issue 41, item 14: AttributeError, TypeError, RecursionError tracebacks (exit 1) before."""
    base = tmp_path / "b.sarif"
    base.write_text(text)
    res = invoke("rank", RACE, "-f", "sarif", "--baseline", base)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {base}: ") and "Traceback" not in res.output


def test_a_baseline_with_a_byte_order_mark_is_accepted(tmp_path):
    _, old = sarif_of(RACE)
    base = tmp_path / "bom.sarif"
    base.write_bytes(b"\xef\xbb\xbf" + json.dumps(old).encode())
    res, now = sarif_of(RACE, "--baseline", base)
    assert {r["baselineState"] for r in now["runs"][0]["results"]} == {"unchanged"}


def test_source_root_must_be_a_folder(tmp_path):
    """Issue 41: a missing folder or a file was taken, every location then reported missing or wrong."""
    for root, words in ((tmp_path / "missing", "no such file or directory"), (RACE, "is not a folder")):
        res = invoke("rank", RACE, "-f", "sarif", "--source-root", root)
        assert res.exit_code == 2 and res.stderr.startswith(f"error: {root}: {words}"), res.output
        assert "Traceback" not in res.output
