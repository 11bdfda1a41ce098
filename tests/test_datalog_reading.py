"""The checks the graph readers share (`datalog.reading`): messages, probabilities, strict JSON, keys once."""

from __future__ import annotations

import math

import pytest

from datalog import reading
from fastlbp.core.errors import InputError


def test_shown_cuts_long_values():
    assert reading.shown("abc") == "'abc'"
    long = reading.shown("x" * 5000)
    assert len(long) < 100 and "4940 more characters" in long


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.5, 1.5, 10**400, "nan", "inf", "1e999", "x" * 500,
                                   True, None, [0.5]])
def test_check_probability_refuses(value):
    with pytest.raises(InputError) as info:
        reading.check_probability(value, "f", 3, None, "prior")
    assert info.value.line == 3 and len(str(info.value)) < 200


def test_check_probability_accepts():
    assert reading.check_probability("0.25", "f", 1, None, "p") == 0.25
    assert reading.check_probability(1, "f", 1, None, "p") == 1.0


def test_loads_json_errors():
    with pytest.raises(InputError, match="nested too deeply"):
        reading.loads_json("[" * 100_000 + "]" * 100_000, "g.json")
    with pytest.raises(InputError, match="an integer of 5000 digits") as info:
        reading.loads_json('{\n"a":\n' + "7" * 5000 + "}", "g.json")
    assert info.value.line == 3
    with pytest.raises(InputError, match="invalid JSON") as info:
        reading.loads_json('{"a": }', "g.json")
    assert info.value.line == 1


def test_duplicate_keys_are_reported_where_checked():
    doc = reading.loads_json('{"a": {"k": 1, "k": 2}, "b": {"k": 1}}', "g.json")
    reading.unique(doc, "g.json", "$")
    reading.unique(doc["b"], "g.json", "$.b")
    with pytest.raises(InputError, match="key 'k' appears twice") as info:
        reading.unique(doc["a"], "g.json", "$.a")
    assert info.value.location == "$.a"
    assert doc["a"] == {"k": 2}  # still a dict (JSON's last value) for code that does not check


def test_text_only():
    reading.text_only(["a", "é", "\U0001f600"], "tuple", "g.json", "$.tuples")
    with pytest.raises(InputError, match="lone surrogate") as info:
        reading.text_only(["a", "b\udc00"], "tuple", "g.json", "$.tuples")
    assert "'b\\udc00'" in info.value.message


def test_once():
    once = reading.Once("l.txt", "the label of")
    once.set(1, True, 2, "a")
    once.set(1, True, 5, "a")
    with pytest.raises(InputError) as info:
        once.set(1, False, 7, "a", lambda v: "true" if v else "false")
    assert (info.value.line, info.value.message) == (7, "the label of 'a' is false here but true on line 2")
    assert once.values == {1: True}
