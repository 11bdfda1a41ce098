"""Loading: a graph file or directory into a `Model`, and a labels file into evidence.

    model = fastlbp.loading.load("data/weblech.json")
    model = fastlbp.loading.load("bingo_dir/", Settings(cycles="bingo"))
    labels = fastlbp.loading.read_labels("labels.txt", model)     # {variable: truth}

The formats and their detection live in `datalog.io` (derivation.json, Bingo
directories, libDAI causal factor graphs); the options of loading (`cycles`,
`compress`) travel in `Settings` with the inference options.
"""

from __future__ import annotations

import os
from pathlib import Path

from datalog import io as datalog_io
from fastlbp.errors import InputError, read_text, text_lines
from fastlbp.model import Model
from fastlbp.settings import Settings

detect_format = datalog_io.detect_format


def load(path: str | os.PathLike, settings: Settings | None = None, *, format: str | None = None,
         max_decompressed: int | None = None) -> Model:
    """Loads a graph file or directory into a `Model`.

    Args:
        path: a derivation.json file (`.json`, `.json.gz`), a Bingo directory
            or a libDAI causal factor-graph file.
        settings: its `cycles` and `compress` apply to derivation graphs
            (see `datalog.io.load`); default `Settings()`.
        format: a format of `datalog.io.FORMATS` ("json", "bingo",
            "causal_fg"); default `detect_format(path)`.
        max_decompressed: the most bytes a gzip-compressed file (or a pipe)
            may inflate to before loading stops with an `InputError` (a gzip
            bomb); None for max(256 MiB, 64 x the compressed size), see
            `fastlbp.errors.decompression_limit`. Uncompressed files have no limit.

    Raises:
        InputError: the path is missing ("no such file or directory"), a
            dangling link or a link loop, the format unknown, over the
            decompression limit, or the file malformed (naming file and line).
    """
    settings = settings or Settings()
    return datalog_io.load(path, format, cycles=settings.cycles, compress=settings.compress,
                           max_decompressed=max_decompressed)


def read_labels(path: str | os.PathLike, model: Model) -> dict[int, bool]:
    """Reads a labels file: lines `NAME true|false` (or 1|0); blank lines and `#` comments skipped.

    A name may repeat with the same truth; a leading byte order mark is dropped.

    Returns:
        {variable index: truth}.

    Raises:
        InputError: malformed line, an unknown name, or a name labelled both
            true and false (file and both lines named).
    """
    p = Path(path)
    text = read_text(p)
    labels: dict[int, bool] = {}
    first: dict[int, tuple[int, str]] = {}  # variable -> line and name of its first label
    for ln, line in enumerate(text_lines(text), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        name, _, value = s.rpartition(" ")
        name = name.strip()
        value = value.lower()
        if not name or value not in ("true", "false", "1", "0"):
            raise InputError(str(p), ln, f"expected 'NAME true|false', got {s!r}")
        if name not in model.index:
            raise InputError(str(p), ln, f"unknown variable {name!r}")
        v, truth = model.index[name], value in ("true", "1")
        if labels.get(v, truth) != truth:
            line0, name0 = first[v]
            same = "" if name0 == name else f" as {name0!r} (the same variable)"
            raise InputError(str(p), ln, f"{name!r} is labelled {'true' if truth else 'false'} here but "
                             f"{'true' if labels[v] else 'false'}{same} on line {line0}")
        labels[v] = truth
        first.setdefault(v, (ln, name))
    return labels


__all__ = ["load", "detect_format", "read_labels"]
