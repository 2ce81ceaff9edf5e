"""Synthetic item stores for the batch and distributed tests."""

from __future__ import annotations

from typing import Any

import polars as pl

from cognoxium.app.batch import Request
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


def chats_ending_long_and_short() -> tuple[pl.DataFrame, list[Request]]:
    """Two chats, ``long`` ending on a 400-word user message, ``short`` on a short one.

    The requests pack each chat at 60 and 1,000 tokens (no query: newest
    first); only ``long@60`` leaves out its newest user message.
    """

    def chat(name: str, last: str) -> list[dict[str, Any]]:
        rows = [("system", "Be brief."), ("user", "Refunds?"), ("assistant", "Within 30 days.")]
        return [
            {"id": f"{name}:{k}", "role": role, "text": text, "metadata": {"conversation": name}}
            for k, (role, text) in enumerate([*rows, ("user", last)])
        ]

    items = records_to_frame(chat("long", "log " * 400) + chat("short", "And shipping?"))
    requests = [
        Request(id=f"{name}@{budget}", budget=budget, where=f"metadata.conversation = '{name}'")
        for name in ("long", "short")
        for budget in (60, 1000)
    ]
    return items, requests
