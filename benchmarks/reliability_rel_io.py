"""Hostile inputs to what issue 41 changed in files and caches: SARIF baselines, triage journals, match
files, priors, paths given to file options, and inputs replaced while the model cache loads them.

    python benchmarks/reliability_rel_io.py --out out/rel_io.json

Every case runs a command in this process (typer's CliRunner, as the tests do; a case past
`--timeout` seconds is a hang) or, for the cache, `fastlbp.io.loading.load` with a file swapped under
it. Each outcome is one of:

* clean: exit status 2 with `error: FILE...` first on stderr, no traceback, where an error is right;
* ok: the command did its work, and the check of what it wrote passed (SARIF valid against the
  2.1.0 schema with no NaN; the labels stored in a session the ones accepted; a cached model equal
  to a fresh load of the same bytes; the carried labels counted as applied);
* traceback: an exception a user would see (exit status 1 without a reason, or any other);
* wrong: exit 0 where an error was right, an error where the input was good, or a check failing;
* hang: past the time limit.

A FIFO with no writer is not among the cases: opening it waits for the writer, as `cat` does (a FIFO
whose writer sends endless bytes is, and stops at the 256 MiB limit). Prints one line per case that is
not clean or ok, then the table. CPU only; about 80 s on two loaded cores.

Measured 2026-11-29: 195 cases, 121 clean errors, 74 ok, 0 tracebacks, 0 wrong answers, 0 hangs. The
code before (the two unbounded baseline reads left out: they exhausted memory): 11 tracebacks, 80
wrong answers by these expectations (18 of them `learn --prior`, which did not exist).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import json
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import jsonschema  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from datalog import causal_fg, formats, npz, synthetic  # noqa: E402
from fastlbp.cli import get_app  # noqa: E402
from fastlbp.io import loading  # noqa: E402
from fastlbp.io.sarif_ci import FINGERPRINT_KEY, LEGACY_KEY, fingerprint, legacy_fingerprint  # noqa: E402

RACE = ROOT / "data" / "race.json"
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
VALIDATOR = jsonschema.Draft4Validator(SCHEMA)
OUTCOMES = ("clean", "ok", "traceback", "wrong", "hang")


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    def stop(signum, frame):
        raise Hang()

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def invoke(args: list, input: str | None = None):
    return CliRunner().invoke(get_app(), [str(a) for a in args], input=input)


def judge(res, expect: str, check: Callable | None = None) -> tuple[str, str]:
    """(outcome, detail) of a CliRunner result; `expect` "error" or "ok"; `check(res)` -> problem or None."""
    exc = res.exception
    if exc is not None and not isinstance(exc, SystemExit):
        return "traceback", "".join(traceback.format_exception(exc))[-600:]
    if "Traceback" in res.output:
        return "traceback", res.output[-600:]
    if res.exit_code == 2:
        if not res.stderr.startswith("error: "):
            return "wrong", f"exit 2 without 'error: ': {res.stderr[:300]!r}"
        if expect != "error":
            return "wrong", f"refused a good input: {res.stderr[:300]!r}"
        return "clean", res.stderr.splitlines()[0][:300]  # the message, for reading the JSON
    if res.exit_code not in (0,):
        return "traceback", f"exit {res.exit_code}: {res.output[-400:]!r}"
    if expect == "error":
        return "wrong", "accepted a bad input"
    problem = check(res) if check is not None else None
    return ("wrong", problem) if problem else ("ok", "")


def sarif_check(res) -> str | None:
    try:
        doc = json.loads(res.stdout)
        VALIDATOR.validate(doc)
        json.dumps(doc, allow_nan=False)
    except (ValueError, jsonschema.ValidationError) as err:
        return f"the SARIF written is invalid: {str(err)[:300]}"
    return None


# Baselines -------------------------------------------------------------------------------------------


def _result(alarm="race(9,9)", **over):
    res = {
        "ruleId": "race",
        "level": "warning",
        "message": {"text": alarm},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": "src/a.c", "uriBaseId": "%SRCROOT%"},
                    "region": {"startLine": 3},
                }
            }
        ],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint(alarm)},
        "properties": {"alarm": alarm, "probability": 0.5},
    }
    for key, value in over.items():
        if value is _DROP:
            res.pop(key, None)
        else:
            res[key] = value
    return res


_DROP = object()


def _doc(*results, **run):
    return json.dumps({"version": "2.1.0", "runs": [{"results": list(results), **run}]})


def _region(**region):
    return _result(locations=[{"physicalLocation": {"artifactLocation": {"uri": "a.c"}, "region": region}}])


def baseline_cases(tmp: Path) -> list[tuple[str, bytes | Callable, str]]:
    """(name, bytes of the baseline or a function making its path, expected outcome)."""
    deep = "[" * 100_000 + "]" * 100_000
    good = _doc(_result())
    cases: list[tuple[str, bytes | Callable, str]] = [
        ("good", good.encode(), "ok"),
        ("good with BOM", b"\xef\xbb\xbf" + good.encode(), "ok"),
        ("good gzip", gzip.compress(good.encode()), "ok"),
        ("empty file", b"", "error"),
        ("not JSON", b"{", "error"),
        ("NUL bytes", b"\0" * 100, "error"),
        ("UTF-16", good.encode("utf-16"), "error"),
        ("invalid UTF-8", b'{"runs": [{"results": []}], "x": "\xff"}', "error"),
        ("top-level array", b"[]", "error"),
        ("top-level string", b'"x"', "error"),
        ("runs empty", b'{"runs": []}', "error"),
        ("runs an object", b'{"runs": {}}', "error"),
        ("runs[0] a number", b'{"runs": [1]}', "error"),
        ("results null", b'{"runs": [{"results": null}]}', "ok"),
        ("results a number", b'{"runs": [{"results": 5}]}', "error"),
        ("results a string", b'{"runs": [{"results": "abc"}]}', "error"),
        ("results an object", b'{"runs": [{"results": {"a": 1}}]}', "error"),
        ("a result a number", b'{"runs": [{"results": [1]}]}', "error"),
        ("a result an array", b'{"runs": [{"results": [[]]}]}', "error"),
        ("fingerprints an array", _doc(_result(partialFingerprints=[1, 2], properties={})).encode(), "error"),
        ("fingerprints a string", _doc(_result(partialFingerprints="x")).encode(), "error"),
        (
            "fingerprint a number",
            _doc(_result(partialFingerprints={FINGERPRINT_KEY: 1}, properties={})).encode(),
            "error",
        ),
        (
            "fingerprint an object, alarm given",
            _doc(_result(partialFingerprints={FINGERPRINT_KEY: {}})).encode(),
            "ok",
        ),
        ("properties an array", _doc(_result(properties=[1])).encode(), "error"),
        ("properties a string", _doc(_result(properties="x")).encode(), "error"),
        ("alarm a number, v2 fingerprint", _doc(_result(properties={"alarm": 1})).encode(), "ok"),
        (
            "alarm an object, no fingerprint",
            _doc(_result(properties={"alarm": {}}, partialFingerprints={})).encode(),
            "error",
        ),
        (
            "alarm a lone surrogate, raw",
            _doc(_result()).encode().replace(b"race(9,9)", b"race(\xed\xa0\x80)"),
            "error",
        ),
        (
            "alarm escaped lone surrogate",
            _doc(_result()).replace("race(9,9)", "race(\\ud800)").encode(),
            "ok",
        ),
        (
            "probability a string",
            _doc(_result(properties={"alarm": "race(1,4)", "probability": "x"})).encode(),
            "ok",
        ),
        ("probability NaN", _doc(_result(alarm="race(1,4)")).replace("0.5", "NaN").encode(), "ok"),
        ("probability Infinity", _doc(_result()).replace("0.5", "Infinity").encode(), "ok"),
        ("probability 1e999", _doc(_result()).replace("0.5", "1e999").encode(), "ok"),
        ("tags a string", _doc(_result(properties={"alarm": "race(9,9)", "tags": "x"})).encode(), "ok"),
        (
            "tags repeated",
            _doc(_result(properties={"alarm": "race(9,9)", "tags": ["a", "a"]})).encode(),
            "ok",
        ),
        (
            "nested properties",
            _doc(_result(properties={"alarm": "race(9,9)", "x": {"y": [[[1]]]}})).encode(),
            "ok",
        ),
        ("ruleId an object", _doc(_result(ruleId={"a": 1})).encode(), "error"),
        ("ruleId a number", _doc(_result(ruleId=7)).encode(), "error"),
        ("ruleId null", _doc(_result(ruleId=None)).encode(), "ok"),
        ("level a number", _doc(_result(level=3)).encode(), "error"),
        ("level unknown", _doc(_result(level="fatal")).encode(), "ok"),
        ("message a string", _doc(_result(message="x")).encode(), "ok"),
        ("message text a list", _doc(_result(message={"text": ["x"]})).encode(), "ok"),
        ("locations an object", _doc(_result(locations={})).encode(), "error"),
        ("locations a string", _doc(_result(locations="x")).encode(), "error"),
        ("a location a number", _doc(_result(locations=[1])).encode(), "error"),
        ("physicalLocation a number", _doc(_result(locations=[{"physicalLocation": 1}])).encode(), "ok"),
        (
            "artifactLocation a list",
            _doc(_result(locations=[{"physicalLocation": {"artifactLocation": []}}])).encode(),
            "ok",
        ),
        (
            "uri a number",
            _doc(_result(locations=[{"physicalLocation": {"artifactLocation": {"uri": 1}}}])).encode(),
            "ok",
        ),
        (
            "uri with spaces and backslashes",
            _doc(
                _result(locations=[{"physicalLocation": {"artifactLocation": {"uri": "a b\\c.c"}}}])
            ).encode(),
            "ok",
        ),
        (
            "region a list",
            _doc(
                _result(locations=[{"physicalLocation": {"artifactLocation": {"uri": "a.c"}, "region": []}}])
            ).encode(),
            "ok",
        ),
        ("startLine -3", _doc(_region(startLine=-3)).encode(), "ok"),
        ("startLine 0", _doc(_region(startLine=0)).encode(), "ok"),
        ("startLine 1.5", _doc(_region(startLine=1.5)).encode(), "ok"),
        ("startLine a string", _doc(_region(startLine="3")).encode(), "ok"),
        ("startLine true", _doc(_region(startLine=True)).encode(), "ok"),
        ("startLine 2**70", _doc(_region(startLine=2**70)).encode(), "ok"),
        ("endColumn -1", _doc(_region(startLine=2, endColumn=-1)).encode(), "ok"),
        ("charOffset -2", _doc(_region(charOffset=-2)).encode(), "ok"),
        ("only endLine", _doc(_region(endLine=4)).encode(), "ok"),
        (
            "logical locations odd",
            _doc(_result(locations=[{"logicalLocations": [1, {"name": 2}, {"kind": "x"}]}])).encode(),
            "ok",
        ),
        (
            "absent result garbage",
            _doc(_result(), {"baselineState": "absent", "ruleId": {}, "properties": []}).encode(),
            "ok",
        ),
        ("baselineState an object", _doc(_result(baselineState={})).encode(), "ok"),
        (
            "v1 fingerprints only",
            _doc(
                _result(
                    alarm="race(1,4)",
                    properties={},
                    partialFingerprints={LEGACY_KEY: legacy_fingerprint("race(1,4)")},
                )
            ).encode(),
            "ok",
        ),
        ("duplicate keys", b'{"runs": [{"results": []}], "runs": [{"results": []}]}', "ok"),
        ("nested 100,000 deep in results", _doc().replace("[]", "[" + deep + "]").encode(), "error"),
        (
            "nested 100,000 deep in properties",
            ('{"runs": [{"results": [{"properties": {"x": ' + deep + "}}]}]}").encode(),
            "error",
        ),
        (
            "nested 100,000 objects",
            ('{"runs": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}").encode(),
            "error",
        ),
        ("5,000 results", _doc(*[_result(alarm=f"race({i},0)") for i in range(5000)]).encode(), "ok"),
        ("a 10 MB alarm name", _doc(_result(alarm="race(" + "x" * 10_000_000 + ")")).encode(), "ok"),
    ]

    def special(path):
        return lambda tmp_dir: path

    def fifo_endless(tmp_dir: Path) -> Path:
        fifo = tmp_dir / "endless.fifo"
        if not fifo.exists():
            os.mkfifo(fifo)

        def write():
            with contextlib.suppress(OSError), open(fifo, "wb") as f:
                chunk = b" " * (1 << 20)
                while True:
                    f.write(chunk)

        threading.Thread(target=write, daemon=True).start()
        return fifo

    def fifo_good(tmp_dir: Path) -> Path:
        fifo = tmp_dir / "good.fifo"
        if not fifo.exists():
            os.mkfifo(fifo)

        def write():
            with contextlib.suppress(OSError), open(fifo, "wb") as f:
                f.write(good.encode())

        threading.Thread(target=write, daemon=True).start()
        return fifo

    def loop(tmp_dir: Path) -> Path:
        link = tmp_dir / "loop.sarif"
        if not link.is_symlink():
            link.symlink_to(link)
        return link

    def dangling(tmp_dir: Path) -> Path:
        link = tmp_dir / "dangling.sarif"
        if not link.is_symlink():
            link.symlink_to(tmp_dir / "nowhere")
        return link

    cases += [
        ("/dev/zero", special(Path("/dev/zero")), "error"),
        ("/dev/null", special(Path("/dev/null")), "error"),
        ("a directory", special(tmp), "error"),
        ("missing", special(tmp / "missing.sarif"), "error"),
        ("a symlink loop", loop, "error"),
        ("a dangling link", dangling, "error"),
        ("a FIFO of endless bytes", fifo_endless, "error"),
        ("a FIFO of a good log", fifo_good, "ok"),
    ]
    return cases


def run_baselines(tmp: Path, timeout: float) -> list[tuple[str, str, str]]:
    out = []
    for name, data, expect in baseline_cases(tmp):
        if callable(data):
            path = data(tmp)
        else:
            path = tmp / "b.sarif"
            path.write_bytes(data)
        out.append(
            (f"baseline: {name}",)
            + run_case(
                lambda path=path: invoke(["rank", RACE, "-f", "sarif", "-q", "--baseline", path]),
                expect,
                sarif_check,
                timeout,
            )
        )
    return out


def run_case(call, expect, check, timeout) -> tuple[str, str]:
    try:
        with time_limit(timeout):
            res = call()
        return judge(res, expect, check)
    except Hang:
        return "hang", f"past {timeout} s"
    except Exception as err:  # noqa: BLE001  anything a user would see as a traceback
        return "traceback", "".join(traceback.format_exception(err))[-600:]


# Other file options given odd paths ------------------------------------------------------------------


def learn_graph(tmp: Path) -> Path:
    """A small graph with ground truth, for `fastlbp learn`."""
    path = tmp / "learn.json"
    dg = synthetic.layered(num_inputs=6, layers=2, width=4, seed=2)
    dg.truth = {int(a): bool(i % 2) for i, a in enumerate(dg.alarms)}
    formats.save_json(dg, path)
    return path


def run_paths(tmp: Path, timeout: float) -> list[tuple[str, str, str]]:
    old = tmp / "old.json"
    old.write_text(RACE.read_text())
    learning = learn_graph(tmp)
    loop = tmp / "optloop"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    paths = {
        "/dev/zero": Path("/dev/zero"),
        "a directory": tmp,
        "missing": tmp / "missing.txt",
        "a symlink loop": loop,
    }
    commands = {
        "--match": lambda p: ["rank", RACE, "-q", "--labels-from", old, "--match", p],
        "--old-labels": lambda p: ["rank", RACE, "-q", "--labels-from", old, "--old-labels", p],
        "--labels-from": lambda p: ["rank", RACE, "-q", "--labels-from", p],
        "--labels": lambda p: ["rank", RACE, "-q", "--labels", p],
        "--soft-labels": lambda p: ["rank", RACE, "-q", "--soft-labels", p],
        "--source-root": lambda p: ["rank", RACE, "-q", "-f", "sarif", "--source-root", p],
        "learn --prior": lambda p: [
            "learn",
            learning,
            "-q",
            "--em-iters",
            "2",
            "--method",
            "exact",
            "--prior",
            p,
        ],
        "--rule-prob": lambda p: ["rank", RACE, "-q", "--rule-prob", p],
    }
    graph_commands = {
        "rank": lambda p: ["rank", p, "-q"],
        "info": lambda p: ["info", p],
        "triage": lambda p: ["triage", p],
        "triage --session": lambda p: ["triage", RACE, "--session", p],
        "learn": lambda p: ["learn", p, "-q"],
        "marginals": lambda p: ["marginals", p, "-q"],
    }
    fifo = tmp / "graph.fifo"
    os.mkfifo(fifo)

    def endless(fifo=fifo):
        def write():
            with contextlib.suppress(OSError), open(fifo, "wb") as f:
                while True:
                    f.write(b"x" * (1 << 20))

        threading.Thread(target=write, daemon=True).start()
        return fifo

    out = []
    for name, command in graph_commands.items():
        for what, path in {"/dev/zero": Path("/dev/zero"), "a FIFO of endless bytes": None}.items():
            out.append(
                (f"path: {name} {what}",)
                + run_case(
                    lambda c=command, p=path: invoke(c(p if p is not None else endless()), input="q\n"),
                    "error",
                    None,
                    timeout,
                )
            )
    for option, command in commands.items():
        for what, path in paths.items():
            if option == "--source-root" and what == "a directory":
                continue  # a folder is what it takes
            out.append(
                (f"path: {option} {what}",)
                + run_case(lambda c=command, p=path: invoke(c(p)), "error", None, timeout)
            )
    return out


# Learning's priors -----------------------------------------------------------------------------------


def run_priors(tmp: Path, timeout: float) -> list[tuple[str, str, str]]:
    graph = learn_graph(tmp)
    base = ["learn", graph, "-q", "--em-iters", "3", "--method", "exact", "--no-cache"]

    def no_nan(res):
        return "NaN in the output" if "nan" in res.stdout.lower() else None

    out = []
    for value, expect in (
        ("1e308", "error"),
        ("inf", "error"),
        ("nan", "error"),
        ("-1", "error"),
        ("0", "error"),
        ("1e12", "ok"),
        ("1e-300", "ok"),
        ("1e13", "error"),
    ):
        out.append(
            (f"prior strength {value}",)
            + run_case(lambda v=value: invoke([*base, "--prior-strength", v]), expect, no_nan, timeout)
        )
    priors = tmp / "priors.txt"
    for text, expect in (
        ("R0: 0.2\n", "ok"),
        ("R0: 0.2 1e12\n", "ok"),
        ("R0: 0.2 1e308\n", "error"),
        ("R0: 0.2 -1\n", "error"),
        ("R0: 1.5\n", "error"),
        ("R0: nan\n", "error"),
        ("R0 0.2\n", "error"),
        ("R0: 0.2 3 4\n", "error"),
        ("Rx: 0.2\n", "error"),
        ("R0: 0.2\nR0: 0.3\n", "error"),
        ("\ufeffR0: 0.2\r\n", "ok"),
        ("", "ok"),
        ("# only a comment\n", "ok"),
        ("R0: 0.2 inf\n", "error"),
    ):
        priors.write_text(text)
        out.append(
            (f"prior file {text.strip()[:30]!r}",)
            + run_case(lambda: invoke([*base, "--prior", priors]), expect, no_nan, timeout)
        )
    return out


# Match files -----------------------------------------------------------------------------------------


def run_matches(tmp: Path, timeout: float) -> list[tuple[str, str, str]]:
    doc = json.loads(RACE.read_text())
    doc.pop("truth", None)
    old = tmp / "m_old.json"
    old.write_text(json.dumps(doc))
    new = tmp / "m_new.json"
    new.write_text(json.dumps(doc).replace("race(6,5)", "race(6,1)"))
    labels = tmp / "m_labels.txt"
    labels.write_text("race(1,2) false\nrace(6,5) true\nleak(3) true\nrace(1,4) true\n")
    match = tmp / "match.txt"

    def applied(res, carried_soft_expected: int | None = None):
        """The summary's counts against the labels the run used: carried + softened + dropped = the old
        labels, and no old label's truth turned into its opposite."""
        line = next((x for x in res.stderr.splitlines() if x.startswith("labels from the old graph")), "")
        if not line:
            return "no summary of carried labels"
        nums = [int(w) for w in line.replace(",", " ").split() if w.isdigit()]
        if sum(nums[:3]) != 4:  # race.json has no labels of its own; the file has 4
            return f"the summary does not account for the 4 old labels: {line!r}"
        return None

    out = []
    for text, expect in (
        ("race(6,5)\trace(6,1)\n", "ok"),
        ("race(6,5)\trace(6,1)\nleak(3)\trace(6,1)\n", "ok"),  # equal labels: merged
        ("race(6,5)\trace(6,1)\nrace(1,2)\trace(6,1)\n", "error"),  # contradicting
        ("race(1,2)\trace(1,4)\n", "error"),  # onto a tuple labelled the other way
        ("race(1,4)\trace(1,2)\nrace(1,2)\trace(1,4)\n", "ok"),  # a swap
        ("race(6,5)\trace(6,1)\nrace(6,5)\trace(1,2)\n", "error"),  # one old name, two new
        ("race(6,5) race(6,1) extra\n", "error"),
        ("\ufeffrace(6,5) -> race(6,1)\r\n", "ok"),
        ("", "ok"),
        ("race(6,5)\t\n", "error"),
        ("nosuch(1)\trace(6,1)\n", "ok"),
        ("race(6,5)\tnosuch(2)\n", "ok"),
        ("race(6,5)\trace(6,5)\n", "ok"),
        ("\0\0\0\n", "error"),
        ("race(6,5)\t" + "x" * 100_000 + "\n", "ok"),
    ):
        match.write_text(text)
        out.append(
            (f"match {text.strip()[:40]!r}",)
            + run_case(
                lambda: invoke(
                    [
                        "rank",
                        new,
                        "-f",
                        "json",
                        "--labels-from",  # no -q: the summary of carried labels is checked
                        old,
                        "--old-labels",
                        labels,
                        "--match",
                        match,
                    ]
                ),
                expect,
                applied,
                timeout,
            )
        )
    return out


# Triage journals -------------------------------------------------------------------------------------

JOURNAL_TAMPERING = {
    "trigger flipping truths": [
        "CREATE TRIGGER t AFTER INSERT ON events BEGIN UPDATE events SET truth = 1 - "
        "truth WHERE seq = new.seq; END"
    ],
    "trigger erasing earlier labels": [
        "CREATE TRIGGER t AFTER INSERT ON events BEGIN DELETE FROM events WHERE seq < new.seq; END"
    ],
    "before-insert trigger": ["CREATE TRIGGER t BEFORE INSERT ON events BEGIN SELECT 1; END"],
    "delete trigger": ["CREATE TRIGGER t AFTER DELETE ON events BEGIN DELETE FROM events; END"],
    "update trigger on meta": ["CREATE TRIGGER t AFTER UPDATE ON meta BEGIN DELETE FROM events; END"],
    "trigger raising": ["CREATE TRIGGER t BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'no'); END"],
    "view": ["CREATE VIEW v AS SELECT * FROM events"],
    "view with instead-of trigger": [
        "CREATE VIEW v AS SELECT * FROM events",
        "CREATE TRIGGER t INSTEAD OF INSERT ON v BEGIN SELECT 1; END",
    ],
    "index": ["CREATE INDEX i ON events (alarm)"],
    "unique index": ["CREATE UNIQUE INDEX i ON events (seq, kind)"],
    "partial index": ["CREATE INDEX i ON events (truth) WHERE truth = 1"],
    "extra table": ["CREATE TABLE notes (x)"],
    "ANALYZE statistics": ["ANALYZE"],
    "truth column TEXT": [
        "ALTER TABLE events RENAME TO old",
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
        "alarm TEXT, truth TEXT, at REAL NOT NULL)",
        "INSERT INTO events SELECT * FROM old",
        "DROP TABLE old",
    ],
    "CHECK constraint": [
        "ALTER TABLE events RENAME TO old",
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
        "alarm TEXT, truth INTEGER CHECK (truth = 0), at REAL NOT NULL)",
        "INSERT INTO events SELECT * FROM old WHERE truth IS NOT 1",
        "DROP TABLE old",
    ],
    "DEFAULT on truth": [
        "ALTER TABLE events RENAME TO old",
        "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
        "alarm TEXT, truth INTEGER DEFAULT 0, at REAL NOT NULL)",
        "INSERT INTO events SELECT * FROM old",
        "DROP TABLE old",
    ],
    "an added column": ["ALTER TABLE events ADD COLUMN note TEXT"],
    "meta without a key": [
        "ALTER TABLE meta RENAME TO old",
        "CREATE TABLE meta (key TEXT, value TEXT NOT NULL)",
        "INSERT INTO meta SELECT * FROM old",
        "DROP TABLE old",
    ],
    "events WITHOUT ROWID": [
        "ALTER TABLE events RENAME TO old",
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, alarm TEXT, "
        "truth INTEGER, at REAL NOT NULL) WITHOUT ROWID",
        "INSERT INTO events SELECT * FROM old",
        "DROP TABLE old",
    ],
    "sqlite_sequence lowered": ["UPDATE sqlite_sequence SET seq = 0"],
    "sqlite_sequence dropped rows": ["DELETE FROM sqlite_sequence"],
}


def run_journals(tmp: Path, timeout: float) -> list[tuple[str, str, str]]:
    from triage_support import write_demo

    from fastlbp.core.settings import Settings
    from fastlbp.triage import Triage

    graph, _ = write_demo(tmp)
    model = loading.load(graph)
    out = []
    cases = {**JOURNAL_TAMPERING, "untouched": []}
    for name, sql in cases.items():
        session = tmp / f"s-{len(out)}.db"
        t = Triage.open(model, session, graph_path=str(graph), settings=Settings(max_iters=300))
        assert t.label(True).accepted and t.label(False).accepted and t.skip().accepted
        t.close()
        conn = sqlite3.connect(session)
        for statement in sql:
            conn.execute(statement)
        conn.commit()
        conn.close()
        # Sequence numbers an SQLite file may reuse, rows, constraints: harmless unless they change a label.
        expect = (
            "ok"
            if name in ("untouched", "sqlite_sequence lowered", "sqlite_sequence dropped rows")
            else "error"
        )

        def stored_as_accepted(res, session=session):
            rows = sqlite3.connect(session).execute("SELECT kind, truth FROM events ORDER BY seq").fetchall()
            labels = [truth for kind, truth in rows if kind == "label"]
            accepted = res.stdout.count("accepted:")
            if labels[:2] != [1, 0]:
                return f"the earlier labels changed: {rows}"
            if accepted and labels[2:] != [1]:
                return f"accepted a true label, the file holds {rows}"
            return None

        out.append(
            (f"journal: {name}",)
            + run_case(
                lambda session=session: invoke(
                    ["triage", graph, "--session", session, "--resume", "--max-iters", "300"], input="t\nq\n"
                ),
                expect,
                stored_as_accepted,
                timeout,
            )
        )
    return out


# The model cache, an input replaced while it loads ---------------------------------------------------


def run_cache(tmp: Path, timeout: float) -> list[tuple[str, str, str]]:
    """For each format and way of replacing: A is hashed, B parsed (swapped in), A put back, with the
    input's status made to look unchanged; then A, from the cache, must be A's model; B's must be B's."""
    from model_cache_support import same

    from fastlbp.io import model_cache

    out = []
    one = synthetic.layered(num_inputs=5, layers=2, width=4, seed=1)
    # The same graph with other rule probabilities: B's files fit A's (a Bingo directory's other files).
    two = dataclasses.replace(
        one, rules=[dataclasses.replace(r, probability=round(1.0 - r.probability / 2, 3)) for r in one.rules]
    )

    def save(dg, path, fmt):
        if fmt == "bingo":
            formats.save_bingo(dg, path)
        elif fmt == "npz":
            npz.save(dg, path)
        elif fmt == "causal_fg":
            causal_fg.save(formats.model_from_derivation(dg), path)
        else:  # derivation.json, gzip-compressed for a name ending in .gz
            formats.save_json(dg, path)

    def in_place(target: Path, data: bytes):
        with open(target, "r+b") as f:
            f.truncate(0)
            f.write(data)

    def by_rename(target: Path, data: bytes):
        tmp_file = target.with_name(target.name + ".new")
        tmp_file.write_bytes(data)
        os.replace(tmp_file, target)

    def truncated(target: Path, data: bytes):
        by_rename(target, data[: len(data) // 2])

    for fmt in ("json", "json.gz", "npz", "causal_fg", "bingo"):
        for how, write in (("in place", in_place), ("renamed over", by_rename), ("cut short", truncated)):

            def case(fmt=fmt, how=how, write=write):
                d = Path(tempfile.mkdtemp(dir=tmp))
                name = "b" if fmt == "bingo" else f"g.{fmt}"
                a_path, b_path, path = d / f"A-{name}", d / f"B-{name}", d / name
                save(one, a_path, fmt)
                save(two, b_path, fmt)
                inner = "rule-prob.txt" if fmt == "bingo" else None
                a_bytes = (a_path / inner if inner else a_path).read_bytes()
                b_bytes = (b_path / inner if inner else b_path).read_bytes()
                save(one, path, fmt)
                target = path / inner if inner else path
                fresh_a = loading.load(path)
                real = loading.datalog_io.load
                calls = []

                def swapping(*args, **kwargs):
                    calls.append(1)
                    if len(calls) == 1:
                        write(target, b_bytes)
                        try:
                            return real(*args, **kwargs)
                        finally:
                            by_rename(target, a_bytes)
                    return real(*args, **kwargs)

                stamp = getattr(model_cache, "input_stamp", None)
                loading.datalog_io.load = swapping
                if stamp is not None:
                    model_cache.input_stamp = lambda _p: ("the same status",)
                try:
                    with contextlib.suppress(Exception):  # the cut-short file may not parse: fine
                        loading.load(path, cache_dir=d / "cache")
                finally:
                    loading.datalog_io.load = real
                    if stamp is not None:
                        model_cache.input_stamp = stamp
                try:
                    same(fresh_a, loading.load(path, cache_dir=d / "cache"))
                    same(fresh_a, loading.load(path, cache_dir=d / "cache"))
                    by_rename(target, b_bytes)
                    fresh_b = loading.load(path)
                    same(fresh_b, loading.load(path, cache_dir=d / "cache"))
                    same(fresh_b, loading.load(path, cache_dir=d / "cache"))
                except AssertionError as err:
                    return f"a cached model differs from a fresh load of the same bytes ({err})"
                return None

            try:
                with time_limit(timeout):
                    problem = case()
                out.append((f"cache: {fmt} {how}", "wrong" if problem else "ok", problem or ""))
            except Hang:
                out.append((f"cache: {fmt} {how}", "hang", f"past {timeout} s"))
            except Exception as err:  # noqa: BLE001
                out.append(
                    (f"cache: {fmt} {how}", "traceback", "".join(traceback.format_exception(err))[-600:])
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a case may take")
    parser.add_argument("--out", type=Path, default=None, help="also write the table and cases as JSON here")
    args = parser.parse_args()
    os.environ.setdefault("FASTLBP_CACHE", "off")  # the CLI's cache folder: not this user's real one
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="fastlbp-rel-io-") as name:
        tmp = Path(name)
        for group in (run_baselines, run_paths, run_priors, run_matches, run_journals, run_cache):
            part = tmp / group.__name__
            part.mkdir()
            results += group(part, args.timeout)
    counts = dict.fromkeys(OUTCOMES, 0)
    for name, outcome, detail in results:
        counts[outcome] += 1
        if outcome not in ("clean", "ok"):
            print(f"{outcome}: {name}: {detail}")
    seconds = time.perf_counter() - start
    print(
        f"cases {len(results)}: clean errors {counts['clean']}, ok {counts['ok']}, tracebacks "
        f"{counts['traceback']}, wrong answers {counts['wrong']}, hangs {counts['hang']} ({seconds:.0f} s)"
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "counts": counts,
                    "cases": len(results),
                    "seconds": round(seconds),
                    "results": [{"case": n, "outcome": o, "detail": d} for n, o, d in results],
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
