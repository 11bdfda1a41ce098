"""Each refusal of the Datalog front end names the construct it refuses (issue 29, item 14)."""

import pytest

from datalog import souffle
from fastlbp.core.errors import InputError

CASES = [
    # (program, where, words the message must have, words it must not)
    ('.decl r(x:number)\n.input r(IO=sqlite)\n', (2, 13), ["IO=sqlite", "IO=file", ".input"], [".facts"]),
    ('.decl r(x:number)\n.input r(headers=true)\n', (2, 10), ["'headers'", "filename", "delimiter"], []),
    ('.decl r(x:number)\n.input r r\n', (2, 10), ["','", ".input", "'r'"], ["end of the file"]),
    ('.decl r(x:number)\n.decl s(x:number)\ns(n) :- n = mean x : { r(x) }.\n', (3, 11), ["float", "number"],
     ["not declared"]),
    ('.decl r(x:number)\n.decl s(x:number)\ns(n) :- r(n), n = count : { s(_) }.\n', (3, 19),
     ["aggregate through recursion", "count"], []),
    ('.decl r(x:number)\n.decl s(x:number)\ns(x) :- r(x), x = to_float(1).\n', (3, 17), ["float", "number"],
     ["not declared"]),
]


@pytest.mark.parametrize("text, where, has, has_not", CASES)
def test_a_refusal_names_its_construct(text, where, has, has_not):
    with pytest.raises(InputError) as info:
        souffle.parse(text, "p.dl")
    message = str(info.value)
    assert message.startswith(f"p.dl:{where[0]}:{where[1]}: "), message
    assert all(w in message for w in has) and not any(w in message for w in has_not), message


def test_relations_separated_by_commas_still_read():
    p = souffle.parse('.decl r(x:number)\n.decl s(x:number)\n.input r, s\n.output s\ns(1).\n', "p.dl")
    assert set(p.inputs) == {"r", "s"}
