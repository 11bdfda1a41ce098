"""The device sampler over several devices: batches of worlds spread over a mesh, tallies reduced.

    sampler = make_sampler(graph, names, devices=None)     # None: every visible device; 1: `Sampler`
    tally = sampler(labels, samples=10**6, seed=1)         # the same Tally, bit for bit, as one device's

A round of the device sampler (`sampling_program`) draws `batches` batches of W words from a first
word, and combines their weighted sums in batch order (`sampling_program.combine_sums`: each batch
on its own scale, its largest log weight). Here the same compiled batch (`Program.batch_function`)
runs on every device of a one-axis mesh (`jax.shard_map` over `mesh.AXIS`): at step j device d draws
global batch j N + d, so its Threefry counters (coin, digit pair, global word) are those one device
would use for that batch, and every world is the one a single device draws for the seed. The steps'
sums are then reduced so that the result is one device's to the last bit:

* **without labels** every weight is 1 and a batch's sums are popcounts (integers in float64, exact
  below 2^53): one `psum` per step, in any order;
* **with labels or a tilt** the weights are floating point: the N batches' sums are gathered
  (`all_gather`) and combined in batch order on every device, exactly as one device's loop combines
  them. A device past the last batch contributes the combination's identity (sums 0, scale -inf),
  which leaves every bit of the accumulator as it was.

The exchange of a labelled step is each device's row sums, 16 bytes a row (two float64), gathered
on every device; the step itself reads 4 bytes per body entry per word of its batch, so at W words a
batch reads about W / 4 times more than it sends per row (about 1,000 times at W = 4,096).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec

from fastlbp.core.graph import FactorGraph
from fastlbp.core.jax_setup import float64
from fastlbp.engines import mesh as meshes
from fastlbp.engines import sampling, sampling_program
from fastlbp.engines.sampling_bits import WORD_BITS
from fastlbp.engines.sampling_program import combine_sums

_FIELDS = [f.name for f in dataclasses.fields(sampling_program.RoundData)]
_SLOTS, _TILTED = _FIELDS.index("slots"), _FIELDS.index("tilted")


def _identity(rows: int):
    """The sums of no world: `combine_sums(acc, _identity(rows))` is `acc`, bit for bit."""
    return (jnp.zeros(rows), jnp.zeros(rows), jnp.zeros(()), jnp.zeros(()), jnp.full((), -np.inf),
            jnp.zeros((), jnp.int64))


def sharded_round(program: sampling_program.Program, mesh):
    """`program`'s round spread over `mesh`: the signature and the result of `Program.round_function`.

    (arrays, data, key, first_word, batches, valid) -> sums, every argument and result replicated
    on the mesh's devices.
    """
    batch = program.batch_function()
    width = int(program.batch_words)
    rows = int(program.plan.num_rows)
    n = int(mesh.size)
    axis = meshes.AXIS

    def per_device(arrays, data, key, first_word, batches, valid):
        me = lax.axis_index(axis)
        weighted = (data[_SLOTS] > 0) | data[_TILTED]

        def step(j, acc):
            b = j * n + me  # the global batch this device draws at this step

            def draw(_):
                first = first_word + (b * width).astype(jnp.uint32)
                words = first + jnp.arange(width, dtype=jnp.uint32)
                left = valid - b.astype(jnp.int64) * (width * WORD_BITS)
                return batch(arrays, data, key, words, jnp.clip(left, 0, width * WORD_BITS))

            mine = lax.cond(b < batches, draw, lambda _: _identity(rows), None)

            def in_order(_):
                gathered = lax.all_gather(mine, axis)
                out = acc
                for d in range(n):
                    out = combine_sums(out, tuple(x[d] for x in gathered))
                return out

            def counted(_):
                s1, s2, w1, w2, top, pos = mine
                total = (lax.psum(s1, axis), lax.psum(s2, axis), lax.psum(w1, axis), lax.psum(w2, axis),
                         lax.pmax(top, axis), lax.psum(pos, axis))
                return combine_sums(acc, total)

            return lax.cond(weighted, in_order, counted, None)

        steps = (batches + n - 1) // n
        return lax.fori_loop(0, steps, step, _identity(rows))

    return jax.shard_map(per_device, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(),
                         check_vma=False)


class ShardedSampler(sampling.Sampler):
    """A `sampling.Sampler` whose device rounds run on every device of a mesh (same worlds, same tallies).

    Args:
        graph, var_names, batch_words, **kwargs: as `sampling.Sampler`'s.
        devices: how many of JAX's visible devices (None: all; `mesh.devices_for`), or a list of them.
        samples_hint: worlds a run usually draws; each device's batches are sized for its share.

    Graphs small enough for the host path (`sampling.HOST_EDGES`) are drawn there, on one CPU:
    `devices_used` says 1 then.
    """

    @float64
    def __init__(self, graph: FactorGraph, var_names=None, batch_words: int | None = None, *,
                 devices: int | list | None = None, samples_hint: int = 100_000, **kwargs):
        chosen = list(devices) if isinstance(devices, list | tuple) else meshes.devices_for(devices)
        self.mesh = meshes.mesh_of(chosen)
        super().__init__(graph, var_names, batch_words, samples_hint=max(1, int(samples_hint) // len(chosen)),
                         **kwargs)

    @classmethod
    def from_sampler(cls, sampler: sampling.Sampler, devices: int | list | None = None) -> ShardedSampler:
        """`sampler`'s graph, plan, batches and capacity on `devices`, without planning again (the plan of
        a graph of 10^8 edges takes minutes); its device program is built and compiled at first use."""
        out = cls.__new__(cls)
        out.__dict__.update(sampler.__dict__)
        chosen = list(devices) if isinstance(devices, list | tuple) else meshes.devices_for(devices)
        out.mesh = meshes.mesh_of(chosen)
        if not out.host:
            out._program, out._exe, out._device_arrays = None, None, None
        out.compiles, out.compile_seconds, out.world_seconds = 0, 0.0, None
        out.unit_seconds = {}  # its own: the speeds of another mesh
        return out

    @property
    def devices_used(self) -> int:
        """Devices a device round runs on (1 on the host path)."""
        return 1 if self.host else int(self.mesh.size)

    def _put(self, tree):
        return jax.device_put(tree, meshes.replicated(self.mesh))

    def _round_function(self, program: sampling_program.Program):
        return sharded_round(program, self.mesh)


def make_sampler(graph: FactorGraph, var_names=None, *, devices: int | None = None, **kwargs):
    """A sampler on `devices` of JAX's visible devices (None: all): a `ShardedSampler` on two or more,
    else a one-device `sampling.Sampler` (kwargs: `sampling.Sampler`'s)."""
    chosen = meshes.devices_for(devices)
    if len(chosen) == 1:
        return sampling.Sampler(graph, var_names, **kwargs)
    return ShardedSampler(graph, var_names, devices=chosen, **kwargs)


def devices_used(sampler) -> int:
    """Devices `sampler`'s rounds run on: 1 for a one-device or host sampler."""
    return sampler.devices_used if isinstance(sampler, ShardedSampler) else 1


__all__ = ["ShardedSampler", "make_sampler", "sharded_round", "devices_used"]
