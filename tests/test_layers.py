"""The layers point one way (docs/DESIGN.md section 13): every import of fastlbp, datalog and schedules
points down the order `LAYERS`, and no modules import each other in a circle.

Every import counts, as Python would run it: top-level, inside a function, under `if TYPE_CHECKING`, a
submodule importing its own package (`from fastlbp.engines import X` in `fastlbp/engines/loop.py` is an
edge to `fastlbp/engines/__init__.py`), and `from pkg import submodule` (an edge to the submodule). No
module imports another by a name in a string (`importlib.import_module`, `__import__`), which this scan
could not see.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fastlbp", "datalog", "schedules")

# The layer order, bottom first, written once. A module may import its own unit and the units of the
# layers below its own; units that share a layer may not import each other. A unit is a package (every
# module under it) or, for the front door `fastlbp` and `fastlbp.__main__`, that one module.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the factor graph, Model, Settings, errors, the message equations, segment sums, the
    # hard constraints, text helpers (safe_name, CSV) and atomic file writing
    ("fastlbp.core",),
    # derivation graphs in and out, cycle elimination, the Bayesian network, the file formats, the
    # Datalog front end; the plan, the strategy table, orders and chunk/relaxation plans (host-side numpy)
    ("datalog", "schedules"),
    # every device engine behind the runner contract; exact inference; the importance sampler
    ("fastlbp.engines",),
    # methods, rounds, sessions, ranking, explanations, metrics, learning, simulation, checks
    ("fastlbp.inference",),
    # files in and out: loading (with the model cache), ranking writers, SARIF, plots
    ("fastlbp.io",),
    # the interactive session, its journal and its labels
    ("fastlbp.triage",),
    # the command line; the package's front door (lazy names over the layers above)
    ("fastlbp.cli", "fastlbp"),
    ("fastlbp.__main__",),
)
_WHOLE_MODULE = {"fastlbp", "fastlbp.__main__"}  # units that are one module, not a package


def modules(root: Path = ROOT) -> dict[str, Path]:
    """{dotted module name: file} of the project's packages (a package is its `__init__`)."""
    out = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            name = ".".join(f.relative_to(root).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = f
    return out


def imports_of(name: str, source: str, is_package: bool, known: set[str]) -> dict[str, int]:
    """{imported module of `known`: first line} for every import statement anywhere in `source`."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            targets = subs + ([base] if len(subs) < len(node.names) else [])
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import a.b.c` of a name inside a module: that module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.setdefault(t, node.lineno)
    return out


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> module, each edge with the `line` of its first import."""
    mods = modules(root)
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, f in mods.items():
        for target, line in imports_of(name, f.read_text(), f.name == "__init__.py", set(mods)).items():
            g.add_edge(name, target, line=line)
    return g


def unit_of(module: str) -> str | None:
    """The unit of LAYERS that `module` belongs to (the longest that holds it), or None."""
    units = [u for layer in LAYERS for u in layer]
    holding = [u for u in units
               if module == u or (u not in _WHOLE_MODULE and module.startswith(u + "."))]
    return max(holding, key=len, default=None)


def layer_of(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def violations(g: nx.DiGraph) -> list[str]:
    """Every edge that points up or sideways, and every module no layer holds."""
    out = [f"{m}: in no layer of LAYERS (tests/test_layers.py): place it" for m in g if unit_of(m) is None]
    for m, t, data in g.edges(data=True):
        um, ut = unit_of(m), unit_of(t)
        if um is None or ut is None or um == ut:
            continue
        if layer_of(ut) >= layer_of(um):
            where = "up" if layer_of(ut) > layer_of(um) else "sideways"
            out.append(f"{m} (line {data['line']}) imports {t}: {where}, {um} -> {ut}")
    return sorted(out)


def circles(g: nx.DiGraph) -> list[list[str]]:
    """The groups of modules that import each other in a circle (strongly connected, more than one)."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_imports_point_down_the_layers():
    assert violations(import_graph()) == []


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_no_import_by_a_name_in_a_string():
    found = []
    for name, f in modules().items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call):
                fn = node.func
                called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
                if called in ("import_module", "__import__"):
                    found.append(f"{name}:{node.lineno}")
    assert found == []


# The scan itself: it must see what Python runs.

@pytest.mark.parametrize("source, expected", [
    ("from fastlbp.io.writers import safe_name", {"fastlbp.io.writers"}),
    ("def f():\n    from fastlbp.io.writers import safe_name", {"fastlbp.io.writers"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fastlbp.inference import session",
     {"fastlbp.inference.session"}),
    ("from fastlbp.core import Thing", {"fastlbp.core"}),  # a name of the package: its __init__
    ("from fastlbp import core", {"fastlbp.core"}),
    ("import fastlbp.io.writers", {"fastlbp.io.writers"}),
    ("from . import errors", {"fastlbp.core.errors"}),
    ("from .. import io", {"fastlbp.io"}),
    ("import numpy", set()),
])
def test_scan_sees_every_kind_of_import(source, expected):
    known = {"fastlbp", "fastlbp.core", "fastlbp.core.errors", "fastlbp.core.model", "fastlbp.io",
             "fastlbp.io.writers", "fastlbp.inference", "fastlbp.inference.session"}
    assert set(imports_of("fastlbp.core.model", source, False, known)) == expected


def test_an_upward_import_and_a_circle_are_found():
    g = nx.DiGraph()
    g.add_edge("fastlbp.core.errors", "fastlbp.io.writers", line=3)  # what core/errors.py once did
    g.add_edge("fastlbp.io.writers", "fastlbp.core.errors", line=5)
    g.add_edge("datalog.summary", "schedules.orders", line=7)  # peers of one layer
    g.add_node("fastlbp.newthing.module")
    assert violations(g) == [
        "datalog.summary (line 7) imports schedules.orders: sideways, datalog -> schedules",
        "fastlbp.core.errors (line 3) imports fastlbp.io.writers: up, fastlbp.core -> fastlbp.io",
        "fastlbp.newthing.module: in no layer of LAYERS (tests/test_layers.py): place it",
    ]
    assert circles(g) == [["fastlbp.core.errors", "fastlbp.io.writers"]]


def test_units():
    assert unit_of("fastlbp") == "fastlbp"
    assert unit_of("fastlbp.core.graph") == "fastlbp.core"
    assert unit_of("fastlbp.engines.fused.loop") == "fastlbp.engines"
    assert unit_of("datalog") == "datalog"
    assert unit_of("fastlbp.newthing") is None  # the front door holds only itself
