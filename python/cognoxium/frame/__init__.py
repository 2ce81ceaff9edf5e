"""The user's handle on a plan: :class:`CognitionFrame` and :class:`GroupBy`."""

from cognoxium.frame.frame import (
    CognitionFrame,
    GroupBy,
    OptFlags,
)

__all__ = [
    "CognitionFrame",
    "GroupBy",
    "OptFlags",
]
