"""The AST of the Soufflé subset (`datalog.souffle` parses into it) and its error type."""

from __future__ import annotations

import dataclasses

from fastlbp.core.errors import InputError

NUMBER = "number"
SYMBOL = "symbol"
UNSIGNED = "unsigned"
FLOAT = "float"
TYPES = (NUMBER, SYMBOL, UNSIGNED, FLOAT)
NUMERIC = (NUMBER, UNSIGNED, FLOAT)
UINT_MAX = 2**32 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
ORDER = ("<", "<=", ">", ">=")
# A number literal, in programs and facts files alike: decimal (leading zeros allowed: 007 is 7, as
# Soufflé reads facts), 0x.. or 0b..; ASCII digits only (str.isdigit and \d accept ARABIC-INDIC ONE).
NUMBER_PATTERN = r"0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+"
# Longest symbol accepted (characters). A symbol costs about 146 times its length on its way through
# clingo and the derivation graph (a 10 MB symbol took 1.46 GB, 50 MB ran out of memory).
MAX_SYMBOL = 1 << 16


def number_value(text: str) -> int:
    """The value of a literal matching NUMBER_PATTERN, with an optional sign; range not checked.

    Past 40 characters the literal is out of any range this subset accepts: it is answered as 2^64
    (with its sign) without converting it (int() of 4,300 digits or more raises).
    """
    digits = text.lstrip("+-")
    negative = text.startswith("-")
    if len(digits) > 40:
        value = 1 << 64
    elif digits[:2] in ("0x", "0X"):
        value = int(digits[2:], 16)
    elif digits[:2] in ("0b", "0B"):
        value = int(digits[2:], 2)
    else:
        value = int(digits, 10)
    return -value if negative else value


def number_shown(text: str) -> str:
    """A number literal for a message: at most 40 characters of it."""
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text):,} characters)"


def symbol_problem(value: str) -> str | None:
    """Why a symbol is refused (too long, or a NUL character that clingo's strings cannot hold), or None."""
    if len(value) > MAX_SYMBOL:
        return f"a symbol of {len(value):,} characters (at most {MAX_SYMBOL:,} are accepted)"
    if "\0" in value:
        return "a NUL character in a symbol (symbols are text without NUL)"
    return None


class ProgramError(InputError):
    """A problem in a Datalog program: `path`, 1-based `line` and `column`, and a message."""

    def __init__(self, path: str | None, line: int | None, column: int | None, message: str):
        self.column = column
        super().__init__(path, line, message)

    def __str__(self) -> str:
        where = str(self.path) if self.path else "<program>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.message}"


# AST ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Pos:
    line: int
    column: int
    file: str | None = None  # the file a `#line` marker of the preprocessor named; None: the program's


@dataclasses.dataclass(frozen=True)
class Var:
    name: str
    pos: Pos


@dataclasses.dataclass(frozen=True)
class Const:
    """A constant: `value` an int (number, unsigned), a float (float) or a str (symbol).

    `kind`: its type where the text or the checker fixed it (`1u`, `1.5`; an integer literal typed
    unsigned or float by where it stands); None for a symbol or an integer literal taken as a number.
    """

    value: int | float | str
    pos: Pos
    kind: str | None = None

    @property
    def type(self) -> str:
        if self.kind is not None:
            return self.kind
        return SYMBOL if isinstance(self.value, str) else FLOAT if isinstance(self.value, float) else NUMBER


@dataclasses.dataclass(frozen=True)
class Wildcard:
    pos: Pos


@dataclasses.dataclass(frozen=True)
class Functor:
    """An arithmetic operation or a functor: `op` ("+", "band", "min", "cat", "neg" ...) of `args`.

    `to`: for a type cast `as(x, T)` (op "as"), the type T as written (None otherwise). `ty`: the type
    an arithmetic operation computes in (unsigned, float), set by the checker; None for number.
    """

    op: str
    args: tuple
    pos: Pos
    to: str | None = None
    ty: str | None = None


@dataclasses.dataclass(frozen=True)
class Aggregate:
    """`kind` (count, sum, min, max) of `target` (None for count) over the tuples of `body`."""

    kind: str
    target: object
    body: tuple
    pos: Pos
    ty: str | None = None  # the value's type where the checker made it unsigned or float

@dataclasses.dataclass(frozen=True)
class Record:
    """A record `[a, b, ...]` (`args`), `nil` (args None), or a value `$Branch(a, ...)` of an algebraic
    data type (`branch` its constructor, `args` its fields: () for `$Branch`)."""

    args: tuple | None
    pos: Pos
    branch: str | None = None


Term = Var | Const | Wildcard | Functor | Aggregate | Record


def term_vars(term) -> list[Var]:
    """The variables of a term outside aggregates (an aggregate's own variables are local to it)."""
    if isinstance(term, Var):
        return [term]
    if isinstance(term, Functor) or (isinstance(term, Record) and term.args):
        return [v for a in term.args for v in term_vars(a)]
    return []


def pattern_vars(term) -> list[Var]:
    """The variables a term binds when matched against a value: itself, or those in its records."""
    if isinstance(term, Var):
        return [term]
    if isinstance(term, Record) and term.args:
        return [v for a in term.args for v in pattern_vars(a)]
    return []


def aggregates_in(term) -> list[Aggregate]:
    """The aggregates of a term, outermost first (not those nested in their bodies)."""
    if isinstance(term, Aggregate):
        return [term]
    if isinstance(term, Functor) or (isinstance(term, Record) and term.args):
        return [g for a in term.args for g in aggregates_in(a)]
    return []


@dataclasses.dataclass(frozen=True)
class Atom:
    relation: str
    args: tuple[Term, ...]
    pos: Pos
    negated: bool = False


@dataclasses.dataclass(frozen=True)
class Comparison:
    op: str
    left: Term
    right: Term
    pos: Pos


Literal = Atom | Comparison


@dataclasses.dataclass(frozen=True)
class Decl:
    name: str
    attrs: tuple[tuple[str, str], ...]  # (attribute name, type)
    pos: Pos

    @property
    def arity(self) -> int:
        return len(self.attrs)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(t for _, t in self.attrs)


@dataclasses.dataclass(frozen=True)
class Rule:
    """Rule `index` in file order: head :- body.

    `label`: its stable name (`datalog.souffle_rules`: head relation and a hash of its text), given once
    the program is parsed; `name` is the label, or `R{index}` before it has one.
    """

    index: int
    head: Atom
    body: tuple[Literal, ...]
    text: str
    pos: Pos
    label: str = ""
    auxiliary: bool = False  # made by datalog.souffle_project (an existence check): probability 1 by default

    @property
    def name(self) -> str:
        return self.label or f"R{self.index}"

    @property
    def positive(self) -> tuple[Atom, ...]:
        return tuple(x for x in self.body if isinstance(x, Atom) and not x.negated)

    @property
    def negative(self) -> tuple[Atom, ...]:
        return tuple(x for x in self.body if isinstance(x, Atom) and x.negated)

    @property
    def comparisons(self) -> tuple[Comparison, ...]:
        return tuple(x for x in self.body if isinstance(x, Comparison))

    def aggregates(self) -> list[Aggregate]:
        """The aggregates of the rule (head and body, outermost first)."""
        terms = list(self.head.args)
        for x in self.body:
            terms.extend(x.args if isinstance(x, Atom) else (x.left, x.right))
        return [g for t in terms for g in aggregates_in(t)]

    def aggregated(self) -> set[str]:
        """Relations an aggregate of the rule ranges over (also in nested aggregates)."""
        out: set[str] = set()
        todo = self.aggregates()
        while todo:
            g = todo.pop()
            for x in g.body:
                if isinstance(x, Atom):
                    out.add(x.relation)
                    terms = x.args
                else:
                    terms = (x.left, x.right)
                todo.extend(a for t in terms for a in aggregates_in(t))
        return out


@dataclasses.dataclass(frozen=True)
class Fact:
    atom: Atom

    @property
    def values(self) -> tuple[int | str, ...]:
        return tuple(a.value for a in self.atom.args)


@dataclasses.dataclass
class Program:
    """A checked program.

    `input_params`: {relation: its .input parameters (filename, delimiter)};
    `output_files`: {relation: the filename of its .output} where given.
    `records`: {record type: its fields (name, type)}; an attribute's type is number, symbol or one of
    these.

    Attributes:
        path: the source file (for messages).
        decls: {relation: Decl} in declaration order.
        inputs: {relation: Pos of its .input}.
        outputs: {relation: Pos of its .output}.
        rules: rules in file order (rule k is `Rk`).
        facts: facts of the program text, in file order.
        strata: relations stratum by stratum (each a list), lowest first:
            a relation is in a stratum above every relation it negates.
    """

    path: str | None
    decls: dict[str, Decl]
    inputs: dict[str, Pos]
    outputs: dict[str, Pos]
    rules: list[Rule]
    facts: list[Fact]
    strata: list[list[str]] = dataclasses.field(default_factory=list)
    input_params: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    records: dict[str, list[tuple[str, str]]] = dataclasses.field(default_factory=dict)
    output_files: dict[str, str] = dataclasses.field(default_factory=dict)
    adts: dict[str, dict[str, list[tuple[str, str]]]] = dataclasses.field(default_factory=dict)

    def depends(self) -> dict[str, set[str]]:
        """{relation: relations its rules' bodies name (positively, negated or aggregated)}."""
        deps: dict[str, set[str]] = {r: set() for r in self.decls}
        for rule in self.rules:
            deps[rule.head.relation].update(a.relation for a in rule.body if isinstance(a, Atom))
            deps[rule.head.relation].update(rule.aggregated())
        return deps

    def negated(self) -> set[str]:
        """Relations that some rule negates or aggregates over (decided on the least model)."""
        return {a.relation for r in self.rules for a in r.negative} | {
            rel for r in self.rules for rel in r.aggregated()}
