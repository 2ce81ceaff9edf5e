"""Hypothesis strategies: context items, frames of them, and chat histories with tool calls.

The values are drawn from small pools on purpose, so that examples hit the
interesting cases often: duplicate payloads (same content hash), equal
priorities and timestamps (ties), BM25 query terms that occur in some texts and
not others, metadata keys present in some items only, and every payload kind.

This module needs `hypothesis <https://hypothesis.readthedocs.io>`_, an
optional dependency: ``pip install 'cognoxium-engine[testing]'``. Importing it
without hypothesis raises :class:`~cognoxium.exceptions.DependencyError`.

Examples
--------
A property over frames: a pack gives every input item one manifest entry and
never uses more tokens than its budget (or it refuses, with a ``PackError``,
required items that cannot be packed).

>>> from datetime import UTC, datetime
>>> from hypothesis import given, settings
>>> from cognoxium.exceptions import PackError
>>> from cognoxium.packing.options import PackOptions
>>> from cognoxium.packing.packer import pack
>>> @settings(max_examples=20, deadline=None)
... @given(frames_strategy(max_size=6))
... def test_pack_fits(df):
...     try:
...         result = pack(df, 200, PackOptions(as_of=datetime(2024, 6, 1, tzinfo=UTC)))
...     except PackError:
...         return
...     assert result.manifest.totals.items == df.height
...     assert result.used_tokens <= 200
>>> test_pack_fits()
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl

from cognoxium._distribution import install_command
from cognoxium.exceptions import DependencyError

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise DependencyError(
        f"hypothesis is not installed ({exc}); cognoxium.testing.strategies needs the "
        f"'testing' extra: {install_command('testing')}"
    ) from exc

from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem, Retention, Role, Sensitivity, Trust

__all__ = [
    "CHAT_WORDS",
    "MERGE_GOVERNED",
    "T0",
    "WORDS",
    "chat_histories_strategy",
    "frames_strategy",
    "item_strategy",
    "items_strategy",
]

T0 = datetime(2024, 1, 1, tzinfo=UTC)
"""The earliest ``created_at`` drawn (UTC); all times are T0 plus whole hours."""

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
"""The columns a merging dedupe decides: what a merge property compares to its reference."""

WORDS = ("refund", "policy", "shipping", "days", "window", "hello", "order", "the", "and", "é")
"""Item text vocabulary: a few content words, two English stop words and a non-ASCII word."""

CHAT_WORDS = ("flight", "hotel", "Paris", "42", "ok", "é", "\n", "{", "price", "the")
"""Chat text vocabulary: words, a number, a non-ASCII word, a newline and a brace."""

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
    """One valid :class:`~cognoxium.items.model.ContextItem` with every field drawn.

    Parameters
    ----------
    id
        The item's id; a random UUID string when ``None``.

    Returns
    -------
    hypothesis.strategies.SearchStrategy[ContextItem]
        Items of every role and payload kind (text six times in nine, then
        JSON, reference, binary), trust, sensitivity, retention, priority in
        [-2, 3], rank null or in [0, 10], ``created_at`` T0 plus 0 to 48
        hours, ``expires_at`` null or 1 to 72 hours later, up to two sources,
        up to two parents among ``p1``-``p3``, group ``g1``, ``g2`` or none,
        and metadata with the keys ``conversation`` and ``turn`` or not.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=10)
    ... @given(item_strategy(id="a"))
    ... def test_id(item):
    ...     assert item.id == "a" and -2 <= item.priority <= 3
    >>> test_id()
    """
    created = draw(_TIMES)
    expires = draw(st.none() | st.integers(1, 72).map(lambda h: created + timedelta(hours=h)))
    sources: list[dict[str, str]] = draw(
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
    """Lists of items with unique ids ``i00``, ``i01``, ... in a drawn (shuffled) order.

    Parameters
    ----------
    min_size, max_size
        Bounds on the number of items.

    Returns
    -------
    hypothesis.strategies.SearchStrategy[list[ContextItem]]
        Lists of :func:`item_strategy` items.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=10)
    ... @given(items_strategy(min_size=2, max_size=4))
    ... def test_ids(items):
    ...     assert 2 <= len({item.id for item in items}) == len(items) <= 4
    >>> test_ids()
    """
    n = draw(st.integers(min_size, max_size))
    order = draw(st.permutations(range(n)))
    return [draw(item_strategy(id=f"i{k:02d}")) for k in order]


def frames_strategy(*, min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[pl.DataFrame]:
    """Frames of the canonical schema made from :func:`items_strategy` items, in their order.

    Parameters
    ----------
    min_size, max_size
        Bounds on the number of rows.

    Returns
    -------
    hypothesis.strategies.SearchStrategy[polars.DataFrame]
        Frames as :func:`~cognoxium.items.convert.items_to_frame` makes them.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> from cognoxium.items.schema import SCHEMA
    >>> @settings(max_examples=10)
    ... @given(frames_strategy(max_size=3))
    ... def test_schema(df):
    ...     assert df.columns == SCHEMA.names and df.height <= 3
    >>> test_schema()
    """
    return items_strategy(min_size=min_size, max_size=max_size).map(items_to_frame)


def _tool_call(call_id: str, query: str) -> dict[str, Any]:
    arguments = json.dumps({"q": query})
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "lookup", "arguments": arguments},
    }


@st.composite
def chat_histories_strategy(
    draw: st.DrawFn, *, max_turns: int = 5, max_parallel_calls: int = 3
) -> list[dict[str, Any]]:
    """Valid OpenAI chat histories with tool calls, as :mod:`cognoxium.formats.openai` reads them.

    A history is an optional system message, then 1 to ``max_turns`` turns.
    A turn is a user message (sometimes with a ``name``), then sometimes an
    assistant message with 1 to ``max_parallel_calls`` parallel tool calls
    (with text or with ``content`` null), their tool results in any order
    after it, and sometimes a final assistant answer. Every call but at most
    one per message has a result: the last call of an agent loop may still
    be waiting for its result. Call ids ``call_0``, ``call_1``, ... are unique.

    Parameters
    ----------
    max_turns
        Most user turns in one history (at least 1).
    max_parallel_calls
        Most tool calls in one assistant message (0 for histories without
        tool calls).

    Returns
    -------
    hypothesis.strategies.SearchStrategy[list[dict[str, Any]]]
        Lists of messages ``{"role", "content", ...}`` that
        :func:`~cognoxium.formats.openai.from_openai_messages` accepts.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> from cognoxium.formats.openai import from_openai_messages, to_openai_messages
    >>> @settings(max_examples=10, deadline=None)
    ... @given(chat_histories_strategy(max_turns=2))
    ... def test_round_trip(messages):
    ...     chat = to_openai_messages(from_openai_messages(messages, conversation_id="c"))
    ...     assert [m["role"] for m in chat] == [m["role"] for m in messages]
    >>> test_round_trip()
    """

    def text(max_words: int = 30) -> str:
        words = draw(st.lists(st.sampled_from(CHAT_WORDS), min_size=1, max_size=max_words))
        return " ".join(words)

    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": text(10)})
    n_calls = 0
    for _ in range(draw(st.integers(1, max(max_turns, 1)))):
        user: dict[str, Any] = {"role": "user", "content": text()}
        if draw(st.booleans()):
            user["name"] = draw(st.sampled_from(["ada", "bo"]))
        messages.append(user)
        k = draw(st.integers(0, max_parallel_calls))
        if k:
            calls = [_tool_call(f"call_{n_calls + j}", text(3)) for j in range(k)]
            n_calls += k
            with_text = draw(st.booleans())
            messages.append(
                {
                    "role": "assistant",
                    "content": text(5) if with_text else None,
                    "tool_calls": calls,
                }
            )
            answered = draw(st.permutations(calls))[: draw(st.integers(max(k - 1, 0), k))]
            messages.extend(
                {"role": "tool", "tool_call_id": c["id"], "content": text(60)} for c in answered
            )
        if draw(st.booleans()):
            messages.append({"role": "assistant", "content": text()})
    return messages
