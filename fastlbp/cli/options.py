"""The options of the commands that read a graph, declared once and shared by all of them.

Every command that loads a graph (`rank`, `triage`, `simulate`, `marginals`,
`check`, `info`, `schedule`) takes the same loading options (`LoadOptions`:
cycle elimination, compression, a Datalog program's grounding inputs, the model
cache, progress) and every command that runs inference the same inference options
(`InferenceOptions`: method, update strategy, tolerances, precision, kernels,
sampling). A command declares a parameter `loading: LoadOptions` and/or
`inference: InferenceOptions`; `graph_command` puts the shared options in their
place in its signature (what typer reads) and hands the command the two
frozen dataclasses, as uv flattens its shared option groups:

    @graph_command
    def marginals(graph: GraphArg, inference: InferenceOptions, loading: LoadOptions, ...):
        settings = settings_of(loading, inference)
        model = loading.load(graph, settings, progress)

Option defaults come from `fastlbp.core.settings.Settings` (never written here again).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import typing
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fastlbp.cli.app import DEFAULTS, status
from fastlbp.cli.compilation import configure_jax
from fastlbp.cli.environment import BACKEND_ENV, backend_or_env
from fastlbp.cli.evidence import EVIDENCE_PARAMETERS, EvidenceOptions
from fastlbp.cli.loading import load_graph
from fastlbp.cli.progress import finish_progress, start_progress
from fastlbp.core.errors import SettingsError
from fastlbp.core.settings import Flag, Settings
from fastlbp.inference.methods import methods_help, names
from schedules.plan import strategies_help

if TYPE_CHECKING:
    from datalog.grounding import GroundOptions
    from fastlbp.cli.progress import Progress

# Options made from `Settings` ----------------------------------------------------------------------
# Every option that sets a `Settings` field is declared once, on the field (`fastlbp.core.settings.Flag`:
# names, help, group, choices); its type, default and --help panel are made here from it.

PANELS = {"loading": "Reading the graph", "inference": "Inference", "evidence": "Evidence"}
_HINTS = typing.get_type_hints(Settings)
FLAGS: dict[str, Flag] = {f.name: f.metadata["flag"] for f in dataclasses.fields(Settings)
                          if f.metadata["flag"] is not None}


# Choices read from a table above `fastlbp.core` (which the field's flag cannot name).
TABLE_CHOICES = {"method": names()}


def _choices(name: str, flag: Flag):
    """The StrEnum of a field's accepted values: its flag's (or table's) choices, then the unlisted ones."""
    listed = TABLE_CHOICES.get(name, flag.choices)
    return StrEnum(name.title().replace("_", ""), {c: c for c in listed + flag.unlisted_choices})


def _settings_parameter(name: str) -> tuple[str, object, object]:
    """(parameter name, typer annotation, default) of the option of `Settings` field `name`."""
    flag = FLAGS[name]
    default = getattr(DEFAULTS, name)
    base = _HINTS[name]
    extra = {}
    if flag.choices or name in TABLE_CHOICES:
        base = _choices(name, flag)
        if flag.unlisted_choices:
            # --help lists what users choose; values kept for comparison and tests are accepted, not listed
            extra["metavar"] = "<" + "|".join(flag.choices) + ">"
    if flag.minimum is not None:
        extra["min"] = flag.minimum
    if flag.default_from_env:
        base, default = base | None, None
        extra["show_default"] = f"${BACKEND_ENV}, else {getattr(DEFAULTS, name)}"
    text = flag.help.format(strategies=strategies_help(), methods=methods_help())
    option = typer.Option(*flag.names, help=text,
                          rich_help_panel=PANELS[flag.group], **extra)
    return name, Annotated[base, option], default


Precision = _choices("precision", FLAGS["precision"])
Backend = _choices("backend", FLAGS["backend"])
CycleMode = _choices("cycles", FLAGS["cycles"])
Method = _choices("method", FLAGS["method"])
CyclesOpt = _settings_parameter("cycles")[1]
CompressOpt = _settings_parameter("compress")[1]

GraphArg = Annotated[
    Path,
    typer.Argument(metavar="GRAPH", help="A derivation.json or derivation.npz file, a Bingo directory, a "
                                         "libDAI causal factor-graph file (.causal_fg / .fg), or a Datalog "
                                         "program (.dl; grounded first, see --facts).", show_default=False),
]
LabelsOpt = Annotated[
    Path | None,
    typer.Option("--labels", "-l", help="Known labels as evidence: lines 'NAME true|false' (any tuple of "
                 "the graph; tab, comma or spaces between), or a triage session file."),
]
# A Datalog program's grounding options (`fastlbp ground`, and every command given a .dl file).
FactsOpt = Annotated[
    Path | None,
    typer.Option("--facts", metavar="DIR", show_default="the current directory",
                 help="For a Datalog program (.dl): the directory of its input relations' REL.facts files "
                      "(one tuple per line, fields separated by tabs, as Soufflé reads them)."),
]
RuleProbOpt = Annotated[
    Path | None,
    typer.Option("--rule-prob", metavar="FILE", show_default=False,
                 help="Rule probabilities, lines 'NAME: p' (Bingo's rule-prob.txt, `fastlbp learn`'s "
                      "output); rules not named keep theirs (0.999 for a .dl program). A program's rules are "
                      "named HEAD-HASH (`fastlbp rules` lists them), which survive reordering the "
                      "program; Rk, the k-th rule in file order from 0, is accepted too (one rule given two "
                      "values under its two names is an error). A graph's rules are matched by name (Rk by "
                      "position in a graph grounded from a program)."),
]
AlarmsOpt = Annotated[
    str | None,
    typer.Option("--alarms", metavar="REL[,REL...]", show_default="every .output relation",
                 help="For a .dl program: the relations whose tuples are the alarms."),
]
PriorsOpt = Annotated[
    Path | None,
    typer.Option("--priors", metavar="FILE", show_default=False,
                 help="For a .dl program: priors of input tuples, lines 'TUPLE p' (default 1.0)."),
]
LocationsOpt = Annotated[
    str | None,
    typer.Option("--locations", metavar="REL", show_default=False,
                 help="For a .dl program: a relation REL(point, file, line[, column]) of source positions; "
                      "every tuple is located at the points among its arguments (SARIF results then have "
                      "a file and line: README, Code scanning)."),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option("--output", "-o", metavar="FILE", show_default=False,
                 help="Write the result to FILE instead of stdout, atomically (a temporary file renamed "
                      "into place: never half a file; a device or FIFO such as /dev/null is written "
                      "directly); '-' is stdout."),
]




# Progress, caches and timings: every command that loads a graph takes --quiet and --no-cache; --timings
# (hidden) is for benchmarks/bench_e2e.py.
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Only warnings and errors on stderr: no progress (shown on a terminal for stages "
                          "over a second), no lines saying how the numbers were made or what grounding "
                          "produced.")]
NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", help="Load the graph afresh, neither reading nor writing the model cache (loaded models "
                       "are kept under the cache folder's models/; FASTLBP_CACHE=off turns off it and the "
                       "compiled-loop cache).")]
TimingsOpt = Annotated[bool, typer.Option("--timings", hidden=True,
                                          help="Print the seconds of each stage and the peak memory on "
                                               "stderr (benchmarks/bench_e2e.py reads them).")]




# CSV output (`rank`, `marginals`): fields quoted as RFC 4180 says (`fastlbp.core.text.csv_document`).
CSV_EXACT_NAMES_HELP = (
    "With --format csv, write every name exactly as it is. By default a name beginning with = + - @, a tab "
    "or a carriage return (a formula to a spreadsheet), or with ', gets a leading ' (OWASP's advice against "
    "CSV injection); dropping one leading ' reads the name back.")

CsvExactNamesOpt = Annotated[bool, typer.Option("--csv-exact-names", help=CSV_EXACT_NAMES_HELP)]


# Online learning (`simulate`, `triage`): EM steps on the labels after each one.
LEARN_HELP = ("Learn the rule probabilities from the labels as they come: after each label a few EM steps "
              "(--learn-steps), warm-started, then the next round ranks with them (their time counts in the "
              "round's).")


def learn_options(more_help: str = "", max_steps: int | None = None) -> tuple[object, object]:
    """The `--learn` and `--learn-steps` options of a command that learns as it labels.

    Args:
        more_help: what `--learn`'s help adds for the command.
        max_steps: `--learn-steps`' upper bound (triage's: what a session stores,
            `fastlbp.triage.evidence.Learning`), or None.
    """
    return (Annotated[bool, typer.Option("--learn", help=LEARN_HELP + more_help)],
            Annotated[int, typer.Option("--learn-steps", min=1, max=max_steps,
                                        help="EM steps per label with --learn.")])


# The shared option sets --------------------------------------------------------------------------


def _group(group: str) -> tuple[tuple[str, object, object], ...]:
    """The options of `Settings` fields in `group` ("loading", "inference"), in field order."""
    return tuple(_settings_parameter(name) for name, flag in FLAGS.items() if flag.group == group)


# The settings part of the loading options (cycles, compress): fields made from `Settings`.
_LoadSettings = dataclasses.make_dataclass(
    "_LoadSettings", [(name, typing.Any, dataclasses.field(default=getattr(DEFAULTS, name)))
                      for name, _, _ in _group("loading")], frozen=True)


@dataclasses.dataclass(frozen=True)
class LoadOptions(_LoadSettings):
    """How a command reads its graph: the options of every command that loads one (the `Settings`
    fields of group "loading", then these)."""

    facts: Path | None = None  # a Datalog program's grounding inputs (`datalog_options`)
    rule_prob: Path | None = None
    alarms: str | None = None
    priors: Path | None = None
    locations: str | None = None
    no_cache: bool = False
    quiet: bool = False
    timings: bool = False

    def datalog(self, graph: Path) -> GroundOptions | None:
        """The grounding options for `graph` (None unless it is a Datalog program; `datalog_options`)."""
        return datalog_options(graph, self.facts, self.rule_prob, self.alarms, self.priors, quiet=self.quiet,
                               locations=self.locations)

    def progress(self) -> Progress:
        """The command's progress display (`start_progress`: --quiet, --timings)."""
        return start_progress(self.quiet, self.timings)

    def load(self, graph: Path, settings: Settings, progress: Progress | None = None, **kwargs):
        """The model of `graph` through the model cache (unless --no-cache), a program grounded first."""
        return load_graph(graph, settings, no_cache=self.no_cache, progress=progress,
                          datalog=self.datalog(graph), rule_prob=self.rule_prob, quiet=self.quiet, **kwargs)

    def start_jax(self, progress: Progress | None = None) -> None:
        """`configure_jax` for a command that runs inference; with --timings JAX's compile times go to
        `progress`."""
        configure_jax(progress if self.timings else None)

    def finish(self, progress: Progress, model=None) -> None:
        """Stops the progress display; with --timings prints the stages and peak memory."""
        finish_progress(progress, self.timings, model)


# How a command computes marginals: the options of every command that runs inference, one field per
# `Settings` field of group "inference" (its default the field's; backend None: `backend_or_env`).
InferenceOptions = dataclasses.make_dataclass(
    "InferenceOptions", [(name, typing.Any, dataclasses.field(default=default))
                         for name, _, default in _group("inference")], frozen=True)


def settings_of(loading: LoadOptions | None = None, inference: InferenceOptions | None = None) -> Settings:
    """The one `Settings` of a command's shared options ($FASTLBP_BACKEND as --backend's default).

    Raises:
        SettingsError: a value out of range or unknown.
    """
    given = {}
    if loading is not None:
        given.update({name: getattr(loading, name) for name, _, _ in _group("loading")})
    if inference is not None:
        given.update({f.name: getattr(inference, f.name) for f in dataclasses.fields(InferenceOptions)})
        given["backend"] = backend_or_env(inference.backend)
    return settings_from_options(**given)


# Each shared option: (parameter name, its typer annotation, default), in the order --help lists them.
LOAD_PARAMETERS = _group("loading") + (
    ("facts", FactsOpt, None),
    ("rule_prob", RuleProbOpt, None),
    ("alarms", AlarmsOpt, None),
    ("priors", PriorsOpt, None),
    ("locations", LocationsOpt, None),
    ("no_cache", NoCacheOpt, False),
    ("quiet", QuietOpt, False),
    ("timings", TimingsOpt, False),
)
INFERENCE_PARAMETERS = _group("inference")
# The options that decide a round's numbers: given on a triage resume, they change the session's settings.
INFERENCE_OPTIONS = tuple(name for name, _, _ in INFERENCE_PARAMETERS)
GROUPS = {"loading": (LoadOptions, LOAD_PARAMETERS), "inference": (InferenceOptions, INFERENCE_PARAMETERS),
          "evidence": (EvidenceOptions, EVIDENCE_PARAMETERS)}


def _in_panel(annotation, panel: str):
    """`annotation` (Annotated[T, typer.Option(...)]) with its option shown under `panel` in --help."""
    base, *extras = typing.get_args(annotation)
    extras = [dataclasses.replace(e) if dataclasses.is_dataclass(e) else copy.copy(e) for e in extras]
    for extra in extras:
        if isinstance(extra, typer.models.OptionInfo):
            extra.rich_help_panel = panel
    return Annotated[(base, *extras)]


def _plain(value):
    return value.value if isinstance(value, StrEnum) else value


def graph_command(fn):
    """Puts the shared options in place of a command's `loading` / `inference` parameters.

    typer sees one parameter per option (`LOAD_PARAMETERS`, `INFERENCE_PARAMETERS`, in that order
    where the placeholder stood); the command is called with a `LoadOptions` and an
    `InferenceOptions` built from them.
    """
    signature = inspect.signature(fn, eval_str=True)
    parameters, groups = [], []
    for p in signature.parameters.values():
        if p.name in GROUPS:
            groups.append(p.name)
            panel = PANELS[p.name]
            parameters += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                             annotation=_in_panel(annotation, panel))
                           for name, annotation, default in GROUPS[p.name][1]]
        else:
            parameters.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(fn)
    def command(**kwargs):
        for group in groups:
            cls, table = GROUPS[group]
            kwargs[group] = cls(**{name: _plain(kwargs.pop(name)) for name, _, _ in table})
        return fn(**kwargs)

    command.__signature__ = signature.replace(parameters=parameters)
    command.__annotations__ = {p.name: p.annotation for p in parameters}
    del command.__wrapped__  # typer reads `__signature__`, not the command's own parameters
    return command


# Helpers behind the shared options ------------------------------------------------------------------

def datalog_options(graph: Path, facts: Path | None = None, rule_prob: Path | None = None,
                    alarms: str | None = None, priors: Path | None = None, *,
                    program: bool = False, quiet: bool = False,
                    locations: str | None = None) -> GroundOptions | None:
    """The grounding options for `graph` when it is a Datalog program (or `program`), else None.

    Grounding's progress goes to stderr (`status`), unless `quiet` (--quiet).

    Raises:
        SettingsError: a grounding option given for a graph that is not a
            program, or --alarms naming no relation.
    """
    # Imported here: the Datalog front end is for the commands that read a graph, not --help.
    from datalog.grounding import GroundOptions
    from datalog.io import FORMATS, detect_format

    # --rule-prob applies to every graph with rules (`load_graph`); the others are a program's only.
    given = [name for name, value in (("--facts", facts), ("--alarms", alarms), ("--priors", priors),
                                      ("--locations", locations)) if value is not None]
    if not program and not FORMATS[detect_format(graph)].grounded:
        if given:
            raise SettingsError(f"{', '.join(given)}: only for a Datalog program (.dl); {graph} is a "
                                f"{detect_format(graph)} graph")
        return None
    rels = None
    if alarms is not None:
        rels = tuple(r.strip() for r in alarms.split(",") if r.strip())
        if not rels:
            raise SettingsError("--alarms: name at least one relation (REL[,REL...])")
    return GroundOptions(facts=facts, rule_prob=rule_prob, alarms=rels, priors=priors,
                         progress=None if quiet else status, locations=locations)




def settings_from_options(**options) -> Settings:
    """The one `Settings` of a command's options (keywords: `Settings` fields that have an option,
    `FLAGS`); options left None keep `Settings`' defaults.

    Its `Plan` (`schedules.plan.make_plan`: the schedule parsed, a custom order read, GPU
    kernels checked) is made here too, before any graph loads, so that a typo'd schedule or a
    backend this machine cannot run fails at once; the library makes the same plan from these
    settings.

    Raises:
        SettingsError: a value out of range or unknown, GPU kernels without a GPU.
        InputError: a bad schedule (unknown strategy, missing order file, bad option).
    """
    from schedules.plan import make_plan

    unknown = set(options) - set(FLAGS)
    if unknown:
        raise TypeError(f"no option sets {', '.join(sorted(unknown))}")
    settings = DEFAULTS.replace(**{name: _plain(value) for name, value in options.items()})
    make_plan(settings)
    return settings
