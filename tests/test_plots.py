"""Plots of `fastlbp simulate --plot` (`fastlbp.io.plots`): the data drawn, checked without matplotlib
against brute force over every labelling order, and the files (only where matplotlib is installed: the
`plots` and `notebooks` extras)."""

import dataclasses
import importlib.util
import itertools
import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from triage_support import demo_model, write_demo
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.settings import Settings
from fastlbp.inference import metrics
from fastlbp.inference import simulate as sim
from fastlbp.io import plots

HAS_MPL = importlib.util.find_spec("matplotlib") is not None
runner = CliRunner()


def orders(num_true: int, num_false: int):
    """Every distinct labelling order of N_T true and N_F false alarms (as 0/1 tuples)."""
    n = num_true + num_false
    for trues in itertools.combinations(range(n), num_true):
        yield tuple(int(i in trues) for i in range(n))


def run_of(sequence, num_alarms, seconds=None) -> sim.SimulationResult:
    """A complete run labelling `sequence` (its last label the last true alarm) out of `num_alarms`."""
    seconds = seconds or [0.01 * (i + 1) for i in range(len(sequence))]
    steps = [sim.Step(f"a({i})", i, bool(t), 0.5, s, 10, True)
             for i, (t, s) in enumerate(zip(sequence, seconds, strict=True))]
    m = metrics.summarize(sequence, seconds, num_alarms=num_alarms)
    return sim.SimulationResult(steps, m, 0.0, num_alarms, True)


def step_area(x, y) -> float:
    """Area under a steps-post curve."""
    return float(np.sum(np.diff(x) * y[:-1]))


def line_area(x, y) -> float:
    """Area under a piecewise-linear curve."""
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))


@pytest.mark.parametrize("num_true,num_false", [(1, 1), (2, 3), (3, 2), (1, 5), (4, 3), (0, 3), (3, 0)])
def test_random_baseline_is_the_mean_over_every_order(num_true, num_false):
    n = num_true + num_false
    all_orders = list(orders(num_true, num_false))
    mean_found = [Fraction(sum(sum(o[:i]) for o in all_orders), len(all_orders)) for i in range(n + 1)]
    curve = plots.random_found(num_true, n, n)
    assert curve.baseline and list(curve.x) == list(range(n + 1))
    assert curve.y == pytest.approx([float(f) for f in mean_found])
    ideal = plots.ideal_found(num_true, n)
    assert list(ideal.y) == [max(sum(o[:i]) for o in all_orders) for i in range(n + 1)]
    if num_true and num_false:
        # ROC: a random order's mean AUC is the diagonal's area, the best order's the ideal curve's.
        mean_auc = np.mean([metrics.auc(o) for o in all_orders])
        rnd, best = plots.random_roc(num_true, num_false), plots.ideal_roc(num_true, num_false)
        assert line_area(rnd.x, rnd.y) / (num_true * num_false) == pytest.approx(mean_auc)
        assert mean_auc == pytest.approx(0.5)
        assert line_area(best.x, best.y) / (num_true * num_false) == max(metrics.auc(o) for o in all_orders)
        assert (rnd.x[-1], rnd.y[-1]) == (best.x[-1], best.y[-1]) == (num_false, num_true)


@hsettings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12).filter(any), st.integers(0, 6))
def test_the_roc_drawn_has_the_auc_reported(labelled, unlabelled_false):
    sequence = labelled[:max(i for i, t in enumerate(labelled) if t) + 1]  # a run stops at its last true
    n = len(sequence) + unlabelled_false
    result = run_of(sequence, n)
    roc, over_time = plots.plot_data(result)
    run = roc.curves[0]
    m = result.metrics
    assert (run.x[-1], run.y[-1]) == (m.num_false, m.num_true)  # the unlabelled rest is false
    if m.num_false:
        assert step_area(run.x, run.y) / (m.num_true * m.num_false) == pytest.approx(m.auc)
    assert f"AUC {m.auc:.3f}" in roc.title if m.auc is not None else "AUC n/a" in roc.title
    found = over_time.curves[0]
    assert list(found.x) == list(range(len(sequence) + 1))
    assert list(found.y) == [0] + list(np.cumsum(sequence))
    rnd, ideal = over_time.curves[1:]
    upto = max(len(sequence), m.num_true)
    assert rnd.x[-1] == ideal.x[-1] == upto
    assert rnd.y[-1] == pytest.approx(upto * m.num_true / n) and ideal.y[-1] == min(upto, m.num_true)
    assert f"TotalTime {m.total_time_s:.3g} s" in over_time.title


def test_titles_name_the_graph_and_the_settings():
    result = run_of([False, True], 4)
    cases = [(Settings(method="lbp", schedule="seqfix", tol=1e-4, damping=0.2),
              ["LBP seqfix", "tol 0.0001", "damping 0.2", "f64"]),
             (Settings(method="exact", precision="f32"), ["exact inference", "f32"]),
             (Settings(method="sample", samples=5000, seed=3), ["sampling", "5,000 worlds", "seed 3"])]
    for s, words in cases:
        for data in plots.plot_data(result, graph="some/dir/race.json", settings=s):
            line2 = data.title.splitlines()[1]
            assert line2.startswith("race.json: ") and all(w in line2 for w in words), line2
    titles = [d.title for d in plots.plot_data(result)]
    assert all("\n" not in t for t in titles)  # nothing to name: one line
    assert plots.describe(None, None) == ""


def test_titles_name_the_method_that_made_the_rounds():
    # Under "auto" (the default) the title is the rounds' method, never LBP's settings for a sampled run.
    result = run_of([False, True], 4)
    sampled = dataclasses.replace(result, steps=[dataclasses.replace(s, method="sample")
                                                 for s in result.steps])
    line2 = plots.plot_data(sampled, graph="race.json",
                            settings=Settings(samples=5000))[0].title.splitlines()[1]
    assert line2 == "race.json: sampling, 5,000 worlds, seed 0"
    fallback = dataclasses.replace(sampled, steps=[sampled.steps[0], dataclasses.replace(sampled.steps[1],
                                                                                         method="lbp")])
    line2 = plots.plot_data(fallback, graph="race.json", settings=Settings())[0].title.splitlines()[1]
    assert line2.startswith("race.json: sampling, 100,000 worlds, seed 0 (1 round); LBP parall, tol 1e-06")
    assert line2.endswith("(1 round)")
    # Rounds of unknown method (a run built by hand) under "auto": the title says no method it cannot know.
    assert "LBP" not in plots.plot_data(result, graph="race.json", settings=Settings())[0].title


def test_simulate_plots_a_sampled_run_as_sampled(tmp_path):
    graph, oracle = write_demo(tmp_path)
    res = runner.invoke(get_app(), ["simulate", str(graph), "--oracle", str(oracle), "--method", "sample",
                                    "--samples", "2000", "--no-cache", "-f", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["methods"] == {"sample": doc["rounds"]}
    assert {label["method"] for label in doc["labels"]} == {"sample"}
    model = demo_model()
    settings = Settings(method="sample", samples=2000)
    result = sim.simulate(model, sim.read_oracle(oracle, model), settings=settings)
    assert "sampling" in sim.to_table(result) and "LBP" not in sim.to_table(result)
    for data in plots.plot_data(result, graph=graph, settings=settings):
        assert "sampling, 2,000 worlds" in data.title and "LBP" not in data.title


def test_a_run_cut_short_is_drawn_as_far_as_it_went(tmp_path):
    _, oracle = write_demo(tmp_path)
    model = demo_model()
    truth = sim.read_oracle(oracle, model)
    result = sim.simulate(model, truth, max_rounds=2)
    assert not result.complete
    roc, over_time = plots.plot_data(result, graph="g.json")
    run = roc.curves[0]
    assert len(run.x) == 3 and "stopped after 2 labels" in run.label  # not extended to N_F
    assert run.y[-1] == sum(s.truth for s in result.steps)
    m = result.metrics
    assert (roc.curves[1].x[-1], roc.curves[1].y[-1]) == (m.num_false, m.num_true)
    assert over_time.curves[2].x[-1] == max(2, m.num_true)


@pytest.mark.skipif(not HAS_MPL, reason="needs matplotlib (the plots extra)")
def test_figures_have_baselines_titles_and_integer_ticks():
    plt = plots.require_matplotlib()
    result = run_of([False, True, False, False, True], 9)
    for data in plots.plot_data(result, graph="race.json", settings=Settings()):
        fig = plots.figure(plt, data)
        ax = fig.axes[0]
        assert ax.get_title() == data.title
        labels = [line.get_label() for line in ax.get_lines()]
        assert any("random order" in t for t in labels) and "ideal order" in labels
        fig.canvas.draw()
        for ticks in (ax.get_xticks(), ax.get_yticks()):
            assert np.all(ticks == np.round(ticks)), ticks
        plt.close(fig)


@pytest.mark.skipif(not HAS_MPL, reason="needs matplotlib (the plots extra)")
def test_cli_plot_files(tmp_path):
    graph, oracle = write_demo(tmp_path)
    res = runner.invoke(get_app(), [str(a) for a in ("simulate", graph, "--oracle", oracle, "--plot",
                                                     tmp_path / "plots", "--max-iters", "300")])
    assert res.exit_code == 0, res.output
    for name in ("roc.png", "true_alarms_over_time.png"):
        data = (tmp_path / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert f"wrote {tmp_path / 'plots' / name}" in res.stderr


@pytest.mark.skipif(HAS_MPL, reason="matplotlib installed")
def test_without_matplotlib_the_data_is_still_there():
    result = run_of([True], 2)
    assert len(plots.plot_data(result)) == 2
    with pytest.raises(plots.PlotsUnavailable, match="fastlbp\\[plots\\]"):
        plots.write_plots(result, "unused")
