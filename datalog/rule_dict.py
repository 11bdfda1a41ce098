"""Bingo's `rule_dict.txt`: the text of each rule, so rule texts survive derivation.json -> Bingo -> json.

Bingo's front end writes one line per rule of the analysis, `RULE: TEXT`
(`R3: race(x,y) :- access(x,f), access(y,f).`; some versions put a tab after
the colon). The rule name is everything before the first colon (rule names
have none, see `datalog.formats.check_bingo_names`); the text is the rest,
stripped. A rule listed here that no clause uses is ignored, as in
`rule-prob.txt`. A text holding a line break (or whitespace at either end,
which reading strips) cannot be written: `write_rule_dict` leaves it out and
says so.

    texts = read_rule_dict(directory / RULE_DICT, set(rule_names))     # {rule: text}
    warnings = write_rule_dict(dg.rules, directory)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from datalog.derivation import Rule
from datalog.reading import Once, shown
from fastlbp.core.errors import InputError, read_text, text_lines
from fastlbp.core.outputs import write_file

RULE_DICT = "rule_dict.txt"


def read_rule_dict(path: str | os.PathLike, rules: Iterable[str], *,
                   max_decompressed: int | None = None) -> dict[str, str]:
    """{rule name: text} of the rules in `rules` that `path` gives a non-empty text.

    Raises:
        InputError: a line without `RULE:`, or a rule given two different texts
            (both lines named).
    """
    p = Path(path)
    wanted = set(rules)
    texts = Once(p, "the text of rule")
    for ln, line in enumerate(text_lines(read_text(p, max_decompressed=max_decompressed)), 1):
        s = line.strip()
        if not s:
            continue
        name, sep, text = s.partition(":")
        if not sep or not name.strip():
            raise InputError(str(p), ln, f"malformed line, expected 'RULE: TEXT', got {shown(s)}")
        name, text = name.strip(), text.strip()
        if name in wanted and text:
            texts.set(name, text, ln, name)
    return texts.values


def _writable(text: str) -> bool:
    """`read_rule_dict` reads `text` back unchanged: one line, nothing to strip at either end."""
    return "\n" not in text and "\r" not in text and text == text.strip() and not text.startswith("\ufeff")


def write_rule_dict(rules: Iterable[Rule], directory: str | os.PathLike) -> list[str]:
    """Writes `directory/rule_dict.txt` with every rule's text (removes a stale one when no rule has one).

    Returns:
        Warnings naming the rules whose text a line cannot carry (left out).
    """
    path = Path(directory) / RULE_DICT
    written, lost = [], []
    for r in rules:
        if r.text:
            (written if _writable(r.text) else lost).append(r)
    if written:
        write_file(path, "".join(f"{r.name}: {r.text}\n" for r in written))
    elif path.exists():
        path.unlink()  # a stale file from an earlier conversion would give the rules texts they lack
    if not lost:
        return []
    names = ", ".join(shown(r.name) for r in lost[:5]) + (", ..." if len(lost) > 5 else "")
    return [f"{len(lost)} rule text(s) hold a line break or surrounding whitespace that {RULE_DICT}'s "
            f"one-line entries cannot carry, left out: {names}"]
