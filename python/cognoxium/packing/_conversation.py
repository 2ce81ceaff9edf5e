"""Conversation integrity in selection: a pack that starts on a user message (``start_on``).

With ``start_on="user"`` the packed conversation, after its leading system
block (the ``system`` and ``developer`` messages before the first user
message), starts on a message rendered with the ``user`` chat role (a
``user``, ``document`` or ``memory`` item, see
:data:`cognoxium._columns.CHAT_ROLES`), in the order the pack is sent (the
input order, or a continuing pack's history first:
:attr:`~cognoxium.packing._exclusions.Exclusions.sent_first`). Every
selected unit with another row before the first such message (an assistant
reply whose question did not fit, a tool exchange) is in the way. The oldest
of them are dropped first, as few as let an older user message in (the
selection runs again without them, so the freed tokens go to the next
candidates; then the units sent after that user message are taken again
after it, newest first, before anything older, a truncatable one cut to
what is left): an agent loop whose
steps fill the budget keeps its task and its latest steps, the older steps
a hole. When no number of them does, all
are dropped. Those left before the first user message get reason
``before_first_user``; those after it were left out for the budget (a hole,
reason ``gap``). That repeats until the pack starts on a user message or
holds only its system block; each round drops at least one unit, so it ends.
This is LangChain's ``trim_messages(start_on="human")``, with the refill that
skip-and-continue selection gives. A tail that already holds a user message
is not refilled: the units before that message are dropped and the selection
runs again, with ``gaps="stop"`` taking nothing older (the tail stays
unbroken) and with ``gaps="fill"`` filling the room with older units.

With no start rule (either ``gaps`` mode), a selection that sends no user
message at all (an agent loop whose steps fill the budget) is dropped from
the same way (:func:`reach_user`), and kept as it was when no number of
drops lets a user message in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from cognoxium._columns import CHAT_ROLES
from cognoxium.exceptions import PackError
from cognoxium.packing._exclusions import Exclusions
from cognoxium.packing._model import REASON_CODE, Reason
from cognoxium.packing._selection import Queue
from cognoxium.packing._units import Units

__all__ = ["ChatRoles", "reach_user", "start_on_user", "user_units"]

_USER_ROLES = [role for role, chat in CHAT_ROLES.items() if chat == "user"]
_SYSTEM_ROLES = ["system", "developer"]


def start_on_user(
    df: pl.DataFrame,
    rows: Exclusions,
    units: Units,
    queue: Queue,
    included: np.ndarray,
    select: Callable[[Queue], np.ndarray],
    roles: ChatRoles,
    *,
    stop: bool = False,
) -> tuple[np.ndarray, Exclusions]:
    """Drop selected units before the pack's first user message, oldest first, and select again.

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
    roles
        The rows' chat roles (:meth:`ChatRoles.of` ``df``).
    stop
        ``gaps="stop"``. When the first selection's newest-first tail
        already holds a user message, the units before it are dropped and the
        selection runs again as it is: with ``stop`` nothing older is taken
        in their place (the tail stays unbroken, as ``trim_messages(
        start_on="human")`` leaves it), without it older units fill the
        room, each hole marked. The refill above, which takes the units
        after an older user message before anything else, is for a tail
        that holds none (an agent loop reaching back for its task).

    Returns
    -------
    included : numpy.ndarray
        ``(n_units,)`` bool: the units of the final selection.
    rows : Exclusions
        ``rows`` with the dropped units' rows sent before the first user
        message excluded as ``before_first_user`` (the others stay
        candidates left out, for the budget).

    Raises
    ------
    PackError
        If a required item would come before the first user message: it
        cannot be dropped, so the pack cannot start on a user message. A
        row a continuing pack pinned is not required (see
        :attr:`~cognoxium.packing._exclusions.Exclusions.required`): it is
        dropped like any other.
    """
    order = _sent_order(rows)

    def before_first_user(included: np.ndarray) -> np.ndarray:
        return _units_before_first_user(rows, units, included, roles, order)

    if len(before_first_user(included)) == 0:
        return included, rows
    places = np.empty(len(order), dtype=np.int64)
    places[order] = np.arange(len(order))
    has_user = user_units(roles.is_user, rows, units)
    lane = queue.order[queue.newest_first]
    lane = lane[~has_user[lane]]
    unit_places = _unit_places(places, units)
    dropped = np.zeros(units.n_units, dtype=bool)
    opens = _tail_opens(queue, included, has_user)
    while True:
        early = before_first_user(included)
        if len(early) == 0:
            break
        _refuse_required(df, rows, units, early)
        if opens:
            dropped[early] = True
            barred = dropped | _older_than_tail(queue, included, unit_places) if stop else dropped
            included = select(queue.without(barred))
            continue
        if not (has_user[queue.order] & ~included[queue.order]).any():  # none to let in
            dropped[early] = True
            included = select(queue.without(dropped))
            continue
        choice = _Oldest(early, lane, unit_places, dropped, has_user)
        included, dropped = _drop_oldest(choice, queue, select, before_first_user)
    if not dropped.any():
        return included, rows
    lost = _row_mask(units, dropped) & rows.eligible & _before(places, rows, units, included, roles)
    reason = np.where(lost, REASON_CODE[Reason.BEFORE_FIRST_USER], rows.reason)
    return included, replace(rows, reason=reason, eligible=rows.eligible & ~lost)


def _tail_opens(queue: Queue, included: np.ndarray, has_user: np.ndarray) -> bool:
    """Whether the selected newest-first units (the tail) hold a user message."""
    lane = queue.order[queue.newest_first]
    return bool((included[lane] & has_user[lane]).any())


def _older_than_tail(queue: Queue, included: np.ndarray, places: np.ndarray) -> np.ndarray:
    """``(n_units,)`` bool: the newest-first units left out sent before the oldest taken."""
    lane = queue.order[queue.newest_first]
    taken = lane[included[lane]]
    older = np.zeros(len(included), dtype=bool)
    if len(taken):
        first = places[taken].min()
        older[lane[~included[lane] & (places[lane] < first)]] = True
    return older


def reach_user(
    df: pl.DataFrame,
    rows: Exclusions,
    units: Units,
    queue: Queue,
    included: np.ndarray,
    select: Callable[[Queue], np.ndarray],
    roles: ChatRoles,
) -> tuple[np.ndarray, Exclusions]:
    """A selection that sends no user message: drop its oldest units to let one in, if any does.

    The default (no ``start_on``), with either ``gaps`` mode: an agent loop whose
    newest steps fill the budget would send them without their task, and a
    chat that ends on a long reply the reply without its question. As
    :func:`start_on_user` does, the oldest selected units are dropped, as
    few as let an older user message in (older than every conversation unit
    selected: a unit taken before a newer user message by its priority
    stays); when no number of them does (the
    user message does not fit even alone, or a required item would be
    dropped), the selection is made again as it was (the last selection
    made sets the pack's cuts). A selection that sends a user message (or
    a ``document`` or ``memory``, sent as one) is kept, and so is the
    selection of a pack that continues an earlier one (``rows.pinned`` set):
    the earlier pack made that choice, and its prefix stays. A pack with no
    conversation unit without a rank (``queue.newest_first``) is kept too: a
    rank is a relevance order, not a sequence, and it has no tail to reach back.

    Parameters and returns are those of :func:`start_on_user`; nothing is raised.
    """
    if rows.pinned is not None or not queue.newest_first.any():
        return included, rows
    if _sends_user(rows, units, included, roles):
        return included, rows
    if not _older_user_waits(rows, units, queue, included, roles):
        return included, rows
    try:
        reached, reached_rows = start_on_user(df, rows, units, queue, included, select, roles)
        if _sends_user(reached_rows, units, reached, roles):
            return reached, reached_rows
    except PackError:  # a required item comes first: it cannot be dropped
        pass
    return select(queue), rows  # selected again: the pack's cuts are those of the last selection


def _older_user_waits(
    rows: Exclusions, units: Units, queue: Queue, included: np.ndarray, roles: ChatRoles
) -> bool:
    """Whether a user message left out is older than every conversation unit selected.

    The selected units of the newest-first lane (conversation items
    without a rank) are then a tail that stopped short of it. A user
    message newer than one of them was passed over for a unit taken
    first by its priority: that choice is the caller's, and stays.
    """
    places = _unit_places(np.arange(len(rows.eligible)), units)
    lane = queue.order[queue.newest_first]
    chosen = lane[included[lane]]
    waiting = lane[(user_units(roles.is_user, rows, units) & ~included)[lane]]
    return bool(len(chosen) and len(waiting) and places[waiting].min() < places[chosen].min())


def _sends_user(rows: Exclusions, units: Units, included: np.ndarray, roles: ChatRoles) -> bool:
    """Whether a selection sends a row rendered with the ``user`` chat role."""
    return bool((roles.is_user & _row_mask(units, included) & rows.eligible).any())


@dataclass(frozen=True)
class _Oldest:
    """The units to drop so that an older user message fits: the oldest ``k`` of ``early``.

    Attributes
    ----------
    early
        ``(e,)`` int64: the selected units before the first user message, in
        the order sent.
    lane
        ``(m,)`` int64: the newest-first conversation units holding no user
        message.
    places
        ``(n_units,)`` int64: each unit's first place in the order sent.
    dropped
        ``(n_units,)`` bool: the units dropped before.
    users
        ``(n_units,)`` bool: the unit holds a user message.
    """

    early: np.ndarray
    lane: np.ndarray
    places: np.ndarray
    dropped: np.ndarray
    users: np.ndarray

    def drop(self, k: int) -> np.ndarray:
        """``(n_units,)`` bool: ``dropped`` with the oldest ``k`` of ``early``.

        With ``k < e``, the lane's units sent before the first unit kept go
        too: a step passed over before would otherwise come back and take
        the room freed for the user message.
        """
        tried = self.dropped.copy()
        tried[self.early[:k]] = True
        if k < len(self.early):
            kept = self.places[self.early[k]]
            tried[self.lane[self.places[self.lane] < kept]] = True
        return tried


def _drop_oldest(
    choice: _Oldest,
    queue: Queue,
    select: Callable[[Queue], np.ndarray],
    before_first_user: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The selection without the fewest of the oldest units before the first user message.

    Dropping the oldest of them (see :class:`_Oldest`) frees room for an
    older user message (the task of an agent loop, whose latest steps would
    all go with the rest); how many are dropped is found by doubling, then
    bisection, assuming more room never shuts the user message out. When
    no number does it, all of them are dropped.

    Returns
    -------
    included : numpy.ndarray
        ``(n_units,)`` bool: the selection.
    dropped : numpy.ndarray
        ``(n_units,)`` bool: the units dropped so far.
    """

    def attempt(k: int) -> tuple[np.ndarray, np.ndarray, bool]:
        tried = choice.drop(k)
        included = select(queue.without(tried))
        return included, tried, len(before_first_user(included)) == 0

    low, high, most = 0, 1, len(choice.early)
    while True:
        high = min(high, most)
        included, tried, starts = attempt(high)
        if starts or high == most:
            break
        low, high = high, 2 * high
    if not starts:  # dropping them all lets none in
        return included, tried
    while high - low > 1:
        middle = (low + high) // 2
        included, tried, starts = attempt(middle)
        if starts:
            high = middle
        else:
            low = middle
    if not starts:  # the last selection made sets the pack's cuts: make the best again
        included, tried, _ = attempt(high)
    return _refill(choice, queue, select, included, tried)


def _refill(
    choice: _Oldest,
    queue: Queue,
    select: Callable[[Queue], np.ndarray],
    included: np.ndarray,
    dropped: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Take back what fits of the dropped units sent after the selection's first user message.

    They were dropped so that the user message is taken; with it taken,
    the pack has a hole where they were. The selection is made again with
    that message (the task) first and then every unit sent after it,
    dropped or not, newest first, before anything older than the task (see
    :meth:`~cognoxium.packing._selection.Queue.deferring`): the newest steps
    of a task come before older ones and before the history that led to
    it, and what does not fit is passed over (the pack has a hole there
    already). A truncatable one is cut to what is left after the task,
    where, taken before it, it took the room the task needed. The units
    before the first user message stay dropped.

    Returns
    -------
    included : numpy.ndarray
        ``(n_units,)`` bool: the selection.
    dropped : numpy.ndarray
        ``(n_units,)`` bool: the units dropped and not taken back.
    """
    places = choice.places
    users = np.flatnonzero(choice.users & included)
    if not len(users):
        return included, dropped
    after = dropped & (places > places[users].min())
    if not after.any():
        return included, dropped
    # The user message the hole follows: the newest one sent before every unit dropped after.
    before = users[places[users] < places[after].min()]
    task = int(before[np.argmax(places[before])])
    back = np.zeros(len(dropped), dtype=bool)
    back[choice.lane[places[choice.lane] > places[task]]] = True
    refilled = select(queue.without(dropped & ~back).deferring(back, after=task))
    return refilled, dropped & ~refilled


@dataclass(frozen=True)
class ChatRoles:
    """The rows' chat roles, as the start rule reads them.

    Attributes
    ----------
    is_user
        ``(n,)`` bool: the row is rendered with the ``user`` chat role (a
        ``user``, ``document`` or ``memory`` item).
    is_system
        ``(n,)`` bool: the row is a ``system`` or ``developer`` message.
    """

    is_user: np.ndarray
    is_system: np.ndarray

    @classmethod
    def of(cls, df: pl.DataFrame) -> ChatRoles:
        """The chat roles of ``df``'s rows (``role`` is read)."""
        role = df.get_column("role").cast(pl.String)
        return cls(
            is_user=role.is_in(_USER_ROLES).to_numpy(),
            is_system=role.is_in(_SYSTEM_ROLES).to_numpy(),
        )


def user_units(is_user: np.ndarray, rows: Exclusions, units: Units) -> np.ndarray:
    """``(n_units,)`` bool: the unit holds a candidate rendered with the ``user`` chat role.

    Parameters
    ----------
    is_user
        ``(n,)`` bool: the row is rendered with the ``user`` chat role
        (:attr:`ChatRoles.is_user`).
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


def _row_mask(units: Units, per_unit: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the row's unit is set in ``per_unit`` (``(n_units,)`` bool)."""
    return per_unit if units.unit_of_row is None else per_unit[units.unit_of_row]


def _sent_order(rows: Exclusions) -> np.ndarray:
    """``(n,)`` int64: the rows in the order sent (history first, for a continuing pack)."""
    if rows.sent_first is None:
        return np.arange(len(rows.eligible))
    return np.concatenate([np.flatnonzero(rows.sent_first), np.flatnonzero(~rows.sent_first)])


def _unit_places(places: np.ndarray, units: Units) -> np.ndarray:
    """``(n_units,)`` int64: each unit's first place (``places``: each row's) in the order sent."""
    n = len(places)
    first = np.full(units.n_units, n, dtype=np.int64)
    np.minimum.at(first, _row_units(units, np.arange(n)), places)
    return first


def _before(
    places: np.ndarray, rows: Exclusions, units: Units, included: np.ndarray, roles: ChatRoles
) -> np.ndarray:
    """``(n,)`` bool: the row would be sent before the first user message of the selection."""
    users = places[_row_mask(units, included) & rows.eligible & roles.is_user]
    before: np.ndarray = places < (int(users.min()) if len(users) else len(places))
    return before


def _units_before_first_user(
    rows: Exclusions,
    units: Units,
    included: np.ndarray,
    roles: ChatRoles,
    order: np.ndarray,
) -> np.ndarray:
    """The included units with a non-system row before the first included user row, as sent.

    ``order`` is the rows in the order sent; the units are returned in it.
    """
    packed = order[included[_row_units(units, order)] & rows.eligible[order]]
    users = np.flatnonzero(roles.is_user[packed])
    lead = packed[: users[0] if len(users) else len(packed)]
    lead_units = _row_units(units, lead[~roles.is_system[lead]])
    _, first = np.unique(lead_units, return_index=True)
    return lead_units[np.sort(first)]


def _refuse_required(df: pl.DataFrame, rows: Exclusions, units: Units, early: np.ndarray) -> None:
    member, _ = units.rows_of(early)
    required = member[rows.required[member]]
    if len(required):
        ids = sorted(df.get_column("id").gather(required).to_list())
        raise PackError(
            f"required items {ids} come before the first user message, and start_on='user' "
            "would drop them; lower their retention, or pack without start_on"
        )
