"""Hostile inputs for the Datalog front end and derivation.npz (issue 41): expansions, limits, arithmetic.

    python benchmarks/reliability_frontend.py                 # every case, about 10 minutes on 2 cores
    python benchmarks/reliability_frontend.py --only npz      # one group (npz, program, functor, facts)

Each case is a file (or a few) written to a temporary folder and a `fastlbp` command run on it in a
process of its own under `ulimit -v 4000000` (RLIMIT_AS, as containers and batch systems set it) and
a wall-clock limit. An outcome is

* ok: exit 0, and the output is what the case expects, where it says (a known answer);
* clean error: exit 2 with `error: ...` and no traceback, where an error is right;
* wrong answer: exit 0 with another answer, or where the input must be refused (a label given twice);
* traceback: exit 1 or a Python traceback;
* hang: past the wall-clock limit (or killed by a signal).

The cases are the issue's (each item's reproducer) and variants of each: generated .dl programs
(disjunctions, heads x alternatives, macro bombs, include cycles, component cycles and bombs, deep
expressions, catastrophic regular expressions, range, cat, division at INT_MIN, to_number), facts that
feed them, and derivation.npz files with one array or member broken. The last line is the table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from datalog import npz  # noqa: E402
from datalog.derivation import DerivationGraph, Rule  # noqa: E402

ADDRESS_SPACE = 4_000_000 * 1024  # ulimit -v 4000000 (KiB)
OK, ERROR = "ok", "error"


class Case:
    """files: {name: str | bytes}; command: fastlbp's arguments ({d}: the folder); expect: OK (with
    `check` on the output's text, when given) or ERROR (with `message` in stderr, when given)."""

    def __init__(self, group, name, files, command, expect, message=None, check=None, timeout=300,
                 address_space=ADDRESS_SPACE):
        self.group, self.name, self.files, self.command = group, name, files, command
        self.expect, self.message, self.check = expect, message, check
        self.timeout, self.address_space = timeout, address_space


def ground(program="p.dl", *extra):
    return ["ground", "{d}/" + program, "--facts", "{d}", "-o", "{d}/out.json", *extra]


def tuples_of(out_json: str) -> set[str]:
    return set(json.loads(out_json)["tuples"])


# derivation.npz ---------------------------------------------------------------------------------------

def _graph() -> DerivationGraph:
    tuples = ["a(1)", "b(1)", "c(1)", "d(1)"]
    return DerivationGraph(
        tuples=tuples, rules=[Rule("R0", 0.9, "b(x) :- a(x)."), Rule("R1", 0.8, None)],
        clause_rule=np.array([0, 1, 1], np.int32), clause_head=np.array([1, 2, 3], np.int32),
        body_offsets=np.array([0, 1, 2, 4], np.int64), body=np.array([0, 1, 0, 2], np.int32),
        priors={0: 0.7}, alarms=np.array([2, 3], np.int32), labels={2: True}, truth={3: False},
        source="g", annotations={})


def _arrays() -> dict[str, np.ndarray]:
    buf = npz.dumps(_graph())
    buf.seek(0)
    with np.load(buf) as z:
        return {k: z[k] for k in z.files}


def _npz(arrays: dict, extra: dict | None = None, compressed: bool = False) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    if extra:
        with zipfile.ZipFile(buf, "a") as zf:
            for name, data in extra.items():
                zf.writestr(name, data)
    return buf.getvalue()


def _npy_header(descr: str, shape: tuple, data: bytes = b"") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + data


def npz_cases() -> list[Case]:
    base = _arrays()
    cases = [Case("npz", "valid", {"g.npz": _npz(base)}, ["info", "{d}/g.npz"], OK)]

    def broken(name, change, message=None, extra=None, compressed=False):
        a = {k: v.copy() for k, v in base.items()}
        change(a)
        cases.append(Case("npz", name, {"g.npz": _npz(a, extra, compressed)}, ["info", "{d}/g.npz"], ERROR,
                          message))

    broken("labels twice", lambda a: a.update({"labels.keys": np.array([2, 2]),
                                              "labels.values": np.array([True, False])}), "given twice")
    broken("labels twice, same value", lambda a: a.update(
        {"labels.keys": np.array([2, 2]), "labels.values": np.array([True, True])}), "given twice")
    broken("truth twice", lambda a: a.update({"truth.keys": np.array([3, 3]),
                                             "truth.values": np.array([True, False])}), "given twice")
    broken("priors twice", lambda a: a.update({"priors.keys": np.array([0, 0]),
                                              "priors.values": np.array([0.5, 0.6])}), "given twice")
    broken("tuples.offsets shape (0,)", lambda a: a.update({"tuples.offsets": np.zeros(0, np.int64)}),
           "tuples.offsets")
    broken("rules.offsets shape (0,)", lambda a: a.update({"rules.offsets": np.zeros(0, np.int64)}), "rules")
    for k in (1, 2, 4):
        broken(f"body_offsets C+{k + 1}", lambda a, k=k: a.update(
            body_offsets=np.concatenate([a["body_offsets"], [a["body_offsets"][-1]] * k])), "body_offsets")
    broken("body_offsets C", lambda a: a.update(body_offsets=a["body_offsets"][:-1]), "body_offsets")
    broken("rules.probability one short", lambda a: a.update(
        {"rules.probability": a["rules.probability"][:-1]}), "rules.probability")
    broken("rules.probability one long", lambda a: a.update(
        {"rules.probability": np.concatenate([a["rules.probability"], [0.5]])}), "rules.probability")
    broken("rules.text.offsets one short", lambda a: a.update(
        {"rules.text.offsets": a["rules.text.offsets"][:-1]}), "rules.text.offsets")
    broken("labels.values one short", lambda a: a.update({"labels.values": np.zeros(0, bool)}),
           "labels.values")
    broken("priors.values one long", lambda a: a.update({"priors.values": np.array([0.5, 0.5])}),
           "priors.values")
    broken("clause_head one short", lambda a: a.update(clause_head=a["clause_head"][:-1]), "clause_head")
    broken("body_offsets past body", lambda a: a["body_offsets"].__setitem__(-1, 10**12), "body_offsets")
    broken("negative offsets", lambda a: a["body_offsets"].__setitem__(1, -5), "body_offsets")
    broken("tuples.offsets past bytes", lambda a: a["tuples.offsets"].__setitem__(-1, 10**9),
           "tuples.offsets")
    broken("body index out of range", lambda a: a.update(body=a["body"] + 100), "body")
    broken("label key out of range", lambda a: a.update({"labels.keys": np.array([99])}), "labels.keys")
    broken("NaN probability", lambda a: a["rules.probability"].__setitem__(0, np.nan), "probability")
    broken("annotations 100,000 deep", lambda a: a.update(
        annotations=np.frombuffer(b"[" * 100_000 + b"]" * 100_000, np.uint8)), "nested too deeply")
    broken("annotations objects 100,000 deep", lambda a: a.update(
        annotations=np.frombuffer(b'{"a":' * 100_000 + b"1" + b"}" * 100_000, np.uint8)), "annotations")
    broken("annotations duplicate key", lambda a: a.update(
        annotations=np.frombuffer(b'{"relations": {}, "relations": {"r": {}}}', np.uint8)), "twice")
    broken("annotations not UTF-8", lambda a: a.update(annotations=np.frombuffer(b"\xff\xfe", np.uint8)),
           "annotations")
    broken("member without .npy", lambda a: None, "is not a .npy array", extra={"extra": b"raw"})
    broken("member without .npy, empty", lambda a: None, "is not a .npy array", extra={"notes.txt": b""})
    broken("declared shape 10^13", lambda a: a.pop("body"), "declares shape",
           extra={"body.npy": _npy_header("<i4", (10**13,), b"\0" * 16)})
    broken("declared shape 10^13 x 10^13", lambda a: a.pop("body"), "declares shape",
           extra={"body.npy": _npy_header("<i4", (10**13, 10**13), b"\0" * 16)})
    broken("declared shape one short", lambda a: a.pop("body"), "declares shape",
           extra={"body.npy": _npy_header("<i4", (5,), b"\0" * 16)})
    broken("object dtype", lambda a: a.pop("body"), "Python objects",
           extra={"body.npy": _npy_header("|O", (2,), b"\0" * 16)})
    broken("big-endian body", lambda a: a.update(body=a["body"].astype(">i4")), "dtype")
    broken("2-D body", lambda a: a.update(body=a["body"].reshape(2, 2)), "dimensions")
    broken("0-d version as 1-d", lambda a: a.update(version=np.array([1])), "version")
    broken("member twice", lambda a: None, None, extra={"body.npy": _npy_header("<i4", (4,), b"\0" * 16)})
    broken("compressed bomb", lambda a: a.update(body=np.zeros(200_000_000, np.int32)), None, compressed=True)
    valid = _npz(base)
    for k in range(40):  # bytes flipped through the archive: headers, data (CRC), directory
        data = bytearray(valid)
        i = (k * 7919 * 13 + k * k) % len(data)
        data[i] ^= 0xFF
        cases.append(Case("npz", f"byte {i} flipped", {"g.npz": bytes(data)}, ["info", "{d}/g.npz"], "any"))
    cases.append(Case("npz", "truncated", {"g.npz": valid[: len(valid) // 2]}, ["info", "{d}/g.npz"], ERROR))
    cases.append(Case("npz", "empty file", {"g.npz": b""}, ["info", "{d}/g.npz"], ERROR))
    return cases


# Programs ---------------------------------------------------------------------------------------------

HEAD = ".decl a(x: number)\n.decl b(x: number)\n.output a\nb(1).\n"


def program_cases() -> list[Case]:
    cases = []

    def prog(name, text, expect, message=None, check=None, files=None, extra=(), **kw):
        cases.append(Case("program", name, {"p.dl": text, **(files or {})}, ground("p.dl", *extra), expect,
                          message, check, **kw))

    # 10: disjunctions and heads
    for n in (4_097, 20_000, 100_000):
        prog(f"disjunction of {n:,}", HEAD + "a(x) :- " + " ; ".join(["b(x)"] * n) + ".\n", ERROR, "4,096")
    prog("disjunction of 4,096", HEAD + "a(x) :- " + " ; ".join(["b(x)"] * 4_096) + ".\n", OK,
         check=lambda out: tuples_of(out) == {"a(1)", "b(1)"})
    for heads, alts in ((300, 3_000), (65, 64), (2, 3_000)):
        prog(f"{heads} heads x {alts:,} alternatives", HEAD + ", ".join(["a(x)"] * heads) + " :- "
             + " ; ".join(["b(x)"] * alts) + ".\n", ERROR, "limit 4,096")
    for k in (13, 20, 40):
        prog(f"product of {k} groups", HEAD + "a(x) :- " + ", ".join(["(b(x) ; b(x))"] * k) + ".\n", ERROR,
             "limit 4,096")
    prog("nested disjunctions", HEAD + "a(x) :- " + "(" * 30 + " ; ".join(["b(x)"] * 3) + ")" * 30 + ".\n",
         OK)
    # 11: macros
    for levels, grow in ((21, "(A{p}+A{p})"), (30, "A{p} A{p}"), (16, "(A{p}+A{p}+A{p})"), (64, "A{p},A{p}")):
        lines = ["#define A0 1"] + [f"#define A{k} " + grow.format(p=k - 1) for k in range(1, levels + 1)]
        prog(f"macro bomb {levels} levels {grow}", "\n".join(lines) + f"\n{HEAD}a(A{levels}).\n", ERROR,
             "macro expansion")
    chain = "#define B0 1\n" + "".join(f"#define B{k} B{k - 1}\n" for k in range(1, 3_001))
    prog("macro chain 3,000 deep", chain + HEAD + "a(B3000).\n", ERROR, "nest")
    prog("macro chain 50 deep", "#define B0 1\n" + "".join(f"#define B{k} B{k - 1}\n" for k in range(1, 51))
         + HEAD + "a(B50).\n", OK, check=lambda out: "a(1)" in tuples_of(out))
    prog("self-referencing macro", "#define X X+1\n" + HEAD + "a(x) :- b(x), x < X.\n", ERROR)
    # 6: #error
    prog("#error taken", "#define X 1\n#if X\n#error stop here\n#endif\n" + HEAD, ERROR, "#error stop here")
    prog("#error in #else taken", "#if 0\n#else\n#error else branch\n#endif\n" + HEAD, ERROR, "#error else")
    prog("#error not taken", "#if 0\n#error never\n#endif\n" + HEAD + "a(x) :- b(x).\n", OK,
         check=lambda out: "a(1)" in tuples_of(out))
    prog("#error in an include", '#include "e.dl"\n' + HEAD, ERROR, "#error included",
         files={"e.dl": "#error included\n"})
    # 16: includes
    prog("include itself", '#include "p.dl"\n' + HEAD, ERROR, "includes itself")
    prog("include mutual", '#include "m1.dl"\n' + HEAD, ERROR, "m1.dl -> m2.dl -> m1.dl",
         files={"m1.dl": '#include "m2.dl"\n', "m2.dl": '#include "m1.dl"\n'})
    prog("include 3-cycle", '#include "c1.dl"\n' + HEAD, ERROR, "c1.dl -> c2.dl -> c3.dl -> c1.dl",
         files={"c1.dl": '#include "c2.dl"\n', "c2.dl": '#include "c3.dl"\n', "c3.dl": '#include "c1.dl"\n'})
    prog("include guard", '#ifndef G\n#define G\n#include "p.dl"\n' + HEAD + "a(x) :- b(x).\n#endif\n", OK,
         check=lambda out: "a(1)" in tuples_of(out))
    deep = {f"f{k}.dl": f'#include "f{k + 1}.dl"\n' for k in range(70)}
    deep["f70.dl"] = ""
    prog("include chain of 70 files", '#include "f0.dl"\n' + HEAD, ERROR, "nests too deeply", files=deep)
    prog("include a missing file", '#include "nope.dl"\n' + HEAD, ERROR)
    prog("include a directory", '#include "sub"\n' + HEAD, ERROR, files={"sub/x": ""})
    prog("include /dev/zero", '#include "/dev/zero"\n' + HEAD, ERROR, "not a regular file")
    prog("include /dev/urandom", '#include "/dev/urandom"\n' + HEAD, ERROR)
    prog("input filename=/dev/zero", ".decl r(x: symbol)\n.input r(filename=\"/dev/zero\")\n.output r\n",
         ERROR, "not a regular file")
    # 12: components
    prog("component inits itself", ".comp A {\n .decl r(x: number)\n .init a = A\n}\n.init x = A\n" + HEAD,
         ERROR, "instantiates itself")
    prog("components init each other", ".comp A {\n .init b = B\n}\n.comp B {\n .init a = A\n}\n.init x = A\n"
         + HEAD, ERROR, "A -> B -> A")
    prog("component 3-cycle", ".comp A {\n .init b = B\n}\n.comp B {\n .init c = C\n}\n"
         ".comp C {\n .init a = A\n}\n.init x = A\n" + HEAD, ERROR, "A -> B -> C -> A")
    prog("component through a parameter", ".comp A<T> {\n .init a = T<T>\n}\n.init x = A<A>\n" + HEAD, ERROR,
         "instantiates itself")
    prog("component inherits itself", ".comp A : A { }\n.init x = A\n" + HEAD, ERROR)
    prog("components doubling 20 levels", ".comp C0 {\n .decl r(x: number)\n}\n" + "".join(
        f".comp C{k} {{\n .init a = C{k - 1}\n .init b = C{k - 1}\n}}\n" for k in range(1, 21))
        + ".init x = C20\n" + HEAD, ERROR, "10,000 instances")
    prog("components nested fine", ".comp B {\n .decl r(x: number)\n r(1).\n}\n.comp A {\n .init b = B\n}\n"
         ".init x = A\n.output x.b.r\n" + HEAD, OK, check=lambda out: "x.b.r(1)" in tuples_of(out))
    # 16: expressions
    for n in (102, 500, 5_000):  # 101 terms: 100 operators deep, the limit
        prog(f"sum of {n} terms", HEAD + "a(" + "+".join(["1"] * n) + ").\n", ERROR, "operators deep")
    prog("sum of 100 terms", HEAD + "a(y) :- b(x), y = " + "+".join(["x"] * 100) + ".\n", OK,
         check=lambda out: "a(100)" in tuples_of(out))
    for n in (101, 5_000, 100_000):
        prog(f"{n} nested parentheses", HEAD + "a(" + "(" * n + "1" + ")" * n + ").\n", ERROR,
             "nests more than")
    for n in (1_000, 20_000):
        prog(f"{n} unary minus", HEAD + "a(y) :- b(x), y = " + "- " * n + "x.\n", ERROR, "nests more than")
    prog("3,000 nested cat", ".decl s(x: symbol)\n.output s\ns(" + "cat(" * 3_000 + '"a"' + ")" * 3_000
         + ").\n", ERROR, "nests more than")
    prog("5,000 nested records", HEAD + "a(" + "[" * 5_000 + "]" * 5_000 + ").\n", ERROR)
    prog("5,000 nested body parentheses", HEAD + "a(x) :- " + "(" * 5_000 + "b(x)" + ")" * 5_000 + ".\n",
         ERROR, "nests more than")
    prog("5,000 nested negated groups", HEAD + "a(x) :- b(x), " + "!(" * 5_000 + "b(x)" + ")" * 5_000 + ".\n",
         ERROR)
    prog("1,000 bnot", HEAD + "a(y) :- b(x), y = " + "bnot " * 1_000 + "x.\n", ERROR, "nests more than")
    prog("power tower of 200", HEAD + "a(y) :- b(x), y = " + " ^ ".join(["x"] * 200) + ".\n", ERROR)
    prog("precedence", HEAD + "a(y) :- b(x), y = 2 + 3 * 4 ^ 2 ^ 1 - 6 / 2 band 7 bor x.\n", OK,
         check=lambda out: "a(7)" in tuples_of(out))  # ((2 + 48 - 3) band 7) bor 1
    # records (docs and behaviour agree: supported in programs)
    prog("records and lists", ".type L = [h: number, t: L]\n.decl l(x: L)\n.decl n(x: L, k: number)\n"
         ".output n\nl(nil).\nl([1, nil]).\nl([2, [1, nil]]).\nn(nil, 0).\n"
         "n([h, t], k + 1) :- l([h, t]), n(t, k).\n", OK,
         check=lambda out: "n([2, [1, nil]],2)" in tuples_of(out))
    # 8: a grounding explosion under ulimit -v 4000000 (default limit from it; and clingo out of memory)
    boom = ".decl n(x: number)\n.decl p(x: number, y: number, z: number)\n.output p\n" \
           "n(x) :- x = range(0, 400).\np(x, y, z) :- n(x), n(y), n(z).\n"
    prog("explosion under ulimit -v 4000000", boom, ERROR, "ulimit -v", timeout=600)
    prog("explosion under ulimit -v 1000000", boom, ERROR, "ulimit -v", address_space=1_000_000 * 1024)
    prog("explosion, no limit, ulimit -v 600000", boom, ERROR, "out of memory",
         extra=("--max-rule-instances", "0"), address_space=600_000 * 1024)
    return cases


# Functors and facts -----------------------------------------------------------------------------------

def functor_cases() -> list[Case]:
    cases = []

    def prog(name, text, expect, message=None, check=None, files=None,
             extra=("--max-rule-instances", "1000000"), **kw):
        cases.append(Case("functor", name, {"p.dl": text, **(files or {})}, ground("p.dl", *extra), expect,
                          message, check, **kw))

    for lo, hi, step in ((0, 2147483647, ""), (-2147483648, 2147483647, ""), (2147483647, -2147483648, ""),
                         (0, 2147483647, ", 2"), (0, 1_000_001, "")):
        prog(f"range({lo}, {hi}{step})",
             f".decl n(x: number)\n.output n\nn(x) :- x = range({lo}, {hi}{step}).\n", ERROR,
             "past the limit of 1,000,000")
    prog("range(0, 10)", ".decl n(x: number)\n.output n\nn(x) :- x = range(0, 10).\n", OK,
         check=lambda out: len(tuples_of(out)) == 10)
    prog("range step 0", ".decl n(x: number)\n.output n\nn(1).\nn(x) :- x = range(0, 10, 0).\n", OK)
    prog("range x range", ".decl n(x: number, y: number)\n.output n\nn(x, y) :- x = range(0, 2000), "
         "y = range(0, 2000).\n", ERROR, "1,000,000")
    prog("cat doubling", '.decl s(x: symbol)\n.output s\ns("ab").\ns(cat(x, x)) :- s(x).\n', ERROR,
         "past the limit of 65,536")
    prog("cat of 2 x 40,000", '.decl s(x: symbol)\n.output s\ns(cat("' + "x" * 40_000 + '", "' + "y" * 40_000
         + '")).\n', ERROR, "65,536")
    prog("cat growing by one", '.decl s(x: symbol)\n.output s\ns("a").\n'
         's(cat(x, "a")) :- s(x), strlen(x) < 70000.\n', ERROR, "characters")  # 2.1e9 in all
    prog("substr in range", '.decl s(x: symbol)\n.output s\ns(substr("hello", 1, 3)).\n', OK,
         check=lambda out: "s(ell)" in tuples_of(out))
    prog("to_string counter", ".decl n(x: number)\n.decl s(x: symbol)\n.output s\nn(x) :- x = range(0, 50).\n"
         "s(to_string(x)) :- n(x).\n", OK, check=lambda out: "s(49)" in tuples_of(out))
    catastrophic = [("(a+)+$", "a" * 41 + "b"), ("(a|aa)*c", "a" * 60), ("(a*)*b", "a" * 5_000),
                    ("(.*a){25}", "a" * 30), ("(a|a)*$", "a" * 40 + "!"),
                    ("^(\\\\w+\\\\s?)*$", "word " * 20 + "!"),
                    ("(x+x+)+y", "x" * 50), ("([a-z]+)*[0-9]", "abcdefghij" * 5)]
    for pattern, text in catastrophic:
        prog(f"match {pattern} on {len(text)} characters",
             '.decl w(x: symbol)\n.input w\n.decl r(x: symbol)\n'
             f'.decl q(x: symbol)\n.output r, q\nr(x) :- w(x), match("{pattern}", x).\n'
             f'q(x) :- w(x), !match("{pattern}", x).\n', OK, files={"w.facts": text + "\n"},
             check=lambda out, text=text: f"q({text})" in tuples_of(out) or f"r({text})" in tuples_of(out))
    prog("match a backreference", '.decl w(x: symbol)\n.input w\n.decl r(x: symbol)\n.output r\n'
         'r(x) :- w(x), match("(a)\\\\1", x).\n', ERROR, "backreference", files={"w.facts": "aa\n"})
    prog("match a lookahead", '.decl w(x: symbol)\n.input w\n.decl r(x: symbol)\n.output r\n'
         'r(x) :- w(x), match("(?=a)a", x).\n', ERROR, "lookahead", files={"w.facts": "a\n"})
    prog("match an invalid pattern", '.decl w(x: symbol)\n.input w\n.decl r(x: symbol)\n.output r\nr("k").\n'
         'r(x) :- w(x), match("(", x).\nr(x) :- w(x), !match("(", x).\n', OK, files={"w.facts": "a\n"},
         check=lambda out: tuples_of(out) >= {"r(k)"} and "r(a)" not in tuples_of(out))
    prog("match pattern of 10^4 states", '.decl w(x: symbol)\n.input w\n.decl r(x: symbol)\n.output r\n'
         'r("k").\nr(x) :- w(x), match("a{1000}{1000}", x).\n', OK, files={"w.facts": "a\n"},
         check=lambda out: "r(a)" not in tuples_of(out))
    prog("match on a 65,536-character symbol", '.decl w(x: symbol)\n.input w\n.decl r(x: symbol)\n.output r\n'
         'r("k").\nr("hit") :- w(x), match("(a|b)*c", x).\n', OK, files={"w.facts": "ab" * 32_768 + "\n"},
         check=lambda out: "r(hit)" not in tuples_of(out))
    # 17: division and remainder at INT_MIN
    div = (".decl a(x: number, y: number)\n.input a\n.decl r(k: symbol, v: number)\n.output r\n"
           'r("div", x / y) :- a(x, y).\nr("mod", x % y) :- a(x, y).\n')
    prog("INT_MIN / -1 from facts", div, OK, files={"a.facts": "-2147483648\t-1\n"},
         check=lambda out: {"r(div,-2147483648)", "r(mod,0)"} <= tuples_of(out))
    prog("x / 0 from facts", div + "r(\"k\", 1).\n", OK, files={"a.facts": "5\t0\n"},
         check=lambda out: not any(t.startswith("r(div") for t in tuples_of(out)))
    prog("-7 / 2 from facts", div, OK, files={"a.facts": "-7\t2\n"},
         check=lambda out: {"r(div,-3)", "r(mod,-1)"} <= tuples_of(out))
    prog("INT_MIN / -1 constants", ".decl r(v: number)\n.output r\nr(-2147483648 / -1).\n", OK,
         check=lambda out: "r(-2147483648)" in tuples_of(out))
    prog("INT_MIN * -1 and negation", ".decl a(x: number)\n.input a\n.decl r(v: number)\n.output r\n"
         "r(x * -1) :- a(x).\nr(-x + 0) :- a(x).\n", OK, files={"a.facts": "-2147483648\n"},
         check=lambda out: "r(-2147483648)" in tuples_of(out))
    # to_number
    prog("to_number past 32 bits", '.decl r(k: symbol, v: number)\n.output r\nr("k", 1).\n'
         'r("big", to_number("99999999999999")).\n', OK,
         check=lambda out: not any("big" in t for t in tuples_of(out)))
    prog("to_number at INT_MAX", '.decl r(v: number)\n.output r\nr(to_number("2147483647")).\n', OK,
         check=lambda out: "r(2147483647)" in tuples_of(out))
    prog("to_number of 5,000 digits", '.decl r(k: symbol, v: number)\n.output r\nr("k", 1).\n'
         f'r("big", to_number("{"9" * 5_000}")).\n', OK)
    # facts feeding the functors
    prog("facts: 65,536-character symbols doubled", '.decl w(x: symbol)\n.input w\n.decl s(x: symbol)\n'
         ".output s\ns(cat(x, x)) :- w(x).\n", ERROR, "65,536", files={"w.facts": "x" * 65_536 + "\n"})
    prog("facts: a number past 32 bits", ".decl a(x: number)\n.input a\n.output a\n", ERROR,
         files={"a.facts": "99999999999999\n"})
    prog("facts: range bounds from facts", ".decl a(x: number, y: number)\n.input a\n.decl n(x: number)\n"
         ".output n\nn(z) :- a(x, y), z = range(x, y).\n", ERROR, "range(",
         files={"a.facts": "-2147483648\t2147483647\n"})
    prog("facts: many divisions by variables", ".decl a(x: number, y: number)\n.input a\n.decl r(v: number)\n"
         ".output r\nr(x / y) :- a(x, y).\n", OK,
         files={"a.facts": "".join(f"{x}\t{y}\n" for x in range(-20, 20) for y in (-3, -1, 0, 1, 7))})
    return cases


# Running ----------------------------------------------------------------------------------------------

def run(case: Case, folder: Path) -> tuple[str, str]:
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    command = [sys.executable, "-m", "fastlbp"] + [a.replace("{d}", str(folder)) for a in case.command]

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (case.address_space, case.address_space))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "FASTLBP_CACHE": "off"}
    try:
        res = subprocess.run(command, preexec_fn=limit, env=env, capture_output=True, text=True,
                             timeout=case.timeout, cwd=folder)
    except subprocess.TimeoutExpired:
        return "hang", f"past {case.timeout} s"
    err = res.stderr
    if res.returncode < 0:
        return "hang", f"killed by signal {-res.returncode}"
    if "Traceback" in err or res.returncode not in (0, 2):
        return "traceback", err[-800:]
    out = (folder / "out.json").read_text(encoding="utf-8") if (folder / "out.json").exists() else res.stdout
    if res.returncode == 2:
        last = err.strip().splitlines()[-1] if err.strip() else ""
        if not last.startswith("error: "):
            return "traceback", err[-800:]
        if case.expect == OK:
            return "wrong answer", f"refused: {last[:300]}"
        if case.message and case.message not in err:
            return "wrong answer", f"refused, but without {case.message!r}: {last[:300]}"
        return "clean error", last[:200]
    if case.expect == ERROR:
        return "wrong answer", "accepted"
    if case.check is not None and not case.check(out):
        return "wrong answer", f"unexpected output: {out[:300]}"
    return "ok", ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["npz", "program", "functor"], default=None)
    ap.add_argument("--verbose", action="store_true", help="print every case's outcome")
    args = ap.parse_args()
    cases = [c for c in npz_cases() + program_cases() + functor_cases() if args.only in (None, c.group)]
    counts = {k: 0 for k in ("ok", "clean error", "wrong answer", "traceback", "hang")}
    start = time.perf_counter()
    for k, case in enumerate(cases):
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="fastlbp-front-") as tmp:
            outcome, detail = run(case, Path(tmp))
        counts[outcome] += 1
        if args.verbose or outcome not in ("ok", "clean error"):
            print(f"[{k}] {case.group}: {case.name}: {outcome} ({time.perf_counter() - t0:.1f} s) {detail}",
                  flush=True)
    seconds = time.perf_counter() - start
    print(f"{len(cases)} cases in {seconds:.0f} s: {counts['ok']} ok, {counts['clean error']} clean errors, "
          f"{counts['wrong answer']} wrong answers, {counts['traceback']} tracebacks, {counts['hang']} hangs")


if __name__ == "__main__":
    main()
