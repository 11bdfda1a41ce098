"""Each option declared once (issue 39): a `Settings` field carries its command-line option
(`fastlbp.core.settings.Flag`), and every command's option is made from it; the evidence options are one
group; --help offers what users should choose."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from fastlbp.cli import get_app
from fastlbp.cli.evidence import EVIDENCE_PARAMETERS, EvidenceOptions
from fastlbp.cli.options import FLAGS, InferenceOptions, LoadOptions
from fastlbp.core.settings import BACKENDS, USER_BACKENDS, Settings

runner = CliRunner()
WEBLECH = str(Path(__file__).resolve().parents[1] / "data" / "weblech.json")


def _params(command: str) -> dict:
    return {p.name: p for p in typer.main.get_command(get_app()).commands[command].params}


def _help(*args: str) -> str:
    out = runner.invoke(get_app(), [*args, "--help"], env={"COLUMNS": "300"}).output
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())


def test_every_flagged_setting_is_an_option_with_its_names_and_default():
    params = _params("rank")
    assert FLAGS, "Settings declares the options"
    for name, flag in FLAGS.items():
        p = params[name]
        assert set(p.opts) | set(p.secondary_opts) == {n for names in flag.names for n in names.split("/")}
        expected = None if flag.default_from_env else getattr(Settings(), name)
        assert p.default == expected, name
    # the option groups' fields are the flagged fields of their group, no more
    assert {f.name for f in dataclasses.fields(InferenceOptions)} == {
        n for n, f in FLAGS.items() if f.group == "inference"}
    loading = {f.name for f in dataclasses.fields(LoadOptions)}
    assert {n for n, f in FLAGS.items() if f.group == "loading"} <= loading


def test_a_flag_edit_reaches_the_help():
    text = _help("rank")
    for flag in FLAGS.values():
        first = flag.help.split("{")[0][:40]
        assert first in text, first


def test_help_offers_the_user_backends_and_the_others_still_run():
    text = _help("rank")
    assert "<" + "|".join(USER_BACKENDS) + ">" in text
    for developer in set(BACKENDS) - set(USER_BACKENDS):
        assert developer not in text
    res = runner.invoke(get_app(), ["rank", WEBLECH, "--method", "lbp", "--backend", "scatter",
                                    "--top", "1", "--no-cache", "-q"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("command", ["rank", "simulate", "triage"])
def test_one_evidence_group(command):
    params = _params(command)
    for name, _, default in EVIDENCE_PARAMETERS:
        assert params[name].default == default
        assert params[name].rich_help_panel == "Evidence"
    assert EvidenceOptions().carry_confidence == params["carry_confidence"].default
