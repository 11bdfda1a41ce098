import numpy as np
import pytest
from conftest import DATA
from graphs import random_factors

from datalog import causal_fg
from fastlbp.errors import InputError
from fastlbp.graph import AND, OR, from_factors
from fastlbp.model import Model


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
