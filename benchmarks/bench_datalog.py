"""Loader speed on a 10^6-clause derivation graph: derivation.json and Bingo text.

    PYTHONPATH=. python benchmarks/bench_datalog.py [--clauses 1000000] [--gzip]

Builds a layered random derivation graph (inputs, then derived tuples each
with 1-4 clauses of 1-3 body tuples from earlier layers, plus a few back
edges that make cycles), writes it, and times each step of loading.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from datalog import formats
from datalog.bayesnet import to_model
from datalog.cycles import least_fixpoint
from datalog.derivation import DerivationGraph, Rule, merge_duplicates


def layered_graph(num_clauses: int, seed: int = 0) -> DerivationGraph:
    rng = np.random.default_rng(seed)
    num_inputs = num_clauses // 4
    num_derived = num_clauses // 2
    num_t = num_inputs + num_derived
    heads = num_inputs + rng.integers(0, num_derived, num_clauses)
    lens = rng.integers(1, 4, num_clauses)
    owner_head = np.repeat(heads, lens)
    # Body tuples come from before the head: acyclic so far.
    body = (rng.random(owner_head.size) * owner_head).astype(np.int64)
    offsets = np.zeros(num_clauses + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    # ~1% of the clauses get a reverse twin (head <- its body's first derived tuple): 2-cycles.
    first = body[offsets[:-1]]
    is_head = np.zeros(num_t, bool)
    is_head[heads] = True
    twin = np.flatnonzero((rng.random(num_clauses) < 0.01) & is_head[first])
    heads = np.concatenate([heads, first[twin]])
    body = np.concatenate([body, heads[twin]])
    offsets = np.concatenate([offsets, offsets[-1] + 1 + np.arange(twin.size)])
    num_clauses += twin.size
    names = [f"in({i},{i % 97})" for i in range(num_inputs)]
    names += [f"out({i},{i % 89})" for i in range(num_derived)]
    return DerivationGraph(
        tuples=names, rules=[Rule(f"R{r}", 0.999) for r in range(20)],
        clause_rule=rng.integers(0, 20, num_clauses).astype(np.int32), clause_head=heads.astype(np.int32),
        body_offsets=offsets, body=body.astype(np.int32),
        alarms=np.unique(heads)[-1000:].astype(np.int32),
    )


def timed(label, fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    print(f"{label:<42} {time.perf_counter() - start:8.2f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clauses", type=int, default=1_000_000)
    ap.add_argument("--gzip", action="store_true")
    args = ap.parse_args()
    dg = timed("generate", layered_graph, args.clauses)
    print(f"{dg.num_tuples:,} tuples, {dg.num_clauses:,} clauses, {len(dg.body):,} body entries")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("g.json.gz" if args.gzip else "g.json")
        timed("save_json", formats.save_json, dg, path)
        print(f"{'file size':<42} {path.stat().st_size / 2**20:8.1f} MiB")
        start = time.perf_counter()
        back, where = timed("read_json (parse + validate)", formats.read_json, path)
        dd = timed("merge_duplicates", merge_duplicates, back)
        stages = timed("least_fixpoint (cycle elimination)", least_fixpoint, dd.graph)
        model = timed("to_model (compress + factor graph)",
                      lambda: to_model(dd.graph, compress=True, stages=stages))
        print(f"{'json total (load -> Model)':<42} {time.perf_counter() - start:8.2f} s")
        print(f"clauses on cycles: {int(stages.on_cycle.sum()):,}")
        print(f"model: {model.num_vars:,} variables, {model.graph.num_edges:,} edges; {model.meta['report']}")
        bdir = Path(tmp) / "bingo"
        timed("save_bingo", formats.save_bingo, dg, bdir)
        timed("read_bingo (parse + validate)", formats.read_bingo, bdir)


if __name__ == "__main__":
    main()
