"""Helpers that keep the Pallas kernels' tracing and lowering short."""

from __future__ import annotations

import functools
import sys


@functools.cache
def bound(fn, *static):
    """`fn` with its static arguments bound, one object per setting: JAX then traces and lowers
    a kernel once per jit, not once per call site (the loop calls each kernel once per sweep)."""
    return functools.partial(fn, *static)


def quiet_triton_dialect_lookup() -> None:
    """Stops MLIR's search for a Python module of the Triton dialect (called before lowering).

    At every Triton op it builds, MLIR's Python bindings look for a module
    named after the dialect ("tt") under their search prefixes, find none and
    do not remember it: thousands of failed imports per kernel, a quarter of
    the fused loop's lowering time. Naming the dialect's own module there ends
    the search; nothing else imports that name. The passes call this when
    they are traced, so importing the package changes nothing.
    """
    try:
        from jax._src.lib import triton
    except ImportError:
        return
    dialect = getattr(triton, "dialect", None)
    if dialect is not None:
        sys.modules.setdefault("jaxlib.mlir.dialects.tt", dialect)


__all__ = ["bound", "quiet_triton_dialect_lookup"]
