"""Ranked alarms: the unlabelled alarms of a model by probability, labelled ones apart.

`rank_alarms` orders the unlabelled alarms of a model by P(alarm = 1), as log-odds (ties
by input order, so a ranking is deterministic) and lists labelled alarms
apart; `rank` runs the cold round first. `fastlbp.io.writers` turns a `Ranking`
into text (table, JSON, CSV, SARIF).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from fastlbp.core.jax_setup import float64
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.inference.methods import method_of
from fastlbp.inference.session import Session


@dataclasses.dataclass(frozen=True)
class RankedAlarm:
    rank: int  # 1-based position among unlabelled alarms
    alarm: str
    var: int
    probability: float
    log_odds: float = math.nan  # log P(true) - log P(false): orders alarms whose P rounds to 0
    stderr: float = math.nan  # a sampled estimate's standard error (NaN: not sampled)
    lower: float = math.nan  # its 95% interval
    upper: float = math.nan


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
    remedy: str | None = None  # what produced the numbers when LBP did not converge (`Round.remedy`)
    method: str = "lbp"  # the method that computed the marginals (a key of `inference.methods.METHODS`)
    # (V,) P(x=1) of every variable, for writers that explain alarms (SARIF's related locations);
    # None for a ranking built by hand.
    marginals: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)
    how: str = ""  # one line: the method and its error (`fastlbp.inference.methods.describe`)
    flags: tuple[str, ...] = ()  # why LBP's numbers may mislead (`Round.flags`)
    reason: str | None = None  # why method "auto" chose the method


def alarm_vars(model: Model) -> np.ndarray:
    """(A,) int64 alarm variables; a model without alarms (a bare factor graph) ranks every variable."""
    if model.alarms:
        return np.asarray(model.alarms, dtype=np.int64)
    return np.arange(model.num_vars, dtype=np.int64)


def order_alarms(key: np.ndarray, alarms: np.ndarray, exclude=()) -> np.ndarray:
    """`alarms` minus `exclude`, by decreasing `key`, ties in the given order.

    Args:
        key: (V,) the marginals' log-odds (or P(x=1): the same order, except that
            probabilities below 1e-308 or within 1e-16 of 1 round to ties, which
            log-odds keep apart).
        alarms: (A,) alarm variables.
        exclude: variables to leave out (the labelled ones).

    Returns:
        (A',) int64 variables.
    """
    alarms = np.asarray(alarms, dtype=np.int64)
    if len(exclude):
        alarms = alarms[~np.isin(alarms, np.fromiter(exclude, dtype=np.int64))]
    k = np.asarray(key, dtype=np.float64)[alarms]
    # NaN never happens after a successful round, but must not scramble a sort.
    k = np.where(np.isnan(k), -np.inf, k)
    return alarms[np.argsort(-k, kind="stable")]


def rank_alarms(model: Model, marginals: np.ndarray, labels: dict[int, bool], *, top: int | None = None,
                iterations: int = 0, converged: bool = True, delta: float = 0.0,
                seconds: float = 0.0, log_odds: np.ndarray | None = None,
                remedy: str | None = None, method: str = "lbp", rnd=None) -> Ranking:
    """Builds a `Ranking` from marginals, ordered by their log-odds when given (`order_alarms`).

    Args:
        marginals: (V,) P(x=1).
        log_odds: (V,) the same as log-odds (`Round.log_odds`); None: from `marginals`.
        rnd: the `Round` the marginals come from: its standard errors, intervals, flags and how.
    """
    if log_odds is None:
        with np.errstate(divide="ignore"):
            p = np.asarray(marginals, dtype=np.float64)
            log_odds = np.log(p) - np.log1p(-p)
    alarms = alarm_vars(model)
    ordered = order_alarms(log_odds, alarms, exclude=[v for v in labels])
    shown = ordered if top is None else ordered[:top]
    names = model.var_names
    errors = None if rnd is None else method_of(rnd.method).intervals(rnd)
    se, lo, hi = errors or (None, None, None)
    ranked = [RankedAlarm(i + 1, names[v], int(v), float(marginals[v]), float(log_odds[v]),
                          *((float(se[v]), float(lo[v]), float(hi[v])) if se is not None else ()))
              for i, v in enumerate(shown)]
    # Labels on non-alarm tuples are evidence too: list them all.
    labelled = [LabelledAlarm(names[v], int(v), bool(t), float(marginals[v]))
                for v, t in labels.items()]
    extra = {}
    if rnd is not None:
        extra = {"how": method_of(rnd.method).describe(rnd), "flags": tuple(rnd.flags), "reason": rnd.reason}
    return Ranking(ranked, labelled, iterations, converged, delta, seconds, len(ordered), remedy, method,
                   np.asarray(marginals), **extra)


def select(ranking: Ranking, *, relations=None, min_probability: float | None = None, keep=None,
           top: int | None = None) -> Ranking:
    """The ranking's alarms that pass every filter given, then at most `top` of them.

    Each alarm keeps its rank among all unlabelled alarms (so `rank 7` still
    means the seventh most likely); `total_unlabelled` counts the alarms that
    passed the filters, before `top`.

    Args:
        relations: relation names to keep (`race` keeps `race(1,2)`); None: all.
        min_probability: keep alarms with P >= this.
        keep: a predicate on the alarm's name (e.g. "not in the baseline").
        top: keep at most this many.
    """
    from fastlbp.core.text import relation

    wanted = None if relations is None else set(relations)
    out = [a for a in ranking.alarms
           if (wanted is None or relation(a.alarm) in wanted)
           and (min_probability is None or a.probability >= min_probability)
           and (keep is None or keep(a.alarm))]
    total = len(out)
    return dataclasses.replace(ranking, alarms=out if top is None else out[:top], total_unlabelled=total)


def failing(ranking: Ranking, threshold: float) -> list[RankedAlarm]:
    """The unlabelled alarms with P >= `threshold` (what `rank --fail-on` fails a CI job for)."""
    return [a for a in ranking.alarms if a.probability >= threshold]


@float64
def rank(model: Model, labels: dict[int, bool] | None = None, *, top: int | None = None,
         settings: Settings | None = None, progress: Callable[[str], None] | None = None,
         soft: dict[int, float] | None = None) -> Ranking:
    """Runs one cold round on `model` and ranks its alarms.

    Args:
        model: the loaded model.
        labels: {variable: truth} evidence; default the model's own labels.
        top: list at most this many unlabelled alarms (`Ranking.total_unlabelled`
            still counts them all).
        settings: inference settings (default `Settings()`).
        progress: called with "session" (the engine's set-up) and "first round"
            (compiling or loading the compiled loop, then the round) as each starts.
        soft: {variable: p} soft evidence (`fastlbp.inference.soft`).
    """
    if progress is not None:
        progress("session")
    session = Session(model, settings)
    if labels is not None:
        session.labels = dict(labels)
    for v, p in (soft or {}).items():
        session.observe(int(v), p)
    if progress is not None:
        progress("first round")
    rnd = session.run(warm=False)
    return rank_alarms(model, rnd.marginals, session.labels, top=top, iterations=rnd.iterations,
                       converged=rnd.converged, delta=rnd.delta, seconds=rnd.seconds, log_odds=rnd.log_odds,
                       remedy=rnd.remedy, method=rnd.method, rnd=rnd)
