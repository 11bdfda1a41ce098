"""Grounding is bounded (issue 29, item 6): past `max_rule_instances` it stops with a clean error naming
the rule that explodes, and leaves nothing behind."""

import os
import sys

import pytest
from typer.testing import CliRunner

from datalog import grounding, souffle
from fastlbp.cli import get_app

PROGRAM = (".decl a(x:number)\n.input a\n.decl b(x:number)\n.input b\n.decl e(x:number, y:number)\n"
           "e(1, 2).\ne(2, 3).\n.decl alarm(x:number, y:number)\nalarm(x, y) :- e(x, y).\n"
           "alarm(x, y) :- a(x), b(y).\n.output alarm\n")


@pytest.fixture
def program(tmp_path, monkeypatch):
    (tmp_path / "p.dl").write_text(PROGRAM)
    for rel in "ab":
        (tmp_path / f"{rel}.facts").write_text("".join(f"{i}\n" for i in range(300)))  # 90,000 instances
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    return tmp_path


def test_a_grounding_past_its_limit_stops_naming_the_rule(program):
    options = grounding.GroundOptions(facts=program, max_rule_instances=5_000)
    with pytest.raises(grounding.GroundingTooLarge) as info:
        grounding.ground_file(program / "p.dl", options)
    message = str(info.value)
    name = souffle.parse_file(program / "p.dl").rules[1].name
    assert "past the limit of 5,000" in message and name in message and "9e+04" in message, message
    count = int(message.split("after ")[1].split(" rule")[0].replace(",", ""))
    assert 5_000 < count < 90_000  # stopped on the way, not at the end
    assert list((program / "tmp").iterdir()) == []  # clingo's output and its folder are gone


def test_below_the_limit_or_without_one_the_graph_is_the_same(program):
    sizes = set()
    for limit in (None, 0, 1_000_000):
        g = grounding.ground_file(program / "p.dl", grounding.GroundOptions(facts=program,
                                                                           max_rule_instances=limit))
        sizes.add((g.graph.num_tuples, g.graph.num_clauses, g.ground_rules))
    assert len(sizes) == 1 and next(iter(sizes))[1] == 90_002
    assert grounding.default_max_rule_instances() >= 1_000_000


def test_the_cli_says_so_cleanly(program):
    res = CliRunner().invoke(get_app(), ["ground", str(program / "p.dl"), "--facts", str(program), "-o",
                                         str(program / "g.json"), "--max-rule-instances", "1000"])
    assert res.exit_code == 2 and res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "error: " in res.output and "grounding stopped after" in res.output
    assert "Traceback" not in res.output and not (program / "g.json").exists()


FORKED = """
import sys
from pathlib import Path
from datalog import grounding, souffle
assert "jax" not in sys.modules  # a process without JAX's threads forks
d = Path(sys.argv[1])
try:
    grounding.ground_file(d / "p.dl", grounding.GroundOptions(facts=d, max_rule_instances=5_000))
    raise SystemExit("no GroundingTooLarge")
except grounding.GroundingTooLarge:
    pass
assert grounding.ground_file(d / "p.dl", grounding.GroundOptions(facts=d)).graph.num_clauses == 90_002
try:
    grounding._ground_aspif("p(.", {}, 1_000, lambda count: AssertionError(count), "p.dl")
    raise SystemExit("no RuntimeError")
except RuntimeError as err:
    assert "clingo refused the translated program" in str(err), err
print("forked ok")
"""


def test_a_forked_grounding_stops_at_the_limit_and_reports_errors(program):
    # In a fresh interpreter: forking a test process would copy JAX's threads' locks.
    import subprocess

    res = subprocess.run([sys.executable, "-c", FORKED, str(program)], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, TMPDIR=str(program / "tmp")))
    assert res.returncode == 0 and "forked ok" in res.stdout, res.stderr
    assert list((program / "tmp").iterdir()) == []


def test_a_grounding_in_a_new_interpreter_stops_at_the_limit(program):
    # As where JAX is loaded (its threads): `_start` starts a new interpreter instead of forking.
    sys.modules.setdefault("jax", None)
    try:
        with pytest.raises(grounding.GroundingTooLarge):
            grounding.ground_file(program / "p.dl",
                                  grounding.GroundOptions(facts=program, max_rule_instances=5_000))
        with pytest.raises(RuntimeError, match="clingo refused the translated program"):
            grounding._ground_aspif("p(.", {}, 1_000, lambda count: AssertionError(count), "p.dl")
    finally:
        if sys.modules.get("jax", 0) is None:
            del sys.modules["jax"]
    assert list((program / "tmp").iterdir()) == []
