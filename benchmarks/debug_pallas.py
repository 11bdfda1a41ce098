"""Checks the Pallas segment sums against XLA inside and outside loops (GPU debugging)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jax
import jax.numpy as jnp
import numpy as np
from common import bingo_model

from fastlbp import engine, kernels

g = jax.device_put(bingo_model(50_000).graph)
ev = jnp.zeros((g.num_vars,))
msgs = engine.init(g) + jnp.asarray(np.random.default_rng(0).normal(size=g.num_edges))
for backend in ("xla", "pallas"):
    a = kernels.var_aggregates(g, msgs, ev, backend)
    print(backend, "var agg sum", float(a[:, 0].sum()), float(a[:, 1].sum()))
    mu = kernels.var_to_factor(g, msgs, a)
    fin, zero = kernels.factor_inputs(g, mu)
    f = kernels.factor_aggregates(g, fin, zero, backend)
    print(backend, "fac agg sum", float(f[:, 0].sum()), float(f[:, 1].sum()))
ax = kernels.var_aggregates(g, msgs, ev, "xla")
ap = jax.jit(lambda m: kernels.var_aggregates(g, m, ev, "pallas"))(msgs)
print("jit var agg diff", float(jnp.max(jnp.abs(ax - ap))))
def loop(backend):
    def body(_, m):
        return engine.parall_sweep(g, m, ev) if backend == "xla" else kernels.factor_to_var(
            g, kernels.var_to_factor(g, m, kernels.var_aggregates(g, m, ev, backend)), backend)
    return jax.jit(lambda m: jax.lax.fori_loop(0, 3, body, m))
print("loop diff", float(jnp.max(jnp.abs(loop("xla")(msgs) - loop("pallas")(msgs)))))
for unroll in (1, 4):
    rx = engine.parall_runner("xla", unroll)(g, msgs, ev, 0.0, 5, 0.0)
    rp = engine.parall_runner("pallas", unroll)(g, msgs, ev, 0.0, 5, 0.0)
    print("runner", unroll, float(jnp.max(jnp.abs(rx.marginals - rp.marginals))), int(rp.iterations))
