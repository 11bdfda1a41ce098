"""fastlbp factor graphs encoded in PGMax 0.6.1, the peer of the GPU benchmark.

PGMax (https://github.com/google-deepmind/PGMax) runs parallel (PARALL,
Jacobi) loopy BP in JAX on factor graphs of discrete variables. Its fast
factors for our model are the deterministic logical factors
`ANDFactor`/`ORFactor` (child = AND/OR(parents), linear-time updates); every
other factor must be an `EnumFactor` (an explicit list of the valid
configurations, cost O(configs x variables) per message).

Encoding of one fastlbp factor (kind, head x0, body x1..xn, p1, p2), chosen
per factor, best first (DESIGN.md section 3 has the factor table):

* unary (n = 0, or p1 = p2, where the body does not matter): a log-potential
  [log(1-p1), log p1] added to the head's PGMax *evidence*. A constant
  factor's messages are constant, so folding them into evidence is exact.
* AND with p2 = 0: ``ANDFactor(body + [coin], x0)`` with a fresh leaf
  variable ``coin`` whose evidence is the prior p1 (no coin when p1 = 1).
  Summing out a leaf coin gives exactly f, and the coin's message to the
  factor is its prior from the first iteration on, so PGMax's BP on the
  encoding equals BP on the original factor message for message. This is
  the Bingo clause (p1 = rule probability, p2 = 0).
* OR with p1 = 1: ``ORFactor(body + [coin], x0)`` with a coin of prior p2
  (no coin when p2 = 0): the Bingo tuple is a plain deterministic OR.
* anything else, at most `enum_max` variables: one ``EnumFactor`` over
  (body, x0) listing the configurations of non-zero weight (exact).
* anything else, larger: a fresh variable y = AND/OR(body) (deterministic
  logical factor) and a pairwise ``EnumFactor`` (y, x0) with the table
  f(x0 | y) = p1 / p2. Same fixed points as the original factor, but
  information needs one more iteration to cross y, so iteration counts no
  longer line up with fastlbp's (`Encoding.iteration_exact` is False).

PGMax refuses two factors of one type over the same variable set; such a
logical factor gets an extra neutral coin (hard true for AND, hard false for
OR), such an enumeration factor an extra variable fixed to 0 by its
configuration list.

Hard probabilities: PGMax's leave-one-out sums subtract (x + y - y), so an
infinite log-potential gives NaN and its own clip value (-1e32) wipes out
every other term. Log-potentials of probability 0 are therefore `-hard`
(default 200: exp(-200) ~ 1e-87, below float64 resolution next to 1 and
still accurate to ~1e-5 in float32 sums).

Known PGMax inexactness: its logical-factor updates compute
log(exp(a) - exp(b)) with a hard-coded cut-off `eps=1e-4`: where a - b <
1e-4 the result is -inf. So an OR head whose parents are all true with
probability < 1e-4 gets P = 0 exactly (an AND head: P(all true) > 1 - 1e-4
gives P = 1), and a -inf message to a parent becomes +inf - inf = NaN in
PGMax's message normalization, which then spreads (seen on loopy graphs of
deterministic AND/OR factors, and whenever hard evidence such as a label
"false" on a tuple reaches an OR: PGMax cannot take hard labels; evidence up
to ~10 in log-odds stays finite). `logminusexp_eps` swaps the cut-off for a
diagnosis (with 1e-12 the encoding matches fastlbp to ~1e-11 on Bingo-like
graphs).

Iterations. A fastlbp prior factor sends its (constant) message only after
the first iteration, while PGMax evidence acts at once. `Encoding.
init_messages` are fastlbp messages with those constant messages already in
place: fastlbp's PARALL started from them equals PGMax's BP iteration by
iteration (when `iteration_exact`).

jax >= 0.8 removed `jax.lib.xla_bridge`, which PGMax 0.6.1 calls once
(its open issue #10); importing this module installs a shim before PGMax
is imported. PGMax also needs numba at import time (not for BP itself).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import types

import jax
import jax.extend.backend
import jax.lib
import jax.numpy as jnp
import numpy as np

if not hasattr(getattr(jax.lib, "xla_bridge", None), "get_backend"):
    jax.lib.xla_bridge = types.SimpleNamespace(get_backend=jax.extend.backend.get_backend)

from pgmax import fgraph, fgroup, infer, vgroup  # noqa: E402
from pgmax.factor import logical, update_utils  # noqa: E402

from fastlbp.core.graph import AND, FactorGraph  # noqa: E402

#: Log-potential used for probability 0 (see the module docstring).
HARD = 200.0
#: Largest factor (body + head) encoded as one EnumFactor; larger general factors get a pairwise chain.
ENUM_MAX = 8


@dataclasses.dataclass(frozen=True, eq=False)
class Encoding:
    """How a fastlbp graph was encoded (the `helpers` of `build_pgmax`).

    Attributes:
        variables: the PGMax NDVarArray of shape (num_vars + num_aux,), binary;
            PGMax variable i < num_vars is fastlbp variable i, the rest are
            coins, neutral coins and chain variables.
        num_vars: V, variables of the fastlbp graph.
        num_aux: auxiliary variables added.
        log_evidence: (num_vars + num_aux, 2) float64 unary log-potentials
            (priors, coins, evidence), given to PGMax as evidence.
        counts: factors per encoding ("unary", "and", "or", "enum",
            "chain", "neutral_coins").
        num_pgmax_edges: variable-factor pairs in the PGMax graph.
        init_messages: (E,) float64 fastlbp log-odds messages with the
            constant factors' messages already sent (module docstring).
        iteration_exact: no chain encoding was used, so PGMax's iteration k
            equals fastlbp's iteration k from `init_messages`.
        hard: the log-potential magnitude used for probability 0.
    """

    variables: vgroup.NDVarArray
    num_vars: int
    num_aux: int
    log_evidence: np.ndarray
    counts: dict
    num_pgmax_edges: int
    init_messages: np.ndarray
    iteration_exact: bool
    hard: float


def _log(p: np.ndarray, hard: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(np.asarray(p, np.float64)), -hard)


def _logit(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(p) - np.log1p(-p)


def _factor_weights(kind: int, n: int, p1: float, p2: float) -> tuple[np.ndarray, np.ndarray]:
    """All 2^(n+1) configurations (body..., head) and the factor value of each."""
    configs = np.array(list(itertools.product((0, 1), repeat=n + 1)), dtype=np.int64)
    body, head = configs[:, :n], configs[:, n]
    cond = body.all(axis=1) if kind == AND else body.any(axis=1)
    p_true = np.where(cond, p1, p2)
    return configs, np.where(head == 1, p_true, 1.0 - p_true)


def build_pgmax(model, evidence=None, *, hard: float = HARD, enum_max: int = ENUM_MAX):
    """Encodes a fastlbp factor graph as a PGMax factor graph (module docstring).

    Args:
        model: a `fastlbp.core.model.Model` or a `FactorGraph`.
        evidence: optional (V,) log-odds per variable (fastlbp's convention:
            0 none, +-inf hard); None = none (like `fastlbp.engines.parall.run(graph)`).
        hard: log-potential magnitude standing for probability 0.
        enum_max: largest general factor (variables) encoded as one EnumFactor.

    Returns:
        (fg, variables, encoding): the `pgmax.fgraph.FactorGraph`, its
        NDVarArray, and the `Encoding`. `fg.fastlbp_encoding` is the
        encoding too (`run_pgmax` reads it).
    """
    graph: FactorGraph = getattr(model, "graph", model)
    graph = graph.to_numpy()
    num_vars = graph.num_vars
    off = graph.factor_offsets.astype(np.int64)
    ev = graph.edge_var.astype(np.int64)
    kinds = graph.factor_kind
    p1s = graph.p1.astype(np.float64)
    p2s = graph.p2.astype(np.float64)
    lens = np.diff(off) - 1

    unary_ev: list[np.ndarray] = [np.zeros((num_vars, 2))]  # grows with aux variables
    aux_ev: list[tuple[float, float]] = []  # (log P(0), log P(1)) per aux variable
    init_messages = np.zeros(graph.num_edges)

    def new_aux(p_true: float) -> int:
        aux_ev.append((float(_log(1.0 - p_true, hard)), float(_log(p_true, hard))))
        return num_vars + len(aux_ev) - 1

    # Unary factors into evidence (vectorised).
    unary = (lens == 0) | (p1s == p2s)
    heads = ev[off[:-1]]
    np.add.at(unary_ev[0], heads[unary], np.stack([_log(1.0 - p1s[unary], hard),
                                                    _log(p1s[unary], hard)], axis=1))
    init_messages[off[:-1][unary]] = _logit(p1s[unary])
    if evidence is not None:
        lo = np.clip(np.asarray(evidence, np.float64).reshape(num_vars), -hard, hard)
        unary_ev[0][:, 1] += lo

    and_sets: list[list[int]] = []  # PGMax variable indices, parents then child
    or_sets: list[list[int]] = []
    enum_groups: dict[tuple, tuple[list[list[int]], np.ndarray, list[np.ndarray]]] = {}
    seen = {"and": set(), "or": set(), "enum": set()}
    counts = dict.fromkeys(("unary", "and", "or", "enum", "chain", "neutral_coins"), 0)
    counts["unary"] = int(unary.sum())

    def add_logical(which: str, members: list[int]) -> None:
        key = frozenset(members)
        if key in seen[which]:
            # A neutral coin keeps the factor and makes its variable set new.
            members = members[:-1] + [new_aux(1.0 if which == "and" else 0.0), members[-1]]
            counts["neutral_coins"] += 1
            key = frozenset(members)
        seen[which].add(key)
        (and_sets if which == "and" else or_sets).append(members)

    def add_enum(members: list[int], configs: np.ndarray, weights: np.ndarray) -> None:
        keep = weights > 0
        if frozenset(members) in seen["enum"]:
            # An extra variable pinned to 0 by the configuration list.
            members = members + [new_aux(0.5)]
            configs = np.concatenate([configs, np.zeros((len(configs), 1), np.int64)], axis=1)
            counts["neutral_coins"] += 1
        seen["enum"].add(frozenset(members))
        key = (len(members), keep.tobytes())
        group = enum_groups.setdefault(key, ([], configs[keep], []))
        group[0].append(members)
        group[2].append(_log(weights[keep], hard))

    for a in np.flatnonzero(~unary):
        kind, p1, p2 = int(kinds[a]), float(p1s[a]), float(p2s[a])
        head = int(ev[off[a]])
        body = [int(v) for v in ev[off[a] + 1: off[a + 1]]]
        if kind == AND and p2 == 0.0:
            coin = [new_aux(p1)] if p1 < 1.0 else []
            add_logical("and", body + coin + [head])
            counts["and"] += 1
        elif kind != AND and p1 == 1.0:
            coin = [new_aux(p2)] if p2 > 0.0 else []
            add_logical("or", body + coin + [head])
            counts["or"] += 1
        elif len(body) + 1 <= enum_max:
            configs, weights = _factor_weights(kind, len(body), p1, p2)
            add_enum(body + [head], configs, weights)
            counts["enum"] += 1
        else:
            y = new_aux(0.5)
            aux_ev[-1] = (0.0, 0.0)  # y has no prior of its own
            add_logical("and" if kind == AND else "or", body + [y])
            configs, weights = _factor_weights(AND, 1, p1, p2)  # (y, x0): x0 ~ p1 if y else p2
            add_enum([y, head], configs, weights)
            counts["chain"] += 1

    num_aux = len(aux_ev)
    log_evidence = np.concatenate([unary_ev[0], np.asarray(aux_ev, np.float64).reshape(-1, 2)])
    variables = vgroup.NDVarArray(num_states=2, shape=(num_vars + num_aux,))
    pg_vars = variables.variables  # list of (hash, 2)
    fg = fgraph.FactorGraph(variable_groups=[variables])
    groups = []
    if and_sets:
        groups.append(fgroup.ANDFactorGroup(variables_for_factors=[[pg_vars[i] for i in s]
                                                                     for s in and_sets]))
    if or_sets:
        groups.append(fgroup.ORFactorGroup(variables_for_factors=[[pg_vars[i] for i in s]
                                                                    for s in or_sets]))
    for members, configs, logp in enum_groups.values():
        groups.append(fgroup.EnumFactorGroup(
            variables_for_factors=[[pg_vars[i] for i in s] for s in members],
            factor_configs=configs, log_potentials=np.stack(logp)))
    if groups:
        fg.add_factors(groups)
    num_pgmax_edges = (sum(len(s) for s in and_sets) + sum(len(s) for s in or_sets)
                       + sum(len(s) for g in enum_groups.values() for s in g[0]))
    enc = Encoding(variables=variables, num_vars=num_vars, num_aux=num_aux, log_evidence=log_evidence,
                   counts=counts, num_pgmax_edges=num_pgmax_edges, init_messages=init_messages,
                   iteration_exact=counts["chain"] == 0, hard=hard)
    fg.fastlbp_encoding = enc
    return fg, variables, enc


@contextlib.contextmanager
def logminusexp_eps(eps: float):
    """Diagnosis only: PGMax's logical factors with another log-minus-exp cut-off (default 1e-4).

    Clears the trace cache of PGMax's (module-level, jitted) logical update on
    entry and exit, which would otherwise keep the cut-off it was traced with.
    Runners built inside must also run inside.
    """
    original = update_utils.logminusexp_with_temp

    def patched(data1, data2, temperature, **_pgmax_eps):
        return original(data1, data2, temperature, eps=eps)

    update_utils.logminusexp_with_temp = patched
    logical.pass_logical_fac_to_var_messages.clear_cache()
    try:
        yield
    finally:
        update_utils.logminusexp_with_temp = original
        logical.pass_logical_fac_to_var_messages.clear_cache()


class PGMaxRunner:
    """`num_iters` PGMax BP iterations (sum-product) plus marginals, as one jitted function.

    Call `compile()` once (timed separately), then `run()`; both run with
    64-bit types switched off for float32, so PGMax's internal arrays are
    float32 too.

    Attributes:
        arrays: the initial (log_potentials, ftov_msgs, evidence) of PGMax's
            `BPArrays` (uniform messages, the evidence), in `dtype`.
        fn: jitted `*arrays -> (V,) P(x=1)` of the fastlbp variables.
    """

    def __init__(self, fg, num_iters: int, damping: float = 0.0, dtype=jnp.float64):
        enc: Encoding = fg.fastlbp_encoding
        self.dtype = jnp.dtype(dtype)
        self.x64 = self.dtype == jnp.float64
        self.compiled = None
        if enc.num_pgmax_edges == 0:  # only unary factors: PGMax cannot build BP without a factor
            ev = enc.log_evidence[: enc.num_vars]
            self.arrays = (jnp.asarray(ev[:, 1] - ev[:, 0], self.dtype),)
            self.fn = jax.jit(jax.nn.sigmoid)
            return
        with jax.enable_x64(self.x64):
            bp = infer.BP(fg.bp_state, temperature=1.0)
            init = bp.init(evidence_updates={enc.variables: enc.log_evidence})
            # Plain arrays: BPArrays' own pytree flattening does not survive lower().compile().
            self.arrays = tuple(jnp.asarray(x, self.dtype)
                                for x in (init.log_potentials, init.ftov_msgs, init.evidence))

        def marginals(*arrays):
            arrays = infer.BPArrays(*arrays)
            if num_iters > 0:
                arrays = bp.run(arrays, num_iters=num_iters, damping=damping, temperature=1.0)
            beliefs = bp.get_beliefs(arrays)[enc.variables][: enc.num_vars]  # (V, 2) log
            return jax.nn.sigmoid(beliefs[:, 1] - beliefs[:, 0])

        self.fn = jax.jit(marginals)

    def compile(self):
        with jax.enable_x64(self.x64):
            self.compiled = self.fn.lower(*self.arrays).compile()
        return self.compiled

    def run(self, arrays=None) -> jax.Array:
        """(V,) P(x=1) after the iterations (a device array; block on it to time)."""
        fn = self.compiled or self.fn
        with jax.enable_x64(self.x64):
            return fn(*(self.arrays if arrays is None else arrays))


def run_pgmax(fg, num_iters: int, damping: float = 0.0, dtype=jnp.float64) -> np.ndarray:
    """PGMax sum-product BP (PARALL) from uniform messages; returns (V,) P(x=1) as float64 numpy."""
    return np.asarray(PGMaxRunner(fg, num_iters, damping, dtype).run(), np.float64)
