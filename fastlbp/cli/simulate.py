"""`fastlbp simulate`: Bingo's experiment, an oracle labelling the top alarm until all true ones are found."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from fastlbp import simulate as sim
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
    TolOpt,
    backend_or_env,
    emit,
    handles_errors,
    settings_from_options,
    status,
)
from fastlbp.loading import load


class SimFormat(StrEnum):
    table = "table"
    json = "json"


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
    """Replay Bingo's experiment: an oracle labels the top alarm until all true alarms are found.

    Reports Rank-100%-T (labels until every true alarm was seen), Rank-90%-T,
    Inversions (false alarms ranked above true ones), AUC, TotalTime and
    AverageTime (seconds of inference per round), as in the FastLBP paper.

    JSON: {"rank_100_t", "rank_90_t", "inversions", "auc", "total_time_s",
    "average_time_s", ..., "labels": [{"alarm", "truth", "probability", "round_s"}, ...]}.

    Example: fastlbp simulate bingo_dir/ --oracle bingo_dir/oracle_queries.txt --schedule seqfix
    """
    settings = settings_from_options(schedule=schedule, tol=tol, max_iters=max_iters, damping=damping,
                                     precision=precision, backend=backend_or_env(backend),
                                     method=method, samples=samples, seed=seed,
                                     cycles=cycles)
    if plot is not None:
        try:
            sim.require_matplotlib()
        except sim.PlotsUnavailable as err:
            status(f"error: --plot: {err}")
            raise typer.Exit(2) from None
    model = load(graph, settings)
    truth = sim.read_oracle(oracle, model)
    live = sys.stderr.isatty()

    def progress(i: int, step) -> None:
        if live:
            sys.stderr.write(f"\rround {i}: {'true ' if step.truth else 'false'} "
                             f"{step.round_s * 1e3:.1f} ms  {step.alarm[:60]}\033[K")
            sys.stderr.flush()

    result = sim.simulate(model, truth, max_rounds=max_rounds, on_step=progress, settings=settings)
    if live:
        sys.stderr.write("\r\033[K")
    if format is SimFormat.json:
        emit(json.dumps(result.as_dict(), indent=1))
    else:
        emit(sim.to_table(result))
    if plot is not None:
        for p in sim.plot(result, plot):
            status(f"wrote {p}")
    dropped = [s.alarm for s in result.steps if s.evidence_dropped]
    if dropped:
        status(f"warning: {len(dropped)} label(s) of the oracle contradict the model's hard constraints and "
               f"were not used as evidence: {', '.join(dropped[:10])}{' ...' if len(dropped) > 10 else ''}")
    m = result.metrics
    status(f"{len(result.steps)} rounds, TotalTime {m.total_time_s:.3f} s, "
           f"AverageTime {m.average_time_s * 1e3:.2f} ms, compile {result.compile_s:.3f} s")
