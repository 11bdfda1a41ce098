"""A schedule compiled for a graph, on the host (numpy): its orders, their dependency analysis and
the chunk or relaxation plan the engines run (`schedules` names these functions; docs/DESIGN.md
section 6)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax.numpy as jnp
import numpy as np

from fastlbp.core.graph import FactorGraph
from fastlbp.core.settings import Settings
from schedules import analysis as _analysis
from schedules import chunk_plan as _plan
from schedules import orders as _orders
from schedules import relax_plan as _relax_plan
from schedules.analysis import Analysis
from schedules.orders import Order
from schedules.plan import RELAXED, STRATEGIES, Plan, Spec, make_plan, parse_spec


def _graph_and_names(model) -> tuple[FactorGraph, tuple[str, ...]]:
    if isinstance(model, FactorGraph):
        return model, tuple(str(i) for i in range(model.num_vars))
    return model.graph, tuple(model.var_names)


def orders_for(model, spec: Spec) -> list[Order]:
    """The order(s) of a spec: one, or `cycle` for SEQRND."""
    graph, names = _graph_and_names(model)
    strategy = STRATEGIES.get(spec.strategy)
    if strategy is not None:
        return strategy.build(graph, spec)
    if spec.order is not None:  # the text `schedules.plan.make_plan` read (or a stored session's)
        return [_orders.parse_order(spec.order, graph, names, spec.path)]
    return [_orders.read_order_file(spec.path, graph, names)]


@dataclasses.dataclass
class Compiled:
    """A schedule analysed and packed for one graph."""

    spec: Spec
    analyses: list[Analysis]
    layouts: list[_plan.ChunkLayout]
    plan: _plan.ChunkPlan
    order_seconds: float
    pack_seconds: float


def _on_gpu(gpu: bool) -> bool:
    # The engines pass their plan's platform (`schedules.plan.Plan.gpu`); this package never asks
    # JAX which device runs (the cost models default to a CPU's).
    return bool(gpu)


def _per_slot_cost(gpu: bool) -> float:
    # Relative cost of one slot vs. one chunk step: a GPU step is launch-bound up to
    # tens of thousands of slots; on a CPU every slot costs.
    return 1.0 / 65536 if gpu else 1.0 / 256


def compile_schedule(model, spec: str | Spec, *, gpu: bool = False, **overrides: Any) -> Compiled:
    """Orders, dependency analysis and chunk packing for `model` (host side, numpy); `gpu`: the
    platform the plan is for (None: JAX's default)."""
    sp = spec if isinstance(spec, Spec) else parse_spec(spec, **overrides)
    graph, _ = _graph_and_names(model)
    t0 = time.perf_counter()
    ords = orders_for(model, sp)
    t1 = time.perf_counter()
    ans = [_analysis.analyse(graph, o, sp.analysis) for o in ords]
    return _pack(graph, sp, ans, t1 - t0, _on_gpu(gpu))


def _pack(graph: FactorGraph, sp: Spec, ans: list[Analysis], order_seconds: float, gpu: bool) -> Compiled:
    """Packs analysed orders into the chunk plan (`compile_schedule` after its analysis)."""
    t2 = time.perf_counter()
    ords = [a.order for a in ans]
    width = sp.width
    lo = max(_plan.min_width(graph, a.batch, o.rank, o.is_total) for a, o in zip(ans, ords,
                                                                                  strict=True))
    if width is None:
        width = max(_plan.choose_width(graph, a.batch, o.rank, o.is_total, _per_slot_cost(gpu))
                    for a, o in zip(ans, ords, strict=True))
    # Powers of two keep the number of distinct shapes (compilations) small.
    width = 1 << int(np.ceil(np.log2(max(width, lo))))
    layouts = [_plan.pack(graph, a.batch, o.rank, o.is_total, width)
               for a, o in zip(ans, ords, strict=True)]
    pl = _plan.stack(layouts, graph.num_edges, graph.num_vars)
    return Compiled(sp, ans, layouts, pl, order_seconds, time.perf_counter() - t2)


@dataclasses.dataclass
class Relaxation:
    """The relaxation plan of a single-order spec, and what building it took.

    Attributes:
        order: the order relaxed.
        bound: an upper bound on its levels (`relax_plan.level_bound`, O(E log E)).
        budget: the most passes a relaxed sweep runs (`plan.max_passes`).
        analysis: the exact levelling (None until `finish` builds the chunk plan).
        chunks: the order's chunk plan, which finishes the sweeps that `budget` passes do
            not settle; None when `budget` covers the levels (or the bound), or before
            `finish`.
        open: the budget is below the bound and no chunk plan is built yet: a sweep that
            does not settle within it is not exact, the engine reports it
            (`RunResult.unsettled`) and the runner calls `finish`.
    """

    spec: Spec
    order: Order
    plan: _relax_plan.RelaxPlan
    order_seconds: float
    plan_seconds: float
    bound: int
    budget: int
    analysis: Analysis | None = None
    analysis_seconds: float = 0.0
    chunks: Compiled | None = None
    open: bool = False


def relaxation_plan(model, spec: str | Spec, *, analyse: bool = False, gpu: bool = False,
                    **overrides: Any) -> Relaxation | None:
    """The relaxation plan of a single-order spec (`schedules.relax_plan`), or None.

    None when the spec has several orders (SEQRND) or its order splits the
    factors into too many reader groups; those run chunk by chunk
    (`compile_schedule`).

    Relaxation needs no levels: a sweep iterates passes until no message
    moves (the sweep's unique fixed point, the sequential sweep itself), and
    pass L + 1 is exact when the order has L levels, so any cap at or above
    the levels keeps sweeps exact. The plan takes the cheap bound
    `relax_plan.level_bound` (O(E log E), where the exact levelling walks the
    order) and caps sweeps at `min(bound, budget)`, the budget being `spec.budget`
    or `relax_plan.first_budget`. Below the bound the plan is *open*: a sweep
    that has not settled within the budget is not taken (the round stops before
    it) and `finish` builds what finishes it exactly, the levelling and the
    chunk plan, which the runner then uses for the rest of the session. With
    `analyse` that happens here, open or not (the exact levels cap the sweeps:
    tests, `describe`).
    """
    sp = spec if isinstance(spec, Spec) else parse_spec(spec, **overrides)
    graph, _ = _graph_and_names(model)
    t0 = time.perf_counter()
    ords = orders_for(model, sp)
    if len(ords) != 1:
        return None
    t1 = time.perf_counter()
    bound = _relax_plan.level_bound(graph, ords[0])
    rplan = _relax_plan.build(graph, ords[0], bound)
    if rplan is None:
        return None
    budget = min(bound, sp.budget or _relax_plan.first_budget(graph.num_edges, rplan.virtual_edges,
                                                               _on_gpu(gpu)))
    if budget < bound:
        rplan = dataclasses.replace(rplan, max_passes=jnp.asarray(budget, jnp.int32))
    rel = Relaxation(sp, ords[0], rplan, t1 - t0, time.perf_counter() - t1, bound, budget,
                     open=budget < bound)
    return finish(graph, rel, gpu=gpu) if analyse else rel


def finish(graph: FactorGraph, rel: Relaxation, analysis: Analysis | None = None, *,
           gpu: bool = False) -> Relaxation:
    """`rel` with the exact levelling of its order and, when it has more levels than the budget,
    the chunk plan that finishes the sweeps the budget does not settle (a chain: one level per
    link, and a pass per level).

    The budget becomes `spec.budget` or `relax_plan.pass_budget` (as many passes as cost one
    chunk-loop sweep), at most the levels; with no more levels than that the plan caps sweeps
    at the levels and carries no chunk plan.
    """
    t1 = time.perf_counter()
    an = analysis or _analysis.analyse(graph, rel.order, rel.spec.analysis)
    analysis_seconds = time.perf_counter() - t1
    sp = rel.spec
    levels = max(an.num_batches, 1)
    gpu = _on_gpu(gpu)
    virtual = rel.plan.virtual_edges
    # A chunk sweep takes at least one chunk per level: the budget of that many chunks of the
    # narrowest width first, and the real plan's only when the order is deeper than that.
    budget = sp.budget or _relax_plan.pass_budget(levels, 2, virtual, gpu)
    chunks = None
    if levels > budget:
        chunks = _pack(graph, sp, [an], rel.order_seconds, gpu)
        budget = sp.budget or _relax_plan.pass_budget(chunks.plan.num_chunks, chunks.plan.width,
                                                      virtual, gpu)
        if levels <= budget:
            chunks = None
    budget = min(budget, levels)
    rplan = dataclasses.replace(rel.plan, max_passes=jnp.asarray(budget, jnp.int32))
    return dataclasses.replace(rel, plan=rplan, analysis=an, analysis_seconds=analysis_seconds,
                               budget=budget, chunks=chunks, open=False)


def _histogram(sizes: np.ndarray) -> dict[str, list[int]]:
    top = int(np.ceil(np.log2(max(int(sizes.max(initial=1)), 1) + 1)))
    edges = [0] + [1 << k for k in range(top + 1)]
    counts, _ = np.histogram(sizes, bins=edges)
    return {"bin_edges": edges, "counts": counts.astype(int).tolist()}


def describe(model, spec: str | Plan, **overrides: Any) -> dict[str, Any]:
    """JSON-able statistics of a schedule on a model (for `fastlbp info --schedule S`).

    Args:
        spec: the schedule text, or the run's `Plan` (its schedule, kernels and platform decide which
            engine runs: `Plan.engines`); text is planned with the default settings on a CPU.
        overrides: `:OPTION`s of the schedule (`parse_spec`).

    Returns:
        {"spec", "strategy", "analysis", "edges", "orders", "batches_per_iteration" (mean over
        SEQRND's orders), "batches" (per order), "batch_size" {"min", "median", "max",
        "histogram" {"bin_edges", "counts"}}, "analysis_seconds", "order_seconds",
        "pack_seconds", "chunks_per_iteration", "chunk_width", "slot_fill", "passes", "engine"
        (the key of `fastlbp.engines.ENGINES` that `make_runner` runs: "parall", "parall/fused",
        "relaxed", "chunked" or "persistent"), "virtual_edges" (relaxed: edges of the reader-group
        graph), "pass_budget" (relaxed: most passes a sweep runs before the chunk loop redoes it; the
        number of levels when the order is no deeper), "first_budget" (relaxed: the passes a sweep may
        take before the runner builds the levelling and chunk plan at all), "level_bound" (relaxed:
        `relax_plan.level_bound`)}.
    """
    if isinstance(spec, Plan):
        plan = spec
        changed = {k: v for k, v in overrides.items() if v is not None}
        if changed:
            plan = dataclasses.replace(plan, schedule=dataclasses.replace(plan.schedule, **changed))
        sp = plan.schedule
        spec = f"{sp.path or sp.strategy}{sp.options()}"
    else:
        sp = parse_spec(spec, **overrides)
        plan = dataclasses.replace(make_plan(Settings(), platform="cpu"), schedule=sp)
    graph, _ = _graph_and_names(model)
    engines = plan.for_graph(graph.num_edges).engines()
    if sp.parallel:
        e = graph.num_edges
        return {"spec": spec, "strategy": sp.strategy, "analysis": "none", "edges": e, "orders": 1,
                "batches_per_iteration": 1, "batches": [1],
                "batch_size": {"min": e, "median": e, "max": e, "histogram": _histogram(np.array([e]))},
                "analysis_seconds": 0.0, "order_seconds": 0.0, "pack_seconds": 0.0,
                "chunks_per_iteration": 1, "chunk_width": e, "slot_fill": 1.0, "passes": 0,
                "engine": engines[0], "virtual_edges": 0, "pass_budget": 0, "first_budget": 0,
                "level_bound": 0}
    c = compile_schedule(model, sp, gpu=plan.gpu)
    engine_name, virtual, budget, first, bound = engines[-1], 0, 0, 0, 0
    if engines[0] == RELAXED and len(c.analyses) == 1:
        rel = relaxation_plan(model, sp, gpu=plan.gpu)
        if rel is not None:
            first, bound = rel.budget, rel.bound
            rel = finish(graph, rel, c.analyses[0])
            engine_name, virtual, budget = RELAXED, rel.plan.virtual_edges, rel.budget
    sizes = np.concatenate([lay.batch_sizes for lay in c.layouts])
    batches = [a.num_batches for a in c.analyses]
    width = c.plan.width
    chunks = [lay.chunks.shape[0] for lay in c.layouts]
    return {
        "spec": spec,
        "strategy": sp.strategy if sp.strategy != "file" else f"file:{sp.path}",
        "analysis": sp.analysis,
        "edges": graph.num_edges,
        "orders": len(c.analyses),
        "batches_per_iteration": float(np.mean(batches)) if len(batches) > 1 else batches[0],
        "batches": batches,
        "batch_size": {"min": int(sizes.min()), "median": float(np.median(sizes)),
                       "max": int(sizes.max()), "histogram": _histogram(sizes)},
        "analysis_seconds": float(sum(a.seconds for a in c.analyses)),
        "order_seconds": c.order_seconds,
        "pack_seconds": c.pack_seconds,
        "chunks_per_iteration": int(max(chunks)),
        "chunk_width": width,
        "slot_fill": float(sum(lay.slots_used for lay in c.layouts) / (sum(chunks) * width)),
        "passes": int(sum(a.passes for a in c.analyses)),
        "engine": engine_name,
        "virtual_edges": virtual,
        "pass_budget": budget,
        "first_budget": first,
        "level_bound": bound,
    }


__all__ = ["describe", "compile_schedule", "relaxation_plan", "finish", "Relaxation", "Compiled",
           "orders_for"]
