"""Every tuple of the input graph resolves (`Model.resolve`), can be labelled (`load_labels`,
`keep_tuples`) and has a marginal (`tuple_marginals`), checked against uncompressed models."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import Contradiction, exact_marginals, sequential_lbp
from test_datalog_transform import random_derivation

from datalog.bayesnet import rebuild, to_model, tuple_marginals
from datalog.cycles import least_fixpoint
from datalog.derivation import from_clauses
from fastlbp.core.errors import InputError
from fastlbp.core.model import CONSTANT, PRUNED, UNDERIVABLE, VARIABLE
from fastlbp.io import loading


def _exact_tuples(model, labels=None) -> np.ndarray:
    """(T,) exact P of every tuple: enumeration on the model, mapped by `tuple_marginals`."""
    return tuple_marginals(model, exact_marginals(model.graph.factors(), model.num_vars, labels))


def _derivable_graph(seed: int, **kw):
    dg = random_derivation(seed, **kw)
    return dg if least_fixpoint(dg).derivable.any() else None


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_every_tuple_resolves_to_what_became_of_it(seed, compress):
    dg = _derivable_graph(seed, max_tuples=9, max_clauses=14)
    if dg is None:
        return
    model = to_model(dg, compress=compress)
    derivable = least_fixpoint(dg).derivable
    assert model.tuple_names == tuple(dg.tuples)
    for t, name in enumerate(dg.tuples):
        r = model.resolve(name)
        assert r.name == name and r.tuple == t
        if r.how == VARIABLE:
            assert model.var_names[r.var] == name
        else:
            assert r.var == -1 and r.reason
        assert (r.how == UNDERIVABLE) == (not derivable[t])
        if r.how == CONSTANT:  # only compression removes a certain input fact
            assert compress and dg.priors.get(t, 1.0) == 1.0 and r.value == 1.0
        if r.how == PRUNED:
            assert compress and dg.alarms.size
    for v, name in enumerate(model.var_names):  # clause and @input variables resolve too
        assert model.resolve(name).var == v
    with pytest.raises(KeyError, match="unknown"):
        model.resolve("no such tuple")


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_labels_on_any_tuple_match_the_uncompressed_model(seed):
    """A label on any derivable tuple (kept, merged, pruned, constant) of a compressed model, kept
    by `keep_tuples`, gives every tuple the exact marginal of the uncompressed model."""
    dg = _derivable_graph(seed)
    if dg is None:
        return
    full = to_model(dg)
    if full.num_vars > 18:
        return
    rng = np.random.default_rng(seed)
    derivable = np.flatnonzero(least_fixpoint(dg).derivable)
    picked = rng.choice(derivable, size=min(2, derivable.size), replace=False)
    names = {dg.tuples[t]: bool(rng.integers(2)) for t in picked}
    small = loading.keep_tuples(to_model(dg, compress=True), list(names))
    small_all = rebuild(small, prune=False)  # every derivable tuple not a constant is a variable
    try:
        ref = _exact_tuples(full, {full.resolve(n).var: v for n, v in names.items()})
    except Contradiction:
        with pytest.raises(Contradiction):
            _exact_tuples(small, {small.resolve(n).var: v for n, v in names.items()})
        return
    got = _exact_tuples(small, {small.resolve(n).var: v for n, v in names.items()})
    how = np.asarray(small.meta["tuple_how"])
    exact = how != PRUNED  # a pruned tuple's forward belief is exact only on polytrees
    np.testing.assert_allclose(got[exact], ref[exact], atol=1e-12)
    got_all = _exact_tuples(small_all, {small_all.resolve(n).var: v for n, v in names.items()})
    assert not np.any(np.asarray(small_all.meta["tuple_how"]) == PRUNED)
    np.testing.assert_allclose(got_all, ref, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_a_labels_file_acts_as_the_graphs_own_labels(tmp_path_factory, seed):
    """`load_labels` on a loaded model gives the model (and labels) a graph with those labels gives."""
    dg = _derivable_graph(seed)
    if dg is None:
        return
    rng = np.random.default_rng(seed)
    derivable = np.flatnonzero(least_fixpoint(dg).derivable)
    picked = rng.choice(derivable, size=min(2, derivable.size), replace=False)
    truth = {int(t): bool(rng.integers(2)) for t in picked}
    path = tmp_path_factory.mktemp("labels") / "labels.txt"
    path.write_text("".join(f"{dg.tuples[t]}\t{'true' if v else 'false'}\n" for t, v in truth.items()))
    model, labels = loading.load_labels(path, to_model(dg, compress=True))
    dg.labels = truth
    direct = to_model(dg, compress=True)
    assert model.var_names == direct.var_names
    assert labels == direct.labels
    for a, b in zip(model.graph.factors(), direct.graph.factors(), strict=True):
        assert a == b


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_pruned_tuples_get_the_belief_lbp_gives_the_unpruned_model(seed):
    dg = _derivable_graph(seed, max_tuples=9, max_clauses=14)
    if dg is None:
        return
    small = to_model(dg, compress=True)
    unpruned = rebuild(small, prune=False)
    runs = [sequential_lbp(m.graph.factors(), m.num_vars, tol=1e-13, max_iters=3000)
            for m in (small, unpruned)]
    if not all(r.converged for r in runs):
        return
    a, b = (tuple_marginals(m, r.marginals) for m, r in zip((small, unpruned), runs, strict=True))
    np.testing.assert_allclose(a, b, atol=1e-9)


def _random_tree_derivation(seed: int):
    """A derivation graph whose Bayesian network is a polytree: each tuple in at most one body."""
    rng = np.random.default_rng(seed)
    free = [f"in({i})" for i in range(int(rng.integers(3, 7)))]
    priors = {t: float(rng.choice([1.0, 0.9, 0.5, 0.2])) for t in free}
    clauses, derived = [], []
    for i in range(int(rng.integers(2, 6))):
        head = f"d({i})"
        for _ in range(int(rng.integers(1, 3))):
            if not free:
                break
            k = int(rng.integers(1, min(3, len(free)) + 1))
            body = [free.pop(int(rng.integers(len(free)))) for _ in range(k)]
            clauses.append((f"R{int(rng.integers(3))}", head, body))
        if any(c[1] == head for c in clauses):
            derived.append(head)
            free.append(head)
    alarms = [t for t in derived if rng.random() < 0.4] or derived[-1:]
    rules = {f"R{r}": float(rng.choice([0.95, 0.7, 0.4])) for r in range(3)}
    return from_clauses(clauses, rules=rules, priors=priors, alarms=alarms)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_pruned_tuples_are_exact_on_polytrees(seed):
    dg = _random_tree_derivation(seed)
    full, small = to_model(dg), to_model(dg, compress=True)
    if full.num_vars > 20:
        return
    rng = np.random.default_rng(seed)
    label = {small.alarms[0]: bool(rng.integers(2))} if rng.random() < 0.7 else {}
    name = {small.var_names[v]: t for v, t in label.items()}
    try:
        ref = _exact_tuples(full, {full.index[n]: t for n, t in name.items()})
    except Contradiction:
        return
    np.testing.assert_allclose(_exact_tuples(small, label), ref, atol=1e-12)


def test_weblech_every_tuple_resolves_and_pruned_ones_can_be_labelled(tmp_path):
    model = loading.load("data/weblech.json")
    how = np.asarray(model.meta["tuple_how"])
    assert model.meta["num_tuples"] == len(model.tuple_names) == 305
    assert np.count_nonzero(how == CONSTANT) == 67 and np.count_nonzero(how == PRUNED) == 24
    r = model.resolve("aliased(3,2)")
    assert (r.how, r.var) == (PRUNED, -1) and "pruned" in r.reason
    kept = loading.keep_tuples(model, ["aliased(3,2)"])
    assert kept.resolve("aliased(3,2)").how == VARIABLE and kept.meta["warnings"] == model.meta["warnings"]
    assert loading.keep_tuples(kept, ["aliased(3,2)"]) is kept  # nothing to add: the same model


def test_underivable_tuples_cannot_be_kept_or_labelled(tmp_path):
    dg = from_clauses([("R0", "a", ["b"]), ("R0", "b", ["a"]), ("R1", "c", ["d"])], alarms=["c"])
    model = to_model(dg, compress=True)
    assert model.resolve("a").how == UNDERIVABLE and model.resolve("a").value == 0.0
    with pytest.raises(InputError, match="cycle elimination"):
        loading.keep_tuples(model, ["a"])
    p = tmp_path / "l.txt"
    p.write_text("c true\na false\n")
    with pytest.raises(InputError, match="'a' cannot be labelled: removed by cycle elimination") as e:
        loading.load_labels(p, model)
    assert e.value.line == 2


def test_resolve_forgives_spaces_only_when_unambiguous():
    dg = from_clauses([("R0", "race(1,2)", ["in(1, 2)"]), ("R0", "x(1,2)", ["in(1, 2)"]),
                       ("R0", "x(1, 2)", ["in(1, 2)"])], alarms=["race(1,2)"])
    model = to_model(dg, compress=True)
    assert model.resolve("race(1, 2)").name == "race(1,2)"
    assert model.resolve("in(1,2)").name == "in(1, 2)"
    assert model.resolve("x(1, 2)").name == "x(1, 2)"  # an exact name wins
    with pytest.raises(KeyError):
        model.resolve("x( 1,2)")  # spells both x(1,2) and x(1, 2)
