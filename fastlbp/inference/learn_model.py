"""Learning's model of one or many graphs: a variable for each clause's body (`augment`), graphs as one
disjoint union (`union`), and the posterior of a block's clauses by the E-step of a method's row
(`_Posterior`; the E-step `auto` learns with: `e_step_method`). `fastlbp.inference.learn` runs EM on it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from datalog.rule_probs import clause_factors, rule_names
from fastlbp.core.graph import AND, FactorGraph, from_arrays
from fastlbp.core.jax_setup import float64
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.inference.methods import chooses, method_of

EPS = 1e-9  # probabilities stay inside (EPS, 1 - EPS): a coin of probability 0 or 1 is a hard constraint


@dataclasses.dataclass(frozen=True)
class Augmented:
    """A model with a body variable per clause, and where its clauses are.

    Attributes:
        model: the augmented model (same variables first, then one b_c per clause with a body).
        clause_var: (K,) int64 X_c of each clause (a variable of the original model too).
        body_var: (K,) int64 b_c, -1 for a clause without a body (it always holds).
        factor: (K,) int64 the factor of X_c (whose p1 is the rule's probability).
        rule: (K,) int64 the clause's rule, an index into the graph's rules.
        names: the graph's rule names.
    """

    model: Model
    clause_var: np.ndarray
    body_var: np.ndarray
    factor: np.ndarray
    rule: np.ndarray
    names: list[str]

    def graph_with(self, clause_p: np.ndarray) -> FactorGraph:
        """The augmented graph with clause factors' p1 = clause_p ((K,) float64); p2 too where bodiless."""
        g = self.model.graph
        p1 = np.array(g.p1, np.float64, copy=True)
        p2 = np.array(g.p2, np.float64, copy=True)
        p1[self.factor] = clause_p
        bodiless = self.body_var < 0
        p2[self.factor[bodiless]] = clause_p[bodiless]
        return dataclasses.replace(g, p1=p1, p2=p2)


def augment(model: Model) -> Augmented:
    """Adds b_c = AND(body_c) for every clause with a body and makes X_c = AND(b_c) (module docstring).

    Raises:
        InputError: the model has no rules (not a derivation graph).
    """
    names = rule_names(model)
    factor, rule = clause_factors(model)
    g = model.graph
    off = np.asarray(g.factor_offsets, np.int64)
    ev = np.asarray(g.edge_var, np.int64)
    heads = np.asarray(g.factor_head, np.int64)
    kinds = np.asarray(g.factor_kind, np.int64)
    num_f, num_v = heads.size, model.num_vars
    lens = off[1:] - off[:-1] - 1
    split = np.sort(factor[lens[factor] > 0])
    new_var = np.full(num_f, -1, np.int64)
    new_var[split] = num_v + np.arange(split.size)
    body_var = new_var[factor]
    is_body = np.ones(ev.size, bool)
    is_body[off[:-1]] = False
    owner = np.repeat(np.arange(num_f), lens)
    members = ev[is_body]
    moved = new_var[owner] >= 0  # body entries of split clauses: they go to b_c's factor
    owners = np.concatenate([owner[~moved], split, num_f + np.searchsorted(split, owner[moved])])
    entries = np.concatenate([members[~moved], new_var[split], members[moved]])
    order = np.argsort(owners, kind="stable")
    counts = np.bincount(owners, minlength=num_f + split.size)
    offsets = np.zeros(num_f + split.size + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    ones = np.ones(split.size)
    graph = from_arrays(np.concatenate([kinds, np.full(split.size, AND)]),
                        np.concatenate([heads, new_var[split]]), offsets, entries[order],
                        np.concatenate([np.asarray(g.p1, np.float64), ones]),
                        np.concatenate([np.asarray(g.p2, np.float64), 0 * ones]), num_vars=num_v + split.size)
    var_names = tuple(model.var_names) + tuple(f"{model.var_names[heads[a]]}@body" for a in split)
    aug = Model(graph=graph, var_names=var_names, alarms=model.alarms, labels=dict(model.labels),
                source=model.source, meta={"rule_names": names})
    return Augmented(aug, heads[factor], body_var, factor, rule, names)


def union(augs: Sequence[Augmented], rules: Sequence[np.ndarray], names: Sequence[str],
          labels: Sequence[dict[int, bool]]) -> tuple[Augmented, dict[int, bool], np.ndarray]:
    """The disjoint union of augmented models: graph i's variables shifted by the ones before it.

    Args:
        augs: the augmented models.
        rules: per model, (K_i,) int64 each clause's rule as an index into `names`.
        names: the rule names the union's `Augmented.rule` indexes.
        labels: per model {variable: truth}.

    Returns:
        (the union, its labels, (len(augs) + 1,) int64 variable offsets).
    """
    voff = np.zeros(len(augs) + 1, np.int64)
    np.cumsum([a.model.num_vars for a in augs], out=voff[1:])
    parts = {k: [] for k in ("kind", "head", "lens", "body", "p1", "p2", "clause", "bvar", "factor", "names")}
    foff = 0
    for i, a in enumerate(augs):
        g = a.model.graph
        off = np.asarray(g.factor_offsets, np.int64)
        is_body = np.ones(int(off[-1]), bool)
        is_body[off[:-1]] = False
        parts["kind"].append(np.asarray(g.factor_kind, np.int64))
        parts["head"].append(np.asarray(g.factor_head, np.int64) + voff[i])
        parts["lens"].append(off[1:] - off[:-1] - 1)
        parts["body"].append(np.asarray(g.edge_var, np.int64)[is_body] + voff[i])
        parts["p1"].append(np.asarray(g.p1, np.float64))
        parts["p2"].append(np.asarray(g.p2, np.float64))
        parts["clause"].append(a.clause_var + voff[i])
        parts["bvar"].append(np.where(a.body_var >= 0, a.body_var + voff[i], -1))
        parts["factor"].append(a.factor + foff)
        parts["names"].extend(f"g{i}:{n}" for n in a.model.var_names)
        foff += off.size - 1
    cat = {k: np.concatenate(v) if k != "names" else v for k, v in parts.items()}
    offsets = np.zeros(cat["lens"].size + 1, np.int64)
    np.cumsum(cat["lens"], out=offsets[1:])
    graph = from_arrays(cat["kind"], cat["head"], offsets, cat["body"], cat["p1"], cat["p2"],
                        num_vars=int(voff[-1]))
    merged = {int(v) + int(voff[i]): bool(t) for i, lab in enumerate(labels) for v, t in lab.items()}
    alarms = tuple(int(x) + int(voff[i]) for i, a in enumerate(augs) for x in a.model.alarms)
    model = Model(graph=graph, var_names=tuple(cat["names"]), alarms=alarms, source="union",
                  meta={"rule_names": list(names)})
    return (Augmented(model, cat["clause"], cat["bvar"], cat["factor"], np.concatenate(list(rules)),
                      list(names)), merged, voff)


def e_step_method(model: Model, settings: Settings, labels: dict[int, bool]) -> str:
    """The E-step "auto" learns with on one graph: "exact" where bucket elimination's induced width
    fits (`fastlbp.inference.methods.AUTO_EXACT_MEMORY`, or less where `settings.exact_memory` says
    so) whatever the graph's size, else "lbp".

    Not `methods.choose`'s rule, for two measured reasons (datalog.families, BENCHMARKS.md, issue 43):

    * size: `choose` skips exact above `AUTO_EXACT_VARS` variables to spare a ranking round the
      ordering (about 1 s), but learning runs tens of E-steps, and graphs of independent modules
      (taint, points-to per module) keep a small width at any size (18,000 variables, width < 24);
    * the sampler: under alarm labels its importance weights collapse at the stated probabilities
      (1 to 5 effective worlds of 400,000 on 300 alarm labels, taint and synthetic families), so a
      sampled E-step from there drew to its 10M-world budget, or raised `TooFewSamples`, every step.
      `method="sample"` stays available where the labels are few.
    """
    from fastlbp.engines import exact
    from fastlbp.inference.methods import AUTO_EXACT_MEMORY

    budget = min(exact.memory_budget(settings), AUTO_EXACT_MEMORY)
    most = max(1, int(math.log2(max(budget, exact.BYTES) / exact.BYTES)))
    plan = exact.engine_for(model.graph).plan(frozenset(labels), most)
    return "exact" if plan is not None and plan.bytes_needed <= budget else "lbp"


class _Posterior:
    """P(X_c = 1 | L) and P(b_c = 1 | L) of one graph's clauses at given clause probabilities, by the E-step
    of the method's row (`Method.e_step`, `fastlbp.inference.e_steps`)."""

    @float64
    def __init__(self, aug: Augmented, labels: dict[int, bool], method: str, settings: Settings,
                 rules: np.ndarray):
        self.aug, self.settings = aug, settings
        self.rules = rules  # (K,) each clause's rule, an index into the learner's names
        # "auto": learning's own choice per graph (`e_step_method`), not a ranking round's.
        named = not chooses(method)
        self.method = method_of(method).name if named else e_step_method(aug.model, settings, labels)
        self.row = method_of(self.method)
        self.e_step = self.row.e_step(aug, labels, settings)
        # (K,) standard errors of the last sampled E-step's P(X_c | L) and P(body_c | L) (None: not sampled).
        self.noise: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def labels(self) -> dict[int, bool]:
        return self.e_step.labels

    @labels.setter
    def labels(self, labels: dict[int, bool]) -> None:
        self.e_step.labels = dict(labels)

    @property
    def log_evidence(self) -> float:
        return self.e_step.log_evidence

    @property
    def info(self) -> dict:
        """The last sampled E-step's `Marginals.info` (worlds, effective worlds); {} otherwise."""
        return self.e_step.info

    @float64
    def __call__(self, clause_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """((K,) P(X_c | L), (K,) P(body_c | L)) at clause probabilities clause_p ((K,) float64)."""
        aug = self.aug
        marg, se = self.e_step(clause_p)
        if se is not None:
            body_se = np.where(aug.body_var >= 0, se[np.maximum(aug.body_var, 0)], 0.0)
            self.noise = (se[aug.clause_var], body_se)
        fired = marg[aug.clause_var]
        body = np.where(aug.body_var >= 0, marg[np.maximum(aug.body_var, 0)], 1.0)
        # A sampler's or LBP's estimates may put a clause above its body by noise: X_c implies b_c.
        return fired, np.maximum(body, fired)

    @property
    def batched(self) -> bool:
        """Whether the E-step takes a batch of clause probabilities in one pass (`many`)."""
        return hasattr(self.e_step, "many")

    @float64
    def many(self, clause_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """((B, K) P(X_c | L), (B, K) P(body_c | L), (B,) log P(L)) at each row of clause_p ((B, K)),
        in one pass (`batched` E-steps only)."""
        aug = self.aug
        marg, log_ev = self.e_step.many(clause_p)
        fired = marg[:, aug.clause_var]
        body = np.where(aug.body_var >= 0, marg[:, np.maximum(aug.body_var, 0)], 1.0)
        return fired, np.maximum(body, fired), log_ev


def sigmoid(x: np.ndarray) -> np.ndarray:
    return np.clip(1 / (1 + np.exp(-x)), EPS, 1 - EPS)


__all__ = ["EPS", "Augmented", "augment", "union", "e_step_method", "sigmoid"]
