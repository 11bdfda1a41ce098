"""`NAME VALUE` files: labels (`race(1,2) true`), soft labels (`race(1,2) 0.8`), one reader for both.

    rows = read_name_values("labels.txt", truth_value, "NAME true|false")   # [(line, name, value)]

A line is a name, then a separator (a tab, a comma or a run of spaces; a
comma may have spaces around it), then the value, the last field; a name
keeps its own commas and spaces (`race(1, 2)\ttrue`, `race(1, 2), false`).
Blank lines and `#` comments are skipped, a leading byte order mark is dropped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fastlbp.core.errors import InputError, read_text, text_lines

T = TypeVar("T")
_LINE = re.compile(r"(?P<name>.*?)(?:\s*,\s*|\s+)(?P<value>[^\s,]+)")


class BadValue(ValueError):
    """Raised by a value parser: the line holds a name and a value, but the value is not one
    (its message is the problem, reported at the file and line)."""


def read_name_values(path: str | os.PathLike, parse: Callable[[str, str], T], expected: str
                     ) -> list[tuple[int, str, T]]:
    """The lines of a `NAME VALUE` file as written: (line, name, parse(name, value text)), in file order.

    Args:
        parse: the value of a line from (name, value text); `BadValue` with a message says what is
            wrong with it, any other `ValueError` that the line is not `expected`.
        expected: what a line looks like, for messages ("NAME true|false").

    Raises:
        InputError: a line that is not `expected`, or a value `parse` refuses (file and line named).
    """
    p = Path(path)
    out = []
    for ln, line in enumerate(text_lines(read_text(p)), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _LINE.fullmatch(s)
        name = m["name"].strip() if m else ""
        try:
            if not name:
                raise ValueError(s)
            value = parse(name, m["value"])
        except BadValue as err:
            raise InputError(str(p), ln, str(err)) from None
        except ValueError:
            raise InputError(str(p), ln, f"expected '{expected}', got {s!r} (a tab, a comma or spaces "
                             "between the name and the value)") from None
        out.append((ln, name, value))
    return out


__all__ = ["read_name_values", "BadValue"]
