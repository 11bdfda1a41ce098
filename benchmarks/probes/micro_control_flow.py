"""What device control flow costs per call on a GPU: dynamic-trip loops, static-trip loops, switch, none.

    python benchmarks/probes/micro_control_flow.py

Each variant updates a 2^14-entry window of a donated 2^22-entry arena, 200 calls back to back (async),
then one sync; prints us per call.
"""

import functools
import time

import jax
import jax.numpy as jnp
from jax import lax

jax.config.update("jax_enable_x64", True)
C = 2**14


def work(arena, c):
    x = lax.dynamic_slice(arena, (c * C,), (C,))
    return lax.dynamic_update_slice(arena, jnp.logaddexp(x, x[::-1]), (c * C,))


@functools.partial(jax.jit, donate_argnums=0)
def plain(arena, n):
    return work(arena, n)


@functools.partial(jax.jit, donate_argnums=0)
def dynamic_loop(arena, n):
    return lax.fori_loop(0, n, lambda c, a: work(a, c), arena)


@functools.partial(jax.jit, donate_argnums=0, static_argnames="n")
def static_loop(arena, *, n):
    return lax.fori_loop(0, n, lambda c, a: work(a, c), arena)


@functools.partial(jax.jit, donate_argnums=0, static_argnames="n")
def unrolled(arena, *, n):
    return lax.fori_loop(0, n, lambda c, a: work(a, c), arena, unroll=True)


@functools.partial(jax.jit, donate_argnums=0)
def switch(arena, k):
    return lax.switch(k, [lambda a: work(a, 0), lambda a: work(a, 1), lambda a: work(a, 2)], arena)


def bench(name, fn, *args, **kw):
    arena = jnp.zeros(2**22)
    for _ in range(3):
        arena = fn(arena, *args, **kw)
    arena.block_until_ready()
    t = time.perf_counter()
    for _ in range(200):
        arena = fn(arena, *args, **kw)
    arena.block_until_ready()
    print(f"{name:>28}: {1e6 * (time.perf_counter() - t) / 200:8.1f} us per call")


print(jax.devices()[0])
bench("plain (no control flow)", plain, jnp.int32(1))
for n in (1, 4):
    bench(f"dynamic loop, {n} trips", dynamic_loop, jnp.int32(n))
    bench(f"static loop, {n} trips", static_loop, n=n)
    bench(f"unrolled, {n} trips", unrolled, n=n)
bench("switch of 3", switch, jnp.int32(1))
