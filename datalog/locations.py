"""Source locations of a grounded program's tuples, from a relation of program points.

An analysis that knows where its facts come from says so in a relation of
three or four attributes, `REL(point, file, line)` or `REL(point, file, line,
column)`: program point `point` (any value the facts use for it: a call site
`Search.doGet/31`, an instruction id) is at `file` (a path relative to the
source root, `/`-separated) and `line` (1-based). Doop-like analyses carry such
positions in their facts. `fastlbp ground --locations REL` (and every command
that grounds a `.dl` file) then locates every tuple of the derivation graph at
the points among its arguments, in argument order: `leak(Search.doGet/31,
Search.doGet/v4)` at the position of `Search.doGet/31`. The first becomes a
SARIF result's physical location (what code scanning shows), the others related
locations (`fastlbp.io.sarif`). The result is derivation.json's "locations"
(`datalog.annotations`), written out by `ground -o x.json` like any other.

A point matches an argument by its text as the tuple's name shows it, so a
point value should not also be an ordinary value of another attribute (use
`Class.method/31`, not `31`); an argument holding a comma cannot be matched
(tuple names split at commas). REL's tuples come from its facts file (an
`.input` relation) or from the program's own rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from datalog.annotations import split_tuple
from fastlbp.core.errors import InputError

ARITIES = (3, 4)  # (point, file, line) or (point, file, line, column)


def _positive(value, what: str, row, where: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number < 1:
        raise InputError(where, None, f"--locations: {row}: the {what} must be a positive integer, got "
                                      f"{value!r}")
    return number


def point_locations(rel: str, rows: Iterable[Sequence], where: str) -> dict[str, dict]:
    """{point as a tuple name shows it: location} from REL's rows (point, file, line[, column]).

    A point given twice keeps its first location.

    Raises:
        InputError: a row of the wrong length, an empty file or a line or column that is not a
            positive integer (`where` names the program).
    """
    out: dict[str, dict] = {}
    for row in rows:
        row = tuple(row)
        shown = f"{rel}({','.join(map(str, row))})"
        if len(row) not in ARITIES:
            raise InputError(where, None, f"--locations: {shown}: a location has 3 or 4 values (point, "
                                          "file, line[, column])")
        point, file = str(row[0]), str(row[1]).strip()
        if not file:
            raise InputError(where, None, f"--locations: {shown}: the file is empty")
        loc = {"file": file, "line": _positive(row[2], "line", shown, where)}
        if len(row) == 4:
            loc["column"] = _positive(row[3], "column", shown, where)
        out.setdefault(point, loc)
    return out


def locate_tuples(names: Iterable[str], points: dict[str, dict], rel: str) -> dict[str, list[dict]]:
    """{tuple name: its locations} for every tuple with a point among its arguments (argument order,
    each location once); REL's own tuples are not located."""
    out: dict[str, list[dict]] = {}
    if not points:
        return out
    for name in names:
        parts = split_tuple(name)
        if parts is None or parts[0] == rel:
            continue
        locs: list[dict] = []
        for arg in parts[1]:
            loc = points.get(arg)
            if loc is not None and loc not in locs:
                locs.append(loc)
        if locs:
            out[name] = locs
    return out


def check_relation(program, rel: str) -> None:
    """Raises `InputError` unless `rel` is a relation of `program` with 3 or 4 attributes."""
    decl = program.decls.get(rel)
    where = str(program.path or "<program>")
    if decl is None:
        raise InputError(where, None, f"--locations {rel}: the program declares no relation {rel!r} (it "
                                      "names a relation REL(point, file, line[, column]))")
    if decl.arity not in ARITIES:
        raise InputError(where, decl.pos.line, f"--locations {rel}: {rel} has {decl.arity} attribute(s); a "
                                               "location relation has 3 or 4: (point, file, line[, column])")


__all__ = ["point_locations", "locate_tuples", "check_relation", "ARITIES"]
