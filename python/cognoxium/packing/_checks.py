"""Phase 1 of :func:`~cognoxium.packing.packer.pack`: check the request before any work.

The options are checked when they are made (:class:`~cognoxium.packing.options.PackOptions`);
here the budget is checked against them, then the item columns and their
types and the unique ids, in that order, so the same bad request always
fails with the same error.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

import numpy as np
import polars as pl

from cognoxium.exceptions import PackError, RankError
from cognoxium.items.schema import require_item_columns
from cognoxium.packing.options import PackOptions, check_budget
from cognoxium.tokens.profiles import TokenProfile

__all__ = [
    "PackCall",
    "check_call",
    "check_frame",
    "check_rank",
]


@dataclass(frozen=True, slots=True)
class PackCall:
    """One pack's budget and options, checked together, with its time and profile resolved.

    Attributes
    ----------
    budget
        The token budget, in tokens (>= 0).
    options
        The pack's options, as given.
    as_of
        The UTC time at which validity is evaluated (``options.as_of``, or
        the time the pack started).
    profile
        The token profile that costs items (``options.profile``).
    """

    budget: int
    options: PackOptions
    as_of: datetime
    profile: TokenProfile

    @property
    def item_budget(self) -> int:
        """The tokens the items may use: ``budget - options.reserve``."""
        return self.budget - self.options.reserve


def check_call(budget: object, options: PackOptions) -> PackCall:
    """Check ``budget`` against ``options`` and fix the pack's time.

    Raises
    ------
    PackError, BudgetError
        As :func:`~cognoxium.packing.options.check_budget`.
    """
    checked = check_budget(budget, options)
    timed = options.at_time()
    return PackCall(
        budget=checked,
        options=timed,
        as_of=cast(datetime, timed.as_of),
        profile=cast(TokenProfile, timed.profile),
    )


def check_frame(df: pl.DataFrame) -> None:
    """The checks of a request that read the frame: item columns, unique ids, finite ranks.

    Raises
    ------
    SchemaError
        If ``df`` lacks an item column or one has the wrong type.
    PackError
        If two rows share an id.
    RankError
        If a rank is infinite (see :func:`check_rank`).
    """
    _check_columns(df)
    _check_ids(df)
    check_rank(df.get_column("rank"), df.get_column("id"))


def check_rank(rank: pl.Series, ids: pl.Series) -> None:
    """Raise unless every rank is finite or missing (null or NaN, both read as unranked).

    A manifest records each item's rank as a JSON number, which has no
    infinity, and an infinite rank would order its items by chance among
    themselves, so a pack refuses one rather than write it as something else.

    Parameters
    ----------
    rank
        ``(n,)`` Float64 ranks, in the order of ``ids``.
    ids
        ``(n,)`` the items' ids.

    Raises
    ------
    RankError
        Naming the first item whose rank is infinite, and its rank.

    Examples
    --------
    >>> check_rank(pl.Series([1.0, None, float("nan")]), pl.Series(["a", "b", "c"]))
    >>> check_rank(pl.Series([1.0, float("-inf")]), pl.Series(["a", "b"]))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RankError: item 'b' has rank -inf: a rank must be a finite number, ...
    """
    infinite = np.isinf(rank.to_numpy())  # nulls read as NaN; numpy keeps this per pack cheap
    if not infinite.any():
        return
    at = int(np.flatnonzero(infinite)[0])
    raise RankError(
        f"item {ids[at]!r} has rank {rank[at]}: a rank must be a finite number, or null for "
        "unranked (rank with an expression that stays finite, or replace infinite values)"
    )


def _check_columns(df: pl.DataFrame) -> None:
    """Raise SchemaError unless every item column is present with its schema type."""
    require_item_columns(
        df.schema,
        missing_message="pack needs the item columns; missing {missing} (select them back, "
        "or use with_columns instead of select)",
    )


def _check_ids(df: pl.DataFrame) -> None:
    """Raise PackError if two rows share an id."""
    ids = df.get_column("id")
    if ids.n_unique() == ids.len():
        return
    repeated = ids.filter(ids.is_duplicated()).unique()
    raise PackError(
        f"duplicate ids {sorted(repeated.to_list())[:5]}: each item in a pack needs its own "
        "id (dedupe the frame, or give the copies distinct ids)"
    )
