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
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from fastlbp.errors import InputError, read_text
from fastlbp.graph import AND, OR, GraphError, from_arrays
from fastlbp.model import Model


def _prob(text: str, path, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(path, line, f"{what} {text!r} is not a number") from None
    if not (0.0 <= value <= 1.0) or math.isnan(value):
        raise InputError(path, line, f"{what} {text!r} is not a probability in [0, 1]")
    return value


def _label_key(labels):
    if all(lbl.lstrip("-").isdigit() for lbl in labels):
        return sorted(labels, key=int)
    return sorted(labels)


def parse(text: str, path: str | os.PathLike | None = None) -> Model:
    """Parses the causal factor-graph format.

    Raises:
        InputError: naming the file, line and problem.
    """
    path = str(path) if path is not None else None
    lines = text.splitlines()
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
    try:
        count = int(first)
    except ValueError:
        raise InputError(path, ln, f"expected the number of factors, got {first!r}") from None
    if count <= 0:
        raise InputError(path, ln, "the number of factors must be positive")

    heads, kinds, p1s, p2s, bodies, head_lines = [], [], [], [], [], []
    for _ in range(count):
        head, hl = next_nonempty("a head variable label")
        if " " in head:
            raise InputError(path, hl, f"expected one head variable label, got {head!r}")
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
            try:
                k = int(ktext)
            except ValueError:
                raise InputError(path, kl, f"expected the body size, got {ktext!r}") from None
            if k < 0:
                raise InputError(path, kl, "the body size must not be negative")
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
            raise InputError(path, tl, f"unknown factor type {typ!r} (expected I, *p;q or +p;q)")
        heads.append(head)
        head_lines.append(hl)
    while pos < len(lines):
        s, ln = next_line("")
        if s:
            raise InputError(path, ln, f"text after the last of {count} factors: {s!r}")

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


def load(path: str | os.PathLike) -> Model:
    """Reads a causal factor-graph file (see `parse`)."""
    p = Path(path)
    text = read_text(p)
    return parse(text, p)


def dumps(model: Model) -> str:
    """Writes a model in the causal factor-graph format (labels = variable names)."""
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
    Path(path).write_text(dumps(model), encoding="utf-8")


def load_marginals(path: str | os.PathLike) -> dict[str, float]:
    """Reads a `label value` per line marginals file (libDAI reference output)."""
    out = {}
    for ln, line in enumerate(Path(path).read_text().splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise InputError(str(path), ln, f"expected 'label value', got {line!r}")
        out[parts[0]] = float(parts[1])
    return out
