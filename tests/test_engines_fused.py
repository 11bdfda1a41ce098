"""The fused Pallas PARALL engine (`fastlbp.engines.fused`), interpreted on the CPU.

Small tiles make every branch run on small graphs: rows of every
width, and rows wider than a tile split into chunks whose partial aggregates
are combined (the path hub variables and big OR factors take on the GPU).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
from graphs import (
    check_engine_against_reference,
    evidence_from_labels,
    huge_fan_in,
    random_factors,
    random_labels,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.settings import Settings
from fastlbp.engines import fused, loop, parall
from fastlbp.engines.fused import factor_kernel

SMALL = dict(tile=8)
PRECISION = {jnp.float64: "f64", jnp.float32: "f32"}


def _fused(g, dtype=jnp.float64, unroll=1, **tuning):
    """The fused runner for `g` in the interpreter, its layout built for `dtype`."""
    return fused.make_runner(g, Settings(backend="fused_interpret", precision=PRECISION[dtype]),
                             unroll=unroll, **tuning)


def _xla(g, dtype=jnp.float64):
    return parall.make_runner(g, Settings(backend="xla", precision=PRECISION[dtype]))


def _run(g, ev, runner, dtype=jnp.float64, messages=None, tol=0.0, max_iters=20, damping=0.0):
    msgs = loop.init(g, dtype) if messages is None else messages
    return runner(g, msgs, jnp.asarray(ev, dtype), loop.controls(tol, max_iters, damping, dtype))


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), tiles=st.sampled_from([(2, None), (4, 32), (8, None), (512, 2)]))
def test_fused_matches_sequential_reference(seed, tiles):
    # (factor tile, variable tile): each side's rows of every width, wide rows split in chunks.
    tile, var_tile = tiles
    rng = np.random.default_rng(seed)
    V = int(rng.integers(2, 12))
    factors = random_factors(rng, V, int(rng.integers(1, 16)), max_body=int(rng.integers(1, 11)))
    labels = random_labels(rng, V)
    g = from_factors(factors, V)
    runner = _fused(g, tile=tile, var_tile=var_tile)
    ev = evidence_from_labels(V, labels)
    result = _run(g, ev, runner)
    def step(m):
        return _run(g, ev, runner, messages=jnp.asarray(m), max_iters=1).messages

    check_engine_against_reference(factors, V, labels, result, step, iters=20)
    if bool(result.conflict):
        return
    assert int(result.iterations) == 20


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), damping=st.sampled_from([0.0, 0.4]), unroll=st.sampled_from([1, 2]))
def test_fused_matches_xla_engine(seed, damping, unroll):
    # Bigger loopy graphs, hubs, hard evidence, damping, and convergence on the device.
    rng = np.random.default_rng(seed)
    V = int(rng.integers(30, 120))
    factors = random_factors(rng, V, int(V * 1.5), max_body=6)
    factors.append(Factor(OR, 0, tuple(range(1, V)), 0.2, 0.9))
    g = from_factors(factors, V)
    ev = evidence_from_labels(V, random_labels(rng, V, most=4))
    xla = _xla(g)
    ref = _run(g, ev, xla, tol=1e-9, max_iters=80, damping=damping)
    runner = _fused(g, unroll=unroll, **SMALL)
    if not bool(ref.converged) and not bool(ref.conflict):
        # Possibly chaotic (rounding-level differences grow): one sweep from the same state must agree.
        one = _run(g, ev, runner, messages=ref.messages, max_iters=1, damping=damping)
        want = _run(g, ev, xla, messages=ref.messages, max_iters=1, damping=damping)
        np.testing.assert_allclose(np.asarray(one.messages), np.asarray(want.messages), atol=1e-9)
        return
    for dtype in (jnp.float64, jnp.float32):
        runner = _fused(g, dtype, unroll=unroll, **SMALL)
        got = _run(g, ev, runner, dtype, tol=1e-9, max_iters=80, damping=damping)
        assert bool(got.conflict) == bool(ref.conflict)
        if bool(ref.conflict):
            return
        if dtype == jnp.float64:
            np.testing.assert_allclose(np.asarray(got.marginals), np.asarray(ref.marginals), atol=1e-12)
            np.testing.assert_allclose(np.asarray(got.messages), np.asarray(ref.messages), atol=1e-9)
            # Equal up to where the last change straddles tol by a rounding.
            assert abs(int(got.iterations) - int(ref.iterations)) <= 1
            assert bool(got.converged)
        else:
            np.testing.assert_allclose(np.asarray(got.marginals), np.asarray(ref.marginals), atol=1e-4)


@pytest.mark.parametrize("var_tile", [None, 4, 64])
def test_layout_places_every_edge_once(var_tile):
    rng = np.random.default_rng(3)
    factors = random_factors(rng, 40, 60, max_body=9)
    factors.append(Factor(AND, 1, tuple(range(2, 40)), 0.9, 0.1))
    g = from_factors(factors, 40)
    lay = fused.build(g, tile=8, var_tile=var_tile)
    assert (lay.factors.tile, lay.variables.tile) == (8, var_tile or 8)
    edge_slot = np.asarray(lay.edge_slot)
    assert len(set(edge_slot.tolist())) == g.num_edges
    slot_var = np.asarray(lay.factors.slots)
    kvar = np.asarray(lay.var_kvar)
    # A slot holds its edge's variable (renumbered); padding slots hold -1.
    np.testing.assert_array_equal(slot_var[edge_slot], kvar[np.asarray(g.edge_var)])
    assert np.sum(slot_var >= 0) == g.num_edges
    # A factor's edges fill consecutive slots, head first (column 0 of its row).
    off = np.asarray(g.factor_offsets)
    for a in range(g.num_factors):
        slots = edge_slot[off[a]:off[a + 1]]
        np.testing.assert_array_equal(slots, slots[0] + np.arange(slots.size))
    # Rows of 4 and 8 slots may hold two factors, the second from column `split`, head first.
    split = np.asarray(lay.row_split)
    seg_factor = np.asarray(lay.seg_factor).reshape(-1, 2)
    paired = seg_factor[:, 1] >= 0
    assert paired.any() and np.all(split[paired] < 8) and np.all(split[~paired] == 8)
    for row in np.flatnonzero(paired):
        a, b = seg_factor[row]
        assert edge_slot[off[b]] == edge_slot[off[a]] + split[row] == edge_slot[off[a + 1] - 1] + 1
    # Role bits: 2 on every factor's head slot, 1 on the edges of a row's second factor, no others.
    role = np.asarray(lay.slot_role)
    want = np.zeros(role.shape, np.int8)
    want[edge_slot[off[:-1]]] |= 2
    for b in seg_factor[paired, 1]:
        want[edge_slot[off[b]:off[b + 1]]] |= 1
    np.testing.assert_array_equal(role, want)
    # The variable side lists every message slot exactly once.
    var_slots = np.asarray(lay.variables.slots)
    assert sorted(var_slots[var_slots >= 0].tolist()) == sorted(edge_slot.tolist())
    assert lay.factors.wide_chunks > 0 and (lay.variables.wide_chunks > 0) == (var_tile != 64)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [AND, OR])
def test_huge_fan_in_is_exact(kind):
    n = 10_000
    factors, expect = huge_fan_in(kind, n)
    g = from_factors(factors, n + 1)
    runner = _fused(g, tile=512)
    res = _run(g, np.zeros(n + 1), runner, tol=1e-12, max_iters=10)
    assert abs(float(res.marginals[0]) - expect) < 1e-10
    # One body variable labelled: the wide row's leave-one-out stays exact.
    ev = evidence_from_labels(n + 1, {1: kind == OR})
    res = _run(g, ev, runner, tol=1e-12, max_iters=10)
    assert abs(float(res.marginals[0]) - (0.999 if kind == OR else 0.001)) < 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("tile", [2, 4, 512])
def test_tiny_sum_of_others_in_a_row(tile):
    # 2: the OR's row is wide, split in chunks; the others: one tile row.
    # x2's term (-4e-18) is all that is left for x1 once its own term (-23)
    # is removed; "sum - own" would cancel it to 0 (a spurious hard message).
    factors = [Factor(AND, 1, (), 1 - 1e-10, 1 - 1e-10), Factor(AND, 2, (), 4e-18, 4e-18),
               Factor(OR, 0, (1, 2, 4), 1.0, 0.0), Factor(AND, 3, (2,), 0.5, 0.0),
               Factor(AND, 4, (), 1e-300, 1e-300)]
    g = from_factors(factors)
    runner = _fused(g, tile=tile)
    first = _run(g, evidence_from_labels(5, {0: True}), runner, tol=1e-15, max_iters=50)
    labels = {0: True, 1: False}
    warm = _run(g, evidence_from_labels(5, labels), runner, messages=first.messages, tol=1e-15,
                max_iters=50)
    assert not bool(warm.conflict)
    np.testing.assert_allclose(np.asarray(warm.marginals), reference.exact_marginals(factors, 5, labels),
                               atol=1e-12)


@pytest.mark.slow
def test_contradiction_is_reported():
    factors = [Factor(AND, 0, (1,), 1.0, 0.0), Factor(AND, 1, (), 0.5, 0.5)]
    g = from_factors(factors)
    res = _run(g, evidence_from_labels(2, {0: True, 1: False}), _fused(g))
    assert bool(res.conflict) and not bool(res.converged)


@pytest.mark.slow
def test_new_evidence_never_recompiles():
    rng = np.random.default_rng(1)
    g = from_factors(random_factors(rng, 20, 25), 20)
    runner = _fused(g, **SMALL)
    _run(g, np.zeros(20), runner, tol=1e-6)
    before = runner.run._cache_size()
    for v in range(5):
        ev = evidence_from_labels(20, {v: bool(v % 2)})
        _run(g, ev, runner, tol=1e-6, max_iters=int(10 + v), damping=0.1 * v)
    assert runner.run._cache_size() == before


def _pallas_grids(jaxpr):
    grids = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            grids.append(tuple(eqn.params["grid_mapping"].grid))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    grids += _pallas_grids(inner)
    return grids


@pytest.mark.slow
def test_vmap_runs_the_problems_one_after_another():
    # A batch of evidence sets under jax.vmap: each set's result as if run alone, and the kernels
    # keep their grids (a batched grid could hold more waiting chunks than a GPU runs at once).
    rng = np.random.default_rng(4)
    V = 12
    g = from_factors(random_factors(rng, V, 16, max_body=5), V)
    runner = _fused(g, **SMALL)
    evs = jnp.stack([jnp.asarray(evidence_from_labels(V, labels), jnp.float64)
                     for labels in ({}, {0: True}, {3: False, 5: True})])

    def marginals(ev):
        return _run(g, ev, runner, tol=1e-9, max_iters=60).marginals

    batched = jax.vmap(marginals)(evs)
    for k in range(evs.shape[0]):
        np.testing.assert_array_equal(np.asarray(batched[k]), np.asarray(marginals(evs[k])))
    grids = _pallas_grids(jax.make_jaxpr(jax.vmap(marginals))(evs).jaxpr)
    unbatched = _pallas_grids(jax.make_jaxpr(marginals)(evs[0]).jaxpr)
    assert grids and grids == unbatched


@pytest.mark.slow
def test_runner_contract_name_info_and_concrete_graph():
    rng = np.random.default_rng(2)
    g = from_factors(random_factors(rng, 8, 10), 8)
    # The interpreter follows the settings' backend unless told.
    runner = fused.make_runner(g, Settings(backend="fused_interpret"))
    assert runner.name == "parall/fused"
    assert isinstance(runner.layout, fused.FusedLayout)
    assert runner.info.unroll == fused.UNROLL and runner.info.layout_seconds >= 0
    assert runner.info.backend == "fused_interpret"
    assert runner.info.tuning == dict(
        tile=fused.AUTO_TILE[8], var_tile=fused.AUTO_VAR_TILE[8], num_warps=fused.AUTO_WARPS[8],
        var_warps=fused.AUTO_VAR_WARPS[8])
    ev = np.zeros(8)
    res = _run(g, ev, runner, tol=1e-10, max_iters=1000)
    ref = _run(g, ev, _xla(g), tol=1e-10, max_iters=1000)
    np.testing.assert_allclose(np.asarray(res.marginals), np.asarray(ref.marginals), atol=1e-12)
    # `run` is a jax.jit object: benchmarks time its compilation ahead of time.
    msgs, evd = loop.init(g), jnp.asarray(ev)
    ctl = loop.controls(1e-10, 1000, 0.0)
    compiled = runner.run.lower(g, runner.layout, msgs, evd, ctl).compile()
    again = compiled(g, runner.layout, msgs, evd, ctl)
    np.testing.assert_array_equal(np.asarray(again.marginals), np.asarray(res.marginals))
    with pytest.raises(TypeError, match="concrete graph"):
        jax.jit(lambda g: fused.make_runner(g, Settings(backend="fused_interpret")).layout.edge_slot)(g)


# ---------------------------------------------------------------- the GPU's tile sizes

def _wide_graph(seed: int):
    """Rows of every width: an OR factor of 700 bodies and a variable in 600 factors are wider
    than a 512-slot tile; others fill rows of 32 to 512 slots."""
    rng = np.random.default_rng(seed)
    V = 1400
    # Bodies of the big OR factors are unlikely, and the hubs' factors weak, so no wide
    # row saturates: every partial sum shows in the messages.
    prior = np.where(np.arange(V) < 1200, 0.002 * (1 + rng.random(V)), 0.3 + 0.4 * rng.random(V))
    factors = [Factor(AND, v, (), float(prior[v]), float(prior[v])) for v in range(V)]
    factors.append(Factor(OR, 0, tuple(range(1, 700)), 0.1, 0.95))
    # Rows of every tile width from 32 to 512 slots, on both sides.
    for head, n in ((5, 20), (6, 45), (7, 100), (8, 220), (9, 450)):
        factors.append(Factor(OR, head, tuple(range(700, 700 + n)), 0.2, 0.9))
    hubs = [1] * 600 + [2] * 20 + [3] * 40 + [4] * 100 + [10] * 200 + [11] * 400
    for hub in hubs:
        head = int(rng.integers(700, V))
        body = [int(x) for x in rng.choice(np.arange(12, V), size=int(rng.integers(0, 3)), replace=False)]
        factors.append(Factor(AND, head, (hub, *(b for b in body if b != head)), 0.55, 0.45))
    return from_factors(factors, V), V


@pytest.mark.slow
@pytest.mark.parametrize("labels", [{}, {5: True, 800: False, 0: True}])
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_production_tiles_with_wide_rows_match_xla_engine(labels, dtype):
    # The runner's own tiles for the precision (`fused.AUTO_TILE`, `fused.AUTO_VAR_TILE`).
    g, V = _wide_graph(0)
    runner = _fused(g, dtype)
    lay = runner.layout
    size = jnp.dtype(dtype).itemsize
    assert (lay.factors.tile, lay.variables.tile) == (fused.AUTO_TILE[size], fused.AUTO_VAR_TILE[size])
    assert lay.factors.wide_chunks >= 2 and lay.variables.wide_chunks >= 2
    for side in (lay.factors, lay.variables):
        assert {w for w in (32, 64, 128, 256, 512) if w <= side.tile} <= set(side.widths)
    ev = evidence_from_labels(V, labels)
    want = _run(g, ev, _xla(g, dtype), dtype, max_iters=15)
    got = _run(g, ev, runner, dtype, max_iters=15)
    tight = dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(got.messages), np.asarray(want.messages),
                               atol=1e-12 if tight else 1e-4, rtol=1e-12 if tight else 1e-4)
    np.testing.assert_allclose(np.asarray(got.marginals), np.asarray(want.marginals),
                               atol=1e-14 if tight else 1e-5)


# ---------------------------------------------------------------- compile time

def _lowered_for_gpu(unroll: int) -> str:
    """The fused loop lowered for CUDA (no GPU needed), as StableHLO text."""
    rng = np.random.default_rng(3)
    factors = random_factors(rng, 60, 90, max_body=6)
    factors.append(Factor(OR, 0, tuple(range(1, 40)), 0.2, 0.9))  # a wide row on both sides
    g = from_factors(factors, 60)
    # Runners of one tuning share their jitted `run` and its traces: a fresh one traces the
    # passes as they are now (the wait test below swaps `chunks_wait`).
    fused._jitted.cache_clear()
    runner = fused.make_runner(g, Settings(backend="fused"), unroll=unroll, interpret=False, tile=8)
    lay = runner.layout
    assert lay.factors.wide_chunks and lay.variables.wide_chunks
    dt = jnp.float64
    args = (g, lay, loop.init(g, dt), jnp.zeros((60,), dt), loop.controls(0.0, 10, 0.0, dt))
    # Only a jaxlib without the Triton dialect skips; any other error in lowering fails.
    pytest.importorskip("jax._src.pallas.triton.pallas_call_registration")
    pytest.importorskip("jax._src.lib.triton")
    return runner.run.trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.slow
def test_each_kernel_is_lowered_once_whatever_the_unrolling():
    # Lowering a Pallas kernel to Triton IR was most of the fused loop's compile time: the
    # loop called its four kernels at every unrolled sweep and before the loop, and lowered
    # them each time. Now each kernel is lowered once, however many sweeps a trip unrolls
    # (three: factor, wide factor, variable; the variable kernel sums its own wide rows).
    calls = "custom_call @__gpu$xla.gpu.triton("
    assert _lowered_for_gpu(1).count(calls) == _lowered_for_gpu(4).count(calls) == 3


def test_wide_factor_rows_wait_for_their_chunks_on_the_gpu(monkeypatch):
    # On the GPU the chunks of a wide factor row wait for each other in the factor kernel and
    # form their own messages, so no second kernel runs for them; the interpreter (programs
    # one after another) cannot wait, and keeps the wide kernel. The waiting path is lowered
    # for CUDA here (no GPU needed); `benchmarks/check_fused.py` runs it on the GPU.
    calls = "custom_call @__gpu$xla.gpu.triton("
    monkeypatch.setattr(factor_kernel, "chunks_wait", lambda max_row_chunks, interpret: True)
    fused.factor_pass.clear_cache()
    try:
        assert _lowered_for_gpu(1).count(calls) == 2
    finally:
        monkeypatch.undo()
        fused.factor_pass.clear_cache()
    assert _lowered_for_gpu(1).count(calls) == 3
