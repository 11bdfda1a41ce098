"""CSV from `rank` and `marginals` (issue 29 item 13): one writer (`fastlbp.io.csv_document`) for
both, RFC 4180 quoting (a bare carriage return too), and names a spreadsheet would run as formulas
neutralised by default with a leading ' (exact with --csv-exact-names)."""

import csv
import io

import pytest
from hostile_names import INPUTS, NAMES, write_hostile
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.text import csv_name

FORMULAS = [n for n in NAMES if n[0] in "=+-@\t\r'"]


def invoke(*args):
    return CliRunner().invoke(get_app(), [str(a) for a in args])


def read_back(text: str) -> list[list[str]]:
    # strict: a bare carriage return outside quotes is an error, as in Python's csv of a file
    return list(csv.reader(io.StringIO(text, newline=""), strict=True))


def unmark(name: str) -> str:
    return name[1:] if name.startswith("'") else name


def test_csv_name_marks_formulas_unless_exact():
    for name in ("=1+1", "+1", "-x", "@SUM(A1)", "\tx", "\rx", "'q"):
        assert csv_name(name) == "'" + name
        assert csv_name(name, exact=True) == name
    for name in ("race(1,2)", "87", "a=b", "x-1", ""):
        assert csv_name(name) == name


@pytest.mark.parametrize("command", ["rank", "marginals"])
def test_names_with_a_bare_cr_and_formulas_round_trip(tmp_path, command):
    graph = write_hostile(tmp_path)
    column = 1 if command == "rank" else 0
    res = invoke(command, graph, "-f", "csv", "-q", "--csv-exact-names")
    assert res.exit_code == 0, res.output
    rows = read_back(res.stdout)
    names = [r[column] for r in rows[1:]]
    assert sorted(names) == sorted(NAMES + (INPUTS if command == "marginals" else []))
    assert '"d\r(2)"' in res.stdout  # quoted: a reader does not end the row there


@pytest.mark.parametrize("command", ["rank", "marginals"])
def test_formula_cells_are_neutralised_by_default(tmp_path, command):
    graph = write_hostile(tmp_path)
    column = 1 if command == "rank" else 0
    res = invoke(command, graph, "-f", "csv", "-q")
    assert res.exit_code == 0, res.output
    names = [r[column] for r in read_back(res.stdout)[1:]]
    for name in FORMULAS:
        assert "'" + name in names and name not in names
    assert not [n for n in names if n[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert sorted(map(unmark, names)) == sorted(NAMES + (INPUTS if command == "marginals" else []))


def test_rank_and_marginals_write_the_same_cells(tmp_path):
    graph = write_hostile(tmp_path)
    for flags in ((), ("--csv-exact-names",)):
        rank = read_back(invoke("rank", graph, "-f", "csv", "-q", *flags).stdout)
        marg = read_back(invoke("marginals", graph, "-f", "csv", "-q", *flags).stdout)
        assert sorted(r[1] for r in rank[1:]) == sorted(r[0] for r in marg[1:] if unmark(r[0]) not in INPUTS)


@pytest.mark.parametrize("command", ["rank", "marginals"])
def test_help_documents_the_neutralisation(command):
    res = invoke(command, "--help")
    assert res.exit_code == 0
    text = " ".join(res.stdout.replace("\u2502", " ").split())
    assert "--csv-exact-names" in text and "CSV injection" in text
