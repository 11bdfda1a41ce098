"""The two passes of bucket elimination over log-space tables.

Tables hold log probabilities (float64, -inf for 0), so a product of many
tables is a sum and never underflows: weblech's buckets combine factors
whose products reach 1e-165 and below, and linear tables scaled only per
table can still round a whole bucket to 0. Each bucket's table is shifted so
its largest entry is 0 (log 1) and the shift added to log P(evidence).

Forward (elimination, `order.Plan` order): bucket i's table B_i is the sum of
its input tables and the messages of its children, broadcast to its scope by
a reshape (axes are already in the bucket's relative order); its message
m_i = logsumexp of B_i over the last axis (the eliminated variable,
contiguous) goes to its parent. B_i and m_i are kept.

Backward (reverse order, the Hugin update of the bucket tree): a root's
belief is B_i; a child's is B_i + (logsumexp of its parent's belief over the
parent's other variables - m_i). Where m_i is -inf, B_i is -inf for both
values of the eliminated variable, so the quotient 0/0 may be anything and is
taken as 0 (-inf), no division by zero reaches a result. The marginal of the
eliminated variable is its belief summed over the rest of the bucket.

On a GPU, buckets under `HOST_BELOW` entries run in numpy on the host and
larger ones on the device, as jitted XLA kernels keyed by ranks only: a device
dispatch costs ~10-50 us while a 3-variable bucket takes ~1 us in numpy, and a
binarised model is mostly such buckets. On a CPU the "device" is the same
processor, so every bucket runs in numpy unless `host_below` says otherwise
(the tests run the device kernels on the CPU with host_below=0).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp.engines.exact.order import Plan

# Entries from which a bucket runs on a GPU (2^14 = a 14-variable bucket, 128 KiB in float64).
HOST_BELOW = 2**14


def default_host_below() -> int:
    """`HOST_BELOW` on a GPU; on a CPU no bucket leaves numpy (the device is the same processor, and
    each XLA kernel costs 0.1-0.4 s to compile on this 2-core machine against ~1 ms to run)."""
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


def _lse(xp, x, axis):
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0.0)
    return xp.log(xp.sum(xp.exp(x - m), axis=axis)) + xp.squeeze(m, axis=axis)


def _forward(xp, inputs, shapes, full):
    """Bucket table, its message and its shift: (full) (full[:-1]) () float64."""
    b = xp.zeros(full)
    for x, s in zip(inputs, shapes, strict=True):
        b = b + xp.reshape(x, s)
    top = xp.max(b)
    shift = xp.where(xp.isfinite(top), top, 0.0)
    b = b - shift
    # The eliminated variable is the last axis, of length 2: its sum-out is one logaddexp of two
    # contiguous halves (1.3x faster than a general logsumexp in numpy).
    return b, xp.logaddexp(b[..., 0], b[..., 1]), top


def _backward(xp, b, m, parent_belief, axes, sep_shape):
    """Belief of a child bucket (shifted to max 0) and the log marginal of its variable (2,)."""
    sep = _lse(xp, parent_belief, axes) if axes else parent_belief
    sep = xp.reshape(sep, sep_shape)
    ratio = xp.where(xp.isneginf(m), -xp.inf, sep - xp.where(xp.isneginf(m), 0.0, m))
    belief = b + ratio[..., None]
    top = xp.max(belief)
    belief = belief - xp.where(xp.isfinite(top), top, 0.0)
    return belief, _marginal(xp, belief)


def _marginal(xp, belief):
    axes = tuple(range(belief.ndim - 1))
    return _lse(xp, belief, axes) if axes else belief


# Device kernels take the axis pattern as a traced mask, so XLA compiles one per combination of ranks
# (bucket, input) or (child, parent), not one per pattern: the broadcast of an input into its bucket
# and the gather that makes a parent's other variables contiguous for the backward sum-out are index
# computations inside the kernel. A 12 x 12 grid compiled ~60 static-pattern kernels (14.6 s cold on
# this CPU, 0.03 s warm); keyed by ranks alone it compiles a handful.

def _extract(mask, r: int):
    """(2^r,) int32: for each entry of a rank-r table, its index in the sub-table over the axes in `mask`."""
    # `+ mask[-1]` (0 at run time, unknown to the compiler): an index computed from constants alone is
    # constant-folded by XLA at compile time, which took seconds to minutes per kernel for 2^20+ entries
    # (360 s cold for a 16 x 16 grid on the H200; `0 * x` would be simplified to a constant too).
    e = jnp.arange(2**r, dtype=jnp.int32) + mask[-1]
    idx = jnp.zeros_like(e)
    for j in range(r):
        idx = jnp.where(mask[j] > 0, idx * 2 + ((e >> (r - 1 - j)) & 1), idx)
    return idx


@jax.jit
def _add_device(b, x, mask):
    """b + x broadcast: x's axes are the axes of b where `mask` (traced, (r + 1,) int32, last 0) is 1."""
    idx = _extract(mask, b.ndim)
    return b + jnp.reshape(jnp.ravel(x)[idx], b.shape)


@jax.jit
def _finish_device(b):
    top = jnp.max(b)
    b = b - jnp.where(jnp.isfinite(top), top, 0.0)
    return b, jnp.logaddexp(b[..., 0], b[..., 1]), top


@jax.jit
def _down_device(b, m, parent_belief, mask):
    """`_backward` for a parent whose axes in the child's separator are `mask` (traced, as `_add_device`)."""
    rs, rp = b.ndim - 1, parent_belief.ndim
    ro = rp - rs
    zero = mask[-1]  # 0, not constant-folded (see `_extract`)
    s = jnp.arange(2**rs, dtype=jnp.int32)[:, None] + zero
    o = jnp.arange(2**ro, dtype=jnp.int32)[None, :] + zero
    idx = jnp.zeros((2**rs, 2**ro), jnp.int32)
    cs = co = jnp.int32(0)
    for j in range(rp):
        sb = (s >> jnp.maximum(rs - 1 - cs, 0)) & 1
        ob = (o >> jnp.maximum(ro - 1 - co, 0)) & 1
        idx = idx * 2 + jnp.where(mask[j] > 0, sb, ob)
        cs = cs + mask[j]
        co = co + 1 - mask[j]
    # The parent's other variables now form the contiguous last axis of the gathered table.
    sep = _lse(jnp, jnp.ravel(parent_belief)[idx], -1)
    return _backward(jnp, b, m, jnp.reshape(sep, b.shape[:-1]), (), b.shape[:-1])


_marginal_device = jax.jit(functools.partial(_marginal, jnp))


def _mask(scope, subset) -> np.ndarray:
    """(len(scope) + 1,) int32: 1 where scope's variable is in `subset`, and a final 0 (see `_extract`)."""
    return np.array([v in subset for v in scope] + [0], dtype=np.int32)


def eliminate(plan: Plan, tables: list[np.ndarray], scopes: list[tuple[int, ...]],
              host_below: int | None = None) -> Eliminated:
    """Forward and backward passes over the bucket tree.

    Args:
        plan: the bucket tree (`order.plan` of `scopes`).
        tables: log tables, (2,) * len(scopes[t]) float64, axes latest-eliminated first.
        scopes: each table's variables in that order.
        host_below: buckets with fewer entries run in numpy (0: every bucket on the device; None:
            `default_host_below()`).
    """
    if host_below is None:
        host_below = default_host_below()
    n = len(plan.order)
    log_z = 0.0
    for t in plan.constants:
        log_z += float(tables[t])
    incoming: list[list[tuple]] = [[(tables[t], scopes[t]) for t in plan.tables[i]] for i in range(n)]
    kept_b: list = [None] * n
    kept_m: list = [None] * n
    tops = []
    device = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(n):
            scope = plan.scopes[i]
            full = (2,) * len(scope)
            shapes = tuple(tuple(2 if v in s else 1 for v in scope) for _, s in incoming[i])
            on_device = 2 ** len(scope) >= host_below
            if on_device:
                device += 1
                b = jnp.zeros(full)
                for x, sc in incoming[i]:
                    b = _add_device(b, x, _mask(scope, sc))
                b, m, top = _finish_device(b)
            else:
                b, m, top = _forward(np, [np.asarray(x) for x, _ in incoming[i]], shapes, full)
            incoming[i] = None
            tops.append(top)
            kept_b[i], kept_m[i] = b, m
            if plan.parent[i] >= 0:
                incoming[int(plan.parent[i])].append((m, scope[:-1]))
        tops_host = np.array([float(t) for t in tops]) if tops else np.zeros(0)
        if not np.all(np.isfinite(tops_host)):
            return Eliminated(np.full((n, 2), -np.inf), -np.inf, device)
        roots = np.flatnonzero(plan.parent < 0)
        log_z += float(tops_host.sum()) + sum(float(np.asarray(kept_m[r])) for r in roots)

        children_left = np.bincount(plan.parent[plan.parent >= 0], minlength=n)
        belief: dict[int, object] = {}
        marginals: list = [None] * n
        for i in reversed(range(n)):
            p = int(plan.parent[i])
            scope = plan.scopes[i]
            on_device = 2 ** len(scope) >= host_below
            if p < 0:
                b = kept_b[i]
                belief[i] = b
                marginals[i] = _marginal_device(b) if on_device else _marginal(np, b)
            else:
                pscope = plan.scopes[p]
                sep = set(scope[:-1])
                axes = tuple(k for k, v in enumerate(pscope) if v not in sep)
                sep_shape = (2,) * (len(scope) - 1)
                if on_device or not isinstance(belief[p], np.ndarray):
                    mask = _mask(pscope, sep)
                    belief[i], marginals[i] = _down_device(kept_b[i], kept_m[i], belief[p], mask)
                else:
                    belief[i], marginals[i] = _backward(np, kept_b[i], kept_m[i], belief[p], axes, sep_shape)
                children_left[p] -= 1
                if children_left[p] == 0:
                    del belief[p]
            kept_b[i] = kept_m[i] = None
            if children_left[i] == 0:
                del belief[i]
    out = np.stack([np.asarray(m, np.float64) for m in marginals]) if n else np.zeros((0, 2))
    return Eliminated(out, log_z, device)


__all__ = ["Eliminated", "HOST_BELOW", "default_host_below", "eliminate"]
