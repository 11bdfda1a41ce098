"""Exact marginals of every variable by bucket elimination (`method="exact"`).

    result = exact_marginals(model, labels, settings)     # fastlbp.engines.marginals.Marginals

Steps (each its own module):

1. `binarize`: every AND/OR factor becomes tables over at most three
   variables through deterministic auxiliary variables (a_i = a_{i-1} op x_i),
   so no table is exponential in a factor's fan-in (weblech's widest factor
   has 33 body variables: 2^34 entries as one table).
2. Labels clamp variables: each table is sliced at the label, so a labelled
   variable leaves the interaction graph (it lowers the width, never raises it).
3. `order`: a min-fill elimination order (min-degree from `MIN_FILL_BELOW`
   variables) on the host and the bucket tree it
   implies; the induced width and the size of every table are known before any
   device work, and a plan over `Settings.exact_memory` is refused
   (`ExactTooWide`), naming the width and the memory it would need.
4. `program`: the layout of one plan: small buckets on the host (numpy, gathers
   precomputed), large ones and their ancestors in one device arena
   (`kernels`: keyed by chunk size, not by ranks), each table with its
   eliminated variable as the lowest bit (the contiguous last axis).
5. `eliminate`: the forward and backward passes over log-space tables: host
   forward, one upload, the device's rows, one download, host backward.

`Engine` keeps steps 1, 3 and 4 per graph and labelled set, so a repeated
call only fills the input tables and runs step 5.

Marginals of every variable: the two-pass bucket tree (junction-tree style),
not one elimination per query. With n buckets of sizes s_i (largest 2^(w+1))
one elimination costs C = sum s_i operations. The forward pass is one
elimination (C); the backward pass gives every bucket its belief with one
marginalisation of the parent's belief and one broadcast sum per bucket
(<= 2C). So all V marginals cost about 3C and the memory of the tables kept
between the passes (sum s_i, `BucketTree.bytes_needed`). One elimination per query
costs V * C: weblech has 456 variables (about 1,600 after binarisation), so
three eliminations' work instead of 456. Batching the queries on the device
would hide latency but not that work, and would need V times the memory.

Evidence of probability 0 raises `fastlbp.core.errors.ContradictoryEvidence`
naming a conflicting subset of the labels (`fastlbp.core.constraints`); a model
whose factors alone have probability 0 raises `InferenceError`.
"""

from __future__ import annotations

import math
import time
import weakref
from collections import OrderedDict

import jax
import numpy as np

from fastlbp.core.constraints import conflicting_labels
from fastlbp.core.errors import ContradictoryEvidence, InferenceError, SettingsError
from fastlbp.core.graph import FactorGraph
from fastlbp.core.jax_setup import float64
from fastlbp.core.settings import Settings
from fastlbp.engines.exact import kernels, program
from fastlbp.engines.exact.binarize import Binarized, Table, binarize
from fastlbp.engines.exact.eliminate import Arena, default_host_below, run, run_many
from fastlbp.engines.exact.order import BYTES, BucketTree, plan
from fastlbp.engines.marginals import Marginals

CPU_MEMORY = 2 * 2**30  # default budget where the device reports no memory (a CPU)
MIN_FILL_BELOW = 20_000  # free variables (after binarisation) from which the order is min-degree's


class ExactTooWide(SettingsError):
    """The elimination's tables would not fit the memory budget (`Settings.exact_memory`)."""

    def __init__(self, width: int, needed: int, budget: int, *, at_least: bool = False,
                 heuristic: str = "min-fill"):
        self.width = width
        self.needed = needed
        self.budget = budget
        more = "at least " if at_least else ""
        super().__init__(
            f"exact inference is too wide for this graph: induced width {more}{width} ({heuristic} order), "
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


class Engine:
    """Exact inference on one graph, with what does not depend on the labels kept between calls.

    Kept: the binarised tables and their logs; per labelled set (the last `PLANS`), the min-fill plan and
    its layout (`program.Program`); the device arena. A repeated call with the same labelled variables
    (any values) does no planning; a call with new ones plans once (a fresh min-fill order: the
    unlabelled order with the labelled variables left out keeps a valid order but, on 8 x 8 to 14 x 14
    grids with 1-20 labels, its tables took a median 1.7-3.7 times the memory and up to 57 times).
    Device kernels are keyed by size class and arena shape only (`kernels`), the arena is sized for the
    unlabelled plan where that fits the budget, and every size class up to its largest bucket is
    compiled before the first device run (`warm`), so new labels compile nothing.

    Args:
        graph: the factor graph.
        host_below: buckets with fewer entries run in numpy on the host (0: all on the device; None:
            `eliminate.default_host_below()`: large buckets on a GPU, none on a CPU).
        chunks: the device kernels' smallest and largest chunk (`kernels.CHUNKS`, `kernels.chunk_of`;
            small ones in tests make buckets span several chunks).
        warm: compile every kernel up to the largest bucket before the first device run, so later label
            sets compile nothing (`kernels.warm`); None: on a GPU only (on a CPU the device kernels run
            only when asked for, in tests and benchmarks, where compiling dominates).
    """

    PLANS = 16

    def __init__(self, graph: FactorGraph, host_below: int | None = None,
                 chunks: tuple[int, ...] = kernels.CHUNKS, warm: bool | None = None):
        self.num_vars = graph.num_vars
        self.binarized = binarize(graph.factors(), self.num_vars)
        self.scopes = [t.scope for t in self.binarized.tables]
        with np.errstate(divide="ignore"):
            logs = [np.log(t.values).ravel() for t in self.binarized.tables]
        self.offsets = np.cumsum([0] + [len(x) for x in logs])[:-1].astype(np.int64)
        self.logflat = np.concatenate(logs) if logs else np.zeros(0)
        self.host_below = default_host_below() if host_below is None else int(host_below)
        self.chunks = tuple(sorted(int(c) for c in chunks))
        if any(c < 2 or c & (c - 1) for c in self.chunks) or not self.chunks:
            raise SettingsError(f"chunk sizes must be powers of two >= 2, got {chunks}")
        self.arena = Arena(self.chunks, jax.default_backend() == "gpu" if warm is None else bool(warm))
        self._plans: OrderedDict = OrderedDict()

    def plan(self, labelled: frozenset, most: int) -> BucketTree | None:
        """The min-fill plan with `labelled` clamped (None: a bucket over `most` variables), cached."""
        key = (labelled, most)
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key][0]
        scopes = [tuple(v for v in s if v not in labelled) for s in self.scopes]
        free = [v for v in range(self.binarized.num_total) if v not in labelled]
        p = plan(scopes, free, self.heuristic(len(free)), max_scope=most)
        self._plans[key] = [p, None]
        if len(self._plans) > self.PLANS:
            self._plans.popitem(last=False)
        return p

    @staticmethod
    def heuristic(num_free: int) -> str:
        """min-fill below `MIN_FILL_BELOW` free variables, else min-degree.

        min-fill rescores the neighbours of every neighbour of an eliminated variable; a derivation
        graph's hub tuples (used by thousands of clauses) make that quadratic: avrora (42,991
        variables after binarisation) ran for minutes, min-degree refuses it in about a second.
        """
        return "min-fill" if num_free < MIN_FILL_BELOW else "min-degree"

    def program(self, labelled: frozenset, most: int) -> program.Program:
        entry = self._plans[(labelled, most)]
        if entry[1] is None:
            entry[1] = program.build(entry[0], self.scopes, self.offsets, labelled, self.host_below,
                                     self.chunks)
        return entry[1]

    def _reserve(self, prog: program.Program, most: int, budget: int) -> None:
        """Size the arena for the unlabelled plan too (when it fits), before the first device run."""
        if self.arena.size or not prog.device_buckets:
            return
        full = self.plan(frozenset(), most)
        if full is not None and full.bytes_needed <= budget:
            big = self.program(frozenset(), most)
            if BYTES * big.device_size <= budget:
                self.arena.reserve(big)

    def inputs(self, prog: program.Program, labels: dict[int, bool], logflat: np.ndarray | None = None
               ) -> np.ndarray:
        """The clamped log tables of `prog` at these label values: (N,) from `self.logflat`, or (B, N)
        from `logflat` (B, L) (a batch of the tables' log values, `exact_marginals_many`)."""
        values = np.zeros(self.binarized.num_total + 1, np.int64)  # index -1 (no label): 0
        for v, truth in labels.items():
            values[v] = int(truth)
        at = prog.src + (values[prog.lab_var] * prog.lab_stride).sum(axis=1)
        return self.logflat[at] if logflat is None else np.asarray(logflat, np.float64)[:, at]


_ENGINES: OrderedDict = OrderedDict()  # id(graph) -> (weakref to graph, host_below, chunks, Engine)


def engine_for(graph: FactorGraph, host_below: int | None = None,
               chunks: tuple[int, ...] = kernels.CHUNKS) -> Engine:
    """The `Engine` of this graph object (one of the last 4 used), made on first use."""
    hb = default_host_below() if host_below is None else int(host_below)
    hit = _ENGINES.get(id(graph))
    if hit is not None and hit[0]() is graph and hit[1] == hb and hit[2] == tuple(chunks):
        _ENGINES.move_to_end(id(graph))
        return hit[3]
    engine = Engine(graph, hb, chunks)
    for *_, other in _ENGINES.values():  # one device arena at a time (each may take the whole budget);
        other.arena.buffer = None  # its size is kept, so a later run remakes it without compiling
    _ENGINES[id(graph)] = (weakref.ref(graph), hb, tuple(chunks), engine)
    while len(_ENGINES) > 4:
        _ENGINES.popitem(last=False)
    return engine


def _program(engine: Engine, labels: dict[int, bool], settings: Settings):
    """(plan, program) of `engine` at the labelled set, within `settings`' memory budget.

    Raises:
        ExactTooWide: the tables would exceed the budget (before any device work).
    """
    budget = memory_budget(settings)
    # A bucket over more variables than this alone exceeds the budget: ordering stops there.
    most = max(1, int(math.log2(max(budget, BYTES) / BYTES)))
    labelled = frozenset(labels)
    p = engine.plan(labelled, most)
    if p is None or p.bytes_needed > budget:
        width = most if p is None else p.width
        needed = BYTES * 2 ** (most + 1) if p is None else p.bytes_needed
        raise ExactTooWide(width, needed, budget, at_least=p is None,
                           heuristic=engine.heuristic(engine.binarized.num_total - len(labelled)))
    prog = engine.program(labelled, most)
    engine._reserve(prog, most, budget)
    return p, prog


def _marginals(p: BucketTree, lm: np.ndarray, labels: dict[int, bool], num_vars: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """((V,) P(x=1), (V,) log odds) of the model's variables from the buckets' log marginals lm (n, 2)."""
    log_odds = np.zeros(num_vars)
    for v, truth in labels.items():
        log_odds[v] = np.inf if truth else -np.inf
    model_vars = p.order < num_vars
    with np.errstate(invalid="ignore"):
        log_odds[p.order[model_vars]] = lm[model_vars, 1] - lm[model_vars, 0]
    small = np.exp(-np.abs(log_odds))  # the sigmoid without overflow
    return np.where(log_odds >= 0, 1.0, small) / (1.0 + small), log_odds


def _contradiction(graph: FactorGraph, names, labels: dict[int, bool]) -> Exception:
    if not labels:
        return InferenceError("the model has probability 0: its hard (0/1) parameters contradict each other "
                              "with no labels")
    core = conflicting_labels(graph, labels) or labels
    return ContradictoryEvidence({(names[v] if names is not None else str(v)): t for v, t in core.items()})


@float64
def exact_marginals(model_or_graph, labels: dict[int, bool] | None = None,
                    settings: Settings | None = None, *, host_below: int | None = None,
                    engine: Engine | None = None) -> Marginals:
    """P(x=1 | labels) for every variable, exactly.

    Args:
        model_or_graph: a `fastlbp.core.model.Model` or a `FactorGraph`.
        labels: {variable: truth}; None: the model's labels (none for a graph).
        settings: `exact_memory` is the budget (None: a quarter of the device's memory).
        host_below: buckets with fewer entries run in numpy on the host (0: all on the device; None:
            `eliminate.default_host_below()`: large buckets on a GPU, none on a CPU).
        engine: the graph's `Engine` (None: `engine_for(graph, host_below)`, kept per graph object).

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
    if engine is None:
        engine = engine_for(graph, host_below)
    p, prog = _program(engine, labels, settings)
    plan_seconds = time.perf_counter() - start
    result = run(prog, engine.inputs(prog, labels), engine.arena)
    if not np.isfinite(result.log_evidence):
        raise _contradiction(graph, names, labels)
    marginals, log_odds = _marginals(p, result.log_marginals, labels, num_vars)
    info = {"width": p.width, "heuristic": p.heuristic, "largest_entries": p.largest, "buckets": len(p.order),
            "bytes": p.bytes_needed, "aux_vars": engine.binarized.num_total - num_vars,
            "log_evidence": result.log_evidence, "plan_seconds": plan_seconds,
            "device_buckets": result.device_buckets, "device": jax.default_backend()}
    return Marginals("exact", marginals, log_odds, np.zeros(num_vars), time.perf_counter() - start, info)


@float64
def exact_marginals_many(model_or_graph, labels: dict[int, bool] | None, settings: Settings | None,
                         engine: Engine, logflat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(x=1 | labels) for every variable under a batch of parameter values: one graph, one labelled set,
    B versions of its tables' log values (`Engine.logflat`'s layout), eliminated together
    (`eliminate.run_many`: the host passes cost about what one run's do).

    Args:
        model_or_graph, labels, settings: as `exact_marginals`.
        engine: the graph's `Engine` (its plan and program are used; its own `logflat` is not).
        logflat: (B, L) float64 log table entries per run.

    Returns:
        ((B, V) float64 marginals, (B,) float64 log P(labels)).

    Raises:
        ExactTooWide, ContradictoryEvidence, InferenceError: as `exact_marginals` (contradictory under
        any run of the batch).
    """
    settings = settings or Settings()
    graph, names, labels = _inputs(model_or_graph, labels)
    p, prog = _program(engine, labels, settings)
    lm, log_z = run_many(prog, engine.inputs(prog, labels, logflat), engine.arena)
    if not np.all(np.isfinite(log_z)):
        raise _contradiction(graph, names, labels)
    marginals = np.stack([_marginals(p, lm[k], labels, graph.num_vars)[0] for k in range(len(log_z))])
    return marginals, log_z


__all__ = ["exact_marginals", "exact_marginals_many", "Engine", "engine_for", "ExactTooWide", "memory_budget",
           "clamp", "binarize", "plan", "run"]
