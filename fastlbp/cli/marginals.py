"""`fastlbp marginals`: every variable's P(=1) after one round, as JSON or CSV."""

from __future__ import annotations

import csv
import io
import json
from enum import StrEnum
from typing import Annotated

import typer

from fastlbp import session
from fastlbp.cli.app import (
    DEFAULTS,
    BackendOpt,
    CyclesOpt,
    DampingOpt,
    GraphArg,
    LabelsOpt,
    MaxItersOpt,
    MethodOpt,
    OutputOpt,
    PrecisionOpt,
    SamplesOpt,
    ScheduleOpt,
    SeedOpt,
    TolOpt,
    backend_or_env,
    emit,
    handles_errors,
    output_target,
    settings_from_options,
    status,
    summary,
)
from fastlbp.loading import load, read_labels


class OutputFormat(StrEnum):
    json = "json"
    csv = "csv"


@handles_errors
def marginals(
    graph: GraphArg,
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
    labels: LabelsOpt = None,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = (
        OutputFormat.json),
    output: OutputOpt = None,
) -> None:
    """Print every variable's P(=1) after one round of loopy belief propagation.

    JSON: {"marginals": {"<name>": p, ...}, "iterations": n, "converged": bool, "remedy": null or
    what produced the numbers when LBP alone did not converge}.
    CSV: a header `variable,probability` and one row per variable.

    Labels from --labels replace the graph's own.

    Example: fastlbp marginals data/weblech.causal_fg --labels labels.txt --format csv
    """
    settings = settings_from_options(schedule=schedule, tol=tol, max_iters=max_iters, damping=damping,
                                     precision=precision, backend=backend_or_env(backend),
                                     method=method, samples=samples, seed=seed,
                                     cycles=cycles)
    output = output_target(output, graph, labels)
    model = load(graph, settings)
    known = read_labels(labels, model) if labels else None
    rnd = session.marginals(model, known, settings)
    names = model.var_names
    if format is OutputFormat.json:
        emit(json.dumps({
            "marginals": dict(zip(names, rnd.marginals.tolist(), strict=True)),
            "iterations": rnd.iterations,
            "converged": rnd.converged,
            "remedy": rnd.remedy,
        }), output)
    else:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["variable", "probability"])
        for name, p in zip(names, rnd.marginals.tolist(), strict=True):
            w.writerow([name, repr(p)])
        emit(buf.getvalue(), output)
    status(summary(rnd.iterations, rnd.converged, rnd.delta, rnd.seconds, rnd.remedy, rnd.method))
