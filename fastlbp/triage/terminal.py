"""The terminal front end of a triage session: a line-based command loop.

    Terminal(Triage.open(model, path)).run()   # reads stdin, writes stdout
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from fastlbp.triage.explain import format_explanation
from fastlbp.triage.state import Outcome, RoundInfo, Triage
from fastlbp.writers import safe_name

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


def format_round(info: RoundInfo | None) -> str:
    """`round 4.2 ms, 17 iterations, converged` (empty for an action without a round)."""
    if info is None:
        return ""
    conv = "converged" if info.converged else f"NOT converged (last change {info.delta:.2g})"
    if info.remedy:
        conv = f"{'converged' if info.converged else 'NOT converged'} with {info.remedy} (LBP alone did not)"
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
        # Tuple names come from the input: escape control characters line by line, so a name
        # can never move the cursor, recolour or clear the user's terminal.
        text = "\n".join(safe_name(line) for line in text.split("\n"))
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
            extra = f"  ({format_round(out.round)})" if out.round else ""
            self.say(f"ok: {out.message}{extra}")
            if show:
                self.show_current()
        else:
            self.say(f"! {out.message}")
        return True

    def _label(self, truth: bool) -> bool:
        out = self.t.label(truth)
        if out.accepted:
            self.say(f"accepted: {out.message}  ({format_round(out.round)})")
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
