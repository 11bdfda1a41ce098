"""The `fastlbp` command line: thin typer commands over importable functions.

Every command is registered here, in the order `fastlbp --help` lists them:

    rank        fastlbp.cli.rank       alarms by probability (table, JSON, CSV, SARIF)
    triage      fastlbp.cli.triage     label alarms one at a time in the terminal
    simulate    fastlbp.cli.simulate   Bingo's oracle experiment and its metrics
    marginals   fastlbp.cli.marginals  every variable's P(=1) (JSON, CSV)
    check       fastlbp.cli.check      LBP against exact inference or sampling
    learn       fastlbp.cli.learn      rule probabilities from labelled graphs (EM)
    ground      fastlbp.cli.ground     a Datalog program and its facts to a derivation graph
    rules       fastlbp.cli.rules      a program's (or graph's) rules: names, FILE:LINE, texts
    info        fastlbp.cli.graphs     what a graph holds
    schedule    fastlbp.cli.schedule   the batches a schedule makes on a graph
    convert     fastlbp.cli.graphs     graphs between derivation.json, Bingo and causal_fg

The order is the order of use: the everyday commands first (rank, triage),
then evaluating the ranking (simulate, marginals, check), then making a graph
from a Datalog program (ground) and naming its rules (rules), then looking at and converting graphs (info,
schedule, convert).

The module `fastlbp.cli.app` holds the typer app (`fastlbp.cli.app.app`, also
`get_app()`), its error handling and the shared option types; the command
modules import it, never this package. (The app is bound here as `typer_app`,
not `app`, so `fastlbp.cli.app` stays the module.)
"""

from __future__ import annotations

import gc
import signal

import typer

from fastlbp.cli import check, graphs, ground, learn, marginals, rank, rules, schedule, simulate, triage
from fastlbp.cli.app import app as typer_app

typer_app.command("rank")(rank.rank)
typer_app.command("triage")(triage.triage)
typer_app.command("simulate")(simulate.simulate)
typer_app.command("marginals")(marginals.marginals)
typer_app.command("check")(check.check)
typer_app.command("learn")(learn.learn)
typer_app.command("ground")(ground.ground)
typer_app.command("rules")(rules.rules)
typer_app.command("info")(graphs.info)
typer_app.command("schedule")(schedule.schedule)
typer_app.command("convert")(graphs.convert)


def get_app() -> typer.Typer:
    """The app with every command registered."""
    return typer_app


def _exit_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    """The `fastlbp` console script (and `python -m fastlbp`)."""
    # SIGTERM and SIGHUP end a command as an exception does, so every `with` and `finally` runs:
    # `ground`'s clingo output (gigabytes in $TMPDIR on a large grounding) and the temporaries of
    # `-o` are removed. (A signal that comes while clingo grounds is acted on when it returns.)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _exit_on_signal)
    try:
        typer_app()
    finally:
        # Python's last garbage collection at exit walks every object JAX made, a
        # noticeable part of a short command; frozen, they are skipped. The command has
        # closed its files by now; stdout and stderr are flushed at exit as usual.
        gc.freeze()


__all__ = ["typer_app", "get_app", "main"]
