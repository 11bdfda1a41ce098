"""`Method`: one inference method, a row of the method table (`fastlbp.inference.methods.METHODS`).

A new method subclasses it in its own module and gets one row in the table (CONTRIBUTING.md, "Adding an
inference method"); the built-in rows (LBP, exact inference, sampling) are in `fastlbp.inference.methods`.
This module imports neither numpy nor JAX (the CLI's `--help` reads the table).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastlbp.core.errors import SettingsError

if TYPE_CHECKING:
    import numpy as np

    from fastlbp.core.model import Model
    from fastlbp.core.settings import Settings
    from fastlbp.engines.marginals import Marginals
    from fastlbp.inference.rounds import Prepared, Round
    from schedules.plan import Plan


class Method:
    """An inference method: a row of `fastlbp.inference.methods.METHODS`; everything outside the table
    asks the row.

    Subclass it in the method's own module, set the attributes and override `prepare` (and whatever of
    the rest differs), then add one row to `METHODS`: every command offers it (`--method NAME`), runs
    it, and names it in its tables, JSON and plots.

    Attributes:
        name: what `--method`, `Round.method` and JSON's "method" call it.
        label: the method for people, in a sentence ("LBP", "exact inference", "sampling").
        help: what `--method`'s help says of it.
        fallback: the row that answers a round this one refuses (`fastlbp.inference.rounds.REFUSALS`)
            under "auto"; None: a refusal is the run's error.
        iterative: rounds iterate to convergence, warm-started from the last round's messages (LBP):
            a round's line says its iterations, LBP's round flags compile for it, learning
            warm-starts its E-steps and keeps their messages.
        unchecked: its error is not known beside its numbers (LBP): a ranking says `caveat`, a
            ranking whose probabilities are all alike is suspicious, and `fastlbp check` measures
            it (the method checked under "auto").
        pruned_beliefs: a pruned tuple's marginal, LBP's forward belief from its parents
            (`datalog.bayesnet.tuple_marginals`), is this method's own answer, so a graph may stay
            pruned; other methods need such tuples as variables.
        batched_e_steps: learning may run the E-steps of several graphs as one disjoint union (LBP's
            fixed points on disjoint components are each graph's own).
        reference: `fastlbp check` may compare another method with it (`reference_marginals`).
        sampled: its numbers are Monte Carlo estimates, shown with the digits their standard errors
            support (`intervals`).
        exact: its numbers are the model's posterior itself (learning's profile check of an interval
            re-maximises with its E-steps).
        error_head: the head of a table's column of errors, beside each probability.
        caveat: a sentence about a ranking's numbers as a whole, said once beside its table; None.
    """

    name: str = ""
    label: str = ""
    help: str = ""
    fallback: str | None = None
    iterative: bool = False
    unchecked: bool = False
    pruned_beliefs: bool = False
    batched_e_steps: bool = False
    reference: bool = False
    sampled: bool = False
    exact: bool = False
    error_head: str = "error"
    caveat: str | None = None

    def prepare(self, model: Model, plan: Plan, sampler=None) -> Prepared:
        """The method prepared for `model` under `plan` (host work, once per model): an object of
        `fastlbp.inference.rounds.Prepared`'s contract.

        Args:
            sampler: a `Sampler` `choose` built for `model` while deciding, for a method that samples.
        """
        raise NotImplementedError

    def describe(self, rnd: Round) -> str:
        """One line for people: how a round of this method was made and how far off it may be."""
        return self.label

    def json_fields(self, rnd: Round) -> dict:
        """The round's fields of this method in JSON, beside "method", "how", "flags" (`summary_dict`)."""
        return {}

    def title(self, settings: Settings) -> str:
        """The method with the settings that decide its numbers, for a plot's title."""
        return f"{self.label}, {settings.precision}"

    def intervals(self, rnd: Round) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(V,) standard errors and 95% interval of the round's marginals, or None (no Monte Carlo error)."""
        return None

    def error_cell(self, lower: float, upper: float, flags) -> str:
        """A table's cell beside a probability: how far off it may be (`lower`, `upper`: its interval,
        NaN without one; `flags`: the round's `Round.flags`)."""
        return "FLAGGED" if flags else "unchecked"

    def note(self, rnd: Round, var: int) -> str:
        """What the interactive terminal says beside variable `var`'s probability, in parentheses."""
        if rnd.flags:
            from fastlbp.core.text import safe_name

            return f"{self.label} estimate, FLAGGED: {safe_name(rnd.flags[0])}"
        return f"{self.label} estimate, unchecked"

    def reference_marginals(self, model: Model, labels: dict[int, bool], settings: Settings) -> Marginals:
        """The marginals `fastlbp check` compares with (where `reference`); raises one of `REFUSALS` when
        the method cannot take the graph or labels."""
        raise SettingsError(f"{self.label} is no reference for `fastlbp check`")

    def e_step(self, aug, labels: dict[int, bool], settings: Settings):
        """Learning's E-step on an augmented model (`fastlbp.inference.e_steps`): called with clause
        probabilities, it gives the marginals and their standard errors (or None)."""
        raise SettingsError(f"no E-step for method {self.name!r}")


__all__ = ["Method"]
