"""Safe dedupe: never across groups or tool calls; expired copies dropped before merging."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.engine.plan import Dedupe, Scan, Source
from cognoxium.exceptions import PlanError
from cognoxium.formats.openai import from_openai_messages, to_openai_messages
from cognoxium.frame.frame import CognitionFrame
from cognoxium.packing.message_rules import openai_faults
from cognoxium.packing.packer import PackManifest
from cognoxium.testing.strategies import chat_histories_strategy

T0 = datetime(2024, 1, 1, tzinfo=UTC)
AS_OF = datetime(2024, 6, 1, tzinfo=UTC)


def call(call_id: str, city: str) -> dict[str, Any]:
    arguments = json.dumps({"city": city})
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "weather", "arguments": arguments},
    }


# Two different tool calls answered with the same text, one of them with two parallel calls.
TOOL_CHAT: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [call("c1", "Paris")]},
    {"role": "tool", "tool_call_id": "c1", "content": "18 C, cloudy"},
    {"role": "user", "content": "And in Lyon and Nice?"},
    {"role": "assistant", "content": None, "tool_calls": [call("c2", "Lyon"), call("c3", "Nice")]},
    {"role": "tool", "tool_call_id": "c2", "content": "18 C, cloudy"},
    {"role": "tool", "tool_call_id": "c3", "content": "18 C, cloudy"},
    {"role": "assistant", "content": "All three: 18 C, cloudy."},
]


def test_tool_results_with_the_same_text_are_never_merged() -> None:
    cf = from_openai_messages(TOOL_CHAT, conversation_id="w", start=T0)
    result = cf.dedupe().pack(10_000, as_of=AS_OF)
    assert result.ids == [f"w:{i}" for i in range(8)]
    assert result.manifest.merges == []
    sent = to_openai_messages(result)  # every call has its result: the API accepts it
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["c1", "c2", "c3"]


@pytest.mark.parametrize(
    "steps", [{}, {"normalize": ["case", "whitespace"]}, {"threshold": 0.5}, {"merge": False}]
)
def test_no_dedupe_mode_merges_across_tool_calls(steps: dict[str, Any]) -> None:
    cf = from_openai_messages(TOOL_CHAT, conversation_id="w", start=T0)
    assert cf.dedupe(**steps).collect().height == 8


def test_groups_are_part_of_the_key_and_null_is_one_group() -> None:
    cf = CognitionFrame(
        [
            {"id": "a", "role": "document", "text": "same", "created_at": T0},
            {"id": "b", "role": "document", "text": "same", "created_at": T0, "group_id": "g1"},
            {"id": "c", "role": "document", "text": "same", "created_at": T0},
            {"id": "d", "role": "document", "text": "same", "created_at": T0, "group_id": "g2"},
            {"id": "e", "role": "document", "text": "same", "created_at": T0, "group_id": "g1"},
        ]
    )
    out = cf.dedupe().collect().select("id", "group_id", "merged_ids").rows()
    assert out == [("a", None, ["c"]), ("b", "g1", ["e"]), ("d", "g2", [])]


def docs(*extra: dict[str, Any]) -> CognitionFrame:
    """A current document and an expired copy of it (and any ``extra`` items)."""
    return CognitionFrame(
        [
            {
                "id": "old",
                "role": "document",
                "text": "Standard shipping: 3 days.",
                "created_at": T0,
                "expires_at": AS_OF - timedelta(days=30),
                "rank": 2.0,
            },
            {
                "id": "new",
                "role": "document",
                "text": "Standard shipping: 3 days.",
                "created_at": T0 + timedelta(days=60),
                "expires_at": AS_OF + timedelta(days=90),
            },
            *extra,
        ]
    )


def test_without_a_clock_the_merge_takes_the_earliest_expiry() -> None:
    # collect() has no as_of: expiry is not judged, the documented conservative rule holds.
    kept = docs().dedupe().collect().row(0, named=True)
    assert (kept["id"], kept["merged_ids"]) == ("old", ["new"])
    assert kept["expires_at"] == AS_OF - timedelta(days=30)
    assert "merge_dropped" not in docs().dedupe().collect().columns


def test_an_expired_copy_no_longer_hides_the_current_one_in_a_pack() -> None:
    result = docs().dedupe().pack(1000, as_of=AS_OF)
    assert result.ids == ["new"]  # before: the merged item expired and nothing was packed
    assert result.frame.row(0, named=True)["expires_at"] == AS_OF + timedelta(days=90)
    (merge,) = result.manifest.merges
    assert (merge.kept, merge.merged, merge.dropped) == ("new", [], {"old": "expired"})
    assert merge.resolved["expires_at"] == "2024-08-30T00:00:00Z"
    assert "expired_copies" in result.manifest.merge_rules
    assert json.loads(result.manifest.to_json())["merges"][0]["dropped"] == {"old": "expired"}
    again = PackManifest.from_json(result.manifest.to_json())
    assert again.to_json() == result.manifest.to_json()


def test_dedupe_given_as_of_drops_expired_and_not_yet_valid_copies() -> None:
    later = {
        "id": "later",
        "role": "document",
        "text": "Standard shipping: 3 days.",
        "created_at": T0,
        "valid_from": AS_OF + timedelta(days=1),
    }
    live = {
        "id": "live",
        "role": "document",
        "text": "Standard shipping: 3 days.",
        "created_at": T0,
        "expires_at": AS_OF + timedelta(days=10),
    }
    out = docs(later, live).dedupe(as_of=AS_OF).collect()
    row = out.row(0, named=True)
    assert (row["id"], row["merged_ids"]) == ("live", ["new"])
    assert row["expires_at"] == AS_OF + timedelta(days=10)  # the earliest of the live copies
    assert row["merge_dropped"] == [
        {"id": "later", "reason": "not_yet_valid"},
        {"id": "old", "reason": "expired"},
    ]
    assert out.height == 1


def test_copies_all_expired_merge_as_before_and_pack_excludes_them() -> None:
    gone = {
        "id": "gone",
        "role": "document",
        "text": "Standard shipping: 3 days.",
        "created_at": T0,
        "expires_at": AS_OF - timedelta(days=1),
    }
    cf = CognitionFrame([{**gone, "id": "gone-2", "expires_at": AS_OF - timedelta(days=2)}, gone])
    result = cf.dedupe().pack(1000, as_of=AS_OF)
    assert result.ids == []
    (entry,) = result.manifest.entries
    assert (entry.id, entry.reason) == ("gone", "expired")
    (merge,) = result.manifest.merges
    assert (merge.kept, merge.merged, merge.dropped) == ("gone", ["gone-2"], {})
    assert "dropped" not in json.loads(result.manifest.to_json())["merges"][0]


def test_a_second_dedupe_keeps_the_first_ones_record() -> None:
    cf = docs().dedupe(as_of=AS_OF).dedupe(by="text")
    row = cf.collect().row(0, named=True)
    assert row["merge_dropped"] == [{"id": "old", "reason": "expired"}]


def test_merge_false_drops_an_expired_first_copy_not_the_live_one() -> None:
    assert docs().dedupe(merge=False, as_of=AS_OF).collect().get_column("id").to_list() == ["new"]
    assert docs().dedupe(merge=False).collect().get_column("id").to_list() == ["old"]


def test_pack_judges_expiry_with_its_own_clock_and_explain_names_a_given_one() -> None:
    assert "as of 2024-06-01T00:00:00+00:00" in docs().dedupe(as_of=AS_OF).explain()
    # pack's clock fills only a dedupe without one: an explicit as_of is kept.
    early = AS_OF - timedelta(days=60)
    result = docs().dedupe(as_of=early).pack(1000, as_of=AS_OF)
    assert result.ids == []  # judged at "early", nothing dropped, the merge expired
    assert result.manifest.merges[0].merged == ["new"]


def test_safe_dedupe_packs_are_byte_identical() -> None:
    first = docs().dedupe().pack(1000, as_of=AS_OF).manifest.to_json()
    second = docs().dedupe().pack(1000, as_of=AS_OF).manifest.to_json()
    assert first == second


def test_dedupe_as_of_must_be_aware() -> None:
    scan = Scan(source=Source(pl.DataFrame({"content_hash": ["x"], "id": ["a"]})))
    with pytest.raises(PlanError, match="dedupe as_of must be a timezone-aware datetime"):
        Dedupe(input=scan, as_of=datetime(2024, 1, 1))
    with pytest.raises(PlanError, match="timezone-aware"):
        docs().dedupe(as_of=datetime(2024, 1, 1))


def test_pack_without_as_of_judges_expiry_now() -> None:
    far = datetime(2999, 1, 1, tzinfo=UTC)
    current = {
        "id": "current",
        "role": "document",
        "text": "Standard shipping: 3 days.",
        "created_at": T0,
        "expires_at": far,
    }
    result = docs(current).dedupe().pack(1000)  # "old" expired, "new" expired by now too
    assert result.ids == ["current"]
    assert result.manifest.merges[0].dropped == {"new": "expired", "old": "expired"}
    assert result.manifest.as_of < far


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chat_histories_strategy(max_turns=4, max_parallel_calls=3),
    st.sampled_from([{}, {"normalize": ["case", "whitespace"]}, {"threshold": 0.6}]),
)
def test_dedupe_never_takes_a_result_from_its_call(
    messages: list[dict[str, Any]], steps: dict[str, Any]
) -> None:
    cf = from_openai_messages(messages, conversation_id="c", start=T0)
    deduped = cf.dedupe(**steps).collect()
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    kept = deduped.filter(pl.col("role") == "tool").get_column("metadata").to_list()
    assert sorted(json.loads(m)["tool_call_id"] for m in kept) == sorted(results)
    # The deduped conversation renders (every result after its call) and packs whole, but
    # for the calls still waiting for a result, which a pack leaves out with their results.
    result = cf.dedupe(**steps).pack(100_000, as_of=AS_OF)
    sent = to_openai_messages(result)
    unsendable = {i for fault in openai_faults(messages) for i in fault.left_out}
    sendable = [
        m["tool_call_id"]
        for i, m in enumerate(messages)
        if m["role"] == "tool" and i not in unsendable
    ]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == sendable
