"""Gaps in a packed conversation: stop at the first miss, or fill and mark each hole.

The conversation units without a rank are taken newest first (see
:mod:`cognoxium.packing._selection`). With ``gaps="stop"`` the first of
them, in that order, that does not fit ends them: no older one is taken, so
the pack holds an unbroken tail of the conversation, as LangChain's
``trim_messages(strategy="last")`` does. The selection runs again without
the units after that miss, so what they would have used goes to the next
candidates of other roles. One more selection is enough: the greedy choice
up to the miss depends only on the units before it, which do not change.

With ``gaps="fill"`` a unit that does not fit is skipped and older ones are
tried. Either way a hole is marked: among the rows of those units, in input
order, each run of rows left out for the budget between two packed rows is
a gap (a required row older than the tail can make one under ``"stop"`` too).
Its rows get reason ``gap`` in place of ``over_budget`` or
``group_over_budget``, and the manifest lists it
(:class:`~cognoxium.packing._model.GapRecord`).

Before::

    newest first: u9 (fits) u8 (too long) u7 (fits) ...

After, ``"stop"``: ``u9``; ``"fill"``: ``u9``, ``u7``, ... and ``u8`` is a gap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from cognoxium.packing._model import REASON_CODE, GapRecord, Reason
from cognoxium.packing._selection import Decisions, Queue
from cognoxium.packing._units import Units

__all__ = ["mark_gaps", "stop_at_first_miss"]

_BUDGET_REASONS = (REASON_CODE[Reason.OVER_BUDGET], REASON_CODE[Reason.GROUP_OVER_BUDGET])


def stop_at_first_miss(
    select: Callable[[Queue], np.ndarray],
) -> Callable[[Queue], np.ndarray]:
    """``select`` that ends the newest-first units at the first that does not fit.

    Parameters
    ----------
    select
        Selects the units of a queue under the pack's budget:
        ``(n_units,)`` bool, the unit is in the pack.

    Returns
    -------
    Callable
        The same selection, after which no newest-first unit (see
        :attr:`~cognoxium.packing._selection.Queue.newest_first`) that
        comes after one left out is in the pack.
    """

    def stopping(queue: Queue) -> np.ndarray:
        included = select(queue)
        run = queue.order[queue.newest_first]
        missed = ~included[run]
        if not missed.any():
            return included
        later = run[int(np.argmax(missed)) + 1 :]
        if not included[later].any():
            return included
        dropped = np.zeros(len(included), dtype=bool)
        dropped[later] = True
        return select(queue.without(dropped))

    return stopping


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
    left = inside[~packed[inside] & np.isin(decisions.reason[rows[inside]], _BUDGET_REASONS)]
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
