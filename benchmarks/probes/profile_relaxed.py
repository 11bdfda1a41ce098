"""Where a relaxation pass's time goes (fastlbp/engines/relaxed.py): each stage alone in a jitted loop.

    python benchmarks/probes/profile_relaxed.py --size ftp
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common, bench_schedules
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from bench_schedules import make_model  # noqa: E402
from common import timed  # noqa: E402

from fastlbp import engines  # noqa: E402
from fastlbp.core import equations, segments
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines import parall, relaxed  # noqa: E402
from fastlbp.engines.loop import controls, init  # noqa: E402


def loop(fn, n):
    """n applications of fn inside one jitted fori_loop (amortises launch)."""
    return jax.jit(lambda x: jax.lax.fori_loop(0, n, lambda _, y: fn(y), x))


@jax.jit
def sweep_with_passes(graph, layout, messages, evidence):
    """One relaxed sweep and the passes it took (`relaxed.sweep`, jitted)."""
    return relaxed.sweep(graph, layout, messages, evidence)[:2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="ftp")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    model, _ = make_model(args.size)
    g = jax.device_put(model.graph)
    runner = engines.make_runner(model, Settings(schedule="seqfix"))
    lay = runner.layout  # relaxed.RelaxLayout
    plan, sums = lay.plan, lay.sums
    n = args.reps
    ev = jnp.zeros(g.num_vars)
    msgs = runner(g, init(g), ev, controls(0.0, 3, 0.0)).messages
    inputs = relaxed.pass_inputs(g, lay, msgs, ev)
    laid = inputs.old_split

    stages = {
        "whole pass": lambda m: relaxed.relax_pass(g, lay, inputs, m),
        "PARALL sweep (parall.step)": lambda m: parall.step(g, sums, m, ev),
        "factor side (equations.factor_to_var)": lambda m: equations.factor_to_var(g, sums, m),
        "row totals (segment_sum plan)": lambda m: m + segments.segment_sum(
            sums.var, m, transform=equations.split_infinite)[g.edge_var, 0],
    }
    rows = []
    for name, fn in stages.items():
        t, _ = timed(loop(fn, n), msgs, repeats=5)
        rows.append((name, t / n * 1e6))
    for name, fn in {"cumsum (N,3) axis 0": lambda x: jnp.cumsum(x, axis=0) * 0.5,
                     "cumsum (3,N) axis 1": lambda x: (jnp.cumsum(x.T, axis=1) * 0.5).T,
                     "gather read order (N,3)": lambda x: x[plan.read_order]}.items():
        t, _ = timed(loop(fn, n), laid, repeats=5)
        rows.append((name, t / n * 1e6))
    t, _ = timed(lambda m: sweep_with_passes(g, lay, m, ev), msgs, repeats=5)
    rows.append(("one sweep (while loop of passes)", t * 1e6))
    print(f"{args.size}: {g.num_edges:,} edges, {jax.devices()[0]}")
    for name, us in rows:
        print(f"{name:>40} {us:10.1f} us")


if __name__ == "__main__":
    main()
