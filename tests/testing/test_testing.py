"""cognoxium.testing: pack and manifest asserts name each difference; the public strategies."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.formats.openai import from_openai_messages, to_openai_messages
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.model import ContextItem
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import PackManifest, pack
from cognoxium.testing import assert_manifest_equal, assert_pack_equal
from cognoxium.testing.strategies import (
    CHAT_WORDS,
    chat_histories_strategy,
    frames_strategy,
    items_strategy,
)
from tests.reach import reached, reaching

AS_OF = datetime(2030, 6, 1, tzinfo=UTC)
T0 = "2030-01-01T00:00:00Z"
ROWS = [
    {"id": "sys", "role": "system", "text": "Be brief.", "retention": "required"},
    {"id": "q", "role": "user", "text": "What is the refund window?"},
    {"id": "doc", "role": "document", "text": "refund window " * 40},
]


def frame(rows: list[dict[str, Any]] = ROWS) -> CognitionFrame:
    """A frame of ``rows``, each created at T0 unless it says otherwise."""
    return CognitionFrame([{"created_at": T0, **row} for row in rows])


def failure(check: Any, *args: Any, **kwargs: Any) -> str:
    """The message of the AssertionError that ``check(*args, **kwargs)`` raises."""
    with pytest.raises(AssertionError) as info:
        check(*args, **kwargs)
    return str(info.value)


def blocks(message: str) -> dict[str, tuple[str, str]]:
    """A failure message as {path: (left, right)}."""
    out = {}
    for block in message.split("\n\n")[1:]:
        lines = block.splitlines()
        if len(lines) == 3:
            out[lines[0]] = (lines[1].removeprefix("[left]:  "), lines[2].removeprefix("[right]: "))
    return out


# ---------------------------------------------------------------------------
# equal inputs


def test_equal_packs_and_manifests_pass() -> None:
    left, right = frame().pack(100, as_of=AS_OF), frame().pack(100, as_of=AS_OF)
    assert assert_pack_equal(left, right) is None
    assert assert_manifest_equal(left.manifest, right.manifest) is None


def test_a_manifest_equals_its_json_round_trip_as_object_and_as_data() -> None:
    manifest = frame().pack(100, as_of=AS_OF).manifest
    assert_manifest_equal(manifest, PackManifest.from_json(manifest.to_json()))
    assert_manifest_equal(manifest, json.loads(manifest.to_json()))
    assert_manifest_equal(json.loads(manifest.to_json()), manifest.to_dict())


def test_nan_ranks_are_equal() -> None:
    cf = frame().with_columns(rank=pl.lit(float("nan")))
    assert_pack_equal(cf.pack(100, as_of=AS_OF), cf.pack(100, as_of=AS_OF))


# ---------------------------------------------------------------------------
# each kind of difference


def test_header_fields_are_named_with_both_values() -> None:
    message = failure(
        assert_manifest_equal,
        frame().pack(100, as_of=AS_OF).manifest,
        frame().pack(100, as_of=AS_OF, label="run 2").manifest,
    )
    assert (
        message
        == "PackManifest are different (1 difference)\n\nlabel\n[left]:  None\n[right]: 'run 2'"
    )


def test_entry_fields_are_named_by_item_id() -> None:
    found = blocks(
        failure(
            assert_manifest_equal,
            frame().pack(200, as_of=AS_OF).manifest,
            frame().pack(40, as_of=AS_OF).manifest,
        )
    )
    assert found["entries[id='doc'].reason"] == ("'selected'", "'over_budget'")
    assert found["entries[id='doc'].decision"] == ("'included'", "'excluded'")
    assert found["entries[id='doc'].pack_position"] == ("2", "None")
    assert found["budget"] == ("200", "40")
    assert found["totals.by_reason.over_budget"] == ("<missing>", "1")
    assert not any("id='q'" in path or "id='sys'" in path for path in found)


def test_items_missing_on_one_side_show_as_the_entry_ids() -> None:
    found = blocks(
        failure(
            assert_manifest_equal,
            frame().pack(200, as_of=AS_OF).manifest,
            frame(ROWS[:2]).pack(200, as_of=AS_OF).manifest,
        )
    )
    assert found["entries ids"] == ("['sys', 'q', 'doc']", "['sys', 'q']")
    assert found["totals.items"] == ("3", "2")
    assert "fingerprints.input" in found


def test_a_changed_text_shows_in_the_input_fingerprint_and_the_content_hash() -> None:
    rows = [*ROWS[:2], {**ROWS[2], "text": "shipping days " * 40}]
    found = blocks(
        failure(
            assert_manifest_equal,
            frame().pack(200, as_of=AS_OF).manifest,
            frame(rows).pack(200, as_of=AS_OF).manifest,
        )
    )
    assert "fingerprints.input" in found
    assert "entries[id='doc'].content_hash" in found
    assert "entries[id='q'].content_hash" not in found


def test_a_moved_item_shows_in_the_ids_and_its_position() -> None:
    found = blocks(
        failure(
            assert_manifest_equal,
            frame().pack(200, as_of=AS_OF).manifest,
            frame([ROWS[1], ROWS[0], ROWS[2]]).pack(200, as_of=AS_OF).manifest,
        )
    )
    assert found["entries ids"] == ("['sys', 'q', 'doc']", "['q', 'sys', 'doc']")
    assert found["entries[id='sys'].position"] == ("0", "1")
    assert found["entries[id='q'].position"] == ("1", "0")
    assert "entries[id='doc'].position" not in found


def test_pack_differences_name_frame_rows_messages_and_manifest_fields() -> None:
    left = frame().pack(200, as_of=AS_OF)
    rows = [ROWS[0], {**ROWS[1], "text": "WHAT IS THE REFUND WINDOW?"}, ROWS[2]]
    right = frame(rows).pack(200, as_of=AS_OF)
    found = blocks(failure(assert_pack_equal, left, right))
    assert found["frame[id='q'].text"] == (
        "'What is the refund window?'",
        "'WHAT IS THE REFUND WINDOW?'",
    )
    assert found["messages[1] (id 'q').content"] == found["frame[id='q'].text"]
    assert "frame[id='q'].content_hash" in found
    assert "manifest.fingerprints.input" in found
    assert "manifest.entries[id='q'].content_hash" in found
    assert not any("id='doc'" in path for path in found)


def test_pack_token_counts_and_message_counts_are_compared() -> None:
    left, right = frame().pack(200, as_of=AS_OF), frame().pack(40, as_of=AS_OF)
    found = blocks(failure(assert_pack_equal, left, right))
    assert found["budget"] == ("200", "40")
    assert found["used_tokens"] == (str(left.used_tokens), str(right.used_tokens))
    assert found["remaining_tokens"] == (str(left.remaining_tokens), str(right.remaining_tokens))
    assert found["len(messages)"] == ("3", "2")
    assert found["frame ids"] == ("['sys', 'q', 'doc']", "['sys', 'q']")


def test_frame_columns_and_dtypes_are_compared() -> None:
    left = frame().pack(200, as_of=AS_OF)
    extra = dataclasses.replace(left, frame=left.frame.with_columns(score=pl.lit(1.0)))
    found = blocks(failure(assert_pack_equal, left, extra))
    assert found["frame columns"][1].endswith("'metadata', 'score']")
    narrowed = dataclasses.replace(
        extra, frame=extra.frame.with_columns(pl.col("score").cast(pl.Float32))
    )
    found = blocks(failure(assert_pack_equal, extra, narrowed))
    assert found["frame['score'] dtype"] == ("Float64", "Float32")


def test_lists_in_the_header_are_compared_element_by_element() -> None:
    manifest = frame().pack(200, as_of=AS_OF).manifest.to_dict()
    other = {**manifest, "policies": [{"name": "boundary", "fingerprint": "f2"}]}
    manifest["policies"] = [{"name": "boundary", "fingerprint": "f1"}]
    found = blocks(failure(assert_manifest_equal, manifest, other))
    assert found == {"policies[0].fingerprint": ("'f1'", "'f2'")}


def test_many_differences_are_cut_after_twenty() -> None:
    rows = [{"id": f"d{i}", "role": "document", "text": f"text {i}"} for i in range(30)]
    changed = [{**row, "text": row["text"] + "!"} for row in rows]
    message = failure(
        assert_manifest_equal,
        frame(rows).pack(1000, as_of=AS_OF).manifest,
        frame(changed).pack(1000, as_of=AS_OF).manifest,
        ignore_fields={"fingerprints", "used_tokens", "remaining_tokens", "entries.tokens"},
    )
    assert message.startswith("PackManifest are different (30 differences)")
    assert message.endswith("... and 10 more differences")
    assert len(blocks(message)) == 20


def test_inputs_of_the_wrong_type_fail() -> None:
    result = frame().pack(100, as_of=AS_OF)
    message = failure(assert_pack_equal, result, result.manifest)
    assert message == "right is a PackManifest, expected a ContextPack"
    message = failure(assert_manifest_equal, result, result.manifest)
    assert message == "expected a PackManifest or a mapping of manifest data, got ContextPack"


# ---------------------------------------------------------------------------
# ignore options


def test_ignore_as_of_drops_as_of_and_the_settings_fingerprint_only() -> None:
    left = frame().pack(100, as_of=AS_OF)
    right = frame().pack(100, as_of=AS_OF + timedelta(days=30))
    found = blocks(failure(assert_pack_equal, left, right))
    assert set(found) == {"manifest.as_of", "manifest.fingerprints.settings"}
    assert_pack_equal(left, right, ignore_as_of=True)
    assert_manifest_equal(left.manifest, right.manifest, ignore_as_of=True)


def test_ignore_as_of_keeps_decisions_that_depend_on_the_time() -> None:
    rows = [*ROWS, {"id": "old", "role": "document", "text": "x", "expires_at": AS_OF}]
    early = frame(rows).pack(200, as_of=AS_OF - timedelta(days=1))
    late = frame(rows).pack(200, as_of=AS_OF)
    found = blocks(failure(assert_manifest_equal, early.manifest, late.manifest, ignore_as_of=True))
    assert found["entries[id='old'].reason"] == ("'selected'", "'expired'")
    assert "as_of" not in found


def test_ignore_timings_drops_timing_keys_at_any_depth() -> None:
    manifest = frame().pack(100, as_of=AS_OF).manifest.to_dict()
    left = {**manifest, "timings": {"select": 0.1}, "pack_seconds": 0.2}
    right = {**manifest, "timings": {"select": 0.3}, "pack_seconds": 0.4}
    right["totals"] = {**manifest["totals"], "count_ms": 5.0}
    found = blocks(failure(assert_manifest_equal, left, right))
    assert set(found) == {"timings.select", "pack_seconds", "totals.count_ms"}
    assert_manifest_equal(left, right, ignore_timings=True)
    # Other fields are still compared.
    right["used_tokens"] = -1
    found = blocks(failure(assert_manifest_equal, left, right, ignore_timings=True))
    assert set(found) == {"used_tokens"}


def test_ignore_timings_leaves_frame_columns_alone() -> None:
    left = frame().pack(200, as_of=AS_OF)
    timed = dataclasses.replace(left, frame=left.frame.with_columns(latency_ms=pl.lit(1.0)))
    found = blocks(failure(assert_pack_equal, left, timed, ignore_timings=True))
    assert set(found) == {"frame columns"}


def test_ignore_fields_drops_dotted_paths() -> None:
    left = frame().pack(200, as_of=AS_OF, label="a")
    right = frame().pack(40, as_of=AS_OF, label="b")
    found = blocks(
        failure(
            assert_manifest_equal,
            left.manifest,
            right.manifest,
            ignore_fields={"label", "budget", "totals", "fingerprints.settings"},
        )
    )
    assert "label" not in found
    assert "budget" not in found
    assert not any(path.startswith("totals") for path in found)
    assert "entries[id='doc'].reason" in found
    assert_manifest_equal(
        left.manifest,
        right.manifest,
        ignore_fields={
            "label",
            "budget",
            "used_tokens",
            "remaining_tokens",
            "totals",
            "fingerprints",
            "entries",
        },
    )
    assert_pack_equal(
        left,
        right,
        ignore_fields={
            "budget",
            "used_tokens",
            "remaining_tokens",
            "frame",
            "messages",
            "manifest",
        },
    )


def test_ignore_fields_reaches_single_entry_fields_and_frame_columns() -> None:
    left = frame().pack(200, as_of=AS_OF)
    right = frame().with_columns(priority=pl.lit(1, pl.Int64)).pack(200, as_of=AS_OF)
    found = blocks(
        failure(
            assert_pack_equal,
            left,
            right,
            ignore_fields={"frame.priority", "manifest.fingerprints"},
        )
    )
    assert set(found) == {f"manifest.entries[id={i!r}].priority" for i in ("sys", "q", "doc")}
    assert_pack_equal(
        left,
        right,
        ignore_fields={"frame.priority", "manifest.fingerprints", "manifest.entries.priority"},
    )


def test_ignore_fields_must_be_a_collection() -> None:
    result = frame().pack(100, as_of=AS_OF)
    with pytest.raises(TypeError, match="collection of dotted paths"):
        assert_pack_equal(result, result, ignore_fields="label")


# ---------------------------------------------------------------------------
# the strategies


def test_strategies_need_the_testing_extra_and_the_asserts_do_not() -> None:
    code = (
        "import sys\n"
        "sys.modules['hypothesis'] = None\n"
        "import cognoxium.testing\n"
        "from cognoxium.exceptions import DependencyError\n"
        "try:\n"
        "    import cognoxium.testing.strategies\n"
        "except DependencyError as exc:\n"
        "    print(exc)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'cognoxium-engine[testing]'" in run.stdout
    assert "hypothesis is not installed" in run.stdout


def _without_required(df: pl.DataFrame) -> pl.DataFrame:
    """The frame with its required items made preferred: no pack of it is refused."""
    retention = pl.col("retention")
    preferred = pl.when(retention == "required").then(pl.lit("preferred")).otherwise(retention)
    return df.with_columns(preferred.cast(df.schema["retention"]).alias("retention"))


@reaching(0.8)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames_strategy(max_size=8).map(_without_required), st.integers(0, 300))
def test_packing_is_reproducible_and_a_budget_change_is_reported(
    df: pl.DataFrame, budget: int
) -> None:
    left = pack(df, budget, PackOptions(as_of=AS_OF))  # no required item: never refused
    assert_pack_equal(left, pack(df, budget, PackOptions(as_of=AS_OF)))
    assert_manifest_equal(left.manifest, PackManifest.from_json(left.manifest.to_json()))
    right = pack(df, budget + 50, PackOptions(as_of=AS_OF))
    found = blocks(failure(assert_pack_equal, left, right))
    assert found["budget"] == (str(budget), str(budget + 50))
    assert found["manifest.budget"] == found["budget"]
    reached("budget change reported")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat_histories_strategy(), st.integers(1, 400))
def test_chat_histories_pack_the_same_at_any_later_time(
    messages: list[dict[str, Any]], budget: int
) -> None:
    # Optional system messages: any budget from 1 token packs without a BudgetError.
    cf = from_openai_messages(messages, conversation_id="c", system_retention="optional")
    left = cf.pack(budget, as_of=AS_OF)
    right = cf.pack(budget, as_of=AS_OF + timedelta(days=365))
    assert_pack_equal(left, right, ignore_as_of=True)
    assert set(blocks(failure(assert_pack_equal, left, right))) == {
        "manifest.as_of",
        "manifest.fingerprints.settings",
    }
    assert to_openai_messages(left) == to_openai_messages(right)


@settings(max_examples=30, deadline=None)
@given(chat_histories_strategy(max_turns=3, max_parallel_calls=2))
def test_chat_histories_are_valid_and_keep_their_calls(messages: list[dict[str, Any]]) -> None:
    user_turns = [m for m in messages if m["role"] == "user"]
    assert 1 <= len(user_turns) <= 3
    calls = [c["id"] for m in messages for c in m.get("tool_calls", [])]
    assert len(calls) == len(set(calls))
    assert all(len(m.get("tool_calls", [])) <= 2 for m in messages)
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert set(results) <= set(calls)
    assert len(results) == len(set(results))
    texts = [m["content"] for m in messages if m["content"] is not None]
    assert {word for text in texts for word in text.split(" ")} <= set(CHAT_WORDS)
    items = from_openai_messages(messages).to_items()
    assert len(items) == len(messages)


@settings(max_examples=30, deadline=None)
@given(items_strategy(min_size=1, max_size=6))
def test_items_strategy_gives_unique_ids_and_items_that_round_trip(
    items: list[ContextItem],
) -> None:
    assert sorted(item.id for item in items) == [f"i{k:02d}" for k in range(len(items))]
    assert CognitionFrame(items).to_items() == items
