"""The commands that run no inference never import JAX; `import fastlbp` does not either (what it
leaves of JAX's settings: tests/test_jax_config.py).

Each case runs in a fresh interpreter (this test process imported JAX long ago) and reports
whether `jax` ended up in `sys.modules`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
TAINT = DATA / "taint"

# Runs `fastlbp ARGS...` in this interpreter, then prints its exit status and whether JAX was imported.
PROBE = """
import json, sys
from fastlbp.cli import main
sys.argv = ["fastlbp", *json.loads(sys.argv[1])]
code = 0
try:
    main()
except SystemExit as exit:
    code = exit.code or 0
heavy = ("jax", "numpy", "datalog")
print(json.dumps({"code": code, **{h: sorted(m for m in sys.modules if m == h or m.startswith(h + "."))
                                    for h in heavy}}))
"""


def python(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FASTLBP_CACHE": "off", "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300,
                          cwd=ROOT)


def fastlbp_modules(*args: str) -> dict:
    done = python("-c", PROBE, json.dumps([str(a) for a in args]))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


COMMANDS = ("rank", "triage", "simulate", "marginals", "check", "learn", "ground", "info", "schedule",
            "convert")


@pytest.mark.parametrize("args", [
    ("--help",),
    ("--version",),
    *((command, "--help") for command in COMMANDS),
    ("info", DATA / "weblech.json"),
    ("info", DATA / "weblech"),                                   # a Bingo directory
    ("info", DATA / "weblech.json", "--format", "json"),
], ids=lambda args: " ".join(Path(a).name if isinstance(a, Path) else a for a in args))
def test_commands_that_run_no_inference_import_no_jax(args):
    result = fastlbp_modules(*args)
    assert result["code"] == 0
    assert result["jax"] == []


@pytest.mark.parametrize("args", [("--help",), ("--version",)], ids=" ".join)
def test_help_and_version_import_neither_numpy_nor_the_datalog_front_end(args):
    # numpy (0.1 s) comes with the factor-graph arrays, datalog (0.05-0.1 s) with reading a graph:
    # `import fastlbp` and the command modules import both only where a command reads a graph.
    result = fastlbp_modules(*args)
    assert result == {"code": 0, "jax": [], "numpy": [], "datalog": []}


def test_convert_and_ground_import_no_jax(tmp_path):
    out = tmp_path / "weblech.causal_fg"
    result = fastlbp_modules("convert", DATA / "weblech.json", out)
    assert (result["code"], result["jax"]) == (0, [])
    assert out.stat().st_size > 0
    out = tmp_path / "taint.json"
    result = fastlbp_modules("ground", TAINT / "taint.dl", "--facts", TAINT / "facts",
                             "--rule-prob", TAINT / "rule_prob.txt", "-o", out)
    assert (result["code"], result["jax"]) == (0, [])
    assert json.loads(out.read_text())


def test_bad_input_is_reported_without_jax(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = fastlbp_modules("info", bad)
    assert (result["code"], result["jax"]) == (2, [])


def test_the_probe_sees_jax_when_a_command_runs_inference():
    # The check above can fail: a command that runs a round imports JAX, and the probe reports it.
    result = fastlbp_modules("rank", DATA / "race.json", "--top", "1")
    assert result["code"] == 0
    assert "jax" in result["jax"] and "numpy" in result["numpy"] and result["datalog"]


def test_python_dash_m_fastlbp_help_imports_no_jax():
    # The console entry itself (`python -m fastlbp`), seen by the interpreter's own import report.
    done = python("-X", "importtime", "-m", "fastlbp", "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "typer" in imported  # the report is read right
    assert "jax" not in imported


def test_a_graph_error_is_still_a_users_error_with_status_2(capsys):
    # fastlbp.cli.app no longer imports fastlbp.core.graph (numpy) to name GraphError; it must still catch it.
    import typer

    from fastlbp.cli.app import handles_errors
    from fastlbp.core.graph import GraphError

    @handles_errors
    def command():
        raise GraphError("factor 3: p1 = 2.0 is not a probability in [0, 1]")

    with pytest.raises(typer.Exit) as exit:
        command()
    assert exit.value.exit_code == 2
    assert capsys.readouterr().err == "error: factor 3: p1 = 2.0 is not a probability in [0, 1]\n"

    @handles_errors
    def other():
        raise ValueError("a bug, not the input's")

    with pytest.raises(ValueError):
        other()


def test_to_numpy_without_jax_equals_the_pytree_map():
    # FactorGraph.to_numpy no longer goes through jax.tree_util; it must give what tree_map gave,
    # None fields (a lean device graph) included.
    import dataclasses

    import jax
    import numpy as np

    import fastlbp.core.equations  # noqa: F401  (registers FactorGraph as a pytree)
    from fastlbp.core.graph import AND, OR, Factor, from_factors

    graph = from_factors([Factor(AND, 0, (1, 2), 0.9, 0.1), Factor(OR, 1, (), 0.5, 0.5),
                          Factor(OR, 2, (1,), 0.7, 0.2)])
    on_device = jax.device_put(dataclasses.replace(graph, slot_var=None, edge_slot=None))
    for g in (graph, on_device):
        mine, theirs = g.to_numpy(), jax.tree_util.tree_map(np.asarray, g)
        for f in dataclasses.fields(g):
            a, b = getattr(mine, f.name), getattr(theirs, f.name)
            assert (a is None) == (b is None), f.name
            if a is not None:
                assert type(a) is np.ndarray and a.dtype == b.dtype and np.array_equal(a, b), f.name
    assert on_device.to_numpy().slot_var is None


@pytest.mark.parametrize("command", ["rank", "marginals", "check"])
def test_a_bad_schedule_fails_before_the_graph_is_read_and_before_jax(command):
    # The plan (`schedules.plan.make_plan`) is made from the options before anything is loaded:
    # no datalog front end (reading a graph) and no JAX, so the error costs the CLI's start-up only.
    result = fastlbp_modules(command, DATA / "ftp.json.gz", "--schedule", "nosuch")
    assert result == {"code": 2, "jax": [], "numpy": [], "datalog": []}
