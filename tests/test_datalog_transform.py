"""Cycle elimination, compression and the Bayesian-network conversion against references."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import Contradiction, exact_marginals

from datalog import formats
from datalog.bayesnet import to_model
from datalog.cycles import is_acyclic, least_fixpoint
from datalog.derivation import from_clauses, merge_duplicates
from fastlbp.core.errors import InputError
from fastlbp.inference.session import marginals

PRESTO = Path(__file__).parent / "data" / "presto-exceptions"


def random_derivation(seed: int, max_tuples: int = 7, max_clauses: int = 9, alarms: bool = True):
    """A small random derivation graph, cycles and self-loops included, with priors and alarms."""
    rng = np.random.default_rng(seed)
    num_t = int(rng.integers(2, max_tuples + 1))
    names = [f"t({i})" for i in range(num_t)]
    rules = {f"R{r}": float(rng.choice([1.0, 0.999, 0.9, 0.6, 0.3])) for r in range(3)}
    clauses = []
    for _ in range(int(rng.integers(1, max_clauses + 1))):
        head = names[int(rng.integers(num_t))]
        k = int(rng.integers(0, 4))
        body = [names[i] for i in rng.choice(num_t, size=min(k, num_t), replace=False)]
        clauses.append((f"R{int(rng.integers(3))}", head, body))
    priors = {names[i]: float(rng.choice([1.0, 0.999, 0.7, 0.2]))
              for i in range(num_t) if rng.random() < 0.25}
    dg = from_clauses(clauses, rules=rules, priors=priors, tuples=names)
    if alarms and num_t:
        stages = least_fixpoint(dg)
        cand = np.flatnonzero(stages.derivable)
        if cand.size == 0:
            return dg
        k = int(rng.integers(1, min(3, cand.size) + 1))
        dg.alarms = np.sort(rng.choice(cand, size=k, replace=False)).astype(np.int32)
    return dg


def naive_fixpoint(dg) -> set[int]:
    """Derivable tuples by plain iteration of the immediate-consequence operator."""
    derived_heads = set(int(h) for h in dg.clause_head)
    known = {t for t in range(dg.num_tuples) if t not in derived_heads} | set(dg.priors)
    changed = True
    while changed:
        changed = False
        for c in range(dg.num_clauses):
            head = int(dg.clause_head[c])
            if head not in known and all(int(b) in known for b in dg.clause_body(c)):
                known.add(head)
                changed = True
    return known


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["cycles", "bingo"]))
def test_cycle_elimination_keeps_exactly_the_derivable_tuples_and_is_acyclic(seed, mode):
    dg = random_derivation(seed, max_tuples=9, max_clauses=14, alarms=False)
    stages = least_fixpoint(dg, mode)
    assert set(np.flatnonzero(stages.derivable).tolist()) == naive_fixpoint(dg)
    assert is_acyclic(dg, stages.clause_kept)
    kept = stages.clause_kept
    # Every derivable tuple that is not an input keeps a derivation; kept clauses derive in order.
    for t in np.flatnonzero(stages.derivable & ~stages.is_input):
        assert kept[np.asarray(dg.clause_head) == t].any()
    # Off cycles ("cycles" mode) every clause that fires survives; on cycles only in-order ones.
    fires = stages.clause_stage >= 0
    if mode == "cycles":
        assert np.array_equal(kept & ~stages.on_cycle, fires & ~stages.on_cycle)
    in_order = kept if mode == "bingo" else kept & stages.on_cycle
    for c in np.flatnonzero(in_order):
        body = dg.clause_body(int(c))
        assert all(stages.tuple_stage[b] < stages.tuple_stage[dg.clause_head[c]] for b in body)
    # The kept clauses alone derive the same tuples.
    sub = from_clauses([(dg.rules[dg.clause_rule[c]].name, dg.tuples[dg.clause_head[c]],
                         [dg.tuples[b] for b in dg.clause_body(int(c))]) for c in np.flatnonzero(kept)],
                       tuples=dg.tuples, priors={dg.tuples[t]: p for t, p in dg.priors.items()})
    # Heads whose clauses were all dropped become inputs in `sub`; compare the derivations only.
    assert naive_fixpoint(sub) >= set(np.flatnonzero(stages.derivable).tolist())


def _exact_by_name(model, labels=None):
    marg = exact_marginals(model.graph.factors(), model.num_vars, labels)
    return dict(zip(model.var_names, marg.tolist(), strict=True))


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_compression_leaves_every_alarm_marginal_unchanged(seed):
    dg = random_derivation(seed)
    if not least_fixpoint(dg).derivable.any():
        with pytest.raises(InputError, match="nothing is left"):
            to_model(dg)
        return
    full = to_model(dg)
    small = to_model(dg, compress=True)
    assert small.num_vars <= full.num_vars
    assert [small.var_names[a] for a in small.alarms] == [full.var_names[a] for a in full.alarms]
    if full.num_vars > 20:
        return
    rng = np.random.default_rng(seed)
    label_sets = [{}] + [{int(a): bool(rng.integers(2)) for a in full.alarms if rng.random() < 0.6}
                         for _ in range(2)]
    for labels in label_sets:
        names = {full.var_names[v]: t for v, t in labels.items()}
        try:
            ref = _exact_by_name(full, labels)
        except Contradiction:
            with pytest.raises(Contradiction):
                _exact_by_name(small, {small.index[n]: t for n, t in names.items()})
            continue
        got = _exact_by_name(small, {small.index[n]: t for n, t in names.items()})
        for a in full.alarms:
            name = full.var_names[a]
            assert got[name] == pytest.approx(ref[name], abs=1e-12)
        # Stronger: every variable that survives keeps its marginal.
        for name, p in got.items():
            assert p == pytest.approx(ref[name], abs=1e-12)


def test_hand_made_graph_known_marginals():
    dg = from_clauses(
        [("R0", "a", ["b", "c"]), ("R1", "d", ["a"]), ("R2", "e", ["b"]), ("R3", "e", ["c"]),
         ("R4", "f", ["g"]), ("R4", "g", ["f"]), ("R5", "g", ["b"])],
        rules={"R0": 0.9, "R1": 0.8, "R2": 0.5, "R3": 0.5, "R4": 1.0, "R5": 0.7},
        priors={"c": 0.5}, alarms=["d", "e", "f"],
    )
    for compress in (False, True):
        model = to_model(dg, compress=compress)
        got = _exact_by_name(model)
        assert got["d"] == pytest.approx(0.9 * 0.5 * 0.8)
        assert got["e"] == pytest.approx(1 - 0.5 * (1 - 0.5 * 0.5))
        assert got["f"] == pytest.approx(0.7)  # f <- g <- b; the clause g <- f closes a cycle: dropped
    rep = to_model(dg, compress=True).meta["report"]
    assert rep["clauses_dropped_by_cycle_elimination"] == 1
    assert rep["constant_inputs_removed"] == 1  # b
    assert rep["merged_tuples"] >= 3  # a, d, f (and g)


def test_mapping_names_tuples_and_clauses():
    dg = from_clauses([("R0", "a", ["b"]), ("R1", "a", ["c"]), ("R2", "d", ["a"])],
                      priors={"b": 0.5, "c": 0.5}, alarms=["d"])
    model = to_model(dg, compress=True)
    tv, cv = model.meta["tuple_var"], model.meta["clause_var"]
    for t, name in enumerate(dg.tuples):
        if tv[t] >= 0:
            assert model.var_names[tv[t]] == name
    # d has one clause: merged into d's variable; a has two: OR over two clause variables.
    assert cv[2] == tv[dg.tuple_index["d"]]
    assert model.var_names[cv[0]] == "R0#0" and model.var_names[cv[1]] == "R1#1"


def test_underivable_alarm_is_an_error_and_other_underivable_tuples_a_warning(tmp_path):
    dg = from_clauses([("R0", "a", ["b"]), ("R0", "b", ["a"]), ("R1", "c", ["d"])], alarms=["c"])
    model = formats.model_from_derivation(dg)
    assert model.meta["report"]["underivable_tuples"] == 2
    assert "neither inputs nor derivable" in model.meta["warnings"][0]
    dg.alarms = np.array([dg.tuple_index["a"]], np.int32)
    with pytest.raises(InputError, match="not derivable|neither"):
        to_model(dg)


def test_merge_duplicates_counts_and_keeps_first():
    dg = from_clauses([("R0", "a", ["b", "c"]), ("R0", "a", ["c", "b"]), ("R1", "a", ["b", "c"]),
                       ("R0", "a", ["b", "b", "c"])])
    dd = merge_duplicates(dg)
    assert dd.duplicate_clauses == 2 and dd.duplicate_body_tuples == 1
    assert dd.kept.tolist() == [0, 2] and dd.first_duplicate == 1
    assert dd.graph.num_clauses == 2


def _presto(alarms=True, extra_line: str | None = None, tmp_path=None):
    if extra_line is None:
        dg, where = formats.read_bingo(PRESTO)
    else:
        d = tmp_path / "presto"
        d.mkdir()
        text = (PRESTO / "named_cons_all.txt").read_text() + extra_line + "\n"
        (d / "named_cons_all.txt").write_text(text)
        dg, where = formats.read_bingo(d)
    if alarms:
        dg.alarms = np.array([i for i, t in enumerate(dg.tuples) if t.startswith("CatchVH")], np.int32)
    return dg


@pytest.mark.slow
def test_presto_parses_and_converts():
    dg = _presto()
    assert (dg.num_tuples, dg.num_clauses, len(dg.rules)) == (63, 40, 9)
    assert "LinkMatch(2,3,19,6,17,1)" in dg.tuple_index
    head = dg.tuples[dg.clause_head[2]]
    assert head == "CatchVH(3,4)"
    assert [dg.tuples[b] for b in dg.clause_body(2)] == ["CallAt(2,14,4)", "ThrowMH(4,4)"]
    stages = least_fixpoint(dg)
    # The shipped graph turns out acyclic: nothing is dropped, everything derivable.
    assert stages.derivable.all() and stages.num_dropped_clauses == 0
    full, small = to_model(dg), to_model(dg, compress=True)
    assert full.num_vars == 63 + 40 and small.num_vars < full.num_vars
    a = marginals(full).marginals
    b = marginals(small).marginals
    for name in ("CatchVH(3,4)", "CatchVH(3,5)"):
        assert b[small.index[name]] == pytest.approx(a[full.index[name]], abs=1e-9)


def test_acyclic_graph_is_left_alone_unless_bingo_mode():
    # e has two derivations; the one through d comes later in the fixpoint than the one from b.
    dg = from_clauses([("R0", "d", ["b"]), ("R1", "e", ["b"]), ("R2", "e", ["d"])], alarms=["e"])
    assert least_fixpoint(dg).clause_kept.all()
    assert least_fixpoint(dg, "bingo").clause_kept.tolist() == [True, True, False]
    model = to_model(dg)
    assert model.var_names == ("b", "d", "e", "R0#0", "R1#1", "R2#2")


def test_prior_on_a_derived_tuple_adds_an_input_variable():
    dg = from_clauses([("R0", "a", ["b"])], rules={"R0": 0.5}, priors={"a": 0.2, "b": 0.5}, alarms=["a"])
    for compress in (False, True):
        model = to_model(dg, compress=compress)
        assert "a@input" in model.var_names
        got = _exact_by_name(model)
        assert got["a"] == pytest.approx(1 - (1 - 0.2) * (1 - 0.25))


def test_presto_with_an_added_cycle(tmp_path):
    # CatchVH(3,4) needs ThrowMH(4,4); deriving ThrowMH(4,4) back from CatchVH(3,4) closes a cycle.
    dg = _presto(extra_line="RX: NOT CatchVH(3,4), ThrowMH(4,4)", tmp_path=tmp_path)
    stages = least_fixpoint(dg)
    assert not is_acyclic(dg, np.ones(dg.num_clauses, bool))
    assert is_acyclic(dg, stages.clause_kept)
    assert stages.num_dropped_clauses == 1 and not stages.clause_kept[-1]
    assert stages.derivable.all()
