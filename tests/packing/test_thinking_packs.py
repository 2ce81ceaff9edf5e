"""Packs of an agent loop with Anthropic thinking blocks: sent, counted and kept for Anthropic."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cognoxium.exceptions import MessageError
from cognoxium.formats.anthropic import from_anthropic_messages
from cognoxium.packing._renderers import anthropic_request
from cognoxium.packing.message_rules import validate_anthropic_messages
from cognoxium.packing.packer import ContextPack
from cognoxium.tokens.profiles import get_profile

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
PROFILE = get_profile("cl100k_base")
THOUGHTS = [
    "The user wants the weather in Paris; the weather tool takes a city name.",
    "Now the forecast for tomorrow, with the same tool and a day argument.",
    "Both results are in: answer briefly with today's and tomorrow's weather.",
]


def _think(n: int) -> dict[str, Any]:
    return {"type": "thinking", "thinking": THOUGHTS[n], "signature": f"c2lnbmF0dXJl{n}"}


def _step(n: int) -> list[dict[str, Any]]:
    """The assistant turn of step ``n`` (a tool call, or the answer) and the results it gets."""
    if n == 2:
        return [{"role": "assistant", "content": [_think(2), {"type": "text", "text": "18 C."}]}]
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "weather", "input": {"day": n}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"{18 + n} C"}
    return [
        {"role": "assistant", "content": [_think(n), use]},
        {"role": "user", "content": [result]},
    ]


def _loop(steps: int) -> list[dict[str, Any]]:
    opening = {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}
    return [opening] + [m for n in range(steps) for m in _step(n)]


def _pack(steps: int, target: str, previous: ContextPack | None = None) -> ContextPack:
    cf = from_anthropic_messages(_loop(steps), system="Be brief.", conversation_id="c")
    return cf.pack(2000, as_of=AS_OF, target=target, previous=previous)  # type: ignore[arg-type]


def test_anthropic_pack_sends_thinking_before_tool_use() -> None:
    request = _pack(1, "anthropic").to_anthropic()
    validate_anthropic_messages(request)
    assistant = request["messages"][1]
    assert [b["type"] for b in assistant["content"]] == ["thinking", "tool_use"]
    assert assistant["content"][0] == _think(0)


def test_openai_pack_leaves_thinking_out_and_does_not_count_it() -> None:
    anthropic, openai = _pack(2, "anthropic"), _pack(2, "openai")
    assert "signature" not in json.dumps(openai.to_openai())
    assert openai.to_openai() == anthropic.to_openai()
    thinking = int(PROFILE.count(THOUGHTS[:2]).sum())
    assert anthropic.used_tokens - openai.used_tokens == thinking
    tokens = {e.id: e.tokens for e in anthropic.manifest.entries}
    plain = {e.id: e.tokens for e in openai.manifest.entries}
    assert tokens["c:2"] - plain["c:2"] == int(PROFILE.count(THOUGHTS[:1])[0])


def test_a_tight_anthropic_budget_leaves_the_call_out_whole() -> None:
    fits = _pack(1, "openai")
    p = _pack(1, "anthropic")
    cf = from_anthropic_messages(_loop(1), system="Be brief.", conversation_id="c")
    tight = cf.pack(fits.used_tokens, as_of=AS_OF, target="anthropic")
    assert p.ids == fits.ids == ["c:0", "c:1", "c:2", "c:3"]
    assert tight.ids == ["c:0", "c:1"]
    reasons = {e.id: e.reason for e in tight.manifest.entries}
    assert reasons["c:2"] == reasons["c:3"]


def test_continuing_packs_keep_the_thinking_prefix_byte_identical() -> None:
    earlier = None
    requests = []
    for steps in (1, 2, 3):
        pack = _pack(steps, "anthropic", previous=earlier)
        request = pack.to_anthropic()
        validate_anthropic_messages(request)
        requests.append(request)
        earlier = pack
    for before, now in itertools.pairwise(requests):
        n = len(before["messages"])
        assert json.dumps(now["messages"][:n]) == json.dumps(before["messages"])
        assert now["system"] == before["system"]
    assert earlier is not None
    assert earlier.manifest.cache is not None
    assert earlier.manifest.cache.prefix_ids == [f"c:{i}" for i in range(6)]
    last = requests[-1]["messages"]
    firsts = [m["content"][0] for m in last if m["role"] == "assistant"]
    assert firsts == [_think(n) for n in range(3)]


def test_the_manifest_is_deterministic() -> None:
    assert _pack(3, "anthropic").manifest.to_json() == _pack(3, "anthropic").manifest.to_json()


@pytest.mark.parametrize(
    ("messages", "index"),
    [
        ([{"role": "user", "content": [_think(0), {"type": "text", "text": "hi"}]}], 0),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "a"}, _think(0)]},
            ],
            1,
        ),
    ],
)
def test_validate_anthropic_messages_places_thinking_blocks(
    messages: list[dict[str, Any]], index: int
) -> None:
    with pytest.raises(MessageError, match="thinking_misplaced") as info:
        validate_anthropic_messages(messages)
    assert info.value.index == index


def test_a_merged_assistant_turn_starts_with_its_thinking_blocks() -> None:
    call = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    request = anthropic_request(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Looking."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "r", "tool_call_id": "t1"},
        ],
        thinking={2: [_think(0)]},
    )
    validate_anthropic_messages(request)
    kinds = [b["type"] for b in request["messages"][1]["content"]]
    assert kinds == ["thinking", "text", "tool_use"]


@pytest.mark.parametrize("first", ["thinking and text", "text"])
def test_a_reply_that_thinking_blocks_go_before_is_not_reported_as_the_cached_prefix(
    first: str,
) -> None:
    # A turn starts with every thinking block it holds: a reply followed by an assistant
    # message with thinking blocks is sent with them before its text, not as it was sent
    # when it ended the request. The report still counted it in the prefix.
    text = {"type": "text", "text": "I'll check."}
    reply = [{"type": "thinking", "thinking": "plan", "signature": "s1"}, text]
    messages = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": reply if first == "thinking and text" else [text]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "call", "signature": "s2"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
        ]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}]},
    ]  # fmt: skip
    before = from_anthropic_messages(messages[:2], conversation_id="x")
    earlier = before.pack(1000, as_of=AS_OF, target="anthropic")
    later = from_anthropic_messages(messages, conversation_id="x").pack(
        1000, as_of=AS_OF, target="anthropic", previous=earlier
    )
    sent, now = earlier.to_anthropic()["messages"], later.to_anthropic()["messages"]
    assert now[1]["content"][: len(sent[1]["content"])] != sent[1]["content"]
    assert later.manifest.cache.prefix_ids == ["x:0"]
