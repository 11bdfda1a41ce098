"""Device engines behind one contract, and the one dispatcher that picks them.

    runner = fastlbp.engines.make_runner(model, plan)        # host work, once per graph
    result, runner = runner.step(graph, messages, evidence, controls)   # a jitted round

`plan` is a `fastlbp.core.plan.Plan` (or `Settings`, made into one). Every
engine module has `make_runner(model, plan) -> loop.Runner` (an immutable
runner: its layout in `Runner.layout`, its round a pure jitted function);
`ENGINES` is the table the dispatcher reads, by `Plan.engines()`:

| key          | what runs                                              | file            |
| ------------ | ------------------------------------------------------ | --------------- |
| parall       | PARALL, XLA kernels (segment sums by backend)          | parall.py       |
| parall/fused | PARALL, two Pallas kernels per sweep (GPU)             | fused/          |
| relaxed      | a sequential order, each sweep relaxed to its fixed point | relaxed.py   |
| chunked      | a sequential order (or SEQRND), batches chunk by chunk | chunked.py      |
| persistent   | the same chunks in one persistent Pallas kernel (GPU)  | persistent.py   |

The shared loop (damping, convergence, conflicts) is `loop.iterate`. A relaxed
sweep runs at most a budget of passes; an order deeper than the budget also
carries its chunk plan, and the chunk loop redoes exactly a sweep that the
budget did not settle (`relaxed.py`).
"""

from __future__ import annotations

import importlib

from fastlbp.core.plan import FUSED_MIN_EDGES, Plan
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

# The dispatch table: engine key (`Plan.engines`) -> the module whose `make_runner(model, plan)`
# prepares it (None: it cannot run this plan's order; the next key can). Modules, not functions:
# the Pallas engines import their kernels only when a plan asks for them.
ENGINES: dict[str, str] = {
    "parall": "fastlbp.engines.parall",
    "parall/fused": "fastlbp.engines.fused",
    "relaxed": "fastlbp.engines.relaxed",
    "chunked": "fastlbp.engines.chunked",
    "persistent": "fastlbp.engines.persistent",
}


def describe_runner(runner: Runner) -> str:
    """One line for `--verbose`: the engine and the backend (and why, when "auto" chose it)."""
    reason = runner.info.reason
    return f"engine {runner.name}, backend {runner.info.backend}" + (f" ({reason})" if reason else "")


def make_runner(model, plan: Plan | Settings | None = None) -> Runner:
    """The runner of a plan (or of settings: `fastlbp.core.plan.make_plan`) for a model or a bare graph.

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
        runner = importlib.import_module(ENGINES[key]).make_runner(model, plan)
        if runner is not None:
            return runner
    raise AssertionError(f"no engine ran {plan.schedule}")  # the last key always returns a runner


__all__ = ["make_runner", "plan_for", "graph_of", "ENGINES", "describe_runner", "FUSED_MIN_EDGES", "Runner",
           "RunnerInfo", "RunResult", "Controls", "controls", "init", "device_graph", "GRAPH_FIELDS"]
