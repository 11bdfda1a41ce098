"""Rule-probability files (`Rk: p`, Bingo's rule-prob.txt) for any loaded model.

    probs = read_rule_probs("learned.txt")          # {rule name: p}
    model = apply_rule_probs(model, probs)          # clause factors take the new values
    write_rule_probs("learned.txt", lines)          # `Rk: p` lines with comments

Rules are matched by name (the names of the derivation graph: `R12` in Bingo
directories, `leak-3fa2c1` in a graph grounded from a Soufflé program
(`datalog.souffle_rules`), the keys of derivation.json's "rules"), so a file
learned on some graphs of one analysis applies to any other graph of it. In a
graph whose rules are not named `Rk` (a grounded program's), `Rk` names its
k-th rule (file order, from 0), as it did before programs' rules had stable
names. A rule the file names that the graph lacks is not an error (the file may
come from other graphs); `apply_rule_probs` reports those names in
`meta["rule_prob"]["absent"]`.
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from datalog.reading import rule_prob_lines
from fastlbp.core.errors import InputError
from fastlbp.core.model import Model

_NUMBERED = re.compile(r"R(\d+)")


def read_rule_probs(path: str | os.PathLike) -> dict[str, float]:
    """{rule name: probability} from lines `NAME: p` (`datalog.reading.rule_prob_lines`).

    Raises:
        InputError: a malformed line, a value that is not a probability, or a
            rule given two different values (file and line).
    """
    return {name: p for _, name, p in rule_prob_lines(path)}


def rule_names(model: Model) -> list[str]:
    """The rule names of a model made from a derivation graph, in the graph's rule order.

    Raises:
        InputError: the model has no rules (a libDAI factor graph, say).
    """
    dg = model.meta.get("derivation")
    if dg is None:
        raise InputError(model.source, None, "this graph has no rules (only derivation graphs, Bingo "
                         "directories and Datalog programs do), so rule probabilities cannot apply")
    return [r.name for r in dg.rules]


def clause_factors(model: Model) -> tuple[np.ndarray, np.ndarray]:
    """The clause factors of a derivation-graph model and their rules.

    Every kept clause owns one variable (its own, or its head's when
    compression merged the two) whose factor is the clause's AND with p1 =
    the rule's probability (`datalog.bayesnet.to_model`).

    Returns:
        ((K,) int64 factor index, (K,) int64 rule index into the graph's rules).
    """
    rule_names(model)  # raises for a model without rules
    dg = model.meta["derivation"]
    cv = np.asarray(model.meta["clause_var"], np.int64)
    kept = np.flatnonzero(cv >= 0)
    var = cv[kept]
    heads = np.asarray(model.graph.factor_head, np.int64)
    factor_of = np.full(model.num_vars, -1, np.int64)
    factor_of[heads] = np.arange(heads.size)
    return factor_of[var], np.asarray(dg.clause_rule, np.int64)[kept]


def apply_rule_probs(model: Model, probs: dict[str, float], source: str | None = None) -> Model:
    """The model with the probabilities of the rules `probs` names (others unchanged).

    Only factor parameters change (the graph's structure, names and labels are
    kept), so compiled programs for the model serve the new one. The
    derivation graph in `meta` gets the new rules too, so a rebuilt model
    (`datalog.bayesnet.rebuild`) keeps them.

    Args:
        model: a model made from a derivation graph.
        probs: {rule name: probability}.
        source: the file they came from, for `meta["rule_prob"]`.

    Returns:
        A new model; `meta["rule_prob"]` = {"source", "applied": rules set, "absent": names the graph
        lacks}.

    Raises:
        InputError: the model has no rules.
    """
    names = rule_names(model)
    dg = model.meta["derivation"]
    index = {n: i for i, n in enumerate(names)}
    numbered = any(_NUMBERED.fullmatch(n) for n in names)  # Bingo's R0, R1, ...: names, never positions
    new_p = np.array([r.probability for r in dg.rules], np.float64)
    applied = []
    given: dict[int, str] = {}
    for name, p in probs.items():
        i = index.get(name)
        m = _NUMBERED.fullmatch(name)
        if i is None and m is not None and not numbered and int(m.group(1)) < len(names):
            i = int(m.group(1))  # Rk: the k-th rule of a program, as files written before stable names say
        if i is None:
            continue
        if i in given and probs[given[i]] != p:
            raise InputError(source or model.source, None, f"rule {names[i]} is given two probabilities: "
                             f"{probs[given[i]]} as {given[i]} and {p} as {name}")
        given.setdefault(i, name)
        new_p[i] = p
        applied.append(name)
    factors, rules = clause_factors(model)
    p1 = np.array(model.graph.p1, np.float64, copy=True)
    p2 = np.array(model.graph.p2, np.float64, copy=True)
    p1[factors] = new_p[rules]
    # A clause with no body left (constant inputs removed) is a prior: p2 = p1 (`to_model`).
    offsets = np.asarray(model.graph.factor_offsets, np.int64)
    empty = factors[offsets[factors + 1] - offsets[factors] == 1]
    p2[empty] = p1[empty]
    graph = dataclasses.replace(model.graph, p1=p1, p2=p2)
    new_dg = dataclasses.replace(dg, rules=[dataclasses.replace(r, probability=float(q))
                                            for r, q in zip(dg.rules, new_p, strict=True)])
    meta = {**model.meta, "derivation": new_dg,
            "rule_prob": {"source": source, "applied": applied,
                          "absent": [n for n in probs if n not in applied]}}
    return dataclasses.replace(model, graph=graph, meta=meta)


@dataclasses.dataclass(frozen=True)
class RuleLine:
    """One rule of a written file: `# comment` (when given), then `name: probability`."""

    name: str
    probability: float
    comment: str = ""


def format_rule_probs(lines: list[RuleLine], header: list[str] = ()) -> str:
    """The text of a rule-probability file: `#` header lines, then per rule its comment line and `NAME: p`.

    Comments take whole lines, as every reader of `Rk: p` files skips them
    (`ground --rule-prob`, Bingo directories, `read_rule_probs`).
    """
    out = [f"# {h}" for h in header]
    for r in lines:
        if r.comment:
            out.append(f"# {r.comment}")
        out.append(f"{r.name}: {r.probability:.6g}")
    return "\n".join(out) + "\n"


__all__ = ["read_rule_probs", "apply_rule_probs", "rule_names", "clause_factors", "RuleLine",
           "format_rule_probs"]
