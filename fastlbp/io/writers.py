"""A `Ranking` as text: a plain table, JSON and CSV.

SARIF 2.1.0 for code-scanning tools is `fastlbp.io.sarif` (it needs the model
for source locations). Names are shown as they are in JSON (which escapes control
characters). CSV is quoted by `fastlbp.core.text.csv_document` (the one CSV
writer of every command). The table, meant for a terminal, shows each name
through `fastlbp.core.text.safe_name`, so an escape sequence in a tuple's name
cannot recolour, move or retitle the user's terminal.

    from fastlbp.inference.ranking import rank
    from fastlbp.io.writers import WRITERS
    print(WRITERS["json"](rank(model)))
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from fastlbp.core.text import csv_document, format_probability, safe_name
from fastlbp.inference.methods import method_of

if TYPE_CHECKING:  # for annotations only: writing a ranking imports no session
    from fastlbp.inference.ranking import Ranking


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def error_cell(ranking: Ranking, alarm) -> str:
    """How far off a probability may be, for the column beside it (`Method.error_cell`): "exact", the 95%
    interval of a sampled estimate, or for LBP "unchecked" (its error is not known) or "FLAGGED"
    (`Ranking.flags`)."""
    return method_of(ranking.method).error_cell(alarm.lower, alarm.upper, ranking.flags)


def to_table(ranking: Ranking, rows: int | None = None) -> str:
    """A plain-text table: rank, probability, its error, alarm (through `safe_name`); then the labelled
    alarms.

    The probability has the digits its error supports (`format_probability`); the error column says
    beside every number how far off it may be (`error_cell`). What the numbers are and how far to
    trust them as a whole (LBP's caveat, its flags) is not part of the table: `caveats` gives those
    sentences, for stderr.

    Args:
        rows: show at most this many alarms (a terminal's height), then a line `... N more; --top 0 for
            all`; None: every alarm of the ranking.
    """
    lines = []
    alarms = ranking.alarms if rows is None else ranking.alarms[:rows]
    width = max([4] + [len(str(a.rank)) for a in alarms])
    cells = [error_cell(ranking, a) for a in alarms]
    head = method_of(ranking.method).error_head
    cw = max([len(head)] + [len(c) for c in cells])
    probs = [format_probability(a.probability, a.log_odds, a.stderr) for a in alarms]
    pw = max([len("probability")] + [len(p) for p in probs])
    lines.append(f"{'rank':>{width}}  {'probability':>{pw}}  {head:<{cw}}  alarm")
    for a, p, cell in zip(alarms, probs, cells, strict=True):
        lines.append(f"{a.rank:>{width}}  {p:>{pw}}  {cell:<{cw}}  {safe_name(a.alarm)}")
    hidden = ranking.total_unlabelled - len(alarms)
    if hidden > 0:
        lines.append(f"... {hidden:,} more; --top 0 for all")
    if not ranking.alarms:
        lines.append("(no unlabelled alarms)")
    if ranking.labelled:
        lines.append("")
        lines.append(f"labelled ({len(ranking.labelled)}):")
        for a in ranking.labelled:
            lines.append(f"  {'true ' if a.truth else 'false'}  {safe_name(a.alarm)}")
    return "\n".join(lines) + "\n"


def caveats(ranking: Ranking) -> list[str]:
    """Whole sentences about how far to trust a ranking's numbers as a whole, for stderr beside its table
    (each flag of `Ranking.flags` is a warning of its own, said by the command): the method's `caveat`
    (LBP's, `fastlbp.inference.methods.LBP_CAVEAT`); none for exact and sampled rankings, whose error is
    beside each number."""
    caveat = method_of(ranking.method).caveat
    return [caveat] if caveat and ranking.alarms else []


def to_dict(ranking: Ranking) -> dict:
    """The JSON document of `to_json` as a dict."""
    return {
        "alarms": [{"rank": a.rank, "alarm": a.alarm, "probability": a.probability,
                    "log_odds": _finite(a.log_odds),
                    **({"stderr": a.stderr, "lower": a.lower, "upper": a.upper} if math.isfinite(a.stderr)
                       else {})} for a in ranking.alarms],
        "labelled": [{"alarm": a.alarm, "truth": a.truth} for a in ranking.labelled],
        "iterations": ranking.iterations,
        "converged": ranking.converged,
        "remedy": ranking.remedy,
        "method": ranking.method,
        "how": ranking.how,
        "flags": list(ranking.flags),
        "reason": ranking.reason,
        "delta": ranking.delta,
        "seconds": ranking.seconds,
    }


def to_json(ranking: Ranking) -> str:
    """`{"alarms": [{"rank", "alarm", "probability", "log_odds"}...], "labelled": [...], "iterations",
    "converged"}`; log_odds is null where infinite (a certain or impossible alarm)."""
    return json.dumps(to_dict(ranking), indent=1) + "\n"


def to_csv(ranking: Ranking, exact_names: bool = False) -> str:
    """Header `rank,alarm,probability,label,log_odds,stderr,lower,upper` (the last three for a sampled
    ranking, else empty); labelled alarms last with an empty rank.

    A field holding a comma, a quote, a line break or any other non-printable
    character is quoted (RFC 4180), so names read back exactly; a name a
    spreadsheet would run as a formula gets a leading `'` unless `exact_names`
    (`csv_name`).
    """
    header = ["rank", "alarm", "probability", "label", "log_odds", "stderr", "lower", "upper"]
    rows = [[a.rank, a.alarm, repr(a.probability), "", repr(a.log_odds),
             *((repr(a.stderr), repr(a.lower), repr(a.upper)) if math.isfinite(a.stderr) else ("", "", ""))]
            for a in ranking.alarms]
    rows += [["", a.alarm, repr(a.probability), "true" if a.truth else "false", "", "", "", ""]
             for a in ranking.labelled]
    return csv_document(header, rows, 1, exact_names)


WRITERS = {
    "table": to_table,
    "json": to_json,
    "csv": to_csv,
}
