"""The Python API: load a graph, set evidence, run with warm starts, read marginals.

    import fastlbp.api as lbp
    from fastlbp.loading import load
    model = load("data/weblech.causal_fg")
    session = lbp.Session(model)
    session.run()
    session.label("87", False)
    result = session.run()            # warm-started from the previous messages
    print(session.marginals()["87"])
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from fastlbp import engine
from fastlbp.errors import ContradictoryEvidence, InputError
from fastlbp.graph import GraphError, label_codes
from fastlbp.model import Model

PRECISIONS = {"f64": jnp.float64, "f32": jnp.float32}


@dataclasses.dataclass
class Round:
    """One inference round: marginals as numpy on the host, plus how it went."""

    marginals: np.ndarray  # (V,) float64 P(x=1)
    log_odds: np.ndarray  # (V,) float64
    iterations: int
    converged: bool
    delta: float
    seconds: float


Runner = Callable[..., engine.RunResult]


def make_runner(model: Model, schedule: str = "parall") -> Runner:
    """A function `(graph, messages, evidence, tol, max_iters, damping) -> RunResult`.

    The schedule is compiled once here (dependency analysis), so rounds only
    run the jitted loop.
    """
    if schedule.lower() == "parall":
        return engine.parall_runner()
    try:
        from schedules import make_runner as schedule_runner
    except ImportError:
        raise InputError(None, None, f"unknown schedule {schedule!r} (available: parall)") from None
    return schedule_runner(model, schedule)


class Session:
    """Evidence, messages and settings for repeated, warm-started rounds on one model.

    Changing labels, tol, max_iters or damping never recompiles: they are data.
    """

    def __init__(self, model: Model, *, schedule: str = "parall", precision: str = "f64",
                 tol: float = 1e-6, max_iters: int = 1000, damping: float = 0.0):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {damping}")
        self.model = model
        self.dtype = PRECISIONS[precision]
        self.tol = tol
        self.max_iters = max_iters
        self.damping = damping
        self.schedule = schedule
        self._runner = make_runner(model, schedule)
        self.graph = jax.device_put(model.graph)
        self.labels: dict[int, bool] = dict(model.labels)
        self.messages = engine.init(self.graph, self.dtype)
        self.last: Round | None = None
        self._settings_key: tuple | None = None
        self._settings_arrays: tuple = ()

    # Evidence -------------------------------------------------------------
    def _var(self, name_or_index: str | int) -> int:
        if isinstance(name_or_index, int | np.integer):
            return int(name_or_index)
        try:
            return self.model.index[name_or_index]
        except KeyError:
            raise KeyError(f"unknown variable {name_or_index!r}") from None

    def label(self, name: str | int, truth: bool) -> None:
        self.labels[self._var(name)] = bool(truth)

    def unlabel(self, name: str | int) -> None:
        self.labels.pop(self._var(name), None)

    def evidence(self, labels: dict[int, bool] | None = None) -> jax.Array:
        """(V,) evidence log-odds on the device (+-inf where labelled)."""
        labels = self.labels if labels is None else labels
        # One byte per variable crosses to the device, not eight: at 0.2M variables that
        # was 0.9 ms of a 5 ms round.
        return _evidence_from_codes(jnp.asarray(label_codes(self.model.num_vars, labels)), self.dtype)

    # Inference ------------------------------------------------------------
    def _settings(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """tol, max_iters and damping on the device, sent again only when one changes: each
        host-to-device copy costs 0.15-0.25 ms on the H200 machine, a round three of them."""
        key = (self.tol, self.max_iters, self.damping, self.dtype)
        if self._settings_key != key:
            self._settings_key = key
            self._settings_arrays = (jnp.asarray(self.tol, self.dtype),
                                     jnp.asarray(self.max_iters, jnp.int32),
                                     jnp.asarray(self.damping, self.dtype))
        return self._settings_arrays

    def _call(self, messages, labels):
        return self._runner(self.graph, messages, self.evidence(labels), *self._settings())

    def run(self, *, warm: bool = True) -> Round:
        """Runs one round to convergence, warm-started from the last messages.

        Raises:
            ContradictoryEvidence: the labels have probability 0; names a
                minimal conflicting subset. Messages are left unchanged.
        """
        start = time.perf_counter()
        msgs = self.messages if warm else engine.init(self.graph, self.dtype)
        result = self._call(msgs, self.labels)
        # One transfer for all results: their copies overlap (1 ms less per round at 0.2M
        # variables than one np.asarray after another).
        conflict, lo, marginals, iterations, converged, delta = jax.device_get(
            (result.conflict, result.log_odds, result.marginals, result.iterations, result.converged,
             result.delta))
        if bool(conflict):
            raise ContradictoryEvidence(self._conflicting_labels())
        self.messages = result.messages
        seconds = time.perf_counter() - start
        self.last = Round(
            marginals=np.asarray(marginals, dtype=np.float64), log_odds=np.asarray(lo, dtype=np.float64),
            iterations=int(iterations), converged=bool(converged), delta=float(delta), seconds=seconds,
        )
        return self.last

    def _conflicts(self, labels: dict[int, bool]) -> bool:
        result = self._call(engine.init(self.graph, self.dtype), labels)
        return bool(result.conflict)

    def _conflicting_labels(self) -> dict[str, bool]:
        """Deletion filter: drop every label whose removal keeps the conflict."""
        labels = dict(self.labels)
        if len(labels) <= 64:
            for v in list(labels):
                trial = {k: t for k, t in labels.items() if k != v}
                if trial and self._conflicts(trial):
                    labels = trial
        return {self.model.var_names[v]: t for v, t in labels.items()}

    def marginals(self) -> dict[str, float]:
        """{variable name: P(=1)} from the last round (runs one if none yet)."""
        rnd = self.last or self.run()
        return dict(zip(self.model.var_names, rnd.marginals.tolist(), strict=True))


@functools.partial(jax.jit, static_argnums=1)
def _evidence_from_codes(codes: jax.Array, dtype) -> jax.Array:
    """(V,) int8 codes (1 true, -1 false, 0 unlabelled) -> (V,) evidence log-odds of `dtype`."""
    inf = jnp.asarray(jnp.inf, dtype)
    return jnp.where(codes > 0, inf, jnp.where(codes < 0, -inf, jnp.zeros((), dtype)))


def marginals(model: Model, labels: dict[int, bool] | None = None, **session_kwargs) -> Round:
    """One cold round on `model` with `labels` (or the model's own labels)."""
    session = Session(model, **session_kwargs)
    if labels is not None:
        session.labels = dict(labels)
    return session.run(warm=False)


__all__ = ["Session", "Round", "marginals", "make_runner", "InputError", "GraphError",
           "ContradictoryEvidence", "PRECISIONS"]
