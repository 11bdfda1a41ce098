"""The documented API example and the walkthrough notebook run end to end."""

import importlib.util
import os
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_api_example_runs(capsys):
    runpy.run_path(str(ROOT / "docs" / "api_example.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "1. race(1)" in out and "Rank-100%-T" in out and "why: strongest" in out


@pytest.mark.slow
@pytest.mark.skipif(any(importlib.util.find_spec(m) is None
                        for m in ("nbclient", "nbformat", "ipykernel", "matplotlib")),
                    reason="needs the notebooks extra (nbclient, nbformat, ipykernel, matplotlib)")
def test_walkthrough_notebook_executes(monkeypatch):
    import nbclient
    import nbformat
    # The kernel is a subprocess: make it import this checkout.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(ROOT / "notebooks" / "walkthrough.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Rank-100%-T" in text and "warm round" in text


def test_readme_python_api_example_prints_what_readme_shows(capsys, monkeypatch):
    """README's "Python API" example, run as printed from the repository root: its output is the block
    that follows it in README (issue 40: it printed 0.0 for the alarm it had labelled, and took 2 minutes
    without a cache)."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Python API"):]
    code, shown = re.search(r"```python\n(.*?)```.*?```\n(.*?)```", section, re.S).groups()
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md (Python API)", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out == shown
