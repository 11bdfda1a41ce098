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
