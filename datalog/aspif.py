"""Reading clingo's aspif output (its ground program as text) back in bulk, into arrays.

    g = datalog.aspif.parse_file("ground.aspif")      # a Ground: rules column-wise, shown atoms, externals
    g = datalog.aspif.parse(data)                     # the same from bytes

The statements `fastlbp ground` meets (https://potassco.org/clingo/, "aspif"): a header `asp 1 0 0
...`; normal rules with one head `1 0 1 HEAD 0 N LIT...`; shown atoms `4 LEN NAME 1 ATOM` (only
`p*` and `k` atoms are shown); externals `5 ATOM VALUE`; the step's end `0`. Anything else is a
`RuntimeError` (the translation went wrong, not the user's input).

Nothing here makes a Python object per rule: the text is read in chunks of about `CHUNK` bytes
cut at line ends; in each chunk the lines are classified by their first two bytes, the few lines
that are not rules are blanked out (and kept as text for a regex), and the rest is parsed by one
`np.fromstring` call into int32 tokens, cut into rules by the number of spaces on each line.
hmmer's 1.1 GB (27.4M rules) reads back about 25x faster than by joining and splitting one bytes
object per line, in a fraction of the memory (BENCHMARKS.md, "Figures behind the code's choices").
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings

import numpy as np

# Bytes of aspif text parsed at once: the chunk's temporaries take about 20 bytes per byte of text.
CHUNK = 32 << 20


@dataclasses.dataclass
class Ground:
    """A ground program: rules column-wise, atom names, externals (atoms are clingo's numbers).

    Attributes:
        heads: (R,) int32 head atom of each rule.
        offsets: (R+1,) int64 CSR offsets of each rule's body into `lits`.
        lits: (B,) int32 body literals (negative: a negated atom).
        atoms: (N,) int64 the shown atoms (predicates p*, k): clingo's numbers.
        preds: (N,) their predicates, "p3" or "k".
        args: (N,) their arguments as clingo writes them, '(1,"a")', or "" (nullary).
        externals: (E,) int64 external atoms.
    """

    heads: np.ndarray
    offsets: np.ndarray
    lits: np.ndarray
    atoms: np.ndarray
    preds: list[str]
    args: list[str]
    externals: np.ndarray


_OUTPUT = re.compile(rb"^4 ([0-9]+) ([pk][0-9]*)((?:\(.*\))?) 1 ([0-9]+)$", re.MULTILINE)
_EXTERNAL = re.compile(rb"^5 ([0-9]+) [0-9]+$", re.MULTILINE)
_END = re.compile(rb"^0$", re.MULTILINE)


class _Parts:
    """What the chunks gave: rule arrays per chunk and the text of every line that is not a rule."""

    def __init__(self):
        self.heads: list[np.ndarray] = []
        self.lens: list[np.ndarray] = []
        self.lits: list[np.ndarray] = []
        self.other: list[bytes] = []

    def add(self, buf: bytes) -> None:
        """Parses one chunk: whole lines, the last ending in a newline."""
        c = np.frombuffer(buf, np.uint8)
        if not c.size:
            return
        ends = np.flatnonzero(c == 10)
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        nxt = np.minimum(starts + 1, c.size - 1)
        rule = (c[starts] == 49) & (c[nxt] == 32)  # "1 "
        if not rule.all():
            # Lines that are not rules (a few: shown atoms, externals) go to the regexes as text, and
            # become blanks for the integer parser (a difference array marks their bytes).
            mark = np.zeros(c.size + 1, np.int8)
            mark[starts[~rule]] += 1
            mark[ends[~rule] + 1] -= 1
            inside = np.cumsum(mark[:-1], dtype=np.int8).view(bool)
            self.other.append(c[inside].tobytes())
            c = c.copy()
            c[inside] = 32
            starts, ends = starts[rule], ends[rule]
            buf = c.tobytes()
        if not starts.size:
            return
        spaces = np.flatnonzero(c == 32)
        per_line = np.searchsorted(spaces, ends) - np.searchsorted(spaces, starts) + 1
        first = np.zeros(per_line.size + 1, np.int64)
        np.cumsum(per_line, out=first[1:])
        try:
            with warnings.catch_warnings():  # older numpy warns and stops at a token that is no number:
                warnings.simplefilter("ignore", DeprecationWarning)  # the count below tells
                tokens = np.fromstring(buf, dtype=np.int32, sep=" ")
        except ValueError:
            tokens = None
        if tokens is None or tokens.size != first[-1]:
            raise RuntimeError("clingo's aspif rules did not parse as integers (one space between numbers)")
        s = first[:-1]
        n_body = per_line - 6
        ok = (n_body >= 0) & (tokens[np.minimum(s + 5, tokens.size - 1)] == n_body)
        ok &= (tokens[s + 1] == 0) & (tokens[s + 2] == 1) & (tokens[s + 4] == 0)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            rule = tokens[s[i]:s[i] + per_line[i]].tolist()[:12]
            raise RuntimeError(f"unexpected aspif rule {rule} (not a normal rule with one head)")
        in_body = np.ones(tokens.size, bool)
        for k in range(6):
            in_body[s + k] = False
        self.heads.append(tokens[s + 3])
        self.lens.append(n_body)
        self.lits.append(tokens[in_body])

    def ground(self) -> Ground:
        other = b"".join(self.other)
        if not other.startswith(b"asp "):
            raise RuntimeError("clingo's aspif output has no header")
        found = _OUTPUT.findall(other)
        externals = np.array(_EXTERNAL.findall(other), np.int64)
        n_lines = other.count(b"\n") + (not other.endswith(b"\n"))
        if len(found) + externals.size + len(_END.findall(other)) + 1 != n_lines:
            line = next(x for x in other.split(b"\n")[1:] if x and not _OUTPUT.fullmatch(x)
                        and not _EXTERNAL.fullmatch(x) and x != b"0")
            raise RuntimeError(f"unexpected aspif statement {line[:80]!r}")
        atoms, preds, args = _shown(found)
        lens = np.concatenate(self.lens) if self.lens else np.zeros(0, np.int64)
        offsets = np.zeros(lens.size + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        heads = np.concatenate(self.heads) if self.heads else np.zeros(0, np.int32)
        lits = np.concatenate(self.lits) if self.lits else np.zeros(0, np.int32)
        return Ground(heads, offsets, lits, atoms, preds, args, externals)


def _shown(found: list[tuple[bytes, bytes, bytes, bytes]]) -> tuple[np.ndarray, list[str], list[str]]:
    """The (length, predicate, arguments, atom) matches of aspif output statements, checked."""
    n = len(found)
    if not n:
        return np.zeros(0, np.int64), [], []
    length, pred, args, atom = (list(col) for col in zip(*found, strict=True))
    sizes = np.fromiter(map(len, pred), np.int64, n) + np.fromiter(map(len, args), np.int64, n)
    if (np.array(length).astype(np.int64) != sizes).any():
        raise RuntimeError("an aspif output statement's length does not match its name")
    return (np.array(atom).astype(np.int64), list(map(bytes.decode, pred)),
            [a.decode("utf-8") for a in args])


def parse(data: bytes, chunk: int = CHUNK) -> Ground:
    """Parses aspif text (see the module docstring), `chunk` bytes at a time.

    Raises:
        RuntimeError: a statement the translation never makes, or a malformed one.
    """
    parts = _Parts()
    pos = 0
    while pos < len(data):
        end = data.rfind(b"\n", pos, pos + chunk) + 1 if pos + chunk < len(data) else len(data)
        if end <= pos:  # a line longer than a chunk
            end = data.find(b"\n", pos + chunk) + 1 or len(data)
        piece = data[pos:end]
        parts.add(piece if piece.endswith(b"\n") else piece + b"\n")
        pos = end
    return parts.ground()


def parse_file(path: str | os.PathLike, chunk: int = CHUNK) -> Ground:
    """`parse` of a file, read `chunk` bytes at a time (the whole text is never in memory)."""
    parts = _Parts()
    rest = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:  # a line longer than a chunk
                rest = block
                continue
            parts.add(block[:cut] if cut < len(block) else block)
            rest = block[cut:]
    if rest:
        parts.add(rest + b"\n")
    return parts.ground()
