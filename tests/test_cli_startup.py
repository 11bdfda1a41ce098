"""Start-up of the `fastlbp` command: what each command imports, the model cache through the CLI,
--timings, --quiet and the progress reporter."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.cli.progress import Progress, process_age, visible

ROOT = Path(__file__).resolve().parents[1]
WEBLECH = str(ROOT / "data" / "weblech.json")

# Run a command in a fresh interpreter and list the modules it imported (stdout's last line).
PROBE = """
import json, sys
from fastlbp.cli import main
sys.argv = ["fastlbp", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def run(*args: str, cache: str = "off") -> subprocess.CompletedProcess:
    env = {**os.environ, "FASTLBP_CACHE": cache, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "fastlbp", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


def imported(*args: str) -> set[str]:
    env = {**os.environ, "FASTLBP_CACHE": "off", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def loaded(modules: set[str], *names: str) -> list[str]:
    return [n for n in names if n in modules or any(m.startswith(n + ".") for m in modules)]


# Imports ------------------------------------------------------------------------------

# What only some commands need: the session and engines (inference), the schedule analysis (every
# module of `schedules` but `plan`, which every command reads to check --schedule), triage, SARIF, Pallas
# kernels.
SCHEDULE_ANALYSIS = tuple(f"schedules.{f.stem}" for f in sorted((ROOT / "schedules").glob("*.py"))
                          if f.stem not in ("__init__", "plan"))
HEAVY = ("fastlbp.inference.session", "fastlbp.engines", *SCHEDULE_ANALYSIS, "fastlbp.triage",
         "fastlbp.io.sarif", "fastlbp.core.pallas_segments", "jax.experimental.pallas")


def test_help_imports_no_inference_schedules_or_triage():
    modules = imported("--help")
    assert "typer" in modules  # the probe ran the app
    assert loaded(modules, *HEAVY) == []


def test_info_imports_no_inference_schedules_or_triage():
    modules = imported("info", WEBLECH)
    assert "fastlbp.io.loading" in modules
    assert loaded(modules, *HEAVY) == []


@pytest.mark.slow
def test_rank_imports_no_schedule_analysis_triage_or_sarif():
    modules = imported("rank", WEBLECH, "--top", "1")
    assert "fastlbp.inference.session" in modules
    assert loaded(modules, "fastlbp.triage", "fastlbp.io.sarif", "fastlbp.inference.check") == []


def test_checks_reference_choices_are_the_librarys():
    from fastlbp.cli.check import Reference
    from fastlbp.inference import check

    assert tuple(r.value for r in Reference) == check.REFERENCES


# The model cache and --timings through the command line -----------------------------------

def stages(stderr: str) -> dict[str, float]:
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("timings: ")]
    out = {}
    for part in line[len("timings: "):].split(", "):
        name, seconds, unit = part.rsplit(" ", 2)
        assert unit == "s"
        out[name] = float(seconds)
    return out


@pytest.mark.slow
def test_a_second_rank_reads_the_model_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = run("rank", WEBLECH, "--top", "3", "--method", "lbp", "--timings", cache=str(cache))
    assert first.returncode == 0, first.stderr
    assert "load: loading" in stages(first.stderr)
    assert len(list((cache / "models").glob("*.model"))) == 1
    second = run("rank", WEBLECH, "--top", "3", "--method", "lbp", "--timings", cache=str(cache))
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    s = stages(second.stderr)
    assert "load: checking the model cache" in s and "load: loading" not in s
    for stage in ("imports", "jax start", "session", "first round", "output", "first round: jit trace"):
        assert stage in s, stage
    memory = [ln for ln in second.stderr.splitlines() if ln.startswith("memory: ")]
    assert memory and "edges " in memory[0] and "host_peak_rss_bytes " in memory[0]


def test_no_cache_neither_reads_nor_writes_models(tmp_path):
    cache = tmp_path / "cache"
    res = run("rank", WEBLECH, "--top", "3", "--timings", "--no-cache", cache=str(cache))
    assert res.returncode == 0, res.stderr
    assert "load: loading" in stages(res.stderr)
    assert not (cache / "models").exists() or not any((cache / "models").iterdir())


def test_quiet_and_no_cache_are_options_of_every_command_that_loads_a_graph():
    runner = CliRunner()
    for command in ("rank", "triage", "simulate", "marginals", "check", "info", "schedule"):
        res = runner.invoke(get_app(), [command, "--help"], terminal_width=200)
        assert res.exit_code == 0, res.output
        for flag in ("--quiet", "-q", "--no-cache"):
            assert flag in res.output, (command, flag)
        assert "--timings" not in res.output  # hidden: for benchmarks


@pytest.mark.slow
def test_timings_are_off_by_default_and_progress_is_off_without_a_terminal(tmp_path):
    res = run("rank", WEBLECH, "--top", "2", cache=str(tmp_path / "c"))
    assert res.returncode == 0, res.stderr
    assert "timings:" not in res.stderr and "\r" not in res.stderr


# The reporter -------------------------------------------------------------------------

class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_visible_only_on_a_terminal_and_not_quiet():
    assert visible(False, FakeTerminal())
    assert not visible(True, FakeTerminal())
    assert not visible(False, io.StringIO())


def test_a_long_stage_is_drawn_then_erased_and_timed():
    out = FakeTerminal()
    with Progress(show=True, stream=out, delay=0.05) as progress:
        with progress.stage("loading"):
            time.sleep(0.6)
        progress("short")
    text = out.getvalue()
    assert text.count("\rloading... 0 s") == 1  # drawn again only when the seconds change
    assert text.endswith("\r\033[K")  # erased
    assert "short" not in text  # under the delay: never drawn
    assert progress.times["loading"] >= 0.6 and "short" in progress.times
    assert progress.report().startswith("timings: loading ")


def test_nothing_is_drawn_when_hidden():
    out = FakeTerminal()
    with Progress(show=False, stream=out, delay=0.0) as progress:
        progress("loading")
        time.sleep(0.3)
    assert out.getvalue() == ""
    assert "loading" in progress.times


def test_a_failing_command_erases_its_progress_line_before_the_error(tmp_path):
    out = FakeTerminal()
    progress = Progress(show=True, stream=out, delay=0.0)
    progress("loading")
    time.sleep(0.4)
    Progress.close_all()
    assert out.getvalue().endswith("\r\033[K")


def test_parts_within_stages_come_after_them():
    progress = Progress(show=False)
    progress.add("imports", 1.0)
    progress("first round")
    progress.add("jit trace", 0.25, within=True)
    progress("output")
    progress.close()
    names = [p.rsplit(" ", 2)[0] for p in progress.report()[len("timings: "):].split(", ")]
    assert names == ["imports", "first round", "output", "first round: jit trace"]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc here")
def test_process_age_counts_from_the_interpreter_start():
    age = process_age()
    assert age is not None and 0 < age < 24 * 3600
