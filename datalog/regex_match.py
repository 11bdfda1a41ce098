"""Whole-string regular-expression matching in time linear in the text, for Soufflé's `match`.

    m = compile_pattern("(a+)+$")      # a Matcher, or raises PatternError / UnsupportedPattern
    m.fullmatch("a" * 41 + "b")         # False, at once (Python's `re` backtracks for hours here)

Python's `re` (like std::regex, which Soufflé uses) backtracks: `(a+)+$` on 41 characters of `a`
and one `b` tries 2^41 ways. This matcher is built on the automaton instead, as RE2 is: the pattern
(parsed by Python's own parser, so it reads the same syntax `re` reads) becomes a Thompson NFA, and
the text is run through the set of its states, each set kept as a state of a lazily built DFA; the
cost is at most (pattern size x text length) whatever the pattern, and one lookup per character once
the DFA states are built. It answers as `re.fullmatch(pattern, text) is not None` does.

What an automaton cannot do is not matched: a backreference (`\\1`), a lookahead or lookbehind, a
word boundary (`\\b`, `\\B`) raise `UnsupportedPattern`, naming it. What std::regex's ECMAScript
grammar refuses and Python's accepts (inline flags `(?i)`, possessive `a*+` and atomic `(?>...)`
groups, `\\A`, `\\Z`) raises `PatternError`, as an invalid pattern does (Soufflé: no value).
A pattern past `MAX_STATES` NFA states (`a{1000}{1000}`) raises `PatternError` too.
"""

from __future__ import annotations

try:
    import re._constants as _c
    import re._parser as _parser
except ImportError:  # Python < 3.11
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _parser  # type: ignore[no-redef]

import re
import warnings

MAX_STATES = 10_000  # NFA states of one pattern (counted repetitions are expanded)
_MAX_DFA_STATES = 4_096  # cached DFA states of one pattern; past it the cache starts again
_MAX_TRANSITIONS = 1_000_000  # cached transitions of one pattern (one per state and character seen)


class PatternError(ValueError):
    """An invalid pattern, or one ECMAScript (std::regex) would not accept: it has no value."""


class UnsupportedPattern(ValueError):
    """A pattern only a backtracking matcher can run (a backreference, a lookaround, a word boundary)."""


def _category(cat) -> object:
    name = getattr(cat, "name", str(cat)).replace("_UNI_", "_").replace("_LOC_", "_")
    tests = {
        "CATEGORY_DIGIT": str.isdecimal,
        "CATEGORY_NOT_DIGIT": lambda ch: not ch.isdecimal(),
        "CATEGORY_SPACE": str.isspace,
        "CATEGORY_NOT_SPACE": lambda ch: not ch.isspace(),
        "CATEGORY_WORD": lambda ch: ch.isalnum() or ch == "_",
        "CATEGORY_NOT_WORD": lambda ch: not (ch.isalnum() or ch == "_"),
        "CATEGORY_LINEBREAK": lambda ch: ch == "\n",
        "CATEGORY_NOT_LINEBREAK": lambda ch: ch != "\n",
    }
    if name not in tests:
        raise PatternError(f"unknown character class {name}")
    return tests[name]


def _char_set(items) -> object:
    """A test of one character for an `[...]` class."""
    negate = False
    chars: set[str] = set()
    ranges: list[tuple[int, int]] = []
    cats = []
    for op, av in items:
        name = getattr(op, "name", str(op))
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            chars.add(chr(av))
        elif name == "RANGE":
            ranges.append(av)
        elif name == "CATEGORY":
            cats.append(_category(av))
        else:
            raise PatternError(f"unsupported item {name} in a character class")

    def test(ch: str) -> bool:
        hit = ch in chars or any(lo <= ord(ch) <= hi for lo, hi in ranges) or any(t(ch) for t in cats)
        return hit != negate

    return test


class Matcher:
    """One compiled pattern: its NFA and the DFA states built so far."""

    def __init__(self, pattern: str):
        try:
            with warnings.catch_warnings():  # "possible nested set": std::regex reads it as it is written
                warnings.simplefilter("ignore")
                parsed = _parser.parse(pattern)
        except re.error as err:
            raise PatternError(str(err)) from None
        except RecursionError:
            raise PatternError("the pattern nests too deeply") from None
        flags = parsed.state.flags & ~(_c.SRE_FLAG_UNICODE)
        if flags:
            raise PatternError("inline flags such as (?i) are not ECMAScript")
        # NFA: per state (kind, arg, out1, out2): "char" tests arg and goes to out1; "split" goes to
        # out1 and out2; "begin"/"end" pass at the text's start/end only; "match" accepts.
        self.kind: list[str] = []
        self.arg: list = []
        self.out1: list[int] = []
        self.out2: list[int] = []
        accept = self._state("match")
        try:
            self.start = self._seq(list(parsed), accept)
        except RecursionError:
            raise PatternError("the pattern nests too deeply") from None
        self.dfa: dict = {}
        self.transitions = 0  # cached in self.dfa
        self.begin = self._closure({self.start}, at_start=True)

    # building ------------------------------------------------------------------
    def _state(self, kind: str, arg=None, out1: int = -1, out2: int = -1) -> int:
        if len(self.kind) >= MAX_STATES:
            raise PatternError(f"the pattern makes more than {MAX_STATES:,} automaton states (its "
                               "counted repetitions expanded)")
        self.kind.append(kind)
        self.arg.append(arg)
        self.out1.append(out1)
        self.out2.append(out2)
        return len(self.kind) - 1

    def _seq(self, items, nxt: int) -> int:
        """The NFA of a sequence of parsed items, ending in state `nxt`; returns its entry state."""
        for op, av in reversed(items):
            nxt = self._item(op, av, nxt)
        return nxt

    def _item(self, op, av, nxt: int) -> int:
        name = getattr(op, "name", str(op))
        if name == "LITERAL":
            ch = chr(av)
            return self._state("char", lambda c, ch=ch: c == ch, nxt)
        if name == "NOT_LITERAL":
            ch = chr(av)
            return self._state("char", lambda c, ch=ch: c != ch, nxt)
        if name == "ANY":
            return self._state("char", lambda c: c != "\n", nxt)
        if name == "IN":
            return self._state("char", _char_set(av), nxt)
        if name == "CATEGORY":
            return self._state("char", _category(av), nxt)
        if name == "SUBPATTERN":
            _, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                raise PatternError("inline flags such as (?i:...) are not ECMAScript")
            return self._seq(list(sub), nxt)
        if name == "BRANCH":
            alternatives = av[1]
            entry = self._seq(list(alternatives[-1]), nxt)
            for alt in reversed(alternatives[:-1]):
                entry = self._state("split", None, self._seq(list(alt), nxt), entry)
            return entry
        if name in ("MAX_REPEAT", "MIN_REPEAT"):  # lazy or greedy: the same language
            lo, hi, sub = av
            sub = list(sub)
            if hi == _c.MAXREPEAT:
                loop = self._state("split", None, -1, nxt)
                self.out1[loop] = self._seq(sub, loop)
                entry = loop
            else:
                entry = nxt
                for _ in range(hi - lo):
                    entry = self._state("split", None, self._seq(sub, entry), nxt)
            for _ in range(lo):
                entry = self._seq(sub, entry)
            return entry
        if name == "AT":
            at = getattr(av, "name", str(av))
            if at == "AT_BEGINNING":
                return self._state("begin", None, nxt)
            if at == "AT_END":
                return self._state("end", None, nxt)
            if at in ("AT_BOUNDARY", "AT_NON_BOUNDARY", "AT_UNI_BOUNDARY", "AT_UNI_NON_BOUNDARY",
                      "AT_LOC_BOUNDARY", "AT_LOC_NON_BOUNDARY"):
                raise UnsupportedPattern("a word boundary (\\b, \\B)")
            raise PatternError(f"anchor {at} is not ECMAScript")
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            raise UnsupportedPattern("a backreference (\\1)")
        if name in ("ASSERT", "ASSERT_NOT"):
            raise UnsupportedPattern("a lookahead or lookbehind ((?=...), (?!...), (?<=...))")
        raise PatternError(f"{name.lower().replace('_', ' ')} is not ECMAScript")

    # running -------------------------------------------------------------------
    def _closure(self, states, at_start: bool = False, at_end: bool = False) -> frozenset:
        """The states reachable from `states` without reading a character. An "end" state that cannot
        pass yet is kept (it passes at the text's end); a "begin" state past the start never passes."""
        out = set()
        stack = list(states)
        kind, out1, out2 = self.kind, self.out1, self.out2
        while stack:
            s = stack.pop()
            if s in out:
                continue
            out.add(s)
            k = kind[s]
            if k == "split":
                stack.append(out1[s])
                stack.append(out2[s])
            elif (k == "begin" and at_start) or (k == "end" and at_end):
                stack.append(out1[s])
        return frozenset(out)

    def fullmatch(self, text: str) -> bool:
        """Whether the whole of `text` matches (as `re.fullmatch`)."""
        current = self.begin
        kind, arg, out1 = self.kind, self.arg, self.out1
        for ch in text:
            row = self.dfa.get(current)
            if row is None:
                if len(self.dfa) >= _MAX_DFA_STATES:
                    self.dfa.clear()
                    self.transitions = 0
                row = self.dfa[current] = {}
            nxt = row.get(ch)
            if nxt is None:
                nxt = self._closure(out1[s] for s in current if kind[s] == "char" and arg[s](ch))
                self.transitions += 1
                if self.transitions > _MAX_TRANSITIONS:  # texts of many distinct characters: start again
                    self.dfa.clear()
                    self.transitions = 0
                    row = self.dfa[current] = {}
                row[ch] = nxt
            if not nxt:
                return False
            current = nxt
        final = self._closure(current, at_start=not text, at_end=True)
        return any(kind[s] == "match" for s in final)


def compile_pattern(pattern: str) -> Matcher:
    """The matcher of `pattern`; see the module docstring for what raises."""
    return Matcher(pattern)


__all__ = ["compile_pattern", "Matcher", "PatternError", "UnsupportedPattern", "MAX_STATES"]
