"""Packs that continue an earlier pack, so the provider's prompt cache stays warm.

A chat application repacks its history on every turn, and providers bill the
prefix a request shares with the one before it at a fraction of the input
price (see :mod:`cognoxium.packing.cache_models`). A sliding window drops the
oldest message on every turn once the budget is reached, so the prefix
changes on every request and nothing after the system prompt is a cache hit.
``pack(budget, previous=earlier_pack)`` keeps it instead:

Rows are pinned, held out and evicted by whole packing units, the units
the packer packs or drops whole everywhere else: groups and, with
``turns=True``, whole turns (see :mod:`cognoxium.packing._units`). A
``document`` or ``memory`` item that shares a unit with history travels
with it: it is pinned, held out or evicted with the unit's history, and
its manifest reason is the unit's (``evicted_for_cache`` when held out or
evicted). A unit with a required item is never evicted.

1. **Prefix.** The earlier pack's leading history messages (every role but
   ``document`` and ``memory``, the ``document`` and ``memory`` items it
   sent amid them, and their attachments: see 4) whose items
   are still in the frame,
   unchanged (same id and content hash, and so is every item of their unit
   the earlier pack sent), still packable and in the same order, are the
   prefix. An item the earlier pack cut whose cut is made again (see 2)
   counts as unchanged, since it is sent as it was then; its unit ends the
   prefix, since it may be cut further. The units of history
   before the prefix's last item that the earlier pack did not send, and
   those it could have sent and left out anywhere (for the budget, a gap,
   ``start_on``, a tool rule or an eviction; not for an exclusion such as
   ``expired``), are held out (reason ``evicted_for_cache``): sending them
   would change the prefix, or a choice the earlier pack made. A unit that
   gained an item since (a tool call whose result came after the earlier
   pack left the call out as unanswered) is new, not held out. A required
   one is sent, and the prefix ends before it. One holding a ``system`` or
   ``developer`` message is neither held out nor pinned: it is selected as
   usual, so a system prompt left out for a smaller budget comes back when
   it fits, though it changes the prefix.
2. **Continue.** The prefix's units and the other units of the history
   after it (the new messages, and what the earlier pack sent after its
   prefix) are pinned: packed whole, in input order, when they fit the
   items' budget, so the request starts with the earlier one's bytes.
   Pinned is not required: ``start_on`` drops a pinned unit before the
   first user message, a tool rule leaves one out, and its reason is
   ``selected``. Continued with nothing new, a pack makes the earlier
   pack's decisions. When the earlier pack sent only system
   messages, so that an Anthropic request opened with the placeholder user
   message, the selection keeps the placeholder's room first, as the
   earlier pack's did, and gives it up only when a message that opens the
   request is selected. An item the earlier pack cut to fit, still
   here unchanged and marked alike (one cut without a mark, as an awaited
   result or the question the chat ended on, is marked alike though it is
   neither once the conversation goes on), is sent cut as it was then, or cut
   further when what is left needs it, never longer, whatever the budget
   (the manifest's ``cache.replayed_cuts``): its bytes stay those the
   provider cached, and what else fits stays what fitted then. To send it
   whole again, pack without ``previous``.
3. **Evict in steps.** When they do not fit, the oldest units of the
   prefix are evicted in steps: each step evicts at least
   ``eviction_share`` (an option, 0.4 by default) of the evictable units'
   tokens, oldest first, and then up to the next unit that opens with a
   ``user`` message, so the history still starts on a user turn, when
   one unit is left before it (a reply, not a tool exchange) or those
   units cost at most half the share taken. When that unit is farther, or none
   follows (the newest turn is an agent loop's task and its tool steps, a
   question whose steps ran long, or a task whose loop a user message
   interrupted), the user message of the turn the share ends in stays:
   the step evicts the units before it and the oldest of those after it,
   until it has evicted its share, up to the next user turn at most, so
   the task goes on with its newest steps.
   It stays while a unit after it does, or new steps follow with no new
   user message; otherwise the step evicts the turn whole. Only the
   prefix is evicted: the new history is never evicted to open the
   request on a user message (``start_on="user"`` and the Anthropic
   target drop what comes before one, reason ``before_first_user``, as in
   a pack of their own). Units
   with a required item, or with a ``system`` or ``developer`` message, are
   never evicted. Steps are taken until the rest fits; the evicted items
   get reason ``evicted_for_cache``. A step frees room for several turns,
   so the next packs share a prefix again, where a sliding window would
   change it on every turn. A pinned unit that may be cut without changing
   the prefix (its truncatable items are documents or memories sent after
   the history, history after the prefix, or the cut that ends the prefix,
   and none is required)
   counts cut as far as its items'
   ``min_tokens`` allow, and is cut before any history is evicted. If even
   then the units after the prefix do not fit, they are selected as usual;
   one that exceeds the items' budget alone is never pinned (it is left
   out, as in a pack of its own), and a step that would leave the history
   no user message is not taken (a pack of its own ends on the question
   a reply answers rather than send the reply alone). If the evictions
   leave no room for the prefix itself (a budget below its system prompt,
   say), nothing is pinned nor evicted: the pack selects as a pack of its
   own, holding out what the earlier pack left out.
4. **Ranked content after the prefix.** ``document`` and ``memory`` items
   (retrieved for each query, so they change from turn to turn) go after the
   history in the pack, and are selected by the usual order (tier, rank,
   priority) for the tokens the history leaves; one pinned with its unit
   (with ``turns=True``) goes there too. One that shares a group with a
   history message (an attachment) is sent in its place in the history
   instead, as in a pack of its own, so that its bytes stay in the prefix.
   So does one the earlier pack sent amid its history, before its last
   history message (a pack of its own sends its items in input order, so
   a retrieved document may open it): it is history to the pack that
   continues it.

The manifest's ``cache`` section (:class:`CacheReport`) says which items
were sent as the earlier prefix and its length in tokens (read on the
request as the target sends it, see :mod:`cognoxium.packing._request_prefix`), what was evicted
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
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from cognoxium.exceptions import PackError
from cognoxium.packing._cache_report import CacheReport
from cognoxium.packing._costing import UnitCosts
from cognoxium.packing._exclusions import Exclusions
from cognoxium.packing._messages import sent_thinking
from cognoxium.packing._model import REASON_CODE, UNSET, ContextPack, Reason
from cognoxium.packing._renderers import RANKED_ROLES, failed_calls
from cognoxium.packing._request_prefix import (
    RequestPrefix,
    cache_breakpoints,
    message_rows,
    pack_prefix,
    reachable_breakpoints,
    request_prefix,
    shared_units,
)
from cognoxium.packing._truncation import EarlierCut
from cognoxium.packing._units import Units
from cognoxium.packing.cache_models import (
    CacheBill,
    CacheModel,
    bill,
    cache_models,
    get_cache_model,
)

if TYPE_CHECKING:
    from cognoxium.packing._checks import PackCall
    from cognoxium.packing._selection import Decisions
    from cognoxium.packing._truncation import Cutter

__all__ = [
    "RANKED_ROLES",
    "CacheReport",
    "Continuation",
    "check_previous",
    "earlier_cuts",
    "pack_breakpoints",
    "plan_continuation",
    "shared_prefix_tokens",
]


_NEVER_EVICTED = ("system", "developer")
"""History roles a continuing pack does not evict (the instructions)."""

_EVICTED = REASON_CODE[Reason.EVICTED_FOR_CACHE]

_UNSENDABLE = [
    reason.value
    for reason in (
        Reason.EXPIRED,
        Reason.NOT_YET_VALID,
        Reason.QUARANTINED,
        Reason.POLICY,
        Reason.NOT_PACKABLE,
        Reason.GROUP_INCOMPLETE,
    )
]
"""Reasons an item could not be sent at all (the exclusions), whatever the budget."""


@dataclass(frozen=True)
class Continuation:
    """How one pack continues an earlier pack: what it holds out, pins and sends first.

    Attributes
    ----------
    rows
        The exclusions with the held-out rows excluded (``evicted_for_cache``)
        and the pinned rows in tier 0, so the selection takes them first, and
        marked ``pinned``: the rules for required items (``start_on``, the
        tool rules, the manifest's ``required``) do not apply to them.
        Rows are held out, evicted and pinned by whole packing units.
    pinned
        ``(n,)`` bool: rows the selection must take (the units of the kept
        prefix and of the new history, documents in them included), though
        their own retention is not required.
    pinned_units
        ``(n_units,)`` bool: the units of ``pinned`` whose truncatable rows
        are documents and memories, history messages after the kept
        prefix, or the replayed cut that ends it, with no required item: the selection
        cuts them to fit first, whatever ``overflow`` (see
        :attr:`~cognoxium.packing._truncation.Cutter.pinned`).
    history
        ``(n,)`` bool: rows sent with the history, in input order: every
        role but :data:`RANKED_ROLES`, the ``document`` and ``memory``
        items the earlier pack sent amid its history, and the attachments:
        ``document`` and ``memory`` items that share a group with one of
        those.
    prefix
        ``(p,)`` int64: the rows of the earlier prefix that are kept, in order.
    evicted
        ``(e,)`` int64: the rows of the earlier pack evicted, in input order.
    replayed
        ``(r,)`` int64: the rows the earlier pack cut whose cuts are made
        again, ascending (see :meth:`~cognoxium.packing._truncation.Cutter.replay`).
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
    pinned_units: np.ndarray
    history: np.ndarray
    prefix: np.ndarray
    evicted: np.ndarray
    replayed: np.ndarray
    steps: int
    detail: str | None
    previous: ContextPack
    share: float

    def decided(self, decisions: Decisions) -> Decisions:
        """``decisions`` with the history first in pack order, then the ranked content."""
        selected = decisions.selected
        in_history = self.history[selected]
        ordered = np.concatenate([selected[in_history], selected[~in_history]])
        position = np.full(len(decisions.reason), UNSET, dtype=np.int64)
        position[ordered] = np.arange(len(ordered))
        return replace(decisions, selected=ordered, pack_position=position)

    def report(
        self,
        df: pl.DataFrame,
        call: PackCall,
        decisions: Decisions,
        row_tokens: np.ndarray,
        messages: Sequence[dict[str, Any]],
    ) -> CacheReport:
        """The manifest's ``cache`` section for the pack these decisions make.

        The prefix shared with the earlier pack is that of the requests as
        the target renders them (see :mod:`cognoxium.packing._request_prefix`):
        the Anthropic request with ``target="anthropic"`` or a
        ``breakpoints`` cache model, the OpenAI messages otherwise.
        """
        previous = self.previous
        model = call.options.cache_model
        cache = get_cache_model(model) if model is not None else None
        anthropic = call.options.target == "anthropic" or (
            cache is not None and cache.kind == "breakpoints"
        )
        selected = decisions.selected
        now = _current_prefix(df.gather(selected), row_tokens[selected], messages, anthropic)
        before = pack_prefix(previous, anthropic=anthropic)
        shared = shared_units(before, now) if _same_provider(previous, call, cache) else 0
        rows = np.sort(np.array([r for held in now.rows[:shared] for r in held], dtype=np.int64))
        ids = df.get_column("id")
        report: dict[str, Any] = {
            "continues": previous.manifest.digest,
            "eviction_share": self.share,
            "prefix_items": int(now.messages[:shared].sum()),
            "prefix_tokens": int(now.tokens[:shared].sum()),
            "prefix_ids": ids.gather(selected[rows]).to_list(),
            "stable_tokens": int(now.tokens[: now.stable].sum()),
            "evicted": ids.gather(self.evicted).to_list(),
            "eviction_steps": self.steps,
            "eviction_detail": self.detail,
            "replayed_cuts": ids.gather(np.intersect1d(self.replayed, selected)).to_list(),
        }
        if cache is not None:
            elapsed = (call.as_of - previous.manifest.as_of).total_seconds()
            earlier = previous.used_tokens if elapsed <= cache.ttl_seconds else None
            charged = _bill(cache, earlier, before, now, shared, decisions.used_tokens)
            report |= {
                "cache_model": cache.name,
                "input_tokens": charged.input_tokens,
                "cached_tokens": charged.cached_tokens,
                "cache_write_tokens": charged.cache_write_tokens,
                "uncached_tokens": charged.uncached_tokens,
                "billed_tokens": charged.billed_tokens,
            }
        return CacheReport(**report)


def _same_provider(previous: ContextPack, call: PackCall, cache: CacheModel | None) -> bool:
    """Whether the earlier pack's request went to the API this one goes to.

    A request built for another target (``openai`` or ``anthropic``), or
    billed under a cache model of the other kind (``automatic`` or
    ``breakpoints``), went to another provider, whose cache this request
    cannot read: nothing of it is shared.
    """
    if previous.manifest.target != call.options.target:
        return False
    earlier = previous.manifest.cache
    if cache is None or earlier is None or earlier.cache_model in (None, cache.name):
        return True
    known = cache_models().get(earlier.cache_model)  # a model not registered: taken as the same
    return known is None or known.kind == cache.kind


def _current_prefix(
    frame: pl.DataFrame, tokens: np.ndarray, messages: Sequence[dict[str, Any]], anthropic: bool
) -> RequestPrefix:
    """The :func:`request_prefix` of the pack being made: its rows in pack order and messages.

    A continuing pack has no gap note, so each message sends items.
    """
    rows = message_rows(frame)
    roles = frame.get_column("role").cast(pl.String).to_numpy()
    return request_prefix(
        messages,
        rows,
        np.array([int(tokens[r].sum()) for r in rows], dtype=np.int64),
        np.array([roles[r[0]] in RANKED_ROLES for r in rows], dtype=bool),
        anthropic=anthropic,
        failed=failed_calls(frame) if anthropic else frozenset(),
        thinking=sent_thinking(frame) if anthropic else {},
    )


def _bill(
    model: CacheModel,
    earlier_tokens: int | None,
    before: RequestPrefix,
    now: RequestPrefix,
    shared: int,
    input_tokens: int,
) -> CacheBill:
    """Bill request ``now`` under ``model`` against ``before`` (``earlier_tokens=None``: expired).

    ``shared`` units lead both requests. A ``breakpoints`` model writes at
    this request's marks and reads the longest of the earlier request's
    marks that is shared and within the lookback of one of this request's
    (see :func:`~cognoxium.packing._request_prefix.reachable_breakpoints`).
    """
    marks = cache_breakpoints(now, model)
    ends = [int(now.ends_tokens[m]) for m in marks]
    if earlier_tokens is None:
        return bill(model, input_tokens=input_tokens, breakpoints=ends)
    earlier = cache_breakpoints(before, model)
    return bill(
        model,
        input_tokens=input_tokens,
        shared_tokens=int(now.tokens[:shared].sum()),
        previous_input_tokens=earlier_tokens,
        previous_breakpoints=reachable_breakpoints(
            before, earlier, now, marks, shared, model.lookback_blocks
        ),
        breakpoints=ends,
    )


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
    cuts: pl.DataFrame,
    cutter: Cutter | None = None,
) -> Continuation:
    """Find the kept prefix, the rows held out and the eviction steps of a continuing pack.

    Rows are pinned, held out and evicted by whole packing units (see
    :mod:`cognoxium.packing._units`): a ``document`` or ``memory`` item that
    shares a unit with history travels with it.

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
        units' are counted here.
    call
        The checked budget and options (``eviction_share`` is read).
    previous
        The earlier pack.
    cuts
        The items here that ``previous`` cut (:func:`earlier_cuts`).
    cutter
        Cuts the truncatable rows (``None``: no row is truncatable). A
        pinned unit whose truncatable rows are documents and memories, or
        history messages after the kept prefix or in its last unit when
        that unit holds a replayed cut, with no required item, is
        counted cut as far as their ``min_tokens`` allow: cutting them
        keeps the prefix, and evicting history would not.

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
    check_previous(previous, call)
    replayed: dict[int, EarlierCut] = {}
    if cutter is not None:
        replayed = _replayed(cuts, cutter)
        cutter.replay(replayed)
    replayed_rows = np.fromiter(sorted(replayed), dtype=np.int64, count=len(replayed))
    at = _Rows.of(df, rows, units, replayed_rows, previous)
    prefix = _kept_prefix(df, at, previous)
    pinned = held = evicted = np.zeros(df.height, dtype=bool)
    steps, detail = 0, None
    if len(prefix):
        pinned, held = _pinned_and_held(df, at, prefix, previous)
        pinned, evicted, steps, detail = _evicted(at, prefix, pinned, costs, call, cutter)
    ranked_again = _ranked_again(at, evicted)
    evicted &= ~ranked_again
    sent_first = at.sent_first & ~ranked_again
    excluded = held | evicted
    reason = rows.reason.copy()
    reason[excluded] = _EVICTED
    lifted = pinned & (rows.tier != 0)
    tier = np.where(lifted, 0, rows.tier)
    eligible = rows.eligible & ~excluded
    kept = replace(
        rows, reason=reason, eligible=eligible, tier=tier, pinned=lifted, sent_first=sent_first
    )
    pinned_units = np.zeros(units.n_units, dtype=bool)
    if cutter is not None:
        pinned_units[at.unit[_cut_first(at, pinned, cutter, prefix[~evicted[prefix]])]] = True
    return Continuation(
        rows=kept,
        pinned=pinned,
        pinned_units=pinned_units,
        history=sent_first,
        prefix=prefix[~(evicted | ranked_again)[prefix]],
        evicted=np.flatnonzero(excluded & _in_pack(df, previous)),
        replayed=replayed_rows,
        steps=steps,
        detail=detail,
        previous=previous,
        share=call.options.eviction_share,
    )


@dataclass(frozen=True)
class _Rows:
    """The ``n`` rows a continuation reasons about, each with its packing unit.

    Attributes
    ----------
    history
        ``(n,)`` bool: the row is history: its role is not in
        :data:`RANKED_ROLES`, or the earlier pack sent it amid its history
        (see :func:`_sent_amid_history`).
    roles
        ``(n,)`` object: the rows' roles.
    unit
        ``(n,)`` int64: each row's packing unit.
    eligible, tier
        The rows' exclusions: ``(n,)`` bool candidates and int64 tier codes.
    alone
        Every unit is one row (then :meth:`whole` returns its mask).
    replayed
        ``(n,)`` bool: the earlier pack cut the row, and its cut is made again.
    sent_first
        ``(n,)`` bool: the row is sent with the history, in input order: a
        history row, or a ``document`` or ``memory`` item that shares a group
        with one (an attachment).
    """

    history: np.ndarray
    roles: np.ndarray
    unit: np.ndarray
    eligible: np.ndarray
    tier: np.ndarray
    alone: bool
    replayed: np.ndarray
    sent_first: np.ndarray

    @classmethod
    def of(
        cls,
        df: pl.DataFrame,
        rows: Exclusions,
        units: Units,
        replayed: np.ndarray,
        previous: ContextPack,
    ) -> _Rows:
        """The rows of ``df`` with their exclusions and units, and the ``replayed`` rows."""
        role = df.get_column("role").cast(pl.String)
        unit = units.unit_of_row
        cut = np.zeros(df.height, dtype=bool)
        cut[replayed] = True
        history = ~role.is_in(RANKED_ROLES).to_numpy() | _sent_amid_history(df, previous)
        return cls(
            history=history,
            roles=role.to_numpy(),
            unit=np.arange(df.height) if unit is None else unit,
            eligible=rows.eligible,
            tier=rows.tier,
            alone=unit is None,
            replayed=cut,
            sent_first=history | _attached(df.get_column("group_id"), history),
        )

    def whole(self, mask: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: the rows whose unit has a row in ``mask`` (a bool mask or row indices)."""
        if self.alone:
            out = np.zeros(len(self.unit), dtype=bool)
            out[mask] = True
            return out
        found: np.ndarray = np.isin(self.unit, self.unit[mask])
        return found

    @cached_property
    def required(self) -> np.ndarray:
        """``(n,)`` bool: the row's unit has a required candidate row."""
        return self.whole(self.eligible & (self.tier == 0))

    @cached_property
    def replayed_units(self) -> np.ndarray:
        """``(n,)`` bool: the row's unit has a replayed cut."""
        return self.whole(self.replayed)

    @cached_property
    def movable(self) -> np.ndarray:
        """``(n,)`` bool: the row's unit may be held out or evicted.

        It has no required item and no ``system`` or ``developer`` message.
        """
        movable: np.ndarray = ~self.required & ~self.whole(np.isin(self.roles, _NEVER_EVICTED))
        return movable

    def units_in(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The units with a history row in ``mask``, ordered by their first such row, and it."""
        first = np.flatnonzero(mask & self.history)
        found, at = np.unique(self.unit[first], return_index=True)
        order = np.argsort(first[at], kind="stable")
        return found[order], first[at][order]


def check_previous(previous: object, call: PackCall) -> None:
    """Raise :class:`PackError` unless ``previous`` is a pack of ``call``'s token profile."""
    if not isinstance(previous, ContextPack):
        raise PackError(
            f"previous must be the ContextPack this pack continues, got {type(previous).__name__}"
        )
    if previous.manifest.profile != call.profile.name:
        raise PackError(
            f"previous was packed with the token profile {previous.manifest.profile!r}, this "
            f"pack with {call.profile.name!r}: a pack continues one of its own profile"
        )


_CUTS_SCHEMA = {"row": pl.UInt32, "side": pl.String, "kept": pl.Int64, "sent": pl.String}


def earlier_cuts(df: pl.DataFrame, previous: ContextPack) -> pl.DataFrame:
    """The items of ``df`` that ``previous`` cut, unchanged since, by row ascending.

    An item is unchanged when its id and its uncut content hash are the
    same. The packer marks those without a truncation mark of their own
    (:func:`~cognoxium.packing._truncation.mark_earlier_cuts`), so their cut
    is made again, and :func:`plan_continuation` replays them.

    Parameters
    ----------
    df
        The items, ``n`` rows in input order.
    previous
        The earlier pack.

    Returns
    -------
    polars.DataFrame
        One row per cut item found: ``row`` (its row in ``df``), ``side``
        (the side cut), ``kept`` (the tokens kept) and ``sent`` (the text
        ``previous`` sent).
    """
    records = previous.manifest.truncations
    cut = pl.DataFrame(
        {
            "id": [r.id for r in records],
            "content_hash": [r.parent_hash for r in records],
            "side": [r.side for r in records],
            "kept": [r.kept_tokens for r in records],
        },
        schema={"id": pl.String, "content_hash": pl.String, "side": pl.String, "kept": pl.Int64},
    )
    if not records:
        return pl.DataFrame(schema=_CUTS_SCHEMA)
    sent = previous.frame.select("id", pl.col("text").alias("sent"))
    return (
        df.select("id", "content_hash")
        .with_row_index("row")
        .join(cut, on=["id", "content_hash"], how="inner", maintain_order="left")
        .join(sent, on="id", how="inner", maintain_order="left")
        .select("row", "side", "kept", "sent")
    )


def _replayed(cuts: pl.DataFrame, cutter: Cutter) -> dict[int, EarlierCut]:
    """Row -> its cut by the earlier pack, for the ``cuts`` (see :func:`earlier_cuts`) replayed.

    A cut is replayed when its row still carries a truncation mark of the
    same side whose ``min_tokens`` the cut kept. The cut's text is the one
    the earlier pack sent.
    """
    out: dict[int, EarlierCut] = {}
    for row, side, kept, text in cuts.iter_rows():
        mark = cutter.marks.rows.get(row)
        if mark is not None and mark.side == side and kept >= mark.min_tokens:
            out[row] = EarlierCut(kept_tokens=kept, text=text)
    return out


def _pinned_and_held(
    df: pl.DataFrame, at: _Rows, prefix: np.ndarray, previous: ContextPack
) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` bool each: the units pinned and held out.

    Held out, unless required or holding a ``system`` or ``developer``
    message: the units of history outside the prefix that come before its
    last row or that the earlier pack passed over (see
    :func:`_passed_over`), but for a unit that gained an item since (a
    tool call whose results came): it could not be sent as it is now, so
    it is new. Pinned: the prefix's units and the other units of history
    after it (what the earlier pack sent after its prefix, and the new
    messages).
    """
    in_prefix = at.whole(prefix)
    before = np.arange(len(at.unit)) <= int(prefix[-1])
    rest = at.eligible & at.history & ~in_prefix
    passed, seen = _passed_over(df, previous)
    passed &= ~at.whole(at.eligible & ~seen)
    left_out = at.whole(rest & (before | passed)) & at.eligible
    held = left_out & at.movable
    pinned = (in_prefix | at.whole(rest & ~before)) & at.eligible & ~left_out
    return pinned, held


_NO_ROWS = np.zeros(0, dtype=np.int64)


def _evicted(
    at: _Rows,
    prefix: np.ndarray,
    pinned: np.ndarray,
    costs: UnitCosts,
    call: PackCall,
    cutter: Cutter | None,
) -> tuple[np.ndarray, np.ndarray, int, str | None]:
    """The rows pinned and evicted so the pinned and required units fit, the steps and why.

    Steps evict the prefix's units, oldest first (see :func:`_eviction_step`),
    while the pinned and required units exceed the items' budget. A unit
    after the prefix that exceeds it alone is not pinned; the others are
    unpinned (selected as usual) when even the evictions leave no room for
    them. When they leave none for the prefix itself, nothing is pinned nor
    evicted. Required units and those holding a ``system`` or ``developer``
    message are never evicted. The pinned units that may be cut count cut
    (see :func:`plan_continuation`), but for the awaited tool results
    (:func:`~cognoxium.packing._truncation.mark_awaited`): they count whole,
    or cut when whole their unit exceeds the items' budget alone.
    """
    need_rows = pinned | (at.eligible & at.required)
    costs.count(np.unique(at.unit[need_rows]))
    tokens = np.where(need_rows, costs.row_tokens, 0)
    cut = own = _NO_ROWS
    if cutter is not None:
        cut = np.flatnonzero(_cut_first(at, pinned, cutter, prefix))
        own = cutter.marks.own(cut)  # an awaited result counts whole: evictions make room
        tokens[own] = cutter.floor_costs(own)
    room = call.item_budget - call.profile.tokens_per_pack
    in_prefix = at.whole(prefix) & pinned
    new = pinned & ~in_prefix & ~at.required
    alone = _larger_than(at, tokens, new, room)
    big = np.setdiff1d(cut, own)
    big = big[alone[big]]
    if cutter is not None and big.size:  # ... for it cut, when whole it exceeds the room alone
        tokens[big] = cutter.floor_costs(big)
        alone = _larger_than(at, tokens, new, room)
    pinned = pinned & ~alone
    tokens[alone] = 0
    first_need = int(tokens.sum())
    evictable, _ = at.units_in(in_prefix & at.movable)
    evicted, steps = _steps(at, tokens, evictable, pinned, first_need - room, call)
    if first_need - int(tokens[evicted].sum()) > room:  # the new turn does not fit: select it
        pinned = pinned & in_prefix
        kept_need = np.where(in_prefix | (at.eligible & at.required), tokens, 0)
        if int(kept_need[~evicted].sum()) > room:  # nor does the prefix: a pack of its own
            nothing = np.zeros(len(at.unit), dtype=bool)
            return nothing, nothing, 0, None
    detail = None
    if steps:
        detail = (
            f"the earlier prefix and the new history need {first_need} tokens, more than "
            f"the {room} the items may use; {steps} step(s) of at least "
            f"{call.options.eviction_share:g} of the evictable history evicted "
            f"{int(evicted.sum())} items"
        )
    return pinned & ~evicted, evicted, steps, detail


def _steps(
    at: _Rows,
    tokens: np.ndarray,
    evictable: np.ndarray,
    pinned: np.ndarray,
    excess: int,
    call: PackCall,
) -> tuple[np.ndarray, int]:
    """``(n,)`` bool rows evicted, and the steps, until ``excess`` tokens are freed or none is left.

    ``evictable`` are the units that may be evicted, oldest first; each
    step is :func:`_eviction_step` of what is left of them.
    """
    evicted = np.zeros(len(at.unit), dtype=bool)
    unit_cost = np.bincount(at.unit, weights=tokens, minlength=int(at.unit.max()) + 1)
    open_turn = not (
        pinned & at.history & (at.roles == "user") & ~np.isin(at.unit, evictable)
    ).any()
    share = call.options.eviction_share
    steps = 0
    asks = pinned & at.history & (at.roles == "user")
    while int(tokens[evicted].sum()) < excess and len(evictable):
        lead = _lead_roles(at, evictable)
        cost = unit_cost[evictable].astype(np.int64)
        tool = np.isin(evictable, at.unit[at.history & (at.roles == "tool")])
        taken = _eviction_step(cost, share, lead, tool, open_turn=open_turn)
        gone = np.isin(at.unit, evictable[taken]) & pinned
        if asks.any() and not (asks & ~(evicted | gone)).any():
            break  # it would leave no user message: a pack of its own ends on the question
        evicted |= gone
        evictable = np.delete(evictable, taken)
        steps += 1
    return evicted, steps


def _larger_than(at: _Rows, tokens: np.ndarray, rows: np.ndarray, room: int) -> np.ndarray:
    """``(n,)`` bool: the rows of ``rows`` whose unit's ``tokens`` there exceed ``room``."""
    per_unit = np.bincount(at.unit, weights=np.where(rows, tokens, 0), minlength=len(at.unit))
    found: np.ndarray = rows & (per_unit[at.unit] > room)
    return found


def _cut_first(at: _Rows, pinned: np.ndarray, cutter: Cutter, prefix: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the rows of the pinned units cut to fit before any other unit.

    Units with no required item and no truncatable row of the kept prefix
    (``prefix``, its rows: history and attachments) but in the unit of a
    replayed cut, which ends the prefix: what they cut is a ``document`` or
    ``memory`` item sent after the history or after the prefix, a history
    message after the prefix, or the prefix's last unit, so the bytes
    before it stay.
    """
    in_prefix = np.zeros(len(at.unit), dtype=bool)
    in_prefix[prefix] = True
    cut_prefix = in_prefix & at.sent_first & (cutter.marks.floor >= 0) & ~at.replayed_units
    first: np.ndarray = pinned & ~at.required & ~at.whole(cut_prefix)
    return first


def _lead_roles(at: _Rows, units: np.ndarray) -> np.ndarray:
    """``(k,)`` object: the role of each of ``units``' first history row."""
    found, first = at.units_in(np.isin(at.unit, units))
    lead = np.empty(len(units), dtype=object)
    lead[np.searchsorted(found, units, sorter=np.argsort(found))] = at.roles[first]
    return lead


def _sent_amid_history(df: pl.DataFrame, pack: ContextPack) -> np.ndarray:
    """``(n,)`` bool: ``pack`` sent the row's item, a ``document`` or ``memory``, amid history.

    Sent before the last history message ``pack`` sent: a pack of its own
    sends its items in input order, so a ranked item may open it or sit
    between two messages. Such an item is part of the bytes the provider
    cached, and a pack continuing ``pack`` keeps it in its place, as
    history.
    """
    ranked = pack.frame.get_column("role").cast(pl.String).is_in(RANKED_ROLES).to_numpy()
    history = np.flatnonzero(~ranked)
    amid = ranked & (np.arange(len(ranked)) < (history[-1] if len(history) else 0))
    ids = pack.frame.get_column("id").filter(pl.Series(amid))
    return df.get_column("id").is_in(ids.implode()).to_numpy()


def _ranked_again(at: _Rows, evicted: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the rows of ``evicted`` that are ranked content again, not evicted.

    A ``document`` or ``memory`` item the earlier pack sent amid its
    history, in a unit with no history message, keeps its place while the
    history around it does: evicted with that history, it goes after the
    history and is selected by the usual order, as in the pack that sent it
    before, so a pack continued with nothing new sends it again.
    """
    ranked = np.isin(at.roles, RANKED_ROLES)
    again: np.ndarray = evicted & ranked & ~at.whole(at.history & ~ranked)
    return again


def _in_pack(df: pl.DataFrame, pack: ContextPack) -> np.ndarray:
    """``(n,)`` bool: the row's id is an item of ``pack``."""
    return df.get_column("id").is_in(pack.frame.get_column("id").implode()).to_numpy()


def _passed_over(df: pl.DataFrame, pack: ContextPack) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` bool each: ``pack`` could send the row's item and left it out; it saw the item.

    Passed over: its manifest entry is excluded for a reason of the
    selection (the budget, a gap, ``start_on``, a tool rule, an eviction),
    not for one of :data:`_UNSENDABLE`: an item that can be sent now and
    could not then is new. Seen: it has an entry (it was an input of ``pack``).
    """
    entries = pack.manifest.to_polars()
    reason = pl.col("reason").cast(pl.String)
    passed = (pl.col("decision") == "excluded") & ~reason.is_in(_UNSENDABLE)
    found = df.select("id").join(
        entries.select("id", passed.alias("passed"), pl.lit(True).alias("seen")),
        on="id",
        how="left",
        maintain_order="left",
    )
    return (
        found.get_column("passed").fill_null(False).to_numpy(),
        found.get_column("seen").fill_null(False).to_numpy(),
    )


def _kept_prefix(df: pl.DataFrame, at: _Rows, previous: ContextPack) -> np.ndarray:
    """``(p,)`` int64: the rows of the earlier pack's leading history still sendable, in order.

    A row is kept while it, and every row of its unit the earlier pack
    sent, is still in the frame unchanged (same id and content hash, or a
    cut made again: see :func:`_earlier_cuts`) and packable; the prefix
    ends with the first unit whose cut is made again (it may be cut
    further), and before a required unit the earlier pack did not send,
    which must be sent.
    """
    if df.is_empty():
        return np.zeros(0, dtype=np.int64)
    before = previous.frame.select("id", "content_hash", "role")
    found = before.join(
        df.select("id", pl.col("content_hash").alias("now")).with_row_index("row"),
        on="id",
        how="left",
        maintain_order="left",
    )
    present = found.get_column("row").is_not_null().to_numpy()
    at_rows = found.get_column("row").fill_null(0).cast(pl.Int64).to_numpy()
    same = (found.get_column("content_hash") == found.get_column("now")).fill_null(False)
    same = same.to_numpy() | at.replayed[at_rows]  # a cut made again sends the same bytes
    changed = at.whole(at_rows[present & ~same])
    ok = same & present
    ok &= ~changed[at_rows] & at.eligible[at_rows] & at.sent_first[at_rows]
    prefix = at_rows[: int(np.argmin(ok)) if not ok.all() else len(ok)]
    if len(prefix) > 1:
        rising = np.diff(prefix) > 0
        if not rising.all():
            prefix = prefix[: int(np.argmin(rising)) + 1]
    return _before_late_required(at, _to_first_cut(at, prefix.astype(np.int64)))


def _to_first_cut(at: _Rows, prefix: np.ndarray) -> np.ndarray:
    """``prefix`` up to the end of its first unit with a replayed cut.

    The rows after that unit would follow bytes that may be cut further.
    """
    cut = at.replayed_units[prefix]
    if not cut.any():
        return prefix
    first = int(np.argmax(cut))
    rest = at.unit[prefix[first:]] != at.unit[prefix[first]]
    return prefix[: first + (int(np.argmax(rest)) if rest.any() else len(rest))]


def _attached(group: pl.Series, history: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: the rows not of ``history`` whose ``group`` (id) has a history row.

    An attachment of a message: it is sent in its place in the history, as
    in a pack of its own, not with the ranked content after it.
    """
    with_history = group.filter(pl.Series(history) & group.is_not_null()).unique()
    shared = group.is_in(with_history.implode()).fill_null(False).to_numpy()
    attached: np.ndarray = ~history & shared
    return attached


def _before_late_required(at: _Rows, prefix: np.ndarray) -> np.ndarray:
    """``prefix`` up to the first required unit the earlier pack did not send before its end."""
    if not len(prefix):
        return prefix
    late = np.flatnonzero(at.required & at.eligible & at.history & ~at.whole(prefix))
    late = late[late < prefix[-1]]
    return prefix[prefix < late[0]] if len(late) else prefix


def _eviction_step(
    cost: np.ndarray,
    share: float,
    lead: np.ndarray,
    tool: np.ndarray | None = None,
    *,
    open_turn: bool = False,
) -> np.ndarray:
    """Which of the evictable units one step evicts: their positions, oldest first.

    At least ``share`` of the evictable units' tokens (``cost``, ``(k,)``
    int64 in tokens), then up to the next unit that opens with a ``user``
    message (``lead``, ``(k,)``: each unit's first history role), so the
    history left starts on a user turn, when one unit is left before it (a
    reply, not a tool exchange: ``tool``, ``(k,)`` bool, the unit holds a
    tool result) or the units up to it cost at most half the share taken.
    When that unit is farther (a turn whose tool steps ran long) or none
    follows (an agent loop's newest turn), the user message of the turn the
    share ends in (its task) stays: the step evicts every unit before it
    and the units after it, oldest first, until it has evicted ``share``
    of the tokens, up to the next user turn at most, leaving a hole after
    it. The
    task stays only while something answers it: a unit after it that the
    step leaves, or, with no new user message (``open_turn``), the new
    steps of its loop. Otherwise, and with no user message at all, the step
    evicts every unit; with no user message in the share and the next one
    far, it evicts the share alone.

    Returns
    -------
    numpy.ndarray
        ``(e,)`` int64 positions into ``cost``, ascending.

    Examples
    --------
    >>> lead = np.array(["user", "assistant", "user", "assistant"], dtype=object)
    >>> _eviction_step(np.array([10, 10, 10, 10]), 0.4, lead).tolist()
    [0, 1]
    >>> loop = np.array(["user", "assistant", "assistant", "assistant"], dtype=object)
    >>> _eviction_step(np.array([10, 10, 10, 10]), 0.4, loop).tolist()
    [1, 2]
    >>> two = np.array(["user", "assistant", "user", "assistant", "assistant"], dtype=object)
    >>> _eviction_step(np.array([5, 5, 5, 100, 100]), 0.4, two).tolist()
    [0, 1, 3]
    >>> _eviction_step(np.array([10, 30]), 0.4, loop[:2]).tolist()  # nothing would answer it
    [0, 1]
    >>> _eviction_step(np.array([10, 30]), 0.4, loop[:2], open_turn=True).tolist()
    [1]
    >>> chat = lead[[0, 1, 0, 1, 0]]  # one long reply before the next question: it goes
    >>> _eviction_step(np.array([10, 10, 10, 500, 10]), 0.05, chat).tolist()
    [0, 1, 2, 3]
    >>> long = np.array(["user", *["assistant"] * 14, "user", "assistant"], dtype=object)
    >>> _eviction_step(np.full(17, 10), 0.4, long).tolist()  # a far user turn: the task stays
    [1, 2, 3, 4, 5, 6, 7]
    >>> steps = np.array([False, True, True, False, True, True, False, True])
    >>> tasks = np.where(steps, "assistant", "user").astype(object)
    >>> cost = np.array([10, 160, 160, 10, 260, 310, 10, 110])
    >>> _eviction_step(cost, 0.4, tasks, steps).tolist()  # the task's newest step is no reply
    [0, 1, 2, 4]
    """
    upto = _share_end(cost, share)
    users = np.flatnonzero(lead == "user")
    later, earlier = users[users >= upto], users[users < upto]
    if len(later):
        turn = int(later[0])
        reply = turn == upto or (turn - upto == 1 and (tool is None or not tool[upto]))
        if reply or 2 * int(cost[upto:turn].sum()) <= int(cost[:upto].sum()):
            return np.arange(turn, dtype=np.int64)
        if not len(earlier):  # the share ends mid-turn, its user message already gone
            return np.arange(upto, dtype=np.int64)
    if len(earlier):
        task = int(earlier[-1])
        end = int(later[0]) if len(later) else len(cost)
        rest = math.ceil(share * int(cost.sum())) - int(cost[:task].sum())
        after = min(task + 1 + _reach(cost[task + 1 :], rest), end)
        answered = after < len(cost) or open_turn
        if answered and (task > 0 or after > task + 1):
            return np.concatenate([np.arange(task), np.arange(task + 1, after)]).astype(np.int64)
    return np.arange(len(cost), dtype=np.int64)


def _share_end(cost: np.ndarray, share: float) -> int:
    """How many of the units, oldest first, it takes to reach ``share`` of ``cost``'s sum."""
    return _reach(cost, math.ceil(share * int(cost.sum())))


def _reach(cost: np.ndarray, tokens: int) -> int:
    """How many of the units, oldest first, it takes to reach ``tokens`` (one at least)."""
    return min(int(np.searchsorted(np.cumsum(cost), tokens, side="left")) + 1, len(cost))
