"""The compiled-model cache: a loaded `Model` stored as named arrays of a fixed schema, keyed by its input.

Loading a derivation graph (parse, validation, cycle elimination,
compression, factor-graph arrays) takes 0.6-2.4 s for data/ftp.json.gz on a
2-core CPU and about 3.5 s at 2M edges; reading the same model back from an
entry takes a few tens of milliseconds. `fastlbp.io.loading.load(path,
settings, cache_dir=...)` uses it:

    key = lookup_key(path, "json", settings)      # None: not cacheable (a pipe)
    model = read(cache_dir, key)                  # None: a miss, or a bad entry
    model = model or store(cache_dir, key, fresh_model)

An entry's key covers everything that decides the model: the sha256 of the
input's bytes (each file a Bingo directory's format reads, with its name, or its absence), the
path as given (the model records it as `source`), the format, the loading
settings (`cycles`, `compress`, the decompression limit), `FORMAT_VERSION`,
fastlbp's version and a digest of the loading code's source files (so an
edited loader never serves a model it would no longer build).

What an entry holds is fixed by `fastlbp.io.model_schema` (its docstring lists
every array with its dtype and shape): the model's arrays by name (the factor
graph's CSR arrays, the name tables as UTF-8 bytes and offsets, labels, truth
and the compression maps as keys and values) and a few plain values (sizes,
the source, the report's counts). The reader builds `Model`, `FactorGraph`,
`DerivationGraph`, `Rule` and `Stages` by calling them in code; nothing is
imported or looked up by a name read from an entry, and an entry whose arrays
are not exactly the schema's (a name, a dtype or a shape) is a miss.

An entry is one file `SLOT-CONTENT.model` (no pickle, no zip):

    8 bytes   MAGIC
    8 bytes   H, the header's length (little-endian)
    8 bytes   S, where the arrays the model holds begin (`model_schema.held`; a multiple of ALIGN)
    H bytes   the header, JSON: {"format_version", "key", "input" (the input's sha256),
              "code" (`code_digest()`), "fastlbp", "fields" (`model_schema.encode`'s plain values),
              "arrays": [[name, dtype, shape], ...] (`model_schema.expected(fields)`, in order)}
    ...       each array's bytes (C order, little-endian), at the next multiple of ALIGN
    32 bytes  HMAC-SHA256 of all the bytes before it, under the folder's secret key
              (`fastlbp.io.cache_safety`: `models/key`, 0600, made on first use)

The reader reads the file once, into two buffers split at S, checks the MAC
before it parses anything, then the header (key, input hash, code, version),
then the array list against the schema and the file's length and S against
the list. The arrays are views of those buffers (writable, as a fresh load's):
the first (names, dicts) is dropped once they are read, so the model keeps
no more memory than a fresh load's. A missing, truncated, corrupt, forged or
stale entry, one outside the schema, or one that is not a regular file of
this user's (a FIFO, a symbolic link: never opened through) is a miss: the
caller loads afresh and the entry is written again. Entries are written to a
temporary file and renamed over the name (never through it), so a reader
never sees half of one; a folder that cannot be written leaves the cache off
for that call. Entries of the same path and settings with older contents are
removed when a new one is written, as are entries of the earlier `.npz`
format, and the least recently used go once the folder holds more than
`MAX_BYTES` (an entry larger than that is never read).

What the cache trusts: the folder and its `models/` must be this user's and
not writable by group or others (else they are neither read nor written, with
one warning on stderr); an entry must carry the MAC of the folder's key. A
model is stored only when the bytes its loader read (each file's sha256, taken as
it is read: `fastlbp.core.errors.recorded_reads`) are the bytes hashed for the key:
a file replaced or rewritten between the two is loaded, but stored under no key,
so an entry's model is always the model of the bytes its name and header carry.
(A file's status cannot tell: `mv` of a same-size copy can reuse the inode number
within one tick of the file system's clock, which gave the same size, inode and
times for other bytes; issue 41, item 1.)
A model the schema cannot hold exactly (`Unsupported`: another class, an extra
`meta` entry, an array of another dtype) is loaded but not stored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import importlib.util
import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fastlbp.core.errors import recorded_reads
from fastlbp.core.model import Model
from fastlbp.io import cache_safety, model_schema
from fastlbp.io.model_schema import BadEntry, Unsupported

# 3: the fixed schema of `fastlbp.io.model_schema` in a file of its own (2: an .npz of a JSON tree
# naming classes, signed with the folder's key; 1: unsigned).
FORMAT_VERSION = 3
MAGIC = b"FLBPMOD\x03"
# Each array starts at a multiple of this many bytes of the file (and of the buffer it is read into).
ALIGN = 64
SUFFIX = ".model"
# Entries beyond this many bytes in all are removed, least recently used first
# (a 20M-edge model takes about 1 GB).
MAX_BYTES = 8 << 30
# The source files whose text decides a loaded model: any edit to them changes every key.
CODE_MODULES = ("datalog", "fastlbp.core.graph", "fastlbp.core.model", "fastlbp.core.errors",
                "fastlbp.io.loading", "fastlbp.io.model_cache", "fastlbp.io.model_schema")
HEADER_KEYS = {"format_version", "key", "input", "code", "fastlbp", "fields", "arrays"}
_PREFIX_BYTES = len(MAGIC) + 16
_MAC_BYTES = 32
_MAC_PREFIX = b"fastlbp model cache entry\0"

Progress = Callable[[str], None]


# Keys ----------------------------------------------------------------------

def _hash_file(h, path: Path) -> None:
    """Adds a regular file's bytes to `h`; anything else (a FIFO, a device) is an OSError, never blocking."""
    fd = os.open(path, cache_safety.READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        while chunk := f.read(1 << 20):
            h.update(chunk)


def file_digests(path: str | os.PathLike, names: frozenset[str] | None = None
                 ) -> dict[str, str | None] | None:
    """sha256 of each file an input is made of: {"": digest} for a file; for a directory {name: digest}
    of `names` (None for a name that is absent), or of every regular file when `names` is None.

    Returns None for what cannot be read twice (a pipe, a device; a listed name
    that is a directory or a pipe) or cannot be read at all; the caller then
    loads without the cache.
    """
    p = Path(path)
    try:
        info = p.stat()
        if stat.S_ISREG(info.st_mode):
            return {"": _file_digest(p)}
        if not stat.S_ISDIR(info.st_mode):
            return None
        if names is None:
            return {c.name: _file_digest(c) for c in sorted(p.iterdir(), key=lambda c: c.name) if c.is_file()}
        out: dict[str, str | None] = {}
        for name in sorted(names):
            child = p / name
            if not os.path.lexists(child):
                out[name] = None
            else:
                out[name] = _file_digest(child)  # a directory, a pipe or a dangling link: OSError
        return out
    except OSError:
        return None


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    _hash_file(h, path)
    return h.hexdigest()


def content_digest(files: dict[str, str | None]) -> str:
    """One sha256 of `file_digests`' answer (what an entry's name and header carry as the input's hash)."""
    h = hashlib.sha256(b"files\0")
    for name in sorted(files):
        raw = name.encode("utf-8", "surrogateescape")
        h.update(len(raw).to_bytes(8, "little") + raw + (files[name] or "absent").encode() + b"\0")
    return h.hexdigest()


def input_digest(path: str | os.PathLike, names: frozenset[str] | None = None) -> str | None:
    """`content_digest` of `file_digests(path, names)`, or None when the input cannot be hashed."""
    files = file_digests(path, names)
    return None if files is None else content_digest(files)


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
        content: sha256 of the input's bytes (`content_digest` of `files`).
        code: `code_digest()` when the key was made (also inside `slot`),
            recorded in the entry's header.
        files: `file_digests` of the input when the key was made, as
            (name, sha256 or None) pairs: `cached` stores a fresh model only
            when its loader read exactly these bytes (`matches_reads`).
    """

    slot: str
    content: str
    code: str = ""
    files: tuple[tuple[str, str | None], ...] = dataclasses.field(default=(), compare=False)

    @property
    def name(self) -> str:
        return f"{self.slot[:20]}-{self.content[:40]}{SUFFIX}"

    @property
    def full(self) -> str:
        return f"{self.slot}:{self.content}"

    def matches_reads(self, path: str | os.PathLike, reads: list[tuple[Path, str | None]]) -> bool:
        """Whether the files a loader read (`fastlbp.core.errors.recorded_reads` of loading `path`) are
        byte for byte the files of this key: each present file read, with the same sha256, and nothing
        else (no file outside the input, none that could not be hashed, none absent when hashed)."""
        base, got = Path(path), {}
        for read_path, digest in reads:
            if digest is None:
                return False
            if read_path == base:
                name = ""
            elif read_path.parent == base:
                name = read_path.name
            else:
                return False
            if got.setdefault(name, digest) != digest:
                return False
        return bool(got) and got == {name: digest for name, digest in self.files if digest is not None}


def lookup_key(path: str | os.PathLike, format: str, options: dict[str, Any],
               names: frozenset[str] | None = None) -> Key | None:
    """The key of loading `path` as `format` with `options` (JSON-able), or None when not cacheable.

    `names`: for a directory, the files its format reads (`file_digests`); None: every regular file.
    """
    from fastlbp.core.version import __version__

    files = file_digests(path, names)
    if files is None:
        return None
    code = code_digest()
    slot = json.dumps({"path": os.fspath(path), "format": format, "options": options,
                       "format_version": FORMAT_VERSION, "fastlbp": __version__, "code": code},
                      sort_keys=True, default=str)
    return Key(hashlib.sha256(slot.encode()).hexdigest(), content_digest(files), code,
               tuple(sorted(files.items())))


# The entry file ------------------------------------------------------------------------------

def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _layout(start: int, listed: list[tuple[str, str, tuple[int, ...]]]) -> tuple[list[int], int, int]:
    """(the offset of each listed array, where the arrays the model holds begin, the end of the last)
    when the first may start at `start`."""
    offsets, end, split = [], start, None
    for name, dtype, shape in listed:
        offsets.append(_aligned(end))
        if split is None and model_schema.held(name):
            split = offsets[-1]
        end = offsets[-1] + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return offsets, _aligned(end) if split is None else split, end


def _entry_bytes(secret: bytes, key: Key, model: Any) -> list[bytes | memoryview]:
    """The chunks of `model`'s entry under `key`, MAC last.

    Raises:
        Unsupported: a model the schema cannot hold exactly.
    """
    from fastlbp.core.version import __version__

    fields, arrays = model_schema.encode(model)
    listed = [(name, a.dtype.str, a.shape) for name, a in arrays]
    if listed != model_schema.expected(fields):
        raise Unsupported("the arrays do not fit the schema")  # a bug of encode's, never an entry
    header = json.dumps({"format_version": FORMAT_VERSION, "key": key.full, "input": key.content,
                         "code": key.code, "fastlbp": __version__, "fields": fields,
                         "arrays": [[name, dtype, list(shape)] for name, dtype, shape in listed]}).encode()
    start = _PREFIX_BYTES + len(header)
    offsets, split, _ = _layout(start, listed)
    chunks: list[bytes | memoryview] = [MAGIC, len(header).to_bytes(8, "little"), split.to_bytes(8, "little"),
                                        header]
    at = start
    for offset, (_, a) in zip(offsets, arrays, strict=True):
        chunks.append(bytes(offset - at))
        data = memoryview(np.ascontiguousarray(a)).cast("B")
        chunks.append(data)
        at = offset + data.nbytes
    if at < split:  # no array the model holds: the split is the aligned end
        chunks.append(bytes(split - at))
    mac = hmac.new(secret, _MAC_PREFIX, hashlib.sha256)
    for chunk in chunks:
        mac.update(chunk)
    return [*chunks, mac.digest()]


def _read_into(f, buf: np.ndarray) -> None:
    view, got = memoryview(buf), 0
    while got < buf.size:
        n = f.readinto(view[got:])
        if not n:
            raise BadEntry("truncated")
        got += n


def _read_entry(f, size: int, secret: bytes, key: Key) -> Model:
    """The model in an entry file of `size` bytes open as `f`. Raises BadEntry (or any error) if it is not
    exactly an entry of `key` signed with `secret`.

    The file is read into two buffers, split where the arrays the model holds begin: the first (the
    header, the names and dicts) is dropped once they are read, the second is what the model keeps."""
    prefix = f.read(_PREFIX_BYTES)
    if len(prefix) != _PREFIX_BYTES or prefix[:len(MAGIC)] != MAGIC or size > MAX_BYTES:
        raise BadEntry("not an entry of this format")
    length = int.from_bytes(prefix[len(MAGIC):len(MAGIC) + 8], "little")
    split = int.from_bytes(prefix[len(MAGIC) + 8:], "little")
    body = size - _MAC_BYTES
    if not _PREFIX_BYTES + length <= split <= body or split % ALIGN:
        raise BadEntry("truncated")
    first, second = np.empty(split, np.uint8), np.empty(size - split, np.uint8)  # each page written once
    first[:_PREFIX_BYTES] = np.frombuffer(prefix, np.uint8)
    _read_into(f, first[_PREFIX_BYTES:])
    _read_into(f, second)
    if f.read(1):
        raise BadEntry("grew while read")
    mac = hmac.new(secret, _MAC_PREFIX, hashlib.sha256)
    mac.update(memoryview(first))
    mac.update(memoryview(second)[: body - split])
    if not hmac.compare_digest(mac.digest(), second[body - split:].tobytes()):
        raise BadEntry("not signed with this folder's key")
    header = json.loads(first[_PREFIX_BYTES:_PREFIX_BYTES + length].tobytes().decode())
    if type(header) is not dict or set(header) != HEADER_KEYS:
        raise BadEntry("a header other than this format's")
    if (header.get("key") != key.full or header.get("input") != key.content
            or header.get("format_version") != FORMAT_VERSION
            or (key.code and header.get("code") != key.code)):
        raise BadEntry("another key, input or code")
    fields = header.get("fields")
    listed = model_schema.expected(fields)
    if header.get("arrays") != [[name, dtype, list(shape)] for name, dtype, shape in listed]:
        raise BadEntry("arrays other than the schema's")
    offsets, at, end = _layout(_PREFIX_BYTES + length, listed)
    if at != split or max(end, split) != body:
        raise BadEntry("a length other than its arrays'")
    arrays = {}
    for (name, dtype, shape), offset in zip(listed, offsets, strict=True):
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        buf, offset = (second, offset - split) if offset >= split else (first, offset)
        arrays[name] = buf[offset: offset + nbytes].view(dtype).reshape(shape)
    return model_schema.decode(fields, arrays)


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


def read(cache_dir: str | os.PathLike, key: Key) -> Model | None:
    """The model stored under `key`, or None (a miss, or an entry that is not exactly right).

    Only a regular file of this user's, not writable by others, is opened (never
    through a symbolic link, never blocking on a FIFO); its MAC must be the
    folder key's, its header name `key` and its input hash, and its arrays be
    the schema's.
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
        with open(fd, "rb", buffering=0, closefd=False) as f:
            model = _read_entry(f, info.st_size, secret, key)
        try:
            os.utime(fd)  # least recently used goes first
        except OSError:
            pass
    except Exception:  # noqa: BLE001  missing, not a file, corrupt, truncated, forged, stale: a miss
        return None
    finally:
        if fd is not None:
            os.close(fd)
        os.close(dir_fd)
    return model


def store(cache_dir: str | os.PathLike, key: Key, model: Any, *, max_bytes: int = MAX_BYTES) -> Path | None:
    """Writes `model` under `key` atomically; returns the entry, or None when it could not be stored.

    The entry is written to a new temporary file (mode 0600) and renamed over
    `key.name`: whatever was there (a FIFO, a symbolic link) is replaced, never
    written through. A folder that cannot be made or written or must not be
    trusted (`cache_safety`), a full disk, or a model the schema cannot hold
    exactly (`Unsupported`) leaves no entry and raises nothing.
    """
    folder = _folder(cache_dir, create=True)
    if folder is None:
        return None
    dir_fd, secret = folder
    tmp = None
    try:
        chunks = _entry_bytes(secret, key, model)
        tmp = f".tmp-{os.urandom(8).hex()}{SUFFIX}"
        fd = os.open(tmp, cache_safety.CREATE_FLAGS, 0o600, dir_fd=dir_fd)
        with open(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, key.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = None
        _prune(dir_fd, keep=key.name, slot=key.slot[:20], max_bytes=max_bytes)
    except Exception:  # noqa: BLE001  a model it cannot hold, unwritable, full: no entry, no crash
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
    """Removes older contents of `slot`, temporary files older than an hour, entries of the `.npz` format
    (no reader left for them), then the least recently used beyond `max_bytes`."""
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
            elif p.name.endswith(".npz") and stat.S_ISREG(info.st_mode):
                os.unlink(p.name, dir_fd=dir_fd)
            elif p.name.endswith(SUFFIX) and p.name != keep:
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


def cached(cache_dir: str | os.PathLike | None, key: Key | None, fresh: Callable[[], Model], *,
           model_type: type = Model, progress: Progress | None = None,
           path: str | os.PathLike | None = None) -> Model:
    """`read(cache_dir, key)` if it holds an entry, else `fresh()`, stored under `key`.

    `cache_dir` or `key` None: `fresh()` alone; so too a folder that must not be
    trusted (`usable`: said once on stderr). On a miss `progress` hears "loading",
    then "storing in the model cache"; on a hit nothing.

    A fresh model is stored only when what `fresh()` read (every file through
    `fastlbp.core.errors.recorded_reads`) is byte for byte what `key` was made
    of (`Key.matches_reads`): an input replaced or rewritten between hashing
    and loading, however its status looks (an inode number reused within the
    file system clock's grain gives the same size, inode and times), gives a
    model of other bytes, which is returned but stored under no key.

    Args:
        model_type: `Model`, the one type an entry holds (any other is refused here).
        path: the input `key` was made of (the path `fresh()` opens); None:
            `fresh()` is never stored.
    """
    if model_type is not Model:
        raise TypeError(f"the model cache holds only fastlbp Models, not {model_type!r}")
    use = cache_dir is not None and key is not None and usable(cache_dir)
    if use:
        hit = read(cache_dir, key)
        if hit is not None:
            return hit
    if progress is not None:
        progress("loading")
    with recorded_reads() as reads:
        obj = fresh()
    if use and path is not None and key.matches_reads(path, reads):
        if progress is not None:
            progress("storing in the model cache")
        store(cache_dir, key, obj)
    return obj


__all__ = ["FORMAT_VERSION", "MAX_BYTES", "Key", "lookup_key", "input_digest", "file_digests",
           "content_digest", "code_digest",
           "read", "store", "cached", "usable", "models_dir", "Unsupported", "BadEntry"]
