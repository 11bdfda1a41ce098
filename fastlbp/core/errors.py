"""Errors a user can act on: each names the file, the line and the problem; reading user files safely."""

from __future__ import annotations

import contextlib
import contextvars
import errno
import gzip
import hashlib
import io
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path


class InputError(ValueError):
    """Bad input: `path`, `line` (1-based, or None) or a JSON `location`, and a message."""

    def __init__(self, path: str | None, line: int | None, message: str, location: str | None = None):
        self.path = path
        self.line = line
        self.location = location
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = str(self.path) if self.path else "<input>"
        if self.line is not None:
            where += f":{self.line}"
        if self.location:
            where += f": at {self.location}"
        return f"{where}: {self.message}"


class ContradictoryEvidence(ValueError):
    """The labels have joint probability 0 under the model; `labels` names a conflicting set."""

    def __init__(self, labels: dict[str, bool]):
        from fastlbp.core.text import safe_name  # names from the graph: shown escaped on a terminal

        self.labels = dict(labels)
        shown = ", ".join(f"{safe_name(k)}={'true' if v else 'false'}" for k, v in self.labels.items())
        super().__init__(f"contradictory labels (joint probability 0): {shown}")


class InferenceError(RuntimeError):
    """Inference failed for a reason other than the input (a numerical failure)."""


class SettingsError(ValueError):
    """An option value out of range or unknown (a backend, a precision, ...)."""


# Reading user files ---------------------------------------------------------

# A gzip input is inflated in streaming chunks and stopped once it passes a limit, so a small file
# cannot exhaust memory (a 1 MB gzip of 1 GB of zeros reached 2.3 GB of memory when inflated whole).
# The default limit is the larger of a floor and a ratio: the shipped graphs inflate 4.3x (ftp.json.gz,
# 1.5 MB -> 6.8 MB) and 4.5x (avrora.json.gz), so 64x leaves real graphs far below it while a bomb
# (1000x for zeros) stops after at most 256 MiB of output.
DEFAULT_MAX_DECOMPRESSED = 256 * 2**20
MAX_COMPRESSION_RATIO = 64
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
_CHUNK = 2**20


def decompression_limit(compressed_size: int, max_decompressed: int | None = None) -> int:
    """Bytes a gzip file of `compressed_size` bytes may inflate to.

    Args:
        compressed_size: the file's size in bytes (0 when unknown, as for a pipe).
        max_decompressed: an explicit limit; None for the default,
            max(`DEFAULT_MAX_DECOMPRESSED` (256 MiB), `MAX_COMPRESSION_RATIO` (64) x compressed_size).
    """
    if max_decompressed is not None:
        return int(max_decompressed)
    return max(DEFAULT_MAX_DECOMPRESSED, MAX_COMPRESSION_RATIO * int(compressed_size))


def os_error(path, err: OSError) -> InputError:
    """An `InputError` for an OS error on `path`: a directory, a dangling link or a link loop said so."""
    p = str(path)
    if err.errno == errno.ELOOP:
        message = "a symbolic link loop (too many levels of symbolic links)"
    elif err.errno == errno.EISDIR:
        message = "is a directory, expected a file"
    elif err.errno == errno.ENOENT and os.path.islink(p):
        try:
            message = f"a dangling symbolic link (to {os.readlink(p)!r}, which does not exist)"
        except OSError:
            message = "a dangling symbolic link"
    elif err.errno == errno.ENOENT:
        message = "no such file or directory"
    else:
        message = err.strerror or str(err)
    return InputError(p, None, message)


def check_path(path) -> None:
    """Raises `InputError` unless `path` exists (following links): missing, dangling or a loop."""
    try:
        os.stat(path)
    except OSError as err:
        raise os_error(path, err) from None


# What the file readers below read, while `recorded_reads()` is on: (path, sha256 of the file's raw bytes,
# or None for what cannot be hashed: a pipe, a device). A context variable, not an argument, because every
# format's loader reads through these functions several calls down (derivation.json, Bingo's files, causal
# factor graphs, derivation.npz); the model cache (`fastlbp.io.model_cache.cached`) stores a fresh model only
# when what its loader read here is byte for byte what the cache's key was made of.
_READS: contextvars.ContextVar[list[tuple[Path, str | None]] | None] = contextvars.ContextVar(
    "fastlbp_reads", default=None)


@contextlib.contextmanager
def recorded_reads() -> Iterator[list[tuple[Path, str | None]]]:
    """Within it, every file `read_bytes` (so `read_text`) or `read_raw` reads is listed: (path as opened,
    sha256 hex digest of its raw bytes, None for a file that is not regular)."""
    reads: list[tuple[Path, str | None]] = []
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)


def _record(p: Path, raw: bytes | None) -> None:
    reads = _READS.get()
    if reads is not None:
        reads.append((p, None if raw is None else hashlib.sha256(raw).hexdigest()))


def read_raw(path) -> bytes:
    """A regular file's bytes as they are (no decompression), read once through one descriptor.

    Raises:
        InputError: naming the file: missing, a directory, a dangling link or
            a link loop, not a regular file (a pipe, a device), unreadable.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise os_error(p, err) from None
    with open(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise InputError(str(p), None, "not a regular file (a pipe or a device?): copy it into one")
            raw = f.read()
        except OSError as err:
            raise os_error(p, err) from None
    _record(p, raw)
    return raw


def read_bytes(path, *, max_decompressed: int | None = None) -> bytes | bytearray:
    """A file's bytes, gzip-compressed files (by their magic bytes) decompressed.

    A regular file is read whole, once, then inflated from memory in 1 MiB
    chunks that stop once past the limit (see `decompression_limit`); a file
    that is not a regular file (a pipe, a device) is read under the same
    limit, since its size is unknown.

    Raises:
        InputError: naming the file: missing, a directory, a dangling link or
            a link loop, unreadable, broken gzip, or over the limit.
    """
    p = Path(path)
    try:
        f = open(p, "rb")  # noqa: SIM115  (closed below; open errors have their own message)
    except OSError as err:
        raise os_error(p, err) from None
    with f:
        try:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode):
                raw = f.read()
                _record(p, raw)
                if raw[:2] == GZIP_MAGIC:
                    return _inflate(io.BytesIO(raw), p, decompression_limit(len(raw), max_decompressed))
                return raw
            _record(p, None)
            if f.peek(2)[:2] == GZIP_MAGIC:
                return _inflate(f, p, decompression_limit(0, max_decompressed))
            limit = DEFAULT_MAX_DECOMPRESSED if max_decompressed is None else int(max_decompressed)
            out = bytearray()
            while chunk := f.read(min(_CHUNK, limit + 1 - len(out))):
                out += chunk
                if len(out) > limit:
                    raise InputError(str(p), None, f"not a regular file, and its size exceeds {limit} bytes; "
                                     "raise the limit with max_decompressed= (fastlbp.load), or copy "
                                     "it into a regular file (which has no limit)")
            return out
        except OSError as err:
            raise os_error(p, err) from None


def _inflate(f, p: Path, limit: int) -> bytearray:
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=f, mode="rb") as z:
            while chunk := z.read(min(_CHUNK, limit + 1 - len(out))):
                out += chunk
                if len(out) > limit:
                    raise InputError(str(p), None, f"decompressed size exceeds {limit} bytes (a gzip bomb?); "
                                     "raise the limit with max_decompressed= (fastlbp.io.loading.load), or "
                                     "decompress the file first (gunzip: an uncompressed file has no limit)")
    except (OSError, EOFError, zlib.error) as err:
        raise InputError(str(p), None, f"not a valid gzip file ({err})") from None
    return out


def read_text(path, *, max_decompressed: int | None = None) -> str:
    """A UTF-8 text file's contents (gzip allowed, see `read_bytes`), a leading byte order mark dropped.

    Raises:
        InputError: as `read_bytes`, or bytes that are not UTF-8 (with their line).
    """
    data = read_bytes(path, max_decompressed=max_decompressed)
    skip = len(UTF8_BOM) if data[:len(UTF8_BOM)] == UTF8_BOM else 0
    try:
        return str(memoryview(data)[skip:], "utf-8")
    except UnicodeDecodeError as err:
        at = err.start + skip
        line = data.count(b"\n", 0, at) + 1
        raise InputError(str(path), line, f"not valid UTF-8 ({err.reason} at byte {at})") from None


def text_lines(text: str) -> list[str]:
    """Lines split at \\n, \\r\\n and \\r only.

    `str.splitlines` also splits at \\v, \\f, \\x1c-\\x1e, \\x85, U+2028 and U+2029,
    which may sit inside a tuple's name; the line-based formats (Bingo's
    files, causal factor graphs, labels) end lines the way files do. As
    with `splitlines`, a final line break ends the last line (no empty line after it).
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines
