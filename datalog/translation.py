"""Translating a checked Soufflé program into clingo's language (what `datalog.grounding` grounds).

See `datalog.grounding`'s docstring for the scheme: facts `iN` with externals `pN`, rule markers
`k(k)`, fresh variables for `_`, negations and aggregates over the least model's copies `mN`.
Arithmetic is clingo's where it agrees with Soufflé, else a functor of `datalog.functors` (`@pow`).
"""

from __future__ import annotations

from datalog import functors, souffle, souffle_semantics
from datalog import souffle_values as values
from datalog.souffle_ast import pattern_vars


def _quote(value) -> str:
    if isinstance(value, tuple):  # an ADT value read from a facts file: (branch, fields...)
        return "(" + ",".join(map(_quote, value)) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, int):
        return str(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _atom(pred: str, args: list[str]) -> str:
    return f"{pred}({','.join(args)})" if args else pred


# Soufflé operator -> clingo's (same semantics on 32-bit numbers; see datalog.functors).
_NATIVE = {"+": "+", "-": "-", "*": "*", "/": "/", "%": "\\", "band": "&", "bor": "?", "bxor": "^"}
_TYPED_NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod", "^": "pow"}
_CLINGO_AGGREGATE = {"count": "#count", "sum": "#sum", "min": "#min", "max": "#max"}


def _body_vars(body) -> set[str]:
    """The names of the variables of a body's literals (not of aggregates nested in them)."""
    out: set[str] = set()
    for lit in body:
        terms = lit.args if isinstance(lit, souffle.Atom) else (lit.left, lit.right)
        out.update(v.name for t in terms for v in souffle.term_vars(t))
    return out


def _deep_vars(t) -> set[str]:
    """Every variable of a term, literal or aggregate, those of aggregates nested in it too."""
    if isinstance(t, souffle.Var):
        return {t.name}
    if isinstance(t, souffle.Aggregate):
        out = set() if t.target is None else _deep_vars(t.target)
        for lit in t.body:
            out |= _deep_vars(lit)
        return out
    if isinstance(t, souffle.Atom):
        return set().union(*map(_deep_vars, t.args)) if t.args else set()
    if isinstance(t, souffle.Comparison):
        return _deep_vars(t.left) | _deep_vars(t.right)
    if isinstance(t, souffle.Functor | souffle.Record) and t.args:
        return set().union(*map(_deep_vars, t.args))
    return set()


def _outer_bound(body) -> set[str]:
    """Variables a body binds outside its aggregates: by positive atoms, then `x = t` without aggregates."""
    bound = {a.name for lit in body if isinstance(lit, souffle.Atom) and not lit.negated
             for a in lit.args if isinstance(a, souffle.Var)}
    changed = True
    while changed:
        changed = False
        for c in body:
            if isinstance(c, souffle.Comparison) and c.op == "=":
                for a, b in ((c.left, c.right), (c.right, c.left)):
                    if isinstance(a, souffle.Var) and a.name not in bound and not souffle.aggregates_in(b) \
                            and not isinstance(b, souffle.Wildcard) and \
                            all(v.name in bound for v in souffle.term_vars(b)):
                        bound.add(a.name)
                        changed = True
    return bound


class _Translator:
    def __init__(self, program: souffle.Program):
        self.program = program
        self.index = {rel: i for i, rel in enumerate(program.decls)}
        self.enclosing = None  # (aggregate, its names, the literal of its body being translated)
        self.aux_rules: list[str] = []  # rules of nested aggregates' auxiliary predicates
        self.aux_count = 0
        self.copied: set[str] = set()  # relations nested aggregates need the least model of
        self.rule_body: tuple = ()
        self.scope_atoms: list = []  # positive atoms of the aggregates an auxiliary rule is made inside

    def term(self, t, names: dict[str, str], fresh: list[int], extra: list[str],
             negated: bool = False) -> str:
        """Term `t` in clingo's language; an aggregate becomes a variable defined by a literal in `extra`."""
        if isinstance(t, souffle.Var):
            return names.setdefault(t.name, f"V{len(names)}")
        if isinstance(t, souffle.Const):
            return _quote(values.encode(t.value, t.type))
        if isinstance(t, souffle.Wildcard):
            if negated:
                return "_"  # "no tuple with any value here": clingo's projection, over facts
            fresh[0] += 1  # a fresh variable, not '_': clingo would project the values away
            return f"W{fresh[0]}"
        if isinstance(t, souffle.Record):  # a clingo tuple; nil a constant; an ADT value tagged by its branch
            if t.args is None:
                return "nil"
            args = [self.term(a, names, fresh, extra, negated) for a in t.args]
            if t.branch is not None:
                args = [_quote(t.branch)] + args
            return f"({','.join(args)}{',' if len(args) == 1 else ''})"
        if isinstance(t, souffle.Functor):
            args = [self.term(a, names, fresh, extra) for a in t.args]
            if t.op == "as":  # a type cast leaves the value as it is (Soufflé drops it after type checking)
                return args[0]
            typed = self.typed_functor(t, args)
            if typed is not None:
                return typed
            if t.op in ("/", "%") and not (isinstance(t.args[1], souffle.Const) and t.args[1].value != -1):
                # clingo's own `/` and `\\` trap on INT_MIN / -1 (SIGFPE, the grounding process dies);
                # Soufflé's wrap around. A constant divisor other than -1 cannot overflow: clingo's then.
                return f"@{'div' if t.op == '/' else 'mod'}({args[0]},{args[1]})"
            if t.op in _NATIVE:
                return f"({args[0]}{_NATIVE[t.op]}{args[1]})"
            if t.op == "neg":
                return f"(-{args[0]})"
            if t.op == "bnot":
                return f"(~{args[0]})"
            return f"@{'pow' if t.op == '^' else t.op}({','.join(args)})"
        return self.aggregate(t, names, fresh, extra)

    @staticmethod
    def typed_functor(t, args: list[str]) -> str | None:
        """An operation on unsigned or float keys, or a conversion (`datalog.functors.TypedContext`); None
        for one on numbers or symbols (min and max compare keys: the encoding keeps the order)."""
        if t.op in souffle_semantics.CONVERSIONS or (t.op in ("to_number", "to_string") and t.ty is not None
                                                   and t.ty != souffle.SYMBOL):
            source = t.ty or souffle.NUMBER
            if t.op == "to_string":
                return f'@numeric_string({args[0]},"{source}")' if source != souffle.NUMBER else None
            target = souffle_semantics.result_type(t)
            if source == target:
                return args[0]
            return f'@conv({args[0]},"{source}","{target}")'
        if t.ty in (values.UNSIGNED, values.FLOAT) and t.op not in ("min", "max"):
            prefix = "u" if t.ty == values.UNSIGNED else "f"
            name = _TYPED_NAMES.get(t.op, t.op)
            return f"@{prefix}_{name}({','.join(args)})"
        return None

    def aggregate(self, g, names: dict[str, str], fresh: list[int], extra: list[str]) -> str:
        """An aggregate over the least model (the `m` copies, plain facts to clingo): clingo computes its
        value while grounding, so no aggregate reaches the ground program."""
        if self.enclosing is not None:
            return self.nested(g, names, fresh, extra)
        inner: list[str] = []
        cond = []
        # A variable of the aggregate that the rule's other literals do not bind is local to it (Soufflé's
        # scoping: `y = max z + y : { a(_, z), b(y) }` has an inner y of its own).
        names = dict(names)
        own = {self.result_of.get(id(g))} - self.bound  # its result, unless atoms bind it too
        for v in sorted(_body_vars(g.body) - (self.outer - own)):
            fresh[0] += 1
            names[v] = f"L{fresh[0]}"
        w0 = fresh[0]
        for lit in g.body:
            # An aggregate inside this literal is nested (`nested`); the positive atoms around it (this
            # aggregate's others, those of the aggregates it is in) may bind what it shares.
            around = self.scope_atoms + [x for x in g.body if x is not lit and isinstance(x, souffle.Atom)
                                         and not x.negated]
            self.enclosing = (g, names, lit, around)
            try:
                if isinstance(lit, souffle.Atom):
                    cond.append(("not " if lit.negated else "") + self.atom(lit, names, fresh, inner,
                                                                            copy=True))
                else:
                    cond.append(self.comparison(lit, names, fresh, inner))
            finally:
                self.enclosing = None
            cond.extend(inner)  # the auxiliary atoms of nested aggregates
            inner.clear()
        local = sorted({names[v] for v in _body_vars(g.body)})
        local += [f"W{k}" for k in range(w0 + 1, fresh[0] + 1)]
        value = [] if g.target is None else [self.term(g.target, names, fresh, extra)]
        elems = ",".join(value + local) or "0"
        fresh[0] += 1
        var = f"A{fresh[0]}"
        if g.ty == values.FLOAT and g.kind in ("sum", "mean"):
            # clingo adds integers: each float is exactly M * 2^-149 (M < 2^277), summed in 12-bit limbs of
            # M (datalog.functors.FLOAT_LIMBS sums, each of at most 2^19 - 1 elements stays in 32 bits),
            # then rounded once to single precision.
            weight = value[0]
            rest = ",".join([weight] + local)
            for k in range(functors.FLOAT_LIMBS):
                extra.append(f"S{k}{var} = #sum{{ @f_limb({weight},{k}),{rest} : {', '.join(cond)} }}")
            extra.append(f"N{var} = #count{{ {elems} : {', '.join(cond)} }}")
            limbs = ",".join(f"S{k}{var}" for k in range(functors.FLOAT_LIMBS))
            extra.append(f"{var} = @f_{g.kind}(N{var},{limbs})")
            return var
        if g.kind == "sum" and g.ty == values.UNSIGNED:
            # Keys are u - 2^31: the sum of the values is the sum of the keys plus 2^31 per element
            # (clingo's sum wraps at 32 bits, as the unsigned sum does).
            extra.append(f"S{var} = #sum{{ {elems} : {', '.join(cond)} }}")
            extra.append(f"N{var} = #count{{ {elems} : {', '.join(cond)} }}")
            extra.append(f"{var} = @u_sum(S{var},N{var})")
            return var
        extra.append(f"{var} = {_CLINGO_AGGREGATE[g.kind]}{{ {elems} : {', '.join(cond)} }}")
        if g.kind == "min":
            extra.append(f"{var} < #sup")  # an empty min has no value (Soufflé derives nothing)
        elif g.kind == "max":
            extra.append(f"{var} > #inf")
        return var

    def nested(self, h, names: dict[str, str], fresh: list[int], extra: list[str]) -> str:
        """An aggregate inside an aggregate's body (clingo nests none): an auxiliary predicate
        `xK(shared..., value)` over the least model computes it for each value of the variables it shares
        with the enclosing aggregate and the rule, over the positive atoms that bind those (the enclosing
        aggregate's other atoms, the rule's); the enclosing body reads `xK(shared..., A)`."""
        g, g_names, lit, available = self.enclosing
        own = _deep_vars(h)
        around = set(self.outer) | {v for x in g.body if x is not lit for v in _body_vars([x])}
        shared = sorted(own & around)
        domain = [x for x in list(available) + list(self.rule_body) if isinstance(x, souffle.Atom)
                  and not x.negated and {v.name for a in x.args for v in pattern_vars(a)} & set(shared)]
        binding = {v.name for x in domain for a in x.args for v in pattern_vars(a)}
        if not set(shared) <= binding or any(souffle.aggregates_in(a) for x in domain for a in x.args):
            raise souffle.ProgramError(self.program.path, h.pos.line, h.pos.column,
                                       "this nested aggregate shares variables that no positive atom of the "
                                       "enclosing aggregate or the rule binds: not supported")
        self.copied.update(x.relation for x in domain)
        aux_names = dict(g_names)
        aux_extra: list[str] = []
        aux_fresh = [fresh[0] + 1000]  # the auxiliary rule's own names, apart from the enclosing rule's
        saved, self.enclosing = self.enclosing, None
        saved_outer, saved_scope, self.scope_atoms = self.outer, self.scope_atoms, domain
        self.outer = self.outer | set(shared)  # inside the auxiliary rule the shared variables are bound
        try:
            lits = [self.atom(x, aux_names, aux_fresh, aux_extra, copy=True) for x in domain]
            value = self.aggregate(h, aux_names, aux_fresh, aux_extra)
        finally:
            self.enclosing = saved
            self.outer, self.scope_atoms = saved_outer, saved_scope
        self.aux_count += 1
        pred = f"x{self.aux_count}"
        args = [aux_names[v] for v in shared]
        self.aux_rules.append(f"{_atom(pred, args + [value])} :- {', '.join(lits + aux_extra)}.")
        var = f"X{self.aux_count}"  # not from `fresh`: the enclosing aggregate numbers its wildcards by it
        extra.append(_atom(pred, [g_names[v] for v in shared] + [var]))
        return var

    def atom(self, atom: souffle.Atom, names, fresh, extra, copy: bool) -> str:
        i = self.index[atom.relation]
        args = [self.term(a, names, fresh, extra, atom.negated) for a in atom.args]
        return _atom(f"m{i}" if copy or atom.negated else f"p{i}", args)

    def comparison(self, c: souffle.Comparison, names, fresh, extra) -> str:
        left, right = (self.term(t, names, fresh, extra) for t in (c.left, c.right))
        if c.op.lstrip("!") in ("match", "contains"):
            return f"@{c.op.lstrip('!')}({left},{right}) = {0 if c.op.startswith('!') else 1}"
        return f"{left}{c.op}{right}"

    def rule(self, rule: souffle.Rule, copy: bool) -> str:
        """Rule `rule` in clingo's language: over the externals with its marker, or (copy) over the facts."""
        names: dict[str, str] = {}
        fresh = [0]
        body: list[str] = []
        extra: list[str] = []
        self.outer = self.bound = _outer_bound(rule.body)
        self.rule_body = rule.body
        # A variable set to an aggregate's value (`x2 = min x3 : {...}`) is the rule's in the other
        # aggregates too (convex_hull's `y2 = min y3 : { point(x3, y3), x3 = x2 }`); inside its own
        # aggregate it is a variable of the aggregate's (`y = max z + y : {...}`) unless an atom binds it.
        self.result_of = {}
        for c in rule.body:
            if isinstance(c, souffle.Comparison) and c.op == "=":
                for v, g in ((c.left, c.right), (c.right, c.left)):
                    if isinstance(v, souffle.Var) and isinstance(g, souffle.Aggregate):
                        self.result_of[id(g)] = v.name
        self.outer = self.outer | set(self.result_of.values())
        for v in sorted(self.outer):  # named first: an aggregate translated before their atoms shares them
            names.setdefault(v, f"V{len(names)}")
        for lit in rule.body:
            if isinstance(lit, souffle.Atom):
                body.append(("not " if lit.negated else "") + self.atom(lit, names, fresh, extra, copy))
            else:
                body.append(self.comparison(lit, names, fresh, extra))
        head = _atom(f"{'m' if copy else 'p'}{self.index[rule.head.relation]}",
                     [self.term(a, names, fresh, extra) for a in rule.head.args])
        body.extend(extra)
        if not copy:
            body.append(f"k({rule.index})")
        return f"{head} :- {', '.join(body)}." if body else f"{head}."

    def needed_copies(self) -> set[str]:
        """Relations whose least model the negations need: the negated ones and all they depend on."""
        deps = self.program.depends()
        need, todo = set(), list(self.program.negated() | self.copied)
        while todo:
            r = todo.pop()
            if r not in need:
                need.add(r)
                todo.extend(deps[r])
        return need

    def program_text(self, facts: dict[str, list[tuple]]) -> str:
        parts = []
        for rel, tuples in facts.items():
            i = self.index[rel]
            pred = f"i{i}"
            if not tuples[0]:
                parts.append(f"{pred}.\n")
            elif all(isinstance(v, int) for v in tuples[0]) and \
                    all(t == souffle.NUMBER for t in self.program.decls[rel].types):
                parts.append("".join(f"{pred}({','.join(map(str, t))}).\n" for t in tuples))
            elif any(t in (values.UNSIGNED, values.FLOAT) for t in self.program.decls[rel].types):
                types = self.program.decls[rel].types
                parts.append("".join(
                    f"{pred}(" + ",".join(_quote(values.encode(v, ty)) for v, ty in zip(t, types,
                                                                                         strict=True))
                    + ").\n" for t in tuples))
            else:
                parts.append("".join(f"{pred}({','.join(map(_quote, t))}).\n" for t in tuples))
            xs = [f"X{j}" for j in range(self.program.decls[rel].arity)]
            parts.append(f"#external {_atom(f'p{i}', xs)} : {_atom(pred, xs)}.\n")
        for rel, d in self.program.decls.items():
            parts.append(f"#show p{self.index[rel]}/{d.arity}.\n")
        parts.append("#show k/1.\n")
        for rule in self.program.rules:
            parts.append(f"#external k({rule.index}).\n{self.rule(rule, copy=False)}\n")
        # Rules by head, once: scanning every rule for each copied relation was quadratic (a chain of
        # 8,000 strata linked by negation: most of its grounding).
        by_head: dict[str, list[souffle.Rule]] = {}
        for r in self.program.rules:
            by_head.setdefault(r.head.relation, []).append(r)
        copies = self.needed_copies()
        if self.aux_count:  # nested aggregates of the copies may need more copies: translate them first
            for r in self.program.rules:
                if r.head.relation in copies:
                    self.rule(r, copy=True)
            copies = self.needed_copies()
        for rel in sorted(copies, key=self.index.__getitem__):
            i = self.index[rel]
            xs = [f"X{j}" for j in range(self.program.decls[rel].arity)]
            if rel in facts:
                parts.append(f"{_atom(f'm{i}', xs)} :- {_atom(f'i{i}', xs)}.\n")
            parts.extend(self.rule(r, copy=True) + "\n" for r in by_head.get(rel, ()))
        parts.extend(r + "\n" for r in dict.fromkeys(self.aux_rules))
        return "".join(parts)


def translate(program: souffle.Program, facts: dict[str, list[tuple]]) -> str:
    """The clingo program (text) that `ground` hands to clingo; see the module docstring."""
    return _Translator(program).program_text(facts)
