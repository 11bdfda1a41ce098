"""What runs fastlbp: the installed distributions (without importing JAX) and JAX's backend and devices.

    installed()        # {"fastlbp": "0.1.0", "distribution": "fastlbp-rank", "jax": "0.x.y", ...}
    version_text()     # `fastlbp --version`: no JAX import (fastlbp.core.jax_setup says why)
    devices()          # {"backend": "gpu", "devices": [{"platform": "gpu", "kind": "NVIDIA H200"}], ...}
    device_text()      # one line: the backend and device that inference runs on (imports JAX)

JAX picks its backend when first used: a GPU when a CUDA plugin is installed
and finds a device, else the CPU. `installed` only lists the plugins; which
one runs is known after JAX starts (`devices`).
"""

from __future__ import annotations

from importlib import metadata

# The distribution on the package index (the import package and the command stay `fastlbp`; the index's
# `fastlbp` is an unrelated image-processing project). Older installs were named "fastlbp".
DISTRIBUTIONS = ("fastlbp-rank", "fastlbp")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed() -> dict:
    """{"fastlbp", "distribution", "jax", "jaxlib", "plugins": {name: version}} from package metadata.

    fastlbp's version is the source tree's (`fastlbp.core.version`) when no distribution is installed
    ("distribution" is then None).
    """
    dist = next((d for d in DISTRIBUTIONS if _version(d) is not None), None)
    if dist is None:
        from fastlbp.core.version import __version__ as version
    else:
        version = _version(dist)
    plugins = {}
    for d in metadata.distributions():
        name = (d.metadata["Name"] or "").lower()
        if name.startswith(("jax-cuda", "jax_cuda", "jax-rocm", "jax_rocm", "libtpu")):
            plugins[name] = d.version
    return {"fastlbp": version, "distribution": dist, "jax": _version("jax"), "jaxlib": _version("jaxlib"),
            "plugins": dict(sorted(plugins.items()))}


def version_text() -> str:
    """`fastlbp --version`: fastlbp's version, then JAX's and its accelerator plugins (two lines)."""
    info = installed()
    plugins = ", ".join(f"{k} {v}" for k, v in info["plugins"].items()) or "none (CPU only)"
    return (f"fastlbp {info['fastlbp']}\n"
            f"jax {info['jax'] or 'not installed'}, jaxlib {info['jaxlib'] or 'not installed'}; "
            f"accelerator plugins: {plugins} (`fastlbp info --device` names the device used)")


def devices() -> dict:
    """JAX's default backend and its devices (starts JAX: on a GPU, CUDA too).

    Returns:
        {"backend": "cpu" | "gpu" | "tpu", "devices": [{"platform", "kind", "id"}], "jax": version}.
    """
    import jax

    return {"backend": jax.default_backend(),
            "devices": [{"platform": d.platform, "kind": d.device_kind, "id": d.id} for d in jax.devices()],
            "jax": jax.__version__}


def device_text(info: dict | None = None) -> str:
    """One line: `JAX 0.x.y runs on gpu: 1 x NVIDIA H200`."""
    info = devices() if info is None else info
    kinds: dict[str, int] = {}
    for d in info["devices"]:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    shown = ", ".join(f"{n} x {k}" for k, n in kinds.items()) or "no device"
    return f"JAX {info['jax']} runs on {info['backend']}: {shown}"


__all__ = ["installed", "version_text", "devices", "device_text", "DISTRIBUTIONS"]
