"""Text helpers every layer shows names and numbers with: `safe_name` for a terminal, CSV quoting,
probabilities for people.

`safe_name` is the one escaping of names on a terminal, so an escape sequence in
a tuple's name cannot recolour, move or retitle the user's terminal. CSV, for
`rank` and `marginals` alike (`csv_document`), quotes fields holding a line
break or any other control character, and by default gives a name a
spreadsheet would run as a formula a leading `'` (`csv_name`; exact with
`exact_names`). Nothing here imports another fastlbp module, so errors and the
model (the bottom of the layers) show names through it.
"""

from __future__ import annotations

import math
import unicodedata

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
