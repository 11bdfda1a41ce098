"""A simple layered, Bingo-like random factor graph (for benchmarks and analysis tests).

Input tuples (priors 1.0 or 0.999), clauses as noisy ANDs (p = 0.999) over 1-4
tuples of lower layers picked with a heavy-tailed reuse, derived tuples as
deterministic ORs over 1-100 clauses. One factor per variable (its head):
tuple factors first, then clause factors. Prefer `datalog.synthetic` when
available; this one only needs numpy.
"""

from __future__ import annotations

import numpy as np

from fastlbp.graph import AND, OR, FactorGraph, from_arrays


def layered_graph(factor_edges: int, seed: int = 0, layers: int = 8) -> FactorGraph:
    """A random layered graph with about `factor_edges` factor-graph edges."""
    rng = np.random.default_rng(seed)
    num_clauses = max(2, int(factor_edges / 4.6))
    fanin = np.minimum(1 + rng.zipf(2.2, size=num_clauses), 100)  # clauses per derived tuple
    cum = np.cumsum(fanin)
    num_derived = max(1, int(np.searchsorted(cum, num_clauses)))
    fanin = fanin[:num_derived]
    fanin[-1] += num_clauses - int(fanin.sum())
    fanin = np.maximum(fanin, 1)
    num_clauses = int(fanin.sum())
    num_input = max(1, num_derived // 2)
    num_tuples = num_input + num_derived
    # Layer of each tuple: inputs 0, derived spread over 1..layers.
    t_layer = np.concatenate([np.zeros(num_input, np.int64),
                              np.sort(rng.integers(1, layers + 1, size=num_derived))])
    clause_head = num_input + np.repeat(np.arange(num_derived), fanin)
    head_layer = t_layer[clause_head]
    body_len = rng.integers(1, 5, size=num_clauses)
    # Tuples of lower layers: t_layer is sorted, so they are a prefix [0, n_below).
    n_below = np.searchsorted(t_layer, head_layer, side="left")
    c_of = np.repeat(np.arange(num_clauses), body_len)
    # Heavy-tailed reuse: u^3 concentrates on the first tuples of the prefix.
    u = rng.random(c_of.size) ** 3
    body = (u * n_below[c_of]).astype(np.int64)
    # Drop repeated body tuples within a clause.
    key = c_of * num_tuples + body
    _, first = np.unique(key, return_index=True)
    keep = np.zeros(key.size, bool)
    keep[first] = True
    c_of, body = c_of[keep], body[keep]
    body_len = np.bincount(c_of, minlength=num_clauses)
    order = np.argsort(c_of, kind="stable")
    body = body[order]

    num_vars = num_tuples + num_clauses
    clause_var = num_tuples + np.arange(num_clauses)
    # Tuple factors: inputs are priors, derived tuples OR over their clauses.
    t_kind = np.where(np.arange(num_tuples) < num_input, AND, OR)
    t_lens = np.concatenate([np.zeros(num_input, np.int64), fanin])
    t_body = clause_var  # clauses are grouped by head tuple, in order
    prior = np.where(rng.random(num_input) < 0.8, 1.0, 0.999)
    t_p1 = np.concatenate([prior, np.ones(num_derived)])
    t_p2 = np.concatenate([prior, np.zeros(num_derived)])
    kind = np.concatenate([t_kind, np.full(num_clauses, AND)])
    head = np.arange(num_vars)
    lens = np.concatenate([t_lens, body_len])
    offsets = np.zeros(num_vars + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    p1 = np.concatenate([t_p1, np.full(num_clauses, 0.999)])
    p2 = np.concatenate([t_p2, np.zeros(num_clauses)])
    return from_arrays(kind, head, offsets, np.concatenate([t_body, body]), p1, p2,
                       num_vars=num_vars)
