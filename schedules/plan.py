"""`Plan`: what a run executes, decided once from `Settings` before anything is loaded.

    plan = make_plan(settings)          # the schedule parsed, the backend split, checked (no JAX)
    plan = plan.placed()                # + the JAX platform (imports JAX): the session does this
    plan = plan.for_graph(num_edges)    # + kernels "auto" made concrete: the dispatcher does this

Every engine reads the plan, and nothing else decides what runs. Three things
that the CLI calls "backend" are three fields here:

* `kernels`: the engine family, "xla" (the XLA engines), "fused" (the Pallas
  kernels: PARALL's two per sweep, the persistent one of sequential orders) or
  "auto" (`for_graph` picks by platform, strategy and size);
* `summation`: how the XLA engines sum segments ("xla" dense gathers, "scatter",
  "pallas"), with `interpret` running any Pallas kernel in the interpreter;
* `platform`: JAX's platform ("cpu", "gpu", "tpu"), None until `placed`.

The schedule is a `Spec` (strategy and its options); a custom order travels as
its text (`Spec.order`), read once when the plan is made, so engines never open
a path (and a stored session never has one to open).

The built-in strategies are one table, `STRATEGIES` (name, help, order builder,
parallel), which is why the plan sits in the `schedules` layer: the parser, the
engines and the CLI's help all read the row that builds the order.

This module imports neither numpy nor JAX (a row's builder imports its orders when
called): a typo'd schedule fails before the graph loads and before numpy or JAX
start (`fastlbp rank BIG --schedule nosuch`: the CLI's start-up time).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from fastlbp.core.errors import InputError, SettingsError, read_text
from fastlbp.core.settings import BACKENDS, PRECISIONS, Settings


@dataclasses.dataclass(frozen=True)
class Strategy:
    """A built-in update strategy: a row of `STRATEGIES`, everything about it.

    Attributes:
        name: what `--schedule` calls it (lower case).
        help: what it does, for `--help` (the CLI's text is made from the table).
        build: `(graph, spec) -> list[Order]`: its order on a `FactorGraph` (one `schedules.orders.Order`,
            or one per iteration, cycled: SEQRND), with the spec's `:OPTION`s.
        parallel: every message is updated at once from the last iteration's (no dependency
            analysis; the PARALL engines run it); otherwise the strategy is an order of sequential
            batches (the relaxation, chunk and persistent engines).
    """

    name: str
    help: str
    build: Callable[[Any, Spec], list[Any]]
    parallel: bool = False


def _orders():
    # numpy, only when an order is built: the CLI's --help and its check of --schedule read this table.
    from schedules import orders

    return orders


# The built-in strategies, the one table. Anything else `--schedule` names is a custom order file.
STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy("parall", "PARALL: every message at once, from the last iteration's",
             lambda graph, spec: [_orders().parall(graph)], parallel=True),
    Strategy("seqfix", "SEQFIX: one message after another, factors in a fixed order",
             lambda graph, spec: [_orders().seqfix(graph)]),
    Strategy("seqrnd", "SEQRND: one message after another, a new random order each iteration; "
                       ":seed=N, :cycle=N orders",
             lambda graph, spec: _orders().seqrnd(graph, spec.seed, spec.cycle)),
    Strategy("topo", "TOPO: heads forward in the network's topological order, then bodies backward; "
                     ":bodyfirst the other way",
             lambda graph, spec: [_orders().topo(graph, spec.body_first)]),
)}


def strategies_help() -> str:
    """The built-in strategies for `--help`: `parall (every message at once ...), seqfix (...), ...`."""
    return ", ".join(f"{s.name} ({s.help})" for s in STRATEGIES.values())


ANALYSES = ("levelling", "algorithm3")

_FLAGS = {"levelling", "algorithm3", "bodyfirst", "relaxed", "chunked"}
_VALUED = ("seed", "cycle", "width", "unroll", "budget")

# `Settings.backend` (the CLI's --backend) -> (kernels, summation, interpret).
BACKEND_PARTS = {
    "auto": ("auto", "xla", False),
    "xla": ("xla", "xla", False),
    "scatter": ("xla", "scatter", False),
    "pallas": ("xla", "pallas", False),
    "pallas_interpret": ("xla", "pallas", True),
    "fused": ("fused", "xla", False),
    "fused_interpret": ("fused", "xla", True),
}
assert set(BACKEND_PARTS) == set(BACKENDS)

# Backend "auto": the fused Pallas kernels for PARALL on a GPU from this many edges. Measured
# (BENCHMARKS.md, "PARALL" and "Interactive rounds"): below it both are launch-bound and the XLA
# loop compiles in half the time; sequential orders relax faster on XLA than in the persistent
# kernel, so "auto" never picks that.
FUSED_MIN_EDGES = 50_000

# PARALL spreads its factors over several devices (`Settings.devices`, `fastlbp.engines.sharded_parall`)
# from this many edges: below it a graph fits one device with room to spare and each iteration pays the
# cut's exchange. Not yet measured on a host of several GPUs (issue 42): BENCHMARKS.md will say.
SHARD_MIN_EDGES = 50_000_000

# The engines (`fastlbp.engines.ENGINES`): PARALL by kernels, and a sequential order's.
PARALL, PARALL_FUSED, PARALL_SHARDED = "parall", "parall/fused", "parall/sharded"
RELAXED, CHUNKED, PERSISTENT = "relaxed", "chunked", "persistent"


@dataclasses.dataclass(frozen=True)
class Spec:
    """A parsed schedule spec (`parse_spec`).

    Attributes:
        strategy: a key of `STRATEGIES`, or "file" (a custom order).
        path: a custom order's file, for messages (None for a built-in strategy).
        order: a custom order's text (None until `make_plan` reads it; the engines read this,
            never the file).
        analysis, seed, cycle, body_first, width, unroll, budget: the `:OPTION`s.
        engine: how a sequential order runs: "relaxed" (the default; SEQRND and orders
            relaxation cannot take run chunked) or "chunked".
    """

    strategy: str
    path: str | None = None
    analysis: str = "levelling"
    seed: int = 0
    cycle: int = 8
    body_first: bool = False
    width: int | None = None
    unroll: int | None = None  # None: 8 on a GPU (a while-loop trip has a cost there), else 1
    engine: str = "relaxed"  # relaxed | chunked (SEQRND and other many-run orders: chunked)
    budget: int | None = None  # relaxed: passes per sweep before the chunk loop; None: cost model
    order: str | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def parallel(self) -> bool:
        """The strategy updates every message at once (`Strategy.parallel`; a custom order never)."""
        strategy = STRATEGIES.get(self.strategy)
        return strategy is not None and strategy.parallel

    def options(self) -> str:
        """The spec's options as `:OPTION...` text (what `parse_spec` reads back; "" for defaults)."""
        parts = []
        if self.analysis != "levelling":
            parts.append(self.analysis)
        if self.engine != "relaxed":
            parts.append(self.engine)
        if self.body_first:
            parts.append("bodyfirst")
        for key in _VALUED:
            value = getattr(self, key)
            if value is not None and value != Spec.__dataclass_fields__[key].default:
                parts.append(f"{key}={value}")
        return "".join(f":{p}" for p in parts)


def _is_option(part: str) -> bool:
    key = part.split("=", 1)[0].lower()
    return part.lower() in _FLAGS or (key in _VALUED and "=" in part)


def parse_spec(spec: str, *, order: str | None = None, source: str | None = None, **overrides: Any) -> Spec:
    """Parses `NAME[:OPTION...]` (see `schedules`); keywords override options.

    Args:
        spec: the schedule text.
        order: a custom order's text: the spec's head then only names it (a stored session's
            "custom-order"), and no file is looked at.
        source: what `order` came from, for messages (default: the spec's head).

    Raises:
        InputError: unknown strategy, missing order file, or a bad option.
    """
    text = spec.strip()
    parts = text.split(":")
    head = parts[0].lower()
    if head in STRATEGIES and order is None:
        strategy, path, opts = head, None, parts[1:]
    else:
        opts = []
        while len(parts) > 1 and _is_option(parts[-1]) and (order is not None
                                                            or not os.path.exists(":".join(parts))):
            opts.insert(0, parts.pop())
        path = ":".join(parts)
        if order is None and not os.path.exists(path):
            raise InputError(path, None, f"unknown schedule {spec!r}: expected one of "
                                         f"{', '.join(STRATEGIES)} or a custom order file")
        strategy = "file"
        if order is not None:
            path = source or path
    kw: dict[str, Any] = {}
    for opt in opts:
        low = opt.lower()
        if low in ("levelling", "algorithm3"):
            kw["analysis"] = low
        elif low == "bodyfirst":
            kw["body_first"] = True
        elif low in ("relaxed", "chunked"):
            kw["engine"] = low
        elif "=" in opt and low.split("=", 1)[0] in _VALUED:
            key, value = low.split("=", 1)
            try:
                kw[key] = int(value)
            except ValueError:
                raise InputError(None, None, f"schedule option {opt!r}: {value!r} is not an "
                                             f"integer") from None
        else:
            raise InputError(None, None, f"unknown schedule option {opt!r} in {spec!r} (expected "
                                         f"levelling, algorithm3, relaxed, chunked, bodyfirst, seed=N, "
                                         f"cycle=N, width=N, unroll=N or budget=N)")
    kw.update({k: v for k, v in overrides.items() if v is not None})
    out = Spec(strategy, path, order=order, **kw)
    if out.analysis not in ANALYSES:
        raise InputError(None, None, f"unknown analysis {out.analysis!r} (expected one of "
                                     f"{', '.join(ANALYSES)})")
    if out.cycle < 1 or any(v is not None and v < 1 for v in (out.width, out.unroll, out.budget)):
        raise InputError(None, None, f"schedule options must be positive in {spec!r}")
    return out


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run executes (`make_plan`); immutable, so sessions and their copies share it.

    Attributes:
        method: "auto", "lbp", "exact" or "sample" (`Settings.method`).
        schedule: the parsed schedule, a custom order's text included.
        kernels: "auto", "xla" or "fused" (the engine family).
        summation: "xla", "scatter" or "pallas": the XLA engines' segment sums.
        interpret: Pallas kernels run in the interpreter (CPU; tests).
        platform: JAX's platform, None until `placed`.
        precision: "f64" or "f32".
        reason: why "auto" chose `kernels` (set by `for_graph`; None when the settings named them).
        devices: `Settings.devices` (None: every visible device).
        shards: devices PARALL's factors are spread over (set by `for_graph`: more than one for a
            parallel schedule on XLA's kernels from `SHARD_MIN_EDGES` edges when several devices are used).
    """

    method: str
    schedule: Spec
    kernels: str
    summation: str
    interpret: bool
    precision: str
    platform: str | None = None
    reason: str | None = None
    devices: int | None = None
    shards: int = 1

    @property
    def gpu(self) -> bool:
        return self.platform == "gpu"

    @property
    def dtype(self):
        """The JAX dtype of messages and marginals."""
        import jax.numpy as jnp  # JAX only where a dtype is asked for: by the engines, at a run

        return getattr(jnp, PRECISIONS[self.precision])

    @property
    def backend(self) -> str:
        """The `Settings.backend` name of the concrete kernels and summation (for people)."""
        name = self.kernels if self.kernels != "xla" else self.summation
        return f"{name}_interpret" if self.interpret and name in ("fused", "pallas") else name

    @property
    def summation_name(self) -> str:
        """`equations.summation`'s name of the segment sums ("pallas_interpret" in the interpreter)."""
        return "pallas_interpret" if self.summation == "pallas" and self.interpret else self.summation

    def placed(self, platform: str | None = None) -> Plan:
        """The plan on `platform` (default: JAX's default backend; imports JAX).

        Raises:
            SettingsError: the kernels or summation need a GPU and the platform has none; more devices
                asked for (`Settings.devices`) than JAX sees.
        """
        if platform is None and self.platform is not None:
            return self
        if platform is None or self.devices is not None:
            import jax

            platform = platform or jax.default_backend()
            visible = len(jax.devices())
            if self.devices is not None and self.devices > visible:
                raise SettingsError(f"--devices {self.devices}: JAX sees {visible} {platform} device(s)")
        needs_gpu = not self.interpret and (self.kernels == "fused" or self.summation == "pallas")
        if needs_gpu and platform != "gpu":
            name = self.backend
            raise SettingsError(f"backend {name!r} needs a GPU (this JAX runs on {platform}); "
                                f"{name}_interpret runs the same kernels, slowly")
        return dataclasses.replace(self, platform=platform)

    def for_graph(self, num_edges: int) -> Plan:
        """The plan with kernels "auto" made concrete for a graph of `num_edges` (and a `reason`), and
        PARALL's `shards`."""
        plan = self.placed()
        xla = plan.kernels in ("auto", "xla") and plan.summation in ("xla", "scatter")
        if plan.schedule.parallel and xla and num_edges >= SHARD_MIN_EDGES:
            import jax

            visible = len(jax.devices())
            shards = visible if plan.devices is None else min(int(plan.devices), visible)
            if shards > 1:
                why = f"{num_edges:,} edges >= {SHARD_MIN_EDGES:,}: PARALL on XLA over {shards} devices"
                return dataclasses.replace(plan, kernels="xla", shards=shards, reason=why)
        if plan.kernels != "auto":
            return plan
        if not plan.gpu:
            kernels, why = "xla", f"auto: xla on {plan.platform} (the Pallas kernels need a GPU)"
        elif not plan.schedule.parallel:
            kernels, why = "xla", ("auto: xla (sequential orders: relaxation on XLA beats the persistent "
                                   "kernel)")
        elif num_edges < FUSED_MIN_EDGES:
            kernels, why = "xla", (f"auto: xla ({num_edges:,} edges < {FUSED_MIN_EDGES:,}: launch-bound, "
                                   "cheaper compile")
        else:
            kernels, why = "fused", (f"auto: fused ({num_edges:,} edges >= {FUSED_MIN_EDGES:,} on a GPU: "
                                     "1.7-3.4x per iteration")
        return dataclasses.replace(plan, kernels=kernels, reason=why)

    def engines(self) -> tuple[str, ...]:
        """The engines that may run the plan, in the order the dispatcher tries them (concrete kernels)."""
        if self.kernels == "auto":
            raise ValueError("kernels 'auto' is decided by for_graph")
        fused = self.kernels == "fused"
        if self.schedule.parallel:
            if self.shards > 1:
                return (PARALL_SHARDED,)
            return (PARALL_FUSED,) if fused else (PARALL,)
        sequential = PERSISTENT if fused else CHUNKED
        return (RELAXED, sequential) if self.schedule.engine == "relaxed" else (sequential,)

    def chunk_unroll(self) -> int:
        """Chunks per loop trip of the chunk loops: the spec's, else 8 on a GPU (a while-loop trip
        has a cost on a GPU; several chunks per trip pay there, not on a CPU), else 1."""
        return self.schedule.unroll or (8 if self.gpu else 1)


def make_plan(settings: Settings | None = None, *, order: str | None = None, source: str | None = None,
              platform: str | None = None) -> Plan:
    """The plan of `settings`, checked without loading anything (and without JAX unless it is needed).

    A custom order file is read here, once (`Spec.order`). GPU kernels asked for by name
    (`--backend fused`, `pallas`) are checked against JAX's platform here (that imports JAX);
    otherwise the platform is left to `Plan.placed`.

    Args:
        settings: the run's settings (default `Settings()`).
        order: a custom order's text (a stored session's): `settings.schedule` only names it.
        source: where `order` came from, for messages.
        platform: JAX's platform, when the caller knows it.

    Raises:
        InputError: a bad schedule (unknown strategy, missing or unreadable order file, bad option).
        SettingsError: GPU kernels without a GPU.
    """
    settings = settings or Settings()
    spec = parse_spec(settings.schedule, order=order, source=source)
    if spec.strategy == "file" and spec.order is None:
        spec = dataclasses.replace(spec, order=read_text(spec.path))
    kernels, summation, interpret = BACKEND_PARTS[settings.backend]
    plan = Plan(method=settings.method, schedule=spec, kernels=kernels, summation=summation,
                interpret=interpret, precision=settings.precision, devices=settings.devices)
    needs_gpu = not interpret and (kernels == "fused" or summation == "pallas")
    return plan.placed(platform) if needs_gpu or platform is not None else plan


__all__ = ["Plan", "Spec", "make_plan", "parse_spec", "Strategy", "STRATEGIES", "strategies_help", "ANALYSES",
           "BACKEND_PARTS", "FUSED_MIN_EDGES", "SHARD_MIN_EDGES"]
