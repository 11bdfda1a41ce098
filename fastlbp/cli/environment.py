"""What the command line reads from the environment, here only (the library reads no environment
variable; tests/test_cli.py holds it to that): where it keeps its files, the cache folder (JAX's compiled
loops, loaded models: $FASTLBP_CACHE) and the data folder (triage sessions, line-editing history:
$XDG_DATA_HOME), and --backend's default ($FASTLBP_BACKEND)."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from fastlbp.core.errors import SettingsError
from fastlbp.core.settings import BACKENDS

# The environment variable that sets --backend's default.
BACKEND_ENV = "FASTLBP_BACKEND"


def cache_folder() -> Path | None:
    """The cache folder (`compilation_cache`'s rules; not made here), or None when FASTLBP_CACHE is off.

    JAX's compiled loops live in it, loaded models under `models/` (`fastlbp.io.model_cache`).
    """
    raw = os.environ.get("FASTLBP_CACHE")
    if raw is not None and raw.strip().lower() in ("", "off", "0", "no", "none"):
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(raw).expanduser() if raw else base / "fastlbp" / "jax"


def data_folder() -> Path:
    """$XDG_DATA_HOME/fastlbp, else ~/.local/share/fastlbp (a relative $XDG_DATA_HOME is ignored, as the
    XDG base directory specification says)."""
    raw = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(raw) if raw and Path(raw).is_absolute() else Path.home() / ".local" / "share"
    return base / "fastlbp"


def backend_or_env(backend: str | None) -> str | None:
    """The `--backend` option if given, else `$FASTLBP_BACKEND` (stripped), else None (the default).

    Only commands that run inference call this: `info`, `convert` and
    `schedule` never read the variable, so a bad value cannot fail them.

    Raises:
        SettingsError: the variable names no backend.
    """
    if backend is not None:
        return backend.value if isinstance(backend, StrEnum) else backend
    raw = os.environ.get(BACKEND_ENV, "").strip()
    if not raw:
        return None
    if raw not in BACKENDS:
        raise SettingsError(f"${BACKEND_ENV}: {raw!r} is not a backend; choose one of {', '.join(BACKENDS)}")
    return raw
