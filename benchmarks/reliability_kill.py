"""SIGKILL during triage: is any acknowledged label ever lost, is any journal left unresumable?

Runs `fastlbp triage` in a real pseudo-terminal on a generated graph, types a
random sequence of commands (labels, skips, undos), kills the process with
SIGKILL at a random moment (right after an acknowledgement, mid-round, or
mid-command), resumes the session in a fresh process, and checks that every
label the terminal acknowledged and did not undo is there, in order. Several
kills may hit one session (resume, type more, kill again). CPU only (the
point is the journal, not the GPU).

    python benchmarks/reliability_kill.py --kills 40 --seed 1 --out out/kills.json

Prints a short table last: kills, labels acknowledged, labels lost, journals
that did not resume. Needs pexpect (the `test` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pexpect  # noqa: E402

from datalog import synthetic  # noqa: E402
from datalog.formats import save_json  # noqa: E402
from fastlbp.core.settings import Settings  # noqa: E402
from fastlbp.io.loading import load  # noqa: E402
from fastlbp.triage import Triage  # noqa: E402

ACCEPTED = re.compile(r"accepted: (\S+) = (true|false)")
UNDID = re.compile(r"undid label of (\S+)")
# The prompt at the start of a line ("moved: race(1) 0.12 -> 0.81" holds "> " too), after any mode
# switch readline writes first (bracketed paste: ESC [ ? 2004 h).
PROMPT = r"\n(?:\x1b\[[0-9;?]*[a-zA-Z])*> "


def spawn(cwd: Path, *args: str) -> pexpect.spawn:
    # The command history goes to this run's folder, not the user's data folder.
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", FASTLBP_CACHE="off",
               XDG_DATA_HOME=str(cwd / "data"))
    return pexpect.spawn(sys.executable, ["-m", "fastlbp", "triage", *args], cwd=str(cwd), env=env,
                         encoding="utf-8", timeout=120)


def session_labels(graph: Path, session: Path) -> list[str] | None:
    """The labels a resumed session holds, in order; None when it does not resume."""
    try:
        t = Triage.open(load(graph), session, resume=True, settings=Settings(max_iters=300))
    except Exception as err:  # noqa: BLE001  (any failure to resume is what we count)
        print(f"  resume failed: {type(err).__name__}: {err}")
        return None
    try:
        return [f"{t.model.var_names[v]}={'true' if t.labels[v] else 'false'}" for _, v in t.order]
    finally:
        t.close()


def one_life(child: pexpect.spawn, rng: random.Random, expected: list[str]) -> int:
    """Types commands until the kill; updates `expected` (acknowledged labels, undos applied).

    Returns the number of labels acknowledged in this life.
    """
    acknowledged = 0
    for _ in range(rng.randint(1, 6)):
        child.expect(PROMPT)
        key = rng.choices(["t", "f", "s", "u"], weights=[4, 4, 1, 1])[0]
        child.sendline(key)
        if key in "tf":
            i = child.expect([ACCEPTED, "refused", PROMPT, pexpect.TIMEOUT], timeout=120)
            if i == 0:
                expected.append(f"{child.match.group(1)}={child.match.group(2)}")
                acknowledged += 1
            if i == 2:
                child.sendline("")
        elif key == "u":
            i = child.expect([UNDID, "nothing to undo", "undid", PROMPT], timeout=120)
            if i == 0 and expected and expected[-1].startswith(child.match.group(1) + "="):
                expected.pop()
    # The kill: right after the last acknowledgement, or in the middle of the next command.
    when = rng.choice(["now", "mid-command", "mid-round"])
    if when != "now":
        child.expect(PROMPT)
        child.sendline(rng.choice("tf"))
        if when == "mid-round":
            time.sleep(rng.uniform(0.0, 0.3))
    child.kill(signal.SIGKILL)
    child.wait()
    return acknowledged


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=40, help="SIGKILLs in all")
    ap.add_argument("--kills-per-session", type=int, default=4, help="kills before a new session starts")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write the counts as JSON here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    totals = {"kills": 0, "acknowledged": 0, "lost": 0, "unresumable": 0, "sessions": 0, "extra_labels": 0}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dg = synthetic.layered(num_inputs=30, layers=2, width=30, seed=args.seed)
        graph = tmp / "g.json"
        save_json(dg, graph)
        session = tmp / "g.json.triage.db"
        start = time.perf_counter()
        while totals["kills"] < args.kills:
            session.unlink(missing_ok=True)
            totals["sessions"] += 1
            expected: list[str] = []
            for life in range(args.kills_per_session):
                if totals["kills"] >= args.kills:
                    break
                child = spawn(tmp, str(graph), "--session", str(session), "--max-iters", "300",
                              *(["--resume"] if life else ["--fresh"]))
                totals["acknowledged"] += one_life(child, rng, expected)
                totals["kills"] += 1
                got = session_labels(graph, session)
                if got is None:
                    totals["unresumable"] += 1
                    break
                # Every acknowledged label survives, in order; the one in flight may or may not.
                lost = sum(1 for a, b in zip(expected, got, strict=False) if a != b) + max(0, len(expected)
                                                                                           - len(got))
                totals["lost"] += lost
                extra = len(got) - len(expected)
                totals["extra_labels"] += max(0, extra)
                expected = got  # the next life resumes from what the journal holds
                print(f"kill {totals['kills']}: {len(got)} labels in the journal, lost {lost}", flush=True)
        totals["seconds"] = round(time.perf_counter() - start, 1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(totals, indent=1))
    print(f"\nkills {totals['kills']} over {totals['sessions']} sessions, labels acknowledged "
          f"{totals['acknowledged']}, lost {totals['lost']}, journals that did not resume "
          f"{totals['unresumable']}, labels in flight kept {totals['extra_labels']}, {totals['seconds']} s")
    return 1 if totals["lost"] or totals["unresumable"] else 0


if __name__ == "__main__":
    sys.exit(main())
