"""What fastlbp sets in JAX, in one place, applied when JAX is imported, not when fastlbp is.

`import fastlbp` does not import JAX: the commands that run no inference
(`fastlbp --help`, `--version`, `CMD --help`, `info`, `convert`, `ground`) would
pay for it on every call (0.55-0.9 s of a 0.06 s interpreter start on a 2-core
CPU; 1-3 s on a GPU machine). Two things must still hold before JAX makes any
array or traces any function:

* float64 is JAX's default (`jax_enable_x64`; the published accuracy depends
  on it; float32 stays available per run through `Settings.precision`);
* `fastlbp.core.graph.FactorGraph` is a pytree (its arrays are jit arguments).

`import fastlbp` calls `when_imported(configure)`. With JAX imported already,
`configure` runs at once. Otherwise a one-shot finder on `sys.meta_path` waits
for the `jax` package: it lets the usual finders find it and runs the pending
callbacks right after the package has executed, before the statement that
imported it (in an engine, the session, or a user's code) goes on. So importing
fastlbp and then JAX, in any order and from any module, gives the same JAX as
before: x64 on, FactorGraph registered. The CLI defers its compilation-cache
settings the same way (`fastlbp.cli.app.compilation_cache`).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType

_pending: list[Callable[[ModuleType], None]] = []
_lock = threading.Lock()
_configured = False


def configure(jax: ModuleType) -> None:
    """fastlbp's JAX settings: float64 by default and `FactorGraph` as a pytree (once per process)."""
    global _configured
    jax.config.update("jax_enable_x64", True)
    if _configured:
        return
    from fastlbp.core.graph import FactorGraph

    # Registered here, not by a decorator in fastlbp.core.graph, so that graph.py needs no JAX; every field
    # is an array (data), none is static.
    jax.tree_util.register_dataclass(FactorGraph)
    _configured = True


def when_imported(callback: Callable[[ModuleType], None]) -> None:
    """Runs `callback(jax)` now if JAX is imported, else right after JAX's first import finishes.

    Callbacks run in the order given; one that raises stops the import of JAX
    with its error (as an error in JAX's own import would).
    """
    with _lock:
        jax = sys.modules.get("jax")
        if jax is None:
            _pending.append(callback)
            if not any(isinstance(f, _JaxFinder) for f in sys.meta_path):
                sys.meta_path.insert(0, _JaxFinder())
            return
    callback(jax)


def _run_pending(jax: ModuleType) -> None:
    with _lock:
        callbacks = _pending[:]
        _pending.clear()
    for callback in callbacks:
        callback(jax)


class _JaxFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands out `jax`'s usual spec with a loader that runs the pending callbacks
    after the package has executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "jax":
            return None
        # Out of the way first: the lookup below must reach the usual finders, and the hook fires once.
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        spec = importlib.util.find_spec("jax")
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenConfigure(spec.loader)
        return spec


class _ThenConfigure(importlib.abc.Loader):
    """`jax`'s loader, then the pending callbacks; the module keeps the original loader afterwards."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        try:
            self.loader.exec_module(module)
        except BaseException:
            with _lock:  # JAX failed to import: wait for its next import
                if _pending and not any(isinstance(f, _JaxFinder) for f in sys.meta_path):
                    sys.meta_path.insert(0, _JaxFinder())
            raise
        _run_pending(module)

    def __getattr__(self, name):  # get_resource_reader, get_source, is_package, ...
        return getattr(self.loader, name)


__all__ = ["configure", "when_imported"]
