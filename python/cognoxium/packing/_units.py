"""Packing units: rows packed or dropped together.

A unit is an ungrouped row, or all rows of one ``group_id``. With whole turns
(``pack(..., turns=True)``) a turn also binds its rows: a ``user`` message
and the ``assistant`` and ``tool`` messages that follow it, up to the next
``user`` message. Groups and turns that share a row are one unit (the
connected components of both relations), so a tool exchange never splits a
turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

__all__ = ["TURN_ROLES", "Units", "form_units"]

TURN_ROLES: tuple[str, ...] = ("assistant", "tool")
"""The roles a turn takes after its ``user`` message; other roles stay units of their own."""


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

    def multi_row(self) -> np.ndarray | None:
        """``(n,)`` bool: the row's unit has more than one row, or ``None`` when no unit does."""
        if self.unit_of_row is None or self.offsets is None:
            return None
        multi: np.ndarray = (np.diff(self.offsets) > 1)[self.unit_of_row]
        return multi

    def per_unit(self, values: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Sum per-row ``values`` (laid out as :meth:`rows_of` returns) over each unit."""
        return values if self.unit_of_row is None else np.add.reduceat(values, starts)


def form_units(df: pl.DataFrame, grouped: np.ndarray, *, turns: bool = False) -> Units:
    """Number the packing units of ``df``.

    Parameters
    ----------
    df
        The items, ``n`` rows in input order (``group_id`` is read, and
        ``role`` with ``turns``).
    grouped
        ``(n,)`` bool: the row belongs to a group of more than one row.
    turns
        Bind each turn's rows into one unit: a ``user`` row with the
        :data:`TURN_ROLES` rows after it, up to the next ``user`` row. Rows
        before the first ``user`` row, rows of other roles (system,
        developer, document, memory) and the rows of a last turn still in
        progress (its last message a ``tool`` result) are not in a turn.

    Returns
    -------
    Units
        One unit per row when no group or turn has more than one row;
        otherwise a unit per connected component of groups and turns,
        numbered by their first row.
    """
    first = _turn_and_group_heads(df, grouped) if turns else None
    if first is None:
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


def _turn_in_progress(df: pl.DataFrame) -> list[int]:
    """The user row opening the last turn when that turn is in progress, else nothing.

    A turn is in progress when its last message is a ``tool`` result: the
    model has not answered it yet (an agent loop's steps). Its rows are not
    bound, so a pack keeps its task and its newest steps when the whole turn
    does not fit, as a pack without whole turns does.
    """
    role = df.get_column("role").cast(pl.String)
    spoken = role.is_in(["user", *TURN_ROLES]).arg_true()
    users = (role == "user").arg_true()
    if spoken.len() == 0 or users.len() == 0 or role[int(spoken[-1])] != "tool":
        return []
    return [int(users[-1])]


def _turn_and_group_heads(df: pl.DataFrame, grouped: np.ndarray) -> np.ndarray | None:
    """Each row's unit head (the smallest row of its component of groups and turns).

    ``None`` when no turn has more than one row (then groups alone decide).
    Labels start as the row numbers and take the minimum over each group
    and each turn in turn until nothing changes, which gives every
    connected component its smallest row.
    """
    role = pl.col("role").cast(pl.String)
    keys = (
        df.select(role, "group_id")
        .with_row_index("row")
        .with_columns(pl.col("row").cast(pl.Int64))
        .with_columns(
            pl.when(role == "user")
            .then(pl.col("row"))
            .forward_fill()
            .alias("opened_by")  # the latest user row at or before this row
        )
        .with_columns(
            pl.when((role == "user") | role.is_in(TURN_ROLES))
            .then(pl.col("opened_by"))
            .alias("turn")
        )
        .with_columns(pl.col("turn").replace(_turn_in_progress(df), None))
    )
    turn = keys.get_column("turn")
    if turn.drop_nulls().is_duplicated().sum() == 0:
        return None
    label = keys.get_column("row")
    links = [pl.col("turn")] + ([pl.col("group_id")] if grouped.any() else [])
    while True:
        step = keys.with_columns(label.alias("label"))
        for key in links:
            step = step.with_columns(
                pl.when(key.is_null())
                .then(pl.col("label"))
                .otherwise(pl.col("label").min().over(key))
                .alias("label")
            )
        new = step.get_column("label")
        if new.equals(label):
            return label.to_numpy()
        label = new
