"""Soufflé's functors with Soufflé's semantics, for clingo's grounder (`@name(...)` terms).

clingo's own `+ - * / \\ & ? ^ ~` are used where they agree with Soufflé on 32-bit numbers (`/` and
`\\` truncate towards zero as C does, overflow wraps; a division by a non-constant is `@div`/`@mod`,
since clingo's traps on INT_MIN / -1); the rest are methods of `Context`, which
`datalog.ground_process` hands to `Control.ground`. A functor that has no value (a division by zero,
`to_number` of a non-number, `substr` out of range) makes the rule instance not hold, as clingo's own
undefined arithmetic does.
"""

from __future__ import annotations

import dataclasses
import re

from datalog.regex_match import PatternError, UnsupportedPattern, compile_pattern
from datalog.souffle_ast import MAX_SYMBOL

_BITS = 32
_BAD_BRACE = re.compile(r"(?<!\\)\{(?![0-9]+(,[0-9]*)?\})")
_POSIX_CLASSES = {"digit": "0-9", "alpha": "a-zA-Z", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
                  "space": " \\t\\n\\r\\f\\v", "xdigit": "0-9A-Fa-f", "punct": "!-/:-@\\[-`{-~",
                  "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f", "print": " -~", "graph": "!-~"}


def _wrap(n: int) -> int:
    """`n` as Soufflé's 32-bit signed number (two's complement wrap-around)."""
    return (n + (1 << (_BITS - 1))) % (1 << _BITS) - (1 << (_BITS - 1))


@dataclasses.dataclass(frozen=True)
class FunctorLimits:
    """What the functors of one grounding may make (`datalog.functors.Context` holds to them).

    Attributes:
        values: the values `range` may make in all (0: no limit); the rule-instance limit, since each
            value makes at least one instance.
        chars: the characters computed symbols (cat, substr, to_string) may hold in all (0: no limit).
        basis: where `values` comes from, for the error ("--max-rule-instances", a memory limit).
        chars_basis: where `chars` comes from ("1/4 of 3.9 GB (the address-space limit ...)").
        memory: the memory the process may use, in words (for an out-of-memory error).
    """

    values: int = 0
    chars: int = 0
    basis: str = ""
    chars_basis: str = ""
    memory: str = ""


class Context:
    """The `@` functions of a translated program (clingo calls them with and expects clingo symbols).

    Each holds to the grounding's limits (`FunctorLimits`): `range` makes at most
    `limits.values` values in all, computed symbols (`cat`, `substr`, `to_string`) hold at most
    MAX_SYMBOL characters each and `limits.chars` in all, and `match` runs in time linear in the text
    (`datalog.regex_match`). Past a limit a function records the problem in `problem` and raises (clingo
    stops grounding; `datalog.ground_process` reports `problem`).
    """

    def __init__(self, limits: FunctorLimits | None = None):
        import clingo

        self._clingo = clingo
        self.limits = limits or FunctorLimits()
        self.values = 0  # made by range so far
        self.chars = 0  # of computed symbols so far
        self.problem: str | None = None
        self._patterns: dict = {}

    def _stop(self, message: str):
        self.problem = message
        raise RuntimeError(message)

    def _string(self, text: str, functor: str):
        """A computed symbol, within the limits."""
        if len(text) > MAX_SYMBOL:
            self._stop(f"{functor}() made a symbol of {len(text):,} characters, past the limit of "
                       f"{MAX_SYMBOL:,} (as for symbols in programs and facts)")
        self.chars += len(text)
        if self.limits.chars and self.chars > self.limits.chars:
            self._stop(f"computed symbols (cat, substr, to_string) took more than {self.limits.chars:,} "
                       f"characters in all ({self.limits.chars_basis or 'the limit'})")
        return self._clingo.String(text)

    def _num(self, n: int):
        return self._clingo.Number(_wrap(n))

    def _undefined(self):
        # No value (clingo takes a sequence as a pool of values): the instance does not hold.
        return []

    # arithmetic --------------------------------------------------------------
    def pow(self, a, b):
        x, y = a.number, b.number
        if y < 0:  # Soufflé: pow() in doubles, converted to an integer
            return self._num(int(float(x) ** y) if x != 0 else 0)
        return self._num(pow(x, y, 1 << _BITS))

    def bshl(self, a, b):
        return self._num(a.number << (b.number % _BITS))

    def bshr(self, a, b):
        return self._num(a.number >> (b.number % _BITS))

    def bshru(self, a, b):
        return self._num((a.number % (1 << _BITS)) >> (b.number % _BITS))

    def land(self, a, b):
        return self._num(int(bool(a.number) and bool(b.number)))

    def lor(self, a, b):
        return self._num(int(bool(a.number) or bool(b.number)))

    def lnot(self, a):
        return self._num(int(not a.number))

    def range(self, a, b, step=None):
        """Soufflé's range(a, b[, step]): a, a + step, ... up to b exclusive; step 1 or -1 by default."""
        lo, hi = a.number, b.number
        by = (1 if lo <= hi else -1) if step is None else step.number
        if by == 0:
            return []
        values = range(lo, hi, by)
        self.values += len(values)
        if self.limits.values and self.values > self.limits.values:
            self._stop(f"range({lo}, {hi}{'' if step is None else f', {by}'}) makes {len(values):,} values, "
                       f"past the limit of {self.limits.values:,} ({self.limits.basis or 'the limit'}: each "
                       "value makes a rule instance)")
        return [self._clingo.Number(v) for v in values]

    def min(self, *args):
        return min(args, key=self._key)

    def max(self, *args):
        return max(args, key=self._key)

    def _key(self, s):
        return s.number if s.type == self._clingo.SymbolType.Number else s.string

    # strings -----------------------------------------------------------------
    def cat(self, *args):
        total = sum(len(a.string) for a in args)
        if total > MAX_SYMBOL:  # refused before the string is made
            self._stop(f"cat() made a symbol of {total:,} characters, past the limit of {MAX_SYMBOL:,} (as "
                       "for symbols in programs and facts)")
        return self._string("".join(a.string for a in args), "cat")

    def strlen(self, a):
        return self._num(len(a.string))

    def substr(self, s, i, n):
        text, start, length = s.string, i.number, n.number
        if start < 0 or start > len(text):  # Soufflé warns: no value
            return self._undefined()
        if length < 0:  # a huge unsigned length in C++: the rest of the string
            length = len(text)
        return self._string(text[start:start + length], "substr")

    def ord(self, a):
        return self._num(ord(a.string[0]) if a.string else 0)

    def to_number(self, a):
        """Soufflé's to_number: the decimal number the symbol holds; one outside 32 bits has no value
        (Soufflé's stoi throws there and stops the program; fastlbp does not wrap it silently)."""
        text = a.string.strip()
        try:
            value = int(text, 10)
        except ValueError:
            return self._undefined()
        if not -(1 << (_BITS - 1)) <= value < (1 << (_BITS - 1)):
            return self._undefined()
        return self._clingo.Number(value)

    def div(self, a, b):
        """`/` truncating towards zero as C does; INT_MIN / -1 wraps to INT_MIN (clingo's own `/` traps
        there: SIGFPE); by zero no value."""
        x, y = a.number, b.number
        if y == 0:
            return self._undefined()
        q = abs(x) // abs(y)
        return self._num(q if (x < 0) == (y < 0) else -q)

    def mod(self, a, b):
        """`%` with the dividend's sign, as C; INT_MIN % -1 is 0; by zero no value."""
        x, y = a.number, b.number
        if y == 0:
            return self._undefined()
        r = abs(x) % abs(y)
        return self._num(-r if x < 0 else r)

    def to_string(self, a):
        return self._string(str(a.number), "to_string")

    def match(self, pattern, s):
        # Soufflé matches with std::regex (ECMAScript), which knows POSIX classes inside brackets; the
        # matching is an automaton's (datalog.regex_match: linear in the text, as RE2), never backtracking.
        text = pattern.string
        matcher = self._patterns.get(text)
        if matcher is None:
            matcher = self._compile(text)
            if len(self._patterns) >= 4096:
                self._patterns.clear()
            self._patterns[text] = matcher
        if matcher is False:  # Soufflé warns and neither match nor !match holds
            return self._undefined()
        return self._num(int(matcher.fullmatch(s.string)))

    def _compile(self, text: str):
        for name, chars in _POSIX_CLASSES.items():
            text = text.replace(f"[:{name}:]", chars)
        if _BAD_BRACE.search(text):  # ECMAScript refuses what Python reads as a literal '{'
            return False
        try:
            return compile_pattern(text)
        except PatternError:
            return False
        except UnsupportedPattern as err:
            self._stop(f"match(): pattern {text[:80]!r} uses {err}, which fastlbp does not run (it matches "
                       "with an automaton, in time linear in the text, never backtracking)")

    def contains(self, part, s):
        return self._num(int(part.string in s.string))
