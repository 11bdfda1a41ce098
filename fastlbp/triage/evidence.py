"""What a triage session starts from besides the graph: evidence given with it, and online learning.

    start = StartEvidence.of(model, {v: True}, {w: 0.9}, report)   # from `fastlbp.cli.evidence.gather`
    model, labels, soft = start.apply(loaded_model)                # the same on every resume
    learning = Learning(steps=3)

`StartEvidence` holds the labels carried from an older version of the graph
(`--labels-from`, `fastlbp.triage.carry`) and the soft evidence (softened
carried labels, `--soft-labels`: `fastlbp.inference.soft`), by variable name.
The journal stores it (meta "evidence", JSON) when the session is made, so a
resume starts from exactly the same evidence without reading those files
again (they may have changed since). A carried or observed tuple that
compression removed is kept as a variable by making the model again
(`fastlbp.io.loading.keep_tuples`): `apply` does it from the stored names, the
same way on the first start and on every resume, so the model, and with it the
journal's fingerprint, is the same.

The person's own labels stay events of the journal. A person's label on a
tuple with soft evidence replaces that evidence: with the tuple's value
fixed, its observation's factor p (or 1 - p) is a constant of every world
left, which no marginal sees (LBP: +-inf evidence plus a finite term; exact
inference and sampling: a constant weight); undoing the label brings it back.

`Learning` (meta "learn", JSON) is `triage --learn`: after each label a few EM
steps (`fastlbp.inference.learn`), warm-started, on the session's labels (the
graph's, the carried and the person's) and its soft evidence. The
steps are deterministic given the labels in order (the E-step's method and
seed are the session's stored settings), so a resume recomputes them while it
replays the journal and reaches the same probabilities; nothing learned is
stored.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time

from fastlbp.core.errors import ContradictoryEvidence, SettingsError
from fastlbp.core.model import Model
from fastlbp.triage.journal_format import stored_json

# The entries of a "report" (what became of the carried labels and how many soft ones a file gave).
REPORT_KEYS = {"carried": int, "softened": int, "dropped": int, "soft_file": int, "confidence": float}


@dataclasses.dataclass(frozen=True)
class StartEvidence:
    """Evidence a session starts with besides the graph's own labels (module docstring).

    Attributes:
        labels: (variable name, truth) of the carried labels.
        soft: (variable name, p) soft evidence, p strictly in (0, 1).
        report: counts for people: carried, softened, dropped (labels of the older version),
            soft_file (tuples --soft-labels observed), confidence (a softened label's P).
    """

    labels: tuple[tuple[str, bool], ...] = ()
    soft: tuple[tuple[str, float], ...] = ()
    report: dict = dataclasses.field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.labels or self.soft or self.report)

    @classmethod
    def of(cls, model: Model, labels: dict[int, bool], soft: dict[int, float],
           report: dict | None = None) -> StartEvidence:
        """The evidence on `model`'s variables, by name: labels the graph itself has are left out."""
        own = model.labels
        names = model.var_names
        return cls(tuple((names[v], bool(t)) for v, t in sorted(labels.items()) if v not in own),
                   tuple((names[v], float(p)) for v, p in sorted(soft.items())),
                   {k: v for k, v in (report or {}).items() if k in REPORT_KEYS})

    def to_json(self) -> str:
        return json.dumps({"labels": [[n, t] for n, t in self.labels], "soft": [[n, p] for n, p in self.soft],
                           "report": self.report})

    @classmethod
    def from_json(cls, text: str) -> StartEvidence:
        """The evidence `to_json` wrote; anything else is refused.

        Raises:
            SettingsError: not JSON, or not as `to_json` writes it.
        """
        raw = stored_json(text)
        if not isinstance(raw, dict) or set(raw) != {"labels", "soft", "report"}:
            raise SettingsError("expected labels, soft and report")
        labels, soft, report = raw["labels"], raw["soft"], raw["report"]
        if not isinstance(labels, list) or not all(
                isinstance(x, list) and len(x) == 2 and type(x[0]) is str and type(x[1]) is bool
                for x in labels):
            raise SettingsError("its labels are not [name, true|false] pairs")
        if not isinstance(soft, list) or not all(
                isinstance(x, list) and len(x) == 2 and type(x[0]) is str and type(x[1]) is float
                and 0.0 < x[1] < 1.0 for x in soft):
            raise SettingsError("its soft evidence is not [name, p] pairs with p strictly in (0, 1)")
        if not isinstance(report, dict) or not all(
                k in REPORT_KEYS and type(v) is REPORT_KEYS[k] and math.isfinite(v)
                for k, v in report.items()):
            raise SettingsError("its report is not counts")
        return cls(tuple((n, t) for n, t in labels), tuple((n, p) for n, p in soft), report)

    def apply(self, model: Model) -> tuple[Model, dict[int, bool], dict[int, float]]:
        """(model, {variable: truth}, {variable: p}) on `model`, kept tuples made variables.

        Raises:
            SettingsError: a name that is no tuple of the graph, or one that never holds.
        """
        from fastlbp.core.errors import InputError
        from fastlbp.io.loading import keep_tuples

        names = [n for n, _ in self.labels] + [n for n, _ in self.soft]
        try:
            model = keep_tuples(model, names)
        except (KeyError, InputError) as err:
            raise SettingsError(f"its evidence names a tuple this graph cannot hold ({err})") from None
        missing = [n for n in names if n not in model.index]
        if missing:
            raise SettingsError(f"its evidence names {missing[0]!r}, which is not a variable of the graph")
        labels = {model.index[n]: t for n, t in self.labels}
        soft = {model.index[n]: p for n, p in self.soft}
        return model, labels, soft

    def summary(self) -> str:
        """`evidence: 12 labels carried, 3 softened (P = 0.9), 1 dropped; 2 soft labels from a file`."""
        r = self.report
        parts = []
        if "carried" in r:
            parts.append(f"{r['carried']} label(s) carried from the older version, {r.get('softened', 0)} "
                         f"softened (P = {r.get('confidence', 0.9):g}), {r.get('dropped', 0)} dropped")
        if r.get("soft_file"):
            parts.append(f"{r['soft_file']} soft label(s) from --soft-labels")
        return "evidence: " + ("; ".join(parts) if parts else "none")


@dataclasses.dataclass(frozen=True)
class Learning:
    """`triage --learn`: EM steps after each label (`fastlbp.inference.learn.OnlineOptions`).

    Attributes:
        steps: EM steps per label, warm-started from the last probabilities.
        prior_strength: the Beta prior's pseudo-counts around the graph's stated probabilities.
    """

    steps: int = 3
    prior_strength: float = 2.0

    def __post_init__(self):
        if type(self.steps) is not int or not 1 <= self.steps <= 1000:
            raise SettingsError(f"learning needs 1 to 1000 EM steps per label, got {self.steps!r}")
        from datalog.rule_probs import MAX_PRIOR_STRENGTH  # the limit `LearnOptions` checks too

        if type(self.prior_strength) is not float or not (0 < self.prior_strength <= MAX_PRIOR_STRENGTH):
            raise SettingsError(f"the prior strength must be a positive number of at most "
                                f"{MAX_PRIOR_STRENGTH:g}, got {self.prior_strength!r}")

    def to_json(self) -> str:
        return json.dumps({"steps": self.steps, "prior_strength": self.prior_strength})

    @classmethod
    def from_json(cls, text: str) -> Learning:
        """Raises: SettingsError: not as `to_json` writes it."""
        raw = stored_json(text)
        if not isinstance(raw, dict) or set(raw) != {"steps", "prior_strength"}:
            raise SettingsError("expected steps and prior_strength")
        return cls(raw["steps"], raw["prior_strength"])

    def options(self, settings):
        """The `LearnOptions` of the E-steps: the session's method and settings (its seed)."""
        from fastlbp.inference.learn import LearnOptions

        return LearnOptions(method=settings.method, settings=settings, prior_strength=self.prior_strength)


@dataclasses.dataclass(frozen=True)
class Started:
    """The evidence a session starts with, on its model's variables.

    Attributes:
        evidence: as stored (by name).
        labels: {variable: truth} the carried labels (the graph's own are the model's).
        soft: {variable: p} soft evidence.
    """

    evidence: StartEvidence = dataclasses.field(default_factory=StartEvidence)
    labels: dict[int, bool] = dataclasses.field(default_factory=dict)
    soft: dict[int, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, evidence: StartEvidence, model: Model) -> tuple[Model, Started]:
        """`evidence` applied to `model` as loaded (`StartEvidence.apply`): (the model, `Started`).

        Raises:
            SettingsError: a name the graph cannot hold.
        """
        if not evidence:
            return model, cls()
        model, labels, soft = evidence.apply(model)
        return model, cls(evidence, labels, soft)


class OnlineRules:
    """The rule probabilities a `--learn` session ranks with, and those before each label (for undo).

    Args:
        model: the session's model (its stated probabilities are the prior's centre and the start).
        labels: {variable: truth} the evidence before the first label.
        learning: `Learning`.
        settings: the session's settings (the E-step's method and seed).
        soft: {variable: p} the session's soft evidence, which the E-steps condition on too.
    """

    def __init__(self, model: Model, labels: dict[int, bool], learning: Learning, settings,
                 soft: dict[int, float] | None = None):
        from fastlbp.inference.learn import Learner

        self.model, self.learning = model, learning
        self.learner = Learner([model], [dict(labels)], learning.options(settings), soft=[dict(soft or {})])
        self.before: list = []  # (R,) probabilities before each label learned from, oldest first
        self.hard = None  # the stated model's hard constraints (`constraints.prepare`), once needed
        # One E-step at the stated probabilities now (its result unused): the E-step's program is
        # planned and compiled with the session's first round, not in the first label's; so is
        # scipy.stats imported , which the learner's intervals use.
        self.learner.counts(self.learner.probability)
        import scipy.stats  # noqa: F401

    def learn(self, labels: dict[int, bool]) -> float:
        """`learning.steps` EM steps on `labels`, warm-started; returns their seconds.

        Raises:
            ContradictoryEvidence: the labels have probability 0 (the probabilities are as before).
        """
        from fastlbp.core import constraints

        start = time.perf_counter()
        # Labels the stated model's hard constraints rule out are refused before the EM steps, whose
        # probabilities (kept inside (0, 1)) would no longer prove it.
        if self.hard is None:
            self.hard = constraints.prepare(self.model.graph)
        if constraints.contradicts(self.hard, labels):
            core = constraints.conflicting_labels(self.model.graph, labels)
            raise ContradictoryEvidence({self.model.var_names[v]: t for v, t in core.items()})
        self.before.append(self.learner.probability.copy())
        try:
            self.learner.set_labels(0, labels)
            self.learner.run(max_iters=self.learning.steps, information=False)
        except BaseException:
            self.learner.probability = self.before.pop()
            raise
        return time.perf_counter() - start

    def back(self):
        """Back to the probabilities before the last label learned from; returns the ones left."""
        left = self.learner.probability
        self.learner.probability = self.before.pop()
        return left

    def again(self, probability) -> None:
        """Undoes `back` (an undo that was refused)."""
        self.before.append(self.learner.probability)
        self.learner.probability = probability

    def current(self) -> dict[str, float]:
        return self.learner.current()

    def model_now(self) -> Model:
        """The model with the probabilities now: new factor parameters only (`apply_rule_probs`), which
        `Session.set_parameters` takes as data."""
        from datalog.rule_probs import apply_rule_probs

        return apply_rule_probs(self.model, self.learner.current())


def stored_start(meta: dict[str, str]) -> tuple[StartEvidence, Learning | None]:
    """The evidence and learning a session's meta stores (none for a session without them).

    Raises:
        SettingsError: present but not as written.
    """
    evidence = StartEvidence()
    learning = None
    if "evidence" in meta:
        try:
            evidence = StartEvidence.from_json(meta["evidence"])
        except SettingsError as err:
            raise SettingsError(f"its evidence is not valid ({err})") from None
    if "learn" in meta:
        try:
            learning = Learning.from_json(meta["learn"])
        except SettingsError as err:
            raise SettingsError(f"its learning options are not valid ({err})") from None
    return evidence, learning


__all__ = ["StartEvidence", "Started", "Learning", "OnlineRules", "stored_start"]
