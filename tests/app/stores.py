"""Synthetic item stores for the batch and distributed tests."""

from __future__ import annotations

import polars as pl

from cognoxium.items.records import records_to_frame

WORDS = ("refund", "invoice", "crash", "login", "billing", "shipping", "password", "upgrade")


def synthetic(
    conversations: int, items: int, *, interleaved: bool = False, derived: bool = False
) -> pl.DataFrame:
    """Items of several conversations, with roles, times and words varying by position.

    ``interleaved``: the conversations' items alternate in the store (else
    each conversation's items are together); ``derived``: every fifth item
    of a conversation is derived from the one before it.
    """
    places = [(c, i) for c in range(conversations) for i in range(items)]
    if interleaved:
        places.sort(key=lambda place: (place[1], place[0]))
    return records_to_frame(
        [
            {
                "id": f"c{c}-{i}",
                "role": ("user", "assistant", "tool", "document")[i % 4],
                "text": f"{WORDS[(c + i) % 8]} {WORDS[i % 8]} note {i} " * (1 + i % 3),
                "created_at": f"2025-01-{1 + i % 28:02d}T{i % 24:02d}:00:00Z",
                "priority": i % 3,
                "parents": [f"c{c}-{i - 1}"] if derived and i % 5 == 4 else [],
                "metadata": {"conversation": f"c{c:02d}", "turn": i},
            }
            for c, i in places
        ]
    )
