"""What a triage session stores about itself (its journal's meta), and the checks of what it stored.

A session stores the graph's fingerprint, its inference settings (JSON of
`Settings.inference()`) and, for a custom order, the order's text (meta
"order"; the schedule is stored as `CUSTOM_ORDER[:OPTIONS]`), so that a
resume needs nothing but the graph and the file, and repeats its rounds
exactly. A resume trusts none of it: `stored_settings` accepts only values
this module writes, and a stored schedule is never opened as a path (a
tampered one once had any readable file's first line echoed, and
`/dev/zero` read until the process held 5.5 GB).

Settings changed on a resume are "settings" events (`change_payload`: the
new inference settings and, for a custom order, its text); the loading
options the graph was read with (cycles, compress) are the meta "loading",
so that a resume reads the graph the same way (`stored_loading`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from pathlib import Path

from fastlbp.core.errors import InputError, SettingsError
from fastlbp.core.model import Model
from fastlbp.core.settings import CYCLE_MODES, PRECISIONS, Settings
from fastlbp.inference.methods import check_name
from fastlbp.triage.evidence import Learning, StartEvidence, stored_start
from fastlbp.triage.journal_format import JOURNAL_VERSION, PLAIN_VERSION, fingerprint, stored_json
from fastlbp.triage.journal_reading import Contents, classify, newer, read_file
from schedules.plan import STRATEGIES, make_plan, parse_spec

# The stored schedule of a session with a custom order: this name, then the spec's options
# (e.g. "custom-order:chunked"); the order's text is the meta entry "order".
CUSTOM_ORDER = "custom-order"
SHA256 = re.compile(r"[0-9a-f]{64}")


# The options every journal stores; "backend", "method" and the sampler's came later (a journal
# without them: the defaults).
REQUIRED = ("schedule", "precision", "tol", "max_iters", "damping")
# The numeric settings (from their declared types, so a new one needs no edit here).
NUMBERS = tuple(f.name for f in dataclasses.fields(Settings) if f.type in ("int", "float", int, float))


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
            compress) and the devices (where the numbers are computed, not what they are) are kept.
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
    check_name(kept.get("method", Settings().method))  # the method table sits above `Settings`
    return Settings(**{**inference, **kept, "cycles": settings.cycles, "compress": settings.compress,
                       "devices": settings.devices})


def _check_schedule(schedule: str, order: str | None) -> None:
    head, _, options = schedule.strip().partition(":")
    if head.lower() in STRATEGIES:
        try:
            parse_spec(schedule)  # a builtin name: touches no file
        except InputError as err:
            raise SettingsError(f"schedule {schedule!r}: {err.message}") from None
    elif head == CUSTOM_ORDER:
        if order is None:
            raise SettingsError(f"schedule {schedule!r} without its stored order")
    else:
        builtin = ", ".join(STRATEGIES)
        raise SettingsError(f"the schedule {schedule!r} is neither a strategy ({builtin}) "
                            f"nor a stored custom order, and a path read from a session file is never "
                            f"opened (sessions before journal version 2 stored a custom order's path: "
                            f"start over with --fresh)")


def custom_order(settings: Settings) -> tuple[Settings, str | None, str | None]:
    """The settings to store, the custom order's text and its file (None, None for a builtin strategy).

    Raises:
        InputError: an unknown schedule, an order file that cannot be read.
    """
    spec = make_plan(settings).schedule  # a custom order read once, here
    if spec.strategy != "file":
        return settings, None, None
    return (settings.replace(schedule=CUSTOM_ORDER + spec.options()), spec.order,
            str(Path(spec.path).resolve()))


def new_meta(model: Model, graph_path: str | None, settings: Settings, order: str | None,
             order_file: str | None, evidence: StartEvidence | None = None,
             learning: Learning | None = None) -> dict[str, str]:
    """A new session's meta; one with `evidence` or `learning` is journal version 4, else 3."""
    meta = {
        "version": str(JOURNAL_VERSION if evidence or learning else PLAIN_VERSION),
        "fingerprint": fingerprint(model),
        "graph": str(Path(graph_path).resolve()) if graph_path else str(model.source),
        "settings": json.dumps(settings.inference()), "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loading": json.dumps({"cycles": settings.cycles, "compress": settings.compress}),
    }
    if order is not None:
        meta["order"] = order
        meta["order_file"] = order_file or "?"
    if evidence:
        meta["evidence"] = evidence.to_json()
    if learning is not None:
        meta["learn"] = learning.to_json()
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
    try:
        stored_loading(meta)
    except SettingsError as err:
        return f"its loading options are not valid ({err})"
    try:
        stored_start(meta)
    except SettingsError as err:
        return str(err)
    return None


def stored_loading(meta: dict[str, str]) -> dict | None:
    """The loading options {"cycles": str, "compress": bool} a session's graph was read with.

    None for a journal written before they were stored (version 2 and earlier).

    Raises:
        SettingsError: present but not as written.
    """
    if "loading" not in meta:
        return None
    raw = stored_json(meta["loading"])
    if not isinstance(raw, dict) or set(raw) != {"cycles", "compress"}:
        raise SettingsError(f"expected cycles and compress, got {str(raw)[:80]!r}")
    if raw["cycles"] not in CYCLE_MODES or type(raw["compress"]) is not bool:
        raise SettingsError(f"cycles {raw['cycles']!r} or compress {raw['compress']!r} is not valid")
    return raw


def loading_of(path: str | Path) -> dict | None:
    """The loading options stored in the session at `path`, to read its graph the same way.

    None when there is no session, it stores none, or they are not valid (its
    resume then reports the damage).
    """
    if classify(path)[0] != "session":
        return None
    try:
        return stored_loading(read_file(path).meta)
    except SettingsError:
        return None


# Settings changed on a resume ("settings" events) --------------------------------------

def change_payload(settings: Settings, order: str | None, order_file: str | None) -> str:
    """The JSON a "settings" event stores: the inference settings, and a custom order's text."""
    payload: dict = {"settings": settings.inference()}
    if order is not None:
        payload["order"] = order
        payload["order_file"] = order_file or "?"
    return json.dumps(payload)


def read_change(payload: str, settings: Settings) -> tuple[Settings, str | None, str | None]:
    """The settings, custom order and order file of a "settings" event (`stored_settings` checks them).

    Raises:
        SettingsError: not JSON, or not as `change_payload` writes it.
    """
    raw = stored_json(payload)
    if not isinstance(raw, dict) or not isinstance(raw.get("settings"), dict):
        raise SettingsError("expected an object with the settings")
    order, order_file = raw.get("order"), raw.get("order_file")
    if order is not None and (type(order) is not str or type(order_file) is not str):
        raise SettingsError("its custom order is not text")
    try:
        stored = stored_settings(raw["settings"], settings, order=order)
    except TypeError as err:
        raise SettingsError(str(err)) from None
    if stored.schedule.strip().partition(":")[0] != CUSTOM_ORDER:
        order = order_file = None
    return stored, order, order_file


def check_changes(contents: Contents, settings: Settings) -> None:
    """Checks the "settings" events of `contents`; the first bad one ends `rows` and is its events problem."""
    for i, (seq, kind, alarm, *_) in enumerate(contents.rows):
        if kind != "settings":
            continue
        try:
            read_change(alarm, settings)
        except SettingsError as err:
            contents.rows = contents.rows[:i]
            contents.events_problem = f"event {seq} (settings): the settings are not valid ({err})"
            return


def settings_text(settings: Settings) -> str:
    """`schedule parall, precision f64, tol 1e-06, max_iters 1000, damping 0.0, method lbp, backend xla`."""
    s = settings.inference()
    return ", ".join(f"{k} {s[k]}" for k in ("schedule", "precision", "tol", "max_iters", "damping", "method",
                                               "backend"))


def describe_change(old: Settings, new: Settings) -> str:
    """`schedule parall -> seqfix, tol 1e-06 -> 0.001` (the inference settings that differ)."""
    a, b = old.inference(), new.inference()
    parts = [f"{k} {a[k]} -> {b[k]}" for k in a if a[k] != b[k]]
    return ", ".join(parts) or "no change"


def stored_meta(meta: dict[str, str], settings: Settings) -> tuple[Settings, str | None]:
    """The stored settings and custom order of a journal's meta.

    Raises:
        SettingsError: missing, not JSON, or not valid (`stored_settings`).
    """
    if "settings" not in meta:
        raise SettingsError("no settings")
    raw = stored_json(meta["settings"])
    order = meta.get("order")
    try:
        stored = stored_settings(raw, settings, order=order)
    except TypeError as err:
        raise SettingsError(str(err)) from None
    head = stored.schedule.strip().partition(":")[0]
    return stored, order if head == CUSTOM_ORDER else None
