"""OpenAI chat messages <-> items: conversion, errors, round trips, tool-call groups in packs."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cognoxium.exceptions import BudgetError, MessageError, RecordError, SchemaError
from cognoxium.formats.openai import (
    CHAT_EPOCH,
    IMPORT_TOOL_ERRORS,
    ORIGINAL_CALL_ID_KEY,
    ORIGINAL_CALL_IDS_KEY,
    from_openai_messages,
    openai_messages_to_items,
    read_openai_conversations,
    read_openai_jsonl,
    to_openai_messages,
)
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import UNDATED, ContextItem, Retention
from cognoxium.packing.message_rules import (
    openai_faults,
    validate_anthropic_messages,
    validate_openai_messages,
)
from cognoxium.packing.options import GAP_MODES, TOOL_ERRORS, PackOptions
from cognoxium.packing.packer import pack
from cognoxium.testing.strategies import chat_histories_strategy
from cognoxium.tokens.profiles import get_profile
from tests.reach import reached, reaching

PROFILE = get_profile("cl100k_base")
START = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
AS_OF = START + timedelta(days=1)


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def costs(df: pl.DataFrame) -> dict[str, int]:
    """Each item's real cost in tokens: the cl100k cost of the chat message it sends."""
    messages = to_openai_messages(df)
    return {
        item_id: PROFILE.message_tokens(message)
        for item_id, message in zip(df["id"].to_list(), messages, strict=True)
    }


def item(**fields: Any) -> ContextItem:
    return ContextItem.model_validate(fields)


def reasons(result: Any) -> dict[str, str]:
    return dict(result.manifest.to_polars().select("id", "reason").iter_rows())


# A conversation with a system message, parallel tool calls and their results (in another
# order than the calls), a call made together with text, and a plain final answer.
WEATHER: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a travel assistant. Use the tools for live data."},
    {"role": "developer", "content": "Temperatures in Celsius."},
    {
        "role": "user",
        "name": "ada",
        "content": [
            {"type": "text", "text": "Weather in Paris and Rome?"},
            {"type": "text", "text": "Also the EUR/CHF rate."},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("call_paris", "get_weather", {"city": "Paris"}),
            call("call_rome", "get_weather", {"city": "Rome"}),
        ],
    },
    {"role": "tool", "tool_call_id": "call_rome", "content": "24 C, sunny"},
    {"role": "tool", "tool_call_id": "call_paris", "content": "17 C, light rain"},
    {
        "role": "assistant",
        "content": "Checking the exchange rate.",
        "tool_calls": [call("call_fx", "fx_rate", {"pair": "EURCHF"})],
    },
    {"role": "tool", "tool_call_id": "call_fx", "content": "0.94"},
    {
        "role": "assistant",
        "content": "Paris 17 C with rain, Rome 24 C and sunny; 1 EUR = 0.94 CHF.",
    },
]


def normalised(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a round trip should give back: content parts as one string, no empty extras."""
    out = []
    for message in messages:
        m = {k: v for k, v in message.items() if v not in (None, []) or k == "content"}
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(part["text"] for part in m["content"])
        if m["role"] == "assistant" and m.get("tool_calls") and not m.get("content"):
            m["content"] = None
        out.append(m)
    return out


# ---------------------------------------------------------------------------
# conversion


def test_round_trip_with_system_and_parallel_tool_calls() -> None:
    cf = from_openai_messages(WEATHER, conversation_id="trip", start=START)
    assert to_openai_messages(cf) == normalised(WEATHER)
    # The round trip is also a fixed point.
    again = from_openai_messages(to_openai_messages(cf), conversation_id="trip", start=START)
    assert again.to_polars().equals(cf.to_polars())


def test_items_have_ids_roles_times_payloads_and_metadata() -> None:
    df = from_openai_messages(WEATHER, conversation_id="trip", start=START).to_polars()
    assert df["id"].to_list() == [f"trip:{i}" for i in range(len(WEATHER))]
    assert df["role"].cast(pl.String).to_list() == [m["role"] for m in WEATHER]
    assert df["created_at"].to_list() == [
        START + timedelta(microseconds=i) for i in range(len(WEATHER))
    ]
    assert df["payload_kind"].cast(pl.String).to_list() == [
        "text", "text", "text", "json", "text", "text", "text", "text", "text"
    ]  # fmt: skip
    assert df["text"][2] == "Weather in Paris and Rome?\nAlso the EUR/CHF rate."
    assert json.loads(df["json"][3]) == {"tool_calls": WEATHER[3]["tool_calls"]}
    metadata = [json.loads(m) for m in df["metadata"]]
    assert metadata[2] == {"name": "ada"}
    assert metadata[3] == {"tool_call_ids": ["call_paris", "call_rome"]}
    assert metadata[4] == {"tool_call_id": "call_rome"}
    assert metadata[6] == {"tool_call_ids": ["call_fx"], "tool_calls": WEATHER[6]["tool_calls"]}
    assert metadata[8] == {}
    assert df["trust"].cast(pl.String).unique().to_list() == ["untrusted"]
    assert df["sources"].list.len().to_list() == [0] * len(WEATHER)


def test_a_call_and_all_its_results_share_one_group() -> None:
    df = from_openai_messages(WEATHER, conversation_id="trip").to_polars()
    assert df["group_id"].to_list() == [
        None, None, None,
        "trip:tools:3", "trip:tools:3", "trip:tools:3",
        "trip:tools:6", "trip:tools:6",
        None,
    ]  # fmt: skip


def test_ids_and_times_are_reproducible_with_the_documented_defaults() -> None:
    first = openai_messages_to_items(WEATHER)
    second = openai_messages_to_items(WEATHER)
    assert first == second
    assert [i.id for i in first[:2]] == ["msg:0", "msg:1"]
    assert first[3].group_id == "msg:tools:3"
    assert datetime(1970, 1, 1, tzinfo=UTC) == CHAT_EPOCH
    assert CHAT_EPOCH is UNDATED  # the created_at of any undated item
    assert first[0].created_at == CHAT_EPOCH
    assert first[8].created_at == CHAT_EPOCH + timedelta(microseconds=8)


def test_source_is_recorded_as_provenance() -> None:
    items = openai_messages_to_items(WEATHER[:2], source="s3://logs/trip.json")
    assert [(s.uri, s.kind) for s in items[1].sources] == [
        ("s3://logs/trip.json", "openai_messages")
    ]


def test_declared_call_without_result_is_allowed_and_groups_alone() -> None:
    pending: list[dict[str, Any]] = [
        {"role": "user", "content": "Book the 9:40 train."},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "book", {"t": "9:40"})]},
    ]
    df = from_openai_messages(pending, conversation_id="p").to_polars()
    assert df["group_id"].to_list() == [None, "p:tools:1"]
    assert to_openai_messages(df) == pending
    # A parallel call with one result back: the group holds the call and that result.
    partial: list[dict[str, Any]] = [
        {"role": "user", "content": "Check both."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("a", "check", {"n": 1}), call("b", "check", {"n": 2})],
        },
        {"role": "tool", "tool_call_id": "b", "content": "ok"},
    ]
    df = from_openai_messages(partial, conversation_id="q").to_polars()
    assert df["group_id"].to_list() == [None, "q:tools:1", "q:tools:1"]


def test_sdk_response_keys_with_empty_values_are_accepted() -> None:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "Hello.",
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": None,
    }
    assert to_openai_messages(from_openai_messages([message])) == [
        {"role": "assistant", "content": "Hello."}
    ]


def test_image_parts_become_grouped_reference_items_and_pack_together() -> None:
    image = {
        "type": "image_url",
        "image_url": {"url": "https://example.org/a.png", "detail": "high"},
    }
    data = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "name": "ada",
            "content": [{"type": "text", "text": "Compare"}, image, data],
        },
        {"role": "user", "content": [image]},
    ]
    items = openai_messages_to_items(messages, conversation_id="c")
    # An image URL's format is not known ("image/*"); a data URL names its own.
    any_image = "image/*"
    assert [(i.id, i.payload.kind, i.group_id, i.metadata) for i in items] == [
        ("c:0", "text", None, {}),
        ("c:1.0", "text", "c:parts:1", {"message_part": 0, "name": "ada"}),
        (
            "c:1.1",
            "reference",
            "c:parts:1",
            {"detail": "high", "media_type": any_image, "message_part": 1, "name": "ada"},
        ),
        (
            "c:1.2",
            "reference",
            "c:parts:1",
            {"media_type": "image/png", "message_part": 2, "name": "ada"},
        ),
        (
            "c:2.0",
            "reference",
            "c:parts:2",
            {"detail": "high", "media_type": any_image, "message_part": 0},
        ),
    ]
    assert items[3].payload.model_dump()["uri"] == "data:image/png;base64,iVBORw0KGgo="
    assert {i.created_at for i in items[1:4]} == {CHAT_EPOCH + timedelta(microseconds=1)}
    frame = items_to_frame(items)
    full = pack(frame, 10_000, PackOptions(as_of=AS_OF))
    # Every imported image is sent as an image_url part, whatever its URL looks like.
    parts = [p for m in full.messages if isinstance(m["content"], list) for p in m["content"]]
    assert [p["image_url"]["url"] for p in parts if p["type"] == "image_url"] == [
        item.payload.model_dump()["uri"] for item in items[2:]
    ]
    # The message's text and images form one unit, the costliest: one token short, it goes whole.
    short = pack(frame, full.used_tokens - 1, PackOptions(as_of=AS_OF))
    assert short.ids == ["c:0", "c:2.0"]
    assert short.manifest.totals.by_reason == {"group_over_budget": 3, "required": 1, "selected": 1}


def test_empty_assistant_text_next_to_tool_calls_becomes_a_json_payload() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "tool_calls": [call("c", "f", {})]}
    ]
    df = from_openai_messages(messages).to_polars()
    assert df["payload_kind"].cast(pl.String).to_list() == ["json"]
    assert to_openai_messages(df)[0]["content"] is None


@pytest.mark.parametrize(
    ("messages", "row", "field", "words"),
    [
        ([{"role": "function", "content": "x"}], 0, "role", "must be one of"),
        ([{"content": "x"}], 0, "role", "got None"),
        (["hello"], 0, None, "must be an object"),
        ([{"role": "user", "content": 5}], 0, "content", "list of content parts"),
        ([{"role": "user"}], 0, "content", "needs content"),
        ([{"role": "system", "content": None}], 0, "content", "needs content"),
        ([{"role": "assistant"}], 0, "content", "content or tool_calls"),
        (
            [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            0,
            "content[0].type",
            "an image part is sent in a user message only",
        ),
        (
            [{"role": "assistant", "content": [{"type": "reasoning", "reasoning": "hmm"}]}],
            0,
            "content[0].type",
            "'reasoning' part holds the model's reasoning, which is not packed",
        ),
        (
            [{"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}]}],
            0,
            "content[0].signature",
            "must be a non-empty string, got None",
        ),
        (
            [{"role": "user", "content": [{"type": "redacted_thinking", "data": "x"}]}],
            0,
            "content[0].type",
            "'redacted_thinking' part is Anthropic's signed reasoning",
        ),
        (
            [{"role": "assistant", "content": [{"type": "input_audio", "input_audio": {}}]}],
            0,
            "content[0].type",
            "only text parts are supported here",
        ),
        (
            [{"role": "assistant", "content": "x", "refusal": "no"}],
            0,
            "refusal",
            "not supported here; an assistant message has",
        ),
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
            0,
            "content[0].type",
            "only text and image_url parts",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ""}}]}],
            0,
            "content[0].image_url.url",
            "non-empty string",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "max"}}],
                },
            ],
            1,
            "content[0].image_url.detail",
            "must be one of",
        ),
        ([{"role": "user", "content": [{"type": "text"}]}], 0, "content[0].text", "string"),
        ([{"role": "user", "content": "x", "tool_call_id": "c"}], 0, "tool_call_id", "a user"),
        ([{"role": "user", "content": "x", "extra": 1}], 0, "extra", "not supported"),
        ([{"role": "assistant", "content": "x", "refusal": "no"}], 0, "refusal", "not supported"),
        ([{"role": "user", "content": "x", "name": ""}], 0, "name", "non-empty"),
        ([{"role": "assistant", "tool_calls": {"id": "c"}}], 0, "tool_calls", "must be a list"),
        (
            [{"role": "assistant", "tool_calls": [{"type": "function", "function": {}}]}],
            0,
            "tool_calls[0].id",
            "non-blank string",
        ),
        (
            [{"role": "assistant", "tool_calls": [call(" ", "f", {})]}],
            0,
            "tool_calls[0].id",
            "non-blank string, got ' '",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}],
            0,
            "tool_calls[0].custom",
            "unknown key",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "type": "code", "function": {}}]}],
            0,
            "tool_calls[0].type",
            "only 'function'",
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}
                    ],
                }
            ],
            0,
            "tool_calls[0].function.arguments",
            "JSON-encoded",
        ),
        (
            [{"role": "assistant", "tool_calls": [call("c", "f", {}), call("c", "g", {})]}],
            0,
            "tool_calls[1].id",
            "appears twice",
        ),
        ([{"role": "tool", "content": "1"}], 0, "tool_call_id", "non-blank string"),
        ([{"role": "tool", "content": "1", "tool_call_id": "\t"}], 0, "tool_call_id", "non-blank"),
    ],
)
def test_malformed_messages_name_the_index_and_field(
    messages: list[Any], row: int, field: str | None, words: str
) -> None:
    with pytest.raises(RecordError, match=words) as info:
        openai_messages_to_items(messages)
    assert (info.value.row, info.value.field) == (row, field)


def test_result_without_its_call_names_index_and_call_id() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [call("call_a", "f", {})]},
        {"role": "tool", "tool_call_id": "call_a", "content": "1"},
        {"role": "tool", "tool_call_id": "call_zzz", "content": "2"},
    ]
    with pytest.raises(RecordError, match="'call_zzz'") as info:
        openai_messages_to_items(messages)
    assert (info.value.row, info.value.field) == (3, "tool_call_id")


def test_result_before_its_call_and_second_result_are_rejected() -> None:
    early: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": "c", "content": "1"},
        {"role": "assistant", "tool_calls": [call("c", "f", {})]},
    ]
    with pytest.raises(RecordError, match="no earlier assistant message") as info:
        openai_messages_to_items(early)
    assert info.value.row == 0
    twice: list[dict[str, Any]] = [
        {"role": "assistant", "tool_calls": [call("c", "f", {})]},
        {"role": "tool", "tool_call_id": "c", "content": "1"},
        {"role": "tool", "tool_call_id": "c", "content": "1 again"},
    ]
    with pytest.raises(RecordError, match="already answered by message 1") as info:
        openai_messages_to_items(twice)
    assert info.value.row == 2


def test_bad_conversation_id_and_naive_start_are_rejected() -> None:
    with pytest.raises(RecordError) as info:
        openai_messages_to_items(WEATHER, conversation_id="")
    assert info.value.field == "conversation_id"
    with pytest.raises(RecordError) as info:
        openai_messages_to_items(WEATHER, start=datetime(2024, 1, 1))
    assert info.value.field == "start"


# ---------------------------------------------------------------------------
# JSONL


def write_lines(path: Path, lines: Sequence[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_read_openai_jsonl_skips_blank_lines_and_numbers_messages(tmp_path: Path) -> None:
    lines = [json.dumps(m) for m in WEATHER]
    lines.insert(2, "")
    lines.insert(5, "   ")
    path = write_lines(tmp_path / "trip.jsonl", lines)
    cf = read_openai_jsonl(path, conversation_id="trip", start=START)
    expected = from_openai_messages(WEATHER, conversation_id="trip", start=START, source=str(path))
    assert cf.to_polars().equals(expected.to_polars())
    assert to_openai_messages(cf) == normalised(WEATHER)
    assert cf.to_items()[0].sources[0].uri == str(path)


@pytest.mark.parametrize(
    ("bad", "line", "field", "words"),
    [
        ("{not json", 3, None, "invalid JSON"),
        ('{"role": "robot", "content": "x"}', 3, "role", r"robot.*\(message 1\)"),
        ('{"role": "tool", "tool_call_id": "nope", "content": "x"}', 3, "tool_call_id", "'nope'"),
        ('{"role": "user", "content": [{"type": "input_audio"}]}', 3, "content[0].type", "text"),
    ],
)
def test_read_openai_jsonl_errors_name_file_line_and_field(
    tmp_path: Path, bad: str, line: int, field: str | None, words: str
) -> None:
    path = write_lines(
        tmp_path / "chat.jsonl",
        ['{"role": "system", "content": "Be brief."}', "", bad, '{"role": "user", "content": "x"}'],
    )
    with pytest.raises(RecordError, match=words) as info:
        read_openai_jsonl(path)
    assert (info.value.source, info.value.line, info.value.field) == (str(path), line, field)
    assert str(info.value).startswith(f"{path}:{line}:")


def test_read_openai_jsonl_rejects_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"role": "user", "content": "x"}\n{"role": "user", "content": "caf\xe9"}\n')
    with pytest.raises(RecordError, match="not UTF-8") as info:
        read_openai_jsonl(path)
    assert info.value.line == 2


# ---------------------------------------------------------------------------
# items -> messages


def test_documents_and_memories_become_user_messages() -> None:
    items = [
        item(id="sys", role="system", text="Answer from the documents.", created_at=START),
        item(
            id="doc",
            role="document",
            text="Refunds within 30 days.",
            created_at=START,
            metadata={"name": "faq.md"},
        ),
        item(
            id="mem",
            role="memory",
            payload={"kind": "json", "value": {"prefers": "email"}},
            created_at=START,
        ),
        item(
            id="ref",
            role="document",
            payload={"kind": "reference", "uri": "https://x.org/terms", "title": "Terms"},
            created_at=START,
        ),
    ]
    assert to_openai_messages(items_to_frame(items)) == [
        {"role": "system", "content": "Answer from the documents."},
        {"role": "user", "content": "Refunds within 30 days."},
        {"role": "user", "content": '{"prefers":"email"}'},
        {"role": "user", "content": "Terms https://x.org/terms"},
    ]


def test_to_openai_messages_rejects_orphan_results_binary_and_other_types() -> None:
    cf = from_openai_messages(WEATHER, conversation_id="t")
    without_call = cf.filter(pl.col("id") != "t:3")
    with pytest.raises(RecordError, match="'call_rome'") as info:
        to_openai_messages(without_call)
    assert (info.value.row, info.value.field) == (3, "metadata.tool_call_id")
    # Tool output that answers no call is sent as context, as a document is.
    plain_tool = [item(id="t", role="tool", text="42", created_at=START)]
    assert to_openai_messages(items_to_frame(plain_tool)) == [{"role": "user", "content": "42"}]
    binary = [item(id="b", role="user", payload={"kind": "binary", "data": b"\x00"})]
    with pytest.raises(RecordError, match="binary") as info:
        to_openai_messages(items_to_frame(binary))
    assert info.value.field == "payload_kind"
    with pytest.raises(SchemaError, match="list"):
        to_openai_messages(WEATHER)  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="missing"):
        to_openai_messages(cf.to_polars().select("id", "role"))


def test_pack_messages_are_the_chat_messages_with_tool_calls_ids_and_names() -> None:
    cf = from_openai_messages(WEATHER, conversation_id="t", start=START)
    result = cf.pack(10_000, as_of=AS_OF)
    assert result.ids == cf.to_polars()["id"].to_list()
    assert result.messages == to_openai_messages(result) == to_openai_messages(cf)
    assert result.messages == normalised(WEATHER)
    assert result.used_tokens == PROFILE.request_tokens(result.messages)


# ---------------------------------------------------------------------------
# tool-call groups under a token budget


def test_call_and_result_leave_together_and_the_rest_keeps_input_order() -> None:
    # The situation, in real tokens: system ~20, user ~10, assistant call ~14,
    # tool result ~15, user ~10, assistant ~5, and a budget that holds everything but the
    # call. The budget even leaves room for the result alone: it must still leave.
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": "You are the support assistant of Northwind Bank. Be brief and exact.",
        },
        {"role": "user", "content": "What is my checking balance?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("call_balance", "get_balance", {"account": "checking"})],
        },
        {"role": "tool", "tool_call_id": "call_balance", "content": '{"balance": 1824.55}'},
        {"role": "user", "content": "Thanks! When does my card expire?"},
        {"role": "assistant", "content": "September 2027."},
    ]
    df = from_openai_messages(messages, conversation_id="bank", start=START).to_polars()
    cost = costs(df)
    assert 15 <= cost["bank:0"] <= 25
    assert 8 <= cost["bank:1"] <= 14
    assert 10 <= cost["bank:2"] <= 20  # the call as sent: id, function name, arguments
    assert 10 <= cost["bank:3"] <= 20
    assert cost["bank:5"] <= 10
    others = ["bank:0", "bank:1", "bank:4", "bank:5"]
    budget = PROFILE.tokens_per_pack + sum(cost[i] for i in others) + cost["bank:3"]
    assert budget < PROFILE.tokens_per_pack + sum(cost.values())

    # gaps="fill": after the pair, the older question still fills the budget.
    result = pack(df, budget, PackOptions(as_of=AS_OF, gaps="fill"))

    assert result.ids == others
    why = reasons(result)
    assert why["bank:2"] == why["bank:3"] == "gap"  # left out between packed messages
    assert why["bank:0"] == "required"  # the system prompt, required by default
    assert all(why[i] == "selected" for i in others[1:])
    assert result.used_tokens == budget - cost["bank:3"]
    assert result.remaining_tokens == cost["bank:3"]  # room for the result, not for the pair
    assert to_openai_messages(result) == [messages[i] for i in (0, 1, 4, 5)]


FLIGHTS = "\n".join(
    f"Flight AF{1000 + 37 * n}: departs CDG {6 + n % 12:02d}:{(n * 7) % 60:02d}, arrives "
    f"JFK {9 + n % 12:02d}:{(n * 13) % 60:02d}, {n % 3} stops, fare {412 + 19 * n} EUR."
    for n in range(10)
)
HOTELS = "\n".join(
    f"Hotel {name}: {stars} stars, {130 + 23 * n} EUR per night, {1 + n % 4}.{n % 10} km from "
    f"Times Square, guest rating {7 + n % 3}.{(n * 3) % 10}/10."
    for n, (name, stars) in enumerate(
        [
            ("Pod 51", 3), ("Lotte Palace", 5), ("Arlo SoHo", 4), ("The Jane", 3),
            ("Moxy Chelsea", 4), ("citizenM Bowery", 4), ("Hotel Hendricks", 4),
            ("The Plaza", 5), ("Hotel Edison", 3),
        ]
    )
)  # fmt: skip
PARALLEL: list[dict[str, Any]] = [
    {"role": "user", "content": "Find me a flight from Paris to New York and a hotel."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("c1", "search_flights", {"from": "CDG", "to": "JFK"}),
            call("c2", "search_hotels", {"city": "New York"}),
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": FLIGHTS},
    {"role": "tool", "tool_call_id": "c2", "content": HOTELS},
]


def parallel_frame() -> tuple[pl.DataFrame, dict[str, int], int]:
    df = from_openai_messages(PARALLEL, conversation_id="trip", start=START).to_polars()
    cost = costs(df)
    assert 250 <= cost["trip:2"] <= 350
    assert 250 <= cost["trip:3"] <= 350
    # Room for the question, the call and one result: not for the second result.
    budget = PROFILE.tokens_per_pack + cost["trip:0"] + cost["trip:1"] + cost["trip:2"]
    assert budget < PROFILE.tokens_per_pack + sum(cost.values())
    return df, cost, budget


def test_awaited_parallel_results_that_do_not_fit_are_cut_to_one_level() -> None:
    df, cost, budget = parallel_frame()
    # The results end the history: the model reads them next, so they are cut to fit
    # rather than left out with their call. They are cut toward one level, the longest
    # first (the last row was cut to its 64-token floor before the first was cut).
    for gaps in GAP_MODES:
        result = pack(df, budget, PackOptions(as_of=AS_OF, gaps=gaps))
        assert result.ids == ["trip:0", "trip:1", "trip:2", "trip:3"]
        assert result.used_tokens == budget
        cuts = {
            t.id: (t.kept_tokens, t.original_tokens, t.side) for t in result.manifest.truncations
        }
        framing = {row: cost[row] - cuts[row][1] for row in cuts}
        assert cuts["trip:3"] == (142, cost["trip:3"] - framing["trip:3"], "head")
        assert cuts["trip:2"] == (142, cost["trip:2"] - framing["trip:2"], "head")
        sent = to_openai_messages(result)
        assert sent[:2] == PARALLEL[:2]
        for message, whole, row in zip(sent[2:], (FLIGHTS, HOTELS), cuts, strict=True):
            kept, note = message["content"].rsplit("\n", 1)
            assert whole.startswith(kept)
            assert note == f"[{cuts[row][1] - cuts[row][0]} tokens cut]"
        # The room of the first result's whole cost holds both at one level: the messages
        # sent cost the budget, their notes counted.
        assert sum(map(PROFILE.message_tokens, sent)) + PROFILE.tokens_per_pack == budget
        assert [m["tool_call_id"] for m in sent[2:]] == ["c1", "c2"]


def _unfinished_loop(log: str) -> list[dict[str, Any]]:
    """A task, three small tool steps, then a call whose result is ``log``, not yet answered."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an SRE agent."},
        {"role": "user", "content": "Why did last night's deploy fail? Check the worker logs."},
    ]
    for k in range(3):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"s{k}", "grep", {"q": f"step {k}"})],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"s{k}", "content": f"step {k}: none"})
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("log", "read_log", {"file": "worker.log"})],
        }
    )
    messages.append({"role": "tool", "tool_call_id": "log", "content": log})
    return messages


LOG = "\n".join(
    f"12:00:{i % 60:02d} ERROR worker-{i} cannot reach db 10.0.0.{i % 255}" for i in range(600)
)


def test_the_result_an_unfinished_agent_loop_awaits_is_cut_to_fit_with_defaults() -> None:
    messages = _unfinished_loop(LOG)
    frame = from_openai_messages(messages, conversation_id="loop", start=START)
    whole = frame.pack(100_000, as_of=AS_OF)
    assert whole.used_tokens > 4096
    assert not whole.manifest.truncations
    packed = frame.pack(4096, as_of=AS_OF)
    # Before: the log went with its call, and the model would call read_log again.
    sent = packed.to_openai()
    assert sent[:2] == messages[:2]
    assert sent[-2] == messages[-2]  # the call, whole
    kept, note = sent[-1]["content"].rsplit("\n", 1)
    assert LOG.startswith(kept)
    assert len(kept) < len(LOG)
    assert packed.remaining_tokens <= 1  # cut to fill the room, to a token
    (cut,) = packed.manifest.truncations
    assert (cut.id, cut.side) == ("loop:9", "head")
    assert cut.kept_tokens >= 64
    # the model reads that the log goes on, where a log cut mid-line would read as whole
    assert note == f"[{cut.original_tokens - cut.kept_tokens} tokens cut]"
    assert sum(map(PROFILE.message_tokens, sent)) + PROFILE.tokens_per_pack == packed.used_tokens
    assert openai_faults(sent) == []
    # Its own mark is the one used.
    marked = frame.to_polars().with_columns(
        pl.when(pl.col("id") == "loop:9")
        .then(pl.lit('{"tool_call_id":"log","truncate":{"side":"tail"}}'))
        .otherwise(pl.col("metadata"))
        .alias("metadata")
    )
    tail = CognitionFrame(marked).pack(4096, as_of=AS_OF).to_openai()[-1]["content"]
    assert LOG.endswith(tail)  # a mark without a note sends the cut text alone
    assert len(tail) < len(LOG)
    # Answered, it is history: left out with its call, as any long exchange.
    answered = from_openai_messages(
        [*messages, {"role": "assistant", "content": "The db host is down."}],
        conversation_id="loop",
        start=START,
    ).pack(4096, as_of=AS_OF)
    assert not answered.manifest.truncations
    assert "loop:9" not in answered.ids


def test_answered_parallel_calls_are_passed_over_whole_when_one_result_does_not_fit() -> None:
    # A reply after the results: they are no longer awaited, so not cut, and the
    # exchange newer than every user message taken is a hole.
    _, _, budget = parallel_frame()
    reply = {"role": "assistant", "content": "Done."}
    answered = from_openai_messages([*PARALLEL, reply], conversation_id="trip", start=START)
    df = answered.to_polars()
    for gaps in GAP_MODES:
        result = pack(df, budget + costs(df)["trip:4"], PackOptions(as_of=AS_OF, gaps=gaps))
        assert result.ids == ["trip:0", "trip:4"]
        assert not result.manifest.truncations
        assert {i: reasons(result)[i] for i in ("trip:1", "trip:2", "trip:3")} == dict.fromkeys(
            ("trip:1", "trip:2", "trip:3"), "gap"
        )


def test_awaited_results_too_small_to_keep_64_tokens_go_with_their_call() -> None:
    df, cost, _ = parallel_frame()
    for gaps in GAP_MODES:
        small = PROFILE.tokens_per_pack + cost["trip:0"] + cost["trip:1"] + 100
        result = pack(df, small, PackOptions(as_of=AS_OF, gaps=gaps))
        assert result.ids == ["trip:0"]
        assert reasons(result) == {
            "trip:0": "selected",
            "trip:1": "group_over_budget",
            "trip:2": "group_over_budget",
            "trip:3": "group_over_budget",
        }
        assert result.remaining_tokens == cost["trip:1"] + 100
        assert to_openai_messages(result) == [PARALLEL[0]]


def test_required_parallel_group_that_cannot_fit_raises_budget_error() -> None:
    df, cost, budget = parallel_frame()
    required = df.with_columns(
        pl.when(pl.col("group_id") == "trip:tools:1")
        .then(pl.lit("required"))
        .otherwise(pl.col("retention").cast(pl.String))
        .cast(df.schema["retention"])
        .alias("retention")
    )
    with pytest.raises(BudgetError) as info:
        pack(required, budget, PackOptions(as_of=AS_OF))
    assert info.value.costs == {i: cost[i] for i in ("trip:1", "trip:2", "trip:3")}
    assert info.value.budget == budget
    # With room for the whole group it packs, and the optional question is what gives way.
    group = cost["trip:1"] + cost["trip:2"] + cost["trip:3"]
    result = pack(required, PROFILE.tokens_per_pack + group, PackOptions(as_of=AS_OF))
    assert result.ids == ["trip:1", "trip:2", "trip:3"]


# ---------------------------------------------------------------------------
# properties


@settings(max_examples=60, deadline=None)
@given(chat_histories_strategy())
def test_conversion_round_trips(messages: list[dict[str, Any]]) -> None:
    cf = from_openai_messages(messages, conversation_id="c")
    assert to_openai_messages(cf) == normalised(messages)


@reaching(0.8, label="packed")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat_histories_strategy(), st.data())
def test_groups_are_atomic_in_every_pack(messages: list[dict[str, Any]], data: Any) -> None:
    items = openai_messages_to_items(messages, conversation_id="c", start=START)
    tiers = [Retention.OPTIONAL] * 6 + [Retention.PREFERRED, Retention.REQUIRED]
    # A call without all its results cannot be sent: it is never required here (a
    # required one is a PackError, see tests/packing/test_tool_rules.py).
    unsendable = {i for fault in openai_faults(messages) for i in fault.left_out}

    def tier(index: int) -> Retention:
        drawn: Retention = data.draw(st.sampled_from(tiers))
        return Retention.OPTIONAL if index in unsendable else drawn

    items = [
        item.model_copy(
            update={
                "retention": tier(index),
                "priority": data.draw(st.integers(0, 2)),
                "rank": data.draw(st.sampled_from([None, 0.5, 2.0])),
            }
        )
        for index, item in enumerate(items)
    ]
    df = items_to_frame(items)
    cost = costs(df)
    # A group with a required member is required whole.
    required = df.filter(
        (pl.col("retention") == "required").any().over(pl.coalesce("group_id", "id"))
    )["id"].to_list()
    # Budgets that fit the required items 15 times in 16, else fall short of them.
    total = PROFILE.tokens_per_pack + sum(cost.values()) + 5
    floor = PROFILE.tokens_per_pack + sum(cost[i] for i in required) if required else 0
    fits = floor == 0 or data.draw(st.sampled_from([True] * 15 + [False]))
    budget = data.draw(st.integers(floor, total) if fits else st.integers(0, floor - 1))
    note(f"budget {budget}, costs {cost}")
    if required and PROFILE.tokens_per_pack + sum(cost[i] for i in required) > budget:
        with pytest.raises(BudgetError) as info:
            pack(df, budget, PackOptions(as_of=AS_OF))
        assert info.value.costs == {i: cost[i] for i in required}
        reached("refused")
        return
    result = pack(df, budget, PackOptions(as_of=AS_OF))
    entries = result.manifest.to_polars()
    by_group = (
        entries.filter(pl.col("group_id").is_not_null())
        .group_by("group_id")
        .agg(pl.col("decision").n_unique().alias("decisions"))
    )
    assert by_group["decisions"].to_list() == [1] * by_group.height
    assert result.used_tokens <= budget
    assert result.ids == [i for i in df["id"].to_list() if i in set(result.ids)]
    # Whatever was packed is a valid conversation again: no result without its call.
    chat = to_openai_messages(result)
    assert to_openai_messages(from_openai_messages(chat)) == chat
    assert all(m["role"] != "tool" or m["tool_call_id"] for m in chat)
    reached("packed")


def test_frame_input_is_accepted_by_name() -> None:
    # CognitionFrame, DataFrame and ContextPack all render the same rows.
    cf = from_openai_messages(WEATHER, conversation_id="t", start=START)
    assert isinstance(cf, CognitionFrame)
    assert to_openai_messages(cf) == to_openai_messages(cf.to_polars())


@pytest.mark.parametrize("role", [["user"], {"a": 1}, None, 3, "robot"])
def test_a_role_that_is_not_a_known_name_is_a_record_error(role: object) -> None:
    with pytest.raises(RecordError, match="field role: must be one of"):
        from_openai_messages([{"role": role, "content": "hi"}])


# ---------------------------------------------------------------------------
# Conversation integrity: required instructions, whole turns


PRESSURE = [
    {"role": "system", "content": "You are the billing assistant of Northwind. " * 6},
    {"role": "developer", "content": "Answer in one sentence."},
    {"role": "user", "content": "Why was I charged twice?"},
    {"role": "assistant", "content": "One charge is a pending authorisation. " * 8},
    {"role": "user", "content": "When does it go away?"},
    {"role": "assistant", "content": "Within five days."},
]


def test_the_system_prompt_survives_budget_pressure() -> None:
    df = from_openai_messages(PRESSURE, conversation_id="b").to_polars()
    cost = costs(df)
    # Room for the instructions and one more short message: the long system prompt stays.
    budget = PROFILE.tokens_per_pack + cost["b:0"] + cost["b:1"] + cost["b:5"]
    result = pack(df, budget, PackOptions(as_of=AS_OF))
    assert result.ids == ["b:0", "b:1", "b:5"]
    why = dict(result.manifest.to_polars().select("id", "reason").iter_rows())
    assert why["b:0"] == why["b:1"] == "required"
    assert df.get_column("retention").to_list() == ["required"] * 2 + ["optional"] * 4


def test_optional_system_retention_keeps_the_old_behaviour() -> None:
    df = from_openai_messages(
        PRESSURE, conversation_id="b", system_retention="optional"
    ).to_polars()
    assert df.get_column("retention").to_list() == ["optional"] * 6
    cost = costs(df)
    budget = PROFILE.tokens_per_pack + cost["b:1"] + cost["b:4"] + cost["b:5"]
    result = pack(df, budget, PackOptions(as_of=AS_OF))
    assert "b:0" not in result.ids  # the long system prompt can go: it is not required
    assert reasons(result)["b:0"] == "over_budget"
    # The instructions go before the conversation, which goes newest first.
    assert result.ids == ["b:1", "b:4", "b:5"]
    assert result.remaining_tokens == 0


def test_system_retention_preferred_and_errors() -> None:
    items = openai_messages_to_items(PRESSURE[:3], system_retention=Retention.PREFERRED)
    assert [i.retention for i in items] == ["preferred", "preferred", "optional"]
    with pytest.raises(RecordError, match="system_retention: must be one of") as info:
        openai_messages_to_items(PRESSURE, system_retention="always")
    assert info.value.field == "system_retention"


def test_the_system_prompt_alone_over_budget_is_a_budget_error() -> None:
    df = from_openai_messages(PRESSURE, conversation_id="b").to_polars()
    with pytest.raises(BudgetError, match="required items need"):
        pack(df, 20, PackOptions(as_of=AS_OF))


def test_whole_turns_never_give_system_user_user() -> None:
    df = from_openai_messages(PRESSURE, conversation_id="b").to_polars()
    cost = costs(df)
    budget = PROFILE.tokens_per_pack + sum(cost[i] for i in ("b:0", "b:1", "b:2", "b:4", "b:5"))
    plain = pack(df, budget, PackOptions(as_of=AS_OF, gaps="fill"))
    assert [m["role"] for m in plain.messages][2:4] == ["user", "user"]  # the fault
    whole = pack(df, budget, PackOptions(as_of=AS_OF, turns=True))
    assert whole.ids == ["b:0", "b:1", "b:4", "b:5"]
    assert [m["role"] for m in whole.messages] == ["system", "developer", "user", "assistant"]


def test_read_openai_jsonl_takes_system_retention(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in PRESSURE[:3]) + "\n")
    assert read_openai_jsonl(path).to_polars().get_column("retention").to_list() == [
        "required",
        "required",
        "optional",
    ]
    optional = read_openai_jsonl(path, system_retention="optional").to_polars()
    assert optional.get_column("retention").to_list() == ["optional"] * 3


CONVERSATIONS = [
    {
        "conversation_id": "c1",
        "messages": [
            {"role": "system", "content": "You help with orders."},
            {"role": "user", "content": "Where is order 7?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "track", "arguments": '{"order": 7}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "In transit."},
            {"role": "assistant", "content": "It is in transit."},
        ],
    },
    {"conversation_id": "c2", "messages": [{"role": "user", "content": "Hello é"}]},
]


def test_a_file_of_one_conversation_per_line_reads_as_each_conversation_does(
    tmp_path: Path,
) -> None:
    from cognoxium.app.batch import Request, run_batch
    from cognoxium.formats.openai import read_openai_conversations
    from cognoxium.packing.manifests import read_manifests

    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(c) + "\n\n" for c in CONVERSATIONS), encoding="utf-8")
    frame = read_openai_conversations(path).collect()
    for conversation in CONVERSATIONS:
        cid = conversation["conversation_id"]
        own = from_openai_messages(conversation["messages"], conversation_id=cid).collect()
        rows = frame.filter(pl.col("id").str.starts_with(f"{cid}:"))
        assert rows.drop("metadata", "sources").equals(own.drop("metadata", "sources"))
        tagged = [{**json.loads(m), "conversation": cid} for m in own.get_column("metadata")]
        assert [json.loads(m) for m in rows.get_column("metadata")] == tagged
        uris = rows.get_column("sources").list.get(0).struct.field("uri").unique().to_list()
        assert uris == [str(path)]
    requests = [Request(id="r1", budget=200, where="metadata.conversation = 'c1'")]
    as_of = datetime(2026, 1, 1, tzinfo=UTC)
    run_batch(frame, requests, out_dir=tmp_path / "out", options=PackOptions(as_of=as_of))
    (manifest,) = read_manifests(tmp_path / "out")
    alone = from_openai_messages(CONVERSATIONS[0]["messages"], conversation_id="c1")
    assert manifest.entries == alone.pack(200, as_of=as_of).manifest.entries


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ('["c1"]', None, "a line is a JSON object"),
        ('{"messages": []}', "conversation_id", "missing: each line holds the conversation's id"),
        (
            '{"conversation_id": null, "messages": []}',
            "conversation_id",
            "non-blank text, got None",
        ),
        ('{"conversation_id": "c1"}', "messages", "missing: each line holds the conversation's"),
        ('{"conversation_id": " ", "messages": []}', "conversation_id", "non-blank"),
        ('{"conversation_id": "c1", "messages": {}}', "messages", "a list of messages, got dict"),
        ('{"conversation_id": "c1", "messages": [], "tools": []}', "tools", "unknown key 'tools'"),
        ('{"conversation_id": "c0", "messages": []}', "conversation_id", "duplicate .* line 1"),
        (
            '{"conversation_id": "a\\tb", "messages": [{"role": "user", "content": "x"}]}',
            "conversation_id",
            r"id must not hold control characters \(found U\+0009",
        ),
        (
            '{"conversation_id": "c9", "messages": [{"role": "robot", "content": "x"}]}',
            "role",
            r"got 'robot' \(message 0\)",
        ),
    ],
)
def test_a_bad_conversation_line_names_its_line_and_field(
    tmp_path: Path, line: str, field: str | None, message: str
) -> None:
    from cognoxium.formats.openai import read_openai_conversations

    path = tmp_path / "chats.jsonl"
    path.write_text('{"conversation_id": "c0", "messages": []}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match=message) as caught:
        read_openai_conversations(path)
    assert (caught.value.line, caught.value.field) == (2, field)


def test_a_file_of_conversations_read_as_messages_says_which_reader_to_use(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps(CONVERSATIONS[1]) + "\n", encoding="utf-8")
    with pytest.raises(RecordError, match="read_openai_conversations") as caught:
        read_openai_jsonl(path)
    assert (caught.value.line, caught.value.field) == (1, "messages")


MIXED_CONVERSATIONS: list[dict[str, Any]] = [
    *CONVERSATIONS,
    {"conversation_id": "empty", "messages": []},
    {
        "conversation_id": "parts",
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "Describe images."}]},
            {
                "role": "user",
                "name": "ada",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
                    },
                    {"type": "image_url", "image_url": {"url": "https://example.com/b.jpg"}},
                ],
            },
            {"role": "assistant", "content": 'A cat and a "dog".\n'},
        ],
    },
    {
        "conversation_id": "loop",
        "messages": [
            {"role": "user", "content": "Run it"},
            {"role": "assistant", "content": "Running.", "tool_calls": [call("r1", "run", {})]},
            {"role": "tool", "tool_call_id": "r1", "content": "done"},
            {"role": "tool", "tool_call_id": "r9", "content": "no call of this id"},
            {"role": "assistant", "content": None, "tool_calls": [call("r2", "run", {"n": 2})]},
        ],
    },
    {
        "conversation_id": "named",
        "messages": [
            {"role": "user", "name": "bo", "content": "Hi"},
            {"role": "assistant", "content": "Hello 🙂"},
        ],
    },
]


@pytest.mark.parametrize("batch_items", [65_536, 3])
@pytest.mark.parametrize(
    "options",
    [
        {"tool_errors": "keep"},
        {"tool_errors": "keep", "start": START, "system_retention": "optional"},
    ],
)
def test_a_file_of_conversations_is_each_conversation_read_alone_concatenated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_items: int, options: dict[str, Any]
) -> None:
    import cognoxium.formats.openai as openai_format
    from cognoxium.items.model import canonical_json

    monkeypatch.setattr(openai_format, "_BATCH_ITEMS", batch_items)
    path = tmp_path / "chats.jsonl"
    lines = [json.dumps(c, ensure_ascii=False) + "\n" for c in MIXED_CONVERSATIONS]
    path.write_text("\n".join(lines), encoding="utf-8")  # a blank line between conversations
    frame = openai_format.read_openai_conversations(path, **options).to_polars()
    alone = []
    for conversation in MIXED_CONVERSATIONS:
        cid = conversation["conversation_id"]
        own = from_openai_messages(
            conversation["messages"], conversation_id=cid, source=str(path), **options
        ).to_polars()
        tagged = [canonical_json({**json.loads(m), "conversation": cid}) for m in own["metadata"]]
        alone.append(own.with_columns(metadata=pl.Series(tagged, dtype=pl.String)))
    assert_frame_equal(frame, pl.concat(alone))
    assert frame.height == 18


def test_an_empty_file_of_conversations_reads_as_no_items(tmp_path: Path) -> None:
    from cognoxium.formats.openai import read_openai_conversations

    path = tmp_path / "chats.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    frame = read_openai_conversations(path).to_polars()
    assert_frame_equal(frame, from_openai_messages([]).to_polars().clear())


BAD_ROLE = {"role": "robot", "content": "x"}
LONE_SURROGATE = {"role": "user", "content": "bad \ud800"}
SURROGATE_ERROR = (
    "Value error, holds a lone surrogate U+D800 at character 4, which is not valid Unicode text"
)


@pytest.mark.parametrize("batch_items", [65_536, 1])
@pytest.mark.parametrize(
    ("bad", "at", "field", "message"),
    [
        ({2: BAD_ROLE}, 5, "role", "must be one of [{roles}], got 'robot' (message 2)"),
        ({2: LONE_SURROGATE}, 5, "text", SURROGATE_ERROR + " (message 2)"),
        # framing finds the surrogate of the second conversation, before the third is read
        ({1: LONE_SURROGATE, 2: BAD_ROLE}, 3, "text", SURROGATE_ERROR + " (message 1)"),
    ],
)
def test_a_bad_message_of_the_third_conversation_names_its_line_field_and_message(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    batch_items: int,
    bad: dict[int, dict[str, Any]],
    at: int,
    field: str,
    message: str,
) -> None:
    import cognoxium.formats.openai as openai_format

    monkeypatch.setattr(openai_format, "_BATCH_ITEMS", batch_items)
    lines = []
    for k in range(4):
        chat = [{"role": "user", "content": f"Hi {k}"}, {"role": "assistant", "content": "Hello"}]
        messages = [*chat[:k], bad[k]] if k in bad else chat  # the bad one is message k
        lines.append(json.dumps({"conversation_id": f"c{k}", "messages": messages}) + "\n")
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(RecordError) as caught:
        openai_format.read_openai_conversations(path)
    roles = ", ".join(repr(role) for role in openai_format.MESSAGE_ROLES)
    assert str(caught.value) == f"{path}:{at}: field {field}: " + message.format(roles=roles)
    assert (caught.value.source, caught.value.line, caught.value.field) == (str(path), at, field)


def test_an_awaited_result_larger_than_the_budget_leaves_the_steps_before_it_half() -> None:
    # It was cut to fill the budget: 300 steps went down to the task and the call.
    def call(i: str) -> dict[str, Any]:
        return {"id": i, "type": "function", "function": {"name": "run", "arguments": "{}"}}

    def step(i: str, text: str) -> list[dict[str, Any]]:
        called = {"role": "assistant", "content": None, "tool_calls": [call(i)]}
        return [called, {"role": "tool", "tool_call_id": i, "content": text}]

    task = [{"role": "system", "content": "agent"}, {"role": "user", "content": "TASK"}]
    steps = [m for s in range(300) for m in step(f"c{s}", "ok " * 50)]
    awaited = step("big", "log line\n" * 40_000)
    budget = 20_000
    long = from_openai_messages([*task, *steps, *awaited], conversation_id="r")
    packed = long.pack(budget, as_of=AS_OF)
    (cut,) = packed.manifest.truncations
    room = budget - PROFILE.tokens_per_pack - sum(map(PROFILE.message_tokens, task))
    assert cut.id == f"r:{len(task) + len(steps) + 1}"
    assert room // 2 - 64 <= cut.kept_tokens <= room // 2 + 64  # half, and what is left
    assert len(packed.ids) > 250
    assert packed.remaining_tokens <= 1
    short = from_openai_messages([*task, *awaited], conversation_id="s").pack(4_000, as_of=AS_OF)
    (alone,) = short.manifest.truncations
    assert short.remaining_tokens <= 1  # the room no step takes goes back to the result
    assert alone.kept_tokens > 3_900


# A provider or local model server that numbers each turn's tool calls from call_0.
def now_call(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [call(i, "now", {}) for i in ids or ("call_0",)],
    }


def now_result(text: str, call_id: str = "call_0") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


REUSED_IDS: list[dict[str, Any]] = [
    {"role": "user", "content": "Time?"},
    now_call(),
    now_result("12:00"),
    now_call(),
    now_result("12:01"),
    {"role": "assistant", "content": "It is 12:01."},
]


def tool_ids(frame: CognitionFrame) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Each item's id, group and metadata (without the conversation a file names)."""
    rows = frame.select("id", "group_id", "metadata").to_polars().rows()
    out = []
    for item_id, group_id, metadata in rows:
        meta = json.loads(metadata)
        meta.pop("conversation", None)
        out.append((item_id, group_id, meta))
    return out


def jsonl_frame(tmp_path: Path, messages: list[Any], **kwargs: Any) -> CognitionFrame:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    return read_openai_jsonl(path, conversation_id="c", **kwargs)


def conversations_frame(tmp_path: Path, messages: list[Any], **kwargs: Any) -> CognitionFrame:
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps({"conversation_id": "c", "messages": messages}) + "\n")
    return read_openai_conversations(path, **kwargs)


OPENAI_IMPORTERS: dict[str, Callable[..., CognitionFrame]] = {
    "from_openai_messages": lambda _, m, **kw: from_openai_messages(m, conversation_id="c", **kw),
    "openai_messages_to_items": lambda _, m, **kw: CognitionFrame.from_items(
        openai_messages_to_items(m, conversation_id="c", **kw)
    ),
    "read_openai_jsonl": jsonl_frame,
    "read_openai_conversations": conversations_frame,
}
EACH_OPENAI_IMPORTER = pytest.mark.parametrize("importer", sorted(OPENAI_IMPORTERS))


@EACH_OPENAI_IMPORTER
@pytest.mark.parametrize("tool_errors", IMPORT_TOOL_ERRORS)
def test_a_call_id_reused_by_a_later_turn_gets_a_new_id_and_keeps_the_given_one(
    tmp_path: Path, importer: str, tool_errors: str
) -> None:
    frame = OPENAI_IMPORTERS[importer](tmp_path, REUSED_IDS, tool_errors=tool_errors)
    assert tool_ids(frame) == [
        ("c:0", None, {}),
        ("c:1", "c:tools:1", {"tool_call_ids": ["call_0"]}),
        ("c:2", "c:tools:1", {"tool_call_id": "call_0"}),
        (
            "c:3",
            "c:tools:3",
            {"tool_call_ids": ["call_0-2"], ORIGINAL_CALL_IDS_KEY: ["call_0"]},
        ),
        ("c:4", "c:tools:3", {"tool_call_id": "call_0-2", ORIGINAL_CALL_ID_KEY: "call_0"}),
        ("c:5", None, {}),
    ]
    calls = frame.to_polars().get_column("json")[3]
    assert json.loads(calls)["tool_calls"][0]["id"] == "call_0-2"  # what is packed and costed


@pytest.mark.parametrize("tool_errors", IMPORT_TOOL_ERRORS)
@pytest.mark.parametrize("pack_tool_errors", TOOL_ERRORS)
@pytest.mark.parametrize("target", ["openai", "anthropic"])
def test_a_history_reusing_a_call_id_packs_whole_and_valid_for_both_apis(
    tool_errors: str, pack_tool_errors: str, target: str
) -> None:
    frame = from_openai_messages(REUSED_IDS, conversation_id="c", tool_errors=tool_errors)
    result = frame.pack(1_000, as_of=AS_OF, tool_errors=pack_tool_errors, target=target)
    assert reasons(result) == {f"c:{k}": "selected" for k in range(6)}  # every call paired
    sent = result.to_openai()
    validate_openai_messages(sent)
    validate_anthropic_messages(result.to_anthropic())
    assert [m.get("tool_call_id") or [c["id"] for c in m.get("tool_calls", ())] for m in sent] == [
        [],
        ["call_0"],
        "call_0",
        ["call_0-2"],
        "call_0-2",
        [],
    ]
    uses = [
        block["id"]
        for message in result.to_anthropic()["messages"]
        for block in message["content"]
        if block["type"] == "tool_use"
    ]
    assert uses == ["call_0", "call_0-2"]


def test_the_ids_made_for_reused_ones_are_the_same_on_every_import() -> None:
    def manifest() -> str:
        frame = from_openai_messages(copy.deepcopy(REUSED_IDS), conversation_id="c")
        return frame.pack(1_000, as_of=AS_OF).manifest.to_json()

    first = manifest()
    assert manifest() == first  # byte-identical
    frames = [from_openai_messages(REUSED_IDS, conversation_id="c") for _ in range(2)]
    assert_frame_equal(frames[0].to_polars(), frames[1].to_polars())


def test_three_turns_reusing_one_call_id_get_three_ids() -> None:
    messages = [
        {"role": "user", "content": "Time, three times?"},
        now_call(),
        now_result("12:00"),
        now_call(),
        now_result("12:01"),
        now_call(),
        now_result("12:02"),
        {"role": "assistant", "content": "Done."},
    ]
    frame = from_openai_messages(messages, conversation_id="c")
    metadata = [m for _, _, m in tool_ids(frame)]
    assert [m.get("tool_call_ids") or m.get("tool_call_id") for m in metadata[1:7]] == [
        ["call_0"],
        "call_0",
        ["call_0-2"],
        "call_0-2",
        ["call_0-3"],
        "call_0-3",
    ]
    assert [m.get(ORIGINAL_CALL_ID_KEY) for m in metadata[2:7:2]] == [None, "call_0", "call_0"]
    result = frame.pack(1_000, as_of=AS_OF)
    assert set(reasons(result).values()) == {"selected"}
    validate_openai_messages(result.to_openai())
    validate_anthropic_messages(result.to_anthropic())


def test_a_made_id_depends_on_earlier_messages_only_and_a_later_clash_is_renamed() -> None:
    # call_0-2 is made for the reused call_0 before a later call is given call_0-2: that later
    # call is renamed (call_0-2-2), and a late result naming call_0-2 is read as the later call's.
    messages = [
        {"role": "user", "content": "Time?"},
        now_call(),
        now_result("12:00"),
        now_call(),
        now_result("12:01"),
        now_call("call_0-2"),
        now_result("12:02", "call_0-2"),
        {"role": "user", "content": "And?"},
        now_result("late", "call_0-2"),
    ]
    frame = from_openai_messages(messages, conversation_id="c", tool_errors="keep")
    metadata = [m for _, _, m in tool_ids(frame)]
    assert metadata[3] == {"tool_call_ids": ["call_0-2"], ORIGINAL_CALL_IDS_KEY: ["call_0"]}
    assert metadata[5] == {"tool_call_ids": ["call_0-2-2"], ORIGINAL_CALL_IDS_KEY: ["call_0-2"]}
    assert metadata[6] == {"tool_call_id": "call_0-2-2", ORIGINAL_CALL_ID_KEY: "call_0-2"}
    assert metadata[8] == {"tool_call_id": "call_0-2-2", ORIGINAL_CALL_ID_KEY: "call_0-2"}
    result = frame.pack(1_000, as_of=AS_OF)
    assert {k: v for k, v in reasons(result).items() if v != "selected"} == {
        "c:8": "tool_result_duplicate"
    }
    validate_openai_messages(result.to_openai())
    validate_anthropic_messages(result.to_anthropic())


@pytest.mark.parametrize(
    "appended",
    [
        [now_call("call_0-2"), now_result("12:02", "call_0-2")],
        [now_result("late", "call_0-2")],
        [now_call("call_0-3"), now_result("12:03", "call_0-3"), now_call(), now_result("12:04")],
    ],
    ids=["a call given the made id", "an orphan naming it", "more reuse"],
)
def test_appending_messages_never_changes_the_ids_of_the_calls_before_them(
    appended: list[dict[str, Any]],
) -> None:
    # The earlier request is sent again byte for byte (a provider's prompt cache); with ids
    # made to avoid the whole conversation, a later call given call_0-2 renamed the earlier one.
    before = from_openai_messages(REUSED_IDS, conversation_id="c", tool_errors="keep")
    after = from_openai_messages([*REUSED_IDS, *appended], conversation_id="c", tool_errors="keep")
    assert tool_ids(after)[: len(REUSED_IDS)] == tool_ids(before)
    made = {i for _, _, m in tool_ids(before) for i in m.get("tool_call_ids", ())}
    later = [m for _, _, m in tool_ids(after)[len(REUSED_IDS) :]]
    assert not made & {i for m in later for i in m.get("tool_call_ids", [m.get("tool_call_id")])}
    sent = before.pack(1_000, as_of=AS_OF).to_openai()
    assert after.pack(1_000, as_of=AS_OF).to_openai()[: len(sent)] == sent


def test_a_reused_id_whose_earlier_call_is_unanswered_pairs_with_the_later_call() -> None:
    messages = [
        {"role": "user", "content": "Time?"},
        now_call(),  # its result never came back
        {"role": "user", "content": "Still there?"},
        now_call(),
        now_result("12:01"),
        {"role": "assistant", "content": "It is 12:01."},
    ]
    assert openai_faults(messages)[0].index == 1  # the earlier call alone is unanswered
    frame = from_openai_messages(messages, conversation_id="c")
    assert [(g, m) for _, g, m in tool_ids(frame)][3:5] == [
        ("c:tools:3", {"tool_call_ids": ["call_0-2"], ORIGINAL_CALL_IDS_KEY: ["call_0"]}),
        ("c:tools:3", {"tool_call_id": "call_0-2", ORIGINAL_CALL_ID_KEY: "call_0"}),
    ]
    for target in ("openai", "anthropic"):
        result = frame.pack(1_000, as_of=AS_OF, target=target)
        assert {k: v for k, v in reasons(result).items() if v != "selected"} == {
            "c:1": "tool_call_unanswered"
        }
        validate_openai_messages(result.to_openai())
        validate_anthropic_messages(result.to_anthropic())
    with pytest.raises(MessageError, match="tool_call_unanswered") as info:
        frame.pack(1_000, as_of=AS_OF, tool_errors="error")
    assert info.value.index == 1


def test_a_result_after_a_reused_calls_run_is_out_of_place_for_the_latest_call() -> None:
    messages = [
        {"role": "user", "content": "Time?"},
        now_call(),
        now_result("12:00"),
        now_call(),
        {"role": "user", "content": "Well?"},
        now_result("12:01"),
    ]
    with pytest.raises(RecordError, match="'call_0' of message 3 comes after message 4") as info:
        from_openai_messages(messages)
    assert (info.value.row, info.value.field) == (5, "tool_call_id")
    kept = from_openai_messages(messages, tool_errors="keep")
    assert tool_ids(kept)[5][2] == {"tool_call_id": "call_0-2", ORIGINAL_CALL_ID_KEY: "call_0"}


@EACH_OPENAI_IMPORTER
@pytest.mark.parametrize("tool_errors", IMPORT_TOOL_ERRORS)
def test_one_call_id_twice_in_one_message_is_an_error_naming_message_and_field(
    tmp_path: Path, importer: str, tool_errors: str
) -> None:
    messages = [{"role": "user", "content": "Time?"}, now_call("call_0", "call_0")]
    with pytest.raises(RecordError, match="appears twice in this message's tool_calls") as info:
        OPENAI_IMPORTERS[importer](tmp_path, messages, tool_errors=tool_errors)
    assert info.value.field == "tool_calls[1].id"
    lines = {"read_openai_jsonl": 2, "read_openai_conversations": 1}  # the message's line
    if importer in lines:
        assert (info.value.line, "(message 1)") == (lines[importer], str(info.value)[-11:])
    else:
        assert info.value.row == 1
