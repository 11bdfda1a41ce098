"""Helpers of the model-cache tests: type-exact equality, and entries taken apart and written again.

`parse` and `build` follow the entry layout of `fastlbp.io.model_cache`'s
docstring on their own (magic, header length, JSON header, aligned arrays,
HMAC-SHA256 last), so they also check that the documentation says what the
code writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
from pathlib import Path

import numpy as np

from fastlbp.io import model_cache, model_schema


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
        assert np.float64(a).tobytes() == np.float64(b).tobytes(), where
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


def the_entry(cache: Path) -> Path:
    (entry,) = model_cache.models_dir(cache).glob(f"*{model_cache.SUFFIX}")
    return entry


def entries(cache: Path) -> list[Path]:
    return list(model_cache.models_dir(cache).glob(f"*{model_cache.SUFFIX}"))


def _aligned(n: int) -> int:
    return -(-n // 64) * 64


def parse(entry: Path) -> tuple[dict, dict[str, np.ndarray], bytes]:
    """(header, {name: array copy}, mac) of an entry file, read as its docstring describes it."""
    data = entry.read_bytes()
    assert data[:8] == model_cache.MAGIC
    length = int.from_bytes(data[8:16], "little")
    split = int.from_bytes(data[16:24], "little")
    header = json.loads(data[24:24 + length])
    arrays, at, first_held = {}, 24 + length, None
    for name, dtype, shape in header["arrays"]:
        at = _aligned(at)
        if first_held is None and model_schema.held(name):
            first_held = at
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        arrays[name] = np.frombuffer(data[at:at + n], dtype).reshape(shape).copy()
        at += n
    assert at == len(data) - 32 and split == first_held
    return header, arrays, data[-32:]


def build(header: dict, arrays: dict[str, np.ndarray], secret: bytes | None) -> bytes:
    """An entry's bytes from a header and arrays (listed in `arrays`' order), signed with `secret`
    (None: a plain sha256 in the MAC's place, what anyone can compute)."""
    header = {**header, "arrays": [[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()]}
    text = json.dumps(header).encode()
    out, split = bytearray(24 + len(text)), None
    for name, a in arrays.items():
        out += bytes(_aligned(len(out)) - len(out))
        if split is None and model_schema.held(name):
            split = len(out)
        out += np.ascontiguousarray(a).tobytes()
    out[:24] = model_cache.MAGIC + len(text).to_bytes(8, "little") + (split or 0).to_bytes(8, "little")
    out[24:24 + len(text)] = text
    if secret is None:
        return bytes(out) + hashlib.sha256(out).digest()
    return bytes(out) + hmac.new(secret, b"fastlbp model cache entry\0" + out, hashlib.sha256).digest()


def secret_of(cache: Path) -> bytes:
    return (model_cache.models_dir(cache) / "key").read_bytes()


def rewrite(entry: Path, change, *, sign: bool = True) -> None:
    """Applies `change(header, arrays)` (in place) to an entry and writes it back, signed with its
    folder's key (as a writer holding the key would) unless `sign` is False."""
    header, arrays, _ = parse(entry)
    change(header, arrays)
    entry.write_bytes(build(header, arrays, secret_of(entry.parent.parent) if sign else None))
