"""Random factor graphs for tests (plain numpy RNG, usable from hypothesis seeds)."""

from __future__ import annotations

import numpy as np

from fastlbp.core.graph import AND, OR, Factor, from_factors, label_codes


def _probs(rng: np.random.Generator, hard: float) -> tuple[float, float]:
    def one():
        if rng.random() < hard:
            return float(rng.integers(0, 2))
        return float(rng.uniform(0.02, 0.98))
    return one(), one()


def random_factors(rng: np.random.Generator, num_vars: int, num_factors: int, max_body: int = 4,
                   hard: float = 0.2) -> list[Factor]:
    """Random loopy AND/OR factors; every variable ends up in some factor."""
    factors = []
    for _ in range(num_factors):
        head = int(rng.integers(num_vars))
        others = [v for v in range(num_vars) if v != head]
        k = int(rng.integers(0, min(max_body, len(others)) + 1))
        body = tuple(int(v) for v in rng.choice(others, size=k, replace=False)) if k else ()
        p1, p2 = _probs(rng, hard)
        kind = AND if rng.random() < 0.5 else OR
        if not body:
            p2 = p1
        factors.append(Factor(kind, head, body, p1, p2))
    covered = {f.head for f in factors} | {v for f in factors for v in f.body}
    for v in range(num_vars):
        if v not in covered:
            p = float(rng.uniform(0.05, 0.95))
            factors.append(Factor(AND, v, (), p, p))
    return factors


def random_polytree(rng: np.random.Generator, num_vars: int, max_parents: int = 3,
                    hard: float = 0.1) -> list[Factor]:
    """A Bayesian network whose skeleton is a tree: one factor per variable (head = it)."""
    parents: list[list[int]] = [[] for _ in range(num_vars)]
    order = rng.permutation(num_vars)
    for i in range(1, num_vars):
        child, other = int(order[i]), int(order[rng.integers(i)])
        # Orient the tree edge either way; keep fan-in bounded.
        if rng.random() < 0.5 and len(parents[child]) < max_parents:
            parents[child].append(other)
        else:
            parents[other].append(child)
    factors = []
    for v in range(num_vars):
        p1, p2 = _probs(rng, hard)
        if not parents[v]:
            factors.append(Factor(AND, v, (), p1, p1))
        else:
            factors.append(Factor(AND if rng.random() < 0.5 else OR, v, tuple(parents[v]), p1, p2))
    return factors


def random_labels(rng: np.random.Generator, num_vars: int, most: int = 2) -> dict[int, bool]:
    k = int(rng.integers(0, min(most, num_vars) + 1))
    return {int(v): bool(rng.integers(2)) for v in rng.choice(num_vars, size=k, replace=False)}


def sweep_by_rank(lbp, msgs, ev, rank) -> None:
    """One sweep of Definition 4.1 literally, in place: e reads the new value of e' iff
    rank(e') < rank(e). Stage by stage (equal ranks), each stage computed from the state
    at its start; a total order is the special case of one edge per stage.

    Args:
        lbp: a `fastlbp.reference.SequentialLBP`; msgs: (E, 2) its messages; ev: its evidence.
    """
    for r in np.unique(rank):
        stage = np.flatnonzero(rank == r)
        new = [lbp.factor_to_var(msgs, ev, int(e)) for e in stage]
        for e, m in zip(stage, new, strict=True):
            msgs[e] = m


def check_engine_against_reference(factors, num_vars: int, labels, result, step, iters: int,
                                   atol: float = 1e-10, **ref_options) -> None:
    """`result` (an engine's RunResult after `iters` PARALL iterations from uniform
    messages) against the sequential reference, contradictions included.

    The reference works with probabilities; on a chaotic run it can underflow
    to 0/0 where the log-space engine stays exact. Then the labels must be
    possible (exact enumeration) unless the factors alone are impossible, and
    every iteration the reference completes must agree with one engine step.
    """
    import reference

    try:
        reference.sequential_lbp(factors, num_vars, labels, None, tol=0.0, max_iters=iters, **ref_options)
    except reference.Contradiction:
        if bool(result.conflict):
            return
        try:
            reference.exact_marginals(factors, num_vars, labels)
        except reference.Contradiction:
            try:
                reference.exact_marginals(factors, num_vars, {})
            except reference.Contradiction:
                # The factors alone have probability 0 (hard 0/1 parameters that clash
                # around a loop): no label to blame, and LBP, being local, need not see
                # it; its messages must still follow the reference while it is defined.
                pass
            else:
                raise AssertionError("the labels are impossible but the engine reported no "
                                     "conflict") from None
        done = iters - 1
        while done > 0:
            try:
                reference.sequential_lbp(factors, num_vars, labels, None, tol=0.0, max_iters=done,
                                         **ref_options)
                break
            except reference.Contradiction:
                done -= 1
        _assert_steps(factors, num_vars, labels, step, done, atol, ref_options)
        return
    assert not bool(result.conflict)
    assert_matches_reference(factors, num_vars, labels, result.marginals, result.messages, step, iters, atol,
                             **ref_options)


def assert_matches_reference(factors, num_vars: int, labels, marginals, messages, step, iters: int,
                             atol: float = 1e-10, **ref_options) -> None:
    """An engine's PARALL run of `iters` iterations equals the sequential reference's.

    Loopy BP on some small graphs is chaotic (marginals swing between 0 and 1
    from one iteration to the next), and there rounding-level differences
    between two correct implementations grow every iteration without bound.
    So where the end result differs, every single iteration must still agree:
    `step(log_odds) -> log_odds` applied to the reference's messages after k
    iterations must give its messages after k + 1, within `atol`, for every k.

    Args:
        marginals: (V,) the engine's marginals after `iters` iterations.
        messages: (E,) the engine's factor-to-variable log-odds after them.
        step: one engine iteration on (E,) log-odds messages.
        ref_options: passed to the reference (e.g. damping=).
    """
    import reference

    ref = reference.sequential_lbp(factors, num_vars, labels, None, tol=0.0, max_iters=iters,
                                   **ref_options)
    with np.errstate(over="ignore"):  # exp(+large) = inf gives P = 0, as it should
        m1 = 1 / (1 + np.exp(-np.asarray(messages, np.float64)))
    if (np.max(np.abs(np.asarray(marginals) - ref.marginals), initial=0) <= atol
            and np.max(np.abs(m1 - ref.messages[:, 1]), initial=0) <= atol):
        return
    _assert_steps(factors, num_vars, labels, step, iters, atol, ref_options)


def _assert_steps(factors, num_vars, labels, step, iters, atol, ref_options) -> None:
    """One engine step from the reference's messages after k iterations gives its messages after k + 1."""
    import reference

    before = reference.sequential_lbp(factors, num_vars, labels, None, tol=0.0, max_iters=0,
                                      **ref_options).messages
    for k in range(iters):
        after = reference.sequential_lbp(factors, num_vars, labels, None, tol=0.0, max_iters=k + 1,
                                         **ref_options).messages
        with np.errstate(divide="ignore"):
            log_odds = np.log(before[:, 1]) - np.log(before[:, 0])
        with np.errstate(over="ignore"):
            got = 1 / (1 + np.exp(-np.asarray(step(log_odds), np.float64)))
        np.testing.assert_allclose(got, after[:, 1], rtol=0, atol=atol, err_msg=f"iteration {k + 1}")
        before = after


def huge_fan_in(kind: int, n: int = 10_000) -> tuple[list[Factor], float]:
    """A tree: one AND/OR factor over n prior-only body variables (var 0 is its head).

    Priors sit so close to 1 (AND) or 0 (OR) that the body product is neither
    0 nor 1 only if no term underflows. Returns the factors and the exact P(x0).
    """
    rng = np.random.default_rng(0)
    priors = rng.uniform(0.9995, 1.0, n) if kind == AND else rng.uniform(0.0, 0.0005, n)
    factors = [Factor(AND, i + 1, (), float(p), float(p)) for i, p in enumerate(priors)]
    factors.append(Factor(kind, 0, tuple(range(1, n + 1)), 0.999, 0.001))
    if kind == AND:  # P(all body true) = prod(priors)
        expect = 0.001 + (0.999 - 0.001) * np.exp(np.sum(np.log(priors)))
    else:  # P(none true) = prod(1 - priors)
        none = np.exp(np.sum(np.log1p(-priors)))
        expect = 0.999 * (1 - none) + 0.001 * none
    return factors, float(expect)


def evidence_from_labels(num_vars: int, labels: dict[int, bool] | None = None) -> np.ndarray:
    """Evidence array from hard labels.

    Evidence is a per-variable log-likelihood ratio: 0 = no evidence, +inf =
    observed true, -inf = observed false (finite values are soft evidence).

    Returns:
        (V,) float64.
    """
    codes = label_codes(num_vars, labels)
    return np.where(codes > 0, np.inf, np.where(codes < 0, -np.inf, 0.0))


def far_evidence():
    """An input s (prior 0.5) and two chains of 8 and 9 clauses (p = 1e-3) from it to `end`: `end`
    labelled true leaves the prior's worlds no weight; the tilted proposal finds it
    (`test_engines_sampling.test_evidence_far_below_an_input_is_looked_ahead_at`)."""
    factors, v = [Factor(AND, 0, (), 0.5, 0.5)], 1
    tails = []
    for length in (8, 9):
        prev = 0
        for _ in range(length):
            factors.append(Factor(AND, v, (prev,), 1e-3, 0.0))
            prev, v = v, v + 1
        tails.append(prev)
    factors.append(Factor(OR, v, tuple(tails), 1.0, 0.0))
    return from_factors(factors, v + 1), v
