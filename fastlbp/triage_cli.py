"""`fastlbp rank`, `fastlbp triage` and `fastlbp simulate`: thin commands over
fastlbp.ranking, fastlbp.triage and fastlbp.simulate."""

from __future__ import annotations

import json
import sys
import threading
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli import (
    DampingOpt,
    GraphArg,
    LabelsOpt,
    MaxItersOpt,
    Precision,
    PrecisionOpt,
    ScheduleOpt,
    TolOpt,
    app,
    emit,
    handles_errors,
)


class RankFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    sarif = "sarif"


class SimFormat(StrEnum):
    table = "table"
    json = "json"


def _status(msg: str) -> None:
    typer.echo(msg, err=True)


class _Ticker:
    """Shows elapsed time on stderr while a long call runs (only on a terminal, after 1 s)."""

    def __init__(self, what: str):
        self.what = what
        self.done = threading.Event()
        self.thread = None

    def __enter__(self):
        if sys.stderr.isatty():
            self.thread = threading.Thread(target=self._tick, daemon=True)
            self.thread.start()
        return self

    def _tick(self):
        start = time.perf_counter()
        shown = False
        while not self.done.wait(1.0):
            shown = True
            sys.stderr.write(f"\r{self.what}... {time.perf_counter() - start:.0f} s")
            sys.stderr.flush()
        if shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def __exit__(self, *exc):
        self.done.set()
        if self.thread is not None:
            self.thread.join()


def _summary(iterations: int, converged: bool, delta: float, seconds: float) -> str:
    status = "converged" if converged else f"not converged (last change {delta:.3g})"
    return f"{iterations} iterations, {status}, {seconds:.3f} s"


@app.command()
@handles_errors
def rank(
    graph: GraphArg,
    format: Annotated[RankFormat, typer.Option("--format", "-f", help="table, json, csv, or sarif "
                                               "(SARIF 2.1.0 for code-scanning tools).")] = (
        RankFormat.table),
    top: Annotated[int | None, typer.Option("--top", "-n", min=1,
                                            help="Show only the N most likely alarms.")] = None,
    schedule: ScheduleOpt = "parall",
    tol: TolOpt = 1e-6,
    max_iters: MaxItersOpt = 1000,
    damping: DampingOpt = 0.0,
    precision: PrecisionOpt = Precision.f64,
    labels: LabelsOpt = None,
) -> None:
    """Rank alarms by P(alarm is true), most likely first.

    Runs loopy belief propagation to convergence and prints one row per
    unlabelled alarm: rank, probability, alarm. Alarms labelled in the graph
    or in --labels are evidence and are listed apart. A graph without alarms
    (a bare factor graph) ranks every variable.

    JSON: {"alarms": [{"rank": 1, "alarm": "race(1,2)", "probability": 0.93}, ...],
    "labelled": [...], "iterations": n, "converged": true}. SARIF: one result per
    alarm, ruleId = the alarm's relation, rank = 100 * probability, position and
    probability in properties.

    Examples:

      fastlbp rank race.json --top 20

      fastlbp rank bingo_dir/ --schedule seqfix --format sarif > alarms.sarif
    """
    from fastlbp import api, ranking

    model = api.load(graph)
    if not model.alarms:
        _status(f"note: {graph} names no alarms; ranking every variable")
    known = dict(model.labels)
    if labels:
        known.update(api.read_labels(labels, model))
    with _Ticker("running inference"):
        result = ranking.rank(model, known, top=top, schedule=schedule, precision=precision.value,
                              tol=tol, max_iters=max_iters, damping=damping)
    if format is RankFormat.sarif:
        emit(json.dumps(ranking.to_sarif(result, source=str(graph)), indent=1))
    else:
        emit(ranking.WRITERS[format.value](result))
    _status(_summary(result.iterations, result.converged, result.delta, result.seconds))


@app.command()
@handles_errors
def triage(
    graph: GraphArg,
    session: Annotated[Path | None, typer.Option(
        "--session", help="The session file (SQLite). Default: GRAPH.triage.db next to the graph.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the saved session exactly where "
                                                          "it stopped (its own settings are used).")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start over, replacing a saved session.")] = False,
    why: Annotated[int, typer.Option("--why", min=0, help="Derivations shown per alarm.")] = 3,
    schedule: ScheduleOpt = "parall",
    tol: TolOpt = 1e-6,
    max_iters: MaxItersOpt = 1000,
    damping: DampingOpt = 0.0,
    precision: PrecisionOpt = Precision.f64,
) -> None:
    """Label alarms one at a time, most likely first, in the terminal.

    Shows the top unlabelled alarm, its probability and why (its strongest
    derivations: rules and the tuples they rest on). Type t (true), f
    (false), s (skip), u (undo), j X (jump to alarm X), /TEXT (search),
    stats, h (help) or q (quit). Each label becomes evidence and a
    warm-started round re-ranks the rest; its time is shown.

    Every label is saved before it is acknowledged, so a crash or kill never
    loses an accepted label; `--resume` restores the session exactly.

    Examples:

      fastlbp triage race.json

      fastlbp triage race.json --resume
    """
    from fastlbp import api
    from fastlbp import triage as tri

    if resume and fresh:
        raise typer.BadParameter("--resume and --fresh exclude each other")
    model = api.load(graph)
    path = session or tri.default_session_path(graph)
    with _Ticker("first round"):
        t = tri.Triage.open(model, path, graph_path=str(graph), resume=resume, overwrite=fresh,
                            schedule=schedule, precision=precision.value, tol=tol,
                            max_iters=max_iters, damping=damping)
    try:
        if resume:
            _status(f"resumed {len(t.order)} label(s) from {path}")
        for note in t.replay_notes:
            _status(note)
        code = tri.Terminal(t, why=why).run()
    finally:
        t.close()
    raise typer.Exit(code)


@app.command()
@handles_errors
def simulate(
    graph: GraphArg,
    oracle: Annotated[Path, typer.Option("--oracle", "-o", help="True alarms, one name per line "
                                         "(Bingo's oracle_queries.txt); every other alarm is false.",
                                         show_default=False)],
    format: Annotated[SimFormat, typer.Option("--format", "-f", help="table or json.")] = SimFormat.table,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write roc.png and "
                                              "true_alarms_over_time.png into this directory "
                                              "(needs matplotlib: the `plots` extra).")] = None,
    max_rounds: Annotated[int | None, typer.Option("--max-rounds", min=1,
                                                   help="Stop after this many labels.")] = None,
    schedule: ScheduleOpt = "parall",
    tol: TolOpt = 1e-6,
    max_iters: MaxItersOpt = 1000,
    damping: DampingOpt = 0.0,
    precision: PrecisionOpt = Precision.f64,
) -> None:
    """Replay Bingo's experiment: an oracle labels the top alarm until all true alarms are found.

    Reports Rank-100%-T (labels until every true alarm was seen), Rank-90%-T,
    Inversions (false alarms ranked above true ones), AUC, TotalTime and
    AverageTime (seconds of inference per round), as in the FastLBP paper.

    JSON: {"rank_100_t", "rank_90_t", "inversions", "auc", "total_time_s",
    "average_time_s", ..., "labels": [{"alarm", "truth", "probability", "round_s"}, ...]}.

    Example: fastlbp simulate bingo_dir/ --oracle bingo_dir/oracle_queries.txt --schedule seqfix
    """
    from fastlbp import api
    from fastlbp import simulate as sim

    if plot is not None:
        try:
            sim.require_matplotlib()
        except sim.PlotsUnavailable as err:
            _status(f"error: --plot: {err}")
            raise typer.Exit(2) from None
    model = api.load(graph)
    truth = sim.read_oracle(oracle, model)
    live = sys.stderr.isatty()

    def progress(i: int, step) -> None:
        if live:
            sys.stderr.write(f"\rround {i}: {'true ' if step.truth else 'false'} "
                             f"{step.round_s * 1e3:.1f} ms  {step.alarm[:60]}\033[K")
            sys.stderr.flush()

    result = sim.simulate(model, truth, max_rounds=max_rounds, on_step=progress, schedule=schedule,
                          precision=precision.value, tol=tol, max_iters=max_iters, damping=damping)
    if live:
        sys.stderr.write("\r\033[K")
    if format is SimFormat.json:
        emit(json.dumps(result.as_dict(), indent=1))
    else:
        emit(sim.to_table(result))
    if plot is not None:
        for p in sim.plot(result, plot):
            _status(f"wrote {p}")
    m = result.metrics
    _status(f"{len(result.steps)} rounds, TotalTime {m.total_time_s:.3f} s, "
            f"AverageTime {m.average_time_s * 1e3:.2f} ms, compile {result.compile_s:.3f} s")
