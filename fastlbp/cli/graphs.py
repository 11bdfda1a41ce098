"""`fastlbp convert` and `fastlbp info`: derivation graphs between formats, and what a graph holds."""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fastlbp.cli.app import (
    DEFAULTS,
    emit,
    handles_errors,
    note,
    status,
)
from fastlbp.cli.loading import load_graph
from fastlbp.cli.options import (
    CompressOpt,
    CyclesOpt,
    GraphArg,
    LoadOptions,
    QuietOpt,
    graph_command,
    settings_from_options,
    settings_of,
)
from fastlbp.core.errors import InputError, check_path
from fastlbp.core.settings import Settings
from schedules.plan import STRATEGIES

if TYPE_CHECKING:
    from datalog.grounding import GroundOptions

# The Datalog front end and the loader are imported in the functions that read a graph, so that
# `fastlbp --help` and the other commands' start does not pay for them .


class ScheduleUnavailable(RuntimeError):
    """`--schedule` was given but this installation has no `schedules.describe`."""


# The formats a graph converts to: those of `datalog.io.FORMATS` with a writer (a program is no output).
# The names are written here, not read from that table: `fastlbp --help` imports no datalog (numpy);
# tests/test_cli_graphs.py holds the two equal.
GraphFormat = StrEnum("GraphFormat", {f: f for f in ("json", "npz", "bingo", "causal_fg")})


class InfoFormat(StrEnum):
    text = "text"
    json = "json"


def output_format(dst: str | Path) -> str:
    """The format a target's name says (`datalog.io.format_of_name`, the rule every command reads names by),
    when it is one a graph can be written in.

    Raises:
        InputError: any other name (`weird.txt`, `out`, a `.dl`): the known suffixes are named, and how to
            ask for a Bingo directory.
    """
    from datalog.io import FORMATS, format_of_name

    fmt = format_of_name(dst)
    writable = [f for f in FORMATS.values() if f.write_derivation or f.write_model]
    if fmt is not None and FORMATS[fmt] in writable:
        return fmt
    suffixes = [x for f in writable for x in f.suffixes]
    directory = next(f.name for f in writable if f.directory)
    raise InputError(str(dst), None, f"unknown output format: name a file ending in "
                     f"{', '.join(suffixes[:-1])} or {suffixes[-1]}, or a Bingo directory with a trailing / "
                     f"(out/) or --to {directory}; --to {'|'.join(f.name for f in writable)} also sets the "
                     "format of any other name")


def _lost(what: dict[str, int]) -> str:
    """`2 alarms, 1 label` of the nonzero counts (keys are plural; a count of 1 drops the last `s`)."""
    return ", ".join(f"{n:,} {k if n != 1 else k[:-1]}" for k, n in what.items() if n)


def _check_target(dst: Path, fmt: str, src: Path, force: bool) -> None:
    """Refuses a target that is the input, a file where a directory goes (or back), or a non-empty
    directory without --force."""
    if dst.exists() and src.exists() and dst.resolve() == src.resolve():
        raise InputError(str(dst), None, "is the input; converting would replace it")
    from datalog.io import FORMATS

    if FORMATS[fmt].directory:
        if dst.exists() and not dst.is_dir():
            raise InputError(str(dst), None, "exists and is not a directory (a Bingo graph is a directory; "
                             "name a .json file for derivation.json)")
        if dst.is_dir() and not force:
            entries = sorted(p.name for p in dst.iterdir())
            if entries:
                shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
                raise InputError(str(dst), None, f"is not empty ({len(entries):,} entries: {shown}); "
                                 "--force writes the graph's files into it (replacing fastlbp's and Bingo's "
                                 "files, keeping any others)")
    elif dst.is_dir():
        raise InputError(str(dst), None, f"is a directory; a {fmt} graph is a file")


def convert_graph(src: Path, dst: Path | str, *, src_format: str | None = None, dst_format: str | None = None,
                  settings: Settings | None = None, max_decompressed: int | None = None,
                  force: bool = False, parts: int = 1) -> list[str]:
    """Converts `src` to `dst`; returns messages for the user (what was written, warnings).

    `parts` > 1 writes derivation.npz as that many files read back in parallel
    (`datalog.npz.write_sharded`: `dst` names the first part, which names the others).

    Derivation graphs (json, npz, bingo) convert both ways, duplicates merged but
    otherwise unchanged (cycles kept; rule texts go to Bingo's rule_dict.txt).
    To causal_fg the graph goes through cycle elimination (`settings.cycles`)
    and (unless `settings.compress` is false) compression; alarms, labels,
    ground truth and rule texts have no place there, and a warning counts
    them. A factor graph does not convert back into a derivation graph.
    `max_decompressed` limits gzip input (see `fastlbp.io.loading.load`).

    The format is `dst_format`, else `output_format(dst)` (a name ending in
    `/` is a Bingo directory; an unknown suffix is an error). A Bingo target
    that is a non-empty directory is refused unless `force`.

    Raises:
        InputError: a malformed input, an unknown or refused target, or a name
            the output format cannot carry (Bingo's line-based files, a causal
            factor graph's whitespace-separated labels): the tuple is named
            and nothing is written.
    """
    from datalog import formats
    from datalog.io import FORMATS, read_derivation
    from fastlbp.io.loading import detect_format, load

    settings = settings or Settings()
    check_path(src)
    dfmt = dst_format or output_format(dst)
    dst = Path(dst)
    sfmt = src_format or detect_format(src)
    _check_target(dst, dfmt, src, force)
    source, target = FORMATS[sfmt], FORMATS[dfmt]
    if parts > 1 and dfmt != "npz":
        raise InputError(str(dst), None, f"--parts writes derivation.npz in parts, not {dfmt}")
    if source.grounded:
        raise InputError(str(src), None, f"is a Datalog program, not a graph: `fastlbp ground {src} --facts "
                         f"DIR -o {dst}` grounds it into one (rank, triage, simulate, check and info take "
                         f"it directly)")
    if source.read_derivation is None:  # a factor graph: only to another factor-graph format
        if target.write_model is None:
            raise InputError(str(src), None, "a factor graph cannot be converted back into a derivation "
                             "graph (json, npz, bingo): it no longer says which tuple each clause derives")
        target.write_model(load(src, settings, format=sfmt, max_decompressed=max_decompressed), dst)
        return [f"wrote {dst} ({dfmt})"]
    dg, where = read_derivation(src, sfmt, max_decompressed=max_decompressed)
    if target.write_derivation is None:
        model = formats.model_from_derivation(dg, where, compress=settings.compress, cycles=settings.cycles)
        target.write_model(model, dst)
        notes = [f"wrote {dst} ({dfmt}): {model.num_vars:,} variables, {model.graph.num_edges:,} edges"]
        annotations = getattr(dg, "annotations", None) or {}
        lost = _lost({"alarms": len(dg.alarms), "labels": len(dg.labels),
                      "ground-truth labels": len(dg.truth),
                      "rule texts": sum(bool(r.text) for r in dg.rules),
                      "source-location entries": len(annotations.get("locations") or {}),
                      "relation descriptions": len(annotations.get("relations") or {})})
        if lost:
            tail = ("; `fastlbp rank` on it ranks every variable (clause variables included), not the alarms"
                    if len(dg.alarms) else "")
            notes.append(f"warning: a causal factor graph holds only variables and factors: left out "
                         f"{lost}{tail}")
        return notes + [f"warning: {w}" for w in model.meta["warnings"]]
    dg, _, warnings = formats.clean(dg)
    if parts > 1:
        from datalog import npz

        written = npz.write_sharded(dg, dst, parts)
        more = f" and {len(written) - 1} more part(s) beside it ({written[1].name}, ...)"
    else:
        warnings += target.write_derivation(dg, dst)
        more = ""
    notes = [f"wrote {dst} ({dfmt}){more}: {dg.num_tuples:,} tuples, {dg.num_clauses:,} clauses, "
             f"{len(dg.alarms):,} alarms"]
    return notes + [f"warning: {w}" for w in warnings]


@handles_errors
def convert(
    src: Annotated[Path, typer.Argument(metavar="SRC", help="Input: a derivation.json file (.json or "
                                                            ".json.gz), a derivation.npz file, a Bingo "
                                                            "directory, or a causal "
                                                            "factor-graph file.", show_default=False)],
    dst: Annotated[str, typer.Argument(metavar="DST",
                                       help="Output: NAME.json or NAME.json.gz (derivation.json), NAME.npz "
                                            "(derivation.npz: numpy arrays, for large graphs), NAME.fg or "
                                            "NAME.causal_fg (libDAI), or a Bingo directory: a name ending in "
                                            "/ (or an existing directory, or --to bingo). Other names need "
                                            "--to.", show_default=False)],
    to: Annotated[GraphFormat | None, typer.Option("--to", help="Output format, instead of reading it from "
                                                               "DST's name.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Write a Bingo graph into a directory that is not "
                                                        "empty.")] = False,
    parts: Annotated[int, typer.Option("--parts", min=1, help="Write derivation.npz as this many files, read "
                                       "back in parallel: DST is the first part and names the others "
                                       "(NAME.partK-of-N.npz beside it).")] = 1,
    compress: CompressOpt = DEFAULTS.compress,
    cycles: CyclesOpt = DEFAULTS.cycles,
    quiet: QuietOpt = False,
) -> None:
    """Convert a graph between derivation.json, derivation.npz, a Bingo directory and libDAI's causal
    factor graph.

    derivation.json <-> derivation.npz <-> Bingo keeps the graph as it is (duplicate clauses are
    merged, with a warning; rule texts go to Bingo's rule_dict.txt). Writing a
    causal factor graph eliminates cycles and compresses chains first; that
    format has no alarms, labels, ground truth or rule texts, and a warning
    counts what is left out. A factor graph cannot become a derivation graph
    again. A name the output format cannot carry (a line break in a Bingo
    tuple, whitespace in a causal factor-graph label) is an error naming the
    tuple; nothing is written. The output format comes from DST's name: an
    unknown suffix is an error, and a Bingo directory is named with a trailing
    / or --to bingo; a non-empty directory needs --force.

    Examples:

      fastlbp convert bingo_dir/ graph.json

      fastlbp convert graph.json bingo_dir/

      fastlbp convert graph.json.gz graph.causal_fg --no-compress

      fastlbp convert big.json big.npz --parts 8
    """
    settings = settings_from_options(compress=compress, cycles=cycles)
    for line in convert_graph(src, dst, dst_format=to.value if to else None, settings=settings, force=force,
                              parts=parts):
        if line.startswith("warning:"):
            status(line)
        else:
            note(line, quiet)


def info_dict(graph: Path, schedule: str | None = None, settings: Settings | None = None,
              datalog: GroundOptions | None = None, *, no_cache: bool = True, progress=None) -> dict:
    """`describe` of the graph loaded with `settings` (`datalog`: a program's grounding options); with
    `schedule`, also `schedules.describe`."""
    from datalog.summary import describe

    model = load_graph(graph, settings or Settings(), no_cache=no_cache, progress=progress, datalog=datalog)
    out = describe(model)
    if schedule is not None:
        import schedules  # only for --schedule: info alone needs no schedule analysis

        try:
            describe_schedule = schedules.describe
        except AttributeError:
            raise ScheduleUnavailable("this fastlbp has no schedule analysis (schedules.describe is not "
                                      "available); run info without --schedule") from None
        from schedules.plan import make_plan

        # The run's plan on this machine's platform: it says which engine would run (fused, persistent).
        plan = make_plan(dataclasses.replace(settings or Settings(), schedule=schedule)).placed()
        out["schedule"] = describe_schedule(model, plan)
    return out


@handles_errors
@graph_command
def info(
    graph: GraphArg,
    format: Annotated[InfoFormat, typer.Option("--format", "-f", help="text for people, json for tools.")] = (
        InfoFormat.text),
    schedule: Annotated[str | None, typer.Option(
        "--schedule", "-s", help=f"Also analyse this update strategy ({', '.join(STRATEGIES)}, or a "
                                 "file): batches per iteration, batch sizes, analysis time.")] = None,
    device: Annotated[bool, typer.Option(
        "--device", help="Also start JAX and say which backend and device inference runs on (CPU or GPU, "
                         "its name).")] = False,
    *,
    loading: LoadOptions,
) -> None:
    """Show what a graph holds: tuples, clauses, rules, alarms, labels, network and factor-graph sizes.

    Also what loading did: clauses dropped by cycle elimination, tuples
    merged or pruned by compression, duplicates merged; and the largest
    fan-in and fan-out.

    Example: fastlbp info data/weblech.json --format json
    """
    try:
        data = info_dict(graph, schedule, settings_of(loading), loading.datalog(graph),
                         no_cache=loading.no_cache, progress=loading.progress())
    except ScheduleUnavailable as err:
        raise typer.BadParameter(str(err), param_hint="'--schedule'") from None
    from datalog.summary import to_text

    text = None
    if device:
        from fastlbp.core import runtime

        data["runtime"] = {**runtime.installed(), **runtime.devices()}
        text = runtime.device_text(data["runtime"])
    if format is InfoFormat.json:
        emit(json.dumps(data, indent=2, default=str))
    else:
        emit(to_text({k: v for k, v in data.items() if k != "runtime"}) + (f"\n{text}" if text else ""))
