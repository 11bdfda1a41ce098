"""fastlbp/engines/loop.py: the convergence test cannot stop a round before evidence has travelled.

The graph of issue 22 ("premature.json"): rules R (p = 1e-8) `a :- i`, `a :- j`
and S (p = 0.5) `b :- a`, inputs i, j with prior 1e-8, label b = true. b can
only hold through a, and a through i or j, so P(i) = P(j) = 1/2 exactly. A
test on the change of probabilities stopped after 2 iterations ("converged")
with P(i) = 1e-8: the marginal of the clause that carries the evidence moved
from 1e-16 to 2e-8, below tol, on its way to 1/2.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from datalog.bayesnet import to_model
from datalog.derivation import DerivationGraph, Rule
from fastlbp.core import logspace
from fastlbp.inference.session import Session


def _premature(compress: bool):
    dg = DerivationGraph(
        tuples=["i", "j", "a", "b"],
        rules=[Rule("R", 1e-8, "a :- i"), Rule("S", 0.5, "b :- a")],
        clause_rule=np.array([0, 0, 1], np.int32),
        clause_head=np.array([2, 2, 3], np.int32),
        body_offsets=np.array([0, 1, 2, 3]),
        body=np.array([0, 1, 2], np.int32),
        priors={0: 1e-8, 1: 1e-8},
        alarms=np.array([3], np.int32),
    )
    return to_model(dg, compress=compress)


ENGINES = [
    ("parall", "xla"),
    ("parall", "fused_interpret"),
    ("seqfix", "xla"),  # relaxation
    ("seqfix:chunked", "xla"),
    ("seqfix:chunked", "fused_interpret"),  # the persistent kernel
    ("topo", "xla"),
]


@pytest.mark.slow
@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("schedule,backend", ENGINES)
def test_evidence_reaches_the_inputs_before_the_round_stops(schedule, backend, compress):
    model = _premature(compress)
    session = Session(model, schedule=schedule, backend=backend, tol=1e-6)
    session.label("b", True)
    rnd = session.run()
    p = session.marginals()
    assert rnd.converged
    assert p["i"] == pytest.approx(0.5, abs=1e-6) and p["j"] == pytest.approx(0.5, abs=1e-6)


def test_the_change_is_relative_to_the_log_odds():
    lo_old = jnp.asarray([-36.8, 0.0, 5.0, jnp.inf, -jnp.inf, 3.0, 1.0, jnp.nan])
    lo_new = jnp.asarray([-17.7, 1e-7, 5.0, jnp.inf, -jnp.inf, jnp.inf, jnp.nan, 1.0])
    change, bad = logspace.log_odds_change(lo_new, lo_old)
    change = np.asarray(change)
    # A tiny probability moving by orders of magnitude is a large change (a change of
    # probability would be 2e-8).
    assert change[0] == pytest.approx(19.1 / 37.8)
    assert change[1] == pytest.approx(1e-7)
    assert change[2] == 0 and change[3] == 0 and change[4] == 0  # equal, infinities too
    assert change[5] == np.inf  # a marginal turned hard
    assert change[6] == 0 and change[7] == 0  # NaN is a conflict, reported apart
    assert np.asarray(bad).tolist() == [False] * 6 + [True, False]
