"""Shared hypothesis strategies: context items and frames of them.

Import from tests as ``from strategies import items_strategy, frames_strategy``
(pytest puts ``tests/`` on ``sys.path``).

The values are drawn from small pools on purpose, so that examples hit the
interesting cases often: duplicate payloads (same content hash), equal
priorities and timestamps (ties), BM25 query terms that occur in some texts and
not others, metadata keys present in some items only, and every payload kind.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from hypothesis import strategies as st

from cognoxium.items.model import ContextItem, Retention, Role, Sensitivity, Trust
from cognoxium.items.schema import items_to_frame

__all__ = ["MERGE_GOVERNED", "T0", "WORDS", "frames_strategy", "item_strategy", "items_strategy"]

T0 = datetime(2024, 1, 1, tzinfo=UTC)
"""The earliest ``created_at`` drawn; all times are T0 plus whole hours."""

MERGE_GOVERNED = (
    "id",
    "trust",
    "sensitivity",
    "retention",
    "priority",
    "rank",
    "expires_at",
    "valid_from",
    "sources",
    "parents",
    "merged_ids",
    "merge_conflicts",
)
"""The columns a dedupe merge decides, compared by the merge properties."""

WORDS = ("refund", "policy", "shipping", "days", "window", "hello", "order", "the", "and", "é")
"""Text vocabulary: a few content words, two English stop words and a non-ASCII word."""

_ROLES = tuple(r.value for r in Role)
_TIMES = st.integers(0, 48).map(lambda h: T0 + timedelta(hours=h))


@st.composite
def _payload(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["text"] * 6 + ["json", "reference", "binary"]))
    words = draw(st.lists(st.sampled_from(WORDS), max_size=5))
    if kind == "text":
        return {"kind": "text", "text": " ".join(words)}
    if kind == "json":
        return {"kind": "json", "value": {"words": words}}
    if kind == "reference":
        title = draw(st.none() | st.just(" ".join(words)))
        return {"kind": "reference", "uri": f"https://example.org/{len(words)}", "title": title}
    return {"kind": "binary", "data": bytes(len(words))}


@st.composite
def _metadata(draw: st.DrawFn) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if draw(st.booleans()):
        metadata["conversation"] = draw(st.sampled_from(["c1", "c2"]))
    if draw(st.booleans()):
        metadata["turn"] = draw(st.integers(0, 5))
    return metadata


@st.composite
def item_strategy(draw: st.DrawFn, id: str | None = None) -> ContextItem:
    """One valid :class:`ContextItem` with every field drawn (``id`` drawn if not given)."""
    created = draw(_TIMES)
    expires = draw(st.none() | st.integers(1, 72).map(lambda h: created + timedelta(hours=h)))
    sources = draw(
        st.lists(
            st.builds(dict, uri=st.sampled_from(["https://a.org", "https://b.org"])),
            max_size=2,
        )
    )
    return ContextItem.model_validate(
        {
            "id": id if id is not None else draw(st.uuids().map(str)),
            "role": draw(st.sampled_from(_ROLES)),
            "payload": draw(_payload()),
            "sources": sources,
            "trust": draw(st.sampled_from(list(Trust))),
            "sensitivity": draw(st.sampled_from(list(Sensitivity))),
            "retention": draw(st.sampled_from(list(Retention))),
            "priority": draw(st.integers(-2, 3)),
            "rank": draw(st.none() | st.floats(0, 10, allow_nan=False)),
            "created_at": created,
            "expires_at": expires,
            "parents": draw(st.lists(st.sampled_from(["p1", "p2", "p3"]), max_size=2)),
            "group_id": draw(st.none() | st.sampled_from(["g1", "g2"])),
            "metadata": draw(_metadata()),
        }
    )


@st.composite
def items_strategy(draw: st.DrawFn, *, min_size: int = 0, max_size: int = 12) -> list[ContextItem]:
    """A list of items with unique ids ``i00``, ``i01``, ... in a drawn (shuffled) order.

    Parameters
    ----------
    min_size, max_size
        Bounds on the number of items.
    """
    n = draw(st.integers(min_size, max_size))
    order = draw(st.permutations(range(n)))
    return [draw(item_strategy(id=f"i{k:02d}")) for k in order]


def frames_strategy(*, min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[pl.DataFrame]:
    """Frames of the canonical schema made from :func:`items_strategy` items, in order."""
    return items_strategy(min_size=min_size, max_size=max_size).map(items_to_frame)
