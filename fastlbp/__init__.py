"""fastlbp: loopy belief propagation on the GPU for ranking program-analysis alarms.

Importing fastlbp turns on `jax_enable_x64`: float64 is the default precision
(the published accuracy depends on it); float32 stays available per run.
"""

import jax

jax.config.update("jax_enable_x64", True)

from fastlbp.errors import ContradictoryEvidence, InputError  # noqa: E402
from fastlbp.graph import AND, OR, Factor, FactorGraph, GraphError, from_arrays, from_factors  # noqa: E402

__version__ = "0.1.0"
__all__ = [
    "AND", "OR", "Factor", "FactorGraph", "GraphError", "from_arrays", "from_factors",
    "InputError", "ContradictoryEvidence",
]
