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
import math
import re

from datalog import souffle_values as values
from datalog.regex_match import PatternError, UnsupportedPattern, compile_pattern
from datalog.souffle_ast import MAX_SYMBOL

_BITS = 32
# A float's exact value is M * 2^-149 with |M| < 2^277: 24 limbs of 12 bits. clingo's sums are 32-bit, so
# a sum of limbs is exact for at most 2^19 - 1 elements (2^31 / 2^12); past that the sum is refused.
LIMB_BITS = 12
FLOAT_LIMBS = 24
MAX_FLOAT_SUM = (1 << (31 - LIMB_BITS)) - 1
_LIMB = 1 << LIMB_BITS
MAX_RANGE = 1 << 24  # values one float range() may give (a step too small for its bounds never ends)
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

    def _count_values(self, count: int, call: str) -> None:
        """Counts values a range makes against `limits.values`: past it, the grounding stops."""
        self.values += count
        if self.limits.values and self.values > self.limits.values:
            self._stop(f"{call} makes {count:,} values, past the limit of {self.limits.values:,} "
                       f"({self.limits.basis or 'the limit'}: each value makes a rule instance)")

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
        made = range(lo, hi, by)
        self._count_values(len(made), f"range({lo}, {hi}{'' if step is None else f', {by}'})")
        return [self._clingo.Number(v) for v in made]

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


class TypedContext(Context):
    """`Context` and the arithmetic of unsigned and float values (`datalog.souffle_values`): each method
    decodes its arguments' keys, computes as Soufflé does on uint32 or IEEE single precision, and
    returns the result's key (no value: the rule instance does not hold)."""

    # decoding and encoding ---------------------------------------------------
    def _u(self, s) -> int:
        return values.decode(s.number, values.UNSIGNED)

    def _uk(self, v: int):
        return self._clingo.Number(values.encode(values.u32(v), values.UNSIGNED))

    def _f(self, s) -> float:
        return values.decode(s.number, values.FLOAT)

    def _fk(self, v: float):
        return self._clingo.Number(values.encode(values.f32(v), values.FLOAT))

    # unsigned ----------------------------------------------------------------
    def u_add(self, a, b):
        return self._uk(self._u(a) + self._u(b))

    def u_sub(self, a, b):
        return self._uk(self._u(a) - self._u(b))

    def u_mul(self, a, b):
        return self._uk(self._u(a) * self._u(b))

    def u_div(self, a, b):
        return self._undefined() if self._u(b) == 0 else self._uk(self._u(a) // self._u(b))

    def u_mod(self, a, b):
        return self._undefined() if self._u(b) == 0 else self._uk(self._u(a) % self._u(b))

    def u_pow(self, a, b):
        return self._uk(pow(self._u(a), self._u(b), 1 << _BITS))

    def u_band(self, a, b):
        return self._uk(self._u(a) & self._u(b))

    def u_bor(self, a, b):
        return self._uk(self._u(a) | self._u(b))

    def u_bxor(self, a, b):
        return self._uk(self._u(a) ^ self._u(b))

    def u_bshl(self, a, b):
        return self._uk(self._u(a) << (self._u(b) % _BITS))

    def u_bshr(self, a, b):
        return self._uk(self._u(a) >> (self._u(b) % _BITS))

    u_bshru = u_bshr

    def u_land(self, a, b):
        return self._uk(int(bool(self._u(a)) and bool(self._u(b))))

    def u_lor(self, a, b):
        return self._uk(int(bool(self._u(a)) or bool(self._u(b))))

    def u_lnot(self, a):
        return self._uk(int(not self._u(a)))

    def u_bnot(self, a):
        return self._uk(~self._u(a))

    def u_neg(self, a):
        return self._uk(-self._u(a))

    def u_sum(self, key_sum, count):
        """The unsigned sum of values whose keys sum (wrapped) to `key_sum`."""
        return self._uk(key_sum.number + count.number * (1 << (_BITS - 1)))

    def f_limb(self, key, k):
        """Limb `k` (16 bits, with the value's sign) of a float's exact value M * 2^-149."""
        x = self._f(key)
        if math.isnan(x) or math.isinf(x):
            return self._clingo.Number(0)
        m = int(abs(x) * (1 << 149))  # exact: a float is an integer multiple of 2^-149
        limb = (m >> (LIMB_BITS * k.number)) % _LIMB
        return self._clingo.Number(-limb if x < 0 else limb)

    def _limb_total(self, count, limbs) -> float:
        if count.number > MAX_FLOAT_SUM:
            raise ValueError(f"a sum or mean over {count.number:,} float values: at most {MAX_FLOAT_SUM:,} "
                             "are supported")
        exact = sum(s.number << (LIMB_BITS * k) for k, s in enumerate(limbs))  # M of the sum, exactly
        return math.ldexp(float(exact), -149) if abs(exact) < 1 << 1000 else math.copysign(math.inf, exact)

    def f_sum(self, count, *limbs):
        return self._fk(self._limb_total(count, limbs))

    def f_mean(self, count, *limbs):
        if count.number == 0:
            return self._undefined()
        exact = self._limb_total(count, limbs)
        return self._fk(exact / count.number)

    def u_range(self, a, b, step=None):
        lo, hi = self._u(a), self._u(b)
        by = (1 if lo <= hi else -1) if step is None else self._u(step)
        if not by:
            return []
        self._count_values(len(range(lo, hi, by)), f"range({lo}, {hi})")
        return [self._uk(v) for v in range(lo, hi, by)]

    # float -------------------------------------------------------------------
    def f_add(self, a, b):
        return self._fk(self._f(a) + self._f(b))

    def f_sub(self, a, b):
        return self._fk(self._f(a) - self._f(b))

    def f_mul(self, a, b):
        return self._fk(self._f(a) * self._f(b))

    def f_div(self, a, b):
        x, y = self._f(a), self._f(b)
        if y == 0:  # IEEE: +-inf, or NaN for 0 / 0
            return self._fk(math.nan if x == 0 or math.isnan(x) else math.copysign(math.inf, x) *
                            math.copysign(1.0, y))
        return self._fk(x / y)

    def f_pow(self, a, b):
        try:
            return self._fk(math.pow(self._f(a), self._f(b)))
        except OverflowError:
            return self._fk(math.inf)
        except ValueError:
            return self._fk(math.nan)

    def f_neg(self, a):
        return self._fk(-self._f(a))

    def f_range(self, a, b, step=None):
        lo, hi = self._f(a), self._f(b)
        by = (1.0 if lo <= hi else -1.0) if step is None else self._f(step)
        out, x = [], lo
        while by and ((by > 0 and x < hi) or (by < 0 and x > hi)) and len(out) < MAX_RANGE:
            out.append(self._fk(x))
            x = values.f32(x + by)  # Soufflé steps in single precision
        self._count_values(len(out), f"range({lo}, {hi})")
        return out

    # conversions -------------------------------------------------------------
    def conv(self, a, source, target):
        """`a` (of type `source`) converted to `target`, as C++'s static_cast between Soufflé's types."""
        src, dst = source.string, target.string
        v = values.decode(a.number, src)
        if dst == values.FLOAT:
            return self._fk(float(v))
        if src == values.FLOAT:
            if math.isnan(v) or math.isinf(v):
                return self._undefined()
            v = int(v)  # truncation towards zero
        if dst == values.UNSIGNED:
            return self._uk(v)
        return self._num(v)

    def numeric_string(self, a, source):
        """`to_string` of an unsigned or a float."""
        v = values.decode(a.number, source.string)
        return self._string(values.float_string(v) if source.string == values.FLOAT else str(v), "to_string")
