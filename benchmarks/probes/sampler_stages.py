"""Where a device sampler round's time goes: coins, propagation and the whole round, per batch width.

    python benchmarks/probes/sampler_stages.py data/avrora.json.gz 512 4096
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from fastlbp.engines import sampling, sampling_program  # noqa: E402
from fastlbp.io.loading import load  # noqa: E402


def best(fn, n=5):
    jax.block_until_ready(fn())
    out = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        out = min(out, time.perf_counter() - t0)
    return out


def main():
    model = load(sys.argv[1])
    for width in (int(w) for w in sys.argv[2:]):
        s = sampling.Sampler(model.graph, model.var_names, host=False, batch_words=width)
        s.reserve(model.alarms)
        prog = s.program
        coins_fn, prop_fn = prog.stages(width)
        key = jnp.asarray(sampling.seed_key(1))
        arrays = s.arrays
        coins = coins_fn(arrays, key, jnp.uint32(0))
        t_coins = best(lambda: coins_fn(arrays, key, jnp.uint32(0)))
        t_prop = best(lambda: prop_fn(arrays, coins))
        data = jax.device_put(prog.round_data({}).astuple())
        run = s._compiled(data)
        worlds = width * 32
        t_round = best(lambda: run(arrays, data, key, np.uint32(0), np.int32(1), np.int64(worlds)))
        lab = {int(model.alarms[0]): False}
        data2 = jax.device_put(prog.round_data(lab).astuple())
        t_lab = best(lambda: run(arrays, data2, key, np.uint32(0), np.int32(1), np.int64(worlds)))
        floor = sampling_program.byte_floor(s.plan, worlds) / 3.3e12
        print(f"W={width} worlds={worlds} steps={prog.steps} shapes={len(prog.shapes)}: "
              f"coins {t_coins*1e3:.2f} ms, propagate {t_prop*1e3:.2f} ms "
              f"({t_prop/prog.steps*1e6:.1f} us/step), round {t_round*1e3:.2f} ms, "
              f"labelled {t_lab*1e3:.2f} ms, floor {floor*1e3:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
