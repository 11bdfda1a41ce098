"""Soufflé's functors with Soufflé's semantics, for clingo's grounder (`@name(...)` terms).

clingo's own `+ - * / \\ & ? ^ ~` are used where they agree with Soufflé on 32-bit numbers (`/` and
`\\` truncate towards zero as C does, overflow wraps); the rest are methods of `Context`, which
`datalog.ground_process` hands to `Control.ground`. A functor that has no value (a division by zero,
`to_number` of a non-number, `substr` out of range) makes the rule instance not hold, as clingo's own
undefined arithmetic does.
"""

from __future__ import annotations

import math
import re

from datalog import souffle_values as values

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
        return [self._uk(v) for v in range(lo, hi, by)] if by else []

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
        return self._clingo.String(values.float_string(v) if source.string == values.FLOAT else str(v))
