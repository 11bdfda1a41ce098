"""`fastlbp learn`: rule probabilities learned from the labels of one or many graphs of one analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import (
    DEFAULTS,
    CyclesOpt,
    Method,
    NoCacheOpt,
    OutputOpt,
    QuietOpt,
    SamplesOpt,
    SeedOpt,
    emit,
    handles_errors,
    load_graph,
    output_target,
    settings_from_options,
    start_progress,
    status,
)
from fastlbp.core.errors import InputError


def split_graph_labels(arg: str) -> tuple[Path, Path | None]:
    """`GRAPH` or `GRAPH:LABELS` -> (graph, labels or None).

    A path that exists is a graph even when it holds a colon; otherwise the
    argument splits at its last colon.
    """
    p = Path(arg)
    if p.exists() or ":" not in arg:
        return p, None
    graph, _, labels = arg.rpartition(":")
    if not graph or not labels:
        return p, None
    return Path(graph), Path(labels)


@handles_errors
def learn(
    graphs: Annotated[list[str], typer.Argument(
        metavar="GRAPH[:LABELS]...", show_default=False,
        help="Graphs of one analysis (derivation.json, Bingo directories; rules matched by name). Each "
             "learns from its ground truth (\"truth\" in derivation.json, oracle_queries.txt in a Bingo "
             "directory: unnamed alarms are false) and its labels; GRAPH:LABELS adds a labels file "
             "(lines 'NAME true|false', or a triage session's labels).")],
    output: OutputOpt = None,
    method: Annotated[Method, typer.Option(
        "--method", "-m", help="The E-step's inference: auto (exact where the width fits, else "
                               "sampling, else LBP; per graph), exact, sample or lbp (fast, "
                               "approximate).")] = Method.auto,
    em_iters: Annotated[int, typer.Option("--em-iters", min=1, help="Most EM steps.")] = 100,
    em_tol: Annotated[float, typer.Option(
        "--em-tol", min=0.0,
        help="Stop when no rule's probability moves by more than this in a step.")] = 1e-4,
    prior_strength: Annotated[float, typer.Option(
        "--prior-strength",
        help="Pseudo-counts of each rule's Beta prior, centred on its stated probability (or --prior's): "
             "a rule without support keeps its prior; n informative clauses move it about n/(n+s) of "
             "the way.")] = 2.0,
    prior: Annotated[Path | None, typer.Option(
        "--prior", metavar="FILE", show_default=False,
        help="Prior centres (and starting values), lines 'Rk: p'; default the graphs' stated "
             "probabilities.")] = None,
    samples: SamplesOpt = DEFAULTS.samples,
    seed: SeedOpt = DEFAULTS.seed,
    cycles: CyclesOpt = DEFAULTS.cycles,
    quiet: QuietOpt = False,
    no_cache: NoCacheOpt = False,
) -> None:
    """Learn rule probabilities from labels: EM on the Bayesian network, a Beta prior per rule.

    Writes 'Rk: p' lines (the format of rule-prob.txt and --rule-prob), each
    after a comment with the rule's support (clause instances in the labelled
    graphs, expected bodies held and fired) and a 95% interval; a rule without
    support keeps its prior value and says so.

    Examples:

      fastlbp learn a.json b.json c.json -o rule-prob.txt

      fastlbp learn bingo_dir/:labels.txt --method lbp -o learned.txt

      fastlbp rank d.json --rule-prob rule-prob.txt
    """
    from fastlbp.inference.learn import Learner, LearnOptions, training_labels
    from fastlbp.io.loading import load_labels
    from fastlbp.io.rule_probs import format_rule_probs, read_rule_probs

    pairs = [split_graph_labels(g) for g in graphs]
    output = output_target(output, *[p for pair in pairs for p in pair])
    settings = settings_from_options(samples=samples, seed=seed, cycles=cycles)
    priors = read_rule_probs(prior) if prior is not None else {}
    models, labels = [], []
    progress = start_progress(quiet)
    for graph, labels_path in pairs:
        model = load_graph(graph, settings, no_cache=no_cache, progress=progress)
        given = {}
        if labels_path is not None:
            model, given = load_labels(labels_path, model)
        evidence = {**training_labels(model), **given}
        if not evidence:
            raise InputError(str(graph), None, "no labels to learn from: the graph records no ground truth "
                             "and no labels; give a labels file as GRAPH:LABELS")
        models.append(model)
        labels.append(evidence)
    options = LearnOptions(method=method.value, max_iters=em_iters, tol=em_tol, prior_strength=prior_strength,
                           prior=priors, settings=settings)
    result = Learner(models, labels, options).run()
    header = [f"learned by fastlbp learn (EM, {', '.join(sorted(set(result.methods)))} E-step) from "
              f"{len(models)} graph(s), {sum(map(len, labels))} labels: {result.iterations} steps, "
              f"{'converged' if result.converged else 'NOT converged (raise --em-iters)'}",
              f"Beta prior: {prior_strength:g} pseudo-counts centred on "
              f"{'--prior ' + str(prior) if prior is not None else 'the stated probabilities'}"]
    emit(format_rule_probs(result.lines(), header).rstrip("\n"), output)
    supported = int((result.support > 0).sum())
    status(f"{len(result.names)} rules ({supported} with support), {result.iterations} EM steps, "
           f"{result.seconds:.2f} s" + ("" if result.converged else "; not converged"))
