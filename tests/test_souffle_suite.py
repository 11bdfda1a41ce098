"""Soufflé's own test suite (../shared/data/souffle-suite) grounded as written: no case may be grounded
and different from Soufflé's expected output, none may crash, and each refusal names FILE:LINE."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import souffle_conformance as conformance

SUITE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "souffle-suite"
# Cases grounded and equal (at 1M rule instances) when this test was last raised; fewer is a regression.
# (255 at the benchmark's 5M: independent_body3, 2M instances, and eqrel_inc, 1.04M, stop at 1M.)
MIN_EQUAL = 253

needs_suite = pytest.mark.skipif(not (SUITE / "cases.json").exists(),
                                 reason=f"Soufflé's test suite is not at {SUITE} (see its README.md)")


@needs_suite
@pytest.mark.slow
def test_souffle_suite_grounded_cases_equal_soufflés_output():
    # 1M rule instances: the four cases past it are refused in seconds, not grounded for a minute each.
    results = conformance.run_suite(SUITE, jobs=2, timeout=300, max_rule_instances=1_000_000)
    bad = [f"{r.status} {r.id}: {r.detail[-1500:]}" for r in results
           if r.status in ("different", "crashed", "timeout")]
    assert not bad, "\n".join(bad)
    # A refusal is an error a user can act on: `FILE:LINE[:COL]: message` naming the construct, or (the
    # grounding limit, a resource and not a construct) `FILE: grounding stopped ...` naming the option.
    unnamed = [f"{r.id}: {r.detail}" for r in results
               if r.status == "refused" and not re.match(r"[^:\n]+:\d+(:\d+)?: ", r.detail)
               and "derives nothing" not in r.detail
               and not ("grounding stopped after" in r.detail and "--max-rule-instances" in r.detail)]
    assert not unnamed, "\n".join(unnamed)
    assert conformance.summarize(results)["equal"] >= MIN_EQUAL


# One case of each construct issue 40 brought in (each grounds in about a second in process).
CONSTRUCT_CASES = ["example/dnf", "evaluation/empty_relations", "evaluation/existential",
                   "example/inline_nats",
                   "evaluation/float_operations", "evaluation/unsigned_operations", "evaluation/rangeop",
                   "evaluation/symbol_operations", "evaluation/aggregates5", "evaluation/adt-enum",
                   "example/longest_path", "evaluation/aggregates_nested"]


@needs_suite
@pytest.mark.parametrize("case_id", CONSTRUCT_CASES)
def test_construct_cases_equal(case_id):
    case = next(c for c in conformance.load_cases(SUITE) if c["id"] == case_id)
    r = conformance.check_case(SUITE, case, max_rule_instances=1_000_000)
    assert r.status == "equal", r.detail


@needs_suite
def test_one_case_in_process_equal():
    case = next(c for c in conformance.load_cases(SUITE) if c["id"] == "evaluation/access1")
    r = conformance.check_case(SUITE, case)
    assert r.status in ("equal", "refused"), r.detail


def test_construct_names():
    assert conformance.construct_of("x.dl:3:4: aggregates are not supported") == "aggregate"
    assert conformance.construct_of("x.dl:3:4: something new") == "other"
