"""A small, Bingo-like derivation graph and a ground truth drawn from it, for examples and tests.

`layered` builds a layered derivation DAG (input facts, then layers of derived
tuples, alarms in the last layer); `sample_truth` draws which tuples hold by
forward sampling the Bayesian network, so the true alarms it returns never
contradict the model. Vectorised: the ftp benchmark size (~0.7 M factor-graph
edges) builds in about a second. `datalog.synthetic` is the full generator;
this one exists so that the API example, the notebook and the benchmark run
on a bare checkout.
"""

from __future__ import annotations

import numpy as np

from datalog.derivation import DerivationGraph, Rule


def layered(num_inputs: int = 40, layers: int = 3, width: int = 40, *, max_clauses: int = 3,
            max_body: int = 3, num_rules: int = 6, alarm_relation: str = "race",
            num_alarms: int | None = None, seed: int = 0) -> DerivationGraph:
    """A layered derivation graph.

    Layer 0 holds `num_inputs` input tuples `in(i)` with priors in [0.6, 1];
    each of the `layers` following layers holds `width` tuples (the last ones
    are the alarms `race(i)`), each derived by 1..max_clauses clauses whose
    bodies (1..max_body tuples) come from earlier layers, mostly the previous
    one. Rules have probabilities in [0.7, 0.999]. `num_alarms` (default
    `width`) sizes the last layer.
    """
    rng = np.random.default_rng(seed)
    rules = [Rule(f"R{r}", float(np.round(rng.uniform(0.7, 0.999), 3)), f"rule {r}")
             for r in range(num_rules)]
    tuples = [f"in({i})" for i in range(num_inputs)]
    layer_start = [0]
    heads, rule_of, lens, bodies = [], [], [], []
    for layer in range(1, layers + 1):
        start = len(tuples)
        last = layer == layers
        rel = alarm_relation if last else f"p{layer}"
        n = (num_alarms or width) if last else width
        tuples += [f"{rel}({i})" for i in range(n)]
        prev_lo, prev_hi = layer_start[-1], start
        n_clauses = rng.integers(1, max_clauses + 1, size=n)
        head = np.repeat(start + np.arange(n), n_clauses)
        c = head.shape[0]
        blen = rng.integers(1, max_body + 1, size=c)
        total = int(blen.sum())
        # Mostly the previous layer, sometimes any earlier tuple: loops in the
        # undirected skeleton, as in real derivation graphs.
        from_prev = rng.random(total) < 0.8
        body = np.where(from_prev, rng.integers(prev_lo, prev_hi, size=total),
                        rng.integers(0, prev_hi, size=total))
        # A clause lists a tuple at most once: drop repeats inside each body.
        owner = np.repeat(np.arange(c), blen)
        _, first = np.unique(owner * (len(tuples) + 1) + body, return_index=True)
        keep = np.zeros(total, dtype=bool)
        keep[first] = True
        body, owner = body[keep], owner[keep]
        heads.append(head)
        rule_of.append(rng.integers(0, num_rules, size=c))
        lens.append(np.bincount(owner, minlength=c))
        bodies.append(body)
        layer_start.append(start)
    lens_all = np.concatenate(lens)
    offsets = np.zeros(lens_all.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens_all, out=offsets[1:])
    priors = {i: float(p) for i, p in enumerate(np.round(rng.uniform(0.6, 1.0, num_inputs), 3))}
    first_alarm = len(tuples) - (num_alarms or width)
    return DerivationGraph(
        tuples=tuples, rules=rules,
        clause_rule=np.concatenate(rule_of).astype(np.int32),
        clause_head=np.concatenate(heads).astype(np.int32),
        body_offsets=offsets,
        body=np.concatenate(bodies).astype(np.int32),
        priors=priors,
        alarms=np.arange(first_alarm, len(tuples), dtype=np.int32),
        source=f"demo.layered(seed={seed})",
    )


def sample_truth(dg: DerivationGraph, seed: int = 0) -> np.ndarray:
    """Which tuples hold in one forward sample of the Bayesian network of `dg`.

    Requires clauses listed in an order where every body tuple's clauses come
    before (as `layered` makes them).

    Returns:
        (T,) bool.
    """
    rng = np.random.default_rng(seed)
    num_t = dg.num_tuples
    truth = np.zeros(num_t, dtype=bool)
    derived = np.zeros(num_t, dtype=bool)
    derived[dg.clause_head] = True
    prior = np.ones(num_t)
    for t, p in dg.priors.items():
        prior[t] = p
    inputs = ~derived
    truth[inputs] = rng.random(int(inputs.sum())) < prior[inputs]
    rule_p = np.array([r.probability for r in dg.rules])
    fires = rng.random(dg.num_clauses) < rule_p[dg.clause_rule]
    # Clauses of one head are contiguous and heads increase, so a pass in
    # clause order sees every body tuple decided.
    heads = np.asarray(dg.clause_head)
    for c in range(dg.num_clauses):
        if fires[c] and truth[dg.clause_body(c)].all():
            truth[heads[c]] = True
    return truth
