"""Synthetic Bingo-like derivation graphs and their ground truth, deterministic by seed.

Two generators and one forward sampler:

    generate      graphs of a requested size (a Table 1 preset, BN or factor-graph
                  edges) with the heavy tails of real analyses: benchmarks, size tests
    layered       a small graph by layer widths (inputs `in(i)`, alarms `race(i)`):
                  examples, the notebook, CLI and triage tests
    sample_truth  which tuples hold in one ancestral sample of the Bayesian network
                  (`sample_world`), so true alarms never contradict the model

`generate`'s graphs imitate the datarace analyses of the paper's Table 1 (and the
reference graphs in ../shared/data/reference): layered derivation DAGs whose
input tuples (layer 0) carry priors 1.0 or 0.999, whose clauses are noisy ANDs
of 1-4 body tuples with rule probability 0.999, and whose derived tuples are
ORs over the clauses deriving them. Two heavy tails matter for LBP speed and
are reproduced: the number of derivations per derived tuple (most 1-3, a few
up to thousands) and the reuse of a tuple in clause bodies (Zipf popularity, so
a few tuples feed thousands of clauses). The alarms are the tuples of the
alarm relation `race`, which fills the last layer(s).

Sizes are counted as in the paper's Table 1, on the Bayesian network:
vertices = tuples + clauses, edges = sum over clauses of (body size + 1).
The factor graph that `datalog.bayesnet.to_model` builds has one factor per
vertex, so its edge count is BN edges + vertices. Generated graphs hit the
requested sizes exactly (up to rounding), whichever of them is given.

Tuple ids are in layer order (inputs first, the alarms last), which is a
topological order; clauses are grouped by head in that order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from datalog.derivation import DEFAULT_INPUT_PRIOR, DEFAULT_RULE_PROBABILITY, DerivationGraph, Rule

#: Table 1 of the paper: program -> (BN vertices, BN edges).
TABLE1: dict[str, tuple[int, int]] = {
    "weblech": (696, 1_655),
    "hedc": (5_347, 14_231),
    "luindex": (11_857, 29_237),
    "jspider": (25_162, 74_201),
    "avrora": (36_091, 100_789),
    "xalan": (51_820, 146_334),
    "sunflow": (156_695, 431_497),
    "ftp": (211_175, 476_915),
}

#: Presets: the Table 1 sizes and `<name>x10`, ten times as large.
PRESETS: dict[str, tuple[int, int]] = {
    **TABLE1,
    **{f"{name}x10": (10 * v, 10 * e) for name, (v, e) in TABLE1.items()},
}

#: BN edges per BN vertex when only one size is given (about Table 1's median).
DEFAULT_EDGE_RATIO = 2.75

#: P(body size = 1, 2, 3, 4), as in the reference avrora graph.
DEFAULT_BODY_SIZE_WEIGHTS = (0.07, 0.14, 0.28, 0.51)

INPUT_RELATIONS = ("alloc", "assign", "load", "store", "invoke", "thread", "lock", "access")
DERIVED_RELATIONS = ("pt", "fpt", "reach", "esc", "mhp", "unlocked", "aliased")
ALARM_RELATION = "race"
MAX_BODY = 4


def preset_sizes(name: str) -> tuple[int, int]:
    """(BN vertices, BN edges) of a preset; raises ValueError naming the presets if unknown."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


def bn_sizes(dg: DerivationGraph) -> tuple[int, int]:
    """(BN vertices, BN edges) of a derivation graph, counted as in Table 1."""
    num_body = int(dg.body_offsets[-1]) if dg.num_clauses else 0
    return dg.num_tuples + dg.num_clauses, num_body + dg.num_clauses


def default_layers(vertices: int) -> int:
    """Number of derived layers for a graph of this many BN vertices.

    Fitted to the reference graphs (weblech ~680 vertices: 18 layers, avrora
    ~36K: 30); grows with log(size) as the analyses' derivation depth does.
    """
    return max(2, round(7.0 * math.log10(max(vertices, 10)) - 1.6))


def _target_sizes(vertices, edges, factor_edges, preset, edge_ratio) -> tuple[int, int]:
    given = sum(x is not None for x in (preset, factor_edges)) + (vertices is not None or edges is not None)
    if given != 1:
        raise ValueError("give exactly one of: preset, factor_edges, or vertices and/or edges")
    if preset is not None:
        return preset_sizes(preset)
    if factor_edges is not None:
        vertices = round(factor_edges / (1.0 + edge_ratio))
        return vertices, int(factor_edges) - vertices
    if vertices is None:
        vertices = round(edges / edge_ratio)
    if edges is None:
        edges = round(vertices * edge_ratio)
    return int(vertices), int(edges)


def _split_counts(vertices, edges, body_size_weights, input_fraction):
    """(inputs, derived tuples, clauses, body entries) for the target sizes."""
    w = np.asarray(body_size_weights, dtype=np.float64)
    mean_body = float((w / w.sum()) @ np.arange(1, MAX_BODY + 1))
    clauses = round(edges / (mean_body + 1.0))
    # Too few edges per vertex for that mean body: keep >= 1.2 derivations per
    # derived tuple on average and shrink the bodies instead.
    min_ratio = 1.2 * (1.0 - input_fraction)
    if clauses < min_ratio * (vertices - clauses):
        clauses = round(min_ratio * vertices / (1.0 + min_ratio))
    tuples = vertices - clauses
    body = edges - clauses
    inputs = max(8, round(input_fraction * tuples))
    derived = tuples - inputs
    if derived < 2 or clauses < derived or not clauses <= body <= MAX_BODY * clauses:
        raise ValueError(
            f"cannot build a derivation graph with {vertices} BN vertices and {edges} BN edges "
            f"(edges/vertices must be about 1 to 4.5, vertices at least ~50)")
    return inputs, derived, clauses, body


def _adjust_total(rng, sizes, total, upper):
    """Nudges `sizes` (>= 1, <= upper) by +-1 at random positions until they sum to `total`."""
    for _ in range(64):
        diff = total - int(sizes.sum())
        if diff == 0:
            return sizes
        room = np.flatnonzero(sizes < upper) if diff > 0 else np.flatnonzero(sizes > 1)
        if room.size == 0:
            break
        pick = rng.choice(room, size=min(abs(diff), room.size), replace=False)
        sizes[pick] += 1 if diff > 0 else -1
    raise ValueError(f"cannot make sizes sum to {total}")


def _derivation_counts(rng, derived, clauses, tail, max_derivations):
    """(derived,) int64 derivations per derived tuple: >= 1, heavy-tailed, summing to `clauses`.

    Each tuple gets 1 + a multinomial share of the remaining clauses with
    Pareto(tail) weights: most shares are 0-2, the largest grow like a power of
    the graph size (hundreds to thousands).
    """
    weights = rng.pareto(tail, size=derived) + 1.0
    counts = 1 + rng.multinomial(clauses - derived, weights / weights.sum())
    cap = max(int(max_derivations), -(-clauses // derived))
    for _ in range(64):
        excess = int(np.maximum(counts - cap, 0).sum())
        if excess == 0:
            break
        np.minimum(counts, cap, out=counts)
        room = np.flatnonzero(counts < cap)
        counts[room] += rng.multinomial(excess, np.full(room.size, 1.0 / room.size))
    return counts.astype(np.int64)


def _layer_popularity_cdf(rng, layer_start, reuse_exponent):
    """(T,) float64: layer k's tuples occupy (k, k+1], cumulative Zipf popularity within the layer.

    Sampling layer k then means `searchsorted(cdf, k + u, side="right")`, for
    every body entry at once.
    """
    num_layers = layer_start.size - 1
    total = int(layer_start[-1])
    layer_of = np.repeat(np.arange(num_layers), np.diff(layer_start))
    # A random permutation within each layer decides who is popular.
    order = rng.permutation(total)
    order = order[np.argsort(layer_of[order], kind="stable")]
    rank = np.arange(total) - layer_start[layer_of] + 1
    weight = np.empty(total)
    weight[order] = rank.astype(np.float64) ** -reuse_exponent
    cum = np.cumsum(weight)
    before = np.concatenate([[0.0], cum[layer_start[1:] - 1]])
    within = (cum - before[layer_of]) / (before[layer_of + 1] - before[layer_of])
    within[layer_start[1:] - 1] = 1.0
    return layer_of + within


def _draw(rng, cdf, layer_start, head_layer, recent, input_share, uniform):
    """Body tuples for body slots whose clause heads are at `head_layer` (all >= 1).

    The source layer is 0 (inputs) with probability `input_share`, otherwise
    geometrically close below the head's layer (p = `recent`); within the
    layer, Zipf popularity. `uniform` draws uniformly from all earlier tuples.
    """
    n = head_layer.size
    if uniform:
        return (rng.random(n) * layer_start[head_layer]).astype(np.int64)
    back = rng.geometric(recent, size=n)
    src = np.where(rng.random(n) < input_share, 0, np.maximum(head_layer - back, 0))
    return np.searchsorted(cdf, src + rng.random(n), side="right").astype(np.int64)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: (N,) uint64 -> (N,) uint64 hash."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _clause_keys(head, rule, bodies):
    """(C,) uint64 hash of (head, rule, body as a set) to find repeated clauses."""
    key = _mix(head.astype(np.uint64) * np.uint64(64) + rule.astype(np.uint64))
    for col in np.sort(bodies, axis=1).T:
        with np.errstate(over="ignore"):
            key = _mix(key ^ (col + 1).astype(np.uint64))
    return key


def _names(rng, relation_of, relation_names, arity):
    """Unique `rel(a,b)` / `rel(a,b,c)` names; argument tuples scrambled within each relation."""
    total = relation_of.size
    order = rng.permutation(total)
    order = order[np.argsort(relation_of[order], kind="stable")]
    counts = np.bincount(relation_of, minlength=len(relation_names))
    starts = np.concatenate([[0], np.cumsum(counts)])
    local = np.empty(total, dtype=np.int64)
    local[order] = np.arange(total) - starts[relation_of[order]]
    # Arguments are digits of `local` in base m, m the smallest base that fits.
    ar = np.asarray(arity)[relation_of]
    base = np.ceil(np.asarray(counts, dtype=np.float64) ** (1.0 / np.asarray(arity))).astype(np.int64)
    m = np.maximum(base[relation_of], 1)
    a0, a1, a2 = local % m, (local // m) % m, local // (m * m)
    prefix = [f"{r}(" for r in relation_names]
    rel = relation_of.tolist()
    x, y, z = a2.tolist(), a1.tolist(), a0.tolist()
    three = (ar == 3).tolist()
    # m**2 > count for arity 2, so z never exceeds the base and (y, z) is unique.
    y2 = (local // m).tolist()
    return [
        f"{prefix[r]}{a},{b},{c})" if t3 else f"{prefix[r]}{b2},{c})"
        for r, a, b, c, b2, t3 in zip(rel, x, y, z, y2, three, strict=True)
    ]


def generate(
    *,
    vertices: int | None = None,
    edges: int | None = None,
    factor_edges: int | None = None,
    preset: str | None = None,
    seed: int = 0,
    layers: int | None = None,
    edge_ratio: float = DEFAULT_EDGE_RATIO,
    input_fraction: float = 0.33,
    uncertain_input_fraction: float = 0.3,
    input_prior: float = 0.999,
    body_size_weights: Sequence[float] = DEFAULT_BODY_SIZE_WEIGHTS,
    derivation_tail: float = 1.1,
    max_derivations: int = 5000,
    reuse_exponent: float = 1.0,
    input_share: float = 0.3,
    recent: float = 0.5,
    alarm_layers: int = 1,
    rule_probabilities: Sequence[float] = (DEFAULT_RULE_PROBABILITY,),
) -> DerivationGraph:
    """Generates a layered Bingo-like derivation graph; same arguments -> same graph.

    Give exactly one size: a Table 1 `preset` ("weblech" ... "ftp", or
    "<name>x10"), `factor_edges` (edges of the factor graph that
    `datalog.bayesnet.to_model` builds = BN edges + BN vertices), or
    `vertices` and/or `edges` (Bayesian-network counts as in Table 1; a missing
    one follows from `edge_ratio`). The sizes are met exactly up to rounding.

    Args:
        vertices: BN vertices = tuples + clauses.
        edges: BN edges = sum over clauses of (body size + 1).
        factor_edges: factor-graph edges = BN edges + BN vertices.
        preset: a key of PRESETS.
        seed: the random seed.
        layers: number of derived layers (default: `default_layers(vertices)`).
        edge_ratio: BN edges per BN vertex when only one size is given.
        input_fraction: share of tuples that are inputs (layer 0).
        uncertain_input_fraction: share of inputs with prior `input_prior`
            (the others have prior 1.0).
        input_prior: prior of the uncertain inputs.
        body_size_weights: relative frequencies of body sizes 1..4; their
            mean, with the sizes, fixes how many clauses there are.
        derivation_tail: Pareto index of the derivations-per-tuple weights
            (smaller: heavier tail).
        max_derivations: cap on the derivations of one tuple.
        reuse_exponent: Zipf exponent of tuple popularity within a layer.
        input_share: probability that a body tuple comes from the inputs.
        recent: otherwise the body tuple's layer is the head's layer minus a
            Geometric(recent) number of layers (at least 1).
        alarm_layers: how many last layers hold the alarm relation.
        rule_probabilities: rule i has probability rule_probabilities[i % n].

    Returns:
        A DerivationGraph with rules R0..Rk, explicit priors on every input
        tuple, alarms = the tuples of the last `alarm_layers` layers.

    Raises:
        ValueError: conflicting or unreachable sizes, or an unknown preset.
    """
    vertices, edges = _target_sizes(vertices, edges, factor_edges, preset, edge_ratio)
    num_in, num_der, num_c, num_b = _split_counts(vertices, edges, body_size_weights, input_fraction)
    num_t = num_in + num_der
    num_layers = layers if layers is not None else default_layers(vertices)
    num_layers = int(min(max(num_layers, 1 + alarm_layers), num_der))
    if not 1 <= alarm_layers < num_layers:
        raise ValueError(f"alarm_layers must be in [1, {num_layers - 1}]")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EED]))

    # Layers: 0 = inputs, 1..L derived, evenly sized like the reference graphs.
    per_layer = np.full(num_layers, num_der // num_layers, dtype=np.int64)
    per_layer[: num_der % num_layers] += 1
    layer_start = np.concatenate([[0, num_in], num_in + np.cumsum(per_layer)]).astype(np.int64)
    tuple_layer = np.repeat(np.arange(num_layers + 1), np.diff(layer_start))

    # Clauses grouped by head, heads in id (= layer) order.
    derivations = _derivation_counts(rng, num_der, num_c, derivation_tail, max_derivations)
    head = np.repeat(np.arange(num_in, num_t, dtype=np.int64), derivations)
    head_layer = tuple_layer[head]
    first_of_head = np.zeros(num_c, dtype=bool)
    first_of_head[np.concatenate([[0], np.cumsum(derivations)[:-1]])] = True

    # Body sizes from the weights, then nudged so that they sum to num_b exactly.
    w = np.asarray(body_size_weights, dtype=np.float64)
    sizes = 1 + np.searchsorted(np.cumsum(w / w.sum()), rng.random(num_c), side="right")
    upper = np.minimum(MAX_BODY, layer_start[head_layer])
    sizes = np.minimum(np.minimum(sizes, MAX_BODY), upper)
    sizes = _adjust_total(rng, sizes, num_b, upper)

    # Rules: two per head relation, by body size; relations banded by layer.
    relation_of_layer = np.empty(num_layers + 1, dtype=np.int64)
    relation_of_layer[0] = -1
    plain = num_layers - alarm_layers
    relation_of_layer[1 : plain + 1] = (np.arange(plain) * len(DERIVED_RELATIONS)) // plain
    relation_of_layer[plain + 1 :] = len(DERIVED_RELATIONS)
    head_rel = relation_of_layer[head_layer]
    clause_rule = (2 * head_rel + (sizes > 2)).astype(np.int64)

    # Bodies: a (C, 4) matrix, -1 past each clause's size. The first clause of
    # each head takes its first body tuple from the layer just below, so a
    # tuple in layer l has derivation depth exactly l.
    cdf = _layer_popularity_cdf(rng, layer_start, reuse_exponent)
    valid = np.arange(MAX_BODY)[None, :] < sizes[:, None]
    bodies = np.full((num_c, MAX_BODY), -1, dtype=np.int64)
    rows, cols = np.nonzero(valid)
    bodies[rows, cols] = _draw(rng, cdf, layer_start, head_layer[rows], recent, input_share, False)
    anchor = np.flatnonzero(first_of_head)
    below = head_layer[anchor] - 1
    bodies[anchor, 0] = np.searchsorted(cdf, below + rng.random(anchor.size), side="right")
    locked = np.zeros_like(valid)
    locked[anchor, 0] = True

    # Redraw repeated tuples within a body, and clauses repeating an earlier
    # clause (same head, rule and body set), until there are none; the last
    # rounds draw uniformly in case popularity keeps colliding in small layers.
    rounds = 48
    for r in range(rounds + 1):
        twice = np.zeros_like(valid)
        for i in range(MAX_BODY):
            for j in range(i + 1, MAX_BODY):
                twice[:, j] |= (bodies[:, j] == bodies[:, i]) & valid[:, j]
        key = _clause_keys(head, clause_rule, bodies)
        order = np.argsort(key, kind="stable")
        repeat = np.zeros(num_c, dtype=bool)
        repeat[order[1:]] = key[order[1:]] == key[order[:-1]]
        redo = twice | (repeat[:, None] & valid & ~locked)
        if not redo.any() or r == rounds:
            break
        rows, cols = np.nonzero(redo)
        bodies[rows, cols] = _draw(rng, cdf, layer_start, head_layer[rows], recent, input_share,
                                   r >= rounds // 2)
    # Leftover repeated clauses are legal (rare, in tiny layers); a body
    # listing a tuple twice is not.
    if twice.any():
        raise RuntimeError("could not draw distinct body tuples; layers too small for the body sizes")

    body_offsets = np.zeros(num_c + 1, dtype=np.int64)
    np.cumsum(sizes, out=body_offsets[1:])
    body = bodies[valid].astype(np.int32)

    # Names, priors, rules.
    relation_names = list(INPUT_RELATIONS) + list(DERIVED_RELATIONS) + [ALARM_RELATION]
    n_in_rel = len(INPUT_RELATIONS)
    relation_of = np.empty(num_t, dtype=np.int64)
    relation_of[:num_in] = rng.integers(0, n_in_rel, size=num_in)
    relation_of[num_in:] = n_in_rel + relation_of_layer[tuple_layer[num_in:]]
    arity = [2 if i % 3 else 3 for i in range(len(relation_names))]
    arity[-1] = 2
    tuples = _names(rng, relation_of, relation_names, arity)

    uncertain = rng.random(num_in) < uncertain_input_fraction
    prior_values = np.where(uncertain, input_prior, DEFAULT_INPUT_PRIOR)
    priors = dict(zip(range(num_in), prior_values.tolist(), strict=True))
    probs = list(rule_probabilities)
    num_rules = 2 * (len(DERIVED_RELATIONS) + 1)
    rule_heads = list(DERIVED_RELATIONS) + [ALARM_RELATION]
    rules = [
        Rule(f"R{i}", float(probs[i % len(probs)]),
             f"{rule_heads[i // 2]} :- {'3-4' if i % 2 else '1-2'} body tuples")
        for i in range(num_rules)
    ]
    alarms = np.arange(layer_start[num_layers + 1 - alarm_layers], num_t, dtype=np.int32)
    source = f"synthetic({preset or f'vertices={vertices},edges={edges}'},seed={seed})"
    return DerivationGraph(
        tuples=tuples,
        rules=rules,
        clause_rule=clause_rule.astype(np.int32),
        clause_head=head.astype(np.int32),
        body_offsets=body_offsets,
        body=body,
        priors=priors,
        alarms=alarms,
        source=source,
    )


def layered(num_inputs: int = 40, layers: int = 3, width: int = 40, *, max_clauses: int = 3,
            max_body: int = 3, num_rules: int = 6, alarm_relation: str = "race",
            num_alarms: int | None = None, seed: int = 0) -> DerivationGraph:
    """A small layered derivation graph, sized by its layers (see `generate` for sized ones).

    Layer 0 holds `num_inputs` input tuples `in(i)` with priors in [0.6, 1];
    each of the `layers` following layers holds `width` tuples (the last ones
    are the alarms `race(i)`), each derived by 1..max_clauses clauses whose
    bodies (1..max_body tuples) come from earlier layers, mostly the previous
    one. Rules have probabilities in [0.7, 0.999]. `num_alarms` (default
    `width`) sizes the last layer. Tuple ids are in layer order and clauses
    grouped by head, as in `generate`.
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
        source=f"synthetic.layered(seed={seed})",
    )


def tuple_layers(dg: DerivationGraph) -> np.ndarray:
    """(T,) int64 derivation depth of each tuple (raises ValueError on a cycle).

    Tuples that no clause derives have depth 0; a clause's depth is the
    largest depth in its body (0 if it has none); a derived tuple's depth is 1
    + the largest depth among its clauses. For `generate`'s graphs this is the
    layer.
    """
    return _topological_rounds(dg)[0]


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + l) for each (s, l), vectorised."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lens)
    return np.arange(total) - np.repeat(ends - lens - starts, lens)


class _Uses:
    """Where each tuple occurs in clause bodies: a CSR by tuple over body entries."""

    def __init__(self, dg: DerivationGraph):
        offsets = np.asarray(dg.body_offsets, dtype=np.int64)
        body = np.asarray(dg.body, dtype=np.int64)
        self.clause_of_entry = np.repeat(np.arange(dg.num_clauses), np.diff(offsets))  # (B,)
        self.by_tuple = np.argsort(body, kind="stable")  # (B,) entries grouped by tuple
        self.count = np.bincount(body, minlength=dg.num_tuples)  # (T,)
        self.start = np.concatenate([[0], np.cumsum(self.count)[:-1]])  # (T,)

    def clauses(self, tuples: np.ndarray) -> np.ndarray:
        """Clause of every body entry of `tuples` (with repeats)."""
        entries = self.by_tuple[_ranges(self.start[tuples], self.count[tuples])]
        return self.clause_of_entry[entries]


def _topological_rounds(dg: DerivationGraph, visit=None, uses: _Uses | None = None):
    """Kahn's algorithm, one whole frontier at a time.

    Per level: `visit(tuples, None)` with the tuples that became decided, then
    `visit(None, clauses)` with the clauses whose bodies did; a tuple is
    visited only after all its clauses, a clause only after its whole body.
    Returns ((T,) tuple depth, (C,) clause depth); raises ValueError on a cycle.
    """
    num_t, num_c = dg.num_tuples, dg.num_clauses
    heads = np.asarray(dg.clause_head, dtype=np.int64)
    lens = np.diff(np.asarray(dg.body_offsets, dtype=np.int64))
    uses = uses or _Uses(dg)
    derivations = np.bincount(heads, minlength=num_t)
    body_left = lens.copy()
    clauses_left = derivations.copy()
    depth = np.full(num_t, -1, dtype=np.int64)
    clause_depth = np.full(num_c, -1, dtype=np.int64)
    ready_t = np.flatnonzero(derivations == 0)
    ready_c = np.flatnonzero(lens == 0)  # clauses with no body: facts
    level = 0
    while ready_t.size or ready_c.size:
        if ready_t.size:
            depth[ready_t] = level
            if visit is not None:
                visit(ready_t, None)
            cs, cc = np.unique(uses.clauses(ready_t), return_counts=True)
            body_left[cs] -= cc
            ready_c = np.concatenate([ready_c, cs[body_left[cs] == 0]])
        clause_depth[ready_c] = level
        if visit is not None and ready_c.size:
            visit(None, ready_c)
        hs, hc = np.unique(heads[ready_c], return_counts=True)
        clauses_left[hs] -= hc
        ready_t = hs[clauses_left[hs] == 0]
        ready_c = np.zeros(0, dtype=np.int64)
        level += 1
    if (depth < 0).any():
        stuck = int(np.flatnonzero(depth < 0)[0])
        raise ValueError(f"derivation graph has a cycle (e.g. through {dg.tuples[stuck]!r}); "
                         "it needs a DAG here")
    return depth, clause_depth


def sample_world(dg: DerivationGraph, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ancestral sample of every tuple and clause from the Bayesian network.

    Input tuples are true with their prior; a clause is true with its rule's
    probability when its whole body is true (else false); a derived tuple is
    the OR of its clauses (and, when it also has an explicit prior, of an
    extra input drawn with that prior, as `to_model` builds it). Visits the
    graph frontier by frontier in topological order, vectorised per frontier.

    With the default probabilities (0.999) a graph's alarms tend to come out
    nearly all true or nearly all false: a false input or rule failure spreads
    through single-derivation tuples layer by layer, or is absorbed by
    redundant derivations. Lower `rule_probabilities`/`input_prior` in
    `generate` for mixed labels.

    Returns:
        ((T,) bool tuple truth, (C,) bool clause truth).

    Raises:
        ValueError: the graph has a cycle.
    """
    num_t, num_c = dg.num_tuples, dg.num_clauses
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x7247]))
    u_tuple = rng.random(num_t)
    u_clause = rng.random(num_c)
    heads = np.asarray(dg.clause_head, dtype=np.int64)
    rule_p = np.array([r.probability for r in dg.rules], dtype=np.float64)
    clause_p = rule_p[np.asarray(dg.clause_rule, dtype=np.int64)] if num_c else np.zeros(0)
    prior = np.full(num_t, DEFAULT_INPUT_PRIOR)
    if dg.priors:
        prior[np.fromiter(dg.priors.keys(), np.int64)] = np.fromiter(dg.priors.values(), np.float64)
    derived = np.bincount(heads, minlength=num_t) > 0
    explicit = np.zeros(num_t, dtype=bool)
    explicit[list(dg.priors)] = True
    # An explicit prior on a derived tuple is an extra input ORed in.
    some_true = derived & explicit & (u_tuple < prior)
    tuple_truth = np.zeros(num_t, dtype=bool)
    clause_truth = np.zeros(num_c, dtype=bool)
    false_in_body = np.zeros(num_c, dtype=bool)

    def visit(ts, cs):
        if cs is not None:
            # all body tuples are decided; false_in_body was filled as they were.
            on = ~false_in_body[cs] & (u_clause[cs] < clause_p[cs])
            clause_truth[cs] = on
            some_true[heads[cs[on]]] = True
            return
        tuple_truth[ts] = np.where(derived[ts], some_true[ts], u_tuple[ts] < prior[ts])
        off = ts[~tuple_truth[ts]]
        if off.size:
            false_in_body[uses.clauses(off)] = True

    uses = _Uses(dg)
    _topological_rounds(dg, visit, uses)
    return tuple_truth, clause_truth


def sample_truth(dg: DerivationGraph, seed: int = 0) -> np.ndarray:
    """(T,) bool truth of every tuple, drawn from the model (see `sample_world`)."""
    return sample_world(dg, seed)[0]
