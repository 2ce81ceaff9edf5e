"""Packing units: an ungrouped row, or all rows of one ``group_id``, packed or dropped together."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

__all__ = ["Units", "form_units"]


@dataclass(frozen=True)
class Units:
    """The packing units of ``n`` rows.

    Attributes
    ----------
    n_units
        How many units there are (``n`` when no row is grouped).
    unit_of_row
        ``(n,)`` int64: each row's unit, units numbered in the order of their
        first row; ``None`` when no group has more than one row, and then the
        unit of row ``i`` is ``i``.
    sorted_rows
        ``(n,)`` int64: the rows ordered by unit (stable), or ``None``.
    offsets
        ``(n_units + 1,)`` int64: unit ``u``'s rows are
        ``sorted_rows[offsets[u]:offsets[u + 1]]``, or ``None``.
    """

    n_units: int
    unit_of_row: np.ndarray | None = None
    sorted_rows: np.ndarray | None = None
    offsets: np.ndarray | None = None

    def rows_of(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The member rows of ``units`` and where each unit's run of rows starts.

        Parameters
        ----------
        units
            ``(k,)`` int64 unit indices.

        Returns
        -------
        rows : numpy.ndarray
            ``(r,)`` int64 row indices, unit by unit (in a unit, input order).
        starts : numpy.ndarray
            ``(k,)`` int64: unit ``units[j]``'s rows begin at ``rows[starts[j]]``.
        """
        if self.sorted_rows is None or self.offsets is None:
            return units, np.arange(len(units))
        lengths = self.offsets[units + 1] - self.offsets[units]
        starts = np.cumsum(lengths) - lengths
        within = np.arange(int(lengths.sum())) - np.repeat(starts, lengths)
        return self.sorted_rows[np.repeat(self.offsets[units], lengths) + within], starts

    def per_unit(self, values: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Sum per-row ``values`` (laid out as :meth:`rows_of` returns) over each unit."""
        return values if self.unit_of_row is None else np.add.reduceat(values, starts)


def form_units(df: pl.DataFrame, grouped: np.ndarray) -> Units:
    """Number the packing units of ``df``.

    Parameters
    ----------
    df
        The items, ``n`` rows (only ``group_id`` is read).
    grouped
        ``(n,)`` bool: the row belongs to a group of more than one row.

    Returns
    -------
    Units
        One unit per row when ``grouped`` is all false; otherwise a unit per
        ungrouped row and per group, numbered by their first row.
    """
    if not grouped.any():
        return Units(n_units=df.height)
    first = (
        df.select("group_id")
        .with_row_index("row")
        .select(
            pl.when(pl.col("group_id").is_null())
            .then(pl.col("row"))
            .otherwise(pl.col("row").min().over("group_id"))
        )
        .to_series()
        .to_numpy()
    )
    _, unit_of_row = np.unique(first, return_inverse=True)
    n_units = int(unit_of_row.max()) + 1
    sorted_rows = np.argsort(unit_of_row, kind="stable")
    offsets = np.searchsorted(unit_of_row[sorted_rows], np.arange(n_units + 1))
    return Units(n_units=n_units, unit_of_row=unit_of_row, sorted_rows=sorted_rows, offsets=offsets)
