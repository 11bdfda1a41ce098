"""`fastlbp rank`: alarms by P(alarm is true), most likely first, as a table, JSON, CSV or SARIF."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import (
    conflicts_located,
    degenerate_warning,
    emit,
    handles_errors,
    method_notes,
    note,
    output_target,
    status,
    summary,
    terminal_rows,
)
from fastlbp.cli.evidence import EvidenceOptions, gather
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

CI = "CI and filters"  # the --help panel of the options a CI job uses
FailOnOpt = Annotated[float | None, typer.Option(
    "--fail-on", min=0.0, max=1.0, metavar="P", rich_help_panel=CI,
    help="Exit with status 1 when an unlabelled alarm (of those the filters keep) has probability >= P; "
         "the output is written first. Exit status: 0 done, 1 an alarm passed --fail-on, 2 bad input or "
         "an error.")]
RelationOpt = Annotated[list[str] | None, typer.Option(
    "--relation", metavar="REL", rich_help_panel=CI,
    help="Only alarms of this relation (race keeps race(1,2)); repeat for several.")]
MinProbabilityOpt = Annotated[float | None, typer.Option(
    "--min-probability", min=0.0, max=1.0, metavar="P", rich_help_panel=CI,
    help="Only alarms with probability >= P.")]
BaselineOpt = Annotated[Path | None, typer.Option(
    "--baseline", metavar="OLD.sarif", rich_help_panel=CI,
    help="A SARIF log of an earlier run: each SARIF result gets its baselineState (new, unchanged, "
         "updated; the baseline's alarms that are gone are listed as absent), matched by fingerprint "
         "(relation and tuple name).")]
NewOnlyOpt = Annotated[bool, typer.Option(
    "--new-only", rich_help_panel=CI, help="Only alarms the --baseline does not have.")]
PrettyOpt = Annotated[bool, typer.Option(
    "--pretty", help="Indent a SARIF log for people to read (by default it is compact JSON: no spaces or "
                     "line breaks: data/ftp.json.gz's log is 11 MB so, 22 MB indented).")]
SourceRootOpt = Annotated[Path | None, typer.Option(
    "--source-root", metavar="DIR", rich_help_panel=CI,
    help="The analysed source tree's root: SARIF file URIs are relative to it (%SRCROOT%), the graph's "
         "path is written relative to it, and location files missing under it are reported on stderr. "
         "No absolute path is written.")]


def check_source_root(path: Path) -> None:
    """Raises `InputError` unless `--source-root` names an existing folder (a missing one, or a file,
    made every location "not under --source-root" or wrong, with no error; issue 41)."""
    from fastlbp.core.errors import InputError, check_path

    check_path(path)  # missing, a dangling link, a loop: named as every other path
    if not path.is_dir():
        raise InputError(str(path), None, "is not a folder: --source-root names the analysed source tree's "
                         "root")


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
    top: Annotated[int | None, typer.Option(
        "--top", "-n", min=0, show_default="all; a table on a terminal: as many as fit",
        help="Show only the N most likely alarms; 0: all. By default every alarm is written, except that a "
             "table written to a terminal shows as many rows as fit (its height less 8 lines) and says how "
             "many more there are.")] = None,
    labels: LabelsOpt = None,
    output: OutputOpt = None,
    csv_exact_names: CsvExactNamesOpt = False,
    fail_on: FailOnOpt = None,
    relation: RelationOpt = None,
    min_probability: MinProbabilityOpt = None,
    baseline: BaselineOpt = None,
    new_only: NewOnlyOpt = False,
    source_root: SourceRootOpt = None,
    pretty: PrettyOpt = False,
    *,
    evidence: EvidenceOptions,
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
    among probabilities too small to print is kept. A sampled probability is
    rounded at the first significant digit of its standard error (exact and
    LBP ones keep six decimals); JSON and CSV keep every digit. On a terminal
    the table shows the rows that fit and says how many more there are (--top
    0: all); to a pipe or a file it has every row. Alarms labelled in the graph
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

    CI: --fail-on P exits with status 1 when an unlabelled alarm kept by the
    filters (--relation, --min-probability, --new-only) has P(true) >= P,
    after writing the output; bad input or an error exits with 2, anything
    else with 0. SARIF results carry partialFingerprints (the alarm's relation
    and tuple name: the same in every run), codeFlows (the strongest
    derivation) and, with --baseline, their baselineState.

    Examples:

      fastlbp rank race.json --top 20

      fastlbp rank bingo_dir/ --schedule seqfix --format sarif -o alarms.sarif

      fastlbp rank new.json -f sarif -o now.sarif --baseline last.sarif --new-only --fail-on 0.8
    """
    if new_only and baseline is None:
        raise typer.BadParameter("needs --baseline OLD.sarif", param_hint="'--new-only'")
    if source_root is not None:
        check_source_root(source_root)
    progress = loading.progress()
    settings = settings_of(loading, inference)
    output = output_target(output, graph, labels)
    model = loading.load(graph, settings, progress)
    if not model.alarms:
        note(f"note: {graph} names no alarms; ranking every variable", loading.quiet)
    ev = gather(model, labels=labels, evidence=evidence, loading=loading, settings=settings,
                progress=progress)
    model, known, soft = ev.model, ev.labels, ev.soft
    base = None
    if baseline is not None:
        from fastlbp.io.sarif_ci import read_baseline

        base = read_baseline(baseline)
    # JAX, the session and the engines are imported here, not at the top (`fastlbp --help` and the commands
    # that run no inference never import JAX), and the backend (on a GPU, CUDA) starts on first use: both
    # timed as this stage, apart from loading and the session.
    progress("jax start")
    loading.start_jax(progress)
    import jax

    from fastlbp.inference import ranking
    from fastlbp.inference.methods import method_of
    from fastlbp.io import writers

    jax.devices()
    with conflicts_located(labels, model, graph):
        full = ranking.rank(model, known, settings=settings, progress=progress, soft=soft)
    progress("output")
    keep = None
    if new_only:
        from fastlbp.io.sarif_ci import fingerprint

        def keep(name):
            return fingerprint(name) not in base
    kept = ranking.select(full, relations=relation, min_probability=min_probability, keep=keep)
    result = ranking.select(kept, top=top) if top else kept
    if format is RankFormat.sarif:
        from fastlbp.io import sarif  # 0.5 s of imports: only for SARIF

        doc = sarif.to_sarif(result, model, source=str(graph), source_root=source_root, baseline=base,
                             absent=not new_only)
        emit(sarif.dumps(doc, pretty), output)
        missing, results = sarif.unlocated(doc)
        if missing:
            status(f"warning: {missing:,} of {results:,} SARIF results have no source location (file and "
                   f"line), and GitHub code scanning shows none of those. Give the graph \"locations\" "
                   f"(derivation.json), or ground the Datalog program with --locations REL (README: Code "
                   f"scanning).")
        if base is not None:
            counts = sarif.states(doc)
            note("baseline: " + ", ".join(f"{n} {state}" for state, n in counts.items()), loading.quiet)
        if source_root is not None:
            from fastlbp.io.sarif_ci import missing_files

            files = [loc["file"] for locs in (model.meta.get("locations") or {}).values() for loc in locs]
            missing = missing_files(files, source_root)
            if missing:
                status(f"warning: {len(missing)} location file(s) not under --source-root, e.g. "
                       f"{missing[0]}: code scanning will not show those results at a line")
    elif format is RankFormat.csv:
        emit(writers.to_csv(result, exact_names=csv_exact_names), output)
    elif format is RankFormat.json:
        emit(writers.to_json(result), output)
    else:  # a terminal shows what fits; a pipe or file gets every row
        rows = terminal_rows() if top is None and output is None else None
        emit(writers.to_table(result, rows=rows), output)
    loading.finish(progress, model)
    how = result.how or summary(result.iterations, result.converged, result.delta, result.seconds)
    method_notes(how, result.seconds, result.reason, result.flags, loading.quiet,
                 caveats=writers.caveats(result) if format is RankFormat.table else ())
    warning = None
    if method_of(result.method).unchecked:
        # Every unlabelled alarm, not only the `--top` shown: the top few of a good ranking may be equal.
        shown = [a.probability for a in result.alarms]
        if result.marginals is not None:
            unlabelled = [int(a) for a in ranking.alarm_vars(model) if int(a) not in known]
            shown = result.marginals[unlabelled]
        warning = degenerate_warning(shown, graph)
    if warning:
        status(warning)
    if fail_on is not None:
        failed = ranking.failing(kept, fail_on)
        if failed:
            shown = ", ".join(f"{a.alarm} ({a.probability:.3g})" for a in failed[:3])
            status(f"fail-on: {len(failed)} alarm(s) with P >= {fail_on:g}: {shown}"
                   f"{', ...' if len(failed) > 3 else ''}")
            raise typer.Exit(1)
