"""`fastlbp check`: how far LBP's alarm marginals are from a reference (exact inference or sampling)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from fastlbp.cli.app import (
    Ticker,
    conflicts_located,
    emit,
    handles_errors,
    note,
    output_target,
)
from fastlbp.cli.evidence import gather
from fastlbp.cli.options import (
    GraphArg,
    InferenceOptions,
    LabelsOpt,
    LoadOptions,
    OutputOpt,
    graph_command,
    settings_of,
)
from fastlbp.inference.methods import reference_names

# From the method table (`fastlbp.inference.methods`, which imports no numpy), not from
# fastlbp.inference.check: importing that (scipy, the session, engines) for an option type would slow
# every command down.
Reference = StrEnum("Reference", {r: r for r in reference_names()})


class CheckFormat(StrEnum):
    table = "table"
    json = "json"


@handles_errors
@graph_command
def check(
    graph: GraphArg,
    reference: Annotated[Reference, typer.Option(
        "--reference", "-r", help="exact (bucket elimination; refused when the graph is too wide), sample "
                                  "(ancestral sampling with error bars), or auto: exact where it fits, "
                                  "else sample.")] = Reference.auto,
    format: Annotated[CheckFormat, typer.Option("--format", "-f", help="table or json.")] = CheckFormat.table,
    worst: Annotated[int, typer.Option("--worst", min=0, help="Alarms listed, worst first.")] = 10,
    labels: LabelsOpt = None,
    output: OutputOpt = None,
    *,
    inference: InferenceOptions,
    loading: LoadOptions,
) -> None:
    """Compare LBP's alarm marginals with a reference: exact inference where the graph allows, else sampling.

    LBP is exact on trees and approximate on the networks derivation graphs
    make, where a tuple's derivations share ancestors; this measures how far.
    Reports the largest and mean absolute error over the unlabelled alarms,
    the Spearman correlation of LBP's order with the reference's, how many
    of the alarm pairs the reference tells apart (beyond 2 combined standard
    errors) LBP orders the other way, the overlap of the top 10, the alarms
    LBP misses most, and a verdict: ok, or warn with the reasons (an error
    beyond 0.05 and 3 standard errors, an order of magnitude off, more than
    10% of the told-apart pairs reversed, a top-10 miss beyond the
    reference's error, no convergence). Alarms whose reference probabilities
    are equal within the reference's error may be ordered either way.

    JSON: {"reference": "exact"|"sample", "alarms": n, "max_abs_error": x, "mean_abs_error": x,
    "spearman": r, "resolved_pairs": n, "reversed_pairs": x, "top_k": k, "top_k_overlap": m,
    "worst": [{"alarm", "lbp", "reference", "stderr"}...], "verdict": "ok"|"warn", "reasons": [...],
    ...}.

    Examples:

      fastlbp check data/weblech.json

      fastlbp check race.json --labels labels.txt --reference sample --samples 1000000 -f json
    """
    settings = settings_of(loading, inference)
    from fastlbp.inference import (
        check as checking,  # scipy, the session and engines: only when the command runs, its plan valid
    )

    output = output_target(output, graph, labels)
    progress = loading.progress()
    model = loading.load(graph, settings, progress)
    ev = gather(model, labels=labels)  # a labels file or a triage session; may make the model again
    model, known = ev.model, ev.labels
    loading.start_jax(progress)
    with Ticker("running LBP and the reference", progress), conflicts_located(labels, model, graph):
        report = checking.check(model, known, settings, reference=reference.value)
    if format is CheckFormat.json:
        emit(json.dumps(report.as_dict(worst), indent=1), output)
    else:
        emit(checking.to_table(report, worst), output)
    note(f"reference {report.reference}: {report.reference_info.get('seconds', 0.0):.3f} s; "
         f"verdict {report.verdict}.", loading.quiet)
