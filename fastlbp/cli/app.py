"""The `fastlbp` typer app: the root callback, error handling and output helpers.

Beside it, by concern: `options` (the options every command shares, made from
`Settings`), `evidence` (the evidence options), `loading` (a graph through the
model cache, with --rule-prob), `compilation` (JAX's compilation cache and
configuration), `environment` (the cache and data folders, --backend's default: the one module that reads the
environment), `progress` (the
progress line and --timings) and `memory` (peak memory probes).

Commands live in one module per family (`rank`, `triage`, `simulate`,
`marginals`, `graphs`, `schedule`) and are plain functions; `fastlbp.cli`
registers them on `app` in one place. Every command reports bad input as
`error: FILE:LINE: problem` on stderr and exits with status 2, without a
traceback.

Option defaults come from `fastlbp.core.settings.Settings` (never written here
again); a command turns its options into one `Settings` with
`settings_from_options` and passes it to the library. `$FASTLBP_BACKEND` is
read in `environment` only (`backend_or_env`), as a default for `--backend` of
the commands that run inference; the library never reads it.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperGroup

from fastlbp.cli.compilation import compilation_cache
from fastlbp.cli.progress import Progress, visible
from fastlbp.core.errors import ContradictoryEvidence, InferenceError, InputError, SettingsError
from fastlbp.core.outputs import write_atomically
from fastlbp.core.settings import Settings

if TYPE_CHECKING:
    pass

# The one source of every option's default.
DEFAULTS = Settings()


def _no_flag_metavar(params) -> None:
    """Boolean flags (--help, --compress/--no-compress, ...) take no value: no `<bool>` in the help."""
    for p in params:
        if getattr(p, "is_bool_flag", False):
            p.metavar = ""


class Group(TyperGroup):
    """The app's group: its commands' help shows flags without a `<bool>` metavar.

    Applied when a command is looked up (for --help and for running it), so a
    command registered anywhere gets it, its --help/-h option included.
    """

    def get_params(self, ctx):
        params = super().get_params(ctx)
        _no_flag_metavar(params)
        return params

    def get_command(self, ctx, cmd_name):
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            _no_flag_metavar(cmd.params)
            # The help option is made on first use (cached); the command's context inherits its names.
            _no_flag_metavar([cmd.get_help_option(ctx)] if cmd.get_help_option(ctx) else [])
        return cmd


def version() -> str:
    """fastlbp's version from the installed distribution's metadata (`fastlbp.core.runtime.DISTRIBUTIONS`;
    the source tree's when none is installed)."""
    from fastlbp.core.runtime import installed

    return installed()["fastlbp"]


app = typer.Typer(
    name="fastlbp",
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Rank program-analysis alarms by loopy belief propagation on the GPU (or CPU).\n\n"
         "Graphs: derivation.json, a Bingo directory (named_cons_all.txt ...), or a libDAI "
         "causal factor-graph file. Run `fastlbp COMMAND --help` for details.\n\n"
         "Kernels: --backend auto (the default) runs XLA, and on a GPU PARALL on big graphs as the "
         "fused Pallas kernels; --backend fused runs those for chunked sequential schedules too "
         "(seqfix:chunked, seqrnd: one persistent kernel per iteration), xla never (README, "
         "BENCHMARKS.md). $FASTLBP_BACKEND sets --backend's default.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from fastlbp.core.runtime import version_text  # package metadata only: JAX is not started

        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def root(
    show_version: Annotated[bool, typer.Option("--version", "-V", is_eager=True, callback=_print_version,
                                               help="Print fastlbp's version, JAX's and its accelerator "
                                                    "plugins' (`info --device` names the device), and "
                                                    "exit.")] = False,
) -> None:
    """Runs before every command: makes and checks the cache folder (the app's help is `app`'s)."""
    compilation_cache()


def handles_errors(fn):
    """Turns errors a user can act on into `error: ...` on stderr and exit status 2.

    Those are bad input files (`InputError`, `GraphError`), contradictory
    labels, bad option values (`SettingsError`, also a GPU backend without a
    GPU) and unknown variable names (`KeyError` from `Session.label`). An
    `InferenceError` (a numerical failure, not the input's) exits with 1.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BaseException as err:
            Progress.close_all()  # erase a live progress line before any message (or traceback)
            user = isinstance(err, InputError | ContradictoryEvidence | SettingsError | KeyError)
            if user or _graph_error(err):
                msg = err.args[0] if isinstance(err, KeyError) and err.args else err
                typer.echo(f"error: {msg}", err=True)
                raise typer.Exit(2) from None
            if isinstance(err, InferenceError):  # a numerical failure, not the input's: reported plainly
                typer.echo(f"error: {err}", err=True)
                raise typer.Exit(1) from None
            raise

    return wrapper


@contextlib.contextmanager
def conflicts_located(labels: Path | None, model, graph: Path):
    """Names the labels file and its lines when the labels read from it prove contradictory.

    `ContradictoryEvidence` raised inside becomes `error: LABELS:LINE: contradictory labels ...:
    NAME=true (line 2), NAME=false (line 4)`, the first conflicting line in front; a label of the
    graph's own `"labels"` is named as such, and a triage session file by its name alone. `model`
    is the one `read_labels_or_session` returned (its variable names are the conflict's). Without
    `labels` nothing is changed.
    """
    try:
        yield
    except ContradictoryEvidence as err:
        if labels is None:
            raise
        raise _located(err, labels, model, graph) from None


def _located(err: ContradictoryEvidence, labels: Path, model, graph: Path) -> InputError:
    from fastlbp.core.text import safe_name
    from fastlbp.io.loading import parse_labels
    from fastlbp.triage.labels import is_session_file

    lines: dict[str, int] = {}
    if not is_session_file(labels):
        for line, name, _ in parse_labels(labels):
            try:
                var = model.resolve(name).var
            except KeyError:
                continue
            if var >= 0:
                lines.setdefault(model.var_names[var], line)
    session = is_session_file(labels)
    parts = []
    for name, truth in err.labels.items():
        if name in lines:
            where = f"line {lines[name]}"
        elif model.index.get(name, -1) in model.labels:
            where = f"in {graph}'s own labels"
        else:
            where = "in this session" if session else "not in this file"
        parts.append(f"{safe_name(name)}={'true' if truth else 'false'} ({where})")
    first = min((lines[n] for n in err.labels if n in lines), default=None)
    return InputError(str(labels), first, "contradictory labels (joint probability 0): " + ", ".join(parts))


def _graph_error(err: BaseException) -> bool:
    """Whether `err` is a `fastlbp.core.graph.GraphError` (only a command that imported it, and
    with it numpy, can raise one: --help and --version import neither)."""
    graph = sys.modules.get("fastlbp.core.graph")
    return graph is not None and isinstance(err, graph.GraphError)


# Output ------------------------------------------------------------------

def emit(text: str, output: Path | None = None) -> None:
    """Writes a command's result, ending it with a newline, to stdout or (atomically) to `output`.

    Raises:
        InputError: `output` cannot be written (nothing is left behind then).
    """
    if not text.endswith("\n"):
        text += "\n"
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()  # before the status lines on stderr, when both go to one pipe
    else:
        write_atomically(output, text)


def output_target(output: Path | None, *inputs: Path | None) -> Path | None:
    """Checks `--output` before a command does its work; returns it (None for stdout, also for `-`).

    Raises:
        InputError: the path is a directory, its folder is missing, or it is
            one of the command's `inputs` (writing it would replace the graph
            or a labels file).
    """
    if output is None or str(output) == "-":
        return None
    if output.is_dir():
        raise InputError(str(output), None, "is a directory; --output names a file")
    folder = output.parent
    if not folder.is_dir():
        raise InputError(str(output), None, f"cannot write: folder {str(folder)!r} does not exist")
    for src in inputs:
        if src is not None and output.exists() and src.exists() and output.samefile(src):
            raise InputError(str(output), None, "is an input of this command; --output would replace it")
    return output


def status(msg: str) -> None:
    """A line for the user on stderr that --quiet keeps: a warning, or what an exit status means."""
    typer.echo(msg, err=True)


def sentence(text: str) -> str:
    """`text` ending as a sentence does (a full stop added where it has none), for lines on stderr."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def note(msg: str, quiet: bool = False) -> None:
    """An informational line on stderr (how the numbers were made, what grounding produced, counts),
    left out with --quiet; warnings and errors go through `status` and are always said."""
    if not quiet:
        typer.echo(msg, err=True)


def method_notes(how: str, seconds: float, reason: str | None, flags, quiet: bool, caveats=()) -> None:
    """What stderr says of an inference command's round: `how` it was made and in what time, why
    `--method auto` chose its method (`reason`), `caveats` of the output, and each flag as a warning
    (flags and warnings are said even with --quiet)."""
    note(f"{how}, {seconds:.3f} s.", quiet)
    if reason:
        note(sentence(f"method auto: {reason}"), quiet)
    for line in caveats:
        note(line, quiet)
    for flag in flags:
        status(sentence(f"warning: {flag}"))


# A table on a terminal shows as many rows as fit: the terminal's height less these lines (the header, the
# "N more" line, the method lines and a caveat on stderr, the next prompt), but at least MIN_TABLE_ROWS.
TABLE_MARGIN = 8
MIN_TABLE_ROWS = 5


def terminal_rows(stream=None) -> int | None:
    """How many table rows fit where `stream` (stdout) goes: None unless it is a terminal, else its height
    (`shutil.get_terminal_size`: $LINES, else the terminal's own size) less `TABLE_MARGIN`, at least
    `MIN_TABLE_ROWS`."""
    import shutil

    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or a replaced stream (a test runner's) is no terminal
        return None
    height = shutil.get_terminal_size(fallback=(80, 24)).lines
    return max(MIN_TABLE_ROWS, height - TABLE_MARGIN)


def summary(iterations: int, converged: bool, delta: float, seconds: float, remedy: str | None = None) -> str:
    """`N iterations, converged, S s` of LBP (or the last change when not converged, and the remedy used)."""
    state = "converged" if converged else f"not converged (last change {delta:.3g})"
    if remedy:
        state = f"{'converged' if converged else 'not converged'} with {remedy} (LBP alone did not converge)"
    return f"{iterations} iterations, {state}, {seconds:.3f} s"


class Ticker:
    """Shows elapsed time on stderr while a long call runs (only on a terminal, after 1 s).

    One stage of `progress` (a command's `Progress`, which --quiet silences and
    --timings times), or of a `Progress` of its own.
    """

    def __init__(self, what: str, progress: Progress | None = None):
        self.what = what
        self.progress = progress
        self.own = progress is None

    def __enter__(self):
        if self.progress is None:
            self.progress = Progress(show=visible())
        self.progress(self.what)
        return self

    def __exit__(self, *exc):
        self.progress.done()
        if self.own:
            self.progress.close()


# Progress, caches and timings -------------------------------------------------


def degenerate_warning(probabilities, graph) -> str | None:
    """A warning when the alarms' marginals look degenerate: all below 1e-12, or all equal.

    LBP on derivation graphs can put every alarm at 1e-78 where the model says 1 %
    (`fastlbp check` measures it); such numbers rank poorly.
    """
    import numpy as np

    p = np.asarray(probabilities, dtype=np.float64)
    if p.size < 1:
        return None
    if np.all(p < 1e-12):
        what = "every alarm's probability is below 1e-12"
    elif p.size > 1 and np.all(p == p[0]):
        what = "every alarm has the same probability"
    else:
        return None
    return (f"warning: {what}: LBP may be far from the model's posterior here; run `fastlbp check {graph}` "
            f"or rank with --method exact / --method sample")
