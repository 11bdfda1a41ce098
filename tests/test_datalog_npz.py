"""derivation.npz (`datalog.npz`): the same graph as derivation.json, every field; ground, convert and
rank through it from the command line; a malformed file is an error naming the file and the array."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from test_datalog_transform import random_derivation
from typer.testing import CliRunner

from datalog import formats, npz
from datalog import io as datalog_io
from datalog.derivation import DerivationGraph, Rule
from fastlbp.cli import get_app
from fastlbp.core.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data"
TAINT = DATA / "taint"


def same_graph(a: DerivationGraph, b: DerivationGraph) -> None:
    assert a.tuples == b.tuples and a.rules == b.rules
    for name in ("clause_rule", "clause_head", "body_offsets", "body", "alarms"):
        assert np.array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name))), name
    assert (a.priors, a.labels, a.truth, a.annotations) == (b.priors, b.labels, b.truth, b.annotations)


@hsettings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_random_graphs_read_back_the_same(tmp_path_factory, seed):
    dg = random_derivation(seed)
    rng = np.random.default_rng(seed)
    dg.labels = {int(t): bool(rng.random() < 0.5) for t in rng.choice(dg.num_tuples, 2)}
    dg.truth = {int(t): True for t in dg.alarms[:1]}
    path = tmp_path_factory.mktemp("npz") / "g.npz"
    npz.save(dg, path)
    back, where = npz.read(path)
    same_graph(back, dg)
    assert {k for k in where if k[0] == "alarm"} == {("alarm", int(t)) for t in dg.alarms}


def test_race_with_rule_texts_and_annotations_and_the_same_ranking(tmp_path):
    dg, _ = formats.read_json(DATA / "race.json")
    dg.rules[0] = Rule(dg.rules[0].name, dg.rules[0].probability, "race(x, y) :- write(x, f), access(y, f).")
    assert dg.annotations
    npz.save(dg, tmp_path / "race.npz")
    back, _ = npz.read(tmp_path / "race.npz")
    same_graph(back, dg)
    a, b = formats.load_json(DATA / "race.json"), datalog_io.load(tmp_path / "race.npz")
    assert a.var_names == b.var_names and a.alarms == b.alarms


def test_names_with_nul_and_non_ascii(tmp_path):
    dg = random_derivation(3)
    dg.tuples = [f"t\0{i}é" for i in range(dg.num_tuples)]
    npz.save(dg, tmp_path / "g.npz")
    same_graph(npz.read(tmp_path / "g.npz")[0], dg)


runner = CliRunner()


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


def test_ground_convert_and_rank_through_npz(tmp_path):
    opts = ["--facts", TAINT / "facts", "--rule-prob", TAINT / "rule_prob.txt"]
    res = invoke("ground", TAINT / "taint.dl", *opts, "-o", tmp_path / "taint.npz")
    assert res.exit_code == 0, res.output
    assert f"wrote {tmp_path / 'taint.npz'} (derivation.npz)" in res.stderr
    assert invoke("convert", tmp_path / "taint.npz", tmp_path / "taint.json").exit_code == 0
    assert invoke("convert", tmp_path / "taint.json", tmp_path / "again.npz").exit_code == 0
    same_graph(npz.read(tmp_path / "again.npz")[0], npz.read(tmp_path / "taint.npz")[0])
    ranked = [json.loads(invoke("rank", f, "--format", "json").stdout)["alarms"]
              for f in (tmp_path / "taint.npz", tmp_path / "taint.json")]
    assert ranked[0] == ranked[1] and len(ranked[0]) == 33


def arrays_of(dg: DerivationGraph) -> dict[str, np.ndarray]:
    buf = npz.dumps(dg)
    buf.seek(0)
    with np.load(buf) as z:
        return {k: z[k] for k in z.files}


def write(path: Path, arrays: dict[str, np.ndarray], compressed: bool = False) -> Path:
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return path


def error(path) -> str:
    with pytest.raises(InputError) as info:
        npz.read(path)
    assert info.value.path == str(path)
    return info.value.message


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("body"), "body: missing"),
    (lambda a: a.update(extra=np.zeros(1)), "extra: unknown array"),
    (lambda a: a.update(format=np.array("other")), "format: must be"),
    (lambda a: a.update(version=np.array(2)), "version: unsupported version 2"),
    (lambda a: a.update(body=a["body"].astype(np.int64)), "body: dtype int64, expected int32"),
    (lambda a: a.update(clause_head=a["clause_head"][:-1]), "clause_head: length"),
    (lambda a: a.update(body=a["body"] + 1000), "body: tuple 100"),
    (lambda a: a.update(clause_rule=-a["clause_rule"] - 1), "clause_rule: rule -"),
    (lambda a: a["rules.probability"].__setitem__(0, np.nan), "rules.probability: probability nan"),
    (lambda a: a["priors.values"].__setitem__(0, 1.5), "priors.values: probability 1.5"),
    (lambda a: a.update({"tuples.offsets": a["tuples.offsets"][::-1].copy()}), "tuples.offsets: offsets"),
    (lambda a: a["body_offsets"].__setitem__(1, 10**6), "body_offsets: not offsets"),
    (lambda a: a.update(annotations=np.frombuffer(b"{", np.uint8)), "annotations: not JSON"),
    # Offsets arrays are tied to the counts they index (issue 41, item 15): each was an IndexError or
    # a ValueError of zip(strict=True).
    (lambda a: a.update({"tuples.offsets": np.zeros(0, np.int64)}), "tuples.offsets: length 0, expected at "
     "least 1"),
    (lambda a: a.update(body_offsets=np.concatenate([a["body_offsets"], [a["body_offsets"][-1]] * 3])),
     "body_offsets: length"),
    (lambda a: a.update({"rules.probability": a["rules.probability"][:-1]}), "rules.probability: length"),
    (lambda a: a.update({"rules.text.offsets": a["rules.text.offsets"][:-1]}), "rules.text.offsets: length"),
    (lambda a: a.update(annotations=np.frombuffer(b"[" * 100_000 + b"]" * 100_000, np.uint8)),
     "annotations: not JSON text: invalid JSON: arrays or objects nested too deeply"),
    (lambda a: a.update(annotations=np.frombuffer(b'{"relations": {}, "relations": {"r": {}}}', np.uint8)),
     "key 'relations' appears twice"),  # found by benchmarks/reliability_frontend.py: the last one won
    # A tuple labelled (or given a prior) twice is refused, as derivation.json refuses a repeated key
    # (issue 41, item 5: the last value won silently).
    (lambda a: a.update({"labels.keys": np.array([0, 0]), "labels.values": np.array([True, False])}),
     "labels.keys: tuple 't(0)' is given twice (labels.keys[0] and [1])"),
    (lambda a: a.update({"truth.keys": np.array([1, 1]), "truth.values": np.array([True, True])}),
     "truth.keys: tuple 't(1)' is given twice"),
    (lambda a: a.update({"priors.keys": np.array([1, 1]), "priors.values": np.array([0.5, 0.5])}),
     "priors.keys: tuple 't(1)' is given twice"),
])
def test_malformed_arrays_name_the_array(tmp_path, change, message):
    dg = random_derivation(11, max_tuples=7, max_clauses=9)
    dg.priors = dg.priors or {0: 0.5}
    arrays = arrays_of(dg)
    change(arrays)
    assert message in error(write(tmp_path / "g.npz", arrays))


def npy_member(header: dict, data: bytes) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + data


@pytest.mark.parametrize("member, data, message", [
    ("extra", b"raw bytes", "member 'extra' is not a .npy array"),  # np.load returned bytes: AttributeError
    ("body.npy", npy_member({"descr": "<i4", "fortran_order": False, "shape": (10**13,)}, b"\0" * 16),
     "body: its header declares shape (10000000000000,) of int32 (40,000,000,000,000 bytes), but the member "
     "holds 16 bytes"),  # a MemoryError before
    ("body.npy", npy_member({"descr": "|O", "fortran_order": False, "shape": (1,)}, b"\0" * 8),
     "holds Python objects"),
])
def test_members_are_checked_before_they_are_read(tmp_path, member, data, message):
    dg = random_derivation(11, max_tuples=7, max_clauses=9)
    arrays = arrays_of(dg)
    if member == "body.npy":
        arrays.pop("body")
    path = write(tmp_path / "g.npz", arrays)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr(member, data)
    assert message in error(path)


def test_a_zip_version_zipfile_does_not_read_is_a_clean_error(tmp_path):
    path = write(tmp_path / "g.npz", arrays_of(random_derivation(3)))
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")  # the central directory's first entry: "version needed" at +6
    data[central + 6] = 210  # zip version 21.0: NotImplementedError from zipfile (a traceback before)
    path.write_bytes(bytes(data))
    assert "not a derivation.npz file" in error(path)


def test_duplicate_tuple_names_and_not_an_archive(tmp_path):
    dg = random_derivation(5)
    dg.tuples = ["same"] * dg.num_tuples
    assert "tuple 'same' is listed twice" in error(write(tmp_path / "g.npz", arrays_of(dg)))
    (tmp_path / "text.npz").write_text("not a zip\n")
    assert "not a derivation.npz file" in error(tmp_path / "text.npz")
    assert "is a directory" in error(tmp_path)


def test_a_compressed_archive_is_read_within_the_decompression_limit(tmp_path):
    dg = random_derivation(7)
    path = write(tmp_path / "g.npz", arrays_of(dg), compressed=True)
    same_graph(npz.read(path)[0], dg)
    with pytest.raises(InputError, match="decompressed"):
        npz.read(path, max_decompressed=100)
    buf = io.BytesIO(path.read_bytes())
    assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in zipfile.ZipFile(buf).infolist())
