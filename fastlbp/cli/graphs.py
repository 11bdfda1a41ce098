"""`fastlbp convert` and `fastlbp info`: derivation graphs between formats, and what a graph holds."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

import schedules
from datalog import causal_fg, formats
from datalog.summary import describe, to_text
from fastlbp.cli.app import (
    DEFAULTS,
    CompressOpt,
    CyclesOpt,
    GraphArg,
    emit,
    handles_errors,
    settings_from_options,
)
from fastlbp.errors import InputError, check_path
from fastlbp.loading import detect_format, load
from fastlbp.settings import Settings


class ScheduleUnavailable(RuntimeError):
    """`--schedule` was given but this installation has no `schedules.describe`."""


class GraphFormat(StrEnum):
    json = "json"
    bingo = "bingo"
    causal_fg = "causal_fg"


class InfoFormat(StrEnum):
    text = "text"
    json = "json"


def output_format(path: Path) -> GraphFormat:
    """The format a path names: `.json`/`.json.gz` -> json, `.fg`/`.causal_fg` -> causal_fg, else bingo."""
    name = path.name.lower()
    if name.endswith((".json", ".json.gz")):
        return GraphFormat.json
    if name.endswith((".fg", ".causal_fg")):
        return GraphFormat.causal_fg
    return GraphFormat.bingo


def convert_graph(src: Path, dst: Path, *, src_format: str | None = None, dst_format: str | None = None,
                  settings: Settings | None = None, max_decompressed: int | None = None) -> list[str]:
    """Converts `src` to `dst`; returns messages for the user (what was written, warnings).

    Derivation graphs (json, bingo) convert both ways, duplicates merged but
    otherwise unchanged (cycles kept). To causal_fg the graph goes through
    cycle elimination (`settings.cycles`) and (unless `settings.compress` is
    false) compression. A factor graph does not convert back into a
    derivation graph. `max_decompressed` limits gzip input (see `fastlbp.loading.load`).

    Raises:
        InputError: a malformed input, or a name the output format cannot
            carry (Bingo's line-based files, a causal factor graph's
            whitespace-separated labels): the tuple is named and nothing is written.
    """
    settings = settings or Settings()
    check_path(src)
    sfmt = src_format or detect_format(src)
    dfmt = dst_format or output_format(dst).value
    if sfmt == "causal_fg":
        if dfmt != "causal_fg":
            raise InputError(str(src), None, "a factor graph cannot be converted back into a derivation "
                             "graph (json, bingo): it no longer says which tuple each clause derives")
        causal_fg.save(load(src, settings, format="causal_fg", max_decompressed=max_decompressed), dst)
        return [f"wrote {dst} (causal_fg)"]
    dg, where = formats.read_derivation(src, sfmt, max_decompressed=max_decompressed)
    if dfmt == "causal_fg":
        model = formats.model_from_derivation(dg, where, compress=settings.compress, cycles=settings.cycles)
        causal_fg.save(model, dst)
        notes = [f"wrote {dst} (causal_fg): {model.num_vars:,} variables, "
                 f"{model.graph.num_edges:,} edges; alarms and labels are not part of this format"]
        return notes + [f"warning: {w}" for w in model.meta["warnings"]]
    dg, _, warnings = formats.clean(dg)
    if dfmt == "json":
        formats.save_json(dg, dst)
    elif dfmt == "bingo":
        if dst.exists() and not dst.is_dir():
            raise InputError(str(dst), None, "exists and is not a directory (a Bingo graph is a directory; "
                             "name a .json file for derivation.json)")
        warnings += formats.save_bingo(dg, dst)
    else:
        raise InputError(str(dst), None, f"unknown output format {dfmt!r}")
    notes = [f"wrote {dst} ({dfmt}): {dg.num_tuples:,} tuples, {dg.num_clauses:,} clauses, "
             f"{len(dg.alarms):,} alarms"]
    return notes + [f"warning: {w}" for w in warnings]


@handles_errors
def convert(
    src: Annotated[Path, typer.Argument(help="Input: a derivation.json file (.json or .json.gz), a Bingo "
                                             "directory, or a causal factor-graph file.",
                                        show_default=False)],
    dst: Annotated[Path, typer.Argument(help="Output: NAME.json or NAME.json.gz (derivation.json), "
                                             "NAME.fg or NAME.causal_fg (libDAI), anything else a "
                                             "Bingo directory.", show_default=False)],
    to: Annotated[GraphFormat | None, typer.Option("--to", help="Output format, instead of guessing it "
                                                               "from DST's name.")] = None,
    compress: CompressOpt = DEFAULTS.compress,
    cycles: CyclesOpt = DEFAULTS.cycles,
) -> None:
    """Convert a graph between derivation.json, a Bingo directory and libDAI's causal factor graph.

    derivation.json <-> Bingo keeps the graph as it is (duplicate clauses are
    merged, with a warning). Writing a causal factor graph eliminates cycles
    and compresses chains first. A factor graph cannot become a derivation
    graph again. A name the output format cannot carry (a line break in a
    Bingo tuple, whitespace in a causal factor-graph label) is an error
    naming the tuple; nothing is written.

    Examples:

      fastlbp convert bingo_dir/ graph.json

      fastlbp convert graph.json.gz graph.causal_fg --no-compress
    """
    settings = settings_from_options(compress=compress, cycles=cycles)
    for line in convert_graph(src, dst, dst_format=to.value if to else None, settings=settings):
        typer.echo(line, err=True)


def info_dict(graph: Path, schedule: str | None = None, settings: Settings | None = None) -> dict:
    """`describe` of the graph loaded with `settings`; with `schedule`, also `schedules.describe`."""
    model = load(graph, settings)
    out = describe(model)
    if schedule is not None:
        try:
            describe_schedule = schedules.describe
        except AttributeError:
            raise ScheduleUnavailable("this fastlbp has no schedule analysis (schedules.describe is not "
                                      "available); run info without --schedule") from None
        out["schedule"] = describe_schedule(model, schedule)
    return out


@handles_errors
def info(
    graph: GraphArg,
    format: Annotated[InfoFormat, typer.Option("--format", "-f", help="text for people, json for tools.")] = (
        InfoFormat.text),
    schedule: Annotated[str | None, typer.Option(
        "--schedule", "-s", help="Also analyse this update strategy (parall, seqfix, seqrnd, topo, or a "
                                 "file): batches per iteration, batch sizes, analysis time.")] = None,
    cycles: CyclesOpt = DEFAULTS.cycles,
) -> None:
    """Show what a graph holds: tuples, clauses, rules, alarms, labels, network and factor-graph sizes.

    Also what loading did: clauses dropped by cycle elimination, tuples
    merged or pruned by compression, duplicates merged; and the largest
    fan-in and fan-out.

    Example: fastlbp info data/weblech.json --format json
    """
    try:
        data = info_dict(graph, schedule, settings_from_options(cycles=cycles))
    except ScheduleUnavailable as err:
        raise typer.BadParameter(str(err), param_hint="'--schedule'") from None
    emit(json.dumps(data, indent=2, default=str) if format is InfoFormat.json else to_text(data))
