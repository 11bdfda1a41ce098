"""Host planning of the bit-packed sampler: the network's topological levels and their dense groups.

A factor graph is a Bayesian network when every variable is the head of at
most one factor and the head-to-body dependencies have no cycle (the models
`datalog.bayesnet.to_model` builds after cycle elimination). Then variable x
with factor (kind, body, p1, p2) is

    x = cond ? coin(p1) : coin(p2)     cond = AND / OR of the body

with independent coins, and a variable that heads no factor is a fair coin
(the product of the factors gives both of its values the same weight). The
plan renumbers the variables in topological order so that every group of a
level writes one contiguous block of the state, and groups each level's
variables by (factor kind, body width rounded up to a power of two, which
coins they need), so a group is one dense gather `(n, w)` of state rows and a
bitwise reduction over `w`; padding slots read a constant row (all ones for
AND, all zeros for OR).

Coins are built from random words by the binary expansion of p (see
`fastlbp.engines.sampling_coins`); the plan holds each coin's digits as bits.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastlbp.core.errors import InputError
from fastlbp.core.graph import AND, FactorGraph
from fastlbp.engines.sampling_coins import digit_bits

# Digits of p's binary expansion a coin uses. A float64 p in [2^-12, 1) has at most 64 binary digits
# after the point (53 significant bits starting at most 12 places in), so its coin is exact; a smaller
# p is truncated after 64 digits, which lowers P(coin) by less than 2^-64 = 5.4e-20 (absolute).
MAX_DIGITS = 64
ONES_ROW = 0  # state row that is all ones (AND padding)
ZEROS_ROW = 1  # state row that is all zeros (OR padding)
FIRST_ROW = 2
ZERO_COIN = 0  # coin row that is all zeros (p = 0)
ONE_COIN = 1  # coin row that is all ones (p = 1)
FIRST_COIN = 2
# Coins are computed in buckets by the number of random-word pairs (two digits per Threefry call)
# their expansion may need, so p = 1/2 (one digit) does not pay for more. Past the head
# (`sampling_coins.HEAD_DIGITS`, 12 digits) a word is finished only while it has undecided bits, so
# one bucket serves every p of more than 8 digits (0.999 and 0.9 have 53).
PAIR_BUCKETS = (1, 2, 4, 32)


class NotABayesNet(InputError):
    """The factor graph is not a DAG of one factor per head, so it cannot be sampled ancestrally."""

    def __init__(self, message: str):
        super().__init__(None, None, message)


@dataclasses.dataclass(frozen=True)
class Group:
    """Variables of one level sharing a factor kind, a padded body width and their coins' needs.

    Attributes:
        kind: AND or OR.
        start: first state row the group writes; it writes rows start:start+n.
        rows: (n, w) int32 state rows of the body (padding: ONES_ROW / ZEROS_ROW); w may be 0.
        coin1, coin2: (n,) int32 rows of the coin words of p1 / p2 (ZERO_COIN, ONE_COIN for hard p).
    """

    kind: int
    start: int
    rows: np.ndarray
    coin1: np.ndarray
    coin2: np.ndarray

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])


@dataclasses.dataclass(frozen=True)
class CoinBucket:
    """Soft coins whose expansions need at most the same number of random-word pairs.

    Attributes:
        pairs: digit pairs of the bucket (2 pairs >= every need).
        bits: (2, n) uint32 binary digits 1-64 of each p, digit 1 in bit 31 of word 0 (zeros past a
            p's last nonzero digit, which leave the coin exact).
        ids: (n,) uint32 coin identifiers (2 v for p1 of variable v, 2 v + 1 for p2), the counters
            of their random words; coin rows follow bucket by bucket from FIRST_COIN.
        need: (n,) int32 position of each p's last nonzero digit (`digits_needed`).
    """

    pairs: int
    bits: np.ndarray
    ids: np.ndarray
    need: np.ndarray


@dataclasses.dataclass(frozen=True)
class SamplerPlan:
    """What the device program needs, built once per graph.

    Attributes:
        num_vars: V.
        order: (V,) int64 original variable of state row FIRST_ROW + i.
        row_of: (V,) int64 state row of each original variable.
        levels: the groups of each topological level, in order.
        edges: state rows read or written per world word (padding included), for throughput figures.
        buckets: the soft coins, by the number of random words they need.
        kind: (V,) int64 factor kind of each variable (AND for one without a factor).
        p1, p2: (V,) float64 P(x=1 | cond), P(x=1 | not cond) (an empty OR body: p1 = p2).
        body_offsets: (V+1,) int64 CSR offsets of each variable's body in `body_var`.
        body_var: (B,) int64 body variables, factor by factor.
        children: (V,) int64 body entries that read each variable (its children, with repeats).
    """

    num_vars: int
    order: np.ndarray
    row_of: np.ndarray
    levels: list[list[Group]]
    edges: int
    buckets: list[CoinBucket]
    kind: np.ndarray
    p1: np.ndarray
    p2: np.ndarray
    body_offsets: np.ndarray
    body_var: np.ndarray
    children: np.ndarray

    @property
    def coins(self) -> int:
        return sum(int(b.ids.size) for b in self.buckets)

    @property
    def num_rows(self) -> int:
        return self.num_vars + FIRST_ROW


def digits(p: np.ndarray, count: int) -> np.ndarray:
    """(count, n) bool: the first `count` binary digits of each p in [0, 1) (exact in float64)."""
    x = np.asarray(p, np.float64).copy()
    out = np.zeros((count, x.size), bool)
    for k in range(count):
        x *= 2.0  # doubling and subtracting 1 are exact in float64
        out[k] = x >= 1.0
        x -= out[k]
    return out


def digits_needed(p: np.ndarray) -> np.ndarray:
    """(n,) int: position of the last nonzero binary digit of each p (0 for p in {0, 1}), capped."""
    p = np.asarray(p, np.float64)
    soft = (p > 0) & (p < 1)
    mant, exp = np.frexp(np.where(soft, p, 0.5))  # p = mant 2^exp, mant in [0.5, 1)
    m = (mant * 2.0**53).astype(np.int64)  # 53-bit integer mantissa: p = m 2^(exp - 53)
    trailing = np.zeros(p.size, np.int64)
    mm = m.copy()
    for _ in range(53):
        even = (mm & 1) == 0
        if not even[soft].any():
            break
        trailing += even
        mm = np.where(even, mm >> 1, mm)
    need = 53 - exp - trailing  # the last 1 sits at 2^-(53 - exp - trailing)
    return np.where(soft, np.minimum(need, MAX_DIGITS), 0)


def _head_factor(graph: FactorGraph, names) -> np.ndarray:
    """(V,) the factor whose head each variable is, -1 if none; raises on two or more."""
    v = graph.num_vars
    heads = np.asarray(graph.factor_head, np.int64)
    count = np.bincount(heads, minlength=v)
    if (count > 1).any():
        bad = int(np.flatnonzero(count > 1)[0])
        raise NotABayesNet(f"method='sample' needs a Bayesian network (one factor per head, no cycle), "
                           f"but variable {names(bad)} is the head of {int(count[bad])} factors "
                           f"({int(np.count_nonzero(count > 1))} such variables); use --method exact or lbp")
    out = np.full(v, -1, np.int64)
    out[heads] = np.arange(heads.size)
    return out


def _levels(num_vars, body_offsets, body_var, names) -> np.ndarray:
    """(V,) topological level of each variable (0: no body); raises on a cycle."""
    size = np.diff(body_offsets)  # (V,) body entries of each variable's factor
    owner = np.repeat(np.arange(num_vars), size)  # (B,) head of each body entry
    by_body = np.argsort(body_var, kind="stable")  # body entries grouped by the variable they read
    body_start = np.searchsorted(body_var[by_body], np.arange(num_vars + 1))
    waiting = size.copy()
    level = np.full(num_vars, -1, np.int64)
    frontier = np.flatnonzero(waiting == 0)
    depth = 0
    while frontier.size:
        level[frontier] = depth
        starts, ends = body_start[frontier], body_start[frontier + 1]
        lens = ends - starts
        entries = by_body[np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())]
        heads = owner[entries]
        np.subtract.at(waiting, heads, 1)
        frontier = np.unique(heads[waiting[heads] == 0])
        depth += 1
    if (level < 0).any():
        bad = int(np.flatnonzero(level < 0)[0])
        raise NotABayesNet(f"method='sample' needs a Bayesian network (one factor per head, no cycle), "
                           f"but variable {names(bad)} is on or after a cycle of factors "
                           f"({int(np.count_nonzero(level < 0))} such variables); use --method exact or lbp "
                           "(derivation graphs are sampled after cycle elimination)")
    return level


def width_classes(size: np.ndarray, widths: tuple[int, ...] | None = None) -> np.ndarray:
    """(n,) padded body width of each body size: the smallest of `widths` (ascending) that holds it.

    Args:
        size: (n,) int body sizes.
        widths: padded widths; None or past the last one: the next power of two (a body of 0 stays 0).
    """
    size = np.asarray(size, np.int64)
    out = np.where(size == 0, 0, np.left_shift(1, np.ceil(np.log2(np.maximum(size, 1))).astype(np.int64)))
    if widths:
        w = np.asarray(sorted(widths), np.int64)
        pick = np.searchsorted(w, size)
        fits = (size > 0) & (pick < w.size)
        out = np.where(fits, w[np.minimum(pick, w.size - 1)], out)
    return out


def build(graph: FactorGraph, var_names=None, widths: tuple[int, ...] | None = None) -> SamplerPlan:
    """The sampling plan of `graph` (host, numpy; once per graph).

    Args:
        graph: the factor graph.
        var_names: names for error messages (index -> name); default the indices.
        widths: padded body widths of the groups (`width_classes`; default powers of two).

    Raises:
        NotABayesNet: a variable heads several factors, or the factors have a cycle.
    """
    def names(v):
        return repr(var_names[v]) if var_names is not None else str(v)

    g = graph.to_numpy()
    nv = graph.num_vars
    fo = np.asarray(g.factor_offsets, np.int64)
    ev = np.asarray(g.edge_var, np.int64)
    kind_f = np.asarray(g.factor_kind, np.int64)
    p1_f = np.asarray(g.p1, np.float64)
    p2_f = np.asarray(g.p2, np.float64)
    fac = _head_factor(graph, names)
    has = fac >= 0
    f_of = np.where(has, fac, 0)
    # Per variable: kind, p1, p2 and body (a variable without factor is a fair coin with no body).
    size = np.where(has, fo[f_of + 1] - fo[f_of] - 1, 0)
    kind = np.where(has, kind_f[f_of], AND)
    p1 = np.where(has, p1_f[f_of], 0.5)
    p2 = np.where(has, p2_f[f_of], 0.5)
    # Empty body: AND's condition holds (all of nothing), OR's does not (any of nothing).
    empty = size == 0
    p1 = np.where(empty & (kind != AND), p2, p1)
    body_offsets = np.zeros(nv + 1, np.int64)
    np.cumsum(size, out=body_offsets[1:])
    starts = fo[f_of] + 1
    body_var = ev[np.repeat(starts - body_offsets[:-1], size) + np.arange(body_offsets[-1])]
    if (body_var == np.repeat(np.arange(nv), size)).any():
        bad = int(np.repeat(np.arange(nv), size)[body_var == np.repeat(np.arange(nv), size)][0])
        raise NotABayesNet(f"method='sample' needs a Bayesian network (no cycle), but the factor of "
                           f"variable {names(bad)} has it in its own body; use --method exact or lbp")
    level = _levels(nv, body_offsets, body_var, names)

    need1 = digits_needed(p1)
    need2 = np.where(empty, 0, digits_needed(p2))
    wclass = width_classes(size, widths)
    # Level first, then the padded width: a level's rows of one width are contiguous whatever their kind
    # and coins, so the device program runs them as one step (`sampling_program`).
    key = np.stack([level, wclass, kind, need1 > 0, need2 > 0], axis=1)
    order = np.lexsort(key.T[::-1])
    row_of = np.empty(nv, np.int64)
    row_of[order] = FIRST_ROW + np.arange(nv)
    levels: list[list[Group]] = [[] for _ in range(int(level.max()) + 1 if nv else 0)]
    skey = key[order]
    cut = np.flatnonzero(np.any(skey[1:] != skey[:-1], axis=1)) + 1
    bounds = np.concatenate([[0], cut, [nv]]) if nv else np.zeros(1, np.int64)
    edges = 0
    coin_row, buckets = _coins(p1, np.where(empty, 0.0, p2), need1, need2)
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        vs = order[a:b]
        lv, w, kd = int(skey[a, 0]), int(skey[a, 1]), int(skey[a, 2])
        pad = ONES_ROW if kd == AND else ZEROS_ROW
        rows = np.full((vs.size, w), pad, np.int32)
        if w:
            n_each = size[vs]
            col = np.arange(w)[None, :]
            src = body_offsets[vs][:, None] + col
            mask = col < n_each[:, None]
            rows[mask] = row_of[body_var[src[mask]]]
        levels[lv].append(Group(kind=kd, start=int(FIRST_ROW + a), rows=rows,
                                coin1=coin_row[2 * vs].astype(np.int32),
                                coin2=coin_row[2 * vs + 1].astype(np.int32)))
        edges += vs.size * (w + 1)
    return SamplerPlan(num_vars=nv, order=order, row_of=row_of, levels=levels, edges=edges, buckets=buckets,
                       kind=kind, p1=p1, p2=np.where(empty, p1, p2), body_offsets=body_offsets,
                       body_var=body_var, children=np.bincount(body_var, minlength=nv).astype(np.int64))


def _coins(p1, p2, need1, need2) -> tuple[np.ndarray, list[CoinBucket]]:
    """(2V,) coin row of p1 / p2 of each variable (at 2v / 2v+1), and the buckets of soft coins."""
    p = np.stack([p1, p2], axis=1).reshape(-1)  # (2V,) coin 2v: p1 of v, 2v+1: p2 of v
    need = np.stack([need1, need2], axis=1).reshape(-1)
    row = np.where(p >= 1, ONE_COIN, ZERO_COIN).astype(np.int64)
    pairs = -(-need // 2)
    bucket = np.searchsorted(np.asarray(PAIR_BUCKETS), pairs)  # smallest bucket >= pairs
    buckets = []
    next_row = FIRST_COIN
    for i, size in enumerate(PAIR_BUCKETS):
        ids = np.flatnonzero((need > 0) & (bucket == i))
        if not ids.size:
            continue
        buckets.append(CoinBucket(pairs=size, bits=digit_bits(digits(p[ids], 2 * size)),
                                  ids=ids.astype(np.uint32), need=need[ids].astype(np.int32)))
        row[ids] = next_row + np.arange(ids.size)
        next_row += ids.size
    return row, buckets
