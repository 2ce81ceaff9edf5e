"""The plan optimizer: small pure rules, plan → plan, each one switchable.

Every rule lives in its own module, is a pure function from a plan to an
equivalent plan, and returns the same object when it changes nothing. The
rules run in :data:`RULES` order, again and again until none changes the plan.
Rules never move anything across a barrier node (``barrier = True``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Final

from cognoxium.engine.optimizer.fuse_filters import fuse_filters
from cognoxium.engine.optimizer.prune_projections import prune_projections
from cognoxium.engine.optimizer.pushdown_predicates import pushdown_predicates
from cognoxium.engine.optimizer.sort_limit_to_topk import sort_limit_to_topk
from cognoxium.engine.plan import Node

__all__ = ["RULES", "OptFlags", "optimize"]

Rule = Callable[[Node], Node]

RULES: Final[tuple[Rule, ...]] = (
    fuse_filters,
    pushdown_predicates,
    prune_projections,
    sort_limit_to_topk,
)
"""The rules, in the order they run; each is switched by the OptFlags field of its name."""

_MAX_PASSES: Final = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class OptFlags:
    """Which optimizer rules run; one switch per rule, all on by default.

    Examples
    --------
    >>> OptFlags().pushdown_predicates, OptFlags.none().pushdown_predicates
    (True, False)
    >>> OptFlags(sort_limit_to_topk=False).enabled()
    ('fuse_filters', 'pushdown_predicates', 'prune_projections')
    """

    fuse_filters: bool = True
    pushdown_predicates: bool = True
    prune_projections: bool = True
    sort_limit_to_topk: bool = True

    @classmethod
    def none(cls) -> OptFlags:
        """All rules off: the plan runs exactly as built."""
        return cls(**{f.name: False for f in fields(cls)})

    def enabled(self) -> tuple[str, ...]:
        """The names of the rules that are on, in :data:`RULES` order."""
        return tuple(rule.__name__ for rule in RULES if getattr(self, rule.__name__))


def optimize(plan: Node, flags: OptFlags | None = None) -> Node:
    """Apply the enabled rules in order until the plan stops changing.

    Parameters
    ----------
    plan
        The logical plan.
    flags
        Which rules run; all by default.

    Returns
    -------
    Node
        An equivalent plan; ``plan`` itself when no rule changed anything.

    Examples
    --------
    >>> import polars as pl
    >>> from cognoxium.engine.plan import Expression, Filter, Limit, Scan, Sort, Source, format_plan
    >>> scan = Scan(source=Source(pl.DataFrame({"a": [3, 1, 2]})))
    >>> plan = Limit(input=Filter(input=Sort(input=scan, by=(Expression.of("a"),),
    ...                                      descending=(True,), nulls_last=(False,)),
    ...                           predicate=Expression.of(pl.col("a") > 1)), n=1)
    >>> print(format_plan(optimize(plan)))
    TopK 1 by col("a") desc
      Filter [(col("a")) > (dyn int: 1)]
        Scan 3 rows; 1 columns
    >>> optimize(plan, OptFlags.none()) is plan
    True
    """
    flags = OptFlags() if flags is None else flags
    rules = [rule for rule in RULES if getattr(flags, rule.__name__)]
    for _ in range(_MAX_PASSES):
        before = plan
        for rule in rules:
            plan = rule(plan)
        if plan is before:
            break
    return plan
