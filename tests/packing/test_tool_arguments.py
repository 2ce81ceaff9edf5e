"""Tool calls whose arguments are not a JSON object: sent to OpenAI, never to Anthropic.

Chat Completions carries a call's arguments as a JSON string and takes any
string; Anthropic's ``tool_use.input`` must be an object. A pack built for
Anthropic leaves such a call out with its results (``tool_errors="repair"``,
reason ``tool_call_arguments_invalid``) or raises a MessageError
(``"error"``); without the target nothing changes. Blank arguments are the
empty object, as Chat Completions returns them for a tool without parameters.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import MessageError, PackError, RecordError
from cognoxium.formats.openai import from_openai_messages
from cognoxium.packing._renderers import OPENING
from cognoxium.packing.message_rules import (
    MESSAGE_RULES,
    anthropic_faults,
    argument_faults,
    tool_input,
    validate_anthropic_messages,
)
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, PackScope, pack
from cognoxium.testing.strategies import chat_histories_strategy
from cognoxium.tokens.profiles import get_profile
from tests.packing.test_tool_rules import assert_renders_valid, items

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
ANTHROPIC = PackOptions(as_of=AS_OF, target="anthropic")
STRICT = PackOptions(as_of=AS_OF, target="anthropic", tool_errors="error")
CL100K = get_profile("cl100k_base")

# Arguments with no Anthropic form, one of each kind: what tool_input says of them.
INVALID: dict[str, str] = {
    '{"city": "Par': "the arguments are not JSON",  # truncated mid-call
    '{"city": "Paris",}': "the arguments are not JSON",  # invalid
    '{"n": NaN}': "the arguments are not JSON",  # Python's json reads it; JSON has no NaN
    "[1, 2]": "got list",
    "3": "got int",
    "2.5": "got float",
    '"Paris"': "got str",
    "true": "got bool",
    "null": "got NoneType",
}
BLANK = ["", " ", "\n\t"]


def call(call_id: str, arguments: str = "{}", name: str = "now") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def history(*arguments: str) -> list[dict[str, Any]]:
    """A question, one message of parallel calls with these arguments, their results, more."""
    calls = [call(f"c{k}", a) for k, a in enumerate(arguments, 1)]
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Time in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *[{"role": "tool", "tool_call_id": c["id"], "content": "12:00"} for c in calls],
        {"role": "assistant", "content": "It is noon."},
        {"role": "user", "content": "Thanks. And Rome?"},
        {"role": "assistant", "content": "Also noon."},
    ]


def reasons(result: ContextPack) -> dict[str, str]:
    return dict(result.manifest.to_polars().select("id", "reason").iter_rows())


def assert_costs_what_it_sends(result: ContextPack) -> None:
    """``used_tokens`` is the rendered request's cost, the opening message included if counted."""
    request = result.to_anthropic()
    opening = {"role": "user", "content": [{"type": "text", "text": OPENING}]}
    sent = list(result.messages)
    if result.manifest.target == "anthropic" and request["messages"][0] == opening:
        sent.insert(0, {"role": "user", "content": OPENING})
    assert result.used_tokens == CL100K.request_tokens(sent)


@pytest.mark.parametrize(("arguments", "why"), INVALID.items())
def test_tool_input_names_why_arguments_are_not_an_object(arguments: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        tool_input(arguments)


@pytest.mark.parametrize("arguments", BLANK)
def test_blank_arguments_are_the_empty_object(arguments: str) -> None:
    assert tool_input(arguments) == {}


def test_tool_input_keeps_an_object_and_its_key_order() -> None:
    assert list(tool_input('{"b": 1, "a": {"c": [null]}}').items()) == [
        ("b", 1),
        ("a", {"c": [None]}),
    ]


@pytest.mark.parametrize("arguments", INVALID)
def test_a_pack_for_anthropic_leaves_out_the_call_and_its_result(arguments: str) -> None:
    result = from_openai_messages(history(arguments), conversation_id="c").pack(500, ANTHROPIC)
    assert result.ids == ["c:0", "c:1", "c:4", "c:5", "c:6"]
    left = {k: v for k, v in reasons(result).items() if k not in result.ids}
    assert left == {"c:2": "tool_call_arguments_invalid", "c:3": "tool_call_arguments_invalid"}
    assert result.manifest.totals.by_reason["tool_call_arguments_invalid"] == 2
    assert_renders_valid(result)
    assert_costs_what_it_sends(result)


@pytest.mark.parametrize("arguments", INVALID)
def test_without_the_anthropic_target_the_call_is_sent_as_it_is(arguments: str) -> None:
    chat = from_openai_messages(history(arguments), conversation_id="c")
    result = chat.pack(500, PackOptions(as_of=AS_OF))
    assert result.ids == [f"c:{k}" for k in range(7)]
    assert result.to_openai()[2]["tool_calls"] == [call("c1", arguments)]
    assert result.used_tokens == CL100K.request_tokens(result.messages)
    strict = chat.pack(500, PackOptions(as_of=AS_OF, tool_errors="error"))
    assert strict.ids == result.ids
    with pytest.raises(RecordError, match="tool call 'c1' of 'now'"):
        result.to_anthropic()


@pytest.mark.parametrize("arguments", [*BLANK, "{}", '{"city": "Paris"}'])
def test_a_pack_for_anthropic_keeps_a_call_whose_arguments_are_an_object(arguments: str) -> None:
    result = from_openai_messages(history(arguments), conversation_id="c").pack(500, ANTHROPIC)
    assert result.ids == [f"c:{k}" for k in range(7)]
    assert "tool_call_arguments_invalid" not in reasons(result).values()
    use = result.to_anthropic()["messages"][1]["content"][0]
    assert use["input"] == tool_input(arguments)
    assert_renders_valid(result)


@pytest.mark.parametrize("arguments", INVALID)
def test_tool_errors_error_names_the_message_the_call_and_the_rule(arguments: str) -> None:
    chat = from_openai_messages(history("{}", arguments), conversation_id="c")
    with pytest.raises(MessageError) as info:
        chat.pack(500, STRICT)
    error = info.value
    assert (error.index, error.rule) == (2, "tool_call_arguments_invalid")
    assert (error.params["id"], error.params["row"]) == ("c:2", 2)
    assert "tool calls ['c2'] whose arguments are not a JSON object" in str(error)
    assert "Anthropic rejects such a request" in str(error)


def test_one_bad_call_leaves_out_its_whole_message_and_every_result() -> None:
    """Every tool_use sent needs its result, so the message goes whole, with c1's and c3's."""
    chat = from_openai_messages(history("{}", '{"a": 1', '{"b": 2}'), conversation_id="c")
    result = chat.pack(500, ANTHROPIC)
    out = ["c:2", "c:3", "c:4", "c:5"]
    assert [i for i in reasons(result) if i not in result.ids] == out
    assert {reasons(result)[i] for i in out} == {"tool_call_arguments_invalid"}
    request = result.to_anthropic()
    assert not any(
        block.get("type") in ("tool_use", "tool_result")
        for message in request["messages"]
        for block in message["content"]
    )
    assert_renders_valid(result)
    assert_costs_what_it_sends(result)


def test_whole_turns_keep_their_question_and_later_turns() -> None:
    chat = from_openai_messages(history('{"a": 1'), conversation_id="c")
    result = chat.pack(500, PackOptions(as_of=AS_OF, target="anthropic", turns=True))
    assert result.ids == ["c:0", "c:1", "c:4", "c:5", "c:6"]
    assert_renders_valid(result)


def test_ungrouped_results_go_with_their_call_under_its_reason() -> None:
    """Rows made without the importers' groups: the results are not left as orphans."""
    rows = [
        ("q", {"role": "user", "content": "Time?"}, None),
        ("a", {"role": "assistant", "content": None, "tool_calls": [call("k", "[1]")]}, None),
        ("r", {"role": "tool", "tool_call_id": "k", "content": "noon"}, None),
        ("q2", {"role": "user", "content": "Thanks"}, None),
    ]
    result = pack(items(rows), 500, ANTHROPIC)
    assert result.ids == ["q", "q2"]
    assert reasons(result) == {
        "q": "selected",
        "a": "tool_call_arguments_invalid",
        "r": "tool_call_arguments_invalid",
        "q2": "selected",
    }
    assert_renders_valid(result)


def test_a_required_call_that_anthropic_cannot_take_is_a_pack_error() -> None:
    rows = [
        ("q", {"role": "user", "content": "Time?"}, None),
        ("a", {"role": "assistant", "content": None, "tool_calls": [call("k", "7")]}, "g"),
        ("r", {"role": "tool", "tool_call_id": "k", "content": "noon"}, "g"),
    ]
    df = items(rows)
    kept = pl.when(pl.col("id") == "a").then(pl.lit("required"))
    retention = kept.otherwise(pl.col("retention").cast(pl.String))
    df = df.with_columns(retention=retention.cast(df.schema["retention"]))
    with pytest.raises(PackError, match=r"\['a'\] .*rule tool_call_arguments_invalid"):
        pack(df, 500, ANTHROPIC)
    assert pack(df, 500, PackOptions(as_of=AS_OF)).ids == ["q", "a", "r"]


def test_one_scope_packs_each_target_by_its_own_rules() -> None:
    """A batch's requests share a scope: each pack equals the pack of its request alone."""
    df = from_openai_messages(history('{"a": 1'), conversation_id="c").collect()
    scope = PackScope(df)
    openai = PackOptions(as_of=AS_OF)
    for options in (openai, ANTHROPIC, openai, PackOptions(as_of=AS_OF, tool_errors="error")):
        together = scope.pack(500, options)
        alone = pack(df, 500, options)
        assert together.ids == alone.ids
        assert together.manifest.to_json() == alone.manifest.to_json()
    assert scope.pack(500, ANTHROPIC).ids == ["c:0", "c:1", "c:4", "c:5", "c:6"]
    assert scope.pack(500, openai).ids == [f"c:{k}" for k in range(7)]
    with pytest.raises(MessageError, match="tool_call_arguments_invalid"):
        scope.pack(500, STRICT)


def test_the_anthropic_validator_names_a_tool_use_whose_input_is_not_an_object() -> None:
    use = {"type": "tool_use", "id": "c1", "name": "now", "input": [1, 2]}
    messages = [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "1"}]},
    ]
    assert [(f.index, f.rule) for f in anthropic_faults(messages)] == [
        (1, "tool_call_arguments_invalid")
    ]
    with pytest.raises(MessageError, match="tool_use whose input is a list") as info:
        validate_anthropic_messages(messages)
    assert info.value.rule == "tool_call_arguments_invalid"
    assert "tool_call_arguments_invalid" in MESSAGE_RULES


def test_argument_faults_leave_out_the_results_right_after_the_call() -> None:
    # a result after another message is not the call's (it is an orphan of its own rule)
    faults = argument_faults({1: ["c1", "c2"]}, {2: "c2", 3: "c1", 5: "c1"}, {1: ["c1"]})
    assert [(f.index, f.rule, f.left_out) for f in faults] == [
        (1, "tool_call_arguments_invalid", (1, 2, 3))
    ]
    assert "['c1']" in faults[0].text


@st.composite
def bad_argument_histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid histories with some calls' arguments replaced by ones Anthropic cannot take."""
    messages = copy.deepcopy(draw(chat_histories_strategy(max_turns=4, max_parallel_calls=3)))
    calls = [c for m in messages for c in m.get("tool_calls") or ()]
    for c in calls:
        if draw(st.booleans()):
            c["function"]["arguments"] = draw(st.sampled_from([*INVALID, *BLANK]))
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bad_argument_histories(), st.integers(16, 400), st.booleans())  # 13: an opening
def test_every_pack_for_anthropic_renders_or_names_its_message(
    messages: list[dict[str, Any]], budget: int, turns: bool
) -> None:
    df = from_openai_messages(messages, conversation_id="c", system_retention="optional").collect()
    options = PackOptions(as_of=AS_OF, target="anthropic", turns=turns)
    repaired = pack(df, budget, options)
    assert_renders_valid(repaired)
    assert_costs_what_it_sends(repaired)
    sent = [c for m in repaired.messages for c in m.get("tool_calls") or ()]
    assert all(isinstance(tool_input(c["function"]["arguments"]), dict) for c in sent)
    strict = PackOptions(as_of=AS_OF, target="anthropic", turns=turns, tool_errors="error")
    named: MessageError | None = None
    try:
        kept = pack(df, budget, strict)
    except MessageError as error:
        named = error
    if named is None:
        assert_renders_valid(kept)
    else:
        assert named.rule in MESSAGE_RULES
        assert named.params["id"] in df.get_column("id").to_list()


def test_the_manifest_json_names_the_reason() -> None:
    result = from_openai_messages(history("null"), conversation_id="c").pack(500, ANTHROPIC)
    entries = json.loads(result.manifest.to_json())["entries"]
    assert [e["reason"] for e in entries if e["decision"] == "excluded"] == [
        "tool_call_arguments_invalid",
        "tool_call_arguments_invalid",
    ]


def test_a_report_under_an_anthropic_cache_model_reads_a_call_no_anthropic_request_sends() -> None:
    from cognoxium.formats.openai import from_openai_messages

    bad = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1'}}
    chat = [
        {"role": "system", "content": "Policy. " * 1500},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [bad]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "ok"},
    ]
    when = datetime(2026, 1, 1, tzinfo=UTC)
    first = from_openai_messages(chat, conversation_id="c").pack(
        20000, as_of=when, cache_model="anthropic"
    )
    more = [*chat, {"role": "user", "content": "next"}]
    pack = from_openai_messages(more, conversation_id="c").pack(
        20000, as_of=when, previous=first, cache_model="anthropic"
    )
    report = pack.manifest.cache
    assert report is not None
    assert report.prefix_ids == ["c:0", "c:1", "c:2", "c:3", "c:4"]
    with pytest.raises(RecordError, match="pack with target='anthropic'"):
        pack.to_anthropic()
