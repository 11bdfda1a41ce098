"""Device engines behind one contract, and the one dispatcher that picks them.

    runner = fastlbp.engines.make_runner(model, settings)   # host work, once per graph
    result = runner(graph, messages, evidence, controls)    # a jitted round, every label

Every engine returns a `loop.Runner` (its layout kept in `Runner.layout`,
its round a pure jitted function); `ENGINES` is the table the dispatcher
reads:

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

import dataclasses
from collections.abc import Callable

import jax

import schedules
from fastlbp.engines import chunked, parall, relaxed
from fastlbp.engines.loop import Controls, Runner, RunResult, controls, init
from fastlbp.errors import SettingsError
from fastlbp.graph import FactorGraph
from fastlbp.settings import GPU_BACKENDS, Settings

FUSED_BACKENDS = ("fused", "fused_interpret")


def _graph(model) -> FactorGraph:
    return model if isinstance(model, FactorGraph) else model.graph


def _parall(model, spec: schedules.Spec, settings: Settings) -> Runner:
    return parall.make_runner(_graph(model), settings, unroll=spec.unroll or 1)


def _parall_fused(model, spec: schedules.Spec, settings: Settings) -> Runner:
    from fastlbp.engines import fused

    # Eight sweeps per while-loop trip (fused.UNROLL) measured fastest for the fused kernels.
    return fused.make_runner(_graph(model), settings, unroll=spec.unroll or fused.UNROLL)


def _gpu_unroll(spec: schedules.Spec) -> int:
    # A while-loop trip costs ~15 us on the H200; several chunks per trip pay there, not on a CPU.
    return spec.unroll or (8 if jax.default_backend() == "gpu" else 1)


def _relaxed(model, spec: schedules.Spec, settings: Settings) -> Runner | None:
    rel = schedules.relaxation_plan(model, spec)
    if rel is None:
        return None
    info = {"compiled": rel, "order_seconds": rel.order_seconds, "analysis_seconds": rel.analysis_seconds,
            "budget": rel.budget}
    chunks = None if rel.chunks is None else rel.chunks.plan
    return relaxed.make_runner(_graph(model), rel.plan, f"{spec.strategy}/relaxed", chunks=chunks,
                               unroll=_gpu_unroll(spec), info=info)


def _chunked(model, spec: schedules.Spec, settings: Settings) -> Runner:
    compiled = schedules.compile_schedule(model, spec)
    return chunked.make_runner(_graph(model), compiled.plan, f"{spec.strategy}/chunked",
                               unroll=_gpu_unroll(spec), info={"compiled": compiled})


def _persistent(model, spec: schedules.Spec, settings: Settings) -> Runner:
    from fastlbp.engines import persistent

    interpret = settings.backend == "fused_interpret"
    if spec.width is None:
        spec = dataclasses.replace(spec, width=persistent.WIDTH if interpret else persistent.ATOMIC_WIDTH)
    compiled = schedules.compile_schedule(model, spec)
    if interpret:
        return persistent.make_runner(_graph(model), compiled.plan, f"{spec.strategy}/persistent",
                                      interpret=True, info={"compiled": compiled})
    return persistent.make_runner(_graph(model), compiled.plan, f"{spec.strategy}/persistent",
                                  num_warps=persistent.ATOMIC_WARPS, atomic=True, info={"compiled": compiled})


# The dispatch table: engine key -> factory(model, spec, settings) -> Runner (None: cannot run this spec).
ENGINES: dict[str, Callable[..., Runner | None]] = {
    "parall": _parall,
    "parall/fused": _parall_fused,
    "relaxed": _relaxed,
    "chunked": _chunked,
    "persistent": _persistent,
}


def check_backend(backend: str) -> None:
    """Raises `SettingsError` when `backend` needs a GPU and JAX runs elsewhere."""
    if backend in GPU_BACKENDS and jax.default_backend() != "gpu":
        raise SettingsError(f"backend {backend!r} needs a GPU (this JAX runs on {jax.default_backend()}); "
                            f"{backend}_interpret runs the same kernels, slowly")


def engine_keys(spec: schedules.Spec, backend: str) -> tuple[str, ...]:
    """The engines that may run `spec` with `backend`, in the order the dispatcher tries them."""
    fused = backend in FUSED_BACKENDS
    if spec.strategy == "parall":
        return ("parall/fused",) if fused else ("parall",)
    sequential = "persistent" if fused else "chunked"
    return ("relaxed", sequential) if spec.engine == "relaxed" else (sequential,)


def make_runner(model, settings: Settings | None = None) -> Runner:
    """The runner of `settings.schedule` and `settings.backend` for a model (or a bare graph).

    Host work (dependency analysis, plans, kernel layouts) happens here, once;
    rounds only run the jitted loop.

    Raises:
        InputError: a bad schedule spec (unknown strategy, missing order file).
        SettingsError: a GPU backend without a GPU.
    """
    settings = settings or Settings()
    spec = schedules.parse_spec(settings.schedule)
    check_backend(settings.backend)
    for key in engine_keys(spec, settings.backend):
        runner = ENGINES[key](model, spec, settings)
        if runner is not None:
            return runner
    raise AssertionError(f"no engine ran {settings.schedule!r}")  # the last key always returns a runner


__all__ = ["make_runner", "ENGINES", "engine_keys", "check_backend", "Runner", "RunResult", "Controls",
           "controls", "init"]
