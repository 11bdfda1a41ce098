"""The model cache: a cached load is the fresh load; bad entries are misses."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from model_cache_support import entries, parse, rewrite, same, the_entry

from datalog import causal_fg, formats, synthetic
from fastlbp.core.errors import InputError
from fastlbp.core.settings import Settings
from fastlbp.io import loading, model_cache, model_schema

EXAMPLES = Path(__file__).resolve().parents[1] / "data"


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


# What the schema cannot hold -----------------------------------------------------------

def test_a_model_holding_an_unsupported_value_is_loaded_but_not_stored(tmp_path, monkeypatch):
    real = loading.datalog_io.load

    def odd(*args, **kwargs):
        model = real(*args, **kwargs)
        model.meta["odd"] = object()
        return model

    monkeypatch.setattr(loading.datalog_io, "load", odd)
    model = loading.load(EXAMPLES / "weblech.json", cache_dir=tmp_path)
    assert "odd" in model.meta
    assert entries(tmp_path) == []


# Bad entries --------------------------------------------------------------------------

def truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def flip_middle(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x55
    p.write_bytes(bytes(data))


def flip_array_byte(p: Path) -> None:
    """A flipped bit inside an array's data, the entry otherwise as it was: its MAC no longer fits."""
    data = bytearray(p.read_bytes())
    header, arrays, _ = parse(p)
    p1 = arrays["graph.p1"].tobytes()
    at = data.index(p1, 16)
    data[at] ^= 1
    p.write_bytes(bytes(data))


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
    assert len(list(model_cache.models_dir(tmp_path).glob(f"*{model_cache.SUFFIX}"))) == 3


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
    assert len(list(model_cache.models_dir(cache).glob(f"*{model_cache.SUFFIX}"))) == 1


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
    stored = sorted(entries(cache), key=lambda p: p.stat().st_mtime)
    assert len(stored) == 3
    os.utime(stored[0], (1, 1))
    os.utime(stored[1], (2, 2))
    key = model_cache.lookup_key(EXAMPLES / "weblech.json", "json", {"cycles": "bingo", "compress": True,
                                                                      "max_decompressed": None})
    model = loading.load(EXAMPLES / "weblech.json")
    keep = stored[2].stat().st_size + 1
    new = model_cache.store(cache, key, model, max_bytes=keep + 1)
    left = set(entries(cache))
    assert new in left and stored[0] not in left


def test_only_models_are_stored(tmp_path):
    key = model_cache.Key("s" * 64, "c" * 64)
    assert model_cache.store(tmp_path, key, {"not": "a model"}) is None
    assert model_cache.read(tmp_path, key) is None
    with pytest.raises(TypeError, match="only fastlbp Models"):
        model_cache.cached(tmp_path, key, dict, model_type=dict)


# An input replaced while it is loaded (issue 29, item 1) ------------------------------------------

def _write_in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as f:  # the same inode, as `>` in a shell
        f.truncate(0)
        f.write(data)


def _write_by_rename(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # a new inode, as an analysis writing its output atomically


def _graph_bytes(tmp: Path, seed: int, name: str = "g.json") -> bytes:
    out = tmp / f"seed{seed}-{name}"
    formats.save_json(synthetic.layered(num_inputs=5, layers=2, width=4, seed=seed), out)
    return out.read_bytes()


def _swap_during_load(monkeypatch, target: Path, new: bytes, write, *, back: bytes | None = None) -> None:
    """The first fresh load replaces `target` by `new` before parsing (and by `back` after, when given)."""
    real = loading.datalog_io.load
    calls = []

    def load(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            write(target, new)
            model = real(*args, **kwargs)
            if back is not None:
                write(target, back)
            return model
        return real(*args, **kwargs)

    monkeypatch.setattr(loading.datalog_io, "load", load)


@pytest.mark.parametrize("write", [_write_in_place, _write_by_rename])
@pytest.mark.parametrize("aba", [False, True], ids=["swapped", "swapped-and-back"])
def test_a_file_replaced_while_loading_never_gives_its_model_to_the_other_bytes(tmp_path, monkeypatch, write,
                                                                                 aba):
    """Old code hashed A, then parsed B and stored B's model under A's key: A then got B's answers."""
    a, b = _graph_bytes(tmp_path, 1), _graph_bytes(tmp_path, 2)
    path, cache = tmp_path / "g.json", tmp_path / "cache"
    path.write_bytes(a)
    os.utime(path, ns=(10**18, 10**18))  # the swaps' times differ from this one, whatever the clock's grain
    fresh_a, fresh_b = loading.load(path), None
    _swap_during_load(monkeypatch, path, b, write, back=a if aba else None)
    heard = Events()
    loading.load(path, cache_dir=cache, progress=heard)  # parses B (and A is back, when aba)
    monkeypatch.undo()
    stored = list(model_cache.models_dir(cache).glob(f"*{model_cache.SUFFIX}"))
    path.write_bytes(a)
    same(fresh_a, loading.load(path, cache_dir=cache))  # old code: B's model, from the cache
    assert "storing in the model cache" not in heard and stored == []
    same(fresh_a, loading.load(path, cache_dir=cache))  # now from the cache
    path.write_bytes(b)
    fresh_b = loading.load(path)
    same(fresh_b, loading.load(path, cache_dir=cache))
    same(fresh_b, loading.load(path, cache_dir=cache))


def test_a_bingo_file_replaced_while_loading_is_not_stored(tmp_path, monkeypatch):
    d, cache = tmp_path / "b", tmp_path / "cache"
    formats.save_bingo(synthetic.layered(num_inputs=5, layers=2, width=4, seed=3), d)
    original = (d / "rule-prob.txt").read_bytes()
    fresh = loading.load(d)
    halves = ("\n".join(f"R{r}: 0.5" for r in range(6)) + "\n").encode()
    _swap_during_load(monkeypatch, d / "rule-prob.txt", halves, _write_by_rename)
    loading.load(d, cache_dir=cache)
    monkeypatch.undo()
    (d / "rule-prob.txt").write_bytes(original)
    same(fresh, loading.load(d, cache_dir=cache))
    heard = Events()
    same(fresh, loading.load(d, cache_dir=cache, progress=heard))
    assert heard == HIT


def test_a_bingo_directory_with_a_dangling_link_is_still_cached(tmp_path):
    d = tmp_path / "b"
    formats.save_bingo(synthetic.layered(num_inputs=5, layers=2, width=4, seed=3), d)
    (d / "notes.txt").symlink_to(tmp_path / "missing")
    fresh, first, second, heard = load_twice(d, cache=tmp_path / "cache")
    same(fresh, second)
    assert heard == HIT


def test_other_bytes_under_the_same_file_status_are_never_stored_under_the_key_hashed(tmp_path, monkeypatch):
    """Issue 41, item 1: `mv` of a same-size copy can reuse the freed inode number within one tick of the
    file system's clock, so size, inode and times match for other bytes. Old code hashed B, parsed A
    (swapped in, then B back), found the same status and hash after loading, and stored A's model under
    B's key: `fastlbp marginals` then served A's answers for B. The status is made equal here."""
    a, b = _graph_bytes(tmp_path, 1), _graph_bytes(tmp_path, 2)
    path, cache = tmp_path / "g.json", tmp_path / "cache"
    path.write_bytes(b)
    fresh_b = loading.load(path)
    monkeypatch.setattr(model_cache, "input_stamp", lambda _path: ("the same status",), raising=False)
    _swap_during_load(monkeypatch, path, a, _write_by_rename, back=b)
    loading.load(path, cache_dir=cache)  # hashes B, parses A, finds B back
    monkeypatch.undo()
    assert entries(cache) == []
    same(fresh_b, loading.load(path, cache_dir=cache))  # old code: A's model, from the cache
    heard = Events()
    same(fresh_b, loading.load(path, cache_dir=cache, progress=heard))
    assert heard == HIT


@pytest.mark.parametrize("fmt", ["json", "json.gz", "npz", "causal_fg", "bingo"])
def test_what_each_format_reads_is_what_its_key_hashed(tmp_path, fmt):
    """Every loader reads through `recorded_reads`, so each format is still stored (and then hit)."""
    dg = synthetic.layered(num_inputs=5, layers=2, width=4, seed=4)
    path = tmp_path / ("b" if fmt == "bingo" else f"g.{fmt}")
    if fmt == "bingo":
        formats.save_bingo(dg, path)
        (path / "notes.txt").write_text("not read by the loader, not part of the key\n")
    elif fmt == "npz":
        from datalog import npz

        npz.save(dg, path)
    elif fmt == "causal_fg":
        causal_fg.save(formats.model_from_derivation(dg), path)
    else:
        formats.save_json(dg, path)
    fresh, first, second, heard = load_twice(path, cache=tmp_path / "cache")
    same(fresh, second)
    assert heard == HIT
    if fmt == "bingo":
        (path / "notes.txt").write_text("changed\n")
        heard = Events()
        same(fresh, loading.load(path, cache_dir=tmp_path / "cache", progress=heard))
        assert heard == HIT


def test_a_read_outside_the_input_or_of_a_pipe_or_one_file_short_is_not_stored():
    key = model_cache.Key("s" * 64, "c" * 64, "", (("", "h1"),))
    assert key.matches_reads("g.json", [(Path("g.json"), "h1")])
    assert key.matches_reads("./g.json", [(Path("g.json"), "h1"), (Path("g.json"), "h1")])
    assert not key.matches_reads("g.json", [])
    assert not key.matches_reads("g.json", [(Path("g.json"), "h2")])
    assert not key.matches_reads("g.json", [(Path("g.json"), "h1"), (Path("g.json"), "h2")])
    assert not key.matches_reads("g.json", [(Path("g.json"), None)])
    assert not key.matches_reads("g.json", [(Path("g.json"), "h1"), (Path("other.json"), "h1")])
    d = model_cache.Key("s" * 64, "c" * 64, "", (("a.txt", "h1"), ("b.txt", None), ("c.txt", "h3")))
    assert d.matches_reads("d", [(Path("d/a.txt"), "h1"), (Path("d/c.txt"), "h3")])
    assert not d.matches_reads("d", [(Path("d/a.txt"), "h1")])  # c.txt hashed but not read
    assert not d.matches_reads("d", [(Path("d/a.txt"), "h1"), (Path("d/c.txt"), "h3"),
                                     (Path("d/b.txt"), "h")])


@pytest.mark.slow
def test_the_cli_race_loop_serves_no_model_of_other_bytes(tmp_path):
    """Issue 41's loop, 20 rounds: `mv` of same-size copies A, B over g.json while `fastlbp info` runs,
    then `fastlbp marginals` with A or B in place must answer as --no-cache does."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import reliability_cache_race

    result = reliability_cache_race.run(rounds=20, workdir=tmp_path)
    assert result["wrong"] == 0 and result["rounds"] == 20


# Entries that must not be trusted (issue 29, item 2) -----------------------------------------------

def forge(entry: Path, p1: np.ndarray) -> None:
    """Lowers one rule probability in the entry and puts a plain sha256 of it where the MAC goes
    (what anyone can compute; fastlbp 0 checked such a checksum)."""

    def lower(header, arrays):
        assert np.array_equal(arrays["graph.p1"], p1)
        arrays["graph.p1"][0] = 0.01

    rewrite(entry, lower, sign=False)


def test_a_forged_entry_with_a_recomputed_checksum_is_not_served(tmp_path):
    path = EXAMPLES / "weblech.json"
    fresh = loading.load(path)  # what --no-cache answers
    loading.load(path, cache_dir=tmp_path)
    forge(the_entry(tmp_path), fresh.graph.p1)
    heard = Events()
    model = loading.load(path, cache_dir=tmp_path, progress=heard)
    same(fresh, model)
    assert heard == MISS
    same(fresh, loading.load(path, cache_dir=tmp_path))


def test_an_entry_signed_with_another_folders_key_is_a_miss(tmp_path):
    path = EXAMPLES / "weblech.json"
    one, two = tmp_path / "one", tmp_path / "two"
    loading.load(path, cache_dir=one)
    loading.load(EXAMPLES / "presto.json", cache_dir=two)  # two has a key of its own
    entry = the_entry(one)
    shutil.copy(entry, model_cache.models_dir(two) / entry.name)
    heard = Events()
    same(loading.load(path), loading.load(path, cache_dir=two, progress=heard))
    assert heard == MISS


def test_the_header_binds_the_input_hash_the_code_and_the_format(tmp_path):
    path = EXAMPLES / "weblech.json"
    loading.load(path, cache_dir=tmp_path)
    header, arrays, _ = parse(the_entry(tmp_path))
    assert header["input"] == model_cache.input_digest(path)
    assert header["code"] == model_cache.code_digest()
    assert header["format_version"] == model_cache.FORMAT_VERSION
    assert list(arrays) == [name for name, _, _ in model_schema.expected(header["fields"])]
    assert "graph.p1" in arrays and "checksum" not in header


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


@pytest.mark.parametrize("where,mode", [(".", 0o770), (".", 0o757), ("models", 0o775)])
def test_a_cache_folder_others_can_write_is_neither_read_nor_written(tmp_path, capsys, where, mode):
    path = EXAMPLES / "weblech.json"
    cache = tmp_path / "cache"
    loading.load(path, cache_dir=cache)  # a good entry, which must not be read now either
    entry = the_entry(cache)
    stamp = entry.stat().st_mtime_ns
    capsys.readouterr()
    (cache / where).chmod(mode)
    heard = Events()
    same(loading.load(path), loading.load(path, cache_dir=cache, progress=heard))
    assert heard == ["checking the model cache", "loading"]
    (line,) = _warnings(capsys.readouterr().err)
    assert "writable by group or others" in line and str(cache) in line and "without the model cache" in line
    loading.load(EXAMPLES / "presto.json", cache_dir=cache)  # nothing written either; said once
    assert _warnings(capsys.readouterr().err) == []
    assert [p.name for p in model_cache.models_dir(cache).glob(f"*{model_cache.SUFFIX}")] == [entry.name]
    assert entry.stat().st_mtime_ns == stamp
    assert model_cache.read(cache, model_cache.lookup_key(path, "json", OPTIONS)) is None


OPTIONS = {"cycles": "cycles", "compress": True, "max_decompressed": None}


def test_a_cache_folder_of_another_user_is_not_used(tmp_path, capsys, monkeypatch):
    path = EXAMPLES / "weblech.json"
    loading.load(path, cache_dir=tmp_path)
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)  # the folder is now someone else's
    heard = Events()
    same(loading.load(path), loading.load(path, cache_dir=tmp_path, progress=heard))
    assert heard == ["checking the model cache", "loading"]
    (line,) = _warnings(capsys.readouterr().err)
    assert "owned by another user" in line


def test_a_symbolic_link_to_the_cache_folder_is_followed_but_models_may_not_be_one(tmp_path, capsys):
    real, link = tmp_path / "real", tmp_path / "link"
    loading.load(EXAMPLES / "weblech.json", cache_dir=real)
    link.symlink_to(real)
    heard = Events()
    loading.load(EXAMPLES / "weblech.json", cache_dir=link, progress=heard)
    assert heard == HIT
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / "models").symlink_to(model_cache.models_dir(real))
    heard.clear()
    loading.load(EXAMPLES / "weblech.json", cache_dir=other, progress=heard)
    assert heard == ["checking the model cache", "loading"]
    (line,) = _warnings(capsys.readouterr().err)
    assert "symbolic link" in line


def test_the_key_is_made_once_with_mode_0600_and_a_key_others_can_read_is_refused(tmp_path, capsys):
    loading.load(EXAMPLES / "weblech.json", cache_dir=tmp_path)
    key = model_cache.models_dir(tmp_path) / "key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32
    assert (model_cache.models_dir(tmp_path).stat().st_mode & 0o777) == 0o700
    secret = key.read_bytes()
    loading.load(EXAMPLES / "presto.json", cache_dir=tmp_path)
    assert key.read_bytes() == secret
    key.chmod(0o640)
    heard = Events()
    loading.load(EXAMPLES / "weblech.json", cache_dir=tmp_path, progress=heard)
    assert heard == ["checking the model cache", "loading"]
    (line,) = _warnings(capsys.readouterr().err)
    assert "readable by group or others" in line
    key.unlink()  # a new key: the old entries are misses, written again
    heard.clear()
    loading.load(EXAMPLES / "weblech.json", cache_dir=tmp_path / ".", progress=heard)
    assert heard == MISS and key.read_bytes() != secret


def test_folder_problem(tmp_path):
    from fastlbp.io import cache_safety

    assert cache_safety.folder_problem(tmp_path / "missing") is None
    assert cache_safety.folder_problem(tmp_path) is None
    tmp_path.chmod(0o777)
    try:
        assert "writable by group or others" in cache_safety.folder_problem(tmp_path)
    finally:
        tmp_path.chmod(0o700)


def test_the_cli_warns_once_and_runs_without_an_unsafe_cache(tmp_path):
    import subprocess
    import sys

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cache.chmod(0o775)
    env = {**os.environ, "FASTLBP_CACHE": str(cache), "JAX_PLATFORMS": "cpu"}

    def info(*args):
        return subprocess.run([sys.executable, "-m", "fastlbp", "info", str(EXAMPLES / "weblech.json"),
                               *args],
                              capture_output=True, text=True, env=env, timeout=300)

    done, plain = info(), info("--no-cache")
    assert done.returncode == 0, done.stderr
    assert done.stdout == plain.stdout
    (line,) = _warnings(done.stderr)
    assert "writable by group or others" in line and "without the model and compilation caches" in line
    assert not (cache / "models").exists()


# Entries that are not regular files (issue 29, item 10) ---------------------------------------------

def _in_a_thread(fn, seconds=60.0):
    import threading

    out = {}
    t = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    t.start()
    t.join(seconds)
    return t.is_alive(), out.get("value")


def _release(fifo: Path) -> None:
    """Lets a reader blocked on opening `fifo` go (old code): a writer opens and closes it."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


@pytest.mark.parametrize("kind", ["fifo", "link-to-fifo", "link-to-file", "folder"])
def test_an_entry_that_is_not_a_regular_file_is_a_miss_and_never_blocks(tmp_path, kind):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    path, cache = EXAMPLES / "weblech.json", tmp_path / "cache"
    fresh = loading.load(path)
    loading.load(path, cache_dir=cache)
    entry = the_entry(cache)
    entry.unlink()
    fifo, outside = tmp_path / "fifo", tmp_path / "outside.npz"
    os.mkfifo(fifo)
    outside.write_bytes(b"not yours")
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "link-to-fifo":
        entry.symlink_to(fifo)
    elif kind == "link-to-file":
        entry.symlink_to(outside)
    else:
        entry.mkdir()
    heard = Events()
    try:
        blocked, model = _in_a_thread(lambda: loading.load(path, cache_dir=cache, progress=heard))
    finally:
        _release(entry if kind == "fifo" else fifo)
    assert not blocked, "a load blocked on a cache entry that is not a regular file"
    same(fresh, model)
    assert heard[:2] == MISS[:2]
    assert outside.read_bytes() == b"not yours"  # never written through the link
    if kind != "folder":  # the name now holds a real entry
        assert entry.is_file() and not entry.is_symlink()
        heard.clear()
        same(fresh, loading.load(path, cache_dir=cache, progress=heard))
        assert heard == HIT


def test_a_key_that_is_a_fifo_turns_the_cache_off_without_blocking(tmp_path, capsys):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    models = model_cache.models_dir(tmp_path)
    models.mkdir(mode=0o700)
    os.mkfifo(models / "key", 0o600)
    try:
        blocked, model = _in_a_thread(lambda: loading.load(EXAMPLES / "weblech.json", cache_dir=tmp_path))
    finally:
        _release(models / "key")
    assert not blocked
    same(loading.load(EXAMPLES / "weblech.json"), model)
    (line,) = _warnings(capsys.readouterr().err)
    assert "not a regular file" in line
