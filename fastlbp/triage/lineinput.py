"""The triage prompt's input: line editing and history on a terminal, plain lines otherwise.

On a terminal (stdin and stdout both ttys, Python's `readline` present) a
line is read with `input()`, so GNU readline (or libedit) gives the arrow
keys, Home/End, Ctrl-R search, history (↑/↓, kept across sessions in a
history file the caller names) and Tab completion. Elsewhere (a pipe, a
file, a test) lines are read as they come, and a line holding terminal
escape sequences (arrow keys typed where nothing edits the line) is shown
with the keys named (`stat<left><left>x`), never echoed raw.

    reader = LineReader(sys.stdin, sys.stdout, history=Path("~/.local/share/fastlbp/triage_history"))
    line = reader.read("> ")   # None at the end of input
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from fastlbp.core.text import safe_name

HISTORY_LENGTH = 1000  # lines kept in the history file

# CSI sequences (ESC [ params final), SS3 (ESC O final) and lone ESC + one character.
ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|O[@-~]|.?)", re.S)
KEYS = {
    "[A": "<up>", "[B": "<down>", "[C": "<right>", "[D": "<left>", "OA": "<up>", "OB": "<down>",
    "OC": "<right>", "OD": "<left>", "[H": "<home>", "[F": "<end>", "OH": "<home>", "OF": "<end>",
    "[1~": "<home>", "[4~": "<end>", "[2~": "<insert>", "[3~": "<delete>", "[5~": "<page up>",
    "[6~": "<page down>",
}
CONTROL_KEYS = {"\x7f": "<backspace>", "\x08": "<backspace>", "\x01": "<ctrl-a>", "\x05": "<ctrl-e>"}


def has_keys(line: str) -> bool:
    """Whether `line` holds an escape sequence or an editing control character (not tab)."""
    return "\x1b" in line or any(c in line for c in CONTROL_KEYS)


def shown_keys(line: str) -> str:
    r"""`line` for display: escape sequences as key names, other control characters escaped.

    >>> shown_keys("stat\x1b[D\x1b[Dx")
    'stat<left><left>x'
    """
    out, at = [], 0
    for m in ESCAPE.finditer(line):
        out.append(_plain(line[at:m.start()]))
        out.append(KEYS.get(m.group()[1:], safe_name(m.group())))
        at = m.end()
    out.append(_plain(line[at:]))
    return "".join(out)


def _plain(text: str) -> str:
    return "".join(CONTROL_KEYS[c] if c in CONTROL_KEYS else safe_name(c) for c in text)


class LineReader:
    """Reads lines: with readline's editing and history on a terminal, plainly otherwise.

    Args:
        stdin, stdout: the streams; editing needs both to be the process's
            terminal (`sys.stdin`, `sys.stdout`, ttys).
        history: the history file (made if missing); None keeps no history.
        completer: (word so far, line so far) -> candidates, for Tab.
    """

    def __init__(self, stdin: TextIO, stdout: TextIO, *, history: Path | None = None,
                 completer: Callable[[str, str], list[str]] | None = None):
        self.stdin, self.stdout = stdin, stdout
        self.history = history
        self.note: str | None = None  # why the history is not kept, for the user
        self._readline = None
        self._matches: list[str] = []
        if stdin is sys.stdin and stdout is sys.stdout and _isatty(stdin) and _isatty(stdout):
            try:
                import readline
            except ImportError:  # Python built without it: plain lines
                readline = None
            if readline is not None:
                self._readline = readline
                self._setup(readline, completer)

    @property
    def editing(self) -> bool:
        """Whether lines are read with readline's editing (a terminal)."""
        return self._readline is not None

    def _setup(self, readline, completer) -> None:
        readline.set_auto_history(False)  # added by `read`, without repeats and blank lines
        readline.clear_history()
        if completer is not None:
            def complete(text: str, state: int) -> str | None:
                if state == 0:
                    self._matches = completer(text, readline.get_line_buffer()[:readline.get_begidx()])
                return self._matches[state] if state < len(self._matches) else None

            readline.set_completer(complete)
            readline.set_completer_delims(" \t\n")  # tuple names hold ( , ): complete them whole
            libedit = getattr(readline, "backend", "") == "editline" or "libedit" in (readline.__doc__ or "")
            readline.parse_and_bind("bind ^I rl_complete" if libedit else "tab: complete")
        if self.history is None:
            return
        try:
            self.history.parent.mkdir(parents=True, exist_ok=True)
            self.history.touch(exist_ok=True)
            readline.read_history_file(self.history)
            readline.set_history_length(HISTORY_LENGTH)
            if readline.get_current_history_length() > HISTORY_LENGTH:
                readline.write_history_file(self.history)  # trims the file
        except OSError as err:
            self.note = f"note: no command history: {self.history}: {err.strerror or err}"
            self.history = None

    def read(self, prompt: str) -> str | None:
        """The next line without its line break; None at the end of input."""
        if self._readline is None:
            self.stdout.write(prompt)
            self.stdout.flush()
            line = self.stdin.readline()
            return line.rstrip("\r\n") if line else None
        try:
            line = input(prompt)
        except EOFError:
            return None
        self._remember(line)
        return line

    def _remember(self, line: str) -> None:
        rl = self._readline
        line = line.strip()  # Tab completion leaves a space after a command
        if not line:
            return
        n = rl.get_current_history_length()
        if n and rl.get_history_item(n) == line:
            return
        rl.add_history(line)
        if self.history is not None:
            try:  # appended line by line: a killed session keeps its history too
                rl.append_history_file(1, self.history)
            except OSError as err:
                self.note = f"note: the command history cannot be saved: {err.strerror or err}"
                self.history = None


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
