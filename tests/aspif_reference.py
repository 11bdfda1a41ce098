"""The reference reader of clingo's aspif text: one bytes object per line (what `fastlbp ground` used
before `datalog.aspif` read it in bulk; 537 s on hmmer's 27M rules). Tests check the bulk reader
against it."""

from __future__ import annotations

import re

import numpy as np

from datalog.aspif import Ground

_OUTPUT = re.compile(rb"^4 ([0-9]+) ([pk][0-9]*)((?:\(.*\))?) 1 ([0-9]+)$")


def parse_lines(data: bytes) -> Ground:
    """Parses aspif line by line: rules `1 0 1 HEAD 0 N LITS...`, outputs `4 LEN NAME 1 ATOM`,
    externals `5 ATOM VALUE`, the end `0`."""
    lines = data.split(b"\n")
    if not lines or not lines[0].startswith(b"asp "):
        raise RuntimeError("clingo's aspif output has no header")
    heads, lens, lits, atoms, preds, args, externals = [], [], [], [], [], [], []
    for line in lines[1:]:
        if line in (b"", b"0"):
            continue
        if line[:2] == b"1 ":
            try:
                t = [int(x) for x in line.split(b" ")]
            except ValueError:
                raise RuntimeError(f"unexpected aspif rule {line[:80]!r}") from None
            if t[1:3] != [0, 1] or t[4] != 0 or len(t) < 6 or t[5] != len(t) - 6:
                raise RuntimeError(f"unexpected aspif rule {t[:12]}")
            heads.append(t[3])
            lens.append(t[5])
            lits.extend(t[6:])
        elif line[:2] == b"4 ":
            m = _OUTPUT.match(line)
            if not m or int(m.group(1)) != len(m.group(2)) + len(m.group(3)):
                raise RuntimeError(f"unexpected aspif output statement {line[:80]!r}")
            atoms.append(int(m.group(4)))
            preds.append(m.group(2).decode())
            args.append(m.group(3).decode("utf-8"))
        elif line[:2] == b"5 " and len(line.split(b" ")) == 3:
            externals.append(int(line.split(b" ")[1]))
        else:
            raise RuntimeError(f"unexpected aspif statement {line[:80]!r}")
    offsets = np.zeros(len(heads) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return Ground(np.array(heads, np.int32), offsets, np.array(lits, np.int32), np.array(atoms, np.int64),
                  preds, args, np.array(externals, np.int64))
