"""AND/OR factors of any fan-in as tables over at most three binary variables.

A Horn factor over k body variables is a table of 2^(k+1) entries. Exact
inference never builds it: the body's condition is computed by a chain of
deterministic auxiliary variables (docs/DESIGN.md section 3 for the factors),

    a_2 = x1 op x2,   a_i = a_{i-1} op x_i  (i = 3..k-1),   head table on (a_{k-1}, x_k, x0)

with op AND or OR, so a factor of fan-in k becomes k - 2 tables of 8 entries
(0/1 values) and one head table of 8 entries; fan-in 0 and 1 give a table of
2 and 4 entries. The auxiliary variables are numbered after the model's.
Summing them out gives back the factor exactly: each is a function of its
inputs, so exactly one of its values has weight 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fastlbp.core.graph import AND, Factor


@dataclasses.dataclass(frozen=True)
class Table:
    """A non-negative table over distinct binary variables (host side, linear probabilities).

    Attributes:
        scope: the variables, axis i of `values` is variable scope[i].
        values: (2,) * len(scope) float64.
    """

    scope: tuple[int, ...]
    values: np.ndarray


@dataclasses.dataclass(frozen=True)
class Binarized:
    """The model as small tables.

    Attributes:
        num_vars: variables of the model (0..num_vars-1).
        num_total: with the auxiliary variables (num_vars..num_total-1).
        tables: the tables; their product is the model's joint distribution.
    """

    num_vars: int
    num_total: int
    tables: list[Table]


def _op(kind: int) -> np.ndarray:
    """(2, 2) bool: the AND or OR of two bits."""
    a = np.arange(2)[:, None].astype(bool)
    b = np.arange(2)[None, :].astype(bool)
    return (a & b) if kind == AND else (a | b)


def _cpt(cond: np.ndarray, p1: float, p2: float) -> np.ndarray:
    """cond.shape + (2,) float64: P(head | cond) with P(head=1) = p1 where cond else p2."""
    p = np.where(cond, p1, p2)
    return np.stack([1.0 - p, p], axis=-1)


def table(scope: Sequence[int], values: np.ndarray) -> Table:
    """A `Table`, axes of a variable listed twice merged (their diagonal: both axes take one value)."""
    scope = tuple(int(v) for v in scope)
    if len(set(scope)) == len(scope):
        return Table(scope, np.asarray(values, np.float64))
    letters = {v: chr(ord("a") + i) for i, v in enumerate(dict.fromkeys(scope))}
    spec = "".join(letters[v] for v in scope) + "->" + "".join(letters.values())
    return Table(tuple(letters), np.einsum(spec, values).astype(np.float64))


def binarize(factors: Sequence[Factor], num_vars: int) -> Binarized:
    """Tables over at most three variables whose product is the factors' product.

    Args:
        factors: the AND/OR factors (`FactorGraph.factors()`).
        num_vars: variables of the model.
    """
    tables: list[Table] = []
    nxt = num_vars
    for f in factors:
        body = tuple(f.body)
        k = len(body)
        if k == 0:  # an empty AND holds (p1), an empty OR does not (p2)
            tables.append(table((f.head,), _cpt(np.array(f.kind == AND), f.p1, f.p2)))
            continue
        if k == 1:
            tables.append(table((body[0], f.head), _cpt(np.array([False, True]), f.p1, f.p2)))
            continue
        op = _op(f.kind)
        prev = body[0]
        for x in body[1:-1]:
            aux = nxt
            nxt += 1
            det = (np.arange(2)[None, None, :] == op[:, :, None]).astype(np.float64)
            tables.append(table((prev, x, aux), det))
            prev = aux
        tables.append(table((prev, body[-1], f.head), _cpt(op, f.p1, f.p2)))
    return Binarized(num_vars, nxt, tables)


__all__ = ["Table", "Binarized", "binarize", "table"]
