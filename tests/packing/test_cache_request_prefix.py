"""The cache report and the Anthropic marks read the request as the target sends it.

Every expected value here is computed from the rendered requests
(``to_openai()``, ``to_anthropic(cache=True)``) and the manifests' item
tokens, not from the code under test.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.formats.openai import from_openai_messages
from cognoxium.packing import ContextPack
from cognoxium.packing.cache_models import get_cache_model

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
LOOKBACK = 20


def _item_tokens(pack: ContextPack) -> dict[str, int]:
    entries = pack.manifest.to_polars().filter(pl.col("pack_position").is_not_null())
    return dict(entries.select("id", "tokens").iter_rows())


def _message_of(item_id: str) -> int:
    """The index of the chat message an imported item comes from (``c:3`` and ``c:3.1``: 3)."""
    return int(item_id.split(":")[1].split(".")[0])


def _leading_equal(a: list[Any], b: list[Any]) -> int:
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


def _with_image(i: int) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": f"What is wrong in screenshot {i}?"},
            {"type": "image_url", "image_url": {"url": f"https://example.com/s{i}.png"}},
        ],
    }


def _screenshots(turns: int) -> list[dict[str, Any]]:
    """A chat whose user turns are a text and an image, each answered at length."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be helpful. " * 400}]
    for i in range(turns):
        messages += [
            _with_image(i),
            {"role": "assistant", "content": f"Answer {i}: " + "detail " * 100},
        ]
    return [*messages, {"role": "user", "content": "How do I fix it?"}]


def _automatic_cached(model_name: str, shared: int, previous_tokens: int) -> int:
    model = get_cache_model(model_name)
    shared = min(shared, previous_tokens)
    if shared < model.min_tokens or previous_tokens < model.min_tokens:
        return 0
    return model.min_tokens + (shared - model.min_tokens) // model.increment * model.increment


@pytest.mark.parametrize("turns", [1, 2, 4])
def test_a_message_of_several_items_is_shared_whole(turns: int) -> None:
    messages = _screenshots(turns + 1)
    kw: dict[str, Any] = {"as_of": WHEN, "cache_model": "openai:gpt-5"}
    first = from_openai_messages(messages[: 2 * turns], conversation_id="c").pack(20000, **kw)
    second = from_openai_messages(messages, conversation_id="c").pack(20000, previous=first, **kw)
    shared = _leading_equal(first.to_openai(), second.to_openai())
    tokens = _item_tokens(second)
    ids = [i for i in second.ids if _message_of(i) < shared]
    report = second.manifest.cache
    assert report is not None
    assert report.prefix_items == shared == len(first.messages)
    assert report.prefix_ids == ids
    assert any("." in i for i in ids)  # the image parts are in the prefix
    assert report.prefix_tokens == sum(tokens[i] for i in ids)
    expected = _automatic_cached("openai:gpt-5", report.prefix_tokens, first.used_tokens)
    assert report.cached_tokens == expected > 0


def test_the_screenshot_conversation_reads_both_shared_messages() -> None:
    msgs = [
        *_screenshots(1)[:2],
        {"role": "assistant", "content": "The deploy failed: " + "detail " * 100},
        {"role": "user", "content": "How do I fix it?"},
    ]
    kw: dict[str, Any] = {"as_of": WHEN, "cache_model": "openai:gpt-5"}
    first = from_openai_messages(msgs[:2], conversation_id="c").pack(8000, **kw)
    second = from_openai_messages(msgs, conversation_id="c").pack(8000, previous=first, **kw)
    report = second.manifest.cache
    assert report is not None
    tokens = _item_tokens(second)
    assert report.prefix_ids == ["c:0", "c:1.0", "c:1.1"]
    assert report.prefix_tokens == tokens["c:0"] + tokens["c:1.0"] + tokens["c:1.1"]
    assert report.cached_tokens == _automatic_cached("openai:gpt-5", report.prefix_tokens, 10**9)


def _flat_blocks(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's blocks in the order Anthropic reads them: the system block first."""
    system = request.get("system")
    blocks = [] if system is None else (system if isinstance(system, list) else [system])
    blocks = [b if isinstance(b, dict) else {"type": "text", "text": b} for b in blocks]
    return blocks + [b for m in request["messages"] for b in m["content"]]


def _without_marks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(blocks)
    for b in out:
        b.pop("cache_control", None)
    return out


def _marked(blocks: list[dict[str, Any]]) -> list[int]:
    """The 1-based ends (blocks from the start) of the marked prefixes."""
    return [k + 1 for k, b in enumerate(blocks) if "cache_control" in b]


def _system_tokens(pack: ContextPack) -> int:
    entries = pack.manifest.to_polars().filter(pl.col("pack_position").is_not_null())
    system = entries.filter(pl.col("role").cast(pl.String).is_in(["system", "developer"]))
    return int(system.get_column("tokens").sum())


def _anthropic_cached(first: ContextPack, second: ContextPack, tokens_at: dict[int, int]) -> int:
    """What Anthropic reads: the longest earlier mark shared and in a new mark's lookback.

    ``tokens_at`` gives the tokens of the earlier request's prefix ending at each of its
    marks but the system block's (block 1), which is every system item's.
    """
    tokens_at = {1: _system_tokens(first), **tokens_at}
    before = _flat_blocks(first.to_anthropic(cache=True))
    after = _flat_blocks(second.to_anthropic(cache=True))
    shared = _leading_equal(_without_marks(before), _without_marks(after))
    new = _marked(after)
    read = [
        tokens_at[p]
        for p in _marked(before)
        if p <= shared and any(0 <= j - p < LOOKBACK for j in new)
    ]
    minimum = get_cache_model("anthropic").min_tokens
    return max([t for t in read if t >= minimum], default=0)


def test_anthropic_reads_the_earlier_history_mark_of_a_multipart_chat() -> None:
    messages = _screenshots(3)
    kw: dict[str, Any] = {"as_of": WHEN, "target": "anthropic", "cache_model": "anthropic"}
    first = from_openai_messages(messages[:4], conversation_id="c").pack(20000, **kw)
    second = from_openai_messages(messages, conversation_id="c").pack(20000, previous=first, **kw)
    history = sum(_item_tokens(first).values())  # all of the first pack is history
    report = second.manifest.cache
    assert report is not None
    # the first request marks its last block: the prefix of every item it sent
    assert _marked(_flat_blocks(first.to_anthropic(cache=True)))[-1] == len(
        _flat_blocks(first.to_anthropic())
    )
    end = len(_flat_blocks(first.to_anthropic()))
    assert report.cached_tokens == _anthropic_cached(first, second, {end: history}) == history
    assert report.prefix_tokens == history
    assert report.cache_write_tokens == report.stable_tokens - history


def _chat_with_gaps(long_at: int, docs: int) -> CognitionFrame:
    at = "2025-12-01T00:00:00Z"
    rows = [
        {
            "id": "sys",
            "role": "system",
            "retention": "required",
            "text": "Rules. " * 1200,
            "created_at": at,
        }
    ]
    rows += [
        {
            "id": f"m{i:02}",
            "role": "user" if i % 2 == 0 else "assistant",
            "created_at": at,
            "text": f"message {i} " + ("long " * 600 if i == long_at else "short " * 20),
        }
        for i in range(12)
    ]
    rows += [
        {"id": f"doc{k}", "role": "document", "text": f"FAQ {k} " * 30, "created_at": at}
        for k in range(docs)
    ]
    return CognitionFrame(rows)


@pytest.mark.parametrize("target", ["openai", "anthropic"])
@pytest.mark.parametrize("note", [None, "({n} omitted)"])
@pytest.mark.parametrize(("long_at", "docs"), [(5, 1), (3, 2), (7, 0), (10, 1)])
def test_the_history_mark_is_on_the_last_history_block(
    target: str, note: str | None, long_at: int, docs: int
) -> None:
    p = _chat_with_gaps(long_at, docs).pack(
        3100, as_of=WHEN, gaps="fill", gap_note=note, target=target
    )
    assert p.manifest.gap_records  # the long message left a hole
    request = p.to_anthropic(cache=True)
    blocks = [b for m in request["messages"] for b in m["content"]]
    documents = [k for k, b in enumerate(blocks) if b.get("text", "").startswith("FAQ")]
    last_history = (documents[0] if documents else len(blocks)) - 1
    marked = [k for k, b in enumerate(blocks) if "cache_control" in b]
    assert marked[-1] == last_history
    assert blocks[last_history]["text"].startswith("message 11")


def _policy_chat() -> list[dict[str, Any]]:
    base: list[dict[str, Any]] = [{"role": "system", "content": "Policy. " * 1500}]
    for i in range(6):
        base += [
            {"role": "user", "content": f"q{i} " + "word " * 200},
            {"role": "assistant", "content": f"a{i} " + "word " * 200},
        ]
    return base


@pytest.mark.parametrize("where", ["middle", "end", "first"])
def test_a_changed_anthropic_system_prompt_shares_nothing(where: str) -> None:
    base = _policy_chat()
    kw: dict[str, Any] = {"as_of": WHEN, "target": "anthropic", "cache_model": "anthropic"}
    start = [*base, {"role": "user", "content": "next?"}]
    first = from_openai_messages(start, conversation_id="c").pack(20000, **kw)
    changed = [*start, {"role": "assistant", "content": "ok"}]
    if where == "first":
        changed[0] = {"role": "system", "content": "Policy v2. " * 1500}
        changed.append({"role": "user", "content": "and now?"})
    elif where == "middle":
        changed += [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "and now?"},
        ]
    else:
        changed += [
            {"role": "user", "content": "and now?"},
            {"role": "developer", "content": "Be terse."},
        ]
    second = from_openai_messages(changed, conversation_id="c").pack(20000, previous=first, **kw)
    before, after = first.to_anthropic(cache=True), second.to_anthropic(cache=True)
    assert before["system"] != after["system"]
    report = second.manifest.cache
    assert report is not None
    assert (report.prefix_items, report.prefix_tokens, report.prefix_ids) == (0, 0, [])
    assert report.cached_tokens == _anthropic_cached(first, second, {}) == 0
    # every marked token is written again, at 1.25x
    assert report.cache_write_tokens == report.stable_tokens
    assert report.billed_tokens == pytest.approx(
        report.uncached_tokens + 1.25 * report.cache_write_tokens
    )


def test_an_unchanged_mid_conversation_system_message_is_shared() -> None:
    base = _policy_chat()
    kw: dict[str, Any] = {"as_of": WHEN, "target": "anthropic", "cache_model": "anthropic"}
    start = [
        *base,
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "next?"},
    ]
    first = from_openai_messages(start, conversation_id="c").pack(20000, **kw)
    more = [*start, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}]
    second = from_openai_messages(more, conversation_id="c").pack(20000, previous=first, **kw)
    report = second.manifest.cache
    assert report is not None
    assert report.prefix_ids == first.ids
    history = sum(_item_tokens(first).values())
    end = len(_flat_blocks(first.to_anthropic()))
    assert report.cached_tokens == _anthropic_cached(first, second, {end: history}) == history


def test_the_openai_prefix_stops_at_a_new_system_message_only() -> None:
    base = _policy_chat()
    kw: dict[str, Any] = {"as_of": WHEN, "cache_model": "openai:gpt-5"}
    start = [*base, {"role": "user", "content": "next?"}]
    first = from_openai_messages(start, conversation_id="c").pack(20000, **kw)
    changed = [
        *start,
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "Answer in French."},
    ]
    second = from_openai_messages(changed, conversation_id="c").pack(20000, previous=first, **kw)
    report = second.manifest.cache
    assert report is not None
    assert report.prefix_ids == first.ids  # OpenAI reads the messages in order
    assert report.prefix_tokens == sum(_item_tokens(first).values())


def _agent(steps: int, system: str = "You are an agent. " * 50) -> tuple[ContextPack, ContextPack]:
    m: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Audit. " + "context " * 1200},
    ]
    kw: dict[str, Any] = {"as_of": WHEN, "target": "anthropic", "cache_model": "anthropic"}
    first = from_openai_messages(m, conversation_id="c").pack(90000, **kw)
    for i in range(steps):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "ssh", "arguments": json.dumps({"host": f"h{i}"})},
        }
        m += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"h{i}: ok"},
        ]
    m += [
        {"role": "assistant", "content": "All fine."},
        {"role": "user", "content": "Anything else?"},
    ]
    second = from_openai_messages(m, conversation_id="c").pack(90000, previous=first, **kw)
    return first, second


@pytest.mark.parametrize("steps", [3, 9, 12, 20, 30, 45, 60])
@pytest.mark.parametrize("system", ["You are an agent. " * 50, "You are an agent. " * 400])
def test_a_long_agent_turn_reads_the_cache_only_within_the_lookback(
    steps: int, system: str
) -> None:
    first, second = _agent(steps, system)
    before = first.to_anthropic(cache=True)
    after = second.to_anthropic(cache=True)
    marks = _marked(_flat_blocks(after))
    assert 1 <= len(marks) <= 4
    # the history's mark is the last block; each mark's lookback reaches the next one
    assert marks[-1] == len(_flat_blocks(after))
    history = sum(_item_tokens(first).values())
    end = len(_flat_blocks(before))
    expected = _anthropic_cached(first, second, {end: history})
    report = second.manifest.cache
    assert report is not None
    assert report.cached_tokens == expected
    if steps <= 20:  # the marks bridge 40 blocks and more: the earlier prefix is read
        assert expected == history


def test_the_repro_agent_turn_reads_its_earlier_prefix() -> None:
    first, second = _agent(12)
    report = second.manifest.cache
    assert report is not None
    tokens = _item_tokens(first)
    assert report.cached_tokens == tokens["c:0"] + tokens["c:1"]
    blocks = _flat_blocks(second.to_anthropic(cache=True))
    assert any(0 <= j - 2 < LOOKBACK for j in _marked(blocks))  # the earlier mark ends block 2


def test_a_turn_past_every_lookback_is_billed_as_a_miss() -> None:
    _, second = _agent(60)
    report = second.manifest.cache
    assert report is not None
    assert report.prefix_tokens > 0  # the bytes are shared ...
    assert report.cached_tokens == 0  # ... but no mark looks back far enough
    assert report.cache_write_tokens == report.stable_tokens


def test_the_reports_are_the_same_bytes_on_a_rerun() -> None:
    first = [p.manifest.to_json() for p in _agent(25, "You are an agent. " * 400)]
    again = [p.manifest.to_json() for p in _agent(25, "You are an agent. " * 400)]
    assert first == again


def test_a_cache_model_checks_its_lookback() -> None:
    from cognoxium.exceptions import PackError
    from cognoxium.packing.cache_models import CacheModel

    with pytest.raises(PackError, match="lookback_blocks must be a whole number > 0"):
        CacheModel(
            name="mine",
            kind="breakpoints",
            min_tokens=1024,
            read_multiplier=0.1,
            ttl_seconds=300,
            max_breakpoints=4,
            lookback_blocks=0,
        )
    assert get_cache_model("anthropic").lookback_blocks == LOOKBACK


def _turns_chat(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Policy. " * 1500}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"q{i}"},
            {"role": "assistant", "content": f"a{i}"},
        ]
    return messages


def _continued(first: dict[str, Any], then: dict[str, Any]) -> Any:
    """The cache report of a turn packed with ``then`` after two packed with ``first``."""
    chat = _turns_chat(3)
    start = from_openai_messages(chat[:2], conversation_id="c").pack(20000, as_of=WHEN, **first)
    earlier = from_openai_messages(chat[:4], conversation_id="c").pack(
        20000, as_of=WHEN, previous=start, **first
    )
    now = from_openai_messages([*chat, {"role": "user", "content": "next"}], conversation_id="c")
    report = now.pack(20000, as_of=WHEN, previous=earlier, **then).manifest.cache
    assert report is not None
    return report


ANTHROPIC = {"target": "anthropic", "cache_model": "anthropic"}


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ({}, ANTHROPIC),
        ({"target": "anthropic"}, {"cache_model": "openai:gpt-5"}),
        ({"cache_model": "openai:gpt-5"}, {"cache_model": "anthropic"}),
        (ANTHROPIC, {"target": "anthropic", "cache_model": "openai:gpt-5"}),
    ],
)
def test_a_request_to_another_provider_reads_nothing_of_the_earlier_ones_cache(
    first: dict[str, Any], then: dict[str, Any]
) -> None:
    report = _continued(first, then)
    assert (report.prefix_items, report.prefix_tokens, report.prefix_ids) == (0, 0, [])
    assert report.cached_tokens == 0
    assert report.billed_tokens >= report.input_tokens


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ({}, {"cache_model": "openai:gpt-5"}),
        (ANTHROPIC, ANTHROPIC),
        ({"target": "anthropic"}, ANTHROPIC),
    ],
)
def test_a_request_to_the_same_provider_reads_the_earlier_ones_cache(
    first: dict[str, Any], then: dict[str, Any]
) -> None:
    report = _continued(first, then)
    assert report.prefix_tokens > 3000
    assert report.cached_tokens > 2900  # OpenAI caches whole 128-token steps


@pytest.mark.parametrize("text", ["Working on it.\n", "Working on it. ", "Done.\n\n"])
def test_an_anthropic_reply_ending_in_whitespace_is_sent_the_same_once_a_question_follows(
    text: str,
) -> None:
    # The whitespace ending the last assistant turn was stripped (the API refuses it in a
    # prefill) and sent again once a user message followed: the bytes of the earlier
    # request changed with no eviction, and the provider's cache missed from there.
    history = [
        {"role": "system", "content": "You are an agent. " * 200},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": text},
    ]
    first = from_openai_messages(history).pack(4000, as_of=WHEN, target="anthropic")
    later = from_openai_messages([*history, {"role": "user", "content": "and?"}]).pack(
        4000,
        as_of=WHEN,
        target="anthropic",
        previous=first,
        cache_model="anthropic:claude-sonnet-4-5",
    )
    sent, now = first.to_anthropic()["messages"], later.to_anthropic()["messages"]
    assert _without_marks(_flat_blocks({"messages": now[:2]})) == _without_marks(
        _flat_blocks({"messages": sent})
    )
    assert sent[1]["content"][0]["text"] == text.rstrip()
    assert later.manifest.cache.prefix_items == 3
