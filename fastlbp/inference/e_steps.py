"""Learning's E-step by each method: the posterior marginals of an augmented model at clause probabilities.

    e_step = METHODS["exact"].e_step(aug, labels, settings)     # `fastlbp.inference.methods`
    marginals, stderr = e_step(clause_p)                          # (V,) P(x=1 | labels); stderr or None

`fastlbp.inference.learn` turns the marginals into expected counts; which class runs is the method
table's (`Method.e_step`), so learning compares no method names. Only the clause factors' p1 depend on
the rule probabilities, and every class takes them as data (nothing is planned or compiled again):

* `ExactEStep`: one exact-inference `Engine` (plan and program once); a step rewrites the clause tables'
  log entries in place (`Engine.logflat`); `many` takes a batch of clause probabilities in one pass.
* `SampleEStep`: the importance sampler with the labels as weights, a fresh host plan per step (the
  coins' probabilities are its data), the same seed every step (common random numbers).
* `LBPEStep`: LBP prepared once (runner and compiled round kept), warm-started from the last step's
  messages (`messages`, which a triage snapshot stores); a step replaces the device graph's p1 only.

`aug` is learning's `Augmented` model (`fastlbp.inference.learn.augment`): `model`, `factor`,
`clause_var`, `body_var` and `graph_with(clause_p)` are read.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fastlbp.core.jax_setup import float64
from fastlbp.core.settings import Settings


class ExactEStep:
    """Exact inference on one `Engine` whose clause tables a step rewrites (module docstring)."""

    messages = None  # no warm start

    @float64
    def __init__(self, aug, labels: dict[int, bool], settings: Settings):
        from fastlbp.engines.exact import Engine

        self.aug, self.labels, self.settings = aug, dict(labels), settings
        self.log_evidence = math.nan
        self.info: dict = {}
        self.engine = Engine(aug.model.graph)
        off = np.asarray(aug.model.graph.factor_offsets, np.int64)
        lens = off[1:] - off[:-1] - 1
        tables = np.where(lens <= 1, 1, lens - 1)  # `binarize`: tables per factor
        last = np.cumsum(tables) - 1
        pos = self.engine.offsets[last[aug.factor]]
        # (b_c, X_c) tables hold [1, 0, 1 - p, p]; a bodiless clause's (X_c,) table [1 - p, p].
        self.pos = np.where(aug.body_var >= 0, pos + 2, pos)

    @float64
    def __call__(self, clause_p: np.ndarray) -> tuple[np.ndarray, None]:
        from fastlbp.engines.exact import exact_marginals

        with np.errstate(divide="ignore"):
            self.engine.logflat[self.pos] = np.log1p(-clause_p)
            self.engine.logflat[self.pos + 1] = np.log(clause_p)
        m = exact_marginals(self.aug.model, self.labels, self.settings, engine=self.engine)
        self.log_evidence = float(m.info["log_evidence"])
        return m.marginals, None

    @float64
    def many(self, clause_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """((B, V) P(x=1 | labels), (B,) log P(labels)) at each row of clause_p ((B, K) float64), in one
        pass of the engine over the batch (`exact_marginals_many`); the engine's own tables are untouched."""
        from fastlbp.engines.exact import exact_marginals_many

        clause_p = np.asarray(clause_p, np.float64)
        flats = np.repeat(self.engine.logflat[None], clause_p.shape[0], axis=0)
        with np.errstate(divide="ignore"):
            flats[:, self.pos] = np.log1p(-clause_p)
            flats[:, self.pos + 1] = np.log(clause_p)
        return exact_marginals_many(self.aug.model, self.labels, self.settings, self.engine, flats)


class SampleEStep:
    """Importance sampling of the model at the step's clause probabilities (module docstring)."""

    messages = None  # no warm start

    def __init__(self, aug, labels: dict[int, bool], settings: Settings):
        self.aug, self.labels, self.settings = aug, dict(labels), settings
        self.log_evidence = math.nan
        self.info: dict = {}  # the last step's `Marginals.info` (worlds, effective worlds)

    @float64
    def __call__(self, clause_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from fastlbp.engines.sampling import sample_marginals

        model = dataclasses.replace(self.aug.model, graph=self.aug.graph_with(clause_p))
        m = sample_marginals(model, self.labels, self.settings)
        self.info = dict(m.info or {})
        return m.marginals, np.asarray(m.stderr, np.float64)


class LBPEStep:
    """LBP rounds from the last step's messages, on the model at the step's clause probabilities.

    Args:
        prepared: LBP prepared for `aug.model` (`fastlbp.inference.rounds.LBP`).
    """

    @float64
    def __init__(self, aug, labels: dict[int, bool], settings: Settings, prepared):
        from fastlbp.engines.loop import init

        self.aug, self.labels, self.settings = aug, dict(labels), settings
        self.prepared = prepared
        self.messages = init(aug.model.graph, settings.dtype)
        self.log_evidence = math.nan
        self.info: dict = {}

    @property
    def runner(self):
        """LBP's runner (`fastlbp.engines.loop.Runner`)."""
        return self.prepared.runner

    @float64
    def __call__(self, clause_p: np.ndarray) -> tuple[np.ndarray, None]:
        from fastlbp.engines.loop import controls
        from fastlbp.inference.rounds import Inputs, hard_evidence

        s, labels = self.settings, self.labels
        model = dataclasses.replace(self.aug.model, graph=self.aug.graph_with(clause_p))
        self.prepared = self.prepared.with_model(model)
        inputs = Inputs(model=model, labels=labels, soft={}, settings=s, messages=self.messages,
                        evidence=lambda: hard_evidence(model.num_vars, labels, s.dtype),
                        controls=lambda: controls(s.tol, s.max_iters, s.damping, s.dtype),
                        flags=False)  # an E-step reads no flags
        rnd, self.prepared, self.messages = self.prepared.round(inputs)
        return rnd.marginals, None


__all__ = ["ExactEStep", "SampleEStep", "LBPEStep"]
