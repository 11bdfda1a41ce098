"""`method="auto"`: the method a run uses, decided in one place, and how a result says how it was made.

    choice = choose(model, settings, labels)      # Choice(method="sample", reason="...", sampler=...)
    describe(session.run())                        # "importance sampling: 100,000 worlds, ..."

The order is by how much a user can trust the numbers:

1. **exact** (bucket elimination) where the elimination's largest table fits
   `AUTO_EXACT_MEMORY` (and the device's budget), tried on graphs of at most
   `AUTO_EXACT_VARS` variables or any size when the factor graph is a forest
   (`is_forest`): the posterior itself;
2. **sample** (importance sampling, `fastlbp.engines.sampling`) where the graph
   is a Bayesian network and at least `AUTO_MIN_WORLDS` worlds fit a round's
   time budget (`Settings.sample_seconds`) at the speed measured on the
   platform at hand (the device program compiled, then a probe draw under a
   label, `measured_speed`): unbiased, with standard errors and intervals;
3. **lbp** otherwise: fast, approximate on graphs whose derivations share
   ancestors (weblech: 1e-67 where the model says 1e-2), and said to be
   unchecked beside its numbers.

A session keeps its choice; a round whose sampler or exact inference refuses
the labels (too few effective samples, too wide after labels) falls back to LBP
for that round and says so in `Round.flags`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fastlbp.core.model import Model
from fastlbp.core.settings import SAMPLE_PATHS, Settings

# Largest table exact inference may take under "auto": 2^25 float64 entries (width 24). A larger one
# can take seconds to minutes on a CPU; --method exact allows a quarter of the device's memory.
AUTO_EXACT_MEMORY = 1 << 28
# Graphs with more variables skip the exact attempt under "auto": ordering alone takes about 1 s on
# avrora (21,103 variables) before it refuses, and derivation graphs that large have had widths
# far above 24 (weblech, 456 variables: at least 28).
AUTO_EXACT_VARS = 5_000
# Fewest worlds a round must fit in its time budget for "auto" to sample: 4,096 worlds give a standard
# error of at most 0.008 without labels, shown beside each number, which an unchecked LBP answer (off
# by orders of magnitude on weblech) does not beat. At 10^4, an interactive round of avrora on this
# 2-core CPU (20,385 worlds/s, 8,154 in 0.4 s) fell back to LBP.
AUTO_MIN_WORLDS = 4_096


@dataclasses.dataclass(frozen=True)
class Choice:
    """What `auto` (or the user) picked, and why.

    Attributes:
        method: "exact", "sample" or "lbp".
        reason: one sentence for people ("" when the user asked for the method).
        sampler: the `Sampler` built while deciding (reused by the session), or None.
    """

    method: str
    reason: str = ""
    sampler: object | None = None


def _platform() -> str:
    import jax

    return "gpu" if jax.default_backend() == "gpu" else "cpu"


def _exact_fits(model: Model, settings: Settings, labels: dict[int, bool]) -> tuple[bool, str]:
    from fastlbp.engines import exact

    if model.num_vars > AUTO_EXACT_VARS and not is_forest(model.graph):
        return False, f"{model.num_vars:,} variables (exact is tried up to {AUTO_EXACT_VARS:,})"
    budget = min(exact.memory_budget(settings), AUTO_EXACT_MEMORY)
    most = max(1, int(math.log2(max(budget, exact.BYTES) / exact.BYTES)))
    engine = exact.engine_for(model.graph)
    p = engine.plan(frozenset(labels), most)
    if p is None or p.bytes_needed > budget:
        width = most if p is None else p.width
        return False, f"induced width {'at least ' if p is None else ''}{width} needs more than " \
                      f"{budget / 2**20:.0f} MiB"
    return True, f"induced width {p.width} fits {budget / 2**20:.0f} MiB"


def is_forest(graph) -> bool:
    """Whether the factor graph (variables and factors, an edge per variable a factor reads or heads)
    has no cycle: then exact inference's width is at most the widest factor's, whatever the graph's
    size (a chain of 10,000 tuples: exact in 1.6 s, where LBP ran 3,100 iterations unconverged and the
    sampler's 20,000 steps drew 90 worlds/s on this CPU). O(edges), with scipy's components."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    nodes = graph.num_vars + graph.num_factors
    if graph.num_edges > nodes - 1:  # more edges than a forest's: most graphs end here, at no cost
        return False
    g = graph.to_numpy()
    offsets = np.asarray(g.factor_offsets, np.int64)
    factor = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    var = np.asarray(g.edge_var, np.int64)
    pairs = np.unique(np.stack([var, graph.num_vars + factor], axis=1), axis=0)  # a variable read twice
    if pairs.shape[0] != var.size:
        return False
    adj = coo_matrix((np.ones(var.size), (pairs[:, 0], pairs[:, 1])), shape=(nodes, nodes))
    components, _ = connected_components(adj, directed=False)
    return var.size == nodes - components


def choose(model: Model, settings: Settings, labels: dict[int, bool] | None = None) -> Choice:
    """The method of a run: `settings.method`, or for "auto" the first of exact, sample, lbp that fits.

    Args:
        model: the loaded model.
        settings: the run's settings (`method`, `samples`, `exact_memory` are read).
        labels: the labels of the first round (exact's width depends on them).
    """
    if settings.method != "auto":
        return Choice(settings.method)
    from fastlbp.engines import sampling
    from fastlbp.engines.sharded_sampling import make_sampler

    labels = dict(model.labels if labels is None else labels)
    fits, why_exact = _exact_fits(model, settings, labels)
    if fits:
        return Choice("exact", f"exact inference: {why_exact}")
    try:
        sampler = make_sampler(model.graph, model.var_names, devices=settings.devices,
                               samples_hint=settings.samples, host=SAMPLE_PATHS[settings.sample_path])
    except sampling.NotABayesNet as err:
        return Choice("lbp", f"LBP: not exact ({why_exact}), not sampled ({err.message})")
    platform = "cpu" if sampler.host else _platform()
    budget = float(settings.sample_seconds)
    if budget <= 0:
        return Choice("sample", f"importance sampling: not exact ({why_exact}); no time budget "
                                "(--sample-seconds 0)", sampler)
    speed = measured_speed(sampler, model, labels)
    fit = speed * budget
    where = "host" if sampler.host else platform
    if fit >= AUTO_MIN_WORLDS:
        return Choice("sample", f"importance sampling: not exact ({why_exact}); {speed:,.0f} worlds/s "
                                f"measured on the {where}: {_worlds(fit)} worlds fit a round of "
                                f"{budget:g} s", sampler)
    return Choice("lbp", f"LBP: not exact ({why_exact}); sampling draws {speed:,.0f} worlds/s on the "
                         f"{where}, {_worlds(fit)} in a round of {budget:g} s (at least "
                         f"{AUTO_MIN_WORLDS:,} needed)")


def _worlds(n: float) -> str:
    return f"{n:,.0f}" if n < 1e7 else f"{n:.1e}"


def measured_speed(sampler, model: Model, labels: dict[int, bool]) -> float:
    """Worlds per second a labelled round draws with `sampler` (device program compiled first, not
    timed): a probe of one batch (at least `sampling.PROBE_WORLDS`) under the round's labels, or one
    alarm labelled false when there are none (the weights cost as much as the drawing)."""
    from fastlbp.core.errors import InferenceError
    from fastlbp.engines import sampling

    sampler.reserve(set(model.alarms) | set(labels))
    sampler.warm()
    probe = max(sampling.PROBE_WORLDS, sampler.batch_words * sampling.WORD_BITS)
    tries = [labels] if labels else []
    tries += [{int(model.alarms[0]): False}] if len(model.alarms) else []
    tries.append({})
    for trial in tries:
        try:
            sampler(trial, probe, 0, max_samples=probe)
        except InferenceError:
            continue
        if sampler.world_seconds:
            return 1.0 / sampler.world_seconds
    return float("inf")


def describe(rnd) -> str:
    """One line for people: the method of a `Round` and its error.

    "exact inference", "importance sampling: 100,032 worlds (effective 99,870), largest alarm
    standard error 0.0016", or for LBP its iterations, convergence and "unchecked" (LBP's error is
    not known: `fastlbp check` measures it).
    """
    info = rnd.info or {}
    if rnd.method == "exact":
        width = info.get("width")
        return "exact inference" + (f" (induced width {width})" if width is not None else "")
    if rnd.method == "sample":
        text = (f"importance sampling: {info.get('samples', 0):,} worlds (effective "
                f"{info.get('effective_samples', 0):,.0f})")
        if "max_stderr" in info:
            text += f", largest alarm standard error {info['max_stderr']:.2g}"
            target = info.get("target_se") or 0
            if target and info["max_stderr"] > target:
                if info.get("stopped") == "time":
                    budget = info.get("sample_seconds", 0)
                    text += f" (target {target:g} not reached in the {budget:g} s budget, --sample-seconds)"
                else:
                    text += f" (target {target:g} not reached within {info.get('max_samples', 0):,} worlds)"
        return text + _on_devices(info)
    state = "converged" if rnd.converged else f"not converged (last change {rnd.delta:.3g})"
    if rnd.remedy:
        state = f"{'converged' if rnd.converged else 'not converged'} with {rnd.remedy}"
    return (f"LBP: {rnd.iterations} iterations, {state}{_on_devices(info)}, unchecked (approximate; "
            "`fastlbp check` measures it)")


def _on_devices(info: dict) -> str:
    """", on N devices" where a round ran on several (`Settings.devices`), else nothing."""
    devices = int(info.get("devices", 1))
    return f", on {devices} devices" if devices > 1 else ""


def error_columns(rnd, var: int) -> dict:
    """The JSON fields of one variable's uncertainty: stderr, lower, upper (sampled), or {} otherwise."""
    if rnd.stderr is None or rnd.method != "sample":
        return {}
    out = {"stderr": float(rnd.stderr[var])}
    if rnd.lower is not None:
        out["lower"], out["upper"] = float(rnd.lower[var]), float(rnd.upper[var])
    return out


def summary_dict(rnd) -> dict:
    """The JSON fields of how a round was made: method, how, flags, and the sampler's sizes."""
    info = rnd.info or {}
    out = {"method": rnd.method, "how": describe(rnd), "flags": list(getattr(rnd, "flags", ()) or ())}
    if rnd.method == "sample":
        out.update({k: info[k] for k in ("samples", "effective_samples", "max_stderr", "target_se",
                                         "max_samples") if k in info})
    if int(info.get("devices", 1)) > 1:
        out["devices"] = int(info["devices"])
    if getattr(rnd, "reason", None):
        out["reason"] = rnd.reason
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in out.items()}


__all__ = ["Choice", "choose", "describe", "error_columns", "summary_dict", "measured_speed", "is_forest",
           "AUTO_EXACT_MEMORY", "AUTO_EXACT_VARS", "AUTO_MIN_WORLDS"]
