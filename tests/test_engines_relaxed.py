"""fastlbp/engines/relaxed.py: sequential sweeps solved by relaxation == the same sweeps done in order."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
import reference_schedules
from conftest import DATA, SHARED
from graphs import evidence_from_labels, random_factors, random_labels, sweep_by_rank
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import Contradiction, SequentialLBP, _evidence_pairs
from sequential_support import (
    check_equals_sequential_reference,
    check_leave_one_out_keeps_tiny_sums_of_others,
    runner_for,
    sweep_with_passes,
    sweep_with_stats,
)
from typer.testing import CliRunner

import schedules
from datalog import causal_fg
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.engines import loop, relaxed
from fastlbp.inference.session import Session
from fastlbp.io import loading
from schedules import analysis, orders, relax_plan

WEBLECH = DATA / "weblech"


def _sequential_sweep(factors, num_vars, order, labels, messages):
    """One sweep of `order` done literally in order by the reference (stages for ties)."""
    lbp = SequentialLBP(factors, num_vars)
    ev = _evidence_pairs(num_vars, labels)
    msgs = messages.copy()
    sweep_by_rank(lbp, msgs, ev, order.rank)
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.isnan(lbp.marginals(msgs, ev)).any():
            # The sweep ends contradictory (random hard starting messages against the
            # labels): the engines report a conflict instead of messages.
            return None
        return np.log(msgs[:, 1]) - np.log(msgs[:, 0])


def _pairs(log_odds):
    p1 = 1 / (1 + np.exp(-log_odds))
    return np.stack([1 - p1, p1], -1)


def _assert_same(a, b, atol=1e-9):
    a, b = np.asarray(a), np.asarray(b)
    with np.errstate(invalid="ignore"):
        ok = (a == b) | (np.abs(a - b) < atol)
    assert ok.all(), (a[~ok], b[~ok])


def _layout(graph, order, max_passes):
    """The relaxation engine's layout of `order`, capped at `max_passes` passes a sweep."""
    plan = relax_plan.build(graph, order, max_passes)
    assert plan is not None
    return relaxed.layout_for(graph, plan)


@pytest.mark.slow
@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), strategy=st.sampled_from(["seqfix", "topo", "topo:bodyfirst"]))
def test_one_sweep_equals_the_sequential_reference_from_any_state(seed, strategy):
    rng = np.random.default_rng(seed)
    factors = random_factors(rng, int(rng.integers(2, 10)), int(rng.integers(1, 10)))
    graph = from_factors(factors)
    labels = random_labels(rng, graph.num_vars) if rng.random() < 0.5 else {}
    order = schedules.orders_for(graph, schedules.parse_spec(strategy))[0]
    start = rng.normal(0, 3, graph.num_edges)
    start[rng.random(graph.num_edges) < 0.1] = np.inf
    try:
        want = _sequential_sweep(factors, graph.num_vars, order, labels, _pairs(start))
    except Contradiction:
        return
    layout = _layout(graph, order, analysis.levelling(graph, order).num_batches)
    ev = jnp.asarray(evidence_from_labels(graph.num_vars, labels))
    got, passes, redone = relaxed.sweep(graph, layout, jnp.asarray(start), ev)
    assert not bool(redone)  # no chunk plan: the budget is the number of levels
    if want is None or np.isnan(want).any():
        return
    _assert_same(got, want)
    assert 1 <= int(passes) <= int(layout.plan.max_passes)


def _chain(n, p=0.9):
    """x0 -> x1 -> ... as noisy ANDs, file order from the end: SEQFIX carries x0's prior
    down the chain in one sweep only if every update reads its predecessor's new value."""
    factors = [Factor(AND, 0, (), 0.7, 0.7)]
    factors += [Factor(AND, i, (i - 1,), p, 0.2) for i in range(1, n)]
    return factors


def test_a_chain_needs_every_pass_and_gets_them():
    factors = _chain(12)
    graph = from_factors(factors)
    order = orders.seqfix(graph)
    levels = analysis.levelling(graph, order).num_batches
    assert levels >= 11
    start = np.zeros(graph.num_edges)
    want = _sequential_sweep(factors, graph.num_vars, order, {}, _pairs(start))
    ev = jnp.zeros(graph.num_vars)
    layout = _layout(graph, order, levels)
    got, passes = sweep_with_passes(graph, layout, jnp.asarray(start), ev)
    _assert_same(got, want, 1e-12)
    assert int(passes) >= 11
    # Capped at one pass the relaxation is a PARALL sweep, and that is visibly different:
    # the test can fail.
    short = _layout(graph, order, 1)
    once, _ = sweep_with_passes(graph, short, jnp.asarray(start), ev)
    assert np.max(np.abs(np.asarray(once) - want)) > 1e-3


def _random_chain(rng):
    """A chain of 6-40 links (random parameters, sometimes a hard one), factors in chain order or
    reversed, sometimes a few random factors across it: one level per link."""
    n = int(rng.integers(6, 41))

    def p():
        return float(rng.integers(0, 2)) if rng.random() < 0.1 else float(rng.uniform(0.05, 0.95))

    prior = p()
    factors = [Factor(AND, 0, (), prior, prior)]
    factors += [Factor(AND if rng.random() < 0.5 else OR, i, (i - 1,), p(), p()) for i in range(1, n)]
    if rng.random() < 0.5:
        factors = factors[::-1]
    for _ in range(int(rng.integers(0, 3))):
        head, body = (int(x) for x in rng.choice(n, 2, replace=False))
        factors.append(Factor(OR, head, (body,), p(), p()))
    return factors


# A compile per shape (~2 s on a CPU) makes each example costly: 15 of them.
@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), strategy=st.sampled_from(["seqfix", "topo", "topo:bodyfirst"]),
       budget=st.integers(1, 4))
def test_a_budgeted_sweep_equals_the_sequential_sweep(seed, strategy, budget):
    # A sweep that the budget does not settle is redone by the chunk loop from its start state:
    # deep chains (one level per link) exercise that path on small graphs.
    rng = np.random.default_rng(seed)
    if rng.random() < 0.6:
        factors = _random_chain(rng)
    else:
        factors = random_factors(rng, int(rng.integers(2, 10)), int(rng.integers(1, 10)))
    graph = from_factors(factors)
    labels = random_labels(rng, graph.num_vars) if rng.random() < 0.5 else {}
    rel = schedules.relaxation_plan(graph, f"{strategy}:budget={budget}", analyse=True)
    levels = rel.analysis.num_batches
    assert rel.budget == min(budget, levels) and int(rel.plan.max_passes) == max(rel.budget, 1)
    assert (rel.chunks is not None) == (levels > budget)
    layout = relaxed.layout_for(graph, rel.plan, None if rel.chunks is None else rel.chunks.plan)
    start = rng.normal(0, 3, graph.num_edges)
    start[rng.random(graph.num_edges) < 0.1] = np.inf
    try:
        want = _sequential_sweep(factors, graph.num_vars, rel.analysis.order, labels, _pairs(start))
    except Contradiction:
        return
    ev = jnp.asarray(evidence_from_labels(graph.num_vars, labels))
    got, passes, redone = sweep_with_stats(graph, layout, jnp.asarray(start), ev)
    assert 1 <= int(passes) <= rel.budget
    assert not bool(redone) or rel.chunks is not None
    if want is None or np.isnan(want).any():
        return
    _assert_same(got, want)


@pytest.mark.slow
def test_a_chain_deeper_than_the_budget_is_finished_by_the_chunk_loop():
    factors = _chain(40)
    graph = from_factors(factors)
    start = np.zeros(graph.num_edges)
    want = _sequential_sweep(factors, graph.num_vars, orders.seqfix(graph), {}, _pairs(start))
    ev = jnp.zeros(graph.num_vars)
    rel = schedules.relaxation_plan(graph, "seqfix:budget=5", analyse=True)
    assert rel.budget == 5 and rel.chunks is not None and rel.analysis.num_batches >= 39
    layout = relaxed.layout_for(graph, rel.plan, rel.chunks.plan)
    got, passes, redone = sweep_with_stats(graph, layout, jnp.asarray(start), ev)
    assert int(passes) == 5 and bool(redone)
    _assert_same(got, want, 1e-12)
    # Without the chunk loop five passes are visibly wrong: the test can fail.
    short = _layout(graph, orders.seqfix(graph), 5)
    five, _ = sweep_with_passes(graph, short, jnp.asarray(start), ev)
    assert np.max(np.abs(np.asarray(five) - want)) > 1e-3
    # A sweep that settles within the budget keeps the relaxation's result.
    again, passes, redone = sweep_with_stats(graph, layout, got, ev)
    assert int(passes) <= 2 and not bool(redone)


@pytest.mark.slow
def test_budgeted_runner_equals_sequential_reference():
    # Whole rounds: the loop's aggregates (of the real graph) start the chunk loop, also under
    # TOPO's virtual graph.
    check_equals_sequential_reference("topo:budget=1", "relaxed", jit=True)


def test_default_budget_carries_no_chunk_plan_on_a_shallow_order():
    model = causal_fg.load(WEBLECH / "graph.causal_fg")
    rel = schedules.relaxation_plan(model, "seqfix:budget=1000", analyse=True)
    assert rel.chunks is None and rel.budget == rel.analysis.num_batches == int(rel.plan.max_passes)
    runner = runner_for(model, "seqfix:budget=1000")
    assert runner.layout.chunks is None and runner.run is relaxed.run


def test_pass_budget_is_the_passes_one_chunk_sweep_costs():
    # Ski rental: a sweep costs at most the budget's passes plus one chunk sweep.
    few = relax_plan.pass_budget(1000, 4, 100_000, gpu=False)
    assert few == relax_plan.MIN_BUDGET
    many = relax_plan.pass_budget(100_000, 16, 2_000, gpu=False)
    fixed, per_edge, step, per_slot = relax_plan.CPU_COSTS
    assert many == int(100_000 * (step + 16 * per_slot) / (fixed + per_edge * 2_000))
    assert relax_plan.pass_budget(200_000, 16, 2_000, gpu=False) >= 2 * many - 1
    assert relax_plan.pass_budget(100_000, 16, 2_000, gpu=True) >= relax_plan.MIN_BUDGET


@pytest.mark.slow
def test_a_chain_of_ten_thousand_links_through_a_session():
    # One level per link: before the budget every cold SEQFIX sweep took 10^4 passes of O(E)
    # (45 s for `fastlbp rank` on a 2-core CPU); the chunk loop now finishes it.
    from datalog.bayesnet import to_model
    from datalog.derivation import from_clauses

    n = 10_000
    dg = from_clauses([("R", f"t{i + 1}", [f"t{i}"]) for i in range(n)], rules={"R": 0.9},
                      priors={"t0": 0.5}, alarms=[f"t{n}"])
    model = to_model(dg, compress=True)  # chain merging keeps the n + 1 tuples as variables
    assert model.graph.num_vars == n + 1
    session = Session(model, method="lbp", schedule="seqfix")
    # No levelling before a sweep needs it: the plan is open, a budget below the level bound.
    assert session.runner.name == "seqfix/relaxed" and session.runner.layout.chunks is None
    assert session.runner.layout.open and session.runner.info.relaxation.bound >= n
    opened = session.runner
    first = session.run()
    assert first.converged
    # The first cold sweep did not settle within the budget: the runner built the chunk plan.
    # The runner is immutable: the round returned the finished one (`Runner.step`), the session keeps it.
    assert session.runner.finish is None and session.runner.layout.chunks is not None
    assert session.runner.info.relaxation.budget < n and not session.runner.layout.open
    assert opened.layout.open and opened.finish is not None and session.runner.info.finish_seconds >= 0
    chunk = Session(model, method="lbp", schedule="seqfix:chunked")
    ref = chunk.run()
    assert first.iterations == ref.iterations
    np.testing.assert_array_equal(first.log_odds, ref.log_odds)
    # P(t_n) = 0.5 * 0.9^n: its log-odds carry the whole chain.
    assert abs(first.log_odds[n] - (np.log(0.5) + n * np.log(0.9))) < 1e-6 * n


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["seqfix", "topo"])
def test_relaxed_equals_chunked_on_weblech_cold_and_after_a_label(spec):
    model = causal_fg.load(WEBLECH / "graph.causal_fg")
    g = model.graph
    fast = runner_for(model, spec)
    slow = runner_for(model, spec + ":chunked")
    assert fast.name == f"{spec}/relaxed" and slow.name == f"{spec}/chunked"
    assert isinstance(fast.layout, relaxed.RelaxLayout) and not isinstance(slow.layout, relaxed.RelaxLayout)
    ctl = loop.controls(1e-6, 1000, 0.0)
    ev = jnp.zeros(g.num_vars)
    a, b = fast(g, loop.init(g), ev, ctl), slow(g, loop.init(g), ev, ctl)
    assert int(a.iterations) == int(b.iterations)
    _assert_same(a.messages, b.messages, 1e-11)
    top = int(np.argmax(np.asarray(a.marginals)[list(model.alarms)])) if model.alarms else 0
    ev = jnp.asarray(evidence_from_labels(g.num_vars, {top: False}))
    a2, b2 = fast(g, a.messages, ev, ctl), slow(g, b.messages, ev, ctl)
    assert int(a2.iterations) == int(b2.iterations)
    np.testing.assert_allclose(np.asarray(a2.marginals), np.asarray(b2.marginals), atol=1e-12)


@pytest.mark.slow
def test_passes_are_few_on_a_bingo_like_graph():
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate

    model = to_model(generate(factor_edges=20_000, seed=3))
    g = model.graph
    order = orders.seqfix(g)
    levels = analysis.levelling(g, order).num_batches
    layout = _layout(g, order, levels)
    _, passes = sweep_with_passes(g, layout, loop.init(g), jnp.zeros(g.num_vars))
    assert 2 <= int(passes) <= 10 < levels


# Relaxation is the default engine of single-order strategies (tests/test_engines_chunked.py
# runs the chunk loop on the same cases). Jitted: relaxation loops over passes, and op by op
# that costs more than a compile per shape.
@pytest.mark.slow
@pytest.mark.parametrize("spec", ["seqfix", "topo:algorithm3"])
def test_relaxed_equals_sequential_reference(spec):
    check_equals_sequential_reference(spec, "relaxed", jit=True)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["seqfix", "topo"])
def test_relaxed_leave_one_out_keeps_tiny_sums_of_others(spec):
    check_leave_one_out_keeps_tiny_sums_of_others(spec, "relaxed")


def test_libdai_seqfix_weblech_cold_and_warm():
    _check_libdai(WEBLECH)


@pytest.mark.skipif(not (SHARED / "reference" / "avrora").exists()
                    or not os.environ.get("FASTLBP_SLOW_TESTS"),
                    reason="avrora needs ../shared/data and FASTLBP_SLOW_TESTS=1 (40 s on a CPU)")
def test_libdai_seqfix_avrora_cold_and_warm():
    _check_libdai(SHARED / "reference" / "avrora")


def _check_libdai(folder):
    model = loading.load(folder / "graph.causal_fg")
    session = Session(model, method="lbp", schedule="seqfix")
    assert session.runner.name == "seqfix/relaxed"
    session.run()
    ref = causal_fg.load_marginals(folder / "seqfix.marg")
    got = session.marginals()
    assert max(abs(got[k] - v) for k, v in ref.items()) < 1e-6
    for v, truth in loading.read_labels(folder / "label.txt", model).items():
        session.label(v, truth)
    session.run()  # warm start from the converged messages, as the reference did
    ref = causal_fg.load_marginals(folder / "seqfix-after-label.marg")
    got = session.marginals()
    assert max(abs(got[k] - v) for k, v in ref.items()) < 1e-6


def test_cli_marginals_seqfix_matches_libdai():
    from fastlbp.cli import get_app
    res = CliRunner().invoke(get_app(), ["marginals", str(WEBLECH / "graph.causal_fg"),
                                         "--method", "lbp", "--schedule", "seqfix"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    ref = causal_fg.load_marginals(WEBLECH / "seqfix.marg")
    assert max(abs(out["marginals"][k] - v) for k, v in ref.items()) < 1e-6


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(["seqfix", "topo", "seqrnd", "stages", "chain"]))
def test_level_bound_is_at_least_the_levels(seed, kind):
    # The relaxation caps sweeps at the bound without levelling: it must never be below the levels.
    rng = np.random.default_rng(seed)
    factors = _random_chain(rng) if kind == "chain" else random_factors(rng, int(rng.integers(1, 12)),
                                                                        int(rng.integers(1, 12)))
    graph = from_factors(factors)
    if kind == "stages":
        order = orders.Order(rng.integers(0, int(rng.integers(1, 6)), graph.num_edges), "stages")
    elif kind == "chain":
        order = orders.seqfix(graph)
    else:
        order = schedules.orders_for(graph, schedules.parse_spec(kind))[0]
    bound = relax_plan.level_bound(graph, order)
    levels = analysis.levelling(graph, order).num_batches
    assert levels <= bound <= graph.num_edges
    if order.is_total:  # the definition's levels (exact N_E) too
        assert int(reference_schedules.brute_levelling(graph, order).max(initial=0)) + 1 <= bound


def test_level_bound_is_tight_on_a_chain_and_one_for_parall():
    graph = from_factors(_chain(30))
    assert relax_plan.level_bound(graph, orders.seqfix(graph)) == 30
    assert analysis.levelling(graph, orders.seqfix(graph)).num_batches == 30
    assert relax_plan.level_bound(graph, orders.parall(graph)) == 1


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), strategy=st.sampled_from(["seqfix", "topo"]), budget=st.integers(1, 3))
def test_an_open_plan_finishes_exactly_through_the_runner(seed, strategy, budget):
    # The runner starts without levels or chunk plan; a round whose sweep does not settle within
    # the budget stops before that sweep, builds the chunk plan and finishes: whole rounds equal
    # the sequential reference either way, and the round counts its iterations once.
    rng = np.random.default_rng(seed)
    factors = _random_chain(rng) if rng.random() < 0.7 else random_factors(rng, int(rng.integers(2, 10)),
                                                                             int(rng.integers(1, 10)))
    graph = from_factors(factors)
    labels = random_labels(rng, graph.num_vars) if rng.random() < 0.3 else {}
    runner = runner_for(graph, f"{strategy}:budget={budget}")
    rel = runner.info.relaxation
    assert rel.analysis is None and rel.open == (budget < rel.bound) == (runner.finish is not None)
    iters = int(rng.integers(1, 4))
    order = rel.order
    lbp = SequentialLBP(factors, graph.num_vars)
    ev_pairs = _evidence_pairs(graph.num_vars, labels)
    msgs = lbp.uniform()
    try:
        for _ in range(iters):
            sweep_by_rank(lbp, msgs, ev_pairs, order.rank)
    except Contradiction:
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(msgs[:, 1]) - np.log(msgs[:, 0])
        if np.isnan(lbp.marginals(msgs, ev_pairs)).any():
            return
    ev = jnp.asarray(evidence_from_labels(graph.num_vars, labels))
    res, after = runner.step(graph, jnp.zeros(graph.num_edges), ev, loop.controls(0.0, iters, 0.0))
    assert int(res.iterations) == iters and not bool(res.conflict)
    _assert_same(res.messages, want)
    if after is not runner:  # finished: levels known, plan closed; the runner stepped from is as it was
        assert after.finish is None and after.info.relaxation.analysis is not None and not after.layout.open
        assert runner.finish is not None and runner.layout.open and runner.info.relaxation.analysis is None
        again = after(graph, jnp.zeros(graph.num_edges), ev, loop.controls(0.0, iters, 0.0))
        np.testing.assert_array_equal(np.asarray(again.messages), np.asarray(res.messages))


def test_an_open_sweep_is_reported_not_taken():
    # Five passes of a 40-link chain are visibly wrong (see above): the open layout's loop must not
    # take them, and says so.
    graph = from_factors(_chain(40))
    rel = schedules.relaxation_plan(graph, "seqfix:budget=5")
    assert rel.open and rel.bound == 40
    layout = relaxed.layout_for(graph, rel.plan, open=True)
    start = jnp.zeros(graph.num_edges)
    ev = jnp.zeros(graph.num_vars)
    _, passes, unsettled = sweep_with_stats(graph, layout, start, ev)
    assert int(passes) == 5 and bool(unsettled)
    res = relaxed.run(graph, layout, start, ev, loop.controls(0.0, 3, 0.0))
    assert bool(res.unsettled) and int(res.iterations) == 0 and not bool(res.converged)
    np.testing.assert_array_equal(np.asarray(res.messages), np.zeros(graph.num_edges))
