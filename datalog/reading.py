"""Checks the graph readers share: values in messages, probabilities, strict JSON, keys given once.

`loads_json` turns every failure of `json.loads` into an `InputError` (deep
nesting, integers past Python's 4,300-digit limit) and marks objects that
repeat a key, which `unique` reports where the reader knows the location;
`text_only` refuses lone surrogates; `Once` refuses a key given twice with
different values (a labels file naming an alarm true and false);
`name_value_lines` reads the lines `NAME: value` of a text file, and `rule_prob_lines` a
rule-probability file (`Rk: p`) for every reader of one.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from fastlbp.core.errors import InputError, read_text, text_lines


def check_probability(value, path, line, location, what) -> float:
    """A probability: a number (not a bool) in [0, 1], not NaN."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InputError(path, line, f"{what} {shown(value)} is not a number", location) from None
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(path, line, f"{what} must be a number, got {json_type(value)}", location)
    try:
        value = float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise InputError(path, line, f"{what} {shown(str(value))} is not a probability in [0, 1]",
                         location) from None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise InputError(path, line, f"{what} {value!r} is not a probability in [0, 1]", location)
    return value


def shown(text: str, limit: int = 60) -> str:
    """`text` for a message: repr'd, and cut in the middle past `limit` characters."""
    if len(text) > limit:
        cut = len(text) - limit
        return f"{text[:limit // 2]!r}...({cut} more characters)...{text[-limit // 2:]!r}"
    return repr(text)


def json_type(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


class _Duplicated(dict):
    """A JSON object that repeated a key (`json` keeps the last value): `duplicate` is the first one."""

    duplicate: str


def _pairs(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    seen = set()
    out = _Duplicated(d)
    out.duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
    return out


def unique(obj: dict, path, location) -> None:
    if isinstance(obj, _Duplicated):
        raise InputError(path, None, f"key {shown(obj.duplicate)} appears twice in this object (JSON would "
                         "silently keep only the last value)", location)


def loads_json(text: str, path):
    """`json.loads` with every failure an `InputError` (line of the problem where it is known)."""
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as err:
        raise InputError(path, err.lineno, f"invalid JSON: {err.msg} (column {err.colno})") from None
    except RecursionError:
        raise InputError(path, None, "invalid JSON: arrays or objects nested too deeply") from None
    except ValueError as err:  # an integer past the digit limit of int(str)
        digits = sys.get_int_max_str_digits()
        m = re.search(rf"[0-9]{{{digits + 1},}}", text) if digits else None
        if m is None:
            raise InputError(path, None, f"invalid JSON: {err}") from None
        raise InputError(path, text.count("\n", 0, m.start()) + 1, f"invalid JSON: an integer of "
                         f"{m.end() - m.start()} digits (at most {digits} are read)") from None


def text_only(names: list[str], what: str, path, location) -> None:
    """Raises `InputError` for a lone surrogate (from a JSON escape such as "\\ud800"): it is no text,
    and no UTF-8 file or terminal takes it."""
    try:
        "".join(names).encode("utf-8")  # one pass; a surrogate pair split over two names fails too
    except UnicodeEncodeError:
        bad = next(n for n in names if not _encodes(n))
        raise InputError(path, None, f"{what} {bad!r} holds a lone surrogate (a \\uD800-\\uDFFF escape "
                         "not in a pair), which is not text", location) from None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Once:
    """Values keyed by name from one file's lines: the same key again must repeat its value.

    `values` holds {key: value}; `set` raises `InputError` naming both lines
    when a key comes again with another value (`what`: "the label of", ...).
    """

    def __init__(self, path: Path | str, what: str):
        self.path, self.what = str(path), what
        self.values: dict = {}
        self.lines: dict = {}  # key -> line of its first value

    def set(self, key, value, ln: int, name: str, show=repr) -> None:
        """`values[key] = value` from line `ln`; `name` and `show(value)` appear in the message."""
        old = self.values.get(key, value)
        if old != value:
            raise InputError(self.path, ln, f"{self.what} {shown(name)} is {show(value)} here but "
                             f"{show(old)} on line {self.lines[key]}")
        self.values[key] = value
        self.lines.setdefault(key, ln)


def name_value_lines(path: Path, expected: str, *, comments: bool = True,
                     max_decompressed: int | None = None) -> Iterator[tuple[int, str, str, str]]:
    """(line number, line, name, value) of each `NAME: value` line of a text file, split at the last colon:
    the line and the name stripped, the value as written; blank lines are skipped, and with `comments`
    lines that begin with `#`.

    Args:
        expected: what a line should look like, for the message (e.g. "'Rk: probability'").
        max_decompressed: limit for a gzip-compressed file (`fastlbp.core.errors.read_text`).

    Raises:
        InputError: a line without a colon or without a name (file and line).
    """
    for ln, line in enumerate(text_lines(read_text(path, max_decompressed=max_decompressed)), 1):
        s = line.strip()
        if not s or (comments and s.startswith("#")):
            continue
        name, sep, value = s.rpartition(":")
        name = name.strip()
        if not sep or not name:
            raise InputError(str(path), ln, f"malformed line, expected {expected}, got {shown(s)}")
        yield ln, s, name, value


def rule_prob_lines(path) -> list[tuple[int, str, float]]:
    """The rules of a rule-probability file as written: (line, rule name, probability), in file order.

    A line is `NAME: p` (split at the last colon; `Rk: 0.9`, Bingo's rule-prob.txt, what `fastlbp learn`
    writes); blank lines and `#` comments are skipped; a rule named twice must repeat its value.
    `datalog.rule_probs.read_rule_probs` (any graph's rules, by name) and
    `datalog.ground_inputs.rule_probabilities` (a program's rules, checked against it) both read
    through it.

    Raises:
        InputError: a malformed line, a value that is not a probability, or a rule given two
            different values (file and line).
    """
    p = Path(path)
    once = Once(p, "the probability of rule")
    out = []
    for ln, _, name, value in name_value_lines(p, "'Rk: probability'"):
        prob = check_probability(value.strip(), str(p), ln, None, f"probability of rule {name}")
        once.set(name, prob, ln, name)
        out.append((ln, name, prob))
    return out
