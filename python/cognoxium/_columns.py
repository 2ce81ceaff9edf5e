"""Column names and role mappings shared by the engine, packing and the kernels.

Every layer reads these names; defining them here, below all layers, keeps
packing from importing the engine and the kernels from importing packing.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CHAT_ROLES",
    "MERGED_IDS",
    "MERGE_CONFLICTS",
    "MERGE_DROPPED",
    "MERGE_RULES",
    "QUARANTINE_COLUMN",
    "REDACTED_FROM",
    "REDACTIONS",
    "STORE_POSITION",
    "UNREDACTED",
]

CHAT_ROLES: Final[dict[str, str]] = {
    "system": "system",
    "developer": "developer",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "document": "user",
    "memory": "user",
}
"""The OpenAI chat role each item role is rendered as (documents and memories as user)."""

MERGED_IDS: Final = "merged_ids"
"""Column written by a merging dedupe: the ids folded into each kept row."""

MERGE_CONFLICTS: Final = "merge_conflicts"
"""Column written by a merging dedupe: canonical JSON of conflicting metadata."""

MERGE_DROPPED: Final = "merge_dropped"
"""Column written by a merging dedupe given an ``as_of``: the copies it dropped before merging,
as a list of ``{id, reason}`` (reason ``expired`` or ``not_yet_valid``), sorted by id."""

QUARANTINE_COLUMN: Final = "quarantine_reason"
"""Column written by quarantine: why a row is held out of packs, or null."""

STORE_POSITION: Final = "__cognoxium_position"
"""Column of a partitioned store's files: each item's 0-based position in the items written.

A store split into partitions by a key loses the order of its items (a
reader lists the partitions by path); readers sort by this column to give
the items back in the order they were written, then drop it."""

REDACTIONS: Final = "redactions"
"""Column written by redact: canonical JSON of redaction counts by type, or null."""

REDACTED_FROM: Final = "redacted_from"
"""Column written by redact: the content hash before redaction, or null."""

UNREDACTED: Final = "unredacted"
"""Column written by redact: canonical JSON list of the fields outside the payload that hold
data and were not redacted (``["metadata","sources"]``), or null."""

MERGE_RULES: Final[dict[str, str]] = {
    "copies": (
        "only copies with the same group_id (null is one group) and answering the same "
        "tool call are merged"
    ),
    "expired_copies": (
        "with an as_of (given to dedupe, or the pack's), copies expired or not yet valid "
        "then are dropped before merging when a valid copy exists, and recorded"
    ),
    "trust": "least trust (untrusted if any copy is)",
    "sensitivity": "highest sensitivity",
    "retention": "strongest retention",
    "created_at": (
        "earliest creation (of the copies kept), so no kept row expires before it is created"
    ),
    "expires_at": "earliest expiry (of the copies kept)",
    "valid_from": "latest start of validity (of the copies kept)",
    "priority": "highest priority",
    "rank": "best rank",
    "sources": "union, sorted by uri",
    "parents": "union, sorted",
    "lineage": "union, plus a merge edge from each folded copy, sorted",
}
"""How a merging dedupe resolves each policy column; other columns are the representative's."""
