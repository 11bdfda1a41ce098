"""A probe of the exact engine's compiled kernels, for tests/test_engines_exact.py and
benchmarks/bench_exact.py (which reports it on its device)."""

from __future__ import annotations

import jax.numpy as jnp

from fastlbp.engines.exact import kernels


def arena_copies(size: int = 3 * 2**12, chunk: int = 64) -> dict[str, int]:
    """Copies of the whole arena in each kernel as compiled for the default backend (0 expected).

    XLA copies the arena when a fusion reads it after an in-place write (a 40x slowdown on a CPU, see
    `forward`); fusion decisions differ by backend, so `benchmarks/bench_exact.py` reports this too.
    """
    arena = jnp.zeros(size)
    prog = jnp.zeros((16, kernels.WIDTH), kernels.index_dtype(size))
    out = {}
    for name in ("forward", "reduce", "belief"):
        text = kernels.KERNELS[name].lower(arena, prog, prog[0, 0], kernels.byte_tables(), chunk=chunk,
                                  nchunks=2).compile().as_text()
        out[name] = text.count(f"f64[{size}]{{0}} copy(")

    return out
