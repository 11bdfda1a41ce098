"""Micro-benchmark: ways to take sorted segment sums on the device, and loop overhead.

    python benchmarks/probes/micro_segments.py --size 500000 5000000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import bingo_model, timed  # noqa: E402


def buckets(offsets: np.ndarray, widths):
    """Dense (n_w, w) index matrices per width bucket; pad index = len (a zero)."""
    deg = np.diff(offsets)
    n_edges = int(offsets[-1])
    out = []
    lo = 0
    for w in widths:
        seg = np.flatnonzero((deg > lo) & (deg <= w))
        lo = w
        if seg.size == 0:
            continue
        cols = np.arange(w)
        idx = offsets[seg][:, None] + cols[None, :]
        idx = np.where(cols[None, :] < deg[seg][:, None], idx, n_edges)
        out.append((jnp.asarray(seg, jnp.int32), jnp.asarray(idx, jnp.int32)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, nargs="+", default=[500_000])
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    n = args.reps
    for size in args.size:
        g = bingo_model(size).graph
        V = g.num_vars
        off = np.asarray(g.var_offsets).astype(np.int64)
        deg = np.diff(off)
        print(f"== {g.num_edges} edges, {V} vars, max degree {deg.max()}, "
              f"degree<=2: {np.mean(deg <= 2):.2f}", flush=True)
        seg_ids = jnp.asarray(g.slot_var)
        edge_var = jnp.asarray(g.edge_var)
        offs = jnp.asarray(off.astype(np.int32))
        maxw = int(2 ** np.ceil(np.log2(deg.max())))
        widths = [2**k for k in range(0, int(np.log2(maxw)) + 1)]
        bks = buckets(off, widths)
        bks_small = buckets(off, [1, 2, 4, 8, 16, 32, maxw])

        for dtype in (jnp.float64, jnp.float32):
            x0 = jnp.asarray(np.random.default_rng(0).normal(size=g.num_edges), dtype)

            def loop(f):
                return jax.jit(lambda x: jax.lax.fori_loop(0, n, lambda _, y: f(y), x))

            def scatter(x):
                s = jax.ops.segment_sum(x, seg_ids, V, indices_are_sorted=True)
                return x + s[edge_var] * 1e-9

            def cumsum_diff(x):
                cs = jnp.concatenate([jnp.zeros(1, x.dtype), jnp.cumsum(x)])
                s = cs[offs[1:]] - cs[offs[:-1]]
                return x + s[edge_var] * 1e-9

            def blocked_cumsum(x, B=256):
                pad = (-x.shape[0]) % B
                xp = jnp.concatenate([x, jnp.zeros(pad, x.dtype)]).reshape(-1, B)
                local = jnp.cumsum(xp, axis=1)
                tot = jnp.concatenate([jnp.zeros(1, x.dtype), jnp.cumsum(local[:, -1])])
                cs = jnp.concatenate([jnp.zeros(1, x.dtype), (local + tot[:-1, None]).reshape(-1)])
                s = cs[offs[1:]] - cs[offs[:-1]]
                return x + s[edge_var] * 1e-9

            def bucketed(bk):
                def f(x):
                    xe = jnp.concatenate([x, jnp.zeros(1, x.dtype)])
                    s = jnp.zeros(V, x.dtype)
                    for seg, idx in bk:
                        s = s.at[seg].set(xe[idx].sum(axis=1), unique_indices=True,
                                          indices_are_sorted=True)
                    return x + s[edge_var] * 1e-9
                return f

            def trivial(x):
                return x + 1

            variants = {
                "scatter segment_sum": scatter,
                "cumsum diff": cumsum_diff,
                "blocked cumsum 256": blocked_cumsum,
                f"bucketed ({len(bks)} widths)": bucketed(bks),
                f"bucketed ({len(bks_small)} widths)": bucketed(bks_small),
                "trivial x+1 (loop overhead)": trivial,
            }
            print(f"-- {jnp.dtype(dtype).name}", flush=True)
            x64 = np.asarray(x0)
            ref = (np.asarray(scatter(x0)) - x64) * 1e9
            for name, f in variants.items():
                err = float(np.max(np.abs((np.asarray(f(x0)) - x64) * 1e9 - ref)))
                med, _ = timed(loop(f), x0, repeats=3)
                print(f"{name:34s} {med / n * 1e6:9.1f} us   err {err:.1e}", flush=True)
            # Loop overhead with while_loop + device-side condition.
            def wl(x):
                return jax.lax.while_loop(lambda s: s[1] < n, lambda s: (s[0] + 1, s[1] + 1), (x, 0))[0]
            med, _ = timed(jax.jit(wl), x0, repeats=3)
            print(f"{'while_loop trivial':34s} {med / n * 1e6:9.1f} us", flush=True)
            def wl4(x):
                def body(s):
                    y = s[0]
                    for _ in range(4):
                        y = y + 1
                    return (y, s[1] + 4)
                return jax.lax.while_loop(lambda s: s[1] < n, body, (x, 0))[0]
            med, _ = timed(jax.jit(wl4), x0, repeats=3)
            print(f"{'while_loop unrolled x4 (per iter)':34s} {med / n * 1e6:9.1f} us", flush=True)


if __name__ == "__main__":
    main()
