"""`method="auto"` (the default): which method answers, why, and that the answer is the model's.

The two cases LBP gets quietly wrong (tests/test_lbp_flags.py builds them) are answered right
under the default; the shipped weblech, where LBP prints 1e-67 for alarms the model puts at 1e-2,
is sampled with intervals; a tree where LBP is exact passes `check --reference sample`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from reference import exact_marginals
from typer.testing import CliRunner

from datalog.bayesnet import to_model
from datalog.synthetic import layered
from fastlbp.cli import get_app
from fastlbp.core.errors import ContradictoryEvidence
from fastlbp.core.graph import from_factors
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.inference import methods
from fastlbp.inference.check import check
from fastlbp.inference.session import Session
from fastlbp.io import loading
from tests.graphs import random_polytree
from tests.test_lbp_flags import chains, impossible

DATA = Path(__file__).parents[1] / "data"


def invoke(*args):
    return CliRunner().invoke(get_app(), [str(a) for a in args])


@pytest.fixture(scope="module")
def weblech():
    return loading.load(DATA / "weblech.json")


def test_lost_evidence_is_answered_exactly_by_default():
    model = chains()
    session = Session(model)
    session.label("end", True)
    rnd = session.run()
    assert session.method == "exact" and rnd.method == "exact"
    assert rnd.marginals[model.index["s"]] == pytest.approx(1.0)
    assert "induced width" in rnd.reason
    # LBP on its own loses the label (and says so, tests/test_lbp_flags.py).
    lbp = Session(model, method="lbp")
    lbp.label("end", True)
    assert lbp.run().marginals[0] < 0.9


def test_impossible_labels_are_a_clean_error_by_default():
    model, _, labels = impossible()
    session = Session(model)
    session.labels = dict(labels)
    with pytest.raises(ContradictoryEvidence):
        session.run()


def test_auto_order_exact_then_sample_then_lbp(monkeypatch):
    small = to_model(layered(num_inputs=4, layers=2, width=3, seed=0))
    assert methods.choose(small, Settings()).method == "exact"
    assert methods.choose(small, Settings(method="lbp")) == methods.Choice("lbp")
    wide = to_model(layered(num_inputs=30, layers=3, width=30, seed=1))
    choice = methods.choose(wide, Settings(exact_memory=1 << 12))
    assert choice.method == "sample" and choice.sampler is not None and "not exact" in choice.reason
    assert "worlds/s measured" in choice.reason and choice.sampler.world_seconds > 0
    # By measured cost: where too few worlds fit a round's budget, LBP, and the reason says so.
    monkeypatch.setattr(methods, "AUTO_MIN_WORLDS", 10**15)
    choice = methods.choose(wide, Settings(exact_memory=1 << 12))
    assert choice.method == "lbp" and "needed" in choice.reason and "worlds/s" in choice.reason
    # No budget (--sample-seconds 0): sampled wherever it can be.
    assert methods.choose(wide, Settings(exact_memory=1 << 12, sample_seconds=0)).method == "sample"


def test_weblech_is_sampled_with_intervals(weblech):
    session = Session(weblech)
    rnd = session.run()
    assert rnd.method == "sample" and "importance sampling" in methods.describe(rnd)
    alarms = np.asarray(weblech.alarms)
    # The model's alarms are at about 1e-2 (LBP: 1e-67 to 1e-165), each within its interval.
    assert np.all((rnd.marginals[alarms] > 1e-3) & (rnd.marginals[alarms] < 0.05))
    assert np.all(rnd.lower[alarms] <= rnd.marginals[alarms]) and np.all(rnd.stderr[alarms] > 0)
    assert rnd.info["max_stderr"] <= Settings().target_se


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_check_against_sample_is_ok_where_lbp_is_exact(seed):
    # A polytree: LBP is exact, and marginals near 0 must not be called far off by a sampled
    # reference whose standard error there is honest (Wilson), not 0.
    rng = np.random.default_rng(seed)
    factors = random_polytree(rng, 12)
    model = Model(graph=from_factors(factors, 12), var_names=tuple(str(v) for v in range(12)))
    report = check(model, {}, Settings(samples=1 << 16), reference="sample")
    assert report.verdict == "ok", report.reasons
    np.testing.assert_allclose(report.lbp_round.marginals, exact_marginals(factors, 12), atol=1e-9)


def test_cli_rank_says_how_and_shows_the_error():
    res = invoke("rank", DATA / "weblech.json", "--top", "3")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split()[:4] == ["rank", "probability", "95%", "interval"]
    assert all("[" in ln and "]" in ln for ln in lines[1:4])
    assert "importance sampling" in res.stderr and "method auto:" in res.stderr
    res = invoke("rank", DATA / "weblech.json", "--top", "3", "--format", "json")
    doc = json.loads(res.stdout)
    assert doc["method"] == "sample" and doc["how"].startswith("importance sampling")
    assert all(a["lower"] <= a["probability"] <= a["upper"] and a["stderr"] > 0 for a in doc["alarms"])
    res = invoke("rank", DATA / "weblech.json", "--top", "3", "--method", "lbp")
    assert "unchecked" in res.stdout.splitlines()[1] and "approximate and unchecked" in res.stderr


def test_cli_marginals_json_has_standard_errors():
    res = invoke("marginals", DATA / "weblech.json", "--method", "sample", "--samples", "4096")
    doc = json.loads(res.stdout)
    assert doc["method"] == "sample" and set(doc["stderr"]) == set(doc["marginals"])
    for name, (lo, hi) in doc["interval"].items():
        assert lo <= doc["marginals"][name] <= hi


def test_small_graphs_sample_on_the_host_without_compiling(weblech):
    """A graph of a few thousand edges is sampled in numpy: its first call compiles nothing (the device
    program took 6-14 s to compile for weblech), and a triage session's labels compile nothing either."""
    import collections

    import jax

    from fastlbp.engines import sampling

    compiles = collections.Counter()

    def count(event, duration, fun_name=None, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles[fun_name] += 1

    jax.monitoring.register_event_duration_secs_listener(count)
    sampler = sampling.Sampler(weblech.graph, weblech.var_names)
    assert sampler.host
    labels = {}
    for alarm in list(weblech.alarms)[:3]:
        cfg = Settings(samples=8192, target_se=0)
        result = sampling.sample_marginals(weblech, labels, cfg, sampler=sampler)
        assert result.info["path"] == "host"
        labels[int(alarm)] = False
    assert sum(compiles.values()) == 0, compiles


def test_auto_takes_exact_on_a_deep_chain_past_the_size_limit():
    """A chain of 6,000 tuples (each one clause on the one before) is past AUTO_EXACT_VARS, but its
    factor graph is a forest (width 1): auto answers exactly instead of running LBP for thousands of
    iterations or the sampler through thousands of steps."""
    from fastlbp.core.graph import AND, Factor, from_factors

    n = 6000
    factors = [Factor(AND, 0, (), 0.9, 0.0)] + [Factor(AND, v, (v - 1,), 0.9999, 0.0) for v in range(1, n)]
    model = Model(graph=from_factors(factors, n), var_names=tuple(str(v) for v in range(n)))
    assert n > methods.AUTO_EXACT_VARS and methods.is_forest(model.graph)
    choice = methods.choose(model, Settings())
    assert choice.method == "exact" and "induced width 1" in choice.reason
    two_parents = [Factor(AND, 0, (), 0.5, 0.0), Factor(AND, 1, (0,), 0.5, 0.0),
                   Factor(AND, 2, (0, 1), 0.5, 0.0)]
    assert not methods.is_forest(from_factors(two_parents, 3))


def test_an_interactive_fallback_to_lbp_compiles_nothing_in_its_round():
    """An interactive session under auto samples on the device path; labels the sampler refuses are
    answered by LBP, prepared and compiled in a thread during the first round: the fallback round
    compiles nothing on the session's thread, and says why LBP answered."""
    import collections
    import threading

    import jax

    compiles = collections.Counter()

    def count(event, duration, fun_name=None, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles[threading.current_thread().name.startswith("fastlbp-warm")] += 1

    jax.monitoring.register_event_duration_secs_listener(count)
    wide = to_model(layered(num_inputs=30, layers=3, width=30, seed=1))
    # A refusal on a labelled round: as many effective samples asked as worlds drawn (the unlabelled
    # round's weights are even, a label's are not).
    settings = Settings(exact_memory=1 << 12, samples=2048, max_samples=2048, target_se=0).interactive()
    settings = settings.replace(min_accepted=2048)
    session = Session(wide, settings)
    session.compile_flags()
    first = session.run()
    assert first.method == "sample" and first.info["path"] == "device"
    assert session._warming is None  # the first round waited for the thread's compile
    on_thread = compiles[False]
    session.label(int(wide.alarms[0]), True)
    rnd = session.run()
    assert rnd.method == "lbp" and any("LBP answered instead" in f for f in rnd.flags)
    assert compiles[False] == on_thread, compiles
    assert compiles[True] > 0
