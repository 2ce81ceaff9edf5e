"""What a pack returns: the :class:`ContextPack` and its :class:`PackManifest`.

Also the codes the packing phases share: a reason is carried through the
phases as its index in :data:`REASONS` (an ``int64`` array, one per input row),
and :data:`UNSET` (-1) marks a row without a reason yet, or a cost, bound or
pack position not computed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, Literal, Self, TypeVar, overload

import polars as pl
import pyarrow as pa
from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from cognoxium.exceptions import PackError
from cognoxium.items.convert import frame_to_items
from cognoxium.items.model import ContextItem, canonical_json
from cognoxium.items.schema import POLARS_SCHEMA
from cognoxium.packing._cache_report import CacheReport
from cognoxium.packing._display import fields_html, table_html
from cognoxium.packing._messages import sent_thinking
from cognoxium.packing._renderers import (
    Renderer,
    anthropic_request,
    failed_calls,
    mark_cache,
    text_transcript,
)
from cognoxium.packing._request_prefix import cache_breakpoints, pack_prefix
from cognoxium.packing.cache_models import CacheModel, get_cache_model

__all__ = [
    "ENTRY_SCHEMA",
    "MANIFEST_FORMAT",
    "ORDERS",
    "REASONS",
    "REASON_CODE",
    "TIERS",
    "UNSET",
    "ContextPack",
    "Decision",
    "GapRecord",
    "ManifestEntry",
    "ManifestTotals",
    "MergeRecord",
    "PackManifest",
    "PolicyOutcome",
    "Reason",
    "TruncationRecord",
    "entries_frame",
]

RequestT = TypeVar("RequestT")

MANIFEST_FORMAT: Final = "cognoxium.pack_manifest/1"
"""The ``format`` every manifest names; a manifest read back must name it (no other is read)."""

TIERS: dict[str, int] = {"required": 0, "preferred": 1, "optional": 2}
"""Retention -> tier code; lower tiers are considered first."""

ORDERS: tuple[str, ...] = ("rank", "recency")
"""The selection orders a manifest names (its ``order``).

``rank``: the design's order, rank desc, priority desc, token cost asc, id
asc. ``recency``: the same, except that the conversation items (``user``,
``assistant``, ``tool``) without a rank were taken newest first, after the
other items of their tier and priority.
"""


class Decision(StrEnum):
    """Whether an item went into the pack."""

    INCLUDED = "included"
    EXCLUDED = "excluded"


class Reason(StrEnum):
    """Why an item was included or excluded.

    ``before_first_user``: with ``start_on="user"``, the item would have come
    after the system block and before the pack's first user message, so it
    was left out (see :func:`cognoxium.packing.packer.pack`).

    ``tool_call_unanswered``, ``tool_result_orphan``,
    ``tool_result_duplicate``: with ``tool_errors="repair"``, the item's
    message would break that rule of the chat APIs (see
    :mod:`cognoxium.packing.message_rules`), so it was left out: an
    unanswered call with its partial results, an orphan or duplicate result
    alone (with the other items of its packing unit, when it shares one).

    ``tool_call_arguments_invalid``: with ``tool_errors="repair"`` and
    ``target="anthropic"``, the item is an assistant message making a tool
    call whose arguments are not a JSON object (invalid or truncated JSON,
    an array, a number, a string, ``null``), which Anthropic cannot take as
    a ``tool_use`` input, or a result of that message's calls: left out
    together, so every ``tool_use`` sent has its result.

    ``tool_use_id_duplicate``: with ``tool_errors="repair"`` and
    ``target="anthropic"``, the item is an assistant message making a tool
    call whose id a call of an earlier message the pack sends has (Chat Completions takes
    that, Anthropic takes each ``tool_use`` id once in a request; the chat
    importers give such a call a new id, so only items made otherwise hold
    one), or a result of that message's calls: left out together.

    ``evicted_for_cache``: a pack that continues an earlier one left the
    item out to keep the earlier pack's prefix, or evicted it in an eviction
    step (see :mod:`cognoxium.packing.cache`).

    ``gap``: a conversation item that did not fit while an older one was
    packed, so the pack has a hole where it was (see ``gap_records`` in
    :class:`PackManifest`).

    ``before_tail``: with ``gaps="stop"``, a conversation item older than
    the first one, taken newest first, that did not fit (that one is
    ``over_budget``; a tool exchange or reply newer than every user
    message taken is passed over, as a hole): the pack keeps an unbroken tail of the conversation,
    so no older item was taken, whether or not it would have fit (see
    ``gaps`` in :class:`~cognoxium.packing.options.PackOptions`).
    """

    REQUIRED = "required"
    SELECTED = "selected"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    QUARANTINED = "quarantined"
    POLICY = "policy"
    NOT_PACKABLE = "not_packable"
    GROUP_INCOMPLETE = "group_incomplete"
    OVER_BUDGET = "over_budget"
    GROUP_OVER_BUDGET = "group_over_budget"
    BEFORE_FIRST_USER = "before_first_user"
    TOOL_CALL_UNANSWERED = "tool_call_unanswered"
    TOOL_RESULT_ORPHAN = "tool_result_orphan"
    TOOL_RESULT_DUPLICATE = "tool_result_duplicate"
    EVICTED_FOR_CACHE = "evicted_for_cache"
    GAP = "gap"
    BEFORE_TAIL = "before_tail"
    TOOL_CALL_ARGUMENTS_INVALID = "tool_call_arguments_invalid"
    TOOL_USE_ID_DUPLICATE = "tool_use_id_duplicate"


# Every manifest model sets defer_build: it builds its validator and serializer on
# first use, not when the package is imported.


class ManifestEntry(BaseModel):
    """One input item's line in a manifest.

    ``tokens`` is the item's cost (its chat message: framing, name, content
    and tool calls, see :mod:`cognoxium.tokens.profiles`) in tokens, or
    ``None`` when its cost was never compared with the budget left, because
    it provably could not matter (see :mod:`cognoxium.packing._selection`).
    ``detail`` says more about the reason (the quarantine reason), or ``None``;
    ``provenance`` lists a quarantined item's source URIs (``None`` otherwise);
    ``redactions`` is the canonical JSON ``{TYPE: count}`` of the item's
    redactions (``None`` when it had none) and never a redacted value.
    ``position`` is the item's 0-based input index and ``pack_position`` its
    index in the pack, or ``None``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    position: int
    id: str
    content_hash: str
    role: str
    group_id: str | None
    tier: str
    rank: float | None
    priority: int
    decision: Decision
    reason: Reason
    detail: str | None
    provenance: list[str] | None
    redactions: str | None
    tokens: int | None
    pack_position: int | None


class PolicyOutcome(BaseModel):
    """What one policy decided about one item (every action but ``allow``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    policy: str
    rule: str | None
    id: str
    action: str
    message: str | None


class MergeRecord(BaseModel):
    """One merge of duplicates: the kept item, the ids folded into it, and how fields resolved.

    ``resolved`` holds the kept item's value of every merge-governed field
    (see ``merge_rules`` in the manifest); ``metadata_conflicts`` maps each
    metadata key on which the copies differ to ``{id: value}``. ``dropped``
    maps each copy that the dedupe dropped before merging, because it was
    not valid at its ``as_of`` while this copy was, to its reason
    (``expired`` or ``not_yet_valid``); it is left out of the JSON when
    empty, so merges without such copies read as before.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kept: str
    merged: list[str]
    resolved: dict[str, Any]
    metadata_conflicts: dict[str, dict[str, Any]] | None
    dropped: dict[str, str] = {}

    @model_serializer(mode="wrap")
    def _without_empty_dropped(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not self.dropped:
            data.pop("dropped", None)
        return data


class TruncationRecord(BaseModel):
    """One item cut to fit: what it kept and the content it then sent.

    ``original_tokens`` and ``kept_tokens`` count the item's text (content
    only, no framing), in tokens; ``side`` is the side kept (``head`` or
    ``tail``); ``parent_hash`` is the original content hash and
    ``content_hash`` that of the text sent, also the entry's
    ``content_hash``. The lineage holds the matching ``truncate`` edge.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str
    side: str
    original_tokens: int
    kept_tokens: int
    parent_hash: str
    content_hash: str


_NOTE_FIELDS = ("note_at", "note_tokens")


class GapRecord(BaseModel):
    """One hole in a pack's conversation: conversation items left out between packed ones.

    ``first`` and ``last`` are the 0-based input positions of the first and
    the last item left out, ``items`` how many conversation items were left
    out there (each with reason ``gap``). Items of other roles between them
    are not counted.

    With a ``gap_note`` (see :class:`~cognoxium.packing.options.PackOptions`)
    ``note_at`` is the 0-based index in ``pack.messages`` of the message put
    in place of the hole and ``note_tokens`` what it costs, counted in
    ``used_tokens`` and ``pack_overhead_tokens``; without one (or for a hole
    whose note did not fit the budget left) they are ``None`` and 0, and
    are left out of the JSON and Arrow forms.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    first: int
    last: int
    items: int
    note_at: int | None = None
    note_tokens: int = 0

    def __repr_args__(self) -> Any:
        """The fields, without the note's when the hole has none."""
        noted = self.note_at is not None or self.note_tokens
        return [(k, v) for k, v in super().__repr_args__() if noted or k not in _NOTE_FIELDS]


class ManifestTotals(BaseModel):
    """Counts over a manifest's entries.

    ``counted`` is the entries whose ``tokens`` is reported (their cost was
    compared with the budget left) and ``not_counted`` the others.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    items: int
    included: int
    excluded: int
    counted: int
    not_counted: int
    by_reason: dict[str, int]
    redactions: dict[str, int] = {}


class PackManifest(BaseModel):
    """The machine-readable account of one pack.

    Every input item has one entry. ``used_tokens`` equals the sum of the
    included entries' ``tokens`` plus ``pack_overhead_tokens`` (the reply
    priming of the chat format, paid once when the pack is not empty, and
    for a pack built for Anthropic that sends no message besides its system
    block, the user message the rendering opens the request with).
    The canonical JSON (:meth:`to_json`) is byte-identical for the same
    ordered input, settings and token profile. ``reserve_tokens`` is the
    reply reserve: the items fit in ``budget - reserve_tokens`` and
    ``remaining_tokens`` is ``budget - reserve_tokens - used_tokens``;
    ``overflow`` says what the pack does when the required items alone
    exceed that (``error`` or ``truncate``); ``truncations`` lists the items
    cut to fit, in input order. These three are left out of the JSON and
    Arrow forms at their defaults (0, ``error``, none), so manifests of packs
    without them read as before. ``lineage`` holds the lineage
    edges of the included items (see :mod:`cognoxium.governance.lineage`), ``merges``
    the merges a dedupe made, ``policy_outcomes`` what policies decided.
    ``unredacted`` counts, per field outside the payload (``metadata``,
    ``sources``), the items that went through a redact step while that field
    held data and was not redacted (see
    :meth:`cognoxium.CognitionFrame.redact`); it is left out of the JSON and
    Arrow forms when empty, so manifests without such items read as before.
    ``estimated`` is true when the costs are not exact counts of what the
    model receives: the token profile's are not (``approximate``, an upper
    bound; ``huggingface:PATH``, assumed chat framing; see
    :attr:`cognoxium.tokens.profiles.TokenProfile.estimated`), or the pack
    was built for Anthropic (``target="anthropic"``), whose tokenizer is not
    available offline: its text is counted with the profile's encoding and
    its images by Anthropic's documented rule
    (:data:`~cognoxium.tokens.images.CLAUDE_IMAGES`). It is left out when
    false, so exact manifests keep their bytes.
    ``cache`` is the account of a pack that continues an earlier one
    (:class:`~cognoxium.packing._cache_report.CacheReport`: the prefix kept,
    the items evicted, the billed input); left out when the pack continues none.
    ``order`` names the selection order (one of :data:`ORDERS`):
    ``recency`` when conversation items without a rank were taken newest
    first; ``gaps`` is the pack's gap mode (``stop`` or ``fill``, see
    :class:`~cognoxium.packing.options.PackOptions`) and ``gap_records``
    lists the holes in the packed conversation, in input order. They are
    left out at their defaults (``rank``, ``stop``, none), so manifests of
    ranked packs read as before. ``target`` is the API the pack was built
    for (``openai`` or ``anthropic``, see
    :class:`~cognoxium.packing.options.PackOptions`); it is left out for
    ``openai``, the default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    format: Literal["cognoxium.pack_manifest/1"] = MANIFEST_FORMAT
    label: str | None
    budget: int
    used_tokens: int
    remaining_tokens: int
    pack_overhead_tokens: int
    as_of: datetime
    profile: str
    fingerprints: dict[str, str]
    totals: ManifestTotals
    policies: list[dict[str, str]] = []
    policy_outcomes: list[PolicyOutcome] = []
    merges: list[MergeRecord] = []
    merge_rules: dict[str, str] = {}
    lineage: list[dict[str, str | None]] = []
    unredacted: dict[str, int] = {}
    reserve_tokens: int = 0
    overflow: str = "error"
    truncations: list[TruncationRecord] = []
    estimated: bool = False
    cache: CacheReport | None = None
    order: Literal["rank", "recency"] = "rank"
    gaps: Literal["stop", "fill"] = "stop"
    gap_records: list[GapRecord] = []
    target: Literal["openai", "anthropic"] = "openai"
    _entries: pl.DataFrame = PrivateAttr()
    _digest: tuple[pl.DataFrame, str] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _tokens_add_up(self) -> PackManifest:
        """Token counts are not negative, fit the budget and add up (a manifest read back)."""
        counts = {
            "budget": self.budget,
            "used_tokens": self.used_tokens,
            "reserve_tokens": self.reserve_tokens,
            "pack_overhead_tokens": self.pack_overhead_tokens,
        }
        negative = [name for name, value in counts.items() if value < 0]
        if negative:
            raise ValueError(f"token counts must not be negative: {negative}")
        if self.used_tokens + self.reserve_tokens > self.budget:
            raise ValueError(
                f"used_tokens {self.used_tokens} and reserve_tokens {self.reserve_tokens} "
                f"exceed the budget {self.budget}"
            )
        if self.remaining_tokens != self.budget - self.reserve_tokens - self.used_tokens:
            raise ValueError(
                f"remaining_tokens {self.remaining_tokens} is not budget - reserve_tokens - "
                f"used_tokens ({self.budget - self.reserve_tokens - self.used_tokens})"
            )
        return self

    @property
    def entries(self) -> list[ManifestEntry]:
        """The entries, in input order, as validated models."""
        return [ManifestEntry.model_validate(row) for row in self._entries.iter_rows(named=True)]

    def to_polars(self) -> pl.DataFrame:
        """The entries as a Polars frame, one row per input item, in input order."""
        return self._entries

    def to_arrow(self) -> pa.Table:
        """The entries as an Arrow table, one row per input item, in input order.

        The schema metadata key ``cognoxium.manifest`` holds everything but the
        entries (budget, used tokens, totals, fingerprints, ...) as canonical
        JSON, so the table alone describes the pack.
        """
        header = canonical_json(self._header())
        return self._entries.to_arrow().replace_schema_metadata({"cognoxium.manifest": header})

    def _header(self) -> dict[str, Any]:
        """Everything but the entries, without the fields that hold their defaults.

        ``unredacted`` and ``truncations`` when empty, ``reserve_tokens`` when
        0, ``overflow`` when ``error``, ``estimated`` when false, ``order``
        when ``rank``, ``gaps`` when ``stop``, ``gap_records`` when empty and
        ``target`` when ``openai``.
        """
        defaults = {
            "unredacted": not self.unredacted,
            "reserve_tokens": self.reserve_tokens == 0,
            "overflow": self.overflow == "error",
            "truncations": not self.truncations,
            "estimated": not self.estimated,
            "cache": self.cache is None,
            "order": self.order == "rank",
            "gaps": self.gaps == "stop",
            "gap_records": not self.gap_records,
            "target": self.target == "openai",
        }
        header = self.model_dump(mode="json", exclude={k for k, unset in defaults.items() if unset})
        for gap in header.get("gap_records", ()):
            if gap["note_at"] is None and not gap["note_tokens"]:
                del gap["note_at"], gap["note_tokens"]
        return header

    def to_dict(self) -> dict[str, Any]:
        """The manifest as plain JSON-ready data, entries included."""
        data = self._header()
        data["entries"] = self._entries.with_columns(pl.col("rank").fill_nan(None)).to_dicts()
        return data

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, compact separators, UTF-8 text."""
        return canonical_json(self.to_dict())

    def __eq__(self, other: object) -> bool:
        """Equal when the header fields and the entries are equal (NaN ranks read as null).

        The canonical JSON writes a NaN rank as ``null``, so a manifest equals
        the one :meth:`from_json` reads back from its :meth:`to_json`.
        """
        if not isinstance(other, PackManifest):
            return NotImplemented
        if self.model_dump() != other.model_dump():
            return False
        mine, theirs = (
            m._entries.with_columns(pl.col("rank").fill_nan(None)) for m in (self, other)
        )
        return mine.equals(theirs, null_equal=True)

    @classmethod
    def from_json(cls, text: str) -> PackManifest:
        """Parse and validate a manifest written by :meth:`to_json`.

        The checks of every reader of manifests (see
        :func:`~cognoxium.packing.manifests.read_manifests`): the format,
        every header field and entry, and the entries against the header's
        ``totals``.

        Parameters
        ----------
        text
            One manifest as JSON.

        Returns
        -------
        PackManifest
            Equal to the manifest written (``==``, the same :meth:`to_json`).

        Raises
        ------
        RecordError
            If ``text`` is not JSON or not an object, its ``format`` is
            missing or not :data:`MANIFEST_FORMAT`, a field or entry is
            missing, unknown or invalid, or the entries disagree with
            ``totals``; the error names the field (``entries[3].reason``).

        Examples
        --------
        >>> PackManifest.from_json('{"format": "other/9", "entries": []}')
        Traceback (most recent call last):
        ...
        cognoxium.exceptions.RecordError: field format: manifest format 'other/9': this version ...
        """
        from cognoxium.packing._reading import invalid_json, parse_manifest

        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise invalid_json(exc, None, None) from None
        return parse_manifest(data, None, None)

    @property
    def digest(self) -> str:
        """A sha256 hex digest of the manifest: equal manifests have equal digests.

        The sha256 of the canonical JSON of everything but the entries (as
        in :meth:`to_json`), a newline, then the entries as Polars writes
        them in NDJSON (NaN ranks as null, as :meth:`__eq__` reads them). It
        changes with any header field or entry value, survives
        :meth:`to_json` and :meth:`from_json`, and is computed in Polars, once
        per manifest (the model is frozen), so reprs of large packs stay cheap.
        It is not the digest of the JSON file (``sha256sum`` of
        :meth:`to_json`'s text differs).
        """
        cached = self._digest
        if cached is None or cached[0] is not self._entries:
            digest = hashlib.sha256(canonical_json(self._header()).encode("utf-8") + b"\n")
            entries = self._entries.with_columns(pl.col("rank").fill_nan(None))
            digest.update(entries.write_ndjson().encode("utf-8"))
            cached = self._digest = (self._entries, digest.hexdigest())
        return cached[1]

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (see :meth:`pydantic.BaseModel.model_copy`) that computes its own digest."""
        out = super().model_copy(update=update, deep=deep)
        out._digest = None
        return out

    def _summary(self) -> str:
        totals = self.totals
        shown = self.label if self.label is None or len(self.label) <= 40 else self.label[:39] + "…"
        label = "" if shown is None else f"label={shown!r} "
        return (
            f"{label}budget={self.budget} used={self.used_tokens} "
            f"included={totals.included} excluded={totals.excluded} of {totals.items} items "
            f"sha256:{self.digest[:12]}"
        )

    def __repr__(self) -> str:
        """One line: label, budget and used tokens, entry counts and the digest's first 12 hex.

        Examples
        --------
        >>> from datetime import UTC, datetime
        >>> from cognoxium import CognitionFrame
        >>> cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi",
        ...                       "created_at": "2023-12-31T00:00:00Z"}])
        >>> manifest = cf.pack(100, as_of=datetime(2024, 1, 1, tzinfo=UTC)).manifest
        >>> manifest
        <PackManifest budget=100 used=8 included=1 excluded=0 of 1 items sha256:...>
        """
        return f"<PackManifest {self._summary()}>"

    def _totals_fields(self) -> list[tuple[str, object]]:
        totals = self.totals
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(totals.by_reason.items()))
        fields: list[tuple[str, object]] = [
            ("label", self.label),
            ("profile", self.profile),
            ("as_of", self.as_of.isoformat()),
            ("budget (tokens)", self.budget),
            ("reserve (tokens)", self.reserve_tokens),
            ("used (tokens)", self.used_tokens),
            ("remaining (tokens)", self.remaining_tokens),
            ("items", totals.items),
            ("included", totals.included),
            ("excluded", totals.excluded),
            ("by reason", reasons or "none"),
            ("counted / not counted", f"{totals.counted} / {totals.not_counted}"),
            ("merges", len(self.merges)),
            ("policy outcomes", len(self.policy_outcomes)),
            ("truncations", len(self.truncations)),
            ("order", self.order),
            ("gaps", f"{len(self.gap_records)} ({self.gaps})"),
            ("sha256", self.digest),
        ]
        if totals.redactions:
            redactions = ", ".join(f"{k}={v}" for k, v in sorted(totals.redactions.items()))
            fields.insert(11, ("redactions", redactions))
        return fields

    def _repr_html_(self) -> str:
        """The totals and the first entries, as escaped HTML for notebooks."""
        return (
            "<div>"
            + fields_html("PackManifest", self._totals_fields())
            + table_html("entries", self._entries)
            + "</div>"
        )


ENTRY_SCHEMA = pl.Schema(
    {
        "position": pl.Int64(),
        "id": pl.String(),
        "content_hash": pl.String(),
        "role": POLARS_SCHEMA["role"],
        "group_id": pl.String(),
        "tier": POLARS_SCHEMA["retention"],
        "rank": pl.Float64(),
        "priority": pl.Int64(),
        "decision": pl.Enum([d.value for d in Decision]),
        "reason": pl.Enum([r.value for r in Reason]),
        "detail": pl.String(),
        "provenance": pl.List(pl.String()),
        "redactions": pl.String(),
        "tokens": pl.Int64(),
        "pack_position": pl.Int64(),
    }
)
"""Columns of :meth:`PackManifest.to_polars`; enumerations as ``pl.Enum``."""


def entries_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Manifest entries (one dict per entry) as a frame of :data:`ENTRY_SCHEMA`."""
    return pl.DataFrame(rows, schema=ENTRY_SCHEMA)


@dataclass(frozen=True, repr=False)
class ContextPack:
    """The items selected for one model call, in input order.

    A pack that continues an earlier one (``pack(budget, previous=...)``)
    sends its history first, in input order, then its document and memory
    items, in input order (see :mod:`cognoxium.packing.cache`).

    Render it as the request of a model API with :meth:`to_openai` (what
    :attr:`messages` holds and what the pack costs), :meth:`to_anthropic`,
    :meth:`to_text`, or :meth:`render` and a
    :class:`~cognoxium.packing.Renderer` of your own. In every rendering,
    retrieved documents and memories with ``sources`` start with one line per
    source, ``"Source: <title> <uri>"`` (``"Source: <uri>"`` without a title),
    so the model can attribute them; those lines are sent, so they are
    costed.

    Attributes
    ----------
    frame
        The selected rows (all input columns), in input order; an item cut
        to fit holds the text it sent, its new ``content_hash`` and a
        ``truncate`` step in ``lineage``.
    messages
        OpenAI Chat Completions messages, one per selected item, as
        :func:`cognoxium.formats.openai.to_openai_messages` renders them
        (``role``, ``content``, and ``name``, ``tool_calls`` or
        ``tool_call_id`` when the item has them), and a note message in
        place of each hole when the pack has a ``gap_note`` (see
        :class:`GapRecord`); :meth:`to_openai` returns a copy.
    used_tokens
        Tokens used, framing and reply priming included.
    remaining_tokens
        ``budget - reserve - used_tokens``: tokens still free for items.
    budget
        The token budget (the reply reserve included).
    manifest
        The account of every input item.
    """

    frame: pl.DataFrame
    messages: list[dict[str, Any]]
    used_tokens: int
    remaining_tokens: int
    budget: int
    manifest: PackManifest
    _items: list[ContextItem] | None = field(default=None, repr=False, compare=False)

    @property
    def ids(self) -> list[str]:
        """Ids of the selected items, in pack order."""
        return self.frame.get_column("id").to_list()

    @property
    def items(self) -> list[ContextItem]:
        """The selected items as validated :class:`~cognoxium.items.model.ContextItem` objects."""
        return frame_to_items(self.frame)

    @overload
    def to_openai(self, *, prompt_cache_key: None = None) -> list[dict[str, Any]]: ...

    @overload
    def to_openai(self, *, prompt_cache_key: str) -> dict[str, Any]: ...

    def to_openai(
        self, *, prompt_cache_key: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The OpenAI Chat Completions messages of the pack: a copy of :attr:`messages`.

        An assistant item's Anthropic thinking blocks
        (``metadata.thinking_blocks``) are not sent: they are Anthropic's,
        signed for its API, which alone takes them back; a pack built for
        OpenAI does not count them, one built for Anthropic does (see
        :meth:`to_anthropic`).

        The messages of the same items are the same bytes in every pack (the
        keys and parts in one order), so a pack that continues an earlier
        one (``pack(budget, previous=...)``) starts with the earlier
        request's bytes and OpenAI's automatic prompt cache can read them.

        Parameters
        ----------
        prompt_cache_key
            OpenAI's ``prompt_cache_key``, which routes requests of one scope
            (a conversation, a user) to the same cache; given, the request is
            returned as ``{"messages": [...], "prompt_cache_key": key}``.

        Returns
        -------
        list of dict, or dict
            One message per selected item, in pack order; what the pack costs
            (its chat message, see :attr:`messages`), ready for
            ``client.chat.completions.create(messages=...)``; with
            ``prompt_cache_key``, the keyword arguments
            ``client.chat.completions.create(model=..., **request)`` takes.

        Examples
        --------
        >>> from datetime import UTC, datetime
        >>> from cognoxium import CognitionFrame
        >>> cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi"}])
        >>> cf.pack(100, as_of=datetime(2030, 1, 1, tzinfo=UTC)).to_openai(
        ...     prompt_cache_key="conversation-42")
        {'messages': [{'role': 'user', 'content': 'hi'}], 'prompt_cache_key': 'conversation-42'}
        """
        messages = copy.deepcopy(self.messages)
        if prompt_cache_key is None:
            return messages
        if not isinstance(prompt_cache_key, str) or not prompt_cache_key:
            raise PackError(f"prompt_cache_key must be non-empty text, got {prompt_cache_key!r}")
        return {"messages": messages, "prompt_cache_key": prompt_cache_key}

    def to_anthropic(
        self,
        *,
        placeholder: str | None = None,
        cache: bool = False,
        cache_model: str | CacheModel | None = None,
    ) -> dict[str, Any]:
        r"""The pack as an Anthropic Messages request, ``{"system", "messages"}``.

        It is made from :attr:`messages` (what the pack costs), so attribution
        lines, names and policy renderings are the same as in every format:

        - ``system`` and ``developer`` messages, wherever they are, are
          joined in order with a blank line (``"\n\n"``) into ``system``;
          the key is left out when there are none.
        - ``user`` messages (documents and memories included) become ``user``
          messages of ``text`` blocks; ``image_url`` parts become ``image``
          blocks (a ``data:<media type>;base64,<data>`` URL as a ``base64``
          source, any other URL as a ``url`` source).
        - ``assistant`` messages become ``assistant`` messages: first the
          item's thinking blocks (``thinking`` and ``redacted_thinking``,
          ``metadata.thinking_blocks``, as
          :func:`~cognoxium.formats.anthropic.from_anthropic_messages` keeps
          them), exactly as received, then a ``text``
          block for their text, then one ``tool_use`` block per tool call
          (``id``, function ``name``, and ``input``, the arguments parsed as
          JSON; blank arguments, ``""`` or whitespace, are ``{}``, as Chat
          Completions sends them for a tool without parameters). Arguments
          that are not a JSON object (truncated JSON, an array, a number, a
          string, ``null``) have no Anthropic form: a pack built for
          Anthropic leaves such a call out with its results (reason
          ``tool_call_arguments_invalid``), and in a pack built for OpenAI,
          which sends them, a ``RecordError`` names the call and its
          function.
        - ``tool`` results become ``tool_result`` blocks (``tool_use_id``,
          ``content``) inside a ``user`` message, with ``"is_error": true``
          when the result item says the tool failed (``metadata.is_error``,
          as :func:`~cognoxium.formats.anthropic.from_anthropic_messages` and
          :func:`~cognoxium.formats.interop.from_langchain_messages` keep it)
          and it has content: the API refuses a failed result that has none,
          which is sent without the mark, as Chat Completions sends it.
        - A message's ``name`` (the format has none) starts its first text
          block as ``"<name>: "``; a tool result's ``name`` is not sent (its
          call's ``tool_use`` block names the function).
        - Empty or whitespace-only text is not sent (the API rejects such
          text blocks); a message left with nothing to send is left out
          (its item stays included in the manifest: it was packed, and
          holds nothing to send; a pack built for Anthropic counts the
          opening message when the first message it sends is such a one).
          So a history ending on a blank user message ends on the reply
          before it, which the API reads as a prefill to continue. The
          whitespace ending an ``assistant`` text block is stripped, as the
          API rejects it at the end of a request (a prefill), in every
          turn: a message is sent the same whether or not one follows, so
          a continuing pack keeps the earlier request's bytes.
        - A tool call id outside the API's form ``^[a-zA-Z0-9_-]+$`` (ids
          such as ``functions.get_weather:0`` come from other providers) is
          sent as :func:`~cognoxium.packing._renderers.anthropic_tool_id`
          makes it, the same in its ``tool_use`` and ``tool_result``.
        - Consecutive messages of the same role are merged into one message,
          their blocks in order (but for thinking blocks, which go before
          the merged message's other blocks), so ``user`` and ``assistant`` alternate as
          the API requires; a tool call and its results thus become an
          ``assistant`` message of ``tool_use`` blocks followed by one
          ``user`` message of ``tool_result`` blocks.
        - The API requires at least one message, the first a ``user``
          message. When the pack's first non-system message is an assistant
          message (a ranked pack of a chat log may drop the user turn before
          it), or the pack sends no message besides its system block, a
          user message of the ``placeholder`` text is put first (by default
          :data:`~cognoxium.packing._renderers.OPENING`, ``"(earlier
          messages omitted)"``), so the request is always one the API takes.
          A pack built for Anthropic (``target="anthropic"``) starts on a
          user message when it may send one (units before it are dropped
          as with ``start_on="user"``) and, when it starts on none (it
          sends no message besides its system block, or it is an agent
          loop without a user message), counts that opening message in
          ``used_tokens`` and ``pack_overhead_tokens``; other packs do not
          count it.
        - Tool calls keep the rules of the API when the pack keeps those of
          Chat Completions (``tool_errors``, see
          :class:`~cognoxium.packing.options.PackOptions`): the rendered
          request passes
          :func:`~cognoxium.packing.message_rules.validate_anthropic_messages`.

        With ``cache=True`` the request marks prompt cache breakpoints
        (``cache_control``), never more than the API's 4: one on the last
        block of the pack's stable prefix (its history: every message
        before its document and memory items, gap notes included, the
        prefix a continuing pack keeps, see :mod:`cognoxium.packing.cache`);
        one on the system prompt, then sent as one text block, when it
        alone is at least the cache model's minimum; and, while an earlier
        block end of at least that minimum lies beyond the lookback of the
        earliest mark (Anthropic looks for earlier cache entries about 20
        blocks back from each mark, ``lookback_blocks``), one more within
        it, so that a later request whose new messages add more than 20
        blocks (an agent turn of many tool calls) still reads this one's
        cache (see
        :func:`~cognoxium.packing._request_prefix.cache_breakpoints`). The
        model's TTL sets ``"ttl": "1h"`` for the 1-hour cache.

        Parameters
        ----------
        placeholder
            The text of the user message put first when the pack would start
            with an assistant turn or send no message (for example
            ``"(earlier turns omitted)"``); ``None`` (the default):
            ``"(earlier messages omitted)"``.
        cache
            Mark the cache breakpoints.
        cache_model
            The breakpoints cache model whose minimum and TTL apply (a name or
            a :class:`~cognoxium.packing.cache_models.CacheModel`); ``None``:
            the manifest's ``cache_model`` when it is a breakpoints model,
            else ``"anthropic"``.

        Returns
        -------
        dict
            ``{"system": str, "messages": [...]}`` (no ``system`` key when the
            pack has no system or developer message), ready for
            ``client.messages.create(model=..., max_tokens=..., **request)``.

        Raises
        ------
        RecordError
            If a tool call's arguments are not a JSON object; never for a
            pack built with ``target="anthropic"``.
        """
        failed = failed_calls(self.frame)
        notes = sorted(g.note_at for g in self.manifest.gap_records if g.note_at is not None)
        thinking = sent_thinking(self.frame, notes)
        request = anthropic_request(
            self.messages, placeholder=placeholder, failed=failed, thinking=thinking
        )
        if not cache:
            return request
        model = _breakpoints_model(self.manifest, cache_model)
        prefix = pack_prefix(self, anthropic=True)
        marks = cache_breakpoints(prefix, model)
        skipped = int(prefix.blocks[0]) if prefix.system else 0
        return mark_cache(
            request,
            [int(prefix.ends_blocks[m]) - 1 - skipped for m in marks if m or not prefix.system],
            system=prefix.system and 0 in marks,
            ttl="1h" if model.ttl_seconds >= 3600 else None,
        )

    def to_text(self) -> str:
        """The pack as a plain transcript, one block per message.

        Blocks are separated by a blank line, with no trailing newline. A
        block is a header line, ``"<role>:"`` (``"<role> (<name>):"`` for a
        named message, ``"tool [<tool_call_id>]:"`` or ``"tool
        [<tool_call_id>] (<name>):"`` for a tool result), then
        the content as sent (attribution lines included), then one line per
        tool call, ``"-> call <id>: <name>(<arguments>)"``. An image part is
        the line ``"[image <url>]"`` (``"[image <media type>, base64]"`` for
        a data URL).

        Returns
        -------
        str
            The transcript; ``""`` for an empty pack.

        Examples
        --------
        >>> from cognoxium.formats.openai import from_openai_messages
        >>> from datetime import UTC, datetime
        >>> cf = from_openai_messages([
        ...     {"role": "user", "name": "ada", "content": "Time?"},
        ...     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1",
        ...      "type": "function", "function": {"name": "clock", "arguments": "{}"}}]},
        ...     {"role": "tool", "tool_call_id": "c1", "content": "14:05"}])
        >>> print(cf.pack(100, as_of=datetime(2024, 1, 1, tzinfo=UTC)).to_text())
        user (ada):
        Time?
        <BLANKLINE>
        assistant:
        -> call c1: clock({})
        <BLANKLINE>
        tool [c1]:
        14:05
        """
        return text_transcript(self.messages)

    def render(self, renderer: Renderer[RequestT]) -> RequestT:
        """Render the pack with ``renderer`` (any object with ``render(pack)``).

        Parameters
        ----------
        renderer
            A :class:`~cognoxium.packing.Renderer`.

        Returns
        -------
        object
            What ``renderer.render(self)`` returns.
        """
        return renderer.render(self)

    def __len__(self) -> int:
        return self.frame.height

    def __repr__(self) -> str:
        """One line: budget, used tokens, included and excluded items, the manifest's digest.

        The counts are the manifest's ``totals.included`` and
        ``totals.excluded``, named as the manifest names them.

        Examples
        --------
        >>> from datetime import UTC, datetime
        >>> from cognoxium import CognitionFrame
        >>> cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi",
        ...                       "created_at": "2023-12-31T00:00:00Z"}])
        >>> pack = cf.pack(100, as_of=datetime(2024, 1, 1, tzinfo=UTC))
        >>> pack
        <ContextPack budget=100 used=8 included=1 excluded=0 manifest sha256:...>
        """
        totals = self.manifest.totals
        return (
            f"<ContextPack budget={self.budget} used={self.used_tokens} "
            f"included={totals.included} excluded={totals.excluded} "
            f"manifest sha256:{self.manifest.digest[:12]}>"
        )

    def _repr_html_(self) -> str:
        """The pack's totals, its first messages and its manifest, as escaped HTML."""
        summary = [
            ("budget (tokens)", self.budget),
            ("used (tokens)", self.used_tokens),
            ("remaining (tokens)", self.remaining_tokens),
            ("included", self.manifest.totals.included),
            ("excluded", self.manifest.totals.excluded),
        ]
        content = [m.get("content") for m in self.messages]
        messages = pl.DataFrame(
            {
                "id": self.ids,
                "role": [str(m.get("role")) for m in self.messages],
                "content": [c if isinstance(c, str) else json.dumps(c) for c in content],
            },
            schema={"id": pl.String(), "role": pl.String(), "content": pl.String()},
        )
        return (
            "<div>"
            + fields_html("ContextPack", summary)
            + table_html("messages", messages)
            + self.manifest._repr_html_()
            + "</div>"
        )


def _breakpoints_model(manifest: PackManifest, given: str | CacheModel | None) -> CacheModel:
    """The breakpoints cache model ``to_anthropic(cache=True)`` follows."""
    if given is not None:
        model = get_cache_model(given)
    else:
        named = manifest.cache.cache_model if manifest.cache is not None else None
        model = get_cache_model(named or "anthropic")
        if model.kind != "breakpoints":
            model = get_cache_model("anthropic")
    if model.kind != "breakpoints":
        raise PackError(
            f"to_anthropic(cache=True) marks breakpoints; the cache model {model.name!r} "
            "caches automatically (give a breakpoints model such as 'anthropic')"
        )
    return model


REASONS: tuple[Reason, ...] = tuple(Reason)
"""Every reason, in code order: a reason's code is its index here."""

REASON_CODE: dict[Reason, int] = {reason: code for code, reason in enumerate(REASONS)}
"""Reason -> its code (the ``int64`` the phases carry per row)."""

UNSET = -1
"""The code of no reason yet, and the value of a cost, bound or position not computed."""
