"""derivation.npz: a derivation graph as numpy arrays, for graphs too large for derivation.json.

    datalog.npz.save(dg, "hmmer.npz")                 # what `fastlbp ground -o hmmer.npz` writes
    dg, where = datalog.npz.read("hmmer.npz")         # the raw graph (format "npz" of `datalog.io`)
    model = datalog.io.load("hmmer.npz")              # cycles eliminated, compressed: a Model

The same graph as derivation.json (`datalog.formats`), stored as numpy's `.npz` (a zip archive of
`.npy` arrays; `np.load(path)` reads it in any language with a numpy reader). hmmer's 27.3M clauses
take 0.8 GB here, written in seconds; derivation.json of the same graph is several GB and took
minutes. Arrays (T tuples, R rules, C clauses, B body entries; strings are UTF-8, each followed by
a NUL byte, `NAME.offsets` saying where each starts):

    format             () str    "fastlbp-derivation-npz"
    version            () int64  1
    tuples.bytes       (.,) uint8    tuples.offsets (T+1,) int64     the tuple names
    rules.bytes        (.,) uint8    rules.offsets  (R+1,) int64     the rule names ("R0", ...)
    rules.text.bytes   (.,) uint8    rules.text.offsets (R+1,) int64 their texts ("" for none)
    rules.probability  (R,) float64
    clause_rule        (C,) int32    the rule of each clause
    clause_head        (C,) int32    its head tuple
    body_offsets       (C+1,) int64  CSR offsets into body
    body               (B,) int32    body tuples, clause by clause
    priors.keys (P,) int64, priors.values (P,) float64     input priors
    alarms             (A,) int32
    labels.keys (L,) int64, labels.values (L,) bool        known labels (evidence)
    truth.keys (G,) int64, truth.values (G,) bool          ground truth of alarms
    annotations        (.,) uint8    {"locations": ..., "relations": ...} as JSON text (may be empty)

A graph can also be written as several files read back in parallel (`write_sharded(dg, "g.npz", 4)`):
the first part, `g.npz`, holds everything above but only its run of clauses, and names the other parts
(`parts.files.bytes` / `.offsets`, their clause counts in `parts.clauses` (N-1,) int64); part k,
`g.partK-of-N.npz`, holds `format`, `version`, `part.index`, `part.count` and its run of clauses
(`clause_rule`, `clause_head`, `body_offsets` from 0, `body`). `read` recognises a first part and reads
the others, each checked as the first is; a part read alone is an error naming the first.

Everything is checked on reading (names, dtypes, shapes, indices in range, offsets, probabilities
in [0, 1], tuple and rule names unique, no tuple labelled or given a prior twice); a problem is an
`InputError` naming the file and the array. Each member's `.npy` header is checked against the bytes
the member holds before anything is allocated, and each offsets array against the count it indexes
(`tuples.offsets` has T + 1 entries, `body_offsets` C + 1, `rules.probability` R).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import io
import json
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from datalog.annotations import parse_annotations
from datalog.derivation import DerivationGraph, Rule
from datalog.reading import loads_json, unique
from fastlbp.core.errors import InputError, check_path, decompression_limit, read_raw
from fastlbp.core.outputs import write_atomically

FORMAT_NAME = "fastlbp-derivation-npz"
FORMAT_VERSION = 1

Where = dict  # (group, tuple) -> (path, line, location), as datalog.formats.Where


def _strings(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, offsets) of a list of str: UTF-8, each followed by NUL."""
    if not names:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    blob = np.frombuffer(("\0".join(names) + "\0").encode("utf-8"), np.uint8)
    ends = np.flatnonzero(blob == 0) + 1
    if ends.size != len(names):  # a name holds NUL itself: measure each
        ends = np.cumsum([len(s.encode("utf-8")) + 1 for s in names])
    return blob, np.concatenate([[0], ends]).astype(np.int64)


def _dict(d: dict, dtype) -> tuple[np.ndarray, np.ndarray]:
    return np.array(list(d), np.int64), np.array(list(d.values()), dtype)


def dumps(dg: DerivationGraph) -> io.BytesIO:
    """derivation.npz of `dg` in memory (uncompressed `.npz`)."""
    return _packed(_members(dg))


def _packed(arrays: dict[str, np.ndarray]) -> io.BytesIO:
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    return buf


def _members(dg: DerivationGraph) -> dict[str, np.ndarray]:
    """The arrays of derivation.npz of `dg`, by name."""
    arrays = {"format": np.array(FORMAT_NAME), "version": np.array(FORMAT_VERSION, np.int64)}
    for name, names in (("tuples", list(dg.tuples)), ("rules", [r.name for r in dg.rules]),
                        ("rules.text", [r.text or "" for r in dg.rules])):
        arrays[f"{name}.bytes"], arrays[f"{name}.offsets"] = _strings(names)
    arrays["rules.probability"] = np.array([r.probability for r in dg.rules], np.float64)
    arrays["clause_rule"] = np.asarray(dg.clause_rule, np.int32)
    arrays["clause_head"] = np.asarray(dg.clause_head, np.int32)
    arrays["body_offsets"] = np.asarray(dg.body_offsets, np.int64)
    arrays["body"] = np.asarray(dg.body, np.int32)
    arrays["priors.keys"], arrays["priors.values"] = _dict(dg.priors, np.float64)
    arrays["alarms"] = np.asarray(dg.alarms, np.int32)
    for key in ("labels", "truth"):
        arrays[f"{key}.keys"], arrays[f"{key}.values"] = _dict(getattr(dg, key), bool)
    notes = {k: dg.annotations[k] for k in ("locations", "relations") if dg.annotations.get(k)}
    arrays["annotations"] = np.frombuffer(json.dumps(notes).encode("utf-8") if notes else b"", np.uint8)
    return arrays


def part_name(path: Path, index: int, count: int) -> str:
    """The file name of part `index` (from 0; 0 is `path` itself) of `count` of a sharded graph at `path`."""
    return path.name if index == 0 else f"{path.stem}.part{index}-of-{count}{path.suffix or '.npz'}"


def write_sharded(dg: DerivationGraph, path: str | os.PathLike, parts: int) -> list[Path]:
    """Writes `dg` as `parts` files that `read` reads back as one graph, each part read in parallel.

    The clauses are cut into `parts` runs of about equal body entries. The first part is `path`: the
    tuples, rules, priors, alarms, labels, truth, annotations, its own clauses and the other parts'
    file names (beside it) and clause counts; part k is `STEM.partK-of-N.npz` with its clauses only.
    The other parts are written first, each atomically, so a first part never names a part missing.

    Returns:
        The files written, the first part first.

    Raises:
        InputError: a file cannot be written.
        ValueError: `parts` is below 1.
    """
    parts = int(parts)
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    path = Path(path)
    members = _members(dg)
    offsets = members["body_offsets"]
    clauses = offsets.size - 1
    # Part k takes the clauses whose body starts in its share of the body entries (and clause count).
    weight = offsets[:-1] + np.arange(clauses)
    total = max(int(offsets[-1]) + clauses, 1)
    cuts = np.concatenate([[0], np.searchsorted(weight, [total * k / parts for k in range(1, parts)]),
                           [clauses]]).astype(np.int64)

    def clause_run(k):
        a, b = int(cuts[k]), int(cuts[k + 1])
        return {"clause_rule": members["clause_rule"][a:b], "clause_head": members["clause_head"][a:b],
                "body_offsets": offsets[a:b + 1] - offsets[a], "body": members["body"][offsets[a]:offsets[b]]}

    names = [part_name(path, k, parts) for k in range(parts)]
    written = []
    for k in range(1, parts):
        out = path.with_name(names[k])
        place = {"part.index": np.array(k, np.int64), "part.count": np.array(parts, np.int64)}
        write_atomically(out, _packed({"format": members["format"], "version": members["version"], **place,
                                       **clause_run(k)}).getbuffer())
        written.append(out)
    first = {**members, **clause_run(0)}
    first["parts.files.bytes"], first["parts.files.offsets"] = _strings(names[1:])
    first["parts.clauses"] = np.diff(cuts)[1:].astype(np.int64)
    write_atomically(path, _packed(first).getbuffer())
    return [path, *written]


def read_sharded(path: str | os.PathLike, *,
                 max_decompressed: int | None = None) -> tuple[DerivationGraph, Where]:
    """A graph `write_sharded` wrote, from its first part (`read`, which reads the other parts in
    parallel; a graph of one file reads the same)."""
    return read(path, max_decompressed=max_decompressed)


def _with_parts(p: Path, r: _Reader, first, num_rules: int, num_tuples: int, max_decompressed: int | None):
    """The clause arrays of every part of a sharded graph, in order: the first's (`first`) and those of
    the files it names, read in parallel threads (each file's reads recorded for the model cache)."""
    for name in _SHARDED:
        if name not in r.arrays:
            raise r.fail(name, "missing (the first part of a sharded derivation.npz names the others)")
    files = r.strings("parts.files")
    counts = r.take("parts.clauses")
    _check_offsets(r, first[2], first[3])
    if any(os.sep in f or (os.altsep and os.altsep in f) or f in ("", ".", "..") for f in files):
        raise r.fail("parts.files.bytes", "a part's file name must be a plain name beside this file")

    def one(k: int, name: str):
        q = p.with_name(name)
        check_path(q)
        part = _Reader(str(q), _archive(q, max_decompressed))
        for array in part.arrays:
            if array not in _PART_ARRAYS:
                raise part.fail(array, f"unknown array in a part (expected {', '.join(_PART_ARRAYS)})")
        for array in _PART_ARRAYS:
            if array not in part.arrays:
                raise part.fail(array, "missing")
        _check_header(part)
        index, count = int(part.take("part.index")), int(part.take("part.count"))
        if index != k + 1 or count != len(files) + 1:
            raise part.fail("part.index", f"this is part {index + 1} of {count}; {p.name} lists it as part "
                            f"{k + 2} of {len(files) + 1}")
        arrays = (part.indices("clause_rule", num_rules, "rule"),
                  part.indices("clause_head", num_tuples, "tuple"), part.take("body_offsets"),
                  part.indices("body", num_tuples, "tuple"))
        if arrays[0].size != int(counts[k]):
            raise part.fail("clause_rule", f"{arrays[0].size:,} clauses; {p.name} says {int(counts[k]):,}")
        _check_offsets(part, arrays[2], arrays[3])
        return arrays

    workers = max(1, min(len(files), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        # Each task in a copy of this context: the model cache's record of reads (a context variable).
        jobs = [pool.submit(contextvars.copy_context().run, one, k, name) for k, name in enumerate(files)]
        parts = [first] + [job.result() for job in jobs]
    bases = np.cumsum([0] + [int(x[2][-1]) for x in parts])
    offsets = np.concatenate([x[2][:-1] + base for x, base in zip(parts, bases, strict=False)] + [bases[-1:]])
    return (np.concatenate([x[0] for x in parts]), np.concatenate([x[1] for x in parts]),
            offsets.astype(np.int64), np.concatenate([x[3] for x in parts]))


def _check_offsets(r: _Reader, offsets: np.ndarray, body: np.ndarray) -> None:
    if offsets[0] != 0 or offsets[-1] != body.size or np.any(np.diff(offsets) < 0):
        raise r.fail("body_offsets", "not offsets into body (from 0, never decreasing, ending at its length)")


def save(dg: DerivationGraph, path: str | os.PathLike) -> None:
    """Writes derivation.npz, atomically (`fastlbp.core.outputs.write_atomically`).

    Raises:
        InputError: `path` cannot be written (the old file is left as it was).
    """
    write_atomically(Path(path), dumps(dg).getbuffer())


# name -> (dtype, shape): each dimension a count's letter and what it adds (T tuples, R rules, C clauses,
# B body entries, ...): ("T", 1) is T + 1. The first array naming a letter sets its count; every later
# one is checked against it, so each offsets array is tied to the count it indexes.
_SPEC = {
    "format": ("U", ()), "version": ("int64", ()),
    "tuples.bytes": ("uint8", (("TB", 0),)), "tuples.offsets": ("int64", (("T", 1),)),
    "rules.bytes": ("uint8", (("RB", 0),)), "rules.offsets": ("int64", (("R", 1),)),
    "rules.text.bytes": ("uint8", (("XB", 0),)), "rules.text.offsets": ("int64", (("R", 1),)),
    "rules.probability": ("float64", (("R", 0),)),
    "clause_rule": ("int32", (("C", 0),)), "clause_head": ("int32", (("C", 0),)),
    "body_offsets": ("int64", (("C", 1),)), "body": ("int32", (("B", 0),)),
    "priors.keys": ("int64", (("P", 0),)), "priors.values": ("float64", (("P", 0),)),
    "alarms": ("int32", (("A", 0),)),
    "labels.keys": ("int64", (("L", 0),)), "labels.values": ("bool", (("L", 0),)),
    "truth.keys": ("int64", (("G", 0),)), "truth.values": ("bool", (("G", 0),)),
    "annotations": ("uint8", (("N", 0),)),
    # A sharded graph (`write_sharded`): its first part lists the others and their clause counts; every
    # other part holds its clauses only, with its place.
    "parts.files.bytes": ("uint8", (("FB", 0),)), "parts.files.offsets": ("int64", (("F", 1),)),
    "parts.clauses": ("int64", (("F", 0),)),
    "part.index": ("int64", ()), "part.count": ("int64", ()),
}
# Arrays only sharded files have; a part after the first has only these and `_PART_ARRAYS`.
_SHARDED = ("parts.files.bytes", "parts.files.offsets", "parts.clauses")
_PART = ("part.index", "part.count")
_PART_ARRAYS = ("format", "version", "clause_rule", "clause_head", "body_offsets", "body") + _PART
_LETTERS = {"T": "tuples", "R": "rules", "C": "clauses", "B": "body entries", "P": "priors", "A": "alarms",
            "L": "labels", "G": "truth values", "N": "bytes", "TB": "bytes", "RB": "bytes", "XB": "bytes",
            "F": "other parts", "FB": "bytes"}


class _Reader:
    """The arrays of one derivation.npz, each checked against `_SPEC` when taken."""

    def __init__(self, path: str, arrays: dict[str, np.ndarray]):
        self.path, self.arrays, self.sizes = path, arrays, {}

    def fail(self, name: str, problem: str) -> InputError:
        return InputError(self.path, None, f"{name}: {problem}")

    def take(self, name: str) -> np.ndarray:
        dtype, shape = _SPEC[name]
        a = self.arrays[name]
        if (a.dtype.kind != "U") if dtype == "U" else (a.dtype != np.dtype(dtype)):
            raise self.fail(name, f"dtype {a.dtype}, expected {dtype}")
        if a.ndim != len(shape):
            raise self.fail(name, f"{a.ndim} dimensions, expected {len(shape)}")
        for (letter, extra), n in zip(shape, a.shape, strict=True):
            if letter not in self.sizes:
                if n < extra:
                    raise self.fail(name, f"length {n}, expected at least {extra} (one more than the "
                                    f"number of {_LETTERS[letter]})")
                self.sizes[letter] = n - extra
            elif self.sizes[letter] + extra != n:
                count = self.sizes[letter]
                raise self.fail(name, f"length {n}, expected {count + extra} ({count:,} "
                                f"{_LETTERS[letter]}{' + 1' if extra else ''}, as the arrays before it)")
        return a

    def strings(self, name: str) -> list[str]:
        blob, offsets = self.take(f"{name}.bytes"), self.take(f"{name}.offsets")
        n = offsets.size - 1
        if offsets[0] != 0 or offsets[-1] != blob.size or (n and (
                np.any(np.diff(offsets) < 1) or np.any(blob[offsets[1:] - 1] != 0))):
            raise self.fail(f"{name}.offsets", "offsets that do not fit its bytes (each string ends in NUL)")
        try:
            text = blob.tobytes().decode("utf-8")
        except UnicodeDecodeError as err:
            raise self.fail(f"{name}.bytes", f"not UTF-8 ({err.reason} at byte {err.start})") from None
        parts = text.split("\0")
        if len(parts) == n + 1:
            return parts[:-1]
        raw, bounds = blob.tobytes(), offsets.tolist()
        return [raw[a:b - 1].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def indices(self, name: str, size: int, what: str) -> np.ndarray:
        a = self.take(name)
        if a.size and (a.min() < 0 or a.max() >= size):
            bad = int(a[(a < 0) | (a >= size)][0])
            raise self.fail(name, f"{what} {bad} out of range (there are {size})")
        return a

    def probabilities(self, name: str) -> np.ndarray:
        a = self.take(name)
        bad = ~((a >= 0) & (a <= 1))  # NaN is bad too
        if bad.any():
            raise self.fail(name, f"probability {float(a[bad][0])!r} is not in [0, 1]")
        return a


def _unique(names: list[str], r: _Reader, name: str, what: str) -> None:
    if len(set(names)) != len(names):
        seen = set()
        dup = next(n for n in names if n in seen or seen.add(n))
        raise r.fail(name, f"{what} {dup!r} is listed twice")


def _keys_once(keys: list[int], tuples: list[str], r: _Reader, name: str) -> None:
    """A tuple given twice (a label, a prior) is an error, as a key repeated in derivation.json is: which
    of two values was meant is unknown, and keeping the last would lose the other silently."""
    if len(set(keys)) != len(keys):
        seen: set[int] = set()
        k = next(k for k, t in enumerate(keys) if t in seen or seen.add(t))
        first = keys.index(keys[k])
        raise r.fail(name, f"tuple {tuples[keys[k]]!r} is given twice ({name}[{first}] and [{k}])")


def _arrays(path: Path, source: io.BytesIO, infos: list[zipfile.ZipInfo]) -> dict[str, np.ndarray]:
    """The archive's arrays by name, each member checked before it is read: a `.npy` member, no object
    dtype, and a header whose shape and dtype account for exactly the bytes the member holds (a header
    declaring 10^13 elements is refused before numpy allocates them). `source` holds the archive's
    bytes as read once (`path` names it in messages).

    Raises:
        InputError: a member that is not a `.npy` array, or whose header does not fit its size.
        ValueError, zipfile.BadZipFile, EOFError: a malformed archive or header (the caller names it).
    """
    arrays = {}
    with zipfile.ZipFile(source) as zf:
        for info in infos:
            if not info.filename.endswith(".npy"):
                raise InputError(str(path), None, f"member {info.filename!r} is not a .npy array (a "
                                 "derivation.npz holds only arrays)")
            name = info.filename[:-4]
            if name in arrays:
                raise InputError(str(path), None, f"{name}: the archive holds it twice")
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                if dtype.hasobject:
                    raise InputError(str(path), None, f"{name}: dtype {dtype} holds Python objects (never "
                                     "read: fastlbp does not unpickle)")
                declared = dtype.itemsize
                for n in shape:
                    declared *= int(n)
                held = info.file_size - f.tell()
                if declared != held:
                    raise InputError(str(path), None, f"{name}: its header declares shape {tuple(shape)} of "
                                     f"{dtype} ({declared:,} bytes), but the member holds {held:,} bytes")
                data = bytearray(held)
                if f.readinto(data) != held:
                    raise EOFError(f"{name}: the member ends early")
            arrays[name] = np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C")
    return arrays


def read(path: str | os.PathLike, *, max_decompressed: int | None = None) -> tuple[DerivationGraph, Where]:
    """Reads derivation.npz (the raw graph: duplicates and cycles kept, as `datalog.formats.read_json`).

    An archive written compressed (`np.savez_compressed`) is read too, if its arrays take at most
    `max_decompressed` bytes (`fastlbp.core.errors.decompression_limit` of its size).

    Raises:
        InputError: not an .npz archive, a missing or unknown array, a wrong
            dtype or shape, an index out of range, a bad probability or name.
    """
    p = Path(path)
    check_path(p)
    if p.is_dir():
        raise InputError(str(p), None, "is a directory, expected a derivation.npz file")
    r = _Reader(str(p), _archive(p, max_decompressed))
    for name in r.arrays:
        if name not in _SPEC or name in _PART and "part.index" not in r.arrays:
            raise r.fail(name, f"unknown array (expected {', '.join(n for n in _SPEC if n not in _PART)})")
    _check_header(r)
    if "part.index" in r.arrays:
        raise r.fail("part.index", f"this file is part {int(r.take('part.index')) + 1} of "
                     f"{int(r.take('part.count'))} of a sharded derivation.npz: read its first part (the one "
                     "that names the others)")
    for name in _SPEC:
        if name not in r.arrays and name not in _SHARDED + _PART:
            raise r.fail(name, "missing")
    return _graph(p, r, max_decompressed)


def _archive(p: Path, max_decompressed: int | None) -> dict[str, np.ndarray]:
    """The arrays of the .npz archive at `p`, read once (`_arrays`; compressed ones within the limit)."""
    # Read once, then taken apart from memory: what is parsed is exactly the bytes read (and hashed for
    # the model cache, `fastlbp.core.errors.recorded_reads`), whatever replaces the file meanwhile.
    data = io.BytesIO(read_raw(p))
    try:
        with zipfile.ZipFile(data) as zf:
            infos = zf.infolist()
        packed = [i for i in infos if i.compress_type != zipfile.ZIP_STORED]
        limit = decompression_limit(sum(i.compress_size for i in packed), max_decompressed)
        if packed and sum(i.file_size for i in packed) > limit:
            raise InputError(str(p), None, f"its compressed arrays would take over {limit:,} bytes once "
                             "decompressed, past the limit for this archive")
        arrays = _arrays(p, data, infos)
    except (zipfile.BadZipFile, ValueError, EOFError, NotImplementedError, zlib.error, struct.error) as err:
        # NotImplementedError: a zip version or compression method zipfile does not read
        raise InputError(str(p), None, f"not a derivation.npz file (numpy's .npz archive): {err}") from None
    except OSError as err:
        raise InputError(str(p), None, f"cannot read: {err.strerror or err}") from None
    return arrays


def _check_header(r: _Reader) -> None:
    for name in ("format", "version"):
        if name not in r.arrays:
            raise r.fail(name, "missing")
    if str(r.take("format")) != FORMAT_NAME:
        raise r.fail("format", f"must be {FORMAT_NAME!r}, got {str(r.arrays['format'])!r}")
    if int(r.take("version")) != FORMAT_VERSION:
        raise r.fail("version", f"unsupported version {int(r.arrays['version'])} (this fastlbp reads version "
                     f"{FORMAT_VERSION})")


def _graph(p: Path, r: _Reader, max_decompressed: int | None) -> tuple[DerivationGraph, Where]:
    """The derivation graph of a checked first (or only) file's arrays, its other parts read in."""
    arrays = r.arrays
    tuples = r.strings("tuples")
    _unique(tuples, r, "tuples", "tuple")
    names, texts = r.strings("rules"), r.strings("rules.text")
    _unique(names, r, "rules", "rule")
    probs = r.probabilities("rules.probability").tolist()
    rules = [Rule(n, p, t or None) for n, p, t in zip(names, probs, texts, strict=True)]
    num_t = len(tuples)
    c_rule = r.indices("clause_rule", len(rules), "rule")
    c_head = r.indices("clause_head", num_t, "tuple")
    offsets, body = r.take("body_offsets"), r.indices("body", num_t, "tuple")
    if "parts.clauses" in arrays or "parts.files.bytes" in arrays:
        c_rule, c_head, offsets, body = _with_parts(p, r, (c_rule, c_head, offsets, body), len(rules), num_t,
                                                    max_decompressed)
    if not c_rule.size:
        raise r.fail("clause_rule", "the graph is empty: no clauses")
    if offsets[0] != 0 or offsets[-1] != body.size or np.any(np.diff(offsets) < 0):
        raise r.fail("body_offsets", "not offsets into body (from 0, never decreasing, ending at its length)")
    prior_keys = r.indices("priors.keys", num_t, "tuple").tolist()
    _keys_once(prior_keys, tuples, r, "priors.keys")
    priors = dict(zip(prior_keys, r.probabilities("priors.values").tolist(), strict=True))
    alarms = r.indices("alarms", num_t, "tuple")
    where: Where = {}
    seen = set()
    keep = []
    for i, t in enumerate(alarms.tolist()):  # a repeated alarm counts once, as in derivation.json
        if t not in seen:
            seen.add(t)
            keep.append(i)
            where[("alarm", t)] = (str(p), None, f"alarms[{i}]")
    groups = {}
    for key in ("labels", "truth"):
        keys = r.indices(f"{key}.keys", num_t, "tuple").tolist()
        _keys_once(keys, tuples, r, f"{key}.keys")
        groups[key] = dict(zip(keys, r.take(f"{key}.values").tolist(), strict=True))
        for i, t in enumerate(keys):
            where[(key.rstrip("s"), t)] = (str(p), None, f"{key}.keys[{i}]")
    notes = r.take("annotations").tobytes()
    try:
        doc = loads_json(notes.decode("utf-8"), str(p)) if notes else {}
    except UnicodeDecodeError as err:
        raise r.fail("annotations", f"not JSON text: not UTF-8 ({err.reason} at byte {err.start})") from None
    except InputError as err:
        raise r.fail("annotations", f"not JSON text: {err.message}") from None
    if not isinstance(doc, dict) or set(doc) - {"locations", "relations"}:
        raise r.fail("annotations", 'not an object of "locations" and "relations"')
    unique(doc, str(p), "annotations")  # as derivation.json's top level: a key given twice is an error
    index = {n: i for i, n in enumerate(tuples)} if doc.get("locations") else {}
    dg = DerivationGraph(
        tuples=tuples, rules=rules, clause_rule=c_rule, clause_head=c_head, body_offsets=offsets, body=body,
        priors=priors, alarms=alarms[keep], labels=groups["labels"], truth=groups["truth"], source=str(p),
        annotations=parse_annotations(doc, index, str(p)))
    return dg, where
