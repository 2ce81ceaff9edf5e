"""Small chat histories as items, for the packing tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl

from cognoxium.items.validation import conform

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def chat(rows: list[tuple[str, str, str]], **columns: list[Any]) -> pl.DataFrame:
    """Items (id, role, text) at one-minute steps from T0; system messages required."""
    return conform(
        pl.DataFrame(
            {
                "id": [r[0] for r in rows],
                "role": [r[1] for r in rows],
                "text": [r[2] for r in rows],
                "retention": ["required" if r[1] == "system" else "optional" for r in rows],
                "created_at": [T0 + timedelta(minutes=i) for i in range(len(rows))],
                **columns,
            }
        )
    )


def documents(
    ids: list[str], texts: list[str], ranks: list[float], *, created_at: datetime = T0
) -> pl.DataFrame:
    """Ranked ``document`` items (id, text, rank), all created at ``created_at``."""
    return conform(
        pl.DataFrame(
            {
                "id": ids,
                "role": ["document"] * len(ids),
                "text": texts,
                "rank": ranks,
                "created_at": [created_at] * len(ids),
            }
        )
    )
