"""Why an alarm (or any tuple) has its probability: its strongest derivations under the current marginals.

    ex = explain(model, marginals, var, k=3)
    ex = explain_name(model, marginals, "aliased(3,2)")   # any tuple of the input graph
    print(format_explanation(ex))

Derivations are ordered by how much they contribute, P(clause holds) under
the current marginals; one that holds with probability 0 is never listed
among the strongest, only counted.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastlbp.core.graph import KIND_NAMES
from fastlbp.core.model import Model
from fastlbp.core.text import format_probability, safe_name


@dataclasses.dataclass(frozen=True)
class Derivation:
    """One clause (or factor) supporting an alarm, with the current probabilities."""

    rule: str
    rule_text: str | None
    probability: float  # P(clause holds), or for a factor its head's marginal
    body: list[tuple[str, float]]  # (tuple name, P)


@dataclasses.dataclass(frozen=True)
class Explanation:
    """Why `alarm` has `probability`: its strongest derivations (and, for a factor graph, its users)."""

    alarm: str
    probability: float
    derivations: list[Derivation]
    total: int  # derivations in all (only the strongest are listed)
    kind: str  # "derivation" or "factor" (a graph without derivation provenance)
    used_by: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    zero: int = 0  # derivations that hold with probability 0 (never listed)
    dropped: int = 0  # derivations cycle elimination dropped (they depend on the tuple itself)
    note: str = ""  # what compression or cycle elimination made of a tuple without a variable
    prior: float | None = None  # a derived tuple that is also an input: its prior (`name@input`)


class _TupleP:
    """P(tuple) for every tuple of the graph, the forward pass for pruned ones computed on first need."""

    def __init__(self, model: Model, marginals: np.ndarray, all_tuples: np.ndarray | None = None):
        self.model, self.marginals = model, marginals
        self.tuple_var = np.asarray(model.meta["tuple_var"], np.int64)
        self._all: np.ndarray | None = all_tuples

    def __call__(self, t: int) -> float:
        v = int(self.tuple_var[t])
        if v >= 0:
            return float(self.marginals[v])
        if self._all is None:
            from datalog.bayesnet import tuple_marginals

            self._all = tuple_marginals(self.model, self.marginals)
        return float(self._all[t])


def clause_index(dg) -> dict[int, np.ndarray]:
    """{head tuple: (C_t,) int64 its clauses} of a derivation graph, built once per session.

    `explain` otherwise scans every clause head for each alarm shown.
    """
    heads = np.asarray(dg.clause_head, dtype=np.int64)
    order = np.argsort(heads, kind="stable")
    uniq, starts = np.unique(heads[order], return_index=True)
    bounds = np.append(starts, len(order))
    return {int(h): order[bounds[i]:bounds[i + 1]] for i, h in enumerate(uniq.tolist())}


def _explain_tuple(model: Model, marginals: np.ndarray, t: int, k: int,
                   clauses_by_head: dict[int, np.ndarray] | None,
                   tuple_p: np.ndarray | None = None) -> Explanation:
    """The derivations of tuple `t`, strongest first: ordered by P(clause holds) under the marginals.

    P(clause) is its variable's marginal (a clause merged into its head is the
    head's variable, X_t = X_g, so the head's); for a pruned tuple's clauses it
    is the forward probability, rule x product of its body's P. Clauses that
    hold with probability 0 (a label ruled them out) are counted, never
    listed; clauses cycle elimination dropped are counted apart.
    """
    dg = model.meta["derivation"]
    tuple_p = _TupleP(model, marginals, tuple_p)
    if clauses_by_head is None:
        clauses = np.flatnonzero(np.asarray(dg.clause_head) == t)
    else:
        clauses = clauses_by_head.get(t, np.zeros(0, np.int64))
    kept = np.asarray(model.meta["stages"].clause_kept)[clauses] if "stages" in model.meta else (
        np.ones(clauses.size, bool))
    cvars = np.asarray(model.meta["clause_var"])[clauses]
    p = np.zeros(clauses.size)
    for i in range(clauses.size):
        if cvars[i] >= 0:
            p[i] = marginals[cvars[i]]
        elif kept[i]:
            g = int(clauses[i])
            p[i] = dg.rules[int(dg.clause_rule[g])].probability * float(
                np.prod([tuple_p(b) for b in dg.clause_body(g).tolist()]))
    live = np.flatnonzero(kept & (p > 0))
    strongest = live[np.argsort(-p[live], kind="stable")[:k]]
    ders = []
    for i in strongest.tolist():
        g = int(clauses[i])
        rule = dg.rules[int(dg.clause_rule[g])]
        body = [(dg.tuples[b], tuple_p(b)) for b in dg.clause_body(g).tolist()]
        ders.append(Derivation(rule.name, rule.text, float(p[i]), body))
    r = model.resolve(dg.tuples[t])
    note = "" if r.var >= 0 else r.reason
    return Explanation(dg.tuples[t], tuple_p(t), ders, len(clauses), "derivation",
                       zero=int(np.count_nonzero(kept & (p <= 0))), dropped=int(np.count_nonzero(~kept)),
                       note=note, prior=dg.priors.get(t) if clauses.size else None)


def explain_name(model: Model, marginals: np.ndarray, name: str, k: int = 3, *,
                 clauses_by_head: dict[int, np.ndarray] | None = None,
                 tuple_p: np.ndarray | None = None) -> Explanation:
    """`explain` of any tuple of the input graph (or variable) by name, with or without a variable.

    Raises:
        KeyError: an unknown name.
    """
    r = model.resolve(name)
    if r.tuple >= 0 and "derivation" in model.meta and "tuple_var" in model.meta:
        return _explain_tuple(model, marginals, r.tuple, k, clauses_by_head, tuple_p)
    return explain(model, marginals, r.var, k, clauses_by_head=clauses_by_head, tuple_p=tuple_p)


def explain(model: Model, marginals: np.ndarray, var: int, k: int = 3, *,
            clauses_by_head: dict[int, np.ndarray] | None = None,
            tuple_p: np.ndarray | None = None) -> Explanation:
    """Why `var` has its probability: its `k` strongest derivations.

    With a derivation graph (`model.meta["derivation"]`), the clauses deriving
    the tuple, strongest first by P(clause holds) (`_explain_tuple`), each
    with its rule and body tuples. Without one (a bare factor graph), the
    factors with `var` as head and their body variables, and the factors
    that use `var`. `tuple_p`: (T,) P of every tuple (`datalog.bayesnet.tuple_marginals` of these
    marginals), when many tuples are explained: else computed per call where a pruned tuple needs it.
    """
    names = model.var_names
    dg = model.meta.get("derivation")
    t = model.tuple_index.get(names[var], -1) if dg is not None and "tuple_var" in model.meta else -1
    if t >= 0:
        return _explain_tuple(model, marginals, t, k, clauses_by_head, tuple_p)

    g = model.graph
    off = np.asarray(g.factor_offsets)
    ev = np.asarray(g.edge_var)
    heads = np.asarray(g.factor_head)
    kinds = np.asarray(g.factor_kind)
    own = np.flatnonzero(heads == var)
    ders = []
    for a in own[:k].tolist():
        body = [(names[v], float(marginals[v])) for v in ev[off[a] + 1: off[a + 1]].tolist()]
        text = f"p1={float(np.asarray(g.p1)[a]):g}, p2={float(np.asarray(g.p2)[a]):g}"
        ders.append(Derivation(f"{KIND_NAMES[int(kinds[a])]} factor {a}", text,
                               float(marginals[var]), body))
    in_body = np.asarray(g.edge_factor)[(ev == var) & ~np.asarray(g.edge_is_head)]
    used = [(names[int(heads[a])], float(marginals[int(heads[a])])) for a in in_body[:k].tolist()]
    return Explanation(names[var], float(marginals[var]), ders, len(own), "factor", used)


MAX_BODY_SHOWN = 8


def _body_lines(body: list[tuple[str, float]]) -> list[str]:
    """One line per body tuple, at most `MAX_BODY_SHOWN` (a clause can have dozens)."""
    lines = [f"      <- {safe_name(name)}   P = {format_probability(p)}" for name, p in body[:MAX_BODY_SHOWN]]
    if len(body) > MAX_BODY_SHOWN:
        lines.append(f"      ... and {len(body) - MAX_BODY_SHOWN} more")
    return lines


def _derivation_header(ex: Explanation) -> str:
    """`why: strongest of 5 derivation(s) (2 hold with P = 0; 1 dropped by cycle elimination):`."""
    live = ex.total - ex.zero - ex.dropped
    extra = []
    if ex.zero:
        extra.append(f"{ex.zero} hold{'s' if ex.zero == 1 else ''} with P = 0")
    if ex.dropped:
        extra.append(f"{ex.dropped} dropped by cycle elimination")
    more = f" ({'; '.join(extra)})" if extra else ""
    if not ex.total:
        return "  why: an input tuple (no clause derives it)"
    if not live:
        return f"  why: none of its {ex.total} derivation(s) can hold{more}"
    return f"  why: strongest of {live} derivation(s) that can hold{more}:"


def format_explanation(ex: Explanation) -> str:
    """The explanation as indented lines for the terminal (no trailing newline); every name and rule
    text from the graph through `safe_name`, so none can break a line or drive the terminal."""
    lines = []
    if ex.note:
        lines.append(f"  {safe_name(ex.alarm)}: {safe_name(ex.note)}")
    if ex.kind == "derivation":
        lines.append(_derivation_header(ex))
        if ex.prior is not None:
            lines.append(f"    (also an input tuple with prior {format_probability(ex.prior)})")
        for d in ex.derivations:
            text = f"  {safe_name(d.rule_text)}" if d.rule_text else ""
            lines.append(f"    {safe_name(d.rule)}{text}   P(clause) = {format_probability(d.probability)}")
            lines += _body_lines(d.body)
    else:
        lines.append("  why: no derivation provenance in this graph; factor neighbours:")
        for d in ex.derivations:
            lines.append(f"    {safe_name(d.rule)} ({safe_name(d.rule_text)})")
            lines += _body_lines(d.body)
        for name, p in ex.used_by:
            lines.append(f"      -> used by {safe_name(name)}   P = {format_probability(p)}")
    return "\n".join(lines)
