"""Plots of a simulated triage run (`fastlbp simulate --plot`), the data apart from the drawing.

`plot_data` computes every curve, title and axis (tested without matplotlib);
`write_plots` draws them. Two files:

* `roc.png`: true alarms found against false alarms labelled (the paper's
  Figure 7) over all N_T true and N_F false alarms. A complete run's curve
  goes on flat to N_F (the unlabelled rest is false), so its area over
  N_T N_F is the AUC reported. Baselines: a random order's expected curve,
  the diagonal from (0, 0) to (N_F, N_T) (AUC 0.5), and the ideal order,
  every true alarm first (up to N_T, then across; AUC 1).
* `true_alarms_over_time.png`: true alarms found against alarms labelled,
  the user's time (one round each; the title gives the rounds' inference
  TotalTime). Baselines: a random order finds i N_T / N true alarms in its
  first i labels on average (the hypergeometric mean); the ideal order
  min(i, N_T).

Titles name the graph, the method that made the rounds (each, with its rounds, when a fallback
answered some) and the settings that decide its numbers; axes that count have integer ticks.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fastlbp.inference import metrics
from fastlbp.inference.methods import chooses, method_of

if TYPE_CHECKING:  # for annotations only: plotting runs no simulation
    from fastlbp.core.settings import Settings
    from fastlbp.inference.simulate import SimulationResult


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib():
    """matplotlib.pyplot with the Agg backend (files, no display).

    Raises:
        PlotsUnavailable: matplotlib is missing.
    """
    try:
        import matplotlib
    except ImportError:
        raise PlotsUnavailable("plots need matplotlib: pip install 'fastlbp[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


@dataclasses.dataclass(frozen=True)
class Curve:
    """A curve: (n,) x and y, its legend label, and whether it is a baseline (drawn dashed)."""

    x: np.ndarray
    y: np.ndarray
    label: str
    baseline: bool = False
    steps: bool = False  # drawn as a step curve (steps-post), else points joined by lines


@dataclasses.dataclass(frozen=True)
class PlotData:
    """One figure: file name, title, axis labels and curves."""

    file: str
    title: str
    xlabel: str
    ylabel: str
    curves: list[Curve]


def random_roc(num_true: int, num_false: int) -> Curve:
    """A random order's expected ROC curve: the diagonal (0, 0) -> (N_F, N_T), area N_T N_F / 2."""
    return Curve(np.array([0.0, num_false]), np.array([0.0, num_true]), "random order (AUC 0.5)", True)


def ideal_roc(num_true: int, num_false: int) -> Curve:
    """Every true alarm first: (0, 0) -> (0, N_T) -> (N_F, N_T), area N_T N_F."""
    return Curve(np.array([0.0, 0.0, num_false]), np.array([0.0, num_true, num_true]), "ideal order", True)


def random_found(num_true: int, num_alarms: int, upto: int) -> Curve:
    """True alarms a random order finds in its first i labels on average, i = 0..upto: i N_T / N."""
    i = np.arange(upto + 1, dtype=np.float64)
    return Curve(i, i * num_true / max(num_alarms, 1), "random order (expected)", True)


def ideal_found(num_true: int, upto: int) -> Curve:
    """True alarms the ideal order finds in its first i labels, i = 0..upto: min(i, N_T)."""
    i = np.arange(upto + 1, dtype=np.float64)
    return Curve(i, np.minimum(i, num_true), "ideal order", True)


def describe(graph: str | os.PathLike | None, settings: Settings | None,
             rounds: dict[str, int] | None = None) -> str:
    """The title's second line: the graph's file name, the method that made the rounds and the settings
    that decide its numbers (`Method.title`).

    Args:
        rounds: {method name: rounds it answered} of the run (`SimulationResult.methods`); None or
            empty: the method `settings` name ("method auto" where they leave it to the choice).

    >>> from fastlbp.core.settings import Settings
    >>> describe("data/weblech.json", Settings(method="lbp", schedule="seqfix"))
    'weblech.json: LBP seqfix, tol 1e-06, damping 0, f64'
    >>> describe("w.json", Settings(), {"sample": 40, "lbp": 2})
    'w.json: sampling, 100,000 worlds, seed 0 (40 rounds); LBP parall, tol 1e-06, damping 0, f64 (2 rounds)'
    """
    parts = []
    if settings is not None:
        rounds = dict(rounds or {})
        if not rounds and not chooses(settings.method):
            rounds = {settings.method: 0}
        if len(rounds) == 1:
            parts.append(method_of(next(iter(rounds))).title(settings))
        elif rounds:
            parts += [f"{method_of(name).title(settings)} ({n} round{'' if n == 1 else 's'})"
                      for name, n in rounds.items()]
        else:
            parts.append("method auto")
    text = "; ".join(parts)
    if graph is not None:
        name = Path(graph).name or str(graph)
        return f"{name}: {text}" if text else name
    return text


def _shown(value, fmt: str, missing: str) -> str:
    return missing if value is None or (isinstance(value, float) and not np.isfinite(value)) \
        else fmt.format(value)


def plot_data(result: SimulationResult, *, graph: str | os.PathLike | None = None,
              settings: Settings | None = None) -> list[PlotData]:
    """The two figures of `write_plots`: curves, baselines, titles (module docstring).

    Args:
        result: the simulated run; its metrics give N_T (`num_true`, every
            true alarm) and N_F (`num_false`).
        graph: the graph's path, named in the titles.
        settings: the run's settings, named in the titles.
    """
    m = result.metrics
    n_true, n_false = int(m.num_true), int(m.num_false)
    truths = [s.truth for s in result.steps]
    fx, ty = metrics.roc_points(truths)
    fx, ty = fx.astype(np.float64), ty.astype(np.float64)
    complete = bool(result.complete) and int(ty[-1]) == n_true
    if complete and fx[-1] < n_false:
        # The unlabelled rest is false: the curve goes on flat, as the AUC counts it.
        fx, ty = np.append(fx, n_false), np.append(ty, n_true)
    where = describe(graph, settings, result.methods)
    roc = PlotData(
        "roc.png", f"ROC, AUC {_shown(m.auc, '{:.3f}', 'n/a')}" + (f"\n{where}" if where else ""),
        "false alarms labelled", "true alarms found",
        [Curve(fx, ty, "this run" + ("" if complete else f" (stopped after {len(truths)} labels)"),
               steps=True),
         random_roc(n_true, n_false), ideal_roc(n_true, n_false)])

    n = len(truths)
    labels = np.arange(n + 1, dtype=np.float64)
    found = np.concatenate([[0.0], np.cumsum(truths, dtype=np.float64)])
    upto = max(n, n_true, 1)
    total = _shown(m.total_time_s, "{:.3g} s", "not reached")
    over_time = PlotData(
        "true_alarms_over_time.png",
        f"True alarms found, TotalTime {total}" + (f"\n{where}" if where else ""),
        "alarms labelled (one round each)", "true alarms found",
        [Curve(labels, found, "this run"), random_found(n_true, n_true + n_false, upto),
         ideal_found(n_true, upto)])
    return [roc, over_time]


def write_plots(result: SimulationResult, out_dir: str | os.PathLike, *,
                graph: str | os.PathLike | None = None, settings: Settings | None = None) -> list[Path]:
    """Writes `plot_data`'s figures as PNG files into `out_dir` (created); returns their paths.

    Raises:
        PlotsUnavailable: matplotlib is missing.
    """
    plt = require_matplotlib()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for data in plot_data(result, graph=graph, settings=settings):
        fig = figure(plt, data)
        fig.savefig(out / data.file, dpi=120)
        plt.close(fig)
        paths.append(out / data.file)
    return paths


def figure(plt, data: PlotData):
    """A matplotlib figure of `data` (`plt`: from `require_matplotlib`); the caller saves and closes it."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(5.5, 4.8))
    for c in data.curves:
        ax.plot(c.x, c.y, linestyle="--" if c.baseline else "-", linewidth=1.0 if c.baseline else 1.8,
                drawstyle="steps-post" if c.steps else "default", label=c.label,
                marker="o" if not (c.baseline or c.steps) and len(c.x) <= 60 else None, markersize=3)
    ax.set_xlabel(data.xlabel)
    ax.set_ylabel(data.ylabel)
    ax.set_title(data.title, fontsize=10)
    # Both axes count alarms: no tick at 2.5 alarms.
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
