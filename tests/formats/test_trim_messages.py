"""A LangChain history packed with no rank keeps what ``trim_messages(strategy="last")`` keeps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl
import pytest

from cognoxium.formats.interop import from_langchain_messages
from cognoxium.packing import ContextPack
from cognoxium.tokens.profiles import get_profile

pytest.importorskip("langchain_core")

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)

AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
BUDGET = 4096
WORDS = (
    "order refund shipping parcel invoice account the a to and of you it is that in for on "
    "we this with can my your be have not delivery warehouse customer status tracking"
).split()


def history(n: int, seed: int = 25) -> list[BaseMessage]:
    """``n`` LangChain messages: a system message, then turns, a third of them with tool calls.

    A turn is a question, then either a reply, or an assistant message with
    one or two tool calls, their results and a reply. Text lengths are
    lognormal (some messages are long, so a tail that stops and one that
    fills differ).
    """
    rng = np.random.default_rng(seed)

    def text() -> str:
        length = int(np.clip(rng.lognormal(mean=3.0, sigma=1.0), 1, 900))
        return " ".join(rng.choice(WORDS, size=length))

    messages: list[BaseMessage] = [SystemMessage("You are a support assistant.")]
    call = 0
    while len(messages) < n:
        messages.append(HumanMessage(text()))
        if rng.random() < 1 / 3 and n - len(messages) >= 5:
            calls = [
                {"name": "lookup", "args": {"order": int(rng.integers(1000, 9999))}, "id": f"c{k}"}
                for k in range(call, call + int(rng.integers(1, 3)))
            ]
            call += len(calls)
            messages.append(AIMessage("", tool_calls=calls))
            messages.extend(ToolMessage(text(), tool_call_id=c["id"]) for c in calls)
        if len(messages) < n:
            messages.append(AIMessage(text()))
    return messages


def costs_of(messages: list[BaseMessage]) -> list[int]:
    """Each message's cost in tokens as Cognoxium counts it (its chat message and tool calls)."""
    packed = from_langchain_messages(messages).pack(10**9, as_of=AS_OF)
    tokens = packed.manifest.to_polars().get_column("tokens").to_list()
    assert len(tokens) == len(messages)
    assert None not in tokens
    return tokens


def trimmed(messages: list[BaseMessage], costs: list[int], budget: int) -> list[int]:
    """What ``trim_messages(strategy="last", include_system=True, start_on="human")`` keeps.

    Its indices, with ``costs`` as the token counter (summed over messages)
    and the budget less the reply priming that a pack pays once.
    """
    for i, message in enumerate(messages):
        message.id = str(i)
    cost = {str(i): c for i, c in enumerate(costs)}

    def count(batch: list[BaseMessage]) -> int:
        return sum(cost[str(m.id)] for m in batch)

    kept = trim_messages(
        messages,
        max_tokens=budget - get_profile("cl100k_base").tokens_per_pack,
        token_counter=count,
        strategy="last",
        include_system=True,
        start_on="human",
    )
    return [int(str(m.id)) for m in kept]


def positions(pack: ContextPack) -> list[int]:
    entries = pack.manifest.to_polars().filter(pl.col("decision") == "included")
    return entries.get_column("position").to_list()


def orphan_results(pack: ContextPack) -> list[int]:
    """Pack positions of tool results whose call no earlier packed message makes."""
    called: set[str] = set()
    orphans = []
    for at, message in enumerate(pack.messages):
        called.update(c["id"] for c in message.get("tool_calls") or [])
        if message["role"] == "tool" and message["tool_call_id"] not in called:
            orphans.append(at)
    return orphans


@pytest.fixture(scope="module")
def chat() -> dict[str, Any]:
    messages = history(2000)
    costs = costs_of(messages)
    frame = from_langchain_messages(messages)
    return {
        "messages": messages,
        "frame": frame,
        "kept": trimmed(messages, costs, BUDGET),
        "default": frame.pack(BUDGET, as_of=AS_OF),
        "fill": frame.pack(BUDGET, as_of=AS_OF, gaps="fill"),
    }


def test_the_history_has_tool_calls_and_long_messages(chat: dict[str, Any]) -> None:
    roles = chat["frame"].to_polars().get_column("role").cast(pl.String)
    assert len(chat["messages"]) == 2000
    assert (roles == "tool").sum() == 344


def test_no_rank_keeps_what_trim_messages_keeps(chat: dict[str, Any]) -> None:
    kept, default = chat["kept"], positions(chat["default"])
    shared = len(set(kept) & set(default))
    # Measured: trim_messages keeps 124 of the 2,000 messages, and the pack the same 124
    # (before conversation items went newest first, it kept 416, 31 of them shared).
    assert (len(kept), len(default), shared) == (124, 124, 124)
    assert shared / len(kept) >= 0.99
    assert chat["default"].manifest.order == "recency"
    assert orphan_results(chat["default"]) == []


def test_stop_keeps_an_unbroken_tail(chat: dict[str, Any]) -> None:
    default = positions(chat["default"])
    tail = default[1:]  # after the system message
    assert default[0] == 0
    assert tail == list(range(tail[0], 2000))
    manifest = chat["default"].manifest
    assert manifest.gap_records == []
    assert "gap" not in manifest.totals.by_reason
    assert "gap_records" not in manifest.to_dict()
    assert "gaps" not in manifest.to_dict()


def test_fill_uses_more_of_the_budget_and_marks_each_gap(chat: dict[str, Any]) -> None:
    fill, default = chat["fill"], chat["default"]
    manifest = fill.manifest
    assert set(positions(default)) <= set(positions(fill))
    # Measured: 126 messages in 4,094 tokens (the tail: 124 in 4,076), with 2 holes.
    assert (len(positions(fill)), fill.used_tokens, default.used_tokens) == (126, 4094, 4076)
    assert len(manifest.gap_records) == 2
    assert manifest.gaps == "fill"
    assert manifest.to_dict()["gaps"] == "fill"
    gaps = manifest.gap_records
    assert gaps
    assert sum(g.items for g in gaps) == manifest.totals.by_reason["gap"]
    entries = manifest.to_polars()
    for gap in gaps:
        hole = entries.slice(gap.first, gap.last - gap.first + 1)
        assert set(hole.get_column("decision").to_list()) == {"excluded"}
        assert set(hole.get_column("reason").to_list()) == {"gap"}
    assert orphan_results(fill) == []
