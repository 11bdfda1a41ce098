"""The two passes of bucket elimination over log-space tables, host and device (`program.Program`).

Tables hold log probabilities (float64, -inf for 0), so a product of many
tables is a sum and never underflows: weblech's buckets combine factors
whose products reach 1e-165 and below, and linear tables scaled only per
table can still round a whole bucket to 0. A host bucket's table is shifted
so its largest entry is 0 and the shift added to log P(evidence); a device
bucket's is not (logs do not overflow; skipping the shift saves the device a
pass over every table).

Forward (elimination, `order.BucketTree` order): bucket i's table B_i is the sum of
its input tables and the messages of its children, each read at its bucket
index's bits (axes are in the bucket's relative order); its message m_i =
logsumexp of B_i over the eliminated variable (bit 0: two neighbours) goes to
its parent. B_i and m_i are kept.

Backward (reverse order, the Hugin update of the bucket tree): a root's
belief is B_i; a child's is B_i + (logsumexp of its parent's belief over the
parent's other variables - m_i), in place of B_i. Where m_i is -inf, B_i is
-inf for both values of the eliminated variable, so the quotient 0/0 may be
anything and is taken as 0 (-inf). Every belief then has the same total mass
(the root's), so beliefs need no shift. The marginal of the eliminated
variable is its belief summed over the rest of the bucket, each value with
its own maximum first (a value of probability 1e-300 next to 1 keeps its
log). log P(evidence) = the host shifts + the constants + the logsumexp of
each root's marginal.

On a GPU, buckets under `HOST_BELOW` entries run in numpy on the host, with
gathers precomputed in the program (a device dispatch costs ten times a
3-variable bucket in numpy or more, and a binarised model is mostly such
buckets), and larger ones as the device kernels of `kernels`. On a CPU the
"device" is the same processor, so every bucket runs in numpy unless
`host_below` says otherwise (the tests run the device kernels on the CPU with
host_below=0).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp.engines.exact import kernels
from fastlbp.engines.exact.program import Program

# Entries from which a bucket runs on a GPU (2^14 = a 14-variable bucket, 128 KiB in float64).
HOST_BELOW = 2**14


def default_host_below() -> int:
    """`HOST_BELOW` on a GPU; on a CPU no bucket leaves numpy (the device is the same processor)."""
    return HOST_BELOW if jax.default_backend() == "gpu" else 2**62


@dataclasses.dataclass(frozen=True)
class Eliminated:
    """What the two passes give.

    Attributes:
        log_marginals: (n, 2) float64 log P(order[i] = 0 / 1), unnormalised (each row up to a constant).
        log_evidence: log of the sum of the tables' product (log P(labels) for a normalised model;
            -inf when the labels are impossible).
        device_buckets: buckets that ran on the device.
    """

    log_marginals: np.ndarray
    log_evidence: float
    device_buckets: int


class Arena:
    """The device arena and descriptor table, kept between runs so that their shapes (and so the
    compiled kernels) stay the same: they only grow, the arena by at most 25 % steps (2^k times 1, 1.25,
    1.5 or 1.75), the descriptor rows and the transfer sizes by powers of two. When the shape or the
    largest bucket grows, every kernel up to the largest bucket is compiled at once (`kernels.warm`):
    a later program with other bucket sizes compiles nothing."""

    def __init__(self, chunks: tuple[int, ...] = kernels.CHUNKS, warm: bool = True):
        self.chunks = tuple(chunks)
        self.warm = warm
        self.warmed = (0, 0, 0)  # (size, rows, largest bucket) the kernels were compiled for (`kernels.warm`)
        self.buffer = None
        self.size = 0
        self.rows = 0
        self.read = 0
        self.write = 0
        self._programs: dict[int, tuple[object, jax.Array]] = {}

    @staticmethod
    def size_class(n: int) -> int:
        k = max(int(n) - 1, 1).bit_length() - 1
        base = 1 << k
        for q in (4, 5, 6, 7, 8):
            if base * q // 4 >= n:
                return base * q // 4
        return 2 * base

    def reserve(self, program: Program) -> None:
        """Room for `program`: arena entries, descriptor rows and transfer sizes (a new buffer to grow)."""
        self.read = max(self.read, kernels.io_size(program.download))
        self.write = max(self.write, kernels.io_size(len(program.upload)))
        # At least 2^12 entries and 64 rows (32 KiB and 3 KiB): small graphs share one compiled shape.
        entries = max(program.device_size, 1 + self.read, program.upload_off + self.write, 2**12)
        if self.size < entries:
            self.size = self.size_class(entries)
            self._programs.clear()
        if self.buffer is None or self.buffer.shape[0] != self.size:
            self.buffer = jnp.zeros(self.size, jnp.float64)
        if len(program.rows) > self.rows:
            self.rows = max(64, 1 << (len(program.rows) - 1).bit_length())
            self._programs.clear()
        largest = 2 ** int(program.rows[:, 0].max())  # column 0: a row's table rank (a reduce row's parent)
        if self.warm and (self.warmed[:2] != (self.size, self.rows) or largest > self.warmed[2]):
            kernels.warm(self.size, self.rows, self.chunks, largest)
            self.warmed = (self.size, self.rows, largest)

    def descriptors(self, program: Program) -> tuple[jax.Array, ...]:
        """The program's rows on the device, the first program counter, its upload offset and the download
        offset (uploaded once per program and arena shape: each transfer costs a run a dispatch)."""
        hit = self._programs.get(id(program))
        if hit is not None and hit[0] is program:
            return hit[1]
        dtype = kernels.index_dtype(self.size)
        rows = np.zeros((self.rows, kernels.WIDTH), dtype)
        rows[:len(program.rows)] = program.rows
        dev = tuple(jnp.asarray(x) for x in (rows, np.array(0, dtype), np.array(program.upload_off, dtype),
                                             np.array(1, dtype)))
        if len(self._programs) >= 16:
            self._programs.pop(next(iter(self._programs)))
        self._programs[id(program)] = (program, dev)
        return dev


_KERNEL = {"forward": kernels.forward, "reduce": kernels.reduce, "belief": kernels.belief}


def _lse(x: np.ndarray, axis: int = 0, size: int | None = None) -> np.ndarray:
    """logsumexp over `axis`, each of the other entries with its own maximum first (up to 1,024 entries
    one `np.logaddexp.reduce`: one numpy call instead of eight, 4x faster at 2 x 8 entries and slower
    from about 2,000). `size`: the entries that decide between the two (default `x.size`; a batch of
    runs passes one run's, so that each run's result does not depend on the batch)."""
    if (x.size if size is None else size) <= 1024:
        return np.logaddexp.reduce(x, axis=axis)
    top = x.max(axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return np.squeeze(np.log(np.exp(x - top).sum(axis=axis, keepdims=True)) + top, axis=axis)


def _device(program: Program, arena: Arena, block: np.ndarray) -> np.ndarray:
    """Upload, the device's rows, download: the download region (host array)."""
    prog, pc, upload_off, download_off = arena.descriptors(program)
    buf, arena.buffer = arena.buffer, None  # donated: if a kernel fails, the next run makes a new one
    buf = kernels.write(buf, jnp.asarray(block), upload_off)
    luts = kernels.byte_tables()
    for kind, chunk, nchunks in program.calls:
        buf, pc = _KERNEL[kind](buf, prog, pc, luts, chunk=chunk, nchunks=nchunks)
    down = np.asarray(kernels.read(buf, download_off, size=arena.read))
    arena.buffer = buf
    return down


def run(program: Program, inputs: np.ndarray, arena: Arena | None) -> Eliminated:
    """Forward and backward passes of `program` on input log tables `inputs` (N,) (see the module doc).

    Args:
        program: the layout (`program.build`).
        inputs: the clamped log tables, concatenated in table order (`Program.src`).
        arena: the device arena (needed when the program has device buckets).
    """
    lm, log_z = run_many(program, np.asarray(inputs, np.float64)[None], arena)
    return Eliminated(lm[0], float(log_z[0]), program.device_buckets)


def run_many(program: Program, inputs: np.ndarray, arena: Arena | None) -> tuple[np.ndarray, np.ndarray]:
    """The passes of `run` for a batch of input tables at once: one numpy operation per group of host
    buckets (`program.ForwardGroup`, `BackwardGroup`) for every run of the batch.

    Learning's E-steps ask for the same graph at many rule probabilities (the information's central
    differences, the profile's points, EM from several starts): their tables differ in values only,
    and a host pass costs numpy's per-call overhead, not arithmetic, so a batch of 32 costs about what
    one run does.

    Args:
        program: the layout (`program.build`).
        inputs: (B, N) float64 the clamped log tables of each run.
        arena: the device arena (needed when the program has device buckets; those run one by one).

    Returns:
        ((B, n, 2) float64 log marginals, (B,) float64 log evidence): each run's `Eliminated` fields
        (-inf everywhere for a run whose evidence has probability 0).
    """
    inputs = np.asarray(inputs, np.float64)
    runs, n = inputs.shape[0], len(program.plan.order)
    if program.device_buckets and runs > 1:
        out = [run_many(program, inputs[k:k + 1], arena) for k in range(runs)]
        return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])
    # The runs are the last axis: a gather reads each entry's runs as one contiguous row (with the runs
    # first, a batch of 32 cost 16 single runs on the taint family; last, 5).
    ha = np.empty((program.host_size, runs))
    ha[0] = 0.0
    ha[1:1 + inputs.shape[1]] = inputs.T
    log_z = ha[program.constants].sum(axis=0)
    lm = np.empty((n, 2, runs))
    alive = np.isfinite(log_z)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for g in program.forward_groups if alive.any() else ():
            b = ha[g.gather].sum(axis=1) if g.gather.shape[1] > 1 else ha[g.gather[:, 0]]  # (G, e, B)
            top = b.max(axis=1)
            # Every entry of a bucket 0: so is P(evidence) (the run is dead; 0 keeps its arithmetic quiet).
            alive &= ~np.any(top == -np.inf, axis=0)
            top = np.where(top == -np.inf, 0.0, top)
            b -= top[:, None]
            log_z += top.sum(axis=0)
            e = g.entries
            ha[g.b_off[:, None] + np.arange(e)] = b
            ha[g.m_off[:, None] + np.arange(e // 2)] = np.logaddexp(b[:, 0::2], b[:, 1::2])
            if not alive.any():
                break
        if alive.any() and program.device_buckets:
            arena.reserve(program)
            block = np.zeros(arena.write)
            block[:len(program.upload)] = ha[program.upload, 0]
            down = _device(program, arena, block)
            lm[program.device, :, 0] = down[:2 * program.device_buckets].reshape(-1, 2)
            for h_off, d_off, entries in program.outbox:
                ha[h_off:h_off + entries, 0] = down[d_off:d_off + entries]
        for g in program.backward_groups if alive.any() else ():
            e = g.entries
            at = g.b_off[:, None] + np.arange(e)
            if g.sep.ndim == 3:  # the parent's belief summed over its other variables
                s = _lse(ha[g.sep], axis=1, size=g.sep[0].size)
            else:
                s = ha[g.sep]
            m = ha[g.m_off[:, None] + np.arange(e // 2)]
            b = ha[at].reshape(len(g.b_off), e // 2, 2, runs)
            b += np.where(m == -np.inf, -np.inf, s - m)[:, :, None]
            ha[at] = b.reshape(len(g.b_off), e, runs)
        if alive.any():
            for buckets, index in program.host_marginals:
                lm[buckets] = _lse(ha[index].reshape(len(buckets), -1, 2, runs), axis=1, size=index.size)
            roots = np.flatnonzero(program.plan.parent < 0)
            if len(roots):
                log_z += _lse(lm[roots], axis=1, size=2 * len(roots)).sum(axis=0)
    alive &= np.isfinite(log_z)
    lm = np.moveaxis(lm, 2, 0)
    lm[~alive] = -np.inf
    log_z[~alive] = -np.inf
    return np.ascontiguousarray(lm), log_z


__all__ = ["Eliminated", "HOST_BELOW", "Arena", "default_host_below", "run", "run_many"]
