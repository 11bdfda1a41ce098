"""What a CI run needs of a SARIF log beyond one ranking: fingerprints, baselines, code flows, paths.

    key = fingerprint("race(13,15)")              # stable across runs: relation + tuple name
    base = read_baseline("old.sarif")             # {fingerprint: old result}
    state = baseline_state(result, base)          # "new", "unchanged" or "updated"
    flow = code_flow(model, marginals, var, index)  # the strongest derivation as a SARIF codeFlow

Fingerprints. Code scanning matches a result across runs by `ruleId` and
`partialFingerprints` (GitHub's "SARIF support for code scanning": results with
equal fingerprints are one alert). `primaryLocationLineHash` is GitHub's own
key: `upload-sarif` computes it from the source file's text at the primary
location and warns when a log carries a different value, so it is left to the
uploader. fastlbp writes its own key, `FINGERPRINT_KEY`, a hash of the alarm's
relation and its tuple name exactly as the graph spells it: the located tuple is
the alarm's identity in the analysis (the same analysis spells it the same way in
every run), while its rank, probability, derivations and line can change from
run to run without making it another alarm. The earlier key, `LEGACY_KEY`
("fastlbpAlarm/v1"), removed white space first, so `race(a b,4)` and
`race(ab,4)`, two tuples, were one alarm (issue 41, item 3); for a name without
white space both keys have the same value, so a baseline written with v1 still
matches (a result whose `properties.alarm` is given is matched by that name).

Baselines (SARIF 2.1.0 section 3.27.24). A result whose fingerprint the
baseline lacks is "new"; one it has is "unchanged", or "updated" when its level,
its primary location or its probability (by more than `UPDATED_AT`) changed; a
baseline result with no current counterpart is written again with
`baselineState` "absent", `kind` "pass" and `level` "none" (the rule no longer
fails there).

A baseline is read as any other input file (`fastlbp.core.errors.read_text`:
at most 256 MiB from a pipe or a device, gzip allowed, a byte order mark
dropped) and checked: what the comparison reads must have SARIF's types (an
object, a string), else it is an `InputError` naming the JSON location; each
result is rebuilt from the parts that are valid SARIF (a region's numbers in
range, scalar properties, string fingerprints), so an absent result copied from
it keeps the log written valid whatever the baseline held.

Paths. Locations are URIs relative to `%SRCROOT%`, whose `originalUriBaseIds`
entry carries only a description: the source root's place on this machine is
never written. The graph's path in the run's invocation is relative to the
source root (or the working directory) when it lies inside it, else its file
name only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from urllib.parse import quote

import numpy as np

from fastlbp.core.errors import InputError, read_text
from fastlbp.core.text import format_probability, relation

# v2: the exact tuple name (v1, `LEGACY_KEY`, removed white space first: two tuples could share a key).
FINGERPRINT_KEY = "fastlbpAlarm/v2"
LEGACY_KEY = "fastlbpAlarm/v1"
# A region's integer properties and their least values (SARIF 2.1.0's schema).
_REGION_MINIMUM = {"startLine": 1, "startColumn": 1, "endLine": 1, "endColumn": 1, "charOffset": -1,
                   "charLength": 0, "byteOffset": -1, "byteLength": 0}
_LEVELS = ("none", "note", "warning", "error")
# Characters a URI reference may hold as they are (RFC 3986's reserved and unreserved ones, and '%').
_URI_SAFE = "/:?#[]@!$&'()*+,;=-._~%"
BASELINE_STATES = ("new", "unchanged", "updated", "absent")
UPDATED_AT = 0.05  # |P - P(baseline)| from which an alarm seen in the baseline counts as "updated"
MAX_FLOW = 24  # steps of a code flow (the alarm included)
MAX_FLOW_EXPLAINED = 32  # tuples explained per code flow


def fingerprint(alarm: str) -> str:
    """The alarm's fingerprint: 32 hex digits of SHA-256 over its relation and its exact name.

    >>> fingerprint("race(a b,4)") != fingerprint("race(ab,4)") != fingerprint("race(ba,4)")
    True
    >>> fingerprint("race(1,2)") == legacy_fingerprint("race(1, 2)")  # no white space: as v1
    True
    """
    return hashlib.sha256(f"{relation(alarm)}\0{alarm}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def legacy_fingerprint(alarm: str) -> str:
    """`LEGACY_KEY`'s value (fastlbp before issue 41): white space removed from the name first."""
    return fingerprint("".join(alarm.split()))


def shown_path(path: str | os.PathLike, source_root: str | os.PathLike | None = None) -> str:
    """`path` as a SARIF may record it: relative ('/'-separated) to `source_root` or the working
    directory when inside one of them, else the file name alone (never this machine's layout)."""
    p = Path(os.path.abspath(path))
    for root in ((source_root,) if source_root is not None else ()) + (os.getcwd(),):
        try:
            return p.relative_to(os.path.abspath(root)).as_posix()
        except ValueError:
            continue
    return p.name


def read_baseline(path: str | os.PathLike) -> dict[str, dict]:
    """{fingerprint: result} of a SARIF log written by fastlbp (its first run).

    A result is matched by its `properties.alarm` (fingerprinted as now), else
    by its `FINGERPRINT_KEY`, else by its `LEGACY_KEY` (the same value for a
    name without white space). Each result is given back rebuilt from its
    valid parts (`_baseline_result`), with the fingerprint under `FINGERPRINT_KEY`.

    Raises:
        InputError: unreadable, not JSON (or nested too deeply to read), not a
            SARIF log with runs, or a result whose parts have other
            types than SARIF's (the JSON location named).
    """
    p = str(path)
    try:
        text = read_text(path)
    except InputError as err:
        raise InputError(p, err.line, f"cannot read the baseline: {err.message}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(p, err.lineno, f"not a SARIF log (not JSON: {err.msg})") from None
    except RecursionError:  # Python's reader stops at about 1,000 levels; SARIF nests about 10
        raise InputError(p, None, "not a SARIF log: nested too deeply to read") from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not runs or not isinstance(runs[0], dict):
        raise InputError(p, None, "not a SARIF log: no \"runs\"")
    results = runs[0].get("results")
    if results is None:
        results = []
    if not isinstance(results, list):
        raise InputError(p, None, "not a SARIF log: $.runs[0].results is not an array")
    out: dict[str, dict] = {}
    for i, res in enumerate(results):
        where = f"$.runs[0].results[{i}]"
        if not isinstance(res, dict):
            raise InputError(p, None, f"{where} is not an object")
        if res.get("baselineState") == "absent":
            continue  # reported as gone by the baseline's own run: not a result of it
        key, result = _baseline_result(res, p, where)
        out[key] = result
    return out


def _typed(res: dict, name: str, kind: type, path: str, where: str):
    value = res.get(name)
    if value is not None and not isinstance(value, kind):
        what = {dict: "an object", list: "an array", str: "a string"}[kind]
        raise InputError(path, None, f"{where}.{name} is not {what} (not a SARIF log?)")
    return value


def _baseline_result(res: dict, path: str, where: str) -> tuple[str, dict]:
    """(fingerprint, the result rebuilt from its valid parts) of a baseline result.

    Raises:
        InputError: `ruleId` or `level` not a string, `properties` or
            `partialFingerprints` not an object, `locations` not an array of
            objects, or neither a name nor a fingerprint to match it by.
    """
    rule_id = _typed(res, "ruleId", str, path, where)
    level = _typed(res, "level", str, path, where)
    props = _typed(res, "properties", dict, path, where) or {}
    prints = _typed(res, "partialFingerprints", dict, path, where) or {}
    locations = _typed(res, "locations", list, path, where) or []
    for j, loc in enumerate(locations):
        if not isinstance(loc, dict):
            raise InputError(path, None, f"{where}.locations[{j}] is not an object (not a SARIF log?)")
    alarm = props.get("alarm")
    if isinstance(alarm, str):
        key = fingerprint(alarm)
    elif isinstance(prints.get(FINGERPRINT_KEY), str):
        key = prints[FINGERPRINT_KEY]
    elif isinstance(prints.get(LEGACY_KEY), str):
        key = prints[LEGACY_KEY]  # v1's value is v2's for a name without white space
    else:
        raise InputError(path, None, f"{where} has neither properties.alarm nor a {FINGERPRINT_KEY} "
                         f"fingerprint (not a fastlbp log?)")
    out: dict = {}
    if rule_id is not None:
        out["ruleId"] = rule_id
    if level in _LEVELS:
        out["level"] = level
    message = res.get("message")
    if isinstance(message, dict) and isinstance(message.get("text"), str):
        out["message"] = {"text": message["text"]}
    kept = [loc for loc in map(_clean_location, locations) if loc]
    if kept:
        out["locations"] = kept
    fingerprints = {k: v for k, v in prints.items() if isinstance(v, str) and k != LEGACY_KEY}
    fingerprints[FINGERPRINT_KEY] = key
    out["partialFingerprints"] = fingerprints
    out["properties"] = {k: v for k, v in props.items() if _scalar(v) and k != "tags"}
    return key, out


def _scalar(value) -> bool:
    """A JSON scalar that SARIF's writer may copy: text, a boolean, null, or a finite number."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | bool | int)


def _clean_location(loc: dict) -> dict:
    """A baseline location rebuilt from its valid SARIF parts: a physical location with a string URI
    (characters a URI reference cannot hold percent-encoded) and the region's integers in their
    ranges (no region without a start), logical locations' names, a message's text; {} when nothing
    valid is left."""
    out: dict = {}
    physical = loc.get("physicalLocation")
    art = physical.get("artifactLocation") if isinstance(physical, dict) else None
    if isinstance(art, dict) and isinstance(art.get("uri"), str):
        artifact = {"uri": quote(art["uri"], safe=_URI_SAFE)}
        if isinstance(art.get("uriBaseId"), str):
            artifact["uriBaseId"] = art["uriBaseId"]
        out["physicalLocation"] = {"artifactLocation": artifact}
        region = physical.get("region")
        if isinstance(region, dict):
            kept = {k: v for k, least in _REGION_MINIMUM.items()
                    if type(v := region.get(k)) is int and v >= least}
            if kept.keys() & {"startLine", "charOffset", "byteOffset"}:  # the schema's anyOf
                out["physicalLocation"]["region"] = kept
    logical = loc.get("logicalLocations")
    if isinstance(logical, list):
        names = [{k: v for k in ("name", "fullyQualifiedName", "kind") if isinstance(v := item.get(k), str)}
                 for item in logical if isinstance(item, dict)]
        if any(names):
            out["logicalLocations"] = [n for n in names if n]
    message = loc.get("message")
    if out and isinstance(message, dict) and isinstance(message.get("text"), str):
        out["message"] = {"text": message["text"]}
    return out


def _where(result: dict):
    loc = (result.get("locations") or [{}])[0].get("physicalLocation") or {}
    art, region = loc.get("artifactLocation") or {}, loc.get("region") or {}
    return art.get("uri"), region.get("startLine")


def baseline_state(result: dict, baseline: dict[str, dict]) -> str:
    """"new", "unchanged" or "updated" for a current result against `read_baseline`'s mapping."""
    old = baseline.get(result["partialFingerprints"][FINGERPRINT_KEY])
    if old is None:
        return "new"
    p_old = (old.get("properties") or {}).get("probability")
    p_new = result["properties"]["probability"]
    moved = not isinstance(p_old, int | float) or not math.isfinite(p_old) or abs(p_new - p_old) > UPDATED_AT
    if moved or old.get("level", "warning") != result["level"] or _where(old) != _where(result):
        return "updated"
    return "unchanged"


def absent_result(old: dict, rule_ids: dict[str, int]) -> dict:
    """A baseline result with no current counterpart, as the current run reports it ("absent")."""
    keep = ("ruleId", "message", "locations", "partialFingerprints", "properties")
    out = {k: old[k] for k in keep if k in old}
    out.setdefault("message", {"text": "absent from this run"})
    out.update({"kind": "pass", "level": "none", "baselineState": "absent"})
    rid = out.get("ruleId")
    if rid in rule_ids:
        out["ruleIndex"] = rule_ids[rid]
    return out


def _flow_location(name: str, p: float, locs: list[dict], physical, text: str) -> dict:
    loc: dict = {"logicalLocations": [{"name": name, "fullyQualifiedName": name, "kind": "tuple"}],
                 "message": {"text": text}}
    if locs:
        loc["physicalLocation"] = physical(locs[0])
    return {"location": loc, "properties": {"probability": p if math.isfinite(p) else None}}


def _strongest(model, ex, tuple_p, by_head=None) -> tuple[str, list[tuple[str, float]]] | None:
    """(rule, [(body tuple, P)]) of an explanation's strongest derivation; when every derivation holds
    with P = 0 under these marginals (underflow, or a label ruled them out), the first one that cycle
    elimination kept, so that a derived alarm always has a flow."""
    if ex.derivations:
        return ex.derivations[0].rule, ex.derivations[0].body
    dg = model.meta.get("derivation")
    if ex.kind != "derivation" or dg is None or ex.total - ex.dropped <= 0:
        return None
    t = dg.tuple_index.get(ex.alarm)
    if t is None:
        return None
    clauses = np.flatnonzero(np.asarray(dg.clause_head) == t) if by_head is None else by_head.get(
        t, np.zeros(0, np.int64))
    if "stages" in model.meta:
        clauses = clauses[np.asarray(model.meta["stages"].clause_kept)[clauses]]
    if not clauses.size:
        return None
    g = int(clauses[0])
    body = [(dg.tuples[b], float(tuple_p[b]) if tuple_p is not None else math.nan)
            for b in dg.clause_body(g).tolist()]
    return dg.rules[int(dg.clause_rule[g])].name, body


def derivation_chain(model, marginals: np.ndarray, var: int, *, clauses_by_head=None, tuple_p=None,
                     max_steps: int = MAX_FLOW - 1, max_explained: int = MAX_FLOW_EXPLAINED):
    """The tuples `var`'s strongest derivation rests on, breadth first (nearest first).

    Each tuple explained contributes the body of its strongest derivation
    (`fastlbp.inference.explain`, k = 1; `_strongest`), in the clause's order;
    input tuples end a branch; a tuple met again is not repeated.

    Returns:
        ([(tuple name, P(tuple), rule of the derivation that used it, depth >= 1)], whether `var`
        has a derivation).
    """
    from fastlbp.inference.explain import explain, explain_name

    first = explain(model, marginals, var, k=1, clauses_by_head=clauses_by_head, tuple_p=tuple_p)
    top = _strongest(model, first, tuple_p, clauses_by_head)
    if top is None:
        return [], False
    out: list[tuple[str, float, str, int]] = []
    seen = {first.alarm}
    frontier = [(top, 1)]
    explained = 1
    while frontier and len(out) < max_steps:
        (rule, body), depth = frontier.pop(0)
        for name, p in body:
            if name in seen or len(out) >= max_steps:
                continue
            seen.add(name)
            out.append((name, p, rule, depth))
            if explained >= max_explained:
                continue
            try:
                ex = explain_name(model, marginals, name, k=1, clauses_by_head=clauses_by_head,
                                  tuple_p=tuple_p)
            except KeyError:
                continue
            explained += 1
            step = _strongest(model, ex, tuple_p, clauses_by_head)
            if step is not None:
                frontier.append((step, depth + 1))
    return out, True


def code_flow(model, marginals: np.ndarray, var: int, lookup, physical, *,
              clauses_by_head=None, tuple_p=None) -> dict | None:
    """A SARIF codeFlow of `var`'s strongest derivation: its tuples from the deepest to the alarm.

    Args:
        lookup: tuple name -> its locations (`datalog.annotations.LocationIndex.lookup`).
        physical: a location -> SARIF physicalLocation.
        tuple_p: (T,) P of every tuple (`datalog.bayesnet.tuple_marginals`), computed once per log.

    Returns:
        The codeFlow, or None when the alarm has no derivation (an input tuple).
    """
    chain, derived = derivation_chain(model, marginals, var, clauses_by_head=clauses_by_head,
                                      tuple_p=tuple_p)
    if not derived:
        return None
    alarm = model.var_names[var]
    # The deepest tuples first, each level in its clauses' order, the alarm last.
    chain = sorted(chain, key=lambda step: -step[3])
    steps = [_flow_location(name, p, lookup(name), physical,
                            f"{name} (P = {format_probability(p)}; rule {rule})" if math.isfinite(p)
                            else f"{name} (rule {rule})")
             for name, p, rule, _ in chain]
    p_alarm = float(marginals[var])
    steps.append(_flow_location(alarm, p_alarm, lookup(alarm), physical,
                                f"{alarm} (P = {format_probability(p_alarm)}): the alarm"))
    for i, step in enumerate(steps):
        step["executionOrder"] = i + 1
    return {"message": {"text": f"the strongest derivation of {alarm}"},
            "threadFlows": [{"locations": steps}]}


def missing_files(files, source_root: str | os.PathLike) -> list[str]:
    """The location files (relative paths) that do not exist under `source_root`."""
    root = Path(source_root)
    return sorted(f for f in set(files) if not (root / f).exists())
