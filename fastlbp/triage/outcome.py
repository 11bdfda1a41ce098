"""What a triage action did (`Outcome`) and how its round went (`RoundInfo`)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class RoundInfo:
    """How one round went, timed around `Session.run` (host view, seconds)."""

    seconds: float
    iterations: int
    converged: bool
    delta: float
    remedy: str | None = None  # what produced the numbers when LBP alone did not converge
    how: str = ""  # the method and its error (`fastlbp.inference.methods.describe`); "" for LBP's own line
    learn_s: float | None = None  # of `seconds`, the EM steps of `triage --learn` before the round


def how_made(rnd) -> str:
    """How a round of exact inference or sampling was made (`Method.describe`); "" for an iterative
    method's round (LBP's), whose line says its iterations in its own words."""
    from fastlbp.inference.methods import method_of

    row = method_of(rnd.method)
    return "" if row.iterative else row.describe(rnd)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What an action did: `accepted` False means it was refused (`message` says why)."""

    accepted: bool
    message: str
    round: RoundInfo | None = None


def not_saved(what: str, problem: str) -> Outcome:
    """The refusal of an action (`what`: "label", "skip", ...) whose event could not be journaled
    (`problem`: why the session file could not be written)."""
    return Outcome(False, f"the {what} was not saved, so it is not applied: {problem}; the session is "
                          f"as it was (try again, or quit)")


__all__ = ["Outcome", "RoundInfo", "how_made", "not_saved"]
