"""What a triage session stores about itself (its journal's meta), and the checks of what it stored.

A session stores the graph's fingerprint, its inference settings (JSON of
`Settings.inference()`) and, for a custom order, the order's text (meta
"order"; the schedule is stored as `CUSTOM_ORDER[:OPTIONS]`), so that a
resume needs nothing but the graph and the file, and repeats its rounds
exactly. A resume trusts none of it: `stored_settings` accepts only values
this module writes, and a stored schedule is never opened as a path (a
tampered one once had any readable file's first line echoed, and
`/dev/zero` read until the process held 5.5 GB).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import schedules
from fastlbp.errors import InputError, SettingsError, read_text
from fastlbp.model import Model
from fastlbp.settings import PRECISIONS, Settings
from fastlbp.triage.journal import JOURNAL_VERSION, Contents, fingerprint, newer

# The stored schedule of a session with a custom order: this name, then the spec's options
# (e.g. "custom-order:chunked"); the order's text is the meta entry "order".
CUSTOM_ORDER = "custom-order"
SHA256 = re.compile(r"[0-9a-f]{64}")


# The options every journal stores; "backend", "method" and the sampler's came later (a journal
# without them: the defaults).
REQUIRED = ("schedule", "precision", "tol", "max_iters", "damping")
NUMBERS = ("tol", "max_iters", "damping", "samples", "seed", "min_accepted")


def stored_settings(stored: dict, settings: Settings, *, order: str | None = None) -> Settings:
    """The `Settings` a resumed session runs with: the journal's inference options over `settings`.

    Every stored value must be one this module writes: the options of
    `REQUIRED` present, numbers finite (not booleans, not strings), names
    strings, and the schedule a builtin strategy with valid options, or
    `CUSTOM_ORDER[:OPTIONS]` with the order's text in `order`. A stored
    schedule is never opened as a path.

    Args:
        stored: the journal's settings JSON, a `Settings.inference()` dict; one
            written before the backend was stored has no "backend" key.
        settings: the caller's settings; only their loading options (cycles,
            compress) are kept.
        order: the journal's stored custom order (meta "order"), if any.

    Raises:
        SettingsError: a stored value is missing or not valid.
        TypeError: `stored` is not a dict.
    """
    # Keys other than the inference options (a journal of an older Python caller could hold any
    # keyword it was given) never reached the session before either: they stay ignored.
    if not isinstance(stored, dict):
        raise TypeError(f"expected a JSON object, got {type(stored).__name__}")
    missing = [k for k in REQUIRED if k not in stored]
    if missing:
        raise SettingsError(f"no {', '.join(missing)}")
    inference = Settings().inference()
    kept = {k: v for k, v in stored.items() if k in inference}
    for key, value in kept.items():
        if key in NUMBERS:
            if type(value) not in (int, float) or not math.isfinite(value):
                raise SettingsError(f"{key} is {value!r}, not a finite number")
        elif type(value) is not str:
            raise SettingsError(f"{key} is {value!r}, not a string")
    if kept["precision"] not in PRECISIONS:  # before the schedule: its message is the clearer one
        raise SettingsError(f"precision must be one of {', '.join(PRECISIONS)}, got {kept['precision']!r}")
    _check_schedule(kept["schedule"], order)
    return Settings(**{**inference, **kept, "cycles": settings.cycles, "compress": settings.compress})


def _check_schedule(schedule: str, order: str | None) -> None:
    head, _, options = schedule.strip().partition(":")
    if head.lower() in schedules.BUILTIN:
        try:
            schedules.parse_spec(schedule)  # a builtin name: touches no file
        except InputError as err:
            raise SettingsError(f"schedule {schedule!r}: {err.message}") from None
    elif head == CUSTOM_ORDER:
        if order is None:
            raise SettingsError(f"schedule {schedule!r} without its stored order")
    else:
        builtin = ", ".join(schedules.BUILTIN)
        raise SettingsError(f"the schedule {schedule!r} is neither a strategy ({builtin}) "
                            f"nor a stored custom order, and a path read from a session file is never "
                            f"opened (sessions before journal version 2 stored a custom order's path: "
                            f"start over with --fresh)")


def custom_order(settings: Settings) -> tuple[Settings, str | None, str | None]:
    """The settings to store, the custom order's text and its file (None, None for a builtin strategy).

    Raises:
        InputError: an unknown schedule, an order file that cannot be read.
    """
    spec = schedules.parse_spec(settings.schedule)
    if spec.strategy != "file":
        return settings, None, None
    text = read_text(spec.path)
    options = settings.schedule.strip()[len(spec.path):]  # ":OPTION..." after the path
    return settings.replace(schedule=CUSTOM_ORDER + options), text, str(Path(spec.path).resolve())


def new_meta(model: Model, graph_path: str | None, settings: Settings, order: str | None,
              order_file: str | None) -> dict[str, str]:
    meta = {
        "version": str(JOURNAL_VERSION), "fingerprint": fingerprint(model),
        "graph": str(Path(graph_path).resolve()) if graph_path else str(model.source),
        "settings": json.dumps(settings.inference()), "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if order is not None:
        meta["order"] = order
        meta["order_file"] = order_file or "?"
    return meta


def check_identity(path: Path, contents: Contents, model: Model) -> None:
    """Refuses a journal of a newer version or of another graph (neither is damage to recover)."""
    if contents.version is not None and contents.version > JOURNAL_VERSION:
        raise newer(path, contents.version)
    stored = contents.meta.get("fingerprint")
    # One that is not a sha256 at all is damage (`meta_problem`), not another graph's.
    if stored is not None and SHA256.fullmatch(stored) and stored != fingerprint(model):
        raise InputError(str(path), None, f"this session was made for another graph "
                                          f"({contents.meta.get('graph', '?')})")


def meta_problem(meta: dict[str, str]) -> str | None:
    """The first meta entry a session needs that is missing or not as written, or None."""
    for key in ("fingerprint", "graph", "settings", "created"):
        if key not in meta:
            return f"its meta has no {key}"
    if not SHA256.fullmatch(meta["fingerprint"]):
        return f"its fingerprint {meta['fingerprint'][:80]!r} is not a sha256"
    return None


def stored_meta(meta: dict[str, str], settings: Settings) -> tuple[Settings, str | None]:
    """The stored settings and custom order of a journal's meta.

    Raises:
        SettingsError: missing, not JSON, or not valid (`stored_settings`).
    """
    if "settings" not in meta:
        raise SettingsError("no settings")
    try:
        raw = json.loads(meta["settings"])
    except ValueError as err:
        raise SettingsError(f"not JSON: {err}") from None
    order = meta.get("order")
    try:
        stored = stored_settings(raw, settings, order=order)
    except TypeError as err:
        raise SettingsError(str(err)) from None
    head = stored.schedule.strip().partition(":")[0]
    return stored, order if head == CUSTOM_ORDER else None
