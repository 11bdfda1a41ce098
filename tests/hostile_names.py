"""A graph whose alarms have hostile names (issue 29 items 12 and 13), for the tests of what the commands
show on a terminal and write as CSV.

`NAMES`: a newline that would forge a triage message, an OSC sequence that retitles the terminal, a bidi
override, a bare carriage return, and names a spreadsheet would run as formulas. Each alarm is derived
from `in(0)` (and every other one also from `in(1)`), so the graph ranks and explains like any other.
"""

from __future__ import annotations

import json
from pathlib import Path

NAMES = ["a\n> accepted: x", "b\x1b]0;pwned\x07", "c\u202e(1)", "d\r(2)", '=HYPERLINK("x")', "+1", "-x", "@y",
         "'q", "\tt"]
INPUTS = ["in(0)", "in(1)"]
# What a terminal must never receive raw from these names.
RAW = ("\n> accepted: x", "\x1b", "\x07", "\u202e", "\r")


def write_hostile(dir_: Path, name: str = "hostile", top: int | None = None) -> Path:
    """Writes `name.json` (derivation.json) with the `NAMES` alarms; `top`: the index of the one name with
    the largest fan-in (three clauses derive it), else every other name has two."""
    tuples = INPUTS + NAMES
    clauses = [["R0", i + 2, [0]] for i in range(len(NAMES))]
    if top is None:
        clauses += [["R1", i + 2, [1]] for i in range(0, len(NAMES), 2)]
    else:
        clauses += [["R1", top + 2, [1]], ["R1", top + 2, [0, 1]]]
    doc = {"format": "fastlbp-derivation", "version": 1,
           "rules": {"R0": {"probability": 0.7, "text": "r0"}, "R1": {"probability": 0.8, "text": "r1"}},
           "tuples": tuples, "clauses": clauses, "inputs": {"in(0)": 0.9, "in(1)": 0.6}, "alarms": NAMES}
    path = dir_ / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path
