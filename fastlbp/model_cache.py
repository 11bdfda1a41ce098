"""The compiled-model cache: a loaded `Model` stored as numpy arrays + JSON, keyed by its input's bytes.

Loading a derivation graph (parse, validation, cycle elimination,
compression, factor-graph arrays) takes 1.6-2.4 s for data/ftp.json.gz on a
2-core CPU and about 3.5 s at 2M edges; reading the same model back from an
entry takes a few tens of milliseconds. `fastlbp.loading.load(path,
settings, cache_dir=...)` uses it:

    key = lookup_key(path, "json", settings)      # None: not cacheable (a pipe)
    model = read(cache_dir, key)                  # None: a miss, or a bad entry
    model = model or store(cache_dir, key, fresh_model)

An entry's key covers everything that decides the model: the sha256 of the
input's bytes (every regular file of a Bingo directory, with its name), the
path as given (the model records it as `source`), the format, the loading
settings (`cycles`, `compress`, the decompression limit), `FORMAT_VERSION`,
fastlbp's version and a digest of the loading code's source files (so an
edited loader never serves a model it would no longer build).

An entry is one `.npz` file (no pickle): the model as a JSON tree whose
numpy arrays (and long lists of names, as one UTF-8 blob) are members of
the archive, and a sha256 of all of it. A missing, truncated, corrupt or
stale entry (its checksum, key or a dataclass' fields do not match) is a
miss: the caller loads afresh and the entry is written again. Entries are
written to a temporary file and renamed, so a reader never sees half of one;
a folder that cannot be written leaves the cache off for that call. Entries
of the same path and settings with older contents are removed when a new one
is written, and the least recently used go once the folder holds more than
`MAX_BYTES`.

The tree holds what `Model` and its `meta` hold, generically: None, bool,
int, float, str, lists, tuples, dicts (any JSON-able keys), sets, numpy
arrays and scalars, paths, and dataclasses of fastlbp, datalog and
schedules (rebuilt field by field, without running their `__init__`). A
model holding anything else is not stored (`Unsupported`), never stored
wrongly.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import json
import math
import os
import stat
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

import numpy as np

FORMAT_VERSION = 1
# Entries beyond this many bytes in all are removed, least recently used first
# (a 20M-edge model takes about 1 GB).
MAX_BYTES = 8 << 30
# Modules whose dataclasses an entry may name; anything else is refused on reading.
DATACLASS_MODULES = ("fastlbp.", "datalog.", "schedules.")
# Lists of at least this many strings are stored as one UTF-8 blob: splitting it is about
# 10x faster than parsing the same names from JSON.
BLOB_MIN = 32
# Long lists (and dicts) of one Python scalar type are stored as one array of these dtypes.
SCALAR_DTYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int64), float: np.dtype(np.float64)}
# The source files whose text decides a loaded model: any edit to them changes every key.
CODE_MODULES = ("datalog", "fastlbp.graph", "fastlbp.model", "fastlbp.errors", "fastlbp.loading",
                "fastlbp.model_cache")

Progress = Callable[[str], None]


class Unsupported(TypeError):
    """A value the cache cannot store exactly (the model is then not stored)."""


class BadEntry(ValueError):
    """An entry that is corrupt, truncated, of another key or of other code: a miss."""


# Keys ----------------------------------------------------------------------

def _hash_file(h, path: Path) -> None:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)


def input_digest(path: str | os.PathLike) -> str | None:
    """sha256 of a file's bytes, or of a directory's regular files (sorted names and bytes).

    Returns None for what cannot be read twice (a pipe, a device) or cannot
    be read at all; the caller then loads without the cache.
    """
    p = Path(path)
    h = hashlib.sha256()
    try:
        info = p.stat()
        if stat.S_ISREG(info.st_mode):
            h.update(b"file\0")
            _hash_file(h, p)
        elif stat.S_ISDIR(info.st_mode):
            h.update(b"dir\0")
            for child in sorted(p.iterdir(), key=lambda c: c.name):
                if child.is_file():
                    name = child.name.encode("utf-8", "surrogateescape")
                    h.update(len(name).to_bytes(8, "little") + name)
                    _hash_file(h, child)
                    h.update(b"\0")
        else:
            return None
    except OSError:
        return None
    return h.hexdigest()


def code_digest() -> str:
    """sha256 of the source files of `CODE_MODULES` (packages: every .py file in them)."""
    h = hashlib.sha256()
    for name in CODE_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            h.update(f"{name}:missing".encode())
            continue
        origin = Path(spec.origin)
        files = sorted(origin.parent.glob("*.py")) if origin.name == "__init__.py" else [origin]
        for f in files:
            h.update(f"{name}/{f.name}\0".encode())
            try:
                h.update(f.read_bytes())
            except OSError:
                h.update(b"unreadable")
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class Key:
    """Where an entry lives and what it must match.

    Attributes:
        slot: sha256 of everything but the input's bytes (path, format,
            settings, versions, code); entries of one slot differ only in the
            input's contents, so a new one replaces the others.
        content: sha256 of the input's bytes.
    """

    slot: str
    content: str

    @property
    def name(self) -> str:
        return f"{self.slot[:20]}-{self.content[:40]}.npz"

    @property
    def full(self) -> str:
        return f"{self.slot}:{self.content}"


def lookup_key(path: str | os.PathLike, format: str, options: dict[str, Any]) -> Key | None:
    """The key of loading `path` as `format` with `options` (JSON-able), or None when not cacheable."""
    from fastlbp import __version__

    content = input_digest(path)
    if content is None:
        return None
    slot = json.dumps({"path": os.fspath(path), "format": format, "options": options,
                       "format_version": FORMAT_VERSION, "fastlbp": __version__, "code": code_digest()},
                      sort_keys=True, default=str)
    return Key(hashlib.sha256(slot.encode()).hexdigest(), content)


# Encoding --------------------------------------------------------------------

class _Encoder:
    def __init__(self):
        self.arrays: list[np.ndarray] = []

    def array(self, a: np.ndarray) -> int:
        self.arrays.append(a)
        return len(self.arrays) - 1

    def scalars(self, items: list | tuple) -> int | None:
        """Many Python ints, floats or bools of one type as one array (its index), else None."""
        if len(items) < BLOB_MIN:
            return None
        kind = type(items[0])
        if kind not in SCALAR_DTYPES or any(type(x) is not kind for x in items):
            return None
        try:
            return self.array(np.array(items, dtype=SCALAR_DTYPES[kind]))
        except OverflowError:  # an int beyond int64
            return None

    def __call__(self, obj: Any) -> Any:
        if obj is None or type(obj) in (bool, str):
            return obj
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise Unsupported("a numpy array of objects")
            return {"$": "array", "i": self.array(obj)}
        if isinstance(obj, np.generic):
            if isinstance(obj, np.object_):
                raise Unsupported("a numpy object scalar")
            return {"$": "scalar", "i": self.array(np.asarray(obj))}
        if type(obj) is int:
            return obj
        if type(obj) is float:
            if math.isnan(obj):  # JSON's NaN has no sign or payload: the 8 bytes, exactly
                return {"$": "nan", "v": struct.pack("<d", obj).hex()}
            # repr round-trips every other float; JSON's Infinity is read back by Python's json.
            return obj
        if type(obj) in (list, tuple):
            if len(obj) >= BLOB_MIN and all(type(s) is str for s in obj):
                blob = "\0".join(obj)
                if blob.count("\0") == len(obj) - 1:  # no name holds a NUL itself
                    data = np.frombuffer(blob.encode("utf-8", "surrogatepass"), dtype=np.uint8)
                    return {"$": "strs", "t": type(obj).__name__, "n": len(obj), "i": self.array(data)}
            packed = self.scalars(obj)
            if packed is not None:
                return {"$": "nums", "t": type(obj).__name__, "i": packed}
            items = [self(x) for x in obj]
            return items if type(obj) is list else {"$": "tuple", "v": items}
        if type(obj) is dict:
            if all(type(k) is str for k in obj) and "$" not in obj:
                return {k: self(v) for k, v in obj.items()}
            keys, values = self.scalars(list(obj)), self.scalars(list(obj.values()))
            if keys is not None and values is not None:  # e.g. {tuple: truth}: two arrays, not 2n nodes
                return {"$": "numdict", "k": keys, "v": values}
            return {"$": "dict", "k": [self(k) for k in obj], "v": [self(v) for v in obj.values()]}
        if type(obj) in (set, frozenset):
            return {"$": type(obj).__name__, "v": [self(x) for x in obj]}
        if isinstance(obj, PurePath):
            return {"$": "path", "v": os.fspath(obj)}
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            cls = type(obj)
            if not cls.__module__.startswith(DATACLASS_MODULES) or "<locals>" in cls.__qualname__:
                raise Unsupported(f"a {cls.__module__}.{cls.__qualname__}")
            names = [f.name for f in dataclasses.fields(obj)]
            for extra in set(getattr(obj, "__dict__", {})) - set(names):
                # A cached_property is recomputed on use; any other attribute would be lost.
                if not isinstance(getattr(cls, extra, None), functools.cached_property):
                    raise Unsupported(f"{cls.__qualname__}.{extra} is not a field")
            fields = {name: self(getattr(obj, name)) for name in names}
            return {"$": "dc", "cls": f"{cls.__module__}:{cls.__qualname__}", "f": fields}
        raise Unsupported(f"a value of type {type(obj).__module__}.{type(obj).__qualname__}")


def _dataclass(name: str) -> type:
    module, _, qualname = name.partition(":")
    if not module.startswith(DATACLASS_MODULES):
        raise BadEntry(f"a class of module {module!r}")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise BadEntry(f"no class {name}") from None
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise BadEntry(f"{name} is not a dataclass")
    return obj


class _Decoder:
    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays

    def scalars(self, i: int) -> list:
        """The Python values of array `i` (`tolist` gives back int, float or bool exactly)."""
        a = self.arrays[i]
        if a.ndim != 1 or a.dtype not in SCALAR_DTYPES.values():
            raise BadEntry("a packed list of the wrong shape")
        return a.tolist()

    def __call__(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self(x) for x in node]
        if not isinstance(node, dict):
            return node
        tag = node.get("$")
        if tag is None:
            return {k: self(v) for k, v in node.items()}
        if tag == "array":
            return self.arrays[node["i"]]
        if tag == "nan":
            return struct.unpack("<d", bytes.fromhex(node["v"]))[0]
        if tag == "scalar":
            return self.arrays[node["i"]][()]
        if tag == "strs":
            n = node["n"]
            names = bytes(self.arrays[node["i"]]).decode("utf-8", "surrogatepass").split("\0")
            if len(names) != n:
                raise BadEntry("a list of names of the wrong length")
            return tuple(names) if node["t"] == "tuple" else names
        if tag == "nums":
            values = self.scalars(node["i"])
            return tuple(values) if node["t"] == "tuple" else values
        if tag == "numdict":
            return dict(zip(self.scalars(node["k"]), self.scalars(node["v"]), strict=True))
        if tag == "tuple":
            return tuple(self(x) for x in node["v"])
        if tag == "dict":
            return dict(zip([self(k) for k in node["k"]], [self(v) for v in node["v"]], strict=True))
        if tag == "set":
            return {self(x) for x in node["v"]}
        if tag == "frozenset":
            return frozenset(self(x) for x in node["v"])
        if tag == "path":
            return Path(node["v"])
        if tag == "dc":
            cls = _dataclass(node["cls"])
            stored = node["f"]
            names = [f.name for f in dataclasses.fields(cls)]
            if sorted(names) != sorted(stored):
                raise BadEntry(f"{node['cls']} has other fields now")
            obj = object.__new__(cls)
            for name in names:  # as stored, without __init__/__post_init__ (frozen ones too)
                object.__setattr__(obj, name, self(stored[name]))
            return obj
        raise BadEntry(f"unknown tag {tag!r}")


def encode(obj: Any) -> tuple[bytes, list[np.ndarray]]:
    """`obj` as JSON bytes and the numpy arrays they refer to by position.

    Raises:
        Unsupported: `obj` holds a value the cache cannot store exactly.
    """
    enc = _Encoder()
    tree = enc(obj)
    try:
        text = json.dumps(tree, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as err:  # e.g. a str with lone surrogates is fine; this is not
        raise Unsupported(str(err)) from None
    return text.encode("utf-8", "surrogatepass"), enc.arrays


def decode(text: bytes, arrays: list[np.ndarray]) -> Any:
    """The inverse of `encode`. Raises BadEntry on a tree that does not fit the code."""
    try:
        tree = json.loads(text.decode("utf-8", "surrogatepass"))
        return _Decoder(arrays)(tree)
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise BadEntry(f"malformed entry: {err}") from None


def _checksum(text: bytes, arrays: list[np.ndarray]) -> bytes:
    h = hashlib.sha256()
    h.update(len(text).to_bytes(8, "little") + text)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.reshape(-1).view(np.uint8))
    return h.digest()


# Entries ---------------------------------------------------------------------

def models_dir(cache_dir: str | os.PathLike) -> Path:
    """Where entries live: `cache_dir/models`."""
    return Path(cache_dir) / "models"


def read(cache_dir: str | os.PathLike, key: Key, model_type: type | None = None) -> Any | None:
    """The object stored under `key`, or None (a miss, or an entry that is not exactly right).

    Args:
        model_type: when given, an entry holding anything else is a miss.
    """
    path = models_dir(cache_dir) / key.name
    try:
        with np.load(path, allow_pickle=False) as z:
            names = z.files
            header = json.loads(bytes(z["header"]).decode())
            if header.get("key") != key.full or header.get("format_version") != FORMAT_VERSION:
                raise BadEntry("another key")
            count = int(header["arrays"])
            if sorted(names) != sorted(["header", "text", "checksum", *(f"a{i}" for i in range(count))]):
                raise BadEntry("members missing")
            text = bytes(z["text"])
            arrays = [z[f"a{i}"] for i in range(count)]
            if bytes(z["checksum"]) != _checksum(text, arrays):
                raise BadEntry("checksum mismatch")
        obj = decode(text, arrays)
        if model_type is not None and not isinstance(obj, model_type):
            raise BadEntry("not a model")
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001  corrupt, truncated or stale (zip, npy, JSON, decode errors): a miss
        return None
    try:
        os.utime(path)  # least recently used goes first
    except OSError:
        pass
    return obj


def store(cache_dir: str | os.PathLike, key: Key, obj: Any, *, max_bytes: int = MAX_BYTES) -> Path | None:
    """Writes `obj` under `key` atomically; returns the entry, or None when it could not be stored.

    A folder that cannot be made or written, a full disk, or a value the
    cache cannot hold exactly (`Unsupported`) leaves no entry and raises nothing.
    """
    folder = models_dir(cache_dir)
    tmp = None
    try:
        text, arrays = encode(obj)
        header = json.dumps({"key": key.full, "format_version": FORMAT_VERSION, "arrays": len(arrays)})
        members = {"header": np.frombuffer(header.encode(), np.uint8),
                   "text": np.frombuffer(text, np.uint8),
                   "checksum": np.frombuffer(_checksum(text, arrays), np.uint8),
                   **{f"a{i}": a for i, a in enumerate(arrays)}}
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **members)
        final = folder / key.name
        os.replace(tmp, final)
        tmp = None
    except Exception:  # noqa: BLE001  unwritable, full, or a value it cannot hold: no entry, no crash
        return None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    _prune(folder, keep=final, slot=key.slot[:20], max_bytes=max_bytes)
    return final


def _prune(folder: Path, *, keep: Path, slot: str, max_bytes: int) -> None:
    """Removes older contents of `slot`, temporary files older than an hour, then LRU beyond max_bytes."""
    try:
        entries = []
        now = time.time()
        for p in folder.iterdir():
            info = p.stat()
            if p.name.startswith(".tmp-"):
                if now - info.st_mtime > 3600:
                    p.unlink(missing_ok=True)
            elif p.suffix == ".npz" and p != keep:
                if p.name.startswith(slot + "-"):
                    p.unlink(missing_ok=True)
                else:
                    entries.append((info.st_mtime, info.st_size, p))
        total = keep.stat().st_size + sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries):
            if total <= max_bytes:
                break
            p.unlink(missing_ok=True)
            total -= size
    except OSError:
        pass


def cached(cache_dir: str | os.PathLike | None, key: Key | None, fresh: Callable[[], Any], *,
           model_type: type | None = None, progress: Progress | None = None) -> Any:
    """`read(cache_dir, key)` if it holds an entry, else `fresh()`, stored under `key`.

    `cache_dir` or `key` None: `fresh()` alone. On a miss `progress` hears
    "loading", then "storing in the model cache"; on a hit nothing.
    """
    if cache_dir is not None and key is not None:
        hit = read(cache_dir, key, model_type)
        if hit is not None:
            return hit
    if progress is not None:
        progress("loading")
    obj = fresh()
    if cache_dir is not None and key is not None:
        if progress is not None:
            progress("storing in the model cache")
        store(cache_dir, key, obj)
    return obj


__all__ = ["FORMAT_VERSION", "MAX_BYTES", "Key", "lookup_key", "input_digest", "code_digest", "encode",
           "decode", "read", "store", "cached", "models_dir", "Unsupported", "BadEntry"]
