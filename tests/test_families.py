"""datalog.families: independent families of graphs with known true rule probabilities."""

import re
from pathlib import Path

import numpy as np
import pytest

from datalog import families, souffle
from datalog.cycles import least_fixpoint
from datalog.souffle_rules import canonical_text
from fastlbp.core.constraints import conflicting_labels
from fastlbp.inference.learn import training_labels

ROOT = Path(__file__).resolve().parents[1]


def test_taint_family_grounds_the_shipped_taint_rules():
    shipped = souffle.parse_file(ROOT / "data" / "taint" / "taint.dl").rules
    ours = souffle.parse(families.TAINT).rules
    assert [canonical_text(r) for r in ours] == [canonical_text(r) for r in shipped]
    stated = re.findall(r"^([\w-]+): ", (ROOT / "data" / "taint" / "rule_prob.txt").read_text(), re.M)
    assert families.rule_names("taint") == stated


@pytest.mark.parametrize("name", families.FAMILIES)
def test_small_family_truth_is_a_world_of_the_model(name):
    fam = families.make_family(name, size="small", graphs=2, held_out=1, seed=3)
    again = families.make_family(name, size="small", graphs=2, held_out=1, seed=3)
    assert fam.true_p == again.true_p and fam.true_p == families.true_probabilities(name, 3)
    assert fam.wrong and all(families.WRONG_RANGE[0] <= fam.true_p[n] <= families.WRONG_RANGE[1]
                             for n in fam.wrong)
    assert all(fam.true_p[n] == families.STATED for n in fam.rules if n not in fam.wrong)
    for g, h in zip(fam.train + fam.held_out, again.train + again.held_out, strict=True):
        assert g.model.num_vars == h.model.num_vars and g.truth == h.truth  # deterministic by seed
        dg = g.model.meta["derivation"]
        assert {r.probability for r in dg.rules} == {families.STATED}  # the files state 0.999
        labels = training_labels(g.model)
        assert labels and conflicting_labels(g.model.graph, labels) is None  # the truth is possible
        # A true tuple is an input or the head of a kept clause whose body is true.
        st = least_fixpoint(dg)
        world = g.world
        heads = np.asarray(dg.clause_head)
        fired = np.array([st.clause_kept[c] and world[dg.clause_body(c)].all()
                          for c in range(dg.num_clauses)], bool)
        derived = np.zeros(dg.num_tuples, bool)
        derived[heads[fired]] = True
        assert np.all(world <= (derived | st.is_input))
        assert not np.any(world & ~st.derivable)
    # Different seeds give different graphs (random facts).
    other = families.make_family(name, size="small", graphs=1, held_out=0, seed=4)
    assert (other.train[0].model.num_vars, other.train[0].truth) != (fam.train[0].model.num_vars,
                                                                     fam.train[0].truth)


def test_shapes_name_every_rule_and_a_negated_rule_has_no_clause():
    fam = families.make_family("taint", size="small", graphs=1, held_out=0)
    assert set(fam.shapes) == set(fam.rules)
    negated = [n for n, s in fam.shapes.items() if s == "negated"]
    assert negated == ["cleans-67f692"]
    dg = fam.train[0].model.meta["derivation"]
    clause_var = np.asarray(fam.train[0].model.meta["clause_var"])
    of_rule = np.asarray(dg.clause_rule) == [r.name for r in dg.rules].index(negated[0])
    assert not np.any(clause_var[of_rule] >= 0)  # no clause of it reaches an alarm


def test_labels_all_records_every_derivable_tuple():
    fam = families.make_family("pointsto", size="small", graphs=1, held_out=0, labels="all")
    g = fam.train[0]
    assert len(training_labels(g.model)) > len(g.model.alarms)


def test_bad_family_arguments():
    with pytest.raises(ValueError, match="unknown family"):
        families.make_family("nope")
    with pytest.raises(ValueError, match="size"):
        families.make_family("taint", size="huge")
