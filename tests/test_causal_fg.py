import numpy as np
import pytest
from conftest import DATA
from graphs import random_factors

from datalog import causal_fg
from fastlbp.core.errors import InputError
from fastlbp.core.graph import AND, OR, from_factors
from fastlbp.core.model import Model


def test_reads_weblech():
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    g = model.graph
    assert (g.num_vars, g.num_factors, g.num_edges) == (678, 678, 2315)
    assert model.var_names[:3] == ("0", "1", "2")


def test_semantics_of_the_three_types():
    text = "3\n\n0\nI\n0.25\n\n1\n*0.9;0.1\n1\n0\n\n2\n+0.8;0.3\n2\n0 1\n"
    model = causal_fg.parse(text)
    f = model.graph.factors()
    assert (f[0].kind, f[0].body, f[0].p1, f[0].p2) == (AND, (), 0.25, 0.25)
    assert (f[1].kind, f[1].body, f[1].p1, f[1].p2) == (AND, (0,), 0.9, 0.1)
    # '+p;q': P(head=0 | none) = p -> p2 = 1 - p; P(head=0 | some) = q -> p1 = 1 - q.
    assert (f[2].kind, f[2].body) == (OR, (0, 1))
    assert f[2].p1 == pytest.approx(0.7) and f[2].p2 == pytest.approx(0.2)


def test_round_trip_random():
    rng = np.random.default_rng(3)
    for _ in range(10):
        V = int(rng.integers(2, 20))
        factors = random_factors(rng, V, int(rng.integers(1, 25)))
        model = Model(graph=from_factors(factors, V), var_names=tuple(str(i) for i in range(V)))
        again = causal_fg.parse(causal_fg.dumps(model)).graph.factors()
        assert [(f.kind, f.head, f.body) for f in again] == [(f.kind, f.head, f.body) for f in factors]
        np.testing.assert_allclose([f.p1 for f in again], [f.p1 for f in factors], atol=1e-15)
        np.testing.assert_allclose([f.p2 for f in again], [f.p2 for f in factors], atol=1e-15)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("x\n", 1, "expected the number of factors"),
        ("1\n\n0\nQ\n", 4, "unknown factor type"),
        ("1\n\n0\nI\nabc\n", 5, "'abc' is not a number"),
        ("1\n\n0\nI\n1.5\n", 5, "not a probability"),
        ("1\n\n0\n*0.9;0.0\n2\n1\n", 6, "expected 2 body labels, got 1"),
        ("1\n\n0\n*0.9;0.0\nk\n", 5, "expected the body size"),
        ("2\n\n0\nI\n0.5\n", 5, "unexpected end of file"),
        ("1\n\n0\nI\n0.5\n\n7\n", 7, "text after the last"),
        ("1\n\n0\n*0.9;0.0\n2\n1 1\n", 3, "appears twice"),
    ],
)
def test_errors_name_the_line(text, line, message, tmp_path):
    path = tmp_path / "bad.causal_fg"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        causal_fg.load(path)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}:")


def test_invalid_utf8(tmp_path):
    path = tmp_path / "bad.fg"
    path.write_bytes(b"1\n\n\xff\nI\n0.5\n")
    with pytest.raises(InputError, match="UTF-8"):
        causal_fg.load(path)


def _chain(labels):
    """A causal factor graph: a prior on labels[0], then each label ANDs the previous one."""
    out = [str(len(labels)), "", labels[0], "I", "0.5"]
    for prev, cur in zip(labels, labels[1:], strict=False):
        out += ["", cur, "*0.9;0.1", "1", prev]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("labels, order", [
    (["--1", "2", "-3"], ["--1", "-3", "2"]),                     # not all integers: sorted as text
    (["\u2460", "2", "1"], ["1", "2", "\u2460"]),                 # '①' is a digit to str.isdigit, not to int
    (["\u0661", "2", "1"], ["1", "2", "\u0661"]),                 # Arabic-Indic one: ASCII digits only
    (["9" * 5000, "10", "-" + "9" * 5000, "01", "1"], ["-" + "9" * 5000, "01", "1", "10", "9" * 5000]),
])
def test_labels_of_any_spelling_load(labels, order):
    model = causal_fg.parse(_chain(labels))
    assert list(model.var_names) == order


@pytest.mark.parametrize(("text", "line", "message"), [
    ("\u0661\n\n0\nI\n0.5\n", 1, "expected the number of factors"),  # int() would read 1
    ("9" * 5000 + "\n", 1, "expected the number of factors"),
    ("1\n\n0\n*0.9;0.0\n" + "9" * 5000 + "\n", 5, "expected the body size"),
    ("1\n\n0\n*0.9;0.0\n-2\n", 5, "must not be negative"),
    ("1\n\n0\nI\n" + "9" * 5000 + "\n", 5, "not a probability"),
    ("1\n\na\tb\nI\n0.5\n", 3, "one head variable label"),
])
def test_numbers_and_labels_errors(text, line, message, tmp_path):
    path = tmp_path / "bad.fg"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        causal_fg.load(path)
    assert info.value.line == line and len(str(info.value)) < 300


def test_crlf_and_control_characters_in_labels():
    model = causal_fg.parse(_chain(["a\x1b[1m", "b\x00"]).replace("\n", "\r\n"))
    assert model.var_names == ("a\x1b[1m", "b\x00")
    assert causal_fg.parse(causal_fg.dumps(model)).var_names == model.var_names


def test_dumps_refuses_labels_it_cannot_carry(tmp_path):
    for name in ("a b", "a\tb", "", "a\nb", "a\u2028b"):
        model = Model(graph=causal_fg.parse(_chain(["x"])).graph,
                      var_names=(name,))
        with pytest.raises(InputError, match="cannot be written") as info:
            causal_fg.save(model, tmp_path / "g.fg")
        assert info.value.path == str(tmp_path / "g.fg")
        assert not (tmp_path / "g.fg").exists()


def test_load_marginals_errors(tmp_path):
    p = tmp_path / "m.marg"
    p.write_bytes(b"\xef\xbb\xbf0 0.25\r\n1 nope\n")
    with pytest.raises(InputError, match="'nope' is not a number") as info:
        causal_fg.load_marginals(p)
    assert info.value.line == 2
    p.write_text("0 0.25\n")
    assert causal_fg.load_marginals(p) == {"0": 0.25}
