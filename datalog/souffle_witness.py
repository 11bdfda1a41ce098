"""Witnesses of min and max aggregates, as Soufflé reads them.

    longest(x, y, l) :- l = max m : { length(x, y, m) }.

x and y are bound by nothing outside the aggregate, so they are its *witnesses*: Soufflé gives the
tuple(s) of the aggregate's body that reach the maximum. That is read as

    longest(x, y, l) :- l = max m : { length(x', y', m) }, length(x, y, m''), l = m''.

the aggregate over variables of its own (renamed apart), then its body again with the witnesses bound
and its value equal to the aggregate's: every witness that reaches it (Soufflé's evaluation keeps one
where several tie). The body's atoms are then premises of the rule's clauses, as any positive atom.
"""

from __future__ import annotations

import dataclasses

from datalog.souffle_ast import Aggregate, Atom, Comparison, Functor, Record, Rule, Var, term_vars


def _lit_vars(lit) -> set[str]:
    terms = lit.args if isinstance(lit, Atom) else (lit.left, lit.right)
    return {v.name for t in terms for v in term_vars(t)}


def _rename(t, names: dict[str, str]):
    if isinstance(t, Var):
        return dataclasses.replace(t, name=names.get(t.name, t.name))
    if isinstance(t, Functor | Record) and t.args:
        return dataclasses.replace(t, args=tuple(_rename(a, names) for a in t.args))
    if isinstance(t, Aggregate):
        return dataclasses.replace(t, target=None if t.target is None else _rename(t.target, names),
                                   body=tuple(_rename_lit(x, names) for x in t.body))
    return t


def _rename_lit(lit, names):
    if isinstance(lit, Atom):
        return dataclasses.replace(lit, args=tuple(_rename(a, names) for a in lit.args))
    return dataclasses.replace(lit, left=_rename(lit.left, names), right=_rename(lit.right, names))


def with_witnesses(rule: Rule) -> Rule:
    """The rule with each min/max aggregate's witnesses bound (see the module docstring)."""
    bound = {v.name for lit in rule.body if isinstance(lit, Atom) and not lit.negated
             for a in lit.args for v in term_vars(a)}
    for lit in rule.body:  # and the values of aggregates (`x2 = min ...`), which other aggregates may use
        if isinstance(lit, Comparison) and lit.op == "=":
            for v, g in ((lit.left, lit.right), (lit.right, lit.left)):
                if isinstance(v, Var) and isinstance(g, Aggregate):
                    bound.add(v.name)
    body = list(rule.body)
    added = []
    for k, lit in enumerate(rule.body):
        if not (isinstance(lit, Comparison) and lit.op == "="):
            continue
        for result, g in ((lit.left, lit.right), (lit.right, lit.left)):
            if not (isinstance(result, Var) and isinstance(g, Aggregate) and g.kind in ("min", "max")):
                continue
            inner = {v for x in g.body for v in _lit_vars(x)}
            if g.target is not None:
                inner |= {v.name for v in term_vars(g.target)}
            outside = {v.name for a in rule.head.args for v in term_vars(a)}
            for j, other in enumerate(rule.body):
                if j != k:
                    outside |= _lit_vars(other)
            witnesses = (inner & outside) - bound - {result.name}
            if not witnesses or any(isinstance(x, Atom) and x.negated for x in g.body):
                continue
            own = {v: f"{v}_of_{g.kind}{k}" for v in inner - bound}  # the aggregate's own, renamed apart
            body[k] = dataclasses.replace(lit, left=result, right=_rename(g, own))
            added.extend(g.body)
            added.append(Comparison("=", result, g.target, g.pos))
            break
    if not added:
        return rule
    return dataclasses.replace(rule, body=tuple(body + added))


__all__ = ["with_witnesses"]
