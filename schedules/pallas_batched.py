"""The batched engine's iteration as one persistent Pallas (Triton) kernel.

`schedules.batched` runs a chunk as a dozen XLA kernels inside a loop, about
35-50 µs a chunk on the H200, and a SEQFIX iteration on these graphs has
~10^4 chunks that must run one after another. Here one kernel with a single
program walks every chunk of the iteration in order: per chunk it gathers the
slots' messages and their variables' aggregates, forms the runs' body sums,
writes the new messages and adds their changes to the aggregates, then
waits at a block barrier so the next chunk reads them. There is no launch and
no host round trip per chunk: a chunk costs a few dependent memory round trips.

Same plan (`schedules.plan`), same arithmetic as `batched._chunk_update`:

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

import functools

import jax
import jax.numpy as jnp

from fastlbp import engine, kernels
from fastlbp.graph import AND, FactorGraph
from schedules import plan as P

WIDTH = 32  # slots per chunk: the same-run masks are W x W (W = 64 and up spill; BENCHMARKS.md)
NUM_WARPS = 4
# The GPU variant (atomic run sums, O(W) per chunk): fastest measured at the ftp size.
ATOMIC_WIDTH = 128
ATOMIC_WARPS = 8


def _log_sigmoid(x):
    return jnp.minimum(x, 0) - jnp.log1p(jnp.exp(-jnp.abs(x)))


def _logaddexp(a, b):
    hi = jnp.maximum(a, b)
    return jnp.where(hi == -jnp.inf, hi, hi + jnp.log1p(jnp.exp(-jnp.abs(a - b))))


def _log1mexp(c):
    return jnp.where(c > -0.6931471805599453, jnp.log(-jnp.expm1(c)), jnp.log1p(-jnp.exp(c)))


def _finite(x):
    return jnp.where(jnp.isfinite(x), x, jnp.zeros_like(x))


def _kernel(width, num_chunks, interpret, base_ref, chunks_ref, and_ref, lq_ref, l1mq_ref, lr_ref, l1mr_ref,
            _m, _f, _p, _n, msgs_ref, fin_ref, pos_ref, neg_ref):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    W = width
    dummy_edge = msgs_ref.shape[0] - 1
    dummy_var = fin_ref.shape[0] - 1
    dt = msgs_ref.dtype
    lane = jax.lax.broadcasted_iota(jnp.int32, (W,), 0)
    base = base_ref[0]
    zeros = jnp.zeros((W,), dt)
    inf = jnp.full((W,), jnp.inf, dt)

    def seg_sum(mask, x):
        return jnp.sum(jnp.where(mask, x[None, :], jnp.zeros_like(x)[None, :]), axis=1)

    def body(c, acc):
        acc_fin, acc_zero = acc
        off = base + c * (P.ROWS * W)
        rows = [chunks_ref[pl.ds(off + k * W, W)] for k in range(P.ROWS)]
        edge, var, fac, seg, head = rows[P.EDGE], rows[P.VAR], rows[P.FACTOR], rows[P.SEG], rows[P.HEAD]
        write = rows[P.WRITE] > 0
        to_acc = rows[P.ACCP] == 0
        from_acc = rows[P.ACCF] == 0

        old = msgs_ref[edge]
        own_pos = (old == jnp.inf).astype(dt)
        own_neg = (old == -jnp.inf).astype(dt)
        pos = pos_ref[var] - own_pos > 0.5
        neg = neg_ref[var] - own_neg > 0.5
        soft = fin_ref[var] - _finite(old)
        mu = jnp.where(pos, jnp.where(neg, jnp.full((W,), jnp.nan, dt), inf), jnp.where(neg, -inf, soft))

        is_and = and_ref[fac] > 0
        lq, l1mq, lr, l1mr = lq_ref[fac], l1mq_ref[fac], lr_ref[fac], l1mr_ref[fac]
        is_head = head == lane
        log_h1 = _log_sigmoid(mu)
        log_h0 = _log_sigmoid(-mu)
        term = jnp.where(is_head, zeros, jnp.where(is_and, log_h1, log_h0))
        zero = term == -jnp.inf
        finite = jnp.where(zero, zeros, term)
        zf = zero.astype(dt)

        same = seg[:, None] == seg[None, :]
        carried_fin = jnp.where(from_acc, acc_fin, zeros)
        tot_fin = seg_sum(same, finite) + carried_fin
        tot_zero = seg_sum(same, zf) + jnp.where(from_acc, acc_zero, zeros)
        dominant = ~is_head & ~zero & (finite < 0.5 * tot_fin)
        rest = seg_sum(same, jnp.where(dominant, zeros, finite))
        others = jnp.where(dominant, rest + carried_fin, tot_fin - finite)
        cc = jnp.where(tot_zero - zf > 0.5, -inf, others)
        l1c = _log1mexp(cc)
        g1 = _logaddexp(lq + l1c, lr + cc)
        g0 = _logaddexp(l1mq + l1c, l1mr + cc)
        pick = head[:, None] == lane[None, :]
        h1 = seg_sum(pick, log_h1)
        h0 = seg_sum(pick, log_h0)
        k_fixed = _logaddexp(h0 + l1mq, h1 + lq)
        k_free = _logaddexp(h0 + g0, h1 + g1)
        new = jnp.where(is_head, g1 - g0, jnp.where(is_and, k_free - k_fixed, k_fixed - k_free))

        msgs_ref[jnp.where(write, edge, dummy_edge)] = new
        # One update per variable: the first writing slot adds the chunk's changes.
        same_var = (var[:, None] == var[None, :]) & write[None, :]
        d_fin = jnp.where(write, _finite(new) - _finite(old), zeros)
        d_pos = jnp.where(write, (new == jnp.inf).astype(dt) - own_pos, zeros)
        d_neg = jnp.where(write, (new == -jnp.inf).astype(dt) - own_neg, zeros)
        earlier = same_var & (lane[None, :] < lane[:, None])
        leader = write & (jnp.max(earlier.astype(jnp.int32), axis=1) == 0)
        target = jnp.where(leader, var, dummy_var)
        fin_ref[target] = fin_ref[target] + seg_sum(same_var, d_fin)
        pos_ref[target] = pos_ref[target] + seg_sum(same_var, d_pos)
        neg_ref[target] = neg_ref[target] + seg_sum(same_var, d_neg)

        reset = jnp.max(from_acc.astype(jnp.int32)) > 0
        acc_fin = jnp.where(reset, jnp.zeros((), dt), acc_fin) + jnp.sum(jnp.where(to_acc, finite, zeros))
        acc_zero = jnp.where(reset, jnp.zeros((), dt), acc_zero) + jnp.sum(jnp.where(to_acc, zf, zeros))
        if not interpret:
            plgpu.debug_barrier()  # this chunk's writes are visible to the next chunk's reads
        return acc_fin, acc_zero

    jax.lax.fori_loop(0, num_chunks, body, (jnp.zeros((), dt), jnp.zeros((), dt)))


def _kernel_atomic(width, num_chunks, base_ref, chunks_ref, and_ref, lq_ref, l1mq_ref, lr_ref, l1mr_ref,
                   _m, _f, _p, _n, _s, msgs_ref, fin_ref, pos_ref, neg_ref, scratch_ref):
    """The GPU variant for wide chunks: run sums by atomics into a scratch row.

    O(W) work per chunk (no W x W masks). Each run's sums go to its scratch
    entry by atomic adds; block barriers order the phases; the entries are
    zeroed before the next chunk. Aggregates and scratch are read with
    volatile loads (past L1), since atomics update L2 only.
    """
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    W = width
    SF, SZ, SR, H1, H0 = (k * (W + 1) for k in range(5))
    dummy_edge = msgs_ref.shape[0] - 1
    dt = msgs_ref.dtype
    lane = jax.lax.broadcasted_iota(jnp.int32, (W,), 0)
    base = base_ref[0]
    zeros = jnp.zeros((W,), dt)
    inf = jnp.full((W,), jnp.inf, dt)

    def load(ref, idx):
        return plgpu.load(ref.at[idx], volatile=True)

    def body(c, acc):
        acc_fin, acc_zero = acc
        off = base + c * (P.ROWS * W)
        rows = [chunks_ref[pl.ds(off + k * W, W)] for k in range(P.ROWS)]
        edge, var, fac, seg, head = rows[P.EDGE], rows[P.VAR], rows[P.FACTOR], rows[P.SEG], rows[P.HEAD]
        write = rows[P.WRITE] > 0
        to_acc = rows[P.ACCP] == 0
        from_acc = rows[P.ACCF] == 0

        old = load(msgs_ref, edge)
        own_pos = (old == jnp.inf).astype(dt)
        own_neg = (old == -jnp.inf).astype(dt)
        pos = load(pos_ref, var) - own_pos > 0.5
        neg = load(neg_ref, var) - own_neg > 0.5
        soft = load(fin_ref, var) - _finite(old)
        mu = jnp.where(pos, jnp.where(neg, jnp.full((W,), jnp.nan, dt), inf), jnp.where(neg, -inf, soft))

        is_and = and_ref[fac] > 0
        lq, l1mq, lr, l1mr = lq_ref[fac], l1mq_ref[fac], lr_ref[fac], l1mr_ref[fac]
        is_head = head == lane
        log_h1 = _log_sigmoid(mu)
        log_h0 = _log_sigmoid(-mu)
        term = jnp.where(is_head, zeros, jnp.where(is_and, log_h1, log_h0))
        zero = term == -jnp.inf
        finite = jnp.where(zero, zeros, term)
        zf = zero.astype(dt)

        plgpu.atomic_add(scratch_ref, SF + seg, finite)
        plgpu.atomic_add(scratch_ref, SZ + seg, zf)
        at_head = jnp.where(is_head, seg, W)
        scratch_ref[H1 + at_head] = log_h1
        scratch_ref[H0 + at_head] = log_h0
        plgpu.debug_barrier()
        carried_fin = jnp.where(from_acc, acc_fin, zeros)
        tot_fin = load(scratch_ref, SF + seg) + carried_fin
        tot_zero = load(scratch_ref, SZ + seg) + jnp.where(from_acc, acc_zero, zeros)
        h1 = load(scratch_ref, H1 + seg)
        h0 = load(scratch_ref, H0 + seg)
        dominant = ~is_head & ~zero & (finite < 0.5 * tot_fin)
        plgpu.atomic_add(scratch_ref, SR + seg, jnp.where(dominant, zeros, finite))
        plgpu.debug_barrier()
        rest = load(scratch_ref, SR + seg)
        others = jnp.where(dominant, rest + carried_fin, tot_fin - finite)
        cc = jnp.where(tot_zero - zf > 0.5, -inf, others)
        l1c = _log1mexp(cc)
        g1 = _logaddexp(lq + l1c, lr + cc)
        g0 = _logaddexp(l1mq + l1c, l1mr + cc)
        k_fixed = _logaddexp(h0 + l1mq, h1 + lq)
        k_free = _logaddexp(h0 + g0, h1 + g1)
        new = jnp.where(is_head, g1 - g0, jnp.where(is_and, k_free - k_fixed, k_fixed - k_free))

        msgs_ref[jnp.where(write, edge, dummy_edge)] = new
        plgpu.atomic_add(fin_ref, var, _finite(new) - _finite(old), mask=write)
        plgpu.atomic_add(pos_ref, var, (new == jnp.inf).astype(dt) - own_pos, mask=write)
        plgpu.atomic_add(neg_ref, var, (new == -jnp.inf).astype(dt) - own_neg, mask=write)

        reset = jnp.max(from_acc.astype(jnp.int32)) > 0
        acc_fin = jnp.where(reset, jnp.zeros((), dt), acc_fin) + jnp.sum(jnp.where(to_acc, finite, zeros))
        acc_zero = jnp.where(reset, jnp.zeros((), dt), acc_zero) + jnp.sum(jnp.where(to_acc, zf, zeros))
        plgpu.debug_barrier()  # every read of the scratch row is done
        scratch_ref[SF + seg] = zeros
        scratch_ref[SZ + seg] = zeros
        scratch_ref[SR + seg] = zeros
        plgpu.debug_barrier()  # zeros, messages and aggregates are in place for the next chunk
        return acc_fin, acc_zero

    jax.lax.fori_loop(0, num_chunks, body, (jnp.zeros((), dt), jnp.zeros((), dt)))


def factor_params(graph: FactorGraph, dtype):
    """Per factor: is AND (int32), log q, log(1-q), log r, log(1-r) (see `kernels._factor_params`)."""
    is_and = graph.factor_kind == AND
    p1 = graph.p1.astype(dtype)
    p2 = graph.p2.astype(dtype)
    q = jnp.where(is_and, p2, p1)
    r = jnp.where(is_and, p1, p2)
    return is_and.astype(jnp.int32), jnp.log(q), jnp.log1p(-q), jnp.log(r), jnp.log1p(-r)


def sweep(graph: FactorGraph, plan: P.Plan, messages, evidence, iteration, interpret: bool = False,
          num_warps: int = NUM_WARPS, atomic: bool = False):
    """One iteration (plan `iteration mod P`), like `batched.sweep`; returns (E,) messages."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    n_plans, num_chunks, rows, width = plan.chunks.shape
    dt = messages.dtype
    agg = kernels.var_aggregates(graph, messages, evidence)
    pad = jnp.zeros((1,), dt)
    msgs = jnp.concatenate([messages, pad])
    fin, pos, neg = (jnp.concatenate([agg[:, k], pad]) for k in range(3))
    base = (jnp.mod(iteration, n_plans) * (num_chunks * rows * width)).astype(jnp.int32)[None]
    state = [msgs, fin, pos, neg]
    if atomic:
        if interpret:
            raise ValueError("the atomic variant runs on the GPU only")
        state.append(jnp.zeros((5 * (width + 1),), dt))
        kernel = functools.partial(_kernel_atomic, width, num_chunks)
    else:
        kernel = functools.partial(_kernel, width, num_chunks, interpret)
    operands = (base, plan.chunks.reshape(-1), *factor_params(graph, dt), *state)
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


@functools.partial(jax.jit, static_argnames=("interpret", "num_warps", "atomic"))
def run(graph, plan, messages, evidence, tol, max_iters, damping, interpret: bool = False,
        num_warps: int = NUM_WARPS, atomic: bool = False):
    """The batched schedule to convergence with the persistent kernel (`engine.iterate`)."""
    def swp(g, m, e, it):
        return sweep(g, plan, m, e, it, interpret, num_warps, atomic)
    return engine.iterate(swp, graph, messages, evidence, tol, max_iters, damping, with_iteration=True)


def make_runner_fn(plan: P.Plan, interpret: bool = False, num_warps: int = NUM_WARPS, atomic: bool = False):
    """A function with `engine.parall_runner()`'s signature running this plan."""
    plan = jax.device_put(plan)

    def runner(graph, messages, evidence, tol, max_iters, damping):
        return run(graph, plan, messages, evidence, tol, max_iters, damping, interpret=interpret,
                   num_warps=num_warps, atomic=atomic)

    runner.plan = plan
    return runner
