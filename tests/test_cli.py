import json

from conftest import DATA
from typer.testing import CliRunner

from datalog import causal_fg
from fastlbp.cli import get_app

runner = CliRunner()
WEBLECH = str(DATA / "weblech" / "graph.causal_fg")


def invoke(*args):
    return runner.invoke(get_app(), list(args))


def test_marginals_json_matches_libdai():
    res = invoke("marginals", WEBLECH, "--schedule", "parall", "--tol", "1e-9", "--max-iters", "200")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"marginals", "iterations", "converged"}
    assert out["converged"] is True
    ref = causal_fg.load_marginals(DATA / "weblech" / "parall200.marg")
    assert max(abs(out["marginals"][k] - v) for k, v in ref.items()) < 1e-6


def test_marginals_csv_with_labels(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("# known\n87 false\n\n")
    res = invoke("marginals", WEBLECH, "--labels", str(labels), "--format", "csv")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "variable,probability"
    rows = dict(line.split(",") for line in lines[1:])
    assert float(rows["87"]) == 0.0
    assert len(rows) == 678


def test_bad_labels_file_exit_2_names_line(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("87 false\n12 maybe\n")
    res = invoke("marginals", WEBLECH, "--labels", str(labels))
    assert res.exit_code == 2
    assert f"{labels}:2:" in res.stderr and "Traceback" not in res.output


def test_unknown_variable_and_missing_file(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("nosuch true\n")
    res = invoke("marginals", WEBLECH, "--labels", str(labels))
    assert res.exit_code == 2 and "unknown variable 'nosuch'" in res.stderr
    res = invoke("marginals", str(tmp_path / "missing.fg"))
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_contradictory_labels_exit_2(tmp_path):
    fg = tmp_path / "g.causal_fg"
    fg.write_text("2\n\na\nI\n0.5\n\nb\n+1.0;0.0\n1\na\n")
    labels = tmp_path / "labels.txt"
    labels.write_text("a true\nb false\n")
    res = invoke("marginals", str(fg), "--labels", str(labels))
    assert res.exit_code == 2
    assert "contradictory labels" in res.stderr and "a=true" in res.stderr and "b=false" in res.stderr


def test_malformed_graph_exit_2(tmp_path):
    fg = tmp_path / "g.causal_fg"
    fg.write_text("1\n\na\nI\n2.0\n")
    res = invoke("marginals", str(fg))
    assert res.exit_code == 2 and f"{fg}:5:" in res.stderr and "Traceback" not in res.output


def test_help_teaches():
    res = invoke("marginals", "--help")
    assert res.exit_code == 0 and "--schedule" in res.stdout and "Example" in res.stdout


def _cli(env_cache, *args):
    import os
    import subprocess
    import sys

    # JAX_LOG_COMPILES: JAX says on stderr when it loads a compiled computation from the cache.
    env = {**os.environ, "FASTLBP_CACHE": env_cache, "JAX_PLATFORMS": "cpu", "JAX_LOG_COMPILES": "1"}
    return subprocess.run([sys.executable, "-m", "fastlbp", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_a_second_run_loads_its_compiled_loop_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    args = ("marginals", WEBLECH, "--max-iters", "50")
    first = _cli(str(cache), *args)
    assert first.returncode == 0, first.stderr
    entries = sorted(p.name for p in cache.iterdir())
    assert entries, "the first run wrote no cache entry"
    second = _cli(str(cache), *args)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert "Persistent compilation cache hit for 'jit__parall_loop'" in second.stderr
    assert "Persistent compilation cache hit" not in first.stderr


def test_cache_off_and_unwritable_cache_still_run(tmp_path):
    off = _cli("off", "marginals", WEBLECH, "--max-iters", "5")
    assert off.returncode == 0, off.stderr
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    res = _cli(str(blocked / "cache"), "marginals", WEBLECH, "--max-iters", "5")
    assert res.returncode == 0, res.stderr
    assert "warning: compilation cache off: cannot make" in res.stderr
    assert res.stdout == off.stdout
