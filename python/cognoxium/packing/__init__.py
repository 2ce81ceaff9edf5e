"""Packing: select what fits a token budget, in phases, and explain it in a manifest."""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.packing._renderers import Renderer
    from cognoxium.packing.manifests import (
        NO_SOURCE,
        ManifestWriter,
        read_bodies,
        read_manifests,
        scan_manifests,
        scan_packs,
        summarize_manifests,
    )
    from cognoxium.packing.options import PackOptions
    from cognoxium.packing.packer import (
        CHAT_ROLES,
        ContextPack,
        Decision,
        GapRecord,
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
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.packing._renderers": ["Renderer"],
            "cognoxium.packing.manifests": [
                "NO_SOURCE",
                "ManifestWriter",
                "read_bodies",
                "read_manifests",
                "scan_manifests",
                "scan_packs",
                "summarize_manifests",
            ],
            "cognoxium.packing.options": ["PackOptions"],
            "cognoxium.packing.packer": [
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
            ],
        },
    )

__all__ = [
    "CHAT_ROLES",
    "NO_SOURCE",
    "ContextPack",
    "Decision",
    "GapRecord",
    "ManifestEntry",
    "ManifestTotals",
    "ManifestWriter",
    "MergeRecord",
    "PackManifest",
    "PackOptions",
    "PackOutcome",
    "PackScope",
    "PolicyOutcome",
    "Reason",
    "Renderer",
    "TruncationRecord",
    "pack",
    "pack_reusing",
    "read_bodies",
    "read_manifests",
    "scan_manifests",
    "scan_packs",
    "summarize_manifests",
]
