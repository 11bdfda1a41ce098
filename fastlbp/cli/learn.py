"""`fastlbp learn`: rule probabilities learned from the labels of one or many graphs of one analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import emit, handles_errors, note, output_target
from fastlbp.cli.options import InferenceOptions, LoadOptions, OutputOpt, graph_command, settings_of
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
@graph_command
def learn(
    graphs: Annotated[list[str], typer.Argument(
        metavar="GRAPH[:LABELS]...", show_default=False,
        help="Graphs of one analysis (derivation.json, Bingo directories, Datalog programs; rules matched "
             "by name). Each learns from its ground truth (\"truth\" in derivation.json, "
             "oracle_queries.txt in a Bingo directory: unnamed alarms are false) and its labels; "
             "GRAPH:LABELS adds a labels file (lines 'NAME true|false').")],
    output: OutputOpt = None,
    em_iters: Annotated[int, typer.Option("--em-iters", min=1, help="Most E-steps.")] = 100,
    em_tol: Annotated[float, typer.Option(
        "--em-tol", min=0.0,
        help="Stop when an EM step moves no rule's probability by more than this.")] = 1e-4,
    prior_strength: Annotated[float, typer.Option(
        "--prior-strength",
        help="Pseudo-counts of each rule's Beta prior, centred on its stated probability (the graph's, "
             "or --rule-prob's): a rule without support keeps it; n informative clauses move it about "
             "n/(n+s) of the way. At most 1e12.")] = 2.0,
    prior: Annotated[Path | None, typer.Option(
        "--prior", metavar="FILE",
        help="Per-rule priors: lines 'Rk: p' (the centre, instead of the stated probability) or "
             "'Rk: p s' (and s pseudo-counts, instead of --prior-strength); other rules keep "
             "theirs.")] = None,
    *,
    inference: InferenceOptions,
    loading: LoadOptions,
) -> None:
    """Learn rule probabilities from labels: EM on the Bayesian network, a Beta prior per rule.

    Writes 'NAME: p' lines (the graphs' rule names; the format of rule-prob.txt and --rule-prob), each
    after a comment with the rule's support (clause instances in the labelled
    graphs, expected bodies held and fired) and a 95% interval; a rule without
    support keeps its prior value and says so.

    The E-step's posterior comes from --method: exact (bucket elimination),
    sample (the labels as importance weights) or lbp (fast, approximate);
    auto picks per graph: exact where its induced width fits, at any size, else
    lbp (never the sampler: under many alarm labels its weights collapse). EM
    steps are extrapolated (Anderson acceleration), then Newton steps with the
    labels' information once EM stalls. With exact E-steps EM runs from 6 points
    at once (the stated probabilities, 0.5, random ones; one batched pass a round)
    and keeps the best maximum, and each interval is checked against the profile
    posterior (rules the labels reach only through others have flat ridges that
    the curvature at the maximum does not show). A sampled E-step draws 50,000 worlds (--samples sets
    it) with a fixed seed, and EM stops once its steps are below the
    sampler's error, which the output reports.

    Examples:

      fastlbp learn a.json b.json c.json -o rule-prob.txt

      fastlbp learn bingo_dir/:labels.txt --method lbp -o learned.txt

      fastlbp learn a.json b.json --rule-prob start.txt -o learned.txt   (prior centres)

      fastlbp learn a.json --prior priors.txt -o learned.txt   ('R3: 0.2 50': R3's prior alone)

      fastlbp rank d.json --rule-prob rule-prob.txt
    """
    from datalog.rule_probs import format_rule_probs, read_priors
    from fastlbp.core.settings import Settings
    from fastlbp.inference.learn import Learner, LearnOptions, training_labels
    from fastlbp.io.loading import load_labels

    pairs = [split_graph_labels(g) for g in graphs]
    output = output_target(output, *[p for pair in pairs for p in pair], loading.rule_prob, prior)
    priors = read_priors(prior) if prior is not None else []
    settings = settings_of(loading, inference)
    models, labels = [], []
    progress = loading.progress()
    for graph, labels_path in pairs:
        model = loading.load(graph, settings, progress)
        given = {}
        if labels_path is not None:
            model, given = load_labels(labels_path, model)
        evidence = {**training_labels(model), **given}
        if not evidence:
            raise InputError(str(graph), None, "no labels to learn from: the graph records no ground truth "
                             "and no labels; give a labels file as GRAPH:LABELS")
        models.append(model)
        labels.append(evidence)
    loading.finish(progress)
    known = {r.name for m in models for r in m.meta["derivation"].rules} if all(
        "derivation" in m.meta for m in models) else None
    for ln, name, _, _ in priors:
        if known is not None and name not in known:
            raise InputError(str(prior), ln, f"rule {name!r} is in none of the graphs (a typo?)")
    # A sampled E-step draws its own number of worlds (`LearnOptions.e_step_samples`); --samples given
    # sets it instead.
    e_step = {} if settings.samples == Settings().samples else {"e_step_samples": settings.samples}
    options = LearnOptions(method=settings.method, max_iters=em_iters, tol=em_tol,
                           prior_strength=prior_strength, settings=settings, **e_step,
                           prior={name: p for _, name, p, _ in priors},
                           prior_strengths={name: s for _, name, _, s in priors if s is not None})
    result = Learner(models, labels, options).run()
    centre = "the stated probabilities" if loading.rule_prob is None else f"--rule-prob {loading.rule_prob}"
    header = [f"learned by fastlbp learn (EM, {', '.join(sorted(set(result.methods)))} E-step) from "
              f"{len(models)} graph(s), {sum(map(len, labels))} labels: {result.iterations} E-steps"
              + (f" (EM from {result.starts} starts at once)" if result.starts > 1 else "") + ", "
              f"{'converged' if result.converged else 'NOT converged (raise --em-iters)'}",
              *([] if result.noise is None else [
                  f"sampled E-step: {result.effective_worlds:,.0f} effective worlds; Monte Carlo standard "
                  f"error of the probabilities at most {float(result.noise.max()):.2g}"]),
              f"Beta prior: {prior_strength:g} pseudo-counts centred on {centre}"
              + (f", per-rule priors of {len(priors)} rule(s) from --prior {prior}" if priors else "")]
    emit(format_rule_probs(result.lines(), header).rstrip("\n"), output)
    supported = int((result.clauses > 0).sum())
    wide = int(((result.clauses > 0) & (result.upper - result.lower > 0.1)).sum())
    note(f"{len(result.names)} rules ({supported} with clauses, {wide} of them poorly identified: 95% "
         f"interval wider than 0.1), {result.iterations} E-steps, {result.seconds:.2f} s, information "
         f"{result.information_seconds:.2f} s" + ("" if result.converged else "; not converged"),
         loading.quiet)
