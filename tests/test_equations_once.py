"""The message equations exist once (`fastlbp.core.equations`), and their kernel forms equal them.

Two kinds of check:

* Over the sources of the engines (`fastlbp/engines`, `fastlbp/core`), by the
  syntax tree: the equations' functions are defined only in
  `fastlbp/core/equations.py`, and no engine writes the dominant-term test
  (a comparison with half a sum), a log sigmoid, the body-term floor or the
  leave-one-out sign rule itself. A new engine that re-derives a message
  fails here.
* The fused kernels' packed forms (`fused.kernel_math`: packed infinity
  counts, 1 - q formed from q, k1 - k0, the body terms sharing the head's
  transcendentals) against the plain equations, on random values with hard
  messages and evidence (+-inf), NaN, probabilities 0, 1, 1e-300 and 1 - 1e-16,
  and log-odds past the underflow of e^x.
"""

from __future__ import annotations

import ast
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from fastlbp.core import equations, logspace
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.engines.fused import kernel_math

ROOT = pathlib.Path(__file__).resolve().parents[1] / "fastlbp"
HOME = ROOT / "core" / "equations.py"
NUMERICS = ROOT / "core" / "logspace.py"  # the numerics under the equations (log sigmoid, floor, ...)
ENGINE_SOURCES = sorted(p for d in ("engines", "core") for p in (ROOT / d).rglob("*.py"))

# The equations' functions; a definition of one of these names elsewhere is a second copy.
EQUATIONS = {"factor_params", "variable_message", "body_term", "split_body_term", "is_dominant",
             "others_product", "log_rho", "terms_and_rho", "body_term_and_rho", "edge_messages",
             "messages_from_rho", "factor_messages", "damp", "split_infinite", "combine", "log_odds"}
# Calls that form a message's parts; only the equations (and the numerics) make them.
PARTS = {"log_sigmoid", "floor_term", "signed", "soft_cast"}


def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _where(path, node) -> str:
    return f"{path.relative_to(ROOT.parent)}:{node.lineno}"


def test_the_engines_are_scanned():
    names = {p.relative_to(ROOT).as_posix() for p in ENGINE_SOURCES}
    for must in ("core/equations.py", "engines/parall.py", "engines/chunked.py", "engines/persistent.py",
                 "engines/relaxed.py", "engines/fused/factor_kernel.py", "engines/fused/kernel_math.py",
                 "engines/fused/variable_kernel.py"):
        assert must in names


def test_equations_are_defined_once():
    defined: dict[str, list[str]] = {}
    for path in ENGINE_SOURCES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in EQUATIONS:
                defined.setdefault(node.name, []).append(_where(path, node))
    assert set(defined) == EQUATIONS, EQUATIONS - set(defined)
    copies = {name: where for name, where in defined.items()
              if len(where) > 1 or "core/equations.py" not in where[0]}
    assert not copies, copies


def _half_of(node) -> bool:
    """`0.5 * x` or `x * 0.5` (or `x / 2`): half a sum."""
    if not isinstance(node, ast.BinOp):
        return False
    consts = [n.value for n in (node.left, node.right) if isinstance(n, ast.Constant)]
    return ((isinstance(node.op, ast.Mult) and 0.5 in consts)
            or (isinstance(node.op, ast.Div) and consts == [2]))


def test_the_dominant_term_test_is_written_once():
    found = []
    for path in ENGINE_SOURCES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Compare) and any(_half_of(n) for n in (node.left, *node.comparators)):
                found.append(_where(path, node))
    assert len(found) == 1 and "core/equations.py" in found[0], found


def test_no_engine_forms_message_parts_itself():
    found = []
    for path in ENGINE_SOURCES:
        if path in (HOME, NUMERICS):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if name in PARTS:
                    found.append(f"{_where(path, node)} {name}")
            if isinstance(node, ast.ImportFrom) and node.module == "fastlbp.core.logspace":
                found += [f"{_where(path, node)} imports {a.name}" for a in node.names if a.name in PARTS]
    assert not found, found


# ------------------------------------------------------------------------------------------------
# The fused kernels' forms against the plain equations.
# ------------------------------------------------------------------------------------------------

PROBS = np.array([0.0, 1.0, 1e-300, 1e-200, 1 - 1e-16, 1 - 1e-12, 1e-12, 0.5, 0.01, 0.99])
LOG_ODDS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 1e-20, 40.0, -40.0, 745.0, -745.0,
                     800.0, -800.0, 3000.0, -3000.0])


def _values(rng, n, special, scale):
    """n float64 values: a third from `special`, the rest normal draws at mixed scales."""
    x = rng.normal(0, 1, n) * rng.choice(scale, n)
    return np.where(rng.random(n) < 0.35, rng.choice(special, n), x)


def _same(got, want, rel=0.0):
    """Equal NaN and infinity patterns; soft values equal (rel 0) or within `rel` (|a-b| / (1+|b|))."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    hard = np.isinf(got) | np.isinf(want)
    np.testing.assert_array_equal(got[hard], want[hard])
    soft = ~np.isnan(want) & ~hard
    if rel == 0.0:
        np.testing.assert_array_equal(got[soft], want[soft])
    else:
        err = np.abs(got[soft] - want[soft]) / (1 + np.abs(want[soft]))
        assert err.size == 0 or err.max() < rel, err.max()


def _params(rng, n):
    """`equations.factor_params` of n one-body-edge factors with extreme probabilities."""
    factors = [Factor(AND if rng.random() < 0.5 else OR, 0, (1,), float(rng.choice(PROBS)),
                      float(rng.choice(PROBS))) for _ in range(n)]
    return equations.factor_params(from_factors(factors, 2), jnp.float64)


@pytest.mark.parametrize("seed", range(3))
def test_packed_variable_message_is_variable_message(seed):
    """`kernel_math.var_to_factor` (saturated packed counts) equals `equations.variable_message`."""
    rng = np.random.default_rng(seed)
    n = 20_000
    own = _values(rng, n, LOG_ODDS, [1e-3, 1, 30, 800])
    pos, neg = rng.integers(0, 4, n), rng.integers(0, 4, n)
    pos = np.maximum(pos, own == np.inf)  # a total counts its own infinite message
    neg = np.maximum(neg, own == -np.inf)
    fin = _values(rng, n, [0.0, 1e-300, 3000.0, -3000.0], [1e-3, 1, 100])
    cnt = jnp.asarray(np.minimum(pos, 2) + 4 * np.minimum(neg, 2), jnp.int32)
    got = kernel_math.var_to_factor(jnp.asarray(own), jnp.asarray(fin), cnt)
    want = equations.variable_message(jnp.asarray(fin), jnp.asarray(pos, jnp.float64),
                                      jnp.asarray(neg, jnp.float64), jnp.asarray(own))
    _same(got, want)


@pytest.mark.parametrize("seed", range(3))
def test_shared_body_terms_and_rho_are_the_plain_ones(seed):
    """`equations.body_term_and_rho` (the twin sharing exp and log1p): the body side is
    `body_term` to the last bit, the head side `log_rho` within rounding."""
    rng = np.random.default_rng(seed)
    n = 20_000
    p = _params(rng, n)
    mu = jnp.asarray(_values(rng, n, LOG_ODDS, [1e-300, 1e-9, 1, 30, 800]))
    is_head = jnp.asarray(rng.random(n) < 0.3)
    body = ~is_head & jnp.asarray(rng.random(n) < 0.9)
    tf, zero, lr = equations.body_term_and_rho(mu, is_head, body, p.is_and, p.q, p.r, p.q1, p.r1)
    want_tf, want_zero = equations.body_term(mu, p.is_and, body)
    _same(tf, want_tf)
    np.testing.assert_array_equal(np.asarray(zero), np.asarray(want_zero))
    head = np.asarray(is_head)
    _same(np.asarray(lr)[head], np.asarray(equations.log_rho(mu, p.q, p.r, p.q1, p.r1))[head], rel=1e-14)


@pytest.mark.parametrize("seed", range(3))
def test_kernel_messages_are_edge_messages(seed):
    """`kernel_math.new_messages` with `row_params` (1 - q formed in the kernel, k1 - k0 folded)
    equals `others_product` then `edge_messages` with `factor_params`, bit for bit in float64."""
    rng = np.random.default_rng(seed)
    n = 20_000
    p = _params(rng, n)
    np.testing.assert_array_equal(np.asarray(1 - p.q), np.asarray(p.q1))
    np.testing.assert_array_equal(np.asarray(1 - p.r), np.asarray(p.r1))
    kernel = kernel_math.row_params((p.q, p.r, p.k1 - p.k0), jnp.arange(n))
    hn = jnp.asarray(_values(rng, n, LOG_ODDS, [1e-3, 1, 30, 800]))
    is_head = jnp.asarray(rng.random(n) < 0.3)
    # A factor's sums: the edge's own finite term is a part of S; O is S without the dominant term.
    special = [0.0, 1e-300, 2.0**-970, 0.6931, 745.0, 3000.0]
    tf = -jnp.asarray(np.abs(_values(rng, n, special, [1e-9, 1, 50])))
    tf = jnp.where(is_head, 0.0, tf)
    others = -jnp.asarray(np.abs(_values(rng, n, [0.0, 1e-300, 1e-20, 745.0], [1e-12, 1e-3, 1, 50])))
    S = tf + others
    zero = jnp.asarray(rng.random(n) < 0.1) & ~is_head
    Z = zero.astype(jnp.int32) + jnp.asarray(rng.integers(0, 2, n) * (rng.random(n) < 0.2), jnp.int32)
    dominant = equations.is_dominant(tf, S)
    O = jnp.where(dominant, others, S)
    lr = equations.log_rho(hn, p.q, p.r, p.q1, p.r1)
    got = kernel_math.new_messages(tf, zero, dominant, S, Z, O, lr, is_head, p.is_and, *kernel)
    c = equations.others_product(tf, zero.astype(jnp.float64), S, Z.astype(jnp.float64), O, dominant)
    want = equations.edge_messages(is_head, p.is_and, c, hn, *p[1:])
    _same(got, want)
    assert np.isfinite(np.asarray(want)).mean() > 0.5  # the draw exercises soft messages too


def test_dominant_term_keeps_a_tiny_rest():
    """A body term far below the others: its edge's c is the others' sum, not S - own (0)."""
    tf = jnp.asarray([-800.0, -1e-300, -2e-300, 0.0])
    S = jnp.sum(tf)
    dominant = equations.is_dominant(tf, S)
    np.testing.assert_array_equal(np.asarray(dominant), [True, False, False, False])
    rest = jnp.sum(jnp.where(dominant, 0.0, tf))
    c = equations.others_product(tf, jnp.zeros(4), S, jnp.zeros(()), rest, dominant)
    assert float(c[0]) == -3e-300 and float(S - tf[0]) == 0.0


@pytest.mark.parametrize("seed", range(2))
def test_packed_totals_are_var_aggregates(seed):
    """`kernel_math.var_totals` (counts saturated, packed) gives `equations.combine`'s marginal and a
    total from which every edge's `variable_message` is the plain one."""
    rng = np.random.default_rng(seed)
    n, k = 4000, 5
    msgs = _values(rng, n * k, [0.0, np.inf, -np.inf, 1e-300, 800.0, -800.0], [1e-3, 1, 30]).reshape(n, k)
    ev = _values(rng, n, [0.0, np.inf, -np.inf], [1, 10])
    parts = np.asarray(equations.split_infinite(jnp.asarray(msgs.ravel()))).reshape(n, k, 3).sum(1)
    agg = jnp.asarray(parts) + equations.split_infinite(jnp.asarray(ev))
    fin, cnt, lo = kernel_math.var_totals(jnp.asarray(parts[:, 0]), jnp.asarray(parts[:, 1], jnp.int32),
                                          jnp.asarray(parts[:, 2], jnp.int32), jnp.asarray(ev))
    _same(lo, equations.combine(agg))
    own = jnp.asarray(msgs[:, 0])
    _same(kernel_math.var_to_factor(own, fin, cnt),
          equations.variable_message(agg[:, 0], agg[:, 1], agg[:, 2], own))


def test_kernel_damping_is_damp():
    rng = np.random.default_rng(0)
    new, old = (jnp.asarray(_values(rng, 5000, LOG_ODDS, [1, 100])) for _ in range(2))
    valid = jnp.asarray(rng.random(5000) < 0.9)
    got = kernel_math.damped(new, old, valid, jnp.asarray(0.3))
    _same(got, jnp.where(valid, equations.damp(new, old, jnp.asarray(0.3)), 0.0))


def test_log_odds_counts_of_any_dtype():
    """`log_odds` reads float and int counts alike (the XLA aggregates and the packed counts)."""
    fin = jnp.asarray([1.5, 1.5, 1.5, 1.5])
    for dt in (jnp.float64, jnp.float32, jnp.int32):
        pos, neg = jnp.asarray([0, 1, 0, 2], dt), jnp.asarray([0, 0, 3, 1], dt)
        _same(equations.log_odds(fin, pos, neg), [1.5, np.inf, -np.inf, np.nan])
    assert logspace.term_floor(jnp.float64) == 2.0 ** -970
