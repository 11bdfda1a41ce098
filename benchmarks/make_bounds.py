"""Writes timing-only copies of `fastlbp/fused.py` that bound what two kinds of work could gain.

    python benchmarks/make_bounds.py
    python benchmarks/bench_parall.py --variants fused-unroll8 bnomath-unroll8 bnogather-unroll8 \
        bideal-unroll8

Each copy computes a WRONG result on purpose and is for timing only (the
files are `benchmarks/_old_b*.py`, which `bench_parall.py` picks up as
variants and which are not committed):

* `_old_bnomath.py`: the factor kernel's float64 exp, expm1, log and log1p are
  one or two cheap arithmetic instructions each, and its divisions
  multiplications. Its time is a lower bound for any rewrite of the factor
  kernel's message math (fewer transcendentals, other equations).
* `_old_bnogather.py`: both random gathers read contiguous memory instead (the
  factor kernel's gather of the variables' totals by slot, the variable
  kernel's gather of messages by variable slot). Its time is a lower bound
  for any layout or numbering of the slots.
* `_old_bideal.py`: both at once: what the two-kernel sweep costs with cheap
  math and contiguous loads, i.e. its streams, reductions, control and
  launches.
* `_old_bnogf.py`, `_old_bnogv.py`: only the factor kernel's gather, or only
  the variable kernel's, contiguous.
* `_old_bhalf.py`: the factor kernel gathers one 8-byte value per variable
  (from the first half of the totals array) instead of the 16-byte record:
  what a totals record half the size would save in memory traffic.

The values stay finite, so every variant runs all its iterations (the
benchmark's table shows them).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHEAP_JNP = '''"""jax.numpy with cheap float stand-ins for the transcendentals (timing only: wrong values)."""
import jax.numpy as _jnp


class _Cheap:
    def __getattr__(self, name):
        return getattr(_jnp, name)

    @staticmethod
    def exp(x):
        return _jnp.clip(0.5 + 0.01 * x, 0.0, 1.0)

    @staticmethod
    def expm1(x):
        return _jnp.clip(0.01 * x, -1.0, 1.0)

    @staticmethod
    def log(x):
        return x - 1.0

    @staticmethod
    def log1p(x):
        return 0.5 * x


jnp = _Cheap()
'''


def _replace(text: str, old: str, new: str, count: int = 1) -> str:
    if text.count(old) != count:
        raise SystemExit(f"make_bounds: expected {count} of {old!r} in the source, found {text.count(old)}")
    return text.replace(old, new)


def cheap_logspace() -> str:
    src = (ROOT / "fastlbp" / "logspace.py").read_text()
    src = _replace(src, "import jax.numpy as jnp", "from _cheap_jnp import jnp")
    division = "q = jnp.maximum(num * scale, tiny) / den"
    return _replace(src, division, division.replace("/", "*"))


def fused_source(nomath: bool, nogather: bool, var_gather: bool | None = None, half: bool = False) -> str:
    src = (ROOT / "fastlbp" / "fused.py").read_text()
    if nomath:
        # The factor side's math from the cheap copy; the variable kernel keeps its own.
        src = _replace(src, "from fastlbp.logspace import log_sigmoid, messages_from_rho, quotient, signed, "
                       "terms_and_rho",
                       "from fastlbp.logspace import quotient, signed\n"
                       "from _oldlog_bcheap import log_sigmoid, messages_from_rho, terms_and_rho")
    var_gather = nogather if var_gather is None else var_gather
    if half:
        # One 8-byte value per variable from the first half of the totals: the gather of a
        # record half the size (the counts read as zero).
        src = _replace(src, "    return m, valid, _var_to_factor(m, tot_ref[two], "
                       "_count_of(tot_ref[two + 1]))\n",
                       "    return m, valid, _var_to_factor(m, tot_ref[idx], jnp.zeros_like(idx))\n")
    if half or nogather:
        # Totals of other variables make some factors' inputs contradict (NaN, which would
        # stop the loop): kept finite.
        src = _replace(src, "def _incoming(sv_ref, m_ref, tot_ref, sl):",
                       "def _incoming(sv_ref, m_ref, tot_ref, sl):\n"
                       "    m, valid, n = _incoming_raw(sv_ref, m_ref, tot_ref, sl)\n"
                       "    n = jnp.where(jnp.isnan(n), jnp.zeros_like(n), n)\n"
                       "    return m, valid, jnp.clip(n, -30.0, 30.0)\n"
                       "\n\n"
                       "def _incoming_raw(sv_ref, m_ref, tot_ref, sl):")
    if nogather:
        src = _replace(src, "    two = 2 * idx\n",
                       "    pw = 1 << ((tot_ref.shape[0] // 2).bit_length() - 1)\n"
                       "    lane = jax.lax.broadcasted_iota(jnp.int32, idx.shape, 0)\n"
                       "    two = 2 * ((sl.start + lane) & (pw - 1))\n")
    if var_gather:
        src = _replace(src, "    m = m_ref[jnp.where(valid, vs, 0)]\n",
                       "    pw = 1 << (m_ref.shape[0].bit_length() - 1)\n"
                       "    lane = jax.lax.broadcasted_iota(jnp.int32, (tile,), 0)\n"
                       "    m = m_ref[(pid * tile + lane) & (pw - 1)]\n"
                       # Other slots' messages make some factors' inputs contradict (NaN, which
                       # would stop the loop): kept finite, as a correct run's mostly are.
                       "    m = jnp.clip(jnp.where(jnp.isnan(m), jnp.zeros_like(m), m), -30.0, 30.0)\n")
    return src


def main() -> None:
    (HERE / "_cheap_jnp.py").write_text(CHEAP_JNP)
    (HERE / "_oldlog_bcheap.py").write_text(cheap_logspace())
    for name, args in (("bnomath", (True, False)), ("bnogather", (False, True)), ("bideal", (True, True)),
                       ("bnogf", (False, True, False)), ("bnogv", (False, False, True)),
                       ("bhalf", (False, False, False, True))):
        (HERE / f"_old_{name}.py").write_text(fused_source(*args))
        print(f"wrote benchmarks/_old_{name}.py (timing only: a wrong result)")


if __name__ == "__main__":
    main()
