"""The `fastlbp` command line: thin typer commands over importable functions.

Every command reports bad input as `error: FILE:LINE: problem` on stderr and
exits with status 2, without a traceback.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="fastlbp",
    help="Rank program-analysis alarms by loopy belief propagation on the GPU (or CPU).\n\n"
         "Kernels: XLA by default; on a GPU, FASTLBP_BACKEND=fused runs the Pallas kernels "
         "(faster on big graphs; about 1 s more to compile and up to 1 s to lay the graph out; "
         "README, BENCHMARKS.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

class CycleMode(StrEnum):
    cycles = "cycles"
    bingo = "bingo"


@app.callback()
def _root(
    cycles: Annotated[CycleMode, typer.Option(
        "--cycles",
        help="Cycle elimination for derivation graphs: 'cycles' applies Bingo's criterion (a clause "
             "survives only if its body is derived strictly before its head in the least fixpoint) "
             "to the clauses on a cycle; 'bingo' applies it to every clause, as Bingo does.",
    )] = CycleMode.cycles,
) -> None:
    """Rank program-analysis alarms by loopy belief propagation (GPU when present, else CPU).

    Graphs: derivation.json, a Bingo directory (named_cons_all.txt ...), or a
    libDAI causal factor-graph file. Run `fastlbp COMMAND --help` for details.

    Kernels: XLA by default. FASTLBP_BACKEND=fused runs PARALL as two Pallas
    kernels per sweep and SEQFIX/TOPO/SEQRND as one persistent kernel per
    iteration (GPU only; faster on big graphs, about 1 s more to compile).
    """
    from fastlbp import api

    api.DERIVATION_OPTIONS["cycles"] = cycles.value
    compilation_cache()


def compilation_cache() -> Path | None:
    """Turns on JAX's persistent compilation cache for this process; returns its folder.

    The folder is $FASTLBP_CACHE, else $XDG_CACHE_HOME/fastlbp/jax (~/.cache/...);
    FASTLBP_CACHE=off (or empty) leaves the cache off. A run after the first then
    loads its compiled loops instead of compiling them again (0.7-2.5 s each on the
    H200). JAX keys entries by the computation, its options and the JAX version.
    A folder that cannot be made leaves the cache off, with a warning.
    """
    import os

    import jax

    raw = os.environ.get("FASTLBP_CACHE")
    if raw is not None and raw.strip().lower() in ("", "off", "0", "no", "none"):
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = Path(raw).expanduser() if raw else base / "fastlbp" / "jax"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        typer.echo(f"warning: compilation cache off: cannot make {path}: {err.strerror}", err=True)
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Our loops compile in 0.2-2.5 s; JAX caches only those above a second by default.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    return path


USER_ERRORS: tuple[type[BaseException], ...] = ()


def _user_errors() -> tuple[type[BaseException], ...]:
    from fastlbp.errors import ContradictoryEvidence, InputError
    from fastlbp.graph import GraphError
    return (InputError, GraphError, ContradictoryEvidence, KeyError) + USER_ERRORS


def handles_errors(fn):
    """Turns user errors into `error: ...` on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _user_errors() as err:
            msg = err.args[0] if isinstance(err, KeyError) and err.args else err
            typer.echo(f"error: {msg}", err=True)
            raise typer.Exit(2) from None

    return wrapper


class OutputFormat(StrEnum):
    json = "json"
    csv = "csv"


class Precision(StrEnum):
    f64 = "f64"
    f32 = "f32"


GraphArg = Annotated[
    Path,
    typer.Argument(help="A derivation.json file, a Bingo directory, or a libDAI causal "
                        "factor-graph file (.causal_fg / .fg).", show_default=False),
]
ScheduleOpt = Annotated[
    str,
    typer.Option("--schedule", "-s",
                 help="Update strategy: parall, seqfix, seqrnd, topo, or a file with a custom "
                      "order; options follow colons, e.g. seqfix:chunked (level by level "
                      "instead of relaxing whole sweeps) or topo:algorithm3 (see `fastlbp "
                      "schedule --help`)."),
]
TolOpt = Annotated[float, typer.Option(help="Stop when no marginal changes by this much or more.")]
MaxItersOpt = Annotated[int, typer.Option("--max-iters", min=1, help="Most iterations per round.")]
DampingOpt = Annotated[float, typer.Option(min=0.0, max=0.999,
                                           help="Weight of the old message (log domain).")]
PrecisionOpt = Annotated[Precision, typer.Option(help="Floating-point precision.")]
LabelsOpt = Annotated[
    Path | None,
    typer.Option("--labels", "-l", help="Known labels as evidence: lines 'NAME true|false'."),
]


def emit(text: str) -> None:
    sys.stdout.write(text)
    if not text.endswith("\n"):
        sys.stdout.write("\n")


@app.command()
@handles_errors
def marginals(
    graph: GraphArg,
    schedule: ScheduleOpt = "parall",
    tol: TolOpt = 1e-6,
    max_iters: MaxItersOpt = 1000,
    damping: DampingOpt = 0.0,
    precision: PrecisionOpt = Precision.f64,
    labels: LabelsOpt = None,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = (
        OutputFormat.json),
) -> None:
    """Print every variable's P(=1) after one round of loopy belief propagation.

    JSON: {"marginals": {"<name>": p, ...}, "iterations": n, "converged": bool}.
    CSV: a header `variable,probability` and one row per variable.

    Example: fastlbp marginals data/weblech.causal_fg --labels labels.txt --format csv
    """
    from fastlbp import api

    model = api.load(graph)
    known = api.read_labels(labels, model) if labels else None
    rnd = api.marginals(model, known, schedule=schedule, precision=precision.value, tol=tol,
                        max_iters=max_iters, damping=damping)
    names = model.var_names
    if format is OutputFormat.json:
        emit(json.dumps({
            "marginals": dict(zip(names, rnd.marginals.tolist(), strict=True)),
            "iterations": rnd.iterations,
            "converged": rnd.converged,
        }))
    else:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["variable", "probability"])
        for name, p in zip(names, rnd.marginals.tolist(), strict=True):
            w.writerow([name, repr(p)])
        emit(buf.getvalue())
    status = "converged" if rnd.converged else f"not converged (last change {rnd.delta:.3g})"
    typer.echo(f"{rnd.iterations} iterations, {status}, {rnd.seconds:.3f} s", err=True)


COMMAND_MODULES = ("datalog.cli", "schedules.cli", "fastlbp.triage_cli")


def get_app() -> typer.Typer:
    """The app with every command registered (commands in other modules register on import)."""
    for mod in COMMAND_MODULES:
        try:
            __import__(mod)
        except ModuleNotFoundError as err:
            if err.name != mod:
                raise
    return app


def main() -> None:
    get_app()()


if __name__ == "__main__":
    main()
