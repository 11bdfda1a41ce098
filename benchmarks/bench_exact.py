"""Exact marginals of every variable: fastlbp's bucket elimination against pyAgrum's LazyPropagation.

    PYTHONPATH=. python benchmarks/bench_exact.py [--sizes 4,6,8,10,12,14] [--repeats 3] [--host-below N]

The networks are n x n grids of noisy ORs (each cell a noisy OR of the cells
above and to its left, the corner an input with prior 0.3; two labels): the
induced width grows with n (about n + 1 after min-fill), so the largest table
has about 2^(n+2) entries. Both compute P(x | labels) for every variable:
fastlbp `exact_marginals` (cold: the first call, with any compilation; warm:
the median of `--repeats` further calls; then one call with a third label,
a new labelled set as in a triage session: it plans again but must compile
nothing; "kernels" counts the device kernels compiled so far in the process,
cumulative over the sizes; `--host-below 16384` on a CPU runs them as a GPU
would), pyAgrum `LazyPropagation` (a
junction tree in C++, CPU; time of a fresh engine's makeInference plus every
posterior, median of the repeats). The largest difference between the two
is reported too. pyAgrum is in the `bench` extra (`pip install pyagrum`).

Details go to $OUT/bench_exact.json (OUT defaults to ./out); the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # exact_support: arena_copies
from exact_support import arena_copies  # noqa: E402

from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.settings import Settings
from fastlbp.engines.exact import exact_marginals, kernels

# float64 as fastlbp's entry points run it; this script also calls engines and jnp directly
jax.config.update("jax_enable_x64", True)


def grid(n: int, seed: int = 0) -> list[Factor]:
    """n x n noisy ORs of the upper and left neighbours (cell i*n+j), the corner an input."""
    rng = np.random.default_rng(seed)
    factors = []
    for i in range(n):
        for j in range(n):
            body = tuple(v for v in ((i - 1) * n + j if i else None, i * n + j - 1 if j else None)
                         if v is not None)
            v = i * n + j
            if body:
                p1, p2 = float(rng.uniform(0.6, 0.95)), float(rng.uniform(0.01, 0.2))
                factors.append(Factor(OR, v, body, p1, p2))
            else:
                factors.append(Factor(AND, v, (), 0.3, 0.3))
    return factors


def pyagrum_net(factors: list[Factor], num_vars: int):
    """The same Bayesian network in pyAgrum (one factor per head: the head's CPT)."""
    import pyagrum as gum

    bn = gum.BayesNet("grid")
    ids = [bn.add(gum.LabelizedVariable(f"x{v}", "", 2)) for v in range(num_vars)]
    for f in factors:
        for b in f.body:
            bn.addArc(ids[b], ids[f.head])
    for f in factors:
        cpt = bn.cpt(ids[f.head])
        for values in np.ndindex(*(2,) * len(f.body)):
            cond = all(values) if f.kind == AND else any(values)
            p = f.p1 if cond else f.p2
            cpt[{f"x{b}": int(x) for b, x in zip(f.body, values, strict=True)}] = [1.0 - p, p]
    return bn


def pyagrum_marginals(bn, num_vars: int, labels: dict[int, bool]) -> np.ndarray:
    import pyagrum as gum

    ie = gum.LazyPropagation(bn)
    ie.setEvidence({f"x{v}": int(t) for v, t in labels.items()})
    ie.makeInference()
    return np.array([ie.posterior(f"x{v}")[1] for v in range(num_vars)])


def timed(fn, repeats: int) -> tuple[float, float, object]:
    start = time.perf_counter()
    out = fn()
    cold = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return cold, statistics.median(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=None, help="grid sides (default 4..14 on a CPU, 4..20 on a GPU)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--agrum-max", type=int, default=16, help="largest grid side run with pyAgrum too")
    ap.add_argument("--host-below", type=int, default=None,
                    help="buckets with fewer entries run in numpy (default: 2^14 on a GPU, all on a CPU; "
                         "16384 on a CPU runs the device kernels as on a GPU)")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    gpu = jax.default_backend() == "gpu"
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(range(4, 21 if gpu else 15, 2))
    try:
        import pyagrum  # noqa: F401
        have_agrum = True
    except ImportError:
        have_agrum = False
        print("pyagrum is not installed (pip install pyagrum): fastlbp only")
    device = str(jax.devices()[0])
    rows = []
    for n in sizes:
        factors = grid(n)
        num_vars = n * n
        graph = from_factors(factors, num_vars)
        labels = {num_vars - 1: True, n // 2: False}
        settings = Settings(exact_memory=None)
        hb = args.host_below
        cold, warm, ours = timed(lambda: exact_marginals(graph, labels, settings, host_below=hb),
                                 args.repeats)
        compiled = sum(kernels.compiled().values())
        start = time.perf_counter()
        exact_marginals(graph, {**labels, num_vars // 2 + n // 2: True}, settings, host_below=hb)
        relabel = time.perf_counter() - start
        row = {"n": n, "vars": num_vars, "width": ours.info["width"],
               "largest_entries": ours.info["largest_entries"], "bytes": ours.info["bytes"],
               "device_buckets": ours.info["device_buckets"], "fastlbp_cold_s": cold, "fastlbp_warm_s": warm,
               "plan_s": ours.info["plan_seconds"], "kernels_compiled": compiled, "new_labels_s": relabel,
               "new_labels_compiled": sum(kernels.compiled().values()) - compiled}
        if have_agrum and n <= args.agrum_max:
            bn = pyagrum_net(factors, num_vars)
            a_cold, a_warm, theirs = timed(lambda: pyagrum_marginals(bn, num_vars, labels), args.repeats)
            row.update(pyagrum_cold_s=a_cold, pyagrum_warm_s=a_warm, speedup=a_warm / warm,
                       max_abs_diff=float(np.max(np.abs(theirs - ours.marginals))))
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    copies = arena_copies(size=2**20, chunk=2**14)  # XLA's in-place updates on this backend
    (out / "bench_exact.json").write_text(json.dumps({"device": device, "arena_copies": copies, "rows": rows},
                                                     indent=1))
    print(f"\nexact marginals of every variable, n x n noisy-OR grids, 2 labels; device {device}; "
          f"whole-arena copies in the compiled kernels (0 expected): {copies}")
    head = (f"{'n':>3} {'width':>5} {'largest':>9} {'ours warm':>10} {'ours cold':>10} {'kernels':>7} "
            f"{'new labels':>10}")
    if have_agrum:
        head += f" {'pyAgrum':>10} {'speedup':>8} {'max diff':>9}"
    print(head)
    for r in rows:
        line = (f"{r['n']:>3} {r['width']:>5} {r['largest_entries']:>9.0f} "
                f"{r['fastlbp_warm_s'] * 1e3:>8.1f}ms {r['fastlbp_cold_s'] * 1e3:>8.1f}ms "
                f"{r['kernels_compiled']:>7} {r['new_labels_s'] * 1e3:>8.1f}ms")
        if "speedup" in r:
            line += f" {r['pyagrum_warm_s'] * 1e3:>8.1f}ms {r['speedup']:>7.2f}x {r['max_abs_diff']:>9.1e}"
        print(line)


if __name__ == "__main__":
    main()
