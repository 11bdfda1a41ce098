"""Shared checks of the sequential engines (relaxed, chunked) against the sequential reference.

tests/test_engines_relaxed.py and tests/test_engines_chunked.py run them with
their own specs; tests/test_schedules.py uses `call` and `stage_reference` for
the orders and analyses.
"""

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import reference
from graphs import evidence_from_labels, random_factors, random_labels, sweep_by_rank
from reference import Contradiction, SequentialLBP, _evidence_pairs

import schedules
from fastlbp import engines
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.engines import loop, relaxed


def runner_for(model, spec: str, **settings) -> loop.Runner:
    """The dispatcher's runner of schedule `spec` (a model or a bare graph)."""
    return engines.make_runner(model, Settings(schedule=spec, **settings))


def analyses(runner: loop.Runner) -> list[schedules.Analysis]:
    """The dependency analyses a sequential runner was built from (relaxed: one, None until a sweep
    needed the chunk plan; chunked: one per order)."""
    compiled = runner.info.compiled
    return list(compiled.analyses) if isinstance(compiled, schedules.Compiled) else [compiled.analysis]


def call(runner, graph, labels, iters, messages=None, tol=0.0, damping=0.0, jit=False):
    """Runs a runner; on many small random graphs without jit (a compile per shape costs more
    than running op by op; the jitted path is the same code, tested on fewer graphs)."""
    ev = jnp.asarray(evidence_from_labels(graph.num_vars, labels))
    msgs = jnp.zeros(graph.num_edges) if messages is None else messages
    with contextlib.nullcontext() if jit else jax.disable_jit():
        return runner(graph, msgs, ev, loop.controls(tol, iters, damping))


def stage_reference(lbp: SequentialLBP, labels, rank_per_iter, iters):
    """`iters` sweeps of Definition 4.1 from uniform messages (graphs.sweep_by_rank)."""
    ev = _evidence_pairs(lbp.num_vars, labels)
    msgs = lbp.uniform()
    for it in range(iters):
        sweep_by_rank(lbp, msgs, ev, rank_per_iter(it))
    return lbp.marginals(msgs, ev), msgs


def cases(count, seed0=0):
    """Small random graphs (and labels on every other one), seeded `seed0`, `seed0 + 1`, ..."""
    for seed in range(seed0, seed0 + count):
        rng = np.random.default_rng(seed)
        factors = random_factors(rng, int(rng.integers(2, 9)), int(rng.integers(1, 9)))
        graph = from_factors(factors)
        labels = random_labels(rng, graph.num_vars) if seed % 2 else {}
        yield rng, factors, graph, labels


def check_equals_sequential_reference(spec: str, engine: str, jit: bool = False) -> None:
    """1-3 iterations of `spec` from uniform messages on 16 random graphs: the engine named
    `engine` runs it and gives the reference's messages (1e-9) and marginals (1e-10)."""
    worst = 0.0
    checked = 0
    for rng, factors, graph, labels in cases(16):
        runner = runner_for(graph, spec)
        assert runner.name.endswith("/" + engine), (spec, runner.name)
        ords = schedules.orders_for(graph, runner.info.compiled.spec)
        iters = int(rng.integers(1, 4))
        try:
            ref_p, ref_m = stage_reference(SequentialLBP(factors, graph.num_vars), labels,
                                           lambda it, ords=ords: ords[it % len(ords)].rank, iters)
        except Contradiction:
            continue
        if np.isnan(ref_p).any():
            continue
        res = call(runner, graph, labels, iters, jit=jit)
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


def check_leave_one_out_keeps_tiny_sums_of_others(spec: str, engine: str) -> None:
    """As tests/test_engines_parall.py: "sum - own" would cancel x2's tiny share and send x1 a
    hard +inf; labelling x1 false then looked contradictory (`engine` runs `spec`)."""
    factors = [Factor(AND, 1, (), 1 - 1e-10, 1 - 1e-10), Factor(AND, 2, (), 4e-18, 4e-18),
               Factor(OR, 0, (1, 2), 1.0, 0.0), Factor(AND, 3, (2,), 0.5, 0.0)]
    model = Model(graph=from_factors(factors), var_names=("h", "x1", "x2", "y"))
    runner = runner_for(model, spec)
    assert runner.name.endswith("/" + engine), (spec, runner.name)
    g = model.graph
    ctl = loop.controls(1e-15, 100, 0.0)
    first = runner(g, loop.init(g), jnp.asarray(evidence_from_labels(4, {0: True})), ctl)
    labels = {0: True, 1: False}
    warm = runner(g, first.messages, jnp.asarray(evidence_from_labels(4, labels)), ctl)
    assert not bool(warm.conflict)
    np.testing.assert_allclose(np.asarray(warm.marginals), reference.exact_marginals(factors, 4, labels),
                               atol=1e-12)


@functools.partial(jax.jit, static_argnames=("unroll",))
def sweep_with_stats(graph, layout, messages, evidence, unroll: int = 1):
    """One relaxed sweep, the passes it took and whether the chunk loop redid it (`relaxed.sweep`, jitted)."""
    return relaxed.sweep(graph, layout, messages, evidence, unroll=unroll)


def sweep_with_passes(graph, layout, messages, evidence):
    """One relaxed sweep and the passes it took (`sweep_with_stats` without the redo flag)."""
    return sweep_with_stats(graph, layout, messages, evidence)[:2]
