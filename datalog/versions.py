"""Synthetic version pairs: a derivation graph, the graph after a program change, and truths that agree.

    new = next_version(old, seed=1, remove=0.03, add=0.03, rewire=0.03)
    truth_old, truth_new = coupled_truths(old, new, seed=2)   # {tuple name: bool} each

For measuring labels carried across versions (`fastlbp.triage.carry`). A
change removes a fraction of the clauses, adds new ones (a random head among
the derived tuples, a body from tuples of lower layers) and rewires others
(one body tuple replaced), as an edit of the analysed program adds, removes and
redirects derivations. A derived tuple keeps at least one clause (a tuple
without any reads as an input fact).

The two versions' truths come from one world of names: each input tuple's
truth and each clause's coin (does the rule fire?) are drawn once per name
(`(rule, head, body)` for a clause) and shared by both versions, and every
derived tuple is the least fixpoint of its clauses. So a tuple whose
derivations are unchanged has the same truth in both versions, as a real bug
in code the change did not touch stays a bug.
"""

from __future__ import annotations

import hashlib

import numpy as np

from datalog.derivation import DerivationGraph
from datalog.synthetic import tuple_layers


def next_version(dg: DerivationGraph, *, seed: int = 0, remove: float = 0.03, add: float = 0.03,
                 rewire: float = 0.03) -> DerivationGraph:
    """`dg` after a random program change (module docstring); tuple names, rules, priors and alarms kept.

    Args:
        remove, add, rewire: fractions of the clauses removed, added and rewired.
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E12]))
    layer = tuple_layers(dg)
    c = dg.num_clauses
    heads = np.asarray(dg.clause_head, np.int64)
    rules = np.asarray(dg.clause_rule, np.int64)
    bodies = [dg.clause_body(g).astype(np.int64).tolist() for g in range(c)]
    keep = rng.random(c) >= remove
    # A derived tuple keeps at least one clause: one with none would read as an input of prior 1.
    left = np.bincount(heads[keep], minlength=dg.num_tuples)
    for g in np.flatnonzero(~keep).tolist():
        if left[heads[g]] == 0:
            keep[g] = True
            left[heads[g]] = 1
    derived = np.flatnonzero(np.bincount(heads, minlength=dg.num_tuples) > 0)
    lower = {int(t): np.flatnonzero(layer < layer[t]) for t in np.unique(heads).tolist()}
    for g in np.flatnonzero(keep & (rng.random(c) < rewire)).tolist():
        below = lower[int(heads[g])]
        if bodies[g] and below.size:
            i = int(rng.integers(len(bodies[g])))
            choice = int(below[rng.integers(below.size)])
            if choice not in bodies[g]:
                bodies[g][i] = choice
    out_heads, out_rules, out_bodies = heads[keep].tolist(), rules[keep].tolist(), [
        b for b, k in zip(bodies, keep.tolist(), strict=True) if k]
    for _ in range(int(round(add * c))):
        h = int(derived[rng.integers(derived.size)])
        below = lower[h]
        k = int(rng.integers(1, min(3, below.size) + 1))
        out_heads.append(h)
        out_rules.append(int(rng.integers(len(dg.rules))))
        out_bodies.append(sorted(int(x) for x in rng.choice(below, size=k, replace=False)))
    lens = np.array([len(b) for b in out_bodies], np.int64)
    offsets = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    body = np.fromiter((x for b in out_bodies for x in b), np.int32, int(lens.sum()))
    order = np.argsort(np.asarray(out_heads), kind="stable")  # clauses grouped by head, as generated
    lens_o = lens[order]
    offsets_o = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens_o, out=offsets_o[1:])
    body_o = np.concatenate([body[offsets[i]:offsets[i + 1]] for i in order]) if order.size else body
    return DerivationGraph(
        tuples=list(dg.tuples), rules=list(dg.rules),
        clause_rule=np.asarray(out_rules, np.int32)[order],
        clause_head=np.asarray(out_heads, np.int32)[order],
        body_offsets=offsets_o, body=body_o.astype(np.int32), priors=dict(dg.priors),
        alarms=np.asarray(dg.alarms).copy(), source=f"next_version({dg.source}, seed={seed})")


def _uniform(seed: int, key: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, key): the same in every version."""
    digest = hashlib.blake2b(f"{seed}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def world(dg: DerivationGraph, seed: int = 0) -> dict[str, bool]:
    """{tuple name: truth} of one world drawn by names (module docstring): inputs by their priors (0.5
    without one), clauses by their rules' probabilities, derived tuples the least fixpoint."""
    num_t = dg.num_tuples
    heads = np.asarray(dg.clause_head, np.int64)
    derived = np.bincount(heads, minlength=num_t) > 0
    truth = np.zeros(num_t, bool)
    for t in np.flatnonzero(~derived).tolist():
        truth[t] = _uniform(seed, "in\0" + dg.tuples[t]) < dg.priors.get(t, 0.5)
    fires = np.zeros(dg.num_clauses, bool)
    for g in range(dg.num_clauses):
        body = "\0".join(dg.tuples[b] for b in dg.clause_body(g).tolist())
        key = f"clause\0{dg.rules[int(dg.clause_rule[g])].name}\0{dg.tuples[int(heads[g])]}\0{body}"
        fires[g] = _uniform(seed, key) < dg.rules[int(dg.clause_rule[g])].probability
    changed = True
    while changed:
        changed = False
        for g in np.flatnonzero(fires).tolist():
            h = int(heads[g])
            if not truth[h] and all(truth[b] for b in dg.clause_body(g).tolist()):
                truth[h] = changed = True
    return dict(zip(dg.tuples, truth.tolist(), strict=True))


def coupled_truths(old: DerivationGraph, new: DerivationGraph, seed: int = 0):
    """The two versions' `world`s under one seed: ({name: truth} of old, {name: truth} of new)."""
    return world(old, seed), world(new, seed)


__all__ = ["next_version", "world", "coupled_truths"]
