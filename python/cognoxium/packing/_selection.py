"""Phase 4 of :func:`~cognoxium.packing.packer.pack`: choose what fits, then decide every row.

Required units go in first, whole; if they alone exceed the budget,
:class:`~cognoxium.exceptions.BudgetError` names them and nothing is packed.
Then preferred units before optional ones; within a tier the order is rank
desc, priority desc, token cost asc, id asc; a unit that does not fit is
skipped (``over_budget``) and the next one is tried. Conversation units
(every row ``user``, ``assistant`` or ``tool``) without a rank are the
exception: they come after the other units of their tier and priority and
are taken newest first (the last in input order first), as LangChain's
``trim_messages(strategy="last")`` reads a history; with ``gaps="stop"``
the first of them that does not fit ends them (see
:mod:`cognoxium.packing._gaps`). A unit's tier is its
strongest member retention, its rank and priority the members' highest, its
cost their sum, its id the smallest member id.

A unit is *examined* when the selection compares its exact cost with the
budget left: a required unit, and a unit whose proven lower bound does not
exceed the budget left at its turn (one whose bound does exceed it cannot
fit, and is skipped unread). A manifest records the tokens of the rows of
examined units only, so what it reports does not depend on how many costs
were counted ahead, nor on costs that earlier packs over the same scope
counted. When every candidate's cost is known already (a batch over one
scope counts them all first), the queue is in the whole order and
:func:`_select_known` makes the same choice with array operations.

With a :class:`~cognoxium.packing._truncation.Cutter`, a unit with
truncatable members that does not fit whole is cut to fit what is left, if
it can be, when the selection reaches it; with ``overflow="truncate"``,
required units that do not fit are cut first (see
:mod:`cognoxium.packing._truncation`).
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from cognoxium.exceptions import BudgetError
from cognoxium.packing._costing import Rendering, UnitCosts
from cognoxium.packing._exclusions import Exclusions
from cognoxium.packing._model import REASON_CODE, UNSET, Reason
from cognoxium.packing._units import Units

if TYPE_CHECKING:
    from cognoxium.packing._truncation import Cutter

__all__ = [
    "CONVERSATION_ROLES",
    "Decisions",
    "Queue",
    "decide_rows",
    "ids_in_order",
    "order_units",
    "select_units",
]

CONVERSATION_ROLES: tuple[str, ...] = ("user", "assistant", "tool")
"""The roles of a conversation's items; their units without a rank are taken newest first."""

_EAGER_BOUNDS = 4_096  # frames up to this many rows get every lower bound at once
_NULL_PRIORITY = np.iinfo(np.int64).max  # a null priority sorts first, as Polars sorts nulls


@dataclass(frozen=True)
class Queue:
    """The candidate units in selection order.

    Attributes
    ----------
    order
        ``(m,)`` int64: the ``m`` eligible units sorted by tier, rank desc,
        priority desc (ties in unit order).
    keys
        ``(m,)`` arrays ``tier`` (int64), ``rank`` (float64, ``-inf`` for a
        null or NaN rank), ``priority`` (int64) and ``recency`` (int64): the
        sort keys of ``order``. ``recency`` is 0 for a unit in the design's
        order and ``n_units - u`` for a conversation unit ``u`` without a
        rank, so those come after the others of their tier and priority,
        newest first, each a block of its own.
    candidates
        ``(m,)`` int64: the eligible units in unit order.
    cheap
        ``(n_units,)`` int64: each unit's cheap lower bound on its cost, in
        tokens (0 for a unit that is not a candidate).
    unit_ids
        ``(n_units,)`` int64: the place of each unit's id in the order of
        the ids (UTF-8 byte order, which is code point order); 0 for a unit
        that is not a candidate.
    n_required
        How many units of ``order`` (its head) are required.
    whole
        ``order`` is the whole selection order: every candidate's cost was
        known, and cost asc, id asc order the units of equal keys.
    """

    order: np.ndarray
    keys: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    candidates: np.ndarray
    cheap: np.ndarray
    unit_ids: np.ndarray
    n_required: int
    whole: bool = False

    @property
    def newest_first(self) -> np.ndarray:
        """``(m,)`` bool: the unit of ``order`` at each place is taken newest first."""
        taken: np.ndarray = self.keys[3] > 0
        return taken

    def deferring(self, later: np.ndarray, after: int) -> Queue:
        """The queue with the units marked in ``later`` (``(n_units,)`` bool) taken after ``after``.

        They keep their order among themselves, right after unit ``after``
        (or last, when it is not in the queue), and are no longer taken
        newest first (their ``recency`` is negated, so each stays a block of
        its own): a selection takes what fits of them with what is left
        then, outside the tail rule of ``gaps="stop"``. None of them may be
        required.
        """
        move = later[self.order]
        if not move.any():
            return self
        stay = np.flatnonzero(~move)
        at = np.flatnonzero(self.order[stay] == after)
        cut = int(at[0]) + 1 if len(at) else len(stay)
        perm = np.concatenate([stay[:cut], np.flatnonzero(move), stay[cut:]])
        tier, rank, priority, recency = (key[perm] for key in self.keys)
        recency = np.where(move[perm], -np.abs(recency), recency)
        return replace(
            self, order=self.order[perm], keys=(tier, rank, priority, recency), whole=False
        )

    def without(self, dropped: np.ndarray) -> Queue:
        """The queue without the units marked in ``dropped`` (``(n_units,)`` bool)."""
        keep = ~dropped[self.order]
        tier, rank, priority, recency = (key[keep] for key in self.keys)
        cheap = np.where(dropped, 0, self.cheap)
        return Queue(
            order=self.order[keep],
            keys=(tier, rank, priority, recency),
            candidates=self.candidates[~dropped[self.candidates]],
            cheap=cheap,
            unit_ids=self.unit_ids,
            n_required=int((tier == 0).sum()),
            whole=self.whole,
        )


@dataclass(frozen=True)
class Decisions:
    """Every row's decision.

    Attributes
    ----------
    reason
        ``(n,)`` int64 reason codes, one for every row.
    included
        ``(n,)`` bool: the row is in the pack.
    selected
        ``(k,)`` int64: the included rows, in input order (the pack's order).
    pack_position
        ``(n,)`` int64: a row's index in the pack, or ``UNSET``.
    tokens
        ``(n,)`` int64: a row's cost in tokens, or ``UNSET`` when its unit was
        not examined (see the module's notes).
    used_tokens
        Tokens of the included rows plus ``pack_overhead``.
    pack_overhead
        The reply priming, in tokens, paid once when the pack is not empty.
    """

    reason: np.ndarray
    included: np.ndarray
    selected: np.ndarray
    pack_position: np.ndarray
    tokens: np.ndarray
    used_tokens: int
    pack_overhead: int


def order_units(
    df: pl.DataFrame,
    rows: Exclusions,
    units: Units,
    rendering: Rendering,
    rank: pl.Series | None = None,
    id_order: np.ndarray | None = None,
    costs: np.ndarray | None = None,
) -> Queue:
    """Sort the eligible units by tier, rank desc, priority desc (and cost and id, if known).

    Conversation units without a rank come after the other units of their
    tier and priority, newest first (see :attr:`Queue.keys`).

    Parameters
    ----------
    df
        The items, ``n`` rows (``rank``, ``priority`` and ``id`` are read; a
        null or NaN rank sorts last).
    rows
        The exclusions: only eligible rows form candidate units.
    units
        The packing units.
    rendering
        The rows' cheap cost bounds.
    rank
        ``(n,)`` Float64: the rows' rank, read instead of ``df``'s ``rank``
        column (``None``: that column).
    id_order
        ``(n,)`` int64: each row's place in the order of the ids (see
        :func:`ids_in_order`); ``None``: found here.
    costs
        ``(n_units,)`` int64: the units' exact costs in tokens, ``UNSET``
        where not known (``None``: none is). When every candidate's is
        known, cost asc and id asc order the units of equal keys too, and
        the queue is ``whole``.

    Returns
    -------
    Queue
        The candidates in selection order, with their keys, cheap bounds and ids.
    """
    rank_values = df.get_column("rank") if rank is None else rank
    if id_order is None:
        id_order = ids_in_order(df)
    conversation, priorities = _row_keys(df, rank_values)
    if units.unit_of_row is not None:
        keys = _unit_keys(rows, units, rank_values, priorities, rendering, id_order, conversation)
    else:
        candidates = np.flatnonzero(rows.eligible)
        # A null reads as NaN here; a null or NaN rank sorts last.
        ranks = rank_values.to_numpy().astype(np.float64, copy=False)[candidates]
        keys = _Keys(
            candidates=candidates,
            unit_ids=id_order,
            tier=rows.tier[candidates],
            ranks=np.where(np.isnan(ranks), -np.inf, ranks),
            priority=priorities.to_numpy()[candidates],
            cheap=rendering.cheap.to_numpy()[candidates],
            talk=conversation[candidates],
        )
    return _queue(keys, units.n_units, costs)


def _row_keys(df: pl.DataFrame, rank_values: pl.Series) -> tuple[np.ndarray, pl.Series]:
    """Each row's conversation flag (unranked packs only) and its priority (null: lowest)."""
    # Only a pack with an unranked row reads the roles (a ranked batch pays nothing for them).
    unranked = bool(np.isnan(rank_values.to_numpy()).any())  # a null reads as NaN
    conversation = (
        df.get_column("role").cast(pl.String).is_in(CONVERSATION_ROLES).to_numpy()
        if unranked
        else np.zeros(df.height, dtype=bool)
    )
    priorities = df.get_column("priority")
    if priorities.null_count():
        priorities = priorities.fill_null(_NULL_PRIORITY)
    return conversation, priorities


@dataclass(frozen=True, slots=True)
class _Keys:
    """The ``m`` candidate units (``candidates``) and their keys, ``(m,)`` each.

    ``unit_ids`` is indexed by unit (every unit), the rest by candidate.
    """

    candidates: np.ndarray
    unit_ids: np.ndarray
    tier: np.ndarray
    ranks: np.ndarray
    priority: np.ndarray
    cheap: np.ndarray
    talk: np.ndarray


def _unit_keys(
    rows: Exclusions,
    units: Units,
    rank_values: pl.Series,
    priorities: pl.Series,
    rendering: Rendering,
    id_order: np.ndarray,
    conversation: np.ndarray,
) -> _Keys:
    """The keys of units of several rows: their strongest member's, cheap bounds summed."""
    assert units.unit_of_row is not None  # the caller's case: units of several rows
    eligible = np.flatnonzero(rows.eligible)
    unit = units.unit_of_row[eligible]
    order = np.argsort(unit, kind="stable")
    rows_in_order, unit = eligible[order], unit[order]
    starts = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]]) if unit.size else unit
    candidates = unit[starts]

    def per_unit(values: np.ndarray, reduce: np.ufunc) -> np.ndarray:
        gathered = values[rows_in_order]
        return reduce.reduceat(gathered, starts) if starts.size else gathered[:0]

    ranks = rank_values.to_numpy().astype(np.float64, copy=False)  # a null reads as NaN
    ids = per_unit(id_order, np.minimum)
    unit_ids = np.zeros(units.n_units, dtype=np.int64)
    unit_ids[candidates] = ids
    return _Keys(
        candidates=candidates,
        unit_ids=unit_ids,
        tier=per_unit(rows.tier, np.minimum),
        ranks=per_unit(np.where(np.isnan(ranks), -np.inf, ranks), np.maximum),
        priority=per_unit(priorities.to_numpy(), np.maximum),
        cheap=per_unit(rendering.cheap.to_numpy(), np.add),
        talk=per_unit(conversation, np.logical_and),
    )


def _queue(keys: _Keys, n_units: int, costs: np.ndarray | None) -> Queue:
    """The candidates in selection order: conversation units without a rank newest first."""
    candidates, ranks = keys.candidates, keys.ranks
    recency = np.where(keys.talk & (ranks == -np.inf), n_units - candidates, 0).astype(np.int64)
    ties = None
    if costs is not None and not (costs[candidates] == UNSET).any():
        ties = (costs[candidates], keys.unit_ids[candidates])
    ordering = _ordering(keys.tier, ranks, keys.priority, recency, ties)
    cheap = np.zeros(n_units, dtype=np.int64)
    cheap[candidates] = keys.cheap
    sorted_tier = keys.tier[ordering].astype(np.int64)
    return Queue(
        order=candidates[ordering],
        keys=(sorted_tier, ranks[ordering], keys.priority[ordering], recency[ordering]),
        candidates=candidates,
        cheap=cheap,
        unit_ids=keys.unit_ids,
        n_required=int((sorted_tier == 0).sum()),
        whole=ties is not None,
    )


def _ordering(
    tier: np.ndarray,
    ranks: np.ndarray,
    priority: np.ndarray,
    recency: np.ndarray,
    ties: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """``(m,)`` int64: the order by tier asc, rank desc, priority desc, recency asc, then ``ties``.

    ``ties`` are the units' costs and id places, ``(m,)`` int64 each, to
    order by cost asc and id asc after the keys; ``None``: ties keep their order.
    """
    after = () if ties is None else (ties[1], ties[0])
    if recency.any():
        after = (*after, recency)
    if len(tier) and tier.min() == tier.max() and priority.min() == priority.max():
        # The usual case: rank alone decides.
        return np.lexsort((*after, -ranks)) if after else np.argsort(-ranks, kind="stable")
    # ~priority sorts priority descending without overflow.
    return np.lexsort((*after, ~priority.astype(np.int64), -ranks, tier))


def ids_in_order(df: pl.DataFrame) -> np.ndarray:
    """``(n,)`` int64: each row's place, from 0, in the order of the (unique) ids of ``df``."""
    ranks: np.ndarray = df.get_column("id").rank("ordinal").to_numpy().astype(np.int64) - 1
    return ranks


def select_units(
    ids: pl.Series,
    costs: UnitCosts,
    queue: Queue,
    budget: int,
    cutter: Cutter | None = None,
    overflow: str = "error",
) -> np.ndarray:
    """Choose the units of the pack: the required ones, then greedy skip-and-continue.

    Parameters
    ----------
    ids
        ``(n,)`` String: the rows' ids, to name required items in an error.
    costs
        The units' lazily known costs; filled as far as the selection reaches.
    queue
        The candidates in selection order.
    budget
        The token budget, in tokens; the profile's reply priming is taken off first.
    cutter
        Cuts truncatable units to fit, or ``None`` when no item is truncatable.
    overflow
        ``"truncate"`` lets ``cutter`` cut required units that do not fit;
        ``"error"`` raises instead. The pinned units of a continuing pack
        (:attr:`~cognoxium.packing._truncation.Cutter.pinned`) are cut
        first, either way.

    Returns
    -------
    numpy.ndarray
        ``(n_units,)`` bool: the unit is in the pack.

    Raises
    ------
    BudgetError
        If the required units alone exceed the budget (with ``overflow=
        "truncate"``: even cut as far as their ``min_tokens`` allow); it names
        their rows' ids and whole costs.
    """
    if cutter is not None:
        cutter.reset()  # cuts made for an earlier selection of this pack do not carry over
    if len(ids) <= _EAGER_BOUNDS:
        costs.ensure_bounds(queue.candidates)
    overhead = costs.profile.tokens_per_pack
    required = queue.order[: queue.n_required]
    costs.count(required)
    costs.examined[required] = True
    required_cost = int(costs.cost[required].sum())
    if queue.n_required and required_cost + overhead > budget:
        rows, _ = costs.units.rows_of(required)
        detail = dict(
            sorted(zip(ids.gather(rows).to_list(), costs.row_tokens[rows].tolist(), strict=True))
        )
        cut = overflow == "truncate" and cutter is not None
        allowed = budget - overhead
        if cutter is None or not cutter.fit_required(
            _whole_order(queue, costs), allowed, overflow=overflow
        ):
            advice = (
                "mark more of them truncatable or lower their min_tokens"
                if overflow == "truncate"
                else "mark them truncatable and pack with overflow='truncate'"
            )
            raise BudgetError(
                f"required items need {required_cost + overhead} tokens "
                f"({required_cost} for the items, {overhead} of reply priming) but the budget is "
                f"{budget}{' even cut to their min_tokens' if cut else ''}: {detail}; raise the "
                f"budget, lower their retention, or {advice}",
                costs=detail,
                budget=budget,
                params={"budget_needed": required_cost + overhead},
            )
        required_cost = int(costs.cost[required].sum())
    rest = queue.order[queue.n_required :]
    remaining = budget - overhead - required_cost
    if cutter is None and queue.whole:
        chosen: Any = _select_known(costs, rest, remaining)
    else:
        block_start, block_end = _blocks(tuple(key[queue.n_required :] for key in queue.keys))
        if cutter is not None:
            cutter.cap = int(remaining * AWAITED_SHARE)
        chosen = _select(
            costs, rest, block_start, block_end, queue.cheap, queue.unit_ids, remaining, cutter
        )
        if cutter is not None and cutter.capped:
            cutter.regrow(remaining - int(costs.cost[np.asarray(chosen, dtype=np.int64)].sum()))
    included = np.zeros(costs.units.n_units, dtype=bool)
    included[required] = True
    included[np.asarray(chosen, dtype=np.int64)] = True
    return included


AWAITED_SHARE = 0.5
"""The share of the room left after the required items that an awaited tool result keeps.

A result the loop awaits larger than the room is cut to this share, so the
steps before it keep the rest; what they leave goes back to the result
(see :meth:`~cognoxium.packing._truncation.Cutter.fit`).
"""


def _whole_order(queue: Queue, costs: UnitCosts) -> np.ndarray:
    """``(r,)`` int64: the required units of ``queue`` (counted) in the whole selection order.

    Their ties are ordered by cost asc and id asc, as when every cost was
    known before the queue was made, so which one is cut first does not
    depend on what earlier packs counted.
    """
    n = queue.n_required
    head = queue.order[:n]
    if queue.whole:
        return head
    tier, rank, priority, recency = (key[:n] for key in queue.keys)
    ties = (costs.cost[head], queue.unit_ids[head])
    ordered: np.ndarray = head[_ordering(tier, rank, priority, recency, ties)]
    return ordered


def decide_rows(
    rows: Exclusions, units: Units, included: np.ndarray, costs: UnitCosts
) -> Decisions:
    """Turn the chosen units into every row's decision, reason, cost and pack position.

    Parameters
    ----------
    rows
        The exclusions (their reasons are kept).
    units
        The packing units.
    included
        ``(n_units,)`` bool: the unit is in the pack.
    costs
        The rows' counted costs.

    Returns
    -------
    Decisions
        Eligible rows left out get ``group_over_budget`` (a member of a group)
        or ``over_budget``; included rows get ``required`` (required by their
        own retention: :attr:`~cognoxium.packing._exclusions.Exclusions.required`)
        or ``selected``.
    """
    row_unit_in = included if units.unit_of_row is None else included[units.unit_of_row]
    row_included = row_unit_in & rows.eligible
    over = rows.eligible & ~row_included
    required = rows.required
    reason = rows.reason.copy()
    reason[over & rows.grouped] = REASON_CODE[Reason.GROUP_OVER_BUDGET]
    reason[over & ~rows.grouped] = REASON_CODE[Reason.OVER_BUDGET]
    reason[row_included & required] = REASON_CODE[Reason.REQUIRED]
    reason[row_included & ~required] = REASON_CODE[Reason.SELECTED]
    pack_overhead = costs.profile.tokens_per_pack if row_included.any() else 0
    selected = np.flatnonzero(row_included)
    pack_position = np.full(len(reason), UNSET, dtype=np.int64)
    pack_position[selected] = np.arange(len(selected))
    examined = costs.examined if units.unit_of_row is None else costs.examined[units.unit_of_row]
    return Decisions(
        reason=reason,
        included=row_included,
        selected=selected,
        pack_position=pack_position,
        tokens=np.where(examined, costs.row_tokens, UNSET),
        used_tokens=int(costs.row_tokens[row_included].sum()) + pack_overhead,
        pack_overhead=pack_overhead,
    )


def _blocks(keys: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) of each position's run of equal sort keys."""
    m = len(keys[0])
    if m == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    change = np.zeros(m, dtype=bool)
    change[0] = True
    for values in keys:
        change[1:] |= values[1:] != values[:-1]
    heads = np.flatnonzero(change)
    lengths = np.diff(np.append(heads, m))
    return np.repeat(heads, lengths), np.repeat(np.append(heads[1:], m), lengths)


def _select(
    costs: UnitCosts,
    order: np.ndarray,
    block_start: np.ndarray,
    block_end: np.ndarray,
    cheap: np.ndarray,
    unit_ids: np.ndarray,
    remaining: int,
    cutter: Cutter | None = None,
) -> list[int]:
    """Greedy skip-and-continue over ``order`` (units sorted by tier, rank desc, priority desc).

    Within a block of equal keys the design's order is cost asc, id asc; see
    :func:`_select_block`. ``cheap`` is a lower bound of each unit's cost that
    is known for every unit (framing plus the byte bound); its suffix minimum
    ends the scan as soon as nothing left can fit.
    """
    chosen: list[int] = []
    m = len(order)
    if m == 0:
        return chosen
    suffix_min = np.minimum.accumulate(cheap[order][::-1])[::-1]
    window = 512
    pos = 0
    while pos < m and suffix_min[pos] <= remaining:
        span = order[pos : pos + window]
        costs.ensure_bounds(span, remaining)
        hits = np.flatnonzero(costs.bound[span] <= remaining)
        if len(hits) == 0:
            pos += len(span)
            window = min(window * 8, 65536)  # nothing fits here: look much further at once
            continue
        remaining, after = _visit(
            costs,
            order,
            pos + hits,
            block_start,
            block_end,
            suffix_min,
            unit_ids,
            remaining,
            chosen,
            cutter,
        )
        pos = max(pos + len(span), after)
    return chosen


def _visit(
    costs: UnitCosts,
    order: np.ndarray,
    at: np.ndarray,
    block_start: np.ndarray,
    block_end: np.ndarray,
    suffix_min: np.ndarray,
    unit_ids: np.ndarray,
    remaining: int,
    chosen: list[int],
    cutter: Cutter | None,
) -> tuple[int, int]:
    """Visit the units of ``order`` at positions ``at`` (ascending) that still fit, in order.

    What did not fit when ``at`` was found never will (the budget left only
    shrinks), so the bounds are read once. A block of equal keys is selected
    whole by :func:`_select_block` and its other positions are passed over;
    the visit ends once no unit from the current position on can fit (its
    cheap bound's suffix minimum exceeds the budget left). Returns the
    budget left and the position after the last unit visited.
    """
    starts = block_start[at]
    alone = block_end[at] - starts == 1
    # A block's positions here are one visit, at the first: its least bound decides
    # whether any of them still fits, and the block is selected whole there.
    first = alone.copy()
    first[0] = True
    first[1:] |= starts[1:] != starts[:-1]
    heads = np.flatnonzero(first)
    least: Any = np.minimum.reduceat(costs.bound[order[at]], heads).tolist()
    at = at[heads]
    places: Any = at.tolist()
    units: Any = order[at].tolist()
    ends: Any = block_end[at].tolist()
    single: Any = alone[heads].tolist()
    floor: Any = suffix_min[at].tolist()
    after = int(at[0])
    j, k = 0, len(places)
    while j < k and floor[j] <= remaining:
        if least[j] > remaining:
            j += 1
            continue
        if not single[j]:
            remaining = _select_block(
                costs, order[places[j] : ends[j]], unit_ids, remaining, chosen, cutter
            )
            after = ends[j]
            j = bisect.bisect_left(places, after, j)
            continue
        if costs.cost[units[j]] == UNSET:
            costs.prefetch(order, places[j], remaining)
        remaining = _take(costs, units[j], remaining, chosen, cutter)
        after = places[j] + 1
        j += 1
    return remaining, after


def _take(
    costs: UnitCosts, unit: int, remaining: int, chosen: list[int], cutter: Cutter | None
) -> int:
    """Examine ``unit`` (counted): choose it if it fits whole or cut; return the budget left."""
    costs.examined[unit] = True
    cost = int(costs.cost[unit])
    if cost > remaining:
        cut = None if cutter is None else cutter.fit(unit, remaining)
        if cut is None:
            return remaining
        cost = cut
    chosen.append(unit)
    return remaining - cost


def _select_block(
    costs: UnitCosts,
    block: np.ndarray,
    unit_ids: np.ndarray,
    remaining: int,
    chosen: list[int],
    cutter: Cutter | None = None,
) -> int:
    """Select within a block of equal (tier, rank, priority), in cost asc, id asc order.

    Units are visited by (lower bound, id); a min-heap of counted units
    releases one only when no uncounted unit of the block can precede it: the
    next uncounted unit's (lower bound, id) is past the released (cost, id).
    Ids compare by their place in the order of the ids (``unit_ids``).
    Returns the remaining budget.
    """
    costs.ensure_bounds(block, remaining)
    block = block[costs.bound[block] <= remaining]
    if len(block) == 0:
        return remaining
    places = unit_ids[block]
    bounds = costs.bound[block]
    by = np.lexsort((places, bounds))
    seq: Any = block[by].tolist()
    seq_bound: Any = bounds[by].tolist()
    seq_id: Any = places[by].tolist()
    k = len(seq)
    heap: list[tuple[int, Any, int]] = []
    i = 0
    while True:
        if i < k and seq_bound[i] > remaining:
            i = k  # sorted by bound: nothing further in the block can fit
        if heap and (i == k or (heap[0][0], heap[0][1]) < (seq_bound[i], seq_id[i])):
            _, _, u = heapq.heappop(heap)
            if costs.bound[u] <= remaining:  # else it cannot fit any more: not examined
                remaining = _take(costs, u, remaining, chosen, cutter)
            continue
        if i == k:
            break
        if costs.cost[seq[i]] == UNSET:
            stop = min(k, i + costs.batch)
            batch = np.asarray(seq[i:stop], dtype=np.int64)
            costs.count(batch[np.asarray(seq_bound[i:stop]) <= remaining])
            costs.batch = min(costs.batch * 2, 8192)
        heapq.heappush(heap, (int(costs.cost[seq[i]]), seq_id[i], int(seq[i])))
        i += 1
    return remaining


def _select_known(costs: UnitCosts, order: np.ndarray, remaining: int) -> np.ndarray:
    """:func:`_select` over a whole order (every unit's cost known), as array operations.

    ``order`` is the design's whole order (tier asc, rank desc, priority
    desc, cost asc, id asc; see :attr:`Queue.whole`). The longest head that
    fits is taken at once, then each later unit that still fits, in order.
    A unit is examined when its lower bound does not exceed the budget left
    at its turn, as :func:`_select` examines it. Returns the chosen units,
    ``(c,)`` int64.
    """
    if len(order) == 0:
        return order
    costs.ensure_bounds(order)
    cost = costs.cost[order]
    taken = np.zeros(len(order), dtype=bool)
    spent = np.cumsum(cost)
    head = int(np.searchsorted(spent, remaining, side="right"))
    taken[:head] = True
    left = remaining - (int(spent[head - 1]) if head else 0)
    fits = head + np.flatnonzero(cost[head:] <= left)  # the only ones that may still fit
    least: Any = np.minimum.accumulate(cost[fits][::-1])[::-1].tolist()
    for at, price, floor in zip(fits.tolist(), cost[fits].tolist(), least, strict=True):
        if floor > left:
            break  # nothing from here on fits
        if price <= left:
            taken[at] = True
            left -= price
    paid = np.where(taken, cost, 0)
    before = remaining - (np.cumsum(paid) - paid)  # the budget left at each unit's turn
    costs.examined[order[costs.bound[order] <= before]] = True
    chosen: np.ndarray = order[taken]
    return chosen
