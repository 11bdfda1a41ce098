"""The message equations, written once for every engine (XLA, chunk loop, persistent and fused Pallas).

Messages are binary and normalized, so one number per edge carries each: the
log-odds log m(1) - log m(0). Hard evidence makes messages exactly +-inf;
products are sums of logs, so thousands of terms neither underflow nor
overflow, and leave-one-out products are exact: a segment keeps the sum of
its finite terms and the count of its infinite ones, and an edge removes only
its own contribution (never divides by its own term).

The four factor-to-variable kernels of docs/DESIGN.md section 4 share one form.
Let c be the log of the product over the *other* body edges of m_i(1) (AND)
or m_i(0) (OR): the probability that the body condition is decided by the
others. With (q, r) = (p2, p1) for AND and (p1, p2) for OR,

    g(x0=1) = q (1 - e^c) + r e^c,      g(x0=0) = 1 - the same with 1-q, 1-r
    head message:        log-odds g1 - g0
    body message, j:     k_fixed = log(h0 (1-q) + h1 q)   (x_j decides the body: AND x_j=0, OR x_j=1)
                         k_free  = log(h0 g0 + h1 g1)
                         AND: k_free - k_fixed,   OR: k_fixed - k_free

where h is the head's variable-to-factor message. `messages_from_rho`
evaluates them as sums of non-negative parts (no cancellation), in the
linear domain except where an underflow could decide the result.

Two layers:

* **Per-edge equations** (`factor_params`, `variable_message`, `body_term`,
  `is_dominant`, `others_product`, `log_rho`, `messages_from_rho`,
  `edge_messages`, `damp`): elementwise jnp on values of any shape, written
  so that Triton lowers them (constants by `full_like`, counts of any numeric
  dtype), so the Pallas kernels call these very functions on a program's
  slots. Each engine supplies only the sums (segment sums, run sums inside a
  chunk, row sums inside a tile). `terms_and_rho` is the one twin: the body
  term and the head's log rho sharing two transcendental evaluations, as the
  fused kernels need; tests/test_equations_once.py holds it (and the kernels'
  packed forms) to the plain functions on special and random values.
* **Graph-level XLA assembly** (`var_aggregates`, `var_to_factor`,
  `factor_inputs`, `factor_aggregates`, `factor_messages`, `factor_to_var`):
  the per-edge equations over a whole `FactorGraph`, with `Summation`'s
  segment sums; the PARALL and relaxation engines' sweep.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp.core import pallas_segments, segments
from fastlbp.core.graph import AND, FactorGraph
from fastlbp.core.logspace import (
    finite_part,
    floor_term,
    log1p_nonneg,
    log_sigmoid,
    quotient,
    signed,
    soft_cast,
)
from fastlbp.core.segments import SegmentPlan

# A FactorGraph is a pytree from here on, where JAX first meets the graph (every engine imports this
# module); graph.py imports no JAX. Every field is an array (data), none is static.
jax.tree_util.register_dataclass(FactorGraph)

# Columns of the per-variable aggregate (V, 3): finite log-odds sum, number of
# +inf terms, number of -inf terms.
FIN, POS, NEG = 0, 1, 2


# ---------------------------------------------------------------------------------------------
# Per-edge equations: elementwise, lowered by XLA and by Triton alike.
# ---------------------------------------------------------------------------------------------


class FactorParams(NamedTuple):
    """Per-factor constants of the message equations (`messages_from_rho`), (F,) each.

    (q, r) = (p2, p1) for AND and (p1, p2) for OR: the head's probability of
    being 1 when one body edge alone decides the body condition (AND: a body
    0, OR: a body 1), and when the others decide it.
    """

    is_and: jax.Array  # (F,) bool
    q: jax.Array  # (F,) float
    r: jax.Array
    q1: jax.Array  # 1 - q
    r1: jax.Array  # 1 - r
    k1: jax.Array  # log r where q = 0, else log q where r = 0, else 0
    k0: jax.Array  # the same for 1 - q, 1 - r


def factor_params(graph: FactorGraph, dtype, index: jax.Array | None = None) -> FactorParams:
    """The graph's `FactorParams` in `dtype`, (F,) each, or of the factors `index` (index's shape).

    Every engine takes its constants from here; the Pallas kernels receive them as operands
    (the fused kernels only is_and, q, r and k1 - k0: `fused.loop.kernel_params`).
    """
    kind, p1, p2 = graph.factor_kind, graph.p1, graph.p2
    if index is not None:
        kind, p1, p2 = kind[index], p1[index], p2[index]
    is_and = kind == AND
    # q, r and 1 - q, 1 - r from the float64 parameters, none rounded to 0 in float32.
    q64 = jnp.where(is_and, p2, p1)
    r64 = jnp.where(is_and, p1, p2)
    q, r = soft_cast(q64, dtype), soft_cast(r64, dtype)
    q1, r1 = soft_cast(1 - q64, dtype), soft_cast(1 - r64, dtype)

    def guard(a, b):
        return jnp.where(a == 0, jnp.log(b), jnp.where(b == 0, jnp.log(a), 0))

    return FactorParams(is_and, q, r, q1, r1, guard(q, r), guard(q1, r1))


def split(x, count_dtype):
    """A log-odds term as (finite part, is +inf, is -inf), the counts in `count_dtype`."""
    return finite_part(x), (x == jnp.inf).astype(count_dtype), (x == -jnp.inf).astype(count_dtype)


def log_odds(fin, pos, neg):
    """The log-odds of a sum of log-odds terms carried as (finite sum, #+inf, #-inf).

    +-inf where an infinite term remains, NaN where +inf meets -inf (a contradiction). The
    counts are exact integers of any numeric dtype.
    """
    return signed(pos > 0, neg > 0, fin)


def variable_message(fin, pos, neg, own):
    """Variable-to-factor log-odds: the variable's total less the edge's own message (exact).

    Args:
        fin, pos, neg: the variable's total (evidence and every incoming message) as its
            finite sum and its counts of +inf and -inf terms (exact integers, any dtype).
        own: the edge's factor-to-variable message.
    """
    own_fin, own_pos, own_neg = split(own, pos.dtype)
    return log_odds(fin - own_fin, pos - own_pos, neg - own_neg)


def split_body_term(term, body):
    """A body term as (its finite part, whether it is -inf: a zero); (0, False) off the body."""
    zeros = jnp.zeros_like(term)
    term = jnp.where(body, term, zeros)
    zero = term == -jnp.inf
    return jnp.where(zero, zeros, term), zero


def body_term(mu, is_and, body):
    """An edge's body term log m(1) (AND) or log m(0) (OR) of its variable-to-factor message `mu`.

    A soft message keeps a soft term (`logspace.floor_term`). Its factor's body sums add up the
    finite parts and count the zeros (a hard 0 among the others makes c = -inf).

    Returns:
        (finite part, is zero), 0 and False off the body (`body` False: head edges, padding).
    """
    x = jnp.where(is_and, mu, -mu)
    return split_body_term(floor_term(log_sigmoid(x), x), body)


def is_dominant(finite, total):
    """Whether an edge holds its factor's dominant body term: below half the factor's sum `total`.

    Every term is <= 0. For an edge whose term is at least half the factor's
    sum S, the others sum to at least S/2 in magnitude, so S - own term keeps
    full relative precision. At most one term can be below S/2 (two would
    already sum below S): the dominant one. For it, S - own would lose the
    others' (possibly tiny) sum to cancellation and turn "almost surely" into
    "surely" (a spurious hard message), so its others are summed directly
    (`others_product`'s `rest`). Head edges, padding and zero terms have a
    finite part of 0 (`body_term`) and never qualify, as S <= 0.
    """
    return finite < 0.5 * total


def others_product(finite, zero, total, zeros, rest, dominant):
    """c: the log of the product over the *other* body edges of a factor (exact leave-one-out).

    Args:
        finite, zero: the edge's `body_term` (`zero` as a count: 0 or 1 in `zeros`' dtype).
        total, zeros: the factor's sum of finite terms and its count of zero terms.
        rest: the factor's sum of finite terms without its dominant one (read where `dominant`).
        dominant: `is_dominant` of the edge (or, where a factor's sum is split over programs,
            any edge whose `rest` is known: its own term left out).

    Returns:
        c (<= 0; -inf where another body term is a zero).
    """
    others = jnp.where(dominant, rest, total - finite)
    return jnp.where(zeros - zero > 0, jnp.full_like(others, -jnp.inf), others)


def log_rho(hn, q, r, q1, r1):
    """log rho of a factor's body messages, from the head's variable-to-factor log-odds `hn`.

    rho = (h0 (1-r) + h1 r) / (h0 (1-q) + h1 q), both parts divided by
    max(h0, h1) so that u = min(h0, h1) / max(h0, h1) = e^-|hn|; a part whose
    constant is 0 is exactly u (log -|hn|). NaN where hn is NaN or both parts
    vanish (a hard head the factor rules out). Two transcendental evaluations.
    """
    num, den, extra, undefined = _rho_parts(hn, jnp.exp(-jnp.abs(hn)), q, r, q1, r1)
    return jnp.where(undefined, jnp.full_like(hn, jnp.nan), jnp.log(num / den) + extra)


def _rho_parts(hn, u, q, r, q1, r1):
    """rho = num / den * e^extra, and where rho is undefined (`log_rho`); u = e^-|hn|."""
    zero = jnp.zeros_like(hn)
    one = jnp.ones_like(hn)
    ax = jnp.abs(hn)
    up = hn >= 0
    b_num = jnp.where(up, r, r1)
    b_den = jnp.where(up, q, q1)
    num_u = b_num == 0
    den_u = b_den == 0
    num = jnp.where(num_u, one, jnp.where(up, r1, r) * u + b_num)
    den = jnp.where(den_u, one, jnp.where(up, q1, q) * u + b_den)
    extra = jnp.where(num_u == den_u, zero, jnp.where(num_u, -ax, ax))
    return num, den, extra, jnp.isnan(hn) | (num_u & den_u & (ax == jnp.inf))


def terms_and_rho(a, is_head, q, r, q1, r1):
    """log sigmoid(a) on body edges and `log_rho(a, ...)` on head edges, sharing two transcendentals.

    A body edge needs e^-|a| and log1p of it, a head edge e^-|hn| and the log
    of a ratio; a GPU lane runs both sides of a `where`, so one exp and one
    log1p serve both. The head's log is +-log1p((hi - lo) / lo) (lo, hi: the
    smaller and larger part, + where num >= den), as exact as log(num / den):
    the argument is never near -1.

    Args:
        a: log-odds; a body edge's +-(variable-to-factor message), the head's own.
        is_head: bool mask.
        q, r, q1, r1: the factor's constants (`FactorParams`).

    Returns:
        (log sigmoid(a), log rho): the first where not `is_head`, the second
        where `is_head`; the other entries are unspecified.
    """
    e = jnp.exp(-jnp.abs(a))
    num, den, extra, undefined = _rho_parts(a, e, q, r, q1, r1)
    lo = jnp.minimum(num, den)
    shared = log1p_nonneg(jnp.where(is_head, quotient(jnp.maximum(num, den) - lo, lo), e))
    lr = jnp.where(num >= den, shared, -shared) + extra
    return jnp.minimum(a, 0) - shared, jnp.where(undefined, jnp.full_like(a, jnp.nan), lr)


def edge_messages(is_head, is_and, c, hn, q, r, q1, r1, k1, k0):
    """New factor-to-variable log-odds from c and the head's variable-to-factor message `hn`.

    `messages_from_rho` with `log_rho(hn, ...)`; the arguments are theirs (`FactorParams`
    after is_and).
    """
    return messages_from_rho(is_head, is_and, c, log_rho(hn, q, r, q1, r1), q, r, q1, r1, k1, k0)


def messages_from_rho(is_head, is_and, c, lr, q, r, q1, r1, k1, k0):
    """New factor-to-variable log-odds (docs/DESIGN.md section 4).

    With t = e^c (the others decide nothing) and 1 - t, the head's message is
    log g1 - log g0, g1 = q (1-t) + r t, g0 = (1-q)(1-t) + (1-r) t; a body
    edge's is +-log(1 - t + t rho) (+ for AND, - for OR), where
    rho = (h0 (1-r) + h1 r) / (h0 (1-q) + h1 q) depends on the factor and the
    head's variable-to-factor message h only (`log_rho`). Sums of non-negative
    parts in the linear domain, so no cancellation; where a zero coefficient
    would let an underflowing e^c decide the result (g1 = r e^c when q = 0),
    that part is kept as a log instead, so no message turns hard by underflow.
    Three transcendental evaluations per edge: expm1(c), one exp (e^c for
    the head, e^(c + log rho) for a body edge) and one log.

    Args:
        is_head, is_and: bool masks.
        c: log of the product over the other body edges (<= 0, -inf: one is 0).
        lr: log rho of the edge's factor (`log_rho`; NaN: no rho).
        q, r, q1, r1: q, r, 1-q, 1-r of the factor (`factor_params`).
        k1, k0: log r where q = 0, else log q where r = 0, else 0 (k1); the
            same for 1-q and 1-r (k0).

    Returns:
        Log-odds; NaN where the incoming messages contradict the factor.
    """
    zero = jnp.zeros_like(c)
    one = jnp.ones_like(c)
    big = jnp.full_like(c, 700.0 if c.dtype == jnp.float64 else 80.0)  # e^big is finite
    omt = zero - jnp.expm1(c)  # +0.0 at c = 0 (g1 / -0.0 would be -inf)
    z = c + lr
    e = jnp.exp(jnp.where(is_head, c, jnp.minimum(z, big)))  # head: t = e^c; body: e^z
    # Head: log(g1 / g0), a zero coefficient's part moved into `head_add`.
    g1 = jnp.where(q == 0, one, jnp.where(r == 0, omt, q * omt + r * e))
    g0 = jnp.where(q1 == 0, one, jnp.where(r1 == 0, omt, q1 * omt + r1 * e))
    head_add = k1 - k0 + jnp.where(q == 0, c, jnp.where(q1 == 0, -c, zero))
    # Body edges divide 1 by 1: their e may be huge, a divisor the fast path does not take.
    x = jnp.where(is_head, quotient(jnp.where(is_head, g1, one), jnp.where(is_head, g0, one)), omt + e)
    out = jnp.log(x) + jnp.where(is_head, head_add, zero)
    # log(1 - t + e^z) is z when t = 1, and z to the last bit when e^z is huge; e^z may underflow.
    body = jnp.where((z > big) | (c == 0), z, out)
    return jnp.where(is_head, out, jnp.where(is_and, body, -body))


def body_term_and_rho(mu, is_head, body, is_and, q, r, q1, r1):
    """`body_term` on body edges and the head's `log_rho` on head edges, in one evaluation (a twin).

    A GPU lane runs both sides of a `where`, so the fused kernels form both with one exp and
    one log1p (`terms_and_rho`); the body side is log sigmoid to the last bits, the head side
    `log_rho` within rounding (tests/test_messages.py, tests/test_equations_once.py).

    Returns:
        (finite part, is zero, log rho): the first two as `body_term`'s (0, False off the
        body), log rho where `is_head` (unspecified elsewhere).
    """
    a = jnp.where(is_head | is_and, mu, -mu)
    t, lr = terms_and_rho(a, is_head, q, r, q1, r1)
    return (*split_body_term(floor_term(t, a), body), lr)  # soft stays soft


def damp(new, old, damping):
    """Damping in the log domain; a hard (infinite) message is never softened."""
    mixed = (1 - damping) * new + damping * old
    return jnp.where(jnp.isfinite(new) & jnp.isfinite(old), mixed, new)


# ---------------------------------------------------------------------------------------------
# Graph-level XLA assembly: the per-edge equations over a whole graph, with segment sums.
# ---------------------------------------------------------------------------------------------


def split_infinite(x: jax.Array) -> jax.Array:
    """(N,) log-odds -> (N, 3) [finite part, is +inf, is -inf] in x's dtype (`split`, stacked)."""
    return jnp.stack(split(x, x.dtype), -1)


def combine(agg: jax.Array) -> jax.Array:
    """(N, 3) aggregate -> (N,) log-odds; NaN where +inf meets -inf (a contradiction)."""
    return log_odds(agg[..., FIN], agg[..., POS], agg[..., NEG])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Summation:
    """How an engine sums segments (every variable's messages, every factor's terms).

    Part of an engine's layout, built once per graph by `summation`. Of
    kind "xla" the sums are dense gathers and row sums through the two
    plans (no atomics, deterministic); "scatter" is XLA's scatter-add, and
    "pallas"/"pallas_interpret" a Pallas segment-sum kernel (both without plans).

    Attributes:
        var: the plan of the variable order's segments (None unless "xla").
        factor: the plan of the factors' segments (None unless "xla").
        kind: "xla", "scatter", "pallas" or "pallas_interpret" (static; `SUMMATION_KINDS`: the
            plan's `summation`, `schedules.plan.Plan.summation_name`).
    """

    var: SegmentPlan | None
    factor: SegmentPlan | None
    kind: str = dataclasses.field(default="xla", metadata={"static": True})


SUMMATION_KINDS = ("xla", "scatter", "pallas", "pallas_interpret")


def summation(graph: FactorGraph, kind: str = "xla") -> Summation:
    """The `Summation` of `graph` of `kind` (host work, numpy: once per graph)."""
    if kind not in SUMMATION_KINDS:
        raise ValueError(f"no segment sums by {kind!r} (expected one of {SUMMATION_KINDS})")
    if kind != "xla":
        return Summation(None, None, kind)
    var_offsets = np.asarray(graph.var_offsets)
    factor_offsets = np.asarray(graph.factor_offsets)
    return Summation(
        var=segments.build(var_offsets, np.asarray(graph.var_edges), graph.num_edges),
        factor=segments.build(factor_offsets, None, graph.num_edges),
    )


def segment_sums(columns: tuple[jax.Array, ...], segment_ids: jax.Array, num_segments: int,
                 kind: str = "xla", split_infinite_values: bool = False,
                 gather_index: jax.Array | None = None, plan: SegmentPlan | None = None) -> jax.Array:
    """Sums of sorted segments, (S, k).

    Args:
        columns: k arrays of shape (N,); with `split_infinite_values` one
            log-odds array that is split into [finite, #+inf, #-inf] (k = 3).
        segment_ids: (N,) int32 sorted (of the gathered elements).
        kind: "xla" (dense gathers and row sums through `plan`, no
            atomics), "scatter" (XLA's segment_sum), "pallas" or
            "pallas_interpret" (the Pallas kernel run by the interpreter, for
            tests on the CPU).
        gather_index: optional (N,) int32; element i of a column is
            column[gather_index[i]].
        plan: the `SegmentPlan` of these segments (required by "xla").
    """
    dtype = columns[0].dtype
    if kind == "xla":
        if plan is None:
            raise ValueError("summation 'xla' sums through a SegmentPlan (equations.summation)")
        if split_infinite_values:
            return segments.segment_sum(plan, columns[0], transform=split_infinite)
        data = columns[0] if len(columns) == 1 else jnp.stack(columns, -1)
        out = segments.segment_sum(plan, data)
        return out[:, None] if len(columns) == 1 else out
    if kind == "scatter":
        if gather_index is not None:
            columns = tuple(c[gather_index] for c in columns)
        data = split_infinite(columns[0]) if split_infinite_values else jnp.stack(columns, -1)
        return jax.ops.segment_sum(data, segment_ids, num_segments=num_segments, indices_are_sorted=True)
    out = pallas_segments.segment_sum(columns, segment_ids, num_segments=num_segments,
                                     split_infinite=split_infinite_values, gather_index=gather_index,
                                     interpret=kind == "pallas_interpret")
    return out.astype(dtype)


def var_aggregates(graph: FactorGraph, sums: Summation, factor_to_var: jax.Array,
                   evidence: jax.Array) -> jax.Array:
    """Sums every variable's incoming messages and its evidence.

    Args:
        graph: the factor graph.
        sums: how to sum segments (`summation`).
        factor_to_var: (E,) log-odds, factor order.
        evidence: (V,) log-odds.

    Returns:
        (V, 3) aggregate [finite sum, #+inf, #-inf].
    """
    agg = segment_sums((factor_to_var,), graph.slot_var, graph.num_vars, sums.kind, True,
                       gather_index=graph.var_edges, plan=sums.var)
    return agg + split_infinite(evidence.astype(factor_to_var.dtype))


def var_to_factor(graph: FactorGraph, factor_to_var: jax.Array, agg: jax.Array) -> jax.Array:
    """Variable-to-factor messages of every edge (`variable_message` on `var_aggregates`' rows).

    Returns:
        (E,) log-odds, factor order.
    """
    rows = agg[graph.edge_var]
    return variable_message(rows[:, FIN], rows[:, POS], rows[:, NEG], factor_to_var)


def factor_inputs(graph: FactorGraph, var_to_factor_msgs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Every edge's `body_term`, whose per-factor sums the factor messages need.

    Returns:
        finite: (E,) and is_zero: (E,), in the messages' dtype (0 on head edges).
    """
    mu = var_to_factor_msgs
    edge_and = (graph.factor_kind == AND)[graph.edge_factor]
    finite, zero = body_term(mu, edge_and, ~graph.edge_is_head)
    return finite, zero.astype(mu.dtype)


def factor_aggregates(graph: FactorGraph, sums: Summation, finite: jax.Array,
                      is_zero: jax.Array) -> jax.Array:
    """Per-factor sums of the body terms, arranged for exact leave-one-out (`is_dominant`).

    The dominant term's edge reads the sum of the other terms directly, from
    a second pass that leaves it out.

    Returns:
        (F, 3): [sum of finite terms S, #zero terms, sum of finite terms without the dominant one].
    """
    totals = segment_sums((finite, is_zero), graph.edge_factor, graph.num_factors, sums.kind,
                          plan=sums.factor)
    dominant = is_dominant(finite, totals[graph.edge_factor, 0])
    rest = segment_sums((jnp.where(dominant, 0, finite),), graph.edge_factor, graph.num_factors,
                        sums.kind, plan=sums.factor)
    return jnp.concatenate([totals, rest], axis=-1)


def factor_messages(graph: FactorGraph, var_to_factor_msgs: jax.Array, finite: jax.Array,
                    is_zero: jax.Array, factor_agg: jax.Array,
                    params: FactorParams | None = None) -> jax.Array:
    """New factor-to-variable messages (E,) from the per-factor aggregates (`factor_aggregates`).

    `params`: `factor_params(graph, dtype)`; loops compute it once, before the
    loop, rather than its logs every iteration (None: computed here).
    NaN marks an edge whose incoming messages are contradictory.
    """
    mu = var_to_factor_msgs
    if params is None:
        params = factor_params(graph, mu.dtype)
    a = graph.edge_factor
    agg = factor_agg[a]
    dominant = is_dominant(finite, agg[:, 0])
    c = others_product(finite, is_zero, agg[:, 0], agg[:, 1], agg[:, 2], dominant)
    head_mu = mu[graph.factor_offsets[a]]
    return edge_messages(graph.edge_is_head, params.is_and[a], c, head_mu, *(x[a] for x in params[1:]))


def factor_to_var(graph: FactorGraph, sums: Summation, var_to_factor_msgs: jax.Array,
                  params: FactorParams | None = None) -> jax.Array:
    """New factor-to-variable messages for every edge from variable-to-factor messages.

    Args:
        graph: the factor graph.
        sums: how to sum segments (`summation`).
        var_to_factor_msgs: (E,) log-odds, factor order.
        params: `factor_params(graph, dtype)`, or None to compute it here.

    Returns:
        (E,) log-odds, factor order. NaN marks an edge whose incoming
        messages are contradictory.
    """
    finite, is_zero = factor_inputs(graph, var_to_factor_msgs)
    agg = factor_aggregates(graph, sums, finite, is_zero)
    return factor_messages(graph, var_to_factor_msgs, finite, is_zero, agg, params)


__all__ = ["FIN", "POS", "NEG", "FactorParams", "factor_params", "split", "log_odds", "variable_message",
           "split_body_term", "body_term", "is_dominant", "others_product", "log_rho", "terms_and_rho",
           "body_term_and_rho", "edge_messages", "messages_from_rho", "damp", "split_infinite", "combine",
           "Summation", "SUMMATION_KINDS", "summation", "segment_sums", "var_aggregates", "var_to_factor",
           "factor_inputs", "factor_aggregates", "factor_messages", "factor_to_var"]
