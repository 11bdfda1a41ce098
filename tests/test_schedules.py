"""schedules/: orders, dependency analysis, specs and their statistics, custom order files.

The engines that run the plans are tested in tests/test_engines*.py; here they
only show that an order or an analysis gives the sweeps it promises.
"""

import json

import numpy as np
import pytest
import reference_schedules
from conftest import DATA
from graphs import random_factors, random_labels, random_polytree
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import Contradiction, SequentialLBP, exact_marginals
from sequential_support import analyses, call, cases, runner_for, stage_reference
from typer.testing import CliRunner

import schedules
from datalog import causal_fg
from fastlbp.core.errors import InputError
from fastlbp.core.graph import AND, OR, Factor, from_factors
from schedules import analysis, orders

WEBLECH = DATA / "weblech"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stages", "pairs"])
def test_custom_weak_orders_equal_definition(tmp_path, kind):
    for rng, factors, graph, labels in cases(8, seed0=100):
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
        # The analyses decide the chunk loop's batches; relaxation needs none (its level bound).
        for method in ("levelling:chunked", "algorithm3:chunked", "relaxed"):
            runner = runner_for(graph, f"{path}:{method}")
            (an,) = analyses(runner)
            if runner.name.endswith("/relaxed"):
                assert an is None
            else:  # an order relaxation declines (too many reader groups) runs chunk by chunk
                assert an.analysis == ("levelling" if method == "relaxed" else method.split(":")[0])
            rank = schedules.orders_for(graph, runner.info.compiled.spec)[0].rank
            try:
                ref_p, _ = stage_reference(SequentialLBP(factors, graph.num_vars), labels,
                                           lambda it, rank=rank: rank, 2)
            except Contradiction:
                continue
            if np.isnan(ref_p).any():
                continue
            res = call(runner, graph, labels, 2)
            assert np.max(np.abs(np.asarray(res.marginals) - ref_p)) < 1e-10


def test_levelling_and_algorithm3_valid_and_levelling_never_more():
    for rng, _, graph, _ in cases(60, seed0=200):
        ords = [orders.seqfix(graph), orders.topo(graph), orders.topo(graph, True),
                *orders.seqrnd(graph, 1, 2), orders.parall(graph),
                orders.Order(rng.integers(0, 3, graph.num_edges), "stages")]
        for o in ords:
            lev = analysis.levelling(graph, o, window=int(rng.integers(1, 8)))
            a3 = analysis.algorithm3(graph, o)
            assert reference_schedules.is_valid(graph, o, lev.batch), o.name
            assert reference_schedules.is_valid(graph, o, a3.batch), o.name
            assert lev.num_batches <= a3.num_batches, o.name
            if o.is_total:
                assert np.array_equal(lev.batch, reference_schedules.brute_levelling(graph, o)), o.name


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), window=st.integers(1, 9))
def test_walking_a_window_gives_the_fixpoint_levels(seed, window):
    # Levelling walks a window that its fixpoint does not settle in a few passes; both give the
    # least levels, for every kind of order (total, split factors, stages, one stage).
    rng = np.random.default_rng(seed)
    graph = from_factors(random_factors(rng, int(rng.integers(2, 10)), int(rng.integers(1, 10))))
    ords = [orders.seqfix(graph), orders.topo(graph), orders.topo(graph, True),
            *orders.seqrnd(graph, seed, 1), orders.parall(graph),
            orders.Order(rng.integers(0, 3, graph.num_edges), "stages")]
    for o in ords:
        fix = analysis.levelling(graph, o, window=window, scan_after=10**9)
        walk = analysis.levelling(graph, o, window=window, scan_after=0)
        one = analysis.levelling(graph, o, window=1 << 20, scan_after=0)
        assert fix.scans == 0 and walk.scans >= 1 and walk.passes == 0
        assert np.array_equal(walk.batch, fix.batch), o.name
        assert np.array_equal(one.batch, fix.batch), o.name
        assert reference_schedules.is_valid(graph, o, walk.batch), o.name


def test_levelling_a_deep_chain_walks_it():
    # One level per link: the fixpoint alone took one numpy pass per level (12 s for the TOPO
    # order of a 10^4-link chain); the walk takes one pass per window at most.
    n = 3000
    graph = from_factors([Factor(AND, 0, (), 0.5, 0.5)] + [Factor(AND, i, (i - 1,), 0.9, 0.0)
                                                            for i in range(1, n)])
    for o in (orders.seqfix(graph), orders.topo(graph)):
        lev = analysis.levelling(graph, o)
        assert lev.num_batches == n
        assert lev.passes <= analysis.SCAN_AFTER * (graph.num_edges // 1024 + 1)
        assert np.array_equal(lev.batch, analysis.levelling(graph, o, scan_after=10**9).batch)


@pytest.mark.slow
def test_levelling_and_algorithm3_give_the_same_results():
    for _rng, _, graph, labels in cases(8, seed0=300):
        lev, a3 = runner_for(graph, "seqfix:chunked"), runner_for(graph, "seqfix:algorithm3:chunked")
        assert [an.analysis for an in analyses(lev) + analyses(a3)] == ["levelling", "algorithm3"]
        a = call(lev, graph, labels, 3)
        b = call(a3, graph, labels, 3)
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
        assert reference_schedules.is_valid(g, o, lev.batch) and reference_schedules.is_valid(g, o, a3.batch)
        assert np.array_equal(lev.batch, reference_schedules.brute_levelling(g, o))


@pytest.mark.slow
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
            got = call(runner_for(graph, spec), graph, {}, 1).marginals
            assert np.max(np.abs(np.asarray(got) - exact)) < 1e-12
        labels = random_labels(rng, n, 2)
        try:
            exact = exact_marginals(factors, n, labels)
        except Contradiction:
            continue
        # With evidence: two iterations (the first backward half carries it up); on a
        # directed tree bodyfirst needs one.
        got = call(runner_for(graph, "topo"), graph, labels, 2).marginals
        assert np.max(np.abs(np.asarray(got) - exact)) < 1e-12
        if single_parent:
            got = call(runner_for(graph, "topo:bodyfirst"), graph, labels, 1).marginals
            assert np.max(np.abs(np.asarray(got) - exact)) < 1e-12


def test_cli_cyclic_order_file_exit_2_names_edge(tmp_path):
    from fastlbp.cli import get_app
    order = tmp_path / "cyc.order"
    order.write_text("# a cycle\norder pairs\n0 639 < 1 124\n1 124 < 2 450\n2 450 < 0 639\n")
    res = CliRunner().invoke(get_app(), ["marginals", str(WEBLECH / "graph.causal_fg"),
                                         "--method", "lbp", "--schedule", str(order)])
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
    # A byte order mark (editors on Windows write one) is read as such, not as part of a word.
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert np.array_equal(orders.read_order_file(path, g, model.var_names).rank, got.rank)
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
            schedules.parse_spec(spec)
        with pytest.raises(InputError, match=words):
            schedules.describe(model, spec)
    assert schedules.parse_spec("seqrnd:seed=3:cycle=2:algorithm3") == schedules.Spec(
        "seqrnd", None, "algorithm3", 3, 2)


def test_pass_budget_option_and_what_describe_says():
    assert schedules.parse_spec("topo:budget=5").budget == 5
    assert schedules.parse_spec("seqfix").budget is None
    for spec, words in [("seqfix:budget=0", "must be positive"), ("seqfix:budget=x", "not an integer")]:
        with pytest.raises(InputError, match=words):
            schedules.parse_spec(spec)
    model = _weblech()
    few = schedules.describe(model, "seqfix:budget=5")
    assert few["pass_budget"] == 5 < few["batches_per_iteration"]
    assert few["first_budget"] == 5 and few["level_bound"] >= few["batches_per_iteration"]
    rel = schedules.relaxation_plan(model, "seqfix:budget=5")
    # A budget below the bound: an open plan without levels or chunk plan until a sweep needs them.
    assert rel.open and rel.analysis is None and rel.chunks is None and int(rel.plan.max_passes) == 5
    rel = schedules.finish(model.graph, rel)
    # Below the levels: the relaxation plan carries the order's chunk plan, from the same
    # analysis (no second levelling).
    assert rel.chunks is not None and rel.chunks.analyses == [rel.analysis] and not rel.open
    assert int(rel.plan.max_passes) == 5
    deep = schedules.describe(model, "seqfix:budget=100000")
    assert deep["pass_budget"] == deep["batches_per_iteration"]
    shallow = schedules.relaxation_plan(model, "seqfix:budget=100000")
    assert shallow.chunks is None and not shallow.open and shallow.budget == shallow.bound
    assert schedules.relaxation_plan(model, "seqfix:budget=100000", analyse=True).chunks is None
    assert schedules.describe(model, "seqfix:chunked")["pass_budget"] == 0


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


def test_an_order_file_that_is_a_directory_is_an_error(tmp_path):
    model = _weblech()
    with pytest.raises(InputError, match="directory"):
        orders.read_order_file(tmp_path, model.graph, model.var_names)
