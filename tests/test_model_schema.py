"""The model cache's fixed schema: random models come back exactly; entries outside it are misses that
import nothing, even when signed with the folder's key."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path, PurePosixPath

import numpy as np
import pytest
from graphs import random_factors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_cache_support import entries, rewrite, same, the_entry

from datalog import bayesnet, synthetic
from datalog.derivation import Rule
from fastlbp.core.graph import from_factors
from fastlbp.core.model import Model
from fastlbp.io import loading, model_cache, model_schema

EXAMPLES = Path(__file__).resolve().parents[1] / "data"
KEY = model_cache.Key("s" * 64, "c" * 64, "code")

# Names as loaders may give them: empty, NUL inside, lone surrogates (undecodable file names), any script.
names = st.text(max_size=8) | st.sampled_from(["", "a\0b", "\0", "\udc80x", "é", "race(1, 2)", "𝒳"])


def round_trip(model: Model, cache: Path) -> None:
    """`model` through encode/decode and through an entry file: both exactly `model`."""
    fields, arrays = model_schema.encode(model)
    listed = model_schema.expected(fields)
    assert [(n, a.dtype.str, a.shape) for n, a in arrays] == listed
    same(model, model_schema.decode(fields, dict(arrays)))
    assert model_cache.store(cache, KEY, model) is not None
    back = model_cache.read(cache, KEY)
    assert back is not None
    same(model, back)
    assert back.graph.p1.flags.writeable and back.graph.p1.flags.aligned  # as a fresh load's arrays
    # The model keeps only the part of the entry holding its own arrays, not the names' bytes.
    data = (model_cache.models_dir(cache) / KEY.name).read_bytes()
    held = int.from_bytes(data[16:24], "little")
    assert {id(_root(a)) for a in _held_arrays(back)} == {id(_root(back.graph.p1))}
    assert _root(back.graph.p1).nbytes == len(data) - held


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _held_arrays(model: Model) -> list[np.ndarray]:
    out = [getattr(model.graph, f.name) for f in dataclasses.fields(model.graph)]
    if model.meta:
        dg, stages = model.meta["derivation"], model.meta["stages"]
        out += [dg.clause_rule, dg.clause_head, dg.body_offsets, dg.body, dg.alarms]
        out += [getattr(stages, f.name) for f in dataclasses.fields(stages) if f.name != "mode"]
        out += [model.meta[k] for k in ("tuple_var", "tuple_how", "clause_var", "kept_tuples")]
    return out


@st.composite
def plain_models(draw) -> Model:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    num_vars = draw(st.integers(1, 12))
    graph = from_factors(random_factors(rng, num_vars, draw(st.integers(1, 15))), num_vars)
    var_names = tuple(draw(st.lists(names, min_size=num_vars, max_size=num_vars)))
    alarms = tuple(draw(st.lists(st.integers(0, num_vars - 1), max_size=5)))
    labels = draw(st.dictionaries(st.integers(0, num_vars - 1), st.booleans(), max_size=4))
    source = draw(st.none() | names | names.map(lambda s: Path(s or ".")))
    return Model(graph=graph, var_names=var_names, alarms=alarms, labels=labels, source=source)


@st.composite
def derivation_models(draw) -> Model:
    seed = draw(st.integers(0, 10_000))
    dg = synthetic.layered(num_inputs=draw(st.integers(1, 8)), layers=draw(st.integers(1, 3)),
                           width=draw(st.integers(1, 6)), seed=seed)
    rng = np.random.default_rng(seed)
    # Distinct random tuple names (the index keeps them apart), rule texts present or not.
    dg.tuples = [f"{draw(names)}#{i}" if draw(st.booleans()) else t for i, t in enumerate(dg.tuples)]
    dg.rules = [Rule(r.name + draw(names), r.probability, draw(st.none() | names)) for r in dg.rules]
    alarms = [int(a) for a in dg.alarms]
    dg.labels = {a: bool(rng.integers(2)) for a in alarms[: draw(st.integers(0, 2))]}
    dg.truth = {a: bool(rng.integers(2)) for a in alarms if rng.random() < 0.7}
    dg.source = draw(st.none() | names)
    if draw(st.booleans()):
        dg.clause_lines = np.arange(dg.num_clauses, dtype=np.int32) + 1
    dg.annotations = draw(st.sampled_from([{}, {"relations": {"race": {"description": "d\0", "security": True,
                                                                         "severity": 7.5}}},
                                           {"locations": {"race(*)": [{"file": "a/b.c", "line": 3}]},
                                            "relations": {}}]))
    model = bayesnet.to_model(dg, compress=draw(st.booleans()),
                              cycles=draw(st.sampled_from(["cycles", "bingo"])),
                              extra_report={"duplicate_clauses_merged": draw(st.integers(0, 3))},
                              prune=draw(st.booleans()))
    if draw(st.booleans()):  # what `datalog.formats.model_from_derivation` adds
        model.meta["warnings"] = draw(st.lists(names, max_size=3))
        model.meta.update(dg.annotations)
    return model


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=plain_models())
def test_random_plain_models_come_back_exactly(tmp_path, model):
    round_trip(model, tmp_path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=derivation_models())
def test_random_models_of_derivation_graphs_come_back_exactly(tmp_path, model):
    round_trip(model, tmp_path)


def test_the_name_tables_keep_every_string_and_their_order(tmp_path):
    graph = from_factors(random_factors(np.random.default_rng(0), 4, 4), 4)
    for var_names in [("a", "", "\0", "b\0c"), ("x", "y", "z", "w"), ("\udc80", "é", "", "")]:
        round_trip(Model(graph=graph, var_names=var_names), tmp_path)


# What the schema cannot hold is not stored ---------------------------------------------------------------

def _weblech() -> Model:
    return loading.load(EXAMPLES / "weblech.json")


def _with(model: Model, **changes) -> Model:
    return dataclasses.replace(model, **changes)


@pytest.mark.parametrize("change", [
    lambda m: _with(m, meta={**m.meta, "odd": 1}),  # a meta entry beyond the schema
    lambda m: _with(m, meta={k: v for k, v in m.meta.items() if k != "stages"}),
    lambda m: _with(m, source=PurePosixPath("g.json")),  # a path class the reader would not give back
    lambda m: _with(m, alarms=tuple(np.int64(a) for a in m.alarms)),
    lambda m: _with(m, alarms=list(m.alarms)),
    lambda m: _with(m, labels={0: 1}),
    lambda m: _with(m, var_names=list(m.var_names)),
    lambda m: _with(m, graph=_with(m.graph, p1=m.graph.p1.astype(np.float32))),
    lambda m: _with(m, graph=_with(m.graph, edge_var=m.graph.edge_var.astype(np.int64))),
    lambda m: _with(m, meta={**m.meta, "report": {**m.meta["report"], "x": 1.5}}),
    lambda m: _with(m, meta={**m.meta, "tuple_names": m.meta["tuple_names"][::-1]}),
    lambda m: _with(m, meta={**m.meta, "warnings": ("a tuple",)}),
    lambda m: _with(m, meta={**m.meta, "locations": {"x": [1]}}),  # not the derivation graph's
])
def test_a_model_outside_the_schema_is_not_stored(tmp_path, change):
    model = change(_weblech())
    with pytest.raises(model_schema.Unsupported):
        model_schema.encode(model)
    assert model_cache.store(tmp_path, KEY, model) is None
    assert entries(tmp_path) == []


def test_annotations_json_cannot_give_back_are_not_stored(tmp_path):
    model = _weblech()
    model.meta["derivation"].annotations = {"relations": {"race": {"severity": float("nan")}}}
    with pytest.raises(model_schema.Unsupported):
        model_schema.encode(model)
    model.meta["derivation"].annotations = {"relations": {"race": ("a", "tuple")}}
    with pytest.raises(model_schema.Unsupported):
        model_schema.encode(model)


# Entries outside the schema are misses, signed or not, and import nothing -----------------------------

def _stored(cache: Path) -> tuple[Model, model_cache.Key, Path]:
    path = EXAMPLES / "weblech.json"
    fresh = loading.load(path)
    loading.load(path, cache_dir=cache)
    options = {"cycles": "cycles", "compress": True, "max_decompressed": None}
    key = model_cache.lookup_key(path, "json", options)
    assert model_cache.read(cache, key) is not None
    return fresh, key, the_entry(cache)


def _fields(change):
    return lambda header, arrays: change(header["fields"])


def _renamed(arrays: dict, old: str, new: str) -> None:
    items = list(arrays.items())
    arrays.clear()
    arrays.update((new if k == old else k, v) for k, v in items)


OUTSIDE = {
    # What a serializer of classes would write: a class and a module named by the entry.
    "a class by name": _fields(lambda f: f.update(kind={"$": "dc", "cls": "os:system"})),
    "a kind of its own": _fields(lambda f: f.update(kind="fastlbp.io.evil:Model")),
    "an extra field": _fields(lambda f: f.update(cls="subprocess:Popen")),
    "a meta key beyond the schema": _fields(lambda f: f["meta_keys"].append("os")),
    "a meta key twice": _fields(lambda f: f["meta_keys"].append("truth")),
    "a header key beyond the format": lambda h, a: h.update(module="importlib"),
    "an extra array": lambda h, a: a.update({"evil": np.zeros(3, np.uint8)}),
    "a missing array": lambda h, a: a.pop("dg.priors.values"),
    "an array renamed": lambda h, a: _renamed(a, "graph.p2", "graph.q2"),
    "arrays in another order": lambda h, a: a.update({"graph.p1": a.pop("graph.p1")}),
    "a source of a kind of its own": _fields(lambda f: f.update(source=["pathlib:Path", "x"])),
    "warnings that are not strings": _fields(lambda f: f.update(warnings=[1])),
    "a negative size": _fields(lambda f: f["sizes"].update(L=-1)),
    "a size beyond the schema": _fields(lambda f: f["sizes"].update(Z=0)),
}


@pytest.mark.parametrize("change", OUTSIDE.values(), ids=OUTSIDE.keys())
def test_a_signed_entry_outside_the_schema_is_a_miss_that_imports_nothing(tmp_path, monkeypatch, change):
    fresh, key, entry = _stored(tmp_path)
    rewrite(entry, change)  # signed with the folder's own key: only the schema can refuse it

    def no_import(name, *args, **kwargs):
        raise AssertionError(f"the reader imported {name!r}")

    monkeypatch.setattr(importlib, "import_module", no_import)
    before = set(sys.modules)
    assert model_cache.read(tmp_path, key) is None
    assert set(sys.modules) == before
    monkeypatch.undo()
    heard = []
    same(fresh, loading.load(EXAMPLES / "weblech.json", cache_dir=tmp_path, progress=heard.append))
    assert "storing in the model cache" in heard  # a miss, written again
    assert model_cache.read(tmp_path, key) is not None


def _retyped(arrays: dict, name: str, dtype) -> None:
    arrays[name] = arrays[name].astype(dtype)


WRONG = {
    "p1 as float32": lambda h, a: _retyped(a, "graph.p1", np.float32),
    "edge_var as int64": lambda h, a: _retyped(a, "graph.edge_var", np.int64),
    "tuple_how as int32": lambda h, a: _retyped(a, "meta.tuple_how", np.int32),
    "labels as uint8": lambda h, a: _retyped(a, "labels.values", np.uint8),
    "one edge short": lambda h, a: a.update({"graph.edge_var": a["graph.edge_var"][:-1]}),
    "one tuple more": lambda h, a: a.update({"meta.tuple_var": np.append(a["meta.tuple_var"], 0)}),
    "two-dimensional": lambda h, a: a.update({"graph.p2": a["graph.p2"].reshape(1, -1)}),
    "sizes that disagree": _fields(lambda f: f["sizes"].update(E=f["sizes"]["E"] + 1)),
    "name offsets past their bytes": lambda h, a: a["var_names.offsets"].__setitem__(-1, 10**6),
    "name offsets out of order": lambda h, a: a["dg.tuples.offsets"].__setitem__(1, 0),
    "a name without its terminator": lambda h, a: a["var_names.bytes"].__setitem__(-1, 65),
}


@pytest.mark.parametrize("change", WRONG.values(), ids=WRONG.keys())
def test_a_signed_entry_with_a_wrong_dtype_or_shape_is_a_miss(tmp_path, change):
    fresh, key, entry = _stored(tmp_path)
    rewrite(entry, change)
    assert model_cache.read(tmp_path, key) is None
    same(fresh, loading.load(EXAMPLES / "weblech.json", cache_dir=tmp_path))
    assert model_cache.read(tmp_path, key) is not None


def test_an_entry_rewritten_unchanged_is_still_a_hit(tmp_path):
    """The tests' own writer (from the docstring's layout) gives the reader's bytes: the misses above
    are the changes', not the rewriting's."""
    fresh, key, entry = _stored(tmp_path)
    data = entry.read_bytes()
    rewrite(entry, lambda header, arrays: None)
    assert entry.read_bytes() == data
    same(fresh, model_cache.read(tmp_path, key))


def test_entries_of_the_npz_format_are_removed_on_the_next_store(tmp_path):
    _stored(tmp_path)
    old = model_cache.models_dir(tmp_path) / ("a" * 20 + "-" + "b" * 40 + ".npz")
    old.write_bytes(b"PK\x03\x04 an entry of format 2")
    loading.load(EXAMPLES / "presto.json", cache_dir=tmp_path)
    assert not old.exists()
    assert len(entries(tmp_path)) == 2
