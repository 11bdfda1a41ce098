"""A session's snapshot: what lets a resume show the state after any number of labels in one round.

The journal's events are the session (`fastlbp.triage.state`); replaying them
repeats every round (61 s to restore 4 labels on avrora under load), because
a round's result may depend on the rounds before it: LBP starts each round
from the last one's messages, and `--learn` takes its EM steps from the last
probabilities. What the events alone do not give back is small, and is
stored after each round (journal table "snapshot", one row):

* the messages the last round started from (LBP's warm start; none when it
  started cold or from uniform messages), so that a resume runs that round
  again and gets its messages and marginals bit for bit (on the same device);
* the method `auto` chose for the session (it chose with the labels of its
  first round, or by measuring);
* the rule probabilities of `--learn` before each label and now (undo brings
  the ones before a label back), and the messages its LBP E-step starts from
  next (`Learner.warm_starts`);
* the events the model refused, with the note a resume shows for them.

The labels, skips, focus, undo history and settings come from the events, by
a walk that runs no round (`Triage._walk`). The snapshot names the last event
it covers and a digest of the events up to it (`journal_format.events_digest`): a
journal whose events differ from what the snapshot saw (edited, recovered,
an event deleted) is replayed in full instead, and nothing in a snapshot is
ever a label. Events after the snapshot (a kill during the round of the last
label, or events written by an earlier release, which leaves the table
alone) are replayed as before, one round each.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from fastlbp.inference.methods import METHODS
from fastlbp.triage.journal_format import events_digest

FORMAT = 1
KEYS = {"format", "seq", "digest", "refused", "choice", "dtype", "learned"}


class Unusable(Exception):
    """A stored snapshot that cannot stand for its events (the message says why); the events replay."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A snapshot as read and checked (module docstring).

    Attributes:
        seq: the last event it covers.
        refused: {seq: note} events up to `seq` the model refused, each with the note a resume shows.
        choice: (method, reason) the session's method as `auto` chose it, or None.
        messages: (E,) the messages the last round started from, or None (a cold round).
        learned: (labels + 1, R) float64 `--learn`'s probabilities before each label, then now; or None.
        e_steps: per E-step block of `--learn`, its LBP E-step's messages or None; None without learning.
    """

    seq: int
    refused: dict[int, str]
    choice: tuple[str, str] | None
    messages: np.ndarray | None
    learned: np.ndarray | None
    e_steps: list[np.ndarray | None] | None = None


def encode(refused: dict[int, str], choice: tuple[str, str] | None, messages: np.ndarray | None,
           learned: np.ndarray | None, e_steps: list[np.ndarray | None] | None = None
           ) -> tuple[str, bytes | None, bytes | None]:
    """(state JSON, messages bytes, learned bytes) for `Journal.write_snapshot` (which adds seq and digest).

    Messages that are all 0 (uniform: the first round's, or no LBP round yet) are stored as none, which
    a round reads as the same start. The learned bytes are the probabilities, then each E-step block's
    messages, raw; the state says their shapes.
    """
    if messages is not None and not np.any(messages):
        messages = None
    learned_state = None
    learned_blob = None
    if learned is not None:
        parts = [np.ascontiguousarray(learned, np.float64)]
        shapes = []
        for m in e_steps or []:
            shapes.append(None if m is None else [int(m.size), np.dtype(m.dtype).name])
            if m is not None:
                parts.append(np.ascontiguousarray(m))
        learned_state = {"probabilities": list(learned.shape), "e_steps": shapes}
        learned_blob = b"".join(p.tobytes() for p in parts)
    state = {"format": FORMAT, "refused": [[int(s), note] for s, note in sorted(refused.items())],
             "choice": None if choice is None else list(choice),
             "dtype": None if messages is None else np.dtype(messages.dtype).name,
             "learned": learned_state}
    blob = None if messages is None else np.ascontiguousarray(messages).tobytes()
    return json.dumps(state), blob, learned_blob


def decode(row: tuple, rows: list[tuple]) -> Snapshot:
    """The snapshot of a journal's `row` (seq, state, messages, learned), checked against its events.

    Args:
        row: `Journal.read_snapshot`'s row.
        rows: the journal's events (seq, kind, alarm, truth, ...), oldest first (`Contents.rows`).

    Raises:
        Unusable: not as `encode` and `Journal.write_snapshot` write it, or the events it covers are not
            the journal's (edited, deleted, renumbered by a recovery).
    """
    seq, text, blob, learned_blob = row
    try:
        state = json.loads(text)
    except ValueError as err:
        raise Unusable(f"not JSON: {err}") from None
    if not isinstance(state, dict) or set(state) != KEYS:
        raise Unusable("its fields are not a snapshot's")
    if state["format"] != FORMAT or type(state["format"]) is not int:
        raise Unusable(f"format {state['format']!r} (this release writes {FORMAT})")
    if state["seq"] != seq or type(state["seq"]) is not int:
        raise Unusable("its event number does not match its row")
    covered = [r for r in rows if r[0] <= seq]
    if (covered[-1][0] if covered else 0) != seq:
        raise Unusable(f"event {seq}, the last it covers, is not in the journal")
    if state["digest"] != events_digest(covered):
        raise Unusable(f"the events up to {seq} are not the ones it was written after")
    seqs = {r[0] for r in covered}
    refused = state["refused"]
    if not isinstance(refused, list) or not all(
            isinstance(x, list) and len(x) == 2 and type(x[0]) is int and x[0] in seqs and type(x[1]) is str
            for x in refused):
        raise Unusable("its refused events are not events it covers, each with a note")
    choice = state["choice"]
    if choice is not None and not (isinstance(choice, list) and len(choice) == 2 and choice[0] in METHODS
                                   and type(choice[1]) is str):
        raise Unusable(f"its method {choice!r} is not one of {', '.join(METHODS)}")
    learned, e_steps = _learned(state["learned"], learned_blob)
    return Snapshot(seq, {s: note for s, note in refused}, None if choice is None else (choice[0], choice[1]),
                    _messages(state["dtype"], blob), learned, e_steps)


def _messages(dtype, blob: bytes | None) -> np.ndarray | None:
    if dtype is None and blob is None:
        return None
    if dtype not in ("float32", "float64") or type(blob) is not bytes or len(blob) % np.dtype(dtype).itemsize:
        raise Unusable("its messages are not as written")
    messages = np.frombuffer(blob, dtype)
    if np.isnan(messages).any():
        raise Unusable("its messages hold NaN")
    return messages


def _learned(state, blob: bytes | None) -> tuple[np.ndarray | None, list[np.ndarray | None] | None]:
    if state is None and blob is None:
        return None, None
    bad = Unusable("its learned probabilities are not as written")
    if not isinstance(state, dict) or set(state) != {"probabilities", "e_steps"} or type(blob) is not bytes:
        raise bad
    shape, shapes = state["probabilities"], state["e_steps"]
    if not (isinstance(shape, list) and len(shape) == 2 and all(type(n) is int and n >= 1 for n in shape)) \
            or not isinstance(shapes, list) or not all(
                x is None or (isinstance(x, list) and len(x) == 2 and type(x[0]) is int and x[0] >= 0
                              and x[1] in ("float32", "float64")) for x in shapes):
        raise bad
    sizes = [8 * math.prod(shape)] + [x[0] * np.dtype(x[1]).itemsize for x in shapes if x is not None]
    if len(blob) != sum(sizes):
        raise bad
    learned = np.frombuffer(blob, np.float64, count=math.prod(shape)).reshape(shape)
    if not (np.all(np.isfinite(learned)) and np.all((learned > 0) & (learned < 1))):
        raise Unusable("its learned probabilities are not in (0, 1)")
    e_steps: list[np.ndarray | None] = []
    offset = sizes[0]
    for x in shapes:
        if x is None:
            e_steps.append(None)
            continue
        m = np.frombuffer(blob, x[1], count=x[0], offset=offset)
        offset += m.nbytes
        if np.isnan(m).any():
            raise Unusable("its E-step messages hold NaN")
        e_steps.append(m)
    return learned, e_steps


__all__ = ["Snapshot", "Unusable", "encode", "decode", "FORMAT"]
