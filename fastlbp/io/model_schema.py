"""The model cache's schema: a loaded `Model` as named numpy arrays and a few plain values, and back.

`encode(model)` gives `(fields, arrays)`: `fields` a JSON-able dict of plain
values (str, int, bool, None, lists and dicts of them), `arrays` a list of
(name, numpy array); `decode(fields, arrays)` builds the model again by
calling the constructors of the classes below, named in this code and never
in an entry. `expected(fields)` is the list of (name, dtype, shape) the
schema requires for those fields: a reader compares an entry's arrays with it
before reading any (`fastlbp.io.model_cache`). Anything outside the schema is
`Unsupported` on writing (the model is then not stored) and a `BadEntry` on
reading (a miss). The schema's version is `fastlbp.io.model_cache.FORMAT_VERSION`
(and any edit of this file changes every key: it is one of `CODE_MODULES`).

Sizes (`fields["sizes"]`, non-negative ints) give every array's shape:

    V variables, F factors, E edges, A alarms, L labels (every model)
    T tuples, C clauses, B body entries, R rules, P priors, DA / DL / DT the
    derivation graph's alarms / labels / truth, K kept tuples, MT truth of
    variables (derivation graphs)
    NAME_bytes: the bytes of a table of strings

Arrays come in `expected`'s order: first those read into Python values (the
string tables, dicts and tuples), then those the model holds as they are
(`held`: the graph's, the derivation graph's, the stages', the meta maps).

A table of strings NAME (N strings) is two arrays: `NAME.bytes` (NAME_bytes,)
uint8, every string in UTF-8 (lone surrogates kept: "surrogatepass")
followed by a NUL byte, and `NAME.offsets` (N+1,) int64, where string i
starts; a string may hold NUL itself. A dict {int: value} NAME of N entries is
`NAME.keys` (N,) int64 and `NAME.values` (N,) in the dict's order.

Every model ("kind": "plain", e.g. a libDAI causal factor graph, `meta` empty):

    graph.factor_offsets (F+1,) int32   graph.var_offsets (V+1,) int32
    graph.edge_factor, edge_var, var_edges, slot_var, edge_slot (E,) int32
    graph.edge_is_head (E,) bool
    graph.factor_kind, factor_head (F,) int32   graph.p1, p2 (F,) float64
    var_names (V strings)   alarms (A,) int64   labels {int: bool} (L)
    fields: source (["none"|"str"|"path", str])

A model of a derivation graph ("kind": "derivation", `datalog.bayesnet.to_model`,
with `datalog.formats.model_from_derivation`'s warnings and annotations) adds
its `meta` (`fastlbp.core.model`, `datalog.bayesnet`):

    dg.tuples (T strings; also meta["tuple_names"], which must equal it)
    dg.rule_names (R strings), dg.rule_texts (R strings), dg.rule_has_text (R,) bool,
    dg.rule_probability (R,) float64
    dg.clause_rule, dg.clause_head (C,) int32   dg.body_offsets (C+1,) int64   dg.body (B,) int32
    dg.priors {int: float64} (P)   dg.alarms (DA,) int32   dg.labels (DL), dg.truth (DT) {int: bool}
    dg.clause_lines (C,) int32, when fields["clause_lines"]
    dg.annotations (annotations_bytes,) uint8: "locations"/"relations" as JSON text
    stages.tuple_stage (T,) int32, stages.clause_stage (C,) int32,
    stages.is_input (T,) bool, stages.clause_kept, stages.on_cycle (C,) bool
    meta.tuple_var (T,) int32, meta.tuple_how (T,) int8, meta.clause_var (C,) int32,
    meta.kept_tuples (K,) int64, meta.truth {int: bool} (MT)
    fields: dg_source, stages_mode, pruning, compressed, num_tuples, num_clauses,
    report and extra_report ({str: int}), warnings (list of str or None), meta_keys (meta's
    keys in order: the fixed ones, "warnings" and the annotations' keys)

Every value comes back with the type, dtype and bits it had (floats as float64
bits, dict and key orders kept). A model holding anything else (another class,
an extra `meta` key, an array of another dtype) is `Unsupported`: it is
loaded afresh each time, never stored wrongly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from datalog.cycles import Stages
from datalog.derivation import DerivationGraph, Rule
from fastlbp.core.graph import FactorGraph
from fastlbp.core.model import Model

I8, I32, I64, F64, BOOL, U8 = "|i1", "<i4", "<i8", "<f8", "|b1", "|u1"
GRAPH_FIELDS = (("factor_offsets", I32, "F+1"), ("edge_factor", I32, "E"), ("edge_var", I32, "E"),
                ("edge_is_head", BOOL, "E"), ("var_offsets", I32, "V+1"), ("var_edges", I32, "E"),
                ("slot_var", I32, "E"), ("edge_slot", I32, "E"), ("factor_kind", I32, "F"),
                ("factor_head", I32, "F"), ("p1", F64, "F"), ("p2", F64, "F"))
DG_ARRAYS = (("clause_rule", I32, "C"), ("clause_head", I32, "C"), ("body_offsets", I64, "C+1"),
             ("body", I32, "B"), ("alarms", I32, "DA"))
STAGE_ARRAYS = (("tuple_stage", I32, "T"), ("clause_stage", I32, "C"), ("is_input", BOOL, "T"),
                ("clause_kept", BOOL, "C"), ("on_cycle", BOOL, "C"))
META_ARRAYS = (("tuple_var", I32, "T"), ("tuple_how", I8, "T"), ("clause_var", I32, "C"),
               ("kept_tuples", I64, "K"))
# The meta `datalog.bayesnet.to_model` writes, in its order; then "warnings" and annotations may follow.
META_KEYS = ("derivation", "stages", "tuple_names", "tuple_var", "tuple_how", "clause_var", "kept_tuples",
             "pruning", "extra_report", "truth", "report", "compressed", "num_tuples", "num_clauses")
ANNOTATION_KEYS = ("locations", "relations")
HELD = {*(f"dg.{name}" for name, _, _ in DG_ARRAYS), "dg.clause_lines",
        *(f"meta.{name}" for name, _, _ in META_ARRAYS)}
# The plain values of each kind (`fields`), exactly: an entry with any other is refused.
FIELD_KEYS = {
    "plain": {"kind", "sizes", "source"},
    "derivation": {"kind", "sizes", "source", "dg_source", "stages_mode", "pruning", "compressed",
                   "num_tuples", "num_clauses", "report", "extra_report", "warnings", "meta_keys",
                   "clause_lines"},
}
# The classes' fields as this schema knows them: a class with other fields is refused both ways.
CLASS_FIELDS = {
    Model: ("graph", "var_names", "alarms", "labels", "source", "meta"),
    FactorGraph: tuple(name for name, _, _ in GRAPH_FIELDS),
    DerivationGraph: ("tuples", "rules", "clause_rule", "clause_head", "body_offsets", "body", "priors",
                      "alarms", "labels", "truth", "source", "clause_lines", "annotations"),
    Rule: ("name", "probability", "text"),
    Stages: (*(name for name, _, _ in STAGE_ARRAYS), "mode"),
}

Arrays = list[tuple[str, np.ndarray]]


class Unsupported(TypeError):
    """A model the schema cannot hold exactly (it is then not stored)."""


class BadEntry(ValueError):
    """An entry that is corrupt, truncated, of another key, of other code or outside the schema: a miss."""


# The schema -------------------------------------------------------------------------------------------

def _shape(spec: str, sizes: dict[str, int]) -> tuple[int, ...]:
    name, _, plus = spec.partition("+")
    return (sizes[name] + int(plus or 0),)


def _strings_spec(name: str, count: str) -> list[tuple[str, str, str]]:
    return [(f"{name}.bytes", U8, f"{name}_bytes"), (f"{name}.offsets", I64, f"{count}+1")]


def _dict_spec(name: str, values: str, count: str) -> list[tuple[str, str, str]]:
    return [(f"{name}.keys", I64, count), (f"{name}.values", values, count)]


def _specs(fields: dict) -> list[tuple[str, str, str]]:
    """(name, dtype, shape expression) of every array an entry with `fields` holds, in order: first those
    read into Python values (names, dicts), then those the model holds as they are (`held`)."""
    derivation = fields["kind"] == "derivation"
    out = _strings_spec("var_names", "V") + [("alarms", I64, "A")] + _dict_spec("labels", BOOL, "L")
    if derivation:
        out += _strings_spec("dg.tuples", "T") + _strings_spec("dg.rule_names", "R")
        out += _strings_spec("dg.rule_texts", "R") + [("dg.rule_has_text", BOOL, "R"),
                                                       ("dg.rule_probability", F64, "R")]
        out += _dict_spec("dg.priors", F64, "P") + _dict_spec("dg.labels", BOOL, "DL")
        out += _dict_spec("dg.truth", BOOL, "DT") + [("dg.annotations", U8, "annotations_bytes")]
        out += _dict_spec("meta.truth", BOOL, "MT")
    out += [(f"graph.{name}", dt, shape) for name, dt, shape in GRAPH_FIELDS]
    if derivation:
        out += [(f"dg.{name}", dt, shape) for name, dt, shape in DG_ARRAYS]
        if fields["clause_lines"]:
            out.append(("dg.clause_lines", I32, "C"))
        out += [(f"stages.{name}", dt, shape) for name, dt, shape in STAGE_ARRAYS]
        out += [(f"meta.{name}", dt, shape) for name, dt, shape in META_ARRAYS]
    return out


def held(name: str) -> bool:
    """Whether the model holds array `name` itself (the others are read into names, dicts and tuples):
    in `expected`'s order these come last, so a reader can keep them apart from the rest."""
    return name.startswith(("graph.", "stages.")) or name in HELD


def expected(fields: Any) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype string, shape) of every array the schema requires for `fields`, in order.

    Raises:
        BadEntry: `fields` is not of this schema (another kind, missing or negative sizes).
    """
    if type(fields) is not dict or type(fields.get("kind")) is not str or fields["kind"] not in FIELD_KEYS:
        raise BadEntry("not a model of a known kind")
    if set(fields) != FIELD_KEYS[fields["kind"]]:
        raise BadEntry("fields other than the schema's")
    if fields["kind"] == "derivation" and type(fields.get("clause_lines")) is not bool:
        raise BadEntry("clause_lines is not a bool")
    sizes = fields.get("sizes")
    specs = _specs(fields)
    needed = {shape.partition("+")[0] for _, _, shape in specs}
    if type(sizes) is not dict or set(sizes) != needed or any(
            type(n) is not int or n < 0 for n in sizes.values()):
        raise BadEntry("sizes do not fit the schema")
    return [(name, dt, _shape(shape, sizes)) for name, dt, shape in specs]


# Writing ---------------------------------------------------------------------------------------------

def _fields_of(obj: Any, cls: type) -> None:
    if type(obj) is not cls:
        raise Unsupported(f"a {type(obj).__qualname__} where the schema holds a {cls.__qualname__}")
    if tuple(f.name for f in dataclasses.fields(cls)) != CLASS_FIELDS[cls]:
        raise Unsupported(f"{cls.__qualname__} has other fields than the schema knows")


def _array(a: Any, dtype: str, what: str) -> np.ndarray:
    if type(a) is not np.ndarray or a.dtype != np.dtype(dtype) or a.ndim != 1:
        raise Unsupported(f"{what} is not a 1-d {np.dtype(dtype)} numpy array")
    return np.ascontiguousarray(a)


def _strings(names: Any, container: type, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, offsets) of a list or tuple of str (see the module docstring)."""
    if type(names) is not container or not all(type(s) is str for s in names):
        raise Unsupported(f"{what} is not a {container.__name__} of str")
    if not names:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    blob = np.frombuffer(("\0".join(names) + "\0").encode("utf-8", "surrogatepass"), np.uint8)
    ends = np.flatnonzero(blob == 0) + 1
    if ends.size != len(names):  # a string holds NUL: measure each
        ends = np.cumsum([len(s.encode("utf-8", "surrogatepass")) + 1 for s in names])
    return blob, np.concatenate([[0], ends]).astype(np.int64)


def _int_dict(d: Any, value_type: type, dtype: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    if type(d) is not dict or not all(type(k) is int for k in d) or not all(
            type(v) is value_type for v in d.values()):
        raise Unsupported(f"{what} is not a dict of int to {value_type.__name__}")
    try:
        return np.array(list(d), np.int64), np.array(list(d.values()), dtype)
    except OverflowError:
        raise Unsupported(f"{what} has a key beyond int64") from None


def _source(value: Any, what: str) -> list:
    if value is None:
        return ["none", ""]
    if type(value) is str:
        return ["str", value]
    if type(value) is type(Path()):
        return ["path", os.fspath(value)]
    raise Unsupported(f"{what} is a {type(value).__qualname__}")


def _plain(value: Any, what: str) -> None:
    """Refuses what JSON would not give back as it is (tuples, non-str keys, NaN, subclasses)."""
    if value is None or type(value) in (str, bool, int):
        return
    if type(value) is float:
        if not math.isfinite(value):
            raise Unsupported(f"{what} holds {value}")
        return
    if type(value) is list:
        for x in value:
            _plain(x, what)
        return
    if type(value) is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise Unsupported(f"{what} has a key that is not a str")
            _plain(v, what)
        return
    raise Unsupported(f"{what} holds a {type(value).__qualname__}")


def _counts(d: Any, what: str) -> dict:
    if type(d) is not dict or not all(type(k) is str and type(v) is int for k, v in d.items()):
        raise Unsupported(f"{what} is not a dict of str to int")
    return d


def encode(model: Any) -> tuple[dict, Arrays]:
    """`model` as (plain fields, named arrays) of the schema.

    Raises:
        Unsupported: `model` is not a `Model` the schema holds exactly.
    """
    _fields_of(model, Model)
    g = model.graph
    _fields_of(g, FactorGraph)
    arrays: Arrays = [(f"graph.{name}", _array(getattr(g, name), dt, name)) for name, dt, _ in GRAPH_FIELDS]
    arrays += zip(("var_names.bytes", "var_names.offsets"), _strings(model.var_names, tuple, "var_names"),
                  strict=True)
    if type(model.alarms) is not tuple or not all(type(a) is int for a in model.alarms):
        raise Unsupported("alarms is not a tuple of int")
    try:
        arrays.append(("alarms", np.array(model.alarms, np.int64)))
    except OverflowError:
        raise Unsupported("an alarm beyond int64") from None
    arrays += zip(("labels.keys", "labels.values"), _int_dict(model.labels, bool, BOOL, "labels"),
                  strict=True)
    fields: dict[str, Any] = {"kind": "plain", "source": _source(model.source, "source")}
    if type(model.meta) is not dict:
        raise Unsupported("meta is not a dict")
    if model.meta:
        fields["kind"] = "derivation"
        arrays += _encode_meta(model.meta, fields)
    by_name = dict(arrays)
    specs = _specs(fields)
    if len(by_name) != len(arrays) or set(by_name) != {name for name, _, _ in specs}:
        raise Unsupported("arrays other than the schema's")  # a bug of encode's, never a model's
    arrays = [(name, by_name[name]) for name, _, _ in specs]
    sizes: dict[str, int] = {}
    for (name, dt, shape), (_, a) in zip(specs, arrays, strict=True):
        size, _, plus = shape.partition("+")
        if sizes.setdefault(size, a.shape[0] - int(plus or 0)) != a.shape[0] - int(plus or 0):
            raise Unsupported(f"{name} has {a.shape[0]} entries, others say {sizes[size] + int(plus or 0)}")
        _array(a, dt, name)
    fields["sizes"] = sizes
    return fields, arrays


def _encode_meta(meta: dict, fields: dict) -> Arrays:
    keys = tuple(meta)
    dg, st = meta.get("derivation"), meta.get("stages")
    _fields_of(dg, DerivationGraph)
    _fields_of(st, Stages)
    annotations = dg.annotations
    if type(annotations) is not dict or not set(annotations) <= set(ANNOTATION_KEYS):
        raise Unsupported("the derivation graph's annotations are not locations and relations")
    _plain(annotations, "annotations")
    extra = [k for k in keys if k not in META_KEYS]
    if set(keys) - set(extra) != set(META_KEYS) or not set(extra) <= {"warnings", *annotations}:
        raise Unsupported(f"meta holds {sorted(map(str, extra))}, beyond the schema")
    for k in set(extra) & set(annotations):
        if meta[k] != annotations[k]:
            raise Unsupported(f"meta[{k!r}] is not the derivation graph's")
    warnings = meta.get("warnings")
    if warnings is not None and (type(warnings) is not list or not all(type(w) is str for w in warnings)):
        raise Unsupported("warnings is not a list of str")
    if meta["tuple_names"] != tuple(dg.tuples) or type(meta["tuple_names"]) is not tuple:
        raise Unsupported("tuple_names is not the derivation graph's tuples")
    for name in ("pruning", "compressed"):
        if type(meta[name]) is not bool:
            raise Unsupported(f"{name} is not a bool")
    for name in ("num_tuples", "num_clauses"):
        if type(meta[name]) is not int:
            raise Unsupported(f"{name} is not an int")
    if type(st.mode) is not str:
        raise Unsupported("the stages' mode is not a str")
    rules = dg.rules
    if type(rules) is not list:
        raise Unsupported("rules is not a list")
    for r in rules:
        _fields_of(r, Rule)
        if type(r.probability) is not float or not (r.text is None or type(r.text) is str):
            raise Unsupported("a rule's probability is not a float or its text not a str")
    fields.update(dg_source=_source(dg.source, "the derivation graph's source"), stages_mode=st.mode,
                  pruning=meta["pruning"], compressed=meta["compressed"], num_tuples=meta["num_tuples"],
                  num_clauses=meta["num_clauses"], report=_counts(meta["report"], "report"),
                  extra_report=_counts(meta["extra_report"], "extra_report"), warnings=warnings,
                  meta_keys=list(keys), clause_lines=dg.clause_lines is not None)
    arrays: Arrays = []
    arrays += zip(("dg.tuples.bytes", "dg.tuples.offsets"), _strings(dg.tuples, list, "tuples"), strict=True)
    arrays += zip(("dg.rule_names.bytes", "dg.rule_names.offsets"),
                  _strings([r.name for r in rules], list, "rule names"), strict=True)
    arrays += zip(("dg.rule_texts.bytes", "dg.rule_texts.offsets"),
                  _strings([r.text or "" for r in rules], list, "rule texts"), strict=True)
    arrays.append(("dg.rule_has_text", np.array([r.text is not None for r in rules], bool)))
    arrays.append(("dg.rule_probability", np.array([r.probability for r in rules], np.float64)))
    arrays += [(f"dg.{name}", _array(getattr(dg, name), dt, name)) for name, dt, _ in DG_ARRAYS]
    for name, value_type, dt in (("priors", float, F64), ("labels", bool, BOOL), ("truth", bool, BOOL)):
        arrays += zip((f"dg.{name}.keys", f"dg.{name}.values"),
                      _int_dict(getattr(dg, name), value_type, dt, name), strict=True)
    if dg.clause_lines is not None:
        arrays.append(("dg.clause_lines", _array(dg.clause_lines, I32, "clause_lines")))
    text = json.dumps(annotations, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass")
    arrays.append(("dg.annotations", np.frombuffer(text, np.uint8)))
    arrays += [(f"stages.{name}", _array(getattr(st, name), dt, name)) for name, dt, _ in STAGE_ARRAYS]
    arrays += [(f"meta.{name}", _array(meta[name], dt, name)) for name, dt, _ in META_ARRAYS]
    arrays += zip(("meta.truth.keys", "meta.truth.values"), _int_dict(meta["truth"], bool, BOOL, "truth"),
                  strict=True)
    return arrays


# Reading ---------------------------------------------------------------------------------------------

def _read_strings(arrays: dict[str, np.ndarray], name: str) -> list[str]:
    blob, offsets = arrays[f"{name}.bytes"], arrays[f"{name}.offsets"]
    n = offsets.shape[0] - 1
    if offsets[0] != 0 or offsets[-1] != blob.shape[0] or (n and (
            np.any(np.diff(offsets) < 1) or np.any(blob[offsets[1:] - 1] != 0))):
        raise BadEntry(f"{name}: offsets that do not fit its bytes")
    text = blob.tobytes().decode("utf-8", "surrogatepass")
    parts = text.split("\0")
    if len(parts) == n + 1:  # no string holds NUL: the terminators are the only ones
        del parts[-1]
        return parts
    bounds = offsets.tolist()
    raw = blob.tobytes()
    return [raw[a:b - 1].decode("utf-8", "surrogatepass")
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _read_dict(arrays: dict[str, np.ndarray], name: str) -> dict:
    return dict(zip(arrays[f"{name}.keys"].tolist(), arrays[f"{name}.values"].tolist(), strict=True))


def _read_source(value: Any) -> str | Path | None:
    if not (type(value) is list and len(value) == 2 and type(value[1]) is str):
        raise BadEntry("a source that is not [kind, str]")
    kind, text = value
    if kind == "none" and text == "":
        return None
    if kind == "str":
        return text
    if kind == "path":
        return Path(text)
    raise BadEntry(f"a source of kind {kind!r}")


def _typed(fields: dict, name: str, *types: type) -> Any:
    value = fields.get(name)
    if type(value) not in types:
        raise BadEntry(f"{name} is not a {' or '.join(t.__name__ for t in types)}")
    return value


def decode(fields: dict, arrays: dict[str, np.ndarray]) -> Model:
    """The model of `encode`'s output; `arrays` must already match `expected(fields)`.

    Raises:
        BadEntry: fields outside the schema.
    """
    graph = FactorGraph(**{name: arrays[f"graph.{name}"] for name, _, _ in GRAPH_FIELDS})
    var_names = tuple(_read_strings(arrays, "var_names"))
    alarms = tuple(arrays["alarms"].tolist())
    labels = _read_dict(arrays, "labels")
    source = _read_source(fields.get("source"))
    meta = {} if fields["kind"] == "plain" else _decode_meta(fields, arrays)
    return Model(graph=graph, var_names=var_names, alarms=alarms, labels=labels, source=source, meta=meta)


def _decode_meta(fields: dict, arrays: dict[str, np.ndarray]) -> dict:
    annotations = json.loads(arrays["dg.annotations"].tobytes().decode("utf-8", "surrogatepass"))
    if type(annotations) is not dict or not set(annotations) <= set(ANNOTATION_KEYS):
        raise BadEntry("annotations beyond the schema")
    keys = _typed(fields, "meta_keys", list)
    extra = [k for k in keys if k not in META_KEYS]
    if (len(set(keys)) != len(keys) or set(keys) - set(extra) != set(META_KEYS)
            or not set(extra) <= {"warnings", *annotations}):
        raise BadEntry("meta keys beyond the schema")
    warnings = _typed(fields, "warnings", list, type(None))
    if ("warnings" in keys) != (warnings is not None) or not all(type(w) is str for w in warnings or ()):
        raise BadEntry("warnings that do not fit the schema")
    counts = {name: _typed(fields, name, dict) for name in ("report", "extra_report")}
    for d in counts.values():
        if not all(type(v) is int for v in d.values()):
            raise BadEntry("a report that is not of counts")
    names = _read_strings(arrays, "dg.rule_texts")
    has_text = arrays["dg.rule_has_text"].tolist()
    rules = [Rule(name, p, text if has else None) for name, p, text, has in zip(
        _read_strings(arrays, "dg.rule_names"), arrays["dg.rule_probability"].tolist(), names, has_text,
        strict=True)]
    tuples = _read_strings(arrays, "dg.tuples")
    dg = DerivationGraph(
        tuples=tuples, rules=rules, **{name: arrays[f"dg.{name}"] for name, _, _ in DG_ARRAYS},
        priors=_read_dict(arrays, "dg.priors"), labels=_read_dict(arrays, "dg.labels"),
        truth=_read_dict(arrays, "dg.truth"), source=_read_source(fields.get("dg_source")),
        clause_lines=arrays.get("dg.clause_lines"), annotations=annotations)
    stages = Stages(**{name: arrays[f"stages.{name}"] for name, _, _ in STAGE_ARRAYS},
                    mode=_typed(fields, "stages_mode", str))
    values = {"derivation": dg, "stages": stages, "tuple_names": tuple(tuples),
              **{name: arrays[f"meta.{name}"] for name, _, _ in META_ARRAYS},
              "pruning": _typed(fields, "pruning", bool), "extra_report": counts["extra_report"],
              "truth": _read_dict(arrays, "meta.truth"), "report": counts["report"],
              "compressed": _typed(fields, "compressed", bool),
              "num_tuples": _typed(fields, "num_tuples", int),
              "num_clauses": _typed(fields, "num_clauses", int), "warnings": warnings, **annotations}
    return {k: values[k] for k in keys}


__all__ = ["encode", "decode", "expected", "held", "Unsupported", "BadEntry"]
