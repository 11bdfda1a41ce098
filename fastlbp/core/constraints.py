"""Which label sets the model rules out: propagation of its hard constraints (host, numpy).

A label set is contradictory when it has probability 0. The model's zeros
come only from its hard parts: parameters equal to 0 or 1 (deterministic OR
tuples, clauses that cannot fire without their body, facts) and the labels
themselves. `propagate` runs generalised arc consistency over the AND/OR
factors: a value of a variable is removed when some factor has no assignment
of the other variables, within their remaining values, that gives it a
positive weight. Every removal is implied by the model and the labels, so a
variable left with no value proves the labels contradictory; the check never
looks at LBP's messages, so an underflowed message can never refuse a label.

Propagation is sound but not complete: a contradiction that needs case
splits is not found here (nor by LBP, whose hard messages are the same
propagation restricted to one factor at a time), and those labels are
accepted.
"""

from __future__ import annotations

import numpy as np

from fastlbp.core.graph import AND, FactorGraph


class _Factors:
    """The graph's arrays the propagation reads, on the host."""

    def __init__(self, graph: FactorGraph):
        g = graph.to_numpy()
        self.num_vars = graph.num_vars
        self.num_factors = graph.num_factors
        self.edge_factor = np.asarray(g.edge_factor, np.int64)  # (E,)
        self.edge_var = np.asarray(g.edge_var, np.int64)  # (E,)
        body = ~np.asarray(g.edge_is_head, bool)
        self.body_edges = np.nonzero(body)[0]  # (Eb,)
        self.body_factor = self.edge_factor[body]  # (Eb,)
        self.body_var = self.edge_var[body]  # (Eb,)
        self.head = np.asarray(g.factor_head, np.int64)  # (F,)
        self.size = np.bincount(self.body_factor, minlength=self.num_factors)  # (F,) body sizes
        p1 = np.asarray(g.p1, np.float64)
        p2 = np.asarray(g.p2, np.float64)
        self.is_and = np.asarray(g.factor_kind) == AND  # (F,)
        # Allowed (head, condition) pairs: the factor's weight is positive.
        self.a11, self.a10 = p1 > 0, p2 > 0  # head 1 with the condition true / false
        self.a01, self.a00 = p1 < 1, p2 < 1  # head 0 with the condition true / false


def _supported(f: _Factors, can0: np.ndarray, can1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(V,) bools: whether every factor still supports value 0 / value 1 of each variable."""
    bf, bv = f.body_factor, f.body_var
    n1 = np.bincount(bf, weights=can1[bv], minlength=f.num_factors)  # body vars that can be 1
    n0 = np.bincount(bf, weights=can0[bv], minlength=f.num_factors)  # body vars that can be 0
    n = f.size
    # The condition (AND: all body 1; OR: some body 1) can be true / false.
    cond_t = np.where(f.is_and, n1 == n, n1 >= 1)
    cond_f = np.where(f.is_and, n0 >= 1, n0 == n)
    h = f.head
    head1 = (cond_t & f.a11) | (cond_f & f.a10)
    head0 = (cond_t & f.a01) | (cond_f & f.a00)
    # A body value is supported when some head value the head can take and some value of
    # the condition, possible with this body value, are allowed together.
    with_t = (can1[h] & f.a11) | (can0[h] & f.a01)  # (F,) condition true is allowed
    with_f = (can1[h] & f.a10) | (can0[h] & f.a00)
    others1 = n1[bf] - can1[bv]  # other body vars that can be 1
    others0 = n0[bf] - can0[bv]
    m = n[bf] - 1  # number of other body vars
    and_ = f.is_and[bf]
    # Body value 1: AND's condition is true iff all others can be 1, false iff some other can be 0;
    # OR's condition is then true.
    t1 = np.where(and_, others1 == m, True)
    f1 = np.where(and_, others0 >= 1, False)
    # Body value 0: AND's condition is false; OR's true iff some other can be 1, false iff all can be 0.
    t0 = np.where(and_, False, others1 >= 1)
    f0 = np.where(and_, True, others0 == m)
    sup1 = (t1 & with_t[bf]) | (f1 & with_f[bf])
    sup0 = (t0 & with_t[bf]) | (f0 & with_f[bf])
    ok1 = np.ones(f.num_vars, bool)
    ok0 = np.ones(f.num_vars, bool)
    ok1[h[~head1]] = False
    ok0[h[~head0]] = False
    ok1[bv[~sup1]] = False
    ok0[bv[~sup0]] = False
    return ok0, ok1


def propagate(graph: FactorGraph | _Factors, labels: dict[int, bool] | None = None,
              max_rounds: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Generalised arc consistency of the hard constraints and the labels.

    Args:
        graph: the factor graph.
        labels: {variable: truth}.
        max_rounds: stop after this many rounds (None: at the fixed point).

    Returns:
        can0, can1: (V,) bool, whether the variable may still be 0 / 1. A
        variable with neither proves the labels contradictory.
    """
    f = graph if isinstance(graph, _Factors) else _Factors(graph)
    can0 = np.ones(f.num_vars, bool)
    can1 = np.ones(f.num_vars, bool)
    for v, truth in (labels or {}).items():
        (can0 if truth else can1)[v] = False
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        rounds += 1
        ok0, ok1 = _supported(f, can0, can1)
        new0, new1 = can0 & ok0, can1 & ok1
        if np.array_equal(new0, can0) and np.array_equal(new1, can1):
            break
        can0, can1 = new0, new1
        if not np.all(can0 | can1):
            break
    return can0, can1


def prepare(graph: FactorGraph) -> _Factors:
    """The graph's arrays the propagation reads, made once for many label sets:
    `contradicts(prepare(graph), labels)`."""
    return _Factors(graph)


def contradicts(graph: FactorGraph | _Factors, labels: dict[int, bool]) -> bool:
    """Whether the hard constraints prove the labels have probability 0."""
    can0, can1 = propagate(graph, labels)
    return not bool(np.all(can0 | can1))


def conflicting_labels(graph: FactorGraph, labels: dict[int, bool]) -> dict[int, bool] | None:
    """A minimal set of the labels that the hard constraints prove contradictory, or None.

    Minimal by a deletion filter: dropping any one of the returned labels
    makes the rest consistent as far as propagation can tell.
    """
    f = _Factors(graph)
    if not contradicts(f, labels):
        return None
    core = dict(labels)
    for v in list(core):
        trial = {k: t for k, t in core.items() if k != v}
        if contradicts(f, trial):
            core = trial
    return core


__all__ = ["propagate", "contradicts", "conflicting_labels", "prepare"]
