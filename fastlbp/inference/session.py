"""`Session`: evidence, messages and settings for repeated, warm-started rounds on one model.

    import fastlbp
    model = fastlbp.load("data/weblech.json")
    session = fastlbp.Session(model, schedule="seqfix")
    session.run()
    session.label("race(13,15)", False)
    result = session.run()            # warm-started from the previous messages
    print(session.marginals()["race(13,15)"])
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import functools
import time

import jax
import numpy as np

from fastlbp import engines
from fastlbp.core.errors import SettingsError
from fastlbp.core.jax_setup import float64, float64_context
from fastlbp.core.model import UNDERIVABLE, Model
from fastlbp.core.settings import CONTROL_FIELDS, Settings, settings_from
from fastlbp.core.text import safe_name
from fastlbp.engines.loop import Controls, controls, init
from fastlbp.inference import lbp_flags, methods, rounds
from fastlbp.inference.rounds import Round
from schedules.plan import Plan, make_plan

# One thread for the sessions' background compiles (`Session._warm_fallback`).
_BACKGROUND = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastlbp-warm")


class Session:
    """Evidence, messages and settings for repeated, warm-started rounds on one model.

    Changing labels, tol, max_iters or damping never recompiles: they are data.
    With `method="exact"` or `"sample"` a round is exact inference or sampling
    from the current labels (no messages, no warm start). With `method="auto"`
    (the default) the first round picks one (`fastlbp.inference.methods.choose`: exact where
    it fits, else sampling where it fits the time budget, else LBP) and the
    session keeps it (`Session.method`); a later round whose labels the sampler
    or exact inference cannot take runs LBP instead and says so in `Round.flags`.

    Args:
        model: the model (`fastlbp.load`).
        settings: the run's `Settings` (default `Settings()`).
        **overrides: single settings by keyword, e.g. `schedule="seqfix"`, `backend="fused"`.
    """

    @float64
    def __init__(self, model: Model, settings: Settings | None = None, *, plan: Plan | None = None,
                 **overrides):
        self._settings = settings_from(settings, **overrides)
        self.model = model
        # "auto" is decided at the first round, with its labels (`methods.choose`).
        self.choice = None if methods.chooses(methods.check_name(self._settings.method)) else \
            methods.choose(model, self._settings)
        # What runs, decided and checked once (the schedule, the kernels, the platform): LBP may be
        # needed by a later round (a fallback), so its plan is checked whatever the method.
        self.plan = (plan or make_plan(self._settings)).placed()
        # The prepared methods (`fastlbp.inference.rounds`), immutable: a round returns the one to keep.
        # An iterative method's preparation (LBP's runner) is host work once per graph, made here when it
        # is asked for, else when a round first needs it (a fallback).
        self._methods: dict[str, rounds.Prepared] = {}
        # (name, future) of the fallback of "auto" (LBP) prepared and compiled in a thread while an
        # interactive session's first round runs (`_warm_fallback`): a later fallback round then
        # compiles nothing.
        self._warming: tuple[str, concurrent.futures.Future] | None = None
        if self.choice is not None and methods.method_of(self.choice.method).iterative:
            self._method(self.choice.method)
        self.labels: dict[int, bool] = dict(model.labels)
        # Soft evidence {variable: p} (`fastlbp.inference.soft`): data like the labels, never compiled in.
        self.soft: dict[int, float] = {}
        self.messages = init(model.graph, self.dtype)
        self.last: Round | None = None
        self._controls_key: tuple | None = None
        self._controls: Controls | None = None
        self._compile_flags = False  # `compile_flags` asked for, before any LBP round

    def fork(self) -> Session:
        """A session with this one's state and its own labels: a round on it leaves this one as it was
        (a round replaces the messages, `last` and the runner, an immutable `Runner`, never changes
        them in place)."""
        twin = copy.copy(self)
        twin.labels, twin.soft, twin._methods = dict(self.labels), dict(self.soft), dict(self._methods)
        return twin

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def method(self) -> str:
        """The method rounds use: `settings.method`, or what "auto" chose ("auto" before the first round)."""
        return self.choice.method if self.choice is not None else self._settings.method

    def _iterative(self):
        """The prepared iterative method (LBP), or None while no round has needed one."""
        return next((m for name, m in self._methods.items() if methods.method_of(name).iterative), None)

    @property
    def runner(self):
        """LBP's runner (`fastlbp.engines.loop.Runner`), or None while no round has needed LBP."""
        lbp = self._iterative()
        return lbp.runner if lbp is not None else None

    @property
    def graph(self):
        """The graph's fields on the device that LBP's runner reads (`fastlbp.engines.device_graph`);
        none while no round has needed LBP (exact inference and sampling read the host graph)."""
        lbp = self._iterative()
        return lbp.graph if lbp is not None else engines.device_graph(self.model.graph, frozenset())

    def _method(self, name: str) -> rounds.Prepared:
        """The prepared method `name`, prepared now if no round has needed it yet (with the sampler
        `methods.choose` built while choosing it, if any; the fallback warmed in a thread, if it is)."""
        if self._warming is not None and self._warming[0] == name and name not in self._methods:
            self._methods[name] = self._warming[1].result()
            self._warming = None
        if name not in self._methods:
            chosen = self.choice is not None and self.choice.method == name
            sampler = self.choice.sampler if chosen else None
            self._methods[name] = methods.method_of(name).prepare(self.model, self.plan, sampler)
        return self._methods[name]

    @float64
    def set_parameters(self, model: Model) -> None:
        """Takes `model`'s factor probabilities: the same graph structure, other p1/p2 (learned rule
        probabilities, `datalog.rule_probs.apply_rule_probs`).

        They are data to LBP's compiled round (nothing recompiles; the messages are kept as a warm
        start); the sampler's host plan is made again at the next round, exact inference plans per
        graph object (`fastlbp.engines.exact.engine_for`).

        Raises:
            SettingsError: `model`'s graph has another structure.
        """
        old, new = self.model.graph, model.graph
        if (new.num_vars, new.num_factors, new.num_edges) != (old.num_vars, old.num_factors, old.num_edges) \
                or not np.array_equal(np.asarray(new.edge_var), np.asarray(old.edge_var)):
            raise SettingsError("set_parameters needs the same graph structure; start a new Session")
        self.model = model
        self._methods = {name: m.with_model(model) for name, m in self._methods.items()}
        if self.choice is not None and self.choice.sampler is not None:
            self.choice = dataclasses.replace(self.choice, sampler=None)  # built for the old probabilities

    @settings.setter
    def settings(self, new: Settings) -> None:
        """Changes tol, max_iters or damping (data); other changes need a new session."""
        changed = [f.name for f in dataclasses.fields(Settings)
                   if getattr(new, f.name) != getattr(self._settings, f.name)]
        fixed = [name for name in changed if name not in CONTROL_FIELDS]
        if fixed:
            raise SettingsError(f"a session cannot change {', '.join(fixed)}; start a new Session")
        self._settings = new

    @property
    def dtype(self):
        return self._settings.dtype

    # Evidence -------------------------------------------------------------
    def _var(self, name_or_index: str | int) -> int:
        """The variable of an index, a variable name or any tuple of the input graph.

        Raises:
            KeyError: an unknown name, or a tuple without a variable in this
                model (the message says why and how to keep it).
        """
        if isinstance(name_or_index, int | np.integer):
            return int(name_or_index)
        r = self.model.resolve(name_or_index)  # KeyError names an unknown one
        if r.var < 0:
            keep = "" if r.how == UNDERIVABLE else (
                f"; to label it, start a Session on fastlbp.io.loading.keep_tuples(model, [{r.name!r}]), "
                "which keeps it as a variable")
            raise KeyError(f"'{safe_name(r.name)}' is not a variable of this model: {r.reason}{keep}")
        return r.var

    def label(self, name: str | int, truth: bool) -> None:
        """Labels a variable (its index or name) or any tuple of the input graph that is one.

        Raises:
            KeyError: see `_var`; a tuple compression removed needs
                `fastlbp.io.loading.keep_tuples` (or a labels file through
                `fastlbp.io.loading.load_labels`, which does it).
        """
        self.labels[self._var(name)] = bool(truth)

    def unlabel(self, name: str | int) -> None:
        self.labels.pop(self._var(name), None)

    def observe(self, name: str | int, p: float) -> None:
        """Soft evidence on a variable or tuple (see `label`): an independent observation that it is
        true, of likelihood ratio p / (1 - p) (`fastlbp.inference.soft`); p strictly in (0, 1)."""
        from fastlbp.inference.soft import check_soft

        v = self._var(name)
        self.soft[v] = check_soft({v: p}, self.model.num_vars)[v]

    @float64
    def evidence(self, labels: dict[int, bool] | None = None) -> jax.Array:
        """(V,) evidence log-odds on the device (+-inf where labelled, log(p / (1 - p)) where observed
        softly and not labelled)."""
        import jax.numpy as jnp

        labels = self.labels if labels is None else labels
        hard = rounds.hard_evidence(self.model.num_vars, labels, self.dtype)
        if not self.soft:
            return hard
        from fastlbp.inference.soft import check_soft, soft_log_odds

        soft = soft_log_odds(self.model.num_vars, check_soft(self.soft, self.model.num_vars))
        return hard + jnp.asarray(soft, self.dtype)  # +-inf + finite: a label wins

    # Inference ------------------------------------------------------------
    @float64
    def controls(self) -> Controls:
        """tol, max_iters and damping on the device, sent again only when one changes: each
        host-to-device copy costs 0.15-0.25 ms on the H200 machine, a round three of them."""
        s = self._settings
        key = (s.tol, s.max_iters, s.damping, s.precision)
        if self._controls_key != key:
            self._controls_key = key
            self._controls = controls(s.tol, s.max_iters, s.damping, self.dtype)
        return self._controls

    @float64
    def compile_flags(self) -> None:
        """Compiles what flagging LBP's labelled rounds runs (`lbp_flags.compile_flags`), so that
        an interactive session's first label compiles nothing: now when the session runs LBP, else after
        its first LBP round ("auto" may never run one). Simulate and triage call it."""
        self._compile_flags = True
        if not methods.chooses(self.method) and methods.method_of(self.method).iterative:
            lbp_flags.compile_flags(self.model.graph, self.messages, self.dtype)
            self._compile_flags = False

    @float64
    def run(self, *, warm: bool = True, flags: bool = True) -> Round:
        """Runs one round to convergence, warm-started from the last messages.

        Args:
            warm: start from the last round's messages (else uniform ones).
            flags: flag an LBP round whose answer is not to be trusted (`Round.flags`, `lbp_flags`); off
                only where nobody reads them (a learning E-step: 154K labels on 7 ftp-size graphs).

        Raises:
            ContradictoryEvidence: the labels have probability 0 (proved by
                the model's hard constraints, `fastlbp.core.constraints`); names a
                minimal conflicting subset. Messages are left unchanged.
            InferenceError: LBP met a conflict the hard constraints do not
                imply (a numerical failure); the labels are kept.
        """
        start = time.perf_counter()
        if self.choice is None:
            if self._compile_flags:
                self._warm_fallback()  # beside the choice and the first round's compile, in a thread
            self.choice = methods.choose(self.model, self._settings, self.labels)
        inputs = rounds.Inputs(model=self.model, labels=self.labels, soft=self._checked_soft(),
                               settings=self._settings, messages=self.messages if warm else None,
                               evidence=self.evidence, controls=self.controls, flags=flags)
        fell_back: tuple[str, ...] = ()
        name = self.method
        try:
            rnd, self._methods[name], messages = self._method(name).round(inputs)
        except rounds.REFUSALS as err:
            fallback = methods.method_of(name).fallback
            if not methods.chooses(self._settings.method) or fallback is None:
                raise
            # The labels are beyond the chosen method: this round is its fallback's (LBP's), and says so.
            fell_back = (f"{name} refused these labels ({err}); {methods.method_of(fallback).label} "
                         "answered instead",)
            rnd, self._methods[fallback], messages = self._method(fallback).round(inputs)
        if self._warming is not None:
            # The first round waits for the fallback's compile: no later round competes with it (its
            # tracing holds the interpreter: rounds of 21 ms took 0.5-1.1 s beside it at avrora's size).
            warmed, future = self._warming
            self._methods.setdefault(warmed, future.result())
            self._warming = None
        if messages is not None:
            self.messages = messages
            if self._compile_flags:
                self.compile_flags()
        self.last = dataclasses.replace(rnd, seconds=time.perf_counter() - start, flags=rnd.flags + fell_back,
                                        reason=self.choice.reason or None)
        return self.last

    def _warm_fallback(self) -> None:
        """Prepares and compiles the fallback of "auto" (`methods.auto_fallback`: LBP) in a thread, for
        the rounds "auto" may hand to it (labels the sampler or exact inference refuse), while the first
        round chooses and compiles its own method; the first round ends after it. An interactive
        session then compiles nothing after its first round whatever the method (a fallback's compile
        was 1.4 s of a weblech round on a 2-core CPU)."""
        fallback = methods.auto_fallback()
        if (not methods.chooses(self._settings.method) or fallback is None or fallback in self._methods
                or self._warming is not None):
            return
        row = methods.method_of(fallback)
        model, plan, settings = self.model, self.plan, self._settings
        inputs = rounds.Inputs(model=model, labels=dict(self.labels), soft={}, settings=settings,
                               messages=None, evidence=functools.partial(self.evidence, dict(self.labels)),
                               controls=self.controls, flags=False)
        messages = self.messages

        def work() -> rounds.Prepared:
            with float64_context():
                prepared = row.prepare(model, plan).warm(inputs)
                if row.iterative:  # its rounds' flags too
                    lbp_flags.compile_flags(model.graph, messages, self.dtype)
                return prepared

        self._warming = (fallback, _BACKGROUND.submit(work))
        self._compile_flags = False

    def _checked_soft(self) -> dict[int, float]:
        if not self.soft:
            return {}
        from fastlbp.inference.soft import check_soft

        return check_soft(self.soft, self.model.num_vars)

    def marginals(self) -> dict[str, float]:
        """{variable name: P(=1)} from the last round (runs one if none yet)."""
        rnd = self.last or self.run()
        return dict(zip(self.model.var_names, rnd.marginals.tolist(), strict=True))

    def tuple_marginals(self) -> dict[str, float]:
        """{tuple name: P(=1)} of every tuple of the input graph from the last round (runs one if none).

        A tuple compression merged a clause into is its own variable; a
        constant input is 1.0, an underivable tuple 0.0 and a pruned tuple
        LBP's belief from its parents (`datalog.bayesnet.tuple_marginals`).
        A graph without derivations (a causal factor graph) gives `marginals()`.
        """
        from datalog.bayesnet import tuple_marginals

        rnd = self.last or self.run()
        values = tuple_marginals(self.model, rnd.marginals)
        return dict(zip(self.model.tuple_names, values.tolist(), strict=True))

    def marginal(self, name: str | int) -> float:
        """P(=1) of a variable or of any tuple of the input graph, from the last round (runs one if none).

        Raises:
            KeyError: an unknown name.
        """
        rnd = self.last or self.run()
        if isinstance(name, int | np.integer):
            return float(rnd.marginals[int(name)])
        r = self.model.resolve(name)
        if r.var >= 0:
            return float(rnd.marginals[r.var])
        return self.tuple_marginals()[r.name]


@float64
def marginals(model: Model, labels: dict[int, bool] | None = None, settings: Settings | None = None, *,
              soft: dict[int, float] | None = None, **overrides) -> Round:
    """One cold round on `model` with `labels` (or the model's own labels) and `soft` evidence."""
    session = Session(model, settings, **overrides)
    if labels is not None:
        session.labels = dict(labels)
    for v, p in (soft or {}).items():
        session.observe(int(v), p)
    return session.run(warm=False)


__all__ = ["Session", "Round", "marginals", "CONTROL_FIELDS"]
