"""Derivation graph -> acyclic, compressed Bayesian network -> factor graph (docs/DESIGN.md section 3).

Pipeline of `to_model`:

1. Cycle elimination (`datalog.cycles`): a clause on a cycle survives only if
   its body was derived strictly before its head in the least fixpoint
   (mode "bingo": every clause is held to that); tuples that only cyclic
   derivations support are dropped. An acyclic graph is left as it is.
2. Compression (`compress=True`, what the file loaders do), each step
   exact: every alarm's (indeed every remaining variable's) marginal is
   unchanged, with or without evidence on kept variables, exactly and under
   LBP:

   * constant inputs: an input tuple with prior 1.0 is always true, so it
     is removed from the bodies of AND factors (AND with a true conjunct is
     the same AND);
   * pruning: variables from which no alarm or labelled tuple can be
     reached are barren (no evidence, no observed descendant) and are
     summed out, which changes no other marginal;
   * chain merging: a tuple with exactly one surviving derivation g is a
     deterministic OR of one variable, i.e. X_t = X_g, so t and g become one
     variable (named t) whose factor is g's AND.

   With no alarms and no labels nothing is pruned.
3. Factors, one per variable with that variable as head:

   * clause g = (t1 and ... and tn => t0): AND over its body, p1 = rule
     probability, p2 = 0;
   * derived tuple: deterministic OR over its clauses (p1 = 1, p2 = 0);
   * input tuple: a prior, AND with no body, p1 = p2 = prior;
   * a tuple with a prior that kept clauses also derive: OR over its clauses
     and an extra input variable `name@input` (the prior).

Variables are the kept tuples (input order), then the kept clauses that were
not merged (input order), then the `@input` variables. Without compression
on an acyclic graph: every tuple, then every clause. `Model.meta` keeps the mapping back:
`tuple_var` (T,) and `clause_var` (C,) int32, -1 where the tuple or clause is
not a variable (a merged clause maps to its head's variable), `tuple_names`
(T,) and `tuple_how` (T,) int8 (what became of each tuple: a variable, a
constant, pruned or underivable, `fastlbp.core.model`), and `report`, the counts of
what each step removed or merged.

Every tuple of the input can be asked for: `rebuild` makes the model again
keeping named tuples as variables (as if they were labelled: a label from a
labels file then acts exactly like the same label in the graph), or pruning
nothing; `tuple_marginals` gives every tuple's P(=1) from a model's marginals.
"""

from __future__ import annotations

import numpy as np

from datalog.cycles import Stages, least_fixpoint
from datalog.derivation import DEFAULT_INPUT_PRIOR, DerivationGraph
from fastlbp.core.errors import InputError
from fastlbp.core.graph import AND, OR, from_arrays
from fastlbp.core.model import CONSTANT, PRUNED, REASONS, UNDERIVABLE, VARIABLE, Model

# Counts `to_model` itself puts in meta["report"]; the rest came from the loader (`extra_report`).
_OWN_REPORT = ("clauses_dropped_by_cycle_elimination", "underivable_tuples", "constant_inputs_removed",
               "pruned_tuples", "pruned_clauses", "merged_tuples")


def _interest(dg: DerivationGraph) -> np.ndarray:
    """(T,) bool: alarms and labelled tuples, which compression must keep as variables."""
    mask = np.zeros(dg.num_tuples, bool)
    mask[np.asarray(dg.alarms, np.int64)] = True
    for group in (dg.labels, dg.truth):
        if group:
            mask[np.fromiter(group.keys(), np.int64, len(group))] = True
    return mask


def _ancestors(dg: DerivationGraph, roots: np.ndarray, clause_ok: np.ndarray,
               entry_ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tuples and clauses from which `roots` can be reached over usable clauses and body entries."""
    from datalog.cycles import _ranges

    num_t, num_c = dg.num_tuples, dg.num_clauses
    heads = np.asarray(dg.clause_head, np.int64)
    offsets = np.asarray(dg.body_offsets, np.int64)
    body = np.asarray(dg.body, np.int64)
    usable = np.flatnonzero(clause_ok)
    by_head = usable[np.argsort(heads[usable], kind="stable")]
    head_offsets = np.zeros(num_t + 1, np.int64)
    np.cumsum(np.bincount(heads[usable], minlength=num_t), out=head_offsets[1:])
    tuple_seen = roots.copy()
    clause_seen = np.zeros(num_c, bool)
    frontier = np.flatnonzero(roots)
    while frontier.size:
        clauses = by_head[_ranges(head_offsets, frontier)]
        clauses = clauses[~clause_seen[clauses]]
        clause_seen[clauses] = True
        entries = _ranges(offsets, clauses)
        entries = entries[entry_ok[entries]]
        new = np.unique(body[entries])
        new = new[~tuple_seen[new]]
        tuple_seen[new] = True
        frontier = new
    return tuple_seen, clause_seen


def to_model(dg: DerivationGraph, *, compress: bool = False, cycles: str = "cycles",
             stages: Stages | None = None, extra_report: dict | None = None,
             keep: np.ndarray | None = None, prune: bool = True) -> Model:
    """Converts a derivation graph to a named factor graph (cycle elimination always runs).

    Args:
        dg: the derivation graph (duplicates already merged, see
            `derivation.merge_duplicates`, or harmless repeats otherwise).
        compress: apply the exact compressions (module docstring).
        cycles: cycle-elimination mode, "cycles" or "bingo" (`datalog.cycles`).
        stages: the least-fixpoint stages if already computed.
        extra_report: counts to add to `meta["report"]` (e.g. from the loader).
        keep: (T,) bool, tuples to keep as variables like alarms and labels
            (compression neither prunes them nor removes them as constants).
        prune: with `compress`, sum out the tuples no alarm, label or kept
            tuple depends on; False keeps every derivable tuple that is not a
            constant input.

    Raises:
        InputError: an alarm, label or kept tuple is not derivable, or
            nothing is left.
    """
    num_t, num_c = dg.num_tuples, dg.num_clauses
    st = stages if stages is not None else least_fixpoint(dg, cycles)
    derivable = st.derivable
    heads = np.asarray(dg.clause_head, np.int64)
    rules = np.asarray(dg.clause_rule, np.int64)
    offsets = np.asarray(dg.body_offsets, np.int64)
    body = np.asarray(dg.body, np.int64)
    lens = np.diff(offsets)
    entry_clause = np.repeat(np.arange(num_c), lens)

    interest = _interest(dg)
    kept = np.zeros(num_t, bool) if keep is None else np.asarray(keep, bool).copy()
    bad = np.flatnonzero(kept & ~derivable)
    if bad.size:
        raise InputError(dg.source, None, f"tuple {dg.tuples[bad[0]]!r} cannot be kept as a variable: "
                         f"{REASONS[UNDERIVABLE]} ({bad.size} such tuples)")
    prunable = prune and interest.any()  # with no alarm and no label nothing is pruned
    interest |= kept
    bad = np.flatnonzero(interest & ~derivable)
    if bad.size:
        raise InputError(dg.source, None, f"tuple {dg.tuples[bad[0]]!r} is an alarm or label but is "
                         "neither an input nor derivable from the inputs (every derivation of it "
                         f"depends on itself; {bad.size} such tuples)")

    prior = np.full(num_t, DEFAULT_INPUT_PRIOR)
    for t, p in dg.priors.items():
        prior[t] = p
    clause_ok = st.clause_kept.copy()
    tuple_ok = derivable.copy()
    entry_ok = np.ones(body.size, bool)
    report = {
        "clauses_dropped_by_cycle_elimination": st.num_dropped_clauses,
        "underivable_tuples": int(np.count_nonzero(~derivable)),
        "constant_inputs_removed": 0,
        "pruned_tuples": 0,
        "pruned_clauses": 0,
        "merged_tuples": 0,
    }
    if compress:
        # Pure inputs (no surviving derivation) with prior 1 are certain facts.
        has_clause = np.bincount(heads[clause_ok], minlength=num_t) > 0
        constant = derivable & ~has_clause & (prior == 1.0) & ~interest
        entry_ok = ~constant[body]
        tuple_ok &= ~constant
        report["constant_inputs_removed"] = int(np.count_nonzero(constant & derivable))
        if prunable:
            needed_t, needed_c = _ancestors(dg, interest, clause_ok, entry_ok)
            report["pruned_tuples"] = int(np.count_nonzero(tuple_ok & ~needed_t))
            report["pruned_clauses"] = int(np.count_nonzero(clause_ok & ~needed_c))
            tuple_ok &= needed_t
            clause_ok &= needed_c
    else:
        constant = np.zeros(num_t, bool)
    how = np.full(num_t, VARIABLE, np.int8)
    how[~derivable] = UNDERIVABLE
    how[constant] = CONSTANT
    how[derivable & ~constant & ~tuple_ok] = PRUNED
    # A kept derived tuple with one kept clause is merged with it.
    kept_per_head = np.bincount(heads[clause_ok], minlength=num_t)
    has_prior = np.zeros(num_t, bool)
    if dg.priors:
        has_prior[np.fromiter(dg.priors.keys(), np.int64, len(dg.priors))] = True
    derived = tuple_ok & (kept_per_head > 0)
    pure_input = tuple_ok & (kept_per_head == 0)
    with_input_var = derived & has_prior
    if compress:
        merged_tuple = derived & ~has_prior & (kept_per_head == 1)
    else:
        merged_tuple = np.zeros(num_t, bool)
    clause_merged = clause_ok & merged_tuple[heads]
    report["merged_tuples"] = int(np.count_nonzero(merged_tuple))
    if extra_report:
        report = {**extra_report, **report}

    # Variable numbering: kept tuples, then kept unmerged clauses.
    tuple_var = np.full(num_t, -1, np.int64)
    tv = np.flatnonzero(tuple_ok)
    tuple_var[tv] = np.arange(tv.size)
    clause_var = np.full(num_c, -1, np.int64)
    cv = np.flatnonzero(clause_ok & ~clause_merged)
    clause_var[cv] = tv.size + np.arange(cv.size)
    clause_var[clause_merged] = tuple_var[heads[clause_merged]]
    xt = np.flatnonzero(with_input_var)  # tuples that get a `name@input` variable
    input_var = tv.size + cv.size + np.arange(xt.size)
    num_vars = tv.size + cv.size + xt.size
    if num_vars == 0:
        if compress:  # every tuple is a certain fact: keep them rather than return an empty model
            return to_model(dg, compress=False, cycles=cycles, stages=st, extra_report=extra_report,
                            keep=keep, prune=prune)
        raise InputError(dg.source, None, "no tuple is an input or derivable from the inputs: "
                         "nothing is left of the graph after cycle elimination")

    # Per-variable factor: kind, p1, p2.
    rule_p = np.array([r.probability for r in dg.rules], np.float64)
    kind = np.full(num_vars, AND, np.int64)
    p1 = np.zeros(num_vars)
    p2 = np.zeros(num_vars)
    derived_t = np.flatnonzero(derived)
    kind[tuple_var[derived_t]] = OR
    p1[tuple_var[derived_t]] = 1.0
    inputs_t = np.flatnonzero(pure_input)
    p1[tuple_var[inputs_t]] = prior[inputs_t]
    p2[tuple_var[inputs_t]] = prior[inputs_t]
    p1[input_var] = prior[xt]
    p2[input_var] = prior[xt]
    and_clauses = np.flatnonzero(clause_ok)
    and_owner = clause_var[and_clauses]  # merged clauses own their head's variable
    kind[and_owner] = AND
    p1[and_owner] = rule_p[rules[and_clauses]] if and_clauses.size else 0.0

    # Body entries (owner variable, member variable), grouped by owner, stable.
    or_clauses = np.flatnonzero(clause_ok & ~clause_merged)
    or_owner = tuple_var[heads[or_clauses]]
    or_member = clause_var[or_clauses]
    entries = np.flatnonzero(entry_ok & clause_ok[entry_clause])
    and_entry_owner = clause_var[entry_clause[entries]]
    and_member = tuple_var[body[entries]]
    # The `@input` variable joins its tuple's OR after the clauses (stable sort keeps it last).
    owner = np.concatenate([or_owner, tuple_var[xt], and_entry_owner])
    member = np.concatenate([or_member, input_var, and_member])
    order = np.argsort(owner, kind="stable")
    factor_body = member[order]
    counts = np.bincount(owner, minlength=num_vars)
    empty_and = (kind == AND) & (counts == 0)
    p2[empty_and] = p1[empty_and]  # no body: the prior is p1 either way; p2 = p1 reads as one
    f_offsets = np.zeros(num_vars + 1, np.int64)
    np.cumsum(counts, out=f_offsets[1:])
    graph = from_arrays(kind, np.arange(num_vars), f_offsets, factor_body, p1, p2, num_vars=num_vars)

    rule_names = [r.name for r in dg.rules]
    names = ([dg.tuples[t] for t in tv] + [f"{rule_names[rules[g]]}#{g}" for g in cv]
             + [f"{dg.tuples[t]}@input" for t in xt])
    return Model(
        graph=graph,
        var_names=tuple(names),
        alarms=tuple(int(tuple_var[a]) for a in np.asarray(dg.alarms, np.int64)),
        labels={int(tuple_var[t]): bool(v) for t, v in dg.labels.items()},
        source=dg.source,
        meta={
            "derivation": dg,
            "stages": st,
            "tuple_names": tuple(dg.tuples),
            "tuple_var": tuple_var.astype(np.int32),
            "tuple_how": how,
            "clause_var": clause_var.astype(np.int32),
            "kept_tuples": np.flatnonzero(kept),
            "pruning": bool(prune),
            "extra_report": dict(extra_report or {}),
            "truth": {int(tuple_var[t]): bool(v) for t, v in dg.truth.items()},
            "report": report,
            "compressed": compress,
            "num_tuples": num_t,
            "num_clauses": num_c,
        },
    )


def rebuild(model: Model, *, keep=(), prune: bool | None = None) -> Model:
    """The model made again from its derivation graph, keeping more tuples as variables.

    Args:
        model: a model `to_model` made (it has `meta["derivation"]`).
        keep: tuple indices to keep as variables, in addition to those the
            model kept already (alarms, labels, earlier `keep`).
        prune: None keeps the model's choice; False prunes nothing.

    Returns:
        `model` itself when nothing changes, else the new model (variable
        numbering changes; the loader's `meta` entries are carried over).

    Raises:
        InputError: a tuple to keep is underivable (cycle elimination).
    """
    meta = model.meta
    dg, st = meta["derivation"], meta["stages"]
    keep = np.asarray(list(keep) if not isinstance(keep, np.ndarray) else keep, np.int64)
    pruning = meta.get("pruning", True) if prune is None else bool(prune)
    how = np.asarray(meta["tuple_how"])
    if pruning == meta.get("pruning", True) and np.all(how[keep] == VARIABLE):
        return model
    mask = np.zeros(dg.num_tuples, bool)
    mask[np.asarray(meta.get("kept_tuples", ()), np.int64)] = True
    mask[keep] = True
    new = to_model(dg, compress=meta["compressed"], cycles=st.mode, stages=st,
                   extra_report=meta.get("extra_report"), keep=mask, prune=pruning)
    for key, value in meta.items():  # what the loader added after `to_model` (warnings, ...)
        new.meta.setdefault(key, value)
    return new


def tuple_marginals(model: Model, marginals: np.ndarray) -> np.ndarray:
    """(T,) float64 P(=1) of every tuple of the input graph, from the model's (V,) marginals.

    A tuple with a variable has its variable's marginal; a constant input
    1.0; an underivable tuple 0.0 (it is in no least fixpoint). A pruned tuple
    is barren (no evidence at or below it), so the messages it sends up are
    uniform and LBP's belief in it is the forward probability from its parents'
    beliefs taken as independent: P(clause) = rule x product of its body's P,
    P(tuple) = 1 - (1 - prior) x product over its clauses of (1 - P(clause)),
    computed here in topological order. That is what LBP on the unpruned model
    gives at the same fixed point, and exact where the pruned region's parents
    are independent (a polytree); `rebuild(model, prune=False)` keeps them as
    variables instead.

    Args:
        model: a model `to_model` made (others: `marginals` is returned as it is).
        marginals: (V,) float64 P(=1) of the model's variables.
    """
    marginals = np.asarray(marginals, np.float64)
    if "tuple_how" not in model.meta:
        return marginals
    dg, st = model.meta["derivation"], model.meta["stages"]
    how = np.asarray(model.meta["tuple_how"])
    tv = np.asarray(model.meta["tuple_var"], np.int64)
    out = np.where(tv >= 0, marginals[np.maximum(tv, 0)], 0.0)
    out[how == CONSTANT] = 1.0
    out[how == UNDERIVABLE] = 0.0
    pruned = how == PRUNED
    if pruned.any():
        _forward(dg, st, pruned, out)
    return out


def _forward(dg: DerivationGraph, st: Stages, pruned: np.ndarray, out: np.ndarray) -> None:
    """Fills `out[pruned]` by the forward pass of `tuple_marginals` (Kahn's order, numpy per frontier)."""
    from datalog.cycles import _ranges

    num_t = dg.num_tuples
    heads = np.asarray(dg.clause_head, np.int64)
    offsets = np.asarray(dg.body_offsets, np.int64)
    body = np.asarray(dg.body, np.int64)
    rule_p = np.array([r.probability for r in dg.rules], np.float64)[np.asarray(dg.clause_rule, np.int64)]
    # 1 - prior: the chance that a tuple's input part is false (1 for a derived tuple without one).
    not_input = np.where(st.is_input, 1.0 - DEFAULT_INPUT_PRIOR, 1.0)
    for t, p in dg.priors.items():
        not_input[t] = 1.0 - p
    clauses = np.flatnonzero(st.clause_kept & pruned[heads])  # the clauses deriving pruned tuples
    per_head = np.bincount(heads[clauses], minlength=num_t)
    lens = np.diff(offsets)
    entries = _ranges(offsets, clauses)
    entry_clause = np.repeat(clauses, lens[clauses])
    waits = pruned[body[entries]]
    waiting_c = np.bincount(entry_clause[waits], minlength=dg.num_clauses)  # pruned body tuples not done
    waiting_t = per_head.copy()  # clauses of a pruned tuple not done
    # Pruned tuple -> the clauses (of those) whose bodies name it.
    order = np.argsort(body[entries[waits]], kind="stable")
    occ_clause = entry_clause[waits][order]
    occ_offsets = np.zeros(num_t + 1, np.int64)
    np.cumsum(np.bincount(body[entries[waits]], minlength=num_t), out=occ_offsets[1:])
    with np.errstate(divide="ignore"):
        log_false = np.log(not_input)  # log P(tuple false), accumulated over its clauses
    ready_c = clauses[waiting_c[clauses] == 0]
    ready_t = np.flatnonzero(pruned & (per_head == 0))
    with np.errstate(divide="ignore"):
        while ready_c.size or ready_t.size:
            if ready_c.size:
                e = _ranges(offsets, ready_c)
                owner = np.repeat(np.arange(ready_c.size), lens[ready_c])
                log_body = np.bincount(owner, np.log(out[body[e]]), minlength=ready_c.size)
                p_clause = rule_p[ready_c] * np.exp(log_body)
                h = heads[ready_c]
                np.add.at(log_false, h, np.log1p(-p_clause))
                np.subtract.at(waiting_t, h, 1)
                h = np.unique(h)
                ready_t = np.union1d(ready_t, h[waiting_t[h] == 0])
            out[ready_t] = -np.expm1(log_false[ready_t])
            users = occ_clause[_ranges(occ_offsets, ready_t)]
            np.subtract.at(waiting_c, users, 1)
            users = np.unique(users)
            ready_c = users[waiting_c[users] == 0]
            ready_t = np.zeros(0, np.int64)
