"""Soufflé's `unsigned` and `float` values: as Python values, as clingo numbers, as Soufflé writes them.

Soufflé's default build has 32-bit values: `number` is int32, `unsigned` uint32 and `float` IEEE
single precision (`RAM_DOMAIN_SIZE` 32). clingo's numbers are 32-bit signed integers, so each type
gets an order-preserving encoding into them (its *key*), and clingo's own comparisons (`<`, `=`, ...),
`#min`, `#max` and sorting are then right on keys of one type:

* unsigned u (0 .. 2^32 - 1): key u - 2^31;
* float f: its 32 bits b read as a sign-magnitude number made monotone (b | 2^31 for a positive
  float, 2^32 - 1 - b for a negative one), minus 2^31. -0.0 is keyed as 0.0 (IEEE: -0.0 = 0.0, and
  Soufflé's `x = -0.0` holds for x = 0.0); every NaN as one NaN, above +inf.

Arithmetic on them is `datalog.functors.Context`'s (`@u_add`, `@f_mul`, ...), on decoded values.
Soufflé writes a float with the stream precision std::numeric_limits<float>::max_digits10 (9
significant digits, general format: `%.9g`) and `to_string` of a float as std::to_string does (`%f`).
"""

from __future__ import annotations

import math
import struct

UNSIGNED = "unsigned"
FLOAT = "float"
NUMBER = "number"
NUMERIC = (NUMBER, UNSIGNED, FLOAT)
_HALF = 1 << 31
_MASK = (1 << 32) - 1
_NAN_BITS = 0x7FC00000


def f32(x: float) -> float:
    """`x` rounded to single precision (beyond its range: +-inf, as a C float conversion)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def u32(x: int) -> int:
    """`x` as uint32 (wrapping)."""
    return x & _MASK


def i32(x: int) -> int:
    """`x` as int32 (wrapping)."""
    return (x + _HALF) % (1 << 32) - _HALF


def float_key(x: float) -> int:
    if math.isnan(x):
        bits = _NAN_BITS
    else:
        bits = struct.unpack("<I", struct.pack("<f", f32(x) + 0.0))[0]  # + 0.0: -0.0 becomes 0.0
    key = bits | _HALF if not bits & _HALF else _MASK - bits
    return key - _HALF


def float_of_key(key: int) -> float:
    u = key + _HALF
    bits = u - _HALF if u & _HALF else _MASK - u
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def encode(value, ty: str) -> int | str:
    """A value of type `ty` as the clingo number (key) that stands for it; numbers and symbols as they are."""
    if ty == UNSIGNED:
        return u32(value) - _HALF
    if ty == FLOAT:
        return float_key(value)
    return value


def decode(key, ty: str):
    """The value a clingo number stands for in type `ty`."""
    if ty == UNSIGNED:
        return key + _HALF
    if ty == FLOAT:
        return float_of_key(key)
    return key


def shown(value, ty: str) -> str:
    """A value as Soufflé writes it to a .csv file."""
    if ty == FLOAT:
        return float_text(value)
    return str(value)


def float_text(x: float) -> str:
    """A float as Soufflé's output streams write it (precision 9, general format)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.9g}"


def float_string(x: float) -> str:
    """`to_string` of a float, as std::to_string (`%f`)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:f}"


__all__ = ["UNSIGNED", "FLOAT", "NUMERIC", "f32", "u32", "i32", "encode", "decode", "shown", "float_text",
           "float_string", "float_key", "float_of_key"]
