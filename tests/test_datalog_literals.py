"""Number and symbol literals read alike in programs and facts files, with clean errors (issue 29, item 9
and item 7): leading zeros, huge literals, non-ASCII digits, NUL, symbols past MAX_SYMBOL."""

import pytest

from datalog import ground_inputs, souffle
from fastlbp.core.errors import InputError

ARABIC_INDIC_ONE = "\u0661"


def program_value(literal: str, kind: str = "number"):
    p = souffle.parse(f".decl r(x:{kind})\nr({literal}).\n", "p.dl")
    return p.facts[0].values[0]


def facts_value(tmp_path, field: str, kind: str = "number"):
    program = souffle.parse(f".decl r(x:{kind})\n.input r\n.decl s(x:{kind})\ns(x) :- r(x).\n", "p.dl")
    (tmp_path / "r.facts").write_text(field + "\n", encoding="utf-8")
    return ground_inputs.read_facts(program, tmp_path)["r"][0][0]


@pytest.mark.parametrize("literal, value", [("007", 7), ("-007", -7), ("0x1F", 31), ("0b101", 5), ("0", 0),
                                            ("2147483647", 2**31 - 1), ("-2147483648", -(2**31))])
def test_a_number_reads_the_same_in_a_program_and_in_facts(tmp_path, literal, value):
    assert program_value(literal) == value  # "007" was a ValueError traceback in a program
    assert facts_value(tmp_path, literal) == value


@pytest.mark.parametrize("literal", ["9" * 5000, "-" + "9" * 5000, "2147483648", "0x" + "f" * 100])
def test_a_huge_number_is_out_of_range_in_both(tmp_path, literal):
    with pytest.raises(InputError, match="out of range") as err:
        program_value(literal)
    assert err.value.line == 2 and len(str(err.value)) < 300  # the literal shortened, not 5,000 digits
    with pytest.raises(InputError, match="out of range") as err:
        facts_value(tmp_path, literal)
    assert err.value.line == 1 and len(str(err.value)) < 300


def test_non_ascii_digits_are_not_numbers_in_either(tmp_path):
    with pytest.raises(InputError, match="unexpected character"):
        program_value(ARABIC_INDIC_ONE)
    with pytest.raises(InputError, match="is a number"):
        facts_value(tmp_path, ARABIC_INDIC_ONE)


def test_a_nul_in_a_symbol_is_refused_in_both(tmp_path):
    with pytest.raises(InputError, match="NUL"):
        program_value('"a\0b"', "symbol")
    with pytest.raises(InputError, match="NUL") as err:
        facts_value(tmp_path, "a\0b", "symbol")
    assert err.value.line == 1


def test_symbols_past_the_limit_are_refused_in_both(tmp_path):
    long = "a" * (souffle.MAX_SYMBOL + 1)
    assert program_value('"' + "a" * souffle.MAX_SYMBOL + '"', "symbol") == "a" * souffle.MAX_SYMBOL
    with pytest.raises(InputError, match="at most 65,536"):
        program_value('"' + long + '"', "symbol")
    with pytest.raises(InputError, match="at most 65,536"):
        facts_value(tmp_path, long, "symbol")
