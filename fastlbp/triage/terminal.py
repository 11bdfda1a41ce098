"""The terminal front end of a triage session: a line-based command loop.

    Terminal(Triage.open(model, path), history=Path("triage_history")).run()   # stdin -> stdout

On a terminal the prompt has line editing, history and Tab completion
(`fastlbp.triage.lineinput`). After each label (and undo) one line says which
open alarms moved most; long lists show a page and say how to see the rest.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import numpy as np

from fastlbp.core.errors import InputError
from fastlbp.core.text import format_probability, safe_name
from fastlbp.inference.explain import format_explanation
from fastlbp.inference.methods import method_of
from fastlbp.triage.labels import write_labels
from fastlbp.triage.lineinput import LineReader, has_keys, shown_keys
from fastlbp.triage.outcome import Outcome, RoundInfo
from fastlbp.triage.state import Triage

PAGE = 20  # lines a search or `more` shows at once
MOVED_SHOWN = 2  # alarms named in the "moved:" line
MOVED_OTHERS = 0.1  # the others are counted when they moved by more than this
MOVED_MIN = 1e-3  # a move smaller than this is "nothing moved"

HELP = """\
commands (a letter or the word, then Enter):
  t, true          label the current alarm true (a real bug)
  f, false         label it false (a false alarm)
  s, skip          leave it for later
  u, undo          undo the last label or skip
  j, jump X        go to alarm X (a name, or a rank from `list`)
  /TEXT, search T  find alarms whose name contains TEXT (add --all for every hit)
  l, list [N|all]  show the top N open alarms (default 10)
  more             the next page of the last search or list
  w, why [X]       show the derivations of the current alarm again (or of any tuple X)
  export FILE      write the labels to FILE ('NAME true|false' lines; `fastlbp rank -l FILE`)
  stats            labels so far, round times
  h, help, ?       this help
  q, quit          leave (the session is saved after every label)
on a terminal: arrow keys edit the line, up/down recall earlier commands, Tab completes"""


def format_round(info: RoundInfo | None) -> str:
    """`round 4.2 ms, 17 iterations, converged` (empty for an action without a round)."""
    if info is None:
        return ""
    learned = "" if info.learn_s is None else f" (learning {info.learn_s * 1e3:.1f} ms of it)"
    if info.how:
        return f"round {info.seconds * 1e3:.1f} ms{learned}, {info.how}"
    conv = "converged" if info.converged else f"NOT converged (last change {info.delta:.2g})"
    if info.remedy:
        conv = f"{'converged' if info.converged else 'NOT converged'} with {info.remedy} (LBP alone did not)"
    return f"round {info.seconds * 1e3:.1f} ms{learned}, {info.iterations} iterations, {conv}"


def format_p(p: float, digits: int = 2) -> str:
    """A probability for the "moved" line: `0.12`, `3.2e-05`, `0.99996`."""
    if p <= 0.0 or p >= 1.0:
        return f"{p:.0f}"
    if p < 10.0 ** -digits:
        return f"{p:.1e}"
    if p > 1 - 10.0 ** -digits:
        return f"{p:.{digits + 3}f}"
    return f"{p:.{digits}f}"


def moved_line(before: np.ndarray, after: np.ndarray, candidates: np.ndarray, names: list[str]) -> str:
    """`moved: race(3,4) 0.12 -> 0.81, race(5,6) 0.40 -> 0.05, 3 others by > 0.1`.

    Args:
        before, after: (V,) float64 marginals before and after an action.
        candidates: (A,) int64 the alarms to compare (open before and after).
        names: variable names.
    """
    if candidates.size == 0:
        return "moved: no open alarm left"
    d = after[candidates] - before[candidates]
    order = np.argsort(-np.abs(d), kind="stable")
    shown = [int(i) for i in order[:MOVED_SHOWN] if abs(d[i]) >= MOVED_MIN]
    if not shown:
        return f"moved: no open alarm by more than {MOVED_MIN:g}"
    digits = 2 if abs(d[shown[0]]) >= 0.01 else 3
    parts = [f"{safe_name(names[candidates[i]])} {format_p(before[candidates[i]], digits)} -> "
             f"{format_p(after[candidates[i]], digits)}" for i in shown]
    others = int(np.sum(np.abs(d) > MOVED_OTHERS)) - sum(abs(d[i]) > MOVED_OTHERS for i in shown)
    if others:
        parts.append(f"{others} other{'s' if others > 1 else ''} by > {MOVED_OTHERS:g}")
    return "moved: " + ", ".join(parts)


class Terminal:
    """The command loop: reads commands from `stdin`, writes to `stdout`.

    Args:
        history: the command history file (line editing needs a terminal); None: none kept.
        why: derivations shown per alarm.
    """

    def __init__(self, triage: Triage, stdin: TextIO | None = None, stdout: TextIO | None = None,
                 why: int = 3, history: Path | None = None):
        self.t = triage
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.why = why
        self.history = history
        self._pager: tuple[list[int], Callable[[int], str], int, str] | None = None

    def say(self, text: str = "") -> None:
        # Tuple names come from the input: each is put in a message through `safe_name` (a newline in a
        # name shown as \n, so it cannot forge a line of its own), and every line is escaped again here,
        # so nothing can move the cursor, recolour or clear the user's terminal.
        text = "\n".join(safe_name(line) for line in text.split("\n"))
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def show_current(self) -> None:
        t = self.t
        st = t.stats()
        given = f" | {st['carried']} carried, {st['soft']} soft" if st["carried"] or st["soft"] else ""
        self.say(f"[{st['labelled']} labelled: {st['true']} true, {st['false']} false{given} | "
                 f"{st['open']} open]")
        var = t.current
        if var is None:
            self.say("all alarms are labelled. `undo`, `stats` or `quit`.")
            return
        rank = t.rank_of(var)
        self.say(f"#{rank}  {safe_name(t.model.var_names[var])}   P(true) = {self._p(var)}{self._soft(var)}")
        self.say(format_explanation(t.explain(var, self.why)))

    def _p(self, var: int) -> str:
        """P(var) as every table shows it (`core.text.format_probability`: a sampled one to its standard
        error, scientific below 1e-4), and beside
        it how far off it may be: a sampled estimate's 95% interval, "exact", or for LBP "LBP estimate,
        unchecked" (or FLAGGED with the reason: `Round.flags`)."""
        last = self.t.session.last
        row = method_of(last.method)
        errors = row.intervals(last)
        se = float(errors[0][var]) if errors is not None else math.nan
        p = format_probability(float(last.marginals[var]), float(last.log_odds[var]), se)
        return f"{p} ({row.note(last, var)})"

    def _soft(self, var: int) -> str:
        """` [soft evidence P=0.8]` for an unlabelled tuple with soft evidence (a label replaces it)."""
        p = self.t.start.soft.get(var)
        if p is None or var in self.t.labels:
            return ""
        return f"  [soft evidence P={p:g}]"

    def run(self) -> int:
        """Runs until quit or end of input; returns the exit status (130 after Ctrl-C)."""
        self.reader = LineReader(self.stdin, self.stdout, history=self.history, completer=self._complete)
        if self.reader.note:
            self.say(self.reader.note)
        self.say(f"session: {self.t.journal.path}   (h for help)")
        if self.t.start.evidence:
            self.say(self.t.start.evidence.summary())
        if self.t.learning is not None:
            self.say(f"learning the rule probabilities from the labels: {self.t.learning.steps} EM step(s) "
                     f"after each label (`stats` shows them)")
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
            (("u", "undo"), self._undo),
            (("j", "jump", "g", "goto"), self._jump),
            (("search", "find"), self._search),
            (("l", "list", "ls"), self._list),
            (("w", "why"), self._why),
            (("stats",), self._stats),
            (("more",), self._more),
            (("export",), self._export),
            (("h", "help", "?"), lambda a: self.say(HELP) or True),
        ):
            for n in names:
                commands[n] = fn
        self.commands = sorted(set(commands) | {"quit", "exit"})
        while True:
            line = self.reader.read("> ")
            if self.reader.note:
                self.say(self.reader.note)
                self.reader.note = None
            if line is None:
                self.say()
                break
            line = line.strip()
            if not line:
                continue
            if has_keys(line):
                # Arrow keys typed where nothing edits the line (input from a pipe, or a terminal
                # without readline) arrive as escape sequences: name the keys, never echo them raw.
                self.say(f"unknown command '{shown_keys(line)}': editing keys work only when the input "
                         f"is a terminal (h for help)")
                continue
            if line.startswith("/"):
                self._pager = None
                self._search(line[1:])
                continue
            word, _, arg = line.partition(" ")
            if word.lower() in ("q", "quit", "exit"):
                break
            fn = commands.get(word.lower())
            if fn is None:
                self.say(f"unknown command {word!r} (h for help)")
                continue
            if fn != self._more:
                self._pager = None  # a page after an action would show stale ranks
            fn(arg.strip())

    def _moved(self, before: np.ndarray, labelled: set[int]) -> str:
        """The "moved:" line: open alarms (before and after) whose probability changed most."""
        excluded = labelled | set(self.t.labels)
        candidates = np.array([v for v in self.t.alarms.tolist() if v not in excluded], np.int64)
        return moved_line(before, self.t.marginals, candidates, self.t.model.var_names)

    def _undo(self, arg: str) -> bool:
        before, labelled = self.t.marginals, set(self.t.labels)
        out = self.t.undo()
        if out.accepted and out.round is not None:
            self.say(f"ok: {out.message}  ({format_round(out.round)})")
            self.say(self._moved(before, labelled))
            self.show_current()
            return True
        return self._report(out, show=True)

    def _report(self, out: Outcome, show: bool = False) -> bool:
        if out.accepted:
            extra = f"  ({format_round(out.round)})" if out.round else ""
            self.say(f"ok: {out.message}{extra}")
            if show:
                self.show_current()
        else:
            self.say(f"! {out.message}")
        return True

    def _label(self, truth: bool) -> bool:
        before, labelled = self.t.marginals, set(self.t.labels)
        out = self.t.label(truth)
        if out.accepted:
            self.say(f"accepted: {out.message}  ({format_round(out.round)})")
            self.say(self._moved(before, labelled))
            self.show_current()
        else:
            self.say(f"! {out.message}")
        return True

    def _why(self, arg: str) -> bool:
        """`why`: the current alarm again; `why X`: any tuple of the graph, with or without a variable."""
        if not arg:
            self.show_current()
            return True
        try:
            ex = self.t.explain(arg, self.why)
        except KeyError:
            self.say(f"! no tuple {arg!r} in this graph (`/TEXT` searches the alarms)")
            return True
        var = self.t.model.index.get(ex.alarm, -1)  # a tuple with a variable: its error beside it
        shown = self._p(var) if var >= 0 else format_probability(ex.probability)
        self.say(f"{safe_name(ex.alarm)}   P(true) = {shown}")
        self.say(format_explanation(ex))
        return True

    def _jump(self, arg: str) -> bool:
        if not arg:
            self.say("! jump to what? e.g. `j race(3)` or `j 5`")
            return True
        return self._report(self.t.jump(arg), show=True)

    def _search(self, arg: str) -> bool:
        everything = arg == "--all" or arg.endswith(" --all")
        text = arg[:-len("--all")].strip() if everything else arg
        if not text:
            self.say("! search for what? e.g. `/race`")
            return True
        hits = self.t.search(text, limit=None)
        if not hits:
            self.say(f"no alarm matches {text!r}")
            return True

        rank = {v: i for i, v in enumerate(self.t.ranking.tolist(), 1)}

        def line(v: int) -> str:
            name = safe_name(self.t.model.var_names[v])
            if v in self.t.labels:
                how = "carried " if v in self.t.start.labels else "labelled"
                return f"  {how} {'true ' if self.t.labels[v] else 'false'}  {name}"
            return f"  #{rank[v]:<5} {self._p(v):>10}  {name}{self._soft(v)}"

        self.say(f"{len(hits)} alarm{'s' if len(hits) > 1 else ''} match {text!r}")
        self._page(hits, line, len(hits) if everything else PAGE, f"/{text} --all")
        return True

    def _list(self, arg: str) -> bool:
        ranking = self.t.ranking.tolist()
        if arg.lower() == "all":
            n = len(ranking)
        elif arg.isdigit():
            n = int(arg)
        elif arg:
            self.say("! list how many? e.g. `list 20` or `list all`")
            return True
        else:
            n = 10
        skipped = {v for _, v in self.t.skipped}
        rank = {v: i for i, v in enumerate(ranking, 1)}

        def line(v: int) -> str:
            mark = (" (skipped)" if v in skipped else "") + self._soft(v)
            return f"  #{rank[v]:<5} {self._p(v):>10}  {safe_name(self.t.model.var_names[v])}{mark}"

        self._page(ranking, line, n, "list all")
        return True

    def _page(self, items: list[int], line: Callable[[int], str], n: int, everything: str) -> None:
        """Shows `items[:n]`; for more, says how many and how to see them (`more`, `everything`)."""
        for v in items[:n]:
            self.say(line(v))
        self._pager = (items, line, n, everything) if len(items) > n else None
        if self._pager:
            self.say(f"  ... {len(items) - n} more: `more` shows the next {min(PAGE, len(items) - n)}, "
                     f"`{everything}` all of them")

    def _more(self, arg: str) -> bool:
        if self._pager is None:
            self.say("! nothing more to show (`more` continues a long search or list)")
            return True
        items, line, at, everything = self._pager
        self._page(items[at:], line, PAGE, everything)
        if self._pager is not None:
            self._pager = (items, line, at + PAGE, everything)
        return True

    def _export(self, arg: str) -> bool:
        if not arg:
            self.say("! export to which file? e.g. `export labels.txt`")
            return True
        names = self.t.model.var_names
        # The carried labels first, as `fastlbp triage --export` writes them (`session_labels`).
        labels = [(names[v], t) for v, t in self.t.start.labels.items()]
        labels += [(names[v], self.t.labels[v]) for _, v in self.t.order]
        try:
            path = write_labels(Path(arg).expanduser(), labels, source=str(self.t.journal.path))
        except InputError as err:
            self.say(f"! {err}")
            return True
        self.say(f"wrote {len(labels)} label(s) to {path} (use it with `fastlbp rank GRAPH -l {path}`)")
        return True

    def _complete(self, text: str, before: str) -> list[str]:
        """Tab: command words first on the line, alarm names after `j`/`jump`/`search`."""
        words = before.split()
        if not words:
            return [c + " " for c in self.commands if c.startswith(text.lower())]
        if words[0].lower() in ("j", "jump", "g", "goto", "search", "find") and len(words) == 1:
            names = self.t.model.var_names
            hits = [names[v] for v in self.t.ranking.tolist() if names[v].startswith(text)]
            return hits[:200]
        return []

    def _stats(self, arg: str) -> bool:
        st = self.t.stats()
        med = "-" if st["median_round_s"] is None else f"{st['median_round_s'] * 1e3:.1f} ms"
        mx = "-" if st["max_round_s"] is None else f"{st['max_round_s'] * 1e3:.1f} ms"
        self.say(f"  labelled {st['labelled']} ({st['true']} true, {st['false']} false), "
                 f"{st['open']} open, {st['skipped']} skipped")
        self.say(f"  rounds {st['rounds']}, median {med}, max {mx}; last: "
                 f"{st['last_iterations']} iterations, "
                 f"{'converged' if st['last_converged'] else 'not converged'}")
        if st["carried"] or st["soft"]:
            self.say(f"  {self.t.start.evidence.summary()}")
        if st["learning"]:
            self.say(f"  rule probabilities learned from the labels: {self._learned_line()}")
        self.say(f"  session file {st['session']}")
        return True

    def _learned_line(self, shown: int = 5) -> str:
        """`R3 0.999 -> 0.412, R1 0.9 -> 0.85, ...`: the rules that moved most from the graph's values."""
        stated = {r.name: r.probability for r in self.t.model.meta["derivation"].rules}
        now = self.t.learned()
        moved = sorted(now, key=lambda n: -abs(now[n] - stated[n]))
        parts = [f"{safe_name(n)} {stated[n]:.4g} -> {now[n]:.4g}" for n in moved[:shown]
                 if abs(now[n] - stated[n]) >= 1e-4]
        return ", ".join(parts) if parts else "none moved yet"
