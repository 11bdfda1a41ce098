"""A `Ranking` as a SARIF 2.1.0 log for code-scanning tools (GitHub code scanning, GitLab).

    from fastlbp.inference import ranking

    from fastlbp.io import sarif
    r = ranking.rank(model)
    print(sarif.dumps(sarif.to_sarif(r, model, source="race.json")))

One result per ranked (unlabelled) alarm:

* `ruleId`: the alarm's relation (`race(1,2)` -> `race`), with a rule
  descriptor in `tool.driver.rules`;
* `rank` = 100 * P(alarm) (SARIF's priority in [0, 100], higher first; GitLab
  orders by it, GitHub ignores it), `level` "warning" at P >= 0.5, else "note";
* `locations[0]`: the alarm tuple as a logical location and, when the graph
  gives the tuple a source location (derivation.json's "locations",
  `datalog.annotations`), its first one as the physical location
  (`artifactLocation.uri` relative to `%SRCROOT%`, `region.startLine`,
  `startColumn`, ...). GitHub code scanning shows only results with a
  physical location;
* `relatedLocations`: the alarm's other locations, then the located tuples
  its strongest derivation rests on (`supporting_tuples`), at most
  `MAX_RELATED`;
* `properties`: position, probability, log-odds, the alarm's name;
* `partialFingerprints[FINGERPRINT_KEY]`: the alarm's identity across runs
  (relation and tuple name, never rank or probability: `fastlbp.io.sarif_ci`);
* `codeFlows`: the alarm's strongest derivation, its tuples from the deepest
  to the alarm, each with its location when it has one (GitHub shows a
  path-problem's steps from them), for the first `MAX_FLOWS` results;
* with a baseline (`read_baseline`), `baselineState` new, unchanged or
  updated, and the baseline's alarms that are gone as "absent" results.

Each rule descriptor carries `properties.precision` in GitHub's vocabulary,
from the mean P(true) of all the relation's alarms (a labelled alarm counts
1 or 0), which estimates the fraction of its alarms that are real:
"very-high" from 0.9, "high" from 0.7, "medium" from 0.4, else "low"
(`PRECISION_LEVELS`). A relation the graph marks `"security": true`
(derivation.json's "relations") is tagged "security" and, with a severity,
carries `properties.security-severity` ("7.5"); no other relation does.
Labelled alarms are not results (no longer open questions); the run's
properties list them.
"""

from __future__ import annotations

import json
import math
from collections import deque
from urllib.parse import quote

import numpy as np

from datalog.annotations import LocationIndex
from fastlbp.core.model import Model
from fastlbp.core.text import format_probability, relation
from fastlbp.core.version import __version__
from fastlbp.inference.explain import clause_index, explain
from fastlbp.inference.ranking import Ranking, alarm_vars
from fastlbp.io.sarif_ci import (
    BASELINE_STATES,
    FINGERPRINT_KEY,
    absent_result,
    baseline_state,
    code_flow,
    fingerprint,
    read_baseline,
    shown_path,
)

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"  # the uriBaseId of every file: paths are relative to the source root
# (lowest mean P, GitHub's precision): the mean P(true) of a relation's alarms estimates the
# fraction of them that are real, which is what CodeQL's precision levels grade.
PRECISION_LEVELS = ((0.9, "very-high"), (0.7, "high"), (0.4, "medium"), (0.0, "low"))
WARNING_AT = 0.5  # P at and above which a result's level is "warning" (below: "note")
MAX_RELATED = 10  # related locations per result
# Tuples explained per alarm while looking for located ones: an explanation costs ~70 us on this CPU,
# so data/avrora.json.gz's 273 alarms take 1.2 s in all when the walk finds little (0.01 s without
# locations, when no walk runs).
MAX_EXPLAINED = 64
# Results given a code flow: a flow explains up to 32 tuples (data/avrora.json.gz: 273 flows in 1.3-1.5 s
# on this loaded 2-core CPU, the log without them 0.04 s), and a bare factor graph ranks every variable,
# so the flows stop at the 5,000 highest-ranked results.
MAX_FLOWS = 5000
SRCROOT_DESCRIPTION = ("The root of the analysed source tree (--source-root); every file URI is relative "
                       "to it.")


def precision_level(mean_probability: float) -> str:
    """GitHub's precision ("very-high", "high", "medium", "low") of a mean P(true) (`PRECISION_LEVELS`).

    >>> precision_level(0.95), precision_level(0.7), precision_level(0.5), precision_level(0.1)
    ('very-high', 'high', 'medium', 'low')
    """
    for lowest, level in PRECISION_LEVELS:
        if mean_probability >= lowest:
            return level
    return "low"  # NaN


def physical_location(loc: dict) -> dict:
    """A SARIF physicalLocation of a location of `datalog.annotations` ({"file", "line", ...}).

    The file becomes a relative URI (percent-encoded, '/' kept) against `%SRCROOT%`.
    """
    out: dict = {"artifactLocation": {"uri": quote(loc["file"], safe="/"), "uriBaseId": SRCROOT}}
    region = {sarif: loc[key] for key, sarif in (("line", "startLine"), ("column", "startColumn"),
                                                 ("endLine", "endLine"), ("endColumn", "endColumn"))
              if key in loc}
    if region:
        out["region"] = region
    return out


def supporting_tuples(model: Model, marginals: np.ndarray, var: int, located, *,
                      clauses_by_head: dict | None = None, limit: int = MAX_RELATED,
                      max_explained: int = MAX_EXPLAINED) -> list[tuple[str, float]]:
    """Located tuples that `var`'s strongest derivation rests on, nearest first.

    The body tuples of the strongest clause deriving `var`
    (`fastlbp.inference.explain`, k = 1); a body tuple without a location is
    replaced by those its own strongest derivation rests on, breadth first,
    until `limit` tuples are found or `max_explained` tuples were explained.

    Args:
        model: a model loaded from a derivation graph (else [] is returned).
        marginals: (V,) P(x=1).
        var: the alarm's variable.
        located: tuple name -> whether it has a location.
        clauses_by_head: `clause_index` of the model's derivation graph (built if None).

    Returns:
        [(tuple name, P(tuple))], at most `limit`.
    """
    dg = model.meta.get("derivation")
    tuple_var = model.meta.get("tuple_var")
    if dg is None or tuple_var is None:
        return []
    tv = np.asarray(tuple_var)
    by_head = clause_index(dg) if clauses_by_head is None else clauses_by_head
    out: list[tuple[str, float]] = []
    seen = {model.var_names[var]}
    queue, explained = deque([var]), set()
    while queue and len(out) < limit and len(explained) < max_explained:
        v = queue.popleft()
        if v in explained:
            continue
        explained.add(v)
        ex = explain(model, marginals, v, k=1, clauses_by_head=by_head)
        if ex.kind != "derivation" or not ex.derivations:
            continue  # an input tuple, or no provenance
        for name, p in ex.derivations[0].body:
            if name in seen:
                continue
            seen.add(name)
            if located(name):
                out.append((name, p))
                if len(out) == limit:
                    break
            else:
                t = dg.tuple_index.get(name)
                if t is not None and tv[t] >= 0 and t in by_head:  # an input has nothing to explain
                    queue.append(int(tv[t]))
    return out


def _relation_means(ranking: Ranking, model: Model | None, marginals) -> dict[str, tuple[float, int]]:
    """{relation: (mean P(true) of its alarms, number of alarms)}; labelled alarms count 1 or 0."""
    labelled = {a.alarm: 1.0 if a.truth else 0.0 for a in ranking.labelled}
    probs: dict[str, list[float]] = {}
    if model is not None and marginals is not None:
        names = model.var_names
        for v in alarm_vars(model).tolist():
            p = labelled.get(names[v], float(marginals[v]))
            probs.setdefault(relation(names[v]), []).append(p)
    else:
        for a in ranking.alarms:
            probs.setdefault(relation(a.alarm), []).append(a.probability)
        for name, p in labelled.items():
            probs.setdefault(relation(name), []).append(p)
    return {rel: (float(np.mean(np.nan_to_num(ps, nan=0.0))), len(ps)) for rel, ps in probs.items()}


def _rule(rid: str, spec: dict, mean: tuple[float, int] | None) -> dict:
    """The reportingDescriptor of relation `rid` (`spec`: its entry of derivation.json's "relations")."""
    text = spec.get("description") or f"alarm of relation {rid}"
    tags = ["fastlbp"]
    props: dict = {"tags": tags}
    if mean is not None:
        props.update({"precision": precision_level(mean[0]), "mean_probability": mean[0],
                      "alarms": mean[1]})
    if spec.get("security"):
        tags.append("security")
        if "severity" in spec:
            props["security-severity"] = f"{spec['severity']:.1f}"
    rule = {"id": rid, "name": rid, "shortDescription": {"text": text},
            "fullDescription": {"text": f"{text} (ranked by P(true), the probability that the alarm is "
                                        "real, from the analysis's derivation graph)"},
            "defaultConfiguration": {"level": "warning"}, "properties": props}
    if spec.get("help"):
        rule["help"] = {"text": spec["help"]}
    return rule


def _located(loc: dict, text: str, rid: int) -> dict:
    """A related location: `loc`'s physical location with message `text` (and `loc`'s own message)."""
    message = f"{text}: {loc['message']}" if loc.get("message") else text
    return {"id": rid, "physicalLocation": physical_location(loc), "message": {"text": message}}


def to_sarif(ranking: Ranking, model: Model | None = None, *, marginals: np.ndarray | None = None,
             source: str | None = None, version: str | None = None, source_root: str | None = None,
             baseline: dict[str, dict] | None = None, absent: bool = True) -> dict:
    """A SARIF 2.1.0 log of `ranking` (module docstring).

    Args:
        ranking: the ranked alarms.
        model: the model ranked; its `meta["locations"]` and `meta["relations"]`
            (derivation.json) give physical locations, related locations and
            rule descriptions. None: logical locations only.
        marginals: (V,) P(x=1) of every variable; default `ranking.marginals`.
            Needed for related locations from derivations and for a rule's
            precision over all its alarms (else over the ranked ones).
        source: the graph's path, recorded in the run's invocation relative to
            `source_root` or the working directory (else its file name: `shown_path`).
        version: the tool version written (default fastlbp's).
        source_root: the source tree's root on this machine (never written).
        baseline: `read_baseline` of an earlier log: each result gets its
            `baselineState`, and the baseline's results no alarm of this run
            matches are added as "absent".
        absent: whether to add the baseline's vanished alarms. An alarm of
            the model that is labelled, or left out by a filter, is not absent.
    """
    version = __version__ if version is None else version
    marginals = ranking.marginals if marginals is None else marginals
    meta = model.meta if model is not None else {}
    index = LocationIndex(meta.get("locations"))
    relations = meta.get("relations") or {}
    means = _relation_means(ranking, model, marginals)
    dg = meta.get("derivation")
    explainable = model is not None and marginals is not None and dg is not None and bool(index)
    by_head = clause_index(dg) if model is not None and marginals is not None and dg is not None else None
    flows = model is not None and marginals is not None
    tuple_p = None
    if flows and dg is not None and "tuple_var" in meta:
        from datalog.bayesnet import tuple_marginals

        tuple_p = tuple_marginals(model, marginals)  # once: an explanation of a pruned tuple needs them all

    rule_ids: dict[str, int] = {}
    for a in ranking.alarms:
        rule_ids.setdefault(relation(a.alarm), len(rule_ids))
    rules = [_rule(rid, relations.get(rid, {}), means.get(rid)) for rid in rule_ids]
    results = []
    for a in ranking.alarms:
        rid = relation(a.alarm)
        p = min(max(a.probability, 0.0), 1.0) if math.isfinite(a.probability) else 0.0
        locs = index.lookup(a.alarm)
        primary: dict = {"logicalLocations": [{"name": a.alarm, "fullyQualifiedName": a.alarm,
                                               "kind": "alarm"}]}
        if locs:
            primary["physicalLocation"] = physical_location(locs[0])
            if locs[0].get("message"):
                primary["message"] = {"text": locs[0]["message"]}
        related = [_located(loc, a.alarm, i) for i, loc in enumerate(locs[1:MAX_RELATED + 1])]
        if explainable and len(related) < MAX_RELATED:
            support = supporting_tuples(model, marginals, a.var, lambda n: bool(index.lookup(n)),
                                        clauses_by_head=by_head, limit=MAX_RELATED - len(related))
            for name, q in support:
                for loc in index.lookup(name)[:MAX_RELATED - len(related)]:
                    related.append(_located(loc, f"{name} (P = {format_probability(q)}), which {a.alarm} "
                                                 "rests on", len(related)))
        result = {
            "ruleId": rid,
            "ruleIndex": rule_ids[rid],
            "level": "warning" if p >= WARNING_AT else "note",
            "rank": round(100.0 * p, 6),
            "message": {"text": f"{a.alarm}: P(true) = {format_probability(p, a.log_odds, a.stderr)} "
                                f"(rank {a.rank})"},
            "locations": [primary],
            "partialFingerprints": {FINGERPRINT_KEY: fingerprint(a.alarm)},
            "properties": {"rank": a.rank, "probability": p,
                           "log_odds": a.log_odds if math.isfinite(a.log_odds) else None, "alarm": a.alarm},
        }
        if related:
            result["relatedLocations"] = related
        if flows and len(results) < MAX_FLOWS and 0 <= a.var < model.num_vars:
            flow = code_flow(model, marginals, a.var, index.lookup, physical_location,
                             clauses_by_head=by_head, tuple_p=tuple_p)
            if flow is not None:
                result["codeFlows"] = [flow]
        if baseline is not None:
            result["baselineState"] = baseline_state(result, baseline)
        results.append(result)
    if baseline is not None and absent:
        now = {r["partialFingerprints"][FINGERPRINT_KEY] for r in results}
        now |= {fingerprint(a.alarm) for a in ranking.labelled}
        if model is not None:
            now |= {fingerprint(model.var_names[v]) for v in alarm_vars(model).tolist()}
        results += [_absent(old, rule_ids) for key, old in baseline.items() if key not in now]
    run: dict = {
        "tool": {"driver": {"name": "fastlbp", "version": version, "rules": rules}},
        "originalUriBaseIds": {SRCROOT: {"description": {"text": SRCROOT_DESCRIPTION}}},
        "results": results,
        "properties": {
            "iterations": ranking.iterations, "converged": ranking.converged, "method": ranking.method,
            "labelled": [{"alarm": a.alarm, "truth": a.truth} for a in ranking.labelled],
        },
    }
    if source:
        run["invocations"] = [{"executionSuccessful": True,
                               "properties": {"graph": shown_path(source, source_root)}}]
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _absent(old: dict, rule_ids: dict[str, int]) -> dict:
    """A baseline result that this run no longer reports, described as absent: its message says so, and
    the baseline's rank and probability move to `properties.baseline` (a result's own `rank` and
    `probability` would read as this run's)."""
    out = absent_result(old, rule_ids)
    props = dict(out.get("properties") or {})
    before = {key: props.pop(key) for key in ("rank", "probability", "log_odds") if key in props}
    logical = ((out.get("locations") or [{}])[0].get("logicalLocations") or [{}])[0]
    alarm = props.get("alarm") or logical.get("name") or "an alarm of the baseline"
    was = ""
    if isinstance(before.get("probability"), (int, float)) and isinstance(before.get("rank"), int):
        was = (f" (the baseline's rank {before['rank']}, P(true) = "
               f"{format_probability(float(before['probability']))})")
    out["message"] = {"text": f"{alarm}: no longer reported{was}"}
    if before:
        props["baseline"] = before
    if props:
        out["properties"] = props
    return out


def unlocated(doc: dict) -> tuple[int, int]:
    """(results without a physical location, results) of a log's current results (absent ones left
    out): code scanning (GitHub's) shows only results that have one."""
    current = [r for r in doc["runs"][0]["results"] if r.get("baselineState") != "absent"]
    missing = sum(1 for r in current if not any("physicalLocation" in loc for loc in r.get("locations", [])))
    return missing, len(current)


def states(doc: dict) -> dict[str, int]:
    """{baselineState: number of results} of a log (every state of `BASELINE_STATES`, 0 when none)."""
    out = dict.fromkeys(BASELINE_STATES, 0)
    for res in doc["runs"][0]["results"]:
        if res.get("baselineState") in out:
            out[res["baselineState"]] += 1
    return out


def dumps(doc: dict, pretty: bool = False) -> str:
    """The log as JSON text ending in a newline: compact (no spaces or line breaks; data/ftp.json.gz's log
    is 11 MB so, 22 MB indented), or indented for people with `pretty`."""
    if pretty:
        return json.dumps(doc, indent=1) + "\n"
    return json.dumps(doc, separators=(",", ":")) + "\n"


__all__ = ["to_sarif", "dumps", "states", "unlocated", "read_baseline", "fingerprint", "FINGERPRINT_KEY",
           "physical_location", "supporting_tuples", "precision_level"]
