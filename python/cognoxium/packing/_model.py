"""What a pack returns: the :class:`ContextPack` and its :class:`PackManifest`.

Also the codes the packing phases share: a reason is carried through the
phases as its index in :data:`REASONS` (an ``int64`` array, one per input row),
and :data:`UNSET` (-1) marks a row without a reason yet, or a cost, bound or
pack position not computed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import polars as pl
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, PrivateAttr

from cognoxium.items.model import ContextItem, canonical_json
from cognoxium.items.schema import POLARS_SCHEMA, frame_to_items

__all__ = [
    "ENTRY_SCHEMA",
    "MANIFEST_FORMAT",
    "REASONS",
    "REASON_CODE",
    "TIERS",
    "UNSET",
    "ContextPack",
    "Decision",
    "ManifestEntry",
    "ManifestTotals",
    "MergeRecord",
    "PackManifest",
    "PolicyOutcome",
    "Reason",
    "TruncationRecord",
    "entries_frame",
]

MANIFEST_FORMAT = "cognoxium.pack_manifest/1"

TIERS: dict[str, int] = {"required": 0, "preferred": 1, "optional": 2}
"""Retention -> tier code; lower tiers are considered first."""


class Decision(StrEnum):
    """Whether an item went into the pack."""

    INCLUDED = "included"
    EXCLUDED = "excluded"


class Reason(StrEnum):
    """Why an item was included or excluded."""

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


class ManifestEntry(BaseModel):
    """One input item's line in a manifest.

    ``tokens`` is the item's cost (its chat message: framing, name, content
    and tool calls, see :mod:`cognoxium.tokens.profiles`) in tokens, or
    ``None`` when it was never counted because it provably could not matter.
    ``detail`` says more about the reason (the quarantine reason), or ``None``;
    ``provenance`` lists a quarantined item's source URIs (``None`` otherwise);
    ``redactions`` is the canonical JSON ``{TYPE: count}`` of the item's
    redactions (``None`` when it had none) and never a redacted value.
    ``position`` is the item's 0-based input index and ``pack_position`` its
    index in the pack, or ``None``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

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

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str
    rule: str | None
    id: str
    action: str
    message: str | None


class MergeRecord(BaseModel):
    """One merge of duplicates: the kept item, the ids folded into it, and how fields resolved.

    ``resolved`` holds the kept item's value of every merge-governed field
    (see ``merge_rules`` in the manifest); ``metadata_conflicts`` maps each
    metadata key on which the copies differ to ``{id: value}``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kept: str
    merged: list[str]
    resolved: dict[str, Any]
    metadata_conflicts: dict[str, dict[str, Any]] | None


class TruncationRecord(BaseModel):
    """One item cut to fit: what it kept and the content it then sent.

    ``original_tokens`` and ``kept_tokens`` count the item's text (content
    only, no framing), in tokens; ``side`` is the side kept (``head`` or
    ``tail``); ``parent_hash`` is the original content hash and
    ``content_hash`` that of the text sent, also the entry's
    ``content_hash``. The lineage holds the matching ``truncate`` edge.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    side: str
    original_tokens: int
    kept_tokens: int
    parent_hash: str
    content_hash: str


class ManifestTotals(BaseModel):
    """Counts over a manifest's entries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    priming of the chat format, paid once when the pack is not empty).
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
    ``estimated`` is true when the token profile's costs are not exact counts
    (``approximate``, an upper bound; ``huggingface:PATH``, assumed chat
    framing; see :attr:`cognoxium.tokens.profiles.TokenProfile.estimated`);
    it is left out when false, so exact manifests keep their bytes.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str = MANIFEST_FORMAT
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
    _entries: pl.DataFrame = PrivateAttr()

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
        0, ``overflow`` when ``error`` and ``estimated`` when false.
        """
        defaults = {
            "unredacted": not self.unredacted,
            "reserve_tokens": self.reserve_tokens == 0,
            "overflow": self.overflow == "error",
            "truncations": not self.truncations,
            "estimated": not self.estimated,
        }
        return self.model_dump(mode="json", exclude={k for k, unset in defaults.items() if unset})

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
        """Parse and validate a manifest written by :meth:`to_json`."""
        data = json.loads(text)
        entries = [ManifestEntry.model_validate(e) for e in data.pop("entries")]
        manifest = cls.model_validate(data)
        manifest._entries = entries_frame([e.model_dump(mode="json") for e in entries])
        return manifest


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


@dataclass(frozen=True)
class ContextPack:
    """The items selected for one model call, in input order.

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
        ``tool_call_id`` when the item has them).
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

    def __len__(self) -> int:
        return self.frame.height


REASONS: tuple[Reason, ...] = tuple(Reason)
"""Every reason, in code order: a reason's code is its index here."""

REASON_CODE: dict[Reason, int] = {reason: code for code, reason in enumerate(REASONS)}
"""Reason -> its code (the ``int64`` the phases carry per row)."""

UNSET = -1
"""The code of no reason yet, and the value of a cost, bound or position not computed."""
