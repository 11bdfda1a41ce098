"""The sharded engines (`fastlbp.engines.sharded_sampling`, `sharded_parall`, `partition`) and sharded
derivation.npz files (`datalog.npz.write_sharded`): the host parts here, on one device; the engines'
results on 4 virtual CPU devices in a process of its own (tests/sharded_cases.py: XLA_FLAGS must be
set before JAX starts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from graphs import random_factors
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from test_datalog_npz import same_graph
from test_datalog_transform import random_derivation

from datalog import npz
from fastlbp.core import segments
from fastlbp.core.errors import InputError
from fastlbp.core.graph import from_factors
from fastlbp.engines import partition, sharded_parall

CASES = Path(__file__).with_name("sharded_cases.py")


@pytest.mark.slow
def test_on_four_virtual_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:randomly",
                           "-p", "no:cacheprovider", str(CASES)], env=env, capture_output=True, text=True,
                          timeout=800, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and "5 passed" in done.stdout and "skipped" not in done.stdout, \
        done.stdout[-6000:] + done.stderr[-3000:]


def test_padded_plans_sum_as_the_plans():
    """Segment plans of different shapes padded to one (`pad_plans`) give the same sums, bit for bit."""
    rng = np.random.default_rng(0)
    size = 400  # one source size for all, as the local graphs' padded edges
    built = []
    for lengths in ([1, 3, 0, 40, 2], [5], [0, 0, 1], [300, 1, 17, 4]):
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        built.append(segments.build(offsets, rng.permutation(size)[:offsets[-1]], size))
    padded = sharded_parall.pad_plans(built, size)
    assert len({tuple(lv.shape for lv in p.levels) for p in padded}) == 1
    assert len({p.final.shape for p in built}) > 1 and len({lv.shape for p in built for lv in p.levels}) > 2
    for b, p in zip(built, padded, strict=True):
        x = rng.normal(size=size)
        assert np.array_equal(np.asarray(segments.segment_sum(b, x)), np.asarray(segments.segment_sum(p, x)))


def test_partition_keeps_components_whole_and_edges_even():
    """Four disjoint copies of a graph in four parts: no variable on the cut, equal edges."""
    rng = np.random.default_rng(2)
    factors = random_factors(rng, 30, 40)
    copies = [f.__class__(f.kind, f.head + 30 * k, tuple(v + 30 * k for v in f.body), f.p1, f.p2)
              for k in range(4) for f in factors]
    graph = from_factors(copies, 120)
    part = partition.factor_parts(graph, 4)
    stats = partition.cut_stats(graph, part, 4)
    assert stats["cut_variables"] == 0 and len(set(stats["edges"])) == 1


def test_local_graphs_hold_every_edge_once():
    """`cut_graph`: every global edge in exactly one part, each local edge on the variable and with the
    factor parameters of its global edge; padding edges carry messages of no effect (p1 = p2 = 1/2)."""
    rng = np.random.default_rng(5)
    graph = from_factors(random_factors(rng, 50, 70), 50)
    parts = sharded_parall.cut_graph(graph, 3, rng.integers(0, 3, graph.num_factors))
    ei = parts.edge_index
    real = ei < graph.num_edges
    assert np.array_equal(np.sort(ei[real]), np.arange(graph.num_edges))
    for d in range(3):
        local = np.asarray(parts.graphs.edge_var[d])
        k = np.flatnonzero(real[d])
        assert np.array_equal(parts.var_index[d][local[k]], np.asarray(graph.edge_var)[ei[d][k]])
        lf = np.asarray(parts.graphs.edge_factor[d])
        assert np.array_equal(np.asarray(parts.graphs.p1[d])[lf[k]],
                              np.asarray(graph.p1)[np.asarray(graph.edge_factor)[ei[d][k]]])
        assert np.all(np.asarray(parts.graphs.p1[d])[lf[~real[d]]] == 0.5)
    # Each variable is owned once.
    owned = parts.var_index[parts.owned]
    assert np.array_equal(np.sort(owned), np.arange(graph.num_vars))


@hsettings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), parts=st.integers(1, 6))
def test_sharded_npz_reads_back_the_same(tmp_path_factory, seed, parts):
    """`npz.write_sharded` then `npz.read` (the first part names the others, read in parallel): the same
    graph, every field, whatever the parts (more parts than clauses too)."""
    dg = random_derivation(seed)
    dg.labels = {int(dg.alarms[0]): True} if len(dg.alarms) else {}
    path = tmp_path_factory.mktemp("shards") / "g.npz"
    written = npz.write_sharded(dg, path, parts)
    assert written[0] == path and len(written) == parts and all(p.is_file() for p in written)
    back, _ = npz.read_sharded(path)
    same_graph(back, dg)


def test_sharded_npz_errors_name_the_part(tmp_path):
    """A missing part, a part read alone, a part of another graph: errors naming the file, no traceback."""
    dg = random_derivation(7)
    path = tmp_path / "g.npz"
    first, second, third = npz.write_sharded(dg, path, 3)
    with pytest.raises(InputError, match="part 2 of 3 of a sharded derivation.npz: read its first part"):
        npz.read(second)
    second.rename(tmp_path / "moved.npz")
    with pytest.raises(InputError) as err:
        npz.read(first)
    assert err.value.path == str(second)
    (tmp_path / "moved.npz").rename(second)
    third.write_bytes(second.read_bytes())
    with pytest.raises(InputError, match="this is part 2 of 3; g.npz lists it as part 3 of 3"):
        npz.read(first)


def test_rounds_say_on_how_many_devices():
    """The summary line names the devices of a round that ran on several, and only then."""
    from fastlbp.inference.methods import describe, summary_dict
    from fastlbp.inference.rounds import Round

    def rnd(method, info):
        return Round(marginals=np.zeros(1), log_odds=np.zeros(1), iterations=3, converged=True, delta=0.0,
                     seconds=0.0, method=method, info=info)

    assert describe(rnd("sample", {"samples": 64, "effective_samples": 64.0, "devices": 4})).endswith(
        "worlds (effective 64), on 4 devices")
    assert "on 2 devices, unchecked" in describe(rnd("lbp", {"devices": 2}))
    assert "devices" not in describe(rnd("lbp", None)) and "devices" not in summary_dict(rnd("lbp", None))
    assert summary_dict(rnd("sample", {"devices": 4}))["devices"] == 4


def test_devices_setting_is_checked():
    from fastlbp.core.errors import SettingsError
    from fastlbp.core.settings import Settings
    from schedules.plan import make_plan

    with pytest.raises(SettingsError, match="devices must be a positive integer"):
        Settings(devices=0)
    with pytest.raises(SettingsError, match="--devices 64: JAX sees"):
        make_plan(Settings(devices=64)).placed()


def test_a_resumed_session_keeps_the_devices_given():
    """--devices is where a session computes, not what: not stored, taken from the caller on resume."""
    from fastlbp.core.settings import INFERENCE_FIELDS, Settings
    from fastlbp.triage.stored import stored_settings

    assert "devices" not in INFERENCE_FIELDS
    stored = Settings(schedule="seqfix").inference()
    resumed = stored_settings(stored, Settings(devices=2))
    assert resumed.devices == 2 and resumed.schedule == "seqfix"


def test_partition_keeps_clauses_with_their_tuples():
    """A generated derivation network in 4 parts: the variables of two factors (clauses) are on the cut
    only where a group larger than a part is split, far fewer than in a random order of the factors."""
    from datalog.bayesnet import to_model
    from datalog.synthetic import generate

    graph = to_model(generate(factor_edges=20_000, seed=1), compress=False).graph
    part = partition.factor_parts(graph, 4)
    random = partition.factor_parts(graph, 4, np.random.default_rng(0).permutation(graph.num_factors))
    ours, theirs = (partition.cut_stats(graph, p, 4)["cut_variables"] for p in (part, random))
    assert ours < theirs / 2, (ours, theirs)
    offsets = np.asarray(graph.var_offsets)
    first = offsets[np.flatnonzero(np.diff(offsets) == 2)]
    edge_part = part[np.asarray(graph.edge_factor)][np.asarray(graph.var_edges)]
    split = np.count_nonzero(edge_part[first] != edge_part[first + 1])
    assert split <= 0.01 * first.size, (split, first.size)


def test_convert_writes_parts_that_rank_reads(tmp_path):
    """`fastlbp convert --parts 3`, then `rank` of the first part; every part's bytes are recorded for the
    model cache (a part changed on disk is a changed graph)."""
    from typer.testing import CliRunner

    from fastlbp.cli import get_app
    from fastlbp.core.errors import recorded_reads

    race = Path(__file__).resolve().parents[1] / "data" / "race.json"
    app = get_app()
    out = CliRunner().invoke(app, ["convert", str(race), str(tmp_path / "race.npz"), "--parts", "3"])
    assert out.exit_code == 0, out.output
    names = ["race.npz", "race.part1-of-3.npz", "race.part2-of-3.npz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    with recorded_reads() as reads:
        npz.read(tmp_path / "race.npz")
    assert sorted(p.name for p, digest in reads if digest) == sorted(p.name for p in tmp_path.iterdir())
    ranked = CliRunner().invoke(app, ["rank", str(tmp_path / "race.npz"), "--method", "lbp", "--no-cache",
                                      "--format", "json"])
    assert ranked.exit_code == 0 and '"leak(3)"' in ranked.output, ranked.output
    refused = CliRunner().invoke(app, ["convert", str(race), str(tmp_path / "r.json"), "--parts", "2"])
    assert refused.exit_code == 2 and "--parts writes derivation.npz in parts, not json" in refused.output
