"""The fused loop's control, kept on the device in cells the kernels read and write themselves.

A sweep runs no XLA kernel between its Pallas ones: the loop's control
(iterations, the largest marginal change, a conflict, whether to go on)
lives in small device arrays (`Control`); each program folds its largest
change in by atomic max (`report_change`), and the while loop tests the cells
once per trip of several sweeps (`loop.run_loop`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

# Loop control lives on the device, in cells written by the kernels themselves, so a
# sweep runs no XLA kernel between the Pallas ones. Sweeps alternate between two sets of
# cells (the parity, a (1,) operand): a sweep reads the last sweep's cells and writes its
# own, so no program reads a cell another program of the same kernel writes.
IT, BAD, PRIMED, MAX_ITERS = 0, 2, 4, 6  # ctl: (8,) int32; IT + parity etc.
# dlt: (2 * DELTA_LANES,) the largest change, DELTA_LANES cells per parity: program k folds its
# change into cell k % DELTA_LANES, so the atomics of thousands of programs do not queue on one.
DELTA_LANES = 32


def sweep_control(ctl_ref, dlt_ref, lim_ref, par):
    """(go, run, it, bad, cells) of the sweep of parity `par`, from the last sweep's cells.

    go: this sweep updates messages (primed, under max_iters, not converged, no
    conflict); run: its variable pass runs (go, or the priming sweep); cells: the
    last sweep's `DELTA_LANES` change cells (their max is the largest change).
    """
    from jax.experimental import pallas as pl

    prev = 1 - par
    it = ctl_ref[IT + prev]
    bad = ctl_ref[BAD + prev]
    primed = ctl_ref[PRIMED + prev] > 0
    cells = dlt_ref[pl.ds(prev * DELTA_LANES, DELTA_LANES)]
    # Whether some cell reaches tol is all a program needs: an int32 max over the lanes (one
    # warp instruction) where the float64 max took five rounds of shuffles, about 50
    # instructions in every warp of every program.
    above = jnp.max((cells >= lim_ref[0]).astype(jnp.int32)) > 0
    go = primed & (it < ctl_ref[MAX_ITERS]) & above & (bad == 0)
    return go, go | ~primed, it, bad, cells


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Control:
    """The loop's control cells, kept on the device and written by the kernels (`sweep_control`).

    Attributes:
        ctl: (8,) int32: iterations, conflict and primed flags, two cells each
            (one per sweep parity), then max_iters.
        delta: (2 * DELTA_LANES,) float: the largest marginal change, `DELTA_LANES` cells per parity.
        limits: (2,) float: tol, damping.
        parity: (1,) int32: the parity of the sweep that reads this.
        done: (max(wide variable rows, 1),) int32: chunks of each wide variable row done in
            this sweep (the last resets it to 0).
        factor_done: (2 * (max(wide factor rows, 1) + 1),) int32, per sweep parity: the chunks
            of each wide factor row whose partials are stored, then the chunks taken
            (`factor_kernel`).
    """

    ctl: jax.Array
    delta: jax.Array
    limits: jax.Array
    parity: jax.Array
    done: jax.Array
    factor_done: jax.Array

    @classmethod
    def start(cls, tol, max_iters, damping, dtype, parity: int = 1, wide_rows: int = 1,
              factor_wide_rows: int = 1) -> Control:
        """Cells before the first sweep: not primed, no iterations, change +inf."""
        ctl = jnp.zeros((8,), jnp.int32).at[MAX_ITERS].set(jnp.asarray(max_iters, jnp.int32))
        return cls(ctl=ctl, delta=jnp.full((2 * DELTA_LANES,), jnp.inf, dtype),
                   limits=jnp.stack([jnp.asarray(tol, dtype), jnp.asarray(damping, dtype)]),
                   parity=jnp.full((1,), parity, jnp.int32),
                   done=jnp.zeros((max(wide_rows, 1),), jnp.int32),
                   factor_done=jnp.zeros((2 * (max(factor_wide_rows, 1) + 1),), jnp.int32))


def last_delta(control: Control, parity: int):
    """() the largest marginal change of the sweep of `parity` (a max over its lanes)."""
    return jnp.max(control.delta[parity * DELTA_LANES:(parity + 1) * DELTA_LANES])


def report_change(plgpu, ctl_ref, dlt_ref, par, pid, go, delta, bad):
    """Folds a program's largest change (if the sweep goes ahead) and conflict into the sweep's cells."""
    from jax.experimental import pallas as pl

    @pl.when(go)
    def _():
        plgpu.atomic_max(dlt_ref, par * DELTA_LANES + pid % DELTA_LANES, delta)

    @pl.when(bad > 0)
    def _():
        plgpu.atomic_max(ctl_ref, BAD + par, bad)


__all__ = ["IT", "BAD", "PRIMED", "MAX_ITERS", "DELTA_LANES", "Control", "sweep_control", "last_delta",
           "report_change"]
