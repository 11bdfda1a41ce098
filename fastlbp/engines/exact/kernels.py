"""Device kernels of bucket elimination over one flat arena, keyed by a bucket's chunk and chunk count.

Every table, message and belief of the device's buckets lives in one float64
buffer, the arena (a 1-D array, donated to every kernel so it is updated in
place). A kernel reads its work from a row of `prog` (an int array of
descriptors on the device) at the program counter `pc`, a device scalar it
returns incremented: offsets, ranks and axis masks are traced values, so the
shapes a kernel sees are the arena's length, the program's shape, its chunk
size C and its number of chunks n (static: the chunk loop is unrolled; a
longer table loops, n = 0, see `_loop`). C is
the bucket's size class, min(CHUNKS) * 4^k, up to max(CHUNKS) (`chunk_of`): a
bucket is one chunk whose tail is padding (the program gives every region a
whole class), or n chunks of the largest size. So a graph compiles 3 kernels
per size class on its device (2^14, 2^16, ... 2^22 on a GPU, then 2, 4, 8, 16
chunks of 2^22), plus one `read` and one `write`;
the arena, the descriptor table and the transfers keep their shapes between
label sets (`eliminate.Arena`), and `warm` compiles every size up to the
largest bucket before the first run, so new labels compile nothing.

Why no device control flow: on a GPU every trip of a loop with a traced
trip count and every `lax.switch` waits for the device (the host reads the
predicate), each about as long as a whole call without control flow
(`benchmarks/probes/micro_control_flow.py`). The first version keyed kernels by the ranks
of a bucket and of each input: a 12 x 12 grid compiled 60 kernels and a
new label set compiled again in a triage session.

A table over variables (v_0 .. v_{r-1}) stores entry (x_0 .. x_{r-1}) at flat
index sum x_a 2^(r-1-a): axis a is bit r-1-a, the eliminated variable (the
last axis) bit 0, so its two values are neighbours. An input whose variables
are a subset of a bucket's (same relative order) is read at `pext(e, mask)`,
the bits of the bucket index e selected by `mask`.

Descriptor rows (int, `WIDTH` columns, unused columns 0):

* forward: r, b_off, m_off, accumulate, K input offsets, K input masks. The
  bucket table B (2^r) is the sum of up to K inputs (+ B itself when
  accumulating: a bucket with more inputs takes several rows); its message
  m = logaddexp(B[2i], B[2i+1]) (2^(r-1)) is written with it.
* reduce: p, p_off, sepmask, ro, out_off. For a child whose separator is the
  parent's variables in `sepmask` (ro others), out[s] = logsumexp over the
  others of the parent's belief: the parent is read permuted so that the
  others are the low ro bits (contiguous segments of 2^ro), and each chunk is
  reduced segment by segment (one static branch per segment length), the max
  of each segment taken before exp (a segment of tiny probabilities, 1e-300
  next to 1, keeps its own scale). Segments longer than a chunk are combined
  across chunks by logaddexp.
* belief: r, b_off, m_off, sep_off, has_parent, mg_off, sep_mask. The Hugin
  update in place: B + (sep - m) (-inf where m is -inf: the 0/0 of an
  impossible separator value), and the log marginal of the eliminated
  variable (2,) at mg_off, each value's sum with its own running max. sep[s]
  is read at sep_off + pdep(s, sep_mask): a reduce row's output (all ones), or
  the parent's belief itself where the separator is the parent's whole scope
  (no reduce row: 69 of the 101 separators of a 16 x 16 grid).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

K = 4  # input slots of a forward row
WIDTH = 4 + 2 * K
CHUNKS = (2**14, 2**22)  # the smallest and largest chunk on a GPU (`chunk_of`): 16 chunks for 2^26 entries


def index_dtype(arena_size: int):
    return jnp.int32 if arena_size < 2**31 else jnp.int64


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def _byte_tables() -> np.ndarray:
    """(2 * 65536 + 256,) int32: pext and pdep of every byte under every byte mask, then popcounts.

    Entry m * 256 + x of the first table is pext(x, m) (the bits of x where m has ones, packed low);
    of the second, pdep(x, m) (the low bits of x spread to m's ones). Bit-by-bit loops over 22+ bits for
    4 inputs made the forward kernel slow to compile and to run; with the tables it is one lookup per
    byte.
    """
    m = np.arange(256)[:, None]
    x = np.arange(256)[None, :]
    ext = np.zeros((256, 256), np.int64)
    dep = np.zeros((256, 256), np.int64)
    src = np.broadcast_to(x, (256, 256)).copy()
    for j in range(8):
        sel = (m >> j) & 1 > 0
        dep |= np.where(sel, (src & 1) << j, 0)
        src = np.where(sel, src >> 1, src)
    for j in reversed(range(8)):
        ext = np.where((m >> j) & 1 > 0, (ext << 1) | ((x >> j) & 1), ext)
    pop = np.array([bin(i).count("1") for i in range(256)])
    return np.concatenate([ext.ravel(), dep.ravel(), pop]).astype(np.int32)


_POP = 2 * 65536


@functools.lru_cache(maxsize=1)
def byte_tables() -> jax.Array:
    """`_byte_tables` on the default device (made once; an argument of the kernels, not a constant)."""
    return jnp.asarray(_byte_tables())


def _pext(e, mask, luts, nbytes: int):
    """The bits of e selected by mask, packed (highest first): an input's index inside its bucket."""
    out = jnp.zeros_like(e)
    for k in reversed(range(nbytes)):
        mk = (mask >> (8 * k)) & 255
        look = luts[mk * 256 + ((e >> (8 * k)) & 255)].astype(e.dtype)
        out = (out << luts[_POP + mk].astype(e.dtype)) | look
    return out


def _pdep(src, mask, luts, nbytes: int):
    """The low bits of src spread to the positions of mask's bits (the inverse of `_pext`)."""
    out = jnp.zeros_like(src)
    for k in range(nbytes):
        mk = (mask >> (8 * k)) & 255
        out = out | (luts[65536 + mk * 256 + (src & 255)].astype(src.dtype) << (8 * k))
        src = src >> luts[_POP + mk].astype(src.dtype)
    return out


def _nbytes(arena_size: int) -> int:
    return (_bits(arena_size) + 7) // 8


def _finite(x):
    return jnp.where(jnp.isfinite(x), x, 0.0)


def _take(arena, idx):
    return arena.at[idx].get(mode="clip")


UNROLL = 16  # chunk loops up to this many trips are unrolled (no device control flow), longer ones loop


def _loop(n: int, body, state, r, chunk: int):
    """body(c, state) for every chunk c of a rank-r table: n static trips, unrolled (n <= `UNROLL`), or
    n = 0: an XLA loop over a traced count (tiny chunks in tests; over 2^26 entries on a GPU, where the
    work dwarfs a trip's wait), so one kernel serves every longer table and compiles stay few."""
    if n:
        for c in range(n):
            state = body(c, state)
        return state
    count = jnp.maximum(jnp.left_shift(jnp.ones_like(r), r) // chunk, 1)
    return lax.fori_loop(0, count, body, state)


def _valid(r, chunk: int):
    """Entries of a chunk that belong to a rank-r table."""
    return jnp.minimum(jnp.left_shift(jnp.ones_like(r), r), chunk)


@functools.partial(jax.jit, static_argnames=("chunk", "nchunks"), donate_argnums=0)
def forward(arena, prog, pc, luts, *, chunk: int, nchunks: int):
    """Bucket table and message of the forward row at `pc` (see the module docstring)."""
    row = prog[pc]
    r, b_off, m_off, acc = row[0], row[1], row[2], row[3]
    nbytes = _nbytes(arena.shape[0])
    iota = lax.iota(row.dtype, chunk)
    half = chunk // 2

    def body(c, arena):
        base = c * chunk
        e = base + iota
        b = jnp.where(acc > 0, lax.dynamic_slice(arena, (b_off + base,), (chunk,)), 0.0)
        for k in range(K):
            b = b + _take(arena, row[4 + k] + _pext(e, row[4 + K + k], luts, nbytes))
        pairs = b.reshape(half, 2)
        m = jnp.logaddexp(pairs[:, 0], pairs[:, 1])
        # The message first: written after B, its fused computation would re-read B's old entries from
        # the updated arena, and XLA copies the whole arena to keep them (a copy per call;
        # tests/exact_support.py counts them).
        arena = lax.dynamic_update_slice(arena, m, (m_off + c * half,))
        return lax.dynamic_update_slice(arena, b, (b_off + base,))

    return _loop(nchunks, body, arena, r, chunk), pc + 1


def _segments(x, k: int):
    """logsumexp of each segment of 2^k entries of x (C,), each with its own maximum first; padded to (C,)."""
    size = x.shape[0]
    y = x.reshape(size >> k, 1 << k)
    top = _finite(jnp.max(y, axis=1))
    out = jnp.log(jnp.sum(jnp.exp(y - top[:, None]), axis=1)) + top
    return jnp.pad(out, (0, size - (size >> k))) if k else out


@functools.partial(jax.jit, static_argnames=("chunk", "nchunks"), donate_argnums=0)
def reduce(arena, prog, pc, luts, *, chunk: int, nchunks: int):
    """The separator table of the reduce row at `pc`: a parent's belief summed over its other variables."""
    row = prog[pc]
    p, p_off, sepmask, ro, out_off = row[0], row[1], row[2], row[3], row[4]
    nbytes = _nbytes(arena.shape[0])
    log_chunk = chunk.bit_length() - 1
    one = jnp.ones_like(p)
    iota = lax.iota(row.dtype, chunk)
    valid = _valid(p, chunk)
    others = ((one << p) - 1) & ~sepmask
    low = (one << ro) - 1
    lc = jnp.minimum(ro, log_chunk)
    long = ro > log_chunk  # a segment spans several chunks
    # One branch per segment length: a static (C / 2^k, 2^k) reduction is one fused kernel, where a
    # tree of pairwise maxima and sums took 2 log2(C) (slower, on a CPU).
    by_length = [functools.partial(_segments, k=k) for k in range(log_chunk + 1)]

    def body(c, state):
        arena, carry = state
        e = c * chunk + iota
        idx = p_off + (_pdep(e >> ro, sepmask, luts, nbytes) | _pdep(e & low, others, luts, nbytes))
        x = jnp.where(iota < valid, _take(arena, idx), -jnp.inf)
        val = lax.switch(lc, by_length, x)
        start = ((c * chunk) & low) == 0
        carry = jnp.logaddexp(jnp.where(start, -jnp.inf, carry), val[0])
        out = jnp.where(long & (iota == 0), carry, val)
        # Entries past this chunk's segments are padding: the next chunk (or region) overwrites them.
        return lax.dynamic_update_slice(arena, out, (out_off + ((c * chunk) >> ro),)), carry

    return _loop(nchunks, body, (arena, jnp.float64(-jnp.inf)), p, chunk)[0], pc + 1


def _combine(m, s, x):
    """Running (max, sum of exp(x - max)) of a stream, updated with the entries x."""
    cm = jnp.max(x)
    cs = jnp.sum(jnp.exp(x - _finite(cm)))
    new = jnp.maximum(m, cm)
    nf = _finite(new)
    return new, s * jnp.exp(m - nf) + cs * jnp.exp(_finite(cm) - nf)


@functools.partial(jax.jit, static_argnames=("chunk", "nchunks"), donate_argnums=0)
def belief(arena, prog, pc, luts, *, chunk: int, nchunks: int):
    """Belief (in place of the bucket table) and log marginal of the belief row at `pc`."""
    row = prog[pc]
    r, b_off, m_off, sep_off, has_parent, mg_off, sep_mask = (row[k] for k in range(7))
    nbytes = _nbytes(arena.shape[0])
    iota = lax.iota(row.dtype, chunk)
    valid = _valid(r, chunk)

    def update(c, arena):
        base = c * chunk
        half = (base + iota) >> 1
        old = lax.dynamic_slice(arena, (b_off + base,), (chunk,))
        m = _take(arena, m_off + half)
        sep = _take(arena, sep_off + _pdep(half, sep_mask, luts, nbytes))
        ratio = jnp.where(jnp.isneginf(m), -jnp.inf, sep - m)
        return lax.dynamic_update_slice(arena, jnp.where(has_parent > 0, old + ratio, old), (b_off + base,))

    def stats(c, state):
        m0, s0, m1, s1 = state
        bel = lax.dynamic_slice(arena, (b_off + c * chunk,), (chunk,))
        pairs = jnp.where(iota < valid, bel, -jnp.inf).reshape(-1, 2)
        m0, s0 = _combine(m0, s0, pairs[:, 0])
        m1, s1 = _combine(m1, s1, pairs[:, 1])
        return m0, s0, m1, s1

    # Two loops: reductions over a chunk that is also written in the same loop body are fused to read
    # the old arena after the write, and XLA copies the whole arena to allow it (see `forward`).
    arena = _loop(nchunks, update, arena, r, chunk)
    ninf, zero = jnp.float64(-jnp.inf), jnp.float64(0.0)
    m0, s0, m1, s1 = _loop(nchunks, stats, (ninf, zero, ninf, zero), r, chunk)
    lm = jnp.stack([jnp.log(s0) + _finite(m0), jnp.log(s1) + _finite(m1)])
    return lax.dynamic_update_slice(arena, lm, (mg_off,)), pc + 1


@functools.partial(jax.jit, donate_argnums=0)
def write(arena, block, off):
    """arena[off : off + len(block)] = block (the host's inputs, one transfer)."""
    return lax.dynamic_update_slice(arena, block, (off,))


@functools.partial(jax.jit, static_argnames="size")
def read(arena, off, *, size: int):
    """arena[off : off + size] (the results the host needs, one transfer)."""
    return lax.dynamic_slice(arena, (off,), (size,))


KERNELS = {"forward": forward, "reduce": reduce, "belief": belief, "write": write, "read": read}


_COMPILES: collections.Counter = collections.Counter()  # backend compiles per kernel name, this process


def _count_compile(event: str, duration: float, fun_name: str | None = None, **_) -> None:
    name = (fun_name or "").removeprefix("jit(").removesuffix(")")
    if event == "/jax/core/compile/backend_compile_duration" and name in KERNELS:
        _COMPILES[name] += 1


jax.monitoring.register_event_duration_secs_listener(_count_compile)


def compiled() -> dict[str, int]:
    """How many programs each device kernel has compiled so far in this process (XLA backend compiles,
    counted by a `jax.monitoring` listener: a call served from a cache or from `warm` counts nothing)."""
    return {name: _COMPILES[name] for name in KERNELS}


def warm(arena_size: int, rows: int, chunks: tuple[int, ...], largest: int, workers: int = 8) -> int:
    """Compile forward, reduce and belief for every bucket size from min(chunks) to `largest` entries.

    Ahead of time, in threads (XLA compiles outside the GIL), for the
    arena shape (arena_size,) and descriptor shape (rows, WIDTH): a later label set whose plan has
    other bucket sizes (labels shrink buckets) then compiles nothing. Returns the kernels compiled.
    """
    dtype = index_dtype(arena_size)
    args = (jax.ShapeDtypeStruct((arena_size,), jnp.float64), jax.ShapeDtypeStruct((rows, WIDTH), dtype),
            jax.ShapeDtypeStruct((), dtype), jax.ShapeDtypeStruct((_POP + 256,), jnp.int32))
    keys, entries = [], min(chunks)
    while True:
        keys.append(chunk_of(entries, chunks))
        if entries >= largest:
            break
        entries *= 2
    jobs = [(fn, chunk, n) for chunk, n in dict.fromkeys(keys) for fn in (forward, reduce, belief)]
    before = sum(compiled().values())
    # float64 as the caller has it (JAX's x64 setting is per thread): the kernels compiled are the ones
    # the caller's runs look up.
    x64 = jax.config.jax_enable_x64

    def compile_one(job):
        with jax.enable_x64(x64):
            job[0].lower(*args, chunk=job[1], nchunks=job[2]).compile()

    with concurrent.futures.ThreadPoolExecutor(min(workers, len(jobs))) as pool:
        list(pool.map(compile_one, jobs))
    return sum(compiled().values()) - before


def io_size(n: int) -> int:
    """The transfer size class of n entries: a power of two, at least 64 (so few `read`/`write` compile)."""
    return max(64, 1 << (max(int(n), 1) - 1).bit_length())


def chunk_of(entries: int, chunks: tuple[int, ...]) -> tuple[int, int]:
    """The chunk and the static chunk count of a bucket (or a parent's belief) of `entries` entries.

    Up to max(chunks) entries the chunk is the bucket's size class, the smallest min(chunks) * 4^k not
    below its entries: a region is padded at most 2x and a graph compiles half as many kernels as with
    every power of two (9 instead of 15 for a 12 x 12 grid). Larger
    buckets are walked in exactly entries / max(chunks) chunks of max(chunks) (a chunk past the table
    would write past its region): a static count up to `UNROLL`, else 0 (the kernel loops over a count
    it reads from the row).
    """
    if entries > max(chunks):
        n = int(entries) // max(chunks)
        return max(chunks), n if n <= UNROLL else 0
    size = min(chunks)
    while size < entries:
        size *= 4
    return min(size, max(chunks)), 1


__all__ = ["K", "WIDTH", "CHUNKS", "forward", "reduce", "belief", "write", "read", "compiled",
           "io_size",
           "chunk_of", "index_dtype", "byte_tables", "warm"]
