"""Body literals and terms of the Soufflé subset: arithmetic, functors, aggregates (a mixin of the parser).

Operators, loosest first (as Soufflé binds them): `lor`, `land`, `bor`, `bxor`, `band`,
`bshl bshr bshru`, `+ -`, `* / %`, `^` (power, right-associative), then unary `-`, `bnot`, `lnot`.
Functors: `min(a, b, ...)`, `max(...)`, `cat(s, ...)`, `strlen(s)`, `substr(s, i, n)`, `ord(s)`,
`to_number(s)`, `to_string(n)`, the type cast `as(x, T)`; the constraints `match(pattern, s)` and
`contains(part, s)`.
Aggregates: `count : { body }`, `sum T : { body }`, `min T : { body }`, `max T : { body }` (the braces
may hold one atom without them: `count : r(x, _)`). What they mean is `datalog.functors`'.
"""

from __future__ import annotations

from datalog.souffle_ast import (
    FLOAT,
    UINT_MAX,
    UNSIGNED,
    Aggregate,
    Comparison,
    Const,
    Functor,
    Record,
    Var,
    Wildcard,
    number_shown,
)
from datalog.souffle_values import f32

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
# Binary operators by binding strength (loosest first); each level is left-associative but '^'.
_LEVELS = (("lor",), ("land",), ("bor",), ("bxor",), ("band",), ("bshl", "bshr", "bshru"), ("+", "-"),
           ("*", "/", "%"), ("^",))
_OP_LEVEL = {op: level for level, ops in enumerate(_LEVELS) for op in ops}
_UNARY = {"-": "neg", "bnot": "bnot", "lnot": "lnot"}
# How deep an expression may nest (parentheses, functors, unary operators) and how deep its tree may be
# (a chain of binary operators is as deep as it is long): the checks and the translation recurse on terms.
MAX_EXPRESSION_DEPTH = 100
# functor name -> (least, most arguments)
FUNCTORS = {"min": (2, 99), "max": (2, 99), "cat": (1, 99), "strlen": (1, 1), "substr": (3, 3),
            "ord": (1, 1), "to_number": (1, 1), "to_string": (1, 1), "range": (2, 3), "to_float": (1, 1),
            "to_unsigned": (1, 1), "itof": (1, 1), "itou": (1, 1), "utoi": (1, 1), "utof": (1, 1),
            "ftoi": (1, 1), "ftou": (1, 1)}
CONSTRAINTS = ("match", "contains")
AGGREGATES = ("count", "sum", "min", "max", "mean")
_REFUSED_FUNCTORS = {
    "autoinc": "autoinc() is not supported (its values depend on Soufflé's evaluation order)",
}


class TermsMixin:
    """Literal and term parsing for `datalog.souffle._Parser`."""

    def _is(self, text: str, k: int = 0) -> bool:
        t = self.peek(k) if k else self.tok
        return t.kind in ("punct", "ident") and t.text == text

    def literal(self):
        t = self.tok
        if self.accept("!"):
            if self.tok.kind != "ident":
                raise self.expected("an atom after '!'")
            if self.tok.text in CONSTRAINTS and self._is("(", 1):
                c = self.literal()
                return Comparison("!" + c.op, c.left, c.right, c.pos)
            return self.atom(negated=True)
        if t.kind == "ident" and t.text in ("true", "false") and not self._is("(", 1) and \
                not (self.peek().kind == "punct" and self.peek().text in COMPARISONS):
            self.i += 1
            zero = Const(0, t.pos)
            return Comparison("=" if t.text == "true" else "!=", zero, zero, t.pos)
        if t.kind == "ident" and t.text in CONSTRAINTS and self._is("(", 1):
            self.i += 2
            left = self.term()
            self.expect(",", f"',' between the arguments of {t.text}")
            right = self.term()
            self.expect(")", f"')' after the arguments of {t.text}")
            return Comparison(t.text, left, right, t.pos)
        if t.kind == "ident" and self._is("(", 1) and t.text not in FUNCTORS and \
                t.text not in _REFUSED_FUNCTORS and t.text not in ("as", "bnot", "lnot"):
            return self.atom()
        left = self.term()
        op = self.tok
        if op.kind != "punct" or op.text not in COMPARISONS:
            raise self.expected("a comparison (= != < <= > >=) after a term, or an atom rel(...)")
        self.i += 1
        right = self.term()
        return Comparison(op.text, left, right, op.pos)

    def term(self, level: int = 0):
        """A term whose operators bind at least as tightly as `_LEVELS[level]` (precedence climbing: the
        stack grows with the nesting of parentheses and functors, not with the number of operators)."""
        self._nest(1)
        try:
            return self._climb(self.unary(), level)
        finally:
            self._nest(-1)

    def _level(self) -> int | None:
        t = self.tok
        return _OP_LEVEL.get(t.text) if t.kind in ("punct", "ident") else None

    def _climb(self, left, least: int):
        while True:
            level = self._level()
            if level is None or level < least:
                return left
            op = self.tok
            self.i += 1
            right = self.unary()
            while True:  # operators binding tighter than op (or '^' again: right-associative) take right
                nxt = self._level()
                if nxt is None or not (nxt > level or (nxt == level and self.tok.text == "^")):
                    break
                right = self._climb(right, nxt)
            left = self._made(Functor(op.text, (left, right), op.pos))

    def _nest(self, step: int) -> None:
        """Counts nested sub-expressions (parentheses, functor arguments, unary operators): each takes a
        few frames of Python's stack, so past MAX_EXPRESSION_DEPTH it is an error, not a RecursionError."""
        depth = self.__dict__.get("_nesting", 0) + step
        if depth > MAX_EXPRESSION_DEPTH:
            raise self.error(self.tok, f"the expression nests more than {MAX_EXPRESSION_DEPTH} deep "
                                       "(parentheses, functor arguments, unary operators)")
        self._nesting = depth

    def _made(self, term):
        """`term` (a Functor or Record), its depth recorded: the checks and the translation walk terms
        recursively, so a term deeper than MAX_EXPRESSION_DEPTH (a sum of 500 terms) is an error."""
        depths = self.__dict__.setdefault("_depths", {})
        args = term.args or ()
        depth = 1 + max((depths[id(a)][1] for a in args if id(a) in depths), default=0)
        depths[id(term)] = (term, depth)  # the term kept: its id is not reused while recorded
        if depth > MAX_EXPRESSION_DEPTH:
            raise self.error_at(term.pos, f"the expression is more than {MAX_EXPRESSION_DEPTH} operators "
                                "deep (a long sum or chain of operators: split it over several rules)")
        return term

    def unary(self):
        t = self.tok
        if (t.kind == "punct" and t.text == "-") or (t.kind == "ident" and t.text in ("bnot", "lnot")):
            self.i += 1
            self._nest(1)
            try:
                arg = self.unary()
            finally:
                self._nest(-1)
            if t.text == "-" and isinstance(arg, Const) and isinstance(arg.value, int) and arg.kind is None:
                return Const(self.number(-arg.value, t), t.pos)
            if t.text == "-" and isinstance(arg, Const) and isinstance(arg.value, float):
                return Const(-arg.value, t.pos, FLOAT)
            return self._made(Functor(_UNARY[t.text], (arg,), t.pos))
        return self.primary()

    def primary(self):
        t = self.tok
        if self.accept("("):
            inner = self.term()
            self.expect(")", "')' closing the parenthesis")
            return inner
        if t.kind == "number":
            self.i += 1
            return Const(self.number(t.value, t), t.pos)
        if t.kind == "adt":  # $Branch or $Branch(args): a value of an algebraic data type
            self.i += 1
            args = []
            if self.accept("("):
                if not self.accept(")"):
                    args.append(self.term())
                    while self.accept(","):
                        args.append(self.term())
                    self.expect(")", "',' or ')' closing the ADT value")
            return self._made(Record(tuple(args), t.pos, t.text[1:]))
        if t.kind == "float":
            self.i += 1
            return Const(f32(t.value), t.pos, FLOAT)
        if t.kind == "unsigned":
            self.i += 1
            if not 0 <= t.value <= UINT_MAX:
                raise self.error(t, f"unsigned constant {number_shown(t.text)} is out of range (32-bit "
                                    f"unsigned: 0..{UINT_MAX})")
            return Const(t.value, t.pos, UNSIGNED)
        if t.kind == "string":
            self.i += 1
            return Const(t.value, t.pos)
        if self.accept("["):
            args = [] if self._is("]") else [self.term()]
            while self.accept(","):
                args.append(self.term())
            self.expect("]", "',' or ']' closing the record")
            return self._made(Record(tuple(args), t.pos))
        if t.kind != "ident":
            raise self.expected("a variable, a constant, '_' or an expression")
        if t.text in AGGREGATES and (self._is(":", 1) or (t.text != "count" and not self._is("(", 1))
                                     or self._colon_after_parenthesis()):
            return self.aggregate()
        self.i += 1
        if t.text == "as" and self._is("("):
            return self.cast(t)
        if self.accept("("):
            if t.text in _REFUSED_FUNCTORS:
                raise self.error(t, _REFUSED_FUNCTORS[t.text])
            if t.text not in FUNCTORS:
                raise self.error(t, f"functor {t.text!r} is not supported (functors: "
                                    f"{', '.join(FUNCTORS)})")
            args = [] if self._is(")") else [self.term()]
            while self.accept(","):
                args.append(self.term())
            self.expect(")", "',' or ')'")
            least, most = FUNCTORS[t.text]
            if not least <= len(args) <= most:
                raise self.error(t, f"functor {t.text} takes {least}{'' if least == most else ' or more'} "
                                    f"argument{'s' if least > 1 else ''}, got {len(args)}")
            return self._made(Functor(t.text, tuple(args), t.pos))
        if t.text == "_":
            return Wildcard(t.pos)
        if t.text == "nil":
            return Record(None, t.pos)
        if self._qualified(t):
            raise self.error(self.tok, "qualified names (components) are not supported")
        return Var(t.text, t.pos)

    def cast(self, t):
        """`as(x, T)`: Soufflé's type cast, which changes the type the checker sees and never the value."""
        self.expect("(")
        value = self.term()
        self.expect(",", "',' and a type after the value of as(...)")
        ty = self.ident("a type name (as(x, T))")
        self.expect(")", "')' closing as(...)")
        return self._made(Functor("as", (value,), t.pos, ty.text))

    def _colon_after_parenthesis(self) -> bool:
        """`max (a / b) : ...`: the parenthesis after the aggregate's name closes before a ':'."""
        depth, k = 0, 1
        while True:
            t = self.peek(k)
            if t.kind in ("end", "bad"):
                return False
            if t.kind == "punct" and t.text == "(":
                depth += 1
            elif t.kind == "punct" and t.text == ")":
                depth -= 1
                if depth == 0:
                    nxt = self.peek(k + 1)
                    return nxt.kind == "punct" and nxt.text == ":"
            k += 1

    def aggregate(self):
        t = self.tok
        self.i += 1
        target = None
        if t.text != "count":
            target = self.term(len(_LEVELS) - 3)  # the target binds tighter than the aggregate's ':'
        self.expect(":", f"':' after the aggregate {t.text}")
        if self.accept("{"):
            body = self.body()
            self.expect("}", "'}' closing the aggregate's body")
        else:
            body = [self.atom()]
        return Aggregate(t.text, target, tuple(body), t.pos)


__all__ = ["TermsMixin", "FUNCTORS", "CONSTRAINTS", "AGGREGATES", "COMPARISONS", "Wildcard"]
