"""fastlbp/engines/chunked.py: the chunk loop against the sequential reference, and its plans' invariants."""

import numpy as np
import pytest
import reference_schedules
from reference import SequentialLBP
from sequential_support import (
    call,
    cases,
    check_equals_sequential_reference,
    check_leave_one_out_keeps_tiny_sums_of_others,
    runner_for,
)

from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.engines import chunked
from schedules import analysis, orders
from schedules import chunk_plan as P

# The chunk loop runs every strategy (tests/test_engines_relaxed.py runs relaxation, the
# default engine of single orders, on the same cases); SEQRND, whose orders cannot relax,
# falls back to it.
SPECS = ["seqfix:chunked", "topo:algorithm3:chunked", "topo:bodyfirst:unroll=3:chunked", "seqrnd:cycle=3",
         "seqfix:algorithm3:width=4096:chunked"]


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS)
def test_chunked_equals_sequential_reference(spec):
    check_equals_sequential_reference(spec, "chunked")


@pytest.mark.slow
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
        runner = chunked.runner_for(graph, P.stack([lay], graph.num_edges, graph.num_vars), "seqfix/chunked")
        return np.asarray(call(runner, graph, {}, 1).marginals)

    assert np.max(np.abs(run_with(good) - ref)) < 1e-12
    # Move the head edge of factor 1 (edge 1) into the batch of the edge it reads (edge 0).
    early = good.copy()
    early[1] = good[0]
    assert not reference_schedules.is_valid(graph, order, early)
    assert np.max(np.abs(run_with(early) - ref)) > 1e-3


@pytest.mark.slow
def test_chunk_width_does_not_change_results():
    for _rng, _, graph, labels in cases(3, seed0=400):
        narrow_runner = runner_for(graph, "seqfix:width=1:chunked")
        wide_runner = runner_for(graph, "seqfix:width=1024:chunked")
        assert narrow_runner.name == wide_runner.name == "seqfix/chunked"
        assert narrow_runner.layout.plan.width < wide_runner.layout.plan.width
        base = call(narrow_runner, graph, labels, 3)
        wide = call(wide_runner, graph, labels, 3)
        # Same values; only the summation order of factors split over chunks differs.
        a, b = np.asarray(base.messages), np.asarray(wide.messages)
        fin = np.isfinite(a)
        assert np.array_equal(fin, np.isfinite(b))
        assert np.array_equal(a[~fin], b[~fin], equal_nan=True)
        assert np.max(np.abs(a[fin] - b[fin]), initial=0.0) < 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["seqfix:chunked", "seqfix:width=2:chunked"])
def test_chunked_leave_one_out_keeps_tiny_sums_of_others(spec):
    check_leave_one_out_keeps_tiny_sums_of_others(spec, "chunked")
