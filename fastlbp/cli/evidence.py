"""Evidence beyond `--labels`: soft labels and labels carried from an older version of the graph.

    --soft-labels FILE       `NAME P` lines: independent observations (`fastlbp.inference.soft`)
    --labels-from OLD        an older version's graph: its labels (and --old-labels) carried over
    --old-labels FILE        the labels given on OLD (a labels file or a triage session)
    --match FILE             `OLD<TAB>NEW` renames between the versions
    --carry-confidence C     the P of a label whose derivations changed (soft evidence)

`gather` reads them after `--labels`, in that order, for every command that
takes them (rank, marginals, simulate, triage), and reports on stderr what
became of the carried labels.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fastlbp.cli.app import note

if TYPE_CHECKING:
    from fastlbp.core.model import Model
    from fastlbp.triage.carry import Carried

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


@dataclasses.dataclass(frozen=True)
class EvidenceOptions:
    """Evidence beyond --labels: the options of rank, simulate and triage (one group, `graph_command`;
    marginals takes --soft-labels alone)."""

    soft_labels: Path | None = None
    labels_from: Path | None = None
    old_labels: Path | None = None
    match: Path | None = None
    carry_confidence: float = 0.9

    def given(self) -> bool:
        """Some evidence file was given (the confidence alone is not evidence)."""
        return any(f is not None for f in (self.soft_labels, self.labels_from, self.old_labels, self.match))


# The group's options: (parameter name, its typer annotation, default), in the order --help lists them.
EVIDENCE_PARAMETERS = tuple((name, annotation, getattr(EvidenceOptions(), name)) for name, annotation in (
    ("soft_labels", SoftLabelsOpt),
    ("labels_from", LabelsFromOpt),
    ("old_labels", OldLabelsOpt),
    ("match", MatchOpt),
    ("carry_confidence", CarryConfidenceOpt),
))


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What a command knows before its first round.

    Attributes:
        model: the model, made again when a labelled, carried or observed tuple was compressed away
            (every variable index here refers to it).
        labels: {variable: truth}: the graph's own labels (unless --labels replaces them), --labels,
            and the labels carried from --labels-from.
        soft: {variable: p} soft evidence: softened carried labels, then --soft-labels.
        carried: what became of --labels-from's labels (`fastlbp.triage.carry.Carried`), or None.
        soft_file: how many tuples --soft-labels observed.
    """

    model: Model
    labels: dict[int, bool]
    soft: dict[int, float]
    carried: Carried | None = None
    soft_file: int = 0


def gather(model: Model, *, labels: Path | None = None, replace: bool = False,
           evidence: EvidenceOptions = EvidenceOptions(), loading=None, settings=None,
           progress=None) -> Evidence:
    """The evidence of `rank`, `marginals`, `simulate` and `triage`: --labels, then --labels-from, then
    --soft-labels, in that order; reports on stderr what became of the carried labels.

    Args:
        labels: a labels file or a triage session (`read_labels_or_session`).
        evidence: --soft-labels, --labels-from, --old-labels, --match, --carry-confidence.
        replace: --labels replaces the graph's own labels (`marginals`) instead of adding to them.
        loading, settings: how to load --labels-from's graph (`LoadOptions`, `Settings`).
        progress: the stage callback of `LoadOptions.progress`.

    Raises:
        InputError: a bad file (its name and line); `typer.BadParameter` for options given without
            --labels-from, or a confidence outside (0.5, 1).
    """
    soft_labels, labels_from, old_labels, match = (evidence.soft_labels, evidence.labels_from,
                                                   evidence.old_labels, evidence.match)
    confidence = evidence.carry_confidence
    if labels_from is None and (old_labels is not None or match is not None):
        raise typer.BadParameter("needs --labels-from OLD_GRAPH", param_hint="'--old-labels' / '--match'")
    known = dict(model.labels)
    if labels is not None:
        if progress is not None:
            progress("labels")
        from fastlbp.triage.labels import read_labels_or_session  # triage's imports: only with --labels

        # A labels file or a triage session; a labelled tuple compression removed makes the model again
        # (its variables renumbered), so the graph's own labels are read from the model returned.
        model, extra = read_labels_or_session(labels, model)
        known = extra if replace else {**model.labels, **extra}
    soft: dict[int, float] = {}
    carried = None
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
                                      confidence=confidence, source=str(match or old_labels or labels_from))
        if model is not before:
            known = {model.index[before.var_names[v]]: t for v, t in known.items()}
        # A label given for this version (--labels, the graph's own) wins over a carried one.
        known = {**carried.labels, **known}
        soft.update({v: p for v, p in carried.soft.items() if v not in known})
        from fastlbp.core.text import safe_name

        note(carried.summary(), loading.quiet)
        for name, why in carried.dropped[:5]:
            note(f"  dropped {safe_name(name)}: {why}", loading.quiet)
    observed = 0
    if soft_labels is not None:
        from fastlbp.inference.soft import load_soft_labels

        if progress is not None:
            progress("soft labels")
        before = model
        model, from_file, known = load_soft_labels(soft_labels, model, known)
        if model is not before:
            soft = {model.index[before.var_names[v]]: p for v, p in soft.items()}
        soft.update(from_file)  # the file wins over a softened carried label
        observed = len(from_file)
    return Evidence(model, known, soft, carried, observed)
