"""Running a plan: optimize, lower to Polars and collect, with the item checks a step may need."""

from __future__ import annotations

import polars as pl

from cognoxium.engine.lowering import lower
from cognoxium.engine.optimizer import OptFlags, optimize
from cognoxium.engine.plan import Node, changes_item_values
from cognoxium.items.schema import check_items

__all__ = ["checked_rows", "lowered"]


def lowered(plan: Node, optimizations: OptFlags | None = None) -> pl.LazyFrame:
    """``plan`` optimized (every rule unless ``optimizations`` says otherwise) and lowered."""
    return lower(optimize(plan, OptFlags() if optimizations is None else optimizations))


def checked_rows(plan: Node, *, finite_rank: bool = True) -> pl.DataFrame:
    """Run ``plan``, checking as readers check the rows a step may have made invalid.

    Only a plan that computes columns or joins in rows
    (:func:`~cognoxium.engine.plan.changes_item_values`) pays for the check;
    its rows come back as :func:`~cognoxium.items.schema.check_items` gives them.

    Parameters
    ----------
    plan
        The plan, run with every optimizer rule.
    finite_rank
        Refuse a NaN rank too (a pack reads one as unranked, a file may not hold one).

    Returns
    -------
    polars.DataFrame
        The plan's rows.

    Raises
    ------
    RecordError
        Naming the 0-based row and the field of the first invalid value.
    """
    rows = lowered(plan).collect()
    if changes_item_values(plan):
        return check_items(rows, finite_rank=finite_rank)
    return rows
