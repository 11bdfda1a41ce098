"""The documentation stays a page a reader can trust: BENCHMARKS.md holds the current figures only (one per
thing, each with its command, device and date; history goes to docs/benchmark-log.md), at most 40 KB."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_BENCHMARKS_BYTES = 40_000


def test_benchmarks_page_stays_at_most_40_kb():
    size = (ROOT / "BENCHMARKS.md").stat().st_size
    assert size <= MAX_BENCHMARKS_BYTES, (
        f"BENCHMARKS.md is {size:,} bytes: move superseded figures to docs/benchmark-log.md")


def test_benchmarks_sections_named_in_at_a_glance_exist():
    text = (ROOT / "BENCHMARKS.md").read_text()
    headings = {h.strip() for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    glance = text.split("## At a glance", 1)[1].split("\n## ", 1)[0]
    named = [row.rstrip(" |").rsplit("|", 1)[-1].strip() for row in glance.splitlines()
             if row.startswith("| ") and not row.startswith("| what") and not row.startswith("| ---")]
    missing = [n for n in named if n not in ("above", "") and not any(h.startswith(n) for h in headings)]
    assert named and missing == []
