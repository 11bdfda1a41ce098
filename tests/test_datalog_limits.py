"""Limits of the Datalog front end (issue 41): every expansion is bounded by a limit that the error names
(functors, disjunctions and heads, macros, components, includes, expression depth), limits derive from
the memory the process may actually use (ulimit -v, cgroups), and arithmetic wraps as the docs say."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from test_datalog_souffle_language import outputs, values

from datalog import grounding, souffle
from datalog.ground_process import signal_shown
from datalog.grounding import GroundOptions
from datalog.regex_match import PatternError, UnsupportedPattern, compile_pattern
from fastlbp.core import resources
from fastlbp.core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def ground_error(text: str, files: dict | None = None, **options) -> str:
    """The message of the `InputError` grounding `text` raises."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for name, content in (files or {}).items():
            (Path(d) / name).write_text(content)
        path = Path(d) / "p.dl"
        path.write_text(text)
        program = souffle.parse_file(path)
        with pytest.raises(InputError) as info:
            grounding.ground(program, GroundOptions(facts=d, **options))
    return info.value.message


# Resource limits (item 8) --------------------------------------------------------------------------

def _address_space(limit: int):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return set_limit


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_the_memory_limit_is_the_address_space_limit_under_ulimit_v():
    code = "from datalog.ground_process import rule_instance_limit; n, m = rule_instance_limit(); print(n, m)"
    out = subprocess.run([sys.executable, "-c", code], preexec_fn=_address_space(2 * 10**9), env=_env(),
                         capture_output=True, text=True, check=True).stdout
    count, _, source = out.partition(" ")
    assert int(count) < 2 * 10**9 // 400  # the machine's memory would give 60M here
    unlimited = resources.memory_limit()
    if unlimited is None or unlimited.bytes > 2 * 10**9:  # else a cgroup (or the machine) is lower still
        assert "the address-space limit (ulimit -v) of 2.0 GB" in source


def test_cgroup_limits_v1_and_v2_the_least_along_the_path(tmp_path):
    (tmp_path / "proc").write_text("4:memory:/job/step\n0::/user/job\n")
    for folder, name, value in (("memory/job", "memory.limit_in_bytes", "3000000000"),
                                ("memory/job/step", "memory.limit_in_bytes", "9223372036854771712"),
                                ("user", "memory.max", "max"), ("user/job", "memory.max", "1500000000")):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / name).write_text(value + "\n")
    limit = resources.memory_limit(cgroup_root=str(tmp_path), proc_cgroup=str(tmp_path / "proc"))
    assert limit.bytes == 1_500_000_000 and "cgroup v2 memory.max" in limit.source
    (tmp_path / "user/job/memory.max").write_text("max\n")
    limit = resources.memory_limit(cgroup_root=str(tmp_path), proc_cgroup=str(tmp_path / "proc"))
    assert limit.bytes == 3_000_000_000 and "cgroup v1 memory.limit_in_bytes" in limit.source


@pytest.mark.slow  # about 5 s: clingo grounds 700,000 instances before the limit derived from ulimit -v
def test_a_grounding_explosion_under_ulimit_v_exits_2_naming_the_limit(tmp_path):
    program = tmp_path / "boom.dl"
    program.write_text(".decl n(x: number)\n.decl p(x: number, y: number, z: number)\n.output p\n"
                       "n(x) :- x = range(0, 400).\np(x, y, z) :- n(x), n(y), n(z).\n")
    command = [sys.executable, "-m", "fastlbp", "ground", str(program), "-o", str(tmp_path / "g.json")]
    res = subprocess.run(command, preexec_fn=_address_space(450 * 10**6), env=_env(), capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "past the limit of" in res.stderr and "ulimit -v" in res.stderr


# Functors (item 9) ---------------------------------------------------------------------------------

def test_range_counts_against_the_rule_instance_limit():
    message = ground_error(".decl n(x: number)\n.output n\nn(x) :- x = range(0, 2147483647).\n",
                           max_rule_instances=1_000_000)
    assert "range(0, 2147483647) makes 2,147,483,647 values, past the limit of 1,000,000" in message
    assert "--max-rule-instances" in message


def test_computed_symbols_stay_under_the_symbol_cap():
    message = ground_error('.decl s(x: symbol)\n.output s\ns("ab").\ns(cat(x, x)) :- s(x).\n',
                           max_rule_instances=10**6)
    assert "cat() made a symbol of 131,072 characters, past the limit of 65,536" in message


def test_match_is_linear_where_a_backtracking_regex_is_exponential():
    text = ('.decl w(x: symbol)\n.input w\n.decl r(k: symbol, x: symbol)\n.output r\n'
            'r("m", x) :- w(x), match("(a+)+$", x).\nr("n", x) :- w(x), !match("(a+)+$", x).\n')
    out, _ = outputs(text, files={"w.facts": "a" * 40 + "b\n" + "a" * 41 + "\n"})
    assert out["r"] == {f'r(n,{"a" * 40}b)', f'r(m,{"a" * 41})'}


def test_match_refuses_what_only_backtracking_runs_by_name():
    message = ground_error('.decl w(x: symbol)\n.input w\n.decl r(x: symbol)\n.output r\n'
                           'r(x) :- w(x), match("(a)\\\\1", x).\n', files={"w.facts": "aa\n"})
    assert "match(): pattern '(a)\\\\1' uses a backreference" in message


@pytest.mark.parametrize("pattern, text, expected", [
    ("(a+)+$", "a" * 5000 + "b", False), ("(a|aa)*c", "a" * 5000, False), ("(a*)*b", "a" * 64 + "b", True),
    ("[[:digit:]]+", "123", True), ("a{2,3}", "aaaa", False), ("", "", True), ("^a$", "a", True),
    ("a$b", "ab", False), ("(x|y)?z", "z", True),
])
def test_the_linear_matcher_answers_as_fullmatch(pattern, text, expected):
    import re

    from datalog.functors import _POSIX_CLASSES
    for name, chars in _POSIX_CLASSES.items():
        pattern = pattern.replace(f"[:{name}:]", chars)
    assert compile_pattern(pattern).fullmatch(text) is expected
    if len(text) < 100:
        assert (re.fullmatch(pattern, text) is not None) is expected


def test_the_linear_matcher_refuses_what_it_cannot_run():
    for pattern in ("(a)\\1", "(?=a)a", "\\ba"):
        with pytest.raises(UnsupportedPattern):
            compile_pattern(pattern)
    for pattern in ("(?i)a", "a{1000}{1000}", "a*+", "(", "(" * 5000 + ")" * 5000):
        with pytest.raises(PatternError):
            compile_pattern(pattern)


# Arithmetic (item 17, to_number) ------------------------------------------------------------------

def test_int_min_divided_by_minus_one_wraps_from_facts():
    text = (".decl a(x: number, y: number)\n.input a\n.decl r(k: symbol, v: number)\n.output r\n"
            'r("div", x / y) :- a(x, y).\nr("mod", x % y) :- a(x, y).\n'
            'r("half", x / 2) :- a(x, _).\n')
    assert values(text, files={"a.facts": "-2147483648\t-1\n"}) == {
        "div": "-2147483648", "mod": "0", "half": "-1073741824"}


def test_division_by_a_variable_as_c_computes_it():
    text = (".decl a(x: number, y: number)\n.input a\n.decl r(x: number, y: number, q: number, m: number)\n"
            ".output r\nr(x, y, x / y, x % y) :- a(x, y).\n")
    pairs = [(-7, 2), (7, -2), (-7, -2), (7, 2), (5, 0), (-2147483648, -1), (2147483647, -1)]
    out, _ = outputs(text, files={"a.facts": "".join(f"{x}\t{y}\n" for x, y in pairs)})

    def c(x, y):
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        q = (q + 2**31) % 2**32 - 2**31
        return q, x - (abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)) * y
    want = {f"r({x},{y},{c(x, y)[0]},{c(x, y)[1] if x != -2**31 else 0})" for x, y in pairs if y}
    assert out["r"] == want


def test_to_number_outside_32_bits_has_no_value():
    text = ('.decl r(k: symbol, v: number)\n.output r\nr("big", to_number("99999999999999")).\n'
            'r("ok", to_number("2147483647")).\nr("neg", to_number("-2147483648")).\n')
    assert values(text) == {"ok": "2147483647", "neg": "-2147483648"}


def test_a_signal_is_named_for_what_it_is():
    assert signal_shown(8) == "signal 8 (SIGFPE: an arithmetic fault, such as an integer division overflow)"
    assert "SIGKILL" in signal_shown(9) and "out-of-memory" in signal_shown(9)


# The front end: preprocessor, components, disjunctions, expressions (items 6, 10, 11, 12, 16) --------

def parse_error(text: str, tmp_path: Path, files: dict | None = None) -> souffle.ProgramError:
    for name, content in (files or {}).items():
        (tmp_path / name).write_text(content)
    (tmp_path / "p.dl").write_text(text)
    with pytest.raises(souffle.ProgramError) as info:
        souffle.parse_file(tmp_path / "p.dl")
    return info.value


def test_error_in_a_taken_branch_stops(tmp_path):
    err = parse_error("#define X 1\n#if X\n#error stop here\n#endif\n.decl a(x: number)\na(1).\n", tmp_path)
    assert (err.line, err.message) == (3, "#error stop here")
    (tmp_path / "q.dl").write_text("#if 0\n#error never\n#endif\n.decl a(x: number)\n.output a\na(1).\n")
    assert souffle.parse_file(tmp_path / "q.dl").facts  # a branch not taken is skipped


def test_an_include_cycle_names_its_chain(tmp_path):
    err = parse_error('#include "p.dl"\n.decl a(x: number)\n', tmp_path)
    assert "#include includes itself: " in err.message
    assert "p.dl -> p.dl (at most 64 files deep" in err.message
    files = {"m1.dl": '#include "m2.dl"\n', "m2.dl": '#include "m1.dl"\n'}
    err = parse_error('#include "m1.dl"\n', tmp_path, files)
    assert "#include includes itself: m1.dl -> m2.dl -> m1.dl" in err.message
    (tmp_path / "g.dl").write_text('#ifndef G\n#define G\n#include "g.dl"\n.decl a(x: number)\n.output a\n'
                                   'a(1).\n#endif\n')
    assert souffle.parse_file(tmp_path / "g.dl").facts  # an include guard stops it: no error


def test_an_include_is_read_as_every_input_is(tmp_path):
    (tmp_path / "p.dl").write_text('#include "/dev/zero"\n.decl a(x: number)\n')
    with pytest.raises(InputError, match="not a regular file, and its size exceeds"):  # a MemoryError before
        souffle.parse_file(tmp_path / "p.dl")
    (tmp_path / "sub").mkdir()
    assert "Include file 'sub' not found" in parse_error('#include "sub"\n', tmp_path).message


def test_a_macro_bomb_stops_at_the_expansion_limit(tmp_path):
    lines = ["#define A0 x"] + [f"#define A{k} (A{k - 1}+A{k - 1})" for k in range(1, 22)]
    err = parse_error("\n".join(lines) + "\n.decl a(x: number)\n.output a\na(A21).\n", tmp_path)
    assert err.line == 25 and "macro expansion made more than" in err.message
    assert "tokens (the limit: 8 per character" in err.message
    chain = "#define B0 1\n" + "".join(f"#define B{k} B{k - 1}\n" for k in range(1, 3001))
    err = parse_error(chain + ".decl a(x: number)\na(B3000).\n", tmp_path)
    assert "nest too deeply" in err.message


@pytest.mark.parametrize("text, message", [
    (".comp A {\n .decl r(x: number)\n .init a = A\n}\n.init x = A\n",
     "component 'A' instantiates itself (A -> A: instance x.a inside x)"),
    (".comp A {\n .init b = B\n}\n.comp B {\n .init a = A\n}\n.init x = A\n",
     "component 'A' instantiates itself (A -> B -> A: instance x.b.a inside x)"),
    (".comp C0 {\n .decl r(x: number)\n}\n"
     + "".join(f".comp C{k} {{\n .init a = C{k - 1}\n .init b = C{k - 1}\n}}\n" for k in range(1, 21))
     + ".init x = C20\n",
     "components make more than 10,000 instances"),
])
def test_components_that_never_end_are_refused(tmp_path, text, message):
    assert message in parse_error(text, tmp_path).message


HEAD = ".decl a(x: number)\n.decl b(x: number)\n.output a\nb(1).\n"


@pytest.mark.parametrize("body, message", [
    ("a(x) :- " + " ; ".join(["b(x)"] * 20_000) + ".",
     "the disjunction expands to more than 4,096 alternatives (limit 4,096)"),
    (", ".join(["a(x)"] * 300) + " :- " + " ; ".join(["b(x)"] * 3_000) + ".",
     "this rule's 300 heads and 3,000 alternatives expand to 900,000 rules (limit 4,096)"),
    ("a(x) :- " + ", ".join(["(b(x) ; b(x))"] * 20) + ".", "expand to 8,192 alternatives (limit 4,096)"),
    ("a(" + "+".join(["1"] * 500) + ").", "the expression is more than 100 operators deep"),
    ("a(" + "(" * 5_000 + "1" + ")" * 5_000 + ").", "the expression nests more than 100 deep"),
    ("a(" + "-" * 20_000 + "1).", "the expression nests more than 100 deep"),
    ("a(x) :- " + "(" * 5_000 + "b(x)" + ")" * 5_000 + ".", "the expression nests more than 100 deep"),
])
def test_expansions_and_depths_are_bounded(tmp_path, body, message):
    assert message in parse_error(HEAD + body + "\n", tmp_path).message


def test_expanded_rules_keep_a_bounded_text_and_deep_expressions_ground():
    text = HEAD + "a(x) :- " + " ; ".join(["b(x)"] * 4_096) + ".\n"
    program = souffle.parse(text)
    assert len(program.rules) == 4_096 and {r.text for r in program.rules} == {"a(x) :- b(x)."}
    shared = ", ".join(["b(x)"] * 1_000)  # each alternative holds it: its text is cut, not 4,096 copies
    program = souffle.parse(HEAD + f"a(x) :- {shared}, (b(x) ; b(x)).\n")
    assert {len(r.text) for r in program.rules} == {2_000}
    deep = HEAD + "a(" + "+".join(["x"] * 100) + ") :- b(x).\na(" + "(" * 97 + "x" + ")" * 97 + ") :- b(x).\n"
    assert outputs(deep)[0]["a"] == {"a(100)", "a(1)"}


def test_the_matchers_cache_starts_again_past_its_bound_with_the_same_answers(monkeypatch):
    import random
    import re

    from datalog import regex_match
    monkeypatch.setattr(regex_match, "_MAX_TRANSITIONS", 50)
    matcher = compile_pattern("(a|[^b])*c")
    rng = random.Random(1)
    for _ in range(200):
        text = "".join(chr(rng.randint(97, 400)) for _ in range(30)) + rng.choice(["c", "b", ""])
        assert matcher.fullmatch(text) == (re.fullmatch("(a|[^b])*c", text) is not None)
    assert matcher.transitions <= 50
