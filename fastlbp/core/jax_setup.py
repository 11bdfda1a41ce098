"""float64 where fastlbp runs its JAX programs, and nowhere else: `@float64` and `with float64_context():`.

fastlbp's numbers need float64 (`Settings.precision="f64"`, the default: the
published accuracy depends on it; float32 stays available per run). JAX turns
float64 off by default (`jax_enable_x64`), and that flag is the process's, so
the library never sets it: the public functions that trace or run JAX
(`Session` and its rounds, `fastlbp.marginals`, `rank`, `check`, `simulate`,
the engines' `exact_marginals` and `sample_marginals`, the `Sampler`) are
decorated with `@float64`, which runs them inside `jax.enable_x64(True)`. The
caller's own setting holds outside those calls; what they return is numpy (a
`Session` keeps its device arrays to itself).

`jax.enable_x64(True)` is JAX's context manager for the flag. It is
thread-local, so work a fastlbp call hands to threads of its own runs inside
`float64_context()` there too (`fastlbp.engines.exact.kernels.warm`). The flag
is part of the key of JAX's compilation caches, so every fastlbp program is
traced, compiled and looked up under the same value, whatever the caller's.

Importing this module (or fastlbp) imports no JAX: JAX is imported on the first
decorated call, so the commands that run no inference never start it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import TypeVar

F = TypeVar("F", bound=Callable)


@contextlib.contextmanager
def float64_context() -> Iterator[None]:
    """JAX's float64 on in this thread for the block (`jax.enable_x64(True)`); the setting before after."""
    import jax

    if jax.config.jax_enable_x64:  # the thread's value: on already (the CLI, a test, an outer call)
        yield
        return
    with jax.enable_x64(True):
        yield


def float64(fn: F) -> F:
    """Decorates a function (or method) that traces or runs JAX: it runs with float64 on (`float64_context`).

    Only plain functions: a generator's body would run after the call has returned, outside the context.
    """
    if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn):
        raise TypeError(f"@float64 takes a plain function, not {fn.__qualname__} (a generator or coroutine)")

    @functools.wraps(fn)
    def in_float64(*args, **kwargs):
        import jax  # imported by then (the decorated modules import it); a dictionary look-up

        if jax.config.jax_enable_x64:
            return fn(*args, **kwargs)
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    return in_float64  # type: ignore[return-value]


__all__ = ["float64", "float64_context"]
