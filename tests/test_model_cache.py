"""The model cache: a cached load is the fresh load; bad entries are misses."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from pathlib import Path, PurePosixPath

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from datalog import causal_fg, formats, synthetic
from datalog.derivation import Rule
from fastlbp import loading, model_cache
from fastlbp.errors import InputError
from fastlbp.model import Model
from fastlbp.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "data"


def same(a, b, where="model") -> None:
    """Deep, type-exact equality: arrays by dtype, shape and bits; floats by bits; dataclasses by field."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), where
    elif isinstance(a, float):
        assert a == b or (math.isnan(a) and math.isnan(b)), where
        assert math.copysign(1, a) == math.copysign(1, b), where
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys"
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, set | frozenset):
        assert a == b, where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b, where


HIT = ["checking the model cache"]
MISS = ["checking the model cache", "loading", "storing in the model cache"]


class Events(list):
    def __call__(self, stage: str) -> None:
        self.append(stage)


def load_twice(path, settings=None, cache=None, **kwargs):
    """(fresh model, first cached load, second cached load, stages heard by the second)."""
    fresh = loading.load(path, settings, **kwargs)
    first = loading.load(path, settings, cache_dir=cache, **kwargs)
    heard = Events()
    second = loading.load(path, settings, cache_dir=cache, progress=heard, **kwargs)
    return fresh, first, second, heard


# Cached == fresh ---------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), inputs=st.integers(1, 12), layers=st.integers(1, 3),
       width=st.integers(1, 8), fmt=st.sampled_from(["json", "json.gz", "bingo", "causal_fg"]),
       cycles=st.sampled_from(["cycles", "bingo"]), compress=st.booleans(), labelled=st.integers(0, 3))
def test_cached_load_is_the_fresh_load(tmp_path_factory, seed, inputs, layers, width, fmt, cycles, compress,
                                       labelled):
    tmp = tmp_path_factory.mktemp("g")
    dg = synthetic.layered(num_inputs=inputs, layers=layers, width=width, seed=seed)
    rng = np.random.default_rng(seed)
    alarms = [int(a) for a in dg.alarms]
    dg.labels = {a: bool(rng.integers(2)) for a in alarms[:labelled]}
    dg.truth = {a: bool(rng.integers(2)) for a in alarms}
    if fmt == "bingo":
        path = tmp / "bingo"
        formats.save_bingo(dg, path)
    elif fmt == "causal_fg":
        path = tmp / "g.causal_fg"
        causal_fg.save(formats.model_from_derivation(dg), path)
    else:
        path = tmp / f"g.{fmt}"
        formats.save_json(dg, path)
    s = Settings(cycles=cycles, compress=compress)
    fresh, first, second, heard = load_twice(path, s, tmp / "cache")
    same(fresh, first)
    same(fresh, second)
    assert heard == HIT
    assert second.index == fresh.index  # cached properties are rebuilt on use


# race.json carries source locations and relation descriptions in its meta.
@pytest.mark.parametrize("name", ["weblech", "weblech.json", "weblech.causal_fg", "presto.json", "presto",
                                  "race.json"])
def test_shipped_examples(tmp_path, name):
    fresh, first, second, heard = load_twice(EXAMPLES / name, cache=tmp_path)
    same(fresh, second)
    assert heard == HIT


def test_without_a_cache_dir_nothing_is_written(tmp_path, monkeypatch):
    heard = Events()
    monkeypatch.chdir(tmp_path)
    loading.load(EXAMPLES / "weblech.json", progress=heard)
    assert heard == ["loading"]
    assert list(tmp_path.iterdir()) == []


# The generic encoding --------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
           | st.text(max_size=6) | st.sampled_from(["a\0b", "\udc80x", "é"]))
arrays = st.sampled_from([np.int8, np.int32, np.int64, np.uint16, np.float32, np.float64, np.bool_]).flatmap(
    lambda dt: st.lists(st.integers(0, 100), max_size=40).map(lambda xs: np.asarray(xs).astype(dt)))
numpy_scalars = st.sampled_from([np.int32(-3), np.float64(np.nan), np.bool_(True), np.float32(0.5)])
keys = st.integers(-5, 50) | st.text(max_size=4) | st.tuples(st.integers(0, 3), st.text(max_size=2))


def _trees(children):
    return (st.lists(children, max_size=40) | st.lists(children, max_size=40).map(tuple)
            | st.dictionaries(keys, children, max_size=40)
            | st.frozensets(st.integers(0, 9), max_size=4)
            | st.lists(st.text(max_size=5), min_size=30, max_size=70)
            | st.lists(st.integers(0, 2**40), min_size=30, max_size=70).map(tuple)
            | st.dictionaries(st.integers(0, 1000), st.booleans(), min_size=30, max_size=60))


values = st.recursive(scalars | arrays | numpy_scalars, _trees, max_leaves=60)


@settings(max_examples=100, deadline=None)
@given(values)
@example([-math.nan, {"x": -math.nan}, (math.inf, -0.0)])  # JSON's NaN has no sign: found by hypothesis
def test_encode_then_decode_gives_the_value_back(value):
    text, arrays = model_cache.encode(value)
    same(value, model_cache.decode(text, arrays), "value")


def test_dataclasses_come_back_field_by_field():
    rules = [Rule("R0", 0.5, "text"), Rule("R1")]
    text, arrays = model_cache.encode({"rules": rules, "path": PurePosixPath("a/b")})
    back = model_cache.decode(text, arrays)
    same(rules, back["rules"])
    assert back["path"] == Path("a/b")


@pytest.mark.parametrize("value", [object(), {"f": lambda: 1}, np.array([1, "a"], dtype=object),
                                   [complex(1, 2)], type("S", (str,), {})("x")])
def test_values_it_cannot_hold_are_refused(value):
    with pytest.raises(model_cache.Unsupported):
        model_cache.encode(value)


@dataclasses.dataclass
class Foreign:
    x: int = 1


def test_dataclasses_outside_fastlbp_are_refused_both_ways():
    with pytest.raises(model_cache.Unsupported):
        model_cache.encode(Foreign())
    tree = b'{"$":"dc","cls":"test_model_cache:Foreign","f":{"x":1}}'
    with pytest.raises(model_cache.BadEntry):
        model_cache.decode(tree, [])


def test_a_dataclass_whose_fields_changed_is_stale():
    tree = b'{"$":"dc","cls":"datalog.derivation:Rule","f":{"name":"R","probability":0.5}}'
    with pytest.raises(model_cache.BadEntry, match="other fields"):
        model_cache.decode(tree, [])


def test_a_model_holding_an_unsupported_value_is_loaded_but_not_stored(tmp_path, monkeypatch):
    real = loading.datalog_io.load

    def odd(*args, **kwargs):
        model = real(*args, **kwargs)
        model.meta["odd"] = object()
        return model

    monkeypatch.setattr(loading.datalog_io, "load", odd)
    model = loading.load(EXAMPLES / "weblech.json", cache_dir=tmp_path)
    assert "odd" in model.meta
    assert list(model_cache.models_dir(tmp_path).glob("*.npz")) == []


# Bad entries --------------------------------------------------------------------------

def the_entry(cache: Path) -> Path:
    (entry,) = model_cache.models_dir(cache).glob("*.npz")
    return entry


def truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def flip_middle(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x55
    p.write_bytes(bytes(data))


def flip_array_byte(p: Path) -> None:
    """A flipped bit inside an array's data (the zip's CRC is not what catches it: the checksum is)."""
    with np.load(p) as z:
        members = {k: z[k].copy() for k in z.files}
    a = members["a0"]
    a.reshape(-1).view(np.uint8)[0] ^= 1
    np.savez(p, **members)


def empty(p: Path) -> None:
    p.write_bytes(b"")


def garbage(p: Path) -> None:
    p.write_bytes(os.urandom(5000))


@pytest.mark.parametrize("damage", [truncate, flip_middle, flip_array_byte, empty, garbage])
def test_a_damaged_entry_is_a_miss_and_written_again(tmp_path, damage):
    path = EXAMPLES / "weblech.json"
    fresh = loading.load(path)
    loading.load(path, cache_dir=tmp_path)
    damage(the_entry(tmp_path))
    heard = Events()
    again = loading.load(path, cache_dir=tmp_path, progress=heard)
    same(fresh, again)
    assert heard == MISS
    heard.clear()
    same(fresh, loading.load(path, cache_dir=tmp_path, progress=heard))
    assert heard == HIT


def test_an_entry_of_another_key_under_this_name_is_a_miss(tmp_path):
    a, b = EXAMPLES / "weblech.json", EXAMPLES / "presto.json"
    loading.load(b, cache_dir=tmp_path)
    entry = the_entry(tmp_path)
    options = {"cycles": "cycles", "compress": True, "max_decompressed": None}
    key_a = model_cache.lookup_key(a, "json", options)
    shutil.copy(entry, model_cache.models_dir(tmp_path) / key_a.name)
    same(loading.load(a), loading.load(a, cache_dir=tmp_path))


def test_other_code_is_another_key(tmp_path, monkeypatch):
    path = EXAMPLES / "weblech.json"
    loading.load(path, cache_dir=tmp_path)
    monkeypatch.setattr(model_cache, "code_digest", lambda: "edited")
    heard = Events()
    loading.load(path, cache_dir=tmp_path, progress=heard)
    assert heard == MISS


# Keys -----------------------------------------------------------------------------------

def test_settings_format_path_and_limit_change_the_key(tmp_path):
    path = EXAMPLES / "weblech.json"
    base = {"cycles": "cycles", "compress": True, "max_decompressed": None}
    keys = {model_cache.lookup_key(path, "json", base),
            model_cache.lookup_key(path, "json", {**base, "cycles": "bingo"}),
            model_cache.lookup_key(path, "json", {**base, "compress": False}),
            model_cache.lookup_key(path, "json", {**base, "max_decompressed": 10**9}),
            model_cache.lookup_key(path, "causal_fg", base),
            model_cache.lookup_key(Path(os.path.relpath(path)), "json", base)}
    assert len({k.full for k in keys}) == 6
    assert len({k.content for k in keys}) == 1
    for s in (Settings(cycles="bingo"), Settings(compress=False), Settings()):
        same(loading.load(path, s), loading.load(path, s, cache_dir=tmp_path))
    assert len(list(model_cache.models_dir(tmp_path).glob("*.npz"))) == 3


def test_a_changed_input_is_loaded_afresh_and_replaces_its_entry(tmp_path):
    path = tmp_path / "g.json"
    one = synthetic.layered(num_inputs=5, layers=2, width=4, seed=1)
    two = synthetic.layered(num_inputs=5, layers=2, width=4, seed=2)
    formats.save_json(one, path)
    stamp = path.stat()
    cache = tmp_path / "cache"
    loading.load(path, cache_dir=cache)
    formats.save_json(two, path)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # same time stamp: the bytes decide
    same(loading.load(path), loading.load(path, cache_dir=cache))
    assert len(list(model_cache.models_dir(cache).glob("*.npz"))) == 1


def test_any_file_of_a_bingo_directory_is_part_of_the_key(tmp_path):
    d = tmp_path / "b"
    formats.save_bingo(synthetic.layered(num_inputs=5, layers=2, width=4, seed=3), d)
    cache = tmp_path / "cache"
    loading.load(d, cache_dir=cache)
    (d / "rule-prob.txt").write_text("\n".join(f"R{r}: 0.5" for r in range(6)) + "\n")
    fresh = loading.load(d)
    assert fresh.graph.p1.min() == 0.5
    same(fresh, loading.load(d, cache_dir=cache))


def test_input_digest_of_a_pipe_is_none(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    assert model_cache.input_digest(fifo) is None
    assert model_cache.input_digest(tmp_path / "missing") is None


def test_a_missing_path_is_an_input_error_with_a_cache(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        loading.load(tmp_path / "missing.json", cache_dir=tmp_path)


# The folder ---------------------------------------------------------------------------------

def test_an_unwritable_cache_folder_loads_without_the_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    path = EXAMPLES / "weblech.json"
    heard = Events()
    model = loading.load(path, cache_dir=blocker / "cache", progress=heard)
    same(loading.load(path), model)
    assert heard == MISS


def test_least_recently_used_entries_go_beyond_the_size_limit(tmp_path):
    cache = tmp_path / "cache"
    names = ["weblech.json", "presto.json", "weblech.causal_fg"]
    for name in names:
        loading.load(EXAMPLES / name, cache_dir=cache)
    entries = sorted(model_cache.models_dir(cache).glob("*.npz"), key=lambda p: p.stat().st_mtime)
    assert len(entries) == 3
    os.utime(entries[0], (1, 1))
    os.utime(entries[1], (2, 2))
    key = model_cache.lookup_key(EXAMPLES / "weblech.json", "json", {"cycles": "bingo", "compress": True,
                                                                      "max_decompressed": None})
    model = loading.load(EXAMPLES / "weblech.json")
    keep = entries[2].stat().st_size + 1
    new = model_cache.store(cache, key, model, max_bytes=keep + 1)
    left = set(model_cache.models_dir(cache).glob("*.npz"))
    assert new in left and entries[0] not in left


def test_a_read_returns_only_models_when_asked(tmp_path):
    key = model_cache.Key("s" * 64, "c" * 64)
    assert model_cache.store(tmp_path, key, {"not": "a model"}) is not None
    assert model_cache.read(tmp_path, key) == {"not": "a model"}
    assert model_cache.read(tmp_path, key, Model) is None
