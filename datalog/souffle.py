"""A Soufflé subset: parsing an analysis into a checked AST (declarations, rules, facts, strata).

    program = datalog.souffle.parse_file("taint.dl")     # or parse(text, path)
    program.rules[0].name                                # "path-2a3171": head and a hash of the text
    program.rules[0].text                                # "path(x, y) :- edge(x, y)." (datalog.souffle_rules)

The language (what typical points-to, taint, race and escape analyses use)::

    .decl edge(from: number, to: number)        // attribute types: number | symbol
    .input edge                                 // DIR/edge.facts, tab-separated (datalog.grounding)
    .output path                                // default alarms
    path(x, y) :- edge(x, y).
    path(x, z) :- path(x, y), edge(y, z), !blocked(z), x != z.
    blocked(3).  source("main").                /* facts in the program text */

A literal is an atom `rel(args)`, a negated atom `!rel(args)` over a relation
of a lower stratum (stratified negation), or a comparison `a OP b` with OP one
of `= != < <= > >=` between variables and constants (`<`, `<=`, `>`, `>=` on
numbers only; `x = t` binds x when t is bound). Arguments are variables
(identifiers), number constants (decimal, `-7`, `0x1f`, `0b101`; 32-bit
signed, as Soufflé's and clingo's), "string" constants (escapes `\\"`,
`\\\\`, `\\n`, `\\t`) or the wildcard `_`. Comments `//` and `/* */`.

Much else of Soufflé is read too (aggregates, arithmetic and functors, `as`, components, records,
user types, `unsigned` and `float` values, output parameters, several heads, disjunction, `.plan`, the
preprocessor, algebraic data types: see docs/writing-an-analysis.md), each expansion bounded (at most
MAX_ALTERNATIVES rules per clause, expressions at most 100 deep: docs/writing-an-analysis.md, "Limits");
what is not (subsumption, choice domains, `autoinc`, user-defined functors) is refused with a
`ProgramError` naming the file, line and column, never ignored; so are an undeclared relation, an arity or
type mismatch, an unsafe variable (in the head, a negation or a comparison
but bound by no positive atom) and negation through recursion.
"""

from __future__ import annotations

import dataclasses

from datalog.souffle_ast import (  # noqa: F401  (re-exported: the AST is part of this module's API)
    COMPARISONS,
    INT_MAX,
    INT_MIN,
    MAX_SYMBOL,
    NUMBER,
    NUMBER_PATTERN,
    NUMERIC,
    ORDER,
    SYMBOL,
    TYPES,
    UINT_MAX,
    UNSIGNED,
    Aggregate,
    Atom,
    Comparison,
    Const,
    Decl,
    Fact,
    Functor,
    Literal,
    Pos,
    Program,
    ProgramError,
    Record,
    Rule,
    Term,
    Var,
    Wildcard,
    aggregates_in,
    number_shown,
    number_value,
    symbol_problem,
    term_vars,
)
from datalog.souffle_components import ComponentsMixin
from datalog.souffle_directives import DirectivesMixin, preprocess
from datalog.souffle_inline import unfold, unfoldable
from datalog.souffle_lexer import MAX_ALTERNATIVES, Token, tokenize  # noqa: F401  (re-exported)
from datalog.souffle_project import project
from datalog.souffle_rules import rule_names, rule_text
from datalog.souffle_semantics import RuleChecker, typed_const
from datalog.souffle_terms import TermsMixin
from datalog.souffle_witness import with_witnesses
from fastlbp.core.errors import read_text

MAX_RULE_TEXT = 2_000  # characters of a rule's text kept (`_rule_text`)

# Parser ---------------------------------------------------------------------

class _Parser(DirectivesMixin, TermsMixin, ComponentsMixin):
    def __init__(self, text: str, path: str | None):
        self.text = text
        self.path = path
        self.toks = tokenize(text, path)
        self.i = 0
        self.decls: dict[str, Decl] = {}
        self.inputs: dict[str, Pos] = {}
        self.outputs: dict[str, Pos] = {}
        self.printsize: dict[str, Pos] = {}
        self.input_params: dict[str, dict[str, str]] = {}
        self.output_files: dict[str, str] = {}
        self.types: dict[str, tuple] = {}
        self.attr_pos: dict[tuple[str, int], Pos] = {}
        self.eqrel: list = []
        self.inline: set[str] = set()  # relations declared inline
        self.adts: dict = {}  # ADT type -> {branch: [(field, type)]}
        self.branch_type: dict[str, str] = {}  # branch -> its ADT type
        self.rules: list[Rule] = []
        self.facts: list[Fact] = []
        self.components: dict = {}
        self.record_fields: dict[str, list[tuple[str, str]]] = {}
        self.scopes: dict = {}  # instance -> (enclosing instance, its relation names, its type names)
        self.expanded = 0  # tokens that component instances added
        self.recording = False  # reading a component's body (datalog.souffle_components), not the program
        self.last_directive: str | None = None
        self.last_init: str | None = None
        self.last_override: str | None = None

    # helpers
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def error(self, tok: Token, message: str) -> ProgramError:
        return ProgramError(tok.pos.file or self.path, tok.pos.line, tok.pos.column, message)

    def error_at(self, pos: Pos, message: str) -> ProgramError:
        return ProgramError(pos.file or self.path, pos.line, pos.column, message)

    def expected(self, what: str) -> ProgramError:
        t = self.tok
        if t.kind == "bad":
            return self.error(t, t.value)
        got = "the end of the file" if t.kind == "end" else repr(t.text)
        return self.error(t, f"expected {what}, got {got}")

    def accept(self, text: str) -> Token | None:
        t = self.tok
        if t.kind == "punct" and t.text == text:
            self.i += 1
            return t
        return None

    def expect(self, text: str, what: str | None = None) -> Token:
        t = self.accept(text)
        if t is None:
            raise self.expected(what or f"'{text}'")
        return t

    def ident(self, what: str) -> Token:
        t = self.tok
        if t.kind != "ident":
            raise self.expected(what)
        self.i += 1
        return t

    def _qualified(self, name: Token) -> bool:
        """`name.x`: a '.' right after `name` and an identifier right after it (a component's member)."""
        t, nxt = self.tok, self.peek()
        return (t.kind == "punct" and t.text == "." and t.offset == name.offset + len(name.text)
                and nxt.kind == "ident" and nxt.offset == t.offset + 1)

    # statements
    def program(self) -> None:
        while self.tok.kind != "end":
            self.statement()

    def statement(self) -> None:
        t = self.tok
        if t.kind == "punct" and t.text == "." and self.peek().kind == "ident" and \
                self.peek().offset == t.offset + 1:
            self.directive()
        elif t.kind == "ident":
            self.clause()
        else:
            raise self.expected("a directive (.decl, .input, .output ...), a rule or a fact")

    def clause(self) -> None:
        start = self.tok
        heads = [self.atom(head=True)]
        while self.accept(","):
            heads.append(self.atom(head=True))
        if self.tok.kind == "punct" and self.tok.text == "<=":
            raise self.error(self.tok, "subsumption rules (HEAD <= HEAD :- BODY) are not supported")
        if self.accept("."):
            for head in heads:
                if all(isinstance(a, Const) for a in head.args):
                    self.facts.append(Fact(head))
                    continue
                for a in head.args:  # an expression of constants (1 + 2, cat("a", "b")) is a rule's head
                    if not isinstance(a, Const) and (term_vars(a) or not isinstance(a, Functor | Record)):
                        raise self.error_at(a.pos, "a fact's arguments must be constants (a variable or '_' "
                                            "makes it a rule without a body)")
                text = _rule_text(self.text[start.offset:self.toks[self.i - 1].offset + 1])
                self.rules.append(Rule(len(self.rules), head, (), text, start.pos))
            return
        self.expect(":-", "'.' (a fact) or ':-' (a rule)")
        alternatives = self.disjunction()
        end = self.tok
        if end.kind == "punct" and end.text == ".":
            self.i += 1
        else:
            raise self.expected("',' or '.' after a body literal")
        if len(heads) * len(alternatives) > MAX_ALTERNATIVES:
            raise self.error(start, f"this rule's {len(heads):,} heads and {len(alternatives):,} "
                             f"alternatives expand to {len(heads) * len(alternatives):,} rules (limit "
                             f"{MAX_ALTERNATIVES:,})")
        text = _rule_text(self.text[start.offset:end.offset + 1])
        for head in heads:
            for body in alternatives:  # a disjunction is one rule per alternative, as Soufflé reads it
                self.rules.append(Rule(len(self.rules), head, tuple(body), text, start.pos))

    def disjunction(self) -> list[list[Literal]]:
        """A rule's body `A ; B` (with parenthesised groups) as its alternatives, each a conjunction."""
        alternatives = self.conjunction()
        while self.tok.kind == "punct" and self.tok.text == ";":
            t = self.tok
            self.i += 1
            more = self.conjunction()
            if len(alternatives) + len(more) > MAX_ALTERNATIVES:
                raise self.error(t, f"the disjunction expands to more than {MAX_ALTERNATIVES:,} alternatives "
                                    f"(limit {MAX_ALTERNATIVES:,})")
            alternatives.extend(more)
        return alternatives

    def conjunction(self) -> list[list[Literal]]:
        alternatives: list[list[Literal]] = [[]]
        while True:
            t = self.tok
            group = self.group()
            if len(alternatives) * len(group) > MAX_ALTERNATIVES:  # checked before the product is made
                raise self.error(t, f"the disjunctions of this rule expand to "
                                    f"{len(alternatives) * len(group):,} alternatives (limit "
                                    f"{MAX_ALTERNATIVES:,})")
            alternatives = [a + b for a in alternatives for b in group]
            if not self.accept(","):
                return alternatives

    def group(self) -> list[list[Literal]]:
        """`( body )` (its alternatives) or one literal; `(x + 1) < y` is a literal that starts with '('.
        A negated group `!( body )` (or `!!...`) is put in disjunctive normal form as Soufflé does (De
        Morgan: `!(a, b)` is `!a ; !b`, `!(a ; b)` is `!a, !b`, `!!a` is `a`)."""
        self._nest(1)  # parentheses and '!' nest through disjunction() and group(): bounded as expressions
        try:
            return self._group()
        finally:
            self._nest(-1)

    def _group(self) -> list[list[Literal]]:
        if self.tok.kind == "punct" and self.tok.text == "!" and (self._is("(", 1) or self._is("!", 1)):
            bang = self.tok
            self.i += 1
            return self.negated(self.group(), bang)
        if self.tok.kind == "punct" and self.tok.text == "(":
            save = self.i
            try:
                self.i += 1
                inner = self.disjunction()
                self.expect(")")
                if self.tok.kind == "punct" and self.tok.text in (",", ";", ".", ")"):
                    return inner
            except ProgramError:
                pass
            self.i = save
        return [[self.literal()]]

    def negated(self, alternatives: list[list[Literal]], bang: Token) -> list[list[Literal]]:
        """The alternatives of `!(alternatives)`: not (OR_i AND_j l_ij) = AND_i OR_j not l_ij."""
        out: list[list[Literal]] = [[]]
        for conjunction in alternatives:
            if len(out) * len(conjunction) > MAX_ALTERNATIVES:  # checked before the product is made
                raise self.error(bang, f"the negated group expands to {len(out) * len(conjunction):,} "
                                       f"alternatives (limit {MAX_ALTERNATIVES:,})")
            out = [done + [_negation(lit)] for done in out for lit in conjunction]
        return out

    def body(self) -> list[Literal]:
        """An aggregate's body: a conjunction."""
        body = [self.literal()]
        while self.accept(","):
            body.append(self.literal())
        if self.tok.kind == "punct" and self.tok.text == ";":
            raise self.error(self.tok, "disjunction ';' inside an aggregate is not supported")
        return body

    def atom(self, head: bool = False, negated: bool = False) -> Atom:
        name = self.ident("a relation name")
        if self._qualified(name):
            raise self.error(self.tok, "qualified names (components) are not supported")
        self.expect("(", f"'(' after relation {name.text!r}")
        args: list[Term] = []
        if not self.accept(")"):
            while True:
                args.append(self.term())
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        return Atom(name.text, tuple(args), name.pos, negated)

    def number(self, value: int, tok: Token) -> int:
        """An integer literal: a number, or an unsigned or float where it stands for one (the checker
        narrows the range to its type's)."""
        if not INT_MIN <= value <= UINT_MAX:
            raise self.error(tok, f"number {number_shown(tok.text)} is out of range (32-bit signed: "
                                  f"{INT_MIN}..{INT_MAX}; unsigned: 0..{UINT_MAX})")
        return value


def _rule_text(source: str) -> str:
    """A rule's text as its rules keep it: whitespace runs made one space, and at most MAX_RULE_TEXT
    characters (one clause of a disjunction becomes up to MAX_ALTERNATIVES rules, each keeping its text
    in the derivation graph, and the outputs write it once per rule: a long conjunct shared by 4,096
    alternatives would be kept 4,096 times)."""
    cut = len(source) > 4 * MAX_RULE_TEXT  # not split whole: a 6 MB rule would be copied per rule
    text = " ".join((source[:4 * MAX_RULE_TEXT] if cut else source).split())
    if cut or len(text) > MAX_RULE_TEXT:
        text = text[:MAX_RULE_TEXT - 1] + "…"
    return text


_NEGATED_COMPARISON = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">", "match": "!match",
                       "!match": "match", "contains": "!contains", "!contains": "contains"}


def _negation(lit: Literal) -> Literal:
    """The literal that holds exactly when `lit` does not: an atom negated (or un-negated), a comparison
    with the opposite operator."""
    if isinstance(lit, Atom):
        return dataclasses.replace(lit, negated=not lit.negated)
    return dataclasses.replace(lit, op=_NEGATED_COMPARISON[lit.op])


# Checks ---------------------------------------------------------------------

def _check(p: _Parser) -> Program:
    path = p.path
    p.resolve_types()
    decls = p.decls

    def err(pos: Pos, message: str) -> ProgramError:
        return ProgramError(pos.file or path, pos.line, pos.column, message)

    for group, what in ((p.inputs, "input"), (p.outputs, "output"), (p.printsize, "printsize")):
        for rel, pos in group.items():
            if rel not in decls:
                raise err(pos, f".{what} names relation {rel!r}, which is not declared (add "
                          f".decl {rel}(...))")

    def check_atom(atom: Atom) -> Decl:
        d = decls.get(atom.relation)
        if d is None:
            raise err(atom.pos, f"relation {atom.relation!r} is not declared (add "
                      f".decl {atom.relation}(...))")
        if len(atom.args) != d.arity:
            raise err(atom.pos, f"relation {atom.relation!r} has {d.arity} attribute"
                      f"{'s' if d.arity != 1 else ''} (declared at line {d.pos.line}), got "
                      f"{len(atom.args)} argument{'s' if len(atom.args) != 1 else ''}")
        for a, (attr, ty) in zip(atom.args, d.attrs, strict=True):
            if isinstance(a, Const) and a.type != ty and not (a.kind is None and isinstance(a.value, int)
                                                              and ty in NUMERIC):
                raise err(a.pos, f"{a.type} constant for attribute {attr!r} of {atom.relation!r}, which is "
                          f"a {ty}")
        return d

    for f in p.facts:
        check_atom(f.atom)
    # An integer literal of a fact is an unsigned or a float where its attribute is.
    p.facts = [Fact(dataclasses.replace(f.atom, args=tuple(
        typed_const(a, ty, err) for a, ty in zip(f.atom.args, decls[f.atom.relation].types, strict=True))))
        for f in p.facts]
    for name in p.eqrel:  # Soufflé keeps an eqrel relation closed: reflexive, symmetric, transitive
        r, pos = name.text, name.pos
        x, y, z = (Var(v, pos) for v in ("x", "y", "z"))
        for head, body, text in (
                ((x, x), ((x, Wildcard(pos)),), f"{r}(x, x) :- {r}(x, _).  // eqrel {r}: reflexive"),
                ((x, y), ((y, x),), f"{r}(x, y) :- {r}(y, x).  // eqrel {r}: symmetric"),
                ((x, z), ((x, y), (y, z)), f"{r}(x, z) :- {r}(x, y), {r}(y, z).  // eqrel {r}: transitive")):
            p.rules.append(Rule(len(p.rules), Atom(r, head, pos), tuple(Atom(r, b, pos) for b in body), text,
                                pos))
    # Inline relations unfolded into their uses, as Soufflé does (where that is plain).
    p.rules, p.facts = unfold(p.rules, p.facts, unfoldable(p.inline, p.rules, p.facts, p.inputs, p.outputs))
    p.rules = [with_witnesses(rule) for rule in p.rules]  # min/max witnesses bound, as Soufflé reads them
    p.rules = [RuleChecker(rule, check_atom, err, p.record_fields, p.resolve_type, p.adts,
                           p.branch_type).check() for rule in p.rules]
    p.rules = project(p.rules, decls)  # independent parts of bodies: existence checks of their own
    # Each rule's text written from its AST (component-qualified, one per alternative) and its stable name.
    p.rules = [dataclasses.replace(r, text=_rule_text(rule_text(r)), label=name)  # at most MAX_RULE_TEXT
               for r, name in zip(p.rules, rule_names(p.rules), strict=True)]
    strata = _stratify(p, err)
    return Program(path, decls, p.inputs, p.outputs, p.rules, p.facts, strata, input_params=p.input_params,
                   output_files=p.output_files, records=p.record_fields, adts=p.adts)


def _stratify(p: _Parser, err) -> list[list[str]]:
    """Relations by stratum (Tarjan's SCCs in topological order); negation inside an SCC is an error."""
    rels = list(p.decls)
    edges: dict[str, list[tuple[str, Atom | None]]] = {r: [] for r in rels}  # body rel -> (head, neg atom)
    for rule in p.rules:
        for a in rule.body:
            if isinstance(a, Atom):
                edges[a.relation].append((rule.head.relation, a if a.negated else None))
        for g in rule.aggregates():
            for rel in Rule(0, rule.head, g.body, "", g.pos).aggregated() | {
                    a.relation for a in g.body if isinstance(a, Atom)}:
                edges[rel].append((rule.head.relation, Atom(rel, (), g.pos, True)))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []  # reverse topological order (sinks first)
    counter = 0
    for root in rels:
        if root in index:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, k = work[-1]
            if k < len(edges[v]):
                work[-1] = (v, k + 1)
                w = edges[v][k][0]
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                sccs.append(comp)
    comp_of = {r: i for i, comp in enumerate(sccs) for r in comp}
    for rule in p.rules:
        for g in rule.aggregates():
            for rel in Rule(0, rule.head, g.body, "", g.pos).aggregated() | {
                    a.relation for a in g.body if isinstance(a, Atom)}:
                if comp_of[rel] == comp_of[rule.head.relation]:
                    raise err(g.pos, f"aggregate through recursion: this rule derives "
                              f"{rule.head.relation!r} from {g.kind} over {rel!r}, which depends on it; only "
                              "stratified aggregates are supported")
        for a in rule.negative:
            if comp_of[a.relation] == comp_of[rule.head.relation]:
                head, neg = rule.head.relation, a.relation
                through = "" if head == neg else (
                    f" ({' -> '.join(_path(edges, head, neg))}: each derived from the one before)")
                raise err(a.pos, f"negation through recursion: this rule derives {head!r} from !{neg}, but "
                          f"{neg!r} depends on {head!r}{through}; only stratified negation is supported")
    position = {r: i for i, r in enumerate(rels)}  # rels.index per relation was quadratic
    return [sorted(c, key=position.__getitem__) for c in reversed(sccs)]


def _path(edges, src: str, dst: str) -> list[str]:
    """A shortest dependency path src -> ... -> dst (head depends on body: along `edges`)."""
    prev = {src: None}
    queue = [src]
    for v in queue:
        if v == dst:
            break
        for w, _ in edges[v]:
            if w not in prev:
                prev[w] = v
                queue.append(w)
    out = [dst]
    while prev[out[-1]] is not None:
        out.append(prev[out[-1]])
    return out[::-1]


# Entry points ---------------------------------------------------------------

def parse(text: str, path: str | None = None) -> Program:
    """Parses and checks a program's text.

    Raises:
        ProgramError: a syntax error (what was expected, where), an
            unsupported construct, or a failed check (see the module docstring).
    """
    p = _Parser(preprocess(text, path), path)
    p.program()
    return _check(p)


def parse_file(path) -> Program:
    """`parse` of a file (UTF-8, gzip allowed).

    Raises:
        InputError: the file is missing or unreadable; `ProgramError` as `parse`.
    """
    return parse(read_text(path), str(path))


__all__ = ["parse", "parse_file", "Program", "ProgramError", "Rule", "Fact", "Atom", "Comparison", "Var",
           "Const", "Wildcard", "Decl", "Pos", "NUMBER", "SYMBOL"]
