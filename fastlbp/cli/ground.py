"""`fastlbp ground`: a Datalog program and its facts to a derivation graph (clingo grounds it)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import (
    handles_errors,
    note,
    status,
)
from fastlbp.cli.options import (
    AlarmsOpt,
    FactsOpt,
    LocationsOpt,
    PriorsOpt,
    QuietOpt,
    RuleProbOpt,
    datalog_options,
)
from fastlbp.core.errors import InputError

# Clauses past which `ground` suggests derivation.npz over a text format: hmmer's 27.3M clauses took
# minutes and gigabytes on their way to derivation.json, seconds to derivation.npz (BENCHMARKS.md,
# "Figures behind the code's choices").
LARGE_TEXT_GRAPH = 5_000_000


@handles_errors
def ground(
    program: Annotated[Path, typer.Argument(metavar="PROGRAM", show_default=False,
                                            help="A Datalog program (.dl) in the Soufflé subset of "
                                                 "docs/writing-an-analysis.md.")],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="OUT", show_default=False,
                                         help="NAME.json or NAME.json.gz: derivation.json; NAME.npz: "
                                              "derivation.npz (numpy arrays: for millions of clauses); "
                                              "anything else: a Bingo directory (named_cons_all.txt, ...).")],
    facts: FactsOpt = None,
    rule_prob: RuleProbOpt = None,
    alarms: AlarmsOpt = None,
    priors: PriorsOpt = None,
    locations: LocationsOpt = None,
    max_rule_instances: Annotated[int | None, typer.Option(
        "--max-rule-instances", metavar="N", min=0, show_default="usable memory / 400 bytes",
        help="Stop grounding past N rule instances (each takes about 400 bytes of memory on its way to "
             "the graph) with an error naming the rule that explodes; 0: no limit. The default follows the "
             "least of the machine's memory, ulimit -v and the cgroup's memory limit.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Ground a Datalog program over its facts: every rule instance of its least model, as a graph.

    Each ground instance of a rule in the least model is a clause
    `NAME: body => head`, the body being the instance's positive atoms
    (negations and comparisons are conditions, decided by grounding against
    the facts); a rule's NAME is HEAD-HASH, stable when the program is
    reordered (`fastlbp rules PROGRAM.dl` lists them; --rule-prob also takes
    Rk, the k-th rule in file order). Input relations
    (.input REL) are read from DIR/REL.facts (tab-separated, as Soufflé);
    alarms are the tuples of the .output relations unless --alarms says
    otherwise. The graph goes to derivation.json, derivation.npz (numpy
    arrays: what a graph of millions of clauses should be written as) or a
    Bingo directory; rank,
    triage, simulate, check and info also take the .dl file directly.
    --locations REL names a relation REL(point, file, line[, column]) of
    source positions: every tuple is located at the points among its
    arguments (derivation.json's "locations", SARIF's physical locations).

    Examples:

      fastlbp ground data/taint/taint.dl --facts data/taint/facts -o taint.json

      fastlbp ground taint.dl --rule-prob rule_prob.txt --alarms leak -o bingo_dir

      fastlbp ground data/taint/taint.dl --facts data/taint/facts --locations callAt -o taint.json

      fastlbp rank taint.json --top 10
    """
    start = time.perf_counter()
    # Imported here: `fastlbp --help` and the other commands need no Datalog front end.
    from datalog import grounding
    from datalog.formats import BINGO_CLAUSES
    from datalog.io import FORMATS, format_of_name, known, write_derivation

    options = datalog_options(program, facts, rule_prob, alarms, priors, program=True, quiet=quiet,
                              locations=locations)
    if max_rule_instances is not None:
        options = dataclasses.replace(options, max_rule_instances=max_rule_instances)
    named = FORMATS.get(format_of_name(output) or "")
    if (named is None or named.directory) and output.is_dir() and any(output.iterdir()) and \
            not (output / BINGO_CLAUSES).exists():
        raise InputError(str(output), None, "is a directory that holds other files and no Bingo graph; name "
                         "an empty or new directory, or a .json file")
    if named is not None and named.write_derivation is None:
        writable = known(f for f in FORMATS.values() if f.write_derivation)
        raise InputError(str(output), None, f"ground writes {writable}; `fastlbp convert` makes a causal "
                         "factor graph of any")
    result = grounding.ground_file(program, options)
    if result.graph.num_clauses > LARGE_TEXT_GRAPH and (named is None or named.name != "npz"):
        note(f"note: {result.graph.num_clauses:,} clauses take minutes and gigabytes as text; NAME.npz "
             "(derivation.npz, numpy arrays) is written in seconds and read by every command", quiet)
    for line in write_derivation(result.graph, output):  # "wrote ...", then what the format cannot hold
        if line.startswith("warning:"):
            status(line)
        else:
            note(line, quiet)
    dg = result.graph
    note(f"{dg.num_tuples:,} tuples, {dg.num_clauses:,} clauses, {len(dg.rules)} rules, {len(dg.alarms):,} "
         f"alarms; {time.perf_counter() - start:.2f} s", quiet)
    if not len(dg.alarms):
        status("warning: no alarms (the program has no .output relation and --alarms was not given, or "
               "those relations are empty); rank will rank every tuple")
