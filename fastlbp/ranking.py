"""Ranked alarms: the unlabelled alarms of a model by probability, labelled ones apart.

`rank_alarms` orders the unlabelled alarms of a model by P(alarm = 1) (ties
by input order, so a ranking is deterministic) and lists labelled alarms
apart; `rank` runs the cold round first. `fastlbp.writers` turns a `Ranking`
into text (table, JSON, CSV, SARIF).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastlbp.model import Model
from fastlbp.session import Session
from fastlbp.settings import Settings


@dataclasses.dataclass(frozen=True)
class RankedAlarm:
    rank: int  # 1-based position among unlabelled alarms
    alarm: str
    var: int
    probability: float


@dataclasses.dataclass(frozen=True)
class LabelledAlarm:
    alarm: str
    var: int
    truth: bool
    probability: float


@dataclasses.dataclass(frozen=True)
class Ranking:
    """Unlabelled alarms by decreasing probability, labelled ones apart, and how inference went."""

    alarms: list[RankedAlarm]
    labelled: list[LabelledAlarm]
    iterations: int
    converged: bool
    delta: float
    seconds: float
    total_unlabelled: int  # before `top` cut the list


def alarm_vars(model: Model) -> np.ndarray:
    """(A,) int64 alarm variables; a model without alarms (a bare factor graph) ranks every variable."""
    if model.alarms:
        return np.asarray(model.alarms, dtype=np.int64)
    return np.arange(model.num_vars, dtype=np.int64)


def order_alarms(marginals: np.ndarray, alarms: np.ndarray, exclude=()) -> np.ndarray:
    """`alarms` minus `exclude`, by decreasing marginal, ties in the given order.

    Args:
        marginals: (V,) P(x=1).
        alarms: (A,) alarm variables.
        exclude: variables to leave out (the labelled ones).

    Returns:
        (A',) int64 variables.
    """
    alarms = np.asarray(alarms, dtype=np.int64)
    if len(exclude):
        alarms = alarms[~np.isin(alarms, np.fromiter(exclude, dtype=np.int64))]
    p = np.asarray(marginals, dtype=np.float64)[alarms]
    # NaN never happens after a successful round, but must not scramble a sort.
    p = np.where(np.isnan(p), -1.0, p)
    return alarms[np.argsort(-p, kind="stable")]


def rank_alarms(model: Model, marginals: np.ndarray, labels: dict[int, bool], *, top: int | None = None,
                iterations: int = 0, converged: bool = True, delta: float = 0.0,
                seconds: float = 0.0) -> Ranking:
    """Builds a `Ranking` from marginals (see `order_alarms`)."""
    alarms = alarm_vars(model)
    ordered = order_alarms(marginals, alarms, exclude=[v for v in labels])
    shown = ordered if top is None else ordered[:top]
    names = model.var_names
    ranked = [RankedAlarm(i + 1, names[v], int(v), float(marginals[v])) for i, v in enumerate(shown)]
    # Labels on non-alarm tuples are evidence too: list them all.
    labelled = [LabelledAlarm(names[v], int(v), bool(t), float(marginals[v]))
                for v, t in labels.items()]
    return Ranking(ranked, labelled, iterations, converged, delta, seconds, len(ordered))


def rank(model: Model, labels: dict[int, bool] | None = None, *, top: int | None = None,
         settings: Settings | None = None) -> Ranking:
    """Runs one cold round on `model` and ranks its alarms.

    Args:
        model: the loaded model.
        labels: {variable: truth} evidence; default the model's own labels.
        top: list at most this many unlabelled alarms (`Ranking.total_unlabelled`
            still counts them all).
        settings: inference settings (default `Settings()`).
    """
    session = Session(model, settings)
    if labels is not None:
        session.labels = dict(labels)
    rnd = session.run(warm=False)
    return rank_alarms(model, rnd.marginals, session.labels, top=top, iterations=rnd.iterations,
                       converged=rnd.converged, delta=rnd.delta, seconds=rnd.seconds)
