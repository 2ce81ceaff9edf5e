"""Anthropic thinking blocks: kept on import, byte for byte, bound to their assistant message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cognoxium.exceptions import RecordError
from cognoxium.formats.anthropic import from_anthropic_messages, to_anthropic_messages
from cognoxium.formats.openai import to_openai_messages

SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/n3t=="
LOOP: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "I should call weather.\n", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Paris"}},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18 C"}],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "", "signature": "c2ln"},
            {"type": "text", "text": "It is 18 C in Paris."},
        ],
    },
]


def test_import_and_render_round_trip_is_byte_exact() -> None:
    cf = from_anthropic_messages(LOOP, conversation_id="c")
    request = to_anthropic_messages(cf)
    assert json.dumps(request["messages"]) == json.dumps(LOOP)
    rows = cf.select("id", "group_id").to_polars().rows()
    assert rows == [("c:0", None), ("c:1", "c:tools:1"), ("c:2", "c:tools:1"), ("c:3", None)]


def test_thinking_blocks_are_not_in_the_openai_messages() -> None:
    messages = to_openai_messages(from_anthropic_messages(LOOP))
    assert SIGNATURE not in json.dumps(messages)
    assert messages[1]["content"] == "Checking."
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]


def test_the_issue_example_imports() -> None:
    cf = from_anthropic_messages(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}],
            },
        ]
    )
    assistant = to_anthropic_messages(cf)["messages"][1]
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
    ]


def _reply(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "go"}, {"role": "assistant", "content": list(blocks)}]


THINK = {"type": "thinking", "thinking": "hmm", "signature": "s"}
USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}


@pytest.mark.parametrize(
    ("messages", "row", "field", "words"),
    [
        ([{"role": "user", "content": [THINK]}], 0, "content[0].type", "no thinking block"),
        (_reply({"type": "thinking", "thinking": "hmm"}), 1, "content[0].signature", "non-empty"),
        (_reply({**THINK, "signature": ""}), 1, "content[0].signature", "non-empty"),
        (_reply({"type": "redacted_thinking"}), 1, "content[0].data", "non-empty"),
        (_reply({**THINK, "thinking": 3}), 1, "content[0].thinking", "string"),
        (_reply(USE, THINK), 1, "content[1].type", "thinking blocks come first"),
        (_reply({**THINK, "extra": 1}), 1, "content[0].extra", "unknown key"),
    ],
)
def test_bad_thinking_blocks_name_the_row_and_field(
    messages: list[dict[str, Any]], row: int, field: str, words: str
) -> None:
    with pytest.raises(RecordError, match=words) as info:
        from_anthropic_messages(messages)
    assert (info.value.row, info.value.field) == (row, field)


def test_langchain_ai_message_thinking_blocks_are_kept() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    from cognoxium.formats.interop import from_langchain_messages

    cf = from_langchain_messages(
        [
            messages.HumanMessage("Weather in Paris?"),
            messages.AIMessage(
                content=[
                    {"type": "thinking", "thinking": "Call weather.", "signature": SIGNATURE},
                    {"type": "redacted_thinking", "data": "EmwK"},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "P"}},
                ],
                tool_calls=[{"name": "weather", "args": {"city": "P"}, "id": "t1"}],
            ),
            messages.ToolMessage("18 C", tool_call_id="t1"),
        ]
    )
    assistant = to_anthropic_messages(cf)["messages"][1]
    assert json.dumps(assistant["content"]) == json.dumps(
        [
            {"type": "thinking", "thinking": "Call weather.", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "EmwK"},
            {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "P"}},
        ]
    )
    assert SIGNATURE not in json.dumps(to_openai_messages(cf))
