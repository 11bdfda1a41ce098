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
        priors: {tuple index: P(true)} for input tuples given a prior
            explicitly; tuples that no clause derives get DEFAULT_INPUT_PRIOR.
        alarms: (A,) int32 alarm tuples, in the input's order.
        labels: {tuple index: truth} known labels.
        source: where it was read from.
        clause_lines: optional (C,) int32 source line of each clause, for
            messages.
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
    source: str | None = None
    clause_lines: np.ndarray | None = None

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
