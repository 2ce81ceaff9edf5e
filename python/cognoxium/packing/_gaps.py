"""Gaps in a packed conversation: stop at the first miss, or fill and mark each hole.

The conversation units without a rank are taken newest first (see
:mod:`cognoxium.packing._selection`). With ``gaps="stop"`` the first of
them, in that order, that does not fit ends them: no older one is taken, so
the pack holds an unbroken tail of the conversation, as LangChain's
``trim_messages(strategy="last")`` does. The selection runs again without
the units after that miss, so what they would have used goes to the next
candidates of other roles. One more selection is enough: the greedy choice
up to the miss depends only on the units before it, which do not change.
The miss keeps reason ``over_budget`` (or ``group_over_budget``); the older
units left out get ``before_tail`` (:func:`mark_tail`): they were left out
for the tail, whether or not they would have fit. One exception: a miss
that holds no user message (a tool exchange, a reply), newer than every
user message taken, does not end the tail: it is passed over, a hole, and
the tail runs on to a user message (:func:`tail_end`). Otherwise a
half-finished agent loop, its task followed by tool exchanges, lost its task
when one tool result did not fit: the tail held its latest steps alone, and
a pack that starts on a user message (``start_on="user"``, the Anthropic
target) dropped those too. A user message that does not fit still ends the
tail; when the pack then sends no user message at all (the steps fill the
budget), its oldest units make room for one
(:func:`~cognoxium.packing._conversation.reach_user`).

With ``gaps="fill"`` a unit that does not fit is skipped and older ones are
tried. Either way a hole is marked: among the rows of those units, in input
order, each run of rows left out for the budget between two packed rows is
a gap (a required row older than the tail can make one under ``"stop"`` too).
Its rows get reason ``gap`` in place of ``over_budget``,
``group_over_budget`` or ``before_tail``, and the manifest lists it
(:class:`~cognoxium.packing._model.GapRecord`).

Before::

    newest first: u9 (fits) u8 (too long) u7 (fits) ...

After, ``"stop"``: ``u9``, ``u8`` is over budget and ``u7``, ... are before
the tail; ``"fill"``: ``u9``, ``u7``, ... and ``u8`` is a gap.

An agent loop, ``"stop"``::

    newest first: t9 (fits) t8 (too long) u7 (fits) a6 (too long) u5 ...
    packed: u7 t9; t8 a gap, a6 over budget, u5 ... before the tail

With a ``gap_note`` each hole gets a message in its place (:func:`place_notes`):
after the packed messages of the input before it, and after the tool
results that follow them, so never between a call and its results. The
selection then keeps the notes' tokens out of the budget: it runs again
with the notes of its holes kept aside until its holes' notes fit in what
it kept (a few rounds; see ``PackScope``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from cognoxium.packing._model import REASON_CODE, GapRecord, Reason
from cognoxium.packing._selection import Decisions, Queue
from cognoxium.packing._units import Units
from cognoxium.tokens.profiles import TokenProfile

__all__ = [
    "mark_gaps",
    "mark_tail",
    "note_message",
    "notes_tokens",
    "place_notes",
    "stop_at_first_miss",
    "tail_end",
]

NOTE_ROLES = {"openai": "system", "anthropic": "user"}
"""The role of a gap note per target: Anthropic has no system message in its conversation."""

_BUDGET_REASONS = (REASON_CODE[Reason.OVER_BUDGET], REASON_CODE[Reason.GROUP_OVER_BUDGET])
_LEFT_FOR_BUDGET = (*_BUDGET_REASONS, REASON_CODE[Reason.BEFORE_TAIL])


def stop_at_first_miss(
    select: Callable[[Queue], np.ndarray],
    opens: np.ndarray | None = None,
) -> Callable[[Queue], np.ndarray]:
    """``select`` that ends the newest-first units at the first that does not fit.

    Parameters
    ----------
    select
        Selects the units of a queue under the pack's budget:
        ``(n_units,)`` bool, the unit is in the pack.
    opens
        ``(n_units,)`` bool: the unit holds a user message, or ``None``.
        When given, a miss holding none, newer than every unit taken that
        holds one, is passed over (see :func:`tail_end`).

    Returns
    -------
    Callable
        The same selection, after which no newest-first unit (see
        :attr:`~cognoxium.packing._selection.Queue.newest_first`) that
        comes after the miss ending the tail is in the pack.
    """

    def stopping(queue: Queue) -> np.ndarray:
        included = select(queue)
        run = queue.order[queue.newest_first]
        taken = included[run]
        end = tail_end(~taken, taken, None if opens is None else opens[run], run)
        if end is None:
            return included
        later = run[end + 1 :]
        if not included[later].any():
            return included
        dropped = np.zeros(len(included), dtype=bool)
        dropped[later] = True
        return select(queue.without(dropped))

    return stopping


def tail_end(
    missed: np.ndarray,
    taken: np.ndarray,
    opens: np.ndarray | None = None,
    units: np.ndarray | None = None,
) -> int | None:
    """Where the newest-first units' tail ends: the place of the miss that ends it.

    Parameters
    ----------
    missed
        ``(k,)`` bool: the newest-first units, newest first, left out for
        the budget.
    taken
        ``(k,)`` bool: the same units in the pack.
    opens
        ``(k,)`` bool: the unit holds a user message, or ``None``. When
        given, a miss that holds none (a tool exchange, a reply), newer
        than every unit taken that holds one, is passed over: a tail of
        tool exchanges whose task lies past a tool result too long to fit
        would hold no user message.
    units
        ``(k,)`` int64: the units' numbers, in the order of their first row,
        which tell which is newer; ``None``: the units are newest first. A
        continuing pack's queue puts the units it pins first, whatever their
        age.

    Returns
    -------
    int or None
        The place of the miss, ``None`` when no miss ends the tail.

    Examples
    --------
    >>> missed = np.array([False, True, False, False])  # the second newest did not fit
    >>> taken = ~missed
    >>> tail_end(missed, taken)
    1
    >>> print(tail_end(missed, taken, opens=np.array([False, False, True, False])))
    None
    >>> tail_end(missed, taken, opens=np.array([True, False, False, False]))
    1
    >>> tail_end(missed, taken, opens=np.array([False, True, True, False]))  # a user message
    1

    The task pinned first, in a continuing pack: the miss is newer than it.

    >>> opens = np.array([True, False, False, False])
    >>> print(tail_end(missed, taken, opens, units=np.array([1, 9, 7, 5])))
    None
    """
    if opens is None:
        ends = missed
    else:
        age = -np.arange(len(missed)) if units is None else units
        users = age[taken & opens]
        newer = age > users.max() if len(users) else np.ones(len(missed), dtype=bool)
        ends = missed & (opens | ~newer)
    return int(np.argmax(ends)) if ends.any() else None


def mark_tail(
    queue: Queue, units: Units, decisions: Decisions, opens: np.ndarray | None = None
) -> Decisions:
    """Give reason ``before_tail`` to the newest-first units left out after the tail ends.

    With ``gaps="stop"`` the first newest-first unit, in selection order,
    left out for the budget ends the tail (with ``opens``, the first not
    passed over: see :func:`tail_end`); it keeps its reason
    (``over_budget`` or ``group_over_budget``) and the later ones left out
    for the budget were left out for the tail.

    Parameters
    ----------
    queue
        The candidates in selection order (its newest-first units are read).
    units
        The packing units.
    decisions
        Every row's decision.
    opens
        ``(n_units,)`` bool: the unit holds a user message, or ``None``.

    Returns
    -------
    Decisions
        ``decisions`` with reason ``before_tail`` on the rows of the
        newest-first units after the miss ending the tail that were left out
        for the budget; ``decisions`` itself when there are none.
    """
    newest = queue.order[queue.newest_first]
    if len(newest) == 0:
        return decisions
    rows, starts = units.rows_of(newest)
    left = ~decisions.included[rows] & np.isin(decisions.reason[rows], _BUDGET_REASONS)
    missed = np.logical_or.reduceat(left, starts)
    taken = np.logical_or.reduceat(decisions.included[rows], starts)
    end = tail_end(missed, taken, None if opens is None else opens[newest], newest)
    if end is None:
        return decisions
    unit_at = np.repeat(np.arange(len(newest)), np.diff(np.append(starts, len(rows))))
    after = left & (unit_at > end)
    if not after.any():
        return decisions
    reason = decisions.reason.copy()
    reason[rows[after]] = REASON_CODE[Reason.BEFORE_TAIL]
    return replace(decisions, reason=reason)


def mark_gaps(
    queue: Queue, units: Units, decisions: Decisions
) -> tuple[Decisions, list[GapRecord]]:
    """Find the holes among the newest-first units' rows and give their rows reason ``gap``.

    Parameters
    ----------
    queue
        The candidates in selection order (its newest-first units are read).
    units
        The packing units.
    decisions
        Every row's decision.

    Returns
    -------
    decisions : Decisions
        ``decisions`` with reason ``gap`` on the rows of each hole.
    gaps : list of GapRecord
        The holes, in input order.
    """
    newest = queue.order[queue.newest_first]
    if len(newest) == 0:
        return decisions, []
    rows, _ = units.rows_of(newest)
    rows = np.sort(rows)
    packed = decisions.included[rows]
    if packed.sum() < 2:
        return decisions, []
    at = np.flatnonzero(packed)
    inside = np.arange(at[0], at[-1] + 1)
    left = inside[~packed[inside] & np.isin(decisions.reason[rows[inside]], _LEFT_FOR_BUDGET)]
    if len(left) == 0:
        return decisions, []
    breaks = np.flatnonzero(np.diff(left) != 1) + 1
    records = [
        GapRecord(first=int(rows[run[0]]), last=int(rows[run[-1]]), items=len(run))
        for run in np.split(left, breaks)
    ]
    reason = decisions.reason.copy()
    reason[rows[left]] = REASON_CODE[Reason.GAP]
    return replace(decisions, reason=reason), records


def note_message(template: str, gap: GapRecord, target: str) -> dict[str, Any]:
    """The message put in place of ``gap``: ``template`` with ``{n}`` its items.

    Examples
    --------
    >>> gap = GapRecord(first=3, last=4, items=2)
    >>> note_message("({n} earlier messages omitted)", gap, "openai")
    {'role': 'system', 'content': '(2 earlier messages omitted)'}
    """
    return {"role": NOTE_ROLES[target], "content": template.format(n=gap.items)}


def notes_tokens(
    template: str, gaps: Sequence[GapRecord], target: str, profile: TokenProfile
) -> int:
    """What the notes of ``gaps`` cost together, in tokens (messages add up)."""
    return sum(profile.message_tokens(note_message(template, gap, target)) for gap in gaps)


def place_notes(
    template: str,
    gaps: Sequence[GapRecord],
    selected: np.ndarray,
    tool: np.ndarray,
    target: str,
    profile: TokenProfile,
    room: int,
    continued: np.ndarray | None = None,
) -> tuple[list[GapRecord], list[tuple[int, dict[str, Any]]], int]:
    """Put a note in place of each hole, in input order, while the notes fit ``room``.

    Parameters
    ----------
    template
        The ``gap_note`` text (``{n}``: the hole's items).
    gaps
        The holes, in input order.
    selected
        ``(k,)`` int64: the packed rows, in input order (the pack's order).
    tool
        ``(n,)`` bool: the row is sent as a tool result.
    target
        ``"openai"`` or ``"anthropic"``: the notes' role (:data:`NOTE_ROLES`).
    profile
        Costs the notes.
    room
        Tokens of the budget left for the notes; a note that does not fit
        what the notes before it left is not put (its record keeps
        ``note_at=None``).
    continued
        ``(n,)`` bool: the row is a later part of a message sent as one with
        the part before it (not a message of its own); ``None``: none is.

    Returns
    -------
    gaps : list of GapRecord
        The holes with ``note_at`` (index in the pack's messages) and ``note_tokens``.
    notes : list of (int, dict)
        Each note's index in the pack's messages and the message, in order.
    tokens : int
        What the notes put cost, in tokens.
    """
    records: list[GapRecord] = []
    notes: list[tuple[int, dict[str, Any]]] = []
    spent = 0
    for gap in gaps:
        message = note_message(template, gap, target)
        cost = profile.message_tokens(message)
        if spent + cost > room:
            records.append(gap)
            continue
        at = int(np.searchsorted(selected, gap.last, side="right"))
        while at < len(selected) and tool[selected[at]]:
            at += 1  # after the results of the turn before the hole
        if continued is not None:  # the later parts of a message are not messages
            at -= int(continued[selected[:at]].sum())
        at += len(notes)
        spent += cost
        notes.append((at, message))
        records.append(gap.model_copy(update={"note_at": at, "note_tokens": cost}))
    return records, notes, spent
