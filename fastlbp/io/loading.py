"""Loading: a graph file or directory into a `Model`, and a labels file into evidence.

    model = fastlbp.io.loading.load("data/weblech.json")
    model = fastlbp.io.loading.load("bingo_dir/", Settings(cycles="bingo"))
    labels = fastlbp.io.loading.read_labels("labels.txt", model)     # {variable: truth}
    model, labels = fastlbp.io.loading.load_labels("labels.txt", model)   # any tuple, model kept whole

The formats and their detection live in `datalog.io` (derivation.json, Bingo
directories, libDAI causal factor graphs, Datalog programs); the options of
loading (`cycles`, `compress`) travel in `Settings` with the inference options,
a Datalog program's grounding options in `datalog=GroundOptions(...)`:

    model = fastlbp.io.loading.load("taint.dl", datalog=GroundOptions(facts="facts/"))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from datalog import io as datalog_io
from datalog.grounding import GroundOptions
from fastlbp.core.errors import InputError, check_path
from fastlbp.core.model import UNDERIVABLE, Model, Resolved
from fastlbp.core.name_values import read_name_values
from fastlbp.core.settings import Settings

detect_format = datalog_io.detect_format


def load(path: str | os.PathLike, settings: Settings | None = None, *, format: str | None = None,
         max_decompressed: int | None = None, cache_dir: str | os.PathLike | None = None,
         progress: Callable[[str], None] | None = None, datalog: GroundOptions | None = None) -> Model:
    """Loads a graph file or directory into a `Model`, from the model cache when it holds it.

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
            `fastlbp.core.errors.decompression_limit`. Uncompressed files have no limit.
        cache_dir: a folder for the compiled-model cache (`fastlbp.io.model_cache`,
            entries under `cache_dir/models`): a later load of the same bytes
            with the same settings reads the model's arrays instead of parsing
            and building it again. None: no cache. A folder another user owns,
            or that group or others may write, is not used (one warning on
            stderr); a model is stored only when the input did not change
            while it was loaded (see `fastlbp.io.model_cache`).
        progress: called with the name of each stage as it starts: "checking the
            model cache" (hashing the input, reading an entry), then on a miss
            "loading" and "storing in the model cache"; never prints.
        datalog: for a Datalog program (`.dl`), how to ground it
            (`datalog.grounding.GroundOptions`: facts directory, rule
            probabilities, alarms, priors, and its own progress callback for
            grounding's steps); None for the defaults. A program is never
            taken from the model cache: its facts live in other files.

    Raises:
        InputError: the path is missing ("no such file or directory"), a
            dangling link or a link loop, the format unknown, over the
            decompression limit, or the file malformed (naming file and line).
    """
    settings = settings or Settings()

    def fresh() -> Model:
        return datalog_io.load(path, format, cycles=settings.cycles, compress=settings.compress,
                               max_decompressed=max_decompressed, datalog=datalog)

    spec = datalog_io.FORMATS.get(format or detect_format(path))
    if cache_dir is None or spec is None or spec.grounded:  # unknown: `fresh` says so
        if progress is not None:
            progress("loading")
        return fresh()
    from fastlbp.io import model_cache

    check_path(path)  # a missing path is an InputError, not a cache miss
    if progress is not None:
        progress("checking the model cache")
    fmt = format or detect_format(path)
    options = {"cycles": settings.cycles, "compress": settings.compress, "max_decompressed": max_decompressed}

    # A Bingo directory's key covers the files its loader reads (present or absent), not others beside them.
    names = datalog_io.formats.BINGO_FILES if fmt == "bingo" else None
    key = model_cache.lookup_key(path, fmt, options, names)
    # The loader reads the input again: the model is stored only if it read exactly the bytes `key` hashed.
    return model_cache.cached(cache_dir, key, fresh, model_type=Model, progress=progress, path=path)


_TRUTHS = {"true": True, "1": True, "false": False, "0": False}


def _truth(name: str, value: str) -> bool:
    """A label's truth: `true|false|1|0` in any case (ValueError otherwise)."""
    truth = _TRUTHS.get(value.lower())
    if truth is None:
        raise ValueError(value)
    return truth


def parse_labels(path: str | os.PathLike) -> list[tuple[int, str, bool]]:
    """The labels of a labels file as written: (line, name, truth), in file order.

    A line is `NAME TRUTH` (`fastlbp.core.name_values`): TRUTH is `true|false|1|0`
    (any case), separated from the name by a tab, a comma or spaces; a name may
    hold commas and spaces (`race(1, 2)\ttrue`, `race(1, 2), false`). Blank
    lines and `#` comments are skipped; a leading byte order mark is dropped.

    Raises:
        InputError: a line that is not `NAME TRUTH` (file and line named).
    """
    return read_name_values(path, _truth, "NAME true|false")


def _resolve(model: Model, path: str, line: int, name: str) -> Resolved:
    try:
        return model.resolve(name)
    except KeyError:
        raise InputError(path, line, f"unknown variable {name!r}: no tuple or variable of the graph has "
                         "that name") from None


def _collect(model: Model, path: str, rows: list[tuple[int, str, bool, Resolved]]) -> dict[int, bool]:
    """{variable: truth} of resolved labels; a variable labelled both ways is an error naming both lines."""
    labels: dict[int, bool] = {}
    first: dict[int, tuple[int, str]] = {}  # variable -> line and name of its first label
    for ln, name, truth, r in rows:
        v = r.var
        if labels.get(v, truth) != truth:
            line0, name0 = first[v]
            same = "" if name0 == name else f" as {name0!r} (the same variable)"
            raise InputError(path, ln, f"{name!r} is labelled {'true' if truth else 'false'} here but "
                             f"{'true' if labels[v] else 'false'}{same} on line {line0}")
        labels[v] = truth
        first.setdefault(v, (ln, name))
    return labels


def load_labels(path: str | os.PathLike, model: Model) -> tuple[Model, dict[int, bool]]:
    """Reads a labels file (`parse_labels`) whose names may be any tuple of the input graph.

    A labelled tuple that compression removed (pruned: no alarm depended on
    it; or a constant input fact) is kept by making the model again with it
    (`datalog.bayesnet.rebuild`), so the label acts exactly as the same label
    in the graph's own `"labels"`; a name with white space the graph's name
    lacks (`race(1, 2)`) finds it.

    Returns:
        (the model, {variable index of that model: truth}); the model is
        `model` itself when every labelled tuple is a variable of it.

    Raises:
        InputError: a malformed line, an unknown name, a tuple that cycle
            elimination removed (it never holds), or a tuple labelled both
            true and false (file and both lines named).
    """
    p = str(Path(path))
    rows = [(ln, name, truth, _resolve(model, p, ln, name)) for ln, name, truth in parse_labels(path)]
    for ln, name, _, r in rows:
        if r.how == UNDERIVABLE:
            raise InputError(p, ln, f"{name!r} cannot be labelled: {r.reason}")
    missing = sorted({r.tuple for *_, r in rows if r.var < 0})
    if missing:
        from datalog.bayesnet import rebuild

        model = rebuild(model, keep=missing)
        rows = [(ln, name, truth, model.resolve(r.name)) for ln, name, truth, r in rows]
    return model, _collect(model, p, rows)


def read_labels(path: str | os.PathLike, model: Model) -> dict[int, bool]:
    """Reads a labels file (`parse_labels`) into evidence on `model`'s variables.

    Any tuple of the input graph that is a variable of `model` may be named
    (as may a clause or `@input` variable); `load_labels` also takes the
    tuples compression removed, making the model again.

    Returns:
        {variable index: truth}.

    Raises:
        InputError: malformed line, an unknown name, a tuple that is not a
            variable of `model` (saying why), or a name labelled both true and
            false (file and both lines named).
    """
    p = str(Path(path))
    rows = [(ln, name, truth, _resolve(model, p, ln, name)) for ln, name, truth in parse_labels(path)]
    for ln, name, _, r in rows:
        if r.var < 0:
            hint = "" if r.how == UNDERIVABLE else (" (fastlbp.io.loading.load_labels keeps it, making the "
                                                    "model again)")
            raise InputError(p, ln, f"{name!r} cannot be labelled in this model: {r.reason}{hint}")
    return _collect(model, p, rows)


def keep_tuples(model: Model, names) -> Model:
    """`model` made again so that every tuple in `names` is a variable (`datalog.bayesnet.rebuild`).

    Returns `model` itself when they all are.

    Raises:
        KeyError: an unknown name.
        InputError: a tuple that cycle elimination removed (it never holds).
    """
    missing = []
    for name in names:
        r = model.resolve(name)
        if r.how == UNDERIVABLE:
            raise InputError(model.source, None, f"{r.name!r} cannot be kept: {r.reason}")
        if r.var < 0:
            missing.append(r.tuple)
    if not missing:
        return model
    from datalog.bayesnet import rebuild

    return rebuild(model, keep=missing)


__all__ = ["load", "detect_format", "read_labels", "load_labels", "parse_labels", "keep_tuples"]
