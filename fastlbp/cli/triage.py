"""`fastlbp triage`: label alarms one at a time in the terminal, with a durable session file.

Sessions and the command history live in the user's data folder
(`environment.data_folder`: $XDG_DATA_HOME/fastlbp, else ~/.local/share/fastlbp), resolved
in the CLI and handed to the library, which reads no environment.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from fastlbp.cli.app import (
    Ticker,
    emit,
    handles_errors,
    note,
    status,
)
from fastlbp.cli.environment import data_folder
from fastlbp.cli.evidence import EvidenceOptions
from fastlbp.cli.options import (
    INFERENCE_OPTIONS,
    GraphArg,
    InferenceOptions,
    LoadOptions,
    graph_command,
    learn_options,
    settings_of,
)
from fastlbp.core.errors import InputError
from fastlbp.core.settings import INFERENCE_FIELDS

LearnOpt, LearnStepsOpt = learn_options(" Stored in the session: a resume learns the same.", max_steps=1000)

# fastlbp.triage (the session, its journal and the terminal) is imported by
# the functions below when they run, so other commands and `fastlbp --help` do not pay for it.



def given_options(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The options among `names` that the command line gave (not left at their defaults)."""
    def given(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")

    return [n for n in names if given(n)]


def session_path(graph: Path, session: Path | None, folder: Path, *, existing: bool,
                 inputs: tuple = ()) -> Path:
    """The session file: `--session`, else the graph's in `folder` (or an old one beside the graph).

    Args:
        inputs: more files the graph is made of (a Datalog program's facts, ...): part of its name.
        existing: the command needs the session to exist (resume, recover, export):
            a missing one is an error naming sessions of graphs with this name.

    Raises:
        InputError: a missing session (`existing`), a data folder that cannot be made.
    """
    from fastlbp.triage import locate
    from fastlbp.triage.paths import namesakes

    if session is not None:
        path = session
    else:
        path, hint = locate(graph, folder, inputs)
        if hint:
            status(hint)
    if existing and not (path.exists() or path.is_symlink()):
        others = [p for p in namesakes(graph, folder) if p != path] if session is None else []
        hint = ""
        if others:
            shown = ", ".join(str(p) for p in others[:3])
            hint = (f"; sessions of graphs named {graph.name} with other content: {shown} (pass one with "
                    f"--session)")
        raise InputError(str(path), None, f"no triage session here for {graph} (start one without --resume, "
                                          f"--recover or --export){hint}")
    if session is None and path.parent == folder:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(str(folder), None, f"cannot make the sessions folder: {err.strerror or err}; "
                                                f"name a session file with --session") from None
    return path


@handles_errors
@graph_command
def triage(
    ctx: typer.Context,
    graph: GraphArg,
    session: Annotated[Path | None, typer.Option(
        "--session", help="The session file (SQLite). Default: one per graph (its name and a hash of its "
                          "content) in $XDG_DATA_HOME/fastlbp/sessions (~/.local/share/fastlbp/sessions); "
                          "a session beside the graph (GRAPH.triage.db, older releases) is still used.",
        show_default=False)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the saved session exactly where it "
                                                          "stopped, with its settings; inference options "
                                                          "given with it (--schedule, --tol, ...) change "
                                                          "them from now on, and the change is "
                                                          "saved.")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start over, replacing a saved session (never a "
                                                        "file that is not one, nor one in use).")] = False,
    recover: Annotated[bool, typer.Option("--recover", help="Start a new session from the valid events of a "
                                                            "damaged one (kept as FILE.damaged).")] = False,
    why: Annotated[int, typer.Option("--why", min=0, help="Derivations shown per alarm.")] = 3,
    export: Annotated[Path | None, typer.Option(
        "--export", help="Write the session's labels to FILE as 'NAME true|false' lines (- for stdout) and "
                         "exit; `fastlbp rank GRAPH -l FILE` reads them (or give rank the session file "
                         "itself).", show_default=False)] = None,
    learn: LearnOpt = False,
    learn_steps: LearnStepsOpt = 3,
    *,
    evidence: EvidenceOptions,
    inference: InferenceOptions,
    loading: LoadOptions,
) -> None:
    """Label alarms one at a time, most likely first, in the terminal.

    Shows the top unlabelled alarm, its probability and why (its strongest
    derivations: rules and the tuples they rest on). Type t (true), f
    (false), s (skip), u (undo), j X (jump to alarm X), /TEXT (search),
    stats, h (help) or q (quit). Each label becomes evidence and a
    warm-started round re-ranks the rest; its time is shown.

    Evidence besides the labels: --labels-from OLD_GRAPH carries the labels
    of an older version of the graph (those of --old-labels, by default
    OLD_GRAPH's own triage session): unchanged tuples keep their labels, changed
    ones enter as soft evidence (--carry-confidence); --soft-labels FILE adds
    soft evidence. The session stores both, so a resume starts from the same;
    the alarm list marks soft ones, and a label replaces a tuple's soft
    evidence. --learn re-learns the rule probabilities after each label.

    After each label a line says which alarms moved most. `more` continues a
    long search or list; `export FILE` writes the labels so far. On a
    terminal the prompt edits lines (arrow keys, Home/End, Ctrl-R), recalls
    earlier commands with up/down (the history is kept in the data folder)
    and completes commands and alarm names with Tab.

    Every label is saved before it is acknowledged, so a crash or kill never
    loses an accepted label; `--resume` restores the session exactly. A label
    that cannot be saved (a full disk) is not applied, and says so. A session
    is used by one process at a time: a second one is refused, naming the
    first. A damaged session file is reported and left as it is; `--recover`
    starts over from its valid part.

    Examples:

      fastlbp triage race.json

      fastlbp triage race.json --resume --schedule seqfix

      fastlbp triage race.json --export labels.txt

      fastlbp triage new.json --labels-from old.json --match renames.txt --learn

      fastlbp rank race.json --labels SESSION.triage.db   (a session as labels)
    """
    from fastlbp.triage import Terminal, Triage
    from fastlbp.triage.terminal import format_round

    if resume + fresh + recover > 1:
        raise typer.BadParameter("--resume, --fresh and --recover exclude each other")
    if export is not None and (fresh or recover):
        raise typer.BadParameter("--export reads a session: it excludes --fresh and --recover")
    data = data_folder()
    folder = data / "sessions"
    inputs = program_inputs(graph, loading.facts, loading.rule_prob, loading.alarms, loading.priors)
    if export is not None:
        export_labels(graph, session_path(graph, session, folder, existing=True, inputs=inputs), export)
        return
    settings = settings_of(loading, inference)
    if not given_options(ctx, ("sample_seconds",)):
        settings = settings.interactive()
    path = session_path(graph, session, folder, existing=resume or recover, inputs=inputs)
    given = given_options(ctx, INFERENCE_OPTIONS + ("cycles",))
    starting = given_options(ctx, EVIDENCE_OPTIONS)
    if (resume or recover) and starting:
        raise typer.BadParameter("a session keeps the evidence and learning it was started with; resume "
                                 "without them (or start a new session with --fresh)",
                                 param_hint=" / ".join("--" + n.replace("_", "-") for n in starting))
    if resume or recover:
        settings = stored_loading_settings(path, settings, "cycles" in given)
    progress = loading.progress()
    model = loading.load(graph, settings, progress)
    start = None
    if evidence.given():
        if evidence.labels_from is not None and evidence.old_labels is None:
            evidence = dataclasses.replace(evidence, old_labels=old_session(evidence.labels_from, folder,
                                                                            loading))
        start = start_evidence(model, evidence=evidence, loading=loading, settings=settings,
                               progress=progress)
    learning = None
    if learn:
        from fastlbp.triage.evidence import Learning

        learning = Learning(steps=learn_steps)
    loading.start_jax(progress)
    with Ticker("first round", progress):
        t = Triage.open(model, path, graph_path=str(graph), resume=resume, overwrite=fresh,
                        recover=recover, settings=settings, evidence=start, learning=learning)
    try:
        if resume:
            note(f"resumed {len(t.order)} label(s) from {path}", loading.quiet)
        if (resume or recover) and t.start.evidence:
            note(f"{t.start.evidence.summary()} (stored in the session)", loading.quiet)
        if (resume or recover) and t.learning is not None:
            note(f"learning the rule probabilities: {t.learning.steps} EM step(s) per label (stored in "
                 f"the session)", loading.quiet)
        for line in t.replay_notes:
            status(line)
        # Only the options a session stores change it (--devices is where, not what: taken as given).
        changes = {n: getattr(settings, n) for n in given if n in INFERENCE_OPTIONS and n in INFERENCE_FIELDS}
        if (resume or recover) and changes:
            with Ticker("a round with the new settings", progress):
                out = t.change_settings(changes)
            if not out.accepted:
                raise InputError(str(path), None, f"{out.message}. Resume without those options to keep the "
                                                  f"session's settings")
            if out.round is not None:
                status(f"{out.message}; saved in the session ({format_round(out.round)})")
            else:
                given_text = ", ".join("--" + n.replace("_", "-") for n in changes)
                status(f"note: the session runs with {given_text} as given already")
        interrupt_on_ctrl_c()
        code = Terminal(t, why=why, history=data / "triage_history").run()
    finally:
        t.close()
    raise typer.Exit(code)


# The options that set what a session starts from: given with --resume or --recover, they are refused.
EVIDENCE_OPTIONS = ("soft_labels", "labels_from", "old_labels", "match", "carry_confidence", "learn",
                    "learn_steps")


def old_session(old_graph: Path, folder: Path, loading) -> Path | None:
    """The triage session of --labels-from's graph in the data folder, whose labels are carried when
    --old-labels is not given (None when it has none)."""
    from fastlbp.triage import locate

    path, _ = locate(old_graph, folder, program_inputs(old_graph, loading.facts, loading.rule_prob,
                                                       loading.alarms, loading.priors))
    if not path.is_file():
        return None
    note(f"labels of {old_graph}: its triage session {path}", loading.quiet)
    return path


def start_evidence(model, **options):
    """The `StartEvidence` of --labels-from and --soft-labels on `model` as loaded (`gather`)."""
    from fastlbp.cli.evidence import gather
    from fastlbp.triage.evidence import StartEvidence

    ev = gather(model, **options)
    report = {"soft_file": ev.soft_file}
    if ev.carried is not None:
        c = ev.carried
        report.update(carried=len(c.carried), softened=len(c.softened), dropped=len(c.dropped),
                      confidence=float(c.confidence))
    return StartEvidence.of(ev.model, ev.labels, ev.soft, report)


def interrupt_on_ctrl_c() -> None:
    """Ctrl-C ends an interactive session (saved) even if this process was started with SIGINT ignored.

    A process started with SIGINT ignored (inherited across exec: some shells' background jobs, IDE
    runners, the workers of a test runner) gets no KeyboardInterrupt from Python, and Ctrl-C at the
    prompt did nothing. Only for a person at a terminal, and only from the main thread.
    """
    if sys.stdin.isatty() and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def program_inputs(graph: Path, facts: Path | None, rule_prob: Path | None, alarms: str | None,
                   priors: Path | None) -> tuple:
    """What a Datalog program's graph is made of besides the program: its REL.facts files, rule
    probabilities, priors and alarm relations (part of its session's name). For other graphs only
    --rule-prob."""
    from datalog.io import FORMATS, format_of_name

    named = FORMATS.get(format_of_name(graph) or "")
    if named is None or not named.grounded:
        # Another graph's probabilities are its own unless --rule-prob replaces them: a session per file.
        return ("--rule-prob", rule_prob) if rule_prob is not None and rule_prob.is_file() else ()
    folder = facts if facts is not None else Path(".")
    try:
        found = sorted(folder.glob("*.facts")) if folder.is_dir() else []
    except OSError:
        found = []  # grounding reports the folder
    given = (("--rule-prob", rule_prob), ("--priors", priors))
    tagged = [x for tag, p in given if p is not None and p.is_file() for x in (tag, p)]
    return (*found, *tagged, f"--alarms={alarms or ''}")


def stored_loading_settings(path: Path, settings, cycles_given: bool):
    """`settings` with the cycle elimination and compression the session's graph was read with.

    Raises:
        InputError: --cycles given and not the session's (it would change the graph's variables).
    """
    from fastlbp.triage.stored import loading_of

    stored = loading_of(path)
    if stored is None:
        return settings
    if cycles_given and stored["cycles"] != settings.cycles:
        raise InputError(str(path), None, f"the session was made with --cycles {stored['cycles']}; the cycle "
                                          f"mode decides the graph's variables, so a session cannot change "
                                          f"it: resume without --cycles, or start a new session (--fresh, "
                                          f"or another --session)")
    return settings.replace(cycles=stored["cycles"], compress=stored["compress"])


def export_labels(graph: Path, path: Path, target: Path) -> None:
    """Writes the labels of the session at `path` to `target` (`-`: stdout)."""
    from fastlbp.triage import session_labels, write_labels
    from fastlbp.triage.labels import format_labels

    labels = session_labels(path)
    if str(target) == "-":
        emit(format_labels(labels, str(path)))
    else:
        write_labels(target, labels, str(path))
    n_true = sum(truth for _, truth in labels)
    where = "stdout" if str(target) == "-" else str(target)
    status(f"wrote {len(labels)} label(s) ({n_true} true, {len(labels) - n_true} false) from {path} to "
           f"{where}")
