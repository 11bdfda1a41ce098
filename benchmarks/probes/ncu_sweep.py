"""Profile the kernels of PARALL iterations with Nsight Compute (on the device machine).

    ncu --clock-control none --profile-from-start off --metrics ... \
        python3 benchmarks/probes/ncu_sweep.py --size 500000 --backend fused --iters 2

Compiles and warms up the runner first, then opens the profiler (cudaProfilerStart)
around `--iters` iterations only, so ncu sees just those kernels.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from common import bingo_model, parall_runner  # noqa: E402

from fastlbp.engines.loop import controls, init  # noqa: E402


def _cudart():
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    import glob

    for path in glob.glob("/usr/local/lib/python3*/dist-packages/nvidia/cu*/lib/libcudart.so*") + glob.glob(
            "/usr/local/cuda*/lib64/libcudart.so*"):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise SystemExit("libcudart not found")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=500_000)
    ap.add_argument("--backend", default="xla")
    ap.add_argument("--dtype", default="f64")
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--unroll", type=int, default=None, help="sweeps per trip (default: the engine's)")
    args = ap.parse_args()
    dt = {"f64": jnp.float64, "f32": jnp.float32}[args.dtype]
    host = bingo_model(args.size).graph
    graph = jax.device_put(host)
    runner = parall_runner(host, args.backend, args.dtype, args.unroll)
    msgs = init(graph, dt)
    ev = jnp.zeros((graph.num_vars,), dt)
    call = lambda n: runner(graph, msgs, ev, controls(0.0, n, 0.0, dt))  # noqa: E731
    jax.block_until_ready(call(args.iters))
    jax.block_until_ready(call(args.iters))
    rt = _cudart()
    rt.cudaProfilerStart()
    jax.block_until_ready(call(args.iters))
    rt.cudaProfilerStop()
    print("done", flush=True)


if __name__ == "__main__":
    main()
