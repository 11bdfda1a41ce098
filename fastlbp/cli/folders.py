"""Where the command line keeps its files: the cache folder (JAX's compiled loops, loaded models) and the
data folder (triage sessions, line-editing history). Read from the environment here, by the CLI only."""

from __future__ import annotations

import os
from pathlib import Path


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
