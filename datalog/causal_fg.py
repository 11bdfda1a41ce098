"""libDAI's causal factor-graph text format (libDAI with Wu et al.'s extension).

The format "causal_fg" of `datalog.io.FORMATS`; `load_marginals` reads libDAI's
reference marginals, which the tests compare against.

First line: the number of factors. Each factor: an empty line, the head
variable's label, a type line, then for `*` and `+` a line with the body size
k and a line with k labels.

    I        prior, next line p = P(head=1)          -> AND, no body, p1 = p2 = p
    *p;q     noisy AND: P(head=1 | all body) = p, else q   -> AND, p1 = p, p2 = q
    +p;q     OR: P(head=0 | no body true) = p,
                 P(head=0 | some body true) = q            -> OR, p1 = 1 - q, p2 = 1 - p

Variables are indexed by ascending label (numerically when all labels are
integers), which is also the order libDAI visits a factor's variables in.
A label is any text without whitespace; `dumps` refuses a model whose names
are not (empty, or holding a space, a tab, a line break).
"""

from __future__ import annotations

import math
import os
import re
from decimal import Decimal
from pathlib import Path

import numpy as np

from datalog.reading import shown
from fastlbp.core.errors import InputError, read_text, text_lines
from fastlbp.core.graph import AND, OR, GraphError, from_arrays
from fastlbp.core.model import Model
from fastlbp.core.outputs import write_atomically

_INTEGER = re.compile(r"-?[0-9]+")
_COUNT = re.compile(r"[0-9]{1,18}")  # below 2^63, and int() never sees a 5,000-digit string


def _prob(text: str, path, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(path, line, f"{what} {shown(text)} is not a number") from None
    if not (0.0 <= value <= 1.0) or math.isnan(value):
        raise InputError(path, line, f"{what} {shown(text)} is not a probability in [0, 1]")
    return value


def _count(text: str, path, line: int, what: str) -> int:
    """A non-negative count in ASCII digits (int() would also take '١٢', '+5' or '1_0')."""
    if _COUNT.fullmatch(text) is None:
        raise InputError(path, line, f"expected {what} (a number), got {shown(text)}")
    return int(text)


def _label_key(labels):
    """Labels sorted numerically when all are integers in ASCII digits (any length), else as text."""
    if all(_INTEGER.fullmatch(lbl) for lbl in labels):
        # Decimal compares integers of any length exactly (int() stops at 4,300 digits); the
        # text breaks ties between spellings of one number ("1", "01"), so the order is deterministic.
        return sorted(labels, key=lambda lbl: (Decimal(lbl), lbl))
    return sorted(labels)


def parse(text: str, path: str | os.PathLike | None = None) -> Model:
    """Parses the causal factor-graph format.

    Raises:
        InputError: naming the file, line and problem.
    """
    path = str(path) if path is not None else None
    lines = text_lines(text)
    pos = 0  # index of the next line to read

    def next_line(what: str) -> tuple[str, int]:
        nonlocal pos
        if pos >= len(lines):
            raise InputError(path, len(lines), f"unexpected end of file, expected {what}")
        pos += 1
        return lines[pos - 1].strip(), pos

    def next_nonempty(what: str) -> tuple[str, int]:
        while True:
            s, ln = next_line(what)
            if s:
                return s, ln

    first, ln = next_nonempty("the number of factors")
    count = _count(first, path, ln, "the number of factors")
    if count <= 0:
        raise InputError(path, ln, "the number of factors must be positive")

    heads, kinds, p1s, p2s, bodies, head_lines = [], [], [], [], [], []
    for _ in range(count):
        head, hl = next_nonempty("a head variable label")
        if head.split() != [head]:
            raise InputError(path, hl, f"expected one head variable label, got {shown(head)}")
        typ, tl = next_line("a factor type line (I, *p;q or +p;q)")
        if typ == "I":
            ptext, pl = next_line("the prior probability")
            p = _prob(ptext, path, pl, "prior")
            kinds.append(AND)
            p1s.append(p)
            p2s.append(p)
            bodies.append([])
        elif typ[:1] in ("*", "+") and ";" in typ:
            a, _, b = typ[1:].partition(";")
            p = _prob(a, path, tl, "probability")
            q = _prob(b, path, tl, "probability")
            ktext, kl = next_line("the body size")
            if ktext.startswith("-") and _COUNT.fullmatch(ktext[1:]):
                raise InputError(path, kl, "the body size must not be negative")
            k = _count(ktext, path, kl, "the body size")
            body_text, bl = next_line("the body labels") if k else ("", kl)
            body = body_text.split()
            if len(body) != k:
                raise InputError(path, bl, f"expected {k} body labels, got {len(body)}")
            if typ[0] == "*":
                kinds.append(AND)
                p1s.append(p)
                p2s.append(q)
            else:
                kinds.append(OR)
                p1s.append(1.0 - q)
                p2s.append(1.0 - p)
            bodies.append(body)
        else:
            raise InputError(path, tl, f"unknown factor type {shown(typ)} (expected I, *p;q or +p;q)")
        heads.append(head)
        head_lines.append(hl)
    while pos < len(lines):
        s, ln = next_line("")
        if s:
            raise InputError(path, ln, f"text after the last of {count} factors: {shown(s)}")

    names = _label_key(set(heads).union(*bodies))
    index = {name: i for i, name in enumerate(names)}
    lens = np.array([len(b) for b in bodies], dtype=np.int64)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    body_idx = np.array([index[v] for b in bodies for v in b], dtype=np.int64)
    head_idx = np.array([index[h] for h in heads], dtype=np.int64)
    try:
        graph = from_arrays(kinds, head_idx, offsets, body_idx, p1s, p2s, num_vars=len(names))
    except GraphError as err:
        msg = str(err)
        line = None
        if msg.startswith("factor "):
            a = int(msg.split()[1].rstrip(":"))
            line = head_lines[a]
        raise InputError(path, line, msg) from None
    return Model(graph=graph, var_names=tuple(names), source=path)


def load(path: str | os.PathLike, *, max_decompressed: int | None = None) -> Model:
    """Reads a causal factor-graph file (see `parse`); gzip-compressed allowed, up to `max_decompressed`
    bytes (default: see `fastlbp.core.errors.decompression_limit`)."""
    p = Path(path)
    text = read_text(p, max_decompressed=max_decompressed)
    return parse(text, p)


def label_problem(name: str) -> str | None:
    """Why `name` cannot be a label of this format (None when it can)."""
    if not name:
        return "it is empty"
    if name.split() != [name]:
        return "it holds whitespace (a space, a tab or a line break), which separates labels"
    return None


def dumps(model: Model, path: str | os.PathLike | None = None) -> str:
    """Writes a model in the causal factor-graph format (labels = variable names).

    Raises:
        InputError: (naming `path`) a variable name that is no label (see `label_problem`).
    """
    for name in model.var_names:
        problem = label_problem(name)
        if problem is not None:
            raise InputError(None if path is None else str(path), None,
                             f"variable {name!r} cannot be written as a causal factor-graph label: {problem}")
    g = model.graph
    off = np.asarray(g.factor_offsets)
    ev = np.asarray(g.edge_var)
    kind = np.asarray(g.factor_kind)
    p1 = np.asarray(g.p1)
    p2 = np.asarray(g.p2)
    names = model.var_names
    out = [str(g.num_factors)]
    for a in range(g.num_factors):
        body = [names[v] for v in ev[off[a] + 1 : off[a + 1]]]
        out.append("")
        out.append(names[ev[off[a]]])
        if kind[a] == AND and not body and p1[a] == p2[a]:
            out += ["I", repr(float(p1[a]))]
            continue
        if kind[a] == AND:
            out.append(f"*{float(p1[a])!r};{float(p2[a])!r}")
        else:
            out.append(f"+{float(1.0 - p2[a])!r};{float(1.0 - p1[a])!r}")
        out.append(str(len(body)))
        if body:
            out.append(" ".join(body))
    return "\n".join(out) + "\n"


def save(model: Model, path: str | os.PathLike) -> None:
    """Writes `dumps(model)` to `path`, atomically (`fastlbp.core.outputs.write_atomically`: nothing is
    written when a name cannot be, and a failed write leaves the old file as it was)."""
    write_atomically(path, dumps(model, path))


def load_marginals(path: str | os.PathLike) -> dict[str, float]:
    """Reads a `label value` per line marginals file (libDAI reference output)."""
    out = {}
    for ln, line in enumerate(text_lines(read_text(path)), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise InputError(str(path), ln, f"expected 'label value', got {shown(line)}")
        try:
            out[parts[0]] = float(parts[1])
        except ValueError:
            raise InputError(str(path), ln, f"{shown(parts[1])} is not a number") from None
    return out
