"""Packing a frame under a token budget, with a manifest that explains every decision.

The algorithm follows the design ("pack(budget)"). :func:`pack` is a short
orchestration over named phases, each a function in its own private module
that returns its own result:

1. checks (``_checks``): the budget, the token profile, ``as_of``, the item
   columns and unique ids;
2. policies (``_policies``): every policy's verdict, once, over the whole frame;
3. exclusions (``_exclusions``): items that are not valid at ``as_of``,
   quarantined items (a non-null ``quarantine_reason``, see
   :meth:`CognitionFrame.quarantine <cognoxium.frame.frame.CognitionFrame.quarantine>`),
   items a policy excludes and non-packable (Binary) items are excluded, each
   with its reason; a group (``_units``) with such a member is excluded whole.
   An item is valid when ``max(created_at, valid_from) <= as_of <
   expires_at``: packing as of a past time never sees items made after it;
4. costing (``_costing``): each item costs the tokens of the chat message it
   sends (``_messages``), by the chat costing rule of
   :mod:`cognoxium.tokens.profiles`: its role's framing, its name, its content,
   its tool call id or tool calls (ids, function names, arguments JSON);
5. selection (``_selection``): required items go in first; if they alone
   exceed the budget, :class:`~cognoxium.exceptions.BudgetError` names them
   and nothing is packed. Preferred items are considered before optional
   ones; within a tier the order is rank desc, priority desc, token cost asc,
   id asc; an item that does not fit is skipped (``over_budget``) and the next
   one is tried. Conversation items (``user``, ``assistant``, ``tool``)
   without a rank are taken newest first instead (the last in input order
   first, as LangChain's ``trim_messages(strategy="last")`` keeps a history's
   tail), after the other items of their tier and priority; with
   ``gaps="stop"`` (the default) the first of them that does not fit ends
   them, so the conversation kept is an unbroken tail (but for the tool
   exchanges and replies newer than every user message taken: those are
   passed over, as holes); with ``gaps="fill"``
   older ones fill the space and each hole is marked (reason ``gap``,
   ``gap_records``; ``_gaps``). The manifest's ``order`` says ``recency``
   when that order was used. The pack keeps the input (conversational) order
   of the selected items. The items fit in ``budget - reserve`` (the reply
   reserve). A truncatable item (``metadata.truncate``, see
   :class:`~cognoxium.items.model.Truncation`) that does not fit whole is cut
   at token boundaries to fit what is left, if it can keep its
   ``min_tokens``; with ``overflow="truncate"``, required items that do not
   fit are cut first (``_truncation``);
6. manifest (``_manifest``): every input item's entry, the totals, merges,
   policy outcomes, lineage and fingerprints.

Items of one ``group_id`` form one unit: packed or dropped together. A unit's
tier is its strongest member retention, its rank and priority the members'
highest, its cost their sum, its id the smallest member id.

Conversation integrity. A tool call and all of its results share a group
(the chat importers give them one), so a call never goes without its
results. With ``turns=True`` a whole turn is one unit too (``_units``): a
``user`` message with the ``assistant`` and ``tool`` messages that answer it,
up to the next ``user`` message; a pack then never holds a reply without its
question nor a question with part of its answer, so it never shows the model
``[system, user, user]`` where the input had a reply in between. With
``start_on="user"`` (``_conversation``) the pack, after its system block,
starts on a user message: selected units before the first one are dropped
(reason ``before_first_user``) and the freed tokens go to the next
candidates. Tool messages keep the rules of the chat APIs (``_tool_rules``,
``tool_errors``): with ``"repair"`` (the default) an unanswered call is left
out with its partial results, and an orphan or duplicate result alone, each
with the rule as its reason; with ``"error"`` the pack raises
:class:`~cognoxium.exceptions.MessageError`. A pack built for Anthropic
(``target="anthropic"``) starts on a user message when it may send one,
counts the user message its rendering opens with when it starts on none, and
keeps two more tool rules: a call whose arguments are not a JSON object (its
``tool_use`` input) is left out with its results
(``tool_call_arguments_invalid``), and so is a call whose id an earlier
message's call has (``tool_use_id_duplicate``).

Only what can matter is tokenized: candidates are costed in selection order,
in batches, and a unit whose proven lower bound (see
:meth:`cognoxium.tokens.profiles.TokenProfile.lower_bound`) exceeds the remaining budget
is skipped without counting. Such items are reported with ``tokens`` null;
an item counted ahead but never compared with the budget left is too, so a
manifest does not depend on how far ahead costs were counted.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections.abc import Callable, MutableMapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property, partial
from typing import Any

import numpy as np
import polars as pl

from cognoxium._columns import CHAT_ROLES
from cognoxium._threads import in_daemon_thread
from cognoxium.exceptions import BudgetError, MessageError, OrderWarning, PackError
from cognoxium.governance.lineage import lineage_edges
from cognoxium.governance.policies import Policy
from cognoxium.items.hashing import check_content_hashes
from cognoxium.packing._checks import PackCall, check_call, check_frame, check_rank
from cognoxium.packing._conversation import ChatRoles, reach_user, start_on_user, user_units
from cognoxium.packing._costing import KnownCosts, Rendering, UnitCosts, render
from cognoxium.packing._exclusions import Exclusions, exclude_incomplete_groups, find_exclusions
from cognoxium.packing._gaps import (
    mark_gaps,
    mark_tail,
    notes_tokens,
    place_notes,
    stop_at_first_miss,
)
from cognoxium.packing._manifest import (
    ManifestBasis,
    basis_row,
    manifest_basis,
    manifest_entries,
    manifest_header,
)
from cognoxium.packing._model import ENTRY_SCHEMA as ENTRY_SCHEMA
from cognoxium.packing._model import (
    REASON_CODE,
    UNSET,
    ContextPack,
    Decision,
    GapRecord,
    ManifestEntry,
    ManifestTotals,
    MergeRecord,
    PackManifest,
    PolicyOutcome,
    Reason,
    TruncationRecord,
)
from cognoxium.packing._policies import review_policies
from cognoxium.packing._renderers import NOT_BLANK, OPENING, sends_blocks
from cognoxium.packing._selection import (
    Decisions,
    Queue,
    decide_rows,
    ids_in_order,
    order_units,
    select_units,
)
from cognoxium.packing._tool_rules import (
    SelectionCheck,
    ToolRows,
    detached,
    leave_out,
    packed_rows,
    raise_first_fault,
)
from cognoxium.packing._truncation import (
    Cutter,
    Marks,
    find_marks,
    lower_cheap,
    mark_awaited,
    mark_earlier_cuts,
)
from cognoxium.packing._units import Units, form_units
from cognoxium.packing.cache import (
    Continuation,
    check_previous,
    earlier_cuts,
    plan_continuation,
)
from cognoxium.packing.options import PackOptions
from cognoxium.tokens.profiles import TokenProfile, get_profile

__all__ = [
    "CHAT_ROLES",
    "ContextPack",
    "Decision",
    "GapRecord",
    "ManifestEntry",
    "ManifestTotals",
    "MergeRecord",
    "PackManifest",
    "PackOutcome",
    "PackScope",
    "PolicyOutcome",
    "Reason",
    "TruncationRecord",
    "pack",
    "pack_reusing",
]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_AS_OF_KEPT = 16
"""How many spans of ``as_of`` times a :class:`PackScope` keeps the exclusions of."""

_Shape = tuple[bool, str | None, bool]
"""What a scope's packing units and costs depend on: whole turns, the tool rules whose faults of
the input leave rows out (``None`` when no row is left out), and whether the rows are costed as an
Anthropic request sends them (a pack built for Anthropic over rows that hold thinking blocks or
images, see :meth:`~cognoxium.packing._costing.Rendering.for_anthropic`)."""

_VALIDITY_TIMES = ("created_at", "valid_from", "expires_at")
"""The times of a row at which its validity can change."""


def pack(
    df: pl.DataFrame,
    budget: int,
    options: PackOptions | None = None,
    *,
    label: str | None = None,
    policy: Policy | Sequence[Policy] | None = None,
    previous: ContextPack | None = None,
) -> ContextPack:
    """Select items of ``df`` under a token budget and explain every decision.

    Parameters
    ----------
    df
        Items in the canonical schema (extra columns are carried along), in
        input (conversational) order.
    budget
        The token budget, in tokens (>= 0).
    options
        How the pack is made (:class:`~cognoxium.packing.options.PackOptions`;
        ``None``: the defaults): the token profile, the UTC time validity is
        evaluated at (items created or valid from after it, or expired by
        it, are excluded; ``None`` means now, which is not reproducible: give
        it for byte-identical manifests), the tokens kept for the reply (the
        items fit in ``budget - reserve``), what happens when the required
        items alone do not fit (``"error"`` or ``"truncate"``), whole turns
        as packing units (a ``user`` message with the ``assistant`` and
        ``tool`` messages that answer it; system, developer, document and
        memory items stay units of their own), and ``start_on="user"``
        (after its system block the pack starts on a message sent with the
        ``user`` role; units before it are dropped with reason
        ``before_first_user``), ``tool_errors`` (``"repair"``: tool messages
        the chat APIs reject are left out, reasons ``tool_call_unanswered``,
        ``tool_result_orphan``, ``tool_result_duplicate``, and for
        ``target="anthropic"`` ``tool_call_arguments_invalid`` and
        ``tool_use_id_duplicate``; ``"error"``:
        :class:`~cognoxium.exceptions.MessageError`), ``target``
        (``"anthropic"``: the pack renders as a valid Anthropic request,
        what the rendering adds counted, and holds no tool call whose
        arguments are not a JSON object) and ``gaps`` (``"stop"``: the
        conversation items without a rank, taken newest first, end at the
        first that does not fit; ``"fill"``: older ones fill the space, and
        each hole is marked). ``turns``, ``start_on``,
        ``tool_errors="error"``, ``target="anthropic"`` and ``gaps="fill"``
        enter the
        settings fingerprint when set.
    label
        Free text recorded in the manifest (a request id, for example).
    policy
        One or more :class:`~cognoxium.governance.policies.Policy` objects checked over
        the candidates before costing: they may exclude items (reason
        ``policy``), render them as ``user`` messages or as delimited data
        (costed as rendered), or fail the pack. Their outcomes and
        fingerprints go to the manifest.
    previous
        An earlier pack of the same conversation that this pack continues:
        its prefix is kept byte for byte while the new messages fit, and
        evicted in steps when they do not, and what it cut is cut alike,
        never sent longer (see :mod:`cognoxium.packing.cache`; the
        manifest's ``cache`` section reports it). ``None``: a pack of its own.

    Returns
    -------
    ContextPack
        The selected items in input order (a cut item with its kept text,
        new content hash and ``truncate`` lineage edge), their chat messages (what
        :func:`cognoxium.formats.openai.to_openai_messages` gives, tool calls,
        tool call ids and names included), token use and the
        :class:`PackManifest`. ``used_tokens`` is what the messages cost by
        the chat costing rule, reply priming included.

    Raises
    ------
    BudgetError
        If the required items alone exceed ``budget - reserve`` (with
        ``overflow="truncate"``, even cut as far as allowed; with
        ``target="anthropic"`` and no user message, less the opening user
        message); it names their ids and costs, and nothing is packed. Also
        if ``reserve`` is not a whole number from 0 to ``budget``.
    PackError
        If ``budget`` is not a whole number from 0 to 2**63 - 1,
        ``overflow`` is unknown, ``turns`` is not a bool, ``start_on`` is not
        ``None`` or ``"user"``, ``as_of`` is not a ``datetime`` (ISO text
        included: parse it with ``datetime.fromisoformat``) or is naive,
        two rows share an id, a required item is quarantined, a required
        item is in a group (or, with ``turns``, a turn) that cannot be
        packed, a required item would come before the first user message
        under ``start_on="user"`` (or ``target="anthropic"``).
    MessageError
        With ``tool_errors="error"``, if a message of the pack would break a
        tool rule of the chat APIs (a call not answered right after it, a
        result without its call, a call answered twice) or, with
        ``target="anthropic"``, send a call whose arguments are not a JSON
        object; it names the message's pack position, the item, its input
        row, the rule and the call ids.
    RecordError
        If a ``content_hash`` is not the hash of its row's payload (see
        :func:`~cognoxium.items.hashing.check_content_hashes`), a truncation
        mark (``metadata.truncate``) is malformed or marks a payload that is
        not text, or an item's tool calls are malformed (a call without a
        string ``id``, ``function.name`` or ``function.arguments``); it names
        the row and the field.
    SchemaError
        If ``df`` lacks an item column, or one has the wrong type.
    PolicyError
        If a policy's action for a packable item is ``error`` (strict mode
        makes every outcome one), or it excludes a required item.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> import polars as pl
    >>> from cognoxium.items.validation import conform
    >>> df = conform(pl.DataFrame({
    ...     "id": ["sys", "q", "doc"], "role": ["system", "user", "document"],
    ...     "text": ["Be brief.", "What is the refund window?", "word " * 500],
    ...     "retention": ["required", "required", "optional"],
    ...     "created_at": ["2024-01-01T00:00:00Z"] * 3}))
    >>> p = pack(df, 100, PackOptions(as_of=datetime(2024, 6, 1, tzinfo=UTC)))
    >>> p.ids, p.used_tokens, p.manifest.totals.by_reason
    (['sys', 'q'], 20, {'over_budget': 1, 'required': 2})

    With no rank the conversation goes newest first. The reply that answers
    ``q1`` is long: by default the pack stops there and keeps an unbroken
    tail; with ``gaps="fill"`` older items fill the space, so the pack holds
    ``q1`` without its answer and the hole is marked. With ``turns`` the
    first turn goes whole, and ``start_on="user"`` drops the greeting that
    came before any question.

    >>> chat = conform(pl.DataFrame({
    ...     "id": ["sys", "hello", "q1", "a1", "q2", "a2"],
    ...     "role": ["system", "assistant", "user", "assistant", "user", "assistant"],
    ...     "text": ["Be brief.", "Hi!", "Refunds?", "word " * 80, "Shipping?", "Free."],
    ...     "retention": ["required"] + ["optional"] * 5,
    ...     "created_at": ["2024-01-01T00:00:00Z"] * 6}))
    >>> when = datetime(2024, 6, 1, tzinfo=UTC)
    >>> tail = pack(chat, 60, PackOptions(as_of=when))
    >>> tail.ids, tail.manifest.order
    (['sys', 'q2', 'a2'], 'recency')
    >>> filled = pack(chat, 60, PackOptions(as_of=when, gaps="fill"))
    >>> filled.ids, filled.manifest.gap_records
    (['sys', 'hello', 'q1', 'q2', 'a2'], [GapRecord(first=3, last=3, items=1)])

    A ``gap_note`` puts a message in place of the hole, counted in ``used_tokens``:

    >>> noted = pack(chat, 60, PackOptions(as_of=when, gaps="fill", gap_note="({n} omitted)"))
    >>> noted.messages[3], noted.manifest.gap_records[0].note_at, noted.used_tokens
    ({'role': 'system', 'content': '(1 omitted)'}, 3, 43)
    >>> whole = pack(chat, 60, PackOptions(as_of=when, turns=True, start_on="user", gaps="fill"))
    >>> whole.ids, whole.manifest.totals.by_reason
    (['sys', 'q2', 'a2'],
     {'before_first_user': 1, 'group_over_budget': 2, 'required': 1, 'selected': 2})
    """
    call = check_call(budget, options if options is not None else PackOptions())
    scope = PackScope(df, profile=call.profile, policy=policy)
    check_content_hashes(df)  # token counts are cached by content hash
    return scope.pack_checked(call, label, previous=previous)


def pack_reusing(
    scopes: MutableMapping[str, Any],
    rows: Callable[[], pl.DataFrame],
    budget: int,
    options: PackOptions,
    *,
    label: str | None = None,
    rank: pl.Series | None = None,
    previous: ContextPack | None = None,
) -> ContextPack:
    """:func:`pack` without policies over rows that never change, keeping their :class:`PackScope`.

    The first pack with a token profile makes a scope over ``rows()`` and
    stores it in ``scopes`` (under the profile's fingerprint); later packs
    with that profile reuse it, with what it found: the checks of the rows,
    their rendering, units, exclusions at each ``as_of``, token counts and
    lower bounds, and the manifest's basis. Each pack and manifest is the
    one :func:`pack` gives over ``rows()`` with ``rank`` as their rank
    column: a rank scores the same rows in the same order, so the packs of
    every rank of these rows share the scope.

    Parameters
    ----------
    scopes
        Where the scopes of these rows are kept, one per profile; it must
        belong to rows that never change (an immutable frame's source).
    rows
        Returns the items, ``n`` rows in the canonical schema, in input
        order; called only when no scope is kept for the profile.
    budget, options, label, previous
        As for :func:`pack`.
    rank
        ``(n,)``: the rows' rank for this pack, cast to Float64, in place of
        their ``rank`` column (``None``: that column).

    Returns
    -------
    ContextPack
        What :func:`pack` returns over ``rows()`` with ``rank`` as their rank column.

    Raises
    ------
    BudgetError, PackError, RecordError, SchemaError
        As :func:`pack`, in the same order (the options are checked first); a
        ``rank`` of the wrong length is a PackError.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> import polars as pl
    >>> from cognoxium.items.validation import conform
    >>> df = conform(pl.DataFrame({
    ...     "id": ["a", "b"], "role": ["document"] * 2, "text": ["refund policy", "word " * 40],
    ...     "created_at": ["2024-01-01T00:00:00Z"] * 2}))
    >>> kept: dict[str, object] = {}
    >>> options = PackOptions(as_of=datetime(2024, 6, 1, tzinfo=UTC))
    >>> first = pack_reusing(kept, lambda: df, 20, options)
    >>> again = pack_reusing(kept, lambda: df, 20, options)
    >>> alone = pack(df, 20, options)
    >>> first.ids, len(kept), again.manifest.to_json() == alone.manifest.to_json()
    (['a'], 1, True)
    >>> rank = pl.Series([0.0, 1.0])
    >>> ranked = pack_reusing(kept, lambda: df, 50, options, rank=rank)
    >>> alone = pack(df.with_columns(rank=rank), 50, options)
    >>> ranked.ids, len(kept), ranked.manifest.to_json() == alone.manifest.to_json()
    (['b'], 1, True)
    """
    call = check_call(budget, options)
    key = f"pack_scope:{call.profile.fingerprint}"
    scope = scopes.get(key)
    if not isinstance(scope, PackScope):
        scope = PackScope(rows(), profile=call.profile)
        scopes[key] = scope
    return scope.pack_checked(call, label, rank, previous)


_AHEAD_ROWS = 16_384

_NOTE_ROUNDS = 4
"""Most selections run again to keep the gap notes' tokens out of the budget."""
"""The fewest rows whose manifest basis a scope computes on a thread while it selects.

The basis of a large frame is mostly hashing, which runs without the
interpreter lock, so it overlaps the rendering and selection.
"""


class PackScope:
    """The phases of :func:`pack` that hold for every pack over one frame, done once.

    A batch packs many requests over one scope: the checks of the frame, the
    policies' verdicts, the rendering and cheap bounds of every row, the
    packing units, the exclusions at each ``as_of``, the token counts and
    lower bounds, and the parts of the manifest that do not depend on a
    request are found once and reused. :func:`pack` is a scope of one
    request, so a request packed here gives the same pack and manifest as
    :func:`pack` over the frame with that rank column.

    Parameters
    ----------
    df
        Items in the canonical schema (extra columns are carried along), in
        input (conversational) order, ``n`` rows.
    profile
        A :class:`~cognoxium.tokens.profiles.TokenProfile` or the name of a built-in one.
    policy
        Policies checked over the rows (see :func:`pack`). They see ``df``
        with its own ``rank`` column.

    Raises
    ------
    SchemaError
        If ``df`` lacks an item column, or one has the wrong type.
    PackError
        If two rows share an id, or an object is not a policy.
    PolicyError
        If a policy fails (see :func:`pack`).

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> import polars as pl
    >>> from cognoxium.items.validation import conform
    >>> df = conform(pl.DataFrame({
    ...     "id": ["a", "b", "c"], "role": ["user"] * 3,
    ...     "text": ["refund policy", "shipping times", "word " * 40],
    ...     "created_at": ["2024-01-01T00:00:00Z"] * 3}))
    >>> scope = PackScope(df)
    >>> options = PackOptions(as_of=datetime(2024, 6, 1, tzinfo=UTC))
    >>> first = scope.outcome(50, options, rank=pl.Series([1.0, 2.0, 3.0]))
    >>> second = scope.outcome(50, options, rank=pl.Series([3.0, 2.0, 1.0]))
    >>> first.ids, first.used_tokens, second.ids, second.used_tokens
    (['c'], 48, ['a', 'b'], 15)
    >>> entries = scope.entries([first, second])
    >>> entries.select("id", "rank", "decision").rows()[2:4]
    [('c', 3.0, 'included'), ('a', 3.0, 'included')]
    """

    def __init__(
        self,
        df: pl.DataFrame,
        *,
        profile: str | TokenProfile = "cl100k_base",
        policy: Policy | Sequence[Policy] | None = None,
    ) -> None:
        check_frame(df)
        self.df = df
        """The items, ``n`` rows."""
        self.profile = profile if isinstance(profile, TokenProfile) else get_profile(profile)
        """The token profile that costs the rows."""
        self.review = review_policies(df, policy)
        self._basis_ahead: Future[ManifestBasis] | None = None
        if df.height >= _AHEAD_ROWS:
            review = self.review
            self._basis_ahead = in_daemon_thread(
                "cognoxium-basis", lambda: manifest_basis(df, review)
            )
        self._rows: dict[int, Exclusions] = {}
        # Keyed by the shape of the units: (turns, the tool rules whose faults of the input
        # leave rows out, or None, costed as Anthropic sends the rows).
        self._units: dict[_Shape, Units] = {}
        self._groups: dict[tuple[int, bool, str | None, bool], Exclusions] = {}
        self._queues: dict[tuple[int, bool, str | None, bool], Queue] = {}
        self._known: dict[_Shape, KnownCosts] = {}
        self._tool_codes: dict[str, np.ndarray | None] = {}
        self._row_tokens: np.ndarray | None = None
        # Each costed rendering with the cheap bounds of _marks lowered, by shape[2].
        self._lowered: dict[bool, Rendering] = {}

    @cached_property
    def _marks(self) -> Marks:
        """The rows' marks, the awaited messages' included: what a pack newest first may cut."""
        role = self._rendering.chat.role
        kind = self.df.get_column("payload_kind")
        return mark_awaited(self._ranked_marks, role, kind, question=self._question)

    @cached_property
    def _question(self) -> list[int]:
        """The rows of the user message the conversation ends on, if it ends on one.

        The last row sent as a user or assistant message, when its item is a
        ``user`` item (not a document or memory sent with that role), with
        the other parts of its message (text beside an image).
        """
        chat = self._rendering.chat
        replies = np.flatnonzero(chat.role.is_in(["user", "assistant"]).to_numpy())
        if not replies.size or not self._user_rows[replies[-1]]:
            return []
        last = int(replies[-1])
        part = chat.parts.get(last)
        if part is None:
            return [last]
        return [row for row, (group, _) in chat.parts.items() if group == part[0]]

    def _warn_if_backwards(self, rank: pl.Series | None) -> None:
        """Warn (:class:`~cognoxium.exceptions.OrderWarning`) when the unranked chat runs backwards.

        The conversation items without a rank are taken newest first from
        the last in input order; when their ``created_at`` falls more than
        twice as often as it rises along the input, that order is reversed
        (conversations interleaved, each in order, fall about as often as
        they rise).
        """
        backwards = self._own_order_backwards if rank is None else self._backwards(rank)
        if backwards:
            warnings.warn(
                "the conversation items' created_at falls along their input order (a frame "
                "sorted newest first?): a pack takes the last rows as the newest messages, so "
                "it keeps the oldest and sends them in reverse; sort by created_at ascending "
                "after choosing the latest, or keep the order the messages came in",
                OrderWarning,
                stacklevel=_caller_level(),
            )

    @cached_property
    def _own_order_backwards(self) -> bool:
        """:meth:`_backwards` under the rows' own rank, found once for the scope's packs."""
        return self._backwards(self.df.get_column("rank"))

    @cached_property
    def _talk_times(self) -> tuple[np.ndarray, np.ndarray]:
        """``(n,)`` bool, the row is a conversation item, and ``(n,)`` int64, its ``created_at``."""
        roles = self.df.get_column("role").cast(pl.String)
        times = self.df.get_column("created_at").to_physical().to_numpy()
        return roles.is_in(_CONVERSATION_ROLES).to_numpy(), times

    def _backwards(self, rank: pl.Series) -> bool:
        """Whether the unranked conversation rows fall in time over twice as often as they rise."""
        talk, times = self._talk_times
        steps = np.diff(times[talk & rank.is_null().to_numpy()])
        return bool((steps < 0).sum() > 2 * (steps > 0).sum())

    def _newest_first(self, rank: pl.Series | None) -> bool:
        """Whether the question the conversation ends on is reached newest first under ``rank``.

        It is when its rank (``rank``, or the rows' own when ``None``) is
        null: unranked rows are packed newest first. Then it may be cut
        (:attr:`_marks`); ranked, it is one candidate among others.
        """
        rows = self._question
        ranks = self.df.get_column("rank") if rank is None else rank
        return bool(rows) and bool(ranks.gather(rows).is_null().all())

    @cached_property
    def _ranked_marks(self) -> Marks:
        """The marks a pack by rank cuts by: the newest user message is a candidate as any."""
        role = self._rendering.chat.role
        return mark_awaited(find_marks(self.df), role, self.df.get_column("payload_kind"))

    @cached_property
    def _rendering(self) -> Rendering:
        return render(self.df, self.profile, self.review)

    @cached_property
    def _anthropic(self) -> Rendering:
        """The rendering costed as an Anthropic request sends the rows."""
        return self._rendering.for_anthropic()

    def _costed(self, shape: _Shape) -> Rendering:
        """The rendering that costs the packs of ``shape``: OpenAI's or Anthropic's."""
        return self._anthropic if shape[2] else self._rendering

    def _lowered_for(self, shape: _Shape) -> Rendering:
        """The rendering of ``shape`` with the cheap bounds of :attr:`_marks` lowered."""
        lowered = self._lowered.get(shape[2])
        if lowered is None:
            rendering = self._costed(shape)
            lowered = lower_cheap(rendering, self._marks, self.profile.longest_token_bytes)
            self._lowered[shape[2]] = lowered
        return lowered

    @cached_property
    def _id_order(self) -> np.ndarray:
        return ids_in_order(self.df)

    @cached_property
    def _basis(self) -> ManifestBasis:
        if self._basis_ahead is not None:
            return self._basis_ahead.result()
        return manifest_basis(self.df, self.review)

    @cached_property
    def _validity_changes(self) -> np.ndarray:
        """The times (µs since the Unix epoch, UTC) at which a row's validity changes.

        A row is expired from its ``expires_at`` on and not yet valid before
        its ``created_at`` and ``valid_from``, so its validity is the same at
        every ``as_of`` between two consecutive times here.
        """
        times = self.df.select(
            pl.concat([pl.col(name).dt.epoch("us") for name in _VALIDITY_TIMES]).drop_nulls()
        )
        return times.to_series().to_numpy()

    def _validity_span(self, as_of: datetime) -> int:
        """The span of ``as_of`` between validity changes: how many changes are at or before it."""
        micros = (as_of - _EPOCH) // timedelta(microseconds=1)
        return int(np.count_nonzero(self._validity_changes <= micros))

    def _queue(
        self,
        call: PackCall,
        rows: Exclusions,
        units: Units,
        rank: pl.Series | None,
        costs: UnitCosts,
        marks: Marks,
    ) -> Queue:
        """The candidate units in selection order; kept for the rows' own rank (``None``).

        A unit's cheap bound counts each row of ``marks`` at its shortest cut.
        """
        shape = self._shape(call)
        if rank is not None:
            lowered = self._lowered_for(shape)
            if marks is not self._marks and marks is not self._ranked_marks:
                rendering = self._costed(shape)
                lowered = lower_cheap(rendering, marks, self.profile.longest_token_bytes)
            return order_units(self.df, rows, units, lowered, rank, self._id_order, costs.cost)
        key = (self._validity_span(call.as_of), *shape)
        queue = self._queues.get(key)
        if queue is None:
            own = self.df.get_column("rank")
            lowered = self._lowered_for(shape)
            queue = order_units(self.df, rows, units, lowered, own, self._id_order, costs.cost)
            self._queues[key] = queue
        return queue

    def _exclusions(self, call: PackCall) -> tuple[Exclusions, Units]:
        """The rows' exclusions at the request's ``as_of`` and its packing units (cached).

        Exclusions are kept per span of ``as_of`` between validity changes
        (they are equal within one), so packs at ever new times (``as_of``
        now) reuse them while no row's validity changes.
        """
        span = self._validity_span(call.as_of)
        rows = self._rows.get(span)
        if rows is None:
            if len(self._rows) >= _AS_OF_KEPT:  # packs over many spans keep few
                self._rows.clear()
                self._groups.clear()
                self._queues.clear()
            rows = self._rows[span] = find_exclusions(self.df, call.as_of, self.review)
        shape = self._shape(call)
        codes = None if shape[1] is None else self._codes(shape[1])
        units = self._units.get(shape)
        if units is None:
            frame = self.df if codes is None else detached(self.df, codes)
            units = self._units[shape] = form_units(frame, rows.grouped, turns=shape[0])
        key = (span, *shape)
        whole = self._groups.get(key)
        if whole is None:
            kept = rows if codes is None else leave_out(self.df, rows, codes)
            whole = self._groups[key] = exclude_incomplete_groups(self.df, kept, units)
        return whole, units

    def _shape(self, call: PackCall) -> _Shape:
        """What the units and costs depend on: turns, the rows left out, costed for Anthropic.

        Rows are left out when the pack repairs tool messages and the input
        breaks a tool rule (see :mod:`cognoxium.packing._tool_rules`); the
        rules are those of the pack's target (:meth:`_rules`). A pack built
        for Anthropic is costed as an Anthropic request sends the rows when
        that differs from OpenAI's (thinking blocks, images).
        """
        rules = self._rules(call.options.target)
        repair = call.options.tool_errors == "repair" and self._codes(rules) is not None
        anthropic = call.options.target == "anthropic" and self._anthropic.anthropic
        return call.options.turns, rules if repair else None, anthropic

    def _rules(self, target: str) -> str:
        """The tool rules a pack for ``target`` keeps, by the rows' faults they find.

        ``"anthropic"`` when some call's arguments are not a JSON object
        (Anthropic's rule of its ``tool_use`` input) or some call reuses an
        earlier call's id (Anthropic takes each once), else ``"openai"``:
        without such a call both targets find the same faults, so their
        packs share units and costs.
        """
        tools = self._tools
        own = tools is not None and bool(tools.invalid or tools.reused)
        return "anthropic" if target == "anthropic" and own else "openai"

    @cached_property
    def _tools(self) -> ToolRows | None:
        """The rows' tool calls and results, or ``None`` when no row sends either."""
        chat = self._rendering.chat
        calls = any("tool_calls" in fields for fields in chat.fields.values())
        return ToolRows.of(chat) if calls or self._tool_rows else None

    def _codes(self, rules: str) -> np.ndarray | None:
        """``(n,)`` each row's reason when the input's faults of ``rules`` leave it out, or None."""
        if rules not in self._tool_codes:
            tools = self._tools
            self._tool_codes[rules] = None if tools is None else tools.left_out(rules)
        return self._tool_codes[rules]

    @cached_property
    def _conversing(self) -> np.ndarray:
        """``(n,)`` bool: the row sends an Anthropic user, assistant or tool message.

        Not a system or developer row (it goes to ``system``), nor a message
        the rendering leaves out for sending no block: blank text with no
        image, name, tool call or thinking block (see :func:`sends_blocks`).
        """
        chat = self._rendering.chat
        sent = chat.role.is_in(["user", "assistant"]) & chat.content.str.contains(NOT_BLANK)
        conversing = (sent.fill_null(False) | (chat.role == "tool")).to_numpy()
        conversing[list(chat.thinking)] = True  # sent as assistant messages, for their blocks
        for row in (*chat.images, *chat.fields):  # blank text, sent for its image, name or call
            if not conversing[row]:
                conversing[row] = sends_blocks(chat.message(row))
        return conversing

    @cached_property
    def _user_rows(self) -> np.ndarray:
        """``(n,)`` bool: the row is a user message (its item's ``role``)."""
        return (self.df.get_column("role").cast(pl.String) == "user").to_numpy()

    def _costs(self, units: Units, shape: _Shape, marks: Marks) -> UnitCosts:
        """Fresh unit costs of one pack, reading and filling what the scope knows.

        ``marks`` are the pack's truncation marks: a marked row's bound is its shortest cut's.
        Marks of an earlier pack's cuts (a continuing pack's) lower bounds the scope's
        other packs did not: those costs are the pack's own, not the scope's.
        """
        own = marks is not self._marks and marks is not self._ranked_marks
        known = None if own else self._known.get(shape)
        if known is None and own:
            known = KnownCosts(self.df.height, units.n_units)
        if known is None:
            known = self._known[shape] = KnownCosts(self.df.height, units.n_units)
            if self._row_tokens is not None and not shape[2]:  # counted as OpenAI sends them
                rows, starts = units.rows_of(np.arange(units.n_units, dtype=np.int64))
                known.row_tokens[:] = self._row_tokens
                tokens = self._row_tokens[rows]
                cost = units.per_unit(tokens, starts)
                uncounted = units.per_unit((tokens == UNSET).astype(np.int64), starts) > 0
                known.cost[:] = np.where(uncounted, UNSET, cost)
        floor = marks.floor if marks.rows else None
        return UnitCosts(self.profile, self._costed(shape), units, floor, known)

    def count_tokens(self, within: int | None = None) -> None:
        """Count the rows' costs now, in one call to the tokenizer, for the packs to come.

        A pack counts only the rows its selection reaches; a batch of many
        packs over one scope reaches most rows, so counting them all at once
        is cheaper, and with every cost known a pack selects with array
        operations. The packs and manifests do not change: each pack still
        reports as counted only the rows its own selection examined.

        Parameters
        ----------
        within
            The largest budget of the packs to come, in tokens: a row whose
            cheap lower bound (its UTF-8 bytes over the profile's longest
            token) already exceeds it can never be sent whole, so it is left
            to the pack that reaches it, if any (a 50 MB log is not
            tokenized for packs of 8,000 tokens). ``None``: every row. A
            later call counts the rows it left that fit its own ``within``.
        """
        n = self.df.height
        if self._row_tokens is None:
            self._row_tokens = np.full(n, UNSET, dtype=np.int64)
        todo = self._row_tokens == UNSET
        if within is not None:
            todo &= self._rendering.cheap.to_numpy() <= within
        if not todo.any():
            return
        costs = UnitCosts(self.profile, self._rendering, Units(n_units=n))
        rows = np.flatnonzero(todo)
        costs.count(rows)
        self._row_tokens[rows] = costs.row_tokens[rows]
        self._known.clear()

    def outcome(
        self,
        budget: int,
        options: PackOptions | None = None,
        *,
        label: str | None = None,
        rank: pl.Series | None = None,
        previous: ContextPack | None = None,
    ) -> PackOutcome:
        """Select the rows of one pack: what :func:`pack` decides, without building the pack.

        Parameters
        ----------
        budget, label, previous
            As for :func:`pack`.
        options
            As for :func:`pack`, with the scope's token profile (``None``:
            the defaults with that profile).
        rank
            ``(n,)`` Float64: the rows' rank for this pack, in place of the
            frame's ``rank`` column (``None``: that column).

        Returns
        -------
        PackOutcome
            The decisions, manifest header and selected ids.

        Raises
        ------
        BudgetError, PackError, RecordError, PolicyError
            As :func:`pack`; a ``rank`` of the wrong length, or options of
            another token profile, is a PackError.
        """
        return self.outcome_checked(self._call(budget, options), label, rank, previous)

    def _call(self, budget: int, options: PackOptions | None) -> PackCall:
        """``budget`` and ``options`` checked, for a pack over this scope."""
        if options is None:
            options = PackOptions(profile=self.profile)
        elif getattr(options.profile, "fingerprint", None) != self.profile.fingerprint:
            raise PackError(
                f"the options' token profile {getattr(options.profile, 'name', '?')!r} is not "
                f"the scope's ({self.profile.name!r}): a scope costs its rows with one profile"
            )
        return check_call(budget, options)

    def outcome_checked(
        self,
        call: PackCall,
        label: str | None,
        rank: pl.Series | None = None,
        previous: ContextPack | None = None,
    ) -> PackOutcome:
        """:meth:`outcome` for a budget and options checked by ``check_call``.

        With ``previous``, the pack continues that earlier pack (see
        :mod:`cognoxium.packing.cache`).
        """
        plan = self._plan(call, rank, previous)
        decisions, gaps, notes = self._decisions(plan)
        cutter, continuation = plan.cutter, plan.continuation
        truncations = [] if cutter is None else cutter.records(decisions.selected)
        sent = _Sent(self.df, plan.rank, decisions.selected, cutter, truncations, notes)
        linked = self._basis.linked or truncations
        lineage = lineage_edges(sent.frame, known=self.df).to_dicts() if linked else []
        header = manifest_header(
            self._basis,
            call,
            decisions,
            label,
            plan.rank,
            lineage,
            truncations,
            order="recency" if plan.queue.newest_first.any() else "rank",
            gap_records=gaps,
        )
        if continuation is not None:
            messages = self._messages(sent)
            row_tokens = plan.costs.row_tokens
            report = continuation.report(self.df, call, decisions, row_tokens, messages)
            header = header.model_copy(update={"cache": report})
        return PackOutcome(
            call=call,
            decisions=decisions,
            rank=plan.rank,
            truncations=tuple(truncations),
            manifest=header,
            scope=self,
            sent=sent,
        )

    def _plan(self, call: PackCall, rank: pl.Series | None, previous: ContextPack | None) -> _Plan:
        """The candidates, costs, cutter and queue of one pack, continuing ``previous`` if given."""
        df = self.df
        rank = self._checked_rank(rank)
        self._warn_if_backwards(rank)
        candidates, units = self._exclusions(call)
        marks = self._marks if self._newest_first(rank) else self._ranked_marks
        cuts = None
        if previous is not None:  # what it cut is cut again, marked or not
            check_previous(previous, call)
            cuts = earlier_cuts(df, previous)
            marks = mark_earlier_cuts(marks, cuts.get_column("row").to_list())
        costs = self._costs(units, self._shape(call), marks)
        cutter = None
        if marks.rows:  # only a cut reads the rows with their rank
            ranked = df if rank is None else _ranked(df, rank)
            cutter = Cutter(ranked, marks, costs, self.review.column("action"))
        continuation = None
        if previous is not None and cuts is not None:
            continuation = plan_continuation(
                df, candidates, units, costs, call, previous, cuts, cutter
            )
            candidates = continuation.rows
            if cutter is not None:
                cutter.pinned = continuation.pinned_units
            if rank is None:  # a fresh queue: the held-out and pinned rows change it
                rank = df.get_column("rank")
            if call.options.gap_note is not None:
                raise PackError(
                    "gap_note is not supported for a pack that continues an earlier one "
                    "(previous=): a note would move the cached prefix; pack without gap_note"
                )
        queue = self._queue(call, candidates, units, rank, costs, marks)
        rank = df.get_column("rank") if rank is None else rank
        return _Plan(call, candidates, units, costs, cutter, queue, rank, continuation)

    def _decisions(
        self, plan: _Plan
    ) -> tuple[Decisions, list[GapRecord], list[tuple[int, dict[str, Any]]]]:
        """Every row's decision, the gap records and the gap notes, in pack order."""
        call, units, queue = plan.call, plan.units, plan.queue

        reopen = self._reopens(plan.continuation)
        opens = self._opens(call, plan.candidates, units)

        def choose(notes: int = 0) -> tuple[Decisions, list[GapRecord], int]:
            chosen = self._selected(
                call, plan.candidates, units, queue, plan.costs, plan.cutter, notes, reopen, opens
            )
            included, rows, opening = chosen
            decisions = decide_rows(rows, units, included, plan.costs)
            if call.options.gaps == "stop":
                decisions = mark_tail(queue, units, decisions, opens)
            decisions, gaps = mark_gaps(queue, units, decisions)
            return decisions, gaps, opening

        decisions, gaps, opening = choose()
        notes: list[tuple[int, dict[str, Any]]] = []
        note = call.options.gap_note
        if note is not None and gaps:
            decisions, gaps, opening, notes = self._with_notes(call, note, choose, decisions, gaps)
        if opening:
            decisions = _with_opening(decisions, opening, call)
        if plan.continuation is not None:
            decisions = plan.continuation.decided(decisions)
        return decisions, gaps, notes

    def _checked_rank(self, rank: pl.Series | None) -> pl.Series | None:
        """A given rank checked against the rows and cast to Float64 ``rank``."""
        if rank is None:
            return None
        if len(rank) != self.df.height:
            raise PackError(f"rank has {len(rank)} values for {self.df.height} rows")
        if rank.dtype != pl.Float64 or rank.name != "rank":
            rank = rank.cast(pl.Float64).alias("rank")
        check_rank(rank, self.df.get_column("id"))
        return rank

    def _selected(
        self,
        call: PackCall,
        candidates: Exclusions,
        units: Units,
        queue: Queue,
        costs: UnitCosts,
        cutter: Cutter | None,
        notes: int = 0,
        reopen: bool = False,
        opens: np.ndarray | None = None,
    ) -> tuple[np.ndarray, Exclusions, int]:
        """The units selected, the rows' exclusions after it, and the opening's tokens.

        ``notes`` tokens are kept for the gap notes. The opening is the user
        message an Anthropic request starts with when the pack sends nothing
        but system messages: with ``target="anthropic"`` the selection is made
        again with its tokens kept, and they are returned when it is still
        needed (else 0). With ``reopen`` (a pack continuing one that opened
        so), the selection keeping them comes first, and the other is made
        only when a user message opens the request anyway. ``opens`` marks
        the units holding a user message (see :meth:`_selector`).
        """

        def selection(kept: int) -> tuple[np.ndarray, Exclusions, bool]:
            select = self._selector(call, costs, cutter, kept, notes, opens)
            included, rows = self._select_conversation(call, candidates, units, queue, select)
            return included, rows, self._converses(rows, units, included)

        if call.options.target != "anthropic":
            included, rows, _ = selection(0)
            return included, rows, 0
        opening = self._opening_tokens
        first, second = (opening, 0) if reopen else (0, opening)
        try:
            included, rows, converses = selection(first)
        except BudgetError as error:
            if first or self._converses_required(queue, units):
                raise
            raise _kept_out(error, opening, {"opening": opening}, "") from None
        if converses != reopen:  # done: a user message opens it, or the placeholder still does
            return included, rows, first
        included, rows, converses = selection(second)
        if converses:
            return included, rows, 0
        if reopen:  # only the first opened with a user message: made again, for its cuts
            included, rows, _ = selection(first)
            return included, rows, 0
        return included, rows, opening

    def _with_notes(
        self,
        call: PackCall,
        note: str,
        choose: Callable[[int], tuple[Decisions, list[GapRecord], int]],
        decisions: Decisions,
        gaps: list[GapRecord],
    ) -> tuple[Decisions, list[GapRecord], int, list[tuple[int, dict[str, Any]]]]:
        """The selection with a note in place of each hole, the notes' tokens counted.

        The selection runs again with the tokens of its holes' notes kept
        out of the budget, until what it kept covers the notes of the holes
        it then has (at most ``_NOTE_ROUNDS`` times; a selection that raises
        with more kept, for the budget or a tool rule, is not taken). The
        notes are put in the room the chosen selection leaves, in input
        order; one that does not fit is left out (its record has no
        ``note_at``). ``opening`` is returned as ``choose`` gave it.
        """
        target, profile = call.options.target, call.profile
        opening = 0
        kept = 0
        for _ in range(_NOTE_ROUNDS):
            needed = notes_tokens(note, gaps, target, profile)
            if needed <= kept:
                break
            try:
                decisions, gaps, opening = choose(needed)
            except (BudgetError, MessageError):
                # The selection before stands, with the notes that fit; made again, so
                # that its cuts are the ones the pack sends.
                decisions, gaps, opening = choose(kept)
                break
            kept = needed
        room = call.item_budget - decisions.used_tokens - (opening or 0)
        tool = (self._rendering.chat.role == "tool").to_numpy()
        continued = self._rendering.chat.continued
        gaps, notes, spent = place_notes(
            note, gaps, decisions.selected, tool, target, profile, room, continued
        )
        if spent:
            decisions = dataclasses.replace(
                decisions,
                used_tokens=decisions.used_tokens + spent,
                pack_overhead=decisions.pack_overhead + spent,
            )
        return decisions, gaps, opening, notes

    def _selector(
        self,
        call: PackCall,
        costs: UnitCosts,
        cutter: Cutter | None,
        opening: int = 0,
        notes: int = 0,
        opens: np.ndarray | None = None,
    ) -> Callable[[Queue], np.ndarray]:
        """The selection of a queue's units under the budget.

        ``opening`` and ``notes`` are tokens it keeps: for the message an
        Anthropic request opens with and for the gap notes. With
        ``gaps="stop"`` the conversation items without a rank end at the
        first that does not fit, but for those holding no user message
        (``opens`` marks the units holding one) newer than every user
        message taken, which are passed over (see :mod:`cognoxium.packing._gaps`).
        """
        select: Callable[[Queue], np.ndarray] = partial(
            _select, self.df.get_column("id"), costs, call, cutter, opening=opening, notes=notes
        )
        if call.options.gaps == "stop":
            return stop_at_first_miss(select, opens)
        return select

    def _select_conversation(
        self,
        call: PackCall,
        rows: Exclusions,
        units: Units,
        queue: Queue,
        select: Callable[[Queue], np.ndarray],
    ) -> tuple[np.ndarray, Exclusions]:
        """Select the units under the conversation rules: the tool rules, then ``start_on``.

        With ``tool_errors="repair"`` every selection leaves out the units
        whose messages break a tool rule and selects again; with ``"error"``
        the final selection raises at its first fault. With
        ``start_on="user"`` (or the Anthropic target) the pack then starts on
        a user message (see :func:`~cognoxium.packing._conversation.start_on_user`).
        """
        tools, target = self._tools, self._rules(call.options.target)
        check = None
        if tools is not None and call.options.tool_errors == "repair":
            check = SelectionCheck(self.df, tools, rows, units, select, target)
            select = check
        included = select(queue)
        if _starts_on_user(call, self._chat_roles.is_user & rows.eligible):
            roles = self._chat_roles
            stop = call.options.gaps == "stop"
            included, rows = start_on_user(
                self.df, rows, units, queue, included, select, roles, stop=stop
            )
        else:
            roles = self._chat_roles
            included, rows = reach_user(self.df, rows, units, queue, included, select, roles)
        if check is not None:
            rows = check.applied(rows)
        elif tools is not None:
            raise_first_fault(self.df, tools, packed_rows(rows, units, included), target)
        return included, rows

    def _opens(self, call: PackCall, rows: Exclusions, units: Units) -> np.ndarray | None:
        """``(n_units,)`` bool: the unit holds a candidate user message, with ``gaps="stop"``.

        ``None`` with ``gaps="fill"``, where no miss ends the tail.
        """
        if call.options.gaps != "stop":
            return None
        return user_units(self._chat_roles.is_user, rows, units)

    @cached_property
    def _chat_roles(self) -> ChatRoles:
        """The rows' chat roles, read once for the start rule and the tail."""
        return ChatRoles.of(self.df)

    def _reopens(self, continuation: Continuation | None) -> bool:
        """Whether a continuing pack keeps the room of the earlier pack's opening message.

        The earlier pack sent no message besides system ones (see
        :func:`sends_blocks`), so an Anthropic request opened with the
        placeholder user message, and the continuation pins no message that
        would open it instead. Keeping the room from the first
        selection makes the earlier pack's choices again: without it, the
        placeholder's room, freed by a replayed cut, would go to another item.
        """
        if continuation is None or self._conversing[continuation.pinned].any():
            return False
        return not any(sends_blocks(m) for m in continuation.previous.messages)

    def _converses_required(self, queue: Queue, units: Units) -> bool:
        """Whether the required units send a message besides system and developer ones."""
        rows, _ = units.rows_of(queue.order[: queue.n_required])
        return bool(self._conversing[rows].any())

    def _converses(self, rows: Exclusions, units: Units, included: np.ndarray) -> bool:
        """Whether a selection's first message besides system and developer ones is no reply.

        An Anthropic request opens on a user message: the rendering puts the
        opening message first when the pack sends no other message, or
        opens on an assistant's (an agent loop without a user message).
        """
        packed = packed_rows(rows, units, included)
        sent = packed[self._conversing[packed]]
        if rows.sent_first is not None:
            sent = sent[np.argsort(~rows.sent_first[sent], kind="stable")]
        return bool(len(sent)) and not self._replies[sent[0]]

    @cached_property
    def _replies(self) -> np.ndarray:
        """``(n,)`` bool: the row is sent as an assistant message."""
        return (self._rendering.chat.role == "assistant").to_numpy()

    @cached_property
    def _opening_tokens(self) -> int:
        """What the user message that opens an Anthropic request without one costs."""
        return self.profile.message_tokens({"role": "user", "content": OPENING})

    def _messages(self, sent: _Sent) -> list[dict[str, Any]]:
        """The chat messages of the packed rows as sent, in pack order."""
        messages = self._rendering.chat.messages(sent.selected, sent.cut_content)
        for at, note in sent.notes:
            messages.insert(at, dict(note))
        return messages

    @cached_property
    def _tool_rows(self) -> bool:
        """Some row is sent as a tool result."""
        return bool((self._rendering.chat.role == "tool").any())

    def entries(self, outcomes: Sequence[PackOutcome]) -> pl.DataFrame:
        """The manifest entries of packs over this scope, one pack after another.

        Parameters
        ----------
        outcomes
            ``k`` outcomes of :meth:`outcome` on this scope.

        Returns
        -------
        polars.DataFrame
            ``k * n`` rows of :data:`ENTRY_SCHEMA`: each pack's entries in
            input order, what its ``manifest.to_polars()`` holds.
        """
        basis = self._basis
        n = basis.height
        if len(outcomes) == 1:
            only = outcomes[0]
            decisions = only.decisions
            cuts = {basis_row(basis, t.id): t for t in only.truncations}
            return manifest_entries(
                basis,
                1,
                only.rank,
                decisions.reason,
                decisions.included,
                decisions.tokens,
                decisions.pack_position,
                cuts,
            )
        cuts = {
            k * n + basis_row(basis, t.id): t
            for k, outcome in enumerate(outcomes)
            for t in outcome.truncations
        }
        stacked = [o.decisions for o in outcomes]
        return manifest_entries(
            basis,
            len(outcomes),
            pl.concat([o.rank for o in outcomes], rechunk=False) if outcomes else pl.Series(),
            _stack([d.reason for d in stacked]),
            _stack([d.included for d in stacked], bool),
            _stack([d.tokens for d in stacked]),
            _stack([d.pack_position for d in stacked]),
            cuts,
        )

    def pack(
        self,
        budget: int,
        options: PackOptions | None = None,
        *,
        label: str | None = None,
        rank: pl.Series | None = None,
        previous: ContextPack | None = None,
    ) -> ContextPack:
        """Pack one request over this scope: :func:`pack` with ``rank`` as the rank column.

        Parameters and errors are those of :meth:`outcome`.
        """
        return self.pack_checked(self._call(budget, options), label, rank, previous)

    def pack_checked(
        self,
        call: PackCall,
        label: str | None,
        rank: pl.Series | None = None,
        previous: ContextPack | None = None,
    ) -> ContextPack:
        """:meth:`pack` for a budget and options checked by ``check_call``."""
        return self.context_pack(self.outcome_checked(call, label, rank, previous))

    def context_pack(
        self, outcome: PackOutcome, *, entries: pl.DataFrame | None = None
    ) -> ContextPack:
        """The pack an outcome of this scope makes: its rows, messages and whole manifest.

        The outcome's manifest header is copied, so the outcome itself is
        left as it was. ``entries`` are the outcome's entries when the caller
        built them already (``self.entries([outcome])``; ``None``: built here).
        """
        manifest = outcome.manifest.model_copy()
        manifest._entries = self.entries([outcome]) if entries is None else entries
        used = outcome.decisions.used_tokens
        return ContextPack(
            frame=outcome.frame,
            messages=outcome.messages,
            used_tokens=used,
            remaining_tokens=outcome.call.item_budget - used,
            budget=outcome.call.budget,
            manifest=manifest,
        )


def _stack(parts: list[np.ndarray], dtype: type = np.int64) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _ranked(df: pl.DataFrame, rank: pl.Series) -> pl.DataFrame:
    """``df`` with ``rank`` as its rank column."""
    return df if rank is df.get_column("rank") else df.with_columns(rank)


@dataclass(frozen=True)
class _Plan:
    """What one pack selects over: its candidates, units, costs, cutter, queue and rank."""

    call: PackCall
    candidates: Exclusions
    units: Units
    costs: UnitCosts
    cutter: Cutter | None
    queue: Queue
    rank: pl.Series
    continuation: Continuation | None


class _Sent:
    """The packed rows as sent (cuts applied), made when first read."""

    def __init__(
        self,
        df: pl.DataFrame,
        rank: pl.Series,
        selected: np.ndarray,
        cutter: Cutter | None,
        truncations: list[TruncationRecord],
        notes: Sequence[tuple[int, dict[str, Any]]] = (),
    ) -> None:
        self.df = df
        self.rank = rank
        self.selected = selected
        self.cutter = cutter
        self.truncations = truncations
        self.notes = notes
        """The gap notes: each one's index in the messages and the message, in order."""

    @cached_property
    def _made(self) -> tuple[pl.DataFrame, dict[int, str]]:
        if self.cutter is None:
            return _ranked(self.df, self.rank)[self.selected], {}
        return self.cutter.apply(self.selected, self.truncations)

    @property
    def frame(self) -> pl.DataFrame:
        """The packed rows, in pack order."""
        return self._made[0]

    @property
    def cut_content(self) -> dict[int, str]:
        """Each cut row's content, by pack position (none without a cutter: no frame made)."""
        return self._made[1] if self.cutter is not None else {}


@dataclass(frozen=True)
class PackOutcome:
    """What one pack over a :class:`PackScope` decided.

    Attributes
    ----------
    call
        The checked budget and options (budget and reserve in tokens, profile, UTC ``as_of``).
    decisions
        Every row's decision, reason, tokens and pack position (``(n,)`` arrays).
    rank
        ``(n,)`` Float64: the rank the rows were ordered by.
    truncations
        The items cut to fit, in input order.
    manifest
        The manifest without its entries (see :meth:`PackScope.entries`).
    scope
        The scope packed.
    """

    call: PackCall
    decisions: Decisions
    rank: pl.Series
    truncations: tuple[TruncationRecord, ...]
    manifest: PackManifest
    scope: PackScope = field(repr=False)
    sent: _Sent = field(repr=False)

    @property
    def frame(self) -> pl.DataFrame:
        """The packed rows as sent, in pack order (made when first read)."""
        return self.sent.frame

    @cached_property
    def messages(self) -> list[dict[str, Any]]:
        """The packed rows' chat messages, in pack order (made when first read)."""
        return self.scope._messages(self.sent)

    @property
    def ids(self) -> list[str]:
        """Ids of the packed items, in pack order."""
        return self.scope.df.get_column("id").gather(self.decisions.selected).to_list()

    @property
    def used_tokens(self) -> int:
        """Tokens the pack uses, reply priming included."""
        return self.decisions.used_tokens

    @property
    def newest_user_message_left_out(self) -> bool:
        """Whether a conversation packed newest first left out its newest user message.

        True when conversation items were taken newest first (no rank:
        the manifest's ``order`` is ``recency``) and the scope's last user
        message, in input order, is ``over_budget`` or ``group_over_budget``:
        it, or its group, did not fit beside the required items. The request
        then asks the model something older, or nothing (an exported chat
        whose newest message alone exceeds the budget). Its manifest entry
        tells the cost; a batch lists such requests
        (``BatchStats.newest_user_left_out``).
        """
        if self.manifest.order != "recency":
            return False
        users = np.flatnonzero(self.scope._user_rows)
        return bool(users.size) and bool(np.isin(self.decisions.reason[users[-1]], _FOR_THE_BUDGET))


_FOR_THE_BUDGET = np.array(
    [REASON_CODE[Reason.OVER_BUDGET], REASON_CODE[Reason.GROUP_OVER_BUDGET]], dtype=np.int64
)
"""The codes of the reasons a row is left out for the budget alone."""


def _starts_on_user(call: PackCall, users: np.ndarray) -> bool:
    """Whether the pack starts on a user message: ``start_on="user"``, or the Anthropic target.

    The Anthropic target starts on one when some candidate is (``users``,
    ``(n,)`` bool): otherwise the opening message stands for it, and an
    agent loop without a user message is sent as it is.
    """
    return call.options.start_on == "user" or (
        call.options.target == "anthropic" and bool(users.any())
    )


def _select(
    ids: pl.Series,
    costs: UnitCosts,
    call: PackCall,
    cutter: Cutter | None,
    queue: Queue,
    *,
    opening: int = 0,
    notes: int = 0,
) -> np.ndarray:
    """Select the units of ``queue`` under the items' budget; a BudgetError names the reserve.

    ``opening`` tokens of the budget are kept for the message an Anthropic
    request opens with when the pack has none, and ``notes`` for the gap notes.
    """
    budget = call.item_budget - opening - notes
    try:
        return select_units(ids, costs, queue, budget, cutter, call.options.overflow)
    except BudgetError as error:
        if not call.options.reserve and not opening and not notes:
            raise
        kept = []
        if call.options.reserve:
            kept.append(f"the reply reserve {call.options.reserve}")
        if opening:
            kept.append(f"the {opening} tokens of the user message an Anthropic request opens with")
        if notes:
            kept.append(f"the {notes} tokens of the gap notes")
        params = {"reserve": call.options.reserve, **({"opening": opening} if opening else {})}
        text = f" (the budget {call.budget} less {' and '.join(kept)})"
        raise _kept_out(error, call.budget - budget, params, text) from None


def _kept_out(error: BudgetError, tokens: int, params: dict[str, Any], text: str) -> BudgetError:
    """``error`` of a selection that kept ``tokens`` out of the budget, ``text`` appended.

    ``params`` are added; its ``budget_needed`` counts the tokens kept out.
    """
    needed = error.params.get("budget_needed")
    if isinstance(needed, int):
        params = {**params, "budget_needed": needed + tokens}
    return BudgetError(
        f"{error}{text}", costs=error.costs, budget=error.budget, params={**error.params, **params}
    )


def _with_opening(decisions: Decisions, opening: int, call: PackCall) -> Decisions:
    """``decisions`` with the Anthropic opening message (and the reply priming) counted.

    Raises
    ------
    BudgetError
        If the opening message and the reply priming alone exceed the items' budget.
    """
    priming = 0 if decisions.pack_overhead else call.profile.tokens_per_pack
    used = decisions.used_tokens + opening + priming
    if used > call.item_budget:
        raise BudgetError(
            f"an Anthropic request needs a user message: the {opening} tokens of the one "
            f"the rendering adds and the reply priming do not fit the budget {call.budget}"
            f"{f' less the reply reserve {call.options.reserve}' if call.options.reserve else ''}"
            "; raise the budget",
            costs={},
            budget=call.item_budget,
            params={"opening": opening, "budget_needed": used + call.options.reserve},
        )
    return dataclasses.replace(
        decisions, used_tokens=used, pack_overhead=decisions.pack_overhead + opening + priming
    )


_CONVERSATION_ROLES = ("user", "assistant", "tool")
"""The roles packed newest first without a rank (see :meth:`PackScope._warn_if_backwards`)."""

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _caller_level() -> int:
    """The ``stacklevel`` for :func:`warnings.warn` naming the first caller outside the package."""
    level, frame = 2, sys._getframe(2)  # the frame of the caller of the function that warns
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
