"""The method is an object (issue 39): nothing outside the method table compares a method's name.

`fastlbp.inference.methods.METHODS` is the one table of inference methods; everything that shows or runs a
method asks its row (`Method.label`, `describe`, `error_cell`, `fallback`, `e_step`, ...). This scans the
syntax trees of the package for what would bypass it: a comparison (==, !=, in, not in) or a `match` case
against a method's name ("auto" and every name of the table), and a dict keyed by two or more of them (a
second table), anywhere but in the table's own module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fastlbp.inference import methods

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fastlbp", "datalog", "schedules")
TABLE = ROOT / "fastlbp" / "inference" / "methods.py"

# Other vocabularies that have a value spelled like a method name, by the name of what is compared: the
# engine family (`schedules.plan.Plan.kernels`, "auto" picks one by graph size), the levelling
# algorithm (`schedules.levels.levels`, "auto" picks one by the order's stages) and where sampling
# draws (`Settings.sample_path`, "auto": by the graph's size).
OTHER_VOCABULARIES = {"kernels", "algorithm", "sample_path"}


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a constant, or of a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def _subject(node: ast.AST) -> str | None:
    """The last name of what is compared (`plan.kernels` -> "kernels"), or None."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def name_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, what) of every comparison, `match` case or dict in `source` that tells methods apart by name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                if not isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn):
                    continue
                left, right = operands[i], operands[i + 1]
                for literal, other in ((left, right), (right, left)):
                    hit = sorted(set(_strings(literal)) & names)
                    if hit and _subject(other) not in OTHER_VOCABULARIES:
                        found.append((node.lineno, f"compares with {', '.join(map(repr, hit))}"))
        elif isinstance(node, ast.match_case):
            hit = sorted({n.value for n in ast.walk(node.pattern)
                          if isinstance(n, ast.Constant) and isinstance(n.value, str)} & names)
            if hit:
                found.append((node.pattern.lineno, f"matches {', '.join(map(repr, hit))}"))
        elif isinstance(node, ast.Dict):
            keys = sorted({k.value for k in node.keys
                           if isinstance(k, ast.Constant) and isinstance(k.value, str)} & names)
            if len(keys) >= 2:
                found.append((node.lineno, f"a dict keyed by {', '.join(map(repr, keys))}"))
    return found


def test_no_method_name_is_compared_outside_the_table():
    names = set(methods.names())
    assert {"auto", "lbp", "exact", "sample"} <= names
    found = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if f == TABLE:
                continue
            for line, what in name_comparisons(f.read_text(), names):
                found.append(f"{f.relative_to(ROOT)}:{line}: {what}")
    assert found == [], "ask the method's row (inference.methods.METHODS) instead:\n" + "\n".join(found)


# The scan itself: it must see each way of telling methods apart by name.

NAMES = {"auto", "lbp", "exact", "sample"}


@pytest.mark.parametrize("source, hits", [
    ('if rnd.method == "sample":\n    pass', 1),
    ('ok = "lbp" != ranking.method', 1),
    ('ok = settings.method in ("exact", "sample")', 1),
    ('ok = m not in ["auto"]', 1),
    ('match rnd.method:\n    case "exact":\n        pass\n    case _:\n        pass', 1),
    ('head = {"exact": "error", "sample": "95% interval"}.get(method, "LBP")', 1),
    ('ok = plan.kernels == "auto"', 0),               # another vocabulary: the engine family
    ('ok = algorithm == "auto"', 0),                  # the levelling algorithm
    ('doc = {"lbp": rnd.iterations, "reference": 1}', 0),  # a JSON field named lbp, not a table
    ('row = METHODS[rnd.method]', 0),
    ('x = Round(method="lbp")', 0),                   # naming a method is no comparison
])
def test_scan_sees_each_kind_of_comparison(source, hits):
    assert len(name_comparisons(source, NAMES)) == hits
