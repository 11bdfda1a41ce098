"""Independent parts of a rule's body as premises of their own (what keeps `a(x) :- b(x), c(y), d(y).`
from being |b| x |c join d| clauses).

A rule instance is a clause whose body is its ground positive atoms, so a body made of parts that share
no variable makes the product of their instances: `query(x) :- i(x), c(_, _, _), d(_).` over 505 `c`
and 101 `d` tuples is 51,005 clauses per `i` tuple, each saying the same thing ("some c and some d
exist"). Soufflé evaluates such a part once, as an existence check. So does this: a group of body
literals that shares no variable with the head or with the rest of the body (linked by shared
variables; a wildcard of a positive atom counts as a variable of its own), and has a positive atom with
a variable or wildcard, becomes an auxiliary nullary relation `exists{c(_,_,_)}` with one rule
`exists{c(_,_,_)}() :- c(_, _, _).`, and the rule reads the auxiliary atom instead:
`query(x) :- i(x), exists{c(_,_,_)}(), exists{d(_)}().` That is a clause per `i` tuple, plus one per
`c` and per `d` tuple for the auxiliary rules, which are deterministic (probability 1 unless a
rule-probability file says otherwise): the auxiliary tuple is true exactly when one of the part's
instances is, and the rule's own probability applies once, not once per combination.

A rule with an aggregate is left as it is, so is a rule whose body has nothing besides the part (the
part is then the whole rule).
"""

from __future__ import annotations

import dataclasses

from datalog.souffle_ast import Atom, Decl, Rule, Wildcard, pattern_vars, term_vars
from datalog.souffle_rules import literal_text

AUXILIARY_PREFIX = "exists"


def _names(lit, k: int) -> set[str]:
    """The variables of literal `lit` (the k-th of its body); each wildcard of a positive atom is one of
    its own (grounding gives it a fresh variable)."""
    if isinstance(lit, Atom):
        out = {v.name for a in lit.args for v in term_vars(a) + pattern_vars(a)}
        if not lit.negated:
            out |= {f"_{k}_{j}" for j, a in enumerate(lit.args) if isinstance(a, Wildcard)}
        return out
    return {v.name for t in (lit.left, lit.right) for v in term_vars(t)}


def _parts(rule: Rule) -> list[list[int]]:
    """The independent parts of the body (indices of literals), in body order."""
    if rule.aggregates():
        return []
    head = {v.name for a in rule.head.args for v in term_vars(a)}
    names = [_names(lit, k) for k, lit in enumerate(rule.body)]
    parent = list(range(len(rule.body)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for k, vs in enumerate(names):
        for v in vs:
            if v in owner:
                parent[find(k)] = find(owner[v])
            else:
                owner[v] = k
    groups: dict[int, list[int]] = {}
    for k in range(len(rule.body)):
        groups.setdefault(find(k), []).append(k)
    positive = [isinstance(lit, Atom) and not lit.negated for lit in rule.body]
    out = []
    for members in groups.values():
        vs = set().union(*(names[k] for k in members))
        multiplies = any(positive[k] and names[k] for k in members)  # may hold for many values
        rest = any(positive[k] for k in range(len(rule.body)) if k not in members)
        if vs and not vs & head and multiplies and rest:
            out.append(members)
    return out


def project(rules: list[Rule], decls: dict[str, Decl]) -> list[Rule]:
    """`rules` with every independent part replaced by an auxiliary atom, and the auxiliary rules after
    them (numbered on from the last); `decls` gets the auxiliary relations. A part written alike in
    several rules is one auxiliary relation with one rule."""
    out = list(rules)
    made: dict[str, Rule] = {}
    for i, rule in enumerate(rules):
        parts = _parts(rule)
        if not parts:
            continue
        replaced: dict[int, Atom] = {}
        dropped: set[int] = set()
        for members in parts:
            lits = [rule.body[k] for k in members]
            name = AUXILIARY_PREFIX + "{" + ",".join(literal_text(x).replace(", ", ",") for x in lits) + "}"
            pos = lits[0].pos
            if name not in made:
                decls.setdefault(name, Decl(name, (), pos))
                made[name] = Rule(len(out), Atom(name, (), pos), tuple(lits), "", pos, auxiliary=True)
                out.append(made[name])
            replaced[members[0]] = Atom(name, (), pos)
            dropped.update(members[1:])
        body = tuple(replaced.get(k, lit) for k, lit in enumerate(rule.body) if k not in dropped)
        out[i] = dataclasses.replace(rule, body=body)
    return out


__all__ = ["project", "AUXILIARY_PREFIX"]
