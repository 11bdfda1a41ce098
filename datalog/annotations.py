"""Source locations of tuples and descriptions of relations: derivation.json's "locations" and "relations".

Neither changes inference; writers use them (SARIF: `fastlbp.io.sarif`). Both
are optional and kept as JSON-able data in `DerivationGraph.annotations` and
`Model.meta["locations"]` / `Model.meta["relations"]`::

    "locations": {
        "race(13,15)": [{"file": "src/Server.java", "line": 120, "column": 9},
                        {"file": "src/Worker.java", "line": 48, "message": "the other access"}],
        "access(*)":   [{"file": "src/Server.java", "line": 1}],
        "lock(*,7)":   [{"file": "src/Lock.java"}]
    },
    "relations": {
        "race": {"description": "two threads may write the field without a common lock",
                 "help": "Guard both accesses with the same lock.",
                 "security": true, "severity": 7.5}
    }

A key of "locations" is a tuple name, or a *pattern*: a relation with its
arguments in parentheses where an argument that is exactly `*` matches any one
argument (`race(*,*)` matches every `race` tuple of two arguments,
`lock(*,7)` those whose second argument is 7). A tuple takes the locations
of its own name if given, else those of the matching pattern with the
fewest `*` (of equally specific ones, the first in the file). A key that is
not a pattern must name a tuple of the graph.

A location is `file` (a path relative to the source root, `/`-separated, as
code-scanning tools want it), optionally `line`, `column` (1-based; a column
needs a line), `endLine`, `endColumn` and a `message`. A relation's
`severity` (0.0 to 10.0, as CVSS) is allowed only with `"security": true`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator

from datalog.reading import json_type, shown, text_only, unique
from fastlbp.core.errors import InputError

LOCATION_FIELDS = ("file", "line", "column", "endLine", "endColumn", "message")
RELATION_FIELDS = ("description", "help", "security", "severity")
WILDCARD = "*"

_TUPLE = re.compile(r"\s*([^\s()]+)\s*\((.*)\)\s*", re.DOTALL)
# A URI scheme or a drive letter ("C:", "file:"): not a path relative to the source root.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def split_tuple(name: str) -> tuple[str, tuple[str, ...]] | None:
    """`race(13, 15)` -> ("race", ("13", "15")); None for a name without an argument list.

    Arguments are split at every comma and stripped (tuple names hold no
    nested parentheses: see Bingo's clause syntax in `datalog.formats`).
    """
    m = _TUPLE.fullmatch(name)
    if m is None:
        return None
    args = m.group(2)
    return m.group(1), tuple(a.strip() for a in args.split(",")) if args.strip() else ()


def is_pattern(key: str) -> bool:
    """Whether a "locations" key is a pattern (some argument is exactly `*`) rather than a tuple name."""
    parts = split_tuple(key)
    return parts is not None and WILDCARD in parts[1]


def _int(value, path, location, what, minimum=1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(path, None, f"{what} must be an integer, got {json_type(value)}", location)
    if value < minimum:
        raise InputError(path, None, f"{what} must be at least {minimum}, got {value}", location)
    return value


def _text(value, path, location, what) -> str:
    if not isinstance(value, str):
        raise InputError(path, None, f"{what} must be a string, got {json_type(value)}", location)
    text_only([value], what, path, location)
    return value


def _section(value, section: str, what: str, path) -> Iterator[tuple[str, object, str]]:
    """(key, value, JSON path) of each entry of derivation.json's object `section` ("locations",
    "relations"), checked: an object, each key given once and text (`what` names the keys in a message)."""
    where = f"$.{section}"
    if not isinstance(value, dict):
        raise InputError(path, None, f"\"{section}\" must be an object, got {json_type(value)}", where)
    unique(value, path, where)
    for key, item in value.items():
        loc = f"{where}[{json.dumps(key)}]"
        text_only([key], what, path, loc)
        yield key, item, loc


def _object(value, what: str, fields: tuple[str, ...], path, loc) -> dict:
    """`value` checked as a JSON object of `fields` alone, each key given once (`what`: "location",
    "relation", for the message)."""
    if not isinstance(value, dict):
        raise InputError(path, None, f"a {what} must be an object, got {json_type(value)}", loc)
    unique(value, path, loc)
    extra = set(value) - set(fields)
    if extra:
        raise InputError(path, None, f"unknown {what} field {sorted(extra)[0]!r} (expected "
                         f"{', '.join(fields)})", loc)
    return value


def _location(value, path, loc) -> dict:
    _object(value, "location", LOCATION_FIELDS, path, loc)
    if "file" not in value:
        raise InputError(path, None, "a location needs \"file\"", loc)
    file = _text(value["file"], path, f"{loc}.file", "file")
    if not file.strip() or file != file.strip():
        raise InputError(path, None, f"file {shown(file)} must be a path without surrounding whitespace",
                         f"{loc}.file")
    if file.startswith("/") or "\\" in file or _SCHEME.match(file) or any(c < " " for c in file):
        raise InputError(path, None, f"file {shown(file)} must be a path relative to the source root, "
                         "'/'-separated (code-scanning tools resolve it against the repository)",
                         f"{loc}.file")
    out: dict = {"file": file}
    for key in ("line", "column", "endLine", "endColumn"):
        if key in value:
            out[key] = _int(value[key], path, f"{loc}.{key}", key)
    if ("column" in out or "endLine" in out or "endColumn" in out) and "line" not in out:
        raise InputError(path, None, "a column or an end needs a \"line\"", loc)
    line = out.get("line", 0)
    if out.get("endLine", line) < line:
        raise InputError(path, None, f"endLine {out['endLine']} is before line {line}", loc)
    # SARIF's endColumn is exclusive: equal to the column is an empty region, before it is none.
    if "endColumn" in out and out.get("endLine", line) == line and out["endColumn"] < out.get("column", 1):
        raise InputError(path, None, f"endColumn {out['endColumn']} is before column {out['column']} "
                         "on the same line", loc)
    if "message" in value:
        out["message"] = _text(value["message"], path, f"{loc}.message", "message")
    return out


def parse_locations(value, tuple_index: dict[str, int], path) -> dict[str, list[dict]]:
    """derivation.json's "locations", checked: {tuple name or pattern: [location, ...]}.

    Raises:
        InputError: a wrong type or value (JSON path named), or a key that is
            neither a pattern nor a tuple of the graph.
    """
    out = {}
    for key, locs, loc in _section(value, "locations", "tuple", path):
        if not is_pattern(key) and key not in tuple_index:
            raise InputError(path, None, f"tuple {key!r} is not in the graph (a pattern has an argument "
                             "'*', e.g. race(*,*))", loc)
        if not isinstance(locs, list):
            raise InputError(path, None, f"locations must be an array, got {json_type(locs)}", loc)
        out[key] = [_location(x, path, f"{loc}[{i}]") for i, x in enumerate(locs)]
    return out


def parse_relations(value, path) -> dict[str, dict]:
    """derivation.json's "relations", checked: {relation: {"description", "help", "security", "severity"}}.

    Raises:
        InputError: a wrong type or value (JSON path named); a severity
            outside [0, 10] or without `"security": true`.
    """
    out = {}
    for name, spec, loc in _section(value, "relations", "relation", path):
        _object(spec, "relation", RELATION_FIELDS, path, loc)
        rel: dict = {}
        for key in ("description", "help"):
            if key in spec:
                rel[key] = _text(spec[key], path, f"{loc}.{key}", key)
        if "security" in spec:
            if not isinstance(spec["security"], bool):
                raise InputError(path, None, f"security must be true or false, got "
                                 f"{json_type(spec['security'])}", f"{loc}.security")
            rel["security"] = spec["security"]
        if "severity" in spec:
            s = spec["severity"]
            if isinstance(s, bool) or not isinstance(s, int | float):
                raise InputError(path, None, f"severity must be a number, got {json_type(s)}",
                                 f"{loc}.severity")
            s = float(s)
            if not (math.isfinite(s) and 0.0 <= s <= 10.0):
                raise InputError(path, None, f"severity {s!r} is not in [0, 10]", f"{loc}.severity")
            if not rel.get("security"):
                raise InputError(path, None, "a severity is a security severity: give \"security\": true "
                                 "with it", f"{loc}.severity")
            rel["severity"] = s
        out[name] = rel
    return out


def parse_annotations(doc: dict, tuple_index: dict[str, int], path) -> dict:
    """{"locations": ..., "relations": ...} of a derivation.json document (only the non-empty sections)."""
    out = {}
    if "locations" in doc:
        out["locations"] = parse_locations(doc["locations"], tuple_index, path)
    if "relations" in doc:
        out["relations"] = parse_relations(doc["relations"], path)
    return {k: v for k, v in out.items() if v}


class LocationIndex:
    """Looks up a tuple's locations: its own name first, then the most specific matching pattern.

    Built once from a "locations" mapping; `lookup` costs one dict probe plus
    a scan of the patterns of the tuple's relation and arity.
    """

    def __init__(self, locations: dict[str, list[dict]] | None):
        self.exact: dict[str, list[dict]] = {}
        # (relation, arity) -> [(-literal arguments, order, arguments with None for *, locations)]
        self.patterns: dict[tuple[str, int], list] = {}
        for order, (key, locs) in enumerate((locations or {}).items()):
            parts = split_tuple(key)
            if parts is None or WILDCARD not in parts[1]:
                self.exact[key] = locs
                continue
            rel, args = parts
            wanted = tuple(None if a == WILDCARD else a for a in args)
            literal = sum(a is not None for a in wanted)
            self.patterns.setdefault((rel, len(args)), []).append((-literal, order, wanted, locs))
        for group in self.patterns.values():
            group.sort(key=lambda p: p[:2])

    def __bool__(self) -> bool:
        return bool(self.exact or self.patterns)

    def lookup(self, name: str) -> list[dict]:
        """The locations of tuple `name` ([] if none)."""
        locs = self.exact.get(name)
        if locs is not None:
            return locs
        if not self.patterns:
            return []
        parts = split_tuple(name)
        if parts is None:
            return []
        rel, args = parts
        for _, _, wanted, locs in self.patterns.get((rel, len(args)), ()):
            if all(w is None or w == a for w, a in zip(wanted, args, strict=True)):
                return locs
        return []
