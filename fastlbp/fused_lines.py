"""Fused PARALL with one code path for every row width.

`fastlbp.fused` reduces a tile's rows with a `lax.switch` over the row widths
present (about ten branches per kernel, all compiled into one Triton kernel:
10-20 s of compile time). Here a tile of 512 slots is a (16, 32) block and a
row sum, broadcast back to the row's slots, is two small matrix products with
block-diagonal 0/1 matrices built from the tile's row width w (a power of two):

    rowsum(X) = B_lines @ (X @ B_lanes),

B_lanes (32 x 32) joins lanes in blocks of min(w, 32), B_lines (16 x 16)
joins lines in blocks of max(w / 32, 1). The products are exact sums of the
row's slots (the 0 entries add nothing; integer counts stay exact), and
float32 products are asked for in IEEE precision (no TF32). So each kernel
has two branches: a tile of rows, or a chunk of a wide row (`fused`'s chunk
code, unchanged).

The layout is `fused.build`'s, with one change: variable totals are written
per variable *slot* (contiguous stores, no scatter) and read at the first slot
of the variable's row, so the factor side indexes variable slots.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp import fused
from fastlbp.fused import (
    NUM_WARPS,
    FusedLayout,
    _body_terms,
    _change,
    _chunk_inputs,
    _finish,
    _messages,
    _totals,
    _var_to_factor,
)
from fastlbp.graph import FactorGraph
from fastlbp.logspace import signed

TILE = 512
LINES, LANES = 16, 32
HIGHEST = jax.lax.Precision.HIGHEST


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LinesLayout:
    """`fused.build`'s layout plus what the single-path kernels read.

    Attributes:
        base: the row layout (`fused.FusedLayout`, tile = chunk = 512).
        f_lw: (Pf,) int32 log2 of the row width of each factor program (-1: a wide row's chunk).
        v_lw: (Pv,) int32 the same for variable programs.
        f_vslot: (Sf,) int32 first variable slot of each message slot's variable (-1 padding).
        vslot_kvar: (Sv,) int32 kernel variable of each variable slot (-1 padding).
        v_first: (max(wide rows, 1),) int32 first variable slot of each wide variable row.
    """

    base: FusedLayout
    f_lw: jax.Array
    v_lw: jax.Array
    f_vslot: jax.Array
    vslot_kvar: jax.Array
    v_first: jax.Array


def _program_lw(side: fused.Side) -> np.ndarray:
    cls = np.asarray(side.prog_class)
    lw = np.array([int(w).bit_length() - 1 for w in side.widths] + [-1], np.int32)
    return lw[np.minimum(cls, len(side.widths))]


def build(graph: FactorGraph) -> LinesLayout:
    """The layout of `graph` (host side)."""
    base = fused.build(graph, TILE, TILE)
    slot0 = np.asarray(base.kvar_slot0, np.int64)
    sv = np.asarray(base.factors.slots, np.int64)
    f_vslot = np.where(sv >= 0, slot0[np.maximum(sv, 0)], -1)
    n_vslots = int(base.variables.slots.shape[0])
    vslot_kvar = np.searchsorted(slot0, np.arange(n_vslots), side="right") - 1
    vslot_kvar[np.asarray(base.variables.slots) < 0] = -1
    wide = base.variables.wide_rows
    v_first = slot0[:wide] if wide else np.zeros(1, np.int64)
    return LinesLayout(base=base, f_lw=jnp.asarray(_program_lw(base.factors)),
                       v_lw=jnp.asarray(_program_lw(base.variables)),
                       f_vslot=jnp.asarray(f_vslot, jnp.int32), vslot_kvar=jnp.asarray(vslot_kvar, jnp.int32),
                       v_first=jnp.asarray(v_first, jnp.int32))


# ---------------------------------------------------------------- row sums as matrix products

def _block_ones(n: int, shift, dtype):
    """(n, n) 0/1 matrix joining indices in aligned blocks of 2**shift."""
    i = jax.lax.broadcasted_iota(jnp.int32, (n, n), 0)
    j = jax.lax.broadcasted_iota(jnp.int32, (n, n), 1)
    s = jnp.full((n, n), shift, jnp.int32)
    return (jax.lax.shift_right_logical(i, s) == jax.lax.shift_right_logical(j, s)).astype(dtype)


def _row_summer(lw, dtype):
    """rowsum(X) for (16, 32) blocks of rows of width 2**lw (lw traced)."""
    lanes = _block_ones(LANES, jnp.minimum(lw, 5), dtype)
    lines = _block_ones(LINES, jnp.maximum(lw - 5, 0), dtype)

    def rowsum(x):
        y = jax.lax.dot(x, lanes, precision=HIGHEST)
        return jax.lax.dot(lines, y, precision=HIGHEST)

    return rowsum


def _tile_index(lw):
    """(16, 32) slot index in the tile, the column inside its row, and the row inside the tile."""
    flat = (jax.lax.broadcasted_iota(jnp.int32, (LINES, LANES), 0) * LANES
            + jax.lax.broadcasted_iota(jnp.int32, (LINES, LANES), 1))
    s = jnp.full((LINES, LANES), lw, jnp.int32)
    row = jax.lax.shift_right_logical(flat, s)
    return flat, flat - jax.lax.shift_left(row, s), row


# ---------------------------------------------------------------- factor side

def _factor_kernel(chunk, lw_ref, s0_ref, r0_ref, head_ref, sv_ref, m_ref, fin_ref, cnt_ref,
                   and_ref, q_ref, r_ref, q1_ref, r1_ref, k1_ref, k0_ref, scal_ref,
                   out_ref, ps_ref, pz_ref, pmn_ref, pam_ref, po_ref, phn_ref):
    """Tiles: new messages. Chunks of wide rows: partial aggregates (index = program)."""
    from jax.experimental import pallas as pl

    pid = pl.program_id(0)
    lw = lw_ref[pid]
    slot0 = s0_ref[pid]
    row0 = r0_ref[pid]
    damping = scal_ref[0]
    active = scal_ref[1] > 0
    param_refs = (q_ref, r_ref, q1_ref, r1_ref, k1_ref, k0_ref)

    def tile():
        sl = pl.ds(slot0, TILE)
        sv = sv_ref[sl].reshape(LINES, LANES)
        m = m_ref[sl].reshape(LINES, LANES)
        dt = m.dtype
        valid = sv >= 0
        idx = jnp.where(valid, sv, 0)
        _, col, row = _tile_index(lw)
        rows = row0 + row
        is_and = and_ref[rows] > 0
        params = [ref[rows] for ref in param_refs]
        is_head = col == 0
        body = valid & ~is_head
        n = _var_to_factor(m, fin_ref[idx], cnt_ref[idx])
        tf, zero = _body_terms(n, body, is_and)
        rowsum = _row_summer(lw, dt)
        zeros = jnp.zeros_like(tf)
        S = rowsum(tf)
        # Zero terms and the head's infinities as small integers in one product (exact).
        code = jnp.where(n == jnp.inf, 1, jnp.where(n == -jnp.inf, 2, jnp.where(jnp.isnan(n), 4, 0)))
        code = jnp.where(is_head, code, 0).astype(dt)
        packed = rowsum(zero.astype(dt) + 1024 * code).astype(jnp.int32)
        Z = packed & 1023
        head_code = jax.lax.shift_right_logical(packed, jnp.full_like(packed, 10))
        h_fin = rowsum(jnp.where(is_head & jnp.isfinite(n), n, zeros))
        nan = jnp.full_like(h_fin, jnp.nan)
        hn = jnp.where(head_code == 4, nan, signed(head_code == 1, head_code == 2, h_fin))
        dominant = body & ~zero & (tf < 0.5 * S)
        O = rowsum(jnp.where(dominant, zeros, tf))
        new = _messages(n, tf, zero, dominant, S, Z, O, hn, is_head, is_and, *params)
        out_ref[sl] = _finish(new, m, valid, damping, active).reshape(TILE)

    def wide_chunk():
        is_and = and_ref[row0] > 0
        _, _, valid, gidx, is_head, n, tf, zero = _chunk_inputs(
            sv_ref, m_ref, fin_ref, cnt_ref, slot0, head_ref[pid], is_and, chunk)
        cand = valid & ~is_head & ~zero
        mn = jnp.min(jnp.where(cand, tf, jnp.ones_like(tf)))
        am = jnp.min(jnp.where(cand & (tf == mn), gidx, jnp.iinfo(jnp.int32).max))
        ps_ref[pid] = jnp.sum(tf)
        pz_ref[pid] = jnp.sum(zero.astype(jnp.int32), dtype=jnp.int32)
        pmn_ref[pid] = mn
        pam_ref[pid] = am
        po_ref[pid] = jnp.sum(jnp.where(gidx == am, jnp.zeros_like(tf), tf))
        phn_ref[pid] = jnp.sum(jnp.where(is_head, n, jnp.zeros_like(n)))

    jax.lax.cond(lw >= 0, tile, wide_chunk)


def factor_pass(layout: LinesLayout, messages, fin, cnt, params, damping, active, interpret: bool = False,
                num_warps: int = NUM_WARPS):
    """`fused.factor_pass` with the single-path tile kernel; fin/cnt are per variable slot."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    side = layout.base.factors
    dt = messages.dtype
    scal = jnp.stack([jnp.asarray(damping, dt), jnp.asarray(active, dt)])
    nw = side.partials
    cp = plgpu.CompilerParams(num_warps=num_warps, num_stages=1)
    out, *partials = pl.pallas_call(
        functools.partial(_factor_kernel, side.chunk),
        grid=(side.num_programs,),
        out_shape=(jax.ShapeDtypeStruct(messages.shape, dt), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), jnp.int32), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), jnp.int32), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), dt)),
        interpret=interpret,
        compiler_params=cp,
    )(layout.f_lw, side.prog_slot0, side.prog_row0, side.prog_head, layout.f_vslot, messages, fin, cnt,
      *params, scal)
    if not side.wide_chunks:
        return out
    operands = (side.prog_slot0, side.prog_row0, side.prog_head, side.wide_first, side.wide_count,
                layout.f_vslot, fin, cnt, *params, scal, *partials, messages, out)
    return pl.pallas_call(
        functools.partial(fused._wide_kernel, side.chunk, side.max_row_chunks),
        grid=(side.wide_chunks,),
        out_shape=jax.ShapeDtypeStruct(messages.shape, dt),
        input_output_aliases={len(operands) - 1: 0},
        interpret=interpret,
        compiler_params=cp,
    )(*operands)


# ---------------------------------------------------------------- variable side

def _gather_parts(vs_ref, m_ref, sl):
    vs = vs_ref[sl]
    valid = vs >= 0
    m = m_ref[jnp.where(valid, vs, 0)]
    m = jnp.where(valid, m, jnp.zeros_like(m))
    return (valid, jnp.where(jnp.isfinite(m), m, jnp.zeros_like(m)), (m == jnp.inf).astype(jnp.int32),
            (m == -jnp.inf).astype(jnp.int32))


def _var_kernel(chunk, lw_ref, s0_ref, vs_ref, m_ref, ev_ref, pold_ref,
                fin_ref, cnt_ref, p_ref, delta_ref, bad_ref, pf_ref, pp_ref, pn_ref):
    """Tiles: totals and marginals per variable slot, largest change. Chunks: partial sums."""
    from jax.experimental import pallas as pl

    pid = pl.program_id(0)
    lw = lw_ref[pid]
    slot0 = s0_ref[pid]

    def tile():
        sl = pl.ds(slot0, TILE)
        valid, fin, pos, neg = (x.reshape(LINES, LANES) for x in _gather_parts(vs_ref, m_ref, sl))
        dt = fin.dtype
        rowsum = _row_summer(lw, dt)
        counts = rowsum((pos + 1024 * neg).astype(dt)).astype(jnp.int32)
        ncount = jax.lax.shift_right_logical(counts, jnp.full_like(counts, 10))
        f, c, p = _totals(rowsum(fin), counts & 1023, ncount, ev_ref[sl].reshape(LINES, LANES))
        fin_ref[sl] = f.reshape(TILE)
        cnt_ref[sl] = c.reshape(TILE)
        p_ref[sl] = p.reshape(TILE)
        d, bad = _change(p, pold_ref[sl].reshape(LINES, LANES))
        delta_ref[pid] = jnp.max(jnp.where(valid, d, jnp.zeros_like(d)))
        bad_ref[pid] = jnp.max((bad & valid).astype(jnp.int32))

    def wide_chunk():
        _, fin, pos, neg = _gather_parts(vs_ref, m_ref, pl.ds(slot0, chunk))
        pf_ref[pid] = jnp.sum(fin)
        pp_ref[pid] = jnp.sum(pos, dtype=jnp.int32)
        pn_ref[pid] = jnp.sum(neg, dtype=jnp.int32)
        delta_ref[pid] = jnp.zeros((), delta_ref.dtype)
        bad_ref[pid] = jnp.zeros((), jnp.int32)

    jax.lax.cond(lw >= 0, tile, wide_chunk)


def _var_wide_kernel(maxc, first_ref, count_ref, vfirst_ref, pf_ref, pp_ref, pn_ref, ev_ref, pold_ref,
                     _f, _c, _p, _d, _b, fin_ref, cnt_ref, p_ref, delta_ref, bad_ref):
    """A wide variable's total, at the first slot of its row (`fused._var_wide_kernel`)."""
    from jax.experimental import pallas as pl

    row = pl.program_id(0)
    lane = jax.lax.broadcasted_iota(jnp.int32, (maxc,), 0)
    mine = lane < count_ref[row]
    win = pl.ds(first_ref[row], maxc)
    at = vfirst_ref[row]

    def total(ref):
        x = ref[win]
        return jnp.sum(jnp.where(mine, x, jnp.zeros_like(x)), dtype=x.dtype)

    f, c, p = _totals(total(pf_ref), total(pp_ref), total(pn_ref), ev_ref[at])
    fin_ref[at] = f
    cnt_ref[at] = c
    p_ref[at] = p
    d, bad = _change(p, pold_ref[at])
    delta_ref[row] = d
    bad_ref[row] = bad.astype(jnp.int32)


def var_pass(layout: LinesLayout, messages, evidence_s, p_old, interpret: bool = False,
             num_warps: int = NUM_WARPS):
    """Totals (fin, packed counts) and marginals per variable slot, the largest change, a conflict flag.

    Args:
        messages: (Sf,) slot order.
        evidence_s: (Sv,) evidence log-odds per variable slot.
        p_old: (Sv,) previous marginals per variable slot.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    side = layout.base.variables
    dt = messages.dtype
    n_slots = side.slots.shape[0]
    nprog = side.num_programs
    nw = side.partials
    cp = plgpu.CompilerParams(num_warps=num_warps, num_stages=1)
    out = pl.pallas_call(
        functools.partial(_var_kernel, side.chunk),
        grid=(nprog,),
        out_shape=(jax.ShapeDtypeStruct((n_slots,), dt), jax.ShapeDtypeStruct((n_slots,), jnp.int32),
                   jax.ShapeDtypeStruct((n_slots,), dt), jax.ShapeDtypeStruct((nprog,), dt),
                   jax.ShapeDtypeStruct((nprog,), jnp.int32), jax.ShapeDtypeStruct((nw,), dt),
                   jax.ShapeDtypeStruct((nw,), jnp.int32), jax.ShapeDtypeStruct((nw,), jnp.int32)),
        interpret=interpret,
        compiler_params=cp,
    )(layout.v_lw, side.prog_slot0, side.slots, messages, evidence_s, p_old)
    fin, cnt, p, delta, bad = out[:5]
    if side.wide_chunks:
        operands = (side.wide_first, side.wide_count, layout.v_first, *out[5:], evidence_s, p_old,
                    fin, cnt, p, delta, bad)
        first = len(operands) - 5
        fin, cnt, p, delta, bad = pl.pallas_call(
            functools.partial(_var_wide_kernel, side.max_row_chunks),
            grid=(side.wide_rows,),
            out_shape=tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (fin, cnt, p, delta, bad)),
            input_output_aliases={first + k: k for k in range(5)},
            interpret=interpret,
            compiler_params=cp,
        )(*operands)
    return fin, cnt, p, jnp.max(delta, initial=0.0), jnp.any(bad > 0)


# ---------------------------------------------------------------- the loop

def run_loop(layout: LinesLayout, graph: FactorGraph, messages, evidence, tol, max_iters, damping,
             unroll: int = 1, interpret: bool = False, num_warps: int = NUM_WARPS):
    """PARALL to convergence (call inside jit); returns `engine.RunResult`, like `fused.run_loop`."""
    from fastlbp.engine import RunResult

    base = layout.base
    dtype = messages.dtype
    tol = jnp.asarray(tol, dtype)
    damping = jnp.asarray(damping, dtype)
    slots = jnp.zeros((base.num_slots,), dtype).at[base.edge_slot].set(messages)
    kv = base.kvar_var
    sk = layout.vslot_kvar
    var_of_slot = jnp.where(sk >= 0, kv[jnp.maximum(sk, 0)], -1)
    evidence_s = jnp.where(var_of_slot >= 0, evidence.astype(dtype)[jnp.maximum(var_of_slot, 0)], 0)
    params = fused.factor_params(base, graph, dtype)
    fin, cnt, p, _, conflict = var_pass(layout, slots, evidence_s, jnp.zeros_like(evidence_s), interpret,
                                        num_warps)

    def active(state):
        _, _, _, _, it, delta, conflict = state
        return (it < max_iters) & (delta >= tol) & ~conflict

    def sweep(state, go):
        msgs, fin, cnt, p, it, delta, conflict = state
        new = factor_pass(layout, msgs, fin, cnt, params, damping, go.astype(dtype), interpret, num_warps)
        fin, cnt, p_new, d, bad = var_pass(layout, new, evidence_s, p, interpret, num_warps)
        return (new, fin, cnt, p_new, jnp.where(go, it + 1, it), jnp.where(go, d, delta),
                jnp.where(go, bad, conflict))

    def body(state):
        for _ in range(unroll):
            state = sweep(state, active(state))
        return state

    state = (slots, fin, cnt, p, jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, dtype), conflict)
    slots, fin, cnt, p, it, delta, conflict = jax.lax.while_loop(active, body, state)
    k = base.kvar_slot0[base.var_kvar]
    c = cnt[k]
    lo = signed((c & 3) > 0, (c >> 2) > 0, fin[k])
    return RunResult(messages=slots[base.edge_slot], log_odds=lo, marginals=p[k], iterations=it,
                     converged=(delta < tol) & ~conflict, delta=delta, conflict=conflict)


_LAYOUTS: dict[int, tuple[weakref.ref, LinesLayout]] = {}


def layout_for(graph: FactorGraph) -> LinesLayout:
    """The graph's layout, built on first use and kept while the graph lives."""
    if isinstance(graph.edge_var, jax.core.Tracer):
        raise TypeError("the fused backend needs a concrete graph (call its runner outside jit)")
    key = id(graph)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0]() is graph:
        return hit[1]
    layout = build(graph)
    _LAYOUTS[key] = (weakref.ref(graph, lambda _, key=key: _LAYOUTS.pop(key, None)), layout)
    return layout


class Runner(fused.Runner):
    """`(graph, messages, evidence, tol, max_iters, damping) -> RunResult` with the single-path kernels."""

    def __init__(self, unroll: int = 1, interpret: bool = False, num_warps: int = NUM_WARPS):
        self._jitted = jax.jit(functools.partial(run_loop, unroll=unroll, interpret=interpret,
                                                 num_warps=num_warps))

    def __call__(self, graph, messages, evidence, tol, max_iters, damping):
        return self._jitted(layout_for(graph), graph, messages, evidence, tol, max_iters, damping)

    def lower(self, graph, *args):
        lowered = self._jitted.lower(layout_for(graph), graph, *args)

        class _Lowered:
            def compile(self):
                compiled = lowered.compile()
                return lambda g, *a: compiled(layout_for(g), g, *a)

        return _Lowered()


_RUNNERS: dict = {}


def runner(unroll: int = 1, interpret: bool = False, num_warps: int = NUM_WARPS) -> Runner:
    """A cached `Runner` for these settings."""
    key = (unroll, interpret, num_warps)
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(*key)
    return _RUNNERS[key]
