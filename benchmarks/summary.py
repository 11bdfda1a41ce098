"""The short table `run_all.sh` prints last: the headline figures of every benchmark JSON in a folder.

    python benchmarks/summary.py OUT

Reads what the benchmarks of the run left in OUT (bench_parall.json,
compile_probe*.json, */bench_rounds.json, bench_schedules.json,
bench_seqfix_pallas.json, sweep_seqfix_pallas.json, bench_pgmax.json) and
prints one line per figure that BENCHMARKS.md states. Files that are absent
or unreadable are skipped; the full details stay in the JSON files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def lines(out: Path) -> list[str]:
    """Headline lines from the JSON files under `out`."""
    rows: list[str] = []
    data = _load(out / "bench_parall.json")
    if data:
        rows.append("PARALL µs per iteration (variant precision: per size in edges)")
        table: dict[tuple[str, str], list[str]] = {}
        for r in data.get("rows", []):
            table.setdefault((r["variant"], r["precision"]), []).append(
                f"{r['factor_edges']:,}: {r['us_per_iter']:.1f} (compile {r['compile_s']:.2f} s)")
        rows += [f"  {v:>14} {p}  " + "; ".join(cells) for (v, p), cells in table.items()]
    for path in sorted(out.glob("compile_probe*.json")):
        data = _load(path)
        if data:
            rows.append(f"fused loop compile, fresh process ({path.name}): lower + compile s")
            rows += [f"  {r['size']:>9,} {r['dtype']}  {r['total_s']:.2f} s (layout {r['prepare_s']:.2f} s)"
                     for r in data.get("rows", [])]
    for path in sorted(out.glob("*/bench_rounds.json")):
        r = _load(path)
        if r:
            rows.append(f"rounds {path.parent.name}: {r.get('schedule')} backend {r.get('backend', 'xla')}, "
                        f"{r.get('edges', 0):,} edges: cold {_ms(r.get('cold_round_s'))}, warm median "
                        f"{_ms(r.get('warm_round_median_s'))}, p90 / max {_ms(r.get('warm_round_p90_s'))} / "
                        f"{_ms(r.get('warm_round_max_s'))}, TotalTime {r.get('total_time_s', 0):.3f} s, "
                        f"Rank-100%-T {r.get('rank_100_t')}, AUC {r.get('auc')}, "
                        f"{r.get('compilations_in_warm_rounds')} compilations in warm rounds")
    data = _load(out / "bench_schedules.json")
    if data:
        rows.append("sequential schedules (size strategy: levels, µs per iteration, cold round, warm round)")
        for size, entry in data.get("sizes", {}).items():
            for name, r in entry.get("strategies", {}).items():
                rows.append(f"  {size:>8} {name:>15}: {r.get('batches_levelling')} levels, "
                            f"{r.get('us_per_iteration')} µs/it, cold {r.get('cold_round_s')} s "
                            f"({r.get('cold_iterations')} it), warm {r.get('warm_round_s')} s "
                            f"({r.get('warm_iterations')} it)")
    data = _load(out / "bench_seqfix_pallas.json")
    if data:
        rows.append("persistent SEQFIX/TOPO kernel (size strategy: ms per iteration, Pallas / chunk loop)")
        rows += [f"  {r['size']:>7} {r['strategy']:>7}: {r['us_per_iter_pallas'] / 1e3:.1f} / "
                 f"{r['us_per_iter_xla'] / 1e3:.1f} ms, cold {r['cold_round_s']:.3f} s "
                 f"({r['cold_iters']} it), |d| {r['max_abs_diff_3_iters']:.1e}" for r in data.get("rows", [])]
    data = _load(out / "sweep_seqfix_pallas.json")
    if data:
        rows.append("persistent SEQFIX kernel by chunk width and warps (ms per iteration)")
        rows += [f"  {r['size']:>7} {r['strategy']:>7} W={r['width']} warps={r['warps']}: "
                 f"{r['ms_per_iter']:.1f} ms" for r in data.get("rows", [])]
    data = _load(out / "bench_pgmax.json")
    if data:
        rows.append("PGMax / fastlbp, time of the same iterations")
        for r in data.get("rows", []):
            if "error" in r:
                rows.append(f"  {r['size']:>8}: fastlbp failed: {r['error']}")
            else:
                ratio = r.get("ratio")
                rows.append(f"  {r['edges']:>8,} {r['precision']}: fastlbp {r['fastlbp_s'] * 1e3:.2f} ms, "
                            f"ratio {'-' if ratio is None else f'{ratio:.3g}'} ({r['pgmax']['status']})")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="out", help="the folder the benchmarks wrote to ($OUT)")
    out = Path(ap.parse_args(argv).out)
    rows = lines(out)
    print("\n".join(["=== summary (" + str(out) + ")"] + (rows or ["no benchmark JSON found"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
