"""JAX for the command line: the persistent compilation cache (made and checked) and the process's JAX
configuration, done once by each command that runs inference."""

from __future__ import annotations

from pathlib import Path

import typer

from fastlbp.cli.environment import cache_folder
from fastlbp.cli.progress import Progress, jax_compile_listener


def compilation_cache(warn: bool = True) -> Path | None:
    """The folder of JAX's persistent compilation cache, made and checked; None when it is off.

    The folder is $FASTLBP_CACHE, else $XDG_CACHE_HOME/fastlbp/jax (~/.cache/...);
    FASTLBP_CACHE=off (or empty) leaves the cache off. A run after the first then
    loads its compiled loops instead of compiling them again. JAX keys entries by
    the computation, its options and the JAX version.
    A folder that cannot be made leaves the cache off, with a warning (unless not
    `warn`); so does one that another user owns or that group or others may write
    (it, or its `models/`: `fastlbp.io.cache_safety`), for both caches: a cache
    must never be a way to change answers. A folder made here has mode 0700.

    JAX is not touched here (the commands that run no inference never import it):
    `configure_jax` hands the folder to JAX.
    """
    path = cache_folder()
    if path is None:
        return None
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        if warn:
            typer.echo(f"warning: compilation cache off: cannot make {path}: {err.strerror}", err=True)
        return None
    from fastlbp.io import cache_safety

    problem = cache_safety.folder_problem(path)
    if problem is not None:  # said once: the model cache (fastlbp.io.model_cache) refuses it quietly then
        if warn:
            cache_safety.warn(path, problem, "the model and compilation caches")
        return None
    return path


def configure_jax(progress: Progress | None = None) -> None:
    """Imports and configures JAX for this process, the application's: each command that runs inference
    calls it once its settings are valid and its graph is loaded, before its first JAX work.

    * float64 by default (`jax_enable_x64`): the library runs its own programs in float64 whatever the
      process's setting (`fastlbp.core.jax_setup.float64`); the command's own JAX work (device queries,
      outputs) sees the same precision;
    * the persistent compilation cache in `compilation_cache()` (unless it is off or refused; the root
      callback has warned already);
    * with `progress` (--timings), JAX's trace, lower and compile times as stages of it
      (`jax_compile_listener`).

    After loading, not before: grounding a Datalog program forks where this process has no JAX threads
    (`datalog.ground_process`), and a command that fails on its input never pays for JAX's start.
    """
    import jax

    jax.config.update("jax_enable_x64", True)
    path = compilation_cache(warn=False)
    if path is not None:
        jax.config.update("jax_compilation_cache_dir", str(path))
        # JAX caches only programs that took a second to compile by default; some of ours take less,
        # and the small ones around a round (evidence, zeros, conversions) far less, which a warm
        # `fastlbp rank` compiled again every run.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if progress is not None:
        jax_compile_listener(progress)
