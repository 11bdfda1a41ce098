"""Which file format a path holds, and loading it into a `Model`: the one table of formats.

    model = datalog.io.load("data/weblech.json")                  # format from the path
    model = datalog.io.load("bingo_dir/", cycles="bingo")          # Bingo's cycle criterion
    model = datalog.io.load("g.txt", "causal_fg")                  # format named

Formats (`FORMATS`, keyed by name; every loader takes the path and the
keyword options `cycles`, `compress` and `max_decompressed`):

    json        derivation.json, optionally gzip-compressed   (`datalog.formats`)
    npz         derivation.npz: the same graph as numpy arrays (`datalog.npz`; for graphs of
                millions of clauses)
    bingo       a Bingo directory (named_cons_all.txt, ...)   (`datalog.formats`)
    causal_fg   libDAI's causal factor-graph text format      (`datalog.causal_fg`)
    datalog     a Datalog program (.dl), grounded with clingo (`datalog.grounding`;
                its options travel in `datalog=GroundOptions(...)`)

Derivation graphs (json, bingo) go through cycle elimination (`cycles`) and,
when `compress`, exact chain compression (`datalog.bayesnet.to_model`); a
causal factor graph is already a factor graph, so both options leave it as is.

Every text file may be gzip-compressed (detected by its magic bytes) and may
start with a UTF-8 byte order mark. Decompression stops with an `InputError`
past `max_decompressed` bytes; the default is
max(256 MiB, 64 x the compressed size) (`fastlbp.core.errors.decompression_limit`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from datalog import causal_fg, formats, grounding, npz
from fastlbp.core.errors import InputError, check_path
from fastlbp.core.model import Model


def _load_causal_fg(path: Path, *, cycles: str = "cycles", compress: bool = True,
                    max_decompressed: int | None = None) -> Model:
    """`causal_fg.load`; a factor graph has no derivation, so `cycles` and `compress` do not apply."""
    del cycles, compress
    return causal_fg.load(path, max_decompressed=max_decompressed)


def _load_datalog(path: Path, *, cycles: str = "cycles", compress: bool = True,
                  max_decompressed: int | None = None,
                  datalog: grounding.GroundOptions | None = None) -> Model:
    """`grounding.load_program`: the program grounded over its facts (`datalog` options), then a model."""
    return grounding.load_program(path, cycles=cycles, compress=compress, max_decompressed=max_decompressed,
                                  options=datalog)


def _load_npz(path: Path, *, cycles: str = "cycles", compress: bool = True,
              max_decompressed: int | None = None) -> Model:
    """derivation.npz (`datalog.npz.read`) into a model, as `formats.model_from_derivation` makes one."""
    return formats.model_from_derivation(*npz.read(path, max_decompressed=max_decompressed),
                                         compress=compress, cycles=cycles)


# name -> loader(path, *, cycles, compress, max_decompressed) -> Model ("datalog" also takes `datalog`).
FORMATS: dict[str, Callable[..., Model]] = {
    "json": formats.load_json,
    "npz": _load_npz,
    "bingo": formats.load_bingo,
    "causal_fg": _load_causal_fg,
    "datalog": _load_datalog,
}


# The one rule from a name to a format, for reading (`detect_format`) and for writing (`fastlbp convert`
# and `fastlbp ground -o`, `fastlbp.cli.graphs.output_format`); a directory (or a name ending in /) is
# a Bingo graph.
SUFFIXES = {".json": "json", ".json.gz": "json", ".npz": "npz", ".fg": "causal_fg", ".causal_fg": "causal_fg",
            ".dl": "datalog"}
KNOWN = ("derivation.json (.json, .json.gz), derivation.npz (.npz), a Bingo directory, a libDAI causal "
         "factor graph (.fg, .causal_fg) or a Datalog program (.dl)")


def format_of_name(path: str | os.PathLike) -> str | None:
    """The format a name says (`SUFFIXES`; "bingo" for a directory or a name ending in /), else None."""
    raw = os.fspath(path)
    if raw.endswith(("/", os.sep)) or Path(raw).is_dir():
        return "bingo"
    name = Path(raw).name.lower()
    return next((fmt for suffix, fmt in SUFFIXES.items() if name.endswith(suffix)), None)


def detect_format(path: str | os.PathLike) -> str:
    """The format `path` holds, by its name (`format_of_name`).

    Raises:
        InputError: an existing file whose name says no known format (`fastlbp rank README.md`).
    """
    fmt = format_of_name(path)
    if fmt is not None:
        return fmt
    if Path(path).is_file():
        raise InputError(os.fspath(path), None, f"not a graph fastlbp reads (by its name): give {KNOWN}")
    return "causal_fg"  # a missing path: the reader says what is wrong with it


def load(path: str | os.PathLike, format: str | None = None, *, cycles: str = "cycles",
         compress: bool = True, max_decompressed: int | None = None,
         datalog: grounding.GroundOptions | None = None) -> Model:
    """Loads a graph file or directory into a `Model`.

    Args:
        path: a derivation.json or derivation.npz file, a Bingo directory or
            a libDAI causal factor-graph file.
        format: a key of `FORMATS`; default `detect_format(path)`.
        cycles: for derivation graphs, "cycles" (Bingo's least-fixpoint
            criterion on the clauses that lie on a cycle) or "bingo" (on every
            clause, as Bingo does); see `datalog.cycles`.
        compress: for derivation graphs, exact chain compression.
        max_decompressed: the most bytes a gzip-compressed file (or a pipe)
            may yield; None for max(256 MiB, 64 x its compressed size).
        datalog: for a Datalog program, how to ground it (facts directory,
            rule probabilities, alarms, priors, a progress callback); None
            for `GroundOptions()`. Given with another format: an error.

    Returns:
        The model; for derivation graphs `meta["warnings"]` and
        `meta["report"]` say what was merged, dropped or removed.

    Raises:
        InputError: the path is missing (or a dangling link, or a link loop),
            the format unknown, a file too large once decompressed, or the
            file malformed (naming the file and the line or JSON location).
    """
    p = Path(path)
    check_path(p)
    fmt = format or detect_format(p)
    loader = FORMATS.get(fmt)
    if loader is None:
        raise InputError(str(p), None, f"no loader for format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt == "datalog":
        return loader(p, cycles=cycles, compress=compress, max_decompressed=max_decompressed, datalog=datalog)
    if datalog is not None:
        raise InputError(str(p), None, f"is a {fmt} graph, not a Datalog program (.dl): the grounding "
                         "options (facts, rule probabilities, alarms, priors) do not apply to it")
    return loader(p, cycles=cycles, compress=compress, max_decompressed=max_decompressed)
