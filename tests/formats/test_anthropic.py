"""Anthropic Messages in and out: the same items as the OpenAI importer, round trips, errors."""

from __future__ import annotations

import copy
import itertools
import json
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import MessageError, RecordError
from cognoxium.formats.anthropic import (
    anthropic_messages_to_items,
    from_anthropic_messages,
    to_anthropic_messages,
    validate_anthropic_messages,
)
from cognoxium.formats.openai import from_openai_messages, openai_messages_to_items
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem, Source, Text
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.testing.strategies import chat_histories_strategy

AS_OF = datetime(2024, 1, 1, tzinfo=UTC)
PNG = "iVBORw0KGgo="

ANTHROPIC: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "c2", "name": "clock", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": '{"temp": 18}'},
            {"type": "tool_result", "tool_use_id": "c2", "content": "14:05"},
            {"type": "text", "text": "And tomorrow?"},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "c3", "name": "weather", "input": {"day": 1, "tags": ["x"]}}
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c3", "content": "rain"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "18 C now, rain tomorrow."}]},
]
OPENAI: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather and time in Paris?"},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 18}'},
    {"role": "tool", "tool_call_id": "c2", "content": "14:05"},
    {"role": "user", "content": "And tomorrow?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c3",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"day":1,"tags":["x"]}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c3", "content": "rain"},
    {"role": "assistant", "content": "18 C now, rain tomorrow."},
]


def test_same_items_as_the_openai_importer_for_the_same_conversation() -> None:
    from_anthropic = anthropic_messages_to_items(ANTHROPIC, system="Be brief.", conversation_id="c")
    from_openai = openai_messages_to_items(OPENAI, conversation_id="c")
    assert from_anthropic == from_openai
    groups = [(i.id, i.group_id) for i in from_anthropic if i.group_id is not None]
    assert groups == [
        ("c:2", "c:tools:2"),
        ("c:3", "c:tools:2"),
        ("c:4", "c:tools:2"),
        ("c:6", "c:tools:6"),
        ("c:7", "c:tools:6"),
    ]


def test_anthropic_round_trip_through_a_pack() -> None:
    cf = from_anthropic_messages(ANTHROPIC, system="Be brief.", conversation_id="c")
    result = cf.pack(10_000, as_of=AS_OF)
    assert result.to_anthropic() == {"system": "Be brief.", "messages": ANTHROPIC}
    assert to_anthropic_messages(result) == result.to_anthropic()
    assert to_anthropic_messages(cf) == result.to_anthropic()
    assert to_anthropic_messages(cf.collect()) == result.to_anthropic()


def test_to_anthropic_messages_of_a_frame_opening_with_an_assistant_turn() -> None:
    cf = from_anthropic_messages(ANTHROPIC[1:5], system="Be brief.", conversation_id="c")
    default = to_anthropic_messages(cf)
    assert default["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": "(earlier messages omitted)"}],
    }
    assert default["messages"][1:] == ANTHROPIC[1:5]
    request = to_anthropic_messages(cf, placeholder="(earlier turns omitted)")
    assert request == {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "(earlier turns omitted)"}]},
            *ANTHROPIC[1:5],
        ],
    }


def test_openai_round_trip_through_a_pack() -> None:
    result = from_openai_messages(OPENAI, conversation_id="c").pack(10_000, as_of=AS_OF)
    assert result.to_openai() == OPENAI
    assert result.to_anthropic() == {"system": "Be brief.", "messages": ANTHROPIC}


def test_a_pack_under_budget_drops_a_tool_exchange_whole_and_roles_still_alternate() -> None:
    cf = from_anthropic_messages(ANTHROPIC, system="Be brief.", conversation_id="c")
    cf = cf.with_columns(
        retention=pl.when(pl.col("id").is_in(["c:0", "c:1", "c:8"]))
        .then(pl.lit("required"))
        .otherwise(pl.col("retention"))
    )
    full = cf.pack(10_000, as_of=AS_OF)
    result = cf.pack(full.used_tokens - 1, as_of=AS_OF)
    # The first tool exchange (39 tokens, one unit) is the optional unit that goes;
    # the two user texts around it then merge into one user message.
    assert result.ids == ["c:0", "c:1", "c:5", "c:6", "c:7", "c:8"]
    assert result.to_anthropic() == {
        "system": "Be brief.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather and time in Paris?"},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
            ANTHROPIC[3],
            ANTHROPIC[4],
            ANTHROPIC[5],
        ],
    }
    roles = [m["role"] for m in result.to_anthropic()["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))


def test_system_blocks_images_and_errors_kept() -> None:
    items = anthropic_messages_to_items(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "these two."},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.org/b.jpg"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "k", "name": "diff", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "k",
                        "is_error": True,
                        "content": [{"type": "text", "text": "timeout"}],
                    }
                ],
            },
        ],
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
    )
    rows = [(i.id, i.role.value, i.payload.model_dump(), i.group_id, i.metadata) for i in items]
    assert rows == [
        ("msg:0", "system", {"kind": "text", "text": "Be brief.\nBe kind."}, None, {}),
        (
            "msg:1.0",
            "user",
            {"kind": "text", "text": "Compare\nthese two."},
            "msg:parts:1",
            {"message_part": 0},
        ),
        (
            "msg:1.1",
            "user",
            {
                "kind": "reference",
                "uri": f"data:image/png;base64,{PNG}",
                "title": None,
                "digest": None,
            },
            "msg:parts:1",
            {"media_type": "image/png", "message_part": 1},
        ),
        (
            "msg:1.2",
            "user",
            {
                "kind": "reference",
                "uri": "https://example.org/b.jpg",
                "title": None,
                "digest": None,
            },
            "msg:parts:1",
            {"media_type": "image/*", "message_part": 2},
        ),
        (
            "msg:2",
            "assistant",
            {
                "kind": "json",
                "value": {
                    "tool_calls": [
                        {
                            "id": "k",
                            "type": "function",
                            "function": {"name": "diff", "arguments": "{}"},
                        }
                    ]
                },
            },
            "msg:tools:2",
            {"tool_call_ids": ["k"]},
        ),
        (
            "msg:3",
            "tool",
            {"kind": "text", "text": "timeout"},
            "msg:tools:2",
            {"is_error": True, "tool_call_id": "k"},
        ),
    ]
    # The failure is sent back: is_error, on the tool_result it came from.
    request = to_anthropic_messages(items_to_frame(items))
    (result,) = request["messages"][-1]["content"]
    assert (result["tool_use_id"], result["is_error"]) == ("k", True)


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "k", "name": "f", "input": {}}]}


@pytest.mark.parametrize(
    ("messages", "system", "row", "field", "words"),
    [
        ([{"role": "system", "content": "x"}], None, 0, "role", "must be one of"),
        (["hello"], None, 0, None, "must be an object"),
        ([{"role": "user", "content": "x", "name": "ada"}], None, 0, "name", "not supported"),
        ([{"role": "user", "content": 5}], None, 0, "content", "string or a list"),
        ([{"role": "user", "content": []}], None, 0, "content", "at least one block"),
        ([user({"type": "document", "source": {}})], None, 0, "content[0].type", "unsupported"),
        (
            [user({"type": "text", "text": "x", "citations": []})],
            None,
            0,
            "content[0].citations",
            "unknown key",
        ),
        ([user({"type": "text", "text": 3})], None, 0, "content[0].text", "must be a string"),
        (
            [user({"type": "tool_use", "id": "k", "name": "f", "input": {}})],
            None,
            0,
            "content[0].type",
            "user messages have no tool_use",
        ),
        (
            [
                user({"type": "text", "text": "hi"}),
                {"role": "assistant", "content": [{"type": "image", "source": {}}]},
            ],
            None,
            1,
            "content[0].type",
            "assistant messages have no image",
        ),
        (
            [user({"type": "image", "source": {"type": "file", "file_id": "f"}})],
            None,
            0,
            "content[0].source",
            "base64 or url",
        ),
        (
            [user({"type": "image", "source": {"type": "base64", "data": PNG}})],
            None,
            0,
            "content[0].source.media_type",
            "non-empty",
        ),
        (
            [
                user({"type": "text", "text": "go"}),
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "k", "name": "f", "input": [1]}],
                },
            ],
            None,
            1,
            "content[0].input",
            "JSON object",
        ),
        (
            [
                user({"type": "text", "text": "go"}),
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "", "name": "f", "input": {}}],
                },
            ],
            None,
            1,
            "content[0].id",
            "non-empty",
        ),
        (
            [user({"type": "tool_result", "tool_use_id": "nobody", "content": "1"})],
            None,
            0,
            "content[0].tool_use_id",
            "no earlier assistant",
        ),
        (
            [
                user({"type": "text", "text": "go"}),
                CALL,
                user(
                    {"type": "tool_result", "tool_use_id": "k", "content": "1"},
                    {"type": "tool_result", "tool_use_id": "k", "content": "2"},
                    {"type": "text", "text": "x"},
                ),
            ],
            None,
            2,
            "content[1].tool_use_id",
            "already answered",
        ),
        (
            [
                user({"type": "text", "text": "go"}),
                CALL,
                user({"type": "tool_result", "tool_use_id": "k", "is_error": "yes"}),
            ],
            None,
            2,
            "content[0].is_error",
            "boolean",
        ),
        (
            [
                user({"type": "text", "text": "go"}),
                CALL,
                user(
                    {
                        "type": "tool_result",
                        "tool_use_id": "k",
                        "content": [{"type": "image", "source": {}}],
                    }
                ),
            ],
            None,
            2,
            "content[0].content[0].type",
            "text blocks only",
        ),
        (
            [
                user({"type": "text", "text": "go"}),
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Twice."},
                        {"type": "tool_use", "id": "k", "name": "f", "input": {}},
                        {"type": "tool_use", "id": "k", "name": "g", "input": {}},
                    ],
                },
            ],
            None,
            1,
            "content[2].id",
            "appears twice in this message",
        ),
        ([], [{"type": "image"}], None, "system[0].type", "must be a text block"),
        ([], 7, None, "system", "string or a list"),
    ],
)
def test_malformed_messages_name_the_index_and_field(
    messages: list[Any], system: Any, row: int | None, field: str | None, words: str
) -> None:
    with pytest.raises(RecordError, match=words) as info:
        anthropic_messages_to_items(messages, system=system, source="req.json")
    assert (info.value.row, info.value.field, info.value.source) == (row, field, "req.json")


# ---------------------------------------------------------------------------
# Validation by the Anthropic SDK's own request types


def assert_sdk_accepts(messages: list[dict[str, Any]]) -> None:
    """Validate messages with the SDK's request types, block by block, keys included.

    ``MessageParam`` declares ``content`` as an ``Iterable``, which pydantic
    validates lazily, so every block is validated on its own with
    ``ContentBlockParam``; equality with the input proves no key was unknown
    (a TypedDict drops unknown keys).
    """
    from anthropic.types import ContentBlockParam, MessageParam
    from pydantic import TypeAdapter

    TypeAdapter(list[MessageParam]).validate_python(copy.deepcopy(messages))
    blocks = TypeAdapter(ContentBlockParam)
    for message in messages:
        for block in message["content"]:
            assert blocks.validate_python(copy.deepcopy(block)) == block


def test_to_anthropic_is_a_valid_request_for_the_sdk() -> None:
    pytest.importorskip("anthropic")
    from anthropic.types import TextBlockParam
    from pydantic import TypeAdapter

    docs = [
        ContextItem(
            id="faq",
            role="document",
            payload=Text(text="Refunds take 5 days."),
            created_at=AS_OF,
            sources=(Source(uri="https://example.org/faq", title="FAQ"),),
        )
    ]
    cf = from_anthropic_messages(ANTHROPIC, system="Be brief.", conversation_id="c")
    frame = pl.concat([items_to_frame(docs), cf.collect()], how="vertical_relaxed")
    request = pack(frame, 10_000, PackOptions(as_of=AS_OF)).to_anthropic()
    assert_sdk_accepts(request["messages"])
    system = TypeAdapter(str | list[TextBlockParam]).validate_python(request["system"])
    assert system == "Be brief."
    first = request["messages"][0]["content"]
    assert first[0]["text"] == "Source: FAQ https://example.org/faq\nRefunds take 5 days."

    images = user(
        {"type": "text", "text": "Compare"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.org/b.jpg"}},
    )
    from cognoxium.packing._renderers import anthropic_request

    rendered = anthropic_request(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://example.org/b.jpg"}},
                ],
            }
        ]
    )
    assert rendered["messages"] == [images]
    assert_sdk_accepts(rendered["messages"])
    bad = [user({"type": "tool_use", "id": "k", "name": "f", "input": [1]})]
    with pytest.raises(ValueError, match="validation error"):
        assert_sdk_accepts(bad)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat_histories_strategy(), st.integers(0, 300))
def test_every_pack_renders_a_well_formed_anthropic_request(
    messages: list[dict[str, Any]], budget: int
) -> None:
    frame = from_openai_messages(messages, conversation_id="c", system_retention="optional")
    result = frame.pack(budget, as_of=AS_OF)
    request = result.to_anthropic(placeholder="(earlier turns omitted)")
    turns = request["messages"]
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(turns))
    assert not turns or turns[0]["role"] == "user"
    for before, turn in itertools.pairwise([{"role": "user", "content": []}, *turns]):
        assert turn["content"]
        assert all(b["text"].strip() for b in turn["content"] if b["type"] == "text")
        calls = {b["id"] for b in before["content"] if b["type"] == "tool_use"}
        results = [b["tool_use_id"] for b in turn["content"] if b["type"] == "tool_result"]
        assert set(results) <= calls
    sent = [m for m in result.messages if m["role"] != "system"]
    blocks = [b for turn in turns for b in turn["content"]]

    def text_block(m: dict[str, Any]) -> bool:
        """Whether a message sends a text block: more than whitespace, or a name."""
        return bool((m["content"] or "").strip() or m.get("name"))

    # A message that sends no block (whitespace only) opens nothing.
    shown = [m for m in sent if m["role"] == "tool" or text_block(m) or m.get("tool_calls")]
    placeholder = int(not shown or shown[0]["role"] == "assistant")
    validate_anthropic_messages(request)
    calls = sum(len(m.get("tool_calls") or ()) for m in sent)
    # Every tool result is one block, and every other message with more than whitespace
    # in its content or a name (sent as "<name>: " before it) one text block.
    texts = sum(1 for m in sent if m["role"] == "tool" or text_block(m))
    assert len(blocks) == placeholder + calls + texts
    assert_sdk_accepts(turns)


def test_the_system_prompt_is_required_unless_asked_otherwise() -> None:
    messages = [{"role": "user", "content": "Hi"}]
    required = anthropic_messages_to_items(messages, system="Be brief.")
    optional = anthropic_messages_to_items(
        messages, system="Be brief.", system_retention="optional"
    )
    assert [i.retention.value for i in required] == ["required", "optional"]
    assert [i.retention.value for i in optional] == ["optional", "optional"]


def test_to_anthropic_sends_ids_blanks_and_a_prefill_as_the_api_takes_them() -> None:
    from cognoxium.packing.message_rules import anthropic_faults, validate_anthropic_messages

    call = {
        "id": "functions.get_weather:0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "18 C"},
        {"role": "user", "content": "   "},
        {"role": "assistant", "content": "It is 18 C.\n\n"},
    ]
    # The messages as they are break three of the API's rules.
    raw = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "functions.get_weather:0", "name": "get_weather",
             "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "functions.get_weather:0", "content": "18 C"},
            {"type": "text", "text": "   "}]},
        {"role": "assistant", "content": "It is 18 C.\n\n"},
    ]  # fmt: skip
    rules = [(f.index, f.rule) for f in anthropic_faults(raw)]
    assert rules == [
        (1, "tool_id_invalid"),
        (2, "tool_id_invalid"),
        (2, "content_empty"),
        (3, "final_assistant_whitespace"),
    ]
    request = (
        from_openai_messages(history).pack(1000, as_of=AS_OF, target="anthropic").to_anthropic()
    )
    validate_anthropic_messages(request)
    use = request["messages"][1]["content"][0]
    result = request["messages"][2]["content"]
    assert use["id"] == result[0]["tool_use_id"] == "functions_get_weather_0_79ac1aaa"
    assert result == [{"type": "tool_result", "tool_use_id": use["id"], "content": "18 C"}]
    assert request["messages"][-1]["content"] == [{"type": "text", "text": "It is 18 C."}]


@pytest.mark.parametrize(
    ("arguments", "sent"),
    [("", {}), ("  ", {}), ("{}", {}), ('{"city": "Paris"}', {"city": "Paris"})],
)
def test_blank_tool_arguments_are_an_empty_input(arguments: str, sent: dict[str, Any]) -> None:
    from cognoxium.packing.message_rules import validate_anthropic_messages

    call = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": arguments}}
    history = [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    options = PackOptions(target="anthropic")
    request = from_openai_messages(history).pack(500, options).to_anthropic()
    validate_anthropic_messages(request)
    assert request["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "now", "input": sent}
    ]


@pytest.mark.parametrize(
    ("arguments", "why"),
    [('{"city": "Par', "the arguments are not JSON"), ("[1, 2]", "got list"), ('"x"', "got str")],
)
def test_tool_arguments_with_no_anthropic_form_name_the_call(arguments: str, why: str) -> None:
    """A pack built for OpenAI sends them; its Anthropic rendering names the call it cannot send."""
    call = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": arguments}}
    history = [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    packed = from_openai_messages(history).pack(500)
    assert packed.to_openai()[1]["tool_calls"] == [call]
    with pytest.raises(RecordError, match=f"tool call 'c1' of 'now': .* JSON object.*{why}"):
        packed.to_anthropic()
    built = from_openai_messages(history).pack(500, PackOptions(target="anthropic"))
    assert built.ids == ["msg:0"]
    validate_anthropic_messages(built.to_anthropic())


def reused_use_ids() -> list[dict[str, Any]]:
    """A history whose every assistant turn numbers its tool_use blocks from ``call_0``."""
    use = {"type": "tool_use", "id": "call_0", "name": "now", "input": {}}
    return [
        user({"type": "text", "text": "Time?"}),
        {"role": "assistant", "content": [use]},
        user({"type": "tool_result", "tool_use_id": "call_0", "content": "12:00"}),
        {"role": "assistant", "content": [use]},
        user(
            {"type": "tool_result", "tool_use_id": "call_0", "content": "12:01", "is_error": True}
        ),
        {"role": "assistant", "content": [{"type": "text", "text": "It is 12:01."}]},
    ]


@pytest.mark.parametrize("tool_errors", ["error", "keep"])
def test_a_reused_tool_use_id_gets_a_new_id_and_the_request_is_valid(tool_errors: str) -> None:
    messages = reused_use_ids()
    with pytest.raises(MessageError, match="rule tool_use_id_duplicate") as info:
        validate_anthropic_messages(messages)  # as given, Anthropic refuses it
    assert info.value.index == 3
    frame = from_anthropic_messages(messages, conversation_id="c", tool_errors=tool_errors)
    metadata = [json.loads(m) for m in frame.to_polars().get_column("metadata")]
    assert metadata[1:5] == [
        {"tool_call_ids": ["call_0"]},
        {"tool_call_id": "call_0"},
        {"tool_call_ids": ["call_0-2"], "original_tool_call_ids": ["call_0"]},
        {"tool_call_id": "call_0-2", "original_tool_call_id": "call_0", "is_error": True},
    ]
    result = frame.pack(1_000, as_of=AS_OF, target="anthropic")
    assert {e.reason.value for e in result.manifest.entries} == {"selected"}
    request = result.to_anthropic()
    validate_anthropic_messages(request)
    assert request["messages"][3]["content"][0]["id"] == "call_0-2"
    assert request["messages"][4]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "call_0-2",
        "content": "12:01",
        "is_error": True,
    }
