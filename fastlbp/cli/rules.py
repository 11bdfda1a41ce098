"""`fastlbp rules`: a Datalog program's rules (or a graph's) with the names rule-probability files use."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import emit, handles_errors
from fastlbp.cli.options import OutputOpt, RuleProbOpt
from fastlbp.core.errors import InputError


class RulesFormat(StrEnum):
    table = "table"
    json = "json"


def program_rules(program: Path, rule_prob: Path | None = None) -> list[dict]:
    """Every rule of a Soufflé program: {"name", "index", "text", "file", "line", "probability"}.

    `probability` is what a grounding with `rule_prob` gives the rule (the file's value, else the
    default 0.999); the program is parsed and checked, not grounded, so no facts are needed.
    """
    from datalog import ground_inputs, souffle
    from datalog.derivation import DEFAULT_RULE_PROBABILITY

    parsed = souffle.parse_file(program)
    probs = ground_inputs.rule_probabilities(rule_prob, parsed) if rule_prob is not None else {}
    return [{"name": r.name, "index": r.index, "text": r.text, "file": r.pos.file or str(program),
             "line": r.pos.line, "probability": probs.get(r.index, DEFAULT_RULE_PROBABILITY)}
            for r in parsed.rules]


def graph_rules(graph: Path, fmt: str | None = None, rule_prob: Path | None = None) -> list[dict]:
    """Every rule of a derivation graph (derivation.json, derivation.npz, a Bingo directory):
    {"name", "index", "text", "probability"} (text None when the graph has none)."""
    from datalog.io import read_derivation
    from datalog.rule_probs import read_rule_probs

    dg, _ = read_derivation(graph, fmt)
    out = [{"name": r.name, "index": k, "text": r.text, "probability": r.probability}
           for k, r in enumerate(dg.rules)]
    if rule_prob is not None:  # as `apply_rule_probs` applies them: by name, Rk by position past names
        import re

        probs = read_rule_probs(rule_prob)
        numbered = any(re.fullmatch(r"R\d+", r["name"]) for r in out)
        for r in out:
            p = probs.get(r["name"])
            if p is None and not numbered:
                p = probs.get(f"R{r['index']}")
            if p is not None:
                r["probability"] = p
    return out


def to_table(rules: list[dict]) -> str:
    """NAME, WHERE (FILE:LINE, for a program), P and the rule's text; one line per rule."""
    where = ["" if "file" not in r else f"{r['file']}:{r['line']}" for r in rules]
    name_w = max([len("NAME")] + [len(r["name"]) for r in rules])
    where_w = max([len("WHERE")] + [len(w) for w in where]) if any(where) else 0
    head = f"{'NAME':<{name_w}}  " + (f"{'WHERE':<{where_w}}  " if where_w else "") + f"{'P':<6}  RULE"
    lines = [head]
    for r, w in zip(rules, where, strict=True):
        text = r["text"] if r["text"] else "(no text)"
        lines.append(f"{r['name']:<{name_w}}  " + (f"{w:<{where_w}}  " if where_w else "")
                     + f"{r['probability']:<6.4g}  {text}")
    return "\n".join(lines)


@handles_errors
def rules(
    source: Annotated[Path, typer.Argument(
        metavar="PROGRAM|GRAPH", show_default=False,
        help="A Soufflé program (.dl; parsed, not grounded: no facts needed), or a derivation graph "
             "(derivation.json, derivation.npz, a Bingo directory).")],
    format: Annotated[RulesFormat, typer.Option("--format", "-f", help="table for people, json for "
                                                                      "tools.")] = RulesFormat.table,
    rule_prob: RuleProbOpt = None,
    output: OutputOpt = None,
) -> None:
    """List every rule: its name (what a rule-probability file says), FILE:LINE and text.

    A program's rule is named HEAD-HASH (`leak-3fa2c1`): its head relation
    and a hash of its text with the variables renamed, so the name stays
    the same when other rules are added, removed or reordered, or the rule
    is reformatted or its variables renamed, and changes with the rule
    itself. Its text is written from the parsed rule: a rule of a component
    instance names the instance's relations (`cg.reach(a, b) :- cg.edge(a,
    b).`), each alternative of a disjunction is a rule. `Rk` (the k-th rule
    in file order, from 0) is still accepted in rule-probability files.
    With --rule-prob, P is what that file gives each rule (else 0.999, or a
    graph's own).

    JSON: [{"name", "index", "text", "file", "line", "probability"}, ...]
    (file and line for a program only).

    Examples:

      fastlbp rules data/taint/taint.dl

      fastlbp rules data/taint/taint.dl --rule-prob data/taint/rule_prob.txt -f json
    """
    from datalog.io import detect_format

    fmt = detect_format(source)
    if fmt == "datalog":
        listed = program_rules(source, rule_prob)
    elif fmt == "causal_fg":
        raise InputError(str(source), None, "a causal factor graph has no rules (programs, derivation graphs "
                         "and Bingo directories do)")
    else:
        listed = graph_rules(source, fmt, rule_prob)
    if format is RulesFormat.json:
        emit(json.dumps(listed, indent=1), output)
    else:
        emit(to_table(listed), output)
