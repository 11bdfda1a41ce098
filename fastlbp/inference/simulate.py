"""Bingo's experiment loop: an oracle always labels the top-ranked alarm until every true alarm is found.

    result = simulate(model, read_oracle("oracle_queries.txt", model), settings=Settings(schedule="seqfix"))
    result.metrics.rank_100_t, result.metrics.average_time_s

Round i is the inference whose ranking put alarm i on top: round 1 is the
cold run, every later one a warm-started run after the previous label. Its
time covers the run, copying the marginals to the host and ordering the
alarms (what a user waits for). Compilation happens before round 1 (with
the same shapes, so the rounds never recompile) and is reported apart.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from datalog.rule_probs import apply_rule_probs
from fastlbp.core.errors import ContradictoryEvidence, InputError, read_text, text_lines
from fastlbp.core.jax_setup import float64
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.core.text import safe_name
from fastlbp.inference import metrics
from fastlbp.inference.learn import Learner, OnlineOptions
from fastlbp.inference.methods import method_of
from fastlbp.inference.ranking import alarm_vars, order_alarms
from fastlbp.inference.session import Session


@dataclasses.dataclass(frozen=True)
class Step:
    """One label of the run: the alarm on top, the oracle's answer, and the round that ranked it."""

    alarm: str
    var: int
    truth: bool
    probability: float  # P(alarm) when it was on top
    round_s: float
    iterations: int
    converged: bool
    evidence_dropped: bool = False  # the model rules its label out (the oracle contradicts it): not evidence
    found: int = 0  # true alarms found so far, this one included
    num_true: int = 0  # true alarms to find (unlabelled in the input)
    method: str = ""  # the method of the round (`Round.method`; a fallback's when the chosen one refused)


@dataclasses.dataclass(frozen=True)
class SimulationResult:
    steps: list[Step]
    metrics: metrics.Metrics
    compile_s: float  # compiling and the schedule's setup, before round 1
    num_alarms: int  # alarms not labelled in the input
    complete: bool  # every true alarm was found (False: stopped by max_rounds)

    @property
    def methods(self) -> dict[str, int]:
        """{method name: rounds it answered}, in the order of first use (steps of unknown method left out)."""
        out: dict[str, int] = {}
        for s in self.steps:
            if s.method:
                out[s.method] = out.get(s.method, 0) + 1
        return out

    def as_dict(self) -> dict:
        """The JSON of `fastlbp simulate -f json`; a metric the run did not decide is None (null)."""
        m = self.metrics
        return {
            "rank_100_t": m.rank_100_t, "rank_90_t": m.rank_90_t, "inversions": m.inversions,
            "auc": m.auc, "total_time_s": m.total_time_s, "average_time_s": m.average_time_s,
            "num_alarms": self.num_alarms, "num_true": m.num_true, "found": m.found,
            "complete": self.complete, "rounds": len(self.steps), "elapsed_s": m.elapsed_s,
            "compile_s": self.compile_s,
            "evidence_dropped": [s.alarm for s in self.steps if s.evidence_dropped],
            "median_round_s": float(np.median([s.round_s for s in self.steps])) if self.steps else 0.0,
            "max_round_s": max((s.round_s for s in self.steps), default=0.0),
            "not_converged_rounds": sum(not s.converged for s in self.steps),
            "methods": self.methods,
            "labels": [{"alarm": s.alarm, "truth": s.truth, "probability": s.probability,
                        "round_s": s.round_s, "iterations": s.iterations, "converged": s.converged,
                        "evidence_dropped": s.evidence_dropped, "method": s.method}
                       for s in self.steps],
        }


def graph_truth(model: Model) -> set[int] | None:
    """The true alarms the graph itself records, or None when it records no ground truth.

    derivation.json's `"truth"` and a Bingo directory's `oracle_queries.txt`
    (loaded into `model.meta["truth"]`, {variable: truth}); alarms it does
    not name are false. A causal factor graph has none.
    """
    truth = model.meta.get("truth")
    if not truth:
        return None
    alarms = set(alarm_vars(model).tolist())
    return {int(v) for v, is_true in truth.items() if is_true and int(v) in alarms}


def read_oracle(path: str | os.PathLike, model: Model) -> set[int]:
    """Reads true alarms, one name per line (Bingo's `oracle_queries.txt`); `#` comments skipped.

    Raises:
        InputError: unreadable file, or a name that is not an alarm (line named).
    """
    p = Path(path)
    text = read_text(p)
    alarms = set(alarm_vars(model).tolist())
    truth: set[int] = set()
    for ln, line in enumerate(text_lines(text), 1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        v = model.index.get(name)
        if v is None:
            raise InputError(str(p), ln, f"unknown alarm '{safe_name(name)}'")
        if v not in alarms:
            raise InputError(str(p), ln, f"'{safe_name(name)}' is not an alarm of the graph")
        truth.add(v)
    return truth


@float64
def simulate(model: Model, true_alarms: Iterable[int | str], *, max_rounds: int | None = None,
             on_step: Callable[[int, Step], None] | None = None,
             settings: Settings | None = None, online: OnlineOptions | None = None,
             soft: dict[int, float] | None = None) -> SimulationResult:
    """Runs Bingo's loop with an oracle.

    Args:
        model: the graph; its own labels are kept as known evidence.
        true_alarms: the true alarms (variable indices or names); every
            other alarm is false.
        max_rounds: stop after this many labels even if true alarms remain.
        on_step: called after each label with (1-based index, step), for
            progress output.
        settings: the run's settings (default `Settings()`).
        online: learn the rule probabilities from the labels so far and the soft evidence
            (`fastlbp.inference.learn`):
            after every `online.every` labels, `online.steps` warm-started EM steps on this graph,
            and the next round ranks with them; their time is part of the round's. None: the
            graph's probabilities throughout.
        soft: {variable: p} soft evidence for every round (`fastlbp.inference.soft`).

    A label the model's hard constraints rule out (the oracle contradicts the
    model: `ContradictoryEvidence`, decided by `fastlbp.core.constraints`, never by
    LBP's messages) does not stop the run: the alarm counts as labelled, its
    label is withdrawn from the evidence, the round is rerun, and the step is
    marked `evidence_dropped`; the table, the JSON (`evidence_dropped`) and
    the command's stderr name every such label.
    """
    truth = {model.index[a] if isinstance(a, str) else int(a) for a in true_alarms}
    start = time.perf_counter()
    settings = settings or Settings()
    session = Session(model, dataclasses.replace(settings, max_iters=1, remedies=False))
    for v, p in (soft or {}).items():
        session.observe(int(v), p)
    # Compile with max_iters as data = 1: the same program the rounds run.
    session.run(warm=False)
    session.compile_flags()
    session.settings = settings
    compile_s = time.perf_counter() - start

    alarms = alarm_vars(model)
    open_alarms = [int(a) for a in alarms if int(a) not in session.labels]
    need = len(truth & set(open_alarms))  # true alarms to find: those the input has not labelled
    steps: list[Step] = []
    labelled = set(session.labels)  # every labelled alarm, even one whose label is not evidence
    found = 0
    dropped: set[int] = set()
    learner = None
    if online is not None:
        learner = Learner([model], [dict(session.labels)], online.options, soft=[dict(session.soft)])
    t0 = time.perf_counter()
    rnd = session.run(warm=False)
    while found < need and len(steps) < len(open_alarms):
        if max_rounds is not None and len(steps) >= max_rounds:
            break
        order = order_alarms(rnd.log_odds, alarms, exclude=labelled)
        round_s = time.perf_counter() - t0
        top = int(order[0])
        is_true = top in truth
        step = Step(model.var_names[top], top, is_true, float(rnd.marginals[top]), round_s,
                    rnd.iterations, rnd.converged, found=found + is_true, num_true=need, method=rnd.method)
        steps.append(step)
        if on_step is not None:
            on_step(len(steps), step)
        session.label(top, is_true)
        labelled.add(top)
        found += is_true
        if found == need:
            break
        t0 = time.perf_counter()
        if learner is not None and len(steps) % online.every == 0:
            learner.set_labels(0, session.labels)
            learner.run(max_iters=online.steps, information=False)
            session.set_parameters(apply_rule_probs(model, learner.current()))
        try:
            rnd = session.run()
        except ContradictoryEvidence:
            session.unlabel(top)
            dropped.add(top)
            rnd = session.run()
    steps = [dataclasses.replace(s, evidence_dropped=s.var in dropped) for s in steps]
    sequence = [s.truth for s in steps]
    m = metrics.summarize(sequence, [s.round_s for s in steps], num_alarms=len(open_alarms), num_true=need)
    return SimulationResult(steps, m, compile_s, len(open_alarms), found == need)


def methods_text(rounds: dict[str, int]) -> str:
    """The methods of a run for people: "sampling", or "sampling (40 rounds), LBP (2 rounds)" (fallbacks)."""
    if len(rounds) == 1:
        return method_of(next(iter(rounds))).label
    return ", ".join(f"{method_of(name).label} ({n} round{'' if n == 1 else 's'})"
                     for name, n in rounds.items())


def _shown(value, fmt: str, missing: str) -> str:
    """`value` through `fmt`, or `missing` ("not reached", "undefined") where it is None."""
    return missing if value is None else fmt.format(value)


def to_table(result: SimulationResult) -> str:
    """The metrics for people: "not reached" for what a run cut short did not decide, "undefined" for an
    AUC without true or false alarms (or an AverageTime without true alarms)."""
    m = result.metrics
    gap = "not reached"
    no_pairs = m.num_true == 0 or m.num_false == 0
    rows = [
        ("Rank-100%-T", _shown(m.rank_100_t, "{}", gap)),
        ("Rank-90%-T", _shown(m.rank_90_t, "{}", gap)),
        ("Inversions", _shown(m.inversions, "{}", gap)),
        ("AUC", _shown(m.auc, "{:.4f}", "undefined (no true or no false alarms)" if no_pairs else gap)),
        ("TotalTime", _shown(m.total_time_s, "{:.3f} s", gap)),
        ("AverageTime", _shown(None if m.average_time_s is None else m.average_time_s * 1e3, "{:.2f} ms",
                               "undefined (no true alarms)" if m.num_true == 0 else gap)),
        ("true alarms", f"{m.found} of {m.num_true} found, {m.num_true + m.num_false} alarms"
                        + ("" if result.complete else f" (stopped after {len(result.steps)} rounds)")),
        ("compile", f"{result.compile_s:.3f} s"),
    ]
    if result.methods:
        rows.insert(-1, ("method", methods_text(result.methods)))
    if result.steps:
        times = np.array([s.round_s for s in result.steps])
        rows.append(("round median/max", f"{np.median(times) * 1e3:.2f} / {times.max() * 1e3:.2f} ms"))
        bad = sum(not s.converged for s in result.steps)
        if bad:
            rows.append(("not converged", f"{bad} of {len(result.steps)} rounds"))
        dropped = sum(s.evidence_dropped for s in result.steps)
        if dropped:
            rows.append(("labels not used", f"{dropped} (the model rules them out)"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n"

