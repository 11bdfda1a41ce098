"""`fastlbp schedule`: what a schedule turns into on a graph (batches, sizes, analysis time)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from fastlbp.cli.app import (
    emit,
    handles_errors,
)
from fastlbp.cli.options import (
    GraphArg,
    LoadOptions,
    graph_command,
    settings_of,
)
from schedules.plan import ANALYSES, strategies_help

AnalysisChoice = StrEnum("AnalysisChoice", {a: a for a in ANALYSES})


@handles_errors
@graph_command
def schedule(
    graph: GraphArg,
    schedule: Annotated[str, typer.Option(
        "--schedule", "-s",
        help=f"{strategies_help()}; or a custom order file; options may follow "
             "after ':' (seqfix:algorithm3, seqfix:chunked, seqrnd:seed=3:cycle=4, "
             "topo:bodyfirst, width=N, unroll=N).")] = "seqfix",
    analysis: Annotated[AnalysisChoice | None, typer.Option(
        help="Dependency analysis (default levelling; overrides the spec).")] = None,
    *,
    loading: LoadOptions,
) -> None:
    """Print, as JSON, the batches a schedule makes on a graph.

    Keys: strategy, analysis, batches_per_iteration, batch_size (min, median,
    max, histogram over power-of-two bins), analysis_seconds, chunks_per_iteration,
    chunk_width, engine, virtual_edges.

    Engines: `relaxed` (the default for seqfix, topo and custom orders) solves
    each sweep by recomputing all messages from the previous guess until none
    moves, at most one pass per batch (then exact); `chunked` (`:chunked`, and
    always for seqrnd) runs the batches one after the other in fixed-width chunks.

    Custom order files (UTF-8; '#' comments):

      order total    one edge per line, `FACTOR VARIABLE` or `#EDGE`, every edge once

      order stages   one edge per line, a line `---` ends a stage (a stage updates together)

      order pairs    lines `EDGE < EDGE` (left updated first); a cycle is an error

    Example: fastlbp schedule graph.causal_fg --schedule topo --analysis algorithm3
    """
    import dataclasses

    import schedules  # here, not at the top: the other commands need no schedule analysis
    from schedules.plan import make_plan

    progress = loading.progress()
    settings = dataclasses.replace(settings_of(loading), schedule=schedule)
    plan = make_plan(settings)  # a bad schedule fails here, before the graph loads
    model = loading.load(graph, settings, progress)
    loading.start_jax(progress)
    # The plan on this machine's platform says which engine would run (`Plan.engines`).
    emit(json.dumps(schedules.describe(model, plan.placed(), analysis=analysis.value if analysis else None)))
