"""A pack rendered for OpenAI, Anthropic and as text; documents and memories name their sources."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cognoxium import ContextPack, Renderer
from cognoxium.exceptions import RecordError
from cognoxium.formats.anthropic import from_anthropic_messages
from cognoxium.formats.openai import from_openai_messages, to_openai_messages
from cognoxium.governance.policies import BoundaryPolicy
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem, Json, Reference, Source, Text
from cognoxium.items.records import records_to_frame
from cognoxium.packing.message_rules import anthropic_faults
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from tests.packing.test_chat_costs import CL100K, cookbook_tokens

START = datetime(2024, 5, 1, tzinfo=UTC)
AS_OF = START + timedelta(days=1)

WEATHER = {
    "id": "c1",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city":"Paris","units":["C"]}'},
}
TIME = {"id": "c2", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": "Answer in English."},
    {"role": "user", "name": "ada", "content": "Weather and time in Paris?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [WEATHER, TIME]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 18}'},
    {"role": "tool", "tool_call_id": "c2", "content": "14:05"},
    {"role": "assistant", "content": "18 C at 14:05."},
    {"role": "user", "content": "Thanks!"},
]


def item(item_id: str, role: str, text: str, sources: list[Source] | None = None) -> ContextItem:
    return ContextItem(
        id=item_id,
        role=role,
        payload=Text(text=text),
        created_at=START,
        sources=tuple(sources or ()),
    )


def chat_pack(messages: list[dict[str, Any]]) -> ContextPack:
    return from_openai_messages(messages, conversation_id="c").pack(10_000, as_of=AS_OF)


# ---------------------------------------------------------------------------
# Attribution


FAQ = Source(uri="https://help.example.org/refunds", title="Refund FAQ", kind="web")
WIKI = Source(uri="kb://wiki/42")


def test_documents_and_memories_name_their_sources_and_the_cost_counts_them() -> None:
    items = [
        item("q", "user", "Refund window?", [Source(uri="chat://1")]),
        item("faq", "document", "Refunds take 5 days.", [FAQ, WIKI]),
        item("mem", "memory", "Ada prefers email.", [WIKI]),
        item("bare", "document", "No source here."),
    ]
    result = pack(items_to_frame(items), 1000, PackOptions(as_of=AS_OF))
    assert [m["content"] for m in result.messages] == [
        "Refund window?",
        "Source: Refund FAQ https://help.example.org/refunds\n"
        "Source: kb://wiki/42\n"
        "Refunds take 5 days.",
        "Source: kb://wiki/42\nAda prefers email.",
        "No source here.",
    ]
    assert result.used_tokens == cookbook_tokens(result.messages, CL100K.encoding)
    assert result.manifest.entries[1].tokens == CL100K.message_tokens(result.messages[1])


def test_same_text_with_other_sources_costs_its_own_lines() -> None:
    """Two copies of one text (one content hash) differ by their source lines, and so in cost."""
    long_title = Source(uri="https://example.org/a", title="A much longer title " * 5)
    items = [
        item("a", "document", "Same words.", [WIKI]),
        item("b", "document", "Same words.", [long_title]),
    ]
    result = pack(items_to_frame(items), 1000, PackOptions(as_of=AS_OF))
    a, b = (entry.tokens for entry in result.manifest.entries)
    assert a == CL100K.message_tokens(result.messages[0])
    assert b == CL100K.message_tokens(result.messages[1])
    assert a is not None
    assert b is not None
    assert b > a
    assert result.used_tokens == cookbook_tokens(result.messages, CL100K.encoding)


def test_a_reference_document_is_attributed_and_data_blocks_keep_the_source_inside() -> None:
    ref = ContextItem(
        id="spec",
        role="document",
        payload=Reference(uri="https://example.org/spec.pdf", title="Spec"),
        created_at=START,
        sources=(FAQ,),
    )
    result = pack(items_to_frame([ref]), 1000, PackOptions(as_of=AS_OF))
    assert result.messages[0]["content"] == (
        "Source: Refund FAQ https://help.example.org/refunds\nSpec https://example.org/spec.pdf"
    )
    guarded = pack(items_to_frame([ref]), 1000, PackOptions(as_of=AS_OF), policy=BoundaryPolicy())
    content = guarded.messages[0]["content"]
    assert content.startswith('<untrusted-data id="spec"')
    assert "Source: Refund FAQ https://help.example.org/refunds\nSpec" in content
    assert guarded.used_tokens == cookbook_tokens(guarded.messages, CL100K.encoding)


def test_a_truncated_document_keeps_its_source_line_and_costs_what_it_sends() -> None:
    words = "word " * 100  # 101 tokens
    records = [
        {"id": "sys", "role": "system", "text": "Be brief.", "retention": "required"},  # 7
        {
            "id": "doc",
            "role": "document",
            "text": words,
            "sources": [{"uri": "kb://wiki/42"}],
            "metadata": {"truncate": {"side": "head", "min_tokens": 10}},
        },
    ]
    df = records_to_frame([{"created_at": "2024-01-01T00:00:00Z", **r} for r in records])
    result = pack(df, 50, PackOptions(as_of=AS_OF))
    # 50 - 3 priming - 7 system - 4 framing - 8 for "Source: kb://wiki/42\n" = 28 tokens kept.
    assert result.messages[1] == {
        "role": "user",
        "content": "Source: kb://wiki/42\n" + " ".join(["word"] * 28),
    }
    assert result.manifest.truncations[0].kept_tokens == 28
    assert result.used_tokens == 50 == cookbook_tokens(result.messages, CL100K.encoding)


def test_attribution_is_in_every_renderer() -> None:
    items = [item("q", "user", "Refund window?"), item("faq", "document", "5 days.", [FAQ])]
    result = pack(items_to_frame(items), 1000, PackOptions(as_of=AS_OF))
    line = "Source: Refund FAQ https://help.example.org/refunds"
    assert result.to_openai()[1]["content"] == f"{line}\n5 days."
    anthropic = result.to_anthropic()["messages"]
    assert anthropic == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Refund window?"},
                {"type": "text", "text": f"{line}\n5 days."},
            ],
        }
    ]
    assert result.to_text() == f"user:\nRefund window?\n\nuser:\n{line}\n5 days."


# ---------------------------------------------------------------------------
# OpenAI


def test_to_openai_is_messages_and_a_copy() -> None:
    result = chat_pack(CONVERSATION)
    rendered = result.to_openai()
    assert rendered == result.messages == to_openai_messages(result) == CONVERSATION
    rendered[3]["tool_calls"][0]["id"] = "changed"
    assert result.messages[3]["tool_calls"][0]["id"] == "c1"


# ---------------------------------------------------------------------------
# Anthropic


def test_to_anthropic_puts_system_apart_and_tool_exchanges_in_blocks() -> None:
    request = chat_pack(CONVERSATION).to_anthropic()
    assert request == {
        "system": "Be brief.\n\nAnswer in English.",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "ada: Weather and time in Paris?"}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "c1",
                        "name": "weather",
                        "input": {"city": "Paris", "units": ["C"]},
                    },
                    {"type": "tool_use", "id": "c2", "name": "clock", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": '{"temp": 18}'},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "14:05"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "18 C at 14:05."}]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
        ],
    }


def test_anthropic_roles_alternate_after_merging() -> None:
    messages = [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "three"},
        {"role": "assistant", "content": None, "tool_calls": [TIME]},
        {"role": "tool", "tool_call_id": "c2", "content": "14:05"},
        {"role": "user", "content": "four"},
    ]
    turns = chat_pack(messages).to_anthropic()["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [[b["type"] for b in t["content"]] for t in turns] == [
        ["text", "text"],
        ["text", "tool_use"],
        ["tool_result", "text"],
    ]
    assert "system" not in chat_pack(messages).to_anthropic()


def test_anthropic_leaves_out_a_message_with_nothing_to_send() -> None:
    messages = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "two"},
    ]
    result = chat_pack(messages)
    assert result.to_openai() == messages
    assert result.to_anthropic() == {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
            }
        ]
    }


def test_anthropic_opens_with_a_user_message_before_an_opening_assistant_turn() -> None:
    result = chat_pack(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    assert result.to_anthropic()["messages"][0]["role"] == "user"
    opening = chat_pack(
        [{"role": "system", "content": "Be brief."}, {"role": "assistant", "content": "Hello!"}]
    )
    assert opening.to_anthropic() == {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "(earlier messages omitted)"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
        ],
    }
    assert opening.to_anthropic(placeholder="(earlier turns omitted)") == {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "(earlier turns omitted)"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
        ],
    }
    assert opening.used_tokens == CL100K.request_tokens(opening.messages)


def test_anthropic_tool_arguments_must_be_a_json_object() -> None:
    call = {"id": "k", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}
    result = chat_pack(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "k", "content": "ok"},
        ]
    )
    with pytest.raises(RecordError) as info:
        result.to_anthropic()
    assert (info.value.row, info.value.field) == (1, "tool_calls[0].function.arguments")
    assert "must be a JSON object, got list" in str(info.value)


def test_anthropic_images_and_json_payloads() -> None:
    """Image parts (as the OpenAI message may carry them) become image blocks; JSON stays text."""
    from cognoxium.packing._renderers import anthropic_request

    png = "data:image/png;base64,iVBORw0KGgo="
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                {"type": "image_url", "image_url": {"url": png}},
                {"type": "image_url", "image_url": {"url": "https://example.org/b.jpg"}},
            ],
        },
        {"role": "assistant", "content": '{"answer":"same"}'},
    ]
    assert anthropic_request(messages)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.org/b.jpg"}},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": '{"answer":"same"}'}]},
    ]


# ---------------------------------------------------------------------------
# Text


def test_to_text_is_the_documented_transcript() -> None:
    assert chat_pack(CONVERSATION).to_text() == (
        "system:\nBe brief.\n\n"
        "developer:\nAnswer in English.\n\n"
        "user (ada):\nWeather and time in Paris?\n\n"
        "assistant:\nChecking.\n"
        '-> call c1: weather({"city":"Paris","units":["C"]})\n'
        "-> call c2: clock({})\n\n"
        'tool [c1]:\n{"temp": 18}\n\n'
        "tool [c2]:\n14:05\n\n"
        "assistant:\n18 C at 14:05.\n\n"
        "user:\nThanks!"
    )


def test_to_text_of_a_tool_only_call_and_an_empty_pack() -> None:
    messages = [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": None, "tool_calls": [TIME]},
        {"role": "tool", "tool_call_id": "c2", "content": "14:05"},
    ]
    text = chat_pack(messages).to_text()
    assert text == "user:\ntime?\n\nassistant:\n-> call c2: clock({})\n\ntool [c2]:\n14:05"
    empty = from_openai_messages(messages).pack(0, as_of=AS_OF)
    assert empty.to_text() == ""
    assert empty.to_anthropic() == {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "(earlier messages omitted)"}]}
        ]
    }


def test_json_payloads_render_as_canonical_json_in_every_renderer() -> None:
    """A tool result and a sourced document with JSON payloads: canonical JSON, the same bytes."""
    call = {"id": "j1", "type": "function", "function": {"name": "lookup", "arguments": '{"k":1}'}}
    items = [
        item("q", "user", "Order status?"),
        ContextItem(
            id="call",
            role="assistant",
            payload=Json(value={"tool_calls": [call]}),
            created_at=START,
            group_id="g",
            metadata={"tool_call_ids": ["j1"]},
        ),
        ContextItem(
            id="result",
            role="tool",
            payload=Json(value={"status": "shipped", "eta": {"days": 2}}),
            created_at=START,
            group_id="g",
            metadata={"tool_call_id": "j1"},
        ),
        ContextItem(
            id="spec",
            role="document",
            payload=Json(value={"b": [1, 2], "a": "x"}),
            created_at=START,
            sources=(WIKI,),
        ),
    ]
    result = pack(items_to_frame(items), 1000, PackOptions(as_of=AS_OF))
    assert result.to_openai() == [
        {"role": "user", "content": "Order status?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": '{"eta":{"days":2},"status":"shipped"}', "tool_call_id": "j1"},
        {"role": "user", "content": 'Source: kb://wiki/42\n{"a":"x","b":[1,2]}'},
    ]
    assert result.used_tokens == cookbook_tokens(result.messages, CL100K.encoding)
    assert result.to_anthropic()["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Order status?"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "j1", "name": "lookup", "input": {"k": 1}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "j1",
                    "content": '{"eta":{"days":2},"status":"shipped"}',
                },
                {"type": "text", "text": 'Source: kb://wiki/42\n{"a":"x","b":[1,2]}'},
            ],
        },
    ]
    assert result.to_text() == (
        "user:\nOrder status?\n\n"
        'assistant:\n-> call j1: lookup({"k":1})\n\n'
        'tool [j1]:\n{"eta":{"days":2},"status":"shipped"}\n\n'
        'user:\nSource: kb://wiki/42\n{"a":"x","b":[1,2]}'
    )


def test_a_named_tool_result_in_anthropic_and_text() -> None:
    messages = [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": None, "tool_calls": [TIME]},
        {"role": "tool", "name": "clock", "tool_call_id": "c2", "content": "14:05"},
    ]
    result = chat_pack(messages)
    assert result.to_openai() == messages
    assert result.to_anthropic()["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c2", "content": "14:05"}],
    }
    assert result.to_text().endswith("tool [c2] (clock):\n14:05")


# ---------------------------------------------------------------------------
# The protocol


class JsonLines:
    """A user's renderer: one JSON line per message, ids first."""

    def render(self, pack: ContextPack) -> str:
        return "\n".join(
            json.dumps({"id": i, **m}) for i, m in zip(pack.ids, pack.messages, strict=True)
        )


def test_render_calls_a_user_renderer() -> None:
    result = chat_pack(CONVERSATION[:3])
    renderer: Renderer[str] = JsonLines()
    assert isinstance(renderer, Renderer)
    assert result.render(renderer).splitlines() == [
        '{"id": "c:0", "role": "system", "content": "Be brief."}',
        '{"id": "c:1", "role": "developer", "content": "Answer in English."}',
        '{"id": "c:2", "role": "user", "content": "Weather and time in Paris?", "name": "ada"}',
    ]


def test_renderings_are_deterministic() -> None:
    first, second = chat_pack(CONVERSATION), chat_pack(CONVERSATION)
    assert json.dumps(first.to_anthropic()) == json.dumps(second.to_anthropic())
    assert first.to_text() == second.to_text()
    assert first.manifest.to_json() == second.manifest.to_json()


FAILED_RESULTS: dict[str, Any] = {
    "no content": None,
    "empty text": "",
    "whitespace": " \n",
    "no block": [],
    "a blank text block": [{"type": "text", "text": "  "}],
}


@pytest.mark.parametrize("content", FAILED_RESULTS.values(), ids=list(FAILED_RESULTS))
def test_a_failed_tool_result_without_content_is_sent_without_its_error_mark(content: Any) -> None:
    """Anthropic refuses ``is_error`` on a blank ``tool_result``; a failure with text keeps it."""

    def last_result(result: Any) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": "t1", "is_error": True}
        if result is not None:
            block["content"] = result
        frame = from_anthropic_messages(
            [
                {"role": "user", "content": "Run it."},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}],
                },
                {"role": "user", "content": [block]},
            ]
        )
        request = frame.pack(1000, as_of=AS_OF, target="anthropic").to_anthropic()
        assert anthropic_faults(request) == []
        sent: dict[str, Any] = request["messages"][-1]["content"][0]
        return sent

    assert "is_error" not in last_result(content)
    assert last_result([{"type": "text", "text": "exit 1"}])["is_error"] is True


def test_the_anthropic_rules_refuse_a_failed_tool_result_without_content() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}
    request = [
        {"role": "user", "content": "Run it."},
        {"role": "assistant", "content": [use]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True}],
        },
    ]
    assert [(f.index, f.rule) for f in anthropic_faults(request)] == [(2, "tool_error_empty")]
