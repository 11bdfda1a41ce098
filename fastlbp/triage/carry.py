"""Labels that survive the next commit: labels given on an old version's graph, carried to the new one.

    model, carried = carry_labels(old_model, {"race(1,4)": False}, new_model, match=read_match("m.txt"))
    carried.labels, carried.soft      # {new variable: truth}, {new variable: p}
    print(carried.summary())  # "labels from the old graph: 12 carried, 3 softened (P = 0.9), 1 dropped"

A label says whether a tuple holds in the program; whether it still holds after
a change depends on whether its derivations changed. As in Drake (Heo et al.,
PLDI 2019), the derivations are compared by names: a tuple of the new graph is
*unchanged* when the clauses deriving it (rule, head, body names) are the same
in both graphs and every tuple in their bodies is unchanged, down to the
inputs (renamed tuples compared under `match`). A label on an unchanged tuple
is *carried* as a label; on a changed tuple it is *softened*: soft evidence of
the stated `confidence` (`fastlbp.inference.soft`: P = confidence for a true
label, 1 - confidence for a false one); a tuple the new graph lacks (or never
derives) *drops* its label.

Several old labels can land on one new tuple (a match file merging two tuples
into one, or names that differ only in white space): equal labels become one
label there (`Carried.merged` says which), and labels that contradict each
other are an error naming them all, never one of them kept in silence (issue
41, item 4: a `true` label was lost while the summary said "2 softened").

The changed set is computed once for the whole graph (a tuple whose own
clauses differ, then every tuple derived from a changed one, forward over the
new graph's clauses), in time linear in the two graphs' clauses, rather than
one comparison of derivation subgraphs per label. Rule probabilities and input
priors are not compared: they are the model, not the program.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from pathlib import Path

from fastlbp.core.errors import InputError, read_text, text_lines
from fastlbp.core.model import UNDERIVABLE, Model

CARRY_CONFIDENCE = 0.9  # P of the soft evidence a label on a changed tuple becomes


@dataclasses.dataclass(frozen=True)
class Carried:
    """What became of each old label on the new graph.

    Attributes:
        labels: {new variable: truth} carried as labels.
        soft: {new variable: p} softened labels (soft evidence).
        carried, softened: the old tuple names, in the old labels' order (merged ones together).
        dropped: (old name, why) of labels with nowhere to go.
        confidence: the softened labels' confidence.
        merged: (new name, [old names]) of each new tuple that several equal
            old labels became one label (or soft evidence) of; each old name
            is also in `carried` or `softened`.
    """

    labels: dict[int, bool]
    soft: dict[int, float]
    carried: list[str]
    softened: list[str]
    dropped: list[tuple[str, str]]
    confidence: float = CARRY_CONFIDENCE
    merged: list[tuple[str, list[str]]] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        """One line for people."""
        line = (f"labels from the old graph: {len(self.carried)} carried, {len(self.softened)} softened "
                f"(P = {self.confidence:g}), {len(self.dropped)} dropped")
        if self.merged:
            olds = sum(len(names) for _, names in self.merged)
            line += f" ({olds} equal labels merged onto {len(self.merged)} tuple(s) of the new graph)"
        return line

    def as_dict(self) -> dict:
        return {"carried": len(self.carried), "softened": len(self.softened), "dropped": len(self.dropped),
                "confidence": self.confidence,
                "dropped_labels": [{"tuple": n, "why": why} for n, why in self.dropped],
                "merged": [{"tuple": n, "from": names} for n, names in self.merged]}


def read_match(path: str | os.PathLike) -> dict[str, str]:
    """{old name: new name} of a match file: one `OLD<TAB>NEW` (or `OLD -> NEW`, or two names without
    spaces) per line; blank lines and `#` comments skipped.

    Raises:
        InputError: a malformed line, or an old name mapped twice (file and line named).
    """
    p = Path(path)
    out: dict[str, str] = {}
    where: dict[str, int] = {}
    for ln, line in enumerate(text_lines(read_text(p)), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if "\t" in s:
            parts = [x.strip() for x in s.split("\t")]
        elif " -> " in s:
            parts = [x.strip() for x in s.split(" -> ")]
        else:
            parts = s.split()
        if len(parts) != 2 or not all(parts):
            raise InputError(str(p), ln, f"expected 'OLD<TAB>NEW' or 'OLD -> NEW', got {s!r}")
        old, new = parts
        if old in out and out[old] != new:
            raise InputError(str(p), ln, f"{old!r} is matched to {new!r} here but to {out[old]!r} on line "
                             f"{where[old]}")
        out[old] = new
        where.setdefault(old, ln)
    return out


def _clauses_by_head(dg, rename=None) -> dict[str, set]:
    """{head name: {(rule name, body names)}} of a derivation graph, names through `rename`."""
    names = dg.tuples if rename is None else [rename.get(t, t) for t in dg.tuples]
    out: dict[str, set] = defaultdict(set)
    body_of = dg.body
    off = dg.body_offsets
    for c, (h, r) in enumerate(zip(dg.clause_head.tolist(), dg.clause_rule.tolist(), strict=True)):
        body = tuple(names[b] for b in body_of[off[c]:off[c + 1]].tolist())
        out[names[h]].add((dg.rules[r].name, body))
    return out


def changed_tuples(old_dg, new_dg, match: dict[str, str] | None = None) -> set[str]:
    """The new graph's tuples whose derivations changed (module docstring), by new name."""
    old = _clauses_by_head(old_dg, match or {})
    new = _clauses_by_head(new_dg)
    old_names = {(match or {}).get(t, t) for t in old_dg.tuples}
    changed = [t for t in new_dg.tuples if t not in old_names or old.get(t, set()) != new.get(t, set())]
    users: dict[str, set[str]] = defaultdict(set)
    for head, clauses in new.items():
        for _, body in clauses:
            for b in body:
                users[b].add(head)
    out = set(changed)
    stack = list(changed)
    while stack:
        for h in users.get(stack.pop(), ()):
            if h not in out:
                out.add(h)
                stack.append(h)
    return out


def carry_labels(old: Model, labels: dict[str, bool], new: Model, *, match: dict[str, str] | None = None,
                 confidence: float = CARRY_CONFIDENCE, source: str | None = None) -> tuple[Model, Carried]:
    """Carries `labels` (old tuple names) to `new` (module docstring).

    A carried or softened label on a tuple compression removed from `new`
    keeps it as a variable (the model is made again:
    `fastlbp.io.loading.keep_tuples`). Without derivations in either graph
    (a bare factor graph) nothing can be compared: every label found by name
    is softened.

    Args:
        source: the file an error names (the match file, when there is one).

    Returns:
        (the new model, possibly made again; `Carried` on its variables).

    Raises:
        ValueError: `confidence` not in (0.5, 1).
        InputError: old labels that contradict each other land on one new
            tuple (all of them named, with their truths).
    """
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"the confidence of a softened label must be in (0.5, 1), got {confidence!r}")
    match = match or {}
    old_dg, new_dg = old.meta.get("derivation"), new.meta.get("derivation")
    changed = changed_tuples(old_dg, new_dg, match) if old_dg is not None and new_dg is not None else None
    plan: list[tuple[str, str, bool, bool]] = []  # (old name, new name, truth, unchanged)
    dropped: list[tuple[str, str]] = []
    for name, truth in labels.items():
        target = match.get(name, name)
        try:
            r = new.resolve(target)
        except KeyError:
            dropped.append((name, "not in the new graph" + (f" (as {target!r})" if target != name else "")))
            continue
        if r.how == UNDERIVABLE:
            dropped.append((name, f"never holds in the new graph: {r.reason}"))
            continue
        plan.append((name, r.name, bool(truth), changed is not None and r.name not in changed))
    if any(new.resolve(n).var < 0 for _, n, _, _ in plan):
        from fastlbp.io.loading import keep_tuples

        new = keep_tuples(new, [n for _, n, _, _ in plan])
    onto: dict[int, list[tuple[str, str, bool, bool]]] = defaultdict(list)  # new variable -> its labels
    for entry in plan:
        onto[new.resolve(entry[1]).var].append(entry)
    for group in onto.values():
        if len({truth for _, _, truth, _ in group}) > 1:
            shown = ", ".join(f"{name!r} ({'true' if truth else 'false'})" for name, _, truth, _ in group)
            raise InputError(source, None, f"the old labels {shown} all become the new graph's tuple "
                             f"{group[0][1]!r}, and they contradict each other: map only one of them "
                             "onto it (--match), or label it for this version (--labels)")
    hard: dict[int, bool] = {}
    soft: dict[int, float] = {}
    carried, softened, merged = [], [], []
    for v, group in onto.items():
        _, target, truth, same = group[0]  # `same` is the target's: one value per group
        if same:
            hard[v] = truth
            carried.extend(name for name, *_ in group)
        else:
            soft[v] = confidence if truth else 1.0 - confidence
            softened.extend(name for name, *_ in group)
        if len(group) > 1:
            merged.append((target, [name for name, *_ in group]))
    return new, Carried(hard, soft, carried, softened, dropped, confidence, merged)


def old_labels(old: Model, path: str | os.PathLike | None = None) -> dict[str, bool]:
    """{tuple name: truth} of the old version: its graph's own labels, then a labels file or triage
    session (`fastlbp.triage.labels.read_labels_or_session`) given for it."""
    out = {old.var_names[v]: bool(t) for v, t in old.labels.items()}
    if path is not None:
        from fastlbp.triage.labels import read_labels_or_session

        model, extra = read_labels_or_session(Path(path), old)
        out.update({model.var_names[v]: bool(t) for v, t in extra.items()})
    return out


__all__ = ["carry_labels", "changed_tuples", "read_match", "old_labels", "Carried", "CARRY_CONFIDENCE"]
