"""fastlbp: loopy belief propagation on the GPU for ranking program-analysis alarms.

The public API:

    import fastlbp
    model = fastlbp.load("data/weblech.json")                  # a derivation graph -> Model
    session = fastlbp.Session(model, schedule="seqfix")        # or Session(model, fastlbp.Settings(...))
    first = session.run()                                      # a cold round
    session.label("race(13,15)", False)                        # evidence is data: no recompilation
    after = session.run()                                      # warm-started
    ranking = fastlbp.rank(model, session.labels)              # ranked alarms

Names: `load`, `read_labels`, `Settings`, `Session`, `Round`, `rank`, `Ranking`,
`Model`, `InputError`, `ContradictoryEvidence`, `SettingsError`,
and the factor-graph arrays (`FactorGraph`, `Factor`, `from_factors`,
`from_arrays`, `AND`, `OR`). Everything else (engines, kernels, schedules,
writers, triage) stays importable from its module but is not this surface.

Importing fastlbp does not import JAX (the commands that run no inference
start in 0.1-0.2 s instead of 0.7-1 s); it turns on `jax_enable_x64` when JAX is
imported, before JAX makes any array (`fastlbp.jax_setup`, the one place):
float64 is the default precision (the published accuracy depends on it);
float32 stays available per run. The session layer is imported on first use,
so `import fastlbp.graph` (what `datalog` needs) stays light.
"""

from fastlbp import jax_setup
from fastlbp.errors import ContradictoryEvidence, InputError, SettingsError
from fastlbp.graph import AND, OR, Factor, FactorGraph, GraphError, from_arrays, from_factors
from fastlbp.model import Model
from fastlbp.settings import Settings

jax_setup.when_imported(jax_setup.configure)

__version__ = "0.1.0"


def __getattr__(name: str):
    # The layers above the arrays (loading reads datalog, which imports fastlbp.graph)
    # load on first use, so importing any fastlbp module never imports them half-way.
    if name in ("load", "read_labels", "detect_format"):
        from fastlbp import loading

        return getattr(loading, name)
    if name in ("Session", "Round", "marginals"):
        from fastlbp import session

        return getattr(session, name)
    if name in ("rank", "Ranking"):
        from fastlbp import ranking

        return getattr(ranking, name)
    raise AttributeError(f"module 'fastlbp' has no attribute {name!r}")


__all__ = [
    "load", "read_labels", "detect_format", "Settings", "Session", "Round", "marginals", "rank", "Ranking",
    "Model", "AND", "OR", "Factor", "FactorGraph", "GraphError", "from_arrays", "from_factors",
    "InputError", "ContradictoryEvidence", "SettingsError",
]
