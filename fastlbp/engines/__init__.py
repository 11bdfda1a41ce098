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
from fastlbp.core.errors import SettingsError
from fastlbp.core.graph import FactorGraph
from fastlbp.core.settings import GPU_BACKENDS, Settings
from fastlbp.engines import chunked, parall, relaxed
from fastlbp.engines.loop import (
    GRAPH_FIELDS,
    PARAMS,
    Controls,
    Runner,
    RunResult,
    controls,
    device_graph,
    init,
)

FUSED_BACKENDS = ("fused", "fused_interpret")


def _graph(model) -> FactorGraph:
    return model if isinstance(model, FactorGraph) else model.graph


def _parall(model, spec: schedules.Spec, settings: Settings) -> Runner:
    return parall.make_runner(_graph(model), settings, unroll=spec.unroll or 1)


def _parall_fused(model, spec: schedules.Spec, settings: Settings) -> Runner:
    from fastlbp.engines import fused

    # Eight sweeps per while-loop trip (fused.UNROLL) measured fastest for the fused kernels.
    runner = fused.make_runner(_graph(model), settings, unroll=spec.unroll or fused.UNROLL)
    # The kernels read the layout's rows; of the graph only the factors' parameters
    # (`fused.kernel_params`).
    return dataclasses.replace(runner, reads=PARAMS)


def _gpu_unroll(spec: schedules.Spec) -> int:
    # A while-loop trip costs ~15 us on the H200; several chunks per trip pay there, not on a CPU.
    return spec.unroll or (8 if jax.default_backend() == "gpu" else 1)


def _relaxed(model, spec: schedules.Spec, settings: Settings) -> Runner | None:
    rel = schedules.relaxation_plan(model, spec)
    if rel is None:
        return None
    return relaxed.make_runner(_graph(model), rel, f"{spec.strategy}/relaxed", unroll=_gpu_unroll(spec))


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


# Backend "auto" (the default): the fused Pallas kernels for PARALL on a GPU from this many edges.
# Measured (BENCHMARKS.md, "PARALL" and "Interactive rounds"), µs per PARALL iteration, XLA / fused:
#   H200 f64  50K 48.4 / 14.1, 0.5M 103.2 / 34.6, 5M 556.8 / 321.8 (f32: 39.3 / 14.7, 80.6 / 22.9,
#             417.1 / 178.4); H100 f64 56.7 / 15.3, 115.8 / 36.8, 648.0 / 345.7; 20M edges, a cold
#             round 0.21 / 0.14 s (issue 21);
#   triage at the ftp size (H200): cold round 10.36 / 6.05 ms, warm max 7.68 / 5.09 ms, TotalTime
#             0.176 / 0.134 s.
# Set-up is not the difference: the fused layout is host numpy like the XLA segment plans (this
# 2-core CPU: 0.66 vs 0.61 s at 0.5M edges, 2.1 vs 2.5 s at 2M). Compilation is: the fused loop
# 1.8-3.1 s in a fresh process against 0.7-1.4 s, which a single process without the persistent
# compilation cache repays only after ~15,000 iterations at 0.5M (69 µs each), while the CLI's
# cache makes both a 0.06 s hit. Below 50K edges nothing was measured and both are launch-bound,
# so the smaller compile keeps XLA. Sequential orders: relaxation on XLA (1.0 ms per SEQFIX
# iteration at the ftp size) beats the persistent fused kernel (144 ms), so auto never picks it.
FUSED_MIN_EDGES = 50_000


def auto_backend(platform: str, strategy: str, edges: int) -> tuple[str, str]:
    """The backend "auto" runs, and why.

    Args:
        platform: `jax.default_backend()` ("cpu", "gpu", "tpu").
        strategy: the schedule's strategy (`schedules.Spec.strategy`: "parall", "seqfix", ...).
        edges: factor-graph edges.

    Returns:
        ("fused" or "xla", a short reason for `--verbose` and `runner.info["backend_reason"]`).
    """
    if platform != "gpu":
        return "xla", f"auto: xla on {platform} (the Pallas kernels need a GPU)"
    if strategy != "parall":
        return "xla", "auto: xla (sequential orders: relaxation on XLA beats the persistent kernel)"
    if edges < FUSED_MIN_EDGES:
        return "xla", f"auto: xla ({edges:,} edges < {FUSED_MIN_EDGES:,}: launch-bound, cheaper compile)"
    return "fused", f"auto: fused ({edges:,} edges >= {FUSED_MIN_EDGES:,} on a GPU: 1.7-3.4x per iteration)"


def describe_runner(runner: Runner) -> str:
    """One line for `--verbose`: the engine and the backend (and why, when "auto" chose it)."""
    reason = runner.info.get("backend_reason")
    backend = runner.info.get("backend", "?")
    return f"engine {runner.name}, backend {backend}" + (f" ({reason})" if reason else "")


def check_backend(backend: str) -> None:
    """Raises `SettingsError` when `backend` needs a GPU and JAX runs elsewhere."""
    if backend in GPU_BACKENDS and jax.default_backend() != "gpu":
        raise SettingsError(f"backend {backend!r} needs a GPU (this JAX runs on {jax.default_backend()}); "
                            f"{backend}_interpret runs the same kernels, slowly")


def check_settings(settings: Settings) -> None:
    """Checks the LBP options a runner would read, without building one (cheap; no graph).

    A session whose method is not (yet) LBP builds its runner only when a round needs LBP; a
    schedule typo or a GPU backend on a CPU must still fail at once, not rounds later.

    Raises:
        InputError: a bad schedule spec (unknown strategy, missing order file).
        SettingsError: a GPU backend without a GPU.
    """
    schedules.parse_spec(settings.schedule)
    if settings.backend != "auto":
        check_backend(settings.backend)


def engine_keys(spec: schedules.Spec, backend: str) -> tuple[str, ...]:
    """The engines that may run `spec` with `backend`, in the order the dispatcher tries them."""
    fused = backend in FUSED_BACKENDS
    if spec.strategy == "parall":
        return ("parall/fused",) if fused else ("parall",)
    sequential = "persistent" if fused else "chunked"
    return ("relaxed", sequential) if spec.engine == "relaxed" else (sequential,)


def make_runner(model, settings: Settings | None = None) -> Runner:
    """The runner of `settings.schedule` and `settings.backend` for a model (or a bare graph).

    Backend "auto" becomes a concrete one here (`auto_backend`); `runner.info["backend"]`
    says which, `runner.info["backend_reason"]` why (None when the settings named it).

    Host work (dependency analysis, plans, kernel layouts) happens here, once;
    rounds only run the jitted loop.

    Raises:
        InputError: a bad schedule spec (unknown strategy, missing order file).
        SettingsError: a GPU backend without a GPU.
    """
    settings = settings or Settings()
    spec = schedules.parse_spec(settings.schedule)
    reason = None
    if settings.backend == "auto":
        backend, reason = auto_backend(jax.default_backend(), spec.strategy, _graph(model).num_edges)
        settings = settings.replace(backend=backend)
    check_backend(settings.backend)
    for key in engine_keys(spec, settings.backend):
        runner = ENGINES[key](model, spec, settings)
        if runner is not None:
            runner.info.update(backend=settings.backend, backend_reason=reason)
            return runner
    raise AssertionError(f"no engine ran {settings.schedule!r}")  # the last key always returns a runner


__all__ = ["make_runner", "ENGINES", "engine_keys", "check_backend", "check_settings", "auto_backend",
           "describe_runner",
           "FUSED_MIN_EDGES", "Runner", "RunResult", "Controls", "controls", "init", "device_graph",
           "GRAPH_FIELDS"]
