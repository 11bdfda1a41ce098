"""Summarise an `ncu --csv --page raw` log (from ncu_sweep.py) as one line per kernel."""

from __future__ import annotations

import csv
import sys

COLS = {
    "gpu__time_duration.sum": "us",
    "launch__registers_per_thread": "regs",
    "launch__block_size": "block",
    "launch__grid_size": "grid",
    "sm__maximum_warps_per_active_cycle_pct": "theo_occ%",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "ach_occ%",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2%",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm%",
    "smsp__inst_executed.sum": "inst",
    "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active": "fp64%",
}


def main(path: str) -> None:
    lines = [ln for ln in open(path, errors="replace") if ln.startswith('"')]
    rows = list(csv.reader(lines))
    head, units, body = rows[0], rows[1], rows[2:]
    idx = {c: head.index(c) for c in COLS if c in head}
    name_i = head.index("Kernel Name")
    print(f"{'kernel':<48} " + " ".join(f"{COLS[c]:>9}" for c in idx))
    total = 0.0
    for r in body:
        vals = []
        for c, i in idx.items():
            v = r[i].replace(",", "")
            if c == "gpu__time_duration.sum":
                scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,
                         "ms": 1e3}[units[i]]
                v = f"{float(v) * scale:.2f}"
                total += float(v)
            vals.append(v)
        print(f"{r[name_i][:48]:<48} " + " ".join(f"{v:>9}" for v in vals))
    print(f"total kernel time: {total:.1f} us over {len(body)} kernels")


if __name__ == "__main__":
    main(sys.argv[1])
