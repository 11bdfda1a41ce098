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

Importing fastlbp imports neither JAX nor numpy, so the commands that run no
inference start without them (`fastlbp --help`), and it changes no JAX setting:
fastlbp's functions that run JAX run with float64 on for their own duration
(`fastlbp.core.jax_setup.float64`; float64 is the default precision, float32
stays available per run), and the caller's
`jax_enable_x64` holds outside them. The factor-graph arrays, the model, loading,
the session and ranking are imported on first use of their names, so
`import fastlbp.core.graph` (what `datalog` needs) stays light.
"""

from fastlbp.core.errors import ContradictoryEvidence, InputError, SettingsError
from fastlbp.core.settings import Settings
from fastlbp.core.version import __version__ as __version__


def _graph():
    from fastlbp.core import graph

    return graph


def _model():
    from fastlbp.core import model

    return model


def _loading():
    from fastlbp.io import loading

    return loading


def _session():
    from fastlbp.inference import session

    return session


def _ranking():
    from fastlbp.inference import ranking

    return ranking


# Name -> the module that defines it, imported on first use (written as imports, so that the layer test,
# tests/test_layers.py, sees them: this front door sits above every layer it names).
_LAZY = {
    **dict.fromkeys(("AND", "OR", "Factor", "FactorGraph", "GraphError", "from_arrays", "from_factors"),
                    _graph),
    "Model": _model,
    **dict.fromkeys(("load", "read_labels", "detect_format"), _loading),
    **dict.fromkeys(("Session", "Round", "marginals"), _session),
    **dict.fromkeys(("rank", "Ranking"), _ranking),
}


def __getattr__(name: str):
    # The layers above the arrays (loading reads datalog, which imports fastlbp.core.graph) load on first use,
    # so importing any fastlbp module never imports them half-way; the arrays (numpy) likewise.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fastlbp' has no attribute {name!r}")
    return getattr(module(), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "load", "read_labels", "detect_format", "Settings", "Session", "Round", "marginals", "rank", "Ranking",
    "Model", "AND", "OR", "Factor", "FactorGraph", "GraphError", "from_arrays", "from_factors",
    "InputError", "ContradictoryEvidence", "SettingsError",
]
