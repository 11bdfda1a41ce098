"""Malformed input of every format gets a clean error or a correct result, never a traceback (issue 20).

Each format a user hands fastlbp is mutated the way disks, editors, copies and
hostile files mutate them: byte flips, truncation, huge numbers, NaN and
infinities, bad UTF-8, a byte order mark, CRLF line ends, deep JSON, gzip
(whole and cut short), a directory where a file belongs, structural JSON edits,
duplicated, dropped and swapped lines. The formats: derivation.json and
.json.gz, Bingo directories (each of their files), libDAI causal factor graphs,
labels files, custom order files, oracle files and triage session databases.

Every reader must return a result or raise `InputError` naming the file; a
mutation that keeps the content (BOM, CRLF, gzip) must give the same result as
the original; a damaged session is reported and never changed. A sample goes
through the real CLI (`CliRunner`): exit 0, or exit 2 with `error: FILE` on
stderr and no traceback. A gzip bomb stops within a memory budget (measured in
a child process). The examples are derived from the test names (hypothesis
profile "ci" in conftest.py), so every run checks the same cases.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from triage_support import FAST, demo_model, made_session, write_demo
from typer.testing import CliRunner

from datalog import formats
from fastlbp.cli import get_app
from fastlbp.core.errors import DEFAULT_MAX_DECOMPRESSED, InputError
from fastlbp.core.model import Model
from fastlbp.inference.ranking import alarm_vars
from fastlbp.inference.simulate import read_oracle
from fastlbp.io import loading
from fastlbp.triage import Triage
from schedules.orders import read_order_file

EXAMPLES = Path(__file__).resolve().parents[1] / "data"
BINGO_FILES = [formats.BINGO_CLAUSES, formats.BINGO_ALARMS, formats.BINGO_ORACLE, formats.BINGO_RULE_PROBS,
               formats.BINGO_INPUT_PROBS, formats.BINGO_LABELS]


def fuzz(examples: int) -> settings:
    """Hypothesis settings of a fuzz test: `examples` cases, no deadline (a case may compile)."""
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# Mutations ------------------------------------------------------------------------

# Content-preserving mutations: the reader must give the unmutated file's result.
SAME = ("bom", "crlf", "gzip")
BYTE_MUTATIONS = ("flip", "flips", "truncate", "huge", "nan", "inf", "odd_number", "bad_utf8", "bom", "crlf",
                  "deep", "gzip", "gzip_truncated", "directory", "empty", "nul", "control", "word",
                  "dup_line", "drop_line", "swap_lines")
NUMBER = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE]-?[0-9]+)?")
WORD = re.compile(rb"[^\s:;,\[\]{}\"<]+")
WORDS = [b"", b"x", b"R99", b"CatchVH(3,4)", b"true", b"false", b"2", b"0", b"null", b"[]", b"{}", b'"a"',
         b"order", b"total", b"pairs", b"#1", b"#-1", b"#99999", b"I", b"*0.5;0.5", b"+1;0", b"NOT", b"---"]


def _at(data: bytes, draw, pattern: re.Pattern, new: bytes) -> bytes:
    spans = [m.span() for m in pattern.finditer(data)]
    if not spans:
        return data + new
    a, b = spans[draw(st.integers(0, len(spans) - 1))]
    return data[:a] + new + data[b:]


def _flip(data: bytes, draw) -> bytes:
    if not data:
        return data
    i = draw(st.integers(0, len(data) - 1))
    return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]


def _splice(data: bytes, draw, insert: bytes) -> bytes:
    i = draw(st.integers(0, len(data)))
    return data[:i] + insert + data[i:]


def mutate(data: bytes, kind: str, draw) -> bytes | None:
    """`data` mutated by `kind` (one of `BYTE_MUTATIONS`); None means "make it a directory"."""
    if kind == "flip":
        return _flip(data, draw)
    if kind == "flips":
        for _ in range(draw(st.integers(2, 30))):
            data = _flip(data, draw)
        return data
    if kind == "truncate":
        return data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    if kind == "huge":  # 4,301 digits: one past the limit of int(str)
        return _at(data, draw, NUMBER, b"9" * draw(st.sampled_from([19, 20, 400, 4301, 5000])))
    if kind == "nan":
        return _at(data, draw, NUMBER, draw(st.sampled_from([b"nan", b"NaN", b"-nan"])))
    if kind == "inf":
        new = [b"inf", b"Infinity", b"-inf", b"1e999", b"1e-999"]
        return _at(data, draw, NUMBER, draw(st.sampled_from(new)))
    if kind == "odd_number":  # signs, non-ASCII digits ('①', Arabic-Indic one), Python-only spellings
        new = [b"-1", b"--1", b"-0.5", b"\xe2\x91\xa0", b"\xd9\xa1", b"+1", b"1_0", b"0x10", b".5", b"-0"]
        return _at(data, draw, NUMBER, draw(st.sampled_from(new)))
    if kind == "bad_utf8":
        bad = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xf4\x90\x80\x80"]
        return _splice(data, draw, draw(st.sampled_from(bad)))
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n")
    if kind == "deep":
        n = draw(st.sampled_from([50, 990, 5000, 200_000]))
        return _splice(data, draw, draw(st.sampled_from([b"[" * n + b"]" * n, b"[" * n,
                                                         b'{"a":' * n + b"1" + b"}" * n])))
    if kind == "gzip":
        return gzip.compress(data, mtime=0)
    if kind == "gzip_truncated":
        z = gzip.compress(data, mtime=0)
        return z[:draw(st.integers(2, len(z) - 1))]
    if kind == "directory":
        return None
    if kind == "empty":
        return b""
    if kind == "nul":
        return _splice(data, draw, b"\x00")
    if kind == "control":
        new = [b"\x1b[31m", b"\r", b"\x0b", b"\x1c", b"\xc2\x85", b"\xe2\x80\xa8", b"\t", b" ", b"\n", b"#",
               b":", b" < "]
        return _splice(data, draw, draw(st.sampled_from(new)))
    if kind == "word":
        return _at(data, draw, WORD, draw(st.sampled_from(WORDS)))
    lines = data.split(b"\n")
    i, j = (draw(st.integers(0, len(lines) - 1)) for _ in range(2))
    if kind == "dup_line":
        lines.insert(i, lines[j])
    elif kind == "drop_line":
        del lines[i]
    else:
        assert kind == "swap_lines", kind
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


JSON_VALUES = [None, True, False, -1, 0, 1, 2, 10**6, 10**30, 0.5, -0.5, 1e308, "", "x", "R0", "CatchVH(3,4)",
               "\ud800", [], {}, [[]], [1, 2], [None], {"rule": "R0"}, {"": 1}]
JSON_KEYS = ["", "x", "probability", "text", "rule", "head", "body", "0", "CatchVH(3,4)", "tuples"]


def mutate_json(data: bytes, draw) -> bytes:
    """A structural edit: one node of the document replaced by another value, or one key renamed."""
    doc = json.loads(data)
    slots = []  # (container, key) of every node below the root

    def walk(x):
        items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
        for k, v in items:
            slots.append((x, k))
            walk(v)

    walk(doc)
    parent, key = slots[draw(st.integers(0, len(slots) - 1))]
    if isinstance(parent, dict) and draw(st.booleans()):
        parent[draw(st.sampled_from(JSON_KEYS))] = parent.pop(key)
    else:
        parent[key] = draw(st.sampled_from(JSON_VALUES))
    return json.dumps(doc).encode()


def place(path: Path, data: bytes | None) -> None:
    """Puts `data` at `path` (a directory for None), replacing what was there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if data is None:
        path.mkdir()
    else:
        path.write_bytes(data)


def clean_error(err: InputError, *paths: Path) -> None:
    """The error names one of `paths` first, as `error: FILE[:LINE]: problem` will show it."""
    assert any(str(err).startswith(f"{p}:") for p in paths), str(err)


def same_model(a: Model, b: Model) -> bool:
    ga, gb = a.graph, b.graph
    return a.var_names == b.var_names and all(
        np.array_equal(np.asarray(getattr(ga, f)), np.asarray(getattr(gb, f)))
        for f in ("factor_offsets", "edge_var", "factor_kind", "p1", "p2"))


# Graphs --------------------------------------------------------------------------


@fuzz(120)
@given(data=st.data())
def test_fuzz_derivation_json_and_gzip(tmp_path_factory, data):
    draw = data.draw
    source = EXAMPLES / draw(st.sampled_from(["presto.json", "weblech.json"]))
    compressed = draw(st.booleans())
    original = source.read_bytes()
    structural = draw(st.booleans())
    if structural:
        kind = "structure"
        mutated = mutate_json(original, draw)
    else:
        kind = draw(st.sampled_from(BYTE_MUTATIONS))
        mutated = mutate(original, kind, draw)
    # Content kept: BOM and CRLF in the text, or the text gzip-compressed (once, not twice).
    kept = kind in SAME
    if compressed and mutated is not None:  # a .json.gz: compress the damage, or damage the compressed
        if structural or draw(st.booleans()):
            mutated, kept = gzip.compress(mutated, mtime=0), kind in ("bom", "crlf")
        else:
            mutated, kept = mutate(gzip.compress(original, mtime=0), kind, draw), False
    p = tmp_path_factory.mktemp("json") / ("g.json.gz" if compressed else "g.json")
    place(p, mutated)
    try:
        model = loading.load(p)
    except InputError as err:
        clean_error(err, p)
        assert not kept, f"{kind}: {err}"
    else:
        if kept:
            assert same_model(model, loading.load(source))


@pytest.mark.slow
@fuzz(120)
@given(data=st.data())
def test_fuzz_bingo_directory(tmp_path_factory, data):
    draw = data.draw
    source = EXAMPLES / draw(st.sampled_from(["presto", "weblech"]))
    d = tmp_path_factory.mktemp("bingo") / "graph"
    shutil.copytree(source, d)
    # The optional fastlbp files too: a label and a prior on tuples of the graph.
    first = formats.read_bingo(d)[0]
    input_tuple = first.tuples[int(first.body[0])]
    (d / formats.BINGO_LABELS).write_text(f"{first.tuples[int(first.alarms[0])]} true\n")
    (d / formats.BINGO_INPUT_PROBS).write_text(f"{input_tuple}: 0.5\n")
    expected = loading.load(d)
    member = draw(st.sampled_from(BINGO_FILES + ["(the directory)"]))
    kind = draw(st.sampled_from(BYTE_MUTATIONS + ("missing",)))
    if member == "(the directory)":  # a file where the directory belongs
        victim = d
        place(d, mutate((d / formats.BINGO_CLAUSES).read_bytes(), kind, draw) if kind != "missing" else b"")
    else:
        victim = d / member
        if kind == "missing":
            victim.unlink()
        else:
            place(victim, mutate(victim.read_bytes(), kind, draw))
    try:
        model = loading.load(d)
    except InputError as err:
        clean_error(err, victim, d)
        assert kind not in SAME or member == "(the directory)", f"{member} {kind}: {err}"
    else:
        if kind in SAME and member != "(the directory)":
            assert same_model(model, expected) and model.labels == expected.labels


@fuzz(100)
@given(data=st.data())
def test_fuzz_causal_factor_graph(tmp_path_factory, data):
    draw = data.draw
    source = EXAMPLES / "weblech.causal_fg"
    kind = draw(st.sampled_from(BYTE_MUTATIONS))
    p = tmp_path_factory.mktemp("fg") / "g.causal_fg"
    place(p, mutate(source.read_bytes(), kind, draw))
    try:
        model = loading.load(p, format="causal_fg")
    except InputError as err:
        clean_error(err, p)
        assert kind not in SAME, f"{kind}: {err}"
    else:
        if kind in SAME:
            assert same_model(model, loading.load(source))


# Files read against a graph ------------------------------------------------------


@functools.cache
def presto() -> Model:
    """presto.json as the commands load it (a function, not a fixture: hypothesis prints fixtures)."""
    return loading.load(EXAMPLES / "presto.json")


def labels_file(model: Model) -> bytes:
    truths = ["true", "false", "1", "0"]
    return "".join(f"{n} {truths[i % 4]}\n" for i, n in enumerate(model.var_names[:8])).encode()


def oracle_file(model: Model) -> bytes:
    return "".join(f"{model.var_names[a]}\n" for a in alarm_vars(model)).encode()


def order_file(model: Model) -> bytes:
    """A total order naming edges both ways: `#E` and `FACTOR VARIABLE`."""
    g = model.graph
    off, ev = np.asarray(g.factor_offsets), np.asarray(g.edge_var)
    factor = np.searchsorted(off, np.arange(g.num_edges), side="right") - 1
    lines = ["# every edge once", "order total"]
    lines += [f"#{e}" if e % 2 else f"{factor[e]} {model.var_names[ev[e]]}" for e in range(g.num_edges)[::-1]]
    return ("\n".join(lines) + "\n").encode()


READERS = {
    "labels": (labels_file, lambda p, m: loading.read_labels(p, m)),
    "oracle": (oracle_file, lambda p, m: read_oracle(p, m)),
    "order": (order_file, lambda p, m: read_order_file(p, m.graph, m.var_names).rank.tolist()),
}


@pytest.mark.slow
@fuzz(150)
@given(data=st.data())
def test_fuzz_labels_oracle_and_order_files(tmp_path_factory, data):
    draw = data.draw
    model = presto()
    what = draw(st.sampled_from(sorted(READERS)))
    make, read = READERS[what]
    kind = draw(st.sampled_from(BYTE_MUTATIONS))
    folder = tmp_path_factory.mktemp(what)
    p = folder / f"{what}.txt"
    p.write_bytes(make(model))
    expected = read(p, model)
    place(p, mutate(make(model), kind, draw))
    try:
        got = read(p, model)
    except InputError as err:
        clean_error(err, p)
        assert kind not in SAME, f"{what} {kind}: {err}"
    else:
        if kind in SAME:
            assert got == expected


# Triage session databases ---------------------------------------------------------

SESSION_MUTATIONS = ("flip", "flips", "truncate", "directory", "empty", "zero_page", "junk_tail", "header",
                     "bad_utf8")


@pytest.fixture(scope="module")
def session_file(tmp_path_factory) -> Path:
    return made_session(tmp_path_factory.mktemp("session"), "base.db")


def mutate_session(data: bytes, kind: str, draw) -> bytes | None:
    if kind == "zero_page":  # a page lost (zeroed) by the disk; SQLite pages are 4096 bytes here
        i = draw(st.integers(0, len(data) // 4096 - 1))
        return data[:i * 4096] + b"\0" * 4096 + data[(i + 1) * 4096:]
    if kind == "junk_tail":
        return data + bytes(draw(st.lists(st.integers(0, 255), min_size=1, max_size=600)))
    if kind == "header":  # SQLite's 100-byte header past the magic string
        i = draw(st.integers(16, 99))
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    if kind == "bad_utf8":  # a byte of the stored text that no longer decodes
        spans = [m.start() for m in re.finditer(rb"label|skip|fingerprint|settings|meta|events", data)]
        i = spans[draw(st.integers(0, len(spans) - 1))]
        return data[:i] + b"\xff" + data[i + 1:]
    return mutate(data, kind, draw)


@pytest.mark.slow
@fuzz(60)
@given(data=st.data())
def test_fuzz_session_file(tmp_path_factory, session_file, data):
    """A damaged session resumes (the damage was in unused space) or is refused and left as it is;
    --recover then starts from the valid events or refuses what is not a session."""
    draw = data.draw
    kind = draw(st.sampled_from(SESSION_MUTATIONS))
    p = tmp_path_factory.mktemp("db") / "s.db"
    mutated = mutate_session(session_file.read_bytes(), kind, draw)
    place(p, mutated)
    model = demo_model()
    try:
        Triage.open(model, p, resume=True, settings=FAST).close()
    except InputError as err:
        clean_error(err, p)
        if mutated is not None:
            assert p.read_bytes() == mutated, "a refused session was changed"
    try:
        t = Triage.open(model, p, recover=True, settings=FAST)
    except InputError as err:  # only what is not a session (or not this graph's) is beyond recovery
        clean_error(err, p)
        assert "not a triage session" in err.message or "another graph" in err.message, str(err)
        if mutated is not None:
            assert p.read_bytes() == mutated
    else:
        assert len(t.labels) <= 3  # made_session labelled three alarms
        t.close()


# Through the real CLI -------------------------------------------------------------


def invoke(*args, input="q\n"):
    return CliRunner().invoke(get_app(), [str(a) for a in args], input=input)


def assert_clean(res, *paths: Path) -> None:
    """Exit 0, or exit 2 with `error: FILE` (one of `paths`) on stderr; never a traceback.

    Labels the model's hard constraints rule out are the one refusal that names the labels
    instead of the file (`ContradictoryEvidence`).
    """
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code in (0, 2), (res.exit_code, res.output)
    if res.exit_code == 2:
        starts = tuple(f"error: {p}:" for p in paths) + ("error: contradictory labels",)
        assert res.stderr.startswith(starts), res.stderr


@pytest.fixture(scope="module")
def demo_session(tmp_path_factory):
    """A demo graph and a session of it made through the CLI (2 labels), as (graph, session)."""
    folder = tmp_path_factory.mktemp("cli")
    graph, _ = write_demo(folder)
    session = folder / "base.db"
    res = invoke("triage", graph, "--session", session, "--max-iters", "300", input="t\nf\nq\n")
    assert res.exit_code == 0, res.output
    return graph, session


CLI_FORMATS = ("json", "json.gz", "bingo", "causal_fg", "labels", "oracle", "order", "session")


@pytest.mark.slow
@fuzz(40)
@given(data=st.data())
def test_fuzz_through_the_cli(tmp_path_factory, demo_session, data):
    draw = data.draw
    what = draw(st.sampled_from(CLI_FORMATS))
    folder = tmp_path_factory.mktemp("cli")
    graph = EXAMPLES / "presto.json"
    if what == "session":
        graph, base = demo_session
        victim = folder / "s.db"
        place(victim, mutate_session(base.read_bytes(), draw(st.sampled_from(SESSION_MUTATIONS)), draw))
        args = ["triage", graph, "--session", victim, "--resume", "--max-iters", "300"]
    elif what in READERS:
        victim = folder / f"{what}.txt"
        place(victim, mutate(READERS[what][0](presto()), draw(st.sampled_from(BYTE_MUTATIONS)), draw))
        args = {"labels": ["rank", graph, "--labels", victim, "--max-iters", "50"],
                "oracle": ["simulate", graph, "--oracle", victim, "--max-iters", "50"],
                "order": ["info", graph, "--schedule", victim]}[what]
    else:
        source = {"json": "presto.json", "json.gz": "presto.json", "bingo": "presto",
                  "causal_fg": "weblech.causal_fg"}[what]
        target = folder / ("g.json.gz" if what == "json.gz" else source)
        if what == "bingo":
            shutil.copytree(EXAMPLES / source, target)
            victim = target / draw(st.sampled_from(sorted(p.name for p in target.iterdir())))
            original = victim.read_bytes()
        else:
            victim = target
            original = (EXAMPLES / source).read_bytes()
            original = gzip.compress(original, mtime=0) if what == "json.gz" else original
        place(victim, mutate(original, draw(st.sampled_from(BYTE_MUTATIONS)), draw))
        args = ["info", target]
        graph = target
    assert_clean(invoke(*args), victim, graph)


# The families of the fuzzing audit that ended in tracebacks, each through the CLI: exit 2, a message.

def _deep(p: Path):
    p.write_text('{"format": "fastlbp-derivation", "version": 1, "rules": {}, "clauses": '
                 + "[" * 5000 + "]" * 5000 + "}")


def _digits(p: Path):
    p.write_text('{"format": "fastlbp-derivation", "version": ' + "1" * 5000 + ', "rules": {}}')


def _gzip_not_json(p: Path):
    p.write_bytes(gzip.compress(b"\x00\x01 not json at all"))


def _circled_count(p: Path):
    p.write_text("\u2460\n\nx\nI\n0.5\n")


def _double_minus(p: Path):
    p.write_text("1\n\nx\n*0.5;0.5\n--1\ny\n")


@pytest.mark.parametrize("name, make, words", [
    ("g.json", _deep, "nested too deeply"),
    ("g.json", _digits, "5000 digits"),
    ("g.json.gz", _gzip_not_json, "invalid JSON"),
    ("g.causal_fg", _circled_count, "number of factors"),
    ("g.causal_fg", _double_minus, "body size"),
], ids=["deep-json", "5000-digits", "gzip-not-json", "circled-digit", "double-minus"])
def test_audit_families_exit_2_with_the_file(tmp_path, name, make, words):
    p = tmp_path / name
    make(p)
    res = invoke("info", p)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.stderr.startswith(f"error: {p}") and words in res.stderr, res.stderr


@pytest.mark.parametrize("sql, words", [
    ("DROP TABLE events", "no events table"),
    ("DELETE FROM meta WHERE key = 'settings'", "no settings"),
    ("UPDATE events SET kind = CAST(x'ff6c6162656c' AS TEXT) WHERE seq = 1", "cannot be read"),
    ("UPDATE meta SET value = CAST(x'ff' AS TEXT) WHERE key = 'settings'", "cannot be read"),
], ids=["no-events", "no-settings", "kind-not-utf8", "meta-not-utf8"])
def test_a_damaged_session_through_the_cli_is_reported_and_kept(tmp_path, demo_session, sql, words):
    import sqlite3

    graph, base = demo_session
    p = tmp_path / "s.db"
    p.write_bytes(base.read_bytes())
    conn = sqlite3.connect(p)
    conn.execute(sql)
    conn.commit()
    conn.close()
    before = p.read_bytes()
    res = invoke("triage", graph, "--session", p, "--resume", "--max-iters", "300")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert res.stderr.startswith(f"error: {p}: the session is damaged") and words in res.stderr, res.stderr
    assert "--recover" in res.stderr  # the way on, which keeps the damaged file
    assert p.read_bytes() == before
    res = invoke("triage", graph, "--session", p, "--recover", "--max-iters", "300", input="stats\nq\n")
    assert res.exit_code == 0 and "recovered" in res.stderr, res.output


# A gzip bomb -------------------------------------------------------------------------


def gzip_bomb(mib: int) -> bytes:
    """A valid gzip file of `mib` MiB of zeros, about 1 KiB per MiB, built in well under a second.

    Each MiB is one deflate segment ending in a full flush (which resets the
    window), so the same bytes repeat; then a final empty block, the CRC and size.
    """
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = c.compress(b"\0" * 2**20) + c.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    crc, zeros = 0, b"\0" * 2**20
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + segment * mib + final + struct.pack("<II", crc, (mib << 20) & 0xFFFFFFFF)


def test_gzip_bomb_builder_is_valid_gzip():
    assert gzip.decompress(gzip_bomb(3)) == b"\0" * (3 << 20)


# The child measures its own peak RSS (ru_maxrss, KiB on Linux) before and after loading the bomb.
BOMB_CHILD = textwrap.dedent("""
    import resource, sys
    from fastlbp.io import loading
    from fastlbp.core.errors import InputError
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        loading.load(sys.argv[1])
    except InputError as err:
        print("ERROR", err)
    print("GROWTH_KIB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
""")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_gzip_bomb_stops_with_a_clear_message_within_a_memory_budget(tmp_path):
    # 640 MiB of zeros in 0.6 MiB. Inflated whole (gzip.decompress, then UTF-8 text) it would take
    # the process past 1.2 GiB; read in 1 MiB chunks it stops at the default limit of 256 MiB.
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip_bomb(640))
    assert p.stat().st_size < 2**20
    out = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(p)], capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    message = f"ERROR {p}: decompressed size exceeds {DEFAULT_MAX_DECOMPRESSED} bytes (a gzip bomb?)"
    assert message in out.stdout, out.stdout
    growth = int(re.search(r"GROWTH_KIB (\d+)", out.stdout).group(1)) * 1024
    # The limit, the last chunk past it and the bytearray's over-allocation (1/8): measured 258 MiB.
    assert growth < DEFAULT_MAX_DECOMPRESSED + 64 * 2**20, f"grew by {growth / 2**20:.0f} MiB"
