"""The command line as a whole (`fastlbp.cli`, `fastlbp.cli.app`): the registered commands,
shared options and their defaults, `--backend` and $FASTLBP_BACKEND, errors, the
compilation cache; `fastlbp marginals` end to end."""

import json
import re
from pathlib import Path

import jax
import pytest
import typer
from conftest import DATA
from typer.testing import CliRunner

from datalog import causal_fg
from fastlbp.cli import get_app
from fastlbp.cli.environment import BACKEND_ENV, backend_or_env
from fastlbp.cli.options import Backend, settings_from_options
from fastlbp.core.errors import SettingsError
from fastlbp.core.settings import BACKENDS, Settings

GPU_BACKENDS = ("pallas", "fused")  # the backends that need a GPU (their *_interpret run on a CPU)

runner = CliRunner()
WEBLECH = str(DATA / "weblech" / "graph.causal_fg")


def invoke(*args):
    return runner.invoke(get_app(), list(args))


@pytest.mark.slow
def test_marginals_json_matches_libdai():
    res = invoke("marginals", WEBLECH, "--method", "lbp", "--schedule", "parall", "--tol", "1e-9",
                 "--max-iters", "200")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"marginals", "iterations", "converged", "remedy", "method", "how", "flags"}
    assert out["method"] == "lbp" and out["how"].startswith("LBP: ") and out["flags"] == []
    assert out["converged"] is True
    ref = causal_fg.load_marginals(DATA / "weblech" / "parall200.marg")
    assert max(abs(out["marginals"][k] - v) for k, v in ref.items()) < 1e-6


def test_marginals_csv_with_labels(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("# known\n87 false\n\n")
    # LBP: a round in about a second (auto samples weblech, and under this label draws millions of worlds).
    res = invoke("marginals", WEBLECH, "--labels", str(labels), "--format", "csv", "--method", "lbp")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "variable,probability"  # stderr,lower,upper only when sampled
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


@pytest.mark.slow
def test_contradictory_labels_exit_2(tmp_path):
    fg = tmp_path / "g.causal_fg"
    fg.write_text("2\n\na\nI\n0.5\n\nb\n+1.0;0.0\n1\na\n")
    labels = tmp_path / "labels.txt"
    labels.write_text("a true\nb false\n")
    labels.write_text("# two labels\na true\n\nb false\n")
    for command in ("marginals", "rank", "check"):
        res = invoke(command, str(fg), "--labels", str(labels))
        assert res.exit_code == 2, (command, res.stderr)
        # The labels file and the first conflicting line in front, each label's line named.
        assert f"error: {labels}:2: contradictory labels" in res.stderr, (command, res.stderr)
        assert "a=true (line 2)" in res.stderr and "b=false (line 4)" in res.stderr, (command, res.stderr)
        assert "Traceback" not in res.output


@pytest.mark.slow
def test_contradiction_with_the_graphs_own_labels_names_them(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"format": "fastlbp-derivation", "version": 1, "rules": {"R": 1.0},
                                 "tuples": ["a", "b"], "clauses": [["R", 1, [0]]], "inputs": {"a": 0.5},
                                 "alarms": ["b"], "labels": {"b": True}}))
    labels = tmp_path / "labels.txt"
    labels.write_text("a false\n")
    res = invoke("rank", str(graph), "--labels", str(labels))
    assert res.exit_code == 2, res.stderr
    assert f"error: {labels}:1: contradictory labels" in res.stderr
    assert f"b=true (in {graph}'s own labels)" in res.stderr and "a=false (line 1)" in res.stderr


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


@pytest.mark.slow
def test_a_second_run_loads_its_compiled_loop_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    args = ("marginals", WEBLECH, "--method", "lbp", "--max-iters", "50")  # LBP's jitted loop
    first = _cli(str(cache), *args)
    assert first.returncode == 0, first.stderr
    entries = sorted(p.name for p in cache.iterdir())
    assert entries, "the first run wrote no cache entry"
    second = _cli(str(cache), *args)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    # fastlbp.engines.parall._run: the jitted PARALL loop.
    assert "Persistent compilation cache hit for 'jit__run'" in second.stderr
    assert "Persistent compilation cache hit" not in first.stderr


@pytest.mark.slow
def test_cache_off_and_unwritable_cache_still_run(tmp_path):
    off = _cli("off", "marginals", WEBLECH, "--method", "lbp", "--max-iters", "5")  # a jitted LBP loop
    assert off.returncode == 0, off.stderr
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    res = _cli(str(blocked / "cache"), "marginals", WEBLECH, "--method", "lbp", "--max-iters", "5")
    assert res.returncode == 0, res.stderr
    assert "warning: compilation cache off: cannot make" in res.stderr
    assert res.stdout == off.stdout


COMMANDS = ("rank", "triage", "simulate", "marginals", "check", "ground", "info", "schedule", "convert")
INFERENCE = ("rank", "triage", "simulate", "marginals")
ROOT = Path(__file__).resolve().parents[1]
NO_GPU = jax.default_backend() != "gpu"


def test_every_command_is_registered_and_its_help_teaches():
    res = invoke("--help")
    assert res.exit_code == 0
    for name in COMMANDS:
        assert name in res.stdout
    assert "--backend fused" in " ".join(res.stdout.split())
    for name in COMMANDS:
        res = invoke(name, "--help")
        assert res.exit_code == 0, (name, res.output)
        assert "Example" in res.stdout, name
    for name in INFERENCE:
        text = invoke(name, "--help").stdout
        for opt in ("--schedule", "--tol", "--max-iters", "--damping", "--precision", "--backend",
                    "--cycles"):
            assert opt in text, (name, opt)


def _params(name):
    cmd = typer.main.get_command(get_app()).commands[name]
    return {p.name: p for p in cmd.params}


def test_option_defaults_come_from_settings():
    defaults = Settings()
    for name in INFERENCE:
        params = _params(name)
        for field in ("schedule", "tol", "max_iters", "damping", "precision", "cycles"):
            assert params[field].default == getattr(defaults, field), (name, field)
        assert params["backend"].default is None  # $FASTLBP_BACKEND, else Settings' default
        assert params["backend"].envvar is None  # read by settings_from_options, with a clean error
    assert {b.value for b in Backend} == set(BACKENDS)  # every backend accepted (--help lists three)
    for name in ("convert", "info", "schedule"):
        assert _params(name)["cycles"].default == defaults.cycles
    assert _params("convert")["compress"].default == defaults.compress


def test_settings_from_options(monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, "scatter")  # read by backend_or_env only
    assert settings_from_options() == Settings()
    got = settings_from_options(schedule="seqfix", precision="f32", tol=1e-3, max_iters=7, damping=0.5,
                                backend="scatter", cycles="bingo", compress=False)
    assert got == Settings(schedule="seqfix", precision="f32", tol=1e-3, max_iters=7, damping=0.5,
                           backend="scatter", cycles="bingo", compress=False)


def test_backend_or_env(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    assert backend_or_env(None) is None  # Settings' default
    monkeypatch.setenv(BACKEND_ENV, " scatter ")
    assert backend_or_env(None) == "scatter"
    assert backend_or_env(Backend.xla) == "xla"  # the option beats the variable
    monkeypatch.setenv(BACKEND_ENV, "  ")
    assert backend_or_env(None) is None
    monkeypatch.setenv(BACKEND_ENV, "nosuch")
    with pytest.raises(SettingsError, match=r"\$FASTLBP_BACKEND: 'nosuch' is not a backend"):
        backend_or_env(None)
    assert backend_or_env("fused") == "fused"


@pytest.mark.slow
def test_backend_option_runs_the_named_kernels(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    res = invoke("marginals", WEBLECH, "--method", "lbp", "--backend", "scatter", "--tol", "1e-9",
                 "--max-iters", "200")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    ref = causal_fg.load_marginals(DATA / "weblech" / "parall200.marg")
    assert max(abs(out["marginals"][k] - v) for k, v in ref.items()) < 1e-6
    res = invoke("marginals", WEBLECH, "--backend", "nosuch")
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_bad_backend_in_environment_is_a_clean_error(monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, "nosuch")
    for args in (("marginals", WEBLECH), ("rank", WEBLECH)):
        res = invoke(*args)
        assert res.exit_code == 2, res.output
        assert f"error: ${BACKEND_ENV}: 'nosuch' is not a backend" in res.stderr
        assert "Traceback" not in res.output
    res = invoke("marginals", WEBLECH, "--backend", "xla", "--max-iters", "5")
    assert res.exit_code == 0, res.output  # an explicit --backend never reads the variable
    res = invoke("info", WEBLECH)
    assert res.exit_code == 0, res.output  # commands without inference never read it


@pytest.mark.skipif(not NO_GPU, reason="a GPU backend runs here")
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_backend_without_gpu_is_a_clean_error(monkeypatch, backend):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    res = invoke("marginals", WEBLECH, "--backend", backend, "--method", "lbp")  # backends are LBP's
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and backend in res.stderr and "Traceback" not in res.output
    monkeypatch.setenv(BACKEND_ENV, backend)
    res = invoke("rank", WEBLECH, "--method", "lbp")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.splitlines()[-1].startswith(f"error: backend '{backend}'")


def test_bad_settings_are_clean_errors():
    for args, words in ((("--damping", "1.5"), "damping must be in [0, 1)"),
                        (("--max-iters", "0"), "max_iters must be a positive integer"),
                        (("--tol", "-1"), "tol must be")):
        res = invoke("marginals", WEBLECH, *args)
        assert res.exit_code == 2, (args, res.output)
        assert f"error: {words}" in res.stderr and "Traceback" not in res.output


def test_cycles_is_an_option_of_each_command_not_of_the_root():
    res = invoke("--cycles", "bingo", "info", WEBLECH)
    assert res.exit_code == 2 and "No such option" in res.output


def _sources(*packages):
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_backend_variable_is_read_only_by_the_cli():
    readers = [p.relative_to(ROOT).as_posix() for p in _sources("fastlbp", "datalog", "schedules")
               if "FASTLBP_BACKEND" in p.read_text()]
    assert readers and all(r.startswith("fastlbp/cli/") for r in readers), readers


def test_nothing_below_the_cli_imports_it():
    imports_cli = re.compile(r"^\s*(from|import)\s+fastlbp\.cli\b|^\s*from\s+fastlbp\s+import\s+.*\bcli\b",
                             re.MULTILINE)
    cli_files = ("fastlbp/cli/", "fastlbp/__main__.py")  # the CLI and `python -m fastlbp`
    offenders = [p.relative_to(ROOT).as_posix() for p in _sources("fastlbp", "datalog", "schedules")
                 if not p.relative_to(ROOT).as_posix().startswith(cli_files)
                 and imports_cli.search(p.read_text())]
    assert offenders == []
    # Command modules take the app's helpers from fastlbp.cli.app, never the package that registers them.
    for p in (ROOT / "fastlbp" / "cli").glob("*.py"):
        if p.name != "__init__.py":
            text = p.read_text()
            assert not re.search(r"^from fastlbp\.cli import|^import fastlbp\.cli$", text, re.MULTILINE), p
            assert "@app.command" not in text and "__import__" not in text, p
            # No command registered by a dynamic import (importlib.metadata, for --version, is fine).
            assert not re.search(r"importlib(?!\.metadata| import metadata$)", text, re.MULTILINE), p


def _listed_commands():
    return list(typer.main.get_command(get_app()).commands)


def test_version_from_package_metadata():
    from importlib import metadata

    from fastlbp.core.runtime import installed

    for flag in ("--version", "-V"):
        res = invoke(flag)
        assert res.exit_code == 0, res.output
        first, second = res.stdout.splitlines()
        assert first == f"fastlbp {metadata.version(installed()['distribution'] or 'fastlbp')}"
        assert second.startswith(f"jax {metadata.version('jax')}, jaxlib ") and "plugins" in second


def test_h_is_help_and_flags_show_no_bool_metavar():
    # Every command, the ones other modules register included, and the app itself.
    for args in [()] + [(name,) for name in _listed_commands()]:
        long, short = invoke(*args, "--help"), invoke(*args, "-h")
        assert long.exit_code == 0 and short.exit_code == 0, (args, short.output)
        assert short.stdout == long.stdout, args
        assert "<bool>" not in long.stdout, args
    text = invoke("convert", "--help").stdout
    assert "--compress" in text and "--force" in text


def test_commands_listed_in_order_of_use():
    order = ["rank", "triage", "simulate", "marginals", "check", "learn", "ground", "rules", "info",
             "schedule", "convert"]
    listed = _listed_commands()
    assert [c for c in order if c in listed] == listed
    panel = invoke("--help").stdout.split("Commands", 1)[1]
    assert sorted(listed, key=lambda name: panel.index(f" {name} ")) == listed


def test_output_writes_the_result_to_a_file(tmp_path):
    out = tmp_path / "m.json"
    res = invoke("marginals", WEBLECH, "-m", "lbp", "--max-iters", "20", "-o", str(out))
    assert res.exit_code == 0, res.output
    assert res.stdout == ""
    assert set(json.loads(out.read_text())) == {"marginals", "iterations", "converged", "remedy", "method",
                                                "how", "flags"}
    assert json.loads(out.read_text())["method"] == "lbp"
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # no temporary file left behind
    same = invoke("marginals", WEBLECH, "-m", "lbp", "--max-iters", "20", "--output", "-")
    assert json.loads(same.stdout) == json.loads(out.read_text())
    res = invoke("rank", WEBLECH, "-m", "lbp", "--max-iters", "20", "-f", "csv",
                 "-o", str(tmp_path / "r.csv"))
    assert res.exit_code == 0 and (tmp_path / "r.csv").read_text().startswith(
        "rank,alarm,probability,label,log_odds,stderr,lower,upper\n")


def test_output_errors_before_the_work(tmp_path):
    graph = tmp_path / "g.causal_fg"
    graph.write_text(Path(WEBLECH).read_text())
    for target, words in ((tmp_path, "is a directory"), (tmp_path / "no" / "x.json", "does not exist"),
                          (graph, "is an input")):
        res = invoke("marginals", str(graph), "-o", str(target))
        assert res.exit_code == 2 and words in res.stderr, (target, res.output)
        assert "Traceback" not in res.output
    assert graph.read_text() == Path(WEBLECH).read_text()


def test_write_atomically_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    import os

    from fastlbp.cli.app import write_atomically
    from fastlbp.core.errors import InputError

    target = tmp_path / "out.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_atomically(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(InputError, match="No space left on device"):
        write_atomically(target, "newer")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


EXAMPLE_WEBLECH = str(Path(__file__).resolve().parents[1] / "data" / "weblech.json")


@pytest.mark.slow
def test_marginals_lists_every_tuple_and_all_adds_clause_variables(tmp_path):
    """Every one of weblech's 305 tuples is listed (91 have no variable: 67 constant inputs at 1.0, 24
    pruned); a label may name any of them (issue 20: `aliased(3,2) false` was an unknown variable)."""
    from datalog.bayesnet import rebuild, tuple_marginals
    from fastlbp.inference.session import marginals as run_marginals
    from fastlbp.io import loading

    labels = tmp_path / "l.txt"
    labels.write_text("aliased(3, 2)\tfalse\n")
    # LBP: deterministic, so the pruned and the unpruned model agree to 1e-7 (sampled, they differ by noise).
    res = invoke("marginals", EXAMPLE_WEBLECH, "--labels", str(labels), "--method", "lbp", "--tol", "1e-9")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)["marginals"]
    model = loading.load(EXAMPLE_WEBLECH)
    assert list(out) == list(model.tuple_names) and len(out) == 305
    assert out["aliased(3,2)"] == 0.0 and not any("#" in k or "@" in k for k in out)
    how = model.meta["tuple_how"]
    assert all(out[n] == 1.0 for n, h in zip(model.tuple_names, how, strict=True) if h == 1)  # constants
    # The same numbers as the label given on a model that never pruned anything.
    whole = rebuild(model, prune=False)
    v = whole.index["aliased(3,2)"]
    ref = tuple_marginals(whole, run_marginals(whole, {v: False}, Settings(method="lbp", tol=1e-9)).marginals)
    assert max(abs(out[n] - p) for n, p in zip(whole.tuple_names, ref.tolist(), strict=True)) < 1e-7
    res = invoke("marginals", EXAMPLE_WEBLECH, "--all", "--format", "csv", "--method", "lbp",
                 "--max-iters", "5")
    rows = res.stdout.splitlines()[1:]
    names = [r.rsplit(",", 1)[0].strip('"') for r in rows]
    assert names[:305] == list(model.tuple_names) and any("#" in n for n in names[305:])
    assert len(names) == 305 + sum(n not in model.tuple_index for n in model.var_names)


@pytest.mark.slow
def test_rank_and_check_take_a_label_on_a_pruned_tuple(tmp_path):
    """The issue's reproduction: `rank data/weblech.json -l l.txt` with `aliased(3,2) false` (pruned:
    no alarm depends on it) failed; the label keeps the tuple and acts as the same label in "labels"."""
    labels = tmp_path / "l.txt"
    labels.write_text("aliased(3,2) false\n")
    res = invoke("rank", EXAMPLE_WEBLECH, "-l", str(labels), "-f", "json", "--tol", "1e-9")
    assert res.exit_code == 0, res.output
    ranked = json.loads(res.stdout)
    graph = json.loads(Path(EXAMPLE_WEBLECH).read_text())
    graph["labels"] = {"aliased(3,2)": False}
    same = tmp_path / "g.json"
    same.write_text(json.dumps(graph))
    res = invoke("rank", str(same), "-f", "json", "--tol", "1e-9")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["alarms"] == ranked["alarms"]
    res = invoke("check", EXAMPLE_WEBLECH, "-l", str(labels), "--samples", "2000", "--reference", "sample",
                 "-f", "json")
    assert res.exit_code == 0, res.output


def test_only_the_cli_app_reads_the_environment():
    """Configuration travels as arguments: `fastlbp/cli/environment.py` is the one module that reads
    environment variables ($FASTLBP_BACKEND, $FASTLBP_CACHE, $XDG_DATA_HOME) and hands them down."""
    root = Path(__file__).resolve().parent.parent
    readers = []
    for package in ("fastlbp", "datalog", "schedules"):
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text()
            if re.search(r"\bos\.environ\b|\bgetenv\(|\benviron\.get\(", text):
                readers.append(path.relative_to(root).as_posix())
    assert readers == ["fastlbp/cli/environment.py"], readers


def test_every_command_that_reads_a_graph_takes_the_same_options():
    # One option set (fastlbp/cli/options.py): the loading options on every command that loads a graph,
    # the inference options on every command that runs inference, declared once.
    import typer.main

    from fastlbp.cli import get_app
    from fastlbp.cli.options import INFERENCE_PARAMETERS, LOAD_PARAMETERS

    commands = typer.main.get_command(get_app()).commands
    load = {name for name, _, _ in LOAD_PARAMETERS}
    inference = {name for name, _, _ in INFERENCE_PARAMETERS}
    for name in ("rank", "triage", "simulate", "marginals", "check", "info", "schedule"):
        params = {p.name for p in commands[name].params}
        assert load <= params, (name, load - params)
        if name not in ("info", "schedule"):
            assert inference <= params, (name, inference - params)


def test_a_file_of_no_known_format_is_named_as_such(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# not a graph\n")
    result = CliRunner().invoke(get_app(), ["rank", str(readme)])
    assert result.exit_code == 2
    assert "not a graph fastlbp reads" in result.output and ".dl" in result.output
    assert "number of factors" not in result.output
    out = CliRunner().invoke(get_app(), ["ground", "p.dl", "-o", str(tmp_path / "g.fg")])
    assert out.exit_code == 2 and "convert" in out.output


@pytest.mark.parametrize("command", ["rank", "marginals", "check", "simulate", "triage"])
@pytest.mark.parametrize("schedule, words", [("nosuch", "unknown schedule"),
                                             ("seqfix:bogus", "unknown schedule option")])
def test_the_plan_is_checked_before_the_graph_loads(command, schedule, words, monkeypatch):
    from fastlbp.cli.options import LoadOptions

    def never(*args, **kwargs):
        raise AssertionError("the graph was loaded before the plan was checked")

    monkeypatch.setattr(LoadOptions, "load", never)
    res = invoke(command, str(DATA / "race.json"), "--schedule", schedule)
    assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output
