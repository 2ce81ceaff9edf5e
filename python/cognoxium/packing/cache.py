"""Packs that continue an earlier pack, so the provider's prompt cache stays warm.

A chat application repacks its history on every turn, and providers bill the
prefix a request shares with the one before it at a fraction of the input
price (see :mod:`cognoxium.packing.cache_models`). A sliding window drops the
oldest message on every turn once the budget is reached, so the prefix
changes on every request and nothing after the system prompt is a cache hit.
``pack(budget, previous=earlier_pack)`` keeps it instead:

1. **Prefix.** The earlier pack's leading history messages (every role but
   ``document`` and ``memory``) whose items are still in the frame,
   unchanged (same id and content hash), still packable and in the same
   order, are the prefix. History items before the prefix's last item that
   the earlier pack did not send are held out (reason
   ``evicted_for_cache``), since sending them would change the prefix; a
   required one is sent, and the prefix ends before it.
2. **Continue.** The prefix and the history after it (the new messages,
   and what the earlier pack sent after its prefix) are packed whole, in
   input order, when they fit the items' budget: the request starts with
   the earlier one's bytes. History after the prefix that the earlier pack
   left out is not new: it is selected as usual.
3. **Evict in steps.** When they do not fit, the oldest history of the
   prefix is evicted in steps: each step evicts at least ``eviction_share``
   (an option, 0.4 by default) of the evictable prefix's tokens, oldest
   first, in whole packing units, and then up to the next ``user`` message,
   so the history still starts on a user turn. Required items and
   ``system`` and ``developer`` messages are never evicted. Steps are taken
   until the rest fits; the evicted items get reason ``evicted_for_cache``.
   A step frees room for several turns, so the next packs share a prefix
   again, where a sliding window would change it on every turn.
4. **Ranked content after the prefix.** ``document`` and ``memory`` items
   (retrieved for each query, so they change from turn to turn) go after the
   history in the pack, and are selected by the usual order (tier, rank,
   priority) for the tokens the history leaves.

The manifest's ``cache`` section (:class:`CacheReport`) says which items
were sent as the earlier prefix and its length in tokens, what was evicted
and why, and, with the ``cache_model`` option, the expected cached, written
and uncached input tokens and the billed input cost in units of one uncached
token. The same inputs give a byte-identical manifest.

Examples
--------
>>> from datetime import UTC, datetime
>>> from cognoxium import CognitionFrame
>>> when = datetime(2024, 6, 1, tzinfo=UTC)
>>> def chat(n):
...     return CognitionFrame([{"id": f"m{i:02}", "role": "user" if i % 2 == 0 else "assistant",
...                             "text": f"message {i} " + "word " * 20,
...                             "created_at": "2024-01-01T00:00:00Z"} for i in range(n)])
>>> first = chat(4).pack(200, as_of=when)
>>> second = chat(6).pack(200, as_of=when, previous=first)
>>> second.ids[: len(first.ids)] == first.ids, second.manifest.cache.prefix_items
(True, 4)
>>> third = chat(8).pack(200, as_of=when, previous=second, eviction_share=0.5)
>>> third.ids[0], third.manifest.cache.evicted, third.manifest.cache.eviction_steps
('m04', ['m00', 'm01', 'm02', 'm03'], 1)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from cognoxium.exceptions import PackError
from cognoxium.packing._cache_report import CacheReport
from cognoxium.packing._costing import UnitCosts
from cognoxium.packing._exclusions import Exclusions
from cognoxium.packing._model import REASON_CODE, UNSET, ContextPack, Reason
from cognoxium.packing._renderers import RANKED_ROLES
from cognoxium.packing._units import Units
from cognoxium.packing.cache_models import CacheBill, CacheModel, bill, get_cache_model

if TYPE_CHECKING:
    from cognoxium.packing._checks import PackCall
    from cognoxium.packing._selection import Decisions

__all__ = [
    "RANKED_ROLES",
    "CacheReport",
    "Continuation",
    "pack_breakpoints",
    "plan_continuation",
    "shared_prefix_tokens",
]


_NEVER_EVICTED = ("system", "developer")
"""History roles a continuing pack does not evict (the instructions)."""

_EVICTED = REASON_CODE[Reason.EVICTED_FOR_CACHE]
_SELECTED = REASON_CODE[Reason.SELECTED]


@dataclass(frozen=True)
class Continuation:
    """How one pack continues an earlier pack: what it holds out, pins and sends first.

    Attributes
    ----------
    rows
        The exclusions with the held-out rows excluded (``evicted_for_cache``)
        and the pinned rows in tier 0, so the selection takes them first.
    pinned
        ``(n,)`` bool: rows the selection must take (the kept prefix and the
        new history), though their own retention is not required.
    history
        ``(n,)`` bool: rows of the history (every role but :data:`RANKED_ROLES`).
    prefix
        ``(p,)`` int64: the rows of the earlier prefix that are kept, in order.
    evicted
        ``(e,)`` int64: the rows of the earlier pack evicted, in input order.
    steps
        Eviction steps taken.
    detail
        Why they were taken, or ``None``.
    previous
        The earlier pack.
    share
        The eviction share used.
    """

    rows: Exclusions
    pinned: np.ndarray
    history: np.ndarray
    prefix: np.ndarray
    evicted: np.ndarray
    steps: int
    detail: str | None
    previous: ContextPack
    share: float

    def decided(self, decisions: Decisions, tier: np.ndarray) -> Decisions:
        """``decisions`` with pinned rows' reason ``selected`` and the history first in pack order.

        ``tier`` is the rows' own tier, ``(n,)`` int64: a pinned row that is
        not required by its own retention is reported as ``selected``.
        """
        reason = decisions.reason.copy()
        reason[self.pinned & decisions.included & (tier != 0)] = _SELECTED
        selected = decisions.selected
        in_history = self.history[selected]
        ordered = np.concatenate([selected[in_history], selected[~in_history]])
        position = np.full(len(reason), UNSET, dtype=np.int64)
        position[ordered] = np.arange(len(ordered))
        return replace(decisions, reason=reason, selected=ordered, pack_position=position)

    def report(
        self,
        df: pl.DataFrame,
        call: PackCall,
        decisions: Decisions,
        row_tokens: np.ndarray,
        messages: Sequence[dict[str, Any]],
    ) -> CacheReport:
        """The manifest's ``cache`` section for the pack these decisions make."""
        previous = self.previous
        before = previous.messages
        shared = 0
        for mine, theirs in zip(messages, before, strict=False):
            if mine != theirs:
                break
            shared += 1
        selected = decisions.selected
        tokens = row_tokens[selected]
        roles = df.get_column("role").gather(selected).to_list()
        prefix_tokens = int(tokens[:shared].sum())
        system, stable = pack_breakpoints(roles, tokens.tolist())
        ids = df.get_column("id")
        report: dict[str, Any] = {
            "continues": previous.manifest.digest,
            "eviction_share": self.share,
            "prefix_items": shared,
            "prefix_tokens": prefix_tokens,
            "prefix_ids": ids.gather(selected[:shared]).to_list(),
            "stable_tokens": stable,
            "evicted": ids.gather(self.evicted).to_list(),
            "eviction_steps": self.steps,
            "eviction_detail": self.detail,
        }
        model = call.options.cache_model
        if model is not None:
            cache = get_cache_model(model)
            charged = _bill(cache, previous, decisions.used_tokens, prefix_tokens, system, stable)
            elapsed = (call.as_of - previous.manifest.as_of).total_seconds()
            if elapsed > cache.ttl_seconds:
                charged = _bill(cache, None, decisions.used_tokens, 0, system, stable)
            report |= {
                "cache_model": cache.name,
                "input_tokens": charged.input_tokens,
                "cached_tokens": charged.cached_tokens,
                "cache_write_tokens": charged.cache_write_tokens,
                "uncached_tokens": charged.uncached_tokens,
                "billed_tokens": charged.billed_tokens,
            }
        return CacheReport(**report)


def _bill(
    model: CacheModel,
    previous: ContextPack | None,
    input_tokens: int,
    shared: int,
    system: int,
    stable: int,
) -> CacheBill:
    """Bill a pack of these sizes under ``model`` against ``previous`` (``None``: a cold cache)."""
    if previous is None:
        return bill(model, input_tokens=input_tokens, breakpoints=_marks(model, system, stable))
    before = _pack_shape(previous)
    return bill(
        model,
        input_tokens=input_tokens,
        shared_tokens=shared,
        previous_input_tokens=previous.used_tokens,
        previous_breakpoints=_marks(model, *before),
        breakpoints=_marks(model, system, stable),
    )


def _marks(model: CacheModel, system: int, stable: int) -> list[int]:
    """The prefix lengths a request marks: the system block when cacheable alone, the history."""
    if model.kind != "breakpoints":
        return []
    marks = [stable] if stable else []
    if system >= model.min_tokens and system < stable:
        marks.insert(0, system)
    return marks


def _pack_shape(pack: ContextPack) -> tuple[int, int]:
    """The system block's and the history's tokens of ``pack``, from its manifest."""
    entries = pack.manifest.to_polars().filter(pl.col("pack_position").is_not_null())
    entries = entries.sort("pack_position")
    roles = entries.get_column("role").cast(pl.String).to_list()
    return pack_breakpoints(roles, entries.get_column("tokens").fill_null(0).to_list())


def pack_breakpoints(roles: Sequence[str], tokens: Sequence[int]) -> tuple[int, int]:
    """The ends of a pack's system block and of its history, in tokens from its start.

    Parameters
    ----------
    roles
        The items' roles, in pack order.
    tokens
        Their costs, in tokens, in pack order.

    Returns
    -------
    tuple of int
        The tokens of the leading ``system`` and ``developer`` messages, and
        those of every message before the first ``document`` or ``memory``
        item (the stable prefix a continuing pack keeps).

    Examples
    --------
    >>> pack_breakpoints(["system", "user", "assistant", "document"], [600, 20, 30, 400])
    (600, 650)
    """
    system = stable = 0
    in_system = True
    for role, cost in zip(roles, tokens, strict=True):
        if role in RANKED_ROLES:
            break
        if in_system and role in _NEVER_EVICTED:
            system += cost
        else:
            in_system = False
        stable += cost
    return system, stable


def shared_prefix_tokens(
    previous: Sequence[object], current: Sequence[object], tokens: Sequence[int]
) -> int:
    """The tokens of the leading messages of ``current`` equal to those of ``previous``.

    Parameters
    ----------
    previous, current
        Two requests' messages (anything comparable with ``==``), in order.
    tokens
        ``current``'s message costs, in tokens.

    Returns
    -------
    int
        The tokens of the longest common run of leading messages.

    Examples
    --------
    >>> shared_prefix_tokens(["s", "a", "b"], ["s", "a", "c", "d"], [500, 10, 12, 9])
    510
    """
    total = 0
    for mine, theirs, cost in zip(current, previous, tokens, strict=False):
        if mine != theirs:
            break
        total += cost
    return total


def plan_continuation(
    df: pl.DataFrame,
    rows: Exclusions,
    units: Units,
    costs: UnitCosts,
    call: PackCall,
    previous: ContextPack,
) -> Continuation:
    """Find the kept prefix, the rows held out and the eviction steps of a continuing pack.

    Parameters
    ----------
    df
        The items, ``n`` rows in input order.
    rows
        Their exclusions at the pack's ``as_of`` (groups considered).
    units
        The packing units.
    costs
        The units' costs; the prefix's, the new history's and the required
        rows' are counted here.
    call
        The checked budget and options (``eviction_share`` is read).
    previous
        The earlier pack.

    Returns
    -------
    Continuation
        What the selection holds out and pins, and what the manifest reports.

    Raises
    ------
    PackError
        If ``previous`` is not a :class:`~cognoxium.packing.ContextPack`, or
        was packed with another token profile.
    """
    if not isinstance(previous, ContextPack):
        raise PackError(
            f"previous must be the ContextPack this pack continues, got {type(previous).__name__}"
        )
    if previous.manifest.profile != call.profile.name:
        raise PackError(
            f"previous was packed with the token profile {previous.manifest.profile!r}, this "
            f"pack with {call.profile.name!r}: a pack continues one of its own profile"
        )
    share = call.options.eviction_share
    n = df.height
    role = df.get_column("role").cast(pl.String)
    history = ~role.is_in(RANKED_ROLES).to_numpy()
    prefix = _kept_prefix(df, rows, history, previous)
    tier = rows.tier
    eligible = rows.eligible
    if len(prefix) and (tier[: prefix[-1]] == 0).any():
        in_prefix = np.zeros(n, dtype=bool)
        in_prefix[prefix] = True
        late = np.flatnonzero(eligible & history & (tier == 0) & ~in_prefix)
        late = late[late < prefix[-1]]
        if len(late):  # a required item the earlier pack did not send: the prefix ends before it
            prefix = prefix[prefix < late[0]]
    pinned = np.zeros(n, dtype=bool)
    held = np.zeros(n, dtype=bool)
    evicted = np.zeros(n, dtype=bool)
    steps = 0
    detail = None
    if len(prefix):
        last = int(prefix[-1])
        pinned[prefix] = True
        held[: last + 1] = eligible[: last + 1] & history[: last + 1] & ~pinned[: last + 1]
        held &= tier != 0
        # After the prefix: what the earlier pack sent, and the new history. A row the
        # earlier pack left out is not new: it is selected as usual, not pinned.
        after = eligible[last + 1 :] & history[last + 1 :]
        pinned[last + 1 :] = (
            after & (_in_pack(df, previous) | ~_in_manifest(df, previous))[last + 1 :]
        )
        pinned &= ~held
        unit_of = units.unit_of_row
        need_rows = np.flatnonzero(pinned | (eligible & (tier == 0)))
        need_units = np.unique(need_rows if unit_of is None else unit_of[need_rows])
        costs.count(need_units)
        row_tokens = costs.row_tokens
        room = call.item_budget - call.profile.tokens_per_pack
        need = int(row_tokens[need_rows].sum())
        roles = role.to_numpy()
        evictable = prefix[(tier[prefix] != 0) & ~np.isin(roles[prefix], _NEVER_EVICTED)]
        first_need = need
        while need > room and len(evictable):
            gone = _eviction_step(evictable, row_tokens, share, roles, unit_of)
            steps += 1
            evicted[gone] = True
            evictable = evictable[~evicted[evictable]]
            need -= int(row_tokens[gone].sum())
        if steps:  # the history left starts on a user turn, new messages included
            rest = np.flatnonzero(pinned & ~evicted & ~np.isin(roles, _NEVER_EVICTED))
            for row in rest.tolist():
                if roles[row] == "user" or tier[row] == 0:
                    break
                evicted[row] = True
                need -= int(row_tokens[row])
            detail = (
                f"the earlier prefix and the new history need {first_need} tokens, more than "
                f"the {room} the items may use; {steps} step(s) of at least {share:g} of the "
                f"evictable history evicted {int(evicted.sum())} items"
            )
        if need > room:  # even without its history the new turn does not fit: select it
            pinned[last + 1 :] = False
        pinned &= ~evicted
    excluded = held | evicted
    reason = rows.reason.copy()
    reason[excluded] = _EVICTED
    new_tier = tier.copy()
    new_tier[pinned] = 0
    kept = replace(rows, reason=reason, eligible=rows.eligible & ~excluded, tier=new_tier)
    evicted_rows = np.flatnonzero((evicted | held) & _in_pack(df, previous))
    return Continuation(
        rows=kept,
        pinned=pinned,
        history=history,
        prefix=prefix[~evicted[prefix]],
        evicted=evicted_rows,
        steps=steps,
        detail=detail,
        previous=previous,
        share=share,
    )


def _in_pack(df: pl.DataFrame, pack: ContextPack) -> np.ndarray:
    """``(n,)`` bool: the row's id is an item of ``pack``."""
    return df.get_column("id").is_in(pack.frame.get_column("id").implode()).to_numpy()


def _in_manifest(df: pl.DataFrame, pack: ContextPack) -> np.ndarray:
    """``(n,)`` bool: the row's id has an entry in ``pack``'s manifest (packed or left out)."""
    ids = pack.manifest.to_polars().get_column("id")
    return df.get_column("id").is_in(ids.implode()).to_numpy()


def _kept_prefix(
    df: pl.DataFrame, rows: Exclusions, history: np.ndarray, previous: ContextPack
) -> np.ndarray:
    """``(p,)`` int64: the rows of the earlier pack's leading history still sendable, in order."""
    before = previous.frame.select("id", "content_hash", "role")
    found = before.join(
        df.select("id", pl.col("content_hash").alias("now")).with_row_index("row"),
        on="id",
        how="left",
        maintain_order="left",
    )
    row = found.get_column("row")
    same = (found.get_column("content_hash") == found.get_column("now")).fill_null(False)
    ranked = found.get_column("role").cast(pl.String).is_in(RANKED_ROLES)
    ok = (same & ~ranked & row.is_not_null()).to_numpy()
    at = row.fill_null(0).cast(pl.Int64).to_numpy()
    stop = len(at)
    bad = np.flatnonzero(~ok)
    if len(bad):
        stop = int(bad[0])
    at = at[:stop]
    usable = rows.eligible[at] & history[at]
    if not usable.all():
        at = at[: int(np.argmin(usable))]
    if len(at) > 1:
        rising = np.diff(at) > 0
        if not rising.all():
            at = at[: int(np.argmin(rising)) + 1]
    return at.astype(np.int64)


def _eviction_step(
    evictable: np.ndarray,
    row_tokens: np.ndarray,
    share: float,
    roles: np.ndarray,
    unit_of: np.ndarray | None,
) -> np.ndarray:
    """The rows one step evicts: ``share`` of the evictable tokens, oldest first, to a user turn.

    Whole units are evicted (the other evictable rows of a unit touched go
    too), then the rows up to the next evictable ``user`` message, so the
    history left starts on a user turn.
    """
    cost = row_tokens[evictable]
    target = math.ceil(share * int(cost.sum()))
    upto = int(np.searchsorted(np.cumsum(cost), target, side="left")) + 1
    upto = min(upto, len(evictable))
    if unit_of is not None:
        touched = np.isin(unit_of[evictable], unit_of[evictable[:upto]])
        upto = max(upto, int(np.flatnonzero(touched)[-1]) + 1)
    users = np.flatnonzero(roles[evictable[upto:]] == "user")
    upto = upto + int(users[0]) if len(users) else len(evictable)
    return evictable[:upto]
