"""The variable kernel: totals, marginals and the largest marginal change, one program per tile or chunk.

It sums each variable's incoming messages (gathered through the variable
side's slots, `layout.FusedLayout`) and its evidence into the totals the next
factor kernel reads, forms the marginal (as log-odds) and folds the largest change of any
marginal into the sweep's control cells (the convergence test). A variable
row wider than a tile is cut into chunks; the last of a row's chunks to
finish (an atomic count per row, `Control.done`) totals the row, so no second
kernel runs for wide variables.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from fastlbp.core import equations
from fastlbp.core.logspace import log_odds_change
from fastlbp.engines.fused.control import Control, report_change, sweep_control
from fastlbp.engines.fused.kernel_math import count_bits, var_totals
from fastlbp.engines.fused.layout import FusedLayout
from fastlbp.engines.fused.lowering import bound, quiet_triton_dialect_lookup
from fastlbp.engines.fused.tuning import NUM_WARPS


def _var_kernel(widths, tile, maxc, barrier, cls_ref, r0_ref, vs_ref, m_ref, ev_ref, first_ref, count_ref,
                lim_ref, par_ref, _tot, _p, _ctl, _dlt, _done, tot_ref, p_ref, ctl_ref, dlt_ref, done_ref,
                pf_ref, pp_ref, pn_ref):
    """Tiles: totals, marginals (in place), largest change. Chunks of wide rows: partial sums.

    The gather is written once, on the program's flat slots; the branches
    (one per row width) only sum rows and store them. The largest change and
    any undefined marginal reach the sweep's control cells by atomic max. A wide
    row's chunks count themselves done (`Control.done`); the last one sums the
    row's partials, so no second kernel runs for wide rows.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    pid = pl.program_id(0)
    par = par_ref[0]
    go, run, *_ = sweep_control(_ctl, _dlt, lim_ref, par)
    cls = cls_ref[pid]
    row0 = r0_ref[pid]
    vs = vs_ref[pl.ds(pid * tile, tile)]
    valid = vs >= 0
    m = m_ref[jnp.where(valid, vs, 0)]
    m = jnp.where(valid, m, jnp.zeros_like(m))
    fin, pos, neg = equations.split(m, jnp.int32)

    def tile_branch(w):
        r = tile // w

        def branch():
            rows = pl.ds(row0, r)
            f, c, lo = var_totals(jnp.sum(fin.reshape(r, w), axis=1),
                                 jnp.sum(pos.reshape(r, w), axis=1, dtype=jnp.int32),
                                 jnp.sum(neg.reshape(r, w), axis=1, dtype=jnp.int32), ev_ref[rows])
            d, bad = log_odds_change(lo, p_ref[rows])

            @pl.when(run)
            def _():
                two = 2 * (row0 + jax.lax.broadcasted_iota(jnp.int32, (r,), 0))
                tot_ref[two] = f
                tot_ref[two + 1] = count_bits(c, f.dtype)
                p_ref[rows] = lo
                report_change(plgpu, ctl_ref, dlt_ref, par, pid, go, jnp.max(d),
                              jnp.max(bad.astype(jnp.int32)))

        return branch

    def chunk_branch():
        pf_ref[pid] = jnp.sum(fin)
        pp_ref[pid] = jnp.sum(pos, dtype=jnp.int32)
        pn_ref[pid] = jnp.sum(neg, dtype=jnp.int32)
        # The partials are stored before the count goes up (a barrier, then a release);
        # the chunk that sees all the others done reads them (acquire, loads past L1).
        if barrier:  # the interpreter runs programs one after another, and has no barrier
            plgpu.debug_barrier()
        row = row0  # a wide row's chunks are its programs; wide rows are the first rows
        last = plgpu.atomic_add(done_ref, row, jnp.ones((), jnp.int32)) == count_ref[row] - 1

        @pl.when(last)
        def _():
            done_ref[row] = jnp.zeros((), jnp.int32)  # for the next sweep: every chunk has counted
            _wide_var_total(plgpu, maxc, row, first_ref, count_ref, pf_ref, pp_ref, pn_ref, ev_ref, p_ref,
                            tot_ref, ctl_ref, dlt_ref, par, go, run)

    branches = [tile_branch(w) for w in widths] + [chunk_branch]
    jax.lax.switch(jnp.minimum(cls, len(branches) - 1), branches)


def _wide_var_total(plgpu, maxc, row, first_ref, count_ref, pf_ref, pp_ref, pn_ref, ev_ref, p_ref, tot_ref,
                    ctl_ref, dlt_ref, par, go, run):
    """A wide variable's total and marginal from its chunks' partial sums (in place)."""
    from jax.experimental import pallas as pl

    lane = jax.lax.broadcasted_iota(jnp.int32, (maxc,), 0)
    mine = lane < count_ref[row]
    win = pl.ds(first_ref[row], maxc)

    def total(ref):
        x = plgpu.load(ref.at[win], volatile=True)  # written by other programs of this kernel
        return jnp.sum(jnp.where(mine, x, jnp.zeros_like(x)), dtype=x.dtype)

    f, c, lo = var_totals(total(pf_ref), total(pp_ref), total(pn_ref), ev_ref[row])
    d, bad = log_odds_change(lo, p_ref[row])

    @pl.when(run)
    def _():
        tot_ref[2 * row] = f
        tot_ref[2 * row + 1] = count_bits(c, f.dtype)
        p_ref[row] = lo
        report_change(plgpu, ctl_ref, dlt_ref, par, row, go, d, bad.astype(jnp.int32))


@functools.partial(jax.jit, static_argnames=("interpret", "num_warps"))
def var_pass(layout: FusedLayout, messages, evidence_k, totals, p, control: Control,
             interpret: bool = False, num_warps: int = NUM_WARPS):
    """Variable totals, marginals and the largest marginal change (in place).

    Args:
        layout: the graph's layout.
        messages: (S,) slot order.
        evidence_k: (Vk,) evidence log-odds by kernel variable.
        totals (2 Vk,), p (Vk,): the last totals (each variable's finite sum, then its counts
            of +inf and -inf messages, `pos + 4 neg`, each at most 2) and marginals as log-odds, in place.
        control: `Control` of this sweep; the pass runs if the sweep goes ahead or primes the loop.

    Returns:
        totals, p and the control after the pass.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    quiet_triton_dialect_lookup()
    side = layout.variables
    dt = messages.dtype
    nw = side.partials
    cp = plgpu.CompilerParams(num_warps=num_warps, num_stages=1)
    if control.done.shape[0] < max(side.wide_rows, 1):
        raise ValueError("control.done has fewer cells than the layout has wide variable rows")
    state = (totals, p, control.ctl, control.delta, control.done)
    shapes = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in state)
    operands = (side.prog_class, side.prog_row0, side.slots, messages, evidence_k, side.wide_first,
                side.wide_count, control.limits, control.parity, *state)
    first = len(operands) - len(state)
    out = pl.pallas_call(
        bound(_var_kernel, side.widths, side.tile, side.max_row_chunks, not interpret),
        grid=(side.num_programs,),
        out_shape=(*shapes, jax.ShapeDtypeStruct((nw,), dt), jax.ShapeDtypeStruct((nw,), jnp.int32),
                   jax.ShapeDtypeStruct((nw,), jnp.int32)),
        input_output_aliases={first + k: k for k in range(len(state))},
        interpret=interpret,
        compiler_params=cp,
    )(*operands)
    totals, p, ctl, delta, done = out[:5]
    return totals, p, dataclasses.replace(control, ctl=ctl, delta=delta, done=done)


__all__ = ["var_pass"]
