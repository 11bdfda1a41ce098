"""`fastlbp triage`: label alarms one at a time in the terminal, with a durable session file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import (
    DEFAULTS,
    BackendOpt,
    CyclesOpt,
    DampingOpt,
    GraphArg,
    MaxItersOpt,
    MethodOpt,
    PrecisionOpt,
    SamplesOpt,
    ScheduleOpt,
    SeedOpt,
    Ticker,
    TolOpt,
    backend_or_env,
    handles_errors,
    settings_from_options,
    status,
)
from fastlbp.loading import load
from fastlbp.triage import Terminal, Triage, default_session_path


@handles_errors
def triage(
    graph: GraphArg,
    session: Annotated[Path | None, typer.Option(
        "--session", help="The session file (SQLite). Default: GRAPH.triage.db next to the graph.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the saved session exactly where "
                                                          "it stopped (its own settings are used).")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start over, replacing a saved session (never a "
                                                        "file that is not one, nor one in use).")] = False,
    recover: Annotated[bool, typer.Option("--recover", help="Start a new session from the valid events of a "
                                                            "damaged one (kept as FILE.damaged).")] = False,
    why: Annotated[int, typer.Option("--why", min=0, help="Derivations shown per alarm.")] = 3,
    schedule: ScheduleOpt = DEFAULTS.schedule,
    tol: TolOpt = DEFAULTS.tol,
    max_iters: MaxItersOpt = DEFAULTS.max_iters,
    damping: DampingOpt = DEFAULTS.damping,
    precision: PrecisionOpt = DEFAULTS.precision,
    backend: BackendOpt = None,
    method: MethodOpt = DEFAULTS.method,
    samples: SamplesOpt = DEFAULTS.samples,
    seed: SeedOpt = DEFAULTS.seed,
    cycles: CyclesOpt = DEFAULTS.cycles,
) -> None:
    """Label alarms one at a time, most likely first, in the terminal.

    Shows the top unlabelled alarm, its probability and why (its strongest
    derivations: rules and the tuples they rest on). Type t (true), f
    (false), s (skip), u (undo), j X (jump to alarm X), /TEXT (search),
    stats, h (help) or q (quit). Each label becomes evidence and a
    warm-started round re-ranks the rest; its time is shown.

    Every label is saved before it is acknowledged, so a crash or kill never
    loses an accepted label; `--resume` restores the session exactly. A label
    that cannot be saved (a full disk) is not applied, and says so. A session
    is used by one process at a time: a second one is refused, naming the
    first. A damaged session file is reported and left as it is; `--recover`
    starts over from its valid part.

    Examples:

      fastlbp triage race.json

      fastlbp triage race.json --resume
    """
    if resume + fresh + recover > 1:
        raise typer.BadParameter("--resume, --fresh and --recover exclude each other")
    settings = settings_from_options(schedule=schedule, tol=tol, max_iters=max_iters, damping=damping,
                                     precision=precision, backend=backend_or_env(backend),
                                     method=method, samples=samples, seed=seed,
                                     cycles=cycles)
    model = load(graph, settings)
    path = session or default_session_path(graph)
    with Ticker("first round"):
        t = Triage.open(model, path, graph_path=str(graph), resume=resume, overwrite=fresh,
                        recover=recover, settings=settings)
    try:
        if resume:
            status(f"resumed {len(t.order)} label(s) from {path}")
        for note in t.replay_notes:
            status(note)
        code = Terminal(t, why=why).run()
    finally:
        t.close()
    raise typer.Exit(code)
