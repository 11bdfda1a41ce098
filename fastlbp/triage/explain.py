"""Why an alarm has its probability: its strongest derivations under the current marginals.

    ex = explain(model, marginals, var, k=3)
    print(format_explanation(ex))
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastlbp.graph import KIND_NAMES
from fastlbp.model import Model


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


def _tuple_of_var(model: Model) -> dict[int, int]:
    cached = model.meta.get("_tuple_of_var")
    if cached is None:
        tv = np.asarray(model.meta["tuple_var"])
        kept = np.flatnonzero(tv >= 0)
        cached = dict(zip(tv[kept].tolist(), kept.tolist(), strict=True))
        model.meta["_tuple_of_var"] = cached
    return cached


def _tuple_probability(dg, tuple_var, marginals: np.ndarray, t: int) -> float:
    """P(tuple) from its variable; a tuple compressed away is a constant fact (prior 1.0)."""
    v = int(np.asarray(tuple_var)[t])
    if v >= 0:
        return float(marginals[v])
    return float(dg.priors.get(t, 1.0))


def clause_index(dg) -> dict[int, np.ndarray]:
    """{head tuple: (C_t,) int64 its clauses} of a derivation graph, built once per session.

    `explain` otherwise scans every clause head for each alarm shown.
    """
    heads = np.asarray(dg.clause_head, dtype=np.int64)
    order = np.argsort(heads, kind="stable")
    uniq, starts = np.unique(heads[order], return_index=True)
    bounds = np.append(starts, len(order))
    return {int(h): order[bounds[i]:bounds[i + 1]] for i, h in enumerate(uniq.tolist())}


def explain(model: Model, marginals: np.ndarray, var: int, k: int = 3, *,
            clauses_by_head: dict[int, np.ndarray] | None = None) -> Explanation:
    """Why `var` has its probability: its `k` strongest derivations.

    With a derivation graph (`model.meta["derivation"]`), the clauses deriving
    the tuple ranked by the current marginal of their clause variables, each
    with its rule and body tuples. Without one (a bare factor graph), the
    factors with `var` as head and their body variables, and the factors
    that use `var`.
    """
    names = model.var_names
    dg = model.meta.get("derivation")
    tuple_var = model.meta.get("tuple_var")
    clause_var = model.meta.get("clause_var")
    tuple_of_var = _tuple_of_var(model) if dg is not None and tuple_var is not None else {}
    if var in tuple_of_var:
        t = tuple_of_var[var]
        if clauses_by_head is None:
            clauses = np.flatnonzero(np.asarray(dg.clause_head) == t)
        else:
            clauses = clauses_by_head.get(t, np.zeros(0, np.int64))
        # A clause that compression merged into its head shares the head's
        # variable; one that was pruned or dropped has none (-1).
        cvars = np.asarray(clause_var)[clauses]
        p = np.where(cvars >= 0, marginals[np.maximum(cvars, 0)], -1.0)
        strongest = np.argsort(-p, kind="stable")[:k]
        ders = []
        for i in strongest.tolist():
            g = int(clauses[i])
            rule = dg.rules[int(dg.clause_rule[g])]
            body = [(dg.tuples[b], _tuple_probability(dg, tuple_var, marginals, b))
                    for b in dg.clause_body(g).tolist()]
            ders.append(Derivation(rule.name, rule.text, float(max(p[i], 0.0)), body))
        return Explanation(names[var], float(marginals[var]), ders, len(clauses), "derivation")

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
    lines = [f"      <- {name}   P = {p:.4f}" for name, p in body[:MAX_BODY_SHOWN]]
    if len(body) > MAX_BODY_SHOWN:
        lines.append(f"      ... and {len(body) - MAX_BODY_SHOWN} more")
    return lines


def format_explanation(ex: Explanation) -> str:
    """The explanation as indented lines for the terminal (no trailing newline)."""
    lines = []
    if ex.kind == "derivation":
        if not ex.derivations:
            lines.append("  why: an input tuple (no clause derives it)")
        else:
            lines.append(f"  why: strongest of {ex.total} derivation(s):")
        for d in ex.derivations:
            text = f"  {d.rule_text}" if d.rule_text else ""
            lines.append(f"    {d.rule}{text}   P(clause) = {d.probability:.4f}")
            lines += _body_lines(d.body)
    else:
        lines.append("  why: no derivation provenance in this graph; factor neighbours:")
        for d in ex.derivations:
            lines.append(f"    {d.rule} ({d.rule_text})")
            lines += _body_lines(d.body)
        for name, p in ex.used_by:
            lines.append(f"      -> used by {name}   P = {p:.4f}")
    return "\n".join(lines)

