"""Random factor graphs for tests (plain numpy RNG, usable from hypothesis seeds)."""

from __future__ import annotations

import numpy as np

from fastlbp.graph import AND, OR, Factor


def _probs(rng: np.random.Generator, hard: float) -> tuple[float, float]:
    def one():
        if rng.random() < hard:
            return float(rng.integers(0, 2))
        return float(rng.uniform(0.02, 0.98))
    return one(), one()


def random_factors(rng: np.random.Generator, num_vars: int, num_factors: int, max_body: int = 4,
                   hard: float = 0.2) -> list[Factor]:
    """Random loopy AND/OR factors; every variable ends up in some factor."""
    factors = []
    for _ in range(num_factors):
        head = int(rng.integers(num_vars))
        others = [v for v in range(num_vars) if v != head]
        k = int(rng.integers(0, min(max_body, len(others)) + 1))
        body = tuple(int(v) for v in rng.choice(others, size=k, replace=False)) if k else ()
        p1, p2 = _probs(rng, hard)
        kind = AND if rng.random() < 0.5 else OR
        if not body:
            p2 = p1
        factors.append(Factor(kind, head, body, p1, p2))
    covered = {f.head for f in factors} | {v for f in factors for v in f.body}
    for v in range(num_vars):
        if v not in covered:
            p = float(rng.uniform(0.05, 0.95))
            factors.append(Factor(AND, v, (), p, p))
    return factors


def random_polytree(rng: np.random.Generator, num_vars: int, max_parents: int = 3,
                    hard: float = 0.1) -> list[Factor]:
    """A Bayesian network whose skeleton is a tree: one factor per variable (head = it)."""
    parents: list[list[int]] = [[] for _ in range(num_vars)]
    order = rng.permutation(num_vars)
    for i in range(1, num_vars):
        child, other = int(order[i]), int(order[rng.integers(i)])
        # Orient the tree edge either way; keep fan-in bounded.
        if rng.random() < 0.5 and len(parents[child]) < max_parents:
            parents[child].append(other)
        else:
            parents[other].append(child)
    factors = []
    for v in range(num_vars):
        p1, p2 = _probs(rng, hard)
        if not parents[v]:
            factors.append(Factor(AND, v, (), p1, p1))
        else:
            factors.append(Factor(AND if rng.random() < 0.5 else OR, v, tuple(parents[v]), p1, p2))
    return factors


def random_labels(rng: np.random.Generator, num_vars: int, most: int = 2) -> dict[int, bool]:
    k = int(rng.integers(0, min(most, num_vars) + 1))
    return {int(v): bool(rng.integers(2)) for v in rng.choice(num_vars, size=k, replace=False)}
