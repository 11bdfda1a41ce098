"""The Soufflé lexer: a program's text to tokens (comments dropped, `#line` markers followed).

Its own module so that the parser (`datalog.souffle`) and the component expander
(`datalog.souffle_components`), which re-tokenizes a component's arguments, share it.
"""

from __future__ import annotations

import dataclasses
import os
import re

from datalog.souffle_ast import NUMBER_PATTERN, Pos, number_value, symbol_problem

# Lexer ----------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n\f\v]+)
  | (?P<comment>//[^\n]*)
  | (?P<block>/\*)
  | (?P<line>(?<![^\n])\#line[ \t]+[0-9]+[ \t]+"[^"\n]*"[^\n]*)
  | (?P<float>[0-9]+\.[0-9]+)
  | (?P<unsigned>(?:""" + NUMBER_PATTERN + r""")u\b)
  | (?P<number>""" + NUMBER_PATTERN + r""")
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<badstring>")
  | (?P<adt>\$[A-Za-z_][A-Za-z0-9_]*)                        # $Branch: an ADT's constructor
  | (?P<ident>[A-Za-z_?][A-Za-z0-9_?]*(?:\.[A-Za-z_?][A-Za-z0-9_?]*)*)  # a.b: a component's member
  | (?P<punct>:-|<:|!=|<=|>=|[(),.:;!=<>|+\-*/%^{}\[\]])
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)

_MINUS_NUMBER = re.compile(r"-(?:" + NUMBER_PATTERN + r")(?![.0-9A-Za-z_])")  # whole: not -12 of -123.7
_LINE = re.compile(r'\#line[ \t]+([0-9]+)[ \t]+"([^"\n]*)"')
MAX_ALTERNATIVES = 4096  # rules one rule's disjunctions may expand to
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
_OTHER_CHARS = {
    "&": "bitwise operators are written band, bor, bxor, bnot in Soufflé ('&' is not an operator)",
    "~": "bitwise operators are written band, bor, bxor, bnot in Soufflé ('~' is not an operator)",
    "$": "'$' (Soufflé's counter) is not supported; an ADT value is written $Branch(...)",
    "@": "user-defined functors are not supported",
    "#": "preprocessor directives must start a line (#include, #define)",
}


@dataclasses.dataclass(frozen=True)
class Token:
    kind: str  # ident, number, string, punct, end
    text: str
    pos: Pos
    offset: int
    value: int | str | None = None


def tokenize(text: str, path: str | None) -> list[Token]:
    """The tokens of `text`, comments dropped, ending with an `end` token.

    A character or construct that cannot start a token becomes a `bad` token
    holding its message, and lexing stops there: the parser reports it when
    it gets there, so the first problem in the file is the one reported.
    A preprocessor's `#line N "FILE"` marker sets the position of the next line.
    """
    tokens: list[Token] = []
    line, line_start, i = 1, 0, 0
    file: str | None = None
    n = len(text)

    def pos_at(offset: int) -> Pos:
        return Pos(line, offset - line_start + 1, file)

    while i < n:
        m = _TOKEN.match(text, i)
        kind, tok = m.lastgroup, m.group()
        pos = pos_at(i)
        bad = None
        if kind == "line":
            mark = _LINE.match(tok)
            end = text.find("\n", i)
            end = n if end < 0 else end + 1
            line, line_start, i = int(mark.group(1)), end, end
            file = None if path is not None and mark.group(2) == path else mark.group(2)
            if file is not None and path is not None and os.path.isabs(path):  # pcpp's paths are relative
                file = os.path.abspath(file)
            continue
        if kind == "block":
            end = text.find("*/", i + 2)
            if end < 0:
                bad = "unterminated comment: '/*' has no '*/'"
            tok = text[i:end + 2]
        elif kind == "badstring":
            bad = "unterminated string: '\"' has no closing '\"' on this line"
        elif kind == "float":
            tokens.append(Token("float", tok, pos, i, float(tok)))
        elif kind == "unsigned":
            tokens.append(Token("unsigned", tok, pos, i, number_value(tok[:-1])))
        elif kind == "punct" and tok == "-" and _MINUS_NUMBER.match(text, i) and not (
                tokens and (tokens[-1].kind in ("ident", "number", "string", "float", "unsigned")
                            or tokens[-1].text == ")")):
            tok = _MINUS_NUMBER.match(text, i).group()  # a negative constant, not a subtraction
            tokens.append(Token("number", tok, pos, i, number_value(tok)))
        elif kind == "other":
            bad = _OTHER_CHARS.get(tok, f"unexpected character {tok!r}")
        elif kind in ("ident", "punct", "adt"):
            tokens.append(Token(kind, tok, pos, i))
        elif kind == "number":
            tokens.append(Token("number", tok, pos, i, number_value(tok)))
        elif kind == "string":
            body = tok[1:-1]
            if "\\" in body:
                parts = re.split(r"(\\.)", body, flags=re.DOTALL)  # escapes, left to right
                unknown = [p for p in parts[1::2] if p[1] not in _ESCAPES]
                if unknown:
                    bad = f"unknown escape '{unknown[0]}' in a string (known: \\\" \\\\ \\n \\t)"
                else:
                    body = "".join(_ESCAPES[p[1]] if k % 2 else p for k, p in enumerate(parts))
            if bad is None:
                bad = symbol_problem(body)
            if bad is None:
                tokens.append(Token("string", tok, pos, i, body))
        if bad is not None:
            tokens.append(Token("bad", tok, pos, i, bad))
            break
        newlines = tok.count("\n")
        if newlines:
            line += newlines
            line_start = i + tok.rfind("\n") + 1
        i += len(tok)
    tokens.append(Token("end", "", pos_at(n), n))
    return tokens
