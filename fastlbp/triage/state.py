"""Interactive triage: a session state machine, its SQLite journal and a line-based terminal front end.

The session is event-sourced. Every action that changes state (label, undo,
skip, jump) is appended to an SQLite journal and committed *before* the user
is told it was accepted; inference state is never stored. `--resume` replays
the journal: the cold round, then each label or undo followed by its
warm-started round, exactly as they happened, so the messages, marginals and
ranking after a resume are the ones the session had (bit for bit on the same
device). A kill at any moment therefore loses at most an action that was
never acknowledged. A label that contradicts the model (probability 0) is
removed from the journal again and reported.

    t = Triage.open(model, "race.triage.db", graph_path="race.json")
    t.current               # variable index of the alarm on top (or jumped to)
    t.label(True)           # -> Outcome with the round's time
    t.explain(t.current)    # strongest derivations
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import numpy as np

from fastlbp import api
from fastlbp.errors import ContradictoryEvidence, InputError
from fastlbp.graph import KIND_NAMES
from fastlbp.model import Model
from fastlbp.ranking import alarm_vars, order_alarms

JOURNAL_VERSION = 1
SETTINGS = ("schedule", "precision", "tol", "max_iters", "damping")


def fingerprint(model: Model) -> str:
    """sha256 of the graph arrays and variable names: a journal only resumes on its own graph."""
    h = hashlib.sha256()
    g = model.graph
    for name in ("factor_offsets", "edge_var", "factor_kind", "p1", "p2"):
        h.update(np.ascontiguousarray(np.asarray(getattr(g, name))).tobytes())
    h.update("\0".join(model.var_names).encode())
    h.update(np.asarray(alarm_vars(model)).tobytes())
    return h.hexdigest()


def default_session_path(graph: str | os.PathLike) -> Path:
    """`GRAPH.triage.db` next to the graph file or directory."""
    p = Path(graph)
    return p.with_name(p.name.rstrip("/") + ".triage.db")


class Journal:
    """The SQLite file: `meta` (key, value) and `events` (seq, kind, alarm, truth, at).

    Each append is its own committed transaction with synchronous=FULL, so a
    returned append survives a kill of the process (and of the machine).
    """

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self.conn = conn

    @classmethod
    def create(cls, path: str | os.PathLike, meta: dict[str, str], *, overwrite: bool = False) -> Journal:
        p = Path(path)
        if p.exists():
            if not overwrite:
                raise InputError(str(p), None, "a triage session exists here: pass --resume to continue "
                                               "it or --fresh to start over")
            p.unlink()
        # Build the file under a temporary name and rename it: a half-made
        # journal is never mistaken for a session.
        tmp = p.with_name(p.name + ".tmp")
        tmp.unlink(missing_ok=True)
        conn = sqlite3.connect(tmp)
        conn.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,"
            " alarm TEXT, truth INTEGER, at REAL NOT NULL);")
        conn.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
        conn.commit()
        conn.close()
        os.replace(tmp, p)
        return cls._connect(p)

    @classmethod
    def open(cls, path: str | os.PathLike) -> Journal:
        p = Path(path)
        if not p.is_file():
            raise InputError(str(p), None, "no triage session to resume (start one without --resume)")
        try:
            j = cls._connect(p)
            j.meta()
        except sqlite3.DatabaseError as err:
            raise InputError(str(p), None, f"not a triage session file ({err})") from None
        return j

    @classmethod
    def _connect(cls, p: Path) -> Journal:
        conn = sqlite3.connect(p, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        return cls(p, conn)

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def events(self) -> list[tuple[int, str, str | None, bool | None]]:
        rows = self.conn.execute("SELECT seq, kind, alarm, truth FROM events ORDER BY seq")
        return [(s, k, a, None if t is None else bool(t)) for s, k, a, t in rows]

    def append(self, kind: str, alarm: str | None = None, truth: bool | None = None) -> int:
        cur = self.conn.execute("INSERT INTO events (kind, alarm, truth, at) VALUES (?, ?, ?, ?)",
                                (kind, alarm, None if truth is None else int(truth), time.time()))
        return int(cur.lastrowid)

    def delete(self, seq: int) -> None:
        self.conn.execute("DELETE FROM events WHERE seq = ?", (seq,))

    def close(self) -> None:
        self.conn.close()


@dataclasses.dataclass(frozen=True)
class RoundInfo:
    seconds: float
    iterations: int
    converged: bool
    delta: float


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What an action did: `accepted` False means it was refused (`message` says why)."""

    accepted: bool
    message: str
    round: RoundInfo | None = None


@dataclasses.dataclass(frozen=True)
class Derivation:
    """One clause (or factor) supporting an alarm, with the current probabilities."""

    rule: str
    rule_text: str | None
    probability: float  # P(clause holds), or for a factor its head's marginal
    body: list[tuple[str, float]]  # (tuple name, P)


@dataclasses.dataclass(frozen=True)
class Explanation:
    alarm: str
    probability: float
    derivations: list[Derivation]
    total: int  # derivations in all (only the strongest are listed)
    kind: str  # "derivation" or "factor" (a graph without derivation provenance)
    used_by: list[tuple[str, float]] = dataclasses.field(default_factory=list)


def _tuple_of_var(model: Model) -> dict[int, int]:
    cached = model.meta.get("_tuple_of_var")
    if cached is None:
        tv = np.asarray(model.meta["tuple_var"])
        kept = np.flatnonzero(tv >= 0)
        cached = dict(zip(tv[kept].tolist(), kept.tolist(), strict=True))
        model.meta["_tuple_of_var"] = cached
    return cached


def _tuple_probability(dg, tuple_var, marginals: np.ndarray, t: int) -> float:
    """P(tuple) from its variable; a tuple compressed away is a constant fact (prior 1.0)."""
    v = int(np.asarray(tuple_var)[t])
    if v >= 0:
        return float(marginals[v])
    return float(dg.priors.get(t, 1.0))


def explain(model: Model, marginals: np.ndarray, var: int, k: int = 3, *,
            clauses_by_head: dict[int, np.ndarray] | None = None) -> Explanation:
    """Why `var` has its probability: its `k` strongest derivations.

    With a derivation graph (`model.meta["derivation"]`), the clauses deriving
    the tuple ranked by the current marginal of their clause variables, each
    with its rule and body tuples. Without one (a bare factor graph), the
    factors with `var` as head and their body variables, and the factors
    that use `var`.
    """
    names = model.var_names
    dg = model.meta.get("derivation")
    tuple_var = model.meta.get("tuple_var")
    clause_var = model.meta.get("clause_var")
    tuple_of_var = _tuple_of_var(model) if dg is not None and tuple_var is not None else {}
    if var in tuple_of_var:
        t = tuple_of_var[var]
        if clauses_by_head is None:
            clauses = np.flatnonzero(np.asarray(dg.clause_head) == t)
        else:
            clauses = clauses_by_head.get(t, np.zeros(0, np.int64))
        # A clause that compression merged into its head shares the head's
        # variable; one that was pruned or dropped has none (-1).
        cvars = np.asarray(clause_var)[clauses]
        p = np.where(cvars >= 0, marginals[np.maximum(cvars, 0)], -1.0)
        strongest = np.argsort(-p, kind="stable")[:k]
        ders = []
        for i in strongest.tolist():
            g = int(clauses[i])
            rule = dg.rules[int(dg.clause_rule[g])]
            body = [(dg.tuples[b], _tuple_probability(dg, tuple_var, marginals, b))
                    for b in dg.clause_body(g).tolist()]
            ders.append(Derivation(rule.name, rule.text, float(max(p[i], 0.0)), body))
        return Explanation(names[var], float(marginals[var]), ders, len(clauses), "derivation")

    g = model.graph
    off = np.asarray(g.factor_offsets)
    ev = np.asarray(g.edge_var)
    heads = np.asarray(g.factor_head)
    kinds = np.asarray(g.factor_kind)
    own = np.flatnonzero(heads == var)
    ders = []
    for a in own[:k].tolist():
        body = [(names[v], float(marginals[v])) for v in ev[off[a] + 1: off[a + 1]].tolist()]
        text = f"p1={float(np.asarray(g.p1)[a]):g}, p2={float(np.asarray(g.p2)[a]):g}"
        ders.append(Derivation(f"{KIND_NAMES[int(kinds[a])]} factor {a}", text,
                               float(marginals[var]), body))
    in_body = np.asarray(g.edge_factor)[(ev == var) & ~np.asarray(g.edge_is_head)]
    used = [(names[int(heads[a])], float(marginals[int(heads[a])])) for a in in_body[:k].tolist()]
    return Explanation(names[var], float(marginals[var]), ders, len(own), "factor", used)


MAX_BODY_SHOWN = 8


def _body_lines(body: list[tuple[str, float]]) -> list[str]:
    lines = [f"      <- {name}   P = {p:.4f}" for name, p in body[:MAX_BODY_SHOWN]]
    if len(body) > MAX_BODY_SHOWN:
        lines.append(f"      ... and {len(body) - MAX_BODY_SHOWN} more")
    return lines


def format_explanation(ex: Explanation) -> str:
    lines = []
    if ex.kind == "derivation":
        if not ex.derivations:
            lines.append("  why: an input tuple (no clause derives it)")
        else:
            lines.append(f"  why: strongest of {ex.total} derivation(s):")
        for d in ex.derivations:
            text = f"  {d.rule_text}" if d.rule_text else ""
            lines.append(f"    {d.rule}{text}   P(clause) = {d.probability:.4f}")
            lines += _body_lines(d.body)
    else:
        lines.append("  why: no derivation provenance in this graph; factor neighbours:")
        for d in ex.derivations:
            lines.append(f"    {d.rule} ({d.rule_text})")
            lines += _body_lines(d.body)
        for name, p in ex.used_by:
            lines.append(f"      -> used by {name}   P = {p:.4f}")
    return "\n".join(lines)


class Triage:
    """A triage session over one model: labels, skips, focus, and the journal that makes them durable."""

    def __init__(self, model: Model, journal: Journal, settings: dict):
        self.model = model
        self.journal = journal
        self.settings = dict(settings)
        self.session = api.Session(model, **{k: self.settings[k] for k in SETTINGS})
        self.alarms = alarm_vars(model)  # (A,) int64
        self.alarm_set = set(self.alarms.tolist())
        self.order: list[tuple[int, int]] = []  # (journal seq, var) of labels, oldest first
        self.skipped: list[tuple[int, int]] = []
        self.focus: int | None = None
        self.rounds: list[RoundInfo] = []
        self._history: list[tuple[str, int, int]] = []  # (kind, seq, var): what undo reverts
        self._ranking: np.ndarray = np.zeros(0, np.int64)
        self._clauses_by_head: dict[int, np.ndarray] | None = None
        self.replay_notes: list[str] = []  # labels the journal held that turned out contradictory

    # Opening --------------------------------------------------------------
    @classmethod
    def open(cls, model: Model, path: str | os.PathLike, *, graph_path: str | None = None,
             resume: bool = False, overwrite: bool = False, **settings) -> Triage:
        """Starts a new session in `path` or (resume=True) restores the one there.

        Settings (schedule, precision, tol, max_iters, damping) are stored in
        the journal; a resumed session uses the stored ones.

        Raises:
            InputError: no session to resume, a session already there (and not
                `overwrite`), or a journal made for another graph.
        """
        fp = fingerprint(model)
        defaults = {"schedule": "parall", "precision": "f64", "tol": 1e-6, "max_iters": 1000,
                    "damping": 0.0}
        if resume:
            journal = Journal.open(path)
            meta = journal.meta()
            if meta.get("fingerprint") != fp:
                journal.close()
                raise InputError(str(path), None, f"this session was made for another graph "
                                                  f"({meta.get('graph', '?')})")
            stored = json.loads(meta["settings"])
        else:
            stored = {**defaults, **{k: v for k, v in settings.items() if v is not None}}
            journal = Journal.create(path, {
                "version": str(JOURNAL_VERSION), "fingerprint": fp,
                "graph": str(Path(graph_path).resolve()) if graph_path else str(model.source),
                "settings": json.dumps(stored), "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            }, overwrite=overwrite)
        t = cls(model, journal, stored)
        t._first_round()
        t.replay_notes = t.replay()
        return t

    def close(self) -> None:
        self.journal.close()

    # State ----------------------------------------------------------------
    @property
    def labels(self) -> dict[int, bool]:
        return self.session.labels

    @property
    def marginals(self) -> np.ndarray:
        return self.session.last.marginals

    @property
    def ranking(self) -> np.ndarray:
        """(A',) unlabelled alarms by decreasing probability."""
        return self._ranking

    @property
    def current(self) -> int | None:
        """The alarm to label next: the focus if set, else the top one not skipped."""
        if self.focus is not None:
            return self.focus
        skipped = {v for _, v in self.skipped}
        for v in self._ranking.tolist():
            if v not in skipped:
                return v
        return int(self._ranking[0]) if len(self._ranking) else None

    def rank_of(self, var: int) -> int | None:
        hits = np.flatnonzero(self._ranking == var)
        return int(hits[0]) + 1 if hits.size else None

    def _first_round(self) -> None:
        self._round(warm=False)

    def _round(self, warm: bool = True) -> RoundInfo:
        start = time.perf_counter()
        rnd = self.session.run(warm=warm)
        self._ranking = order_alarms(rnd.marginals, self.alarms, exclude=self.session.labels)
        info = RoundInfo(time.perf_counter() - start, rnd.iterations, rnd.converged, rnd.delta)
        self.rounds.append(info)
        return info

    def replay(self) -> list[str]:
        """Re-applies the journal's events (after the cold round); returns notes for the user."""
        notes = []
        for seq, kind, alarm, truth in self.journal.events():
            var = self.model.index.get(alarm) if alarm is not None else None
            if kind == "label":
                out = self._apply_label(seq, var, truth)
                if not out.accepted:
                    notes.append(out.message)
            elif kind == "skip":
                self.skipped.append((seq, var))
                self._history.append(("skip", seq, var))
                self.focus = None
            elif kind == "jump":
                self.focus = var
            elif kind == "undo":
                self._apply_undo()
        return notes

    # Actions --------------------------------------------------------------
    def label(self, truth: bool, var: int | None = None) -> Outcome:
        """Labels `var` (default: the current alarm), journals it, and runs a warm round."""
        var = self.current if var is None else var
        if var is None:
            return Outcome(False, "no alarm left to label")
        if var in self.labels:
            return Outcome(False, f"{self.model.var_names[var]} is labelled already (undo first)")
        seq = self.journal.append("label", self.model.var_names[var], truth)
        return self._apply_label(seq, var, truth)

    def _apply_label(self, seq: int, var: int, truth: bool) -> Outcome:
        name = self.model.var_names[var]
        self.session.label(var, truth)
        try:
            info = self._round()
        except ContradictoryEvidence as err:
            self.session.unlabel(var)
            self.journal.delete(seq)
            return Outcome(False, f"refused {name} = {'true' if truth else 'false'}: {err}")
        self.order.append((seq, var))
        self._history.append(("label", seq, var))
        self.skipped = [(s, v) for s, v in self.skipped if v != var]
        self.focus = None
        return Outcome(True, f"{name} = {'true' if truth else 'false'}", info)

    def skip(self) -> Outcome:
        var = self.current
        if var is None:
            return Outcome(False, "no alarm to skip")
        open_count = len(self._ranking)
        if len({v for _, v in self.skipped} | {var}) >= open_count:
            return Outcome(False, "every open alarm is skipped already; label one or undo a skip")
        seq = self.journal.append("skip", self.model.var_names[var])
        self.skipped.append((seq, var))
        self._history.append(("skip", seq, var))
        self.focus = None
        return Outcome(True, f"skipped {self.model.var_names[var]}")

    def undo(self) -> Outcome:
        """Reverts the last label (with a warm round) or skip."""
        if not self._history:
            return Outcome(False, "nothing to undo")
        self.journal.append("undo")
        return self._apply_undo()

    def _apply_undo(self) -> Outcome:
        kind, seq, var = self._history.pop()
        name = self.model.var_names[var]
        self.focus = None
        if kind == "skip":
            self.skipped = [(s, v) for s, v in self.skipped if s != seq]
            return Outcome(True, f"undid skip of {name}")
        self.order = [(s, v) for s, v in self.order if s != seq]
        self.session.unlabel(var)
        info = self._round()
        return Outcome(True, f"undid label of {name}", info)

    def find(self, query: str) -> int | None:
        """An alarm by exact name, or by its 1-based rank among open alarms."""
        q = query.strip()
        if q in self.model.index and self.model.index[q] in self.alarm_set:
            return self.model.index[q]
        if q.isdigit() and 1 <= int(q) <= len(self._ranking):
            return int(self._ranking[int(q) - 1])
        return None

    def jump(self, query: str) -> Outcome:
        var = self.find(query)
        if var is None:
            hits = self.search(query, limit=5)
            hint = f"; did you mean {', '.join(self.model.var_names[v] for v in hits)}?" if hits else ""
            return Outcome(False, f"no alarm {query!r}{hint}")
        if var in self.labels:
            return Outcome(False, f"{self.model.var_names[var]} is labelled already (undo first)")
        self.journal.append("jump", self.model.var_names[var])
        self.focus = var
        return Outcome(True, f"now at {self.model.var_names[var]}")

    def search(self, text: str, limit: int = 20) -> list[int]:
        """Alarms whose name contains `text` (case-insensitive), open ones by rank, then labelled ones."""
        t = text.strip().lower()
        names = self.model.var_names
        hits = [v for v in self._ranking.tolist() if t in names[v].lower()]
        hits += [v for _, v in self.order if t in names[v].lower()]
        return hits[:limit]

    def explain(self, var: int, k: int = 3) -> Explanation:
        dg = self.model.meta.get("derivation")
        if dg is not None and self._clauses_by_head is None:
            heads = np.asarray(dg.clause_head, dtype=np.int64)
            order = np.argsort(heads, kind="stable")
            uniq, starts = np.unique(heads[order], return_index=True)
            bounds = np.append(starts, len(order))
            self._clauses_by_head = {int(h): order[bounds[i]:bounds[i + 1]]
                                     for i, h in enumerate(uniq.tolist())}
        return explain(self.model, self.marginals, var, k, clauses_by_head=self._clauses_by_head)

    def stats(self) -> dict:
        truths = [self.labels[v] for _, v in self.order]
        times = np.array([r.seconds for r in self.rounds[1:]]) if len(self.rounds) > 1 else np.zeros(0)
        last = self.rounds[-1]
        return {
            "labelled": len(truths), "true": sum(truths), "false": len(truths) - sum(truths),
            "open": len(self._ranking), "skipped": len(self.skipped), "rounds": len(self.rounds),
            "median_round_s": float(np.median(times)) if times.size else None,
            "max_round_s": float(times.max()) if times.size else None,
            "last_iterations": last.iterations, "last_converged": last.converged,
            "session": str(self.journal.path),
        }


# Terminal front end ---------------------------------------------------------

HELP = """\
commands (a letter or the word, then Enter):
  t, true          label the current alarm true (a real bug)
  f, false         label it false (a false alarm)
  s, skip          leave it for later
  u, undo          undo the last label or skip
  j, jump X        go to alarm X (a name, or a rank from `list`)
  /TEXT, search T  find alarms whose name contains TEXT
  l, list [N]      show the top N open alarms (default 10)
  w, why           show the derivations of the current alarm again
  stats            labels so far, round times
  h, help, ?       this help
  q, quit          leave (the session is saved after every label)"""


def _fmt_round(info: RoundInfo | None) -> str:
    if info is None:
        return ""
    conv = "converged" if info.converged else f"NOT converged (last change {info.delta:.2g})"
    return f"round {info.seconds * 1e3:.1f} ms, {info.iterations} iterations, {conv}"


class Terminal:
    """The line-based loop: reads commands from `stdin`, writes to `stdout`."""

    def __init__(self, triage: Triage, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 why: int = 3):
        self.t = triage
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.why = why

    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def show_current(self) -> None:
        t = self.t
        st = t.stats()
        self.say(f"[{st['labelled']} labelled: {st['true']} true, {st['false']} false | "
                 f"{st['open']} open]")
        var = t.current
        if var is None:
            self.say("all alarms are labelled. `undo`, `stats` or `quit`.")
            return
        rank = t.rank_of(var)
        p = float(t.marginals[var])
        self.say(f"#{rank}  {t.model.var_names[var]}   P(true) = {p:.4f}")
        self.say(format_explanation(t.explain(var, self.why)))

    def run(self) -> int:
        """Runs until quit or end of input; returns the exit status (130 after Ctrl-C)."""
        self.say(f"session: {self.t.journal.path}   (h for help)")
        try:
            self.show_current()
            self._loop()
        except KeyboardInterrupt:
            # Labels are journaled before they are acknowledged: nothing to flush.
            self.say(f"\ninterrupted; saved: {self.t.journal.path} (resume with --resume)")
            return 130
        self.say(f"saved: {self.t.journal.path} (resume with --resume)")
        return 0

    def _loop(self) -> None:
        commands: dict[str, Callable[[str], bool]] = {}
        for names, fn in (
            (("t", "true", "y", "yes"), lambda a: self._label(True)),
            (("f", "false", "n", "no"), lambda a: self._label(False)),
            (("s", "skip"), lambda a: self._report(self.t.skip(), show=True)),
            (("u", "undo"), lambda a: self._report(self.t.undo(), show=True)),
            (("j", "jump", "g", "goto"), self._jump),
            (("search", "find"), self._search),
            (("l", "list", "ls"), self._list),
            (("w", "why"), lambda a: self.show_current() or True),
            (("stats",), self._stats),
            (("h", "help", "?"), lambda a: self.say(HELP) or True),
        ):
            for n in names:
                commands[n] = fn
        while True:
            self.stdout.write("> ")
            self.stdout.flush()
            line = self.stdin.readline()
            if not line:
                self.say()
                break
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                self._search(line[1:])
                continue
            word, _, arg = line.partition(" ")
            word = word.lower()
            if word in ("q", "quit", "exit"):
                break
            fn = commands.get(word)
            if fn is None:
                self.say(f"unknown command {word!r} (h for help)")
                continue
            fn(arg.strip())

    def _report(self, out: Outcome, show: bool = False) -> bool:
        if out.accepted:
            extra = f"  ({_fmt_round(out.round)})" if out.round else ""
            self.say(f"ok: {out.message}{extra}")
            if show:
                self.show_current()
        else:
            self.say(f"! {out.message}")
        return True

    def _label(self, truth: bool) -> bool:
        out = self.t.label(truth)
        if out.accepted:
            self.say(f"accepted: {out.message}  ({_fmt_round(out.round)})")
            self.show_current()
        else:
            self.say(f"! {out.message}")
        return True

    def _jump(self, arg: str) -> bool:
        if not arg:
            self.say("! jump to what? e.g. `j race(3)` or `j 5`")
            return True
        return self._report(self.t.jump(arg), show=True)

    def _search(self, arg: str) -> bool:
        if not arg:
            self.say("! search for what? e.g. `/race`")
            return True
        hits = self.t.search(arg)
        if not hits:
            self.say(f"no alarm matches {arg!r}")
        for v in hits:
            name = self.t.model.var_names[v]
            if v in self.t.labels:
                self.say(f"  labelled {'true ' if self.t.labels[v] else 'false'}  {name}")
            else:
                self.say(f"  #{self.t.rank_of(v):<5} {float(self.t.marginals[v]):.4f}  {name}")
        return True

    def _list(self, arg: str) -> bool:
        n = int(arg) if arg.isdigit() else 10
        skipped = {v for _, v in self.t.skipped}
        for i, v in enumerate(self.t.ranking[:n].tolist(), 1):
            mark = " (skipped)" if v in skipped else ""
            self.say(f"  #{i:<5} {float(self.t.marginals[v]):.4f}  {self.t.model.var_names[v]}{mark}")
        return True

    def _stats(self, arg: str) -> bool:
        st = self.t.stats()
        med = "-" if st["median_round_s"] is None else f"{st['median_round_s'] * 1e3:.1f} ms"
        mx = "-" if st["max_round_s"] is None else f"{st['max_round_s'] * 1e3:.1f} ms"
        self.say(f"  labelled {st['labelled']} ({st['true']} true, {st['false']} false), "
                 f"{st['open']} open, {st['skipped']} skipped")
        self.say(f"  rounds {st['rounds']}, median {med}, max {mx}; last: "
                 f"{st['last_iterations']} iterations, "
                 f"{'converged' if st['last_converged'] else 'not converged'}")
        self.say(f"  session file {st['session']}")
        return True
