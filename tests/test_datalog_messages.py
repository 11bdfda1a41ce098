"""Each refusal of the Datalog front end names the construct it refuses (issue 29, item 14)."""

import pytest

from datalog import souffle
from fastlbp.core.errors import InputError

CASES = [
    # (program, where, words the message must have, words it must not)
    ('.decl r(x:number)\n.output r(IO=stdout)\nr(1).\n', (2, 10), [".output", "output relation"],
     [".input", ".facts"]),
    ('.decl r(x:number)\n.input r(IO=file)\n', (2, 9), [".input", "DIR/r.facts"], []),
    ('.decl r(x:number)\n.input r r\n', (2, 10), ["','", ".input", "'r'"], ["end of the file"]),
    ('.decl r(x:symbol)\n.decl s(x:symbol)\ns(x) :- r(x), match("a.*", x).\n', (3, 15),
     ["match(...)", "string constraint"], ["not declared"]),
    ('.decl r(x:symbol)\n.decl s(x:symbol)\ns(x) :- r(x), !contains("a", x).\n', (3, 16),
     ["contains(...)", "string constraint"], ["not declared"]),
    ('.decl r(x:number)\n.decl s(x:number)\ns(n) :- n = count : { r(_) }.\n', (3, 13), ["aggregates"], []),
    ('.decl r(x:number)\n.decl s(x:number)\ns(n) :- n = sum x : r(x).\n', (3, 13), ["aggregates"], []),
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
