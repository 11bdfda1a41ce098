"""fastlbp leaves JAX's settings as it found them: importing it changes none, its functions run in float64
for their own duration (`fastlbp.core.jax_setup.float64`), and the caller's precision holds outside them.

The process-wide cases run in fresh interpreters: this test process turned float64 on (conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from fastlbp.core.jax_setup import float64, float64_context

ROOT = Path(__file__).resolve().parents[1]


def python(script: str) -> dict:
    env = {**os.environ, "FASTLBP_CACHE": "off", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def rounds(model) -> dict:
    """Rounds of every method on `model`, as lists (compared between processes)."""
    import numpy as np

    import fastlbp

    out = {}
    for method in ("lbp", "exact", "sample"):
        session = fastlbp.Session(model, method=method)
        rnd = session.run()
        assert type(rnd.marginals) is np.ndarray and rnd.marginals.dtype == np.float64, type(rnd.marginals)
        out[method] = rnd.marginals.tolist()
        if method == "lbp":
            out["messages"] = str(session.messages.dtype)
            session.label(int(model.alarms[0]), True)
            out["labelled"] = session.run().marginals.tolist()
    out["f32 messages"] = str(fastlbp.Session(model, method="lbp", precision="f32").messages.dtype)
    out["rank"] = [a.probability for a in fastlbp.rank(model, settings=fastlbp.Settings(method="lbp")).alarms]
    return out


# A user's process: JAX imported first, float32 (its default), then fastlbp and every module that runs JAX,
# then rounds of every method.
USER = """
import json, sys
import jax, jax.numpy as jnp
finders = list(sys.meta_path)
settings = {k: repr(v) for k, v in jax.config.values.items()}
import fastlbp
import fastlbp.engines.exact, fastlbp.engines.sampling, fastlbp.inference.check, fastlbp.inference.simulate
import fastlbp.triage
assert sys.meta_path == finders, "importing fastlbp changed sys.meta_path"
assert {k: repr(v) for k, v in jax.config.values.items()} == settings, "importing fastlbp changed jax.config"
sys.path.insert(0, "tests")
from test_jax_config import rounds
model = fastlbp.load("data/race.json")
out = rounds(model)
out["pytree leaves"] = len(jax.tree_util.tree_leaves(model.graph))
out["x64 after"] = bool(jax.config.jax_enable_x64)
out["user dtype after"] = str(jnp.ones(2).dtype)
out["settings kept"] = {k: repr(v) for k, v in jax.config.values.items()} == settings
print(json.dumps(out))
"""


def test_fastlbp_runs_float64_and_leaves_the_users_settings_as_they_were():
    import fastlbp

    got = python(USER)
    # The user's process keeps float32 around fastlbp's calls; fastlbp's own programs ran in float64.
    assert got.pop("x64 after") is False and got.pop("user dtype after") == "float32"
    assert got.pop("settings kept")
    assert got["messages"] == "float64" and got["f32 messages"] == "float32"
    assert got.pop("pytree leaves") == 12  # registered where JAX meets the graph (fastlbp.core.equations)
    # The same numbers, to the bit, as in this process, which turned float64 on for itself (conftest.py).
    assert jax.config.jax_enable_x64
    assert got == rounds(fastlbp.load(ROOT / "data" / "race.json"))


def test_import_fastlbp_then_jax_leaves_float64_off():
    script = """
import json, sys
finders = list(sys.meta_path)
import fastlbp
import fastlbp.core.jax_setup, fastlbp.cli
assert sys.meta_path == finders and "jax" not in sys.modules
import jax, jax.numpy as jnp
print(json.dumps({"x64": bool(jax.config.jax_enable_x64), "dtype": str(jnp.zeros(2).dtype),
                  "cache": jax.config.jax_compilation_cache_dir}))
"""
    assert python(script) == {"x64": False, "dtype": "float32", "cache": None}


def test_the_exact_engines_compile_threads_run_in_the_callers_precision(monkeypatch):
    # The exact engine compiles its kernels ahead of time in threads (`kernels.warm`), and JAX's float64
    # flag is per thread: in float32 there, they would be compiled again by the run, in float64.
    from fastlbp.core.graph import AND, OR, Factor, from_factors
    from fastlbp.engines.exact import Engine, exact_marginals, kernels

    warmed = []
    warm = kernels.warm
    monkeypatch.setattr(kernels, "warm", lambda *args, **kwargs: warmed.append(warm(*args, **kwargs)) or
                        warmed[-1])
    # A 3 x 3 grid of noisy ORs; chunk sizes of its own, so that no other test compiled its kernels.
    n = 3
    factors = [Factor(OR, i * n + j, tuple(v for v in ((i - 1) * n + j if i else None, i * n + j - 1 if j
                                                       else None) if v is not None), 0.9, 0.1)
               if i or j else Factor(AND, 0, (), 0.3, 0.3) for i in range(n) for j in range(n)]
    graph = from_factors(factors, n * n)
    engine = Engine(graph, host_below=0, chunks=(2, 16), warm=True)
    before = kernels.compiled()
    jax.config.update("jax_enable_x64", False)  # a caller in float32 (the process's setting)
    try:
        got = exact_marginals(graph, {n * n - 1: True}, engine=engine)
    finally:
        jax.config.update("jax_enable_x64", True)
    after = kernels.compiled()
    assert got.info["device_buckets"] > 0 and sum(warmed) > 0
    assert sum(after[k] - before[k] for k in ("forward", "reduce", "belief")) == sum(warmed)


# The decorator itself, in this process (float64 on since conftest.py: turned off per block here) ----------


def test_float64_runs_the_function_in_float64_and_restores_the_callers_setting():
    @float64
    def inside(x):
        """Its docstring."""
        return bool(jax.config.jax_enable_x64), jnp.asarray(x).dtype

    with jax.enable_x64(False):
        assert inside(0.5) == (True, jnp.float64)
        assert not jax.config.jax_enable_x64 and jnp.ones(2).dtype == jnp.float32
        with float64_context():
            assert jnp.ones(2).dtype == jnp.float64
        assert jnp.ones(2).dtype == jnp.float32

        @float64
        def fails():
            raise KeyError("x")

        with pytest.raises(KeyError):
            fails()
        assert not jax.config.jax_enable_x64
    assert inside.__doc__ == "Its docstring." and inside.__name__ == "inside"
    assert inside(1.0) == (True, jnp.float64)  # on already: runs as it is


def test_float64_refuses_a_generator():
    # A generator's body runs after the call has returned: outside the context.
    def steps():
        yield jnp.ones(2)

    with pytest.raises(TypeError, match="generator"):
        float64(steps)
