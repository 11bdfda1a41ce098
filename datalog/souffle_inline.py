"""`inline` relations unfolded into the rules that use them, as Soufflé does (it never computes them).

    .decl nat_pair(x: number, y: number) inline
    nat_pair(x, y) :- nat(x), nat(y).
    query(x) :- nat_pair(x, x), x < 2.          // read as: query(x) :- nat(x), nat(x), x < 2.

Without unfolding, `nat_pair` over 10,001 numbers is 10^8 tuples (Soufflé's suite, `inline_nats`);
unfolded, the derivation graph holds what Soufflé computes: `query`'s clauses have `nat` tuples for
bodies, and no `nat_pair` tuple exists. A positive atom `r(a1, ..., an)` of an inline relation r
becomes, for each rule (or fact) `r(h1, ..., hn) :- B.` of r, the body B with its variables renamed
apart, hi replaced by ai where hi is a variable seen first and ai a variable or a constant, and `ai = hi`
added otherwise (a wildcard ai stands for a fresh variable); one rule per combination of r's rules.

A relation is unfolded only where that is plain: every use a positive atom whose arguments are
variables, constants, wildcards or arithmetic, no aggregate over it or in its rules, not an input or
output, and at most `MAX_UNFOLDED` rules made from one; otherwise `inline` is ignored (it changes how
Soufflé evaluates, not what), and the relation is computed as any other.
"""

from __future__ import annotations

import dataclasses
import itertools

from datalog.souffle_ast import Aggregate, Atom, Comparison, Const, Functor, Record, Rule, Var, Wildcard

MAX_UNFOLDED = 4096  # rules unfolding one rule may make


def _terms(lit):
    return lit.args if isinstance(lit, Atom) else (lit.left, lit.right)


def _has(t, kinds) -> bool:
    if isinstance(t, kinds):
        return True
    if isinstance(t, Functor | Record) and t.args:
        return any(_has(a, kinds) for a in t.args)
    return False


def _subst(t, sub: dict[str, object]):
    if isinstance(t, Var):
        return sub.get(t.name, t)
    if isinstance(t, Functor):
        return dataclasses.replace(t, args=tuple(_subst(a, sub) for a in t.args))
    if isinstance(t, Record) and t.args:
        return dataclasses.replace(t, args=tuple(_subst(a, sub) for a in t.args))
    return t


def _subst_lit(lit, sub):
    if isinstance(lit, Atom):
        return dataclasses.replace(lit, args=tuple(_subst(a, sub) for a in lit.args))
    return dataclasses.replace(lit, left=_subst(lit.left, sub), right=_subst(lit.right, sub))


def _vars(t, out: set[str]) -> None:
    if isinstance(t, Var):
        out.add(t.name)
    elif isinstance(t, Functor | Record) and t.args:
        for a in t.args:
            _vars(a, out)


def unfoldable(inline: set[str], rules: list[Rule], facts: list, inputs, outputs) -> set[str]:
    """The inline relations that can be unfolded (see the module docstring)."""
    ok = set(inline) - set(inputs) - set(outputs)
    for rule in rules:
        terms = list(rule.head.args) + [t for lit in rule.body for t in _terms(lit)]
        if rule.head.relation in ok and (any(_has(t, Aggregate) for t in terms)):
            ok.discard(rule.head.relation)
        for lit in rule.body:
            if isinstance(lit, Atom) and lit.relation in ok and (
                    lit.negated or any(_has(a, (Record, Aggregate)) for a in lit.args)):
                ok.discard(lit.relation)
        for t in terms:  # an inline relation inside an aggregate's body
            stack = [t]
            while stack:
                x = stack.pop()
                if isinstance(x, Aggregate):
                    for lit in x.body:
                        if isinstance(lit, Atom):
                            ok.discard(lit.relation)
                        stack.extend(_terms(lit))
                elif isinstance(x, Functor | Record) and x.args:
                    stack.extend(x.args)
    recursive = {r.head.relation for r in rules
                 if any(isinstance(lit, Atom) and lit.relation == r.head.relation for lit in r.body)}
    return ok - recursive


def unfold(rules: list[Rule], facts: list, relations: set[str]) -> tuple[list[Rule], list]:
    """`rules` with every atom of `relations` unfolded, those relations' rules and facts dropped; rules
    renumbered in order."""
    if not relations:
        return rules, facts
    definitions: dict[str, list[tuple[tuple, tuple]]] = {r: [] for r in relations}  # (head args, body)
    for f in facts:
        if f.atom.relation in relations:
            definitions[f.atom.relation].append((f.atom.args, ()))
    for rule in rules:
        if rule.head.relation in relations:
            definitions[rule.head.relation].append((rule.head.args, rule.body))
    counter = itertools.count()
    out: list[Rule] = []
    todo = [r for r in rules if r.head.relation not in relations]
    for rule in todo:
        bodies = [list(rule.body)]
        for _ in range(64):  # an inline relation's rules may use another inline relation
            if not any(isinstance(x, Atom) and x.relation in relations for b in bodies for x in b):
                break
            unfolded: list[list] = []
            for b in bodies:  # stopped as soon as there are too many (not after the whole product)
                unfolded.extend(_unfold_first(b, definitions, relations, counter))
                if len(unfolded) > MAX_UNFOLDED:
                    return rules, facts  # too many: compute the relations instead
            bodies = unfolded
        out.extend(dataclasses.replace(rule, body=tuple(b)) for b in bodies)
    return ([dataclasses.replace(r, index=k) for k, r in enumerate(out)],
            [f for f in facts if f.atom.relation not in relations])


def _unfold_first(body: list, definitions, relations: set[str], counter) -> list[list]:
    k = next((i for i, x in enumerate(body) if isinstance(x, Atom) and x.relation in relations), None)
    if k is None:
        return [body]
    use = body[k]
    out = []
    for head_args, inner in definitions[use.relation]:
        n = next(counter)
        names: set[str] = set()
        for t in list(head_args) + [t for lit in inner for t in _terms(lit)]:
            _vars(t, names)
        fresh = {v: Var(f"{v}_inline{n}", use.pos) for v in names}
        head = [_subst(h, fresh) for h in head_args]
        lits = [_subst_lit(lit, fresh) for lit in inner]
        sub: dict[str, object] = {}
        equal: list = []
        for h, a in zip(head, use.args, strict=True):
            if isinstance(a, Wildcard):
                a = Var(f"_any_inline{next(counter)}", a.pos)
            if isinstance(h, Var) and h.name not in sub and isinstance(a, Var | Const):
                sub[h.name] = a
            else:
                equal.append((h, a))
        lits = [_subst_lit(lit, sub) for lit in lits]
        equal = [Comparison("=", a, _subst(h, sub), use.pos) for h, a in equal]
        out.append(body[:k] + lits + equal + body[k + 1:])
    return out


__all__ = ["unfold", "unfoldable", "MAX_UNFOLDED"]
