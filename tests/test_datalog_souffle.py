"""The Soufflé subset (`datalog.souffle`): every construct parses to the AST it means; every refused
construct and every failed check is a `ProgramError` naming file, line and column."""

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from datalog import souffle
from datalog.souffle import Atom, Comparison, Const, ProgramError, Var, Wildcard
from fastlbp.core.errors import InputError

PROGRAM = """// a comment
.decl edge(from: number, to: number)
.decl name(n: number, s: symbol)
.input edge, name
.decl path(a: number, b: number) /* block
   comment */
.decl flag()
.output path
.output flag
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y),
              edge(y, z), !edge(z, _), x != z, x < 0x10, y >= -3.
flag() :- name(_, "a \\"q\\" \\\\ b").
edge(1, 2).
name(0b11, "main").
"""


def test_constructs():
    p = souffle.parse(PROGRAM, "a.dl")
    assert list(p.decls) == ["edge", "name", "path", "flag"]
    assert p.decls["name"].attrs == (("n", "number"), ("s", "symbol"))
    assert p.decls["flag"].arity == 0
    assert list(p.inputs) == ["edge", "name"] and list(p.outputs) == ["path", "flag"]
    assert [r.name.split("-")[0] for r in p.rules] == ["path", "path", "flag"]  # HEAD-HASH
    r1 = p.rules[1]
    assert r1.text == "path(x, z) :- path(x, y), edge(y, z), !edge(z, _), x != z, x < 16, y >= -3."
    assert r1.pos == souffle.Pos(11, 1)
    assert [type(x).__name__ for x in r1.body] == ["Atom", "Atom", "Atom", "Comparison", "Comparison",
                                                  "Comparison"]
    neg = r1.body[2]
    assert isinstance(neg, Atom) and neg.negated and isinstance(neg.args[1], Wildcard)
    assert r1.negative == (neg,) and len(r1.positive) == 2
    c = r1.body[4]
    assert isinstance(c, Comparison) and c.op == "<" and c.right == Const(16, c.right.pos)
    assert r1.body[5].right.value == -3
    assert p.rules[2].body[0].args[1].value == 'a "q" \\ b'
    assert [f.values for f in p.facts] == [(1, 2), (3, "main")]
    assert sorted(map(tuple, p.strata)) == [("edge",), ("flag",), ("name",), ("path",)]
    assert p.strata.index(["edge"]) < p.strata.index(["path"]) and p.strata.index(["name"]) < \
        p.strata.index(["flag"])
    assert p.negated() == {"edge"}
    assert p.depends()["path"] == {"path", "edge"}


def test_strata_order_lower_first():
    p = souffle.parse(""".decl a(x: number)
.decl b(x: number)
.decl c(x: number)
c(x) :- b(x), !a(x).
b(x) :- a(x).
b(x) :- b(x).
a(1).
""")
    order = [s for stratum in p.strata for s in stratum]
    assert order.index("a") < order.index("b") < order.index("c")


def test_variable_bound_by_equality_is_safe():
    p = souffle.parse(".decl e(x: number)\n.decl s(x: number, y: number)\ns(x, y) :- e(x), y = x, x = 3.\n")
    assert isinstance(p.rules[0].body[1].left, Var)


def err(text, path="p.dl"):
    with pytest.raises(ProgramError) as info:
        souffle.parse(text, path)
    return str(info.value)


DECL = ".decl e(x: number, y: number)\n.decl s(x: symbol)\n"


@pytest.mark.parametrize("text,message", [
    # syntax: what was expected, where
    ("e(1, 2)", "p.dl:1:8: expected '.' (a fact) or ':-' (a rule), got the end of the file"),
    (DECL + "e(x, y) :- e(x y).", "p.dl:3:16: expected ',' or ')', got 'y'"),
    (DECL + "e(x, y) :- e(x, y)\n", "p.dl:4:1: expected ',' or '.' after a body literal, got the end of "
                                     "the file"),
    (".decl e(x number)", "p.dl:1:11: expected ':' and a type after the attribute name, got 'number'"),
    (DECL + ":- e(1, 2).", "p.dl:3:1: expected a directive (.decl, .input, .output ...), a rule or "
                           "a fact, got ':-'"),
    ("/* never closed", "p.dl:1:1: unterminated comment: '/*' has no '*/'"),
    (DECL + 's("abc).', "p.dl:3:3: unterminated string"),
    (DECL + 's("a\\qb").', "p.dl:3:3: unknown escape '\\q' in a string"),
    (DECL + "e(1, 2) :- !.", "p.dl:3:13: expected an atom after '!', got '.'"),
    # refused constructs
    (DECL + "e(x, y) :- e(x, [y, y]).", "p.dl:3:17: a record where a number is expected"),
    (DECL + "e(x, y) :- e(x, $A(y)).", "p.dl:3:17: no type has a branch 'A'"),
    (DECL + "e(x, y) :- e(x, y), z = $.", "p.dl:3:25: '$' (Soufflé's counter) is not supported"),
    (DECL + "e(x, y) :- e(x, @f(y)).", "p.dl:3:17: user-defined functors are not supported"),
    (".init x = C", "p.dl:1:11: component 'C' is not declared"),
    (".comp C<T> { }\n.init x = C", "p.dl:2:11: component 'C' takes 1 type parameter, got 0"),
    (".decl e(x: number)\n.override e", "p.dl:2:11: .override outside a component"),
    (DECL + "e(x, n) :- e(x, _), n = mean y : { e(x, y) }.", "p.dl:3:23: comparison '=' between a float and"),
    (DECL + "e(x, y) :- e(x, y), y = cat(x, x).", "p.dl:3:23: comparison '=' between a number and a symbol"),
    (".decl e(x: number)\n.input e(headers=true)",
     "p.dl:2:10: I/O parameter 'headers' of .input is not supported"),
    (".decl e(x: number)\n.input e(IO=stdin)", "p.dl:2:13: I/O parameter IO=stdin of .input is not"),
    (DECL + ".decl t(x: symbol)\nt(as(x, symbol)) :- e(x, _).",
     "p.dl:4:3: as(x, symbol) casts a number to a symbol: a cast between types of different primitive"),
    (DECL + ".decl t(x: number)\nt(as(x, symbol)) :- s(x).",
     "p.dl:4:3: as(..., symbol) gives a symbol where a"),
    (DECL + "e(x, y) :- e(x, y), as(x, T) = y.", "p.dl:3:21: type 'T' is not declared"),
    (".type T = A {x: number} | B {}\n.type U = B {}",
     "p.dl:2:7: branch 'B' of type 'U' is a branch of 'T' too"),
    (".decl e(x: T)", "p.dl:1:12: type 'T' is not declared"),
    (".decl e(x: number, y: number) choice-domain x", "p.dl:1:31: choice-domain is not supported"),
    ('#include "x.dl"', "p.dl:1: preprocessor: Include file 'x.dl' not found"),
    (DECL + "e(1, 2.5).", "p.dl:3:6: float constant for attribute 'y' of 'e', which is a number"),
    (DECL + "e(1, 2) :- e(1, 2)\n+", "p.dl:4:1: expected ',' or '.' after a body literal, got '+'"),
    (DECL + "e(1, 4294967296).", "p.dl:3:6: number 4294967296 is out of range (32-bit signed"),
    (DECL + "a.b(1).", "p.dl:3:1: relation 'a.b' is not declared"),
    # checks
    (DECL + "f(1).", "p.dl:3:1: relation 'f' is not declared (add .decl f(...))"),
    (DECL + ".output f", "p.dl:3:9: .output names relation 'f', which is not declared"),
    (DECL + "e(1).", "p.dl:3:1: relation 'e' has 2 attributes (declared at line 1), got 1 argument"),
    (DECL + "e(x, y) :- s(x, y).", "p.dl:3:12: relation 's' has 1 attribute (declared at line 2), got 2"),
    (DECL + ".decl e(z: number)", "p.dl:3:7: relation 'e' is declared twice (first at line 1)"),
    (".decl e(x: number, x: number)", "p.dl:1:20: attribute 'x' appears twice"),
    (DECL + 'e(1, "a").', "p.dl:3:6: symbol constant for attribute 'y' of 'e', which is a number"),
    (DECL + "e(x, y) :- e(x, z).", "p.dl:3:6: variable 'y' is unsafe: it appears in the head but in no "
                                   "positive body atom"),
    (DECL + "e(x, x) :- e(x, x), !e(y, x).", "p.dl:3:24: variable 'y' is unsafe: it appears in the negation "
                                             "!e(...)"),
    (DECL + "e(x, x) :- e(x, x), y < 3.", "p.dl:3:21: variable 'y' is unsafe: it appears in the "
                                          "comparison '<'"),
    (DECL + "e(x, _) :- e(x, x).", "p.dl:3:6: '_' in the head"),
    (DECL + "e(x, y).", "p.dl:3:3: a fact's arguments must be constants"),
    (DECL + "e(x, y) :- e(x, y), s(y).", "p.dl:3:23: variable 'y' is a symbol here (attribute 'x' of 's') "
                                         "but a number at line 3, column 6"),
    (DECL + 'e(x, y) :- e(x, y), x = "a".', "p.dl:3:23: comparison '=' between a number and a symbol"),
    (DECL + 's(x) :- s(x), x < "m".', "p.dl:3:17: order comparison '<' on symbols is not supported"),
    (DECL + "e(x, y) :- e(x, y), _ = x.", "p.dl:3:21: '_' in a comparison"),
    (DECL + "e(x, y) :- e(x, y), !e(y, x).", "p.dl:3:22: negation through recursion: this rule derives 'e' "
                                             "from !e, but 'e' depends on 'e'; only stratified negation"),
    (".decl a(x: number)\n.decl b(x: number)\n.decl c(x: number)\nc(x) :- a(x).\na(x) :- b(x), !c(x).\n"
     "b(x) :- a(x).\nb(1).", "p.dl:5:16: negation through recursion: this rule derives 'a' from !c, but 'c' "
                            "depends on 'a' (a -> c: each derived from the one before)"),
])
def test_errors_name_file_line_column(text, message):
    got = err(text)
    assert got.startswith(message), got


def test_program_error_is_an_input_error_with_column():
    with pytest.raises(InputError) as info:
        souffle.parse("e(", "x.dl")
    e = info.value
    assert isinstance(e, ProgramError) and (e.path, e.line, e.column) == ("x.dl", 1, 3)


def test_parse_file_missing_and_utf8(tmp_path):
    with pytest.raises(InputError, match="no such file or directory"):
        souffle.parse_file(tmp_path / "none.dl")
    (tmp_path / "p.dl").write_bytes(b'\xef\xbb\xbf.decl s(x: symbol)\ns("\xc3\xa9").\n')
    p = souffle.parse_file(tmp_path / "p.dl")
    assert p.facts[0].values == ("\u00e9",) and p.path == str(tmp_path / "p.dl")


@hsettings(max_examples=150, deadline=None)
@given(st.text(alphabet=".decl(x:numbersymbol),:-!_=<>\"/* \n1e", max_size=60))
def test_arbitrary_text_parses_or_raises_a_program_error(text):
    try:
        souffle.parse(text, "f.dl")
    except ProgramError as e:
        assert e.line is not None and e.column is not None and e.column >= 1
        assert str(e).startswith(f"f.dl:{e.line}:{e.column}: ")
