"""Soft evidence: an independent observation that a tuple is true, of likelihood ratio p / (1 - p).

A soft label `race(1,2) 0.8` says: something (a classifier, a reviewer's
confidence, a label carried from an older version of the program) observed the
tuple, and that observation is p / (1 - p) = 4 times as likely if the tuple is
true as if it is false. It multiplies every world's weight by p where the tuple
holds and by 1 - p where it does not: a unary factor. The posterior is the
prior's odds times that ratio only for a tuple nothing else depends on; in a
graph the evidence flows to its derivations and the alarms that share them,
as a hard label's does. p = 0.5 changes nothing; p in {0, 1} is a hard label
(written in a labels file instead).

How each method takes it (`fastlbp.inference.session.Session.soft`):

* LBP: the variable's evidence log-odds is log(p / (1 - p)) (finite) instead
  of 0, added to its incoming messages like every evidence term
  (`fastlbp.core.equations.var_aggregates`); nothing in the engines changes.
* exact inference and sampling: the graph gets one observed child per soft
  tuple, o_v with the factor P(o_v = 1 | v) = p if v else 1 - p, labelled
  true (`observed_graph`). Clamping o_v multiplies each world by exactly that
  unary factor, so bucket elimination stays exact and the sampler's
  importance weight of the labels (`fastlbp.engines.importance`) carries it;
  the extra variables are leaves, so the induced width does not grow.
  Results are cut back to the model's variables.

A file of soft labels has one `NAME P` per line (P strictly between 0 and 1;
a tab, a comma or spaces between; `#` comments), like a labels file.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from fastlbp.core.errors import InputError
from fastlbp.core.graph import AND, FactorGraph, from_arrays
from fastlbp.core.model import UNDERIVABLE, Model

OBSERVED_PREFIX = "observed:"  # the name of a soft tuple's observed child (`observed_graph`)


def _probability(name: str, value: str) -> float:
    """A soft label's P: a number (ValueError otherwise) strictly between 0 and 1 (`BadValue`)."""
    from fastlbp.core.name_values import BadValue

    p = float(value)
    if not math.isfinite(p):
        raise ValueError(value)
    if not 0.0 < p < 1.0:
        raise BadValue(f"P = {p:g} for {name!r} is not strictly between 0 and 1 (a certain observation is "
                       "a label: put it in --labels)")
    return p


def parse_soft_labels(path: str | os.PathLike) -> list[tuple[int, str, float]]:
    """The lines of a soft-labels file as written: (line, name, p), in file order
    (`fastlbp.core.name_values`, as a labels file).

    Raises:
        InputError: a line that is not `NAME P`, or P not strictly between 0 and 1 (file and line named).
    """
    from fastlbp.core.name_values import read_name_values

    return read_name_values(path, _probability, "NAME P")


def load_soft_labels(path: str | os.PathLike, model: Model, labels: dict[int, bool] | None = None
                     ) -> tuple[Model, dict[int, float], dict[int, bool]]:
    """Reads a soft-labels file onto `model`'s variables.

    A tuple compression removed is kept by making the model again (as
    `fastlbp.io.loading.load_labels` does); `labels` (given on `model`) are then
    carried to the new model's numbering by name.

    Returns:
        (the model, {variable: p}, the labels on that model).

    Raises:
        InputError: a bad line, an unknown name, an underivable tuple, a tuple given two different p.
    """
    p = str(Path(path))
    rows = []
    for ln, name, value in parse_soft_labels(path):
        try:
            r = model.resolve(name)
        except KeyError:
            raise InputError(p, ln, f"unknown variable {name!r}: no tuple or variable of the graph has that "
                             "name") from None
        if r.how == UNDERIVABLE:
            raise InputError(p, ln, f"{name!r} cannot be observed: {r.reason}")
        rows.append((ln, name, value, r))
    labels = dict(labels or {})
    missing = sorted({r.tuple for *_, r in rows if r.var < 0})
    if missing:
        from datalog.bayesnet import rebuild

        old = model
        model = rebuild(model, keep=missing)
        labels = {model.index[old.var_names[v]]: t for v, t in labels.items()}
        rows = [(ln, name, value, model.resolve(r.name)) for ln, name, value, r in rows]
    soft: dict[int, float] = {}
    first: dict[int, int] = {}
    for ln, name, value, r in rows:
        if soft.get(r.var, value) != value:
            raise InputError(p, ln, f"{name!r} is observed with P = {value:g} here but {soft[r.var]:g} "
                             f"on line {first[r.var]}")
        soft[r.var] = value
        first.setdefault(r.var, ln)
    return model, soft, labels


def check_soft(soft: dict[int, float], num_vars: int) -> dict[int, float]:
    """{int variable: float p} after checking every variable exists and every p is in (0, 1).

    Raises:
        ValueError: a variable out of range or a p outside (0, 1).
    """
    out = {}
    for v, p in soft.items():
        v, p = int(v), float(p)
        if not 0 <= v < num_vars:
            raise ValueError(f"soft evidence on variable {v}: the model has {num_vars} variables")
        if not 0.0 < p < 1.0:
            raise ValueError(f"soft evidence P = {p!r} on variable {v} is not strictly between 0 and 1")
        out[v] = p
    return out


def soft_log_odds(num_vars: int, soft: dict[int, float]) -> np.ndarray:
    """(V,) float64 evidence log-odds log(p / (1 - p)) of the soft variables, 0 elsewhere."""
    out = np.zeros(num_vars)
    for v, p in soft.items():
        out[v] = math.log(p) - math.log1p(-p)
    return out


def observed_graph(graph: FactorGraph, soft: dict[int, float]) -> tuple[FactorGraph, dict[int, bool]]:
    """`graph` with an observed child o_v per soft variable v, and the labels {o_v: True}.

    o_v = V + i for the i-th soft variable in sorted order, with one AND factor
    over the body (v,): P(o_v = 1) = p where v holds, 1 - p where it does not.

    Returns:
        (the graph of V + k variables, {o_v: True}).
    """
    g = graph.to_numpy()
    off = np.asarray(g.factor_offsets, np.int64)
    ev = np.asarray(g.edge_var, np.int64)
    heads = ev[off[:-1]]
    body_mask = np.ones(ev.size, bool)
    body_mask[off[:-1]] = False
    body = ev[body_mask]
    lens = np.diff(off) - 1
    vs = sorted(soft)
    n, k = graph.num_vars, len(vs)
    ps = np.array([soft[v] for v in vs], np.float64)
    kinds = np.concatenate([np.asarray(g.factor_kind, np.int64), np.full(k, AND, np.int64)])
    new_heads = np.concatenate([heads, n + np.arange(k, dtype=np.int64)])
    new_lens = np.concatenate([lens, np.ones(k, np.int64)])
    offsets = np.zeros(new_lens.size + 1, np.int64)
    np.cumsum(new_lens, out=offsets[1:])
    new_body = np.concatenate([body, np.asarray(vs, np.int64)])
    p1 = np.concatenate([np.asarray(g.p1, np.float64), ps])
    p2 = np.concatenate([np.asarray(g.p2, np.float64), 1.0 - ps])
    out = from_arrays(kinds, new_heads, offsets, new_body, p1, p2, num_vars=n + k)
    return out, {n + i: True for i in range(k)}


def observed_model(model: Model, soft: dict[int, float]) -> tuple[Model, dict[int, bool]]:
    """`observed_graph` as a `Model` (its alarms kept, the children named `observed:NAME`), and its labels."""
    graph, labels = observed_graph(model.graph, soft)
    names = model.var_names + tuple(OBSERVED_PREFIX + model.var_names[v] for v in sorted(soft))
    return dataclasses.replace(model, graph=graph, var_names=names, labels={}, meta={}), labels


__all__ = ["parse_soft_labels", "load_soft_labels", "check_soft", "soft_log_odds", "observed_graph",
           "observed_model", "OBSERVED_PREFIX"]
