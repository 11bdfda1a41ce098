"""The batched engine's iteration as one persistent Pallas (Triton) kernel.

`fastlbp.engines.chunked` runs a chunk as a dozen XLA kernels inside a loop (each
chunk bound by their launches), and a SEQFIX iteration on these graphs has
~10^4 chunks that must run one after another. Here one kernel with a single
program walks every chunk of the iteration in order: per chunk it gathers the
slots' messages and their variables' aggregates, forms the runs' body sums,
writes the new messages and adds their changes to the aggregates, then
waits at a block barrier so the next chunk reads them. There is no launch and
no host round trip per chunk: a chunk costs a few dependent memory round trips.

Same plan (`schedules.chunk_plan`) and the same equations as `chunked._chunk_update`
(`fastlbp.core.equations`, called in the kernel on the chunk's slots); only the
sums differ:

* runs are segments of the chunk; their sums use a (W, W) same-run mask
  (exact: a run never mixes with its neighbours), so W is kept small (32);
* a factor spread over several chunks carries its body sums in an
  accumulator (`ACCP`, `ACCF`);
* the dominant body term takes the sum of the other terms directly;
* a variable written by several slots of one chunk gets one update, the sum
  of their changes (one store per variable, no atomics), so the interpreter
  runs it too (tests on the CPU).

On the GPU `_kernel_atomic` (the default there) replaces the W x W masks by
atomic adds into a per-chunk scratch row, so wider chunks (128 slots) and
fewer of them pay: 3.2x the XLA chunk loop per SEQFIX iteration at the ftp
size (BENCHMARKS.md). It needs hardware atomics on repeated addresses, which
the interpreter does not model, so the GPU check is
`benchmarks/bench_seqfix_pallas.py` (marginals against the XLA loop).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp

import schedules
from fastlbp.core import equations
from fastlbp.core.graph import FactorGraph
from fastlbp.core.settings import Settings
from fastlbp.engines.chunked import READS, ChunkLayout
from fastlbp.engines.loop import (
    Controls,
    Runner,
    RunnerInfo,
    RunResult,
    graph_of,
    iterate,
    plan_for,
)
from schedules import chunk_plan as P
from schedules.plan import Plan

# Slots per chunk: the same-run masks are W x W (W = 64 and up spill registers: docs/benchmark-log.md).
WIDTH = 32
NUM_WARPS = 4
# The GPU variant (atomic run sums, O(W) per chunk): fastest measured at the ftp size.
ATOMIC_WIDTH = 128
ATOMIC_WARPS = 8
# The atomic kernel's scratch: per run of a chunk, its finite sum, zero count, sum without the
# dominant term, and its head's variable-to-factor message.
SCRATCH_ROWS = 4


class _Chunk(NamedTuple):
    """One chunk's slots after the gathers: what both kernels compute alike."""

    edge: jax.Array  # (W,) int32
    var: jax.Array  # (W,) int32
    seg: jax.Array  # (W,) int32 run inside the chunk (W: none)
    head: jax.Array  # (W,) int32 slot of the run's head (-1: none here)
    write: jax.Array  # (W,) bool
    to_acc: jax.Array  # (W,) bool, adds its term to the carried accumulator
    from_acc: jax.Array  # (W,) bool, its run adds the accumulator
    old: jax.Array  # (W,) message before the update
    is_and: jax.Array
    is_head: jax.Array
    params: tuple  # q, r, 1-q, 1-r, k1, k0 (`equations.FactorParams`), (W,) each
    mu: jax.Array  # (W,) the variable-to-factor message
    finite: jax.Array  # finite part of the body term
    zf: jax.Array  # (W,) 1.0 where the body term is -inf (a zero), else 0.0


def _chunk_rows(chunks_ref, base, c, width):
    """The plan rows (EDGE .. ACCF) of chunk c, (W,) int32 each."""
    from jax.experimental import pallas as pl

    off = base + c * (P.ROWS * width)
    return [chunks_ref[pl.ds(off + k * width, width)] for k in range(P.ROWS)]


def _chunk_front(rows, load, msgs_ref, fin_ref, pos_ref, neg_ref, param_refs, lane, dt) -> _Chunk:
    """Gathers a chunk's messages, aggregates and factor parameters; forms the body terms."""
    edge, var, fac, seg, head = rows[P.EDGE], rows[P.VAR], rows[P.FACTOR], rows[P.SEG], rows[P.HEAD]
    old = load(msgs_ref, edge)
    mu = equations.variable_message(load(fin_ref, var), load(pos_ref, var), load(neg_ref, var), old)
    and_ref, *value_refs = param_refs
    is_and = and_ref[fac] > 0
    is_head = head == lane
    finite, zero = equations.body_term(mu, is_and, ~is_head)
    return _Chunk(edge, var, seg, head, rows[P.WRITE] > 0, rows[P.ACCP] == 0, rows[P.ACCF] == 0, old,
                  is_and, is_head, tuple(r[fac] for r in value_refs), mu, finite, zero.astype(dt))


def _chunk_messages(ch: _Chunk, tot_fin, tot_zero, rest, carried_fin, dominant, hn):
    """New messages from the runs' sums and the head's variable-to-factor message `hn`."""
    c = equations.others_product(ch.finite, ch.zf, tot_fin, tot_zero, rest + carried_fin, dominant)
    return equations.edge_messages(ch.is_head, ch.is_and, c, hn, *ch.params)


def _changes(ch: _Chunk, new):
    """Per-slot changes of the variable aggregates [finite, #+inf, #-inf] (0 where not written)."""
    zeros = jnp.zeros_like(new)
    return [jnp.where(ch.write, x - y, zeros)
            for x, y in zip(equations.split(new, new.dtype), equations.split(ch.old, new.dtype), strict=True)]


def _next_acc(ch: _Chunk, acc):
    """A spread factor's last chunk consumed the accumulator; its leading chunks add to it."""
    zero = jnp.zeros((), ch.finite.dtype)
    reset = jnp.max(ch.from_acc.astype(jnp.int32)) > 0
    return tuple(jnp.where(reset, zero, a) + jnp.sum(jnp.where(ch.to_acc, x, jnp.zeros_like(x)))
                 for a, x in zip(acc, (ch.finite, ch.zf), strict=True))


def _kernel(width, num_chunks, interpret, base_ref, chunks_ref, and_ref, q_ref, r_ref, q1_ref, r1_ref, k1_ref,
            k0_ref, _m, _f, _p, _n, msgs_ref, fin_ref, pos_ref, neg_ref):
    """The portable variant: run sums and per-variable updates through W x W masks."""
    from jax.experimental.pallas import triton as plgpu

    W = width
    dummy_edge = msgs_ref.shape[0] - 1
    dummy_var = fin_ref.shape[0] - 1
    dt = msgs_ref.dtype
    lane = jax.lax.broadcasted_iota(jnp.int32, (W,), 0)
    base = base_ref[0]
    param_refs = (and_ref, q_ref, r_ref, q1_ref, r1_ref, k1_ref, k0_ref)

    def seg_sum(mask, x):
        return jnp.sum(jnp.where(mask, x[None, :], jnp.zeros_like(x)[None, :]), axis=1)

    def body(c, acc):
        rows = _chunk_rows(chunks_ref, base, c, W)
        ch = _chunk_front(rows, lambda ref, idx: ref[idx], msgs_ref, fin_ref, pos_ref, neg_ref, param_refs,
                          lane, dt)
        zeros = jnp.zeros_like(ch.old)
        same = ch.seg[:, None] == ch.seg[None, :]
        carried_fin = jnp.where(ch.from_acc, acc[0], zeros)
        tot_fin = seg_sum(same, ch.finite) + carried_fin
        tot_zero = seg_sum(same, ch.zf) + jnp.where(ch.from_acc, acc[1], zeros)
        dominant = equations.is_dominant(ch.finite, tot_fin)
        rest = seg_sum(same, jnp.where(dominant, zeros, ch.finite))
        pick = ch.head[:, None] == lane[None, :]
        new = _chunk_messages(ch, tot_fin, tot_zero, rest, carried_fin, dominant, seg_sum(pick, ch.mu))

        msgs_ref[jnp.where(ch.write, ch.edge, dummy_edge)] = new
        # One update per variable: the first writing slot adds the chunk's changes.
        same_var = (ch.var[:, None] == ch.var[None, :]) & ch.write[None, :]
        earlier = same_var & (lane[None, :] < lane[:, None])
        leader = ch.write & (jnp.max(earlier.astype(jnp.int32), axis=1) == 0)
        target = jnp.where(leader, ch.var, dummy_var)
        for ref, change in zip((fin_ref, pos_ref, neg_ref), _changes(ch, new), strict=True):
            ref[target] = ref[target] + seg_sum(same_var, change)
        if not interpret:
            plgpu.debug_barrier()  # this chunk's writes are visible to the next chunk's reads
        return _next_acc(ch, acc)

    jax.lax.fori_loop(0, num_chunks, body, (jnp.zeros((), dt), jnp.zeros((), dt)))


def _kernel_atomic(width, num_chunks, base_ref, chunks_ref, and_ref, q_ref, r_ref, q1_ref, r1_ref, k1_ref,
                   k0_ref, _m, _f, _p, _n, _s, msgs_ref, fin_ref, pos_ref, neg_ref, scratch_ref):
    """The GPU variant for wide chunks: run sums by atomics into a scratch row.

    O(W) work per chunk (no W x W masks). Each run's sums go to its scratch
    entry by atomic adds; block barriers order the phases; the entries are
    zeroed before the next chunk. Aggregates and scratch are read with
    volatile loads (past L1), since atomics update L2 only.
    """
    from jax.experimental.pallas import triton as plgpu

    W = width
    SF, SZ, SR, H = (k * (W + 1) for k in range(SCRATCH_ROWS))
    dummy_edge = msgs_ref.shape[0] - 1
    dt = msgs_ref.dtype
    lane = jax.lax.broadcasted_iota(jnp.int32, (W,), 0)
    base = base_ref[0]
    param_refs = (and_ref, q_ref, r_ref, q1_ref, r1_ref, k1_ref, k0_ref)

    def load(ref, idx):
        return plgpu.load(ref.at[idx], volatile=True)

    def body(c, acc):
        rows = _chunk_rows(chunks_ref, base, c, W)
        ch = _chunk_front(rows, load, msgs_ref, fin_ref, pos_ref, neg_ref, param_refs, lane, dt)
        zeros = jnp.zeros_like(ch.old)
        seg = ch.seg
        plgpu.atomic_add(scratch_ref, SF + seg, ch.finite)
        plgpu.atomic_add(scratch_ref, SZ + seg, ch.zf)
        scratch_ref[H + jnp.where(ch.is_head, seg, W)] = ch.mu
        plgpu.debug_barrier()
        carried_fin = jnp.where(ch.from_acc, acc[0], zeros)
        tot_fin = load(scratch_ref, SF + seg) + carried_fin
        tot_zero = load(scratch_ref, SZ + seg) + jnp.where(ch.from_acc, acc[1], zeros)
        hn = load(scratch_ref, H + seg)
        dominant = equations.is_dominant(ch.finite, tot_fin)
        plgpu.atomic_add(scratch_ref, SR + seg, jnp.where(dominant, zeros, ch.finite))
        plgpu.debug_barrier()
        rest = load(scratch_ref, SR + seg)
        new = _chunk_messages(ch, tot_fin, tot_zero, rest, carried_fin, dominant, hn)

        msgs_ref[jnp.where(ch.write, ch.edge, dummy_edge)] = new
        for ref, change in zip((fin_ref, pos_ref, neg_ref), _changes(ch, new), strict=True):
            plgpu.atomic_add(ref, ch.var, change, mask=ch.write)
        acc = _next_acc(ch, acc)
        plgpu.debug_barrier()  # every read of the scratch row is done
        for start in (SF, SZ, SR):
            scratch_ref[start + seg] = zeros
        plgpu.debug_barrier()  # zeros, messages and aggregates are in place for the next chunk
        return acc

    jax.lax.fori_loop(0, num_chunks, body, (jnp.zeros((), dt), jnp.zeros((), dt)))


def _operands(params: equations.FactorParams) -> tuple[jax.Array, ...]:
    """`equations.factor_params` as the kernels' operands: is AND as int32 (indexed by factor there)."""
    return (params.is_and.astype(jnp.int32), *params[1:])


def sweep(graph: FactorGraph, plan: P.ChunkPlan, messages, agg, iteration, interpret: bool = False,
          num_warps: int = NUM_WARPS, atomic: bool = False, params=None):
    """One iteration (plan `iteration mod P`), like `chunked.sweep`; returns (E,) messages.

    `agg`: (V, 3) `equations.var_aggregates` of `messages` and the evidence.

    `params`: `equations.factor_params(graph, dtype)`, computed once per run by the caller
    (None: computed here).
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    n_plans, num_chunks, rows, width = plan.chunks.shape
    dt = messages.dtype
    pad = jnp.zeros((1,), dt)
    msgs = jnp.concatenate([messages, pad])
    fin, pos, neg = (jnp.concatenate([agg[:, k], pad]) for k in range(3))
    base = (jnp.mod(iteration, n_plans) * (num_chunks * rows * width)).astype(jnp.int32)[None]
    state = [msgs, fin, pos, neg]
    if atomic:
        if interpret:
            raise ValueError("the atomic variant runs on the GPU only")
        state.append(jnp.zeros((SCRATCH_ROWS * (width + 1),), dt))
        kernel = functools.partial(_kernel_atomic, width, num_chunks)
    else:
        kernel = functools.partial(_kernel, width, num_chunks, interpret)
    params = equations.factor_params(graph, dt) if params is None else params
    operands = (base, plan.chunks.reshape(-1), *_operands(params), *state)
    first = len(operands) - len(state)
    out = pl.pallas_call(
        kernel,
        grid=(1,),
        out_shape=tuple(jax.ShapeDtypeStruct(x.shape, dt) for x in state),
        input_output_aliases={first + k: k for k in range(len(state))},
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
    )(*operands)
    return out[0][:-1]


def _run(graph: FactorGraph, layout: ChunkLayout, messages: jax.Array, evidence: jax.Array, ctl: Controls,
         *, interpret: bool = False, num_warps: int = NUM_WARPS, atomic: bool = False) -> RunResult:
    params = equations.factor_params(graph, messages.dtype)  # once per round, not per iteration

    def persistent(g, lay, msgs, agg, ev, it):
        return sweep(g, lay.plan, msgs, agg, it, interpret, num_warps, atomic, params)

    return iterate(persistent, graph, layout, layout.sums, messages, evidence, ctl)


@functools.cache
def jitted_run(interpret: bool = False, num_warps: int = NUM_WARPS, atomic: bool = False):
    """The jitted round `run(graph, layout, messages, evidence, controls)` for these kernel settings."""
    return jax.jit(functools.partial(_run, interpret=interpret, num_warps=num_warps, atomic=atomic))


def make_runner(model, plan: Plan | Settings | None = None) -> Runner:
    """The plan's order(s) in the persistent kernel: the atomic variant on a GPU, the mask kernel
    in the interpreter (`plan.interpret`)."""
    plan = plan_for(model, plan)
    spec = plan.schedule
    if spec.width is None:
        spec = dataclasses.replace(spec, width=WIDTH if plan.interpret else ATOMIC_WIDTH)
    compiled = schedules.compile_schedule(model, spec, gpu=plan.gpu)
    name = f"{spec.strategy}/persistent"
    if plan.interpret:
        return runner_for(graph_of(model), compiled.plan, name, interpret=True, compiled=compiled,
                          reason=plan.reason)
    return runner_for(graph_of(model), compiled.plan, name, num_warps=ATOMIC_WARPS, atomic=True,
                      compiled=compiled, reason=plan.reason)


def runner_for(graph: FactorGraph, plan: P.ChunkPlan, name: str, *, interpret: bool = False,
               num_warps: int = NUM_WARPS, atomic: bool = False, compiled=None,
               reason: str | None = None) -> Runner:
    """A `Runner` for a chunk plan packed by `schedules.compile_schedule` (widths: `WIDTH` for the
    mask kernel, `ATOMIC_WIDTH` for the atomic one)."""
    if atomic and interpret:
        raise ValueError("the atomic variant runs on the GPU only")
    start = time.perf_counter()
    layout = ChunkLayout.on_device(graph, plan)
    info = RunnerInfo(backend="fused_interpret" if interpret else "fused", reason=reason,
                      layout_seconds=time.perf_counter() - start, compiled=compiled,
                      tuning={"num_warps": num_warps, "atomic": atomic})
    return Runner(name=name, layout=layout, run=jitted_run(interpret, num_warps, atomic), info=info,
                  reads=READS)


__all__ = ["WIDTH", "NUM_WARPS", "ATOMIC_WIDTH", "ATOMIC_WARPS", "sweep", "jitted_run", "make_runner",
           "runner_for"]
