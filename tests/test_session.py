"""fastlbp.inference.session: warm starts, evidence as data (no recompilation), settings, contradictions."""

import numpy as np
import pytest
from conftest import DATA

from datalog import causal_fg
from fastlbp.core.errors import ContradictoryEvidence, SettingsError
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.model import Model
from fastlbp.core.settings import Settings
from fastlbp.inference.session import Session


def test_changing_evidence_never_recompiles():
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    session = Session(model, method="lbp")
    session.run()
    before = session.runner.run._cache_size()
    rng = np.random.default_rng(0)
    for v in rng.choice(model.num_vars, 5, replace=False):
        session.label(int(v), False)
        try:
            session.run()
        except ContradictoryEvidence:
            session.unlabel(int(v))
        session.settings = session.settings.replace(tol=1e-5, damping=0.1, max_iters=50)
    assert session.runner.run._cache_size() == before


def test_new_settings_reach_the_runner():
    # The session keeps tol, max_iters and damping on the device between rounds; a change
    # must still take effect at the next round.
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    session = Session(model, method="lbp", tol=1e-9, remedies=False)  # a capped round stays capped
    fine = session.run(warm=False).iterations
    assert fine > 3
    session.settings = session.settings.replace(max_iters=3)
    assert session.run(warm=False).iterations == 3
    session.settings = session.settings.replace(max_iters=1000, tol=1e-2)
    assert 3 < session.run(warm=False).iterations < fine


def test_contradictory_labels_are_named():
    # a -> b deterministically (OR), c independent: labelling a true and b false contradicts.
    factors = [Factor(AND, 0, (), 0.5, 0.5), Factor(OR, 1, (0,), 1.0, 0.0), Factor(AND, 2, (), 0.5, 0.5)]
    model = Model(graph=from_factors(factors), var_names=("a", "b", "c"))
    session = Session(model)
    session.label("c", True)
    session.label("a", True)
    session.label("b", False)
    with pytest.raises(ContradictoryEvidence) as info:
        session.run()
    assert info.value.labels == {"a": True, "b": False}
    assert "a=true" in str(info.value) and "nan" not in str(info.value).lower()
    session.unlabel("b")
    rnd = session.run()
    assert np.all(np.isfinite(rnd.marginals)) and rnd.marginals[1] == 1.0


def test_warm_start_continues_from_messages():
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    session = Session(model, method="lbp", tol=1e-9)  # warm starts are LBP's
    cold = session.run()
    warm = session.run()
    assert warm.iterations <= 1
    np.testing.assert_allclose(warm.marginals, cold.marginals, atol=1e-9)


def test_consistent_labels_never_conflict():
    # Labels drawn from a world sampled from the model have positive probability.
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate, sample_truth

    dg = generate(preset="weblech", seed=3, rule_probabilities=(0.999, 0.95, 0.9))
    model = to_model(dg)
    truth = sample_truth(dg, seed=1)
    # LBP's spurious conflicts (auto samples this graph: 40 sampled rounds under labels take minutes).
    session = Session(model, method="lbp", tol=1e-7, max_iters=300)
    session.run()
    rng = np.random.default_rng(0)
    tuples = rng.choice(dg.num_tuples, 40, replace=False)
    for t in tuples:
        session.label(int(t), bool(truth[t]))
        rnd = session.run()  # raises ContradictoryEvidence on a spurious conflict
        assert np.all(np.isfinite(rnd.marginals))


@pytest.mark.slow
def test_a_session_takes_settings_or_keywords():
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    by_object = Session(model, Settings(method="lbp", schedule="seqfix", tol=1e-9))
    by_keyword = Session(model, method="lbp", schedule="seqfix", tol=1e-9)
    assert by_object.settings == by_keyword.settings and by_object.runner.name == "seqfix/relaxed"
    np.testing.assert_allclose(by_object.run().marginals, by_keyword.run().marginals, atol=0)
    fused = Session(model, method="lbp", backend="fused_interpret", tol=1e-9)
    assert fused.runner.name == "parall/fused"
    np.testing.assert_allclose(fused.run().marginals, Session(model, method="lbp", tol=1e-9).run().marginals,
                               atol=1e-9)
    with pytest.raises(SettingsError, match="cannot change schedule"):
        by_object.settings = by_object.settings.replace(schedule="parall")
    with pytest.raises(TypeError, match="unknown setting"):
        Session(model, tolerance=1e-3)
    with pytest.raises(SettingsError, match="damping"):
        Session(model, damping=1.5)


def _oscillating_model():
    # PARALL swings these marginals by 0.87 from one iteration to the next (found by a search over
    # tests/graphs.py's random graphs: seed 51, 4 variables).
    from graphs import random_factors

    rng = np.random.default_rng(51)
    V = int(rng.integers(2, 8))
    factors = random_factors(rng, V, int(rng.integers(2, 10)), hard=0.1)
    return Model(graph=from_factors(factors, V), var_names=tuple(f"x{i}" for i in range(V))), factors, V


def test_a_round_that_does_not_converge_gets_a_remedy_and_says_which():
    model, factors, V = _oscillating_model()
    plain = Session(model, method="lbp", tol=1e-6, max_iters=200, remedies=False).run()
    assert not plain.converged and plain.remedy is None
    rnd = Session(model, method="lbp", tol=1e-6, max_iters=200).run()
    assert rnd.remedy in ("damping 0.5", "damping 0.8", "average of the last 100 iterations")
    assert rnd.converged == rnd.remedy.startswith("damping")
    assert np.all(np.isfinite(rnd.marginals)) and np.all((rnd.marginals >= 0) & (rnd.marginals <= 1))
    # The plain rounds swing from one iteration to the next; the remedied ones do not.
    swing = Session(model, method="lbp", tol=1e-6, max_iters=201, remedies=False).run().marginals
    assert np.max(np.abs(swing - plain.marginals)) > 0.3
    again = Session(model, method="lbp", tol=1e-6, max_iters=201).run()
    assert again.remedy == rnd.remedy and np.max(np.abs(again.marginals - rnd.marginals)) < 0.05


def test_a_converged_round_needs_no_remedy():
    model = causal_fg.load(DATA / "weblech" / "graph.causal_fg")
    rnd = Session(model, method="lbp", tol=1e-6).run()
    assert rnd.converged and rnd.remedy is None


def test_label_and_marginal_of_any_tuple_of_the_graph():
    """Session.label takes any tuple that is a variable (spaces forgiven) and says why another is not;
    tuple_marginals reports every tuple of the input graph, pruned ones as the unpruned model has them."""
    from datalog.bayesnet import rebuild
    from fastlbp.io import loading

    model = loading.load(DATA.parents[1] / "data" / "weblech.json")
    # LBP: deterministic, so the pruned model's marginals equal the unpruned model's to 1e-9 (auto
    # samples weblech.json, and the two models' samples differ).
    session = Session(model, method="lbp")
    with pytest.raises(KeyError, match="pruned by compression.*keep_tuples"):
        session.label("aliased(3,2)", False)
    with pytest.raises(KeyError, match="unknown"):
        session.label("nosuch(1)", False)
    every = session.tuple_marginals()
    assert list(every) == list(model.tuple_names) and len(every) == 305
    unpruned = Session(rebuild(model, prune=False), method="lbp").tuple_marginals()
    for name, p in every.items():
        assert p == pytest.approx(unpruned[name], abs=1e-9), name
    assert session.marginal("aliased(3, 2)") == every["aliased(3,2)"]
    constant = next(n for n, h in zip(model.tuple_names, model.meta["tuple_how"], strict=True) if h == 1)
    assert session.marginal(constant) == 1.0
    alarm = model.var_names[model.alarms[0]]
    session.label(alarm.replace(",", ", "), False)
    assert session.labels == {model.alarms[0]: False}
    kept = loading.keep_tuples(model, ["aliased(3,2)"])
    s2 = Session(kept)
    s2.label("aliased(3,2)", False)
    assert s2.marginal("aliased(3,2)") == 0.0
