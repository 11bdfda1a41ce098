"""A rule's text and its stable name: what `fastlbp rules` lists and rule-probability files name.

    text = datalog.souffle_rules.rule_text(rule)      # "cg.reach(a, b) :- cg.edge(a, b)."
    names = datalog.souffle_rules.rule_names(rules)   # ["cg.reach-3fa2c1", ...], one per rule

A rule's text is written from the checked rule, not copied from the file: a rule of a component
instance names the instance's relations (`cg.reach`, `vg.reach`: two instances are two rules with two
texts), a disjunction's alternatives are one rule each with its own text, and the rules Soufflé adds
(an `eqrel` relation's closure) have texts too.

A rule's name is `HEAD-HASH`: its head relation and the first 6 hex digits of the SHA-256 of its
*canonical* text, the text with its variables renamed in order of appearance (`v0`, `v1`, ...). So the
name depends on what the rule says, not on where it stands: reordering the program, adding or removing
other rules, renaming a variable, reformatting or commenting keeps every name; changing the rule itself
(another atom, constant or relation) gives it a new one. Rules with one canonical text (a rule written
twice) are told apart by `-2`, `-3`, ... in file order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from datalog.souffle_ast import (
    UNSIGNED,
    Aggregate,
    Atom,
    Comparison,
    Const,
    Functor,
    Record,
    Rule,
    Var,
    Wildcard,
)
from datalog.souffle_values import float_text

HASH_DIGITS = 6
# Soufflé's binary operators (datalog.souffle_terms._LEVELS), written between their arguments.
_BINARY = {"lor", "land", "bor", "bxor", "band", "bshl", "bshr", "bshru", "+", "-", "*", "/", "%", "^"}
_UNARY = {"neg": "-", "bnot": "bnot ", "lnot": "lnot "}
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}


def _string(value: str) -> str:
    return '"' + "".join(_ESCAPES.get(c, c) for c in value) + '"'


def term_text(t, var: Callable[[str], str] = str) -> str:
    """A term as Soufflé reads it (`var` renames variables)."""
    if isinstance(t, Var):
        return var(t.name)
    if isinstance(t, Const):
        if isinstance(t.value, str):
            return _string(t.value)
        if isinstance(t.value, float):  # as Soufflé writes it, read back as a float
            text = float_text(t.value)
            return text if any(c in text for c in ".en") else text + ".0"
        return str(t.value) + ("u" if t.kind == UNSIGNED else "")
    if isinstance(t, Wildcard):
        return "_"
    if isinstance(t, Record) and t.branch is not None:
        return f"${t.branch}" + (f"({', '.join(term_text(a, var) for a in t.args)})" if t.args else "")
    if isinstance(t, Record):
        return "nil" if t.args is None else "[" + ", ".join(term_text(a, var) for a in t.args) + "]"
    if isinstance(t, Functor):
        args = [term_text(a, var) for a in t.args]
        if t.op in _BINARY and len(args) == 2:
            left, right = (f"({a})" if _compound(x) else a for a, x in zip(args, t.args, strict=True))
            return f"{left} {t.op} {right}"
        if t.op in _UNARY:
            return _UNARY[t.op] + (f"({args[0]})" if _compound(t.args[0]) else args[0])
        if t.op == "as":
            return f"as({args[0]}, {t.to})"
        return f"{t.op}({', '.join(args)})"
    if isinstance(t, Aggregate):
        target = "" if t.target is None else " " + term_text(t.target, var)
        return f"{t.kind}{target} : {{ {', '.join(literal_text(x, var) for x in t.body)} }}"
    raise TypeError(f"not a term: {t!r}")


def _compound(t) -> bool:
    """A term that needs parentheses as an operator's argument."""
    return isinstance(t, Functor) and (t.op in _BINARY or t.op in _UNARY) or isinstance(t, Aggregate)


def literal_text(x, var: Callable[[str], str] = str) -> str:
    if isinstance(x, Atom):
        return ("!" if x.negated else "") + f"{x.relation}({', '.join(term_text(a, var) for a in x.args)})"
    if isinstance(x, Comparison):
        left, right = term_text(x.left, var), term_text(x.right, var)
        if x.op.lstrip("!") in ("match", "contains"):
            return f"{x.op}({left}, {right})"
        return f"{left} {x.op} {right}"
    raise TypeError(f"not a literal: {x!r}")


def rule_text(rule: Rule, var: Callable[[str], str] = str) -> str:
    """`head :- body.` (`head.` for a rule without a body)."""
    head = literal_text(rule.head, var)
    if not rule.body:
        return head + "."
    return f"{head} :- {', '.join(literal_text(x, var) for x in rule.body)}."


def canonical_text(rule: Rule) -> str:
    """The rule's text with its variables renamed v0, v1, ... in order of appearance."""
    names: dict[str, str] = {}
    return rule_text(rule, lambda n: names.setdefault(n, f"v{len(names)}"))


def rule_names(rules: list[Rule]) -> list[str]:
    """Every rule's stable name (`HEAD-HASH`, see the module docstring), in the order of `rules`."""
    seen: dict[str, int] = {}
    out = []
    for rule in rules:
        digest = hashlib.sha256(canonical_text(rule).encode("utf-8")).hexdigest()[:HASH_DIGITS]
        base = f"{rule.head.relation}-{digest}"
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


__all__ = ["rule_text", "canonical_text", "rule_names", "term_text", "literal_text", "HASH_DIGITS"]
