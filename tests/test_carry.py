"""Labels carried to the next version (`fastlbp.triage.carry`) and synthetic version pairs
(`datalog.versions`)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from datalog.bayesnet import to_model
from datalog.derivation import from_clauses
from datalog.synthetic import layered
from datalog.versions import next_version, world
from fastlbp.core.errors import InputError
from fastlbp.triage.carry import carry_labels, changed_tuples, read_match


def signature(dg, name, rename=None):
    """Reference: every clause (rule, head, body) reachable backwards from `name`, names renamed."""
    rename = rename or {}
    index = dg.tuple_index
    heads = np.asarray(dg.clause_head)
    out, seen, stack = set(), {name}, [name]
    while stack:
        h = stack.pop()
        for g in np.flatnonzero(heads == index[h]).tolist():
            body = [dg.tuples[b] for b in dg.clause_body(g).tolist()]
            rule = dg.rules[int(dg.clause_rule[g])].name
            out.add((rule, rename.get(h, h), tuple(rename.get(b, b) for b in body)))
            for b in body:
                if b not in seen:
                    seen.add(b)
                    stack.append(b)
    return out


@hsettings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0.0, 0.02, 0.1]))
def test_changed_tuples_match_the_subgraph_comparison(seed, fraction):
    old = layered(num_inputs=12, layers=3, width=8, seed=seed % 1000)
    new = next_version(old, seed=seed, remove=fraction, add=fraction, rewire=fraction)
    changed = changed_tuples(old, new)
    for t in new.tuples:
        assert (t in changed) == (signature(old, t) != signature(new, t)), t
    if fraction == 0.0:
        assert changed == set()


def test_unchanged_tuples_keep_their_truth():
    flipped = 0
    for seed in range(4, 10):
        old = layered(num_inputs=30, layers=3, width=30, seed=seed)
        new = next_version(old, seed=seed + 1)
        a, b = world(old, 7), world(new, 7)
        changed = changed_tuples(old, new)
        assert changed and len(changed) < len(new.tuples)
        assert all(a[t] == b[t] for t in new.tuples if t not in changed)
        flipped += sum(a[t] != b[t] for t in changed)
    assert flipped  # a change can make a bug appear or go


def pair():
    old = from_clauses([("R", "a(1)", ["in(1)", "in(2)"]), ("R", "b(1)", ["in(3)"]), ("R", "c(1)", ["in(4)"]),
                        ("S", "d(1)", ["b(1)"])],
                       rules={"R": 0.9, "S": 0.8}, priors={f"in({i})": 0.7 for i in range(1, 6)},
                       alarms=["a(1)", "b(1)", "c(1)", "d(1)"])
    # b(1) gains a derivation (so d(1), derived from it, changes too); c(1) is renamed c(2); in(5) is new.
    new = from_clauses([("R", "a(1)", ["in(1)", "in(2)"]), ("R", "b(1)", ["in(3)"]), ("R", "b(1)", ["in(5)"]),
                        ("R", "c(2)", ["in(4)"]), ("S", "d(1)", ["b(1)"])],
                       rules={"R": 0.5, "S": 0.8}, priors={f"in({i})": 0.7 for i in range(1, 6)},
                       alarms=["a(1)", "b(1)", "c(2)", "d(1)"])
    return to_model(old), to_model(new)


def test_carry_labels():
    old, new = pair()
    labels = {"a(1)": False, "b(1)": True, "c(1)": False, "d(1)": True, "gone(1)": True}
    model, c = carry_labels(old, {k: v for k, v in labels.items() if k != "gone(1)"}, new, confidence=0.8)
    names = model.var_names
    # A rule probability changed (R 0.9 -> 0.5): not a change of derivations.
    assert {names[v]: t for v, t in c.labels.items()} == {"a(1)": False}
    assert {names[v]: p for v, p in c.soft.items()} == {"b(1)": 0.8, "d(1)": 0.8}
    assert c.dropped == [("c(1)", "not in the new graph")]
    assert c.summary() == "labels from the old graph: 1 carried, 2 softened (P = 0.8), 1 dropped"
    _, m = carry_labels(old, {"c(1)": False}, new, match=read_match_text("c(1)\tc(2)\n"))
    assert {new.var_names[v]: t for v, t in m.labels.items()} == {"c(2)": False}


def read_match_text(text, tmp=[]):  # noqa: B006 - one temporary directory per test session
    import tempfile
    from pathlib import Path

    if not tmp:
        tmp.append(Path(tempfile.mkdtemp()))
    path = tmp[0] / "match.txt"
    path.write_text(text)
    return read_match(path)


def test_read_match():
    assert read_match_text("# renames\nrace(1, 2)\trace(1, 3)\nx(1) -> x(2)\ny(1) y(2)\n\n") == {
        "race(1, 2)": "race(1, 3)", "x(1)": "x(2)", "y(1)": "y(2)"}
    for bad, message in (("a b c\n", "expected"), ("a\tb\na\tc\n", "on line 1")):
        with pytest.raises(InputError, match=message):
            read_match_text(bad)


def test_confidence_must_mean_something():
    old, new = pair()
    with pytest.raises(ValueError, match=r"\(0.5, 1\)"):
        carry_labels(old, {}, new, confidence=0.5)


def test_labels_of_two_old_tuples_on_one_new_tuple_are_merged_or_refused():
    """Issue 41, item 4: two old tuples matched onto one new tuple kept only one label (a true one lost)
    while the summary said "2 softened"."""
    old, new = pair()
    both = read_match_text("c(1)\tb(1)\nd(1)\tb(1)\n")
    _, m = carry_labels(old, {"c(1)": True, "d(1)": True}, new, match=both)
    assert {new.var_names[v]: p for v, p in m.soft.items()} == {"b(1)": 0.9}
    assert m.softened == ["c(1)", "d(1)"] and m.merged == [("b(1)", ["c(1)", "d(1)"])]
    assert m.summary() == ("labels from the old graph: 0 carried, 2 softened (P = 0.9), 0 dropped "
                           "(2 equal labels merged onto 1 tuple(s) of the new graph)")
    with pytest.raises(InputError, match=r"'c\(1\)' \(false\), 'd\(1\)' \(true\) all become the new "
                                         r"graph's tuple 'b\(1\)', and they contradict") as err:
        carry_labels(old, {"c(1)": False, "d(1)": True}, new, match=both, source="m.txt")
    assert str(err.value).startswith("m.txt: ")
    # A label on the new tuple's own old name counts as one of them.
    with pytest.raises(InputError, match="contradict"):
        carry_labels(old, {"b(1)": False, "c(1)": True}, new, match=read_match_text("c(1)\tb(1)\n"))
    # Two false labels: one soft false (mapped onto a(1), c(1)'s clause makes a(1)'s derivations differ).
    _, m = carry_labels(old, {"a(1)": False, "c(1)": False}, new, match=read_match_text("c(1)\ta(1)\n"))
    assert {new.var_names[v]: p for v, p in m.soft.items()} == {"a(1)": pytest.approx(0.1)} and not m.labels
    assert m.softened == ["a(1)", "c(1)"] and m.merged == [("a(1)", ["a(1)", "c(1)"])]
