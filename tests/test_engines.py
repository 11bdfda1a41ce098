"""fastlbp/engines/__init__.py: which engine runs which schedule and backend, and the Runner contract."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from conftest import DATA
from graphs import evidence_from_labels

import schedules
from datalog import causal_fg
from fastlbp import engines
from fastlbp.core.errors import InputError, SettingsError
from fastlbp.core.graph import AND, OR, Factor, from_factors
from fastlbp.core.settings import Settings
from fastlbp.engines import chunked, loop, persistent, relaxed
from schedules.plan import make_plan

WEBLECH = DATA / "weblech"


def _weblech():
    return causal_fg.load(WEBLECH / "graph.causal_fg")


def _small():
    return from_factors([Factor(AND, 0, (1, 2), 0.9, 0.0), Factor(OR, 1, (2,), 0.8, 0.1),
                         Factor(AND, 2, (), 0.5, 0.5)])


@pytest.mark.parametrize("schedule, backend, name", [
    ("parall", "xla", "parall/xla"),
    ("parall", "scatter", "parall/scatter"),
    ("parall", "pallas_interpret", "parall/pallas_interpret"),
    ("parall", "fused_interpret", "parall/fused"),
    ("seqfix", "xla", "seqfix/relaxed"),
    ("topo", "xla", "topo/relaxed"),
    ("seqfix:chunked", "xla", "seqfix/chunked"),
    ("topo:chunked", "scatter", "topo/chunked"),
    ("seqrnd", "xla", "seqrnd/chunked"),
    # Relaxation stays the default engine with a fused backend; the chunk plans run in the
    # persistent kernel.
    ("seqfix", "fused_interpret", "seqfix/relaxed"),
    ("seqfix:chunked", "fused_interpret", "seqfix/persistent"),
    ("seqrnd", "fused_interpret", "seqrnd/persistent"),
])
def test_the_dispatcher_picks_the_engine_of_schedule_and_backend(schedule, backend, name):
    runner = engines.make_runner(_small(), Settings(schedule=schedule, backend=backend))
    assert runner.name == name


def test_engine_keys_table():
    def keys(schedule, backend):
        return make_plan(Settings(schedule=schedule, backend=backend), platform="gpu").engines()

    assert keys("parall", "xla") == ("parall",)
    assert keys("parall", "fused") == ("parall/fused",)
    assert keys("seqfix", "xla") == ("relaxed", "chunked")
    assert keys("seqfix", "fused_interpret") == ("relaxed", "persistent")
    assert keys("seqfix:chunked", "pallas") == ("chunked",)
    assert keys("seqrnd:chunked", "fused") == ("persistent",)
    assert set(engines.ENGINES) == {"parall", "parall/fused", "parall/sharded", "relaxed", "chunked",
                                    "persistent"}


def test_runners_carry_their_layout_and_host_facts():
    g = _small()
    rel = engines.make_runner(g, Settings(schedule="seqfix"))
    assert isinstance(rel.layout, relaxed.RelaxLayout)
    assert isinstance(rel.info.compiled, schedules.Relaxation) and rel.info.relaxation is rel.info.compiled
    assert rel.info.compiled.plan.virtual_edges == g.num_edges
    chk = engines.make_runner(g, Settings(schedule="seqfix:width=4:chunked"))
    assert isinstance(chk.layout, chunked.ChunkLayout)
    assert isinstance(chk.info.compiled, schedules.Compiled) and chk.layout.plan.width == 4
    per = engines.make_runner(g, Settings(schedule="seqfix:chunked", backend="fused_interpret"))
    assert isinstance(per.layout, chunked.ChunkLayout) and per.layout.plan.width == persistent.WIDTH
    assert per.info.tuning["atomic"] is False
    assert engines.make_runner(g, Settings(schedule="parall:unroll=3")).info.unroll == 3


def test_a_spec_that_cannot_relax_falls_back_to_the_chunk_loop():
    model = _weblech()
    # SEQRND cycles several orders: no single sweep to relax.
    runner = engines.make_runner(model, Settings(schedule="seqrnd"))
    assert runner.name == "seqrnd/chunked" and isinstance(runner.layout, chunked.ChunkLayout)
    assert not isinstance(runner.info.compiled, schedules.Relaxation) and runner.info.relaxation is None
    assert len(runner.info.compiled.analyses) == 8
    # One SEQRND order splits the factors into ~one reader group per edge (too many).
    assert schedules.relaxation_plan(model, "seqrnd:cycle=1") is None
    one = engines.make_runner(model, Settings(schedule="seqrnd:cycle=1"))
    assert one.name == "seqrnd/chunked"
    assert schedules.describe(model, "seqrnd:cycle=1")["engine"] == "chunked"


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="checks the CPU refusal of GPU backends")
@pytest.mark.parametrize("backend", ["fused", "pallas"])
def test_gpu_backends_without_a_gpu_are_a_settings_error(backend):
    for schedule in ("parall", "seqfix", "seqfix:chunked"):
        with pytest.raises(SettingsError, match="needs a GPU"):
            engines.make_runner(_small(), Settings(schedule=schedule, backend=backend))
    # The plan refuses them before any graph is loaded.
    with pytest.raises(SettingsError, match=f"{backend}_interpret"):
        make_plan(Settings(backend=backend))
    assert make_plan(Settings(backend=f"{backend}_interpret")).interpret
    make_plan(Settings(backend="xla")).placed()


def test_bad_specs_are_input_errors():
    model = _weblech()
    for spec, words in [("nosuch", "unknown schedule"), ("seqfix:bogus", "unknown schedule option"),
                        ("seqfix:width=x", "not an integer")]:
        with pytest.raises(InputError, match=words):
            engines.make_runner(model, Settings(schedule=spec))


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["seqfix", "seqfix:chunked"])
def test_no_recompilation_when_evidence_or_settings_change(spec):
    model = _weblech()
    runner = engines.make_runner(model, Settings(schedule=spec))
    jitted = relaxed.run if spec == "seqfix" else chunked.jitted_run(1)
    assert runner.run is jitted
    graph = model.graph
    before = jitted._cache_size()
    n = model.num_vars
    sizes = []
    for labels, tol, iters, damping in [({}, 1e-6, 5, 0.0), ({3: True}, 1e-3, 7, 0.2),
                                        ({87: False, 5: True}, 1e-9, 3, 0.5)]:
        ev = jnp.asarray(evidence_from_labels(n, labels))
        runner(graph, jnp.zeros(graph.num_edges), ev, loop.controls(tol, iters, damping))
        sizes.append(jitted._cache_size())
    # At most one compilation (none if an earlier test compiled these shapes), then none.
    assert sizes[0] - before <= 1 and sizes[-1] == sizes[0]


@pytest.mark.parametrize("schedule", ["parall", "seqfix", "seqrnd"])
def test_backend_auto_is_the_default_and_xla_on_a_cpu(schedule):
    assert Settings().backend == "auto"
    runner = engines.make_runner(_weblech(), Settings(schedule=schedule))
    assert runner.info.backend == "xla" and runner.info.reason.startswith("auto: xla")
    if schedule == "parall":
        assert runner.name == "parall/xla"
    # Named, it is taken as it is (and said so without a reason).
    named = engines.make_runner(_weblech(), Settings(schedule=schedule, backend="scatter"))
    assert named.info.backend == "scatter" and named.info.reason is None


@pytest.mark.parametrize("platform, strategy, edges, want", [
    ("cpu", "parall", 10**8, "xla"),
    ("tpu", "parall", 10**8, "xla"),
    ("gpu", "parall", engines.FUSED_MIN_EDGES - 1, "xla"),
    ("gpu", "parall", engines.FUSED_MIN_EDGES, "fused"),
    ("gpu", "parall", 688_090, "fused"),
    ("gpu", "parall", 10**8, "fused"),
    ("gpu", "seqfix", 10**8, "xla"),
    ("gpu", "topo", 688_090, "xla"),
    ("gpu", "file", 688_090, "xla"),
])
def test_auto_backend_rule(platform, strategy, edges, want):
    plan = make_plan(Settings(schedule="parall"), platform=platform)
    plan = dataclasses.replace(plan, schedule=dataclasses.replace(plan.schedule, strategy=strategy))
    chosen = plan.for_graph(edges)
    assert chosen.kernels == want and chosen.reason.startswith(f"auto: {want}")
    assert chosen.for_graph(1).kernels == want  # decided once: a concrete plan stays as it is


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="checks the CPU refusal of GPU backends")
@pytest.mark.parametrize("method", ["auto", "exact", "sample"])
def test_lbp_options_are_checked_whatever_the_method(method, tmp_path):
    # A session that starts without LBP may fall back to it rounds later: a GPU backend on a CPU or a
    # schedule typo fails when the session is made, not then.
    from fastlbp.core.errors import InputError
    from fastlbp.core.model import Model
    from fastlbp.inference.session import Session

    model = Model(graph=_small(), var_names=("x0", "x1", "x2"))
    with pytest.raises(SettingsError, match="needs a GPU"):
        Session(model, method=method, backend="pallas")
    with pytest.raises(InputError, match="unknown schedule"):
        Session(model, method=method, schedule="seqfixx")
    session = Session(model, method=method, backend="xla", schedule="seqfix:chunked")
    assert session.run().marginals.shape == (3,)
