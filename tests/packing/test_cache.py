"""Packs that continue an earlier pack: a byte-stable prefix, stepwise eviction, bills."""

from __future__ import annotations

import copy
import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.exceptions import PackError
from cognoxium.packing.cache import pack_breakpoints, shared_prefix_tokens
from cognoxium.packing.cache_models import (
    CacheModel,
    bill,
    cache_models,
    get_cache_model,
    register_cache_model,
)
from cognoxium.packing.message_rules import validate_anthropic_messages
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, pack
from cognoxium.tokens.profiles import get_profile
from tests.data import LOCOMO, needs_locomo
from tests.packing.chats import chat, documents

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
T0 = datetime(2024, 1, 1, tzinfo=UTC)
PROFILE = get_profile("cl100k_base")
SYSTEM = "You are the support assistant. Answer from the conversation. " * 12


def synthetic_chat(n: int) -> list[tuple[str, str, str]]:
    """A system prompt and ``n`` messages of varied length, user and assistant in turn."""
    out = [("sys", "system", SYSTEM)]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        words = 5 + (i * 7) % 30
        out.append((f"m{i:03}", role, f"message {i}: " + " ".join(f"w{k}" for k in range(words))))
    return out


def tokens_of(messages: list[dict[str, Any]]) -> list[int]:
    """The token ids of the messages' canonical JSON, one after another."""
    out: list[int] = []
    for message in messages:
        out += PROFILE.encoding.encode_ordinary(json.dumps(message))  # key order as sent
    return out


def replay(
    rows: list[tuple[str, str, str]], budget: int, **options: Any
) -> list[tuple[ContextPack, pl.DataFrame]]:
    """Pack the history at each user turn, each pack continuing the one before."""
    whole = chat(rows)
    packs: list[tuple[ContextPack, pl.DataFrame]] = []
    previous = None
    for row, (_, role, _) in enumerate(rows):
        if role != "user":
            continue
        history = whole.head(row + 1)
        previous = CognitionFrame.from_conformed(history).pack(
            budget, as_of=AS_OF, previous=previous, **options
        )
        packs.append((previous, history))
    return packs


def check_replay(packs: list[tuple[ContextPack, pl.DataFrame]]) -> int:
    """Check each pack against the one before, turn by turn; return the eviction steps seen."""
    steps = 0
    for (before, _), (after, history) in itertools.pairwise(packs):
        report = after.manifest.cache
        assert report is not None
        assert report.continues == before.manifest.digest
        old, new = before.to_openai(), after.to_openai()
        reasons = dict(after.manifest.to_polars().select("id", "reason").iter_rows())
        if report.eviction_steps == 0:
            # the whole earlier request is the new one's prefix, token for token
            assert tokens_of(new[: len(old)]) == tokens_of(old)
            assert report.prefix_items == len(old)
            assert report.evicted == []
            assert report.prefix_ids == before.ids
        else:
            steps += report.eviction_steps
            gone = [i for i in before.ids if i not in set(after.ids)]
            assert report.evicted == gone
            assert all(reasons[i] == "evicted_for_cache" for i in gone)
            assert report.eviction_detail is not None
            assert "sys" in after.ids  # required: never evicted
            first = next(m for m in after.messages if m["role"] != "system")
            assert first["role"] == "user"  # the history left starts on a user turn
        assert report.prefix_tokens == sum(
            t
            for i, t in after.manifest.to_polars().select("id", "tokens").iter_rows()
            if i in set(report.prefix_ids)
        )
        # the newest messages are always sent
        assert set(history.get_column("id").tail(6).to_list()) <= set(after.ids)
    return steps


def test_continuing_packs_keep_the_prefix_and_evict_in_steps() -> None:
    packs = replay(synthetic_chat(200), 2000)
    steps = check_replay(packs)
    assert steps >= 2  # the history outgrows the budget several times
    # between two eviction steps several turns share the prefix
    reports = [p.manifest.cache for p, _ in packs[1:]]
    assert sum(r is not None and r.eviction_steps == 0 for r in reports) >= 4 * steps


def test_a_larger_share_evicts_more_at_once_and_less_often() -> None:
    small = replay(synthetic_chat(200), 2000, eviction_share=0.2)
    large = replay(synthetic_chat(200), 2000, eviction_share=0.6)

    def steps(packs: list[tuple[ContextPack, pl.DataFrame]]) -> int:
        return sum(p.manifest.cache.eviction_steps for p, _ in packs[1:] if p.manifest.cache)

    def sent(packs: list[tuple[ContextPack, pl.DataFrame]]) -> float:
        return sum(p.used_tokens for p, _ in packs) / len(packs)

    check_replay(small)
    check_replay(large)
    assert steps(large) < steps(small)
    assert sent(large) < sent(small)


def test_a_sliding_window_changes_the_prefix_that_a_continuing_pack_keeps() -> None:
    rows = synthetic_chat(120)
    whole = chat(rows)
    last = len(rows) - 2  # a user turn
    assert rows[last][1] == "user"
    before = CognitionFrame.from_conformed(whole.head(last - 1)).rank("recency")
    window = CognitionFrame.from_conformed(whole.head(last + 1)).rank("recency")
    earlier = before.pack(900, as_of=AS_OF)
    moved = window.pack(900, as_of=AS_OF)
    assert moved.messages[1] != earlier.messages[1]  # the window moved on: a new prefix
    kept = CognitionFrame.from_conformed(whole.head(last + 1)).pack(
        1100, as_of=AS_OF, previous=earlier
    )
    report = kept.manifest.cache
    assert report is not None
    assert report.eviction_steps == 0
    assert kept.messages[: len(earlier.messages)] == earlier.messages
    assert kept.ids[len(earlier.ids) :] == [rows[last - 1][0], rows[last][0]]


def test_continuing_packs_are_deterministic() -> None:
    rows = synthetic_chat(60)
    first = [p.manifest.to_json() for p, _ in replay(rows, 700, cache_model="anthropic")]
    again = [p.manifest.to_json() for p, _ in replay(rows, 700, cache_model="anthropic")]
    assert first == again
    assert any('"evicted_for_cache"' in text for text in first)


def test_the_manifest_bills_the_input_against_the_earlier_pack() -> None:
    rows = synthetic_chat(80)
    for name in ("openai:gpt-5", "anthropic:claude-sonnet-4-5"):
        packs = replay(rows, 2000, cache_model=name)
        model = get_cache_model(name)
        for (before, _), (after, _) in itertools.pairwise(packs):
            report = after.manifest.cache
            assert report is not None
            assert report.cache_model == name
            _sys_before, stable_before = pack_breakpoints(
                [m["role"] for m in before.messages], _tokens(before)
            )
            _sys_after, stable_after = pack_breakpoints(
                [m["role"] for m in after.messages], _tokens(after)
            )
            marks = model.kind == "breakpoints"
            expected = bill(
                model,
                input_tokens=after.used_tokens,
                shared_tokens=report.prefix_tokens,
                previous_input_tokens=before.used_tokens,
                previous_breakpoints=[stable_before] if marks else [],
                breakpoints=[stable_after] if marks else [],
            )
            assert report.input_tokens == after.used_tokens
            assert report.cached_tokens == expected.cached_tokens
            assert report.cache_write_tokens == expected.cache_write_tokens
            assert report.billed_tokens == expected.billed_tokens
            assert (
                report.cached_tokens + report.cache_write_tokens + report.uncached_tokens
                == after.used_tokens
            )
        # once the history passes the minimum, a turn reads most of its input from the cache
        last = packs[-1][0].manifest.cache
        assert last is not None
        assert last.cached_tokens > 0.8 * last.input_tokens


def _tokens(p: ContextPack) -> list[int]:
    entries = p.manifest.to_polars().filter(pl.col("pack_position").is_not_null())
    return entries.sort("pack_position").get_column("tokens").to_list()


def test_ranked_documents_go_after_the_stable_prefix() -> None:
    rows = synthetic_chat(30)
    whole = chat(rows)
    previous: ContextPack | None = None
    for turn, row in enumerate(r for r, t in enumerate(rows) if t[1] == "user"):
        docs = documents(
            [f"doc{turn}-{k}" for k in range(2)],
            [f"retrieved passage {turn} {k} " + "text " * 20 for k in range(2)],
            [2.0, 1.0],
        )
        frame = pl.concat([docs, whole.head(row + 1)])  # documents first in the input
        packed = pack(frame, 2000, PackOptions(as_of=AS_OF), previous=previous)
        if previous is None:  # a pack of its own: input order
            assert packed.ids[:2] == ["doc0-0", "doc0-1"]
        else:
            assert packed.ids[-2:] == [f"doc{turn}-0", f"doc{turn}-1"]
            roles = [m["role"] for m in packed.messages]
            assert roles[-2:] == ["user", "user"]
            assert roles[0] == "system"
        if turn >= 2:  # the earlier pack's history is this one's prefix
            assert previous is not None
            report = packed.manifest.cache
            assert report is not None
            stable = len(previous.ids) - 2
            assert packed.messages[:stable] == previous.messages[:stable]
            assert report.prefix_items == stable
        previous = packed


def test_a_continuing_pack_checks_its_arguments() -> None:
    rows = chat(synthetic_chat(4))
    earlier = pack(rows, 500, PackOptions(as_of=AS_OF))
    with pytest.raises(PackError, match="previous must be the ContextPack"):
        pack(rows, 500, PackOptions(as_of=AS_OF), previous=earlier.manifest)  # type: ignore[arg-type]
    with pytest.raises(PackError, match="token profile"):
        pack(rows, 500, PackOptions(as_of=AS_OF, profile="o200k_base"), previous=earlier)
    for bad in (0, -0.5, 1.5, float("nan"), True, "half"):
        with pytest.raises(PackError, match="eviction_share must be a number in"):
            PackOptions(eviction_share=bad)  # type: ignore[arg-type]
    with pytest.raises(PackError, match="no cache model named 'nope'"):
        PackOptions(cache_model="nope")
    assert PackOptions(eviction_share=1).eviction_share == 1.0


def test_an_unchanged_history_is_sent_again_whole() -> None:
    rows = chat(synthetic_chat(10))
    first = pack(rows, 5000, PackOptions(as_of=AS_OF))
    again = pack(rows, 5000, PackOptions(as_of=AS_OF), previous=first)
    assert again.messages == first.messages
    report = again.manifest.cache
    assert report is not None
    assert report.prefix_items == len(first.ids)
    assert report.prefix_tokens == first.used_tokens - PROFILE.tokens_per_pack


def test_an_edited_message_ends_the_prefix() -> None:
    rows = synthetic_chat(10)
    first = pack(chat(rows), 5000, PackOptions(as_of=AS_OF))
    rows[4] = (rows[4][0], rows[4][1], "an edited message")
    again = pack(chat(rows), 5000, PackOptions(as_of=AS_OF), previous=first)
    report = again.manifest.cache
    assert report is not None
    assert report.prefix_items == 4
    assert again.ids == first.ids  # nothing needed evicting: the edit is sent


def test_history_the_earlier_pack_left_out_after_its_prefix_is_not_pinned_as_new() -> None:
    # m00 and m02 were left out for the budget. Continued with nothing new, the pack
    # makes the same choice (it pinned them as new messages, and dropped the document
    # for them), and sends the document where the earlier pack did, amid the history
    # (it sent it after the history: the prefix ended at the system prompt).
    records: list[dict[str, Any]] = [
        {"id": "s0", "role": "system", "text": "be brief", "retention": "required"}
    ]
    for i, role in enumerate(["user", "document", "user", "assistant", "user", "assistant"]):
        words = 30 if role == "document" else 10
        records.append(
            {
                "id": f"m{i:02d}",
                "role": role,
                "text": "word " * words + str(i),
                "retention": "preferred",
                "rank": 1.0 if role == "document" else None,
            }
        )
    for record in records:
        record["created_at"] = T0
    frame = CognitionFrame(records)
    first = frame.pack(92, as_of=AS_OF)
    assert first.ids == ["s0", "m01", "m04", "m05"]
    again = frame.pack(92, as_of=AS_OF, previous=first)
    assert again.ids == first.ids
    before, after = (p.manifest.to_polars().select("id", "decision") for p in (first, again))
    assert after.equals(before)
    report = again.manifest.cache
    assert report is not None
    assert report.prefix_ids == first.ids
    assert report.evicted == []


# Cache models


def test_automatic_caching_counts_increments_from_the_minimum() -> None:
    model = get_cache_model("openai:gpt-4o")
    assert (model.min_tokens, model.increment, model.read_multiplier) == (1024, 128, 0.5)
    cases = [  # (shared, previous input, cached)
        (1023, 5000, 0),
        (1024, 5000, 1024),
        (1151, 5000, 1024),
        (1152, 5000, 1152),
        (3000, 1000, 0),  # the earlier prompt was too short to be cached
        (3000, 2000, 1920),  # no more than the earlier prompt
    ]
    for shared, before, cached in cases:
        b = bill(model, input_tokens=4000, shared_tokens=shared, previous_input_tokens=before)
        assert (b.cached_tokens, b.cache_write_tokens) == (cached, 0)
        assert b.billed_tokens == 4000 - cached + 0.5 * cached
    cold = bill(model, input_tokens=4000, shared_tokens=3000, previous_input_tokens=None)
    assert cold.cached_tokens == 0
    late = bill(
        model,
        input_tokens=4000,
        shared_tokens=3000,
        previous_input_tokens=4000,
        elapsed_seconds=model.ttl_seconds + 1,
    )
    assert late.cached_tokens == 0


def test_breakpoint_caching_reads_written_prefixes_and_bills_writes() -> None:
    five = get_cache_model("anthropic:claude-sonnet-4-5")
    hour = get_cache_model("anthropic:claude-sonnet-4-5:1h")
    assert (five.max_breakpoints, five.read_multiplier, five.write_multiplier) == (4, 0.1, 1.25)
    assert (hour.write_multiplier, hour.ttl_seconds) == (2.0, 3600)
    assert get_cache_model("anthropic:claude-haiku-4-5").min_tokens == 4096
    # below the minimum nothing is written
    assert bill(five, input_tokens=1000, breakpoints=[900]).billed_tokens == 1000
    # the shared prefix stops before the earlier breakpoint: no read, a fresh write
    miss = bill(
        five,
        input_tokens=3000,
        shared_tokens=1500,
        previous_breakpoints=[2000],
        breakpoints=[2900],
    )
    assert (miss.cached_tokens, miss.cache_write_tokens, miss.uncached_tokens) == (0, 2900, 100)
    assert miss.billed_tokens == 100 + 1.25 * 2900
    # a system breakpoint read while the history after it is written again
    hit = bill(
        hour,
        input_tokens=3000,
        shared_tokens=1500,
        previous_breakpoints=[1200, 2000],
        breakpoints=[1200, 2900],
    )
    assert (hit.cached_tokens, hit.cache_write_tokens) == (1200, 1700)
    assert hit.billed_tokens == round(100 + 0.1 * 1200 + 2.0 * 1700, 6)
    # at most max_breakpoints are used: the longest
    many = bill(five, input_tokens=9000, breakpoints=[1100, 1200, 1300, 1400, 8000])
    assert many.cache_write_tokens == 8000


def test_users_register_their_own_cache_models() -> None:
    mine = CacheModel(
        name="test:flash",
        kind="automatic",
        min_tokens=2048,
        increment=1,
        read_multiplier=0.25,
        ttl_seconds=3600,
    )
    assert register_cache_model(mine, replace=True) is mine
    assert cache_models()["test:flash"] is mine
    with pytest.raises(PackError, match="exists"):
        register_cache_model(mine)
    assert PackOptions(cache_model="test:flash").cache_model == "test:flash"
    with pytest.raises(PackError, match="read_multiplier must be a number from 0 to 1"):
        CacheModel(name="x", kind="automatic", min_tokens=1, read_multiplier=1.5, ttl_seconds=1)
    with pytest.raises(PackError, match="max_breakpoints >= 1"):
        CacheModel(name="x", kind="breakpoints", min_tokens=1, read_multiplier=0.1, ttl_seconds=1)
    with pytest.raises(PackError, match="kind must be one of"):
        CacheModel(name="x", kind="lru", min_tokens=1, read_multiplier=0.1, ttl_seconds=1)  # type: ignore[arg-type]


def test_shared_prefix_tokens_stop_at_the_first_difference() -> None:
    assert shared_prefix_tokens([], ["a"], [5]) == 0
    assert shared_prefix_tokens(["a", "b"], ["a", "b", "c"], [5, 6, 7]) == 11
    assert shared_prefix_tokens(["a", "x", "c"], ["a", "b", "c"], [5, 6, 7]) == 5


# A real conversation


def locomo_chat(path: Path) -> list[tuple[str, str, str]]:
    """The first LoCoMo conversation as (id, role, text): speaker A the user."""
    sample = json.loads(path.read_text(encoding="utf-8"))[0]
    conv = sample["conversation"]
    rows = [("sys", "system", SYSTEM)]
    numbers = sorted(
        int(k.split("_")[1]) for k in conv if k.startswith("session_") and k.count("_") == 1
    )
    for number in numbers:
        for turn in conv[f"session_{number}"]:
            role = "user" if turn["speaker"] == conv["speaker_a"] else "assistant"
            rows.append((turn["dia_id"], role, f"{turn['speaker']}: {turn['text']}"))
    return rows


@needs_locomo
def test_a_locomo_conversation_replayed_keeps_its_prefix_between_eviction_steps() -> None:
    rows = locomo_chat(LOCOMO)
    packs = replay(rows[:400], 2048)
    assert check_replay(packs) >= 1
    for packed, _ in packs:
        request = packed.to_anthropic(cache=True)
        assert_sdk_accepts(request)
        assert 1 <= len(breakpoints(request)) <= 4


# Breakpoints in the renderers


def assert_sdk_accepts(request: dict[str, Any]) -> None:
    """Validate a request with the API's documented rules and the Anthropic SDK's types.

    The SDK's types are checked block by block, keys included.
    """
    pytest.importorskip("anthropic", reason="needs the sdk extra: pip install -e '.[sdk]'")
    from anthropic.types import ContentBlockParam, MessageParam, TextBlockParam
    from pydantic import TypeAdapter

    validate_anthropic_messages(request)

    TypeAdapter(list[MessageParam]).validate_python(copy.deepcopy(request["messages"]))
    blocks = TypeAdapter(ContentBlockParam)
    for message in request["messages"]:
        for block in message["content"]:
            assert blocks.validate_python(copy.deepcopy(block)) == block
    if "system" in request:
        system = TypeAdapter(str | list[TextBlockParam]).validate_python(request["system"])
        assert system == request["system"]


def breakpoints(request: dict[str, Any]) -> list[tuple[int, int]]:
    """(message, block) of every cache_control mark; (-1, 0) for the system prompt."""
    marks = []
    if isinstance(request.get("system"), list):
        marks += [(-1, k) for k, b in enumerate(request["system"]) if "cache_control" in b]
    for m, message in enumerate(request["messages"]):
        marks += [(m, k) for k, b in enumerate(message["content"]) if "cache_control" in b]
    return marks


def test_to_anthropic_marks_the_stable_prefix_on_every_replayed_turn() -> None:
    pytest.importorskip("anthropic")
    long_system = [("sys", "system", SYSTEM * 9)]  # cacheable alone (over 1,024 tokens)
    for rows in (synthetic_chat(120), long_system + synthetic_chat(120)[1:]):
        for packed, _ in replay(rows, 2600):
            request = packed.to_anthropic(cache=True)
            assert_sdk_accepts(request)
            marks = breakpoints(request)
            assert 1 <= len(marks) <= 4
            last = len(request["messages"]) - 1
            assert marks[-1] == (last, len(request["messages"][last]["content"]) - 1)
            system_tokens = packed.manifest.to_polars().filter(pl.col("id") == "sys")["tokens"]
            assert ((-1, 0) in marks) == (system_tokens[0] >= 1024)
            plain = packed.to_anthropic()
            assert request["messages"] == [
                {
                    **m,
                    "content": [
                        {**b, "cache_control": {"type": "ephemeral"}} if (i, k) in marks else b
                        for k, b in enumerate(m["content"])
                    ],
                }
                for i, m in enumerate(plain["messages"])
            ]


def test_to_anthropic_marks_the_history_before_the_documents() -> None:
    rows = chat(synthetic_chat(5))  # ends on a user message
    docs = documents(["d1"], ["retrieved text"], [1.0])
    first = pack(rows, 3000, PackOptions(as_of=AS_OF))
    packed = pack(pl.concat([rows, docs]), 3000, PackOptions(as_of=AS_OF), previous=first)
    request = packed.to_anthropic(cache=True, cache_model="anthropic:claude-sonnet-4-5:1h")
    last = request["messages"][-1]["content"]
    assert last[-1] == {"type": "text", "text": "retrieved text"}  # the document: not marked
    assert last[-2]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    with pytest.raises(PackError, match="caches automatically"):
        packed.to_anthropic(cache=True, cache_model="openai")


def test_to_openai_passes_a_prompt_cache_key() -> None:
    packed = pack(chat(synthetic_chat(4)), 3000, PackOptions(as_of=AS_OF))
    request = packed.to_openai(prompt_cache_key="conversation-7")
    assert request == {"messages": packed.messages, "prompt_cache_key": "conversation-7"}
    with pytest.raises(PackError, match="prompt_cache_key must be non-empty text"):
        packed.to_openai(prompt_cache_key="")


@pytest.mark.parametrize("start_on", [None, "user"])
def test_evicting_everything_keeps_the_new_messages_as_a_pack_of_its_own(
    start_on: str | None,
) -> None:
    # The new reply before the new question is not evicted to open the request on a
    # user message (it was, though it fits): the earlier pack did not send it, and a
    # pack of its own sends it. start_on="user" drops it, as in a pack of its own.
    packs = replay(synthetic_chat(60), 1200, eviction_share=1.0, start_on=start_on)
    evicting = [p for p, _ in packs if p.manifest.cache and p.manifest.cache.eviction_steps]
    assert evicting
    for packed in evicting:
        roles = [m["role"] for m in packed.messages]
        assert roles == ["system", "user"] if start_on else ["system", "assistant", "user"]
        reasons = dict(packed.manifest.to_polars().select("id", "reason").iter_rows())
        newest = int(packed.ids[-1][1:])
        reply = f"m{newest - 1:03}"
        assert reasons[reply] == ("before_first_user" if start_on else "selected")
        assert packed.manifest.cache is not None
        assert reply not in packed.manifest.cache.evicted  # not sent before


# Packing units that hold history and a document


def _mixed_group(more: int = 0) -> list[dict[str, Any]]:
    """A system prompt and a chat whose reply a1 shares group g with a document d1.

    Each message costs 24 tokens (cl100k_base), the system prompt 14; ``more``
    words make a new user message u4 (0: none).
    """
    texts = [
        ("s0", "system", 5, None),
        ("u0", "user", 10, None),
        ("a1", "assistant", 10, "g"),
        ("d1", "document", 10, "g"),
        ("u2", "user", 10, None),
        ("a3", "assistant", 10, None),
    ]
    if more:
        texts.append(("u4", "user", more, None))
    return [
        {
            "id": item_id,
            "role": role,
            "text": " ".join(f"w{k}" for k in range(words)),
            "group_id": group,
            "retention": "required" if role == "system" else "preferred",
            "rank": 1.0 if role == "document" else None,
            "created_at": T0 + timedelta(seconds=i),
        }
        for i, (item_id, role, words, group) in enumerate(texts)
    ]


def _reasons(packed: ContextPack) -> dict[str, str]:
    return dict(packed.manifest.to_polars().select("id", "reason").iter_rows())


def test_an_evicted_reply_takes_the_document_of_its_group_with_it() -> None:
    # The new question u4 (124 tokens) leaves no room for the earlier prefix: the first
    # step evicts u0 and the group g, a1 and its document d1 with it, the second u2 and
    # a3. d1 was sent alone, the group split, when eviction went row by row.
    first = CognitionFrame(_mixed_group()).pack(160, as_of=AS_OF)
    assert first.ids == ["s0", "u0", "a1", "d1", "u2", "a3"]
    again = CognitionFrame(_mixed_group(more=60)).pack(160, as_of=AS_OF, previous=first)
    assert again.ids == ["s0", "u4"]
    reasons = _reasons(again)
    assert [reasons[i] for i in ("u0", "a1", "d1", "u2", "a3")] == ["evicted_for_cache"] * 5
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == ["u0", "a1", "d1", "u2", "a3"]
    assert report.eviction_steps == 2
    assert report.prefix_ids == ["s0"]


def test_a_pinned_reply_counts_the_document_of_its_group() -> None:
    # Pinning a1 pins its group, so d1's 144 tokens are counted too: the prefix and u4
    # need 278 tokens of 257, and one step evicts u0 and the group (u2 starts the rest).
    # Counted by history rows alone, they seemed to fit and the pack raised BudgetError.
    records = _mixed_group()
    records[3]["text"] = " ".join(f"w{k}" for k in range(70))
    first = CognitionFrame(records).pack(260, as_of=AS_OF)
    assert first.ids == ["s0", "u0", "a1", "d1", "u2", "a3"]
    later = _mixed_group(more=10)
    later[3]["text"] = records[3]["text"]
    again = CognitionFrame(later).pack(260, as_of=AS_OF, previous=first)
    assert again.ids == ["s0", "u2", "a3", "u4"]
    assert [_reasons(again)[i] for i in ("u0", "a1", "d1")] == ["evicted_for_cache"] * 3
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == ["u0", "a1", "d1"]
    assert report.eviction_steps == 1
    assert report.prefix_ids == ["s0", "u2", "a3"]
    assert report.eviction_detail is not None
    assert report.eviction_detail.startswith("the earlier prefix and the new history need 278")


def test_history_held_out_before_the_prefix_holds_out_its_group() -> None:
    # u0 (204 tokens) and the group g (124 + 24) did not fit the earlier pack; u2 and a3
    # after them are its prefix. Continued, a1 is held out and d1 with it, for the same
    # reason, not left to the selection alone.
    records = _mixed_group()
    records[1]["text"] = " ".join(f"w{k}" for k in range(100))
    records[2]["text"] = " ".join(f"w{k}" for k in range(60))
    first = CognitionFrame(records).pack(110, as_of=AS_OF)
    assert first.ids == ["s0", "u2", "a3"]
    again = CognitionFrame(records).pack(110, as_of=AS_OF, previous=first)
    assert again.ids == first.ids
    assert [_reasons(again)[i] for i in ("u0", "a1", "d1")] == ["evicted_for_cache"] * 3
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == []  # none of them was sent
    assert report.prefix_ids == ["s0", "u2", "a3"]


def test_a_group_whose_document_was_cut_ends_the_prefix_and_is_selected_again() -> None:
    # The earlier pack cut d1 (81 tokens to 31) to fit the group g. Its sent content
    # differs from the frame's, so the prefix ends before g, which is selected as usual
    # and cut alike. Pinned (required) at its whole 85 tokens, it raised BudgetError.
    records: list[dict[str, Any]] = [
        {"id": "u0", "role": "user", "text": "refund", "retention": "required"},
        {"id": "a1", "role": "assistant", "text": "refund " * 12, "group_id": "g"},
        {"id": "d1", "role": "document", "text": "refund " * 80, "group_id": "g",
         "metadata": {"truncate": {"side": "head", "min_tokens": 5}}},
    ]  # fmt: skip
    for i, record in enumerate(records):
        record["created_at"] = T0 + timedelta(seconds=i)
    frame = CognitionFrame(records)
    first = frame.pack(60, as_of=AS_OF)
    assert first.ids == ["u0", "a1", "d1"]
    assert [(t.id, t.kept_tokens) for t in first.manifest.truncations] == [("d1", 31)]
    again = frame.pack(60, as_of=AS_OF, previous=first)
    assert again.messages == first.messages
    assert list(_reasons(again).values()) == ["required", "selected", "selected"]
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == []
    assert report.eviction_steps == 0


def _after_a_cut_group() -> CognitionFrame:
    """Replies a0, a2 (rank 2) around a required u1, then group g: a long truncatable d3 and u4."""
    records: list[dict[str, Any]] = [
        {"id": "a0", "role": "assistant", "text": "refund window", "rank": 2.0},
        {"id": "u1", "role": "user", "text": "ok.", "retention": "required"},
        {"id": "a2", "role": "assistant", "text": "refund window", "rank": 2.0},
        {"id": "d3", "role": "document", "text": "refund window " * 40, "group_id": "g",
         "metadata": {"truncate": {"side": "head", "min_tokens": 1}}},
        {"id": "u4", "role": "user", "payload": {"kind": "json", "value": {"words": []}},
         "group_id": "g"},
    ]  # fmt: skip
    for i, record in enumerate(records):
        record["created_at"] = T0 + timedelta(seconds=i)
    return CognitionFrame(records)


@pytest.mark.parametrize("budget", [90, 60])
def test_a_pinned_truncatable_document_is_cut_before_history_is_evicted(budget: int) -> None:
    # The earlier pack cut d3's text to 57 tokens to fit g after the replies. Continued
    # with nothing new, g ends the prefix (a0, u1, a2, g): counted whole, it seemed not
    # to fit, and a0 and a2 were evicted. d3 is now counted cut to its min_tokens and
    # cut to fit what is left: at 90 tokens as before, at 60 further. It stays in its
    # place, attached to u4.
    frame = _after_a_cut_group()
    first = frame.pack(90, as_of=AS_OF)
    assert first.ids == ["a0", "u1", "a2", "d3", "u4"]
    assert [(t.id, t.kept_tokens) for t in first.manifest.truncations] == [("d3", 57)]
    again = frame.pack(budget, as_of=AS_OF, previous=first, eviction_share=0.25)
    assert again.ids == first.ids
    assert again.messages[:3] == first.messages[:3]
    assert (again.messages == first.messages) == (budget == 90)
    assert again.used_tokens <= budget
    report = again.manifest.cache
    assert report is not None
    assert (report.evicted, report.eviction_steps) == ([], 0)
    kept = {t.id: t.kept_tokens for t in again.manifest.truncations}
    assert kept["d3"] == (57 if budget == 90 else 27)


@pytest.mark.parametrize("budget", [30, 36, 42])
def test_a_history_message_cut_after_the_prefix_is_cut_again_rather_than_evicting(
    budget: int,
) -> None:
    # The earlier pack sent u0, then the preferred system prompt s1 cut to fit. The cut
    # s1 ends the prefix (u0), so cutting it again keeps the prefix's bytes; it was
    # counted whole instead, seemed not to fit, and u0 was evicted.
    cut = {"truncate": {"side": "tail", "min_tokens": 4}}

    def item(item_id: str, role: str, words: int, **more: Any) -> dict[str, Any]:
        return {"id": item_id, "role": role, "text": " ".join(["refund"] * words),
                "created_at": T0} | more  # fmt: skip

    frame = CognitionFrame(
        [
            item("u0", "user", 2, retention="preferred", priority=1),
            item("s1", "system", 20, retention="preferred", metadata=cut),
            item("u2", "user", 1, retention="required"),
            item("a3", "assistant", 2, retention="preferred"),
            item("u4", "user", 1, retention="required"),
        ]
    )
    first = frame.pack(budget, as_of=AS_OF)
    assert first.ids == ["u0", "s1", "u2", "u4"]
    assert [(t.id, t.kept_tokens) for t in first.manifest.truncations] == [("s1", budget - 23)]
    again = frame.pack(budget, as_of=AS_OF, previous=first, eviction_share=0.25)
    report = again.manifest.cache
    assert report is not None
    assert (report.evicted, report.eviction_steps) == ([], 0)
    assert again.ids == first.ids
    assert again.messages == first.messages
    assert again.manifest.truncations == first.manifest.truncations


def test_a_pinned_document_is_cut_before_a_required_item() -> None:
    # overflow="truncate": the earlier pack sent the required items whole and cut d3
    # (priority 1) by a token to fit its group g. Continued, g is pinned with the
    # required items and they are cut together: d3 first, as before. The required s1,
    # last in the selection order, was cut instead.
    def item(item_id: str, role: str, words: int, **more: Any) -> dict[str, Any]:
        return {"id": item_id, "role": role, "text": " ".join(["refund"] * words),
                "retention": "required", "created_at": T0} | more  # fmt: skip

    cut = {"truncate": {"side": "tail", "min_tokens": 4}}
    frame = CognitionFrame(
        [
            item("s0", "system", 8),
            item("s1", "system", 26, metadata=cut),
            item("u0", "user", 1),
            item("u1", "user", 1),
            item("a2", "assistant", 2, retention="preferred", group_id="g"),
            item(
                "d3", "document", 26, retention="preferred", group_id="g", priority=1, metadata=cut
            ),
        ]
    )
    first = frame.pack(90, as_of=AS_OF, overflow="truncate")
    assert [(t.id, t.kept_tokens) for t in first.manifest.truncations] == [("d3", 25)]
    again = frame.pack(90, as_of=AS_OF, overflow="truncate", previous=first)
    assert again.ids == first.ids
    assert again.messages == first.messages
    assert [(t.id, t.kept_tokens) for t in again.manifest.truncations] == [("d3", 25)]


def test_a_unit_with_a_required_document_is_never_evicted() -> None:
    # d1 is required, so its group g is: the step evicts u0 and then u2 and a3, the
    # evictable units of the prefix (s0, u0, g, u2, a3), and a1 stays with d1. Row by
    # row, a1 was evicted and d1 sent without it.
    def with_required(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        records[3]["retention"] = "required"
        return records

    first = CognitionFrame(with_required(_mixed_group())).pack(160, as_of=AS_OF)
    assert first.ids == ["s0", "u0", "a1", "d1", "u2", "a3"]
    later = CognitionFrame(with_required(_mixed_group(more=10)))
    again = later.pack(160, as_of=AS_OF, previous=first)
    assert again.ids == ["s0", "a1", "d1", "u4"]
    assert [_reasons(again)[i] for i in ("u0", "u2", "a3")] == ["evicted_for_cache"] * 3
    assert [_reasons(again)[i] for i in ("a1", "d1")] == ["selected", "required"]
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == ["u0", "u2", "a3"]
    assert report.eviction_steps == 1


# Continued with nothing new, a pack makes the earlier pack's decisions


def _chat(spec: list[tuple[str, str, int, dict[str, Any]]]) -> CognitionFrame:
    """Items (id, role, words, more fields) at one-second steps; system required, rest preferred."""
    return CognitionFrame(
        [
            {
                "id": item_id,
                "role": role,
                "text": " ".join(f"w{k}" for k in range(words)),
                "retention": "required" if role == "system" else "preferred",
                "created_at": T0 + timedelta(seconds=i),
            }
            | more
            for i, (item_id, role, words, more) in enumerate(spec)
        ]
    )


def test_history_passed_over_after_the_prefix_stays_out_under_gaps_stop() -> None:
    # gaps="stop": u0 (priority 1, too long) is the first unranked message tried and
    # ends them, so u2 is left out. Continued, u0 is held out before the prefix's end;
    # u2 was selected as usual, and with no miss before it, it was sent.
    frame = _chat(
        [
            ("s0", "system", 5, {}),
            ("u0", "user", 80, {"priority": 1}),
            ("a1", "assistant", 10, {"rank": 0.5}),
            ("u2", "user", 5, {}),
        ]
    )
    first = frame.pack(60, as_of=AS_OF, gaps="stop")
    assert first.ids == ["s0", "a1"]
    assert _reasons(first) == {
        "s0": "required", "u0": "over_budget", "a1": "selected", "u2": "before_tail"
    }  # fmt: skip
    again = frame.pack(60, as_of=AS_OF, gaps="stop", previous=first)
    assert again.ids == ["s0", "a1"]
    assert _reasons(again) == {
        "s0": "required", "u0": "evicted_for_cache", "a1": "selected", "u2": "evicted_for_cache"
    }  # fmt: skip
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == []
    assert report.prefix_ids == ["s0", "a1"]


def test_history_dropped_before_the_first_user_message_stays_out() -> None:
    # start_on="user": a1 (preferred, rank 0.9) was selected before u0 and dropped to let
    # u0 in, and m2 took its room; a1 now comes after u0, so it was left out for the
    # budget. Continued, u0 is pinned, a1 after it was selected as usual and sent, and
    # m2 (74 tokens) no longer fit.
    frame = _chat(
        [
            ("s0", "system", 5, {}),
            ("u0", "user", 15, {"rank": 0.1, "retention": "optional"}),
            ("a1", "assistant", 15, {"rank": 0.9}),
            ("m2", "memory", 35, {"rank": 0.5}),
        ]
    )
    first = frame.pack(130, as_of=AS_OF, start_on="user")
    assert first.ids == ["s0", "u0", "m2"]
    assert _reasons(first)["a1"] == "over_budget"
    again = frame.pack(130, as_of=AS_OF, start_on="user", previous=first)
    assert again.ids == ["s0", "u0", "m2"]
    assert _reasons(again) == {
        "s0": "required", "u0": "selected", "a1": "evicted_for_cache", "m2": "selected"
    }  # fmt: skip
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == []


@pytest.mark.parametrize("start", [{"start_on": "user"}, {"target": "anthropic"}])
def test_a_document_that_opened_the_earlier_pack_keeps_its_place(start: dict[str, Any]) -> None:
    # The earlier pack opened on the document d0 (a user message) before a1. Continued,
    # it sent the history first, so a1 opened the request and was dropped as
    # before_first_user: the pack changed with nothing new, and so did its prefix.
    frame = _chat(
        [
            ("s0", "system", 5, {}),
            ("d0", "document", 15, {"rank": 1.0}),
            ("a1", "assistant", 15, {}),
        ]
    )
    first = frame.pack(100, as_of=AS_OF, **start)
    assert first.ids == ["s0", "d0", "a1"]
    again = frame.pack(100, as_of=AS_OF, previous=first, **start)
    assert again.ids == first.ids
    assert [m["role"] for m in again.messages] == ["system", "user", "assistant"]
    validate_anthropic_messages(again.to_anthropic())
    assert again.manifest.cache is not None
    assert again.manifest.cache.prefix_ids == first.ids
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == []


AMID = [
    ("s0", "system", 5, {}),
    ("u0", "user", 15, {}),
    ("d0", "document", 15, {"rank": 1.0}),
    ("a0", "assistant", 15, {}),
]
NEXT_TURN = [("u1", "user", 20, {}), ("a1", "assistant", 20, {})]


def test_a_document_sent_between_messages_stays_in_the_prefix() -> None:
    # The continuing pack sent the history first and d0 after it: the prefix ended at u0.
    first = _chat(AMID).pack(200, as_of=AS_OF)
    assert first.ids == ["s0", "u0", "d0", "a0"]
    second = _chat(AMID + NEXT_TURN).pack(300, as_of=AS_OF, previous=first)
    assert second.ids == ["s0", "u0", "d0", "a0", "u1", "a1"]
    assert second.manifest.cache is not None
    assert second.manifest.cache.prefix_ids == first.ids


def test_a_document_evicted_with_the_history_around_it_is_ranked_content_again() -> None:
    # The old turn is evicted; d0, sent amid it, goes after the history as ranked content.
    # Evicted with the turn, it came back in the next pack as ranked content, so a pack
    # continued with nothing new changed.
    first = _chat(AMID).pack(200, as_of=AS_OF)
    later = _chat(AMID + NEXT_TURN)
    second = later.pack(140, as_of=AS_OF, previous=first)
    assert second.ids == ["s0", "u1", "a1", "d0"]
    assert _reasons(second)["d0"] == "selected"
    assert second.manifest.cache is not None
    assert second.manifest.cache.evicted == ["u0", "a0"]
    again = later.pack(140, as_of=AS_OF, previous=second)
    assert again.ids == second.ids
    assert _reasons(again) == _reasons(second)


def test_pinned_history_before_the_first_user_message_is_dropped_not_refused() -> None:
    # The earlier pack opened on the document d0, gone now; a1 after it is pinned and
    # comes first: it is dropped as before_first_user. Pinned as required, it made
    # start_on refuse the pack.
    spec: list[tuple[str, str, int, dict[str, Any]]] = [
        ("s0", "system", 5, {}),
        ("d0", "document", 15, {"rank": 1.0}),
        ("a1", "assistant", 15, {}),
    ]
    first = _chat(spec).pack(100, as_of=AS_OF, start_on="user")
    assert first.ids == ["s0", "d0", "a1"]
    later = _chat([spec[0], spec[2], ("d9", "document", 20, {"rank": 2.0})])
    again = later.pack(100, as_of=AS_OF, start_on="user", previous=first)
    assert again.ids == ["s0", "d9"]
    assert _reasons(again) == {
        "s0": "required", "a1": "before_first_user", "d9": "selected"
    }  # fmt: skip
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == []


def _cut_memory_chat(**mark: Any) -> list[dict[str, Any]]:
    """s0 and u1 (required), group g (a long truncatable memory m2, user u3), memory m4."""
    truncate = {"side": "head", "min_tokens": 1} | mark
    records: list[dict[str, Any]] = [
        {"id": "s0", "role": "system", "text": "refund window", "retention": "required"},
        {"id": "u1", "role": "user", "text": "ok.", "retention": "required"},
        {"id": "m2", "role": "memory", "text": "refund window " * 30, "group_id": "g",
         "metadata": {"truncate": truncate}},
        {"id": "u3", "role": "user", "text": "refund", "group_id": "g"},
        {"id": "m4", "role": "memory", "text": "days " * 10, "priority": 2},
    ]  # fmt: skip
    for i, record in enumerate(records):
        record["created_at"] = T0 + timedelta(seconds=i)
    return records


@pytest.mark.parametrize(("budget", "kept"), [(40, 1), (50, 11), (60, 21), (80, 41)])
def test_a_continued_pack_makes_the_earlier_packs_cuts_again(budget: int, kept: int) -> None:
    # The earlier pack took m4 (priority 2) first, then cut m2 to fit g. Continued with
    # nothing new, g is pinned and selected first: m2 was cut to fit what was left
    # before m4 (15 tokens longer), and m4 no longer fitted.
    frame = CognitionFrame(_cut_memory_chat())
    first = frame.pack(budget, as_of=AS_OF)
    assert first.ids == ["s0", "u1", "m2", "u3", "m4"]
    assert [(t.id, t.kept_tokens) for t in first.manifest.truncations] == [("m2", kept)]
    again = frame.pack(budget, as_of=AS_OF, previous=first)
    assert again.ids == first.ids
    assert again.manifest.truncations == first.manifest.truncations
    assert again.messages == first.messages
    report = again.manifest.cache
    assert report is not None
    assert report.replayed_cuts == ["m2"]
    third = frame.pack(budget, as_of=AS_OF, previous=again)
    assert third.messages == again.messages


@pytest.mark.parametrize(("budget", "kept", "ids"), [
    (200, 11, ["s0", "u1", "m2", "u3", "m4"]),
    (50, 11, ["s0", "u1", "m2", "u3", "m4"]),
    (33, 9, ["s0", "u1", "m2", "u3"]),
])  # fmt: skip
def test_a_replayed_cut_is_never_sent_longer_and_is_cut_further_when_needed(
    budget: int, kept: int, ids: list[str]
) -> None:
    frame = CognitionFrame(_cut_memory_chat())
    first = frame.pack(50, as_of=AS_OF)
    again = frame.pack(budget, as_of=AS_OF, previous=first)
    assert again.ids == ids
    (cut,) = again.manifest.truncations
    assert (cut.id, cut.kept_tokens, cut.original_tokens) == ("m2", kept, 61)
    assert again.used_tokens <= budget


@pytest.mark.parametrize(
    "change",
    [
        {"metadata": {"truncate": {"side": "tail", "min_tokens": 1}}},
        {"metadata": {"truncate": {"side": "head", "min_tokens": 12}}},
        {"text": "refund days " * 30},
    ],
    ids=["other side", "min_tokens above the cut", "changed text"],
)
def test_an_earlier_cut_is_not_made_again_for_a_changed_item(change: dict[str, Any]) -> None:
    first = CognitionFrame(_cut_memory_chat()).pack(50, as_of=AS_OF)
    records = _cut_memory_chat()
    records[2] |= change
    again = CognitionFrame(records).pack(80, as_of=AS_OF, previous=first)
    report = again.manifest.cache
    assert report is not None
    assert report.replayed_cuts == []
    (cut,) = again.manifest.truncations
    assert cut.kept_tokens > 11  # cut afresh to fit the larger budget


@pytest.mark.parametrize("budget", [19, 33, 47])
def test_a_cut_made_again_sends_the_same_bytes_where_reencoding_counts_fewer_tokens(
    budget: int,
) -> None:
    # A cut at k tokens of "  \t" runs re-encodes to fewer tokens than k. Made again at
    # its reported kept_tokens, the cut was shorter: 'Columns:  \tname  ' in place of
    # 'Columns:  \tname  \t' at 19 tokens, so the cached bytes changed.
    text = "Columns:  \tname  \tage  \tcity  \tcountry. " * 10
    frame = CognitionFrame(
        [
            {"id": "s0", "role": "system", "retention": "preferred", "text": text,
             "created_at": T0, "metadata": {"truncate": {"side": "head", "min_tokens": 1}}},
            {"id": "u1", "role": "user", "retention": "required", "text": "hi there",
             "created_at": T0},
        ]
    )  # fmt: skip
    first = frame.pack(budget, as_of=AS_OF)
    assert [t.id for t in first.manifest.truncations] == ["s0"]
    again = frame.pack(budget, as_of=AS_OF, previous=first)
    third = frame.pack(budget, as_of=AS_OF, previous=again)
    assert again.messages == first.messages == third.messages
    assert again.manifest.truncations == first.manifest.truncations == third.manifest.truncations


@pytest.mark.parametrize("retention", ["optional", "preferred"])
@pytest.mark.parametrize("truncatable", [False, True])
def test_a_prefix_over_a_smaller_budget_packs_as_a_pack_of_its_own(
    retention: str, truncatable: bool
) -> None:
    # The earlier pack sent s0 (85 tokens) and u1. At 60 tokens even evicting u1 leaves
    # s0 over the budget; pinned, it raised BudgetError as if it were required.
    mark = {"truncate": {"side": "head", "min_tokens": 1}} if truncatable else {}
    frame = CognitionFrame(
        [
            {"id": "s0", "role": "system", "retention": retention, "created_at": T0,
             "text": "Follow the policy. " * 20, "metadata": mark},
            {"id": "u1", "role": "user", "text": "hello " * 10, "created_at": T0},
        ]
    )  # fmt: skip
    first = frame.pack(150, as_of=AS_OF)
    assert first.ids == ["s0", "u1"]
    again = frame.pack(60, as_of=AS_OF, previous=first)
    alone = frame.pack(60, as_of=AS_OF)
    assert again.ids == alone.ids == (["s0"] if truncatable else ["u1"])
    assert again.messages == alone.messages
    report = again.manifest.cache
    assert report is not None
    assert (report.evicted, report.eviction_steps) == ([], 0)


def test_a_new_message_over_the_budget_alone_evicts_nothing() -> None:
    # u2 alone exceeds the 57 tokens the items may use. Pinned, it made the pack evict
    # u0 and a1 and then send nothing: an empty pack, where a pack of its own keeps both.
    def item(item_id: str, role: str, words: int, **more: Any) -> dict[str, Any]:
        return {"id": item_id, "role": role, "text": "word " * words, "created_at": T0} | more

    earlier = [
        item("u0", "user", 10, retention="preferred"),
        item("a1", "assistant", 10, retention="preferred"),
    ]
    first = CognitionFrame(earlier).pack(60, as_of=AS_OF)
    frame = CognitionFrame([*earlier, item("u2", "user", 80)])
    again = frame.pack(60, as_of=AS_OF, previous=first)
    assert again.ids == frame.pack(60, as_of=AS_OF).ids == ["u0", "a1"]
    assert _reasons(again)["u2"] == "over_budget"
    report = again.manifest.cache
    assert report is not None
    assert (report.evicted, report.eviction_steps, report.prefix_ids) == ([], 0, ["u0", "a1"])


def test_steps_that_would_evict_every_new_message_are_not_taken() -> None:
    # The new reply a1 needs room: a step evicts the group (u0, d0), and then a1, which
    # would open the history on a reply, went too: an empty pack. Nothing is evicted now.
    records = [
        {"id": "u0", "role": "user", "text": "question " * 34, "group_id": "g0"},
        {"id": "d0", "role": "memory", "text": "note " * 251, "group_id": "g0"},
        {"id": "a1", "role": "assistant", "text": "answer " * 60},
    ]
    for record in records:
        record["created_at"] = T0
    first = CognitionFrame(records[:2]).pack(300, as_of=AS_OF)
    assert first.ids == ["u0", "d0"]
    again = CognitionFrame(records).pack(320, as_of=AS_OF, previous=first)
    assert again.ids == ["u0", "d0"]
    assert _reasons(again)["a1"] == "over_budget"
    report = again.manifest.cache
    assert report is not None
    assert (report.evicted, report.eviction_steps) == ([], 0)


def _opening_chat() -> list[dict[str, Any]]:
    mark = {"truncate": {"side": "head", "min_tokens": 10}}
    return [
        {"id": "s0", "role": "system", "retention": "preferred", "created_at": T0,
         "text": "Follow the refund policy. " * 40, "metadata": mark},
        {"id": "m1", "role": "memory", "created_at": T0 + timedelta(seconds=1),
         "text": "The customer ordered on May 2. " * 6,
         "metadata": {"truncate": {"side": "head", "min_tokens": 1}}},
    ]  # fmt: skip


def test_a_continued_anthropic_pack_keeps_the_room_of_its_opening_message() -> None:
    # The earlier pack sent only s0, cut to leave room for the user message an Anthropic
    # request opens with. Continued with nothing new, the replayed cut left that room
    # free and m1, cut to 6 tokens, took it: ['s0', 'm1'].
    frame = CognitionFrame(_opening_chat())
    first = frame.pack(40, as_of=AS_OF, target="anthropic")
    assert first.ids == ["s0"]
    assert [(t.id, t.kept_tokens) for t in first.manifest.truncations] == [("s0", 23)]
    again = frame.pack(40, as_of=AS_OF, target="anthropic", previous=first)
    assert again.ids == ["s0"]
    assert _reasons(again) == _reasons(first)
    assert again.manifest.truncations == first.manifest.truncations
    assert again.to_anthropic() == first.to_anthropic()
    assert again.used_tokens == first.used_tokens == 40


def test_the_opening_room_of_a_continued_pack_goes_to_a_message_that_opens_it() -> None:
    # Kept first, the opening's room let m1 in, cut to 6 tokens; m1 then opens the request,
    # so the room is not needed: the selection is made again without it, and m1 takes it.
    records = _opening_chat()
    first = CognitionFrame(records[:1]).pack(40, as_of=AS_OF, target="anthropic")
    again = CognitionFrame(records).pack(50, as_of=AS_OF, target="anthropic", previous=first)
    assert again.ids == ["s0", "m1"]
    assert [(t.id, t.kept_tokens) for t in again.manifest.truncations] == [("s0", 23), ("m1", 16)]
    assert again.used_tokens == 50
    validate_anthropic_messages(again.to_anthropic()["messages"])


def _pasted_log_chat() -> list[dict[str, Any]]:
    """u0, a1, then a preferred pasted log u2 (tail kept) and reply a3, then the new turn u4."""
    paste = {"truncate": {"side": "tail", "min_tokens": 5}}
    records: list[dict[str, Any]] = [
        {"id": "u0", "role": "user", "text": "Can you check my order? " * 4},
        {"id": "a1", "role": "assistant", "text": "Sure, send me the log. " * 4},
        {"id": "u2", "role": "user", "retention": "preferred", "text": "log line 42 ok\n" * 60,
         "metadata": paste},
        {"id": "a3", "role": "assistant", "retention": "preferred",
         "text": "The log shows a timeout. " * 3},
        {"id": "u4", "role": "user", "text": "What should I do?"},
    ]  # fmt: skip
    for i, record in enumerate(records):
        record["created_at"] = T0 + timedelta(seconds=i)
    return records


@pytest.mark.parametrize(("budget", "kept"), [(100, 61), (140, 70), (200, 70)])
def test_a_replayed_cut_that_opens_the_pack_keeps_the_prefix(budget: int, kept: int) -> None:
    # The earlier pack sent u2 cut to 70 tokens, then a3, and left out u0 and a1. The cut
    # u2 ended the prefix before it: nothing was kept nor held out, so the pack selected
    # afresh. At 100 tokens the preferred u2 and a3 left the new u4 out; at 200, u0 and
    # a1 came back before u2 and the cached prefix was lost.
    records = _pasted_log_chat()
    first = CognitionFrame(records[:4]).pack(100, as_of=AS_OF)
    assert first.ids == ["u2", "a3"]
    assert [(t.id, t.kept_tokens) for t in first.manifest.truncations] == [("u2", 70)]
    again = CognitionFrame(records).pack(budget, as_of=AS_OF, previous=first)
    assert again.ids == ["u2", "a3", "u4"]
    assert [(t.id, t.kept_tokens) for t in again.manifest.truncations] == [("u2", kept)]
    assert {_reasons(again)[i] for i in ("u0", "a1")} == {"evicted_for_cache"}
    report = again.manifest.cache
    assert report is not None
    assert report.prefix_ids == ([] if kept < 70 else ["u2", "a3"])
    assert report.replayed_cuts == ["u2"]


@pytest.mark.parametrize("role", ["system", "developer"])
def test_a_system_prompt_left_out_for_a_smaller_budget_comes_back_when_it_fits(
    role: str,
) -> None:
    # The earlier pack, at 60 tokens, left out the 85-token s0. It was held out of every
    # pack that continued it, at 1,000 tokens too: the system prompt never came back.
    records: list[dict[str, Any]] = [
        {"id": "s0", "role": role, "retention": "preferred", "text": "Follow the policy. " * 20},
        {"id": "u1", "role": "user", "text": "hello there"},
        {"id": "a2", "role": "assistant", "text": "hi"},
    ]
    for record in records:
        record["created_at"] = T0
    first = CognitionFrame(records[:2]).pack(60, as_of=AS_OF)
    assert first.ids == ["u1"]
    same = CognitionFrame(records).pack(60, as_of=AS_OF, previous=first)
    assert same.ids == ["u1", "a2"]
    assert _reasons(same)["s0"] == "over_budget"
    larger = CognitionFrame(records).pack(1000, as_of=AS_OF, previous=first)
    assert larger.ids == ["s0", "u1", "a2"]
    assert list(_reasons(larger).values()) == ["selected"] * 3


@pytest.mark.parametrize(
    "options", [{}, {"turns": True, "start_on": "user"}, {"target": "anthropic"}]
)
@pytest.mark.parametrize("empty", ["no records", "filtered to none"])
def test_an_empty_frame_continues_a_pack_as_an_empty_pack(
    empty: str, options: dict[str, Any]
) -> None:
    # Continuing a pack, an empty frame raised IndexError from the kept prefix's search.
    records = [{"id": "u1", "role": "user", "text": "hello", "created_at": T0}]
    first = CognitionFrame(records).pack(100, as_of=AS_OF)
    frame = CognitionFrame([] if empty == "no records" else records)
    if empty == "filtered to none":
        frame = frame.filter("role == 'system'")
    again = frame.pack(100, as_of=AS_OF, previous=first, **options)
    assert again.ids == frame.pack(100, as_of=AS_OF, **options).ids == []
    report = again.manifest.cache
    assert report is not None
    assert (report.prefix_items, report.evicted) == (0, [])


def test_a_document_attached_to_a_message_stays_in_its_place_in_the_prefix() -> None:
    # att0 shares group t0 with u0. A pack of its own sends it after u0; a continuing
    # pack moved it after the history, so the first one lost the prefix from att0 on,
    # and every later one sent att0 again after the new messages, never cached.
    records: list[dict[str, Any]] = [
        {"id": "sys", "role": "system", "text": "Answer from the file.", "retention": "required"},
        {"id": "u0", "role": "user", "text": "What does it say about refunds?", "group_id": "t0"},
        {"id": "att0", "role": "document", "text": "Refunds within 30 days. " * 10,
         "group_id": "t0"},
        {"id": "a0", "role": "assistant", "text": "Within 30 days."},
        {"id": "u1", "role": "user", "text": "And shipping?"},
        {"id": "a1", "role": "assistant", "text": "Two days."},
        {"id": "u2", "role": "user", "text": "Thanks."},
    ]  # fmt: skip
    for i, record in enumerate(records):
        record["created_at"] = T0 + timedelta(seconds=i)
    first = CognitionFrame(records[:4]).pack(1000, as_of=AS_OF)
    assert first.ids == ["sys", "u0", "att0", "a0"]
    again = CognitionFrame(records[:4]).pack(1000, as_of=AS_OF, previous=first)
    assert again.messages == first.messages
    second = CognitionFrame(records[:5]).pack(1000, as_of=AS_OF, previous=first)
    third = CognitionFrame(records).pack(1000, as_of=AS_OF, previous=second)
    assert third.ids == [r["id"] for r in records]
    for earlier, later in ((first, second), (second, third)):
        report = later.manifest.cache
        assert report is not None
        assert report.prefix_ids == earlier.ids
        assert later.messages[: len(earlier.messages)] == earlier.messages


def _tool_step(i: int, words: int) -> list[dict[str, Any]]:
    """An assistant message calling a tool (call id ``t<i>``) and its result of ``words`` words."""
    function = {"name": "sh", "arguments": "{}"}
    call = {"id": f"t{i}", "type": "function", "function": function}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"t{i}", "content": "word " * words},
    ]


def test_a_pending_call_is_sent_with_its_result_once_the_result_comes() -> None:
    # The earlier pack left the call out as unanswered: its result had not come. The
    # call's unit gained the result since, so it is new, not held out (before: both
    # evicted_for_cache, and an agent loop packed step by step never sent a tool step).
    from cognoxium.formats.openai import from_openai_messages

    task = [{"role": "system", "content": "Agent."}, {"role": "user", "content": "Fix the bug."}]
    step = _tool_step(0, 20)
    pending = from_openai_messages(task + step[:1]).pack(10_000, as_of=AS_OF)
    assert pending.ids == ["msg:0", "msg:1"]
    assert _reasons(pending)["msg:2"] == "tool_call_unanswered"
    answered = from_openai_messages(task + step).pack(10_000, as_of=AS_OF, previous=pending)
    assert answered.ids == ["msg:0", "msg:1", "msg:2", "msg:3"]
    assert answered.manifest.cache is not None
    assert answered.manifest.cache.prefix_ids == ["msg:0", "msg:1"]
    fresh = from_openai_messages(task + step).pack(10_000, as_of=AS_OF)
    assert answered.messages == fresh.messages


def test_an_agent_loop_evicts_its_oldest_steps_and_keeps_its_task() -> None:
    # One open turn: the task, then tool steps. Before, nothing could be evicted (no
    # later user message), so from the fourth step on every pack was the same and the
    # newest step was left out as group_over_budget.
    from cognoxium.formats.openai import from_openai_messages

    history = [{"role": "system", "content": "Agent."}, {"role": "user", "content": "Fix it."}]
    previous: ContextPack | None = None
    sent = []
    for i in range(8):
        history += _tool_step(i, 400)
        packed = from_openai_messages(history).pack(1500, as_of=AS_OF, previous=previous)
        sent.append(packed.ids)
        previous = packed
        newest = [f"msg:{len(history) - 2}", f"msg:{len(history) - 1}"]
        assert packed.ids[:2] == ["msg:0", "msg:1"], i  # the system prompt and the task
        assert packed.ids[-2:] == newest, i
    assert sent[3] == ["msg:0", "msg:1", "msg:6", "msg:7", "msg:8", "msg:9"]
    assert previous is not None
    assert _reasons(previous)["msg:2"] == "evicted_for_cache"
    report = previous.manifest.cache
    assert report is not None
    assert (report.eviction_steps, report.evicted) == (1, ["msg:10", "msg:11", "msg:12", "msg:13"])
    assert report.prefix_ids == ["msg:0", "msg:1"]


def test_a_user_message_amid_a_long_loop_does_not_evict_the_task_and_its_steps() -> None:
    # A user interrupts the loop after 11 steps. The first step that must evict ran up to
    # that message: the task and 11 steps (23 items) went to free 66 tokens, and the pack
    # sent 1,091 of 3,000 tokens. Units up to the next user message far beyond the share
    # are not evicted to reach it: the task stays, and the share after it goes.
    from cognoxium.formats.openai import from_openai_messages

    task = "TASK: find why the integration tests fail and propose a fix."
    history = [{"role": "system", "content": "Agent."}, {"role": "user", "content": task}]
    previous: ContextPack | None = None
    for i in range(18):
        history += _tool_step(i, 150)
        if i == 10:
            history.append({"role": "user", "content": "Also check the Dockerfile."})
        previous = from_openai_messages(history).pack(3000, as_of=AS_OF, previous=previous)
        assert "msg:1" in previous.ids, i
    assert previous is not None
    report = previous.manifest.cache
    assert report is not None
    assert report.eviction_steps == 1
    assert report.evicted == [f"msg:{k}" for k in range(2, 16)]  # steps 0 to 6
    assert previous.used_tokens > 1800  # 1,851


def test_a_task_whose_newest_step_is_left_keeps_it_and_the_step_evicts_no_more_than_its_share() -> (
    None
):
    # Tasks A, B and C, each with tool steps; the next pack is 44 tokens over. The share
    # of the step ended in task B's steps, one unit (its newest step) before task C: that
    # step was taken for a reply and evicted with task B, 10 of 13 items, and the pack
    # sent 254 of 1,150 tokens. A tool step is no reply, and after the task the step
    # evicts what reaches its share of the tokens, so task B stays with its newest step.
    from cognoxium.formats.openai import from_openai_messages

    def task(text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    history = [{"role": "system", "content": "Agent."}, task("Task A: fix the build.")]
    history += [*_tool_step(0, 150), *_tool_step(1, 150), task("Task B: update the docs.")]
    history += [*_tool_step(2, 250), *_tool_step(3, 300), task("Task C: run the tests.")]
    history += _tool_step(4, 100)
    first = from_openai_messages(history).pack(1150, as_of=AS_OF)
    assert first.ids == [f"msg:{k}" for k in range(14)]
    later = from_openai_messages([*history, *_tool_step(5, 100)]).pack(
        1150, as_of=AS_OF, previous=first
    )
    report = later.manifest.cache
    assert report is not None
    assert report.evicted == ["msg:1", "msg:2", "msg:3", "msg:4", "msg:5", "msg:7", "msg:8"]
    assert {"msg:6", "msg:9", "msg:10"} <= set(later.ids)  # task B and its newest step
    evicted = sum(e.tokens or 0 for e in first.manifest.entries if e.id in report.evicted)
    assert evicted >= report.eviction_share * (first.used_tokens - 6)  # the share, no less


def test_steps_do_not_evict_the_new_reply_to_open_on_a_user_message() -> None:
    # The steps evicted the task and the cut log, then the new call, its result and a
    # long reply, to open the request on the new question: 19 of 2,000 tokens sent.
    from cognoxium.formats.openai import from_openai_messages

    history = [{"role": "system", "content": "Agent."}, {"role": "user", "content": "Why?"}]
    history += _tool_step(0, 4000)
    first = from_openai_messages(history).pack(2000, as_of=AS_OF)
    assert [t.id for t in first.manifest.truncations] == ["msg:3"]
    history += _tool_step(1, 3)
    history += [
        {"role": "assistant", "content": "word " * 1900},
        {"role": "user", "content": "And?"},
    ]
    later = from_openai_messages(history).pack(2000, as_of=AS_OF, previous=first)
    assert later.ids == ["msg:0", "msg:4", "msg:5", "msg:6", "msg:7"]
    assert later.ids == from_openai_messages(history).pack(2000, as_of=AS_OF).ids
    report = later.manifest.cache
    assert report is not None
    assert report.evicted == ["msg:1", "msg:2", "msg:3"]
    assert later.used_tokens > 1900


def test_an_awaited_result_larger_than_the_budget_is_sent_cut_after_evictions() -> None:
    # Three steps of 460 words leave too little room for the newest call and 64 tokens
    # of its result of 3,000 words, more than the budget alone. Before, that step was
    # left out (group_over_budget), so the agent would call again; now the oldest steps
    # are evicted and the result is sent cut to what is left.
    from cognoxium.formats.openai import from_openai_messages

    history = [{"role": "system", "content": "Agent."}, {"role": "user", "content": "Fix it."}]
    for i in range(3):
        history += _tool_step(i, 460)
    previous = from_openai_messages(history).pack(1500, as_of=AS_OF)
    assert previous.ids == [f"msg:{i}" for i in range(8)]
    packed = from_openai_messages([*history, *_tool_step(3, 3000)]).pack(
        1500, as_of=AS_OF, previous=previous
    )
    assert packed.ids == ["msg:0", "msg:1", "msg:6", "msg:7", "msg:8", "msg:9"]
    assert packed.used_tokens == 1500
    (cut,) = packed.manifest.truncations
    assert (cut.id, cut.original_tokens) == ("msg:9", 3001)
    assert cut.kept_tokens > 64
    report = packed.manifest.cache
    assert report is not None
    assert (report.eviction_steps, report.evicted) == (1, ["msg:2", "msg:3", "msg:4", "msg:5"])
    # A result the evictions make room for is sent whole.
    whole = from_openai_messages([*history, *_tool_step(3, 600)]).pack(
        1500, as_of=AS_OF, previous=previous
    )
    assert whole.ids[-2:] == ["msg:8", "msg:9"]
    assert not whole.manifest.truncations


def test_a_continuing_pack_keeps_a_prefix_that_holds_no_user_message() -> None:
    # u0 never fit, so the earlier pack sent a0 without it. Continued, dropping the
    # pinned a0 would let the new memory d1 (sent as a user message) in: the default
    # rule that lets a user message in did so, and broke the prefix.
    spec: list[tuple[str, str, int, dict[str, Any]]] = [
        ("s0", "system", 5, {}),
        ("u0", "user", 80, {}),
        ("a0", "assistant", 20, {}),
    ]
    first = _chat(spec).pack(70, as_of=AS_OF)
    assert first.ids == ["s0", "a0"]
    again = _chat([*spec, ("d1", "memory", 12, {"rank": 1.0})]).pack(
        70, as_of=AS_OF, previous=first
    )
    assert again.ids == ["s0", "a0"]
    assert _reasons(again)["d1"] == "over_budget"
    assert again.manifest.cache is not None
    assert again.manifest.cache.prefix_ids == first.ids


def test_a_second_task_keeps_its_newest_step_after_an_earlier_turn() -> None:
    # An earlier finished turn, then a second task whose tool steps fill the budget.
    # Before, a step had to end on a user message: past the share none followed, so it
    # would evict all the history, the new step with it, and was not taken; the new
    # step was left out (group_over_budget) and stayed out of every later pack.
    from cognoxium.formats.openai import from_openai_messages

    history = [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": "Task one."},
        {"role": "assistant", "content": "Done one."},
        {"role": "user", "content": "Task two."},
        *_tool_step(1, 1500),
        *_tool_step(2, 400),
    ]
    first = from_openai_messages(history).pack(2600, as_of=AS_OF)
    assert first.ids == [f"msg:{i}" for i in range(8)]
    history += _tool_step(3, 1000)
    again = from_openai_messages(history).pack(2600, as_of=AS_OF, previous=first)
    assert again.ids == ["msg:0", "msg:3", "msg:6", "msg:7", "msg:8", "msg:9"]
    report = again.manifest.cache
    assert report is not None
    assert (report.eviction_steps, report.evicted) == (1, ["msg:1", "msg:2", "msg:4", "msg:5"])
    assert report.prefix_ids == ["msg:0"]
    history += _tool_step(4, 10)
    later = from_openai_messages(history).pack(2600, as_of=AS_OF, previous=again)
    assert later.ids == [*again.ids, "msg:10", "msg:11"]  # the prefix stays, and grows


def test_a_new_question_evicts_the_oldest_steps_of_the_turn_it_answers() -> None:
    # A task, its tool steps and a summary, then a new user message that does not fit.
    # Before, no user message followed the share of the history, so the step evicted
    # the whole turn, the summary the user answers with it: 24 of 520 tokens were sent.
    from cognoxium.formats.openai import from_openai_messages

    history = [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": "Task: " + "word " * 30},
        *_tool_step(1, 300),
        *_tool_step(2, 50),
        {"role": "assistant", "content": "Summary: " + "word " * 80},
    ]
    first = from_openai_messages(history).pack(520, as_of=AS_OF)
    assert first.ids == [f"msg:{i}" for i in range(7)]
    history.append({"role": "user", "content": "Continue with the second part, " * 3})
    again = from_openai_messages(history).pack(520, as_of=AS_OF, previous=first)
    assert again.ids == ["msg:0", "msg:1", "msg:4", "msg:5", "msg:6", "msg:7"]
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == ["msg:2", "msg:3"]
    assert report.prefix_ids == ["msg:0", "msg:1"]
