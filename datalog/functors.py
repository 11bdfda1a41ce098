"""Soufflé's functors with Soufflé's semantics, for clingo's grounder (`@name(...)` terms).

clingo's own `+ - * / \\ & ? ^ ~` are used where they agree with Soufflé on 32-bit numbers (`/` and
`\\` truncate towards zero as C does, overflow wraps); the rest are methods of `Context`, which
`datalog.ground_process` hands to `Control.ground`. A functor that has no value (a division by zero,
`to_number` of a non-number, `substr` out of range) makes the rule instance not hold, as clingo's own
undefined arithmetic does.
"""

from __future__ import annotations

import re

_BITS = 32
_BAD_BRACE = re.compile(r"(?<!\\)\{(?![0-9]+(,[0-9]*)?\})")
_POSIX_CLASSES = {"digit": "0-9", "alpha": "a-zA-Z", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
                  "space": " \\t\\n\\r\\f\\v", "xdigit": "0-9A-Fa-f", "punct": "!-/:-@\\[-`{-~",
                  "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f", "print": " -~", "graph": "!-~"}


def _wrap(n: int) -> int:
    """`n` as Soufflé's 32-bit signed number (two's complement wrap-around)."""
    return (n + (1 << (_BITS - 1))) % (1 << _BITS) - (1 << (_BITS - 1))


class Context:
    """The `@` functions of a translated program (clingo calls them with and expects clingo symbols)."""

    def __init__(self):
        import clingo

        self._clingo = clingo

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
        return [self._clingo.Number(v) for v in range(lo, hi, by)]

    def min(self, *args):
        return min(args, key=self._key)

    def max(self, *args):
        return max(args, key=self._key)

    def _key(self, s):
        return s.number if s.type == self._clingo.SymbolType.Number else s.string

    # strings -----------------------------------------------------------------
    def cat(self, *args):
        return self._clingo.String("".join(a.string for a in args))

    def strlen(self, a):
        return self._num(len(a.string))

    def substr(self, s, i, n):
        text, start, length = s.string, i.number, n.number
        if start < 0 or start > len(text):  # Soufflé warns: no value
            return self._undefined()
        if length < 0:  # a huge unsigned length in C++: the rest of the string
            length = len(text)
        return self._clingo.String(text[start:start + length])

    def ord(self, a):
        return self._num(ord(a.string[0]) if a.string else 0)

    def to_number(self, a):
        text = a.string.strip()
        try:
            return self._num(int(text, 10))
        except ValueError:
            return self._undefined()

    def to_string(self, a):
        return self._clingo.String(str(a.number))

    def match(self, pattern, s):
        # Soufflé matches with std::regex (ECMAScript), which knows POSIX classes inside brackets.
        text = pattern.string
        for name, chars in _POSIX_CLASSES.items():
            text = text.replace(f"[:{name}:]", chars)
        if _BAD_BRACE.search(text):  # ECMAScript refuses what Python reads as a literal '{'
            return self._undefined()
        try:
            return self._num(int(re.fullmatch(text, s.string) is not None))
        except re.error:  # Soufflé warns and neither match nor !match holds
            return self._undefined()

    def contains(self, part, s):
        return self._num(int(part.string in s.string))
