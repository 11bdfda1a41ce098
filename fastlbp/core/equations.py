"""Message kernels in JAX (the XLA path, also the CPU path).

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

where h is the head's variable-to-factor message. `logspace.factor_messages`
evaluates them as sums of non-negative parts (no cancellation), in the
linear domain except where an underflow could decide the result.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp.core import logspace, pallas_segments, segments
from fastlbp.core.graph import AND, FactorGraph
from fastlbp.core.segments import SegmentPlan

# A FactorGraph is a pytree from here on, where JAX first meets the graph (every engine imports this
# module); graph.py imports no JAX. Every field is an array (data), none is static.
jax.tree_util.register_dataclass(FactorGraph)

# Columns of the per-variable aggregate (V, 3): finite log-odds sum, number of
# +inf terms, number of -inf terms.
FIN, POS, NEG = 0, 1, 2


def split_infinite(x: jax.Array) -> jax.Array:
    """(N,) log-odds -> (N, 3) [finite part, is +inf, is -inf] in x's dtype."""
    finite = jnp.where(jnp.isfinite(x), x, 0)
    return jnp.stack([finite, (x == jnp.inf).astype(x.dtype), (x == -jnp.inf).astype(x.dtype)], -1)


def combine(agg: jax.Array) -> jax.Array:
    """(N, 3) aggregate -> (N,) log-odds; NaN where +inf meets -inf (a contradiction)."""
    pos = agg[..., POS] > 0.5
    neg = agg[..., NEG] > 0.5
    out = jnp.where(pos, jnp.inf, jnp.where(neg, -jnp.inf, agg[..., FIN]))
    return jnp.where(pos & neg, jnp.nan, out)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Summation:
    """How an engine sums segments (every variable's messages, every factor's terms).

    Part of an engine's layout, built once per graph by `summation`. With
    backend "xla" the sums are dense gathers and row sums through the two
    plans (no atomics, deterministic); "scatter" is XLA's scatter-add, and
    "pallas"/"pallas_interpret" a Pallas segment-sum kernel (both without plans).

    Attributes:
        var: the plan of the variable order's segments (None unless "xla").
        factor: the plan of the factors' segments (None unless "xla").
        backend: "xla", "scatter", "pallas" or "pallas_interpret" (static).
    """

    var: SegmentPlan | None
    factor: SegmentPlan | None
    backend: str = dataclasses.field(default="xla", metadata={"static": True})


SUM_BACKENDS = ("xla", "scatter", "pallas", "pallas_interpret")


def summation(graph: FactorGraph, backend: str = "xla") -> Summation:
    """The `Summation` of `graph` for `backend` (host work, numpy: once per graph)."""
    if backend not in SUM_BACKENDS:
        raise ValueError(f"no segment sums for backend {backend!r} (expected one of {SUM_BACKENDS})")
    if backend != "xla":
        return Summation(None, None, backend)
    var_offsets = np.asarray(graph.var_offsets)
    factor_offsets = np.asarray(graph.factor_offsets)
    return Summation(
        var=segments.build(var_offsets, np.asarray(graph.var_edges), graph.num_edges),
        factor=segments.build(factor_offsets, None, graph.num_edges),
    )


def segment_sums(columns: tuple[jax.Array, ...], segment_ids: jax.Array, num_segments: int,
                 backend: str = "xla", split_infinite_values: bool = False,
                 gather_index: jax.Array | None = None, plan: SegmentPlan | None = None) -> jax.Array:
    """Sums of sorted segments, (S, k).

    Args:
        columns: k arrays of shape (N,); with `split_infinite_values` one
            log-odds array that is split into [finite, #+inf, #-inf] (k = 3).
        segment_ids: (N,) int32 sorted (of the gathered elements).
        backend: "xla" (dense gathers and row sums through `plan`, no
            atomics), "scatter" (XLA's segment_sum), "pallas" or
            "pallas_interpret" (the Pallas kernel run by the interpreter, for
            tests on the CPU).
        gather_index: optional (N,) int32; element i of a column is
            column[gather_index[i]].
        plan: the `SegmentPlan` of these segments (required by "xla").
    """
    dtype = columns[0].dtype
    if backend == "xla":
        if plan is None:
            raise ValueError("backend 'xla' sums through a SegmentPlan (kernels.summation)")
        if split_infinite_values:
            return segments.segment_sum(plan, columns[0], transform=split_infinite)
        data = columns[0] if len(columns) == 1 else jnp.stack(columns, -1)
        out = segments.segment_sum(plan, data)
        return out[:, None] if len(columns) == 1 else out
    if backend == "scatter":
        if gather_index is not None:
            columns = tuple(c[gather_index] for c in columns)
        data = split_infinite(columns[0]) if split_infinite_values else jnp.stack(columns, -1)
        return jax.ops.segment_sum(data, segment_ids, num_segments=num_segments, indices_are_sorted=True)
    out = pallas_segments.segment_sum(columns, segment_ids, num_segments=num_segments,
                                     split_infinite=split_infinite_values, gather_index=gather_index,
                                     interpret=backend == "pallas_interpret")
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
    agg = segment_sums((factor_to_var,), graph.slot_var, graph.num_vars, sums.backend, True,
                       gather_index=graph.var_edges, plan=sums.var)
    return agg + split_infinite(evidence.astype(factor_to_var.dtype))


def var_to_factor(graph: FactorGraph, factor_to_var: jax.Array, agg: jax.Array) -> jax.Array:
    """Variable-to-factor messages: each variable's total minus the edge's own message.

    Returns:
        (E,) log-odds, factor order.
    """
    return combine(agg[graph.edge_var] - split_infinite(factor_to_var))


class FactorParams(NamedTuple):
    """Per-factor constants of the message equations (`logspace.factor_messages`), (F,) each.

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
    """The graph's `FactorParams` in `dtype`, (F,) each, or of the factors `index` (shape of index)."""
    kind, p1, p2 = graph.factor_kind, graph.p1, graph.p2
    if index is not None:
        kind, p1, p2 = kind[index], p1[index], p2[index]
    is_and = kind == AND
    # q, r and 1 - q, 1 - r from the float64 parameters, none rounded to 0 in float32.
    q64 = jnp.where(is_and, p2, p1)
    r64 = jnp.where(is_and, p1, p2)
    q, r = logspace.soft_cast(q64, dtype), logspace.soft_cast(r64, dtype)
    q1, r1 = logspace.soft_cast(1 - q64, dtype), logspace.soft_cast(1 - r64, dtype)

    def guard(a, b):
        return jnp.where(a == 0, jnp.log(b), jnp.where(b == 0, jnp.log(a), 0))

    return FactorParams(is_and, q, r, q1, r1, guard(q, r), guard(q1, r1))


def factor_inputs(graph: FactorGraph, var_to_factor_msgs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-edge body terms whose per-factor sums the factor messages need.

    The term is log m(1) for AND bodies and log m(0) for OR bodies (0 on head
    edges), split into its finite part and whether it is -inf (a zero).

    Returns:
        finite: (E,) and is_zero: (E,), in the messages' dtype.
    """
    mu = var_to_factor_msgs
    edge_and = (graph.factor_kind == AND)[graph.edge_factor]
    x = jnp.where(edge_and, mu, -mu)
    term = logspace.floor_term(jax.nn.log_sigmoid(x), x)  # soft stays soft (`logspace.term_floor`)
    term = jnp.where(graph.edge_is_head, 0, term)
    is_zero = term == -jnp.inf
    return jnp.where(is_zero, 0, term), is_zero.astype(mu.dtype)


def factor_aggregates(graph: FactorGraph, sums: Summation, finite: jax.Array,
                      is_zero: jax.Array) -> jax.Array:
    """Per-factor sums of the body terms, arranged for exact leave-one-out.

    Every term is <= 0. For an edge whose term is at least half the factor's
    sum S, the others sum to at least S/2 in magnitude, so S - own term keeps
    full relative precision. At most one term can be below S/2 (two would
    already sum below S): the dominant one. For it, S - own would lose the
    others' (possibly tiny) sum to cancellation and turn "almost surely" into
    "surely" (a spurious hard message), so it gets the sum of the other terms
    directly, from a second pass.

    Returns:
        (F, 3): [sum of finite terms S, #zero terms, sum of finite terms >= S/2].
    """
    totals = segment_sums((finite, is_zero), graph.edge_factor, graph.num_factors, sums.backend,
                          plan=sums.factor)
    dominant = _dominant(graph, finite, is_zero, totals[graph.edge_factor, 0])
    rest = segment_sums((jnp.where(dominant, 0, finite),), graph.edge_factor, graph.num_factors,
                        sums.backend, plan=sums.factor)
    return jnp.concatenate([totals, rest], axis=-1)


def _dominant(graph: FactorGraph, finite: jax.Array, is_zero: jax.Array, factor_sum: jax.Array):
    """(E,) bool: the edge holds its factor's dominant term (below half the sum)."""
    return ~graph.edge_is_head & (is_zero < 0.5) & (finite < 0.5 * factor_sum)


def factor_messages(graph: FactorGraph, var_to_factor_msgs: jax.Array, finite: jax.Array,
                    is_zero: jax.Array, factor_agg: jax.Array,
                    params: FactorParams | None = None) -> jax.Array:
    """New factor-to-variable messages (E,) from the per-factor aggregates.

    `params`: `factor_params(graph, dtype)`; loops compute it once, before the
    loop, rather than its logs every iteration (None: computed here).
    NaN marks an edge whose incoming messages are contradictory.
    """
    mu = var_to_factor_msgs
    if params is None:
        params = factor_params(graph, mu.dtype)
    a = graph.edge_factor
    agg = factor_agg[a]
    others_zero = agg[:, 1] - is_zero
    dominant = _dominant(graph, finite, is_zero, agg[:, 0])
    others = jnp.where(dominant, agg[:, 2], agg[:, 0] - finite)
    c = jnp.where(others_zero > 0.5, -jnp.inf, others)  # log prod over the other body edges
    head_mu = mu[graph.factor_offsets[a]]
    return logspace.factor_messages(graph.edge_is_head, params.is_and[a], c, head_mu,
                                    *(x[a] for x in params[1:]))


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
