"""Evidence beyond `--labels`: soft labels and labels carried from an older version of the graph.

    --soft-labels FILE       `NAME P` lines: independent observations (`fastlbp.inference.soft`)
    --labels-from OLD        an older version's graph: its labels (and --old-labels) carried over
    --old-labels FILE        the labels given on OLD (a labels file or a triage session)
    --match FILE             `OLD<TAB>NEW` renames between the versions
    --carry-confidence C     the P of a label whose derivations changed (soft evidence)

`evidence` applies them after `--labels`, in that order, and reports on
stderr what became of the carried labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import status

SoftLabelsOpt = Annotated[
    Path | None,
    typer.Option("--soft-labels", help="Soft evidence: lines 'NAME P' (P strictly between 0 and 1), each an "
                 "independent observation that the tuple is true, of likelihood ratio P/(1-P): a "
                 "classifier's or reviewer's confidence. A label on the same tuple wins.",
                 rich_help_panel="Evidence"),
]
LabelsFromOpt = Annotated[
    Path | None,
    typer.Option("--labels-from", metavar="OLD_GRAPH",
                 help="Carry labels from an older version of the graph (its own labels, and --old-labels): "
                      "a tuple whose derivations are unchanged (compared by names) keeps its label; a "
                      "changed one gets soft evidence of --carry-confidence; one that is gone is dropped. "
                      "stderr says how many were carried, softened and dropped.",
                 rich_help_panel="Evidence"),
]
OldLabelsOpt = Annotated[
    Path | None,
    typer.Option("--old-labels", help="The labels given on --labels-from's graph: a labels file or a triage "
                                      "session.", rich_help_panel="Evidence"),
]
MatchOpt = Annotated[
    Path | None,
    typer.Option("--match", help="Renamed tuples between --labels-from's graph and this one: lines "
                                 "'OLD<TAB>NEW' (or 'OLD -> NEW').", rich_help_panel="Evidence"),
]
CarryConfidenceOpt = Annotated[
    float,
    typer.Option("--carry-confidence",
                 help="The confidence a carried label keeps when its derivations changed: soft evidence "
                      "P = C for a true label, 1 - C for a false one.", rich_help_panel="Evidence"),
]


def evidence(model, labels: dict[int, bool], *, soft_labels: Path | None = None,
             labels_from: Path | None = None, old_labels: Path | None = None, match: Path | None = None,
             confidence: float = 0.9, loading=None, settings=None, progress=None):
    """The model, labels and soft evidence after --labels-from and --soft-labels.

    Returns:
        (model, {variable: truth}, {variable: p}); the model is made again when a
        carried or observed tuple was compressed away (labels renumbered by name).

    Raises:
        InputError: a bad file (its name and line); `typer.BadParameter` for options given without
            --labels-from.
    """
    soft: dict[int, float] = {}
    if labels_from is None and (old_labels is not None or match is not None):
        raise typer.BadParameter("needs --labels-from OLD_GRAPH", param_hint="'--old-labels' / '--match'")
    if labels_from is not None:
        from fastlbp.triage.carry import carry_labels, read_match
        from fastlbp.triage.carry import old_labels as read_old

        if not 0.5 < confidence < 1.0:
            raise typer.BadParameter(f"{confidence:g} is not in (0.5, 1)", param_hint="'--carry-confidence'")
        if progress is not None:
            progress("labels from")
        old = loading.load(labels_from, settings, progress)
        before = model
        model, carried = carry_labels(old, read_old(old, old_labels), model,
                                      match=read_match(match) if match is not None else None,
                                      confidence=confidence)
        if model is not before:
            labels = {model.index[before.var_names[v]]: t for v, t in labels.items()}
        # A label given for this version (--labels, the graph's own) wins over a carried one.
        labels = {**carried.labels, **labels}
        soft.update({v: p for v, p in carried.soft.items() if v not in labels})
        status(carried.summary())
        for name, why in carried.dropped[:5]:
            status(f"  dropped {name}: {why}")
    if soft_labels is not None:
        from fastlbp.inference.soft import load_soft_labels

        if progress is not None:
            progress("soft labels")
        before = model
        model, observed, labels = load_soft_labels(soft_labels, model, labels)
        if model is not before:
            soft = {model.index[before.var_names[v]]: p for v, p in soft.items()}
        soft.update(observed)  # the file wins over a softened carried label
    return model, labels, soft
