"""Packing: select what fits a token budget, in phases, and explain it in a manifest."""

from cognoxium.packing._renderers import Renderer
from cognoxium.packing.manifests import (
    NO_SOURCE,
    ManifestWriter,
    read_manifests,
    scan_manifests,
    summarize_manifests,
)
from cognoxium.packing.packer import (
    CHAT_ROLES,
    ContextPack,
    Decision,
    ManifestEntry,
    ManifestTotals,
    MergeRecord,
    PackManifest,
    PackOutcome,
    PackScope,
    PolicyOutcome,
    Reason,
    TruncationRecord,
    pack,
    pack_reusing,
)

__all__ = [
    "CHAT_ROLES",
    "NO_SOURCE",
    "ContextPack",
    "Decision",
    "ManifestEntry",
    "ManifestTotals",
    "ManifestWriter",
    "MergeRecord",
    "PackManifest",
    "PackOutcome",
    "PackScope",
    "PolicyOutcome",
    "Reason",
    "Renderer",
    "TruncationRecord",
    "pack",
    "pack_reusing",
    "read_manifests",
    "scan_manifests",
    "summarize_manifests",
]
