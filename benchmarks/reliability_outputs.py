"""Kills and full disks while `convert` and `ground` write: is an output ever damaged? (issue 29, items 3, 11)

Three campaigns, each on derivation.json, derivation.json.gz, a causal factor graph and Bingo directories
(with Linux's one-step exchange, and with the two-rename fallback), as `fastlbp convert` and
`fastlbp ground -o` write them over an older output:

* points: SIGKILL at every step of the write. A fork of a process that has imported the CLI runs the
  command with the file-system calls it makes (open, write, fsync, close, rename, unlink, chmod, mkdir,
  link, rmdir, scandir, the exchange) counted from the moment it makes its temporary; the k-th child
  kills itself just before call k (a write first puts half its buffer on disk), for every k.
* enospc: the same, with the k-th write, fsync or close failing with ENOSPC instead: the command must
  exit 2 with `error: PATH: cannot write: No space left on device` and no traceback, and leave the
  folder exactly as it was (no temporary either: `not_as_before` counts the runs that did not).
* random: `python -m fastlbp convert` of a 48,000-clause graph in a fresh process, SIGKILLed from outside
  once its temporary shows, after a random delay up to 1.2 times the write's time (a kill that leaves a
  temporary landed while it wrote).

After each kill the output must be the old one or the new one, byte for byte, and any hidden leftover
directory holding a Bingo graph must hold the in-progress marker that readers refuse.

    python benchmarks/reliability_outputs.py --random-kills 40 --seed 1 --out out/outputs.json

Prints a table last: campaign, target, runs, damaged outputs (and for enospc, wrong messages or
tracebacks, leftovers). Linux only (fork, SIGKILL). CPU only; about 2.5 minutes on two cores.

Measured 2026-11-28 (`--random-kills 30 --seed 1`): 289 SIGKILLs at every step and 60 from outside (21
of them mid-write), 0 damaged outputs (one kill in the two-rename fallback's window left the name
missing, both directories kept as hidden siblings; 53 in-place kills left the marked directory, refused);
153 injected ENOSPC failures: 0 damaged, 0 tracebacks, 0 wrong messages, 0 temporaries left.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import datalog.grounding  # noqa: E402, F401  (imported once, before the forks)
from datalog import formats, synthetic  # noqa: E402
from fastlbp.cli import get_app  # noqa: E402
from fastlbp.core import outputs  # noqa: E402

TAINT = ROOT / "data" / "taint"
PRESTO = ROOT / "tests" / "data" / "presto-exceptions"
GROUND = ["ground", str(TAINT / "taint.dl"), "--facts", str(TAINT / "facts"),
          "--rule-prob", str(TAINT / "rule_prob.txt")]
CALLS = ("open", "write", "fsync", "close", "replace", "rename", "unlink", "chmod", "mkdir", "link", "rmdir",
         "scandir")
FAILING = ("write", "fsync", "close")  # where a full disk shows (close: NFS, delayed allocation)


def snapshot(path: Path) -> dict[str, bytes | None] | None:
    if not os.path.lexists(path):
        return None
    if not path.is_dir():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(path.rglob("*"))}


def run_child(argv: list[str], point: int | None, action: str, log: Path,
              no_exchange: bool, folder: Path | None = None, in_place: bool = False) -> tuple[int, list]:
    """Runs the CLI with `argv` in a fork; the fork stops at call `point` (None: counts the calls), counted
    from the first temporary made in `folder` (the output's).

    Returns the exit status (negative: the signal) and, when counting, the names of the calls made.
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(rfd)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        real = {name: getattr(os, name) for name in CALLS}
        real_write, real_close, kill = os.write, os.close, os.kill
        made: list[str] = []
        armed = [False]

        def hooked(name, fn):
            def call(*args, **kwargs):
                if armed[0]:
                    k = len(made)
                    made.append(name)
                    if k == point:
                        if action == "kill":
                            if name == "write" and len(args[1]) > 1:
                                real_write(args[0], bytes(args[1][:len(args[1]) // 2]))
                            kill(os.getpid(), signal.SIGKILL)
                        elif name in FAILING:
                            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return fn(*args, **kwargs)
            return call

        for name in CALLS:
            setattr(os, name, hooked(name, real[name]))
        outputs._exchange = hooked("exchange", (lambda a, b: False) if no_exchange else outputs._exchange)
        real_mkdtemp = tempfile.mkdtemp
        for name in ("mkstemp", "mkdtemp"):  # the write starts with its temporary
            fn = getattr(tempfile, name)

            def arm(suffix=None, prefix=None, dir=None, *args, _fn=fn):
                if dir is not None and folder is not None and Path(dir) == folder:
                    armed[0] = True
                    if in_place and _fn is real_mkdtemp:  # the folder refuses a sibling directory
                        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
                return _fn(suffix, prefix, dir, *args)
            setattr(tempfile, name, arm)
        code = 0
        try:
            get_app()(argv, prog_name="fastlbp")
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:  # noqa: BLE001  (a traceback is what the campaign counts)
            import traceback

            traceback.print_exc()
            code = 99
        sys.stdout.flush()
        sys.stderr.flush()
        for name in CALLS:
            setattr(os, name, real[name])
        real_write(wfd, json.dumps(made).encode())
        real_close(wfd)
        os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        made = json.loads(f.read() or b"[]")
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return code, made


def leftovers(folder: Path, target: Path, whole: list) -> tuple[int, int]:
    """(hidden leftovers, those a reader would load as a graph that is not one of `whole`: a directory with
    a Bingo graph, no in-progress marker, and files that are neither the old nor the new graph's)."""
    n = bad = 0
    for p in folder.iterdir():
        if p.name.startswith(f".{target.name}."):
            n += 1
            marked = (p / formats.BINGO_INCOMPLETE).exists()
            graph = p.is_dir() and (p / formats.BINGO_CLAUSES).exists()
            if graph and not marked and snapshot(p) not in whole:
                bad += 1
    return n, bad


def restore(folder: Path, target: Path, old: Path) -> None:
    for p in folder.iterdir():
        if p.name.startswith(f".{target.name}.") or p == target:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    (shutil.copytree if old.is_dir() else shutil.copy2)(old, target)


def cases(work: Path) -> list[dict]:
    """Each: the command writing `new` over `old` at `target` (references written by clean runs)."""
    new = work / "new.json"
    dg = synthetic.layered(num_inputs=60, layers=4, width=60, seed=7)
    dg.labels = {int(dg.alarms[0]): False}
    formats.save_json(dg, new)
    out = []
    for name, old_src in (("g.json", PRESTO), ("g.json.gz", PRESTO), ("g.fg", PRESTO), ("bingo", PRESTO),
                          ("bingo-2-renames", PRESTO), ("bingo-in-place", PRESTO), ("taint.json", None),
                          ("taint-bingo", None)):
        folder = work / name.replace(".", "_")
        folder.mkdir()
        dst = folder / ("bingo" if "bingo" in name else name)
        ref = work / "refs" / name
        (ref / "old").mkdir(parents=True)
        (ref / "new").mkdir()
        if old_src is not None:  # convert presto, then the new graph over it
            old_argv = ["convert", str(old_src), str(ref / "old" / dst.name), "--to",
                        "bingo" if "bingo" in name else ("causal_fg" if name.endswith(".fg") else "json")]
            argv = ["convert", str(new), str(dst), "--force"] + old_argv[-2:]
            new_argv = ["convert", str(new), str(ref / "new" / dst.name), *old_argv[-2:]]
        else:  # ground, then ground again with more alarms
            old_argv = GROUND + ["-o", str(ref / "old" / dst.name)]
            argv = GROUND + ["--alarms", "leak, tainted", "-o", str(dst)]
            new_argv = GROUND + ["--alarms", "leak, tainted", "-o", str(ref / "new" / dst.name)]
        for a in (old_argv, new_argv):
            code, _ = run_child(a, None, "count", work / "log.txt", False)
            assert code == 0, (a, (work / "log.txt").read_text())
        if "bingo" in name:
            (ref / "old" / dst.name / "notes.txt").write_text("kept\n")
            (ref / "new" / dst.name / "notes.txt").write_text("kept\n")
        out.append({"name": name, "folder": folder, "target": dst, "argv": argv,
                    "old": ref / "old" / dst.name, "new": ref / "new" / dst.name,
                    "no_exchange": name == "bingo-2-renames", "in_place": name == "bingo-in-place"})
    return out


def campaign_points(case: dict, action: str, log: Path) -> dict:
    folder, target = case["folder"], case["target"]
    old, new = snapshot(case["old"]), snapshot(case["new"])
    restore(folder, target, case["old"])
    code, made = run_child(case["argv"], None, "count", log, case["no_exchange"], folder, case["in_place"])
    assert code == 0 and snapshot(target) == new, (case["name"], log.read_text())
    points = [k for k, name in enumerate(made) if action == "kill" or name in FAILING]
    row = {"campaign": "points" if action == "kill" else "enospc", "target": case["name"], "runs": 0,
           "damaged": 0, "old": 0, "new": 0, "leftovers": 0, "unrefused_leftovers": 0, "wrong_message": 0,
           "tracebacks": 0, "calls": len(made)}
    for k in points:
        restore(folder, target, case["old"])
        before = snapshot(folder)
        code, _ = run_child(case["argv"], k, action, log, case["no_exchange"], folder, case["in_place"])
        row["runs"] += 1
        got = snapshot(target)
        if got is None and case["no_exchange"]:  # between the two renames: the window the fallback has
            state = "missing"
        elif case["in_place"] and got is not None and formats.BINGO_INCOMPLETE in got:
            state = "refused"  # half-replaced under the marker: readers refuse it
        else:
            state = "old" if got == old else "new" if got == new else "damaged"
        row[state] = row.get(state, 0) + 1
        if state == "damaged":
            row.setdefault("failures", []).append({"call": k, "name": made[k], "exit": code})
        n, bad = leftovers(folder, target, [old, new])
        row["leftovers"] += n
        row["unrefused_leftovers"] += bad
        if action == "enospc":  # failed and left all as it was, or failed after the new output was in place
            text = log.read_text()
            row["tracebacks"] += "Traceback" in text or code == 99
            expected = f"error: {target}: cannot write: {os.strerror(errno.ENOSPC)}\n"
            failed = code == 2 and text.endswith(expected)
            done = code == 0 and got == new and bad == 0  # failed after the swap: a marked leftover at most
            row["wrong_message"] += not (failed or done)
            row["not_as_before"] = row.get("not_as_before", 0) + (failed and snapshot(folder) != before)
            if not (failed or done) or (failed and snapshot(folder) != before):
                row.setdefault("failures", []).append({"call": k, "name": made[k], "exit": code,
                                                       "log": text[-300:]})
    return row


def campaign_random(kind: str, work: Path, kills: int, rng: random.Random) -> dict:
    """External SIGKILLs of `fastlbp convert BIG.json DST --force` (DST: derivation.json or a Bingo directory
    holding presto), once its temporary shows, after a random delay up to 1.2 times the write's time."""
    big = work / "big.json"
    if not big.exists():  # 48,000 clauses: writing takes a tenth of a second or more
        formats.save_json(synthetic.layered(num_inputs=3000, layers=8, width=3000, seed=11), big)
    folder = work / f"random-{kind}"
    folder.mkdir()
    target = folder / ("bingo" if kind == "bingo" else "g.json")
    fmt = "bingo" if kind == "bingo" else "json"
    old_ref, new_ref = work / f"random-{kind}-old" / target.name, work / f"random-{kind}-new" / target.name
    old_ref.parent.mkdir()
    new_ref.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "FASTLBP_CACHE": "off"}
    base = [sys.executable, "-m", "fastlbp", "convert"]
    subprocess.run(base + [str(PRESTO), str(old_ref), "--to", fmt], env=env, check=True, capture_output=True)
    subprocess.run(base + [str(big), str(new_ref), "--to", fmt], env=env, check=True, capture_output=True)
    old, new = snapshot(old_ref), snapshot(new_ref)
    cmd = base + [str(big), str(target), "--to", fmt, "--force"]
    prefix = f".{target.name}."

    def started(proc) -> bool:
        """Waits until the command makes its temporary (True) or ends (False)."""
        while proc.poll() is None:
            if any(name.startswith(prefix) for name in os.listdir(folder)):
                return True
            time.sleep(0.001)
        return False

    restore(folder, target, old_ref)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert started(proc)
    t = time.perf_counter()
    assert proc.wait() == 0
    span = time.perf_counter() - t  # from the temporary to the end: the write
    row = {"campaign": "random", "target": f"{target.name} (big)", "runs": 0, "damaged": 0, "old": 0,
           "new": 0, "leftovers": 0, "unrefused_leftovers": 0, "write_seconds": round(span, 3)}
    for _ in range(kills):
        restore(folder, target, old_ref)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if started(proc):
            time.sleep(rng.uniform(0, 1.2) * span)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = snapshot(target)
        row["runs"] += 1
        row["damaged"] += got not in (old, new)
        row["old"] += got == old
        row["new"] += got == new and got != old
        n, bad = leftovers(folder, target, [old, new])
        row["leftovers"] += n  # a kill that left a temporary landed while it wrote
        row["unrefused_leftovers"] += bad
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--random-kills", type=int, default=20, help="external SIGKILLs per target (random)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default=None, help="targets whose name holds this text")
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = work / "log.txt"
        for case in cases(work):
            if args.only and args.only not in case["name"]:
                continue
            rows.append(campaign_points(case, "kill", log))
            rows.append(campaign_points(case, "enospc", log))
        for kind in ("json", "bingo") if args.random_kills else ():
            rows.append(campaign_random(kind, work, args.random_kills, rng))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    print(f"{'campaign':8} {'target':16} {'runs':>5} {'damaged':>7} {'old':>4} {'new':>4} {'missing':>7} "
          f"{'refused':>7} {'leftover':>8} {'unrefused':>9} {'bad msg':>7} {'tracebk':>7}")
    for r in rows:
        print(f"{r['campaign']:8} {r['target']:16} {r['runs']:5} {r['damaged']:7} {r['old']:4} {r['new']:4} "
              f"{r.get('missing', 0):7} {r.get('refused', 0):7} {r['leftovers']:8} "
              f"{r['unrefused_leftovers']:9} "
              f"{r.get('wrong_message', '-'):>7} {r.get('tracebacks', '-'):>7}")
        for f in r.get("failures", [])[:3]:
            print(f"    {f}")
    total = {k: sum(r.get(k, 0) for r in rows) for k in ("runs", "damaged", "unrefused_leftovers",
                                                          "wrong_message", "tracebacks", "not_as_before")}
    print("total: " + ", ".join(f"{k} {v}" for k, v in total.items()))
    sys.exit(1 if total["damaged"] or total["unrefused_leftovers"] or total["wrong_message"]
             or total["tracebacks"] or total["not_as_before"] else 0)


if __name__ == "__main__":
    main()
