"""Device engines behind one contract, and the one dispatcher that picks them.

    runner = fastlbp.engines.make_runner(model, plan)        # host work, once per graph
    result, runner = runner.step(graph, messages, evidence, controls)   # a jitted round

`plan` is a `schedules.plan.Plan` (or `Settings`, made into one). Every
engine module has `make_runner(model, plan) -> loop.Runner` (an immutable
runner: its layout in `Runner.layout`, its round a pure jitted function);
`ENGINES` is the table the dispatcher reads, by `Plan.engines()` (key -> that
engine's `make_runner`):

| key          | what runs                                              | file            |
| ------------ | ------------------------------------------------------ | --------------- |
| parall       | PARALL, XLA kernels (segment sums by `Plan.summation`) | parall.py       |
| parall/fused | PARALL, two Pallas kernels per sweep (GPU)             | fused/          |
| parall/sharded | PARALL over several devices, the cut's sums exchanged | sharded_parall.py |
| relaxed      | a sequential order, each sweep relaxed to its fixed point | relaxed.py   |
| chunked      | a sequential order (or SEQRND), batches chunk by chunk | chunked.py      |
| persistent   | the same chunks in one persistent Pallas kernel (GPU)  | persistent.py   |

The shared loop (damping, convergence, conflicts) is `loop.iterate`. A relaxed
sweep runs at most a budget of passes; an order deeper than the budget also
carries its chunk plan, and the chunk loop redoes exactly a sweep that the
budget did not settle (`relaxed.py`).
"""

from __future__ import annotations

from collections.abc import Callable

from fastlbp.core.settings import Settings
from fastlbp.engines.loop import (
    GRAPH_FIELDS,
    Controls,
    Runner,
    RunnerInfo,
    RunResult,
    controls,
    device_graph,
    graph_of,
    init,
    plan_for,
)
from schedules.plan import FUSED_MIN_EDGES, Plan


def _parall(model, plan: Plan) -> Runner | None:
    from fastlbp.engines import parall

    return parall.make_runner(model, plan)


def _fused(model, plan: Plan) -> Runner | None:
    from fastlbp.engines import fused  # the Pallas kernels: imported only when a plan asks for them

    return fused.make_runner(model, plan)


def _sharded(model, plan: Plan) -> Runner | None:
    from fastlbp.engines import sharded_parall

    return sharded_parall.make_runner(model, plan, devices=plan.shards)


def _relaxed(model, plan: Plan) -> Runner | None:
    from fastlbp.engines import relaxed

    return relaxed.make_runner(model, plan)


def _chunked(model, plan: Plan) -> Runner | None:
    from fastlbp.engines import chunked

    return chunked.make_runner(model, plan)


def _persistent(model, plan: Plan) -> Runner | None:
    from fastlbp.engines import persistent  # a Pallas kernel: imported only when a plan asks for it

    return persistent.make_runner(model, plan)


# The dispatch table: engine key (`Plan.engines`) -> its `make_runner(model, plan)` (None: it cannot run
# this plan's order; the next key can). Each entry imports its module when called, so a plan that
# never asks for the Pallas engines never imports their kernels.
ENGINES: dict[str, Callable[..., Runner | None]] = {
    "parall": _parall,
    "parall/fused": _fused,
    "parall/sharded": _sharded,
    "relaxed": _relaxed,
    "chunked": _chunked,
    "persistent": _persistent,
}


def make_runner(model, plan: Plan | Settings | None = None) -> Runner:
    """The runner of a plan (or of settings: `schedules.plan.make_plan`) for a model or a bare graph.

    Every engine module has this signature; the plan says which runs (`Plan.engines`) and,
    for kernels "auto", `Plan.for_graph` decides them here; `runner.info` says which ran and why.

    Host work (dependency analysis, plans, kernel layouts) happens here, once;
    rounds only run the jitted loop.

    Raises:
        InputError: a bad schedule spec (unknown strategy, missing order file).
        SettingsError: GPU kernels without a GPU.
    """
    plan = plan_for(model, plan)
    for key in plan.engines():
        runner = ENGINES[key](model, plan)
        if runner is not None:
            return runner
    raise AssertionError(f"no engine ran {plan.schedule}")  # the last key always returns a runner


__all__ = ["make_runner", "plan_for", "graph_of", "ENGINES", "FUSED_MIN_EDGES", "Runner",
           "RunnerInfo", "RunResult", "Controls", "controls", "init", "device_graph", "GRAPH_FIELDS"]
