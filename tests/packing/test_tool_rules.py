"""Tool histories the chat APIs accept: the validators, the importers and ``tool_errors``.

Each malformed case is one class of fault: an assistant message with two calls
and one result, an unanswered last call, a result after an intervening user
message, an orphan result and a duplicate result. For each, the importers
either take the history or raise a typed error naming the message, and a pack
either raises a typed error naming the message (``tool_errors="error"``) or is
a request the validators accept (``"repair"``, the default).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import MessageError, PackError, RecordError
from cognoxium.formats.anthropic import from_anthropic_messages
from cognoxium.formats.openai import from_openai_messages
from cognoxium.items.validation import conform
from cognoxium.packing.message_rules import (
    MESSAGE_RULES,
    anthropic_faults,
    openai_faults,
    validate_anthropic_messages,
    validate_openai_messages,
)
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, pack
from cognoxium.testing.strategies import chat_histories_strategy

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def call(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def asks(*ids: str, text: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "tool_calls": [call(i) for i in ids]}


def tool_result(call_id: str, text: str = "42") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def items(rows: list[tuple[str, dict[str, Any], str | None]]) -> pl.DataFrame:
    """Items made as they stand, without the importers' checks: (id, message, group_id)."""
    roles, texts, metadata = [], [], []
    for _, message, _ in rows:
        roles.append(message["role"])
        meta: dict[str, Any] = {}
        if message.get("tool_calls"):
            meta = {
                "tool_call_ids": [c["id"] for c in message["tool_calls"]],
                "tool_calls": message["tool_calls"],
            }
        if message["role"] == "tool":
            meta = {"tool_call_id": message["tool_call_id"]}
        texts.append(message.get("content") or "(calling tools)")
        metadata.append(json.dumps(meta))
    return conform(
        pl.DataFrame(
            {
                "id": [r[0] for r in rows],
                "role": roles,
                "text": texts,
                "metadata": metadata,
                "group_id": [r[2] for r in rows],
                "created_at": [T0 + timedelta(minutes=i) for i in range(len(rows))],
            }
        )
    )


def reasons(result: ContextPack) -> dict[str, str]:
    return dict(result.manifest.to_polars().select("id", "reason").iter_rows())


def assert_renders_valid(result: ContextPack) -> None:
    """Every rendering of the pack passes the validators (and the SDK types when installed)."""
    validate_openai_messages(result.to_openai())
    request = result.to_anthropic()
    validate_anthropic_messages(request)
    try:
        from anthropic.types import MessageParam
        from openai.types.chat import ChatCompletionMessageParam
        from pydantic import TypeAdapter
    except ImportError:  # pragma: no cover - the dev environment has both SDKs
        return
    TypeAdapter(list[MessageParam]).validate_python(copy.deepcopy(request["messages"]))
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(result.to_openai())


# The five classes of fault, as the rows of a history (grouped as the importers group).
CASES: dict[str, tuple[list[tuple[str, dict[str, Any], str | None]], str, int, list[str]]] = {
    # name: rows, the rule broken, the row named, the rows repair leaves out
    "two calls, one result": (
        [
            ("q", user("Weather in Paris and Rome?"), None),
            ("a", asks("c1", "c2"), "g"),
            ("r1", tool_result("c1"), "g"),
            ("q2", user("Thanks"), None),
        ],
        "tool_call_unanswered",
        1,
        ["a", "r1"],
    ),
    "unanswered last call": (
        [
            ("q", user("Weather in Paris?"), None),
            ("a", asks("c1"), "g"),
        ],
        "tool_call_unanswered",
        1,
        ["a"],
    ),
    "result after an intervening user message": (
        [
            ("q", user("Weather in Paris?"), None),
            ("a", asks("c1"), "g"),
            ("q2", user("Hurry up"), None),
            ("r1", tool_result("c1"), "g"),
        ],
        "tool_call_unanswered",
        1,
        ["a", "r1"],
    ),
    "orphan result": (
        [
            ("q", user("Weather in Paris?"), None),
            ("r9", tool_result("c9"), None),
            ("q2", user("Thanks"), None),
        ],
        "tool_result_orphan",
        1,
        ["r9"],
    ),
    "duplicate result": (
        [
            ("q", user("Weather in Paris?"), None),
            ("a", asks("c1"), None),
            ("r1", tool_result("c1"), None),
            ("r1b", tool_result("c1", "43"), None),
            ("q2", user("Thanks"), None),
        ],
        "tool_result_duplicate",
        3,
        ["r1b"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_fault_is_named_by_the_validator(case: str) -> None:
    rows, rule, at, _ = CASES[case]
    messages = [message for _, message, _ in rows]
    with pytest.raises(MessageError) as caught:
        validate_openai_messages(messages)
    assert (caught.value.index, caught.value.rule) == (at, rule)
    assert caught.value.code == "messages.invalid"
    assert f"rule {rule}" in str(caught.value)


@pytest.mark.parametrize("case", list(CASES))
def test_each_fault_packed_with_error_names_the_message_and_the_rule(case: str) -> None:
    rows, rule, at, _ = CASES[case]
    with pytest.raises(MessageError, match=f"message {at} of the pack") as caught:
        pack(items(rows), 10_000, PackOptions(as_of=AS_OF, tool_errors="error"))
    assert (caught.value.index, caught.value.rule) == (at, rule)
    assert caught.value.params["id"] == rows[at][0]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("turns", [False, True])
def test_each_fault_is_repaired_by_default_with_a_reason(case: str, turns: bool) -> None:
    rows, rule, _, left_out = CASES[case]
    result = pack(items(rows), 10_000, PackOptions(as_of=AS_OF, turns=turns))
    why = reasons(result)
    assert {i for i, r in why.items() if r.startswith("tool_")} == set(left_out)
    assert all(why[i] == rule or rule == "tool_call_unanswered" for i in left_out)
    assert set(result.ids) == {r[0] for r in rows} - set(left_out)  # the rest is sent
    assert_renders_valid(result)


def test_a_misplaced_result_is_its_calls_fault_and_an_orphan_as_the_api_reports_them() -> None:
    rows, *_ = CASES["result after an intervening user message"]
    faults = openai_faults([message for _, message, _ in rows])
    assert [(f.index, f.rule, f.left_out) for f in faults] == [
        (1, "tool_call_unanswered", (1,)),
        (3, "tool_result_orphan", (3,)),
    ]
    assert "results come later, after another message: 'c1' at message 3" in faults[0].text
    assert "its call is made by message 1, but message 2 (user) comes between" in faults[1].text


def test_the_manifest_names_the_rule_of_each_row_left_out() -> None:
    rows, *_ = CASES["two calls, one result"]
    result = pack(items(rows), 10_000, PackOptions(as_of=AS_OF))
    assert reasons(result) == {
        "q": "selected",
        "a": "tool_call_unanswered",
        "r1": "tool_call_unanswered",
        "q2": "selected",
    }
    assert result.manifest.totals.by_reason == {"selected": 2, "tool_call_unanswered": 2}


def test_a_half_finished_agent_loop_packs_everything_before_its_pending_call() -> None:
    history = [
        user("Weather in Paris?"),
        asks("c1"),
        tool_result("c1", "18 C"),
        {"role": "assistant", "content": "18 C in Paris."},
        user("And Rome?"),
        asks("c2"),
    ]
    frame = from_openai_messages(history, conversation_id="c")
    result = frame.pack(10_000, as_of=AS_OF)
    assert result.ids == ["c:0", "c:1", "c:2", "c:3", "c:4"]
    assert reasons(result)["c:5"] == "tool_call_unanswered"
    assert_renders_valid(result)
    with pytest.raises(MessageError, match=r"message 5 of the pack \(item 'c:5', row 5\)"):
        frame.pack(10_000, as_of=AS_OF, tool_errors="error")


def test_a_turn_keeps_its_question_when_its_pending_call_is_left_out() -> None:
    frame = from_openai_messages([user("Weather in Rome?"), asks("c2")], conversation_id="c")
    result = frame.pack(10_000, as_of=AS_OF, turns=True)
    assert result.ids == ["c:0"]
    assert_renders_valid(result)


def test_a_selection_that_splits_an_ungrouped_call_from_its_result_is_repaired() -> None:
    # Without a group the call and its result are separate units: the budget fits the
    # result but not the long call, so the result alone would be an orphan.
    rows = [
        ("q", user("Weather?"), None),
        ("a", asks("c1", text="word " * 200), None),
        ("r1", tool_result("c1"), None),
    ]
    df = items(rows)
    # gaps="fill": older messages fill the space the long call leaves.
    result = pack(df, 60, PackOptions(as_of=AS_OF, gaps="fill"))
    assert result.ids == ["q"]
    assert reasons(result) == {"q": "selected", "a": "over_budget", "r1": "tool_result_orphan"}
    assert_renders_valid(result)
    # The default, gaps="stop": the long call holds no user message and none newer was
    # taken, so the tail runs on to the question; the result left alone is repaired away.
    tail = pack(df, 60, PackOptions(as_of=AS_OF))
    assert tail.ids == ["q"]
    assert reasons(tail) == {"q": "selected", "a": "over_budget", "r1": "tool_result_orphan"}
    assert_renders_valid(tail)
    with pytest.raises(MessageError, match="Give a call and its results one group_id"):
        pack(df, 60, PackOptions(as_of=AS_OF, tool_errors="error"))


def test_the_freed_tokens_go_to_the_next_candidates() -> None:
    rows = [
        ("old", user("word " * 30), None),
        ("q", user("Weather?"), None),
        ("a", asks("c1", "c2", text="word " * 30), "g"),
        ("r1", tool_result("c1"), "g"),
    ]
    df = items(rows).with_columns(rank=pl.Series([0.0, 1.0, 2.0, 2.0]))
    cost = pack(df, 10_000, PackOptions(as_of=AS_OF)).used_tokens
    result = pack(df, cost, PackOptions(as_of=AS_OF))
    assert result.ids == ["old", "q"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tool_errors": "ignore"}, r"tool_errors must be one of \['error', 'repair'\]"),
        ({"target": "claude"}, r"target must be one of \['openai', 'anthropic'\]"),
    ],
)
def test_bad_tool_options_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(PackError, match=message):
        PackOptions(**options)


def test_tool_errors_enters_the_settings_fingerprint_only_when_not_the_default() -> None:
    df = items(CASES["unanswered last call"][0][:1])
    plain = pack(df, 100, PackOptions(as_of=AS_OF)).manifest.fingerprints["settings"]
    repair = pack(df, 100, PackOptions(as_of=AS_OF, tool_errors="repair"))
    error = pack(df, 100, PackOptions(as_of=AS_OF, tool_errors="error"))
    assert repair.manifest.fingerprints["settings"] == plain
    assert error.manifest.fingerprints["settings"] != plain


# The importers: a history they take, or a typed error naming the message.


def test_the_openai_importer_names_a_result_after_an_intervening_message() -> None:
    with pytest.raises(RecordError, match="rule tool_result_orphan") as caught:
        from_openai_messages([user("Weather?"), asks("c1"), user("Hurry"), tool_result("c1")])
    assert (caught.value.row, caught.value.field) == (3, "tool_call_id")
    assert "comes after message 2 (user)" in str(caught.value)


def test_the_openai_importer_names_a_result_after_a_later_call() -> None:
    with pytest.raises(RecordError, match=r"comes after message 2 \(assistant\)") as caught:
        from_openai_messages(
            [user("Hi"), asks("c1"), asks("c2"), tool_result("c2"), tool_result("c1")]
        )
    assert caught.value.row == 4


@pytest.mark.parametrize(
    ("case", "row", "match"),
    [
        ("orphan result", 1, "which no earlier assistant message declared"),
        ("duplicate result", 3, "rule tool_result_duplicate"),
    ],
)
def test_the_openai_importer_names_orphans_and_duplicates(case: str, row: int, match: str) -> None:
    messages = [message for _, message, _ in CASES[case][0]]
    with pytest.raises(RecordError, match=match) as caught:
        from_openai_messages(messages)
    assert caught.value.row == row


@pytest.mark.parametrize("case", ["two calls, one result", "unanswered last call"])
def test_the_importers_take_unanswered_calls_and_the_pack_repairs_them(case: str) -> None:
    messages = [message for _, message, _ in CASES[case][0]]
    result = from_openai_messages(messages, conversation_id="c").pack(10_000, as_of=AS_OF)
    assert "tool_call_unanswered" in reasons(result).values()
    assert_renders_valid(result)


def test_the_anthropic_importer_names_a_tool_result_after_text() -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "w", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here:"},
                {"type": "tool_result", "tool_use_id": "c1", "content": "18 C"},
            ],
        },
    ]
    with pytest.raises(RecordError, match="rule tool_result_orphan") as caught:
        from_anthropic_messages(messages)
    assert (caught.value.row, caught.value.field) == (2, "content[1].tool_use_id")
    messages[2]["content"].reverse()  # tool results first, as the API wants
    result = from_anthropic_messages(messages).pack(10_000, as_of=AS_OF)
    assert_renders_valid(result)


def test_the_langchain_importer_names_a_result_after_an_intervening_message() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    from cognoxium.formats.interop import from_langchain_messages

    history = [
        messages.HumanMessage("Weather?"),
        messages.AIMessage("", tool_calls=[{"name": "w", "args": {}, "id": "c1"}]),
        messages.HumanMessage("Hurry"),
        messages.ToolMessage("18 C", tool_call_id="c1"),
    ]
    with pytest.raises(RecordError, match="rule tool_result_orphan") as caught:
        from_langchain_messages(history)
    assert caught.value.row == 3
    pending = from_langchain_messages(history[:2], conversation_id="c")
    result = pending.pack(10_000, as_of=AS_OF)
    assert result.ids == ["c:0"]
    assert_renders_valid(result)


# The validators: each rule, named with its message index.


@pytest.mark.parametrize(
    ("request_", "index", "rule"),
    [
        ({"messages": []}, None, "messages_empty"),
        ([{"role": "assistant", "content": "Hi"}], 0, "first_not_user"),
        ([{"role": "system", "content": "Hi"}], 0, "role_invalid"),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
            1,
            "roles_not_alternating",
        ),
        ([{"role": "user", "content": ""}], 0, "content_empty"),
        ([{"role": "user", "content": []}], 0, "content_empty"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], 0, "content_empty"),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}}],
                }
            ],
            0,
            "block_misplaced",
        ),
        (
            [
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}}],
                },
            ],
            1,
            "tool_call_unanswered",
        ),
        (
            [
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "here"},
                        {"type": "tool_result", "tool_use_id": "c", "content": "1"},
                    ],
                },
            ],
            2,
            "tool_result_not_first",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "x", "content": "1"}],
                }
            ],
            0,
            "tool_result_orphan",
        ),
        (
            [
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "c", "name": "f", "input": {}},
                        {"type": "tool_use", "id": "c", "name": "g", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "c", "content": "1"}],
                },
            ],
            1,
            "tool_use_id_duplicate",
        ),
        (
            [
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "c", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "c", "content": "1"},
                        {"type": "tool_result", "tool_use_id": "c", "content": "2"},
                    ],
                },
            ],
            2,
            "tool_result_duplicate",
        ),
    ],
)
def test_the_anthropic_validator_names_each_rule(
    request_: Any, index: int | None, rule: str
) -> None:
    assert rule in MESSAGE_RULES
    with pytest.raises(MessageError) as caught:
        validate_anthropic_messages(request_)
    assert (caught.value.index, caught.value.rule) == (index, rule)


def test_the_openai_validator_names_a_role_the_api_does_not_take() -> None:
    with pytest.raises(MessageError) as caught:
        validate_openai_messages([user("Hi"), {"role": "robot", "content": "beep"}])
    assert (caught.value.index, caught.value.rule) == (1, "role_invalid")


def test_valid_requests_pass_both_validators() -> None:
    messages = [
        user("Weather?"),
        asks("c1", "c2", text="Checking."),
        tool_result("c2"),
        tool_result("c1"),
    ]
    validate_openai_messages(messages)
    frame = from_openai_messages(messages)
    request = frame.pack(10_000, as_of=AS_OF).to_anthropic()
    assert anthropic_faults(request) == []


# A provider that numbers each turn's calls from call_0: every assistant message reuses the id.
REUSED: list[dict[str, Any]] = [
    user("Time?"),
    asks("call_0"),
    tool_result("call_0", "12:00"),
    asks("call_0"),
    tool_result("call_0", "12:01"),
    {"role": "assistant", "content": "It is 12:01."},
]


def anthropic_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as Anthropic turns, ids as they are (tool results as user turns)."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": "1"}
            turns.append({"role": "user", "content": [block]})
        elif message.get("tool_calls"):
            uses = [
                {"type": "tool_use", "id": c["id"], "name": "f", "input": {}}
                for c in message["tool_calls"]
            ]
            turns.append({"role": "assistant", "content": uses})
        else:
            turns.append({"role": message["role"], "content": message["content"]})
    return turns


def test_the_openai_validator_takes_a_call_id_a_later_assistant_message_reuses() -> None:
    assert openai_faults(REUSED) == []
    validate_openai_messages(REUSED)
    third = [*REUSED[:5], asks("call_0"), tool_result("call_0", "12:02")]
    assert openai_faults(third) == []


def test_the_anthropic_validator_names_a_reused_tool_use_id_not_its_result() -> None:
    faults = anthropic_faults(anthropic_turns(REUSED))
    assert [(f.index, f.rule) for f in faults] == [(3, "tool_use_id_duplicate")]
    assert "message 1 already gives a tool_use" in faults[0].text


def test_an_unanswered_call_that_reuses_an_id_is_named_with_its_own_results() -> None:
    # The second call_0 gets no result right after it: its late result is named, not
    # called a second answer of the first call_0, which message 2 answered.
    messages = [*REUSED[:4], user("Well?"), tool_result("call_0", "12:01")]
    faults = openai_faults(messages)
    assert [(f.index, f.rule, f.left_out) for f in faults] == [
        (3, "tool_call_unanswered", (3,)),
        (5, "tool_result_orphan", (5,)),
    ]
    assert faults[0].text == (
        "message 3 makes tool calls ['call_0'] that the tool messages right after it do not "
        "answer; results come later, after another message: 'call_0' at message 5; an earlier "
        "call has the same id ('call_0' by message 1), and the results right after that "
        "message answer that call"
    )
    assert "its call is made by message 3, but message 4 (user)" in faults[1].text
    # A second result right after the reused call is a duplicate of that call's answer.
    twice = [*REUSED[:5], tool_result("call_0", "again")]
    assert [(f.index, f.rule) for f in openai_faults(twice)] == [(5, "tool_result_duplicate")]
    assert "which message 4 already answered" in openai_faults(twice)[0].text


def test_an_earlier_unanswered_call_does_not_take_the_later_calls_result() -> None:
    messages = [user("Time?"), asks("call_0"), user("Still there?"), *REUSED[3:5]]
    faults = openai_faults(messages)
    assert [(f.index, f.rule, f.left_out) for f in faults] == [(1, "tool_call_unanswered", (1,))]
    assert faults[0].text == (
        "message 1 makes tool calls ['call_0'] that the tool messages right after it do not answer"
    )
    turns = anthropic_turns(messages)
    assert [(f.index, f.rule) for f in anthropic_faults(turns)] == [
        (1, "tool_call_unanswered"),
        (3, "tool_use_id_duplicate"),
    ]


@pytest.mark.parametrize("grouped", [False, True])
def test_items_that_reuse_a_call_id_are_sent_whole_to_openai_and_repaired_for_anthropic(
    grouped: bool,
) -> None:
    """Items made without the importers keep a reused id: only Anthropic refuses it."""
    groups = ["g1", "g1", "g2", "g2"] if grouped else [None] * 4
    df = items(
        [
            (f"m{k}", m, g)
            for k, (m, g) in enumerate(zip(REUSED, [None, *groups, None], strict=True))
        ]
    )
    sent = pack(df, 1000, PackOptions(as_of=AS_OF))
    assert sent.ids == [f"m{k}" for k in range(6)]
    assert openai_faults(sent.to_openai()) == []
    repaired = pack(df, 1000, PackOptions(as_of=AS_OF, target="anthropic"))
    assert repaired.ids == ["m0", "m1", "m2", "m5"]
    assert {k: reasons(repaired)[k] for k in ("m3", "m4")} == dict.fromkeys(
        ("m3", "m4"), "tool_use_id_duplicate"
    )
    assert anthropic_faults(repaired.to_anthropic()) == []
    strict = PackOptions(as_of=AS_OF, target="anthropic", tool_errors="error")
    with pytest.raises(MessageError, match="rule tool_use_id_duplicate") as info:
        pack(df, 1000, strict)
    assert info.value.params["id"] == "m3"
    with pytest.raises(RecordError, match="pack with target='anthropic'") as named:
        sent.to_anthropic()  # a pack for OpenAI sends the reused id: Anthropic refuses it
    assert (named.value.row, named.value.field) == (3, "tool_calls[0].id")
    assert "'call_0' was given by message 1 too" in str(named.value)


# Every class of fault, made from valid histories: a pack with "repair" is always valid,
# one with "error" is valid or names the message.


@st.composite
def broken_histories(draw: st.DrawFn) -> tuple[pl.DataFrame, str]:
    messages = draw(chat_histories_strategy(max_turns=4, max_parallel_calls=3))
    frame = from_openai_messages(messages, conversation_id="c", system_retention="optional")
    df = frame.collect()
    roles = df.get_column("role").cast(pl.String).to_list()
    tools = [i for i, r in enumerate(roles) if r == "tool"]
    users = [i for i, r in enumerate(roles) if r == "user"]
    kind = draw(st.sampled_from(["none", "drop", "after_user", "duplicate", "orphan", "ungroup"]))
    order = list(range(df.height))
    if kind != "none" and tools:
        at = draw(st.sampled_from(tools))
        if kind == "drop":
            order.remove(at)
        elif kind == "after_user":
            later = [u for u in users if u > at]
            order.remove(at)
            order.insert(order.index(later[0]) + 1 if later else len(order), at)
        elif kind == "duplicate":
            order.insert(order.index(at) + 1, -1 - at)
        elif kind == "orphan":
            calls = [i for i in range(at) if roles[i] == "assistant"]
            order = [i for i in order if not (calls and i == calls[-1])]
    rows = [df[abs(i) - 1 if i < 0 else i] for i in order]
    out = pl.concat(rows) if rows else df.clear()
    dup = [i for i in order if i < 0]
    if dup:
        ids = out.get_column("id").to_list()
        ids[order.index(dup[0])] = "c:dup"
        out = out.with_columns(id=pl.Series(ids))
    if kind == "ungroup":
        out = out.with_columns(group_id=pl.lit(None, pl.String))
    return out, kind


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_histories(), st.integers(0, 400), st.booleans())
def test_every_broken_history_packs_valid_or_names_its_message(
    case: tuple[pl.DataFrame, str], budget: int, turns: bool
) -> None:
    df, _ = case
    repaired = pack(df, budget, PackOptions(as_of=AS_OF, turns=turns))
    assert_renders_valid(repaired)
    options = PackOptions(as_of=AS_OF, turns=turns, tool_errors="error")
    named: MessageError | None = None
    try:
        strict = pack(df, budget, options)
    except MessageError as error:
        named = error
    if named is None:
        assert_renders_valid(strict)
    else:
        assert named.rule in MESSAGE_RULES
        assert named.params["id"] in df.get_column("id").to_list()


def test_a_required_item_that_cannot_be_sent_is_an_error() -> None:
    df = items(CASES["unanswered last call"][0])
    required = pl.when(pl.col("id") == "a").then(pl.lit("required"))
    df = df.with_columns(
        retention=required.otherwise(pl.col("retention").cast(pl.String)).cast(
            df.schema["retention"]
        )
    )
    with pytest.raises(PackError, match=r"required items \['a'\] .*rule tool_call_unanswered"):
        pack(df, 10_000, PackOptions(as_of=AS_OF))
    with pytest.raises(MessageError, match="message 1 of the pack"):
        pack(df, 10_000, PackOptions(as_of=AS_OF, tool_errors="error"))


def test_a_call_reusing_an_id_is_sent_to_anthropic_when_the_earlier_call_is_not() -> None:
    """Anthropic takes each tool_use id once per request: a pack that leaves one out sends both."""
    long = "word " * 300
    df = items(
        [
            ("u", user("Time?"), None),
            ("a1", asks("x"), "g1"),
            ("r1", tool_result("x", long), "g1"),
            ("u1", user("Again?"), None),
            ("a2", asks("x"), "g2"),
            ("r2", tool_result("x", "12:01"), "g2"),
            ("u2", user("Thanks."), None),
        ]
    )
    result = pack(df, 100, PackOptions(as_of=AS_OF, target="anthropic"))
    assert result.ids == ["u1", "a2", "r2", "u2"]
    assert reasons(result)["a1"] == "group_over_budget"
    assert anthropic_faults(result.to_anthropic()) == []
    both = pack(df, 2000, PackOptions(as_of=AS_OF, target="anthropic"))
    assert "a2" not in both.ids
    assert reasons(both)["a2"] == "tool_use_id_duplicate"
