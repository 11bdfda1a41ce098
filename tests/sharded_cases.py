"""The sharded engines on 4 devices against one device's: run by tests/test_sharded.py in a process of
its own with XLA_FLAGS=--xla_force_host_platform_device_count=4 (the flag must be set before JAX
starts, and the rest of the suite runs on one CPU device). Skipped in a process of fewer devices.

* the sharded sampler's tallies are one device's, bit for bit, for the same seed (labels, tilts,
  batches that do not divide among the devices);
* sharded PARALL's messages and marginals are one device's within 1e-12 (any partition, evidence).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from graphs import random_factors
from hypothesis import Phase, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from test_engines_sampling import random_dag

from fastlbp.core.graph import from_factors
from fastlbp.core.settings import Settings
from fastlbp.engines import loop, parall, sharded_parall
from fastlbp.engines.sampling import Sampler, sample_marginals
from fastlbp.engines.sharded_sampling import ShardedSampler, make_sampler

pytestmark = pytest.mark.skipif(jax.device_count() < 4, reason="4 devices: tests/test_sharded.py runs this "
                                "file with XLA_FLAGS=--xla_force_host_platform_device_count=4")

FIELDS = ("s1", "s2", "w1", "w2", "drawn", "positive")
# Every example compiles its programs (seconds each): no shrinking (it took minutes on a failure).
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def same_tally(a, b) -> None:
    for name in FIELDS:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.dtype == y.dtype and np.array_equal(x, y), (name, x, y)


@hsettings(max_examples=3, deadline=None, phases=NO_SHRINK)
@given(seed=st.integers(0, 10**6), words=st.integers(1, 11), devices=st.sampled_from([2, 3, 4]))
@example(seed=91907, words=2, devices=2)  # 1 ulp apart with e^top scales (now powers of two)
@example(seed=91907, words=7, devices=3)
def test_sampler_tallies_are_one_devices_bit_for_bit(seed, words, devices):
    """A random network, no labels then one or two (weights, sometimes a tilt), a run of `words` batches
    of one word (32 worlds) each: the batches do not divide among the devices."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 24))
    graph = from_factors(random_dag(rng, n), n)
    one = Sampler(graph, batch_words=1, host=False)
    # Made from the one-device sampler's plan (`from_sampler`) or planned afresh: the same.
    many = ShardedSampler.from_sampler(one, devices) if devices == 3 else \
        ShardedSampler(graph, batch_words=1, host=False, devices=devices)
    assert many.devices_used == devices
    label_sets = [{}, {int(v): bool(rng.integers(2)) for v in rng.choice(n, size=2, replace=False)},
                  {int(rng.integers(n)): True}]
    for labels in label_sets:
        a = one(labels, 32 * words, seed, max_samples=64 * words)
        b = many(labels, 32 * words, seed, max_samples=64 * words)
        same_tally(a, b)
        assert one.tilted_coins == many.tilted_coins


def test_sample_marginals_on_every_device_by_default():
    """`make_sampler` with devices None spreads over all 4; `sample_marginals` gives one device's numbers."""
    rng = np.random.default_rng(3)
    graph = from_factors(random_dag(rng, 30), 30)
    sampler = make_sampler(graph, host=False, batch_words=4)
    assert isinstance(sampler, ShardedSampler) and sampler.devices_used == 4
    cfg = Settings(samples=4096, seed=5, target_se=0)
    a = sample_marginals(graph, {3: True}, cfg, sampler=Sampler(graph, host=False, batch_words=4))
    b = sample_marginals(graph, {3: True}, cfg, sampler=sampler)
    assert np.array_equal(a.marginals, b.marginals) and np.array_equal(a.stderr, b.stderr)
    assert a.info["effective_samples"] == b.info["effective_samples"]


def one_device(graph, evidence, iters, tol):
    return parall.run(graph, evidence, settings=Settings(tol=tol, max_iters=iters, backend="xla"))


def close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    finite = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore"):
        ok = same | (finite & (np.abs(a - b) <= 1e-12 * np.maximum(1.0, np.abs(b))))
    assert ok.all(), (what, a[~ok], b[~ok])


@hsettings(max_examples=5, deadline=None, phases=NO_SHRINK)
@given(seed=st.integers(0, 10**6), random_cut=st.booleans(), summation=st.sampled_from(["xla", "scatter"]))
def test_sharded_parall_is_one_devices_within_1e_12(seed, random_cut, summation):
    """Random loopy graphs with hard parameters and evidence, cut by the partitioner or at random (most
    variables on the cut): 25 iterations, then a run to convergence, as one device's."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 40))
    graph = from_factors(random_factors(rng, n, int(rng.integers(n // 2, 2 * n))), n)
    evidence = np.zeros(n)
    for v in rng.choice(n, size=int(rng.integers(0, 3)), replace=False):
        evidence[v] = np.inf if rng.random() < 0.5 else -np.inf
    part = rng.integers(0, 4, graph.num_factors).astype(np.int32) if random_cut else None
    layout = sharded_parall.build(graph, 4, factor_part=part, summation=summation)
    for iters, tol in ((25, 0.0), (500, 1e-9)):
        ref = one_device(graph, evidence, iters, tol)
        ctl = loop.controls(tol, iters, 0.0)
        out = layout.gather(layout.run_local(layout.local_messages(np.zeros(graph.num_edges)),
                                             layout.local_evidence(evidence), ctl))
        assert int(out.iterations) == int(ref.iterations) and bool(out.conflict) == bool(ref.conflict)
        close(out.log_odds, ref.log_odds, "log_odds")
        close(out.messages, ref.messages, "messages")
        close(out.marginals, ref.marginals, "marginals")


def test_sharded_runner_is_a_runner():
    """`sharded_parall.make_runner`: global messages and evidence in and out, as `parall.run`'s; the
    factors' probabilities read from the graph handed to the round (a model after learning)."""
    rng = np.random.default_rng(11)
    graph = from_factors(random_factors(rng, 60, 90), 60)
    evidence = np.zeros(60)
    evidence[[3, 7]] = [np.inf, -np.inf]
    runner = sharded_parall.make_runner(graph, Settings(backend="xla"), devices=4)
    assert runner.name == "parall/sharded/xla" and runner.reads == loop.PARAMS and runner.info.devices == 4
    lean = loop.device_graph(graph, runner.reads)
    out = runner(lean, loop.init(graph), jax.numpy.asarray(evidence), loop.controls(1e-9, 300, 0.0))
    ref = one_device(graph, evidence, 300, 1e-9)
    close(out.log_odds, ref.log_odds, "log_odds")
    close(out.messages, ref.messages, "messages")
    assert int(out.iterations) == int(ref.iterations)
    learned = dataclasses.replace(graph, p1=np.asarray(graph.p1) * 0.9)
    out = runner(loop.device_graph(learned, runner.reads), loop.init(graph), jax.numpy.asarray(evidence),
                 loop.controls(1e-9, 300, 0.0))
    close(out.log_odds, one_device(learned, evidence, 300, 1e-9).log_odds, "log_odds after learning")


def test_plan_spreads_parall_from_the_threshold():
    """PARALL on XLA over every device from `SHARD_MIN_EDGES` edges (or `devices` of them), on one below."""
    from schedules.plan import SHARD_MIN_EDGES, make_plan

    big = make_plan(Settings(backend="xla")).for_graph(SHARD_MIN_EDGES)
    assert big.shards == 4 and big.engines() == ("parall/sharded",)
    assert make_plan(Settings(devices=2)).for_graph(SHARD_MIN_EDGES).shards == 2
    assert make_plan(Settings(devices=1)).for_graph(SHARD_MIN_EDGES).engines() == ("parall",)
    assert make_plan(Settings()).for_graph(SHARD_MIN_EDGES - 1).engines() == ("parall",)
    assert make_plan(Settings(schedule="seqfix")).for_graph(SHARD_MIN_EDGES).shards == 1
