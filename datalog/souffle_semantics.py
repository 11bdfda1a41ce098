"""The static semantics of a rule of the Soufflé subset: declared relations, arities, types, safety.

Types: every term has one primitive type (number or symbol); a variable takes it from the attributes
and operators it meets, and must keep it. Safety (as Soufflé's groundedness): a variable of the head,
a negation, a comparison, a functor or an aggregate's target is bound by a positive atom (directly, as
an argument), or by `x = t` with every variable of `t` bound. An aggregate's body is a scope of its
own: what it binds stays inside it; what it shares with the rule must be bound outside it.
"""

from __future__ import annotations

from datalog.souffle_ast import (
    NUMBER,
    ORDER,
    SYMBOL,
    Aggregate,
    Atom,
    Comparison,
    Const,
    Functor,
    Pos,
    Record,
    Rule,
    Var,
    Wildcard,
    pattern_vars,
    term_vars,
)

_SYMBOL_RESULT = {"cat", "to_string", "substr"}
# functor -> argument types (None: as many as given, all of the result's type)
_ARG_TYPES = {"cat": None, "strlen": (SYMBOL,), "substr": (SYMBOL, NUMBER, NUMBER), "ord": (SYMBOL,),
              "to_number": (SYMBOL,), "to_string": (NUMBER,), "match": (SYMBOL, SYMBOL),
              "contains": (SYMBOL, SYMBOL)}


def result_type(term: Functor) -> str:
    return SYMBOL if term.op in _SYMBOL_RESULT else NUMBER


class RuleChecker:
    """Checks one rule; `check_atom(atom)` returns the atom's Decl (raising for an undeclared relation or
    a wrong arity), `err(pos, message)` makes the error."""

    def __init__(self, rule: Rule, check_atom, err, records: dict | None = None):
        self.rule, self.check_atom, self.err = rule, check_atom, err
        self.records = records or {}
        self.types: dict[str, tuple[str, Pos]] = {}

    def set_type(self, v: Var, ty: str, what: str) -> None:
        known = self.types.get(v.name)
        if known is None:
            self.types[v.name] = (ty, v.pos)
        elif known[0] != ty:
            raise self.err(v.pos, f"variable {v.name!r} is a {ty} here ({what}) but a {known[0]} at line "
                           f"{known[1].line}, column {known[1].column}")

    def type_of(self, t) -> str | None:
        if isinstance(t, Const):
            return t.type
        if isinstance(t, Var):
            known = self.types.get(t.name)
            return known[0] if known else None
        if isinstance(t, Functor):
            if t.op in ("min", "max"):
                return next((x for x in map(self.type_of, t.args) if x), None)
            return result_type(t)
        if isinstance(t, Aggregate):
            return NUMBER
        return None

    def expect(self, t, ty: str, what: str) -> None:
        """Term `t` must be of type `ty` (`what` says where); types its variables and functor arguments."""
        if isinstance(t, Record) or (ty in self.records and isinstance(t, Const | Functor | Aggregate)):
            if ty not in self.records:
                raise self.err(t.pos, f"a record where a {ty} is expected ({what})")
            if not isinstance(t, Record):
                raise self.err(t.pos, f"a {self.type_of(t)} where a record of type {ty!r} is expected "
                               f"({what})")
            fields = self.records[ty]
            if t.args is not None and len(t.args) != len(fields):
                raise self.err(t.pos, f"record type {ty!r} has {len(fields)} "
                               f"field{'s' if len(fields) != 1 else ''}"
                               f", got {len(t.args)}")
            given = () if t.args is None else t.args  # nil: no fields
            for a, (field, fty) in zip(given, fields if t.args is not None else (), strict=True):
                if not isinstance(a, Wildcard):
                    self.expect(a, fty, f"field {field!r} of {ty!r}")
        elif isinstance(t, Var):
            self.set_type(t, ty, what)
        elif isinstance(t, Const):
            if t.type != ty:
                raise self.err(t.pos, f"{t.type} constant where a {ty} is expected ({what})")
        elif isinstance(t, Functor):
            got = self.type_of(t) if t.op in ("min", "max") else result_type(t)
            if got is not None and got != ty:
                raise self.err(t.pos, f"{t.op!r} gives a {got} where a {ty} is expected ({what})")
            self.functor_args(t, ty)
        elif isinstance(t, Aggregate):
            if ty != NUMBER:
                raise self.err(t.pos, f"aggregate {t.kind} gives a number where a {ty} is expected ({what})")
            self.aggregate(t)

    def functor_args(self, t: Functor, ty: str | None) -> None:
        want = _ARG_TYPES.get(t.op, "same")
        if want == "same":  # arithmetic, min and max: arguments of the result's type
            if t.op not in ("min", "max"):
                ty = NUMBER
            ty = ty or next((x for x in map(self.type_of, t.args) if x), None) or NUMBER
            if ty != NUMBER and t.op not in ("min", "max"):
                raise self.err(t.pos, f"operator {t.op!r} on a {ty}")
            want = (ty,) * len(t.args)
        elif want is None:
            want = (SYMBOL,) * len(t.args)
        for a, w in zip(t.args, want, strict=True):
            if isinstance(a, Wildcard):
                raise self.err(a.pos, f"'_' as an argument of {t.op!r}")
            self.expect(a, w, f"an argument of {t.op!r}")

    def aggregate(self, g: Aggregate) -> None:
        self.body_types(g.body)
        if g.target is not None:
            self.expect(g.target, NUMBER, f"the value aggregated by {g.kind}")

    def atom_types(self, atom: Atom) -> None:
        d = self.check_atom(atom)
        for a, (attr, ty) in zip(atom.args, d.attrs, strict=True):
            if not isinstance(a, Wildcard):
                self.expect(a, ty, f"attribute {attr!r} of {atom.relation!r}")

    def body_types(self, body) -> None:
        for lit in body:
            if isinstance(lit, Atom):
                self.atom_types(lit)
        for _ in range(2):  # twice: a comparison may type a variable another one needs
            for c in (x for x in body if isinstance(x, Comparison)):
                self.comparison_types(c)

    def comparison_types(self, c: Comparison) -> None:
        for s in (c.left, c.right):
            if isinstance(s, Wildcard):
                raise self.err(s.pos, "'_' in a comparison")
        if c.op.lstrip("!") in _ARG_TYPES:  # match, contains and their negations
            self.expect(c.left, SYMBOL, f"an argument of {c.op}")
            self.expect(c.right, SYMBOL, f"an argument of {c.op}")
            return
        tys = {x for x in (self.type_of(c.left), self.type_of(c.right)) if x}
        if len(tys) > 1:
            raise self.err(c.pos, f"comparison '{c.op}' between a number and a symbol")
        if tys:
            ty = tys.pop()
            self.expect(c.left, ty, f"compared with '{c.op}'")
            self.expect(c.right, ty, f"compared with '{c.op}'")
            if ty in self.records and c.op in ORDER:
                raise self.err(c.pos, f"order comparison '{c.op}' on records")
            if ty == SYMBOL and c.op in ORDER:
                raise self.err(c.pos, f"order comparison '{c.op}' on symbols is not supported (only = and "
                               "!=)")

    # safety
    def check(self) -> None:
        rule = self.rule
        d = self.check_atom(rule.head)
        for a, (attr, ty) in zip(rule.head.args, d.attrs, strict=True):
            if isinstance(a, Wildcard):
                raise self.err(a.pos, "'_' in the head: a head argument must be a variable or a constant")
            self.expect(a, ty, f"attribute {attr!r} of {rule.head.relation!r}")
        self.body_types(rule.body)
        bound = self.scope(rule.body, set(), f"in the body of {rule.name}")
        for a in rule.head.args:
            self.need(a, bound, f"in the head of {rule.name}")

    def scope(self, body, outer: set[str], where: str) -> set[str]:
        """Checks the safety of a body (a rule's or an aggregate's) given the variables bound outside it;
        returns the variables bound in it."""
        bound = set(outer)
        for lit in body:
            if isinstance(lit, Atom) and not lit.negated:
                bound.update(v.name for a in lit.args for v in pattern_vars(a))
        comparisons = [c for c in body if isinstance(c, Comparison)]
        changed = True
        while changed:
            changed = False
            for c in comparisons:
                if c.op != "=":
                    continue
                for a, b in ((c.left, c.right), (c.right, c.left)):
                    free = [v.name for v in pattern_vars(a) if v.name not in bound]
                    if free and self.ready(b, bound):  # x = t, or [a, b] = t: a record unpacked
                        bound.update(free)
                        changed = True
        for lit in body:
            if isinstance(lit, Atom):
                for a in lit.args:
                    if lit.negated or not _is_pattern(a):
                        self.need(a, bound, f"in the negation !{lit.relation}(...)" if lit.negated else
                                  f"in an expression of {lit.relation}(...)")
            else:
                for a in (lit.left, lit.right):
                    self.need(a, bound, f"in the comparison '{lit.op}'")
        return bound

    def ready(self, t, bound: set[str]) -> bool:
        """Whether every variable of `t` (outside aggregates) is bound."""
        return not isinstance(t, Wildcard) and all(v.name in bound for v in term_vars(t))

    def need(self, t, bound: set[str], where: str) -> None:
        for v in term_vars(t):
            if v.name not in bound:
                raise self.err(v.pos, f"variable {v.name!r} is unsafe: it appears {where} but in no positive "
                               "body atom (each variable of the head, a negation, a comparison or an "
                               "expression must be bound by a positive atom)")
        for g in _aggregates_of(t):
            inner = self.scope(g.body, bound, f"in the aggregate {g.kind}")
            if g.target is not None:
                self.need(g.target, inner, f"in the value aggregated by {g.kind}")


def _is_pattern(t) -> bool:
    """A term that matches values without computing: a variable, constant, '_' or record of them."""
    if isinstance(t, Record):
        return all(map(_is_pattern, t.args or ()))
    return isinstance(t, Var | Const | Wildcard)


def _aggregates_of(t) -> list[Aggregate]:
    if isinstance(t, Aggregate):
        return [t]
    if isinstance(t, Functor) or (isinstance(t, Record) and t.args):
        return [g for a in t.args for g in _aggregates_of(a)]
    return []
