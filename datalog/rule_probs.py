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
import math
import os
import re
from pathlib import Path

import numpy as np

from datalog.reading import Once, check_probability, name_value_lines, rule_prob_lines, shown
from fastlbp.core.errors import InputError
from fastlbp.core.model import Model

# The most pseudo-counts a rule's Beta prior may have (`fastlbp learn --prior-strength`, triage --learn):
# scipy's Beta quantiles are NaN once a + b passes about 1e17 (measured: none of 303 intervals at 1e16, 84
# at 1e17), and 1e12 pseudo-counts already hold a rule at its prior against any labels (issue 41:
# --prior-strength 1e308 printed "95% interval [nan, nan]"). Here, not in `fastlbp.inference.learn`, so
# that checking a session's settings imports no JAX.
MAX_PRIOR_STRENGTH = 1e12

_NUMBERED = re.compile(r"R(\d+)")


def read_rule_probs(path: str | os.PathLike) -> dict[str, float]:
    """{rule name: probability} from lines `NAME: p` (`datalog.reading.rule_prob_lines`).

    Raises:
        InputError: a malformed line, a value that is not a probability, or a
            rule given two different values (file and line).
    """
    return {name: p for _, name, p in rule_prob_lines(path)}


def read_priors(path: str | os.PathLike) -> list[tuple[int, str, float, float | None]]:
    """The per-rule priors of `fastlbp learn --prior FILE`: (line, rule name, centre p, strength or None).

    A line is `NAME: p` (the prior's centre, as --rule-prob's lines) or `NAME: p s` (and its
    pseudo-counts, in (0, `MAX_PRIOR_STRENGTH`]); split at the last colon; blank lines and `#`
    comments skipped; a rule named twice must repeat its values.

    Raises:
        InputError: a malformed line, a centre that is not a probability, a strength out of range,
            or a rule given two different priors (file and line).
    """
    p = Path(path)
    once = Once(p, "the prior of rule")
    out = []
    expected = "'Rk: p' or 'Rk: p strength'"
    for ln, s, name, value in name_value_lines(p, expected):
        fields = value.split()
        if len(fields) not in (1, 2):
            raise InputError(str(p), ln, f"malformed line, expected {expected}, got {shown(s)}")
        centre = check_probability(fields[0], str(p), ln, None, f"prior of rule {name}")
        strength = None
        if len(fields) == 2:
            try:
                strength = float(fields[1])
            except ValueError:
                strength = math.nan
            if not 0 < strength <= MAX_PRIOR_STRENGTH:
                raise InputError(str(p), ln, f"the prior strength of rule {name} must be a number in (0, "
                                 f"{MAX_PRIOR_STRENGTH:g}] (pseudo-counts), got {shown(fields[1])}")
        once.set(name, (centre, strength), ln, name,
                 lambda v: f"{v[0]:g}" + ("" if v[1] is None else f" with strength {v[1]:g}"))
        out.append((ln, name, centre, strength))
    return out


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
