"""Derivation graph -> Bayesian network -> factor graph (DESIGN.md section 3).

Variables: every tuple t (index t), then every clause g (index T + g), each
the head of exactly one factor, factor index = variable index:

* clause g = (t1 and ... and tn => t0): AND over its body, p1 = rule
  probability, p2 = 0;
* derived tuple: deterministic OR over the clauses deriving it (p1 = 1, p2 = 0);
* input tuple (derived by no clause): a prior, AND with no body, p1 = p2 = prior.

A tuple with an explicit prior that is also derived keeps both: an extra
input variable `t@input` with that prior joins its OR.
"""

from __future__ import annotations

import numpy as np

from datalog.derivation import DEFAULT_INPUT_PRIOR, DerivationGraph
from fastlbp.graph import AND, OR, from_arrays
from fastlbp.model import Model


def to_model(dg: DerivationGraph) -> Model:
    """Converts a derivation graph to a named factor graph.

    The returned `Model.meta` holds `num_tuples`, `num_clauses`, and
    `clause_var_offset` (clause g is variable num_tuples + g), so tools can
    map variables back to tuples and clauses.
    """
    num_t = dg.num_tuples
    num_c = dg.num_clauses
    heads = np.asarray(dg.clause_head, dtype=np.int64)
    derived_count = np.bincount(heads, minlength=num_t)
    prior_and_derived = sorted(t for t in dg.priors if derived_count[t] > 0)
    extra = {t: num_t + num_c + i for i, t in enumerate(prior_and_derived)}
    num_vars = num_t + num_c + len(extra)

    # Clause factors.
    rule_p = np.array([r.probability for r in dg.rules], dtype=np.float64)
    c_kind = np.full(num_c, AND)
    c_head = num_t + np.arange(num_c)
    c_p1 = rule_p[np.asarray(dg.clause_rule, dtype=np.int64)] if num_c else np.zeros(0)
    c_p2 = np.zeros(num_c)
    c_lens = np.diff(np.asarray(dg.body_offsets, dtype=np.int64))
    c_body = np.asarray(dg.body, dtype=np.int64)

    # Tuple factors: OR over deriving clauses (sorted by head, stable), or a prior.
    order = np.argsort(heads, kind="stable")
    t_lens = derived_count.astype(np.int64)
    t_body = num_t + order
    if extra:
        # Insert the extra input variable after each such tuple's clauses.
        ends = np.cumsum(t_lens)
        ins = np.array([ends[t] for t in prior_and_derived])
        t_body = np.insert(t_body, ins, [extra[t] for t in prior_and_derived])
        t_lens = t_lens.copy()
        t_lens[prior_and_derived] += 1
    t_kind = np.where(t_lens > 0, OR, AND)
    prior = np.full(num_t, DEFAULT_INPUT_PRIOR)
    for t, p in dg.priors.items():
        prior[t] = p
    t_p1 = np.where(t_lens > 0, 1.0, prior)
    t_p2 = np.where(t_lens > 0, 0.0, prior)

    e_kind = np.full(len(extra), AND)
    e_head = np.array(sorted(extra.values()), dtype=np.int64)
    e_p = np.array([dg.priors[t] for t in prior_and_derived], dtype=np.float64)

    kind = np.concatenate([t_kind, c_kind, e_kind])
    head = np.concatenate([np.arange(num_t), c_head, e_head])
    lens = np.concatenate([t_lens, c_lens, np.zeros(len(extra), np.int64)])
    body = np.concatenate([t_body, c_body])
    offsets = np.zeros(num_vars + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    p1 = np.concatenate([t_p1, c_p1, e_p])
    p2 = np.concatenate([t_p2, c_p2, e_p])
    graph = from_arrays(kind, head, offsets, body, p1, p2, num_vars=num_vars)

    rule_names = [r.name for r in dg.rules]
    clause_names = [
        f"{rule_names[int(dg.clause_rule[g])]}#{g}" for g in range(num_c)
    ]
    names = list(dg.tuples) + clause_names + [f"{dg.tuples[t]}@input" for t in prior_and_derived]
    return Model(
        graph=graph,
        var_names=tuple(names),
        alarms=tuple(int(a) for a in dg.alarms),
        labels=dict(dg.labels),
        source=dg.source,
        meta={"num_tuples": num_t, "num_clauses": num_c, "clause_var_offset": num_t,
              "derivation": dg},
    )
