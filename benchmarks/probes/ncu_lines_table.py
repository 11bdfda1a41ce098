"""Summarises `ncu --page source --print-source sass --csv` of one kernel (ncu_lines.sh): warp
instructions per 32 threads, subroutine calls, the opcode mix and the lines with the most stall
samples; writes the whole listing (index, executions per warp, stall samples, SASS) beside it."""

from __future__ import annotations

import collections
import csv
import sys


def main(path: str) -> None:
    rows = list(csv.reader(open(path, errors="replace")))
    head_i = next((i for i, r in enumerate(rows) if "Instructions Executed" in r), None)
    if head_i is None:
        print("no 'Instructions Executed' column; first rows:", *rows[:5], sep="\n")
        return
    head, data = rows[head_i], [r for r in rows[head_i + 1:] if len(r) == len(rows[head_i])]
    ie, src = head.index("Instructions Executed"), head.index("Source")
    ss = head.index("Warp Stall Sampling (All Samples)")
    count = [float(r[ie] or 0) for r in data]
    stall = [float(r[ss] or 0) for r in data]
    warps = count[0]  # the first instruction runs once per warp
    listing = path.rsplit(".", 1)[0] + ".txt"
    with open(listing, "w") as out:
        for i, r in enumerate(data):
            out.write(f"{i:5d} {count[i] / warps:7.2f} {stall[i]:6.0f}  {r[src].strip()}\n")
    print(f"{warps:,.0f} warps, {sum(count) / warps:.1f} instructions per warp, "
          f"{sum(stall):,.0f} stall samples; listing in {listing}")
    calls = [(i, count[i] / warps) for i, r in enumerate(data) if "CALL" in r[src]]
    print("subroutine calls (line, executions per warp):", calls)
    ops = collections.Counter()
    for r, c in zip(data, count, strict=True):
        words = [w for w in r[src].split() if not w.startswith("@")]
        if words:
            ops[words[0].split(".")[0]] += c / warps
    print("per warp:", ", ".join(f"{k} {v:.0f}" for k, v in ops.most_common(16)))
    print("most stall samples:")
    for i in sorted(range(len(data)), key=lambda i: -stall[i])[:15]:
        print(f"  {i:5d} {count[i] / warps:6.2f}/warp {stall[i]:6.0f}  {data[i][src].strip()[:70]}")


if __name__ == "__main__":
    main(sys.argv[1])
