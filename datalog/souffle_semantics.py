"""The static semantics of a rule of the Soufflé subset: declared relations, arities, types, safety.

Types: every term has one primitive type (number, unsigned, float or symbol, or a record type); a
variable takes it from the attributes and operators it meets, and must keep it. An integer literal
(`7`) is a number, an unsigned or a float where it stands for one (`A(7)` of a float attribute), and
an operator computes in the type of its arguments (`x + 1` of unsigned x is unsigned; `"a" + s` is
`cat`), as in Soufflé; `check` returns the rule with each such constant and operator typed (`Const.kind`,
`Functor.ty`) for the translation. Safety (as Soufflé's groundedness): a variable of the head,
a negation, a comparison, a functor or an aggregate's target is bound by a positive atom (directly, as
an argument), or by `x = t` with every variable of `t` bound. An aggregate's body is a scope of its
own: what it binds stays inside it; what it shares with the rule must be bound outside it.
"""

from __future__ import annotations

import dataclasses

from datalog.souffle_ast import (
    FLOAT,
    INT_MAX,
    INT_MIN,
    NUMBER,
    NUMERIC,
    ORDER,
    SYMBOL,
    UINT_MAX,
    UNSIGNED,
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
from datalog.souffle_values import f32

_SYMBOL_RESULT = {"cat", "to_string", "substr"}
# functor -> argument types (None: as many as given, all of the result's type)
_ARG_TYPES = {"cat": None, "strlen": (SYMBOL,), "substr": (SYMBOL, NUMBER, NUMBER), "ord": (SYMBOL,),
              "to_number": (SYMBOL,), "to_string": (NUMBER,), "match": (SYMBOL, SYMBOL),
              "contains": (SYMBOL, SYMBOL)}


_ARITHMETIC = {"+", "-", "*", "/", "%", "^", "band", "bor", "bxor", "bshl", "bshr", "bshru", "land", "lor",
               "neg", "bnot", "lnot"}
_FLOAT_OPS = {"+", "-", "*", "/", "^", "neg"}  # what Soufflé computes on floats (and min, max)
# conversion -> (argument type, None: any numeric type; result type)
CONVERSIONS = {"to_float": (None, FLOAT), "to_unsigned": (None, UNSIGNED), "itof": (NUMBER, FLOAT),
               "itou": (NUMBER, UNSIGNED), "utoi": (UNSIGNED, NUMBER), "utof": (UNSIGNED, FLOAT),
               "ftoi": (FLOAT, NUMBER), "ftou": (FLOAT, UNSIGNED)}


def result_type(term: Functor) -> str:
    if term.op in CONVERSIONS:
        return CONVERSIONS[term.op][1]
    return SYMBOL if term.op in _SYMBOL_RESULT else NUMBER


def typed_const(c: Const, ty: str, err) -> Const:
    """Constant `c` where a `ty` is expected, typed (an integer literal as an unsigned or a float), or the
    error `err(pos, message)` makes."""
    if c.kind is None and isinstance(c.value, int) and not isinstance(c.value, bool) and ty in NUMERIC:
        if ty == NUMBER:
            if not INT_MIN <= c.value <= INT_MAX:
                raise err(c.pos, f"number {c.value} is out of range (32-bit signed: {INT_MIN}..{INT_MAX})")
            return c
        if ty == UNSIGNED:
            if not 0 <= c.value <= UINT_MAX:
                raise err(c.pos, f"unsigned {c.value} is out of range (0..{UINT_MAX})")
            return Const(c.value, c.pos, UNSIGNED)
        return Const(f32(float(c.value)), c.pos, FLOAT)
    if c.type != ty:
        raise err(c.pos, f"{c.type} constant where a {ty} is expected")
    return c


class RuleChecker:
    """Checks one rule; `check_atom(atom)` returns the atom's Decl (raising for an undeclared relation or
    a wrong arity), `err(pos, message)` makes the error."""

    def __init__(self, rule: Rule, check_atom, err, records: dict | None = None, resolve_type=None,
                 adts: dict | None = None, branch_type: dict | None = None):
        self.rule, self.check_atom, self.err = rule, check_atom, err
        self.records = records or {}
        self.adts = adts or {}  # ADT type -> {branch: [(field, type)]}
        self.branch_type = branch_type or {}  # branch -> its ADT type
        self.resolve_type = resolve_type  # (type name, Pos) -> its primitive or record type
        self.pending: list | None = []  # casts of variables the body has not typed yet (head first)
        self.types: dict[str, tuple[str, Pos]] = {}
        self.typed: dict[int, str] = {}  # id of a Const or Functor -> the type it was given (for `retyped`)
        self.cat: set[int] = set()  # ids of '+' on symbols (Soufflé's cat)

    def set_type(self, v: Var, ty: str, what: str) -> None:
        known = self.types.get(v.name)
        if known is None:
            self.types[v.name] = (ty, v.pos)
        elif known[0] != ty:
            raise self.err(v.pos, f"variable {v.name!r} is a {ty} here ({what}) but a {known[0]} at line "
                           f"{known[1].line}, column {known[1].column}")

    def type_of(self, t) -> str | None:
        """The type of `t` as far as known (None: not yet; an integer literal fits any numeric type)."""
        if isinstance(t, Const):
            if t.kind is None and isinstance(t.value, int):
                return self.typed.get(id(t))
            return t.type
        if isinstance(t, Var):
            known = self.types.get(t.name)
            return known[0] if known else None
        if isinstance(t, Functor):
            if t.op in CONVERSIONS or t.op in ("to_number", "to_string"):
                return result_type(t)  # (typed[] holds the argument's type)
            if id(t) in self.typed:
                return SYMBOL if id(t) in self.cat else self.typed[id(t)]
            if t.op in ("min", "max", "range") or t.op in _ARITHMETIC:
                known = [x for x in map(self.type_of, t.args) if x]
                if t.op == "+" and SYMBOL in known:
                    return SYMBOL
                return known[0] if known else None
            if t.op == "as":
                return self.cast_type(t)
            return result_type(t)
        if isinstance(t, Aggregate):
            if t.kind == "count":
                return NUMBER
            if t.kind == "mean":
                return FLOAT
            return self.type_of(t.target)
        if isinstance(t, Record) and t.branch is not None:
            return self.branch_type.get(t.branch)
        return None

    def expect(self, t, ty: str, what: str) -> None:
        """Term `t` must be of type `ty` (`what` says where); types its variables and functor arguments."""
        if (isinstance(t, Record) and t.branch is not None) or (
                ty in self.adts and isinstance(t, Const | Functor | Aggregate | Record)):
            self.adt_value(t, ty, what)
        elif isinstance(t, Record) or (ty in self.records and isinstance(t, Const | Functor | Aggregate)):
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
            if t.type != ty and not (t.kind is None and isinstance(t.value, int) and ty in NUMERIC):
                raise self.err(t.pos, f"{t.type} constant where a {ty} is expected ({what})")
            typed_const(t, ty, lambda pos, m: self.err(pos, f"{m} ({what})"))
            self.typed[id(t)] = ty
        elif isinstance(t, Functor) and t.op == "as":
            self.cast(t, ty, what)
        elif isinstance(t, Functor) and (t.op in _ARITHMETIC or t.op in ("min", "max", "range")):
            self.arithmetic(t, ty, what)
        elif isinstance(t, Functor) and (t.op in CONVERSIONS or t.op in ("to_number", "to_string")):
            self.conversion(t, ty, what)
        elif isinstance(t, Functor):
            got = result_type(t)
            if got != ty:
                raise self.err(t.pos, f"{t.op!r} gives a {got} where a {ty} is expected ({what})")
            self.functor_args(t, ty)
        elif isinstance(t, Aggregate):
            if t.kind == "count" and ty != NUMBER:
                raise self.err(t.pos, f"aggregate {t.kind} gives a number where a {ty} is expected ({what})")
            if ty not in NUMERIC:
                raise self.err(t.pos, f"aggregate {t.kind} gives a number where a {ty} is expected ({what})")
            if t.kind == "mean" and ty != FLOAT:
                raise self.err(t.pos, f"aggregate mean gives a float where a {ty} is expected ({what})")
            self.typed[id(t)] = ty
            self.aggregate(t, ty)

    def adt_value(self, t, ty: str, what: str) -> None:
        """`$Branch(args)` where a `ty` is expected: a branch of ADT `ty`, its fields of their types."""
        if not isinstance(t, Record) or t.branch is None:
            raise self.err(t.pos, f"a {self.type_of(t) or 'record'} where a value of type {ty!r} is expected "
                           f"({what})")
        owner = self.branch_type.get(t.branch)
        if owner is None:
            raise self.err(t.pos, f"no type has a branch {t.branch!r} (declare .type T = {t.branch} {{...}} "
                           "| ...)")
        if owner != ty:
            raise self.err(t.pos, f"${t.branch} is a value of type {owner!r} where a {ty} is expected "
                           f"({what})")
        fields = self.adts[owner][t.branch]
        if len(t.args) != len(fields):
            raise self.err(t.pos, f"branch {t.branch!r} of {owner!r} has {len(fields)} field"
                           f"{'s' if len(fields) != 1 else ''}, got {len(t.args)}")
        for a, (field, fty) in zip(t.args, fields, strict=True):
            if not isinstance(a, Wildcard):
                self.expect(a, fty, f"field {field!r} of ${t.branch}")

    def arithmetic(self, t: Functor, ty: str, what: str) -> None:
        """An operator, min, max or range where a `ty` is expected: computed in `ty`, its arguments too;
        '+' on symbols is cat."""
        if t.op == "+" and ty == SYMBOL:
            self.cat.add(id(t))
        elif t.op in ("min", "max"):
            if ty in self.records:
                raise self.err(t.pos, f"{t.op!r} of records")
        elif ty not in NUMERIC:
            raise self.err(t.pos, f"operator {t.op!r} on a {ty}")
        elif ty == FLOAT and t.op not in _FLOAT_OPS and t.op != "range":
            raise self.err(t.pos, f"operator {t.op!r} on a float (Soufflé's floats have + - * / ^, min, max)")
        self.typed[id(t)] = ty
        for a in t.args:
            if isinstance(a, Wildcard):
                raise self.err(a.pos, f"'_' as an argument of {t.op!r}")
            self.expect(a, ty, f"an argument of {t.op!r}")

    def conversion(self, t: Functor, ty: str, what: str) -> None:
        """to_float, to_unsigned, itof, ... and to_number, to_string (of a symbol or of any numeric type):
        `Functor.ty` records the argument's type."""
        (arg,) = t.args
        if isinstance(arg, Wildcard):
            raise self.err(arg.pos, f"'_' as an argument of {t.op!r}")
        got = result_type(t)
        if got != ty:
            raise self.err(t.pos, f"{t.op!r} gives a {got} where a {ty} is expected ({what})")
        if t.op in CONVERSIONS and CONVERSIONS[t.op][0] is not None:
            source = CONVERSIONS[t.op][0]
        else:
            source = self.type_of(arg)
            allowed = (SYMBOL,) + NUMERIC if t.op == "to_number" else NUMERIC
            if source is None:
                if self.pending is not None:
                    self.pending.append((t, ty, what))  # typed once the body has typed its variables
                    return
                source = SYMBOL if t.op == "to_number" else NUMBER
            if source not in allowed:
                raise self.err(t.pos, f"{t.op!r} of a {source}")
        self.typed[id(t)] = source
        self.expect(arg, source, f"the argument of {t.op!r}")

    def cast_type(self, t: Functor) -> str:
        """The type `as(x, T)` gives: T's primitive (or record type)."""
        if self.resolve_type is None:
            raise self.err(t.pos, "as(x, T) needs the program's types")
        return self.resolve_type(t.to, t.pos)

    def cast(self, t: Functor, ty: str, what: str) -> None:
        """`as(x, T)` where a `ty` is expected. Soufflé drops the cast after type checking (the value is
        unchanged), so it is the identity here; between types of different primitives it would read a
        value's internal bits as another type (a symbol's number in Soufflé's symbol table), which has no
        meaning outside one Soufflé run: refused."""
        to = self.cast_type(t)
        if to != ty:
            raise self.err(t.pos, f"as(..., {t.to}) gives a {to} where a {ty} is expected ({what})")
        (value,) = t.args
        if isinstance(value, Wildcard):
            raise self.err(value.pos, "'_' as the value of as(...)")
        known = self.type_of(value)
        if known is None and isinstance(value, Var) and self.pending is not None:
            self.pending.append((t, ty, what))  # checked once the body has typed the variable
            return
        if known is not None and known != to:
            raise self.err(t.pos, f"as(x, {t.to}) casts a {known} to a {to}: a cast between types of "
                           f"different primitive types is not supported (Soufflé reinterprets the value's "
                           f"internal bits); as(x, T) between types of one primitive type is")
        self.expect(value, to, f"the value cast by as(..., {t.to})")

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

    def aggregate(self, g: Aggregate, ty: str = NUMBER) -> None:
        self.body_types(g.body)
        if g.target is not None:
            self.expect(g.target, ty, f"the value aggregated by {g.kind}")

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
            a, b = sorted(tys)
            raise self.err(c.pos, f"comparison '{c.op}' between a {a} and a {b}")
        if tys:
            ty = tys.pop()
            self.expect(c.left, ty, f"compared with '{c.op}'")
            self.expect(c.right, ty, f"compared with '{c.op}'")
            if (ty in self.records or ty in self.adts) and c.op in ORDER:
                raise self.err(c.pos, f"order comparison '{c.op}' on records")
            if ty == SYMBOL and c.op in ORDER:
                raise self.err(c.pos, f"order comparison '{c.op}' on symbols is not supported (only = and "
                               "!=)")

    # safety
    def check(self) -> Rule:
        """Checks the rule; returns it with its constants and operators typed (see the module docstring)."""
        rule = self.rule
        d = self.check_atom(rule.head)
        for a, (attr, ty) in zip(rule.head.args, d.attrs, strict=True):
            if isinstance(a, Wildcard):
                raise self.err(a.pos, "'_' in the head: a head argument must be a variable or a constant")
            self.expect(a, ty, f"attribute {attr!r} of {rule.head.relation!r}")
        self.body_types(rule.body)
        pending, self.pending = self.pending, None
        for t, ty, what in pending:
            if t.op == "as":
                self.cast(t, ty, what)
            else:
                self.conversion(t, ty, what)
        self.body_types(rule.body)  # again: the head may have typed what the comparisons need
        bound = self.scope(rule.body, set(), "in the body")
        for a in rule.head.args:
            self.need(a, bound, "in the head")
        return dataclasses.replace(rule, head=self.retyped_literal(rule.head),
                                   body=tuple(self.retyped_literal(x) for x in rule.body))

    def retyped_literal(self, x):
        if isinstance(x, Atom):
            return dataclasses.replace(x, args=tuple(self.retyped(a) for a in x.args))
        return dataclasses.replace(x, left=self.retyped(x.left), right=self.retyped(x.right))

    def retyped(self, t):
        """Term `t` with the types the checker gave its constants and operators."""
        if isinstance(t, Const):
            ty = self.typed.get(id(t))
            return typed_const(t, ty, self.err) if ty is not None and ty != t.type else t
        if isinstance(t, Functor):
            args = tuple(self.retyped(a) for a in t.args)
            if id(t) in self.cat:
                return Functor("cat", args, t.pos)
            ty = self.typed.get(id(t))
            return dataclasses.replace(t, args=args, ty=None if ty == NUMBER else ty)
        if isinstance(t, Record) and t.args:
            return dataclasses.replace(t, args=tuple(self.retyped(a) for a in t.args))
        if isinstance(t, Aggregate):
            target = None if t.target is None else self.retyped(t.target)
            ty = self.typed.get(id(t))
            return dataclasses.replace(t, target=target, body=tuple(self.retyped_literal(x) for x in t.body),
                                       ty=None if ty == NUMBER else ty)
        return t

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
