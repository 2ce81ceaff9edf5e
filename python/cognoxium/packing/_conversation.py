"""Conversation integrity in selection: a pack that starts on a user message (``start_on``).

With ``start_on="user"`` the packed conversation, after its leading system
block (the ``system`` and ``developer`` messages before the first user
message), starts on a message rendered with the ``user`` chat role (a
``user``, ``document`` or ``memory`` item, see
:data:`cognoxium._columns.CHAT_ROLES`), in the order the pack is sent (the
input order, or a continuing pack's history first:
:attr:`~cognoxium.packing._exclusions.Exclusions.sent_first`). Every
selected unit with another row before the first such message (an assistant
reply whose question did not fit, a tool exchange) is dropped with reason
``before_first_user``, and the
selection runs again without the dropped units, so the freed tokens go to the
next candidates. That repeats until the pack starts on a user message or
holds only its system block; each round drops at least one unit, so it ends.
This is LangChain's ``trim_messages(start_on="human")``, with the refill that
skip-and-continue selection gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import polars as pl

from cognoxium._columns import CHAT_ROLES
from cognoxium.exceptions import PackError
from cognoxium.packing._exclusions import Exclusions
from cognoxium.packing._model import REASON_CODE, Reason
from cognoxium.packing._selection import Queue
from cognoxium.packing._units import Units

__all__ = ["start_on_user", "user_rows", "user_units"]

_USER_ROLES = [role for role, chat in CHAT_ROLES.items() if chat == "user"]
_SYSTEM_ROLES = ["system", "developer"]


def start_on_user(
    df: pl.DataFrame,
    rows: Exclusions,
    units: Units,
    queue: Queue,
    included: np.ndarray,
    select: Callable[[Queue], np.ndarray],
) -> tuple[np.ndarray, Exclusions]:
    """Drop the selected units before the pack's first user message and select again.

    Parameters
    ----------
    df
        The items, ``n`` rows in input order (``id`` and ``role`` are read).
    rows
        The exclusions.
    units
        The packing units.
    queue
        The candidates in selection order.
    included
        ``(n_units,)`` bool: the units of the first selection.
    select
        Selects the units of a queue under the pack's budget (the pack's
        selection, with its costs, reserve and truncation).

    Returns
    -------
    included : numpy.ndarray
        ``(n_units,)`` bool: the units of the final selection.
    rows : Exclusions
        ``rows`` with the dropped units' rows excluded as ``before_first_user``.

    Raises
    ------
    PackError
        If a required item would come before the first user message: it
        cannot be dropped, so the pack cannot start on a user message. A
        row a continuing pack pinned is not required (see
        :attr:`~cognoxium.packing._exclusions.Exclusions.required`): it is
        dropped like any other.
    """
    role = df.get_column("role").cast(pl.String)
    is_user = user_rows(df)
    is_system = role.is_in(_SYSTEM_ROLES).to_numpy()
    dropped = np.zeros(units.n_units, dtype=bool)
    while True:
        early = _units_before_first_user(rows, units, included, is_user, is_system)
        if len(early) == 0:
            break
        _refuse_required(df, rows, units, early)
        dropped[early] = True
        queue = queue.without(dropped)
        included = select(queue)
    if not dropped.any():
        return included, rows
    lost = (dropped if units.unit_of_row is None else dropped[units.unit_of_row]) & rows.eligible
    reason = np.where(lost, REASON_CODE[Reason.BEFORE_FIRST_USER], rows.reason)
    return included, replace(rows, reason=reason, eligible=rows.eligible & ~lost)


def user_rows(df: pl.DataFrame) -> np.ndarray:
    """``(n,)`` bool: the row is rendered with the ``user`` chat role (``role`` is read)."""
    is_user: np.ndarray = df.get_column("role").cast(pl.String).is_in(_USER_ROLES).to_numpy()
    return is_user


def user_units(is_user: np.ndarray, rows: Exclusions, units: Units) -> np.ndarray:
    """``(n_units,)`` bool: the unit holds a candidate rendered with the ``user`` chat role.

    Parameters
    ----------
    is_user
        ``(n,)`` bool: the row is rendered with the ``user`` chat role
        (:func:`user_rows`).
    rows
        The exclusions (a candidate is ``eligible``).
    units
        The packing units.
    """
    candidates: np.ndarray = is_user & rows.eligible
    if units.unit_of_row is None:
        return candidates
    opens = np.zeros(units.n_units, dtype=bool)
    opens[units.unit_of_row[candidates]] = True
    return opens


def _row_units(units: Units, rows: np.ndarray) -> np.ndarray:
    return rows if units.unit_of_row is None else units.unit_of_row[rows]


def _units_before_first_user(
    rows: Exclusions,
    units: Units,
    included: np.ndarray,
    is_user: np.ndarray,
    is_system: np.ndarray,
) -> np.ndarray:
    """The included units with a non-system row before the first included user row, as sent."""
    packed = np.flatnonzero(included[_row_units(units, np.arange(len(is_user)))] & rows.eligible)
    if rows.sent_first is not None:
        first = rows.sent_first[packed]
        packed = np.concatenate([packed[first], packed[~first]])
    users = np.flatnonzero(is_user[packed])
    lead = packed[: users[0] if len(users) else len(packed)]
    return np.unique(_row_units(units, lead[~is_system[lead]]))


def _refuse_required(df: pl.DataFrame, rows: Exclusions, units: Units, early: np.ndarray) -> None:
    member, _ = units.rows_of(early)
    required = member[rows.required[member]]
    if len(required):
        ids = sorted(df.get_column("id").gather(required).to_list())
        raise PackError(
            f"required items {ids} come before the first user message, and start_on='user' "
            "would drop them; lower their retention, or pack without start_on"
        )
