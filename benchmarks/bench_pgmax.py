"""PGMax 0.6.1 next to fastlbp: the same graph, the same device, the same process.

Usage (one call on the GPU; PGMax comes from its wheel without dependencies):

    pip install --no-deps --target /tmp/site pgmax-0.6.1-py3-none-any.whl
    PYTHONPATH=/tmp/site:$PWD python benchmarks/bench_pgmax.py --sizes 50000 500000 --iters 200

On a CPU: ``python benchmarks/bench_pgmax.py --sizes 5000 --iters 20``.

For every size (factor-graph edges of a synthetic Bingo-like model) and
precision (f64, f32) it

1. encodes the model in PGMax (`pgmax_model.build_pgmax`: AND factors over
   body + a coin with the rule probability as prior, deterministic OR
   factors, priors as evidence) and times the (Python) build;
2. runs `--iters` PARALL iterations of PGMax sum-product BP and of fastlbp
   started from `Encoding.init_messages` (the same schedule iteration by
   iteration) and reports the largest marginal difference and the NaN count;
   with f64 also the difference with PGMax's log-minus-exp cut-off set from
   1e-4 to 1e-12 (a diagnosis: what is left is the encoding's error);
3. times `--iters` iterations of each (tol = 0, compile timed separately,
   median of `--repeats` runs, results blocked on) and prints the ratio.

Out of memory, NaN and other failures of PGMax land in the table (status
column) instead of stopping the run. JSON details go to $OUT/bench_pgmax.json
(OUT defaults to ./out); the table is printed last.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import bingo_model, environment, timed, write_json  # noqa: E402

from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.engines import fused, parall  # noqa: E402
from fastlbp.engines.loop import controls, init  # noqa: E402

try:
    import pgmax_model
    PGMAX_ERROR = None
except ImportError as exc:  # no pgmax (or numba) here: fastlbp is still timed
    pgmax_model = None
    PGMAX_ERROR = f"pgmax not importable: {exc}"

# PGMax's argmax scatter mixes int32 and int64 under x64; its warning is noise here.
warnings.filterwarnings("ignore", message="scatter inputs have incompatible types", category=FutureWarning)

DTYPES = {"f64": jnp.float64, "f32": jnp.float32}


def _failure(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() or isinstance(exc, MemoryError):
        return "OOM"
    return "error: " + text.splitlines()[0][:160] if text else "error"


def make_runner(host_graph, backend: str, dtype_name: str):
    """The PARALL runner of a fastlbp backend: the XLA kernels ("xla", "scatter", "pallas") or the
    fused Pallas kernels ("fused", 8 sweeps per while-loop trip)."""
    settings = Settings(precision=dtype_name, backend=backend)
    if backend in ("fused", "fused_interpret"):
        return fused.make_runner(host_graph, settings)
    return parall.make_runner(host_graph, settings)


def fastlbp_runs(host_graph, graph, messages0, iters: int, dtype, repeats: int, backends: list[str]) -> dict:
    """Times `iters` PARALL iterations per backend; the marginals from `messages0` for the check."""
    out = {}
    ev = jnp.zeros((graph.num_vars,), dtype)
    dtype_name = next(k for k, v in DTYPES.items() if v == dtype)
    for backend in backends:
        runner = make_runner(host_graph, backend, dtype_name)
        # tol = 0: the loop runs all `iters` iterations.
        ctl = controls(0.0, iters, 0.0, dtype)
        args = (graph, runner.layout, init(graph, dtype), ev, ctl)
        t0 = time.perf_counter()
        compiled = runner.run.lower(*args).compile()
        compile_s = time.perf_counter() - t0
        med, times = timed(compiled, *args, repeats=repeats)
        uniform = compiled(*args)
        aligned = compiled(graph, runner.layout, jnp.asarray(messages0, dtype), ev, ctl)
        out[backend] = {"compile_s": compile_s, "run_s": med, "times_s": times,
                        "iterations": int(aligned.iterations),
                        "marginals": np.asarray(aligned.marginals, np.float64),
                        "marginals_uniform_init": np.asarray(uniform.marginals, np.float64)}
    if not out:
        raise RuntimeError("no fastlbp PARALL backend could be run")
    return out


def pgmax_run(fg, iters: int, dtype, repeats: int, reference: np.ndarray, uniform: np.ndarray) -> dict:
    row: dict = {"status": "ok"}
    try:
        t0 = time.perf_counter()
        runner = pgmax_model.PGMaxRunner(fg, iters, damping=0.0, dtype=dtype)
        row["setup_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        runner.compile()
        row["compile_s"] = time.perf_counter() - t0
        marg = np.asarray(runner.run(), np.float64)
        row["nan"] = int(np.isnan(marg).sum())
        row["max_abs_diff"] = float(np.nanmax(np.abs(marg - reference))) if row["nan"] < marg.size else None
        if row["nan"] < marg.size:
            row["max_abs_diff_vs_uniform_init"] = float(np.nanmax(np.abs(marg - uniform)))
        if row["nan"]:
            row["status"] = f"NaN in {row['nan']} marginals"
        med, times = timed(runner.run, repeats=repeats)
        row["run_s"], row["times_s"] = med, times
    except Exception as exc:  # noqa: BLE001  (report, never crash the benchmark)
        row["status"] = _failure(exc)
        row["traceback"] = traceback.format_exc(limit=6)
    return row


def eps_diagnosis(fg, iters: int, reference: np.ndarray) -> float | str:
    try:
        with pgmax_model.logminusexp_eps(1e-12):
            marg = np.asarray(pgmax_model.PGMaxRunner(fg, iters).run(), np.float64)
        return float(np.nanmax(np.abs(marg - reference))) if not np.isnan(marg).all() else "all NaN"
    except Exception as exc:  # noqa: BLE001
        return _failure(exc)


def bench_size(size: int, iters: int, repeats: int, dtypes: list[str], backends: list[str],
               eps_check: bool) -> list[dict]:
    t0 = time.perf_counter()
    model = bingo_model(size, seed=0)
    gen_s = time.perf_counter() - t0
    graph = jax.device_put(model.graph)
    base = {"size": size, "edges": graph.num_edges, "vars": graph.num_vars, "factors": graph.num_factors,
            "iters": iters, "generate_s": gen_s}
    fg = enc = None
    build: dict = {}
    if pgmax_model is not None:
        try:
            t0 = time.perf_counter()
            fg, _, enc = pgmax_model.build_pgmax(model)
            build = {"build_s": time.perf_counter() - t0, "encoding": enc.counts,
                     "pgmax_edges": enc.num_pgmax_edges, "pgmax_aux_vars": enc.num_aux,
                     "iteration_exact": enc.iteration_exact}
        except Exception as exc:  # noqa: BLE001
            build = {"build_status": _failure(exc), "traceback": traceback.format_exc(limit=6)}
    init_messages = enc.init_messages if enc is not None else np.zeros(graph.num_edges)
    rows = []
    for dname in dtypes:
        dtype = DTYPES[dname]
        fl = fastlbp_runs(model.graph, graph, init_messages, iters, dtype, repeats, backends)
        best = min(fl, key=lambda b: fl[b]["run_s"])
        row = {**base, **build, "precision": dname,
               "fastlbp": {b: {k: v for k, v in r.items() if not k.startswith("marginals")}
                           for b, r in fl.items()},
               "fastlbp_best": best, "fastlbp_s": fl[best]["run_s"]}
        if fg is None:
            row["pgmax"] = {"status": build.get("build_status", PGMAX_ERROR)}
        else:
            row["pgmax"] = pgmax_run(fg, iters, dtype, repeats, fl[best]["marginals"],
                                     fl[best]["marginals_uniform_init"])
            if dname == "f64" and eps_check and row["pgmax"]["status"] != "OOM":
                row["pgmax"]["max_abs_diff_eps1e-12"] = eps_diagnosis(fg, iters, fl[best]["marginals"])
            if "run_s" in row["pgmax"]:
                row["ratio"] = row["pgmax"]["run_s"] / fl[best]["run_s"]
        rows.append(row)
        print(f"# {size} {dname}: fastlbp {fl[best]['run_s'] * 1e3:.2f} ms ({best}), "
              f"pgmax {row['pgmax'].get('run_s', float('nan')) * 1e3:.2f} ms, {row['pgmax']['status']}",
              flush=True)
        gc.collect()
    del fg
    gc.collect()
    return rows


def _fmt(x, spec: str) -> str:
    return format(x, spec) if isinstance(x, int | float) else str(x if x is not None else "-")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[50_000, 500_000],
                    help="factor-graph edges of the synthetic Bingo-like models")
    ap.add_argument("--iters", type=int, default=200, help="PARALL iterations timed (tol = 0)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (median)")
    ap.add_argument("--precisions", nargs="+", default=["f64", "f32"], choices=sorted(DTYPES))
    ap.add_argument("--backends", nargs="+", default=["xla"],
                    help="fastlbp backends timed (xla, scatter, pallas, fused); the fastest is compared")
    ap.add_argument("--no-eps-check", action="store_true",
                    help="skip the diagnosis run with PGMax's log-minus-exp cut-off at 1e-12")
    args = ap.parse_args(argv)

    env = environment()
    backends = list(dict.fromkeys(args.backends))
    print(f"# {env['device']} jax {env['jax']}  fastlbp backends {backends}  "
          f"{PGMAX_ERROR or 'pgmax 0.6.1'}", flush=True)
    rows = []
    for size in args.sizes:
        try:
            rows += bench_size(size, args.iters, args.repeats, args.precisions, backends,
                               not args.no_eps_check)
        except Exception as exc:  # noqa: BLE001  (fastlbp itself failed at this size)
            rows.append({"size": size, "error": _failure(exc), "traceback": traceback.format_exc(limit=6)})
            print(f"# {size}: {rows[-1]['error']}", flush=True)
    path = write_json("bench_pgmax.json", {"env": env, "backends": backends, "rows": rows})
    print(f"# details: {path}")
    print(f"{'edges':>8} {'pgmax E':>8} {'prec':>4} {'fastlbp ms':>10} {'pgmax ms':>9} {'ratio':>7} "
          f"{'compile s':>9} {'max|d|':>8} {'eps1e-12':>8} {'NaN':>4}  status")
    for r in rows:
        if "error" in r:
            print(f"{r['size']:>8} {'':>8} {'':>4} fastlbp failed: {r['error']}")
            continue
        p = r["pgmax"]
        pgmax_ms = p["run_s"] * 1e3 if "run_s" in p else None
        print(f"{r['edges']:>8} {_fmt(r.get('pgmax_edges'), 'd'):>8} {r['precision']:>4} "
              f"{r['fastlbp_s'] * 1e3:>10.2f} {_fmt(pgmax_ms, '.1f'):>9} "
              f"{_fmt(r.get('ratio'), '.3g'):>7} {_fmt(p.get('compile_s'), '.2f'):>9} "
              f"{_fmt(p.get('max_abs_diff'), '.1e'):>8} {_fmt(p.get('max_abs_diff_eps1e-12'), '.1e'):>8} "
              f"{_fmt(p.get('nan'), 'd'):>4}  {p['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
