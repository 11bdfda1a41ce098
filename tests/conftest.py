import ctypes
import functools
import gc
import os
import sys
from pathlib import Path

import jax
import pytest
from hypothesis import settings

# The tests call engines, kernels and jnp directly, in float64 as fastlbp's own entry points run them
# (`fastlbp.core.jax_setup.float64`): tests are user code, and turn it on for their process themselves.
jax.config.update("jax_enable_x64", True)

# The CLI turns on JAX's persistent compilation cache; the tests do not write one
# (test_cli.py checks the cache in a subprocess of its own).
os.environ["FASTLBP_CACHE"] = "off"

# CI must not turn red on a random seed no one has seen before: by default the
# examples are derived from each test's name (derandomize), so every run checks
# the same cases. HYPOTHESIS_PROFILE=explore draws fresh random examples when
# hunting for bugs (pin what it finds with @example).
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

sys.path.insert(0, os.path.dirname(__file__))
import sequential_support  # noqa: E402  (from tests/, just put on the path)

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


# Memory per test process. JAX keeps every program it compiled, jitted or dispatched op by op (the
# sequential engines' tests run small graphs op by op: a few thousand tiny executables per test), so a
# worker grew with each test it ran: 2.06 GB after tests/test_engines_chunked.py alone, 5.9 GB for a
# worker of the full suite. The caches are dropped after each test module (modules share few
# programs), and after a test that leaves the process past RESIDENT_LIMIT (tests of one module often
# share: dropping them after every test of test_engines_chunked.py doubled its CPU time, 102 -> 193 s).
# The freed heap is handed back to the system (glibc keeps it otherwise: after a 1.1 GB test,
# jax.clear_caches() alone left 1.11 GB resident, with malloc_trim 0.28 GB). What a test asserts never
# depends on another test's compilations.
RESIDENT_LIMIT = 1280 * 2**20


def _resident() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux: no limit
        return None


try:
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _malloc_trim = None


def _drop_compilations() -> None:
    jax.clear_caches()
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)


def _drop_past_the_limit() -> None:
    resident = _resident()
    if resident is not None and resident > RESIDENT_LIMIT:
        _drop_compilations()


def _bounded(call):
    """`call` followed by `_drop_past_the_limit()`."""

    @functools.wraps(call)
    def wrapper(*args, **kwargs):
        out = call(*args, **kwargs)
        _drop_past_the_limit()
        return out

    return wrapper


# Within one test too: `sequential_support.call` runs an engine op by op, and each call on a 15-edge
# graph added 100-260 MB of JAX caches (tests/test_schedules.py's topo-on-polytrees test reached 2.03 GB
# alone). Wrapped here, before any test module imports it; the values it returns are unchanged.
sequential_support.call = _bounded(sequential_support.call)


@pytest.fixture(autouse=True, scope="module")
def _compilations_per_module():
    yield
    _drop_compilations()


@pytest.fixture(autouse=True)
def _bounded_compilations():
    yield
    _drop_past_the_limit()
