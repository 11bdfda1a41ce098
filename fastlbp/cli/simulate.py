"""`fastlbp simulate`: Bingo's experiment, an oracle labelling the top alarm until all true ones are found."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import (
    emit,
    handles_errors,
    note,
    output_target,
    status,
)
from fastlbp.cli.evidence import EvidenceOptions, gather
from fastlbp.cli.options import (
    GraphArg,
    InferenceOptions,
    LoadOptions,
    OutputOpt,
    graph_command,
    learn_options,
    settings_of,
)
from fastlbp.cli.progress import visible
from fastlbp.core.errors import InputError

LearnOpt, LearnStepsOpt = learn_options()


class SimFormat(StrEnum):
    table = "table"
    json = "json"


def progress_line(i: int, step) -> str:
    """`round 12: found 9/43  true  P=0.812345  3.1 ms  race(1,2)` of a `simulate.Step`: the live
    line on a terminal."""
    from fastlbp.core.text import format_probability, safe_name
    return (f"round {i}: found {step.found}/{step.num_true}  {'true ' if step.truth else 'false'}  "
            f"P={format_probability(step.probability)}  {step.round_s * 1e3:.1f} ms  "
            f"{safe_name(step.alarm[:60])}")


@handles_errors
@graph_command
def simulate(
    ctx: typer.Context,
    graph: GraphArg,
    oracle: Annotated[Path | None, typer.Option(
        "--oracle", help="True alarms, one name per line (Bingo's oracle_queries.txt); every other alarm "
                         "is false. Default: the graph's own ground truth (\"truth\" in derivation.json, "
                         "oracle_queries.txt in a Bingo directory).", show_default=False)] = None,
    format: Annotated[SimFormat, typer.Option("--format", "-f", help="table or json.")] = SimFormat.table,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write roc.png and "
                                              "true_alarms_over_time.png into this directory "
                                              "(needs matplotlib: the `plots` extra).")] = None,
    max_rounds: Annotated[int | None, typer.Option("--max-rounds", min=1,
                                                   help="Stop after this many labels.")] = None,
    learn: LearnOpt = False,
    learn_steps: LearnStepsOpt = 3,
    output: OutputOpt = None,
    *,
    evidence: EvidenceOptions,
    inference: InferenceOptions,
    loading: LoadOptions,
) -> None:
    """Replay Bingo's experiment: an oracle labels the top alarm until all true alarms are found.

    Reports Rank-100%-T (labels until every true alarm was seen), Rank-90%-T,
    Inversions (false alarms ranked above true ones), AUC, TotalTime and
    AverageTime (seconds of inference per round), as in the FastLBP paper. A
    run cut short by --max-rounds reports what it did not decide as "not
    reached" (null in JSON, with "complete": false); AUC is "undefined" (null)
    without true or without false alarms.

    JSON: {"rank_100_t", "rank_90_t", "inversions", "auc", "total_time_s",
    "average_time_s", "num_true", "found", "complete", ..., "methods": {method:
    rounds}, "labels": [{"alarm", "truth", "probability", "round_s", "method"},
    ...]}: each round names the method that answered it (a fallback's, LBP, where
    the chosen method refused the round's labels), and so do the table and the
    plots' titles.

    Examples:

      fastlbp simulate data/weblech.json --schedule seqfix

      fastlbp simulate bingo_dir/ --oracle true_alarms.txt --max-rounds 50 -f json -o run.json

      fastlbp simulate graph.json --learn --method lbp
    """
    from fastlbp.cli.triage import given_options
    from fastlbp.inference import simulate as sim  # the session and engines: imported when the command runs
    from fastlbp.io import plots

    settings = settings_of(loading, inference)
    if not given_options(ctx, ("sample_seconds",)):
        settings = settings.interactive()
    if plot is not None:
        try:
            plots.require_matplotlib()
        except plots.PlotsUnavailable as err:
            status(f"error: --plot: {err}")
            raise typer.Exit(2) from None
    output = output_target(output, graph, oracle)
    progress = loading.progress()
    model = loading.load(graph, settings, progress)
    loading.start_jax(progress)
    ev = gather(model, evidence=evidence, loading=loading, settings=settings)
    model, soft = ev.model, ev.soft
    if ev.labels != model.labels:
        import dataclasses

        model = dataclasses.replace(model, labels=ev.labels)  # carried labels: known before round 1
    if oracle is not None:
        truth = sim.read_oracle(oracle, model)
    else:
        truth = sim.graph_truth(model)
        if truth is None:
            raise InputError(str(graph), None, "the graph records no ground truth (\"truth\" in "
                             "derivation.json, oracle_queries.txt in a Bingo directory): give the true "
                             "alarms with --oracle FILE, one name per line")
    live = visible(loading.quiet)  # per-round progress: on a terminal, not with --quiet

    def each_round(i: int, step: sim.Step) -> None:
        if live:
            sys.stderr.write(f"\r{progress_line(i, step)}\033[K")
            sys.stderr.flush()

    online = None
    if learn:
        from fastlbp.inference.learn import LearnOptions, OnlineOptions

        # The E-step uses the rounds' method (auto: learning's own choice, `learn.e_step_method`: exact
        # where it fits, else LBP).
        online = OnlineOptions(LearnOptions(method=settings.method, settings=settings), steps=learn_steps)
    result = sim.simulate(model, truth, max_rounds=max_rounds, on_step=each_round, settings=settings,
                          online=online, soft=soft)
    if live:
        sys.stderr.write("\r\033[K")
    if format is SimFormat.json:
        emit(json.dumps(result.as_dict(), indent=1), output)
    else:
        emit(sim.to_table(result), output)
    if plot is not None:
        for p in plots.write_plots(result, plot, graph=graph, settings=settings):
            note(f"wrote {p}", loading.quiet)
    from fastlbp.core.text import safe_name

    dropped = [safe_name(s.alarm) for s in result.steps if s.evidence_dropped]
    if dropped:
        status(f"warning: {len(dropped)} label(s) of the oracle contradict the model's hard constraints and "
               f"were not used as evidence: {', '.join(dropped[:10])}{' ...' if len(dropped) > 10 else ''}")
    m = result.metrics
    done = "" if result.complete else f" (stopped by --max-rounds: {m.found} of {m.num_true} true found)"
    note(f"{len(result.steps)} rounds{done}, {m.elapsed_s:.3f} s in rounds, "
         f"compile {result.compile_s:.3f} s.", loading.quiet)
