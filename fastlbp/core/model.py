"""A factor graph with names: what loaders return and every command works on.

Every tuple of the input graph resolves to what became of it
(`Model.resolve`): a variable of the factor graph, or a reason it has none.
Loading a derivation graph (`datalog.bayesnet.to_model`) records the mapping
in `meta` as plain arrays, so a model can be stored as JSON plus numpy:

    meta["tuple_names"]  (T,) tuple of str, every tuple of the input graph
    meta["tuple_var"]    (T,) int32, its variable, -1 where it has none
    meta["tuple_how"]    (T,) int8, one of the codes below

Compression never negates: a merged clause is its head's variable (X_t = X_g),
so a tuple that has a variable carries its own marginal and its own evidence.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cached_property
from typing import Any

import numpy as np

from fastlbp.core.graph import FactorGraph

# What became of an input tuple (meta["tuple_how"]).
VARIABLE = 0  # a variable of the factor graph
CONSTANT = 1  # an input fact with prior 1.0 that compression removed: true in every world
PRUNED = 2  # compression summed it out: no alarm or label depends on it (barren)
UNDERIVABLE = 3  # cycle elimination dropped it: every derivation depends on itself, so it never holds
HOW_NAMES = ("variable", "constant", "pruned", "underivable")

# Why a tuple without a variable cannot be labelled or shown as one (`Resolved.reason`).
REASONS = {
    CONSTANT: "an input fact with prior 1.0, which compression removed: it is true in every world",
    PRUNED: "pruned by compression: no alarm or label depends on it, so the model does not hold it",
    UNDERIVABLE: "removed by cycle elimination: every derivation of it depends on itself, so it never "
                 "holds",
}


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What a name is in a model.

    Attributes:
        name: the model's own spelling of it (a tuple or variable name).
        var: its variable index, -1 where it has none.
        how: VARIABLE, CONSTANT, PRUNED or UNDERIVABLE.
        tuple: its index among the input graph's tuples, -1 for a variable
            that is not a tuple (a clause `R1#3`, an `x@input` prior).
    """

    name: str
    var: int
    how: int
    tuple: int = -1

    @property
    def reason(self) -> str:
        """Why it has no variable ("" when it has one)."""
        return REASONS.get(self.how, "")

    @property
    def value(self) -> float | None:
        """Its probability when the model fixes it regardless of evidence (1.0 or 0.0), else None."""
        return {CONSTANT: 1.0, UNDERIVABLE: 0.0}.get(self.how)


def _squeezed(name: str) -> str:
    """`race(1, 2)` -> `race(1,2)`: a name without white space, to match a label written with spaces."""
    return re.sub(r"\s+", "", name)


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """A factor graph whose variables have names.

    Attributes:
        graph: the factor graph (numpy arrays).
        var_names: (V,) name of each variable (a tuple, a libDAI label, ...).
        alarms: variable indices of the alarms, in the input's order.
        labels: known labels {variable index: truth} from the input.
        source: the file or directory it was loaded from.
        meta: loader-specific extras (rules, clause provenance, statistics;
            for a derivation graph the tuple mapping of the module docstring).
    """

    graph: FactorGraph
    var_names: tuple[str, ...]
    alarms: tuple[int, ...] = ()
    labels: dict[int, bool] = dataclasses.field(default_factory=dict)
    source: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    @cached_property
    def index(self) -> dict[str, int]:
        """Variable name -> variable index."""
        return {name: i for i, name in enumerate(self.var_names)}

    @property
    def num_vars(self) -> int:
        return self.graph.num_vars

    @property
    def tuple_names(self) -> tuple[str, ...]:
        """Every tuple of the input graph (the variable names of a graph without derivations)."""
        return tuple(self.meta.get("tuple_names", self.var_names))

    @cached_property
    def tuple_index(self) -> dict[str, int]:
        """Tuple name -> its index among `tuple_names`."""
        return {name: i for i, name in enumerate(self.tuple_names)}

    @cached_property
    def _squeezed_index(self) -> dict[str, str | None]:
        """Name without white space -> the one tuple or variable it spells (None when several do)."""
        out: dict[str, str | None] = {}
        for name in (*self.tuple_names, *self.var_names):
            key = _squeezed(name)
            if out.setdefault(key, name) != name:
                out[key] = None
        return out

    def resolve(self, name: str) -> Resolved:
        """What `name` (a tuple of the input graph or a variable) became in this model.

        White space the name does not have is forgiven (`race(1, 2)` finds
        `race(1,2)`) when exactly one name matches that way.

        Raises:
            KeyError: no tuple or variable has that name (the message says so).
        """
        if name not in self.tuple_index and name not in self.index:
            spelled = self._squeezed_index.get(_squeezed(name))
            if spelled is None:
                from fastlbp.core.text import safe_name

                raise KeyError(f"unknown tuple or variable '{safe_name(name)}'")
            name = spelled
        t = self.tuple_index.get(name, -1)
        if "tuple_how" in self.meta and t >= 0:
            how = int(self.meta["tuple_how"][t])
            var = int(self.meta["tuple_var"][t])
            return Resolved(name, var if how == VARIABLE else -1, how, t)
        return Resolved(name, self.index[name], VARIABLE, t)

    def tuple_vars(self) -> np.ndarray:
        """(T,) int64 variable of each tuple of `tuple_names`, -1 where it has none."""
        if "tuple_var" in self.meta:
            return np.asarray(self.meta["tuple_var"], np.int64)
        return np.arange(self.num_vars, dtype=np.int64)
