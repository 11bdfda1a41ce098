"""`fastlbp marginals`: every tuple's P(=1) after one round, as JSON or CSV (`--all`: every variable)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from fastlbp.cli.app import conflicts_located, emit, handles_errors, method_notes, output_target
from fastlbp.cli.evidence import EvidenceOptions, SoftLabelsOpt, gather
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


class OutputFormat(StrEnum):
    json = "json"
    csv = "csv"


@handles_errors
@graph_command
def marginals(
    graph: GraphArg,
    labels: LabelsOpt = None,
    soft_labels: SoftLabelsOpt = None,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = (
        OutputFormat.json),
    output: OutputOpt = None,
    all_variables: Annotated[bool, typer.Option(
        "--all", help="Also list the clause and auxiliary variables (R1#3, name@input).")] = False,
    csv_exact_names: CsvExactNamesOpt = False,
    *,
    inference: InferenceOptions,
    loading: LoadOptions,
) -> None:
    """Print every tuple's P(=1): exact, sampled (with standard errors and 95% intervals) or by LBP.

    --method auto (the default) picks exact inference where the graph's width
    allows, else importance sampling where it fits a time budget, else loopy
    belief propagation; the JSON's "method", "how" and "reason" say which and why.

    Every tuple of the input graph is listed, in the input's order: a tuple
    compression removed as a certain input fact has 1.0, one cycle elimination
    removed 0.0 (it is in no least fixpoint), one compression pruned (no alarm
    depends on it) LBP's belief from its parents, which is what LBP on the
    whole graph gives; with --method exact or sample nothing is pruned.
    --all adds the clause and auxiliary variables after the tuples.

    JSON: {"marginals": {"<name>": p, ...}, "stderr": {"<name>": se, ...} and "interval":
    {"<name>": [lower, upper], ...} (sampled only), "method", "how", "flags", "reason",
    "iterations": n, "converged": bool, "remedy": null or what produced the numbers when LBP
    alone did not converge}.
    CSV: a header `variable,probability` (then `stderr,lower,upper` when sampled) and one row per
    tuple (or variable), quoted as RFC 4180 says; a name a spreadsheet would run as a formula
    (= + - @ ...) gets a leading ' unless --csv-exact-names.

    Labels from --labels replace the graph's own; they may name any tuple of the graph.

    Example: fastlbp marginals data/weblech.json --labels labels.txt --format csv
    """
    settings = settings_of(loading, inference)
    output = output_target(output, graph, labels)
    progress = loading.progress()
    model = loading.load(graph, settings, progress)
    from fastlbp.inference import methods

    if not all(m.pruned_beliefs for m in methods.may_run(settings.method)) and "derivation" in model.meta:
        from datalog.bayesnet import rebuild

        # A pruned tuple's forward belief is LBP's; exact inference and sampling need it as a variable.
        model = rebuild(model, prune=False)
    ev = gather(model, labels=labels, replace=True, evidence=EvidenceOptions(soft_labels=soft_labels),
                progress=progress)
    model, known, soft = ev.model, ev.labels, ev.soft
    loading.start_jax(progress)
    from fastlbp.inference import session  # the session and engines: imported when the command runs

    with conflicts_located(labels, model, graph):
        rnd = session.marginals(model, known, settings, soft=soft)

    names, values = _listed(model, rnd.marginals, all_variables)
    errors = None
    intervals = methods.method_of(rnd.method).intervals(rnd)
    if intervals is not None:
        _, se = _listed(model, intervals[0], all_variables)
        _, lower = _listed(model, intervals[1], all_variables)
        _, upper = _listed(model, intervals[2], all_variables)
        # A tuple fixed by the graph (a constant input, an underivable tuple) is certain: no error.
        se = [0.0 if lo == hi else s for s, lo, hi in zip(se, lower, upper, strict=True)]
        errors = (se, lower, upper)
    if format is OutputFormat.json:
        doc = {"marginals": dict(zip(names, values, strict=True))}
        if errors is not None:
            doc["stderr"] = dict(zip(names, errors[0], strict=True))
            doc["interval"] = {n: [lo, hi] for n, lo, hi in zip(names, errors[1], errors[2], strict=True)}
        doc.update({"iterations": rnd.iterations, "converged": rnd.converged, "remedy": rnd.remedy,
                    **methods.summary_dict(rnd)})
        emit(json.dumps(doc), output)
    else:
        from fastlbp.core.text import csv_document

        header = ["variable", "probability"] + (["stderr", "lower", "upper"] if errors else [])
        rows = ([name, repr(p)] + ([repr(e[i]) for e in errors] if errors else [])
                for i, (name, p) in enumerate(zip(names, values, strict=True)))
        emit(csv_document(header, rows, 0, csv_exact_names), output)
    method_notes(methods.describe(rnd), rnd.seconds, rnd.reason, rnd.flags, loading.quiet)


def _listed(model, marginals, all_variables: bool) -> tuple[list[str], list[float]]:
    """(names, P) of every tuple of the input graph, then (`all_variables`) the other variables."""
    import numpy as np

    from datalog.bayesnet import tuple_marginals  # here: `fastlbp --help` needs no Datalog front end or numpy

    names = list(model.tuple_names)
    values = tuple_marginals(model, marginals).tolist()
    if all_variables:
        tuples = set(names)
        extra = [v for v, name in enumerate(model.var_names) if name not in tuples]
        names += [model.var_names[v] for v in extra]
        values += np.asarray(marginals, np.float64)[extra].tolist()
    return names, values
