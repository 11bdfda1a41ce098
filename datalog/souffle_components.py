"""Soufflé's components, expanded as Soufflé expands them: a mixin of `datalog.souffle`'s parser.

    .comp Graph<N> { .decl edge(a: N, b: N)  .decl path(a: N, b: N)  path(x, y) :- edge(x, y). ... }
    .comp Acyclic<N> : Graph<N> { .override path  path(x, y) :- ... }
    .init g = Graph<number>                       // relations g.edge, g.path

`.comp NAME<PARAMS> : BASE<ARGS>, ... { ... }` is recorded (its body's tokens); `.init INST = NAME<ARGS>`
puts the instance's statements in the token stream where the `.init` stands: the bases' statements
first (those of a relation the component `.override`s left out), then its own; each relation, type and
nested instance the component (or a base) declares is renamed `INST.name`, and each type parameter is
replaced by its argument (a type, or a component in a nested `.init`). Errors keep the positions of
the component's text.
"""

from __future__ import annotations

import dataclasses

from datalog.souffle_lexer import Token, tokenize

MAX_EXPANSION = 1_000_000  # tokens instances may add (a component that instantiates itself never ends)
# Instances one program may make: each costs about 0.2 ms to expand, and components that each instantiate
# the one before twice make 2^depth of them (20 levels: 10^6 instances, minutes, before this bound).
MAX_INSTANCES = 10_000


@dataclasses.dataclass
class Component:
    name: str
    params: list[str]
    bases: list[tuple[str, list[str]]]
    body: list  # tokens between the braces
    pos: object


@dataclasses.dataclass
class _Statement:
    tokens: list
    kind: str  # "decl", "type", "init", "override", "clause", "other"
    names: list[str]  # declared names (decl, type, init) or head relations (clause) or overridden (override)


class ComponentsMixin:
    """`.comp` and `.init` for `datalog.souffle._Parser`."""

    def comp_args(self) -> list[str]:
        """`<A, B<C>, ...>` after a name, as texts ("B<C>" kept whole); [] without '<'."""
        if not self.accept("<"):
            return []
        args = []
        while True:
            t = self.ident("a type or component name")
            text = t.text
            if self._is("<"):
                text += "<" + ",".join(self.comp_args()) + ">"
            args.append(text)
            if self.accept(">"):
                return args
            self.expect(",", "',' or '>' in the parameter list")

    def component(self, dot) -> None:
        name = self.ident("a component name after .comp")
        params = self.comp_args()
        bases = []
        if self.accept(":"):
            while True:
                base = self.ident("a base component name")
                bases.append((base.text, self.comp_args()))
                if not self.accept(","):
                    break
        self.expect("{", "'{' opening the component's body")
        start, depth = self.i, 1
        while depth:
            t = self.tok
            if t.kind in ("end", "bad"):
                raise self.expected("'}' closing the component's body")
            if t.kind == "punct" and t.text in "{}":
                depth += 1 if t.text == "{" else -1
            self.i += 1
        body = self.toks[start:self.i - 1]
        self.components[name.text] = Component(name.text, params, bases, body, name.pos)

    def init(self, dot) -> None:
        inst = self.ident("an instance name after .init")
        self.expect("=", "'=' after the instance name")
        comp = self.ident("a component name")
        args = self.comp_args()
        self.no_cycle(inst, comp)
        instances = self.__dict__.get("instances", 0) + 1
        self.instances = instances
        if instances > MAX_INSTANCES:
            raise self.error(inst, f"components make more than {MAX_INSTANCES:,} instances (the limit; here "
                                   f"instance {inst.text} of {comp.text!r}): do components instantiate each "
                                   "other many times over?")
        expansion = self.instance(inst.text, comp, args, depth=0)
        self.expanded += len(expansion)
        if self.expanded > MAX_EXPANSION:
            raise self.error(inst, f"components expand to more than {MAX_EXPANSION:,} tokens (does a "
                                   "component instantiate itself?)")
        self.toks[self.i:self.i] = expansion

    def no_cycle(self, inst, comp) -> None:
        """Refuses an instance of a component that an enclosing instance is already of (`.comp A { .init
        a = A }`, or A and B instantiating each other): its expansion would never end."""
        component_of = self.__dict__.setdefault("component_of", {})
        component_of[inst.text] = comp.text
        chain = [(inst.text, comp.text)]
        scope = self.scopes.get(inst.text)
        while scope is not None:
            outer = scope[0]
            chain.append((outer, component_of.get(outer, "?")))
            scope = self.scopes.get(outer)
        chain.reverse()
        first = next((k for k, (_, c) in enumerate(chain[:-1]) if c == comp.text), None)
        if first is not None:
            shown = " -> ".join(c for _, c in chain[first:])
            raise self.error(comp, f"component {comp.text!r} instantiates itself ({shown}: instance "
                             f"{inst.text} inside {chain[first][0]}); its expansion would never end")

    def instance(self, inst: str, comp_tok, args: list[str], depth: int) -> list:
        statements = self.statements_of(comp_tok, args, depth)
        local = {n for s in statements if s.kind in ("decl", "init") for n in s.names}
        local_types = {n for s in statements if s.kind == "type" for n in s.names}
        for s in statements:  # a nested instance sees this one's names (Soufflé's lexical scoping)
            if s.kind == "init":
                self.scopes[f"{inst}.{s.names[0]}"] = (inst, local, local_types)
        out = []
        for s in statements:
            directive = s.kind != "clause"
            for k, t in enumerate(s.tokens):
                if t.kind == "ident":
                    nxt = s.tokens[k + 1] if k + 1 < len(s.tokens) else None
                    prev = s.tokens[k - 1] if k else None
                    is_type = s.kind == "type" or (s.kind == "decl" and prev is not None and
                                                   prev.kind == "punct" and prev.text == ":")
                    atom = nxt is not None and nxt.kind == "punct" and nxt.text == "("
                    if s.kind == "init" and k != 2:  # `.init NAME = COMP<ARGS>`: components are global,
                        is_type = k > 4               # their arguments types (or components)
                        if k == 4 or t.text in self.components:
                            out.append(t)
                            continue
                    if is_type or directive or atom:
                        names = local_types if is_type else local
                        t = dataclasses.replace(t, text=self.scoped(inst, t.text, names, is_type))
                out.append(t)
        return out

    def scoped(self, inst: str, name: str, local: set[str], is_type: bool) -> str:
        """`name` as instance `inst` sees it: its own, an enclosing instance's, or global."""
        head = name.partition(".")[0]
        if head in local:
            return f"{inst}.{name}"
        scope = self.scopes.get(inst)
        while scope is not None:
            outer, rels, types = scope
            if head in (types if is_type else rels):
                return f"{outer}.{name}"
            scope = self.scopes.get(outer)
        return name

    def statements_of(self, comp_tok, args: list[str], depth: int) -> list[_Statement]:
        """The statements of component `comp_tok<args>`: its bases' (less overridden clauses), then its
        own."""
        name = comp_tok.text
        comp = self.components.get(name)
        if comp is None:
            raise self.error(comp_tok, f"component {name!r} is not declared (add .comp {name} {{ ... }})")
        if depth > 64:
            raise self.error(comp_tok, f"component {name!r} inherits or instantiates itself")
        if len(args) != len(comp.params):
            raise self.error(comp_tok, f"component {name!r} takes {len(comp.params)} type parameter"
                             f"{'s' if len(comp.params) != 1 else ''}, got {len(args)}")
        binding = dict(zip(comp.params, args, strict=True))
        own = self.split(self.substitute(comp.body, binding))
        overridden = {n for s in own if s.kind == "override" for n in s.names}
        out: list[_Statement] = []
        for base, base_args in comp.bases:
            base_tok = dataclasses.replace(comp_tok, text=binding.get(base, base))
            for s in self.statements_of(base_tok, [self.bound(a, binding) for a in base_args], depth + 1):
                if s.kind == "clause" and overridden & set(s.names):
                    continue
                out.append(s)
        return out + [s for s in own if s.kind != "override"]

    @staticmethod
    def bound(arg: str, binding: dict[str, str]) -> str:
        return binding.get(arg, arg)

    def substitute(self, tokens: list, binding: dict[str, str]) -> list:
        if not binding:
            return list(tokens)
        out = []
        for t in tokens:
            if t.kind == "ident" and t.text in binding:
                arg = binding[t.text]
                if "<" in arg:  # a component with arguments: tokens of its own
                    out.extend(self.arg_tokens(arg, t))
                    continue
                t = dataclasses.replace(t, text=arg)
            out.append(t)
        return out

    def arg_tokens(self, arg: str, at) -> list:
        return [dataclasses.replace(t, pos=at.pos, offset=at.offset) for t in tokenize(arg, None)[:-1]]

    def split(self, tokens: list) -> list[_Statement]:
        """A component body's statements, by parsing it with a parser of its own (nested .comp recorded
        here, .init and .override read, not expanded)."""
        end = tokens[-1] if tokens else None
        sub = type(self)("", self.path)  # the parser this mixin is part of
        sub.components = self.components
        last = Token("end", "", end.pos if end else self.tok.pos, end.offset if end else 0)
        sub.toks = list(tokens) + [last]
        sub.recording = True
        out = []
        while sub.tok.kind != "end":
            start = sub.i
            n_decls, n_types = len(sub.decls), len(sub.types)
            n_rules, n_facts = len(sub.rules), len(sub.facts)
            sub.last_directive = None
            sub.statement()
            toks = sub.toks[start:sub.i]
            d = sub.last_directive
            if d == "comp":
                continue
            if d == "decl":
                out.append(_Statement(toks, "decl", list(sub.decls)[n_decls:]))
            elif d == "type" or d in ("number_type", "symbol_type"):
                out.append(_Statement(toks, "type", list(sub.types)[n_types:]))
            elif d == "init":
                out.append(_Statement(toks, "init", [sub.last_init]))
            elif d == "override":
                out.append(_Statement(toks, "override", [sub.last_override]))
            elif d is None:
                heads = [r.head.relation for r in sub.rules[n_rules:]] + [f.atom.relation for f in
                                                                          sub.facts[n_facts:]]
                out.append(_Statement(toks, "clause", heads))
            else:
                out.append(_Statement(toks, "other", []))
        return out

    def override(self) -> None:
        name = self.ident("a relation name after .override")
        if not self.recording:
            raise self.error(name, ".override outside a component")
        self.last_override = name.text
