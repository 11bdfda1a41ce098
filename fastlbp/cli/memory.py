"""Memory probes for --timings: the process's peak resident memory and the device's peak bytes."""

from __future__ import annotations

import sys


def peak_rss() -> int:
    """This process's peak resident memory in bytes (0 where the platform does not say)."""
    try:
        import resource
    except ImportError:
        return 0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux counts KiB


def device_peak_bytes() -> int | None:
    """Peak bytes in use on JAX's first device, where it reports them (GPUs; not the CPU)."""
    if "jax" not in sys.modules:  # a command that ran no inference: no device was used
        return None
    import jax

    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001  a backend without memory statistics
        return None
    return stats.get("peak_bytes_in_use")
