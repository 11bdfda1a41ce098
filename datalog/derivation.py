"""Derivation graphs: which grounded rule instance (clause) derived which tuple.

Stored column-wise so that graphs of 10^6 clauses load, convert and
generate at numpy speed; tuples are referred to by index into `tuples`.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

import numpy as np

DEFAULT_RULE_PROBABILITY = 0.999
DEFAULT_INPUT_PRIOR = 1.0


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str
    probability: float = DEFAULT_RULE_PROBABILITY
    text: str | None = None


@dataclasses.dataclass(eq=False)
class DerivationGraph:
    """A derivation graph (T tuples, C clauses, R rules).

    Attributes:
        tuples: (T,) tuple names, e.g. "race(1,2)".
        rules: (R,) rules; clause_rule indexes into it.
        clause_rule: (C,) int32 rule of each clause.
        clause_head: (C,) int32 head tuple of each clause.
        body_offsets: (C+1,) int64 CSR offsets into `body`.
        body: (B,) int32 body tuples, clause by clause.
        priors: {tuple index: P(true)} input tuples given a prior explicitly.
            Inputs are these tuples and every tuple that no clause derives
            (prior DEFAULT_INPUT_PRIOR). A tuple with a prior that clauses
            also derive holds from the start of the least fixpoint; in the
            network it is the OR of its clauses and an input variable
            `name@input` with that prior.
        alarms: (A,) int32 alarm tuples, in the input's order.
        labels: {tuple index: truth} known labels: evidence for every round.
        truth: {tuple index: truth} ground truth of alarms (Bingo's
            oracle_queries.txt), for simulated triage and metrics; never
            evidence.
        source: where it was read from.
        clause_lines: optional (C,) int32 source line of each clause, for
            messages.
        annotations: derivation.json's optional "locations" and "relations"
            (JSON-able, checked by `datalog.annotations`): source locations
            of tuples and descriptions of relations, for writers (SARIF);
            inference ignores them.
    """

    tuples: list[str]
    rules: list[Rule]
    clause_rule: np.ndarray
    clause_head: np.ndarray
    body_offsets: np.ndarray
    body: np.ndarray
    priors: dict[int, float] = dataclasses.field(default_factory=dict)
    alarms: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))
    labels: dict[int, bool] = dataclasses.field(default_factory=dict)
    truth: dict[int, bool] = dataclasses.field(default_factory=dict)
    source: str | None = None
    clause_lines: np.ndarray | None = None
    annotations: dict = dataclasses.field(default_factory=dict)

    @property
    def num_tuples(self) -> int:
        return len(self.tuples)

    @property
    def num_clauses(self) -> int:
        return int(self.clause_head.shape[0])

    @cached_property
    def tuple_index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tuples)}

    def clause_body(self, c: int) -> np.ndarray:
        return self.body[self.body_offsets[c] : self.body_offsets[c + 1]]


def from_clauses(clauses, *, rules: dict[str, float] | None = None, priors: dict[str, float] | None = None,
                 alarms=(), labels: dict[str, bool] | None = None, truth: dict[str, bool] | None = None,
                 tuples=(), source: str | None = None) -> DerivationGraph:
    """Builds a graph from `(rule, head, body)` name triples (small graphs: tests, examples).

    Tuples are numbered in order of first appearance (`tuples` first), rules
    in order of first use unless listed in `rules` ({name: probability}).
    """
    rules = dict(rules or {})
    names: dict[str, int] = {}
    for t in tuples:
        names.setdefault(t, len(names))
    rule_index = {r: i for i, r in enumerate(rules)}
    c_rule, c_head, body, offsets = [], [], [], [0]
    for rule, head, b in clauses:
        rule_index.setdefault(rule, len(rule_index))
        c_rule.append(rule_index[rule])
        for t in (*b, head):
            names.setdefault(t, len(names))
        c_head.append(names[head])
        body.extend(names[t] for t in b)
        offsets.append(len(body))
    for group in (priors or {}, alarms, labels or {}, truth or {}):
        for t in group:
            names.setdefault(t, len(names))
    rule_list = [Rule(r, rules.get(r, DEFAULT_RULE_PROBABILITY)) for r in rule_index]
    return DerivationGraph(
        tuples=list(names), rules=rule_list,
        clause_rule=np.array(c_rule, np.int32), clause_head=np.array(c_head, np.int32),
        body_offsets=np.array(offsets, np.int64), body=np.array(body, np.int32),
        priors={names[t]: float(p) for t, p in (priors or {}).items()},
        alarms=np.array([names[t] for t in alarms], np.int32),
        labels={names[t]: bool(v) for t, v in (labels or {}).items()},
        truth={names[t]: bool(v) for t, v in (truth or {}).items()},
        source=source,
    )


@dataclasses.dataclass(frozen=True)
class Dedup:
    """What `merge_duplicates` did.

    Attributes:
        graph: the graph without duplicates.
        duplicate_clauses: clauses merged into an identical earlier one
            (same rule, head and body set).
        duplicate_body_tuples: body entries naming a tuple twice in one clause.
        first_duplicate: index (in the input) of the first merged clause, or -1.
        kept: (C',) int64 input index of each kept clause.
    """

    graph: DerivationGraph
    duplicate_clauses: int
    duplicate_body_tuples: int
    first_duplicate: int
    kept: np.ndarray


def _sort_within(offsets: np.ndarray, body: np.ndarray) -> np.ndarray:
    """(B,) int64 the permutation of `body` that sorts each clause's entries by value (stable), clause
    by clause: clauses of one length L sorted at once as rows of an (n, L) array (27M clauses of
    hmmer: 7x faster than one argsort of clause * T + tuple over all entries)."""
    lens = np.diff(offsets)
    order = np.arange(body.size, dtype=np.int64)
    by_len = np.argsort(lens, kind="stable")
    sorted_lens = lens[by_len]
    cuts = np.flatnonzero(np.diff(sorted_lens)) + 1
    for group in np.split(by_len, cuts):
        length = int(lens[group[0]]) if group.size else 0
        if length < 2:
            continue
        step = max(1, (1 << 23) // length)  # rows at a time: temporaries of about 200 MB
        for lo in range(0, group.size, step):
            pos = offsets[group[lo:lo + step]][:, None] + np.arange(length)
            order[pos] = np.take_along_axis(pos, np.argsort(body[pos], axis=1, kind="stable"), axis=1)
    return order


def merge_duplicates(dg: DerivationGraph, seed: int = 0) -> Dedup:
    """Removes repeated body tuples within a clause, then merges identical clauses.

    Vectorised: clauses are hashed by (rule, head, body set) with two random
    64-bit weightings; equal-hash groups are compared exactly.
    """
    num_c = dg.num_clauses
    offsets = np.asarray(dg.body_offsets, np.int64)
    body = np.asarray(dg.body)
    lens = np.diff(offsets)
    order = _sort_within(offsets, body)
    sb = body[order]
    repeat = np.zeros(sb.size, bool)
    repeat[1:] = sb[1:] == sb[:-1]
    repeat[offsets[:-1][lens > 0]] = False  # a clause's first entry repeats nothing
    n_body_dups = int(repeat.sum())
    if n_body_dups:
        keep_entry = np.ones(body.size, bool)
        keep_entry[order[repeat]] = False
        body = body[keep_entry]
        owner = np.repeat(np.arange(num_c), lens)[keep_entry]
        lens = np.bincount(owner, minlength=num_c)
        offsets = np.zeros(num_c + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        sb = sb[~repeat]

    rng = np.random.default_rng(seed)
    hashes = []
    for _ in range(2):
        w = rng.integers(1, 2**63, size=dg.num_tuples + 2, dtype=np.uint64)
        with np.errstate(over="ignore"):
            cs = np.zeros(sb.size + 1, np.uint64)
            np.cumsum(w[sb], out=cs[1:])
            h = cs[offsets[1:]] - cs[offsets[:-1]]
            h = h + w[-1] * np.asarray(dg.clause_head, np.uint64) + w[-2] * (
                np.asarray(dg.clause_rule, np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        hashes.append(h)
    # One sort by the first hash; equal neighbours in both hashes are candidates, compared exactly.
    by_hash = np.argsort(hashes[0])
    h0, h1 = hashes[0][by_hash], hashes[1][by_hash]
    same_as_prev = np.zeros(num_c, bool)
    same_as_prev[1:] = (h0[1:] == h0[:-1]) & (h1[1:] == h1[:-1])
    del h0, h1, hashes
    drop = np.zeros(num_c, bool)
    if same_as_prev.any():
        def key(c):
            return (int(dg.clause_rule[c]), int(dg.clause_head[c]), sb[offsets[c]:offsets[c + 1]].tobytes())

        starts = np.flatnonzero(~same_as_prev)
        ends = np.append(starts[1:], num_c)
        for lo, hi in zip(starts[ends - starts > 1], ends[ends - starts > 1], strict=True):
            seen = set()
            for c in np.sort(by_hash[lo:hi]):  # ascending clause index: the first one is kept
                k = key(c)
                if k in seen:
                    drop[c] = True
                else:
                    seen.add(k)
    kept = np.flatnonzero(~drop)
    n_dups = int(drop.sum())
    first = int(np.flatnonzero(drop)[0]) if n_dups else -1
    if not n_dups and not n_body_dups:
        return Dedup(dg, 0, 0, -1, kept)
    keep_entry = np.repeat(~drop, lens)
    new_lens = lens[kept]
    new_offsets = np.zeros(kept.size + 1, np.int64)
    np.cumsum(new_lens, out=new_offsets[1:])
    graph = dataclasses.replace(
        dg,
        clause_rule=np.asarray(dg.clause_rule)[kept],
        clause_head=np.asarray(dg.clause_head)[kept],
        body_offsets=new_offsets,
        body=body[keep_entry].astype(np.int32),
        clause_lines=None if dg.clause_lines is None else np.asarray(dg.clause_lines)[kept],
    )
    return Dedup(graph, n_dups, n_body_dups, first, kept)
