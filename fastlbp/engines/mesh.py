"""The devices a sharded engine runs on: `Settings.devices` (`--devices N`) made into a one-axis mesh.

    devices = mesh.devices_for(settings.devices)      # None: every visible device of JAX's backend
    m = mesh.mesh_of(devices)                         # jax.sharding.Mesh with the one axis AXIS
    jax.device_put(tree, mesh.replicated(m))          # the same arrays on every device
    jax.device_put(stacked, mesh.split(m))            # (N, ...) arrays: row d on device d

The sharded sampler (`sharded_sampling`) spreads its batches of worlds over the axis and the sharded
PARALL engine (`sharded_parall`) its factors; both reduce across it with JAX's collectives
(`psum`, `pmax`, `all_gather` in `jax.shard_map`), which run over NCCL on GPUs.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fastlbp.core.errors import SettingsError

AXIS = "devices"


def devices_for(count: int | None = None) -> list:
    """The first `count` devices of JAX's default backend (None: all of them).

    Raises:
        SettingsError: `count` is below 1 or above the devices the backend has.
    """
    visible = jax.devices()
    if count is None:
        return list(visible)
    count = int(count)
    if not 1 <= count <= len(visible):
        raise SettingsError(f"devices must be between 1 and the {len(visible)} {jax.default_backend()} "
                            f"device(s) JAX sees, got {count}")
    return list(visible[:count])


def mesh_of(devices) -> Mesh:
    """A mesh of `devices` along the one axis `AXIS`."""
    return Mesh(np.asarray(devices, dtype=object), (AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    """The sharding of an array held whole on every device of `mesh`."""
    return NamedSharding(mesh, PartitionSpec())


def split(mesh: Mesh) -> NamedSharding:
    """The sharding of an (N, ...) array whose row d lives on device d of `mesh` (N = the mesh's size)."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


__all__ = ["AXIS", "devices_for", "mesh_of", "replicated", "split"]
