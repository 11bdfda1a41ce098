"""Outputs are never half-written (issue 29, items 3, 4, 11): `ground -o`, `convert` and `rank -o` go through
`fastlbp.core.outputs`. A full disk, a read-only folder or a writer stopped mid-way leaves the old output as
it was, and the command says `error: PATH: cannot write: REASON` (exit 2, no traceback); devices, FIFOs and
/dev/stdout are written in place and stay what they were."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datalog import formats, synthetic
from fastlbp.cli import get_app
from fastlbp.core import outputs
from fastlbp.core.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
PRESTO = Path(__file__).parent / "data" / "presto-exceptions"
WEBLECH = str(Path(__file__).parent / "data" / "weblech" / "graph.causal_fg")
TAINT = ROOT / "data" / "taint"
GROUND = ["ground", TAINT / "taint.dl", "--facts", TAINT / "facts", "--rule-prob", TAINT / "rule_prob.txt"]
runner = CliRunner()
ENOSPC = os.strerror(errno.ENOSPC)


def cli(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry under `folder` (hidden temporaries included): a file's bytes, None for a folder."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def new_graph(tmp_path):
    """A derivation.json that differs from presto's in every file convert writes."""
    dg = synthetic.layered(num_inputs=30, layers=3, width=30, seed=5)
    dg.labels = {int(dg.alarms[0]): False}
    path = tmp_path / "src" / "new.json"
    path.parent.mkdir()
    formats.save_json(dg, path)
    return path


def disk_full_after(monkeypatch, budget: int, exc=None):
    """os.write takes `budget` bytes in all, then raises ENOSPC (or `exc`): a disk that fills up."""
    real = os.write
    left = [budget]

    def write(fd, data):
        n = min(len(data), left[0])
        if n == 0:
            raise exc if exc is not None else OSError(errno.ENOSPC, ENOSPC)
        left[0] -= n
        return real(fd, bytes(data[:n]))

    monkeypatch.setattr(os, "write", write)


# Item 3 and 11: full disk, writer stopped ----------------------------------------------------------------

def test_write_atomically_on_a_full_disk_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    target.write_text("old")
    new = "new\n" * 100_000
    for budget in (0, 1, 4096, len(new) // 2, len(new) - 1):
        with monkeypatch.context() as m:
            disk_full_after(m, budget)
            with pytest.raises(InputError, match=f"^{target}: cannot write: {ENOSPC}$"):
                outputs.write_atomically(target, new)
        assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    outputs.write_atomically(target, new)
    assert target.read_text() == new and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


@pytest.mark.parametrize("name", ["out.json", "out.json.gz", "out.fg", "bingo/"])
def test_convert_on_a_full_disk_keeps_the_old_output(tmp_path, monkeypatch, new_graph, name):
    out = tmp_path / "out"
    out.mkdir()
    dst = f"{out / name.rstrip('/')}{'/' if name.endswith('/') else ''}"
    res = cli("convert", PRESTO, dst)
    assert res.exit_code == 0, res.output
    before = snapshot(out)
    if name == "bingo/":
        (out / "bingo" / "notes.txt").write_text("mine\n")  # kept by a conversion with --force
        before = snapshot(out)
    for budget in (0, 100, 1500) + ((6000,) if name == "bingo/" else ()):  # 1,682 bytes gzipped
        with monkeypatch.context() as m:
            disk_full_after(m, budget)
            res = cli("convert", new_graph, dst, "--force")
        assert res.exit_code == 2, (budget, res.output)
        assert res.stderr == f"error: {dst.rstrip('/')}: cannot write: {ENOSPC}\n", res.output
        assert snapshot(out) == before, budget  # the old output, and no temporary left
    res = cli("convert", new_graph, dst, "--force")
    assert res.exit_code == 0, res.output
    if name == "bingo/":
        assert (out / "bingo" / "notes.txt").read_text() == "mine\n"
        assert (out / "bingo" / formats.BINGO_LABELS).exists()
        assert sorted(p.name for p in out.iterdir()) == ["bingo"]
        assert formats.read_bingo(out / "bingo")[0].num_clauses == formats.read_json(new_graph)[0].num_clauses


@pytest.mark.parametrize("name", ["taint.json", "bingo"])
def test_ground_on_a_full_disk_keeps_the_old_output(tmp_path, monkeypatch, name):
    out = tmp_path / name
    res = cli(*GROUND, "-o", out)
    assert res.exit_code == 0, res.output
    before = snapshot(tmp_path)
    with monkeypatch.context() as m:
        disk_full_after(m, 3000)
        res = cli(*GROUND, "--alarms", "leak", "-o", out)
    assert res.exit_code == 2 and res.stderr.endswith(f"error: {out}: cannot write: {ENOSPC}\n"), res.output
    assert "Traceback" not in res.output and snapshot(tmp_path) == before


def test_a_writer_stopped_mid_write_leaves_the_old_output(tmp_path, monkeypatch, new_graph):
    """A stop that is no OSError (here KeyboardInterrupt after N bytes) removes the temporary and leaves the
    old file or directory as it was."""
    dg = formats.read_json(new_graph)[0]
    formats.save_json(formats.read_bingo(PRESTO)[0], tmp_path / "g.json")
    formats.save_bingo(formats.read_bingo(PRESTO)[0], tmp_path / "b")
    before = snapshot(tmp_path)
    stops = 0
    for budget in (0, 1, 999, 4096, 6000):  # the new derivation.json: 6,232 bytes
        for write, target in ((formats.save_json, "g.json"), (formats.save_bingo, "b")):
            with monkeypatch.context() as m:
                disk_full_after(m, budget, exc=KeyboardInterrupt())
                try:
                    write(dg, tmp_path / target)
                except KeyboardInterrupt:
                    stops += 1
            assert snapshot(tmp_path) == before, (budget, target)
    assert stops == 10


def test_a_killed_bingo_writer_leaves_a_directory_readers_refuse(tmp_path):
    """What a kill leaves: the old directory, and beside it the hidden half-filled one with fastlbp's
    in-progress marker, which read_bingo refuses; Bingo's own directories (no marker) load as before."""
    assert formats.read_bingo(PRESTO)[0].num_clauses == 40
    left = tmp_path / ".b.x1y2.tmp"
    left.mkdir()
    (left / formats.BINGO_INCOMPLETE).write_text("")
    (left / formats.BINGO_CLAUSES).write_text((PRESTO / formats.BINGO_CLAUSES).read_text()[:500])
    with pytest.raises(InputError, match="incomplete Bingo directory"):
        formats.read_bingo(left)
    res = cli("rank", left, "--top", "1")
    assert res.exit_code == 2 and "incomplete Bingo directory" in res.stderr and "Traceback" not in res.output


def test_the_directory_swap_without_renameat2(tmp_path, monkeypatch, new_graph):
    """Where one exchange is not possible, the old directory is renamed aside, then the new one in; a
    failure of the second rename puts the old one back."""
    formats.save_bingo(formats.read_bingo(PRESTO)[0], tmp_path / "b")
    before = snapshot(tmp_path)
    monkeypatch.setattr(outputs, "_exchange", lambda a, b: False)
    real = os.rename
    calls = []

    def rename(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(src, dst)

    with monkeypatch.context() as m:
        m.setattr(os, "rename", rename)
        res = cli("convert", new_graph, tmp_path / "b", "--force")
    eio = os.strerror(errno.EIO)
    assert res.exit_code == 2 and res.stderr == f"error: {tmp_path / 'b'}: cannot write: {eio}\n"
    assert snapshot(tmp_path) == before
    res = cli("convert", new_graph, tmp_path / "b", "--force")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "src"]
    assert formats.read_bingo(tmp_path / "b")[0].labels


def test_a_bingo_directory_in_a_folder_we_may_not_write(tmp_path, monkeypatch, new_graph):
    """No sibling can be made: the files are renamed into the directory one by one, under the in-progress
    marker; a stop part-way leaves the marker (refused), a failure before the first rename the old one."""
    import tempfile

    real = tempfile.mkdtemp

    def mkdtemp(suffix=None, prefix=None, dir=None):
        if dir is not None and Path(dir) == tmp_path:  # the folder holding the directory: read-only
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(suffix, prefix, dir)

    b = tmp_path / "b"
    formats.save_bingo(formats.read_bingo(PRESTO)[0], b)
    (b / "notes.txt").write_text("mine\n")
    (b / formats.BINGO_ORACLE).write_text("stale(1)\n")  # not in the new graph: removed
    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    before = snapshot(tmp_path)
    with monkeypatch.context() as m:
        disk_full_after(m, 3000)
        res = cli("convert", new_graph, b, "--force")
    assert res.exit_code == 2 and res.stderr == f"error: {b}: cannot write: {ENOSPC}\n", res.output
    assert snapshot(tmp_path) == before
    real_replace, done = os.replace, []

    def replace(src, dst):
        if done:
            raise KeyboardInterrupt
        done.append(dst)
        return real_replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", replace)
        with pytest.raises(KeyboardInterrupt):
            formats.save_bingo(formats.read_json(new_graph)[0], b)
    with pytest.raises(InputError, match="incomplete Bingo directory"):
        formats.read_bingo(b)
    res = cli("convert", new_graph, b, "--force")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in b.iterdir()) == sorted([formats.BINGO_CLAUSES, formats.BINGO_ALARMS,
                                                          formats.BINGO_RULE_PROBS, formats.BINGO_INPUT_PROBS,
                                                          formats.BINGO_LABELS, "rule_dict.txt", "notes.txt"])
    dg = formats.read_bingo(b)[0]
    assert dg.num_clauses == formats.read_json(new_graph)[0].num_clauses and not dg.truth


def _fill_disk_possible() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and sys.platform.startswith("linux")


@pytest.mark.skipif(not _fill_disk_possible(), reason="mounting a small tmpfs needs root on Linux")
def test_a_real_full_disk(tmp_path, new_graph):
    """A 64 KiB tmpfs, filled: convert and ground say `cannot write: No space left on device`, the old
    outputs stay."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        assert cli("convert", PRESTO, disk / "p.json").exit_code == 0
        assert cli("convert", PRESTO, f"{disk / 'b'}/").exit_code == 0
        (disk / "filler").write_bytes(b"x" * (disk_free(disk) - 4096))
        before = snapshot(disk)
        for dst in (disk / "p.json", disk / "b"):
            res = cli("convert", new_graph, dst, "--force")
            assert res.exit_code == 2 and res.stderr == f"error: {dst}: cannot write: {ENOSPC}\n", res.output
        res = cli(*GROUND, "-o", disk / "b")
        assert res.exit_code == 2 and res.stderr.endswith(f"error: {disk / 'b'}: cannot write: {ENOSPC}\n")
        assert snapshot(disk) == before
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.skipif(not _fill_disk_possible(), reason="mounting a small tmpfs needs root on Linux")
def test_a_real_read_only_file_system(tmp_path, new_graph):
    """A tmpfs remounted read-only (root too is refused): `cannot write: Read-only file system`."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        assert cli("convert", PRESTO, disk / "p.json").exit_code == 0
        assert cli("convert", PRESTO, f"{disk / 'b'}/").exit_code == 0
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        before = snapshot(disk)
        erofs = os.strerror(errno.EROFS)
        for dst in (disk / "p.json", disk / "b", disk / "new.json", disk / "new.fg"):
            res = cli("convert", new_graph, dst, "--force")
            assert res.exit_code == 2 and res.stderr == f"error: {dst}: cannot write: {erofs}\n", res.output
        for dst in (disk / "b", disk / "g.json", disk / "nested" / "c"):
            res = cli(*GROUND, "-o", dst)
            assert res.exit_code == 2 and res.stderr.endswith(f"error: {dst}: cannot write: {erofs}\n"), \
                res.output
        assert snapshot(disk) == before
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.skipif(not _fill_disk_possible(), reason="mounting a small tmpfs needs root on Linux")
def test_ground_with_a_full_temporary_folder(tmp_path, monkeypatch):
    """clingo writes its ground program to the temporary folder and says nothing when the disk is full: the
    program was cut short (a cut at a line's end parses, a graph would lack clauses). Refused, exit 2."""
    import tempfile

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(disk)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(disk))
        res = cli(*GROUND, "-o", tmp_path / "g.json")
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        assert res.stderr.endswith(f"error: {disk}: cannot write: {ENOSPC} (clingo's ground program, written "
                                   "here while grounding, may be cut short; free some space or set TMPDIR to "
                                   "a folder with room)\n"), res.output
        assert not (tmp_path / "g.json").exists() and not list(disk.iterdir())
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def disk_free(folder: Path) -> int:
    s = os.statvfs(folder)
    return s.f_bavail * s.f_frsize


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_a_read_only_folder(tmp_path, monkeypatch, err, new_graph):
    """Simulated (root ignores permissions): the folder refuses new entries."""
    import tempfile

    real = {"mkstemp": tempfile.mkstemp, "mkdtemp": tempfile.mkdtemp}

    def refusing(name):
        def make(suffix=None, prefix=None, dir=None, *args):
            if dir is not None and tmp_path in (Path(dir), *Path(dir).parents):  # only this tree is read-only
                raise OSError(err, os.strerror(err))
            return real[name](suffix, prefix, dir, *args)
        return make

    formats.save_json(formats.read_bingo(PRESTO)[0], tmp_path / "g.json")
    formats.save_bingo(formats.read_bingo(PRESTO)[0], tmp_path / "b")
    before = snapshot(tmp_path)
    monkeypatch.setattr(tempfile, "mkstemp", refusing("mkstemp"))
    monkeypatch.setattr(tempfile, "mkdtemp", refusing("mkdtemp"))
    for args, dst in ((("convert", new_graph), "g.json"), (("convert", new_graph), "b"),
                      (GROUND + ["-o"], "g.json"), (GROUND + ["-o"], "b")):
        res = cli(*args, tmp_path / dst, *(["--force"] if args[0] == "convert" else []))
        assert res.exit_code == 2, res.output
        assert res.stderr.endswith(f"error: {tmp_path / dst}: cannot write: {os.strerror(err)}\n"), res.output
        assert "Traceback" not in res.output and snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_chmod_0555_folder(tmp_path, new_graph):
    ro = tmp_path / "ro"
    ro.mkdir()
    formats.save_json(formats.read_bingo(PRESTO)[0], ro / "g.json")
    formats.save_bingo(formats.read_bingo(PRESTO)[0], ro / "b")
    before = snapshot(ro)
    ro.chmod(0o555)
    try:
        for args, dst in ((("convert", new_graph), "g.json"), (("convert", new_graph), "b"),
                          (GROUND + ["-o"], "g.json"), (GROUND + ["-o"], "new.json")):
            res = cli(*args, ro / dst, *(["--force"] if args[0] == "convert" else []))
            assert res.exit_code == 2, res.output
            assert res.stderr.endswith(f"error: {ro / dst}: cannot write: Permission denied\n"), res.output
        assert snapshot(ro) == before
    finally:
        ro.chmod(0o755)


# Item 4: devices, FIFOs, /dev/stdout, links -----------------------------------------------------------------

def test_dev_null_stays_a_device(tmp_path):
    from fastlbp.cli.app import emit

    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    emit("x", Path("/dev/null"))
    res = cli("convert", PRESTO, "/dev/null", "--to", "json")
    assert res.exit_code == 0, res.output
    (tmp_path / "null.json").symlink_to("/dev/null")  # ground -o wants a .json name: a link to the device
    res = cli(*GROUND, "-o", tmp_path / "null.json")
    assert res.exit_code == 0 and (tmp_path / "null.json").is_symlink(), res.output
    res = cli("rank", WEBLECH, "--top", "3", "--method", "lbp", "--max-iters", "5", "-o", "/dev/null")
    assert res.exit_code == 0, res.output
    st = os.lstat("/dev/null")
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3
    assert not list(Path("/dev").glob(".null.*"))
    res = cli("convert", PRESTO, "/dev/null", "--to", "bingo")
    assert res.exit_code == 2 and "is not a directory" in res.stderr


def test_a_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    res = cli("convert", PRESTO, fifo, "--to", "json")
    reader.join(30)
    assert res.exit_code == 0, res.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and [p.name for p in tmp_path.iterdir()] == ["pipe"]
    assert formats.parse_json(got[0].decode())[0].num_clauses == 40
    link = tmp_path / "to-pipe"
    link.symlink_to(fifo)  # a link to a FIFO: the FIFO is written, the link stays
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    outputs.write_atomically(link, "hello\n")
    reader.join(30)
    assert got[1] == b"hello\n" and link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_stdout_is_written_in_place(tmp_path):
    """`-o /dev/stdout` writes to the process's stdout (a pipe, or a file it appends to), never replacing
    /dev/stdout (as root, the temporary could be made in /dev and renamed over the link)."""
    env = {**os.environ, "FASTLBP_CACHE": "off", "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "fastlbp", "convert", str(PRESTO), "/dev/stdout", "--to", "json"]
    piped = subprocess.run(cmd, capture_output=True, env=env, timeout=120, cwd=ROOT)
    assert piped.returncode == 0, piped.stderr
    out = tmp_path / "out.json"
    with out.open("wb") as f:
        f.write(b"")
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, env=env, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == piped.stdout and formats.read_json(out)[0].num_clauses == 40
    assert os.path.islink("/dev/stdout")


def test_other_special_files_are_refused(tmp_path):
    sock = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(sock))
        res = cli("convert", PRESTO, sock, "--to", "json")
        assert res.exit_code == 2 and res.stderr == f"error: {sock}: is a socket; name a file, a character " \
                                                    "device or a FIFO\n", res.output
        assert stat.S_ISSOCK(os.lstat(sock).st_mode)
    finally:
        server.close()


def test_a_link_to_a_file_is_kept_and_the_file_replaced(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    res = cli("convert", PRESTO, link)
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and formats.read_json(real)[0].num_clauses == 40
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]
    # A link to a Bingo directory: the directory is replaced, the link kept.
    (tmp_path / "bingo").mkdir()
    (tmp_path / "blink").symlink_to("bingo")
    res = cli("convert", PRESTO, f"{tmp_path / 'blink'}/")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "blink").is_symlink() and (tmp_path / "bingo" / formats.BINGO_CLAUSES).exists()


# A real kill ---------------------------------------------------------------------------------------------
# The child SIGKILLs itself just before its k-th file-system call of the write (counted from the temporary;
# a write first puts half its buffer on disk). benchmarks/reliability_outputs.py does this at every call
# of every writer, and with ENOSPC instead of the kill.

KILLER = """
import os, signal, sys, tempfile
from datalog import formats, synthetic
target, kind, point = sys.argv[1], sys.argv[2], int(sys.argv[3])
dg = synthetic.layered(num_inputs=40, layers=3, width=40, seed=9)
calls, armed, real_write = [0], [False], os.write
def hooked(fn, name):
    def call(*args, **kwargs):
        if armed[0]:
            calls[0] += 1
            if calls[0] - 1 == point:
                if name == "write":
                    real_write(args[0], bytes(args[1][:len(args[1]) // 2]))
                os.kill(os.getpid(), signal.SIGKILL)
        return fn(*args, **kwargs)
    return call
for name in ("open", "write", "fsync", "close", "replace", "rename", "unlink", "chmod", "mkdir", "rmdir"):
    setattr(os, name, hooked(getattr(os, name), name))
for name in ("mkstemp", "mkdtemp"):
    def arm(*args, _fn=getattr(tempfile, name), **kwargs):
        armed[0] = True
        return _fn(*args, **kwargs)
    setattr(tempfile, name, arm)
(formats.save_bingo if kind == "bingo" else formats.save_json)(dg, target)
print(calls[0])
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bingo", "json"])
def test_sigkill_at_any_step_of_a_write_leaves_the_old_or_the_new_output(tmp_path, kind):
    """SIGKILL at steps spread over the write (every step for derivation.json): the output is always the
    old graph or the whole new one; a hidden leftover holding a graph is marked and refused."""
    target = tmp_path / ("b" if kind == "bingo" else "g.json")
    refs = {}
    for which in ("old", "new"):
        folder = tmp_path.parent / f"{tmp_path.name}-{which}"
        folder.mkdir()
        dg = formats.read_bingo(PRESTO)[0] if which == "old" else synthetic.layered(40, 3, 40, seed=9)
        (formats.save_bingo if kind == "bingo" else formats.save_json)(dg, folder / target.name)
        refs[which] = folder / target.name
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}

    def run(point: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", KILLER, str(target), kind, str(point)], env=env,
                              capture_output=True, text=True, timeout=120)

    def reset():
        for p in tmp_path.iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        (shutil.copytree if kind == "bingo" else shutil.copy2)(refs["old"], target)

    reset()
    done = run(-1)
    assert done.returncode == 0, done.stderr
    calls = int(done.stdout)
    assert snapshot_of(target) == snapshot_of(refs["new"])
    points = range(calls) if kind == "json" else sorted({round(i * (calls - 1) / 11) for i in range(12)})
    seen = {"old": 0, "new": 0}
    for point in points:
        reset()
        assert run(point).returncode == -signal.SIGKILL
        got = snapshot_of(target)
        which = next((w for w in ("new", "old") if got == snapshot_of(refs[w])), None)
        assert which is not None, point
        seen[which] += 1
        for p in tmp_path.iterdir():  # the kill's leftovers: hidden, refused if they hold a graph
            if p != target and p.is_dir() and (p / formats.BINGO_CLAUSES).exists():
                assert p.name.startswith(".b.") and snapshot_of(p) in (snapshot_of(refs["old"]),
                                                                      snapshot_of(refs["new"])) or \
                    (p / formats.BINGO_INCOMPLETE).exists(), point
    assert seen["old"] and seen["new"]


def snapshot_of(path: Path) -> dict[str, bytes | None] | bytes:
    return path.read_bytes() if path.is_file() else snapshot(path)
