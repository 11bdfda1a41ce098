"""What exact inference and sampling return: marginals with their uncertainty and how they were made."""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Marginals:
    """Marginals of every variable from a method other than LBP.

    Attributes:
        method: "exact" or "sample".
        marginals: (V,) float64 P(x=1).
        log_odds: (V,) float64 log P(x=1) - log P(x=0) (+-inf where certain).
        stderr: (V,) float64 standard error of each marginal (zeros for "exact").
        seconds: wall time of the computation (host and device).
        info: what it took: exact: induced width, elimination order heuristic, largest table
            entries, tables, bytes; sample: samples, effective samples, worlds per second, ...
        lower, upper: (V,) float64 95% interval of each marginal (both the marginal for "exact").
    """
    method: str
    marginals: np.ndarray
    log_odds: np.ndarray
    stderr: np.ndarray
    seconds: float
    info: dict
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None

    def __post_init__(self):
        if self.lower is None:
            object.__setattr__(self, "lower", self.marginals)
        if self.upper is None:
            object.__setattr__(self, "upper", self.marginals)
