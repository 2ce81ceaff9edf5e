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
    "MERGE_RULES",
    "QUARANTINE_COLUMN",
    "REDACTED_FROM",
    "REDACTIONS",
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

QUARANTINE_COLUMN: Final = "quarantine_reason"
"""Column written by quarantine: why a row is held out of packs, or null."""

REDACTIONS: Final = "redactions"
"""Column written by redact: canonical JSON of redaction counts by type, or null."""

REDACTED_FROM: Final = "redacted_from"
"""Column written by redact: the content hash before redaction, or null."""

UNREDACTED: Final = "unredacted"
"""Column written by redact: canonical JSON list of the fields outside the payload that hold
data and were not redacted (``["metadata","sources"]``), or null."""

MERGE_RULES: Final[dict[str, str]] = {
    "trust": "least trust (untrusted if any copy is)",
    "sensitivity": "highest sensitivity",
    "retention": "strongest retention",
    "expires_at": "earliest expiry",
    "valid_from": "latest start of validity",
    "priority": "highest priority",
    "rank": "best rank",
    "sources": "union, sorted by uri",
    "parents": "union, sorted",
    "lineage": "union, plus a merge edge from each folded copy, sorted",
}
"""How a merging dedupe resolves each policy column; other columns are the representative's."""
