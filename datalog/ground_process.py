"""Grounding in a watched process: clingo writes its aspif output, this process counts the rule
instances as they come and stops clingo past a limit (a grounding cannot be interrupted from Python).

    _ground_watched(text, "ground.aspif", limit, on_limit, "p.dl")    # raises on_limit(count) past limit

The process is forked where this one has no threads of JAX's (a fork copies none of them, and a lock
one held would stay locked in the child), else a new interpreter (`_child_main`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from datalog import souffle
from datalog.functors import FunctorLimits, TypedContext
from datalog.reading import shown
from fastlbp.core.errors import InputError
from fastlbp.core.resources import MemoryLimit, memory_limit


def _control(log: list[str]):
    import clingo

    return clingo.Control(["--warn=none"], logger=lambda code, msg: log.append(msg))


class GroundingLimit(Exception):
    """A limit of the user's (a functor's values, a symbol's length, memory) stopped clingo: reported as
    an `InputError`, not as a bug of the translation."""


def _run(ctl, text: str, log: list[str], limits: FunctorLimits | None = None) -> None:
    context = TypedContext(limits or FunctorLimits())
    try:
        ctl.add("base", [], text)
        ctl.ground([("base", [])], context=context)
    except MemoryError:
        raise GroundingLimit("clingo ran out of memory while grounding") from None
    except RuntimeError as err:
        if context.problem is not None:  # a functor stopped at its limit (clingo wraps what it raised)
            raise GroundingLimit(context.problem) from None
        if "bad_alloc" in str(err) or "bad_alloc" in " ".join(log):  # C++'s std::bad_alloc
            raise GroundingLimit("clingo ran out of memory while grounding") from None
        # our translation is wrong: a bug, not the user's input
        raise RuntimeError(f"clingo refused the translated program: {err}: {' '.join(log)}") from None


# Memory a rule instance takes on its way to a derivation graph, for the default limit: hmmer's 27.3M
# instances peaked at 8.0 GB (about 300 bytes each); 400 leaves room for the rest of the process.
BYTES_PER_INSTANCE = 400
# Computed symbols (cat, substr, to_string) may take this share of the memory the process may use.
SYMBOL_MEMORY_SHARE = 4


def rule_instance_limit() -> tuple[int, MemoryLimit | None]:
    """The default limit of rule instances and the memory limit it comes from: what this process may
    use (`fastlbp.core.resources.memory_limit`: the machine's memory, `ulimit -v`, the cgroup's limit,
    whichever is least) / BYTES_PER_INSTANCE, at least 10,000."""
    memory = memory_limit()
    if memory is None:  # not known here
        return 100_000_000, None
    return max(10_000, memory.bytes // BYTES_PER_INSTANCE), memory


def default_max_rule_instances() -> int:
    """Rule instances a grounding may make by default (`rule_instance_limit`)."""
    return rule_instance_limit()[0]


class GroundingTooLarge(InputError):
    """Grounding made more rule instances than its limit (`GroundOptions.max_rule_instances`)."""


def _too_large(program: souffle.Program, count: int, limit: int, sizes: dict[str, int],
               memory: MemoryLimit | None = None) -> GroundingTooLarge:
    """The error of a grounding stopped at `count` instances, naming the rule whose body over input
    relations alone allows the most instances (their sizes multiplied), when there is one."""
    worst, bound = None, 0
    for rule in program.rules:
        rels = [a.relation for a in rule.body if isinstance(a, souffle.Atom) and not a.negated]
        if rels and all(r in sizes for r in rels):
            b = 1
            for r in rels:
                b *= sizes[r]
            if b > bound:
                worst, bound = rule, b
    which = "" if worst is None or bound <= limit else (
        f"; {worst.name} ({shown(worst.text)}, line {worst.pos.line}) alone may make {bound:.2g} instances "
        "(the product of its input relations' sizes)")
    return GroundingTooLarge(str(program.path or "<program>"), None,
                             f"grounding stopped after {count:,} rule instances, past the limit of {limit:,} "
                             f"(about {BYTES_PER_INSTANCE} bytes of memory each"
                             f"{f'; the default, from {memory}' if memory is not None else ''}){which}; "
                             "raise it with `fastlbp ground --max-rule-instances N` (0: no limit) if the "
                             "machine has the memory")


def _count_rules(path: str, offset: int, last: bytes) -> tuple[int, int, bytes]:
    """Rule statements (lines `1 ...`) an aspif file gained since `offset`: (count, new offset, last byte)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return 0, offset, last
    if not chunk:
        return 0, offset, last
    return (last + chunk).count(b"\n1 "), offset + len(chunk), chunk[-1:]


def _child(text: str, out: str, err_path: str, limits: FunctorLimits | None = None) -> int:
    """The grounding process: clingo writes `out`; an error goes to `err_path`. Returns the exit status:
    0 done, 3 an error of the translation (a bug), 4 a limit of the user's (the message says which)."""
    import clingo

    try:
        log: list[str] = []
        ctl = _control(log)
        ctl.register_backend(clingo.BackendType.Aspif, out, replace=True)
        _run(ctl, text, log, limits)
        del ctl  # flushes and closes the file
    except BaseException as err:  # noqa: BLE001  (reported to the parent)
        code = 4 if isinstance(err, GroundingLimit | MemoryError) else 3
        try:
            with open(err_path, "w", encoding="utf-8") as f:
                f.write(str(err) or "clingo ran out of memory while grounding")
        except BaseException:  # noqa: BLE001  (no memory left even for the message: the status says it)
            pass
        return code
    return 0


def _child_main(text_path: str, out: str, err_path: str, values: str, chars: str, basis: str,
                chars_basis: str, memory: str) -> None:
    """Entry point of a grounding process started as a new interpreter (`_start`)."""
    sys.exit(_child(Path(text_path).read_text(encoding="utf-8"), out, err_path,
                    FunctorLimits(int(values), int(chars), basis, chars_basis, memory)))


class _Forked:
    """A forked grounding process, with `subprocess.Popen`'s poll / kill / wait."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self):
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        return self.returncode

    def kill(self):
        if self.returncode is None:
            os.kill(self.pid, 9)

    def wait(self):
        while self.poll() is None:
            time.sleep(0.01)
        return self.returncode


def _start(text: str, out: str, err_path: str, limits: FunctorLimits):
    """The grounding process: forked where this process has no threads of JAX's (a fork copies none of
    them, and a lock one held would stay locked in the child), else a new interpreter."""
    if hasattr(os, "fork") and "jax" not in sys.modules:
        pid = os.fork()
        if pid == 0:
            os._exit(_child(text, out, err_path, limits))  # without Python's clean-up of the parent's state
        return _Forked(pid)
    text_path = out + ".lp"
    Path(text_path).write_text(text, encoding="utf-8")
    code = "import sys; from datalog.ground_process import _child_main; _child_main(*sys.argv[1:])"
    return subprocess.Popen([sys.executable, "-c", code, text_path, out, err_path, str(limits.values),
                             str(limits.chars), limits.basis, limits.chars_basis, limits.memory])


def signal_shown(number: int) -> str:
    """A signal by number, name and what it usually means here ("signal 8 (SIGFPE: an arithmetic fault)")."""
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    meaning = {"SIGKILL": "killed from outside, often by the kernel's out-of-memory killer",
               "SIGSEGV": "an invalid memory access, often a stack or memory exhausted",
               "SIGFPE": "an arithmetic fault, such as an integer division overflow",
               "SIGABRT": "aborted, often a failed memory allocation",
               "SIGBUS": "a bus error"}.get(name)
    return f"signal {number} ({name}{': ' + meaning if meaning else ''})"


def _ground_watched(text: str, out: str, limit: int, on_limit: Callable[[int], Exception],
                    where: str, limits: FunctorLimits | None = None) -> None:
    """Grounds in another process writing `out`, which this one watches: past `limit` rule statements
    the process is killed and `on_limit(count)` raised. Any exit (an error, a signal, Ctrl-C) kills it."""
    err_path = out + ".error"
    proc = _start(text, out, err_path, limits or FunctorLimits())
    count, offset, last = 0, 0, b"\n"
    try:
        while True:
            status = proc.poll()
            more, offset, last = _count_rules(out, offset, last)
            count += more
            if limit and count > limit:
                raise on_limit(count)
            if status is not None:
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    message = Path(err_path).read_text(encoding="utf-8", errors="replace") if os.path.exists(err_path) else ""
    if status < 0:
        raise InputError(where, None, f"clingo was killed by {signal_shown(-status)} while grounding, after "
                         f"{count:,} rule instances; if memory ran out, lower --max-rule-instances or give "
                         "the process more memory")
    if status == 4:  # a limit of the user's (a functor's, memory)
        message = message or "clingo ran out of memory while grounding"
        memory = limits.memory if limits is not None else ""
        note = (f"; this process may use {memory}: lower --max-rule-instances or give it more memory"
                if memory and "out of memory" in message else "")
        raise InputError(where, None, f"{message}, after {count:,} rule instances{note}")
    if status:
        raise RuntimeError(message or f"the grounding process ended with status {status}")
