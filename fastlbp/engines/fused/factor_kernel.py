"""The factor kernel: new factor-to-variable messages, one Pallas program per tile or chunk.

The factor kernel reads each factor's messages and its variables' totals,
forms the variable-to-factor messages, the body terms and their exact
leave-one-out sums, and writes the new factor-to-variable messages in place
(slot order, `layout.FusedLayout`).

A factor row wider than a tile is cut into chunks, one program each (the
grid's first programs); a chunk writes partial aggregates. On the GPU the
chunks of a wide factor row then wait for each other (an atomic count per
row, `Control.factor_done`: chunk programs take their chunks by ticket as
they start, a row's chunks are consecutive, and no row has more than the GPU
holds at once), combine the row's partials (no subtraction) and write their
own messages. The interpreter runs programs one after another and cannot
wait, so there (and for a row of more chunks than the GPU has SMs) a second
kernel over the wide factors' chunks does that (`_wide_kernel`).

Compile time. The per-slot math is written once, on the program's flat
slots; only the row reductions branch on the row width (a `lax.switch`),
since Triton compiles every branch and the math in each of ten branches
made compiling several times slower.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from fastlbp.core import equations
from fastlbp.engines.fused.control import BAD, DELTA_LANES, IT, PRIMED, Control, sweep_control
from fastlbp.engines.fused.kernel_math import count_of, damped, new_messages, row_params, var_to_factor
from fastlbp.engines.fused.layout import PAIRED_WIDTHS, FusedLayout
from fastlbp.engines.fused.lowering import bound, quiet_triton_dialect_lookup
from fastlbp.engines.fused.tuning import NUM_WARPS


def _incoming(sv_ref, m_ref, tot_ref, sl):
    """A program's slots: their old messages, which are real, and the variable-to-factor messages."""
    sv = sv_ref[sl]
    m = m_ref[sl]
    valid = sv >= 0
    idx = jnp.where(valid, sv, 0)
    # A variable's finite sum and its counts share a 16-byte record: the second load hits
    # the sector the first brought in, halving the random traffic of this gather.
    two = 2 * idx
    return m, valid, var_to_factor(m, tot_ref[two], count_of(tot_ref[two + 1]))


def _chunk_inputs(sv_ref, m_ref, tot_ref, start, head, is_and, size):
    """A wide row's chunk: messages, validity, slot ids, head mask, n, terms."""
    from jax.experimental import pallas as pl

    sl = pl.ds(start, size)
    m, valid, n = _incoming(sv_ref, m_ref, tot_ref, sl)
    gidx = start + jax.lax.broadcasted_iota(jnp.int32, (size,), 0)
    is_head = gidx == head
    tf, zero = equations.body_term(n, is_and, valid & ~is_head)
    return sl, m, valid, gidx, is_head, n, tf, zero


def _factor_kernel(widths, size, wait, cls_ref, r0_ref, shift_ref, role_ref, sv_ref, m_ref, tot_ref,
                   and_ref, q_ref, r_ref, k_ref, first_ref, count_ref, lim_ref, par_ref, ctl_in,
                   dlt_in, fdone_in, out_ref, ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref, ctl_ref,
                   dlt_ref, fdone_ref):
    """Tiles: new messages. Chunks of wide rows: partial aggregates (index = chunk), then, on
    the GPU, their messages once all of the row's chunks have stored theirs.

    The per-slot math (variable-to-factor messages, body terms, the factor
    messages) is written once, on the flat `size` slots of the program; only
    the row reductions branch on the row width. The Triton compile time grows
    with the code in the branches, so they hold nothing but reductions.
    """
    from jax.experimental import pallas as pl

    pid = pl.program_id(0)
    par = par_ref[0]
    go, run, it, bad, cells = sweep_control(ctl_in, dlt_in, lim_ref, par)

    # Program 0 opens this sweep's control cells; every program reads the last sweep's.
    @pl.when(pid == 0)
    def _():
        ctl_ref[IT + par] = it + go.astype(jnp.int32)
        ctl_ref[BAD + par] = jnp.where(run, 0, bad)
        ctl_ref[PRIMED + par] = 1
        delta = jnp.max(cells)
        dlt_ref[pl.ds(par * DELTA_LANES, DELTA_LANES)] = jnp.full(
            (DELTA_LANES,), jnp.where(go, jnp.zeros_like(delta), delta), delta.dtype)

    # The work does not wait for the control cells: only the stores do (a load and a
    # branch before it would lengthen every program's chain of dependent loads).
    # The wide rows' chunks wait for each other here (`wait` = (a power of two >= any row's
    # chunks, the number of chunks), on the GPU), or leave their messages to `_wide_kernel`
    # (`wait` = (): the interpreter, or rows of more chunks than the GPU surely holds at once).
    spin, work = None, pid
    if wait:
        from jax.experimental.pallas import triton as plgpu

        maxc, chunks = wait
        cells = fdone_ref.shape[0] // 2  # per parity: one per wide row, then the chunk ticket
        # A chunk program takes its chunk by ticket, in the order programs start, so every
        # chunk before it is held by a program that runs: a chunk waits only for chunks that
        # run or will (its row's, no more than the GPU holds at once), whatever order the GPU
        # starts programs in.
        ticket = par * cells + cells - 1
        one = jnp.ones((), jnp.int32)
        work = jax.lax.cond(pid < chunks, lambda: plgpu.atomic_add(fdone_ref, ticket, one), lambda: pid)

        @pl.when(pid == 0)
        def _():
            fdone_ref[(1 - par) * cells + cells - 1] = jnp.zeros((), jnp.int32)  # the next sweep's tickets

        spin = (fdone_ref, first_ref, count_ref, par, maxc)
    _factor_tile(widths, size, work, go, cls_ref, r0_ref, shift_ref, role_ref, sv_ref, m_ref,
                 tot_ref, and_ref, (q_ref, r_ref, k_ref), lim_ref[1], out_ref,
                 ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref, spin)


def _factor_tile(widths, size, pid, go, cls_ref, r0_ref, shift_ref, role_ref, sv_ref, m_ref,
                 tot_ref, and_ref, param_refs, damping, out_ref, ps_ref, pz_ref, pmn_ref, pam_ref, po_ref,
                 plr_ref, spin):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    cls = cls_ref[pid]
    slot0 = pid * size
    shift = shift_ref[pid]  # log2 of the row width (of `size` for a chunk)
    is_chunk = cls >= len(widths)
    sl = pl.ds(slot0, size)
    m, valid, n = _incoming(sv_ref, m_ref, tot_ref, sl)
    lane = jax.lax.broadcasted_iota(jnp.int32, (size,), 0)
    row = r0_ref[pid] + jax.lax.shift_right_logical(lane, shift)
    # A row's second factor (if any) has role bit 1; its parameters follow the first's. A
    # factor's first slot is its head (role bit 2), in a wide row's first chunk.
    role = role_ref[sl].astype(jnp.int32)
    seg = role & 1
    place = 2 * row + seg
    is_and = and_ref[place] > 0
    params = row_params(param_refs, place)
    is_head = (role & 2) > 0
    body = valid & ~is_head
    # The head's log rho is formed on its own slot, sharing the body terms' exp and log1p,
    # and reaches the row's slots with the row sums.
    tf, zero, lr = equations.body_term_and_rho(n, is_head, body, is_and, *params[:4])
    izero = zero.astype(jnp.int32)

    def tile_branch(w):
        r = size // w

        if w in PAIRED_WIDTHS:
            second = seg.reshape(r, w) > 0

            def total(x):  # each factor's sum, on its slots
                zero = jnp.zeros_like(x)
                a = jnp.sum(jnp.where(second, zero, x), axis=1, keepdims=True, dtype=x.dtype)
                b = jnp.sum(jnp.where(second, x, zero), axis=1, keepdims=True, dtype=x.dtype)
                return jnp.where(second, b, a)
        else:
            def total(x):
                return jnp.broadcast_to(jnp.sum(x, axis=1, keepdims=True, dtype=x.dtype), (r, w))

        def branch():
            t2 = tf.reshape(r, w)
            S = total(t2)
            Z = total(izero.reshape(r, w))
            # The factor's sum is known here, so the dominant term (below half of it) is found
            # without a min/argmin.
            dominant = equations.is_dominant(t2, S)
            O = total(jnp.where(dominant, jnp.zeros_like(t2), t2))
            lrow = total(jnp.where(is_head.reshape(r, w), lr.reshape(r, w), jnp.zeros((r, w), lr.dtype)))
            flat = [x.reshape(size) for x in (S, Z, O, lrow)]
            return (*flat, dominant.astype(jnp.int32).reshape(size))

        return branch

    def chunk_branch():
        gidx = slot0 + lane
        cand = body & ~zero
        mn = jnp.min(jnp.where(cand, tf, jnp.ones_like(tf)))
        am = jnp.min(jnp.where(cand & (tf == mn), gidx, jnp.iinfo(jnp.int32).max))
        ps_ref[pid] = jnp.sum(tf)
        pz_ref[pid] = jnp.sum(izero, dtype=jnp.int32)
        pmn_ref[pid] = mn
        pam_ref[pid] = am
        po_ref[pid] = jnp.sum(jnp.where(gidx == am, jnp.zeros_like(tf), tf))
        plr_ref[pid] = jnp.sum(jnp.where(is_head, lr, jnp.zeros_like(lr)))
        if spin is None:
            # A chunk's messages are the wide kernel's; these are overwritten there.
            return tf, izero, tf, tf, izero
        # Every chunk of the row counts itself in (after a barrier, so all its partials are
        # stored; the atomic releases them) and waits until all have, then combines the row's
        # partials (loads past L1) and forms its own messages. Chunks go by ticket in the order
        # programs start (`_factor_kernel`): every chunk before this one is held by a running
        # program, and the row's others follow, fewer than the GPU holds at once, so the wait
        # ends. Cells alternate with the sweep's parity: this sweep resets the last sweep's,
        # whose chunks have all finished with the last kernel.
        fdone_ref, first_ref, count_ref, par, maxc = spin
        plgpu.debug_barrier()
        row = r0_ref[pid]
        cells = fdone_ref.shape[0] // 2  # per parity: one per wide row, then the chunk ticket
        cell = par * cells + row
        one = jnp.ones((), jnp.int32)
        n = count_ref[row]
        seen = plgpu.atomic_add(fdone_ref, cell, one) + one
        # Adding 0 is an atomic read (acquire): the others' partials are visible after it.
        jax.lax.while_loop(lambda k: k < n, lambda k: plgpu.atomic_add(fdone_ref, cell, 0 * one), seen)
        fdone_ref[(1 - par) * cells + row] = 0 * one
        S, Z, O, lrow, am = _combine_partials(
            lambda ref, win: plgpu.load(ref.at[win], volatile=True), first_ref[row], n, maxc,
            ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref)
        S, Z, O, lrow = (jnp.full((size,), x, x.dtype) for x in (S, Z, O, lrow))
        return S, Z, O, lrow, (gidx == am).astype(jnp.int32)

    branches = [tile_branch(w) for w in widths] + [chunk_branch]
    S, Z, O, lrow, dominant = jax.lax.switch(jnp.minimum(cls, len(branches) - 1), branches)
    new = new_messages(tf, zero, dominant > 0, S, Z, O, lrow, is_head, is_and, *params)

    # Messages are updated in place, and a wide row's chunk still holds the old ones its
    # wide kernel reads (unless the chunks formed their messages here).
    @pl.when(go & ~is_chunk if spin is None else go)
    def _():
        out_ref[sl] = damped(new, m, valid, damping)


def _combine_partials(load, first, count, maxc, ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref):
    """A wide factor row's sums from its chunks' partials (`_factor_tile`'s chunk branch).

    Args:
        load: `(ref, window) -> values`, a plain load or one past L1.
        first, count: the row's first chunk (program) and its number of chunks.
        maxc: static, a power of two >= count (the window read).

    Returns:
        (S, Z, O, log rho, the dominant slot): the row's sum of finite terms, its zero count,
        the sum without its smallest term, its head's log rho and that term's slot.
    """
    from jax.experimental import pallas as pl

    lane = jax.lax.broadcasted_iota(jnp.int32, (maxc,), 0)
    mine = lane < count
    win = pl.ds(first, maxc)

    def part(ref, neutral):
        x = load(ref, win)
        return jnp.where(mine, x, jnp.full_like(x, neutral))

    ps, pz, pmn, pam, po, plr = (part(ps_ref, 0), part(pz_ref, 0), part(pmn_ref, 1), part(pam_ref, 0),
                                 part(po_ref, 0), part(plr_ref, 0))
    mn = jnp.min(pmn)
    star = jnp.min(jnp.where(mine & (pmn == mn), lane, maxc))
    is_star = lane == star
    # The chunk holding the smallest term adds its sum without it, the others their
    # whole sums: no subtraction, so a tiny remainder stays exact.
    O = jnp.sum(jnp.where(is_star, po, ps))
    am = jnp.sum(jnp.where(is_star, pam, jnp.zeros_like(pam)))
    return jnp.sum(ps), jnp.sum(pz, dtype=jnp.int32), O, jnp.sum(plr), am


def _wide_kernel(chunk, maxc, r0_ref, head_ref, first_ref, count_ref, sv_ref, tot_ref,
                 and_ref, q_ref, r_ref, k_ref, lim_ref, par_ref, ctl_ref, dlt_ref,
                 ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref, m_ref, out_ref):
    """Messages of one chunk of a wide factor (in place), from its row's chunk partials.

    Every chunk of the row combines the row's partials itself (at most `maxc`
    of them, one masked window), so no other kernel runs between the two passes.
    """
    from jax.experimental import pallas as pl

    # program_id is read outside `pl.when`: the interpreter does not reach into its body.
    pid = pl.program_id(0)
    go = sweep_control(ctl_ref, dlt_ref, lim_ref, par_ref[0])[0]
    row = r0_ref[pid]
    is_and = and_ref[2 * row] > 0  # a wide row holds one factor
    S, Z, O, lrow, am = _combine_partials(lambda ref, win: ref[win], first_ref[row], count_ref[row], maxc,
                                          ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, plr_ref)
    sl, m, valid, gidx, is_head, n, tf, zero = _chunk_inputs(
        sv_ref, m_ref, tot_ref, pid * chunk, head_ref[pid], is_and, chunk)
    new = new_messages(tf, zero, gidx == am, S, Z, O, lrow, is_head, is_and,
                       *row_params((q_ref, r_ref, k_ref), 2 * row))

    @pl.when(go)
    def _():
        out_ref[sl] = damped(new, m, valid, lim_ref[1])


def chunks_wait(max_row_chunks: int, interpret: bool) -> bool:
    """Whether a wide factor row's chunks wait for each other in the factor kernel: on the
    GPU, when every row has no more chunks than the GPU has SMs (each SM holds at least one
    program, and chunks go by ticket as programs start, so all chunks of a row come to run).
    The interpreter runs programs one after another; there the wide kernel forms their
    messages."""
    if interpret:
        return False
    sms = getattr(jax.devices()[0], "core_count", 0) or 0
    return 0 < max_row_chunks <= sms


# The passes are jitted on their own so that JAX traces and lowers each kernel once per
# setting, not at every call site: the loop calls them five times, and lowering a Pallas
# kernel to Triton IR (in Python) took most of the loop's compile time.
@functools.partial(jax.jit, static_argnames=("interpret", "num_warps"))
def factor_pass(layout: FusedLayout, messages, totals, params, control: Control, interpret: bool = False,
                num_warps: int = NUM_WARPS):
    """New factor-to-variable messages (slot order, in place) from messages and variable totals.

    One kernel on the GPU; a second for the chunks of wide factor rows in the interpreter, or
    when a row has more chunks than the GPU has SMs (`chunks_wait`).

    Args:
        messages: (S,) slot order.
        totals: (2 Vk,) per kernel variable, the finite part of its total, then its packed
            counts (`var_pass`).
        params: (is_and (Rf,) int32, q, r, k1 - k0 (Rf,) floats; `loop.kernel_params`).
        control: `Control` of this sweep; the messages change only if the sweep goes ahead.

    Returns:
        (messages, control) after the pass.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    quiet_triton_dialect_lookup()
    side = layout.factors
    dt = messages.dtype
    nw = side.partials
    cp = plgpu.CompilerParams(num_warps=num_warps, num_stages=1)
    if control.factor_done.shape[0] < 2 * (max(side.wide_rows, 1) + 1):
        raise ValueError("control.factor_done has fewer cells than the layout has wide factor rows")
    wait = ((side.max_row_chunks, side.wide_chunks)
            if side.wide_chunks and chunks_wait(side.max_row_chunks, interpret) else ())
    kernel = bound(_factor_kernel, side.widths, side.tile, wait)
    tables = (side.prog_class, side.prog_row0, side.prog_shift, layout.slot_role)
    operands = (*tables, side.slots, messages, totals, *params, side.wide_first, side.wide_count,
                control.limits, control.parity, control.ctl, control.delta, control.factor_done)
    first = len(operands) - 4  # messages, then the control cells, are updated in place
    out, *partials, ctl, delta, factor_done = pl.pallas_call(
        kernel,
        grid=(side.num_programs,),
        out_shape=(jax.ShapeDtypeStruct(messages.shape, dt), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), jnp.int32), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), jnp.int32), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), dt), jax.ShapeDtypeStruct(control.ctl.shape, jnp.int32),
                   jax.ShapeDtypeStruct(control.delta.shape, dt),
                   jax.ShapeDtypeStruct(control.factor_done.shape, jnp.int32)),
        input_output_aliases={len(tables) + 1: 0, first + 1: 7, first + 2: 8, first + 3: 9},
        interpret=interpret,
        compiler_params=cp,
    )(*operands)
    control = dataclasses.replace(control, ctl=ctl, delta=delta, factor_done=factor_done)
    if not side.wide_chunks or wait:
        return out, control
    # The wide kernel's programs are the factor kernel's first ones (the chunks), so
    # the program tables are passed whole: no slicing kernels between the two passes.
    operands = (side.prog_row0, side.prog_head, side.wide_first, side.wide_count,
                side.slots, totals, *params, control.limits, control.parity, control.ctl, control.delta,
                *partials, out)
    out = pl.pallas_call(
        bound(_wide_kernel, side.chunk, side.max_row_chunks),
        grid=(side.wide_chunks,),
        out_shape=jax.ShapeDtypeStruct(messages.shape, dt),
        input_output_aliases={len(operands) - 1: 0},
        interpret=interpret,
        compiler_params=cp,
    )(*operands)
    return out, control


__all__ = ["factor_pass", "chunks_wait"]
