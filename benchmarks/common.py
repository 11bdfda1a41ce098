"""Shared helpers for the GPU benchmarks: graphs, timing, the copy-bandwidth floor."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

# The benchmarks call engines and jnp directly, in float64 as fastlbp's entry points run them
# (`fastlbp.core.jax_setup.float64`); a benchmark is the library's user and sets its own process.
jax.config.update("jax_enable_x64", True)


def out_dir() -> Path:
    path = Path(os.environ.get("OUT", "out"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def device_name() -> str:
    d = jax.devices()[0]
    return f"{d.platform}:{getattr(d, 'device_kind', d)}"


def environment() -> dict:
    return {
        "device": device_name(),
        "jax": jax.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def bingo_model(factor_edges: int, seed: int = 0):
    """A synthetic Bingo-like model with about `factor_edges` factor-graph edges."""
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate

    return to_model(generate(factor_edges=factor_edges, seed=seed))


def parall_runner(graph, backend: str = "xla", precision: str = "f64", unroll: int | None = None):
    """The PARALL `Runner` the dispatcher makes for `backend` (`fastlbp.engines.make_runner`).

    Args:
        graph: a concrete (host) factor graph or model.
        backend: "xla", "scatter", "pallas", "fused" (GPU) or their "_interpret" forms.
        precision: "f64" or "f32".
        unroll: sweeps per while-loop trip; None: the engine's default.
    """
    from fastlbp.core.settings import Settings
    from fastlbp.engines import make_runner

    schedule = "parall" if unroll is None else f"parall:unroll={unroll}"
    return make_runner(graph, Settings(schedule=schedule, backend=backend, precision=precision))


def timed(fn, *args, repeats: int = 5, warmup: int = 1) -> tuple[float, list[float]]:
    """Median wall seconds of `fn(*args)` with results blocked on."""
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """Device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    n = nbytes // 8
    x = jnp.arange(n, dtype=jnp.float64)
    f = jax.jit(lambda a: a * 1.0000001)
    med, _ = timed(f, x, repeats=10, warmup=2)
    return 2 * n * 8 / med


def floor_bytes(graph, itemsize: int) -> int:
    """Bytes one PARALL iteration must move at the least.

    Every factor-to-variable message is read and written once, the edge's
    variable index and its place in the variable order are read once, and
    each factor's kind/p1/p2 and each variable's evidence and marginal once.
    """
    e, f, v = graph.num_edges, graph.num_factors, graph.num_vars
    return e * (2 * itemsize + 2 * 4) + f * (2 * itemsize + 4) + v * (2 * itemsize)


def write_json(name: str, payload: dict) -> Path:
    path = out_dir() / name
    path.write_text(json.dumps(payload, indent=2, default=float))
    return path


def np_close(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
