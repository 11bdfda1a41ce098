"""Exact marginals of every variable by bucket elimination (`method="exact"`).

    result = exact_marginals(model, labels, settings)     # fastlbp.engines.marginals.Marginals

Steps (each its own module):

1. `binarize`: every AND/OR factor becomes tables over at most three
   variables through deterministic auxiliary variables (a_i = a_{i-1} op x_i),
   so no table is exponential in a factor's fan-in (weblech's widest factor
   has 33 body variables: 2^34 entries as one table).
2. Labels clamp variables: each table is sliced at the label, so a labelled
   variable leaves the interaction graph (it lowers the width, never raises it).
3. `order`: a min-fill elimination order on the host and the bucket tree it
   implies; the induced width and the size of every table are known before any
   device work, and a plan over `Settings.exact_memory` is refused
   (`ExactTooWide`), naming the width and the memory it would need.
4. `eliminate`: the forward and backward passes over log-space tables, each
   table laid out with its eliminated variable as the contiguous last axis.

Marginals of every variable: the two-pass bucket tree (junction-tree style),
not one elimination per query. With n buckets of sizes s_i (largest 2^(w+1))
one elimination costs C = sum s_i operations. The forward pass is one
elimination (C); the backward pass gives every bucket its belief with one
marginalisation of the parent's belief and one broadcast sum per bucket
(<= 2C). So all V marginals cost about 3C and the memory of the tables kept
between the passes (sum s_i, `Plan.bytes_needed`). One elimination per query
costs V * C: weblech has 456 variables (about 1,600 after binarisation), so
three eliminations' work instead of 456. Batching the queries on the device
would hide latency but not that work, and would need V times the memory.

Evidence of probability 0 raises `fastlbp.errors.ContradictoryEvidence`
naming a conflicting subset of the labels (`fastlbp.constraints`); a model
whose factors alone have probability 0 raises `InferenceError`.
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np

from fastlbp.constraints import conflicting_labels
from fastlbp.engines.exact.binarize import Binarized, Table, binarize
from fastlbp.engines.exact.eliminate import eliminate
from fastlbp.engines.exact.order import BYTES, Plan, plan
from fastlbp.engines.marginals import Marginals
from fastlbp.errors import ContradictoryEvidence, InferenceError, SettingsError
from fastlbp.graph import FactorGraph
from fastlbp.settings import Settings

CPU_MEMORY = 2 * 2**30  # default budget where the device reports no memory (a CPU)


class ExactTooWide(SettingsError):
    """The elimination's tables would not fit the memory budget (`Settings.exact_memory`)."""

    def __init__(self, width: int, needed: int, budget: int, *, at_least: bool = False):
        self.width = width
        self.needed = needed
        self.budget = budget
        more = "at least " if at_least else ""
        super().__init__(
            f"exact inference is too wide for this graph: induced width {more}{width} (min-fill order), "
            f"its tables need {more}{_size(needed)} but exact_memory allows {_size(budget)}; "
            "use --method sample (sampling with error bars) or raise exact_memory")


def _size(nbytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"


def memory_budget(settings: Settings) -> int:
    """`settings.exact_memory`, or a quarter of the default device's memory (2 GiB where unknown)."""
    if settings.exact_memory is not None:
        return int(settings.exact_memory)
    stats = jax.devices()[0].memory_stats() or {}
    limit = stats.get("bytes_limit")
    return int(limit) // 4 if limit else CPU_MEMORY


def clamp(bz: Binarized, labels: dict[int, bool]) -> list[Table]:
    """The tables with labelled variables sliced at their labels (scalars where nothing is left)."""
    out = []
    for t in bz.tables:
        if not any(v in labels for v in t.scope):
            out.append(t)
            continue
        index = tuple(int(labels[v]) if v in labels else slice(None) for v in t.scope)
        out.append(Table(tuple(v for v in t.scope if v not in labels), t.values[index]))
    return out


def _log_tables(tables: list[Table], p: Plan) -> tuple[list[np.ndarray], list[tuple[int, ...]]]:
    """Log tables with their axes latest-eliminated first (the plan's layout)."""
    pos = {int(v): i for i, v in enumerate(p.order)}
    logs, scopes = [], []
    with np.errstate(divide="ignore"):
        for t in tables:
            perm = sorted(range(len(t.scope)), key=lambda k: -pos[t.scope[k]])
            scopes.append(tuple(t.scope[k] for k in perm))
            logs.append(np.log(np.transpose(t.values, perm)))
    return logs, scopes


def _inputs(model_or_graph, labels):
    if isinstance(model_or_graph, FactorGraph):
        graph, names = model_or_graph, None
        labels = dict(labels or {})
    else:
        graph, names = model_or_graph.graph, model_or_graph.var_names
        labels = dict(model_or_graph.labels if labels is None else labels)
    num_vars = graph.num_vars
    out = {}
    for v, truth in labels.items():
        if int(v) != v or not 0 <= v < num_vars:
            raise SettingsError(f"label for variable {v!r}, but the graph has variables 0..{num_vars - 1}")
        out[int(v)] = bool(truth)
    return graph, names, out


def exact_marginals(model_or_graph, labels: dict[int, bool] | None = None,
                    settings: Settings | None = None, *, host_below: int | None = None) -> Marginals:
    """P(x=1 | labels) for every variable, exactly.

    Args:
        model_or_graph: a `fastlbp.model.Model` or a `FactorGraph`.
        labels: {variable: truth}; None: the model's labels (none for a graph).
        settings: `exact_memory` is the budget (None: a quarter of the device's memory).
        host_below: buckets with fewer entries run in numpy on the host (0: all on the device; None:
            `eliminate.default_host_below()`: large buckets on a GPU, none on a CPU).

    Returns:
        `Marginals` with method "exact", zero stderr and info: width, heuristic,
        largest_entries, buckets, bytes, aux_vars, log_evidence, plan_seconds,
        device_buckets.

    Raises:
        ExactTooWide: the tables would exceed the budget (before any device work).
        ContradictoryEvidence: the labels have probability 0.
        InferenceError: the model's factors alone have probability 0.
    """
    start = time.perf_counter()
    settings = settings or Settings()
    graph, names, labels = _inputs(model_or_graph, labels)
    num_vars = graph.num_vars
    bz = binarize(graph.factors(), num_vars)
    tables = clamp(bz, labels)
    free = [v for v in range(bz.num_total) if v not in labels]
    budget = memory_budget(settings)
    # A bucket over more variables than this alone exceeds the budget: ordering stops there.
    most = max(1, int(math.log2(max(budget, BYTES) / BYTES)))
    p = plan([t.scope for t in tables], free, max_scope=most)
    if p is None or p.bytes_needed > budget:
        width = most if p is None else p.width
        needed = BYTES * 2 ** (most + 1) if p is None else p.bytes_needed
        raise ExactTooWide(width, needed, budget, at_least=p is None)
    plan_seconds = time.perf_counter() - start
    logs, scopes = _log_tables(tables, p)
    result = eliminate(p, logs, scopes, host_below=host_below)
    if not np.isfinite(result.log_evidence):
        if not labels:
            raise InferenceError("the model has probability 0: its hard (0/1) parameters contradict each "
                                 "other with no labels")
        core = conflicting_labels(graph, labels) or labels
        raise ContradictoryEvidence({(names[v] if names is not None else str(v)): t for v, t in core.items()})
    log_odds = np.zeros(num_vars)
    for v, truth in labels.items():
        log_odds[v] = np.inf if truth else -np.inf
    lm = result.log_marginals
    with np.errstate(invalid="ignore"):
        for i, v in enumerate(p.order):
            if v < num_vars:
                log_odds[v] = lm[i, 1] - lm[i, 0]
    small = np.exp(-np.abs(log_odds))  # the sigmoid without overflow
    marginals = np.where(log_odds >= 0, 1.0, small) / (1.0 + small)
    info = {"width": p.width, "heuristic": p.heuristic, "largest_entries": p.largest, "buckets": len(p.order),
            "bytes": p.bytes_needed, "aux_vars": bz.num_total - num_vars, "log_evidence": result.log_evidence,
            "plan_seconds": plan_seconds, "device_buckets": result.device_buckets,
            "device": jax.default_backend()}
    return Marginals("exact", marginals, log_odds, np.zeros(num_vars), time.perf_counter() - start, info)


__all__ = ["exact_marginals", "ExactTooWide", "memory_budget", "clamp", "binarize", "plan", "eliminate"]
