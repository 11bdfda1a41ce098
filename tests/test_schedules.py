"""schedules/: orders, dependency analysis and the batched engine against plain references."""

import contextlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DATA, SHARED
from graphs import random_factors, random_labels, random_polytree, sweep_by_rank
from typer.testing import CliRunner

import schedules
from datalog import causal_fg
from fastlbp import api, loading
from fastlbp.errors import InputError
from fastlbp.graph import AND, OR, Factor, evidence_from_labels, from_factors
from fastlbp.reference import Contradiction, SequentialLBP, _evidence_pairs, exact_marginals
from schedules import analysis, orders
from schedules import plan as P
from schedules.batched import make_runner_fn, run_batched

WEBLECH = DATA / "weblech"


def _call(runner, graph, labels, iters, messages=None, tol=0.0, damping=0.0, jit=False):
    """Runs a runner; on many small random graphs without jit (a compile per shape costs more
    than running op by op; the jitted path is the same code, tested on fewer graphs)."""
    ev = jnp.asarray(evidence_from_labels(graph.num_vars, labels))
    msgs = jnp.zeros(graph.num_edges) if messages is None else messages
    with contextlib.nullcontext() if jit else jax.disable_jit():
        return runner(graph, msgs, ev, jnp.asarray(tol), jnp.asarray(iters, jnp.int32),
                      jnp.asarray(damping))


def _stage_reference(lbp: SequentialLBP, labels, rank_per_iter, iters):
    """`iters` sweeps of Definition 4.1 from uniform messages (graphs.sweep_by_rank)."""
    ev = _evidence_pairs(lbp.num_vars, labels)
    msgs = lbp.uniform()
    for it in range(iters):
        sweep_by_rank(lbp, msgs, ev, rank_per_iter(it))
    return lbp.marginals(msgs, ev), msgs


def _cases(count, seed0=0):
    for seed in range(seed0, seed0 + count):
        rng = np.random.default_rng(seed)
        factors = random_factors(rng, int(rng.integers(2, 9)), int(rng.integers(1, 9)))
        graph = from_factors(factors)
        labels = random_labels(rng, graph.num_vars) if seed % 2 else {}
        yield rng, factors, graph, labels


# Every strategy with both engines: relaxation (the default) and the chunk loop
# (tests/test_relaxed.py checks relaxed TOPO body-first sweeps as well).
SPECS = ["seqfix", "seqfix:chunked", "topo:algorithm3", "topo:algorithm3:chunked",
         "topo:bodyfirst:unroll=3:chunked", "seqrnd:cycle=3", "seqfix:algorithm3:width=4096:chunked"]


@pytest.mark.parametrize("spec", SPECS)
def test_batched_equals_sequential_reference(spec):
    worst = 0.0
    checked = 0
    for rng, factors, graph, labels in _cases(16):
        runner = schedules.make_runner(graph, spec)
        ords = schedules.orders_for(graph, runner.compiled.spec)
        iters = int(rng.integers(1, 4))
        try:
            ref_p, ref_m = _stage_reference(SequentialLBP(factors, graph.num_vars), labels,
                                            lambda it, ords=ords: ords[it % len(ords)].rank, iters)
        except Contradiction:
            continue
        if np.isnan(ref_p).any():
            continue
        # Relaxation loops over passes: op by op that costs more than a compile per shape.
        res = _call(runner, graph, labels, iters, jit=spec in ("seqfix", "topo:algorithm3"))
        worst = max(worst, float(np.max(np.abs(np.asarray(res.marginals) - ref_p))))
        with np.errstate(divide="ignore", invalid="ignore"):
            lo_ref = np.log(ref_m[:, 1]) - np.log(ref_m[:, 0])
        lo = np.asarray(res.messages)
        with np.errstate(invalid="ignore"):
            same = (lo == lo_ref) | (np.abs(lo - lo_ref) < 1e-9)
        assert same.all(), (spec, lo, lo_ref)
        checked += 1
    assert checked >= 8
    assert worst < 1e-10


@pytest.mark.parametrize("kind", ["stages", "pairs"])
def test_custom_weak_orders_equal_definition(tmp_path, kind):
    for rng, factors, graph, labels in _cases(8, seed0=100):
        num_edges = graph.num_edges
        path = tmp_path / f"o{rng.integers(1 << 30)}.order"
        if kind == "stages":
            stage = rng.integers(0, 3, num_edges)
            lines = ["order stages"]
            for s in range(3):
                lines += [f"#{e}" for e in np.flatnonzero(stage == s)] + ["---"]
        else:
            perm = rng.permutation(num_edges)
            lines = ["order pairs"] + [f"#{perm[i]} < #{perm[j]}" for i in range(num_edges)
                                       for j in range(i + 1, num_edges) if rng.random() < 0.3]
        path.write_text("\n".join(lines) + "\n")
        for method in ("levelling", "algorithm3"):
            runner = schedules.make_runner(graph, str(path), analysis=method)
            rank = runner.compiled.analyses[0].order.rank
            try:
                ref_p, _ = _stage_reference(SequentialLBP(factors, graph.num_vars), labels,
                                            lambda it, rank=rank: rank, 2)
            except Contradiction:
                continue
            if np.isnan(ref_p).any():
                continue
            res = _call(runner, graph, labels, 2)
            assert np.max(np.abs(np.asarray(res.marginals) - ref_p)) < 1e-10


def test_levelling_and_algorithm3_valid_and_levelling_never_more():
    for rng, _, graph, _ in _cases(60, seed0=200):
        ords = [orders.seqfix(graph), orders.topo(graph), orders.topo(graph, True),
                *orders.seqrnd(graph, 1, 2), orders.parall(graph),
                orders.Order(rng.integers(0, 3, graph.num_edges), "stages")]
        for o in ords:
            lev = analysis.levelling(graph, o, window=int(rng.integers(1, 8)))
            a3 = analysis.algorithm3(graph, o)
            assert analysis.is_valid(graph, o, lev.batch), o.name
            assert analysis.is_valid(graph, o, a3.batch), o.name
            assert lev.num_batches <= a3.num_batches, o.name
            if o.is_total:
                assert np.array_equal(lev.batch, analysis.brute_levelling(graph, o)), o.name


def test_levelling_and_algorithm3_give_the_same_results():
    for _rng, _, graph, labels in _cases(8, seed0=300):
        a = _call(schedules.make_runner(graph, "seqfix"), graph, labels, 3)
        b = _call(schedules.make_runner(graph, "seqfix:algorithm3"), graph, labels, 3)
        if np.isnan(np.asarray(a.marginals)).any():
            continue
        assert np.max(np.abs(np.asarray(a.marginals) - np.asarray(b.marginals))) < 1e-12


def test_levelling_on_a_layered_graph_is_far_below_algorithm3():
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate
    g = to_model(generate(factor_edges=2_500, seed=1)).graph  # 2,500 edges, uncompressed
    for o in (orders.seqfix(g), orders.topo(g)):
        lev, a3 = analysis.levelling(g, o, window=256), analysis.algorithm3(g, o)
        assert lev.num_batches < a3.num_batches
        assert analysis.is_valid(g, o, lev.batch) and analysis.is_valid(g, o, a3.batch)
        assert np.array_equal(lev.batch, analysis.brute_levelling(g, o))


def test_topo_exact_on_polytrees():
    for seed in range(8):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(2, 11))
        factors = random_polytree(rng, n, max_parents=int(rng.integers(1, 4)))
        graph = from_factors(factors)
        single_parent = all(len(f.body) <= 1 for f in factors)
        exact = exact_marginals(factors, n)
        # No evidence: heads forward make every message exact in one iteration.
        for spec in ("topo", "topo:bodyfirst"):
            got = _call(schedules.make_runner(graph, spec), graph, {}, 1).marginals
            assert np.max(np.abs(np.asarray(got) - exact)) < 1e-12
        labels = random_labels(rng, n, 2)
        try:
            exact = exact_marginals(factors, n, labels)
        except Contradiction:
            continue
        # With evidence: two iterations (the first backward half carries it up); on a
        # directed tree bodyfirst needs one.
        got = _call(schedules.make_runner(graph, "topo"), graph, labels, 2).marginals
        assert np.max(np.abs(np.asarray(got) - exact)) < 1e-12
        if single_parent:
            got = _call(schedules.make_runner(graph, "topo:bodyfirst"), graph, labels, 1).marginals
            assert np.max(np.abs(np.asarray(got) - exact)) < 1e-12


def test_reading_one_batch_too_early_changes_the_result():
    # A chain x0 -> x1 -> x2 (AND factors), SEQFIX order: factor 1's head edge reads the
    # message that factor 0's head edge wrote this iteration.
    factors = [Factor(AND, 0, (), 0.3, 0.3), Factor(AND, 1, (0,), 0.9, 0.2),
               Factor(OR, 2, (1,), 0.8, 0.1)]
    graph = from_factors(factors)
    order = orders.seqfix(graph)
    good = analysis.levelling(graph, order).batch
    lbp = SequentialLBP(factors, 3)
    ref = lbp.run(order=np.argsort(order.rank), tol=0, max_iters=1).marginals

    def run_with(batch):
        lay = P.pack(graph, batch, order.rank, True, 8)
        runner = make_runner_fn(P.stack([lay], graph.num_edges, graph.num_vars))
        return np.asarray(_call(runner, graph, {}, 1).marginals)

    assert np.max(np.abs(run_with(good) - ref)) < 1e-12
    # Move the head edge of factor 1 (edge 1) into the batch of the edge it reads (edge 0).
    early = good.copy()
    early[1] = good[0]
    assert not analysis.is_valid(graph, order, early)
    assert np.max(np.abs(run_with(early) - ref)) > 1e-3


def test_chunk_width_does_not_change_results():
    for _rng, _, graph, labels in _cases(3, seed0=400):
        base = _call(schedules.make_runner(graph, "seqfix:width=1:chunked"), graph, labels, 3)
        wide = _call(schedules.make_runner(graph, "seqfix:width=1024:chunked"), graph, labels, 3)
        # Same values; only the summation order of factors split over chunks differs.
        a, b = np.asarray(base.messages), np.asarray(wide.messages)
        fin = np.isfinite(a)
        assert np.array_equal(fin, np.isfinite(b))
        assert np.array_equal(a[~fin], b[~fin], equal_nan=True)
        assert np.max(np.abs(a[fin] - b[fin]), initial=0.0) < 1e-12


@pytest.mark.parametrize("spec", ["seqfix", "seqfix:chunked"])
def test_no_recompilation_when_evidence_or_settings_change(spec):
    from schedules.relaxed import run_relaxed

    jitted = run_relaxed if spec == "seqfix" else run_batched
    model = causal_fg.load(WEBLECH / "graph.causal_fg")
    runner = schedules.make_runner(model, spec)
    graph = model.graph
    before = jitted._cache_size()
    n = model.num_vars
    sizes = []
    for labels, tol, iters, damping in [({}, 1e-6, 5, 0.0), ({3: True}, 1e-3, 7, 0.2),
                                        ({87: False, 5: True}, 1e-9, 3, 0.5)]:
        ev = jnp.asarray(evidence_from_labels(n, labels))
        runner(graph, jnp.zeros(graph.num_edges), ev, jnp.asarray(tol),
               jnp.asarray(iters, jnp.int32), jnp.asarray(damping))
        sizes.append(jitted._cache_size())
    # At most one compilation (none if an earlier test compiled these shapes), then none.
    assert sizes[0] - before <= 1 and sizes[-1] == sizes[0]


def test_libdai_seqfix_weblech_cold_and_warm():
    _check_libdai(WEBLECH)


@pytest.mark.skipif(not (SHARED / "reference" / "avrora").exists()
                    or not os.environ.get("FASTLBP_SLOW_TESTS"),
                    reason="avrora needs ../shared/data and FASTLBP_SLOW_TESTS=1 (40 s on a CPU)")
def test_libdai_seqfix_avrora_cold_and_warm():
    _check_libdai(SHARED / "reference" / "avrora")


def _check_libdai(folder):
    model = loading.load(folder / "graph.causal_fg")
    session = api.Session(model, schedule="seqfix")
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
                                         "--schedule", "seqfix"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    ref = causal_fg.load_marginals(WEBLECH / "seqfix.marg")
    assert max(abs(out["marginals"][k] - v) for k, v in ref.items()) < 1e-6


def test_cli_cyclic_order_file_exit_2_names_edge(tmp_path):
    from fastlbp.cli import get_app
    order = tmp_path / "cyc.order"
    order.write_text("# a cycle\norder pairs\n0 639 < 1 124\n1 124 < 2 450\n2 450 < 0 639\n")
    res = CliRunner().invoke(get_app(), ["marginals", str(WEBLECH / "graph.causal_fg"),
                                         "--schedule", str(order)])
    assert res.exit_code == 2
    assert "cycle" in res.output and "edge #" in res.output and "cyc.order" in res.output


def _weblech():
    return causal_fg.load(WEBLECH / "graph.causal_fg")


@pytest.mark.parametrize("text, where, words", [
    ("order sideways\n", 1, "order total"),
    ("order total\n0 639\n0 639\n", 3, "listed twice"),
    ("order total\n0 639\n", None, "not listed"),
    ("order stages\n0 nosuch\n", 2, "unknown variable"),
    ("order stages\n0 124\n", 2, "not in factor 0"),
    ("order pairs\n0 639 1 124\n", 2, "EDGE < EDGE"),
    ("order pairs\n#99999 < #1\n", 2, "out of range"),
    ("order pairs\n#0 < #0\n", 2, "itself"),
])
def test_order_file_errors_name_line(tmp_path, text, where, words):
    path = tmp_path / "bad.order"
    path.write_text(text)
    model = _weblech()
    with pytest.raises(InputError) as err:
        orders.read_order_file(path, model.graph, model.var_names)
    assert words in str(err.value)
    assert err.value.line == where if hasattr(err.value, "line") else True


def test_order_file_total_equals_seqfix(tmp_path):
    model = _weblech()
    g = model.graph
    seq = np.argsort(orders.seqfix(g).rank)
    ef, ev = np.asarray(g.edge_factor), np.asarray(g.edge_var)
    path = tmp_path / "seqfix.order"
    path.write_text("order total\n" + "".join(f"{ef[e]} {model.var_names[ev[e]]}\n" for e in seq))
    got = orders.read_order_file(path, g, model.var_names)
    assert np.array_equal(got.rank, orders.seqfix(g).rank)
    assert schedules.describe(model, f"{path}:algorithm3")["batches_per_iteration"] == \
        schedules.describe(model, "seqfix:algorithm3")["batches_per_iteration"]


def test_seqfix_is_libdai_order():
    g = from_factors([Factor(AND, 2, (0, 1), 0.9, 0.0), Factor(OR, 0, (), 0.5, 0.5),
                      Factor(OR, 1, (), 0.5, 0.5)])
    # Factor 0 has edges 0 (head x2), 1 (x0), 2 (x1): libDAI visits x0, x1, x2.
    assert list(np.argsort(orders.seqfix(g).rank)) == [1, 2, 0, 3, 4]


def test_describe_is_json_and_complete():
    model = _weblech()
    for spec in ("seqfix", "topo:algorithm3", "seqrnd:cycle=2", "parall"):
        d = schedules.describe(model, spec)
        json.dumps(d)
        for key in ("strategy", "analysis", "batches_per_iteration", "batch_size",
                    "analysis_seconds", "chunks_per_iteration", "chunk_width"):
            assert key in d
        assert d["batch_size"]["min"] <= d["batch_size"]["median"] <= d["batch_size"]["max"]
        assert sum(d["batch_size"]["histogram"]["counts"]) == sum(d["batches"])
        want = {"seqfix": "relaxed", "topo:algorithm3": "relaxed", "seqrnd:cycle=2": "chunked",
                "parall": "parall"}[spec]
        assert d["engine"] == want
        assert (d["virtual_edges"] >= model.graph.num_edges) == (want == "relaxed")
    assert schedules.describe(model, "seqfix:chunked")["engine"] == "chunked"


def test_bad_specs():
    model = _weblech()
    for spec, words in [("nosuch", "unknown schedule"), ("seqfix:bogus", "unknown schedule option"),
                        ("seqfix:width=x", "not an integer")]:
        with pytest.raises(InputError, match=words):
            schedules.make_runner(model, spec)
    assert schedules.parse_spec("seqrnd:seed=3:cycle=2:algorithm3") == schedules.Spec(
        "seqrnd", None, "algorithm3", 3, 2)


def test_cli_schedule_command_prints_describe():
    from fastlbp.cli import get_app
    res = CliRunner().invoke(get_app(), ["schedule", str(WEBLECH / "graph.causal_fg"),
                                         "--schedule", "seqfix", "--analysis", "algorithm3"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["analysis"] == "algorithm3" and out["batches_per_iteration"] > 0
    res = CliRunner().invoke(get_app(), ["schedule", str(WEBLECH / "graph.causal_fg"),
                                         "--schedule", "nosuch"])
    assert res.exit_code == 2 and "unknown schedule" in res.output


@pytest.mark.parametrize("spec", ["seqfix", "topo", "seqfix:chunked", "seqfix:width=2:chunked"])
def test_batched_leave_one_out_keeps_tiny_sums_of_others(spec):
    # As tests/test_engine.py: "sum - own" would cancel x2's tiny share and send x1 a
    # hard +inf; labelling x1 false then looked contradictory.
    import jax.numpy as jnp

    from fastlbp import engine, reference
    from fastlbp.graph import AND, OR, Factor, evidence_from_labels, from_factors
    from fastlbp.model import Model

    factors = [Factor(AND, 1, (), 1 - 1e-10, 1 - 1e-10), Factor(AND, 2, (), 4e-18, 4e-18),
               Factor(OR, 0, (1, 2), 1.0, 0.0), Factor(AND, 3, (2,), 0.5, 0.0)]
    model = Model(graph=from_factors(factors), var_names=("h", "x1", "x2", "y"))
    runner = schedules.make_runner(model, spec)
    g = model.graph
    args = (jnp.asarray(1e-15), jnp.asarray(100, jnp.int32), jnp.asarray(0.0))
    first = runner(g, engine.init(g), jnp.asarray(evidence_from_labels(4, {0: True})), *args)
    labels = {0: True, 1: False}
    warm = runner(g, first.messages, jnp.asarray(evidence_from_labels(4, labels)), *args)
    assert not bool(warm.conflict)
    np.testing.assert_allclose(np.asarray(warm.marginals), reference.exact_marginals(factors, 4, labels),
                               atol=1e-12)
