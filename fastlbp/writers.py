"""A `Ranking` as text: a plain table, JSON, CSV and SARIF 2.1.0.

    from fastlbp.ranking import rank
    from fastlbp.writers import WRITERS
    print(WRITERS["json"](rank(model)))
"""

from __future__ import annotations

import csv
import io
import json
import math

from fastlbp import __version__
from fastlbp.ranking import Ranking

SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"


def relation(alarm: str) -> str:
    """The relation of a tuple name: `race(1,2)` -> `race`; a bare name -> `alarm`."""
    head, paren, _ = alarm.partition("(")
    return head.strip() if paren and head.strip() else "alarm"


def _p(p: float) -> str:
    # Small probabilities still order the alarms: show their magnitude, not 0.000000.
    if not math.isfinite(p):
        return str(p)
    return f"{p:.6f}" if p == 0.0 or p >= 1e-4 else f"{p:.3e}"


def to_table(ranking: Ranking) -> str:
    """A plain-text table: rank, probability, alarm; then the labelled alarms."""
    lines = []
    width = max([4] + [len(str(a.rank)) for a in ranking.alarms])
    lines.append(f"{'rank':>{width}}  probability  alarm")
    for a in ranking.alarms:
        lines.append(f"{a.rank:>{width}}  {_p(a.probability):>11}  {a.alarm}")
    hidden = ranking.total_unlabelled - len(ranking.alarms)
    if hidden > 0:
        lines.append(f"... {hidden} more (use --top)")
    if not ranking.alarms:
        lines.append("(no unlabelled alarms)")
    if ranking.labelled:
        lines.append("")
        lines.append(f"labelled ({len(ranking.labelled)}):")
        for a in ranking.labelled:
            lines.append(f"  {'true ' if a.truth else 'false'}  {a.alarm}")
    return "\n".join(lines) + "\n"


def to_dict(ranking: Ranking) -> dict:
    """The JSON document of `to_json` as a dict."""
    return {
        "alarms": [{"rank": a.rank, "alarm": a.alarm, "probability": a.probability}
                   for a in ranking.alarms],
        "labelled": [{"alarm": a.alarm, "truth": a.truth} for a in ranking.labelled],
        "iterations": ranking.iterations,
        "converged": ranking.converged,
        "delta": ranking.delta,
        "seconds": ranking.seconds,
    }


def to_json(ranking: Ranking) -> str:
    """`{"alarms": [{"rank", "alarm", "probability"}...], "labelled": [...], "iterations", "converged"}`."""
    return json.dumps(to_dict(ranking), indent=1) + "\n"


def to_csv(ranking: Ranking) -> str:
    """Header `rank,alarm,probability,label`; labelled alarms last with an empty rank."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["rank", "alarm", "probability", "label"])
    for a in ranking.alarms:
        w.writerow([a.rank, a.alarm, repr(a.probability), ""])
    for a in ranking.labelled:
        w.writerow(["", a.alarm, repr(a.probability), "true" if a.truth else "false"])
    return buf.getvalue()


def to_sarif(ranking: Ranking, *, source: str | None = None, version: str | None = None) -> dict:
    """A SARIF 2.1.0 log: one result per ranked alarm.

    Each result has `ruleId` = the alarm's relation (with a matching rule in
    `tool.driver.rules`), `rank` = 100 * P(alarm) (SARIF's rank is a priority
    in [0, 100], higher first), the probability in its message, and
    `properties` {"rank": position, "probability": P, "alarm": name}. The
    alarm tuple is the result's logical location. Labelled alarms are not
    results (they are no longer open questions); they are listed in the
    run's properties.
    """
    version = __version__ if version is None else version
    rule_ids: dict[str, int] = {}
    for a in ranking.alarms:
        rule_ids.setdefault(relation(a.alarm), len(rule_ids))
    rules = [{"id": rid, "name": rid,
              "shortDescription": {"text": f"alarm of relation {rid}"},
              "properties": {"tags": ["fastlbp"]}} for rid in rule_ids]
    results = []
    for a in ranking.alarms:
        rid = relation(a.alarm)
        p = a.probability if math.isfinite(a.probability) else 0.0
        results.append({
            "ruleId": rid,
            "ruleIndex": rule_ids[rid],
            "kind": "review",
            "level": "none",
            "rank": round(100.0 * min(max(p, 0.0), 1.0), 6),
            "message": {"text": f"{a.alarm}: P(true) = {p:.6f} (rank {a.rank})"},
            "locations": [{"logicalLocations": [{"name": a.alarm, "fullyQualifiedName": a.alarm,
                                                 "kind": "alarm"}]}],
            "properties": {"rank": a.rank, "probability": p, "alarm": a.alarm},
        })
    run: dict = {
        "tool": {"driver": {"name": "fastlbp", "version": version,
                            "rules": rules}},
        "results": results,
        "properties": {
            "iterations": ranking.iterations, "converged": ranking.converged,
            "labelled": [{"alarm": a.alarm, "truth": a.truth} for a in ranking.labelled],
        },
    }
    if source:
        run["invocations"] = [{"executionSuccessful": True,
                               "properties": {"graph": str(source)}}]
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


WRITERS = {
    "table": to_table,
    "json": to_json,
    "csv": to_csv,
    "sarif": lambda r: json.dumps(to_sarif(r), indent=1) + "\n",
}
