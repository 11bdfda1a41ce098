"""Reading clingo's aspif back in bulk (`datalog.aspif`) equals reading it line by line
(`aspif_reference.parse_lines`), on clingo's output for random programs and on random aspif text,
cut into chunks of every size; statements the translation never makes are errors."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from aspif_reference import parse_lines
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from test_datalog_grounding import programs

from datalog import aspif, ground_inputs, souffle
from datalog.ground_process import _control, _run
from datalog.translation import translate


def assert_same(a: aspif.Ground, b: aspif.Ground) -> None:
    for name in ("heads", "offsets", "lits", "atoms", "externals"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.preds == b.preds and a.args == b.args


def clingo_aspif(text: str, facts: dict[str, list[tuple]]) -> bytes:
    """clingo's aspif output for program `text` over `facts`, as `fastlbp ground` asks for it."""
    import clingo

    with tempfile.TemporaryDirectory() as d:
        program = souffle.parse(text, str(Path(d) / "p.dl"))
        for rel in program.inputs:
            rows = facts.get(rel, [])
            (Path(d) / f"{rel}.facts").write_text("".join("\t".join(map(str, t)) + "\n" for t in rows))
        out = Path(d) / "g.aspif"
        ctl = _control([])
        ctl.register_backend(clingo.BackendType.Aspif, str(out), replace=True)
        _run(ctl, translate(program, ground_inputs.read_facts(program, d)), [])
        del ctl
        return out.read_bytes()


@hsettings(max_examples=40, deadline=None)
@given(programs(), st.integers(1, 300))
def test_clingo_output_of_random_programs_reads_the_same(case, chunk):
    text, facts = case
    data = clingo_aspif(text, facts)
    expected = parse_lines(data)
    assert_same(aspif.parse(data, chunk=chunk), expected)
    assert_same(aspif.parse(data), expected)


SYMBOLS = """.decl edge(a: symbol, b: symbol)
.input edge
.decl path(a: symbol, b: symbol)
.output path
path(x, y) :- edge(x, y).
path(x, z) :- path(x, y), edge(y, z), !edge(z, x).
"""


def test_symbols_with_quotes_spaces_and_parentheses(tmp_path):
    names = ['a b', 'c"d', "e(f)", "g,h", "i\\j", "1 0 1 2 0 0"]
    edges = [(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]
    data = clingo_aspif(SYMBOLS, {"edge": edges})
    (tmp_path / "g.aspif").write_bytes(data)
    expected = parse_lines(data)
    assert expected.heads.size and any("c\\\"d" in a for a in expected.args)
    for chunk in (1, 7, 64, aspif.CHUNK):
        assert_same(aspif.parse(data, chunk=chunk), expected)
        assert_same(aspif.parse_file(tmp_path / "g.aspif", chunk=chunk), expected)


@st.composite
def aspif_texts(draw):
    """Random aspif text of the statements `fastlbp ground` reads, in any order."""
    lines = [b"asp 1 0 0 incremental"]
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from("rrrrox0"))
        if kind == "r":
            body = draw(st.lists(st.integers(-50, 10**9).filter(bool), max_size=6))
            head = draw(st.integers(1, 2**31 - 1))
            lines.append(" ".join(map(str, [1, 0, 1, head, 0, len(body), *body])).encode())
        elif kind == "o":
            pred = draw(st.sampled_from(["k", "p0", "p12"]))
            args = draw(st.sampled_from(["", "(1)", '("a b",-2)', '("x\\"y")', "((1,2),nil)"]))
            name = (pred + args).encode()
            lines.append(b"4 %d %s 1 %d" % (len(name), name, draw(st.integers(1, 10**6))))
        elif kind == "x":
            lines.append(b"5 %d %d" % (draw(st.integers(1, 10**6)), draw(st.integers(0, 3))))
        else:
            lines.append(b"0")
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))


@hsettings(max_examples=100, deadline=None)
@given(aspif_texts(), st.integers(1, 120))
def test_random_aspif_text_reads_the_same_in_chunks_of_any_size(data, chunk):
    assert_same(aspif.parse(data, chunk=chunk), parse_lines(data))


@pytest.mark.parametrize("data", [
    b"1 0 1 2 0 0\n",                         # no header
    b"asp 1 0 0\n1 1 1 2 0 0\n",              # a choice rule
    b"asp 1 0 0\n1 0 2 2 3 0 0\n",            # two heads
    b"asp 1 0 0\n1 0 1 2 1 2 3 1 4 1\n",      # a weight body
    b"asp 1 0 0\n1 0 1 2 0 2 3\n",            # a body shorter than it says
    b"asp 1 0 0\n1 0 1 2 0 0 x\n",            # not a number
    b"asp 1 0 0\n2 1 2 3\n",                  # a minimize statement
    b"asp 1 0 0\n4 4 q(1) 1 3\n",             # a shown atom of another predicate
    b"asp 1 0 0\n4 9 p1(1) 1 3\n",            # a length that is not the name's
])
def test_statements_the_translation_never_makes_are_errors(data):
    with pytest.raises(RuntimeError):
        aspif.parse(data)
    with pytest.raises(RuntimeError):
        parse_lines(data)
