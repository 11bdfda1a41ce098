"""Micro-benchmark: float64 exp / expm1 / log / log1p inside a Pallas kernel, libdevice against
`f64math` (coefficients as constants or loaded from a ref), `f64table` (tables read
from an operand, "tab"), float32 for scale.

    python benchmarks/probes/micro_f64math.py --size 16777216 --chain 6

Each kernel maps one tile of 128 float64 values (4 warps, like the fused factor kernel)
through a chain of `--chain` calls of one function and writes the result. The table
gives µs per kernel, ns per call and element (after the copy kernel's time), and the
largest difference from the libdevice chain in ulps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common

import f64math  # noqa: E402
import f64table  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import timed, write_json  # noqa: E402

TILE = 128


def steps(impl: str, coef, tables=None):
    """One chain step per function, keeping the values in the function's domain."""
    if impl == "lib":
        exp, expm1, log, log1p = jnp.exp, jnp.expm1, jnp.log, jnp.log1p
    elif impl == "f32":
        def cast(f):
            return lambda x: f(x.astype(jnp.float32)).astype(jnp.float64)
        exp, expm1, log, log1p = cast(jnp.exp), cast(jnp.expm1), cast(jnp.log), cast(jnp.log1p)
    else:  # "tab": f64table's, reading `tables`; "ours", "ref": f64math's, with `coef`
        module, extra = (f64table, tables) if impl == "tab" else (f64math, coef)

        def bind(name):
            f = getattr(module, name)
            return lambda x: f(x, extra)

        exp, expm1, log, log1p = (bind(n) for n in ("exp", "expm1", "log", "log1p"))

    def mix(y, i):  # the factor kernel's five in its order
        k = i % 5
        if k == 0:
            return exp(-jnp.abs(y) * 1.3 - 0.01)
        if k == 1:
            return log1p(jnp.abs(y) * 1.3)
        if k == 2:
            return -expm1(-jnp.abs(y) * 1.3 - 0.01)
        if k == 3:
            return exp(jnp.abs(y) * 1.3 - 0.5)
        return log(jnp.abs(y) + 1.5)

    return {
        "exp": lambda y, i: exp(-jnp.abs(y) * 1.3 - 0.01),
        "expm1": lambda y, i: -expm1(-jnp.abs(y) * 1.3 - 0.01),
        "log": lambda y, i: log(jnp.abs(y) + 1.5),
        "log1p": lambda y, i: log1p(jnp.abs(y) * 1.3),
        "mix": mix,
    }


def make(fn_name: str, impl: str, chain: int, n: int, interpret: bool):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    def kernel(x_ref, c_ref, t_ref, o_ref):
        sl = pl.ds(pl.program_id(0) * TILE, TILE)
        y = x_ref[sl]
        if fn_name != "copy":
            if impl == "ref":
                coef = f64math.Coefficients.load(c_ref)
            else:
                coef = f64math.CONSTANTS
            step = steps(impl, coef, f64table.Tables.at(t_ref))[fn_name]
            for i in range(chain):
                y = step(y, i)
        o_ref[sl] = y

    call = pl.pallas_call(kernel, grid=(n // TILE,), out_shape=jax.ShapeDtypeStruct((n,), jnp.float64),
                          interpret=interpret,
                          compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=1))
    return jax.jit(call)


def ulps(a, b):
    a, b = np.asarray(a), np.asarray(b)
    ok = np.isfinite(b) & (np.abs(b) > 1e-300)
    return float(np.max(np.abs(a[ok] - b[ok]) / np.spacing(np.abs(b[ok]))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1 << 24)
    ap.add_argument("--chain", type=int, default=6)
    ap.add_argument("--fns", nargs="+", default=["exp", "expm1", "log", "log1p", "mix"])
    ap.add_argument("--impls", nargs="+", default=["lib", "ours", "ref", "tab", "f32"])
    args = ap.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    gpu = jax.devices()[0].platform == "gpu"
    n = args.size // TILE * TILE
    x = jnp.asarray(np.random.default_rng(0).normal(size=n) * 3.0, jnp.float64)
    coefs = np.zeros(32)
    table = f64math.Coefficients.table()
    coefs[:len(table)] = table
    coefs = jnp.asarray(coefs)
    table = jnp.asarray(f64table.TABLE)
    base, _ = timed(make("copy", "lib", 0, n, not gpu), x, coefs, table)
    rows = []
    for fn_name in args.fns:
        ref_out = None
        for impl in args.impls:
            f = make(fn_name, impl, args.chain, n, not gpu)
            med, times = timed(f, x, coefs, table)
            out = f(x, coefs, table)
            if ref_out is None:
                ref_out = out
            per = (med - base) / (n * args.chain) * 1e9
            rows.append({"fn": fn_name, "impl": impl, "us": med * 1e6, "ns_per_call": per,
                         "ulps_vs_first": ulps(out, ref_out)})
            print(f"# {fn_name} {impl} {med * 1e6:.1f} us", flush=True)
    write_json("micro_f64math.json", {"size": n, "chain": args.chain, "copy_us": base * 1e6, "rows": rows})
    print(f"copy kernel: {base * 1e6:.1f} us for {n} float64")
    print(f"{'fn':>6} {'impl':>5} {'us':>9} {'ns/call/elem':>13} {'ulps vs first':>14}")
    for r in rows:
        print(f"{r['fn']:>6} {r['impl']:>5} {r['us']:>9.1f} {r['ns_per_call'] * 1e3:>10.2f} ps "
              f"{r['ulps_vs_first']:>14.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
