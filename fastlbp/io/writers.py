"""A `Ranking` as text: a plain table, JSON and CSV; `safe_name` for names on a terminal.

SARIF 2.1.0 for code-scanning tools is `fastlbp.io.sarif` (it needs the model
for source locations). Names are shown as they are in JSON (which escapes control
characters). CSV, for `rank` and `marginals` alike (`csv_document`), quotes
fields holding a line break or any other control character, and by default
gives a name a spreadsheet would run as a formula a leading `'` (`csv_name`;
exact with `exact_names`). The table, meant for a terminal, shows each name
through `safe_name`, the one escaping of names on a terminal, so an escape
sequence in a tuple's name cannot recolour, move or retitle the user's terminal.

    from fastlbp.inference.ranking import rank
    from fastlbp.io.writers import WRITERS
    print(WRITERS["json"](rank(model)))
"""

from __future__ import annotations

import json
import math
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # writers need no session: `fastlbp.inference.lbp_checks` (run by the session) uses them
    from fastlbp.inference.ranking import Ranking

# Unicode categories shown escaped: controls (C0, DEL, C1 such as CSI \x9b), format characters
# (bidirectional overrides, zero-width characters, tags), line and paragraph separators, surrogates
# (unencodable on their own), private use and unassigned code points.
_ESCAPED = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def safe_name(name: str) -> str:
    r"""`name` for a terminal: every character a terminal could act on or hide, escaped visibly.

    Control characters (ESC, newline, tab, DEL, C1 controls), format
    characters (bidirectional overrides, zero-width spaces), line separators,
    lone surrogates, private-use and unassigned code points become `\xNN`,
    `\uNNNN` or `\UNNNNNNNN` (newline, carriage return and tab: `\n`, `\r`,
    `\t`); printable text, non-ASCII letters included, is kept. Backslashes are
    kept as they are, so this is for display only (JSON and CSV keep names
    faithfully).

    >>> safe_name("race\x1b[31m(1,2)")
    'race\\x1b[31m(1,2)'
    """
    if name.isascii() and name.isprintable():
        return name
    return "".join(_escaped(c) if unicodedata.category(c) in _ESCAPED else c for c in name)


def _escaped(c: str) -> str:
    special = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c)
    if special:
        return special
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


# Decimals of an exact (or unchecked) probability, and the most a sampled one is given.
EXACT_DECIMALS = 6
# How many digits a sampled probability gets (`format_probability`), in words for help texts and README.
SIGNIFICANT_DIGITS_RULE = ("a sampled probability is rounded at the first significant digit of its standard "
                           "error (SE 0.00036: 0.0129)")


def relation(alarm: str) -> str:
    """The relation of a tuple name: `race(1,2)` -> `race`; a bare name -> `alarm`."""
    head, paren, _ = alarm.partition("(")
    return head.strip() if paren and head.strip() else "alarm"


def format_probability(p: float, log_odds: float = math.nan, stderr: float = math.nan) -> str:
    """P for people, with the digits its error supports.

    * An exact or unchecked (LBP) value: 6 decimals, scientific below 1e-4
      (3 decimals of mantissa), and below float64's range from its log-odds
      (`3.668e-348`), so that probabilities too small to print keep their order.
    * A sampled value (`stderr` finite): rounded at the first significant digit
      of its standard error, the digit the estimate can still get wrong
      (`SIGNIFICANT_DIGITS_RULE`): P = 0.012940 with SE 0.00036 prints
      `0.0129`; below 1e-4 in scientific notation with as many significant
      digits (at least one). A standard error of 0 (every world agreed) or a
      tiny one keeps at most the 6 decimals of an exact value.

    >>> format_probability(0.25), format_probability(3e-9), format_probability(0.0, -800.0)
    ('0.250000', '3.000e-09', '3.668e-348')
    >>> format_probability(0.01294, stderr=0.00036), format_probability(0.5, stderr=0.02)
    ('0.0129', '0.50')
    """
    if not math.isfinite(p):
        return str(p)
    if p == 0.0 and math.isfinite(log_odds) and log_odds < -700:
        # P = sigmoid(lo) ~ e^lo: too small for a float, not for its decimal exponent.
        exp10 = log_odds / math.log(10.0)
        e = math.floor(exp10)
        mantissa = round(10.0 ** (exp10 - e), 3)
        if mantissa >= 10.0:  # 9.9996 rounds up: 1.000 of the next decade, never "10.000e-349"
            mantissa, e = mantissa / 10.0, e + 1
        return f"{mantissa:.3f}e{e:03d}"
    if math.isfinite(stderr) and stderr > 0.0:
        first = math.floor(math.log10(stderr))  # the decimal exponent of the error's first digit
        if p == 0.0 or p >= 1e-4:
            return f"{p:.{min(EXACT_DECIMALS, max(1, -first))}f}"
        # Below 1e-4 as every table shows it, with the significant digits the error leaves (1 to 4).
        digits = min(4, max(1, math.floor(math.log10(p)) - first + 1))
        return f"{p:.{digits - 1}e}"
    return f"{p:.{EXACT_DECIMALS}f}" if p == 0.0 or p >= 1e-4 else f"{p:.3e}"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def error_cell(ranking: Ranking, alarm) -> str:
    """How far off a probability may be, for the column beside it: "exact", the 95% interval of a
    sampled estimate, or for LBP "unchecked" (its error is not known) or "FLAGGED" (`Ranking.flags`)."""
    if ranking.method == "exact":
        return "exact"
    if ranking.method == "sample" and math.isfinite(alarm.lower):
        return f"[{_short(alarm.lower)}, {_short(alarm.upper)}]"
    return "FLAGGED" if ranking.flags else "unchecked"


def _short(p: float) -> str:
    return f"{p:.4f}" if p == 0.0 or p >= 1e-3 else f"{p:.1e}"


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
    head = {"exact": "error", "sample": "95% interval"}.get(ranking.method, "LBP")
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


# What `caveats` says of an LBP ranking: one sentence, for stderr.
LBP_CAVEAT = ("note: LBP's probabilities are approximate and unchecked on this graph: derivations that share "
              "tuples make them over- or under-confident, by orders of magnitude at worst. `fastlbp check` "
              "measures them; --method exact or --method sample gives the model's own probabilities.")


def caveats(ranking: Ranking) -> list[str]:
    """Whole sentences about how far to trust a ranking's numbers as a whole, for stderr beside its table
    (each flag of `Ranking.flags` is a warning of its own, said by the command): LBP's caveat; none for
    exact and sampled rankings, whose error is beside each number."""
    return [LBP_CAVEAT] if ranking.method == "lbp" and ranking.alarms else []


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


# A cell beginning with one of these is a formula to a spreadsheet (OWASP, "CSV injection"): = + - @,
# and tab and carriage return, which some spreadsheets skip before looking for the others. A name
# beginning with the quote itself is marked too, so that dropping one leading quote always reads back.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")

def csv_name(name: str, exact: bool = False) -> str:
    """`name` as a CSV cell: one a spreadsheet would run as a formula (`FORMULA_START`) gets a leading
    `'`, unless `exact`.

    >>> csv_name("=HYPERLINK(1)"), csv_name("race(1,2)"), csv_name("=1", exact=True)
    ("'=HYPERLINK(1)", 'race(1,2)', '=1')
    """
    return "'" + name if not exact and name.startswith(FORMULA_START) else name


def _csv_field(value) -> str:
    # RFC 4180 quoting, done here because the csv module quotes a field only for the characters of its
    # line terminator: with "\n" a bare "\r" in a name went out unquoted and split the row on reading.
    text = str(value)
    if any(c in text for c in ',"\r\n') or not text.isprintable():
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_row(fields) -> str:
    """One CSV line (ending in "\\n") of `fields`, quoted as `to_csv` quotes them."""
    return ",".join(map(_csv_field, fields)) + "\n"


def csv_document(header, rows, name_column: int, exact_names: bool = False) -> str:
    """The CSV of `header` and `rows`, the one way every command writes CSV: fields quoted (`csv_row`),
    the names in column `name_column` through `csv_name`."""
    out = [csv_row(header)]
    for row in rows:
        row = list(row)
        row[name_column] = csv_name(str(row[name_column]), exact_names)
        out.append(csv_row(row))
    return "".join(out)


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
