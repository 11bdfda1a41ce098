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
not a variable (a merged clause maps to its head's variable), and `report`,
the counts of what each step removed or merged.
"""

from __future__ import annotations

import numpy as np

from datalog.cycles import Stages, least_fixpoint
from datalog.derivation import DEFAULT_INPUT_PRIOR, DerivationGraph
from fastlbp.errors import InputError
from fastlbp.graph import AND, OR, from_arrays
from fastlbp.model import Model


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
             stages: Stages | None = None, extra_report: dict | None = None) -> Model:
    """Converts a derivation graph to a named factor graph (cycle elimination always runs).

    Args:
        dg: the derivation graph (duplicates already merged, see
            `derivation.merge_duplicates`, or harmless repeats otherwise).
        compress: apply the exact compressions (module docstring).
        cycles: cycle-elimination mode, "cycles" or "bingo" (`datalog.cycles`).
        stages: the least-fixpoint stages if already computed.
        extra_report: counts to add to `meta["report"]` (e.g. from the loader).

    Raises:
        InputError: an alarm or label names a tuple that is not derivable, or
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
        if interest.any():
            needed_t, needed_c = _ancestors(dg, interest, clause_ok, entry_ok)
            report["pruned_tuples"] = int(np.count_nonzero(tuple_ok & ~needed_t))
            report["pruned_clauses"] = int(np.count_nonzero(clause_ok & ~needed_c))
            tuple_ok &= needed_t
            clause_ok &= needed_c
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
            return to_model(dg, compress=False, cycles=cycles, stages=st, extra_report=extra_report)
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
            "tuple_var": tuple_var.astype(np.int32),
            "clause_var": clause_var.astype(np.int32),
            "truth": {int(tuple_var[t]): bool(v) for t, v in dg.truth.items()},
            "report": report,
            "compressed": compress,
            "num_tuples": num_t,
            "num_clauses": num_c,
        },
    )
