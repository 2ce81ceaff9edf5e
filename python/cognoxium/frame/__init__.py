"""The user's handle on a plan: :class:`CognitionFrame` and :class:`GroupBy`."""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.frame.frame import (
        CognitionFrame,
        GroupBy,
        OptFlags,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.frame.frame": ["CognitionFrame", "GroupBy", "OptFlags"],
        },
    )

__all__ = [
    "CognitionFrame",
    "GroupBy",
    "OptFlags",
]
