"""Slow, obviously-correct references that the fast paths are tested against.

* `exact_marginals`: enumeration of all 2^V assignments (V <= ~20).
* `sequential_lbp`: plain float64 LBP in numpy/Python with the equations of
  docs/DESIGN.md section 4 written out literally, messages as normalized pairs
  (m(0), m(1)), updated one at a time in any total order of the
  factor-to-variable edges, or all from the previous state (PARALL).

Edges are numbered as in `FactorGraph`: factor by factor, head first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fastlbp.core.graph import AND, Factor


class Contradiction(ValueError):
    """The evidence has probability 0."""


def _evidence_pairs(num_vars: int, labels: dict[int, bool] | None) -> np.ndarray:
    ev = np.ones((num_vars, 2))
    for v, value in (labels or {}).items():
        ev[v] = (0.0, 1.0) if value else (1.0, 0.0)
    return ev


def exact_marginals(factors: Sequence[Factor], num_vars: int,
                    labels: dict[int, bool] | None = None,
                    soft: dict[int, float] | None = None) -> np.ndarray:
    """Exact P(x=1) for every variable by enumerating all assignments.

    `soft` {v: p}: each a unary factor, p where v holds and 1 - p where it does not.

    Returns:
        (V,) float64.

    Raises:
        Contradiction: the labels have probability 0.
    """
    if num_vars > 22:
        raise ValueError("enumeration is for graphs of at most 22 variables")
    states = ((np.arange(2**num_vars)[:, None] >> np.arange(num_vars)) & 1).astype(bool)
    weight = np.ones(2**num_vars)
    for f in factors:
        body = states[:, list(f.body)]
        if f.kind == AND:
            cond = body.all(axis=1)
        else:
            cond = body.any(axis=1)
        p_true = np.where(cond, f.p1, f.p2)
        weight *= np.where(states[:, f.head], p_true, 1.0 - p_true)
    for v, value in (labels or {}).items():
        weight *= states[:, v] == value
    for v, p in (soft or {}).items():
        weight *= np.where(states[:, v], p, 1.0 - p)
    z = weight.sum()
    if z <= 0:
        raise Contradiction("the labels have probability 0")
    return (weight[:, None] * states).sum(axis=0) / z


def log_evidence(factors: Sequence[Factor], num_vars: int, labels: dict[int, bool] | None = None) -> float:
    """log P(labels) by enumerating all assignments (-inf where the labels have probability 0)."""
    if num_vars > 22:
        raise ValueError("enumeration is for graphs of at most 22 variables")
    states = ((np.arange(2**num_vars)[:, None] >> np.arange(num_vars)) & 1).astype(bool)
    weight = np.ones(2**num_vars)
    for f in factors:
        body = states[:, list(f.body)]
        cond = body.all(axis=1) if f.kind == AND else body.any(axis=1)
        p_true = np.where(cond, f.p1, f.p2)
        weight *= np.where(states[:, f.head], p_true, 1.0 - p_true)
    for v, value in (labels or {}).items():
        weight *= states[:, v] == value
    with np.errstate(divide="ignore"):
        return float(np.log(weight.sum()))


@dataclasses.dataclass
class SequentialResult:
    marginals: np.ndarray  # (V,) float64
    messages: np.ndarray  # (E, 2) factor-to-variable (m(0), m(1)), factor order
    iterations: int
    converged: bool
    delta: float


class SequentialLBP:
    """Plain LBP on a list of factors (the test oracle; O(degree^2) per message)."""

    def __init__(self, factors: Sequence[Factor], num_vars: int):
        self.factors = list(factors)
        self.num_vars = num_vars
        self.edges: list[tuple[int, int, int]] = []  # (factor, variable, position in factor)
        for a, f in enumerate(self.factors):
            for pos, v in enumerate((f.head, *f.body)):
                self.edges.append((a, v, pos))
        self.first_edge = []
        k = 0
        for f in self.factors:
            self.first_edge.append(k)
            k += 1 + len(f.body)
        self.var_edges: list[list[int]] = [[] for _ in range(num_vars)]
        for e, (_, v, _) in enumerate(self.edges):
            self.var_edges[v].append(e)

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    def uniform(self) -> np.ndarray:
        return np.full((self.num_edges, 2), 0.5)

    def var_to_factor(self, msgs: np.ndarray, ev: np.ndarray, edge: int) -> np.ndarray:
        """Normalized message from the edge's variable to its factor."""
        _, v, _ = self.edges[edge]
        m = ev[v].copy()
        for e in self.var_edges[v]:
            if e != edge:
                m = m * msgs[e]
        s = m.sum()
        return m / s if s > 0 else np.full(2, np.nan)

    def factor_to_var(self, msgs: np.ndarray, ev: np.ndarray, edge: int) -> np.ndarray:
        """New normalized message on `edge`, literally docs/DESIGN.md section 4's table."""
        a, _, pos = self.edges[edge]
        f = self.factors[a]
        first = self.first_edge[a]
        mu = [self.var_to_factor(msgs, ev, first + i) for i in range(1 + len(f.body))]
        h = mu[0]
        p1, p2 = f.p1, f.p2
        others = [mu[i] for i in range(1, len(mu)) if i != pos]
        if f.kind == AND:
            prod = float(np.prod([m[1] for m in others])) if others else 1.0
            if pos == 0:
                m1 = p2 + (p1 - p2) * prod
                m0 = (1 - p2) + (p2 - p1) * prod
            else:
                big_a = (1 - p2) * h[0] + p2 * h[1]
                m1 = big_a + (p2 - p1) * (h[0] - h[1]) * prod
                m0 = big_a
        else:
            prod = float(np.prod([m[0] for m in others])) if others else 1.0
            if pos == 0:
                m1 = p1 + (p2 - p1) * prod
                m0 = (1 - p1) + (p1 - p2) * prod
            else:
                big_b = (1 - p1) * h[0] + p1 * h[1]
                m1 = big_b
                m0 = big_b + (p1 - p2) * (h[0] - h[1]) * prod
        # Rounding can leave -1e-17 where the exact value is 0.
        out = np.maximum(np.array([m0, m1]), 0.0)
        s = out.sum()
        return out / s if s > 0 else np.full(2, np.nan)

    def marginals(self, msgs: np.ndarray, ev: np.ndarray) -> np.ndarray:
        out = np.empty(self.num_vars)
        for v in range(self.num_vars):
            m = ev[v].copy()
            for e in self.var_edges[v]:
                m = m * msgs[e]
            s = m.sum()
            out[v] = m[1] / s if s > 0 else np.nan
        return out

    def sweep(self, msgs: np.ndarray, ev: np.ndarray, order: Sequence[int] | None) -> np.ndarray:
        """One iteration: every edge once, in `order` (None = PARALL)."""
        if order is None:
            return np.array([self.factor_to_var(msgs, ev, e) for e in range(self.num_edges)])
        msgs = msgs.copy()
        for e in order:
            msgs[e] = self.factor_to_var(msgs, ev, e)
        return msgs

    def run(self, labels: dict[int, bool] | None = None, order=None, *, tol: float = 1e-6,
            max_iters: int = 1000, messages: np.ndarray | None = None,
            damping: float = 0.0) -> SequentialResult:
        """Runs to convergence.

        Args:
            labels: hard evidence {variable: truth}.
            order: None (PARALL), a sequence of edge indices used every
                iteration, or a callable `iteration -> sequence` (e.g. SEQRND).
            tol, max_iters: as in the engine (largest marginal change).
            messages: (E, 2) warm start.
            damping: weight of the old message, applied to log-odds.
        """
        ev = _evidence_pairs(self.num_vars, labels)
        msgs = self.uniform() if messages is None else np.array(messages, dtype=np.float64)
        p = self.marginals(msgs, ev)
        delta = np.inf
        it = 0
        while it < max_iters and not delta < tol:
            seq = order(it) if callable(order) else order
            new = self.sweep(msgs, ev, seq)
            if damping:
                with np.errstate(divide="ignore", invalid="ignore"):
                    lo_new = np.log(new[:, 1]) - np.log(new[:, 0])
                    lo_old = np.log(msgs[:, 1]) - np.log(msgs[:, 0])
                    mixed = (1 - damping) * lo_new + damping * lo_old
                    lo = np.where(np.isfinite(lo_new) & np.isfinite(lo_old), mixed, lo_new)
                    p1 = 1 / (1 + np.exp(-lo))
                new = np.stack([1 - p1, p1], -1)
            msgs = new
            p_new = self.marginals(msgs, ev)
            it += 1
            if np.any(np.isnan(p_new)):
                raise Contradiction("the labels have probability 0 (messages became 0/0)")
            delta = float(np.max(np.abs(p_new - p), initial=0.0))
            p = p_new
        return SequentialResult(p, msgs, it, bool(delta < tol), delta)


def sequential_lbp(factors: Sequence[Factor], num_vars: int, labels=None, order=None,
                   **kwargs) -> SequentialResult:
    """Convenience wrapper around `SequentialLBP(factors, num_vars).run(...)`."""
    return SequentialLBP(factors, num_vars).run(labels, order, **kwargs)
