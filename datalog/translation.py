"""Translating a checked Soufflé program into clingo's language (what `datalog.grounding` grounds).

See `datalog.grounding`'s docstring for the scheme: facts `iN` with externals `pN`, rule markers
`k(k)`, fresh variables for `_`, negations and aggregates over the least model's copies `mN`.
Arithmetic is clingo's where it agrees with Soufflé, else a functor of `datalog.functors` (`@pow`).
"""

from __future__ import annotations

from datalog import souffle


def _quote(value) -> str:
    if isinstance(value, int):
        return str(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _atom(pred: str, args: list[str]) -> str:
    return f"{pred}({','.join(args)})" if args else pred


# Soufflé operator -> clingo's (same semantics on 32-bit numbers; see datalog.functors).
_NATIVE = {"+": "+", "-": "-", "*": "*", "/": "/", "%": "\\", "band": "&", "bor": "?", "bxor": "^"}
_CLINGO_AGGREGATE = {"count": "#count", "sum": "#sum", "min": "#min", "max": "#max"}


def _body_vars(body) -> set[str]:
    """The names of the variables of a body's literals (not of aggregates nested in them)."""
    out: set[str] = set()
    for lit in body:
        terms = lit.args if isinstance(lit, souffle.Atom) else (lit.left, lit.right)
        out.update(v.name for t in terms for v in souffle.term_vars(t))
    return out


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

    def term(self, t, names: dict[str, str], fresh: list[int], extra: list[str],
             negated: bool = False) -> str:
        """Term `t` in clingo's language; an aggregate becomes a variable defined by a literal in `extra`."""
        if isinstance(t, souffle.Var):
            return names.setdefault(t.name, f"V{len(names)}")
        if isinstance(t, souffle.Const):
            return _quote(t.value)
        if isinstance(t, souffle.Wildcard):
            if negated:
                return "_"  # "no tuple with any value here": clingo's projection, over facts
            fresh[0] += 1  # a fresh variable, not '_': clingo would project the values away
            return f"W{fresh[0]}"
        if isinstance(t, souffle.Record):  # a clingo tuple; nil a constant
            if t.args is None:
                return "nil"
            args = [self.term(a, names, fresh, extra, negated) for a in t.args]
            return f"({','.join(args)}{',' if len(args) == 1 else ''})"
        if isinstance(t, souffle.Functor):
            args = [self.term(a, names, fresh, extra) for a in t.args]
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

    def aggregate(self, g, names: dict[str, str], fresh: list[int], extra: list[str]) -> str:
        """An aggregate over the least model (the `m` copies, plain facts to clingo): clingo computes its
        value while grounding, so no aggregate reaches the ground program."""
        inner: list[str] = []
        cond = []
        # A variable of the aggregate that the rule's other literals do not bind is local to it (Soufflé's
        # scoping: `y = max z + y : { a(_, z), b(y) }` has an inner y of its own).
        names = dict(names)
        for v in sorted(_body_vars(g.body) - self.outer):
            fresh[0] += 1
            names[v] = f"L{fresh[0]}"
        w0 = fresh[0]
        for lit in g.body:
            if isinstance(lit, souffle.Atom):
                cond.append(("not " if lit.negated else "") + self.atom(lit, names, fresh, inner, copy=True))
            else:
                cond.append(self.comparison(lit, names, fresh, inner))
        if inner:
            raise souffle.ProgramError(self.program.path, g.pos.line, g.pos.column,
                                       "nested aggregates (an aggregate inside an aggregate) are not "
                                       "supported")
        local = sorted({names[v] for v in _body_vars(g.body)})
        local += [f"W{k}" for k in range(w0 + 1, fresh[0] + 1)]
        value = [] if g.target is None else [self.term(g.target, names, fresh, extra)]
        elems = ",".join(value + local) or "0"
        fresh[0] += 1
        var = f"A{fresh[0]}"
        extra.append(f"{var} = {_CLINGO_AGGREGATE[g.kind]}{{ {elems} : {', '.join(cond)} }}")
        if g.kind == "min":
            extra.append(f"{var} < #sup")  # an empty min has no value (Soufflé derives nothing)
        elif g.kind == "max":
            extra.append(f"{var} > #inf")
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
        self.outer = _outer_bound(rule.body)
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
        need, todo = set(), list(self.program.negated())
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
        # 8,000 strata linked by negation: most of a 92.6 s grounding).
        by_head: dict[str, list[souffle.Rule]] = {}
        for r in self.program.rules:
            by_head.setdefault(r.head.relation, []).append(r)
        for rel in sorted(self.needed_copies(), key=self.index.__getitem__):
            i = self.index[rel]
            xs = [f"X{j}" for j in range(self.program.decls[rel].arity)]
            if rel in facts:
                parts.append(f"{_atom(f'm{i}', xs)} :- {_atom(f'i{i}', xs)}.\n")
            parts.extend(self.rule(r, copy=True) + "\n" for r in by_head.get(rel, ()))
        return "".join(parts)


def translate(program: souffle.Program, facts: dict[str, list[tuple]]) -> str:
    """The clingo program (text) that `ground` hands to clingo; see the module docstring."""
    return _Translator(program).program_text(facts)
