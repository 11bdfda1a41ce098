"""Factor graphs of AND/OR Horn factors as flat CSR arrays.

Every factor has a head variable x0 and a body x1..xn (n >= 0) and one of two
kinds (docs/DESIGN.md section 3):

    AND: f(x0=1) = p1 if all body true else p2
    OR:  f(x0=1) = p1 if any body true else p2

Layout. Edges (one per variable-factor pair) are numbered in *factor order*:
factor by factor, the head edge first, then the body in the order given. The
factor-to-variable messages live in this order, so a factor's edges are
contiguous and factor-side reductions are sorted segment sums. The *variable
order* sorts the same edges by (variable, factor); `var_edges` maps a slot of
the variable order to its edge (libDAI's `Neighbor.dual`), `edge_slot` is the
inverse. Variable-side reductions run over the variable order, also sorted.

A `FactorGraph` holds only arrays, so it is a pytree that jitted functions
take as an argument (never a closure constant). Sizes come from the shapes.
It is registered as one by `fastlbp.core.equations`, the first module where JAX
meets the graph (every engine imports it): this module needs only numpy, so
loading and converting graphs never start JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import jax

AND = 0
OR = 1
KIND_NAMES = {AND: "AND", OR: "OR"}


class GraphError(ValueError):
    """A factor graph that cannot be built: names the factor and the problem."""


@dataclasses.dataclass(frozen=True)
class Factor:
    """One Horn factor: `kind` is AND or OR, `head` and `body` are variable indices."""

    kind: int
    head: int
    body: tuple[int, ...]
    p1: float
    p2: float


@dataclasses.dataclass(frozen=True)
class FactorGraph:
    """Immutable CSR arrays of a factor graph (V variables, F factors, E edges).

    Attributes:
        factor_offsets: (F+1,) int32, edges of factor a are
            factor_offsets[a]:factor_offsets[a+1]; the first is the head edge.
        edge_factor: (E,) int32, factor of each edge (factor order, sorted).
        edge_var: (E,) int32, variable of each edge (factor order).
        edge_is_head: (E,) bool, whether the edge is its factor's head edge.
        var_offsets: (V+1,) int32, slots of variable v in the variable order
            are var_offsets[v]:var_offsets[v+1].
        var_edges: (E,) int32, edge index (factor order) of each slot of the
            variable order: the dual permutation.
        slot_var: (E,) int32, variable of each slot of the variable order
            (sorted).
        edge_slot: (E,) int32, inverse of `var_edges`.
        factor_kind: (F,) int32, AND (0) or OR (1).
        factor_head: (F,) int32, head variable of each factor.
        p1: (F,) float64, f(x0=1) when the body condition holds.
        p2: (F,) float64, f(x0=1) when it does not.

    How an engine sums these segments (plans, kernels) is its own layout
    (`fastlbp.core.equations.Summation`), not part of the graph.
    """

    factor_offsets: jax.Array
    edge_factor: jax.Array
    edge_var: jax.Array
    edge_is_head: jax.Array
    var_offsets: jax.Array
    var_edges: jax.Array
    slot_var: jax.Array
    edge_slot: jax.Array
    factor_kind: jax.Array
    factor_head: jax.Array
    p1: jax.Array
    p2: jax.Array

    @property
    def num_vars(self) -> int:
        return int(self.var_offsets.shape[0]) - 1

    @property
    def num_factors(self) -> int:
        return int(self.factor_offsets.shape[0]) - 1

    @property
    def num_edges(self) -> int:
        return int(self.edge_var.shape[0])

    def factors(self) -> list[Factor]:
        """The factors as a list (host side; for small graphs, tests and writers)."""
        off = np.asarray(self.factor_offsets)
        ev = np.asarray(self.edge_var)
        kind = np.asarray(self.factor_kind)
        p1 = np.asarray(self.p1)
        p2 = np.asarray(self.p2)
        return [
            Factor(int(kind[a]), int(ev[off[a]]), tuple(int(v) for v in ev[off[a] + 1 : off[a + 1]]),
                   float(p1[a]), float(p2[a]))
            for a in range(len(off) - 1)
        ]

    def to_numpy(self) -> FactorGraph:
        """The graph with every array on the host as numpy (the pytree's leaves, without JAX); fields
        left None (a lean device graph, `fastlbp.engines.loop.lean_graph`) stay None."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v if v is None else np.asarray(v) for k, v in fields.items()})


def from_factors(factors: Iterable[Factor], num_vars: int | None = None) -> FactorGraph:
    """Builds a `FactorGraph` from a sequence of `Factor`s.

    Args:
        factors: the factors, in the order that defines factor indices.
        num_vars: number of variables; defaults to 1 + the largest index used.

    Raises:
        GraphError: on any invalid factor (see `from_arrays`).
    """
    factors = list(factors)
    kinds = np.array([f.kind for f in factors], dtype=np.int64)
    heads = np.array([f.head for f in factors], dtype=np.int64)
    lens = np.array([len(f.body) for f in factors], dtype=np.int64)
    body = np.fromiter((v for f in factors for v in f.body), dtype=np.int64, count=int(lens.sum()))
    offsets = np.zeros(len(factors) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    p1 = np.array([f.p1 for f in factors], dtype=np.float64)
    p2 = np.array([f.p2 for f in factors], dtype=np.float64)
    return from_arrays(kinds, heads, offsets, body, p1, p2, num_vars=num_vars)


def from_arrays(
    kind: Sequence[int] | np.ndarray,
    head: Sequence[int] | np.ndarray,
    body_offsets: Sequence[int] | np.ndarray,
    body: Sequence[int] | np.ndarray,
    p1: Sequence[float] | np.ndarray,
    p2: Sequence[float] | np.ndarray,
    num_vars: int | None = None,
    check_coverage: bool = True,
) -> FactorGraph:
    """Builds a `FactorGraph` from columnar factor arrays (vectorised; 10^7 edges is fine).

    Args:
        kind: (F,) AND (0) or OR (1).
        head: (F,) head variable of each factor.
        body_offsets: (F+1,) CSR offsets into `body`.
        body: (B,) body variables, factor by factor.
        p1, p2: (F,) probabilities in [0, 1].
        num_vars: number of variables; defaults to 1 + the largest index used.
        check_coverage: reject variables that are in no factor.

    Returns:
        The graph with numpy arrays (jax converts them when passed to jit).

    Raises:
        GraphError: index out of range, p1/p2 outside [0, 1] or NaN, a
            variable in no factor, a factor listing a variable twice, an
            unknown kind, or inconsistent array lengths.
    """
    kind = np.asarray(kind, dtype=np.int64).reshape(-1)
    head = np.asarray(head, dtype=np.int64).reshape(-1)
    body_offsets = np.asarray(body_offsets, dtype=np.int64).reshape(-1)
    body = np.asarray(body, dtype=np.int64).reshape(-1)
    p1 = np.asarray(p1, dtype=np.float64).reshape(-1)
    p2 = np.asarray(p2, dtype=np.float64).reshape(-1)
    num_factors = kind.shape[0]
    if not (head.shape[0] == p1.shape[0] == p2.shape[0] == num_factors):
        raise GraphError("kind, head, p1 and p2 must have one entry per factor")
    if body_offsets.shape[0] != num_factors + 1 or body_offsets[0] != 0 or (
        num_factors and body_offsets[-1] != body.shape[0]
    ) or np.any(np.diff(body_offsets) < 0):
        raise GraphError("body_offsets must be CSR offsets: 0, non-decreasing, ending at len(body)")
    if num_factors == 0:
        raise GraphError("the factor graph has no factors")
    bad = np.flatnonzero((kind != AND) & (kind != OR))
    if bad.size:
        raise GraphError(f"factor {bad[0]}: unknown kind {kind[bad[0]]} (expected AND=0 or OR=1)")
    for name, p in (("p1", p1), ("p2", p2)):
        bad = np.flatnonzero(~((p >= 0.0) & (p <= 1.0)))
        if bad.size:
            raise GraphError(f"factor {bad[0]}: {name} = {p[bad[0]]} is not a probability in [0, 1]")
    # A subnormal probability (5e-321) reads as 0 on devices that flush subnormals (XLA on CPUs and
    # GPUs): a hard zero the model does not have. The smallest normal float64 keeps it soft.
    tiny = np.finfo(np.float64).tiny
    p1 = np.where((p1 > 0) & (p1 < tiny), tiny, p1)
    p2 = np.where((p2 > 0) & (p2 < tiny), tiny, p2)
    largest = max(int(head.max()), int(body.max()) if body.size else -1)
    if num_vars is None:
        num_vars = largest + 1
    lens = np.diff(body_offsets)
    body_factor = np.repeat(np.arange(num_factors), lens)
    for name, idx, owner in (("head", head, np.arange(num_factors)), ("body", body, body_factor)):
        bad = np.flatnonzero((idx < 0) | (idx >= num_vars))
        if bad.size:
            raise GraphError(
                f"factor {owner[bad[0]]}: {name} variable {idx[bad[0]]} is out of range "
                f"[0, {num_vars})"
            )

    # Factor order: per factor, head edge then body edges.
    sizes = lens + 1
    factor_offsets = np.zeros(num_factors + 1, dtype=np.int64)
    np.cumsum(sizes, out=factor_offsets[1:])
    num_edges = int(factor_offsets[-1])
    edge_factor = np.repeat(np.arange(num_factors), sizes)
    edge_is_head = np.zeros(num_edges, dtype=bool)
    edge_is_head[factor_offsets[:-1]] = True
    edge_var = np.empty(num_edges, dtype=np.int64)
    edge_var[edge_is_head] = head
    edge_var[~edge_is_head] = body

    # Variable order: stable sort by variable keeps factors ascending per variable.
    var_edges = np.argsort(edge_var, kind="stable")
    slot_var = edge_var[var_edges]
    dup = np.flatnonzero((slot_var[1:] == slot_var[:-1])
                         & (edge_factor[var_edges[1:]] == edge_factor[var_edges[:-1]]))
    if dup.size:
        a = edge_factor[var_edges[dup[0]]]
        raise GraphError(f"factor {a}: variable {slot_var[dup[0]]} appears twice")
    counts = np.bincount(edge_var, minlength=num_vars)
    if check_coverage:
        missing = np.flatnonzero(counts == 0)
        if missing.size:
            raise GraphError(
                f"variable {missing[0]} is in no factor ({missing.size} such variables)"
            )
    var_offsets = np.zeros(num_vars + 1, dtype=np.int64)
    np.cumsum(counts, out=var_offsets[1:])
    edge_slot = np.empty(num_edges, dtype=np.int64)
    edge_slot[var_edges] = np.arange(num_edges)

    i32 = np.int32
    if num_edges >= np.iinfo(i32).max:
        raise GraphError("graphs with 2^31 edges or more are not supported")
    return FactorGraph(
        factor_offsets=factor_offsets.astype(i32),
        edge_factor=edge_factor.astype(i32),
        edge_var=edge_var.astype(i32),
        edge_is_head=edge_is_head,
        var_offsets=var_offsets.astype(i32),
        var_edges=var_edges.astype(i32),
        slot_var=slot_var.astype(i32),
        edge_slot=edge_slot.astype(i32),
        factor_kind=kind.astype(i32),
        factor_head=head.astype(i32),
        p1=p1,
        p2=p2,
    )


def label_codes(num_vars: int, labels: dict[int, bool] | None = None) -> np.ndarray:
    """Hard labels as (V,) int8 codes: 1 observed true, -1 observed false, 0 unlabelled."""
    codes = np.zeros(num_vars, dtype=np.int8)
    for v, value in (labels or {}).items():
        codes[v] = 1 if value else -1
    return codes
