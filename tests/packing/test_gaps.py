"""Conversation items without a rank go newest first; gaps="stop" or "fill", each hole marked."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.exceptions import PackError
from cognoxium.formats.openai import from_openai_messages
from cognoxium.packing import GapRecord, PackManifest
from cognoxium.packing.options import GAP_MODES, PackOptions
from cognoxium.packing.packer import pack
from tests.packing.chats import chat

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
LONG = "word " * 80  # about 80 tokens


CHAT = chat(
    [
        ("sys", "system", "Be brief."),
        ("q1", "user", "Refunds?"),
        ("a1", "assistant", "Within 30 days."),
        ("q2", "user", "Shipping?"),
        ("a2", "assistant", LONG),
        ("q3", "user", "Returns?"),
        ("a3", "assistant", "Free."),
    ]
)


def reasons(result: Any) -> dict[str, str]:
    return dict(result.manifest.to_polars().select("id", "reason").iter_rows())


def test_conversation_without_rank_goes_newest_first_and_stops() -> None:
    # The cheapest-first order would take q1, a1, q2, q3, a3 (all short) and skip a2.
    result = pack(CHAT, 40, PackOptions(as_of=AS_OF))
    assert result.ids == ["sys", "q3", "a3"]
    # The first that does not fit is over budget; the older ones are left out for the tail.
    assert reasons(result) == {
        "sys": "required",
        "q1": "before_tail",
        "a1": "before_tail",
        "q2": "before_tail",
        "a2": "over_budget",
        "q3": "selected",
        "a3": "selected",
    }
    manifest = result.manifest
    assert manifest.totals.by_reason == {
        "before_tail": 3,
        "over_budget": 1,
        "required": 1,
        "selected": 2,
    }
    assert (manifest.order, manifest.gaps, manifest.gap_records) == ("recency", "stop", [])
    header = manifest.to_dict()
    assert header["order"] == "recency"
    assert "gaps" not in header
    assert "gap_records" not in header


def test_an_older_item_that_would_fit_is_before_the_tail_not_over_budget() -> None:
    chat_log = from_openai_messages(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "q " * 300},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "q2 " * 300},
            {"role": "assistant", "content": "a2"},
        ]
    )
    result = chat_log.pack(30, as_of=AS_OF)
    entries = result.manifest.to_polars()
    why = dict(entries.select("id", "reason").iter_rows())
    tokens = dict(entries.select("id", "tokens").iter_rows())
    assert result.ids == ["msg:0", "msg:4"]
    assert why["msg:3"] == "over_budget"  # the first that did not fit ends the tail
    # It would have fit the budget left, but the tail had stopped.
    assert why["msg:2"] == "before_tail"
    assert tokens["msg:2"] == 6
    assert result.remaining_tokens == 16
    assert why["msg:1"] == "before_tail"
    assert PackManifest.from_json(result.manifest.to_json()) == result.manifest
    filled = chat_log.pack(30, as_of=AS_OF, gaps="fill")
    assert "before_tail" not in filled.manifest.totals.by_reason
    assert dict(filled.manifest.to_polars().select("id", "reason").iter_rows())["msg:2"] == (
        "selected"
    )


def test_a_grouped_miss_keeps_its_reason_and_older_units_are_before_the_tail() -> None:
    df = CHAT.with_columns(
        group_id=pl.when(pl.col("id").is_in(["q2", "a2"])).then(pl.lit("turn-2")).otherwise(None)
    )
    result = pack(df, 40, PackOptions(as_of=AS_OF))
    assert result.ids == ["sys", "q3", "a3"]
    why = reasons(result)
    assert (why["q2"], why["a2"]) == ("group_over_budget", "group_over_budget")
    assert (why["q1"], why["a1"]) == ("before_tail", "before_tail")


def test_target_is_in_the_header_only_when_not_openai() -> None:
    openai = pack(CHAT, 40, PackOptions(as_of=AS_OF)).manifest
    assert openai.target == "openai"
    assert "target" not in openai.to_dict()
    anthropic = pack(CHAT, 40, PackOptions(as_of=AS_OF, target="anthropic")).manifest
    assert anthropic.target == "anthropic"
    assert anthropic.to_dict()["target"] == "anthropic"
    header = json.loads(anthropic.to_arrow().schema.metadata[b"cognoxium.manifest"])
    assert header["target"] == "anthropic"
    assert PackManifest.from_json(anthropic.to_json()) == anthropic
    assert PackManifest.from_json(anthropic.to_json()).target == "anthropic"


def test_fill_takes_older_items_and_marks_the_hole() -> None:
    result = pack(CHAT, 40, PackOptions(as_of=AS_OF, gaps="fill"))
    assert result.ids == ["sys", "a1", "q2", "q3", "a3"]
    assert reasons(result)["a2"] == "gap"
    assert reasons(result)["q1"] == "over_budget"  # older than every packed item: no hole
    manifest = result.manifest
    assert manifest.gap_records == [GapRecord(first=4, last=4, items=1)]
    assert manifest.totals.by_reason == {"gap": 1, "over_budget": 1, "required": 1, "selected": 4}
    header = manifest.to_dict()
    assert header["gaps"] == "fill"
    assert header["gap_records"] == [{"first": 4, "last": 4, "items": 1}]
    assert PackManifest.from_json(manifest.to_json()) == manifest


def test_a_required_item_older_than_the_tail_makes_a_gap_under_stop() -> None:
    df = CHAT.with_columns(
        retention=pl.when(pl.col("id") == "q1")
        .then(pl.lit("required"))
        .otherwise(pl.col("retention"))
        .cast(CHAT.schema["retention"])
    )
    result = pack(df, 45, PackOptions(as_of=AS_OF))
    assert result.ids == ["sys", "q1", "q3", "a3"]
    assert result.manifest.gap_records == [GapRecord(first=2, last=4, items=3)]
    assert {k: v for k, v in reasons(result).items() if v == "gap"} == {
        "a1": "gap",
        "q2": "gap",
        "a2": "gap",
    }


def test_gaps_enter_the_settings_fingerprint_only_when_fill() -> None:
    stop = pack(CHAT, 40, PackOptions(as_of=AS_OF)).manifest.fingerprints
    again = pack(CHAT, 40, PackOptions(as_of=AS_OF, gaps="stop")).manifest.fingerprints
    fill = pack(CHAT, 40, PackOptions(as_of=AS_OF, gaps="fill")).manifest.fingerprints
    assert stop == again
    assert fill["settings"] != stop["settings"]
    assert fill["input"] == stop["input"]


def test_ranked_items_keep_the_design_order_and_their_manifest() -> None:
    ranked = CHAT.with_columns(rank=pl.Series([None, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]))
    result = pack(ranked, 40, PackOptions(as_of=AS_OF))
    # rank ties: token cost asc, id asc, skip and continue; no gap is marked
    assert result.ids == ["sys", "q1", "q2", "q3", "a3"]
    assert reasons(result)["a1"] == "over_budget"
    assert reasons(result)["a2"] == "over_budget"
    header = result.manifest.to_dict()
    assert "order" not in header
    assert "gap_records" not in header
    assert result.manifest.order == "rank"
    fill = pack(ranked, 40, PackOptions(as_of=AS_OF, gaps="fill"))
    assert fill.ids == result.ids
    assert fill.manifest.gap_records == []


def test_documents_and_memories_keep_the_cost_order_before_the_conversation() -> None:
    df = chat(
        [
            ("sys", "system", "Be brief."),
            ("doc-long", "document", LONG),
            ("doc", "document", "Refunds take 30 days."),
            ("mem", "memory", "The customer prefers email."),
            ("q1", "user", "Refunds?"),
            ("a1", "assistant", "Within 30 days."),
            ("q2", "user", "Thanks"),
        ]
    )
    result = pack(df, 45, PackOptions(as_of=AS_OF))
    # documents and memories first, cheapest first; then the conversation newest first
    assert result.ids == ["sys", "doc", "mem", "a1", "q2"]
    assert reasons(result)["doc-long"] == "over_budget"
    assert reasons(result)["q1"] == "over_budget"
    assert result.manifest.order == "recency"


def test_only_documents_keep_the_rank_order_name() -> None:
    df = chat([("d1", "document", "alpha"), ("d2", "document", "beta gamma")])
    assert pack(df, 100, PackOptions(as_of=AS_OF)).manifest.order == "rank"


def test_a_tool_exchange_is_one_unit_in_the_tail() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chat = from_openai_messages(
        [
            {"role": "user", "content": "Where is my order?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": LONG},
            {"role": "user", "content": "Thanks"},
        ]
    )
    for mode in GAP_MODES:
        result = chat.pack(40, as_of=AS_OF, gaps=mode)
        expected = ["msg:3"] if mode == "stop" else ["msg:0", "msg:3"]
        assert result.ids == expected, mode
        assert reasons(result)["msg:1"] == reasons(result)["msg:2"]
    filled = chat.pack(40, as_of=AS_OF, gaps="fill").manifest
    assert filled.gap_records == [GapRecord(first=1, last=2, items=2)]


def _call(i: int) -> dict[str, Any]:
    """An assistant message calling ``read_file`` with call id ``c<i>``."""
    function = {"name": "read_file", "arguments": json.dumps({"path": f"f{i}.py"})}
    call = {"id": f"c{i}", "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _agent_loop(*, log_lines: int) -> CognitionFrame:
    """A half-finished agent loop: the task, then three tool exchanges, the first one long."""
    return from_openai_messages(
        [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing test in tests/test_io.py."},
            _call(1),
            {"role": "tool", "tool_call_id": "c1", "content": "log line\n" * log_lines},
            _call(2),
            {"role": "tool", "tool_call_id": "c2", "content": "def read(path): ..."},
            _call(3),
            {"role": "tool", "tool_call_id": "c3", "content": "assert read('x') == 1"},
        ]
    )


@pytest.mark.parametrize(
    "options", [{"start_on": "user"}, {"target": "anthropic"}], ids=["start_on", "anthropic"]
)
def test_the_tail_reaches_back_past_a_long_tool_result_to_the_task(
    options: dict[str, str],
) -> None:
    # The tail of tool exchanges holds no user message: the task lies past the long
    # result. Ending the tail there left the start rule nothing but the system prompt
    # (before: ["msg:0"], every exchange "before_first_user" and the task "before_tail"),
    # and a pack without the start rule the exchanges without their task.
    loop = _agent_loop(log_lines=2000)
    result = loop.pack(500, as_of=AS_OF, **options)
    assert result.ids == ["msg:0", "msg:1", "msg:4", "msg:5", "msg:6", "msg:7"]
    why = reasons(result)
    assert why["msg:2"] == why["msg:3"] == "gap"
    assert result.manifest.gap_records == [GapRecord(first=2, last=3, items=2)]
    assert result.manifest.totals.by_reason == {"required": 1, "selected": 5, "gap": 2}
    roles = [m["role"] for m in result.to_anthropic()["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    noted = loop.pack(500, as_of=AS_OF, gap_note="({n} messages omitted)", **options)
    assert "(2 messages omitted)" in json.dumps(noted.messages)
    # The same without the start rule: the task is not lost.
    assert loop.pack(500, as_of=AS_OF).ids == result.ids


@pytest.mark.parametrize("options", [{}, {"start_on": "user"}, {"target": "anthropic"}])
def test_the_newest_tool_step_is_kept_over_an_older_one(options: dict[str, str]) -> None:
    # Before, the start rule dropped the newest step (the tail c:4, c:5 held no user
    # message) and selecting again sent the older one: ["c:0", "c:1", "c:2", "c:3"].
    loop = from_openai_messages(
        [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Fix the failing test."},
            _call(2),
            {"role": "tool", "tool_call_id": "c2", "content": "word " * 440},
            _call(4),
            {"role": "tool", "tool_call_id": "c4", "content": "word " * 170},
        ],
        conversation_id="c",
    )
    result = loop.pack(500, as_of=AS_OF, **options)
    assert result.ids == ["c:0", "c:1", "c:4", "c:5"]
    assert reasons(result)["c:2"] == reasons(result)["c:3"] == "gap"


def test_the_first_miss_after_the_user_message_taken_ends_the_tail() -> None:
    chat_log = from_openai_messages(
        [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": LONG},
            {"role": "user", "content": "Fix the failing test."},
            {"role": "assistant", "content": "Reading the log.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": LONG * 3},
            {"role": "assistant", "content": "The log is long; reading the test instead."},
        ]
    )  # fmt: skip
    result = chat_log.pack(60, as_of=AS_OF, start_on="user")
    assert result.ids == ["msg:2", "msg:5"]
    assert reasons(result) == {
        "msg:0": "before_tail",
        "msg:1": "over_budget",  # ends the tail: the user message msg:2 was taken
        "msg:2": "selected",
        "msg:3": "gap",
        "msg:4": "gap",
        "msg:5": "selected",
    }
    assert result.manifest.gap_records == [GapRecord(first=3, last=4, items=2)]


def test_a_user_message_that_does_not_fit_still_ends_the_tail() -> None:
    # Only tool exchanges and replies are passed over: a reply whose question did not
    # fit is not sent after older turns, as the start rule would otherwise leave it.
    chat_log = from_openai_messages(
        [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": LONG * 3},
            {"role": "assistant", "content": "A summary of your log."},
        ]
    )
    assert chat_log.pack(60, as_of=AS_OF).ids == ["msg:3"]  # the tail: the reply alone
    for options in ({"start_on": "user"}, {"target": "anthropic"}):
        result = chat_log.pack(60, as_of=AS_OF, **options)
        assert result.ids == [], options
        assert reasons(result) == {
            "msg:0": "before_tail",
            "msg:1": "before_tail",
            "msg:2": "over_budget",
            "msg:3": "before_first_user",
        }


def test_a_tail_with_no_user_message_in_reach_is_dropped_by_the_start_rule() -> None:
    # The task itself does not fit: nothing opens the conversation, as before.
    loop = _agent_loop(log_lines=10).with_columns(
        text=pl.when(pl.col("id") == "msg:1").then(pl.lit(LONG * 10)).otherwise(pl.col("text"))
    )
    result = loop.pack(150, as_of=AS_OF, start_on="user")
    why = reasons(result)
    assert result.ids == ["msg:0"]
    assert why["msg:1"] == "over_budget"
    assert {why[f"msg:{i}"] for i in range(2, 8)} <= {"before_first_user", "before_tail"}


@pytest.mark.parametrize("mode", GAP_MODES)
def test_frame_pack_takes_gaps_as_a_keyword(mode: str) -> None:
    cf = CognitionFrame(CHAT)
    assert cf.pack(40, as_of=AS_OF, gaps=mode).manifest.gaps == mode  # type: ignore[arg-type]
    options = PackOptions(as_of=AS_OF, gaps="fill")
    assert cf.pack(40, options, gaps=mode).manifest.gaps == mode  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["skip", "", None, True, 1])
def test_a_bad_gaps_value_is_a_pack_error_naming_the_option(bad: object) -> None:
    with pytest.raises(PackError, match=r"^gaps must be one of \['stop', 'fill'\]"):
        PackOptions(gaps=bad)  # type: ignore[arg-type]


def test_frame_pack_refuses_a_bad_gaps_value() -> None:
    with pytest.raises(PackError, match="gaps must be one of"):
        CognitionFrame(CHAT).pack(40, as_of=AS_OF, gaps="holes")  # type: ignore[arg-type]


def test_repr_shows_gaps() -> None:
    assert "gaps='fill'" in repr(PackOptions(gaps="fill"))
