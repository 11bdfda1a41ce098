"""Malformed and hostile input (issue 22, section 5; issue 20's fuzz list): every loader reads it right or
raises `InputError` naming the file, never a traceback, never silently ignoring a file.

Bingo's files that are directories or broken links, a UTF-8 BOM in every text format, a labels file
that contradicts itself, gzip bombs and broken gzip, deep JSON, huge integers, NaN/inf; then a seeded
fuzz test mutating the shipped examples.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from datalog import formats
from fastlbp.core.errors import InputError
from fastlbp.io import loading

EXAMPLES = Path(__file__).resolve().parents[1] / "data"
BINGO_FILES = [formats.BINGO_LABELS, formats.BINGO_RULE_PROBS, formats.BINGO_INPUT_PROBS,
               formats.BINGO_ALARMS, formats.BINGO_ORACLE, formats.BINGO_CLAUSES]


def err(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    return info.value


def presto(tmp_path) -> Path:
    d = tmp_path / "presto"
    shutil.copytree(EXAMPLES / "presto", d)
    return d


# Bingo files that are not files -----------------------------------------------

def _directory(p: Path):
    p.mkdir()


def _dangling(p: Path):
    p.symlink_to(p.parent / "nowhere.txt")


def _loop(p: Path):
    p.symlink_to(p.name)  # a link to itself: ELOOP


@pytest.mark.parametrize("make", [_directory, _dangling, _loop], ids=["directory", "dangling", "loop"])
@pytest.mark.parametrize("name", BINGO_FILES)
def test_bingo_file_that_is_not_a_file_is_an_error_naming_it(tmp_path, name, make):
    d = presto(tmp_path)
    if (d / name).exists():
        (d / name).unlink()
    make(d / name)
    e = err(loading.load, d)
    assert e.path == str(d / name), str(e)
    expected = {_directory: "is a directory", _dangling: "dangling symbolic link",
                _loop: "symbolic link loop"}[make]
    assert expected in e.message, str(e)


def test_load_names_a_dangling_link_given_directly(tmp_path):
    p = tmp_path / "g.json"
    p.symlink_to(tmp_path / "gone.json")
    assert "dangling symbolic link" in err(loading.load, p).message


# A byte order mark is read, never part of the first name ----------------------------

BOM = "\ufeff"


@pytest.mark.parametrize("name", [formats.BINGO_CLAUSES, formats.BINGO_RULE_PROBS, formats.BINGO_ALARMS,
                                  formats.BINGO_ORACLE, formats.BINGO_INPUT_PROBS, formats.BINGO_LABELS])
def test_bom_in_every_bingo_file(tmp_path, name):
    d = presto(tmp_path)
    rules = d / formats.BINGO_RULE_PROBS
    rules.write_text(rules.read_text().replace("R8: 0.9", "R8: 0.5"))
    (d / formats.BINGO_ORACLE).write_text("CatchVH(3,4)\n")
    (d / formats.BINGO_INPUT_PROBS).write_text("EscapeMTP(9,18,75): 0.25\n")
    (d / formats.BINGO_LABELS).write_text("CatchVH(3,5) false\n")
    plain, _ = formats.read_bingo(d)
    p = d / name
    p.write_text(BOM + p.read_text(encoding="utf-8"), encoding="utf-8")
    dg, _ = formats.read_bingo(d)
    assert dg.tuples == plain.tuples
    assert [(r.name, r.probability) for r in dg.rules] == [(r.name, r.probability) for r in plain.rules]
    assert dg.rules[0].name == "R8" and dg.rules[0].probability == 0.5
    assert (dg.priors, dg.labels, dg.truth) == (plain.priors, plain.labels, plain.truth)
    assert dg.alarms.tolist() == plain.alarms.tolist() and len(dg.alarms) == 2


@pytest.mark.parametrize("gz", [False, True])
def test_bom_in_derivation_json(tmp_path, gz):
    data = (BOM + (EXAMPLES / "presto.json").read_text()).encode("utf-8")
    p = tmp_path / ("g.json.gz" if gz else "g.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    assert loading.load(p).var_names == loading.load(EXAMPLES / "presto.json").var_names


def test_bom_in_causal_fg_and_labels_files(tmp_path):
    p = tmp_path / "g.fg"
    p.write_text(BOM + (EXAMPLES / "weblech.causal_fg").read_text(), encoding="utf-8")
    model = loading.load(p)
    assert model.num_vars == loading.load(EXAMPLES / "weblech.causal_fg").num_vars
    labels = tmp_path / "labels.txt"
    labels.write_text(BOM + f"{model.var_names[0]} true\n", encoding="utf-8")
    assert loading.read_labels(labels, model) == {0: True}


def test_bom_in_an_oracle_file(tmp_path):
    from fastlbp.inference.simulate import read_oracle

    model = loading.load(EXAMPLES / "presto")
    p = tmp_path / "oracle.txt"
    p.write_text(BOM + "CatchVH(3,4)\r\n", encoding="utf-8")
    assert read_oracle(p, model) == {model.index["CatchVH(3,4)"]}


# Labels files that contradict themselves -------------------------------------------

def test_read_labels_same_alarm_true_and_false_names_both_lines(tmp_path):
    model = loading.load(EXAMPLES / "weblech.causal_fg")
    a, b = model.var_names[:2]
    p = tmp_path / "l.txt"
    p.write_text(f"{a} true\n{b} false\n{b} 0\n\n{a} false\n")
    e = err(loading.read_labels, p, model)
    assert (e.path, e.line) == (str(p), 5)
    assert repr(a) in e.message and "line 1" in e.message
    p.write_text(f"{a} true\n{a} 1\n{a} true\n")
    assert loading.read_labels(p, model) == {0: True}


def test_bingo_labels_same_alarm_true_and_false(tmp_path):
    d = presto(tmp_path)
    (d / formats.BINGO_LABELS).write_text("CatchVH(3,4) true\nCatchVH(3,5) false\nCatchVH(3,4) false\n")
    e = err(loading.load, d)
    assert (e.path, e.line) == (str(d / formats.BINGO_LABELS), 3)
    assert "'CatchVH(3,4)'" in e.message and "line 1" in e.message
    (d / formats.BINGO_LABELS).write_text("CatchVH(3,4) true\nCatchVH(3,4) true\n")
    assert loading.load(d).labels == {loading.load(d).index["CatchVH(3,4)"]: True}


@pytest.mark.parametrize("name, first, second", [(formats.BINGO_RULE_PROBS, "R8: 0.9", "R8: 0.5"),
                                                 (formats.BINGO_INPUT_PROBS, "EscapeMTP(9,18,75): 0.9",
                                                  "EscapeMTP(9,18,75): 0.5")])
def test_bingo_conflicting_probabilities(tmp_path, name, first, second):
    d = presto(tmp_path)
    (d / name).write_text(f"{first}\n{first}\n")  # the same value twice is fine
    loading.load(d)
    (d / name).write_text(f"{first}\n{second}\n")
    e = err(loading.load, d)
    assert (e.path, e.line) == (str(d / name), 2) and "line 1" in e.message


@pytest.mark.parametrize("field, body", [
    ("labels", '{"c": true, "c": false}'),
    ("inputs", '{"b(1,2)": 0.5, "b(1,2)": 0.6}'),
    ("rules", '{"R0": 0.9, "R0": 0.8}'),
])
def test_json_duplicate_keys_are_an_error(tmp_path, field, body):
    doc = {"format": "fastlbp-derivation", "version": 1, "rules": {"R0": 0.9},
           "clauses": [["R0", "c", ["b(1,2)"]]], "alarms": ["c"]}
    text = json.dumps(doc)[:-1] + f', "{field}": {body}' + "}"
    if field == "rules":
        text = text.replace('"rules": {"R0": 0.9}, ', "")
    p = tmp_path / "g.json"
    p.write_text(text)
    e = err(loading.load, p)
    assert "twice" in e.message and e.location == f"$.{field}", str(e)


@pytest.mark.parametrize("clauses, rules", [('[["R0", "a\\ud800", ["b"]]]', '{"R0": 0.9}'),
                                            ('[["R\\udc00", "a", ["b"]]]', '{"R\\udc00": 0.9}')])
def test_json_lone_surrogates_are_not_text(tmp_path, clauses, rules):
    p = tmp_path / "g.json"
    p.write_text('{"format": "fastlbp-derivation", "version": 1, "rules": ' + rules + ', "clauses": '
                 + clauses + "}")
    e = err(loading.load, p)
    assert "surrogate" in e.message and e.path == str(p), str(e)


# gzip ---------------------------------------------------------------------------

def test_gzip_bomb_stops_at_the_limit(tmp_path):
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        chunk = b" " * 2**20
        for _ in range(64):  # 64 MiB of spaces in about 64 KiB
            f.write(chunk)
    assert p.stat().st_size < 2**20
    e = err(loading.load, p, max_decompressed=2**20)
    assert e.path == str(p)
    assert "decompressed size exceeds 1048576 bytes (a gzip bomb?)" in e.message
    assert "max_decompressed" in e.message and "gunzip" in e.message
    e = err(loading.load, p, max_decompressed=2**27)  # within the limit: read, then it is not JSON
    assert "invalid JSON" in e.message


def test_gzip_default_limit_is_a_multiple_of_the_compressed_size():
    from fastlbp.core.errors import DEFAULT_MAX_DECOMPRESSED, MAX_COMPRESSION_RATIO, decompression_limit

    assert decompression_limit(1000) == DEFAULT_MAX_DECOMPRESSED
    big = DEFAULT_MAX_DECOMPRESSED  # a compressed file this big may inflate 64 times
    assert decompression_limit(big) == MAX_COMPRESSION_RATIO * big
    assert decompression_limit(big, 10) == 10


def test_shipped_gzip_examples_load_under_the_default_limit():
    assert loading.load(EXAMPLES / "avrora.json.gz").num_vars > 0


# Named ids: gzip stamps the time into its header, and ids holding it made xdist's workers, collecting
# a second apart, disagree on the tests ("Different tests were collected").
@pytest.mark.parametrize("data, expect", [
    (b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"garbage that is not deflate", "not a valid gzip file"),
    (gzip.compress(b'{"format": "fastlbp-derivation"')[:-9], "not a valid gzip file"),  # truncated
    (gzip.compress(b"\x00\x01 not json"), "invalid JSON"),
    (gzip.compress(b"\xff\xfe\x00"), "not valid UTF-8"),
    (gzip.compress(b"[1, 2]") + b"trailing junk", "not a valid gzip file"),
], ids=["not-deflate", "truncated", "not-json", "not-utf8", "trailing-junk"])
def test_broken_gzip_is_an_input_error(tmp_path, data, expect):
    p = tmp_path / "g.json.gz"
    p.write_bytes(data)
    e = err(loading.load, p)
    assert expect in e.message and e.path == str(p), str(e)


def test_a_device_is_read_up_to_the_limit(tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    e = err(loading.load, "/dev/zero", format="json", max_decompressed=2**16)
    assert "exceeds 65536 bytes" in e.message


# Numbers and nesting --------------------------------------------------------------

def test_deep_json_is_an_input_error(tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{"format": "fastlbp-derivation", "version": 1, "rules": {}, "clauses": '
                 + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nested too deeply" in err(loading.load, p).message


def test_huge_integer_in_json_is_an_input_error(tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{"format": "fastlbp-derivation", "version": ' + "1" * 5000 + ', "rules": {}}')
    e = err(loading.load, p)
    assert "digits" in e.message and len(str(e)) < 300, str(e)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_json_nan_inf_probabilities(tmp_path, value):
    p = tmp_path / "g.json"
    p.write_text('{"format": "fastlbp-derivation", "version": 1, "rules": {"R0": ' + value
                 + '}, "clauses": [["R0", "a", ["b"]]]}')
    e = err(loading.load, p)
    assert "not a probability" in e.message and e.location == '$.rules["R0"].probability'


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "0x1p-2"])
def test_bingo_nan_inf_probabilities(tmp_path, value):
    d = presto(tmp_path)
    (d / formats.BINGO_RULE_PROBS).write_text(f"R8: {value}\n")
    e = err(loading.load, d)
    assert (e.path, e.line) == (str(d / formats.BINGO_RULE_PROBS), 1)


@pytest.mark.parametrize("typ", ["I\nnan", "I\ninf", "*nan;0.5\n0", "+0.5;inf\n0"])
def test_causal_fg_nan_inf_probabilities(tmp_path, typ):
    p = tmp_path / "g.fg"
    p.write_text(f"1\n\n0\n{typ}\n")
    e = err(loading.load, p)
    assert e.path == str(p) and e.line is not None and "probability" in e.message


# Fuzzing every format, with stronger checks, is tests/test_fuzz_inputs.py.


# The shared reader (fastlbp.core.errors) ------------------------------------------------

def test_text_lines_split_only_at_line_ends():
    from fastlbp.core.errors import text_lines

    assert text_lines("a\r\nb\rc\x85d\u2028e\x0bf\n") == ["a", "b", "c\x85d\u2028e\x0bf"]
    assert text_lines("") == [] and text_lines("a\n\n") == ["a", ""]


def test_read_text_reports_bad_utf8_after_a_bom_at_its_byte(tmp_path):
    from fastlbp.core.errors import read_text

    p = tmp_path / "t.txt"
    p.write_bytes(b"\xef\xbb\xbfok\nbad \xff\n")
    with pytest.raises(InputError) as info:
        read_text(p)
    assert info.value.line == 2 and "at byte 10" in info.value.message
    p.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbfx")  # only the first mark is one
    assert read_text(p) == "\ufeffx"
