"""A pack that continues an earlier one makes the earlier pack's unmarked cuts again.

An awaited tool result, or the question a chat ended on, is cut to fit
without a truncation mark of its own. Once the conversation goes on, it is
neither awaited nor the last message, so it had no mark in the next pack:
the continuing pack read it as changed (cut then, whole now), left it out
with reason ``gap`` though room was left, and the request lost the log the
model had just read and the earlier request as its prefix. Now every item
the earlier pack cut, marked or not, is sent cut again (``replayed_cuts``),
cut further only when what is left needs it, or evicted for the cache.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest

from cognoxium.formats.openai import from_openai_messages
from cognoxium.packing.packer import ContextPack

AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
LOG = "".join(f"line {i}: ERROR something failed in module {i % 97}\n" for i in range(20000))


def call(i: int) -> dict[str, Any]:
    arguments = json.dumps({"path": f"f{i}"})
    function = {"name": "read_file", "arguments": arguments}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": function}
    ]}  # fmt: skip


def result(i: int, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": text}


SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = [SYSTEM, {"role": "user", "content": "Why?"}]
FIRST = [*TASK, call(1), result(1, LOG)]
LATER = [*FIRST, call(2), result(2, "def f(): pass")]


def packed(messages: list[dict[str, Any]], budget: int, **options: Any) -> ContextPack:
    frame = from_openai_messages(messages, conversation_id="a")
    return frame.pack(budget, as_of=AS_OF, cache_model="openai:gpt-5", **options)


def entry(pack: ContextPack, item: str) -> dict[str, Any]:
    return pack.manifest.to_polars().row(by_predicate=pl.col("id") == item, named=True)


@pytest.mark.parametrize("target", ["openai", "anthropic"])
def test_an_awaited_result_cut_is_sent_cut_again_once_the_loop_goes_on(target: str) -> None:
    first = packed(FIRST, 2000, target=target)
    assert [t.id for t in first.manifest.truncations] == ["a:3"]
    later = packed(LATER, 2000, target=target, previous=first)
    assert later.ids == ["a:0", "a:1", "a:2", "a:3", "a:4", "a:5"]
    assert later.manifest.cache.replayed_cuts == ["a:3"]
    (cut,) = later.manifest.truncations
    assert cut.id == "a:3"
    assert 64 <= cut.kept_tokens <= first.manifest.truncations[0].kept_tokens
    assert later.manifest.cache.eviction_steps == 0
    assert later.used_tokens <= 2000


def test_with_room_the_cut_is_sent_as_it_was_and_the_earlier_request_is_the_prefix() -> None:
    first = packed(FIRST, 2000)
    later = packed(LATER, 2200, previous=first)
    assert later.to_openai()[: len(first.messages)] == first.to_openai()
    assert later.manifest.truncations == first.manifest.truncations
    assert later.manifest.cache.prefix_items == 4


@pytest.mark.parametrize("budget", [300, 1000, 2000])
def test_a_new_awaited_result_is_made_room_for_by_cutting_the_earlier_cut_further(
    budget: int,
) -> None:
    first = packed(FIRST, 2000)
    later = packed([*LATER, call(3), result(3, LOG[:40000])], budget, previous=first)
    assert later.ids == [f"a:{i}" for i in range(8)]
    cuts = {t.id: t.kept_tokens for t in later.manifest.truncations}
    assert cuts.keys() == {"a:3", "a:7"}
    assert cuts["a:3"] == 64  # cut to its floor before the new result is cut
    assert later.used_tokens == budget - later.remaining_tokens <= budget


def test_history_that_does_not_fit_beside_the_cut_evicts_it_for_the_cache_not_as_a_gap() -> None:
    first = packed(FIRST, 2000)
    reply = {"role": "assistant", "content": "word " * 1900}
    later = packed([*LATER, reply], 2000, previous=first)
    assert later.ids == ["a:0", "a:1", "a:4", "a:5", "a:6"]
    assert entry(later, "a:3")["reason"] == "evicted_for_cache"
    assert later.manifest.cache.evicted == ["a:2", "a:3"]


def test_a_question_cut_is_sent_cut_again_once_the_chat_goes_on() -> None:
    asked = [SYSTEM, {"role": "user", "content": "Why does it fail?\n" + LOG}]
    first = packed(asked, 1000)
    assert [t.id for t in first.manifest.truncations] == ["a:1"]
    going_on = [*asked, {"role": "assistant", "content": "A bad module."}]
    later = packed([*going_on, {"role": "user", "content": "Which one?"}], 1200, previous=first)
    assert later.ids == ["a:0", "a:1", "a:2", "a:3"]
    assert later.manifest.cache.replayed_cuts == ["a:1"]
    assert later.to_openai()[: len(first.messages)] == first.to_openai()


def test_an_item_changed_since_its_cut_is_not_cut_again() -> None:
    first = packed(FIRST, 2000)
    changed = [*TASK, call(1), result(1, "short now"), call(2), result(2, "ok")]
    later = packed(changed, 2000, previous=first)
    assert later.manifest.truncations == []
    assert later.manifest.cache.replayed_cuts == []
    assert "a:3" in later.ids


def test_continuing_a_cut_is_deterministic() -> None:
    first = packed(FIRST, 2000)
    again = [packed(LATER, 1500, previous=first).manifest.to_json() for _ in range(2)]
    assert again[0] == again[1]


def test_a_step_passed_over_after_an_eviction_does_not_end_the_tail_before_an_older_cut() -> None:
    # Found by tests/packing/test_agent_loops.py. The continuing pack's queue puts the
    # pinned task first, and "newer than every user message taken" was read from the
    # queue's order: the step that no longer fit ended the tail, and the older step,
    # its result cut as sent before (115 tokens), was left out as a gap with 168 free.
    history = [SYSTEM, {"role": "user", "content": "task"}]
    packs: list[ContextPack] = []
    for i, words in enumerate([600, 600, 150, 190]):
        history += [call(i), result(i, "log " * words)]
        packs.append(packed(history, 400, previous=packs[-1] if packs else None))
    before, last = packs[-2:]
    assert last.manifest.cache.evicted == ["a:2", "a:3"]
    assert last.ids == ["a:0", "a:1", "a:4", "a:5", "a:8", "a:9"]
    assert last.manifest.cache.replayed_cuts == ["a:5"]
    step = sum(entry(before, item)["tokens"] for item in ("a:6", "a:7"))
    assert entry(last, "a:7")["reason"] == "gap"  # passed over: it does not fit
    assert last.remaining_tokens < step
