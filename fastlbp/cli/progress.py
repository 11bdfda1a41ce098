"""Progress of a command on stderr, and the time each of its stages took.

    progress = Progress(show=visible(quiet))       # a live line only on a terminal, never with --quiet
    model = load(graph, settings, progress=progress)   # the library names its stages through the callback
    with progress.stage("first round"):
        ...
    progress.close()
    status(progress.report())                     # --timings: "timings: load 0.11 s, ..."

A stage shows as `NAME... 3 s` once it has run for `delay` seconds (1 s: a
line that flickers for every short stage is noise), updated every quarter of
a second and erased when the stage ends. The library never prints: it calls
the `Progress` object with the name of the stage it starts (`load(...,
progress=)`), and the commands mark their own stages.

`jax_compile_listener` adds JAX's own compile-time events (tracing, lowering,
compiling or loading from the compilation cache), so `--timings` can split a
first round into the compile and the round itself.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from typing import TextIO

import typer


def process_age() -> float | None:
    """Seconds since this process started (Linux: /proc, to 10 ms), or None where unknown.

    With --timings this is the `imports` stage: the interpreter's start and every
    import up to the command's first line.
    """
    import os

    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22, starttime, counted after the name's ")"
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def visible(quiet: bool = False, stream: TextIO | None = None) -> bool:
    """Whether progress is drawn: not --quiet, and stderr is a terminal."""
    stream = stream or sys.stderr
    try:
        return not quiet and stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


class Progress:
    """A callable that starts a named stage (ending the one before), shown live and timed.

    Args:
        show: draw the live line (see `visible`).
        stream: where to draw it (default stderr).
        delay: seconds a stage runs before it is shown.
    """

    def __init__(self, *, show: bool, stream: TextIO | None = None, delay: float = 1.0):
        self.show = show
        self.stream = stream or sys.stderr
        self.delay = delay
        self.times: dict[str, float] = {}  # stage -> seconds, in the order first started
        self.within: dict[str, float] = {}  # JAX's compile events -> seconds, inside the stages above
        self._lock = threading.Lock()
        self._current: str | None = None
        self._since = 0.0
        self._drawn = False
        self._line = ""  # what is on the terminal now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        _LIVE.add(self)

    # The callback ------------------------------------------------------------
    def __call__(self, stage: str) -> None:
        """Starts `stage` (ends the current one)."""
        with self._lock:
            self._end_locked()
            self._current, self._since = stage, time.perf_counter()
        if self.show and self._thread is None:
            self._thread = threading.Thread(target=self._draw_loop, daemon=True)
            self._thread.start()

    def done(self) -> None:
        """Ends the current stage, if any."""
        with self._lock:
            self._end_locked()

    @contextlib.contextmanager
    def stage(self, name: str):
        """`with progress.stage(name):` the block is the stage."""
        self(name)
        try:
            yield self
        finally:
            self.done()

    def add(self, stage: str, seconds: float, *, within: bool = False) -> None:
        """Records time measured elsewhere: a stage of its own (the imports before the command ran), or
        with `within` a part of the current stage (JAX's compile events: `first round: jit trace`),
        reported after the stages."""
        with self._lock:
            if within:
                name = f"{self._current}: {stage}" if self._current else stage
                self.within[name] = self.within.get(name, 0.0) + seconds
            else:
                self.times[stage] = self.times.get(stage, 0.0) + seconds

    def close(self) -> None:
        """Ends the current stage and stops drawing."""
        self.done()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        _LIVE.discard(self)

    @staticmethod
    def close_all() -> None:
        """Closes every open `Progress` (before an error message, so no live line runs into it)."""
        for progress in list(_LIVE):
            progress.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Timings ------------------------------------------------------------------
    def report(self) -> str:
        """`timings: STAGE 0.123 s, ...` in the order the stages started, then the parts within them."""
        with self._lock:
            items = (*self.times.items(), *self.within.items())
        parts = [f"{name} {seconds:.3f} s" for name, seconds in items]
        return "timings: " + ", ".join(parts)

    # Drawing --------------------------------------------------------------------
    def _end_locked(self) -> None:
        if self._current is not None:
            elapsed = time.perf_counter() - self._since
            self.times[self._current] = self.times.get(self._current, 0.0) + elapsed
            self._current = None
        if self._drawn:
            self._write("\r\033[K")
            self._drawn = False
        self._line = ""

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stderr must not stop the command
            pass

    def _draw_loop(self) -> None:
        while not self._stop.wait(0.25):
            with self._lock:
                if self._current is None:
                    continue
                elapsed = time.perf_counter() - self._since
                line = f"\r{self._current}... {elapsed:.0f} s\033[K"
                if elapsed >= self.delay and line != self._line:  # redrawn when the seconds change
                    self._write(line)
                    self._drawn, self._line = True, line


# Open `Progress` objects: `handles_errors` closes them when a command fails.
_LIVE: weakref.WeakSet[Progress] = weakref.WeakSet()


# JAX's compile events, for --timings: name of the monitoring event -> the stage it adds to.
# They overlap the stages they happen in (mostly `first round`).
JAX_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "jit trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "jit lower",
    "/jax/core/compile/backend_compile_duration": "jit compile or cache load",
}


def jax_compile_listener(progress: Progress) -> None:
    """Adds JAX's trace, lowering and compile (or compilation-cache load) times to `progress`.

    The listener stays registered for the process (JAX has no way to remove
    one); commands register it only with --timings, through
    `fastlbp.cli.compilation.configure_jax` (which imports JAX).
    """
    from jax import monitoring

    def listener(event: str, seconds: float, **_) -> None:
        stage = JAX_EVENTS.get(event)
        if stage is not None:
            progress.add(stage, seconds, within=True)

    monitoring.register_event_duration_secs_listener(listener)


__all__ = ["Progress", "visible", "process_age", "jax_compile_listener", "JAX_EVENTS"]


def start_progress(quiet: bool = False, timings: bool = False) -> Progress:
    """A command's `Progress`: drawn on a terminal unless --quiet; with --timings it also records the
    start-up before the command (`imports`; JAX's trace, lower and compile times come with
    `configure_jax`)."""
    progress = Progress(show=visible(quiet))
    if timings:
        age = process_age()
        if age is not None:
            progress.add("imports", age)
    return progress


def finish_progress(progress: Progress, timings: bool, model=None) -> None:
    """Stops drawing; with --timings writes `timings: STAGE S s, ...` and `memory: ...` to stderr."""
    progress.close()
    if not timings:
        return
    from fastlbp.cli.memory import device_peak_bytes, peak_rss

    typer.echo(progress.report(), err=True)
    facts = {"host_peak_rss_bytes": peak_rss()}
    if model is not None:
        facts["edges"] = model.graph.num_edges
        facts["variables"] = model.num_vars
    device = device_peak_bytes()
    if device is not None:
        facts["device_peak_bytes"] = device
    typer.echo("memory: " + ", ".join(f"{name} {value}" for name, value in facts.items()), err=True)
