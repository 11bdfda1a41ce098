"""Update strategies and their dependency analysis into plans, on the host (docs/DESIGN.md section 6).

    import schedules
    spec = schedules.parse_spec("seqfix")
    compiled = schedules.compile_schedule(model, spec)     # orders, analysis, chunk plan (numpy)
    relax = schedules.relaxation_plan(model, spec)         # or the relaxation plan of one order
    relax = schedules.finish(model.graph, relax)           # ... with its levelling and chunk plan
    schedules.describe(model, "topo:algorithm3")           # JSON-able statistics

The device engines that run these plans live in `fastlbp.engines`
(`fastlbp.engines.make_runner(model, settings)` picks one); nothing here
runs on the device.

A schedule spec is a strategy name or a custom order file, optionally followed
by `:OPTION` parts:

    parall | seqfix | seqrnd | topo | PATH-TO-ORDER-FILE   (the strategies: `schedules.plan.STRATEGIES`)
    :levelling (default) | :algorithm3    dependency analysis
    :relaxed (default) | :chunked         engine: relax whole sweeps to the fixed point
                                          (fastlbp/engines/relaxed.py), or run the batches in
                                          order, chunk by chunk (fastlbp/engines/chunked.py)
    :budget=N                             relaxed: passes a sweep may take before the chunk loop
                                          finishes it exactly (default: a cost model,
                                          `relax_plan.pass_budget`)
    :seed=N :cycle=N                      SEQRND: seed, number of orders cycled (default 0, 8)
    :bodyfirst                            TOPO: body messages backward first, then heads forward
    :width=N                              chunk width (slots); default: chosen by a cost model
    :unroll=N                             chunks per loop trip (default 8 on a GPU, 1 on a CPU)

e.g. `seqfix:algorithm3`, `seqrnd:seed=3`, `orders/my.order:algorithm3`.
Custom order files: see `schedules.orders.ORDER_FILE_HELP`.

Importing the package imports neither numpy nor JAX: the CLI's `--help` and its check of
`--schedule` read the strategy table (`schedules.plan`) at start-up; the names below load their
modules on first use.
"""

from __future__ import annotations


def _plan():
    from schedules import plan

    return plan


def _compiler():
    from schedules import compiler

    return compiler


def _orders():
    from schedules import orders

    return orders


def _analysis():
    from schedules import analysis

    return analysis


# Name -> the module that defines it, imported on first use (written as imports, so that the layer test,
# tests/test_layers.py, sees them).
_LAZY = {
    **dict.fromkeys(("parse_spec", "make_plan", "Spec", "Plan", "Strategy", "STRATEGIES"), _plan),
    **dict.fromkeys(("describe", "compile_schedule", "relaxation_plan", "finish", "Relaxation", "Compiled",
                     "orders_for"), _compiler),
    **dict.fromkeys(("Order", "ORDER_FILE_HELP"), _orders),
    **dict.fromkeys(("Analysis", "levelling", "algorithm3", "ANALYSES"), _analysis),
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'schedules' has no attribute {name!r}")
    return getattr(module(), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = sorted(_LAZY)
