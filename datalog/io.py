"""Which file format a path holds, and loading it into a `Model`: the one table of formats.

    model = datalog.io.load("data/weblech.json")                  # format from the path
    model = datalog.io.load("bingo_dir/", cycles="bingo")          # Bingo's cycle criterion
    model = datalog.io.load("g.txt", "causal_fg")                  # format named

Formats (`FORMATS`, keyed by name: a `Format` says which names mean it, how
it is loaded, read and written; every loader takes the path and the keyword
options `cycles`, `compress` and `max_decompressed`):

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

import dataclasses
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from datalog import causal_fg, formats, grounding, npz
from datalog.derivation import DerivationGraph
from datalog.formats import Where
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


def _read_json(path: Path, *, max_decompressed: int | None = None) -> tuple[DerivationGraph, Where]:
    if path.is_dir():
        raise InputError(str(path), None, "is a directory, expected a derivation.json file")
    return formats.read_json(path, max_decompressed=max_decompressed)


def _save_json(dg: DerivationGraph, path: Path) -> list[str]:
    formats.save_json(dg, path)
    return []


def _save_npz(dg: DerivationGraph, path: Path) -> list[str]:
    npz.save(dg, path)
    return []


@dataclasses.dataclass(frozen=True)
class Format:
    """A graph format: a row of `FORMATS`.

    Attributes:
        name: the format's name (`--to NAME`, `load(path, NAME)`).
        what: the format for people, with its names ("derivation.json (.json, .json.gz)").
        load: `load(path, *, cycles, compress, max_decompressed) -> Model` (a `grounded` format also
            takes `datalog=`).
        suffixes: the ends of a file name that say this format (lower case).
        directory: the format is a directory (a directory, or a name ending in /, says it).
        read_derivation: `(path, *, max_decompressed) -> (DerivationGraph, Where)`, the raw graph, for
            a derivation-graph format (`fastlbp convert` reads through it); None otherwise.
        write_derivation: `(graph, path) -> warnings` writing a derivation graph; None: not one.
        write_model: `(model, path)` writing a factor graph; None: not one.
        grounded: a program: loading grounds it (`datalog=GroundOptions`).
    """

    name: str
    what: str
    load: Callable[..., Model]
    suffixes: tuple[str, ...] = ()
    directory: bool = False
    read_derivation: Callable[..., tuple[DerivationGraph, Where]] | None = None
    write_derivation: Callable[[DerivationGraph, Path], list[str]] | None = None
    write_model: Callable[[Model, Path], None] | None = None
    grounded: bool = False


# The one table of formats: how a name says the format (for reading, `detect_format`, and for writing,
# `fastlbp convert` and `fastlbp ground -o`), how each is read and written.
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("json", "derivation.json (.json, .json.gz)", formats.load_json, (".json", ".json.gz"),
           read_derivation=_read_json, write_derivation=_save_json),
    Format("npz", "derivation.npz (.npz)", _load_npz, (".npz",), read_derivation=npz.read,
           write_derivation=_save_npz),
    Format("bingo", "a Bingo directory", formats.load_bingo, directory=True,
           read_derivation=formats.read_bingo, write_derivation=formats.save_bingo),
    Format("causal_fg", "a libDAI causal factor graph (.fg, .causal_fg)", _load_causal_fg,
           (".fg", ".causal_fg"), write_model=causal_fg.save),
    Format("datalog", "a Datalog program (.dl)", _load_datalog, (".dl",), grounded=True),
)}


def known(formats: Iterable[Format] | None = None) -> str:
    """The formats for a message: "derivation.json (.json, .json.gz), ..., or a Datalog program (.dl)"."""
    whats = [f.what for f in (FORMATS.values() if formats is None else formats)]
    return ", ".join(whats[:-1]) + f" or {whats[-1]}" if len(whats) > 1 else "".join(whats)


def format_of_name(path: str | os.PathLike) -> str | None:
    """The format a name says (a `Format.suffixes`; the directory format for a directory or a name
    ending in /), else None."""
    raw = os.fspath(path)
    if raw.endswith(("/", os.sep)) or Path(raw).is_dir():
        return next((f.name for f in FORMATS.values() if f.directory), None)
    name = Path(raw).name.lower()
    return next((f.name for f in FORMATS.values() if name.endswith(f.suffixes)), None) if name else None


def detect_format(path: str | os.PathLike) -> str:
    """The format `path` holds, by its name (`format_of_name`).

    Raises:
        InputError: an existing file whose name says no known format (`fastlbp rank README.md`).
    """
    fmt = format_of_name(path)
    if fmt is not None:
        return fmt
    if Path(path).is_file():
        raise InputError(os.fspath(path), None, f"not a graph fastlbp reads (by its name): give {known()}")
    return "causal_fg"  # a missing path: the reader says what is wrong with it


def read_derivation(path: str | os.PathLike, format: str | None = None, *,
                    max_decompressed: int | None = None) -> tuple[DerivationGraph, Where]:
    """Reads a derivation graph (raw: duplicates and cycles kept) in `format` (default: the one its
    name says, else derivation.json).

    `max_decompressed` limits gzip-compressed files (see `fastlbp.core.errors.decompression_limit`).

    Raises:
        InputError: a malformed file, or a format that holds no derivation graph.
    """
    p = Path(path)
    check_path(p)
    fmt = FORMATS.get(format or format_of_name(p) or "json")
    if fmt is None or fmt.read_derivation is None:
        names = ", ".join(f.name for f in FORMATS.values() if f.read_derivation)
        raise InputError(str(p), None, f"{format or fmt.name!r} is not a derivation-graph format ({names})")
    return fmt.read_derivation(p, max_decompressed=max_decompressed)


def write_derivation(dg: DerivationGraph, out: str | os.PathLike, format: str | None = None) -> list[str]:
    """Writes a derivation graph in `format` (default: the one OUT's name says, else a Bingo
    directory); returns notes for the user ("wrote OUT (FORMAT)", warnings).

    Raises:
        InputError: OUT is a file where a directory should go, a name the format cannot carry
            (nothing written then), or a format that holds no derivation graph.
    """
    p = Path(out)
    name = format or format_of_name(p)
    fmt = FORMATS.get(name) if name else None
    if fmt is None or fmt.write_derivation is None:
        if format is not None:
            raise InputError(str(p), None, f"{format!r} holds no derivation graph")
        fmt = next(f for f in FORMATS.values() if f.directory)
    if fmt.directory and p.exists() and not p.is_dir():
        raise InputError(str(p), None, "exists and is not a directory (a Bingo graph is a directory; name a "
                         ".json file for derivation.json)")
    warnings = fmt.write_derivation(dg, p)
    title = fmt.what.split(" (")[0].removeprefix("a ")  # "derivation.json", "Bingo directory"
    return [f"wrote {p} ({title})"] + [f"warning: {w}" for w in warnings]


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
    spec = FORMATS.get(fmt)
    if spec is None:
        raise InputError(str(p), None, f"no loader for format {fmt!r} (known: {', '.join(FORMATS)})")
    if spec.grounded:
        return spec.load(p, cycles=cycles, compress=compress, max_decompressed=max_decompressed,
                         datalog=datalog)
    if datalog is not None:
        raise InputError(str(p), None, f"is a {fmt} graph, not a Datalog program (.dl): the grounding "
                         "options (facts, rule probabilities, alarms, priors) do not apply to it")
    return spec.load(p, cycles=cycles, compress=compress, max_decompressed=max_decompressed)
