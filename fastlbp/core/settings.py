"""`Settings`: every option of a run, with its default written once.

One immutable object travels from the CLI (or the caller of the Python API)
through loading, the session and the engines; nothing is read from module
globals or environment variables inside the library.

    settings = Settings(schedule="seqfix", precision="f32")
    session = fastlbp.Session(model, settings)
    session = fastlbp.Session(model, schedule="seqfix")    # the same, by keyword
"""

from __future__ import annotations

import dataclasses

from fastlbp.core.errors import SettingsError

# Precision name -> the name of its dtype in jax.numpy (`Settings.dtype` looks it up: this module
# imports no JAX, so the commands that run no inference never start it).
PRECISIONS = {"f64": "float64", "f32": "float32"}

# Kernel backends (the CLI's --backend; `schedules.plan.BACKEND_PARTS` splits each into the
# engine family, the segment-sum implementation and the interpreter flag) for PARALL (and, for
# "fused", the persistent kernel of sequential schedules):
#   auto      the default: "fused" where it measured faster, else "xla"
#             (`schedules.plan.Plan.for_graph`; always "xla" on a CPU)
#   xla       segment sums as dense gathers and row sums (`fastlbp.core.segments`)
#   scatter   XLA's scatter-add (one atomic per element; for comparison)
#   pallas    a Pallas segment-sum kernel (GPU; slower than xla, kept for comparison)
#   fused     two Pallas kernels per PARALL sweep, one persistent kernel per sequential sweep (GPU)
#   *_interpret  the same Pallas kernels in the interpreter (CPU; tests)
BACKENDS = ("auto", "xla", "scatter", "pallas", "fused", "pallas_interpret", "fused_interpret")
# The backends a user chooses from (--help lists these); the others are for comparison and tests.
USER_BACKENDS = ("auto", "xla", "fused")
CYCLE_MODES = ("cycles", "bingo")


# What each option is for, written once beside it (`_option`); the lists below are read from it.
PLAN = "plan"  # decides what runs (`schedules.plan.Plan`): a running session cannot change it
CONTROL = "control"  # data to a round (tol, max_iters, damping) or host policy: a session may change it
SAMPLER = "sampler"  # exact inference's and the sampler's budgets
LOADING = "loading"  # how a graph is read: shapes the model before any session


# Seconds of drawing a round of an interactive session may take unless --sample-seconds says otherwise:
# a person waits for each round (the standard errors then shown say what the budget bought).
INTERACTIVE_SAMPLE_SECONDS = 0.4
# Fewest effective samples a round of an interactive session answers with (its standard errors, at
# most 0.032, shown beside the numbers): weblech's labelled rounds left 790-800 effective samples in
# 0.4 s on a 2-core CPU, and at 1,000 they fell back to an LBP that needed damping or did not converge.
INTERACTIVE_MIN_ACCEPTED = 250
# Where sampling draws (`Settings.sample_path`): None lets the sampler decide by the graph's size.
SAMPLE_PATHS = {"auto": None, "host": True, "device": False}


@dataclasses.dataclass(frozen=True)
class Flag:
    """How a `Settings` field is offered on the command line; `fastlbp.cli.options` makes every command's
    option from it, so an option is declared once, here, beside its default.

    Attributes:
        names: the option's names ("--tol"; "--method", "-m"; "--compress/--no-compress").
        help: its --help text; `{strategies}` stands for the strategy table's names and help
            (`schedules.plan.strategies_help`), `{methods}` for the method table's
            (`fastlbp.inference.methods.methods_help`, whose names the CLI also takes as the choices).
        group: the commands' shared group it belongs to: "loading" (every command that reads a
            graph) or "inference" (every command that runs inference); also its --help panel.
        choices: the values users choose from, as --help lists them (default: any value).
        unlisted_choices: values also accepted but not listed (kernels kept for comparison and tests).
        minimum: the least value accepted by the option's parser (None: no bound there).
        default_from_env: the CLI's default is an environment variable's, else the field's
            (`fastlbp.cli.app.backend_or_env`).
    """

    names: tuple[str, ...]
    help: str
    group: str = "inference"
    choices: tuple[str, ...] = ()
    unlisted_choices: tuple[str, ...] = ()
    minimum: float | None = None
    default_from_env: bool = False


def _option(default, role: str, *, stored: bool | None = None, flag: Flag | None = None):
    """A `Settings` field of `role`; `stored`: one of the options that decide a round's numbers, kept
    with a triage session (`Settings.inference`; default: all but the loading options); `flag`: its
    command-line option, if it has one."""
    stored = role != LOADING if stored is None else stored
    return dataclasses.field(default=default, metadata={"role": role, "stored": stored, "flag": flag})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Options of loading and inference.

    Attributes:
        schedule: update strategy: a key of `schedules.plan.STRATEGIES` or a custom
            order file, with `:OPTION`s (`schedules.plan.parse_spec`).
        precision: "f64" (default; the published accuracy depends on it) or "f32".
        tol: a round stops when no marginal changes by this much or more (0: after max_iters).
        max_iters: most iterations per round.
        damping: weight of the old message in [0, 1), in the log domain.
        backend: kernel backend (`BACKENDS`); "auto" (the default) picks one by device,
            schedule and graph size (`schedules.plan.Plan.for_graph`); "xla" runs on every
            device.
        cycles: cycle elimination of derivation graphs: "cycles" (Bingo's
            criterion on the clauses on a cycle) or "bingo" (on every clause).
        compress: exact chain compression of derivation graphs.
        method: "auto" (the default: exact inference where the graph's width fits,
            else importance sampling where it fits a time budget, else LBP;
            `fastlbp.inference.methods.choose`) or a method of the table
            `fastlbp.inference.methods.METHODS`: "lbp" (loopy belief propagation), "exact"
            (bucket elimination) or "sample" (sampling with the labels as importance
            weights, `fastlbp.engines.sampling`). Checked where it is used (the table is
            above this module): a `Session`, learning, the CLI's choices.
        samples: worlds drawn by `method="sample"`.
        max_samples: most worlds `method="sample"` draws (its budget) while the
            standard errors are above `target_se` or fewer than `min_accepted`
            effective samples were drawn (drawing goes on, doubling; at least `samples`).
        seed: the sampler's seed.
        min_accepted: fewest effective samples ((sum w)^2 / sum w^2 of the labels'
            importance weights) for `method="sample"` to report marginals (fewer is an
            error, not noise).
        target_se: `method="sample"` draws more worlds (doubling, up to `max_samples`)
            until every alarm's standard error is at most this (0: `samples` worlds
            only); 0.0025 keeps three standard errors under 0.01.
        sample_seconds: a sampling round stops doubling once the next draw would end
            past this many seconds of drawing (0: no time limit), whatever `target_se`
            asks; the round's info and the status line say the target was not reached.
            Without it a label that few worlds agree with made a weblech round draw
            6.4M worlds on the host path.
        exact_memory: bytes the largest table of `method="exact"` may take; None: a
            quarter of the device's memory.
        sample_path: where sampling draws: "host" (numpy: no compile), "device" (the compiled
            program: a compile first, then 2-4x the host's worlds per second on a CPU), or "auto"
            (the host for graphs of at most `sampling.HOST_EDGES` padded reads; an interactive
            session's rounds take the device, `interactive`).
        devices: how many of JAX's visible devices (of its default backend) a run uses; None (the
            default): all of them. The device sampler spreads its batches of worlds over them
            (`fastlbp.engines.sharded_sampling`: the same tallies as one device's, bit for bit), and
            PARALL its factors on graphs of at least `schedules.plan.SHARD_MIN_EDGES` edges
            (`fastlbp.engines.sharded_parall`). Not stored with a triage session: it changes where the
            numbers are computed, not what they are.
        remedies: when an LBP round does not converge (tol > 0), retry it with
            damping 0.5, then 0.8, then average the marginals of the last 100
            iterations (Bingo's remedy); `Round.remedy` says which produced the numbers.
    """

    schedule: str = _option("parall", PLAN, flag=Flag(
        ("--schedule", "-s"),
        "Update strategy: {strategies}; or a file with a custom order; options follow colons, e.g. "
        "seqfix:chunked (level by level instead of relaxing whole sweeps) or topo:algorithm3 (see "
        "`fastlbp schedule --help`)."))
    precision: str = _option("f64", PLAN, flag=Flag(("--precision",), "Floating-point precision.",
                                                     choices=tuple(PRECISIONS)))
    tol: float = _option(1e-6, CONTROL, flag=Flag(("--tol",), "Stop when no marginal changes by this much or "
                                                              "more."))
    max_iters: int = _option(1000, CONTROL, flag=Flag(("--max-iters",), "Most iterations per round."))
    damping: float = _option(0.0, CONTROL, flag=Flag(("--damping",), "Weight of the old message (log "
                                                                     "domain), in [0, 1)."))
    backend: str = _option("auto", PLAN, flag=Flag(
        ("--backend",),
        "Kernels: auto picks by device, schedule and graph size; xla runs everywhere; fused (GPU) runs "
        "PARALL and chunked schedules as Pallas kernels, faster on big graphs.",
        choices=USER_BACKENDS, unlisted_choices=tuple(b for b in BACKENDS if b not in USER_BACKENDS),
        default_from_env=True))
    cycles: str = _option("cycles", LOADING, flag=Flag(
        ("--cycles",),
        "Cycle elimination for derivation graphs: 'cycles' applies Bingo's criterion (a clause survives "
        "only if its body is derived strictly before its head in the least fixpoint) to the clauses on a "
        "cycle; 'bingo' applies it to every clause, as Bingo does.", group="loading", choices=CYCLE_MODES))
    compress: bool = _option(True, LOADING, flag=Flag(
        ("--compress/--no-compress",), "Compress derivation graphs (exact: alarm marginals are unchanged).",
        group="loading"))
    method: str = _option("auto", PLAN, flag=Flag(
        ("--method", "-m"),
        "How marginals are computed: {methods}. `fastlbp check` compares LBP with a reference."))
    samples: int = _option(100_000, SAMPLER, flag=Flag(
        ("--samples",), "Worlds of sampling's first round (it draws more, doubling, until every alarm's "
                        "standard error is at most 0.0025, within 10^7 worlds and --sample-seconds)."))
    max_samples: int = _option(10_000_000, SAMPLER)
    seed: int = _option(0, SAMPLER, flag=Flag(("--seed",), "Seed of --method sample."))
    min_accepted: int = _option(1000, SAMPLER)
    target_se: float = _option(0.0025, SAMPLER)
    sample_seconds: float = _option(4.0, SAMPLER, flag=Flag(
        ("--sample-seconds",), "Sampling stops doubling once a round would draw for longer than this (0: no "
                               "limit; default 4, and 0.4 for a round of simulate and triage); the status "
                               "line says when it ended a round early.", minimum=0.0))
    exact_memory: int | None = _option(None, SAMPLER, stored=False)
    sample_path: str = _option("auto", SAMPLER, stored=False)
    devices: int | None = _option(None, PLAN, stored=False, flag=Flag(
        ("--devices",), "How many of JAX's devices (GPUs) to use: the sampler spreads its worlds over them "
                        "(the same numbers as on one), and PARALL its factors on graphs of at least "
                        "50M edges (default: every visible device).", minimum=1))
    remedies: bool = _option(True, CONTROL, stored=False)

    def interactive(self) -> Settings:
        """These settings for the rounds of an interactive session (`simulate`, `triage`): a sampling
        round bounded by `INTERACTIVE_SAMPLE_SECONDS` (a person waits for each), answering from at
        least `INTERACTIVE_MIN_ACCEPTED` effective samples (fewer than `min_accepted` asks, if more)."""
        # The device program at every size: its compile is paid once for the session's rounds (3.3 s
        # at weblech's size on a 2-core CPU), and a labelled round drew 366K worlds/s there against the
        # host path's 80-180K (whose rounds left fewer than 250 effective samples in 0.4 s).
        path = "device" if self.sample_path == "auto" else self.sample_path
        return self.replace(sample_seconds=INTERACTIVE_SAMPLE_SECONDS, sample_path=path,
                            min_accepted=min(self.min_accepted, INTERACTIVE_MIN_ACCEPTED))

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise SettingsError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not 0.0 <= self.damping < 1.0:
            raise SettingsError(f"damping must be in [0, 1), got {self.damping}")
        if not self.tol >= 0:  # 0: run exactly max_iters iterations
            raise SettingsError(f"tol must be >= 0, got {self.tol}")
        if int(self.max_iters) != self.max_iters or self.max_iters < 1:
            raise SettingsError(f"max_iters must be a positive integer, got {self.max_iters}")
        if self.backend not in BACKENDS:
            raise SettingsError(f"{self.backend!r} is not a backend; choose one of {', '.join(BACKENDS)}")
        if self.cycles not in CYCLE_MODES:
            raise SettingsError(f"cycles must be one of {', '.join(CYCLE_MODES)}, got {self.cycles!r}")
        if not 0.0 <= self.target_se < 0.5:
            raise SettingsError(f"target_se must be in [0, 0.5), got {self.target_se}")
        if self.sample_path not in SAMPLE_PATHS:
            raise SettingsError(f"sample_path must be one of {', '.join(SAMPLE_PATHS)}, "
                                f"got {self.sample_path!r}")
        if not self.sample_seconds >= 0:
            raise SettingsError(f"sample_seconds must be >= 0, got {self.sample_seconds}")
        for name in ("samples", "max_samples", "min_accepted"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise SettingsError(f"{name} must be a positive integer, got {value}")
        if self.devices is not None and (int(self.devices) != self.devices or self.devices < 1):
            raise SettingsError(f"devices must be a positive integer, got {self.devices}")
        if self.exact_memory is not None and not self.exact_memory > 0:
            raise SettingsError(f"exact_memory must be positive, got {self.exact_memory}")
        if not isinstance(self.schedule, str) or not self.schedule.strip():
            raise SettingsError(f"schedule must be a non-empty string, got {self.schedule!r}")

    @property
    def dtype(self):
        """The JAX dtype of messages and marginals: `jax.numpy.float64` or `jax.numpy.float32`."""
        import jax.numpy as jnp  # JAX only where a dtype is asked for: by the engines, at a run

        return getattr(jnp, PRECISIONS[self.precision])

    def replace(self, **changes) -> Settings:
        """A copy with `changes` (None values are ignored, so CLI options left unset keep defaults)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def inference(self) -> dict:
        """The options that decide a round's numbers (`INFERENCE_FIELDS`, stored with a triage session)."""
        return {k: getattr(self, k) for k in INFERENCE_FIELDS}


FIELDS = tuple(f.name for f in dataclasses.fields(Settings))
# The options that decide a round's numbers, in field order (a triage session stores them).
INFERENCE_FIELDS = tuple(f.name for f in dataclasses.fields(Settings) if f.metadata["stored"])
# The options a running session may change: data to the jitted round, or host policy (remedies).
CONTROL_FIELDS = tuple(f.name for f in dataclasses.fields(Settings) if f.metadata["role"] == CONTROL)
# The options of reading a graph.
LOADING_FIELDS = tuple(f.name for f in dataclasses.fields(Settings) if f.metadata["role"] == LOADING)


def settings_from(settings: Settings | None = None, **overrides) -> Settings:
    """`settings` (default: `Settings()`) with keyword `overrides`; unknown keywords are an error."""
    unknown = set(overrides) - set(FIELDS)
    if unknown:
        raise TypeError(f"unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(FIELDS)}")
    return (settings or Settings()).replace(**overrides)


__all__ = ["Settings", "Flag", "settings_from", "PRECISIONS", "BACKENDS", "USER_BACKENDS",
           "CYCLE_MODES", "FIELDS", "INFERENCE_FIELDS", "CONTROL_FIELDS", "LOADING_FIELDS"]
