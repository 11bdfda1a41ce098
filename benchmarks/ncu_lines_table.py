"""Sums `ncu --page source --print-source cuda,sass` CSV rows by source line: executed warp
instructions per Python line of the kernel, most first (ncu_lines.sh)."""

from __future__ import annotations

import collections
import csv
import sys


def main(path: str) -> None:
    rows = list(csv.reader(open(path, errors="replace")))
    head_i = next((i for i, r in enumerate(rows) if any("Instructions Executed" in c for c in r)), None)
    if head_i is None:
        print("no header with 'Instructions Executed'; first rows:")
        for r in rows[:15]:
            print(r[:8])
        return
    head = rows[head_i]
    print("columns:", head[:12])
    col = next(i for i, c in enumerate(head) if "Instructions Executed" in c)
    src = next((i for i, c in enumerate(head) if c.strip() in ("Source", "# Source")), 1)
    per_line = collections.Counter()
    current = "?"
    total = 0.0
    for r in rows[head_i + 1:]:
        if len(r) <= col:
            # a source-file or source-line marker row
            if r:
                current = " ".join(r)[:120]
            continue
        try:
            v = float(r[col].replace(",", "") or 0)
        except ValueError:
            current = " ".join(r)[:120]
            continue
        key = r[src][:120] if src < len(r) else current
        per_line[key] += v
        total += v
    print(f"total warp instructions {total:,.0f}")
    for k, v in per_line.most_common(60):
        print(f"{v:>14,.0f} {100 * v / max(total, 1):5.1f} %  {k}")


if __name__ == "__main__":
    main(sys.argv[1])
