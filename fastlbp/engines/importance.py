"""Labels as importance weights: sequential importance sampling of a Horn-clause network.

    arrays = label_arrays(plan, {alarm: False}, capacity)     # host, once per label set
    log_w, expected = weigh(jnp, bits, arrays)                 # per world, on the device or the host

All randomness of the network is in independent coins (`sampling_plan`):
variable x with factor (kind, body, p1, p2) is x = cond ? coin(p1) : coin(p2),
cond the AND / OR of its body. Rejection keeps the worlds that happen to agree
with the labels, so after a few improbable labels none does. Here a label is
imposed where its variable t is decided instead (docs/DESIGN.md section 14):

* t's value is set to its label in every world before anything below t reads it
  (the `force_and` / `force_or` row masks of the propagation);
* the parents of t that feed nothing but t and are not labelled themselves
  (*deferred*: in a derivation graph, t's clauses) are not drawn: their rows
  hold their condition (the `cond_rows` mask), and their coins are summed out
  at t. With q_i = cond_i ? p1_i : p2_i the chance a deferred parent holds,
  and F the AND / OR of t's other parents (already drawn), the world is
  weighted by

      P(t = l | world) = P(c) Pa(l) + (1 - P(c)) Pb(l),
      P(c) = OR:  F ? 1 : 1 - prod_i (1 - q_i)      AND:  F ? prod_i q_i : 0

  (Pa(l) = a or 1 - a for t's own p1 = a, likewise b), exactly the factor the
  labels put on this world. A tuple labelled false with clauses of rule
  probability p whose bodies hold gets prod (1 - p); labelled true, 1 - that
  product; a labelled input its prior or 1 - prior.
* a deferred parent is reported by its expectation given the world and the
  label (Rao-Blackwellised; nothing below it reads it):
  OR: F ? q_i : pi q_i / (1 - prod(1 - q)),  AND: F ? pi + (1 - pi)(q_i - y) / (1 - y) : q_i,
  with pi = P(c | t = l) = P(c) Pa(l) / P(t = l) and y = prod q.

The weights are exact, so the self-normalised estimate sum w [x] / sum w is
consistent for P(x | labels); nothing is rejected, and a world that contradicts
the labels has weight 0 (log weight -inf). Everything is in log space per world.

`weigh` is written once for numpy and jax.numpy (`xp`): the device sampler and
the host path for small graphs (`fastlbp.engines.sampling`) share it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastlbp.core.graph import AND
from fastlbp.engines.sampling_plan import ONES_ROW, SamplerPlan

_ONES = np.uint32(0xFFFFFFFF)
# Fewest label slots and parent entries the arrays are padded to (then powers of two), so that a
# triage session's labels compile nothing until it passes them (`capacity`).
MIN_SLOTS = 16
MIN_ENTRIES = 256


@dataclasses.dataclass(frozen=True)
class LabelArrays:
    """One label set as padded arrays (host numpy; the device gets them as a tuple, `astuple`).

    Attributes:
        force_and, force_or: (R,) uint32 per state row: a row's words become (x & force_and) | force_or
            (labelled true: ones / ones; false: zeros / zeros; else ones / zeros).
        cond_rows: (R,) uint32 all ones at the rows of deferred parents (they hold their condition).
        slot_kind: (L,) int32 AND / OR of each labelled variable's factor.
        slot_log_pa, slot_log_pb: (L,) float64 log P(coin(p1) = label), log P(coin(p2) = label).
        slot_valid: (L,) bool (padding slots weigh nothing).
        entry_slot: (P,) int32 the slot whose body this entry is.
        entry_row: (P,) int32 state row of the parent (ONES_ROW for padding).
        entry_deferred: (P,) bool.
        entry_p1, entry_p2: (P,) float64 the parent's own p1, p2 (deferred parents).
        entry_valid: (P,) bool.
        deferred_rows: (D,) int64 state rows of the deferred parents, in entry order (host only).
    """

    force_and: np.ndarray
    force_or: np.ndarray
    cond_rows: np.ndarray
    slot_kind: np.ndarray
    slot_log_pa: np.ndarray
    slot_log_pb: np.ndarray
    slot_valid: np.ndarray
    entry_slot: np.ndarray
    entry_row: np.ndarray
    entry_deferred: np.ndarray
    entry_p1: np.ndarray
    entry_p2: np.ndarray
    entry_valid: np.ndarray

    def astuple(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    @property
    def slots(self) -> int:
        return int(self.slot_kind.shape[0])

    @property
    def entries(self) -> int:
        return int(self.entry_slot.shape[0])


def _pow2(n: int, least: int) -> int:
    return max(least, 1 << max(n - 1, 0).bit_length())


def needed(plan: SamplerPlan, labels: dict[int, bool]) -> tuple[int, int]:
    """(label slots, parent entries) a label set needs."""
    vs = np.fromiter(labels, np.int64, len(labels))
    return len(labels), int((plan.body_offsets[vs + 1] - plan.body_offsets[vs]).sum()) if vs.size else 0


def capacity(plan: SamplerPlan, labels: dict[int, bool], least: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """Padded (slots, entries) for `labels`, at least `least`: powers of two from MIN_SLOTS / MIN_ENTRIES."""
    slots, entries = needed(plan, labels)
    return _pow2(max(slots, least[0]), MIN_SLOTS), _pow2(max(entries, least[1]), MIN_ENTRIES)


def _log_p(p: np.ndarray, value: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(value, np.log(p), np.log1p(-p))


def label_arrays(plan: SamplerPlan, labels: dict[int, bool],
                 cap: tuple[int, int] | None = None) -> LabelArrays:
    """The arrays of `weigh` and of the propagation's masks for one label set (host, numpy).

    Args:
        plan: the sampler's plan.
        labels: {variable: truth}.
        cap: (slots, entries) to pad to (`capacity`); default the smallest that holds the labels.
    """
    cap = cap or capacity(plan, labels)
    slots, entries = needed(plan, labels)
    if slots > cap[0] or entries > cap[1]:
        raise ValueError(f"labels need {slots} slots and {entries} entries, capacity is {cap}")
    rows = plan.num_rows
    vs = np.fromiter(labels, np.int64, slots)
    truth = np.fromiter(labels.values(), bool, slots)
    force_and = np.full(rows, _ONES, np.uint32)
    force_or = np.zeros(rows, np.uint32)
    force_and[plan.row_of[vs]] = np.where(truth, _ONES, np.uint32(0))
    force_or[plan.row_of[vs]] = np.where(truth, _ONES, np.uint32(0))

    starts, ends = plan.body_offsets[vs], plan.body_offsets[vs + 1]
    lens = ends - starts
    slot_of = np.repeat(np.arange(slots), lens)
    parent = plan.body_var[np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(entries)] \
        if entries else np.zeros(0, np.int64)
    labelled = np.zeros(plan.num_vars, bool)
    labelled[vs] = True
    deferred = (plan.children[parent] == 1) & ~labelled[parent]
    cond_rows = np.zeros(rows, np.uint32)
    cond_rows[plan.row_of[parent[deferred]]] = _ONES

    def pad(a, n, fill, dtype):
        out = np.full(n, fill, dtype)
        out[:a.shape[0]] = a
        return out

    return LabelArrays(
        force_and=force_and, force_or=force_or, cond_rows=cond_rows,
        slot_kind=pad(plan.kind[vs], cap[0], AND, np.int32),
        slot_log_pa=pad(_log_p(plan.p1[vs], truth), cap[0], 0.0, np.float64),
        slot_log_pb=pad(_log_p(plan.p2[vs], truth), cap[0], 0.0, np.float64),
        slot_valid=pad(np.ones(slots, bool), cap[0], False, bool),
        # Padding entries weigh nothing; they join the last slot so that the slots stay sorted.
        entry_slot=pad(slot_of, cap[1], cap[0] - 1, np.int32),
        entry_row=pad(plan.row_of[parent], cap[1], ONES_ROW, np.int32),
        entry_deferred=pad(deferred, cap[1], False, bool),
        entry_p1=pad(plan.p1[parent], cap[1], 0.0, np.float64),
        entry_p2=pad(plan.p2[parent], cap[1], 0.0, np.float64),
        entry_valid=pad(np.ones(entries, bool), cap[1], False, bool))


def _segment_sum(xp, data, segment, num: int):
    """(num, N) sums of (P, N) `data` rows by their (P,) segment (nondecreasing: `label_arrays`)."""
    if xp is np:
        starts = np.searchsorted(segment, np.arange(num))
        if not data.shape[0]:
            return np.zeros((num,) + data.shape[1:], np.float64)
        out = np.add.reduceat(data, np.minimum(starts, data.shape[0] - 1), axis=0)
        empty = starts == np.append(starts[1:], data.shape[0])
        out[empty] = 0.0
        return out
    import jax

    return jax.ops.segment_sum(data, segment, num_segments=num, indices_are_sorted=True)


def _log1mexp(xp, x):
    """log(1 - exp(x)) for x <= 0 (-inf at x = 0), accurate at both ends."""
    x = xp.minimum(x, 0.0)
    near = x > -0.6931471805599453
    safe_near = xp.where(near, x, -1.0)
    safe_far = xp.where(near, -1.0, x)
    with np.errstate(divide="ignore"):  # log(0) = -inf at x = 0 is the answer
        return xp.where(near, xp.log(-xp.expm1(safe_near)), xp.log1p(-xp.exp(safe_far)))


def weigh(xp, bits, arrays: tuple):
    """Per world: the log weight of the labels and the expectations of the deferred parents.

    Args:
        xp: numpy or jax.numpy.
        bits: (P, N) bool the value of each entry's parent row in each of N worlds (a deferred
            parent's row holds its condition).
        arrays: `LabelArrays.astuple()` (as numpy or device arrays).

    Returns:
        log_w: (N,) float64 log of the labels' weight in each world (-inf: the world contradicts them).
        expected: (P, N) float64 E[parent | world, labels] for deferred entries (0 elsewhere).
    """
    (_, _, _, slot_kind, log_pa, log_pb, slot_valid,
     entry_slot, _, deferred, p1, p2, valid) = arrays
    num = slot_kind.shape[0]
    neg_inf = -np.inf
    d = (deferred & valid)[:, None]  # (P, 1)
    fixed = (~deferred & valid)[:, None]
    q = xp.where(d, xp.where(bits, p1[:, None], p2[:, None]), 0.0)  # (P, N) a deferred parent holds
    with np.errstate(divide="ignore"):
        log_q = xp.where(d, xp.log(xp.where(d, q, 1.0)), 0.0)
        log_1mq = xp.where(d, xp.log1p(-xp.where(d, q, 0.0)), 0.0)
    # F: OR of the fixed parents (any holds) / AND of them (none fails).
    any_fixed = _segment_sum(xp, xp.where(fixed & bits, 1.0, 0.0), entry_slot, num) > 0.5  # (L, N)
    all_fixed = _segment_sum(xp, xp.where(fixed & ~bits, 1.0, 0.0), entry_slot, num) < 0.5
    log_z = _segment_sum(xp, log_1mq, entry_slot, num)  # (L, N) log P(no deferred parent holds)
    log_y = _segment_sum(xp, log_q, entry_slot, num)  # (L, N) log P(every deferred parent holds)
    is_or = (slot_kind != AND)[:, None]
    log_pc = xp.where(is_or, xp.where(any_fixed, 0.0, _log1mexp(xp, log_z)),
                      xp.where(all_fixed, log_y, neg_inf))
    log_1mpc = xp.where(is_or, xp.where(any_fixed, neg_inf, log_z),
                        xp.where(all_fixed, _log1mexp(xp, log_y), 0.0))
    on = log_pc + log_pa[:, None]
    off = log_1mpc + log_pb[:, None]
    log_ws = xp.logaddexp(on, off)  # (L, N) log P(t = label | world)
    log_ws = xp.where(slot_valid[:, None], log_ws, 0.0)
    log_w = log_ws.sum(axis=0)
    # pi = P(cond | t = label); 0 in a world of weight 0.
    finite = log_ws > neg_inf
    pi = xp.where(finite, xp.exp(xp.minimum(on - xp.where(finite, log_ws, 0.0), 0.0)), 0.0)
    # Back to the entries: (P, N) per-slot quantities of each entry's slot.
    pi_e, y_e = pi[entry_slot], xp.exp(log_y)[entry_slot]
    or_e, any_e, all_e = is_or[entry_slot], any_fixed[entry_slot], all_fixed[entry_slot]
    # 1 - z and 1 - y from expm1: with one clause of p = 1e-12, 1 - (1 - p) is off by 1e-4 relative.
    one_minus_z = -xp.expm1(log_z)[entry_slot]
    some = one_minus_z > 0
    e_or = xp.where(any_e, q, xp.where(some, pi_e * q / xp.where(some, one_minus_z, 1.0), 0.0))
    one_minus_y = -xp.expm1(log_y)[entry_slot]
    e_and = xp.where(all_e, pi_e + (1.0 - pi_e) * xp.where(one_minus_y > 0, (q - y_e) / xp.where(
        one_minus_y > 0, one_minus_y, 1.0), 1.0), q)
    expected = xp.where(d, xp.clip(xp.where(or_e, e_or, e_and), 0.0, 1.0), 0.0)
    return log_w, expected


__all__ = ["LabelArrays", "label_arrays", "capacity", "needed", "weigh", "MIN_SLOTS", "MIN_ENTRIES"]
