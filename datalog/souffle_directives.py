"""The directives of the Soufflé subset (`.decl`, `.type`, `.input`/`.output`/`.printsize` and their
parameters, `.pragma`, `.plan`) and the C preprocessor: a mixin of `datalog.souffle`'s parser.

What changes no result is accepted: user types (`.type A <: symbol`, `.type B = A | C`, `.type C = A`,
the older `.number_type N` and `.symbol_type S`) stand for the primitive type they resolve to;
`.pragma`, `.plan`, `.printsize` and storage qualifiers (btree, brie, inline, magic ...) are read and
ignored. An `eqrel` relation is closed under reflexivity, symmetry and transitivity, as Soufflé closes
it, by three rules added after the program's. I/O parameters of `.input`: `IO=file`, `filename` and
`delimiter` are honoured; any other is refused by name. Those of `.output` and `.printsize` (`IO=stdout`,
`headers=true`, `compress`, ...) say where Soufflé writes a relation, never which tuples it holds: any is
accepted (`filename` is kept as the output's file name). Records are supported (in programs, not
in facts files). What changes results and is not implemented (ADTs,
choice domains, `.limitsize`) is refused where it is written.
"""

from __future__ import annotations

import os
import re

from datalog.souffle_ast import NUMBER, SYMBOL, Decl, Pos, ProgramError

PRIMITIVES = (NUMBER, SYMBOL, "unsigned", "float")
# Storage and evaluation hints: they choose data structures or a plan, never the least model.
IGNORED_QUALIFIERS = {"btree", "brie", "btree_delete", "inline", "no_inline", "magic", "no_magic",
                      "overridable"}
IO_PARAMETERS = ("IO", "filename", "delimiter")
_REFUSED_DIRECTIVES = {
    "functor": "user-defined functors (.functor) are not supported",
    "limitsize": ".limitsize is not supported (it changes the result: Soufflé stops a relation early)",
}


class DirectivesMixin:
    """Directive parsing for `datalog.souffle._Parser` (which provides tok, peek, accept, expect ...)."""

    def directive(self) -> None:
        dot = self.tok
        self.i += 1
        name = self.ident("a directive name")
        n = name.text
        self.last_directive = n
        if n == "comp":
            self.component(dot)
        elif n == "init" and self.recording:  # a nested instance: expanded with its component's instance
            inst = self.ident("an instance name after .init")
            self.expect("=", "'=' after the instance name")
            self.ident("a component name")
            self.comp_args()
            self.last_init = inst.text
        elif n == "init":
            self.init(dot)
        elif n == "override":
            self.override()
        elif n == "decl":
            self.decl()
        elif n in ("input", "output", "printsize"):
            self.io(n)
        elif n == "type":
            self.type_decl(dot)
        elif n in ("number_type", "symbol_type"):
            t = self.ident("a type name")
            self.types[t.text] = ("alias", [NUMBER if n == "number_type" else SYMBOL], t.pos)
        elif n == "pragma":
            while self.tok.kind == "string" and self.tok.pos.line == name.pos.line:
                self.i += 1
        elif n == "plan":
            self.plan()
        else:
            raise self.error(dot, _REFUSED_DIRECTIVES.get(
                n, f"unknown directive '.{n}' (known: .decl, .type, .input, .output, .printsize, .pragma, "
                   ".plan)"))

    def plan(self) -> None:
        """`.plan 0:(1,2), 1:(2,1)`: a join order, read and ignored."""
        while True:
            if self.tok.kind != "number":
                raise self.expected("a version number in .plan")
            self.i += 1
            self.expect(":", "':' in .plan")
            self.expect("(", "'(' in .plan")
            while not self.accept(")"):
                if self.tok.kind != "number":
                    raise self.expected("an atom number in .plan")
                self.i += 1
                self.accept(",")
            if not self.accept(","):
                return

    def type_decl(self, dot) -> None:
        name = self.ident("a type name after .type")
        if self.accept("<:"):
            base = self.type_name()
            self.types[name.text] = ("alias", [base], name.pos)
            return
        if not self.accept("="):
            raise self.expected("'<:' (a subtype) or '=' (an alias or a union) after the type name")
        if self.accept("["):
            fields: list[tuple[str, str]] = []
            while not self.accept("]"):
                field = self.ident("a field name")
                self.expect(":", "':' and a type after the field name")
                fields.append((field.text, self.type_name()))
                if not self._is("]"):
                    self.expect(",", "',' or ']'")
            self.types[name.text] = ("record", fields, name.pos)
            return
        members = [self.type_name()]
        if self._is("{"):
            self.types[name.text] = ("adt", self.branches(members[0]), name.pos)
            return
        while self.accept("|"):
            members.append(self.type_name())
        self.types[name.text] = ("alias", members, name.pos)

    def branches(self, first: str) -> list[tuple[str, list[tuple[str, str]]]]:
        """An algebraic data type's branches `A {x: T, ...} | B {} | ...` (the first name read)."""
        out = []
        name = first
        while True:
            self.expect("{", "'{' and the fields of the branch")
            fields: list[tuple[str, str]] = []
            while not self.accept("}"):
                field = self.ident("a field name")
                self.expect(":", "':' and a type after the field name")
                fields.append((field.text, self.type_name()))
                if not self._is("}"):
                    self.expect(",", "',' or '}'")
            out.append((name, fields))
            if not self.accept("|"):
                return out
            name = self.type_name()

    def type_name(self) -> str:
        t = self.ident("a type name")
        if self._qualified(t):
            raise self.error(self.tok, "qualified names (components) are not supported")
        return t.text

    def io(self, what: str) -> None:
        line = self.tok.pos.line
        while True:
            rel = self.ident("a relation name")
            if self._qualified(rel):
                raise self.error(self.tok, "qualified names (components) are not supported")
            params: dict[str, str] = {}
            if self.accept("("):
                while not self.accept(")"):
                    key = self.ident("an I/O parameter name (key=value)")
                    self.expect("=", f"'=' after I/O parameter {key.text!r}")
                    v = self.tok
                    if v.kind not in ("string", "ident", "number"):
                        raise self.expected(f"a value of I/O parameter {key.text!r}")
                    self.i += 1
                    value = str(v.value if v.kind != "ident" else v.text)
                    # An output's or a printsize's parameters say where and how Soufflé writes the
                    # relation (IO=stdout, headers, compress, ...): they change no tuple, so any is read
                    # and kept; only an input's decide what is read.
                    if what == "input":
                        self.input_parameter(key, v, value)
                    params[key.text] = value
                    self.accept(",")
            if what == "input":
                self.inputs.setdefault(rel.text, rel.pos)
                self.input_params[rel.text] = params
            elif what == "output":
                self.outputs.setdefault(rel.text, rel.pos)
                if "filename" in params:
                    self.output_files[rel.text] = params["filename"]
            else:
                self.printsize.setdefault(rel.text, rel.pos)
            if not self.accept(","):
                break
        if self.tok.kind == "ident" and self.tok.pos.line == line:
            raise self.error(self.tok, f"expected ',' between the relations of .{what}, got "
                                       f"{self.tok.text!r}")

    def input_parameter(self, key, value_tok, value: str) -> None:
        """Refuses an `.input` parameter that is not honoured (it would change what is read)."""
        if key.text not in IO_PARAMETERS:
            raise self.error(key, f"I/O parameter {key.text!r} of .input is not supported (supported: "
                             "IO=file, filename, delimiter)")
        if key.text == "IO" and value != "file":
            raise self.error(value_tok, f"I/O parameter IO={value} of .input is not supported (only IO=file: "
                             "facts are read from files)")
        if key.text == "delimiter" and len(value) != 1:
            raise self.error(value_tok, f"delimiter {value!r}: one character is supported")

    def decl(self) -> None:
        names = [self.ident("a relation name after .decl")]
        while self.accept(","):
            names.append(self.ident("a relation name"))
        for name in names:
            if name.text in self.decls:
                first = self.decls[name.text].pos
                raise self.error(name, f"relation {name.text!r} is declared twice (first at line "
                                 f"{first.line})")
        self.expect("(", "'(' after the relation name")
        attrs: list[tuple[str, str]] = []
        if not self.accept(")"):
            while True:
                attr = self.ident("an attribute name")
                self.expect(":", "':' and a type after the attribute name")
                ty = self.ident("a type")
                if self._qualified(ty):
                    raise self.error(self.tok, "qualified names (components) are not supported")
                if any(a == attr.text for a, _ in attrs):
                    raise self.error(attr, f"attribute {attr.text!r} appears twice")
                attrs.append((attr.text, ty.text))
                self.attr_pos[(names[0].text, len(attrs) - 1)] = ty.pos
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        while self.tok.kind == "ident" and not (self.peek().kind == "punct" and self.peek().text in "(,:"):
            q = self.tok
            if q.text in ("input", "output", "printsize"):
                for name in names:
                    {"input": self.inputs, "output": self.outputs, "printsize": self.printsize}[q.text] \
                        .setdefault(name.text, q.pos)
            elif q.text == "eqrel":
                if len(attrs) != 2 or attrs[0][1] != attrs[1][1]:
                    raise self.error(q, "an eqrel relation has two attributes of one type")
                self.eqrel.extend(names)
            elif q.text == "inline":  # unfolded where plain (datalog.souffle_inline), else a hint
                self.inline.update(n.text for n in names)
            elif q.text == "choice":
                raise self.error(q, "choice-domain is not supported")
            elif q.text not in IGNORED_QUALIFIERS:
                break
            self.i += 1
        for name in names:
            self.decls[name.text] = Decl(name.text, tuple(attrs), name.pos)
            for k in range(len(attrs)):
                self.attr_pos[(name.text, k)] = self.attr_pos[(names[0].text, k)]

    def resolve_types(self) -> None:
        """Every attribute's type replaced by the primitive it stands for (number or symbol)."""
        memo: dict[str, str] = {}

        def resolve(t: str, pos: Pos, seen: tuple[str, ...] = ()) -> str:
            if t in PRIMITIVES:
                return t
            if t in memo:
                return memo[t]
            if t in seen and self.types.get(t, ("",))[0] not in ("record", "adt"):
                raise ProgramError(self.path, pos.line, pos.column, f"type {t!r} is defined through itself")
            if t not in self.types:
                raise ProgramError(self.path, pos.line, pos.column, f"type {t!r} is not declared (add "
                                   f".type {t} <: number or symbol)")
            kind, members, tpos = self.types[t]
            if kind == "adt":  # stands for itself, as a record; its branches' fields may name it
                memo[t] = t
                self.adts[t] = {}
                for branch, fields in members:
                    if branch in self.branch_type and self.branch_type[branch] != t:
                        raise ProgramError(self.path, tpos.line, tpos.column, f"branch {branch!r} of type "
                                           f"{t!r} is a branch of {self.branch_type[branch]!r} too")
                    self.branch_type[branch] = t
                    self.adts[t][branch] = [(f, resolve(ft, tpos, seen + (t,))) for f, ft in fields]
                return t
            if kind == "record":  # a record type stands for itself; its fields may name it (lists)
                memo[t] = t
                self.record_fields[t] = []
                self.record_fields[t] = [(f, resolve(ft, tpos, seen + (t,))) for f, ft in members]
                return t
            bases = {resolve(m, tpos, seen + (t,)) for m in members}
            if len(bases) > 1:
                raise ProgramError(self.path, tpos.line, tpos.column, f"type {t!r} unites types of "
                                   f"different primitive types ({', '.join(sorted(bases))})")
            memo[t] = bases.pop()
            return memo[t]

        for rel, d in list(self.decls.items()):
            attrs = []
            for k, (a, t) in enumerate(d.attrs):
                pos = self.attr_pos.get((rel, k), d.pos)
                attrs.append((a, resolve(t, pos)))
            self.decls[rel] = Decl(d.name, tuple(attrs), d.pos)
        for t, (kind, _, tpos) in self.types.items():  # record types no relation uses, checked too
            if kind in ("record", "adt"):
                resolve(t, tpos)
        self.resolve_type = resolve  # for the checker: the type of a cast as(x, T)


MAX_INCLUDE_DEPTH = 64  # files open through #include at once (gcc stops at 200; Python's stack first)
# Tokens macro expansion may make, counted at every level of expansion, per character of the program's
# files: an honest program expands each token a few times; `#define Ak (A(k-1)+A(k-1))` 21 levels deep
# doubles it 21 times (2^21 tokens at the top, 1.2 GB and growing after 100 s before this bound).
MACRO_TOKENS_PER_CHARACTER = 8
MIN_MACRO_TOKENS = 1_000_000


def preprocess(text: str, path: str | None) -> str:
    """`text` through the C preprocessor (pcpp) when it has a directive line (`#include`, `#define`...),
    with `#line` markers that `datalog.souffle.tokenize` follows; else `text` unchanged.

    `#error` in a branch that is taken stops with its message (as cpp stops); `#include` nests at most
    MAX_INCLUDE_DEPTH files (a file including itself names the chain), and macro expansion may make at
    most MACRO_TOKENS_PER_CHARACTER tokens per character of the files read (at least MIN_MACRO_TOKENS).
    Like Soufflé's preprocessor, `#include` reads any path it names, relative to the including file.

    Raises:
        ProgramError: a preprocessor error, `#error`, or one of the limits above (naming it).
    """
    if not re.search(r"^[ \t]*#", text, re.MULTILINE):
        return text
    import io

    from pcpp import Preprocessor

    from fastlbp.core.errors import read_text

    class _Pre(Preprocessor):
        def __init__(self):
            super().__init__()
            self.chain: list[str] = []  # the files being read, outermost first (absolute paths)
            self.shown: list[str] = []  # the same as written
            self.budget = MIN_MACRO_TOKENS
            self.made = 0
            self.level = 0  # expand_macros calls open (it calls itself for arguments and bodies)
            self.where = None

        def on_error(self, file, line, msg):
            raise ProgramError(file, line, None, f"preprocessor: {msg}")

        def on_file_open(self, is_system_include, includepath):
            # Read as every other input is (fastlbp.core.errors.read_text): at most 256 MiB from a pipe or
            # a device (#include "/dev/zero" read without bound: a MemoryError), UTF-8, gzip allowed. A
            # path that is not a file raises OSError: pcpp tries the next folder, then reports it.
            if not os.path.isfile(includepath) and not os.path.exists(includepath):
                raise FileNotFoundError(includepath)
            if os.path.isdir(includepath):
                raise IsADirectoryError(includepath)
            return io.StringIO(read_text(includepath))

        def on_directive_unknown(self, directive, toks, ifpassthru, precedingtoks):
            if directive.value == "error":  # only reached in a branch that is taken
                message = "".join(t.value for t in toks).strip()
                raise ProgramError(directive.source, directive.lineno, None, f"#error {message}")
            return super().on_directive_unknown(directive, toks, ifpassthru, precedingtoks)

        def parsegen(self, input, source=None, abssource=None):
            name = abssource or source or "<program>"
            if len(self.chain) >= MAX_INCLUDE_DEPTH:
                files, shown = self.chain + [name], self.shown + [source or name]
                first = next((k for k, f in enumerate(files) if f in files[k + 1:]), None)
                if first is None:  # 64 different files
                    what, cycle = "nests too deeply", shown
                else:  # the first file that comes again, to where it does: the cycle
                    what, cycle = "includes itself", shown[first:files.index(files[first], first + 1) + 1]
                shown = " -> ".join(cycle)
                raise ProgramError(self.shown[-1], None, None,
                                   f"#include {what}: {shown} (at most {MAX_INCLUDE_DEPTH} files deep; an "
                                   "include guard, #ifndef X / #define X, stops a file including itself)")
            self.chain.append(name)
            self.shown.append(source or name)  # as the program or its #include wrote it
            self.budget += MACRO_TOKENS_PER_CHARACTER * len(input)
            try:
                yield from super().parsegen(input, source, abssource)
            finally:
                self.chain.pop()
                self.shown.pop()

        def expand_macros(self, tokens, expanding_from=[]):  # noqa: B006  (pcpp's signature)
            if not self.level:  # the program's own line being expanded (inner calls are macro bodies)
                self.where = next((t for t in tokens if t.value in self.macros), None)
            self.level += 1
            try:
                out = super().expand_macros(tokens, expanding_from)
            finally:
                self.level -= 1
            self.made += len(out)
            if self.made > self.budget:
                where = self.where
                raise ProgramError(getattr(where, "source", None) or path, getattr(where, "lineno", None),
                                   None,
                                   f"macro expansion made more than {self.budget:,} tokens (the limit: "
                                   f"{MACRO_TOKENS_PER_CHARACTER} per character of the program's files, at "
                                   f"least {MIN_MACRO_TOKENS:,}); does a macro double itself, as "
                                   "#define A2 (A1+A1) does?")
            return out

    pre = _Pre()
    pre.line_directive = "#line"
    pre.compress = 0
    if path:
        pre.add_path(os.path.dirname(os.path.abspath(path)))
    out = io.StringIO()
    try:
        pre.parse(text, path or "<program>")
        pre.write(out)
    except RecursionError:
        raise ProgramError(path, None, None, "preprocessor: macros or conditions nest too deeply") from None
    return out.getvalue()
