"""Rows of a frame grouped by keys: :class:`GroupBy`.

What :meth:`CognitionFrame.group_by <cognoxium.frame.CognitionFrame.group_by>` returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from cognoxium.engine import arguments

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cognoxium.frame.frame import CognitionFrame

__all__ = ["GroupBy"]


class GroupBy:
    """Rows of a :class:`CognitionFrame` grouped by keys; :meth:`agg` runs eagerly."""

    __slots__ = ("_frame", "_keys")

    def __init__(self, frame: CognitionFrame, keys: tuple[pl.Expr, ...]) -> None:
        self._frame = frame
        self._keys = keys

    def agg(self, *aggs: pl.Expr | str | Sequence[pl.Expr | str], **named: pl.Expr) -> pl.DataFrame:
        """Run the plan and aggregate each group; groups in order of first appearance.

        Parameters
        ----------
        *aggs, **named
            Polars aggregation expressions (``name=expr`` to name one), one
            by one or in lists, as in Polars.

        Returns
        -------
        polars.DataFrame
            One row per group: the keys, then the aggregates.

        Raises
        ------
        PlanError
            If an aggregate is not an expression or a column name, or does
            not resolve over the frame's schema (an unknown column, a type
            mismatch); checked before the plan runs.
        """
        exprs = [arguments.expression(a, "agg").expr for a in arguments.flatten(aggs)]
        exprs += [
            arguments.expression(expr, "agg").expr.alias(name) for name, expr in named.items()
        ]
        keys = list(self._keys)
        arguments.check_query(
            self._frame.schema, lambda lf: lf.group_by(keys, maintain_order=True).agg(exprs), "agg"
        )
        return self._frame.collect().group_by(keys, maintain_order=True).agg(exprs)
