"""A factor graph with names: what loaders return and every command works on."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any

from fastlbp.graph import FactorGraph


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
    """A factor graph whose variables have names.

    Attributes:
        graph: the factor graph (numpy arrays).
        var_names: (V,) name of each variable (a tuple, a libDAI label, ...).
        alarms: variable indices of the alarms, in the input's order.
        labels: known labels {variable index: truth} from the input.
        source: the file or directory it was loaded from.
        meta: loader-specific extras (rules, clause provenance, statistics).
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
