"""Phase 1 of :func:`~cognoxium.packing.packer.pack`: check the request before any work.

The checks run in a fixed order (budget, reply reserve, overflow mode,
conversation options, token profile, ``as_of``, item columns and their
types, unique ids), so the same bad request always fails with the same
error.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import numpy as np
import polars as pl

from cognoxium.exceptions import BudgetError, PackError, RankError
from cognoxium.items._checks import MAX_INT
from cognoxium.items.schema import require_item_columns
from cognoxium.tokens.profiles import TokenProfile, get_profile

__all__ = [
    "OVERFLOW_MODES",
    "START_ON",
    "Overflow",
    "Request",
    "check_frame",
    "check_options",
    "check_rank",
]

Overflow = Literal["error", "truncate"]
OVERFLOW_MODES: tuple[Overflow, ...] = ("error", "truncate")
"""What a pack does when its required items alone exceed the budget."""

START_ON: tuple[str, ...] = ("user",)
"""The values ``pack(start_on=...)`` takes besides ``None``."""


@dataclass(frozen=True)
class Request:
    """A checked pack request.

    Attributes
    ----------
    budget
        The token budget, in tokens (>= 0).
    profile
        The token profile that costs items.
    as_of
        The UTC time at which validity is evaluated.
    reserve
        Tokens kept for the reply (``0 <= reserve <= budget``); the items fit
        in ``budget - reserve``.
    overflow
        ``"error"`` or ``"truncate"``: what happens when the required items
        alone exceed ``budget - reserve``.
    turns
        Whole turns are packing units.
    start_on
        ``"user"``: the pack starts on a user message after its system
        block; ``None``: no such rule.
    """

    budget: int
    profile: TokenProfile
    as_of: datetime
    reserve: int = 0
    overflow: Overflow = "error"
    turns: bool = False
    start_on: str | None = None

    @property
    def item_budget(self) -> int:
        """The tokens the items may use: ``budget - reserve``."""
        return self.budget - self.reserve


def check_options(
    budget: object,
    profile: str | TokenProfile,
    as_of: datetime | None,
    *,
    reserve: object = 0,
    overflow: object = "error",
    turns: object = False,
    start_on: object = None,
) -> Request:
    """Check the budget, the reserve, the overflow mode, the token profile and ``as_of``.

    Parameters
    ----------
    budget
        The token budget: a whole number of tokens from 0 to 2**63 - 1 (``bool``
        is refused).
    profile
        A token profile or the name of a built-in one.
    as_of
        A timezone-aware time, or ``None`` for now (UTC).
    reserve
        Tokens kept for the reply: a whole number from 0 to ``budget``.
    overflow
        ``"error"`` or ``"truncate"``.
    turns
        ``True`` or ``False``.
    start_on
        ``None`` or one of :data:`START_ON`.

    Returns
    -------
    Request
        The budget and reserve as ``int``, the resolved profile and ``as_of`` in UTC.

    Raises
    ------
    BudgetError
        If ``reserve`` is not a whole number from 0 to ``budget`` (its
        ``costs`` is empty).
    PackError
        If ``budget`` is not a whole number from 0 to 2**63 - 1, ``overflow``
        is not ``"error"`` or ``"truncate"``, ``turns`` is not a bool,
        ``start_on`` is not ``None`` or ``"user"`` or ``as_of`` is not a
        ``datetime`` (ISO text included) or is naive.
    """
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int | np.integer)
        or not 0 <= budget <= MAX_INT
    ):
        raise PackError(
            f"budget must be a whole number of tokens from 0 to 2**63 - 1 ({MAX_INT}), "
            f"got {budget!r}",
            params={"budget": budget if isinstance(budget, int) else repr(budget)},
        )
    if (
        isinstance(reserve, bool)
        or not isinstance(reserve, int | np.integer)
        or not 0 <= reserve <= budget
    ):
        raise BudgetError(
            f"reserve must be a whole number of tokens from 0 to the budget ({budget}), "
            f"got {reserve!r}: the reply reserve is taken out of the budget",
            costs={},
            budget=int(budget),
            code="budget.reserve_invalid",
            params={"reserve": reserve if isinstance(reserve, int) else repr(reserve)},
        )
    if overflow not in OVERFLOW_MODES:
        raise PackError(f"overflow must be 'error' or 'truncate', got {overflow!r}")
    if not isinstance(turns, bool):
        raise PackError(f"turns must be True or False, got {turns!r}")
    if start_on is not None and start_on not in START_ON:
        raise PackError(
            f"start_on must be None or one of {list(START_ON)}, got {start_on!r}; "
            "'user' makes the pack start on a user message after its system block"
        )
    checked = Request(
        budget=int(budget),
        profile=profile if isinstance(profile, TokenProfile) else get_profile(profile),
        as_of=_as_utc(as_of),
        reserve=int(reserve),
        overflow="truncate" if overflow == "truncate" else "error",
        turns=turns,
        start_on=None if start_on is None else str(start_on),
    )
    return checked


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


def _as_utc(value: object) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if not isinstance(value, datetime):
        raise PackError(
            f"as_of must be a timezone-aware datetime (UTC) or None, got {type(value).__name__} "
            f"{value!r}; for ISO 8601 text use datetime.fromisoformat(text)",
            params={"as_of": repr(value)},
        )
    if value.tzinfo is None:
        raise PackError("as_of must be timezone-aware (UTC)")
    return value.astimezone(UTC)


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
