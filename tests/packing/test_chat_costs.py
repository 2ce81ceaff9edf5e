"""A pack costs what it sends: its used tokens are the cookbook count of ``pack.messages``.

The count is computed here on its own, from tiktoken, by the rule of the
OpenAI Cookbook, "How to count tokens with tiktoken": 3 tokens per message, 1
per name, every string value encoded, 3 tokens of reply priming; a tool
call counts its id, function name and arguments as sent. An image part costs
OpenAI's documented tile rule ("Images and vision", "Calculating costs"):
85 tokens at low detail; at high (or auto) detail the image is fitted into
2048 x 2048, its short side brought down to 768 px, and each 512 px tile
costs 170 more than the 85; an image of unknown size costs the most (8
tiles).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
import tiktoken
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from cognoxium.exceptions import MessageError, RecordError
from cognoxium.formats.openai import (
    from_openai_messages,
    openai_messages_to_items,
    to_openai_messages,
)
from cognoxium.governance.policies import BoundaryPolicy
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem, Retention, Trust
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.tokens.profiles import get_profile
from tests.image_files import BUILDERS

START = datetime(2024, 5, 1, tzinfo=UTC)
AS_OF = START + timedelta(days=1)
CL100K = get_profile("cl100k_base")
OPTIONAL, PREFERRED = Retention.OPTIONAL, Retention.PREFERRED
Sizes = Mapping[str, tuple[int, int]]


def image_tokens(detail: str, size: tuple[int, int] | None) -> int:
    """OpenAI's documented image cost, for the GPT-4o family (85 base, 170 per 512 px tile)."""
    if detail == "low":
        return 85
    if size is None:
        return 85 + 170 * 8
    width, height = size
    fit = min(Fraction(1), Fraction(2048, max(width, height)))
    short = min(Fraction(1), Fraction(768) / (min(width, height) * fit))
    scale = fit * short
    return 85 + 170 * math.ceil(width * scale / 512) * math.ceil(height * scale / 512)


def request_count(
    messages: list[dict[str, Any]], encoding: tiktoken.Encoding, sizes: Sizes
) -> tuple[int, int]:
    """``(sent, framing)``: tokens of every value the request sends, and the cookbook's framing.

    ``sizes`` maps each image URL to its size (an image absent from it is of
    unknown size).
    """

    def n(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    if not messages:
        return 0, 0
    sent, framing = 0, 3  # every reply is primed with <|start|>assistant<|message|>
    for message in messages:
        framing += 3  # tokens_per_message
        for key, value in message.items():
            if key == "tool_calls":
                for call in value:
                    function = call["function"]
                    sent += n(call["id"]) + n(function["name"]) + n(function["arguments"])
            elif isinstance(value, list):
                for part in value:
                    if part["type"] == "text":
                        sent += n(part["text"])
                    else:
                        image = part["image_url"]
                        sent += image_tokens(image.get("detail", "auto"), sizes.get(image["url"]))
            elif value is not None:
                assert isinstance(value, str), (key, value)
                sent += n(value)
            if key == "name":
                framing += 1  # tokens_per_name
    return sent, framing


def cookbook_tokens(
    messages: list[dict[str, Any]], encoding: tiktoken.Encoding, sizes: Sizes | None = None
) -> int:
    """The request's tokens by the cookbook rule, counted from tiktoken alone."""
    return sum(request_count(messages, encoding, sizes or {}))


def message_tokens(
    message: dict[str, Any], encoding: tiktoken.Encoding, sizes: Sizes | None = None
) -> int:
    """One message's tokens by the cookbook rule (the request's, less the reply priming)."""
    return cookbook_tokens([message], encoding, sizes) - 3


def entry_tokens(result: Any) -> list[int]:
    entries = result.manifest.to_polars().filter(pl.col("decision") == "included")
    return entries.sort("pack_position")["tokens"].to_list()


# ---------------------------------------------------------------------------
# the two reported cases

FLIGHT_ARGUMENTS = json.dumps(
    {
        "origin": "CDG",
        "destination": "JFK",
        "departure_date": "2024-07-14",
        "return_date": "2024-07-28",
        "passengers": {"adults": 2, "children": 1},
        "cabin": "economy",
        "max_stops": 1,
        "flex": True,
    }
)
CALL_WITH_TEXT = {
    "role": "assistant",
    "content": "Let me look up flights from Paris to New York for the dates you gave, "
    "with at most one stop.",
    "tool_calls": [
        {
            "id": "call_7f3a",
            "type": "function",
            "function": {"name": "search_flights", "arguments": FLIGHT_ARGUMENTS},
        }
    ],
}


def test_a_tool_call_is_costed_with_its_id_function_name_and_arguments() -> None:
    enc = CL100K.encoding
    assert len(enc.encode_ordinary(FLIGHT_ARGUMENTS)) == 76
    assert len(enc.encode_ordinary("call_7f3a")) == 6
    assert len(enc.encode_ordinary("search_flights")) == 3
    answer = {"role": "tool", "tool_call_id": "call_7f3a", "content": "2 flights"}
    # The result: framing 3 + role 1 + content 2 + tool call id 6.
    assert CL100K.message_tokens(answer) == 12
    cf = from_openai_messages([CALL_WITH_TEXT, answer], conversation_id="c", start=START)
    result = cf.pack(1000, as_of=AS_OF)
    # Before: 29 (reply priming 3 + framing 4 + text 22), the call sent but not costed.
    # Now: 29 + id 6 + function name 3 + arguments 76, and the result's 12.
    assert result.used_tokens == 114 + 12
    assert entry_tokens(result) == [111, 12]
    assert result.messages == [CALL_WITH_TEXT, answer]
    # Whatever does not fit the whole exchange is not sent.
    tight = cf.pack(113 + 12, as_of=AS_OF)
    assert (tight.ids, tight.used_tokens) == ([], 0)
    assert tight.manifest.entries[0].reason == "group_over_budget"


NAMED = [
    {
        "role": "system",
        "name": "northwind_rules_2024",
        "content": "You are the support assistant of Northwind Bank. "
        "Answer in one or two sentences and never guess.",
    },
    {
        "role": "user",
        "name": "ada_lovelace_1815",
        "content": "When does my debit card expire, and can I renew it online?",
    },
    {
        "role": "assistant",
        "name": "support_bot_eu_west",
        "content": "September 2027; you can renew it online.",
    },
]


def test_names_are_costed() -> None:
    result = from_openai_messages(NAMED, conversation_id="n").pack(1000, as_of=AS_OF)
    # Before: 60, the names sent but not costed. Each name costs 1 + its tokens (6, 7, 6).
    assert result.used_tokens == 82
    assert entry_tokens(result) == [24 + 7, 18 + 8, 15 + 7]
    assert result.messages == NAMED
    assert cookbook_tokens(result.messages, CL100K.encoding) == 82


# ---------------------------------------------------------------------------
# fixed cases of the rendering


def test_tool_call_id_is_costed_and_a_call_without_text_costs_no_payload_json() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_paris_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_paris_1", "content": "18 C, cloudy"},
    ]
    result = from_openai_messages(messages, conversation_id="w").pack(1000, as_of=AS_OF)
    assert result.messages == messages
    enc = CL100K.encoding
    n = [len(enc.encode_ordinary(t)) for t in ("call_paris_1", "weather", '{"city":"Paris"}')]
    # The call sends its id, name and arguments (not the canonical JSON of the payload).
    assert entry_tokens(result)[1] == 3 + 1 + sum(n)
    # The result sends its text and the id of the call it answers.
    assert entry_tokens(result)[2] == 3 + 1 + len(enc.encode_ordinary("18 C, cloudy")) + n[0]
    assert result.used_tokens == cookbook_tokens(messages, enc)


def test_tool_output_without_a_call_id_is_sent_as_a_user_message() -> None:
    items = [ContextItem(id="t", role="tool", text="exit code 0", created_at=START)]
    result = pack(items_to_frame(items), 100, PackOptions(as_of=AS_OF))
    assert result.messages == [{"role": "user", "content": "exit code 0"}]
    assert result.used_tokens == cookbook_tokens(result.messages, CL100K.encoding)


def test_a_result_whose_call_is_not_packed_is_left_out_or_an_error() -> None:
    call = {"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    items = [
        ContextItem(
            id="call",
            role="assistant",
            text="Checking.",
            created_at=START,
            expires_at=START + timedelta(hours=1),
            metadata={"tool_call_ids": ["c9"], "tool_calls": [call]},
        ),
        ContextItem(
            id="result", role="tool", text="ok", created_at=START, metadata={"tool_call_id": "c9"}
        ),
    ]
    df = items_to_frame(items)
    with pytest.raises(MessageError, match=r"item 'result', row 1\).*'c9'.*group_id"):
        pack(df, 100, PackOptions(as_of=AS_OF, tool_errors="error"))
    repaired = pack(df, 100, PackOptions(as_of=AS_OF))
    assert repaired.ids == []
    assert [e.reason for e in repaired.manifest.entries] == ["expired", "tool_result_orphan"]


def test_a_malformed_tool_call_names_the_row_and_field() -> None:
    bad = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    items = [
        ContextItem(id="q", role="user", text="Hi", created_at=START),
        ContextItem(
            id="a",
            role="assistant",
            text="Calling.",
            created_at=START,
            metadata={"tool_call_ids": ["c1"], "tool_calls": [bad]},
        ),
    ]
    with pytest.raises(RecordError) as info:
        pack(items_to_frame(items), 100, PackOptions(as_of=AS_OF))
    assert (info.value.row, info.value.field) == (1, "metadata.tool_calls[0].function.arguments")


def test_a_call_rendered_as_data_by_a_policy_sends_and_costs_its_content_only() -> None:
    answer = {"role": "tool", "tool_call_id": "call_7f3a", "content": "AF 22, 412 EUR"}
    cf = from_openai_messages([CALL_WITH_TEXT, answer], conversation_id="c", start=START)
    # The call is untrusted, its result trusted: the call goes as data, so its result,
    # which no call now precedes, goes as a user message too.
    cf = cf.with_columns(
        trust=pl.when(pl.col("id") == "c:1").then(pl.lit("trusted")).otherwise(pl.col("trust"))
    )
    result = cf.pack(1000, as_of=AS_OF, policy=BoundaryPolicy())
    message, result_message = result.messages
    assert result_message == {"role": "user", "content": "AF 22, 412 EUR"}
    assert message["role"] == "user"
    assert set(message) == {"role", "content"}
    assert message["content"].startswith('<untrusted-data id="c:0"')
    assert result.used_tokens == cookbook_tokens(result.messages, CL100K.encoding)
    assert result.messages == to_openai_messages(result)


# ---------------------------------------------------------------------------
# property: used tokens == the cookbook count of what the pack sends

NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,16}", fullmatch=True)
TEXT = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
    st.lists(
        st.sampled_from(["refund", "window", " ", "\n", "30 days", "朗琴", "👍", "<|endoftext|>"]),
        max_size=20,
    ).map("".join),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Chat messages with names, parallel tool calls (JSON arguments), their results."""
    messages: list[dict[str, Any]] = []
    n_calls = 0
    for _ in range(draw(st.integers(1, 4))):
        role = draw(st.sampled_from(["system", "developer", "user", "user", "assistant"]))
        message: dict[str, Any] = {"role": role, "content": draw(TEXT)}
        if draw(st.booleans()):
            message["name"] = draw(NAMES)
        if role == "assistant" and draw(st.booleans()):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                n_calls += 1
                arguments = json.dumps(draw(JSON), ensure_ascii=draw(st.booleans()))
                function = {"name": draw(NAMES), "arguments": arguments}
                call_id = f"call_{n_calls}_{draw(NAMES)}"
                calls.append({"id": call_id, "type": "function", "function": function})
            message["tool_calls"] = calls
            if draw(st.booleans()):
                message["content"] = None
            messages.append(message)
            for call in draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]:
                result: dict[str, Any] = {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": draw(TEXT),
                }
                messages.append(result)
            continue
        messages.append(message)
    return messages


DETAILS = st.sampled_from(["low", "high", "auto", None])


@st.composite
def image_item(draw: st.DrawFn, i: int, sizes: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """An image item's fields: a binary image, or a reference with or without its size."""
    role = draw(st.sampled_from(["user", "document", "memory"]))
    size = (draw(st.integers(1, 5000)), draw(st.integers(1, 5000)))
    detail = draw(DETAILS)
    metadata: dict[str, Any] = {} if detail is None else {"detail": detail}
    if draw(st.booleans()):
        media_type = draw(st.sampled_from(sorted(BUILDERS)))
        data = BUILDERS[media_type](*size)
        url = f"data:{media_type};base64," + base64.b64encode(data).decode("ascii")
        sizes[url] = size
        metadata["media_type"] = media_type
        return {"role": role, "payload": {"kind": "binary", "data": data}, "metadata": metadata}
    url = f"https://img.example.org/{i}.{draw(st.sampled_from(['png', 'JPG', 'webp']))}"
    if draw(st.booleans()):
        sizes[url] = size
        metadata |= {"width": size[0], "height": size[1]}
    title = draw(st.one_of(st.none(), TEXT))
    ref = {"kind": "reference", "uri": url, "title": title}
    return {"role": role, "payload": ref, "metadata": metadata}


@st.composite
def others(draw: st.DrawFn, sizes: dict[str, tuple[int, int]] | None = None) -> list[ContextItem]:
    """Items from outside the chat: JSON documents and memories, references, tool output, images.

    The size of each image sent by URL is written to ``sizes``.
    """
    sizes = {} if sizes is None else sizes
    items = []
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["json", "text", "reference", "tool", "image", "image"]))
        role = draw(st.sampled_from(["document", "memory"]))
        fields: dict[str, Any] = {"id": f"x{i}", "created_at": START}
        if draw(st.booleans()):
            fields["metadata"] = {"name": draw(NAMES)}  # never sent for documents
        if kind == "json":
            fields |= {"role": role, "payload": {"kind": "json", "value": draw(JSON)}}
        elif kind == "text":
            fields |= {"role": role, "text": draw(TEXT)}
        elif kind == "reference":
            fields |= {
                "role": role,
                "payload": {"kind": "reference", "uri": "https://x.org/a", "title": draw(TEXT)},
            }
        elif kind == "image":
            fields |= draw(image_item(i, sizes))
        else:
            fields |= {"role": "tool", "text": draw(TEXT)}
        items.append(ContextItem.model_validate(fields))
    return items


@settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conversations(), st.data())
def test_used_tokens_are_the_cookbook_count_of_what_the_pack_sends(
    messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    """Over 1,000 chat packs with tool calls, names, JSON payloads and images."""
    sizes: dict[str, tuple[int, int]] = {}
    extra = data.draw(others(sizes))
    profile = get_profile(data.draw(st.sampled_from(["cl100k_base", "o200k_base"])))
    items = openai_messages_to_items(messages, conversation_id="c", start=START) + extra
    items = [
        item.model_copy(
            update={
                "retention": data.draw(st.sampled_from([OPTIONAL, OPTIONAL, PREFERRED])),
                "rank": data.draw(st.sampled_from([None, 0.5, 2.0])),
                "trust": data.draw(st.sampled_from(list(Trust))),
            }
        )
        for item in items
    ]
    df = items_to_frame(items)
    sent = to_openai_messages(df)
    everything = cookbook_tokens(sent, profile.encoding, sizes)
    budget = data.draw(st.integers(0, everything + 10))
    policy = data.draw(st.sampled_from([None, BoundaryPolicy(max_sensitivity="restricted")]))
    note(f"budget {budget} of {everything}, policy {policy}")

    result = pack(df, budget, PackOptions(profile=profile, as_of=AS_OF), policy=policy)

    assert result.messages == to_openai_messages(result)
    values, framing = request_count(result.messages, profile.encoding, sizes)
    # Never below what the request sends, never more than the documented framing above it;
    # exactly the cookbook count.
    assert values <= result.used_tokens <= values + framing
    assert result.used_tokens == values + framing
    assert result.used_tokens <= budget
    assert entry_tokens(result) == [
        message_tokens(m, profile.encoding, sizes) for m in result.messages
    ]
    assert profile.request_tokens(result.messages, image_sizes=sizes) == result.used_tokens
    if policy is None:
        positions = result.manifest.to_polars().filter(pl.col("decision") == "included")
        assert result.messages == [sent[i] for i in positions["position"].to_list()]
        repaired = any(r.startswith("tool_") for r in result.manifest.totals.by_reason)
        if budget >= everything and not repaired:
            assert result.used_tokens == everything
