"""SIGTERM and SIGHUP end a command cleanly: `ground` leaves no clingo output in $TMPDIR (issue 29, 6)."""

import os
import signal
import subprocess
import sys
import time

import pytest

PROGRAM = (".decl a(x:number)\n.input a\n.decl b(x:number)\n.input b\n"
           ".decl alarm(x:number, y:number)\nalarm(x, y) :- a(x), b(y).\n.output alarm\n")


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM)])
def test_a_signal_while_grounding_leaves_no_temporary_behind(tmp_path, signum):
    (tmp_path / "p.dl").write_text(PROGRAM)
    for rel in "ab":
        (tmp_path / f"{rel}.facts").write_text("".join(f"{i}\n" for i in range(600)))  # 360,000 instances
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), FASTLBP_CACHE="off")
    proc = subprocess.Popen([sys.executable, "-m", "fastlbp", "ground", str(tmp_path / "p.dl"), "--facts",
                             str(tmp_path), "-o", str(tmp_path / "g.json")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # "read 1,200 input tuples ...": clingo starts next
    assert "input tuples" in line, line
    proc.send_signal(signum)
    try:
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, (proc.returncode, proc.stderr.read())
    time.sleep(0.1)
    assert list(scratch.iterdir()) == []  # clingo's ground.aspif and its folder are gone
    assert not (tmp_path / "g.json").exists()
