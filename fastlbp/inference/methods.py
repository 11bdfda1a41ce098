"""The inference methods, one table: `METHODS`, and `method="auto"`, which picks one of them.

    METHODS["sample"].label                        # "sampling"
    method_of(rnd.method).describe(rnd)            # "importance sampling: 100,000 worlds, ..."
    choice = choose(model, settings, labels)       # Choice(method="sample", reason="...", sampler=...)

A method is a `Method` object: its name and label, how it describes a round
(the line beside a ranking, its JSON fields, a plot's title, the column beside
each probability), how it is prepared for a model (`fastlbp.inference.rounds`),
its reference marginals for `fastlbp check`, its E-step for learning
(`fastlbp.inference.e_steps`) and the method that answers a round it refuses.
Everything that shows or runs a method asks its row; nothing outside this module
compares a method's name (tests/test_method_table.py scans the package's syntax
trees for it). A new method is its own module (a `Method` subclass and what its
`prepare` makes) plus one row of `METHODS`.

`method="auto"` (`AUTO`) is no method but the choice of one, in this order, by
how much a user can trust the numbers:

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
the labels (too few effective samples, too wide after labels) runs the row's
`fallback` (LBP) for that round and says so in `Round.flags`.

This module imports neither numpy nor JAX until a method runs: the CLI reads the
table's names and help for `--help`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from fastlbp.core.errors import SettingsError
from fastlbp.core.settings import SAMPLE_PATHS
from fastlbp.inference.method import Method

if TYPE_CHECKING:  # for annotations only: the table is read by --help, which imports no numpy
    from fastlbp.core.model import Model
    from fastlbp.core.settings import Settings
    from fastlbp.engines.marginals import Marginals
    from fastlbp.inference.rounds import Prepared, Round
    from schedules.plan import Plan

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
        method: the name of a row of `METHODS`.
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
    import numpy as np
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

    Raises:
        SettingsError: `settings.method` is neither "auto" nor a row of `METHODS`.
    """
    if not chooses(settings.method):
        return Choice(method_of(settings.method).name)
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


# The table -----------------------------------------------------------------------------------------

# Not a method: the choice of one (`choose`), the default of `Settings.method`.
AUTO = "auto"
AUTO_HELP = ("the default: exact where the graph's width fits, else sample where it fits a time budget, else "
             "lbp; the output says which and why")

# What a ranking of a method whose error is unknown says once, for stderr (`Method.caveat`).
LBP_CAVEAT = ("note: LBP's probabilities are approximate and unchecked on this graph: derivations that share "
              "tuples make them over- or under-confident, by orders of magnitude at worst. `fastlbp check` "
              "measures them; --method exact or --method sample gives the model's own probabilities.")


class LBPMethod(Method):
    """Loopy belief propagation (`fastlbp.engines`, `fastlbp.inference.rounds.LBP`)."""

    name = "lbp"
    label = "LBP"
    help = "loopy belief propagation, fast, approximate on graphs whose derivations share ancestors"
    iterative = unchecked = pruned_beliefs = batched_e_steps = True
    error_head = "LBP"
    caveat = LBP_CAVEAT

    def prepare(self, model: Model, plan: Plan, sampler=None) -> Prepared:
        from fastlbp.inference.rounds import prepare_lbp

        return prepare_lbp(model, plan)

    def describe(self, rnd: Round) -> str:
        """Its iterations, convergence and "unchecked" (LBP's error is not known: `fastlbp check`
        measures it)."""
        state = "converged" if rnd.converged else f"not converged (last change {rnd.delta:.3g})"
        if rnd.remedy:
            state = f"{'converged' if rnd.converged else 'not converged'} with {rnd.remedy}"
        return (f"LBP: {rnd.iterations} iterations, {state}{_on_devices(rnd.info or {})}, unchecked "
                "(approximate; `fastlbp check` measures it)")

    def title(self, settings: Settings) -> str:
        return (f"LBP {settings.schedule}, tol {settings.tol:g}, damping {settings.damping:g}, "
                f"{settings.precision}")

    def e_step(self, aug, labels: dict[int, bool], settings: Settings):
        from fastlbp.inference.e_steps import LBPEStep
        from schedules.plan import make_plan

        settings = dataclasses.replace(settings, method=self.name)
        return LBPEStep(aug, labels, settings, self.prepare(aug.model, make_plan(settings).placed()))


class ExactMethod(Method):
    """Exact inference by bucket elimination (`fastlbp.engines.exact`)."""

    name = "exact"
    label = "exact inference"
    help = "bucket elimination; refused when the graph is too wide"
    fallback = "lbp"
    reference = True
    exact = True

    def prepare(self, model: Model, plan: Plan, sampler=None) -> Prepared:
        from fastlbp.inference.rounds import Exact

        return Exact()

    def describe(self, rnd: Round) -> str:
        """`exact inference (induced width W)`."""
        width = (rnd.info or {}).get("width")
        return "exact inference" + (f" (induced width {width})" if width is not None else "")

    def error_cell(self, lower: float, upper: float, flags) -> str:
        return "exact"

    def note(self, rnd: Round, var: int) -> str:
        return "exact"

    def reference_marginals(self, model: Model, labels: dict[int, bool], settings: Settings) -> Marginals:
        from fastlbp.engines import exact

        return exact.exact_marginals(model, labels, settings)

    def e_step(self, aug, labels: dict[int, bool], settings: Settings):
        from fastlbp.inference.e_steps import ExactEStep

        return ExactEStep(aug, labels, settings)


class SampleMethod(Method):
    """Importance sampling with the labels as weights (`fastlbp.engines.sampling`)."""

    name = "sample"
    label = "sampling"
    help = "sampling with the labels as importance weights, standard errors and 95% intervals"
    fallback = "lbp"
    reference = sampled = True
    error_head = "95% interval"

    def prepare(self, model: Model, plan: Plan, sampler=None) -> Prepared:
        from fastlbp.inference.rounds import Sample

        return Sample(sampler)

    def describe(self, rnd: Round) -> str:
        """`importance sampling: 100,032 worlds (effective 99,870), largest alarm standard error 0.0016`
        (and why a standard-error target was not reached)."""
        info = rnd.info or {}
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

    def json_fields(self, rnd: Round) -> dict:
        info = rnd.info or {}
        return {k: info[k] for k in ("samples", "effective_samples", "max_stderr", "target_se", "max_samples")
                if k in info}

    def title(self, settings: Settings) -> str:
        return f"sampling, {settings.samples:,} worlds, seed {settings.seed}"

    def intervals(self, rnd: Round):
        if rnd.stderr is None or rnd.lower is None:
            return None
        return rnd.stderr, rnd.lower, rnd.upper

    def error_cell(self, lower: float, upper: float, flags) -> str:
        if math.isfinite(lower):
            return f"[{_short(lower)}, {_short(upper)}]"
        return super().error_cell(lower, upper, flags)

    def note(self, rnd: Round, var: int) -> str:
        if rnd.lower is None:
            return super().note(rnd, var)
        return f"95% interval {float(rnd.lower[var]):.4g} to {float(rnd.upper[var]):.4g}"

    def reference_marginals(self, model: Model, labels: dict[int, bool], settings: Settings) -> Marginals:
        from fastlbp.engines import sampling

        return sampling.sample_marginals(model, labels, settings)

    def e_step(self, aug, labels: dict[int, bool], settings: Settings):
        from fastlbp.inference.e_steps import SampleEStep

        return SampleEStep(aug, labels, settings)


def _on_devices(info: dict) -> str:
    """", on N devices" where a round ran on several (`Settings.devices`), else nothing."""
    devices = int(info.get("devices", 1))
    return f", on {devices} devices" if devices > 1 else ""


def _short(p: float) -> str:
    return f"{p:.4f}" if p == 0.0 or p >= 1e-3 else f"{p:.1e}"


# The one table of methods, in the order `--help` lists them (and `fastlbp check --reference auto` tries
# the references).
METHODS: dict[str, Method] = {m.name: m for m in (LBPMethod(), ExactMethod(), SampleMethod())}


def names() -> tuple[str, ...]:
    """What `Settings.method` may be: "auto", then the table's methods."""
    return (AUTO, *METHODS)


def auto_fallback() -> str | None:
    """The method that answers the rounds "auto"'s choice refuses: the rows' one `fallback` (LBP), or
    None (none, or several: a session then prepares it when a round needs it)."""
    found = {m.fallback for m in METHODS.values() if m.fallback is not None}
    return found.pop() if len(found) == 1 else None


def reference_names() -> tuple[str, ...]:
    """What `fastlbp check --reference` may be: "auto", then the methods that can be a reference."""
    return (AUTO, *(name for name, m in METHODS.items() if m.reference))


def methods_help() -> str:
    """`--method`'s choices for `--help`: `auto (the default: ...), lbp (...), exact (...) or sample (...)`"""
    parts = [f"{AUTO} ({AUTO_HELP})"] + [f"{m.name} ({m.help})" for m in METHODS.values()]
    return ", ".join(parts[:-1]) + f" or {parts[-1]}"


def chooses(name: str) -> bool:
    """Whether `Settings.method` `name` leaves the method to `choose` ("auto")."""
    return name == AUTO


def method_of(name: str) -> Method:
    """The row of `METHODS` named `name` (a `Round.method`, a named `Settings.method`).

    Raises:
        SettingsError: no method is called `name` ("auto" included: it is a choice, not a method).
    """
    row = METHODS.get(name)
    if row is None:
        raise SettingsError(f"method must be one of {', '.join(names())}, got {name!r}")
    return row


def check_name(name: str) -> str:
    """`name` when it is "auto" or a method's name.

    Raises:
        SettingsError: it is neither.
    """
    if not chooses(name):
        method_of(name)
    return name


def may_run(name: str) -> tuple[Method, ...]:
    """The methods a run of `Settings.method` `name` may use: that one, or under "auto" every one."""
    return tuple(METHODS.values()) if chooses(name) else (method_of(name),)


def describe(rnd: Round) -> str:
    """One line for people: the method of a `Round` and its error (`Method.describe`).

    "exact inference", "importance sampling: 100,032 worlds (effective 99,870), largest alarm
    standard error 0.0016", or for LBP its iterations, convergence and "unchecked" (LBP's error is
    not known: `fastlbp check` measures it).
    """
    return method_of(rnd.method).describe(rnd)


def summary_dict(rnd: Round) -> dict:
    """The JSON fields of how a round was made: method, how, flags, the method's own (`Method.json_fields`:
    the sampler's sizes) and why "auto" chose it."""
    import numpy as np

    row = method_of(rnd.method)
    out = {"method": rnd.method, "how": row.describe(rnd), "flags": list(getattr(rnd, "flags", ()) or ()),
           **row.json_fields(rnd)}
    if int((rnd.info or {}).get("devices", 1)) > 1:
        out["devices"] = int(rnd.info["devices"])
    if getattr(rnd, "reason", None):
        out["reason"] = rnd.reason
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in out.items()}


__all__ = ["Method", "LBPMethod", "ExactMethod", "SampleMethod", "METHODS", "AUTO", "names", "methods_help",
           "auto_fallback", "reference_names", "chooses", "method_of", "check_name", "may_run", "Choice",
           "choose", "describe", "summary_dict", "measured_speed", "is_forest", "LBP_CAVEAT",
           "AUTO_EXACT_MEMORY", "AUTO_EXACT_VARS", "AUTO_MIN_WORLDS"]
