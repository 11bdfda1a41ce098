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
            entries, tables, bytes; sample: samples, accepted, effective samples, worlds per second.
    """
    method: str
    marginals: np.ndarray
    log_odds: np.ndarray
    stderr: np.ndarray
    seconds: float
    info: dict
