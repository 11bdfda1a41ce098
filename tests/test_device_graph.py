"""fastlbp/engines/loop.py `device_graph`: a session puts on the device only the graph's fields its
runner reads (`Runner.reads`), and rounds on that lean graph equal rounds on the whole graph bit for bit."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import evidence_from_labels, random_factors, random_labels
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sequential_support import sweep_with_stats

import schedules
from fastlbp import engines
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.engines import loop, relaxed
from fastlbp.inference.session import Session
from schedules import orders, relax_plan

# (schedule, backend, engine the dispatcher must pick): every XLA engine and its variants.
XLA_CASES = [
    ("parall", "xla", "parall/xla"),
    ("parall", "scatter", "parall/scatter"),
    ("seqfix", "xla", "seqfix/relaxed"),
    ("topo", "xla", "topo/relaxed"),
    ("seqfix:budget=1", "xla", "seqfix/relaxed"),  # open: the chunk plan is built by a round
    ("seqfix:chunked", "xla", "seqfix/chunked"),
    ("seqrnd", "xla", "seqrnd/chunked"),
]


def _random_problem(seed: int):
    """(rng, graph, (V,) evidence of random labels or none, (E,) random start with some +inf)."""
    rng = np.random.default_rng(seed)
    factors = random_factors(rng, int(rng.integers(2, 9)), int(rng.integers(1, 9)))
    graph = from_factors(factors)
    labels = random_labels(rng, graph.num_vars) if rng.random() < 0.5 else {}
    start = rng.normal(0, 3, graph.num_edges)
    start[rng.random(graph.num_edges) < 0.1] = np.inf
    return rng, graph, jnp.asarray(evidence_from_labels(graph.num_vars, labels)), start


def _round(runner, graph, evidence, start, iters, jit):
    """A round of `runner` on `graph` (whole or lean), op by op unless `jit`, on the host."""
    ctl = loop.controls(0.0, iters, 0.0)
    with jax.disable_jit() if not jit else _nullcontext():
        return jax.device_get(runner(graph, jnp.asarray(start), evidence, ctl))


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _assert_identical(a: loop.RunResult, b: loop.RunResult):
    for field in dataclasses.fields(loop.RunResult):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if x is None or y is None:
            assert x is None and y is None, field.name
            continue
        x, y = np.atleast_1d(np.asarray(x)), np.atleast_1d(np.asarray(y))
        assert x.dtype == y.dtype and x.shape == y.shape, field.name
        # Bit for bit: equal values, NaN where NaN, and the sign of zeros.
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), (field.name, x, y)


def _runner(graph, spec, backend):
    return engines.make_runner(graph, Settings(schedule=spec, backend=backend))


def test_lean_graph_keeps_exactly_the_fields_read():
    graph = from_factors(random_factors(np.random.default_rng(3), 6, 5))
    lean = loop.device_graph(graph, loop.SWEEP | loop.VAR_SUMS)
    for name in loop.GRAPH_FIELDS:
        kept = getattr(lean, name)
        if name in loop.SWEEP | loop.VAR_SUMS:
            np.testing.assert_array_equal(np.asarray(kept), np.asarray(getattr(graph, name)))
            assert isinstance(kept, jax.Array)
        else:
            assert kept is None, name
    assert lean.factor_kind.dtype == jnp.int8  # AND/OR: one byte a factor
    assert (lean.num_vars, lean.num_factors, lean.num_edges) == (graph.num_vars, graph.num_factors,
                                                                 graph.num_edges)
    assert loop.device_graph(graph).slot_var is not None  # None: the whole graph
    with pytest.raises(ValueError, match="no field 'edges'"):
        loop.device_graph(graph, frozenset({"edges"}))


@pytest.mark.parametrize(("spec", "backend", "name"), XLA_CASES)
def test_every_runner_declares_what_it_reads(spec, backend, name):
    graph = from_factors(random_factors(np.random.default_rng(5), 7, 6))
    runner = _runner(graph, spec, backend)
    assert runner.name == name
    assert runner.reads is not None and runner.reads < loop.GRAPH_FIELDS
    # No engine reads the inverse permutation or the heads; only a scatter the variable order.
    assert not runner.reads & {"edge_slot", "factor_head"}
    assert (runner.reads >= loop.VAR_SCATTER) == (backend == "scatter")
    assert not runner.reads & loop.VAR_SCATTER or backend == "scatter"


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), case=st.sampled_from(XLA_CASES))
def test_rounds_on_the_lean_graph_equal_rounds_on_the_whole_graph(seed, case):
    spec, backend, name = case
    rng, graph, evidence, start = _random_problem(seed)
    iters = int(rng.integers(1, 4))
    # Two runners: a relaxed runner's first unsettled round changes its layout.
    full = _round(_runner(graph, spec, backend), jax.device_put(graph), evidence, start, iters, jit=False)
    runner = _runner(graph, spec, backend)
    lean = _round(runner, loop.device_graph(graph, runner.reads), evidence, start, iters, jit=False)
    _assert_identical(full, lean)


@pytest.mark.parametrize(("spec", "backend", "name"), XLA_CASES[:1] + XLA_CASES[2:4] + XLA_CASES[5:6])
def test_jitted_rounds_on_the_lean_graph_are_bit_identical(spec, backend, name):
    # Compiled (int8 factor kinds, fields absent from the program): the session's path.
    _, graph, evidence, start = _random_problem(11)
    full = _round(_runner(graph, spec, backend), jax.device_put(graph), evidence, start, 6, jit=True)
    runner = _runner(graph, spec, backend)
    lean = _round(runner, loop.device_graph(graph, runner.reads), evidence, start, 6, jit=True)
    _assert_identical(full, lean)


def _closed_runners(graph):
    """Runners whose rounds trace every path (no deferred chunk plan): relaxed sweeps finished
    by their chunk plans among them."""
    out = [_runner(graph, spec, backend) for spec, backend, _ in XLA_CASES]
    for spec in ("seqfix:budget=1", "topo:budget=1"):
        rel = schedules.relaxation_plan(graph, spec, analyse=True)
        assert rel.chunks is not None  # the chunk loop is in the program
        out.append(relaxed.runner_for(graph, rel, spec))
    return [r for r in out if r.finish is None]


def test_every_field_a_runner_declares_is_read():
    """Minimal: without any one declared field a round fails to trace or computes something
    else (the scatter sums without `var_edges` would sum the wrong messages), so the lean
    graph holds nothing a round does not need."""
    rng = np.random.default_rng(7)
    graph = from_factors(random_factors(rng, 8, 12))
    while schedules.relaxation_plan(graph, "topo", analyse=True).analysis.num_batches < 2:
        graph = from_factors(random_factors(rng, 8, 12))
    ev = jnp.asarray(evidence_from_labels(graph.num_vars, {0: True}))
    msgs = jnp.asarray(rng.normal(0, 2, graph.num_edges))
    ctl = loop.controls(0.0, 3, 0.0)
    runners = _closed_runners(graph)
    assert {r.name for r in runners} == {"parall/xla", "parall/scatter", "seqfix/chunked", "seqrnd/chunked",
                                         "seqfix:budget=1", "topo:budget=1"}
    silent = []
    for runner in runners:
        for name in runner.reads:
            lean = loop.device_graph(graph, runner.reads - {name})
            try:  # tracing alone (no compilation) meets every branch
                jax.make_jaxpr(runner.run)(lean, runner.layout, msgs, ev, ctl)
            except (AttributeError, TypeError, IndexError, ValueError):
                continue
            want = runner.run(loop.device_graph(graph, runner.reads), runner.layout, msgs, ev, ctl)
            got = runner.run(lean, runner.layout, msgs, ev, ctl)
            assert not np.array_equal(np.asarray(got.messages), np.asarray(want.messages)), (runner.name,
                                                                                             name)
            silent.append((runner.name, name))
    # Only the scatter's gather is optional to the code (segment_sums skips a None gather).
    assert silent == [("parall/scatter", "var_edges")]


def _held_bytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree_util.tree_leaves(tree))


def _model(seed: int) -> Model:
    graph = from_factors(random_factors(np.random.default_rng(seed), 30, 40))
    return Model(graph, tuple(f"v{i}" for i in range(graph.num_vars)), labels={0: True, 3: False})


@pytest.mark.parametrize("schedule", ["parall", "seqfix", "topo"])
def test_a_session_holds_the_lean_graph_and_ranks_the_same(schedule):
    model = _model(1)
    session = Session(model, method="lbp", schedule=schedule, tol=1e-9, max_iters=8, remedies=False)
    assert {f for f in loop.GRAPH_FIELDS if getattr(session.graph, f) is not None} == session.runner.reads
    whole = _held_bytes(model.graph)
    assert _held_bytes(session.graph) <= whole - 12 * model.graph.num_edges  # 13 bytes an edge and more
    if schedule != "parall":
        return  # the rounds: test_jitted_rounds_... and test_rounds_on_the_lean_graph_...
    got = session.run(warm=False)
    runner = engines.make_runner(model, session.settings)
    want = runner(jax.device_put(model.graph), loop.init(model.graph), session.evidence(), session.controls())
    np.testing.assert_array_equal(got.marginals, np.asarray(want.marginals))
    assert got.iterations == int(want.iterations)


def test_exact_and_sampling_sessions_hold_no_graph_on_the_device():
    session = Session(_model(2), method="exact")
    assert jax.tree_util.tree_leaves(session.graph) == []
    assert session.run().method == "exact"


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "name"), [("parall", "parall/fused"),
                                           ("seqfix:chunked", "seqfix/persistent")])
def test_pallas_rounds_on_the_lean_graph_are_bit_identical(spec, name):
    # The Pallas kernels in the interpreter (the same kernels as on a GPU): of the graph, the
    # fused PARALL kernels read only the factors' parameters.
    _, graph, evidence, start = _random_problem(21)
    runner = _runner(graph, spec, "fused_interpret")
    full = _round(_runner(graph, spec, "fused_interpret"), jax.device_put(graph), evidence, start, 4,
                  jit=True)
    assert runner.name == name
    assert runner.reads == (loop.PARAMS if name == "parall/fused" else loop.PARAMS | loop.VAR_SUMS)
    lean = _round(runner, loop.device_graph(graph, runner.reads), evidence, start, 4, jit=True)
    _assert_identical(full, lean)
    msgs, ctl = jnp.asarray(start), loop.controls(0.0, 4, 0.0)
    for field in runner.reads:  # each one read (`test_every_field_a_runner_declares_is_read`)
        with pytest.raises((AttributeError, TypeError, IndexError, ValueError)):
            jax.make_jaxpr(runner.run)(loop.device_graph(graph, runner.reads - {field}), runner.layout, msgs,
                                       evidence, ctl)


def _kept(layout: relaxed.RelaxLayout, plan) -> relaxed.RelaxLayout:
    """`layout` with the plan's split and own_new on the device, as before they were left out."""
    return dataclasses.replace(layout, plan=dataclasses.replace(
        layout.plan, split=jnp.asarray(plan.split), own_new=jnp.asarray(plan.own_new)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), staged=st.booleans())
def test_seqfix_split_is_the_own_position(seed, staged):
    """SEQFIX's split is each edge's own read position (the layout leaves it and own_new out);
    an order with ties (two factors per stage) may not be, and keeps them (host only)."""
    _, graph, _, _ = _random_problem(seed)
    ef = np.asarray(graph.edge_factor)
    order = (orders.Order(ef // 2 * graph.num_edges + np.arange(graph.num_edges), "staged") if staged
             else orders.seqfix(graph))
    plan = relax_plan.build(graph, order, 3)
    if plan is None or plan.vgraph is not None:
        return
    read_pos = np.argsort(np.asarray(plan.read_order))
    dropped = relaxed.split_is_own_position(plan)
    assert dropped == (np.array_equal(plan.split, read_pos) and not np.any(plan.own_new))
    assert dropped or staged
    layout = relaxed.layout_for(graph, plan)
    assert (layout.plan.split is None) == dropped and (layout.plan.own_new is None) == dropped


@pytest.mark.parametrize("seed", [31])
def test_a_seqfix_sweep_without_split_is_bit_identical(seed):
    _, graph, evidence, start = _random_problem(seed)
    plan = relax_plan.build(graph, orders.seqfix(graph), 3)  # three passes a sweep in both
    layout = relaxed.layout_for(graph, plan)
    assert layout.plan.split is None
    g = jax.device_put(graph)
    got = sweep_with_stats(g, layout, jnp.asarray(start), evidence)
    want = sweep_with_stats(g, _kept(layout, plan), jnp.asarray(start), evidence)
    for a, b in zip(got, want, strict=True):
        a, b = np.atleast_1d(np.asarray(a)), np.atleast_1d(np.asarray(b))
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (a, b)


def test_ties_keep_the_split():
    # Factors 0 and 1 in one stage, sharing variable 0: factor 1's edge at variable 0 comes
    # after factor 0's in the row, but reads it old (same stage), so its split is not its position.
    graph = from_factors([Factor(AND, 0, (1,), 0.9, 0.1), Factor(OR, 2, (0,), 0.8, 0.2)])
    ef = np.asarray(graph.edge_factor)
    plan = relax_plan.build(graph, orders.Order(np.zeros_like(ef), "one stage"), 4)
    assert plan.vgraph is None and not relaxed.split_is_own_position(plan)
    assert relaxed.layout_for(graph, plan).plan.split is not None
    assert relaxed.split_is_own_position(relax_plan.build(graph, orders.seqfix(graph), 4))


@pytest.mark.parametrize("seed", [41])
def test_a_topo_sweep_gathering_its_virtual_graph_is_bit_identical(seed):
    """TOPO's layout holds the virtual graph's own structure only; its variables, head flags
    and parameters gathered from the graph give the sweep of the whole virtual graph, bit for bit."""
    rng = np.random.default_rng(seed)
    graph = from_factors(random_factors(rng, 9, 12))
    evidence = jnp.asarray(evidence_from_labels(graph.num_vars, random_labels(rng, graph.num_vars)))
    start = jnp.asarray(rng.normal(0, 3, graph.num_edges))
    plan = relax_plan.build(graph, orders.topo(graph), 3)
    assert plan.vgraph is not None
    layout = relaxed.layout_for(graph, plan)
    held = layout.plan.vgraph
    assert held.edge_var is None and held.p1 is None and held.factor_kind is None and held.var_edges is None
    whole = dataclasses.replace(layout, vfactor=None,
                                plan=dataclasses.replace(layout.plan, vgraph=jax.device_put(plan.vgraph)))
    g = jax.device_put(graph)
    got = sweep_with_stats(g, layout, start, evidence)
    want = sweep_with_stats(g, whole, start, evidence)
    for a, b in zip(got, want, strict=True):
        a, b = np.atleast_1d(np.asarray(a)), np.atleast_1d(np.asarray(b))
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (a, b)
