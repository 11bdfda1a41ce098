"""`fastlbp rank`: alarms by P(alarm is true), most likely first, as a table, JSON, CSV or SARIF."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from fastlbp.cli.app import (
    conflicts_located,
    degenerate_warning,
    emit,
    handles_errors,
    output_target,
    status,
    summary,
)
from fastlbp.cli.options import (
    CsvExactNamesOpt,
    GraphArg,
    InferenceOptions,
    LabelsOpt,
    LoadOptions,
    OutputOpt,
    graph_command,
    settings_of,
)


class RankFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    sarif = "sarif"


@handles_errors
@graph_command
def rank(
    graph: GraphArg,
    format: Annotated[RankFormat, typer.Option("--format", "-f", help="table, json, csv, or sarif "
                                               "(SARIF 2.1.0 for code-scanning tools).")] = (
        RankFormat.table),
    top: Annotated[int | None, typer.Option("--top", "-n", min=1,
                                            help="Show only the N most likely alarms.")] = None,
    labels: LabelsOpt = None,
    output: OutputOpt = None,
    csv_exact_names: CsvExactNamesOpt = False,
    *,
    inference: InferenceOptions,
    loading: LoadOptions,
) -> None:
    """Rank alarms by P(alarm is true), most likely first.

    By default (--method auto) the alarms' probabilities come from exact
    inference where the graph's width allows, else from importance sampling
    (with a 95% interval beside each number) where it fits a time budget, else
    from loopy belief propagation (marked "unchecked": approximate); stderr
    says which and why. Prints one row per unlabelled alarm: rank,
    probability, its error, alarm; alarms are ordered by their log-odds, so the order
    among probabilities too small to print is kept. Alarms labelled in the graph
    or in --labels (a labels file, or a `fastlbp triage` session file) are
    evidence and are listed apart. A graph without alarms
    (a bare factor graph) ranks every variable.

    JSON: {"alarms": [{"rank": 1, "alarm": "race(1,2)", "probability": 0.93, "stderr": 0.002,
    "lower": 0.926, "upper": 0.934}, ...], "labelled": [...], "method": "sample", "how": "...",
    "flags": [], "iterations": n, "converged": true} (stderr, lower, upper for sampled rankings).
    CSV: a header `rank,alarm,probability,label,log_odds,stderr,lower,upper`; a
    name a spreadsheet would run as a formula (= + - @ ...) gets a leading '
    unless --csv-exact-names.
    SARIF: one result per
    alarm, ruleId = the alarm's relation, rank = 100 * probability, position and
    probability in properties.

    Examples:

      fastlbp rank race.json --top 20

      fastlbp rank bingo_dir/ --schedule seqfix --format sarif -o alarms.sarif
    """
    progress = loading.progress()
    settings = settings_of(loading, inference)
    output = output_target(output, graph, labels)
    model = loading.load(graph, settings, progress)
    if not model.alarms:
        status(f"note: {graph} names no alarms; ranking every variable")
    extra = {}
    if labels:
        progress("labels")
        from fastlbp.triage.labels import read_labels_or_session  # 0.45 s of imports: only with --labels

        # A labels file or a triage session; a labelled tuple compression removed makes the model again
        # (its variables renumbered), so the graph's own labels are read from the model returned.
        model, extra = read_labels_or_session(labels, model)
    known = {**model.labels, **extra}
    # JAX, the session and the engines are imported here, not at the top (`fastlbp --help` and the commands
    # that run no inference never import JAX), and the backend (on a GPU, CUDA) starts on first use: both
    # timed as this stage, apart from loading and the session.
    progress("jax start")
    loading.start_jax(progress)
    import jax

    from fastlbp.inference import ranking
    from fastlbp.io import writers

    jax.devices()
    with conflicts_located(labels, model, graph):
        result = ranking.rank(model, known, top=top, settings=settings, progress=progress)
    progress("output")
    if format is RankFormat.sarif:
        from fastlbp.io import sarif  # 0.5 s of imports: only for SARIF

        emit(sarif.dumps(sarif.to_sarif(result, model, source=str(graph))), output)
    elif format is RankFormat.csv:
        emit(writers.to_csv(result, exact_names=csv_exact_names), output)
    else:
        emit(writers.WRITERS[format.value](result), output)
    loading.finish(progress, model)
    status(f"{result.how or summary(result.iterations, result.converged, result.delta, result.seconds)}, "
           f"{result.seconds:.3f} s")
    if result.reason:
        status(f"method auto: {result.reason}")
    for flag in result.flags:
        status(f"warning: {flag}")
    warning = None
    if result.method == "lbp":
        # Every unlabelled alarm, not only the `--top` shown: the top few of a good ranking may be equal.
        shown = [a.probability for a in result.alarms]
        if result.marginals is not None:
            unlabelled = [int(a) for a in ranking.alarm_vars(model) if int(a) not in known]
            shown = result.marginals[unlabelled]
        warning = degenerate_warning(shown, graph)
    if warning:
        status(warning)
