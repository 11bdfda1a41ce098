"""The compiled-model cache: a loaded `Model` stored as numpy arrays + JSON, keyed by its input's bytes.

Loading a derivation graph (parse, validation, cycle elimination,
compression, factor-graph arrays) takes 1.6-2.4 s for data/ftp.json.gz on a
2-core CPU and about 3.5 s at 2M edges; reading the same model back from an
entry takes a few tens of milliseconds. `fastlbp.io.loading.load(path,
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

An entry is one `.npz` file (no pickle): a header (the key, the sha256 of
the input's bytes, the code digest, `FORMAT_VERSION`), the model as a JSON
tree whose numpy arrays (and long lists of names, as one UTF-8 blob) are
members of the archive, and an HMAC-SHA256 of all of it under the folder's
secret key (`fastlbp.io.cache_safety`: `models/key`, 0600, made on first use).
A missing, truncated, corrupt, forged or stale entry (its MAC, key, input
hash or a dataclass' fields do not match), or one that is not a regular file
of this user's (a FIFO, a symbolic link: never opened through), is a miss:
the caller loads afresh and the entry is written again. Entries are written
to a temporary file and renamed over the name (never through it), so a reader
never sees half of one; a folder that cannot be written leaves the cache off
for that call. Entries of the same path and settings with older contents are
removed when a new one is written, and the least recently used go once the
folder holds more than `MAX_BYTES`.

What the cache trusts: the folder and its `models/` must be this user's and
not writable by group or others (else they are neither read nor written, with
one warning on stderr); an entry must carry the MAC of the folder's key. A
model is stored only when the input's bytes (and, cheaply, its status: inode,
size, times) are the same after loading as when hashed for the key: a file
replaced while it was being loaded is loaded, but not stored under either key.

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
import hmac
import importlib
import importlib.util
import json
import math
import os
import stat
import struct
import time
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from fastlbp.io import cache_safety

# 2: entries signed with the folder's key (HMAC), their header names the input's hash and the code.
FORMAT_VERSION = 2
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
CODE_MODULES = ("datalog", "fastlbp.core.graph", "fastlbp.core.model", "fastlbp.core.errors",
                "fastlbp.io.loading",
                "fastlbp.io.model_cache")

Progress = Callable[[str], None]


class Unsupported(TypeError):
    """A value the cache cannot store exactly (the model is then not stored)."""


class BadEntry(ValueError):
    """An entry that is corrupt, truncated, of another key or of other code: a miss."""


# Keys ----------------------------------------------------------------------

def _hash_file(h, path: Path) -> None:
    """Adds a regular file's bytes to `h`; anything else (a FIFO, a device) is an OSError, never blocking."""
    fd = os.open(path, cache_safety.READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
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


def _status(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def input_stamp(path: str | os.PathLike) -> tuple | None:
    """The status of a file (inode, size, times), or of a directory and its regular files, or None.

    Taken before the input is hashed and again after it is loaded: any write or
    rename in between changes it (the change time is set by the system on every
    write and cannot be set back), even one that restores the same bytes.
    """
    p = Path(path)
    try:
        info = p.stat()
        stamp: list = [_status(info)]
        if stat.S_ISDIR(info.st_mode):
            for child in sorted(p.iterdir(), key=lambda c: c.name):
                try:
                    child_info = child.stat()
                except OSError:  # a dangling link: not part of the digest either
                    stamp.append((child.name, None))
                    continue
                if stat.S_ISREG(child_info.st_mode):
                    stamp.append((child.name, _status(child_info)))
    except OSError:
        return None
    return tuple(stamp)


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
        code: `code_digest()` when the key was made (also inside `slot`),
            recorded in the entry's header.
        stamp: `input_stamp` of the input, taken before it was hashed (not part
            of the entry's name): `cached` stores a fresh model only when
            the input's key and stamp are the same after loading it.
    """

    slot: str
    content: str
    code: str = ""
    stamp: tuple | None = dataclasses.field(default=None, compare=False)

    @property
    def name(self) -> str:
        return f"{self.slot[:20]}-{self.content[:40]}.npz"

    @property
    def full(self) -> str:
        return f"{self.slot}:{self.content}"


def lookup_key(path: str | os.PathLike, format: str, options: dict[str, Any]) -> Key | None:
    """The key of loading `path` as `format` with `options` (JSON-able), or None when not cacheable."""
    from fastlbp import __version__

    stamp = input_stamp(path)  # first: a write while hashing changes the stamp taken after loading
    content = input_digest(path)
    if content is None or stamp is None:
        return None
    code = code_digest()
    slot = json.dumps({"path": os.fspath(path), "format": format, "options": options,
                       "format_version": FORMAT_VERSION, "fastlbp": __version__, "code": code},
                      sort_keys=True, default=str)
    return Key(hashlib.sha256(slot.encode()).hexdigest(), content, code, stamp)


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


def _mac(secret: bytes, header: bytes, text: bytes, arrays: list[np.ndarray]) -> bytes:
    """HMAC-SHA256 under the folder's key of the header, the tree and every array (dtype, shape, bytes)."""
    h = hmac.new(secret, b"fastlbp model cache entry\0", hashlib.sha256)
    for part in (header, text):
        h.update(len(part).to_bytes(8, "little") + part)
    for a in arrays:
        a = np.ascontiguousarray(a)
        form = json.dumps([a.dtype.str, list(a.shape)]).encode()
        h.update(len(form).to_bytes(8, "little") + form)
        h.update(a.nbytes.to_bytes(8, "little"))
        h.update(a.reshape(-1).view(np.uint8))
    return h.digest()


# Entries ---------------------------------------------------------------------

def models_dir(cache_dir: str | os.PathLike) -> Path:
    """Where entries live: `cache_dir/models`."""
    return Path(cache_dir) / "models"


def _folder(cache_dir: str | os.PathLike, *, create: bool) -> tuple[int, bytes] | None:
    """(descriptor of the checked models folder, its key), or None: no cache for this call.

    An unsafe folder or key (`cache_safety.Unsafe`) is warned about once on stderr.
    """
    try:
        fd = cache_safety.open_models(cache_dir, create=create)
        if fd is None:
            return None
        try:
            key = cache_safety.secret(fd, create=create, where=str(models_dir(cache_dir)))
        except BaseException:
            os.close(fd)
            raise
    except cache_safety.Unsafe as err:
        cache_safety.warn(cache_dir, err.reason)
        return None
    if key is None:
        os.close(fd)
        return None
    return fd, key


def usable(cache_dir: str | os.PathLike) -> bool:
    """Whether `cache_dir` may be used (`cache_safety.folder_problem`); if not, says why once on stderr."""
    problem = cache_safety.folder_problem(cache_dir)
    if problem is not None:
        cache_safety.warn(cache_dir, problem)
    return problem is None


def read(cache_dir: str | os.PathLike, key: Key, model_type: type | None = None) -> Any | None:
    """The object stored under `key`, or None (a miss, or an entry that is not exactly right).

    Only a regular file of this user's, not writable by others, is opened (never
    through a symbolic link, never blocking on a FIFO); its header must name
    `key` and its input hash, and its MAC be the folder key's.

    Args:
        model_type: when given, an entry holding anything else is a miss.
    """
    folder = _folder(cache_dir, create=False)
    if folder is None:
        return None
    dir_fd, secret = folder
    fd = None
    try:
        fd = os.open(key.name, cache_safety.READ_FLAGS, dir_fd=dir_fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or cache_safety.owner_problem(info, key.name):
            raise BadEntry("not a regular file of this user's")
        with open(fd, "rb", closefd=False) as f, np.load(f, allow_pickle=False) as z:
            names = z.files
            header_bytes = bytes(z["header"])
            header = json.loads(header_bytes.decode())
            if (header.get("key") != key.full or header.get("input") != key.content
                    or header.get("format_version") != FORMAT_VERSION
                    or (key.code and header.get("code") != key.code)):
                raise BadEntry("another key, input or code")
            count = int(header["arrays"])
            if sorted(names) != sorted(["header", "text", "mac", *(f"a{i}" for i in range(count))]):
                raise BadEntry("members missing")
            text = bytes(z["text"])
            arrays = [z[f"a{i}"] for i in range(count)]
            if not hmac.compare_digest(bytes(z["mac"]), _mac(secret, header_bytes, text, arrays)):
                raise BadEntry("not signed with this folder's key")
        obj = decode(text, arrays)
        if model_type is not None and not isinstance(obj, model_type):
            raise BadEntry("not a model")
        try:
            os.utime(fd)  # least recently used goes first
        except OSError:
            pass
    except Exception:  # noqa: BLE001  missing, not a file, corrupt, truncated, forged or stale: a miss
        return None
    finally:
        if fd is not None:
            os.close(fd)
        os.close(dir_fd)
    return obj


def store(cache_dir: str | os.PathLike, key: Key, obj: Any, *, max_bytes: int = MAX_BYTES) -> Path | None:
    """Writes `obj` under `key` atomically; returns the entry, or None when it could not be stored.

    The entry is written to a new temporary file (mode 0600) and renamed over
    `key.name`: whatever was there (a FIFO, a symbolic link) is replaced, never
    written through. A folder that cannot be made or written or must not be
    trusted (`cache_safety`), a full disk, or a value the cache cannot hold
    exactly (`Unsupported`) leaves no entry and raises nothing.
    """
    try:
        text, arrays = encode(obj)
    except Exception:  # noqa: BLE001  a value it cannot hold: no entry, no crash
        return None
    folder = _folder(cache_dir, create=True)
    if folder is None:
        return None
    dir_fd, secret = folder
    tmp = None
    try:
        from fastlbp import __version__

        header = json.dumps({"key": key.full, "input": key.content, "code": key.code,
                             "format_version": FORMAT_VERSION, "fastlbp": __version__,
                             "arrays": len(arrays)}).encode()
        members = {"header": np.frombuffer(header, np.uint8),
                   "text": np.frombuffer(text, np.uint8),
                   "mac": np.frombuffer(_mac(secret, header, text, arrays), np.uint8),
                   **{f"a{i}": a for i, a in enumerate(arrays)}}
        tmp = f".tmp-{os.urandom(8).hex()}.npz"
        fd = os.open(tmp, cache_safety.CREATE_FLAGS, 0o600, dir_fd=dir_fd)
        with open(fd, "wb") as f:
            np.savez(f, **members)
        os.replace(tmp, key.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = None
        _prune(dir_fd, keep=key.name, slot=key.slot[:20], max_bytes=max_bytes)
    except Exception:  # noqa: BLE001  unwritable, full: no entry, no crash
        return None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
        os.close(dir_fd)
    return models_dir(cache_dir) / key.name


def _prune(dir_fd: int, *, keep: str, slot: str, max_bytes: int) -> None:
    """Removes older contents of `slot`, temporary files older than an hour, then LRU beyond max_bytes."""
    try:
        entries = []
        now = time.time()
        with os.scandir(dir_fd) as it:
            listed = list(it)
        for p in listed:
            info = p.stat(follow_symlinks=False)
            if p.name.startswith(".tmp-"):
                if now - info.st_mtime > 3600:
                    os.unlink(p.name, dir_fd=dir_fd)
            elif p.name.endswith(".npz") and p.name != keep:
                if p.name.startswith(slot + "-"):
                    os.unlink(p.name, dir_fd=dir_fd)
                elif stat.S_ISREG(info.st_mode):
                    entries.append((info.st_mtime, info.st_size, p.name))
        total = os.stat(keep, dir_fd=dir_fd, follow_symlinks=False).st_size + sum(n for _, n, _ in entries)
        for _, size, name in sorted(entries):
            if total <= max_bytes:
                break
            os.unlink(name, dir_fd=dir_fd)
            total -= size
    except OSError:
        pass


def cached(cache_dir: str | os.PathLike | None, key: Key | None, fresh: Callable[[], Any], *,
           model_type: type | None = None, progress: Progress | None = None,
           rekey: Callable[[], Key | None] | None = None) -> Any:
    """`read(cache_dir, key)` if it holds an entry, else `fresh()`, stored under `key`.

    `cache_dir` or `key` None: `fresh()` alone; so too a folder that must not be
    trusted (`usable`: said once on stderr). On a miss `progress` hears "loading",
    then "storing in the model cache"; on a hit nothing.

    Args:
        rekey: makes the key again after `fresh()` (`lookup_key` of the same
            input); the fresh object is stored only when it gives `key` with
            the same `stamp`, i.e. the input did not change while it was
            loaded (else `fresh()` may have read other bytes than were hashed).
    """
    use = cache_dir is not None and key is not None and usable(cache_dir)
    if use:
        hit = read(cache_dir, key, model_type)
        if hit is not None:
            return hit
    if progress is not None:
        progress("loading")
    obj = fresh()
    if use:
        if rekey is not None:
            again = rekey()
            if again is None or again != key or again.stamp != key.stamp:
                return obj  # the input changed while it was loaded: what was read is not what was hashed
        if progress is not None:
            progress("storing in the model cache")
        store(cache_dir, key, obj)
    return obj


__all__ = ["FORMAT_VERSION", "MAX_BYTES", "Key", "lookup_key", "input_digest", "input_stamp", "code_digest",
           "encode", "decode", "read", "store", "cached", "usable", "models_dir", "Unsupported", "BadEntry"]
