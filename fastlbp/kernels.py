"""Message kernels in JAX (the XLA path, also the CPU path).

Messages are binary and normalized, so one number per edge carries each: the
log-odds log m(1) - log m(0). Hard evidence makes messages exactly +-inf;
products are sums of logs, so thousands of terms neither underflow nor
overflow, and leave-one-out products are exact: a segment keeps the sum of
its finite terms and the count of its infinite ones, and an edge removes only
its own contribution (never divides by its own term).

The four factor-to-variable kernels of DESIGN.md section 4 share one form.
Let c be the log of the product over the *other* body edges of m_i(1) (AND)
or m_i(0) (OR): the probability that the body condition is decided by the
others. With (q, r) = (p2, p1) for AND and (p1, p2) for OR,

    g(x0=1) = q (1 - e^c) + r e^c,      g(x0=0) = 1 - the same with 1-q, 1-r
    head message:        log-odds g1 - g0
    body message, j:     k_fixed = log(h0 (1-q) + h1 q)   (x_j decides the body: AND x_j=0, OR x_j=1)
                         k_free  = log(h0 g0 + h1 g1)
                         AND: k_free - k_fixed,   OR: k_fixed - k_free

where h is the head's variable-to-factor message. Every term is a sum of
non-negative parts evaluated with logaddexp, so no cancellation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fastlbp.graph import AND, FactorGraph

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


def var_aggregates(graph: FactorGraph, factor_to_var: jax.Array, evidence: jax.Array) -> jax.Array:
    """Sums every variable's incoming messages and its evidence.

    Args:
        graph: the factor graph.
        factor_to_var: (E,) log-odds, factor order.
        evidence: (V,) log-odds.

    Returns:
        (V, 3) aggregate [finite sum, #+inf, #-inf].
    """
    in_var_order = factor_to_var[graph.var_edges]
    agg = jax.ops.segment_sum(
        split_infinite(in_var_order), graph.slot_var, num_segments=graph.num_vars,
        indices_are_sorted=True,
    )
    return agg + split_infinite(evidence.astype(factor_to_var.dtype))


def log_odds_from_aggregates(agg: jax.Array) -> jax.Array:
    """(V, 3) aggregate -> (V,) marginal log-odds (NaN: contradictory evidence)."""
    return combine(agg)


def var_to_factor(graph: FactorGraph, factor_to_var: jax.Array, agg: jax.Array) -> jax.Array:
    """Variable-to-factor messages: each variable's total minus the edge's own message.

    Returns:
        (E,) log-odds, factor order.
    """
    return combine(agg[graph.edge_var] - split_infinite(factor_to_var))


def _log1mexp(c: jax.Array) -> jax.Array:
    """log(1 - e^c) for c <= 0, accurate at both ends (Maechler 2012)."""
    return jnp.where(c > -0.6931471805599453, jnp.log(-jnp.expm1(c)), jnp.log1p(-jnp.exp(c)))


def _logaddexp(a: jax.Array, b: jax.Array) -> jax.Array:
    # jnp.logaddexp(-inf, -inf) is -inf, which is what an impossible state needs.
    return jnp.logaddexp(a, b)


def factor_to_var(graph: FactorGraph, var_to_factor_msgs: jax.Array) -> jax.Array:
    """New factor-to-variable messages for every edge from variable-to-factor messages.

    Args:
        graph: the factor graph.
        var_to_factor_msgs: (E,) log-odds, factor order.

    Returns:
        (E,) log-odds, factor order. NaN marks an edge whose incoming
        messages are contradictory.
    """
    mu = var_to_factor_msgs
    dtype = mu.dtype
    is_and = graph.factor_kind == AND
    p1 = graph.p1.astype(dtype)
    p2 = graph.p2.astype(dtype)
    q = jnp.where(is_and, p2, p1)  # f(x0=1) when the body is decided by x_j alone
    r = jnp.where(is_and, p1, p2)
    log_q, log_1mq = jnp.log(q), jnp.log1p(-q)
    log_r, log_1mr = jnp.log(r), jnp.log1p(-r)

    edge_and = is_and[graph.edge_factor]
    log_h1 = jax.nn.log_sigmoid(mu)
    log_h0 = jax.nn.log_sigmoid(-mu)
    # The body term whose product decides the condition: m(1) for AND, m(0) for OR.
    term = jnp.where(edge_and, log_h1, log_h0)
    term = jnp.where(graph.edge_is_head, 0, term)
    is_zero = (term == -jnp.inf).astype(dtype)
    finite = jnp.where(is_zero > 0, 0, term)
    fsum = jax.ops.segment_sum(
        jnp.stack([finite, is_zero], -1), graph.edge_factor, num_segments=graph.num_factors,
        indices_are_sorted=True,
    )
    own = fsum[graph.edge_factor] - jnp.stack([finite, is_zero], -1)
    c = jnp.where(own[:, 1] > 0.5, -jnp.inf, own[:, 0])  # log prod over the other body edges
    log_1mc = _log1mexp(c)

    a = graph.edge_factor
    g1 = _logaddexp(log_q[a] + log_1mc, log_r[a] + c)
    g0 = _logaddexp(log_1mq[a] + log_1mc, log_1mr[a] + c)
    head_edge = graph.factor_offsets[a]
    h1 = log_h1[head_edge]
    h0 = log_h0[head_edge]
    k_fixed = _logaddexp(h0 + log_1mq[a], h1 + log_q[a])
    k_free = _logaddexp(h0 + g0, h1 + g1)
    body_msg = jnp.where(edge_and, k_free - k_fixed, k_fixed - k_free)
    return jnp.where(graph.edge_is_head, g1 - g0, body_msg)
