"""PARALL over several devices: each device holds a part of the factors, the cut's sums exchanged.

    layout = build(graph, devices=4)                       # host: partition, local graphs, plans
    runner = make_runner(model, plan, devices=4)          # a `loop.Runner` (global messages in and out)
    out = layout.run_local(messages, evidence, controls)  # the (N, E_d) per-device arrays, kept sharded

Every factor, with all its edges, lives on one device (`partition.factor_parts`: runs of a reverse
Cuthill-McKee order of equal edge counts), so the factor side of a sweep (the leave-one-out body sums,
the four message kinds) is the one-device engine's own code (`parall.sweep`) on the device's local
graph. A device's local graph numbers its factors, edges and variables in the global order restricted
to its part, so a variable none of whose factors sit elsewhere sums the same messages in the same
order as one device does: its messages and marginal are one device's, bit for bit. A variable whose
factors sit on several devices is *on the cut*: each device sums its own incoming messages, the sums
are added across devices with one `psum` of the cut's (C, 3) array per iteration (the finite sum and
the counts of +inf and -inf terms), and every device holding the variable reads the total. Only the
additions' order differs from one device's, so results agree to rounding (tests: within 1e-12).
The evidence is added by the variable's owner (the device of its first factor) only.

The loop is the engines' shared one (`loop.iterate`) with the exchange as its `aggregates` and the
convergence test's largest change and conflict reduced with `pmax` (`across`), so every device runs
the same iterations. Local arrays are padded to the largest part (padding factors of no effect on
padding variables), and each part's segment plans (`segments.SegmentPlan`) to the largest plan, so
one program runs on every device (`jax.shard_map`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec
from scipy.special import expit

from fastlbp.core import equations
from fastlbp.core.graph import AND, FactorGraph, from_arrays
from fastlbp.core.jax_setup import float64
from fastlbp.core.segments import FIRST_WIDTH, WIDTH, SegmentPlan
from fastlbp.engines import mesh as meshes
from fastlbp.engines import parall, partition
from fastlbp.engines.loop import PARAMS, Controls, Runner, RunnerInfo, RunResult, graph_of, iterate, plan_for

# The sum methods of the local graphs: the dense plans ("xla", padded to one shape) or XLA's scatter.
SUMMATIONS = ("xla", "scatter")


def pad_plans(plans: list[SegmentPlan], source_size: int) -> list[SegmentPlan]:
    """The plans with their levels padded to the largest of each level: one shape for every device.

    Level i of a plan indexes level i - 1's outputs (level 0: a source of `source_size`), the index
    one past the end reading 0; `final` indexes the concatenation of every level's outputs and a
    trailing 0. A padded row reads only the zero; indices into a padded level are moved past its
    padding where they read the zero, and `final` is renumbered into the padded concatenation.
    """
    depth = max(len(p.levels) for p in plans)
    rows = [max([int(p.levels[i].shape[0]) for p in plans if i < len(p.levels)] + [1]) for i in range(depth)]
    widths = [FIRST_WIDTH if i == 0 else WIDTH for i in range(depth)]
    for p in plans:
        for i, lv in enumerate(p.levels):
            widths[i] = int(lv.shape[1])  # the builder's own widths
    bases = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    out = []
    for p in plans:
        levels = []
        own_rows = [int(lv.shape[0]) for lv in p.levels]
        own_bases = np.concatenate([[0], np.cumsum(own_rows)]).astype(np.int64)
        for i in range(depth):
            sentinel = source_size if i == 0 else rows[i - 1]
            idx = np.full((rows[i], widths[i]), sentinel, np.int64)
            if i < len(p.levels):
                lv = np.asarray(p.levels[i], np.int64)
                own_sentinel = source_size if i == 0 else own_rows[i - 1]
                idx[:lv.shape[0]] = np.where(lv == own_sentinel, sentinel, lv)
            levels.append(idx.astype(np.int32))
        final = np.asarray(p.final, np.int64)
        level_of = np.searchsorted(own_bases, final, side="right") - 1  # the level each sum comes from
        within = final < own_bases[-1]
        renumbered = np.where(within, bases[np.minimum(level_of, depth - 1)] + final
                              - own_bases[np.minimum(level_of, len(own_rows))], bases[-1])
        out.append(SegmentPlan(levels=tuple(levels), final=renumbered.astype(np.int32)))
    return out


@dataclasses.dataclass(frozen=True)
class Parts:
    """A graph cut into per-device local graphs (host numpy; `build`).

    Attributes:
        devices: N, parts and devices.
        factor_part: (F,) int32 each factor's part.
        graphs: the local graphs stacked, (N, ...) per `FactorGraph` field.
        sums: the local graphs' `equations.Summation`, stacked (N, ...).
        edge_index: (N, E_pad) int32 the global edge of each local edge (E: padding).
        factor_index: (N, F_pad) int32 the global factor of each local factor (F: padding).
        var_index: (N, V_pad) int32 the global variable of each local variable (V: padding).
        owned: (N, V_pad) bool this part writes the variable's marginal and adds its evidence.
        cut_index: (N, V_pad) int32 the variable's place among the cut's variables (C: not on it).
        cut: C, variables on the cut.
        edges: (N,) real edges per part.
        num_vars, num_edges: the global graph's sizes.
    """

    devices: int
    factor_part: np.ndarray
    graphs: FactorGraph
    sums: equations.Summation
    edge_index: np.ndarray
    factor_index: np.ndarray
    var_index: np.ndarray
    owned: np.ndarray
    cut_index: np.ndarray
    cut: int
    edges: np.ndarray
    num_vars: int
    num_edges: int


def cut_graph(graph: FactorGraph, parts: int, factor_part: np.ndarray | None = None,
              summation: str = "xla") -> Parts:
    """The local graphs of `parts` parts of `graph` (host work, numpy; see the module docstring).

    Args:
        graph: the factor graph (host arrays).
        parts: N.
        factor_part: (F,) each factor's part (default `partition.factor_parts`).
        summation: the local graphs' segment sums, "xla" (plans padded to one shape) or "scatter".
    """
    if summation not in SUMMATIONS:
        raise ValueError(f"sharded PARALL sums segments by {' or '.join(SUMMATIONS)}, not {summation!r}")
    g = graph.to_numpy()
    nv, ne = g.num_vars, g.num_edges
    part = partition.factor_parts(g, parts) if factor_part is None else np.asarray(factor_part, np.int32)
    edge_factor = np.asarray(g.edge_factor, np.int64)
    edge_var = np.asarray(g.edge_var, np.int64)
    edge_part = part[edge_factor]
    # The owner of a variable: the part of its first factor (variable order); a variable in no factor: 0.
    var_offsets = np.asarray(g.var_offsets, np.int64)
    has = np.diff(var_offsets) > 0
    owner = np.zeros(nv, np.int64)
    owner[has] = edge_part[np.asarray(g.var_edges, np.int64)[var_offsets[:-1][has]]]
    pairs = np.unique(edge_var * parts + edge_part)
    on_cut = np.bincount(pairs // parts, minlength=nv) > 1
    cut_pos = np.full(nv, -1, np.int64)
    cut_pos[on_cut] = np.arange(int(on_cut.sum()))
    cut = int(on_cut.sum())

    locals_ = []
    for d in range(parts):
        edges = np.flatnonzero(edge_part == d)
        factors = np.flatnonzero(part == d)
        variables = np.unique(edge_var[edges])
        if d == 0:
            variables = np.union1d(variables, np.flatnonzero(~has))
        locals_.append((edges, factors, variables))
    # Padding: at least one padding factor per part (F_pad = most factors + 1); the last padding factor
    # of a part takes a body of padding variables for the edges the part lacks.
    f_pad = max(f.size for _, f, _ in locals_) + 1
    e_pad = max(e.size + f_pad - f.size for e, f, _ in locals_)
    extra = [e_pad - e.size - (f_pad - f.size) for e, f, _ in locals_]
    v_pad = max(v.size + 1 + x for (_, _, v), x in zip(locals_, extra, strict=True))

    kind, p1, p2 = np.asarray(g.factor_kind), np.asarray(g.p1), np.asarray(g.p2)
    head = np.asarray(g.factor_head, np.int64)
    factor_offsets = np.asarray(g.factor_offsets, np.int64)
    is_head = np.asarray(g.edge_is_head, bool)
    graphs, edge_index, factor_index, var_index, owned, cut_index, edge_counts = [], [], [], [], [], [], []
    for d, ((edges, factors, variables), x) in enumerate(zip(locals_, extra, strict=True)):
        local_of = np.full(nv, -1, np.int64)
        local_of[variables] = np.arange(variables.size)
        nf, npad = factors.size, f_pad - factors.size
        dummy_head = variables.size  # the padding factors' head; their bodies: the variables after it
        body = local_of[edge_var[edges[~is_head[edges]]]]
        sizes = np.diff(factor_offsets)[factors] - 1
        pad_sizes = np.zeros(npad, np.int64)
        pad_sizes[-1] = x
        offsets = np.concatenate([[0], np.cumsum(np.concatenate([sizes, pad_sizes]))])
        body = np.concatenate([body, dummy_head + 1 + np.arange(x)])
        # Padding factors: AND, p1 = p2 = 1/2 (their messages are 0: no effect on anything).
        k = np.concatenate([kind[factors], np.full(npad, AND)])
        h = np.concatenate([local_of[head[factors]], np.full(npad, dummy_head)])
        q1 = np.concatenate([p1[factors], np.full(npad, 0.5)])
        q2 = np.concatenate([p2[factors], np.full(npad, 0.5)])
        graphs.append(from_arrays(k, h, offsets, body, q1, q2, num_vars=v_pad, check_coverage=False))
        ei = np.full(e_pad, ne, np.int64)
        ei[:edges.size] = edges  # real factors first, in global order: their edges in global order
        fi = np.full(f_pad, g.num_factors, np.int64)
        fi[:factors.size] = factors
        factor_index.append(fi)
        vi = np.full(v_pad, nv, np.int64)
        vi[:variables.size] = variables
        own = np.zeros(v_pad, bool)
        own[:variables.size] = owner[variables] == d
        ci = np.full(v_pad, cut, np.int64)
        ci[:variables.size] = np.where(on_cut[variables], cut_pos[variables], cut)
        edge_index.append(ei)
        var_index.append(vi)
        owned.append(own)
        cut_index.append(ci)
        edge_counts.append(edges.size)
        assert nf + npad == f_pad and graphs[-1].num_edges == e_pad

    if summation == "xla":
        unpadded = [equations.summation(lg) for lg in graphs]
        var_plans = pad_plans([x.var for x in unpadded], e_pad)
        factor_plans = pad_plans([x.factor for x in unpadded], e_pad)
        sums = [equations.Summation(v, f, "xla") for v, f in zip(var_plans, factor_plans, strict=True)]
    else:
        sums = [equations.Summation(None, None, summation) for _ in graphs]

    def stack(*xs):
        return np.stack([np.asarray(x) for x in xs])

    i32 = np.int32
    return Parts(devices=parts, factor_part=part, graphs=jax.tree.map(stack, *graphs),
                 sums=jax.tree.map(stack, *sums), edge_index=stack(*edge_index).astype(i32),
                 factor_index=stack(*factor_index).astype(i32),
                 var_index=stack(*var_index).astype(i32), owned=stack(*owned),
                 cut_index=stack(*cut_index).astype(i32), cut=cut, edges=np.asarray(edge_counts),
                 num_vars=nv, num_edges=ne)


def _local_round(graph, sums, owned, cut_index, messages, evidence, ctl, *, cut: int, exchange: bool):
    """One device's round inside `shard_map`: (messages, log_odds, marginals, iterations, converged,
    delta, conflict), the arrays with a leading axis of 1."""
    axis = meshes.AXIS
    graph, sums, owned, cut_index, messages, evidence = jax.tree.map(
        lambda a: a[0], (graph, sums, owned, cut_index, messages, evidence))
    params = equations.factor_params(graph, messages.dtype)
    evidence = jnp.where(owned, evidence.astype(messages.dtype), 0)  # added once, by the owner
    on_cut = cut_index < cut

    def aggregates(msgs):
        part = equations.var_aggregates(graph, sums, msgs, evidence)
        if cut == 0 or not exchange:
            return part
        total = lax.psum(jnp.zeros((cut, 3), part.dtype).at[cut_index].set(part, mode="drop"), axis)
        return jnp.where(on_cut[:, None], total[jnp.minimum(cut_index, cut - 1)], part)

    def across(delta, conflict):
        return lax.pmax(delta, axis), lax.pmax(conflict.astype(jnp.int32), axis) > 0

    def sweep(g, lay, msgs, agg, ev, it):
        return parall.sweep(g, lay, msgs, agg, params)

    r = iterate(sweep, graph, sums, sums, messages, evidence, ctl, aggregates=aggregates, across=across)
    return (r.messages[None], r.log_odds[None], r.iterations, r.converged, r.delta, r.conflict)


def _sharded_round(mesh, cut: int, exchange: bool):
    """`_local_round` over `mesh`: (graphs, sums, owned, cut_index, messages, evidence, controls), the
    first six (N, ...) arrays split over the mesh, -> (messages, log_odds) split, then iterations,
    converged, delta, conflict."""
    split, whole = PartitionSpec(meshes.AXIS), PartitionSpec()
    return jax.shard_map(functools.partial(_local_round, cut=cut, exchange=exchange), mesh=mesh,
                         in_specs=(split,) * 6 + (whole,), out_specs=(split, split) + (whole,) * 4,
                         check_vma=False)


class DeviceParts(NamedTuple):
    """`Parts`' arrays on the devices of a mesh, each device holding its row (a pytree: the runner's
    layout, an argument of the jitted round)."""

    graphs: FactorGraph
    sums: equations.Summation
    owned: jax.Array
    cut_index: jax.Array
    edge_index: jax.Array
    factor_index: jax.Array
    var_index: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class Layout:
    """`Parts` on the devices of a mesh and the jitted rounds (`build`).

    Attributes:
        parts: the host arrays.
        mesh: the devices' mesh.
        arrays: the arrays on the devices (`DeviceParts`).
    """

    parts: Parts
    mesh: jax.sharding.Mesh
    arrays: DeviceParts

    @functools.cached_property
    def _local(self):
        return {x: jax.jit(_sharded_round(self.mesh, self.parts.cut, x)) for x in (True, False)}

    @float64
    def local_messages(self, messages: np.ndarray | jax.Array) -> jax.Array:
        """(E,) global messages as the (N, E_pad) per-device arrays, each row on its device."""
        m = np.asarray(messages)
        out = np.concatenate([m, np.zeros(1, m.dtype)])[self.parts.edge_index]
        return jax.device_put(out, meshes.split(self.mesh))

    @float64
    def local_evidence(self, evidence: np.ndarray | jax.Array) -> jax.Array:
        """(V,) global evidence as (N, V_pad) per-device arrays (padding 0)."""
        e = np.asarray(evidence)
        out = np.concatenate([e, np.zeros(1, e.dtype)])[self.parts.var_index]
        return jax.device_put(out, meshes.split(self.mesh))

    @float64
    def run_local(self, messages: jax.Array, evidence: jax.Array, ctl: Controls, *, exchange: bool = True):
        """A round on the per-device arrays: (messages (N, E_pad), log_odds (N, V_pad), iterations,
        converged, delta, conflict). `exchange=False` skips the cut's sums (wrong results: benchmarks
        time the exchange's share with it)."""
        a = self.arrays
        return self._local[exchange](a.graphs, a.sums, a.owned, a.cut_index, messages, evidence, ctl)

    def gather(self, local) -> RunResult:
        """A round's per-device result (`run_local`) as one device's `RunResult` (global arrays, host)."""
        msgs, lo, it, conv, delta, conflict = local
        p = self.parts
        m = np.asarray(msgs)
        out = np.zeros(p.num_edges + 1, m.dtype)
        out[p.edge_index.reshape(-1)] = m.reshape(-1)
        log_odds = np.zeros(p.num_vars + 1, m.dtype)
        own = p.owned.reshape(-1)
        log_odds[p.var_index.reshape(-1)[own]] = np.asarray(lo).reshape(-1)[own]
        log_odds = log_odds[:-1]
        marginals = expit(log_odds)
        return RunResult(messages=out[:-1], log_odds=log_odds, marginals=marginals, iterations=it,
                         converged=conv, delta=delta, conflict=conflict)


@float64
def build(graph: FactorGraph, devices: int | list | None = None, *, factor_part: np.ndarray | None = None,
          summation: str = "xla") -> Layout:
    """The sharded layout of `graph` on `devices` (a count of JAX's visible devices, None: all; or a
    list), each device holding only its part."""
    chosen = list(devices) if isinstance(devices, list | tuple) else meshes.devices_for(devices)
    mesh = meshes.mesh_of(chosen)
    parts = cut_graph(graph_of(graph), len(chosen), factor_part, summation)
    arrays = DeviceParts(parts.graphs, parts.sums, parts.owned, parts.cut_index, parts.edge_index,
                         parts.factor_index, parts.var_index)
    return Layout(parts=parts, mesh=mesh, arrays=jax.device_put(arrays, meshes.split(mesh)))


def _global_run(layout: Layout):
    """The `Runner.run` of a layout: global (E,) messages and (V,) evidence in, a `RunResult` out. The
    factors' kinds and probabilities are read from the graph it is handed (`loop.PARAMS`: a model
    whose probabilities changed, by learning, needs no new layout); the rest from the layout."""
    p = layout.parts
    fn = _sharded_round(layout.mesh, p.cut, True)

    def run(graph, lay, messages, evidence, ctl):
        local = lay.graphs

        def per_factor(values, padding, like):
            return jnp.take(values, lay.factor_index, mode="fill", fill_value=padding).astype(like.dtype)

        graphs = dataclasses.replace(local, p1=per_factor(graph.p1, 0.5, local.p1),
                                     p2=per_factor(graph.p2, 0.5, local.p2),
                                     factor_kind=per_factor(graph.factor_kind, AND, local.factor_kind))
        msgs = jnp.take(messages, lay.edge_index, mode="fill", fill_value=0)
        ev = jnp.take(evidence.astype(messages.dtype), lay.var_index, mode="fill", fill_value=0)
        m, lo, it, conv, delta, conflict = fn(graphs, lay.sums, lay.owned, lay.cut_index, msgs, ev, ctl)
        out = jnp.zeros(p.num_edges, m.dtype).at[lay.edge_index].set(m, mode="drop")
        where = jnp.where(lay.owned, lay.var_index, p.num_vars)
        log_odds = jnp.zeros(p.num_vars, m.dtype).at[where].set(lo, mode="drop")
        return RunResult(messages=out, log_odds=log_odds, marginals=jax.nn.sigmoid(log_odds), iterations=it,
                         converged=conv, delta=delta, conflict=conflict)

    jitted = jax.jit(run)
    whole = meshes.replicated(layout.mesh)

    def placed(graph, lay, messages, evidence, ctl):
        # The round's inputs on every device of the mesh (a session's arrays may sit on one).
        put = functools.partial(jax.device_put, device=whole)
        return jitted(put(graph), lay, put(messages), put(evidence), ctl)

    return placed


def make_runner(model, plan=None, *, devices: int | list | None = None) -> Runner:
    """PARALL on `devices` (None: every visible device) as a `loop.Runner`: global messages and evidence
    in and out, like the one-device engine's (`parall.make_runner`); of the graph it is handed it reads
    only the factors' kinds and probabilities (`loop.PARAMS`): each device already holds its part."""
    plan = plan_for(model, plan)
    start = time.perf_counter()
    summation = plan.summation_name if plan.summation_name in SUMMATIONS else "xla"
    layout = build(graph_of(model), devices, summation=summation)
    why = f"sharded over {layout.parts.devices} devices ({layout.parts.cut:,} variables on the cut)"
    info = RunnerInfo(backend=summation, reason=why, layout_seconds=time.perf_counter() - start,
                      devices=layout.parts.devices)
    return Runner(name=f"parall/sharded/{summation}", layout=layout.arrays, run=_global_run(layout),
                  info=info, reads=PARAMS)


__all__ = ["Parts", "Layout", "DeviceParts", "cut_graph", "build", "make_runner", "pad_plans", "SUMMATIONS"]
