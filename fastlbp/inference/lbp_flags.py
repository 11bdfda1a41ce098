"""The flags of an LBP round: cheap checks of when its answer should not be trusted (`Round.flags`).

(Not `fastlbp check`, which measures LBP against a reference: `fastlbp.inference.check`.)

    rnd = session.run()
    if fastlbp.inference.lbp_flags.flagged(rnd):
        print("\\n".join(rnd.flags))        # short sentences; () when nothing is suspicious

`Session.run` calls `flag_round` after every LBP round. It reads the round's
messages around the labelled variables and those the labels made hard only
(host numpy, one small gather from the device), so it costs little next to
the round; variables the hard constraints force without any label carry no
label's evidence and are left out (`forced_without_labels`, once a session). It looks for
three ways LBP misleads quietly:

Evidence lost (precision). A body term log m(1) or log m(0) is floored at
`logspace.term_floor` (2^-970 in float64, 2^-102 in float32), so a soft
message is never more extreme than `soft_limit` = 672.36 (70.70) nats of
log-odds. A label on a variable that LBP, before the label, believed at that
limit needs a message stronger than the limit to reach its causes: the
messages that carry it away are capped there, and each improbable factor on
the way divides what is left by its odds. Measured on two chains of 60 and 61
clauses (rule probability 1e-6) from one input s (prior 0.5) deriving `end`,
`end` labelled true (exact: P(s | end) = 1, as P(end | s = 0) = 0): the
forward messages saturate (each chain's last clause sends -686.17 = -672.35
+ ln 1e-6, not -829 and -843), so `end`'s cavity is two floored terms,
-(970 - 1) ln 2 = -671.66; its OR factor sends each last clause 672.35, the
cap, where 843 would be needed (the other chain's probability 0.5 * 1e-6^61
is far below the floor), and the 60 clauses take 60 ln 1e6 = 829 off on the
way back, so the message into s is 0.0: P(s) = 0.5, "converged" in 197
iterations. Chains of 45 clauses (cavity -622) still give 0.999999, of 48
(-663.8) 0.9999, of 49 (-671.66) 0.502; in float32 chains of 5 already lose
most of it (cavity -69.4 of a limit of 70.7, P(s) = 0.86). The check: a
labelled or hard variable whose cavity (its incoming messages without its
own evidence; finite messages only for a hard one) is within `SOFT_MARGIN`
nats of the limit against its value, while some factor that says so sends a
soft message on (`evidence_lost`). Where those factors pass the value on as
hard messages (one chain: every factor is deterministic in the direction of
the label, and P(s) comes out exactly 1) the evidence travels exactly and the
next hard variable is checked instead.

Messages that cancel. A round stops when no marginal moves; messages into a
variable that move while they cancel leave its marginal still. Three OR
facts over inputs a, b, c labelled true and three ANDs over them labelled
false have probability 0, which `fastlbp.core.constraints` cannot prove (it needs
a case split); PARALL stops after one iteration with every input at 0.5:
the messages into each input cancel exactly (+x from both ORs, -x from both
ANDs) while x grows like log(iterations) (0.69, 1.10, 1.39, ..., 6.9 after
1000). `residual_near_labels` recomputes the messages of the factors around
the labelled variables once from the round's state (the engines' own
`equations.factor_to_var`): 0.69 into a becomes 1.10, a relative change of
0.24, far above `RESIDUAL_TOL`. Messages into labelled or hard variables do
not count: they never reach a marginal, and do move on after ordinary
rounds have converged. Sequential schedules and asymmetric priors on the
same labels do not converge and need a remedy (damping 0.8 after 1000
iterations), with the labels' cavities at -165 to -672 (P below 1e-71): the
remedy's flag names the label LBP finds least likely.

Remedies. A round that converged only with damping, or averaged its last
iterations, or did not converge, says so.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp.core import equations, logspace
from fastlbp.core.graph import FactorGraph

# Nats short of `soft_limit` at which a cavity against a variable's value counts as at the limit: an OR
# tuple whose k derivations are all floored has cavity -(limit - ln k), so this covers k up to 1e10.
SOFT_MARGIN = 23.0
# Relative log-odds change (as `logspace.log_odds_change`) of a message around the labels into a soft
# variable, one more update after a converged round, that flags it (or 100 tol, when larger). Measured:
# at most 1.2e-7 after converged triage rounds of data/avrora.json.gz and data/ftp.json.gz (10 and 20
# labels, PARALL and SEQFIX); 0.24 in the contradictory labels of the module docstring.
RESIDUAL_TOL = 0.01
# A label whose cavity is this many nats against it is named in a remedy's flag (P below 1e-20; the
# labels of the benchmark graphs' triage runs measured above -29).
DOUBT_LOG_ODDS = 46.0


def flagged(rnd) -> bool:
    """Whether a `Round` carries any flag (`Round.flags`): its answer should not be trusted quietly."""
    return bool(getattr(rnd, "flags", ()))


def soft_limit(dtype) -> float:
    """The largest log-odds magnitude a soft message carries: -ln `logspace.term_floor` (672.36 in float64,
    70.70 in float32)."""
    return -math.log(logspace.term_floor(dtype))


def combine(agg: np.ndarray) -> np.ndarray:
    """(N, 3) [finite sum, #+inf, #-inf] -> (N,) log-odds; NaN where +inf meets -inf (`equations.combine`)."""
    pos, neg = agg[:, 1] > 0.5, agg[:, 2] > 0.5
    out = np.where(pos, np.inf, np.where(neg, -np.inf, agg[:, 0]))
    return np.where(pos & neg, np.nan, out)


def split_infinite(x: np.ndarray) -> np.ndarray:
    """(N,) log-odds -> (N, 3) float64 [finite part, is +inf, is -inf] (`equations.split_infinite`)."""
    x = np.asarray(x, np.float64)
    return np.stack([np.where(np.isfinite(x), x, 0.0), x == np.inf, x == -np.inf], -1).astype(np.float64)


def ranges(offsets: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR rows `items` of `offsets`, concatenated.

    Args:
        offsets: (R+1,) int CSR offsets.
        items: (n,) int rows.

    Returns:
        positions: (P,) int64 offsets[i]..offsets[i+1]-1 for each i of `items`, in order;
        owner: (P,) int64 the index into `items` of each position.
    """
    items = np.asarray(items, np.int64)
    # Index, then widen: widening the whole offsets first copied (V+1,) or (F+1,) per call, a quarter
    # of a round on the ftp-size graph.
    offsets = np.asarray(offsets)
    starts = offsets[items].astype(np.int64)
    lens = offsets[items + 1].astype(np.int64) - starts
    owner = np.repeat(np.arange(items.size), lens)
    first = np.cumsum(lens) - lens
    return starts[owner] + np.arange(owner.size) - first[owner], owner


def incoming(graph: FactorGraph, messages: np.ndarray, variables: np.ndarray) -> np.ndarray:
    """Each variable's incoming factor-to-variable messages summed, without its evidence (the cavity).

    Args:
        graph: the factor graph (numpy arrays: `var_offsets`, `var_edges`).
        messages: (E,) factor-to-variable log-odds in factor order (any float dtype; a dense array, or
            one that `Fetched` answers for the edges needed).
        variables: (n,) int variables.

    Returns:
        (n, 3) float64 [finite sum, #+inf, #-inf]; `combine` gives the cavity log-odds.
    """
    slots, owner = ranges(graph.var_offsets, variables)
    edges = np.asarray(graph.var_edges)[slots]
    parts = split_infinite(messages[edges])
    n = len(variables)
    return np.stack([np.bincount(owner, weights=parts[:, k], minlength=n) for k in range(3)], -1)


class Fetched:
    """Messages of some edges brought to the host: `fetched[edges]` for edges among those fetched.

    On a CPU device the messages are read in place (no copy); elsewhere only the
    edges asked for cross to the host, in one gather whose index is padded to a
    power of two (so few sizes are ever compiled).

    Args:
        messages: (E,) a device array or numpy.
        edges: (n,) int edges to fetch (any order, repeats allowed).
        gather: gather on the device (None: unless the messages are numpy or on a CPU).
    """

    def __init__(self, messages, edges: np.ndarray, gather: bool | None = None):
        self.edges = np.unique(np.asarray(edges, np.int64))
        if gather is None:
            gather = not (isinstance(messages, np.ndarray)
                          or all(d.platform == "cpu" for d in messages.devices()))
        if not gather:
            self.values = np.asarray(messages)[self.edges]
        else:
            n = self.edges.size
            idx = np.zeros(-(-n // BLOCK) * BLOCK, np.int32)
            idx[:n] = self.edges
            blocks = [_take(messages, jnp.asarray(idx[i:i + BLOCK])) for i in range(0, idx.size, BLOCK)]
            self.values = np.concatenate(jax.device_get(blocks))[:n] if blocks else np.zeros(0)

    def __getitem__(self, edges) -> np.ndarray:
        return self.values[np.searchsorted(self.edges, edges)]


@jax.jit
def _take(messages: jax.Array, idx: jax.Array) -> jax.Array:
    return messages[idx]


def _names(var_names: Sequence[str] | None, v: int) -> str:
    return var_names[v] if var_names is not None else f"variable {v}"


def _prob(lo: float) -> str:
    """P = sigmoid(lo) for people, below float64's range from the log-odds."""
    from fastlbp.core.text import format_probability

    p = 0.0 if lo < -745 else 1.0 / (1.0 + math.exp(-lo)) if lo > -700 else math.exp(lo)
    return format_probability(p, lo)


def evidence_lost(graph: FactorGraph, fetched: Fetched, variables: np.ndarray, values: np.ndarray,
                  dtype) -> list[tuple[int, float]]:
    """The labelled or hard variables whose evidence LBP's messages cannot carry (module docstring).

    A variable is reported when its cavity against its value is at `soft_limit`
    (within `SOFT_MARGIN`), counting finite messages only (a hard message that
    fixes it is the evidence that arrived), or when a hard message contradicts
    it; unless every factor whose finite message says so passes the value on
    as hard messages to all its other variables (or has none: a prior).

    Args:
        graph: the factor graph (numpy arrays).
        fetched: the round's messages of the edges into `variables` and of their factors' edges.
        variables: (n,) int labelled or hard variables.
        values: (n,) bool their value (the label, or the sign of the hard marginal).
        dtype: the messages' dtype (the limit is the precision's).

    Returns:
        [(variable, cavity log-odds for its value)] of those reported; the log-odds is finite
        (below -(limit - margin)) or -inf (a hard message against it).
    """
    if len(variables) == 0:
        return []
    agg = incoming(graph, fetched, variables)
    sign = np.where(values, 1.0, -1.0)
    against = sign * agg[:, 0]  # the finite messages' log-odds for the value
    hard_against = np.where(values, agg[:, 2], agg[:, 1]) > 0.5
    limit = soft_limit(dtype) - SOFT_MARGIN
    suspect = np.flatnonzero((against <= -limit) | hard_against | np.isnan(against))
    out = []
    edge_factor = np.asarray(graph.edge_factor)
    edge_var = np.asarray(graph.edge_var)
    for i in suspect:
        v = int(variables[i])
        if hard_against[i]:
            out.append((v, -math.inf))
            continue
        slots = np.arange(graph.var_offsets[v], graph.var_offsets[v + 1])
        edges = np.asarray(graph.var_edges)[slots]
        m = sign[i] * fetched[edges]
        sources = np.unique(edge_factor[edges[np.isfinite(m) & (m < 0)]])
        onward, _ = ranges(graph.factor_offsets, sources)
        onward = onward[edge_var[onward] != v]
        if not np.all(np.isinf(fetched[onward])):  # a cause hears of the value through a capped message
            out.append((v, float(against[i])))
    return out


# The local update and the gather run in blocks of this many edges, each padded to it, so that a triage
# session compiles each once: a new size compiles anew, and the blocks of the factors
# around 200 labelled alarms of data/ftp.json.gz hold 756 edges. A factor with more edges gets a block of
# its own (a power of two: a rare compile).
BLOCK = 4096


def _bucket(n: int) -> int:
    """The padded size for `n` elements: `BLOCK`, or a power of two above it."""
    return max(BLOCK, 1 << max(int(n) - 1, 0).bit_length())


@jax.jit
def _local_messages(factor_offsets, edge_factor, edge_is_head, factor_kind, p1, p2, mu):
    """`equations.factor_to_var` on a small graph of whole factors (the factors around some variables)."""
    local = types.SimpleNamespace(factor_offsets=factor_offsets, edge_factor=edge_factor,
                                  edge_is_head=edge_is_head, factor_kind=factor_kind, p1=p1, p2=p2,
                                  num_factors=factor_offsets.shape[0] - 1)
    return equations.factor_to_var(local, equations.Summation(None, None, "scatter"), mu)


def _local_block(graph: FactorGraph, factors: np.ndarray, counts: np.ndarray, edges: np.ndarray,
                 mu: np.ndarray, dtype) -> np.ndarray:
    """The factor-to-variable messages of whole `factors` ((m,), with (m,) `counts` edges, (n,) `edges` in
    factor order) from variable-to-factor messages `mu` ((n,)), by `_local_messages` at a padded size."""
    n, m = edges.size, factors.size
    size = _bucket(n + 1)  # at least one padding edge: the padding factor's head
    pad = size - n
    # The local graph: the factors in order, then one padding factor (AND with p1 = p2 = 1/2) of the
    # remaining edges, and empty factors up to `size`.
    offsets = np.full(size + 1, size, np.int32)
    offsets[: m + 1] = np.concatenate([[0], np.cumsum(counts)])
    edge_factor = np.concatenate([np.repeat(np.arange(m), counts), np.full(pad, m)]).astype(np.int32)
    is_head = np.concatenate([np.asarray(graph.edge_is_head)[edges].astype(bool), np.arange(pad) == 0])
    kind = np.zeros(size, np.int32)
    p1 = np.full(size, 0.5)
    p2 = np.full(size, 0.5)
    kind[:m] = np.asarray(graph.factor_kind)[factors]
    p1[:m] = np.asarray(graph.p1)[factors]
    p2[:m] = np.asarray(graph.p2)[factors]
    mu_pad = np.zeros(size, np.dtype(dtype))
    mu_pad[:n] = mu
    return np.asarray(_local_messages(offsets, edge_factor, is_head, kind, p1, p2, mu_pad), np.float64)[:n]


def compile_flags(graph: FactorGraph, messages, dtype) -> None:
    """Compiles the programs the checks of labelled rounds run (the block gather, the local update), so
    that the first label of an interactive session compiles nothing.

    Args:
        graph: the factor graph (numpy arrays).
        messages: (E,) the session's messages (the gather compiles for their shape and place).
        dtype: the messages' dtype.
    """
    if graph.num_factors == 0:
        return
    Fetched(messages, np.zeros(1, np.int64))
    edges, owner = ranges(graph.factor_offsets, np.zeros(1, np.int64))
    if edges.size < BLOCK:
        _local_block(graph, np.zeros(1, np.int64), np.array([edges.size]), edges, np.zeros(edges.size), dtype)


def residual_near_labels(graph: FactorGraph, fetched: Fetched, log_odds: np.ndarray,
                         labels: Mapping[int, bool], dtype) -> tuple[float, int, float, float]:
    """How much the messages around the labels into unlabelled soft variables change in one more update.

    A round stops when no marginal moves; messages into a variable that move
    while they cancel (a symmetric graph) leave its marginal still. This
    recomputes the messages of the factors around the labelled variables once
    (undamped, all at once as PARALL would) from the round's messages, with
    the engines' `equations.factor_to_var`; the variable-to-factor messages come
    from the round's marginal log-odds (hard variables: from their incoming
    messages). Only messages into soft variables (finite marginal log-odds)
    count: those into a labelled or hard variable never reach a marginal (its
    outgoing messages are its hard value whatever they say), and often move on
    after a round has converged.

    Args:
        graph: the factor graph (numpy arrays).
        fetched: the round's messages of every edge of the labelled variables' factors, and of the edges
            into the hard variables among those factors' variables.
        log_odds: (V,) the round's marginal log-odds, consistent with the messages.
        labels: {variable: truth}.
        dtype: the messages' dtype.

    Returns:
        (change, variable, old, new): the largest relative change
        |new - old| / (1 + |old|) of such a message (inf where one turns hard or
        NaN; 0.0 when none changes or there are no labels), the variable it
        goes into and the message before and after.
    """
    if not labels:
        return 0.0, -1, 0.0, 0.0
    lab = np.fromiter(labels, np.int64, len(labels))
    into, _ = ranges(graph.var_offsets, lab)
    into = np.asarray(graph.var_edges)[into]
    factors = np.unique(np.asarray(graph.edge_factor)[into])
    edges, owner = ranges(graph.factor_offsets, factors)  # whole factors, head first, in order
    n, m = edges.size, factors.size
    u = np.asarray(graph.edge_var)[edges]
    own = fetched[edges].astype(np.float64)
    lo_u = np.asarray(log_odds, np.float64)[u]
    with np.errstate(invalid="ignore"):
        mu = lo_u - own
    hard = ~np.isfinite(lo_u)
    if hard.any():  # the exact counts of infinite messages (and evidence) of hard variables
        hv, inverse = np.unique(u[hard], return_inverse=True)
        agg = incoming(graph, fetched, hv)
        agg[:, 1] += [labels.get(int(v)) is True for v in hv]  # their evidence
        agg[:, 2] += [labels.get(int(v)) is False for v in hv]
        mu[hard] = combine(agg[inverse] - split_infinite(own[hard]))
    new = np.empty(n, np.float64)
    counts = np.bincount(owner, minlength=m)
    ends = np.cumsum(counts)
    f0 = 0
    while f0 < m:  # blocks of whole factors, each with room for one padding edge
        e0 = ends[f0] - counts[f0]
        f1 = max(int(np.searchsorted(ends, e0 + BLOCK - 1, side="right")), f0 + 1)
        e1 = ends[f1 - 1]
        new[e0:e1] = _local_block(graph, factors[f0:f1], counts[f0:f1], edges[e0:e1], mu[e0:e1], dtype)
        f0 = f1
    target = np.flatnonzero(np.isfinite(lo_u))
    old, new = own[target], new[target]
    both = np.isfinite(old) & np.isfinite(new)
    o, w = np.where(both, old, 0.0), np.where(both, new, 0.0)
    rel = np.where(both, np.abs(w - o) / (1 + np.abs(o)), np.where(old == new, 0.0, np.inf))
    if rel.size == 0 or not np.max(rel) > 0:
        return 0.0, -1, 0.0, 0.0
    k = int(np.argmax(rel))
    return float(rel[k]), int(u[target[k]]), float(old[k]), float(new[k])


# More hard variables than this and a session finds those the constraints force before any label
# (`forced_without_labels`, once) rather than check them every round.
HARD_TO_CHECK = 4096


def forced_without_labels(graph: FactorGraph) -> np.ndarray:
    """(V,) bool: the variables the model's hard constraints force before any label
    (`fastlbp.core.constraints.propagate`; exactly those with infinite log-odds in an unlabelled LBP
    round of the ftp-size graph: 22,854; host work once per session)."""
    from fastlbp.core import constraints

    can0, can1 = constraints.propagate(graph)
    return ~(can0 & can1)


def flag_round(graph: FactorGraph, messages, log_odds: np.ndarray, labels: Mapping[int, bool], *, dtype,
                converged: bool, iterations: int, delta: float, remedy: str | None = None, tol: float = 1e-6,
                var_names: Sequence[str] | None = None, forced: np.ndarray | None = None) -> tuple[str, ...]:
    """The flags of an LBP round (`Round.flags`): short sentences, () when nothing is suspicious.

    Args:
        graph: the factor graph (numpy arrays, `Model.graph`).
        messages: (E,) the round's factor-to-variable log-odds in factor order (device or numpy).
        log_odds: (V,) marginal log-odds consistent with `messages` (the last iteration's, not an average).
        labels: {variable: truth} the round ran with.
        dtype: the messages' dtype (float64 or float32).
        converged, iterations, delta, remedy: how the round went (`Round`).
        tol: the round's tolerance; 0 (a fixed number of iterations) never counts as not converging.
        var_names: (V,) names for the sentences (None: "variable i").
        forced: (V,) bool variables the hard constraints force without any label (`forced_without_labels`):
            their hardness carries no label's evidence and they are not checked (None: every hard
            variable is). On the ftp-size graph 22,854 of 211,175 variables are; checking them took
            most of a round.

    Returns:
        The flags, in order: evidence lost, non-convergence and its remedy, messages the convergence test
        did not watch.
    """
    lo = np.asarray(log_odds, np.float64)
    lab = np.fromiter(labels, np.int64, len(labels))
    hard = np.isinf(lo) if forced is None else np.isinf(lo) & ~forced
    checked = np.union1d(lab, np.flatnonzero(hard))  # labelled variables and those the labels made hard
    values = lo[checked] > 0  # a labelled variable's marginal is its label
    into, _ = ranges(graph.var_offsets, checked)
    into = np.asarray(graph.var_edges)[into]
    around, _ = ranges(graph.factor_offsets, np.unique(np.asarray(graph.edge_factor)[into]))
    fetched = Fetched(messages, np.concatenate([into, around]))
    precision = "float64" if np.dtype(dtype).itemsize == 8 else "float32"

    def name(v: int, value: bool) -> str:
        how = "" if v in labels else " (forced by hard factors or labels)"
        return f"{_names(var_names, v)}={'true' if value else 'false'}{how}"

    flags = []
    lost = evidence_lost(graph, fetched, checked, values, dtype)
    for v, against in lost[:3]:
        value = bool(values[np.searchsorted(checked, v)])
        before = "ruled it out" if against == -math.inf else f"gave it probability {_prob(against)}"
        flags.append(f"evidence lost at {name(v, value)}: before its evidence LBP {before}, at the limit of "
                     f"what {precision} messages carry (about {_prob(-soft_limit(dtype))}); its effect on "
                     "other variables is cut short and their marginals may be far off")
    if len(lost) > 3:
        flags.append(f"evidence lost at {len(lost) - 3} more variables")

    doubt = ""
    if lab.size:
        sign = np.where([labels[v] for v in lab.tolist()], 1.0, -1.0)
        against = sign * combine(incoming(graph, fetched, lab))
        k = int(np.nanargmin(against)) if not np.all(np.isnan(against)) else 0
        if against[k] < -DOUBT_LOG_ODDS:
            doubt = (f"; without its label LBP gives {name(int(lab[k]), sign[k] > 0)} probability "
                     f"{_prob(float(against[k]))}: the labels may be (nearly) contradictory")
    if remedy is not None and remedy.startswith("damping"):
        flags.append(f"LBP converged only with {remedy} (a remedy for not converging; {iterations} "
                     f"iterations in all): the marginals may be far off{doubt}")
    elif remedy is not None:
        flags.append(f"LBP did not converge ({iterations} iterations): the marginals are the {remedy} and "
                     f"may be far off{doubt}")
    elif not converged and tol > 0:
        flags.append(f"LBP did not converge in {iterations} iterations (largest change {delta:.3g} at the "
                     f"end): the marginals may be far off{doubt}")
    if converged:
        change, v, old, new = residual_near_labels(graph, fetched, lo, labels, dtype)
        if change > max(RESIDUAL_TOL, 100 * tol):
            flags.append(f"LBP stopped as converged, but the messages into {_names(var_names, v)} still "
                         f"change (log-odds {old:.4g} -> {new:.4g} in one more update) while its marginal "
                         f"does not: they cancel, and the marginals may be far off{doubt}")
    return tuple(flags)


__all__ = ["flagged", "flag_round", "forced_without_labels", "HARD_TO_CHECK", "evidence_lost",
           "residual_near_labels", "incoming", "combine", "split_infinite", "ranges", "soft_limit", "Fetched",
           "SOFT_MARGIN", "RESIDUAL_TOL", "DOUBT_LOG_ODDS", "BLOCK", "compile_flags"]
