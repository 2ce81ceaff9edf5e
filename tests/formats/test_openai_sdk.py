"""``pack.messages`` and ``to_openai_messages`` validate as the OpenAI SDK's request types.

Each message goes through a pydantic ``TypeAdapter`` of
``openai.types.chat.ChatCompletionMessageParam`` (the ``sdk`` extra). Typed
dicts ignore unknown keys and validate iterables lazily, so the validated
message is materialised and must equal the message sent: nothing unknown,
nothing coerced.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import TypeAdapter, ValidationError

from cognoxium.formats.openai import (
    from_openai_messages,
    openai_messages_to_items,
    to_openai_messages,
)
from cognoxium.governance.policies import BoundaryPolicy
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from tests.image_files import jpeg, png
from tests.packing.test_chat_costs import conversations, others

chat_types = pytest.importorskip("openai.types.chat")
MESSAGE = TypeAdapter(chat_types.ChatCompletionMessageParam)

START = datetime(2024, 5, 1, tzinfo=UTC)
AS_OF = START + timedelta(days=1)


def materialised(value: Any) -> Any:
    """``value`` with every lazily validated iterable read into a list."""
    if isinstance(value, dict):
        return {key: materialised(inner) for key, inner in value.items()}
    if isinstance(value, list | Iterator):
        return [materialised(inner) for inner in value]
    return value


def assert_sdk_valid(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        assert materialised(MESSAGE.validate_python(message)) == message, message


CALL = {
    "id": "call_fx_1",
    "type": "function",
    "function": {"name": "convert", "arguments": '{"amount":20,"from":"EUR","to":"USD"}'},
}
CHAT = [
    {"role": "system", "content": "Answer briefly.", "name": "rules"},
    {"role": "developer", "content": "Prefer metric units."},
    {"role": "user", "content": "Convert 20 EUR to USD.", "name": "ada"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_fx_1", "content": "21.60"},
    {"role": "assistant", "content": "About 21.60 USD.", "name": "bot"},
]


def image_items() -> list[ContextItem]:
    def item(i: str, role: str, payload: dict[str, Any], **metadata: Any) -> ContextItem:
        return ContextItem(id=i, role=role, payload=payload, metadata=metadata, created_at=START)

    return [
        item("photo", "user", {"kind": "binary", "data": png(640, 480)}, media_type="image/png"),
        item(
            "scan",
            "memory",
            {"kind": "binary", "data": jpeg(100, 80)},
            media_type="image/jpeg",
            detail="low",
        ),
        item(
            "cat", "document", {"kind": "reference", "uri": "https://x.org/c.webp", "title": "Cat"}
        ),
        item("page", "document", {"kind": "reference", "uri": "https://x.org/a", "title": "Spec"}),
        item("facts", "document", {"kind": "json", "value": {"rate": 1.08, "pair": "EURUSD"}}),
        item("log", "tool", {"kind": "text", "text": "exit code 0"}),
    ]


def test_text_tool_calls_tool_results_and_names_are_valid_sdk_messages() -> None:
    result = from_openai_messages(CHAT, conversation_id="fx").pack(1000, as_of=AS_OF)
    assert result.messages == CHAT
    assert_sdk_valid(result.messages)
    assert_sdk_valid(to_openai_messages(from_openai_messages(CHAT, conversation_id="fx")))


def test_images_documents_json_and_tool_output_are_valid_sdk_messages() -> None:
    df = items_to_frame(image_items())
    result = pack(df, 10_000, PackOptions(as_of=AS_OF))
    assert len(result.messages) == 6
    photo = result.messages[0]["content"][0]["image_url"]
    assert base64.b64decode(photo["url"].split(",", 1)[1]) == png(640, 480)
    assert_sdk_valid(result.messages)
    assert_sdk_valid(to_openai_messages(df))


def test_messages_a_policy_renders_as_data_are_valid_sdk_messages() -> None:
    items = openai_messages_to_items(CHAT, conversation_id="fx", start=START) + image_items()
    result = pack(items_to_frame(items), 10_000, PackOptions(as_of=AS_OF), policy=BoundaryPolicy())
    assert any(str(m["content"]).startswith("<untrusted-data") for m in result.messages)
    assert_sdk_valid(result.messages)


@pytest.mark.parametrize(
    "message",
    [
        {"role": "tool", "content": "21.60"},  # a tool result without its call id
        {"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "function": {}}]},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "u", "detail": 2}}],
        },
    ],
)
def test_the_sdk_check_rejects_what_the_api_rejects(message: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        materialised(MESSAGE.validate_python(message))


def test_the_sdk_check_sees_unknown_keys() -> None:
    with pytest.raises(AssertionError):
        assert_sdk_valid([{"role": "user", "content": "hi", "tool_call_id": "c1"}])


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conversations(), others())
def test_every_pack_sends_valid_sdk_messages(
    messages: list[dict[str, Any]], extra: list[ContextItem]
) -> None:
    items = openai_messages_to_items(messages, conversation_id="c", start=START) + extra
    result = pack(items_to_frame(items), 100_000, PackOptions(as_of=AS_OF))
    assert_sdk_valid(result.messages)
