"""Names on a terminal (issue 29 item 12): every name a command shows goes through one escaping
function, `fastlbp.core.text.safe_name`, so a crafted tuple name can neither drive the terminal (an OSC
sequence that retitles it, a bidi override) nor forge a line of output (a newline inside a name
followed by `> accepted: x`). Shown on: `info`, `rank`'s table, `triage`, `check`, and error messages."""

import pytest
from hostile_names import NAMES, RAW, write_hostile
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.core.errors import ContradictoryEvidence
from fastlbp.core.text import safe_name

# The names a terminal would act on, each made the one with the largest fan-in for `info`.
ACTIVE = [i for i, n in enumerate(NAMES) if n != safe_name(n)]


def invoke(*args, input=None):
    return CliRunner().invoke(get_app(), [str(a) for a in args], input=input)


def assert_escaped(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text)
    assert not [line for line in text.split("\n") if line.lstrip("> ").startswith("accepted: x")], text


def test_safe_name_escapes_controls_c1_and_bidi():
    assert safe_name("a\n> accepted: x") == "a\\n> accepted: x"
    assert safe_name("b\x1b]0;pwned\x07") == "b\\x1b]0;pwned\\x07"
    assert safe_name("\r\t\x85\x9b") == "\\r\\t\\x85\\x9b"
    assert [safe_name(chr(c)) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))] == \
        [f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]


@pytest.mark.parametrize("top", ACTIVE)
def test_info_shows_the_largest_fan_in_escaped(tmp_path, top):
    graph = write_hostile(tmp_path, top=top)
    res = invoke("info", graph, "-q")
    assert res.exit_code == 0, res.output
    assert_escaped(res.stdout)
    assert f"3 ({safe_name(NAMES[top])})" in res.stdout


def test_rank_table_shows_every_name_on_one_line(tmp_path):
    graph = write_hostile(tmp_path)
    res = invoke("rank", graph, "-q")
    assert res.exit_code == 0, res.output
    assert_escaped(res.stdout)
    lines = res.stdout.split("\n")
    for name in NAMES:
        assert sum(line.endswith(f"  {safe_name(name)}") for line in lines) == 1, name
    assert len([line for line in lines if line[:4].strip().isdigit()]) == len(NAMES)


def test_triage_shows_names_escaped_and_cannot_be_forged(tmp_path):
    graph = write_hostile(tmp_path)
    # label the top alarm (the newline one), list, search, explain, jump to the OSC one, label, undo, skip
    res = invoke("triage", graph, "--session", tmp_path / "s.db",
                 input="t\nl all\n/a\nw\nj 4\nt\nu\ns\nstats\nq\n")
    assert res.exit_code == 0, res.output
    assert_escaped(res.output)
    assert "accepted: a\\n> accepted: x = true" in res.stdout
    for name in NAMES[1:]:
        assert safe_name(name) in res.stdout, name


def test_check_shows_names_escaped(tmp_path):
    graph = write_hostile(tmp_path)
    res = invoke("check", graph, "-q")
    assert res.exit_code == 0, res.output
    assert_escaped(res.output)
    assert safe_name(NAMES[1]) in res.stdout


def test_error_messages_show_names_escaped():
    err = ContradictoryEvidence({NAMES[0]: True, NAMES[1]: False})
    assert_escaped(str(err))
    assert f"{safe_name(NAMES[0])}=true, {safe_name(NAMES[1])}=false" in str(err)


def test_contradictory_labels_name_the_tuples_escaped(tmp_path):
    graph = write_hostile(tmp_path)
    labels = tmp_path / "labels.txt"
    # NAMES[1] has one derivation, from in(0): false for in(0) and true for it is impossible
    labels.write_text(f"in(0) false\n{NAMES[1]} true\n")
    res = invoke("rank", graph, "-q", "-l", labels)
    assert res.exit_code == 2, res.output
    assert_escaped(res.stderr)
    assert f"{safe_name(NAMES[1])}=true (line 2)" in res.stderr
