"""Tool histories that break the chat APIs' rules: refused by default, imported whole with
tool_errors="keep" and mended by the pack, through every chat importer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from cognoxium import CognitionFrame
from cognoxium.exceptions import MessageError, RecordError
from cognoxium.formats.anthropic import from_anthropic_messages, to_anthropic_messages
from cognoxium.formats.openai import (
    IMPORT_TOOL_ERRORS,
    from_openai_messages,
    openai_messages_to_items,
    read_openai_conversations,
    read_openai_jsonl,
)
from cognoxium.packing.message_rules import (
    openai_faults,
    validate_anthropic_messages,
    validate_openai_messages,
)
from tests.reach import reached, reaching


def call(call_id: str) -> dict[str, Any]:
    function = {"name": "weather", "arguments": "{}"}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


SYSTEM = {"role": "system", "content": "Be brief."}
ASK = {"role": "user", "content": "Weather?"}
LATER = {"role": "user", "content": "And tomorrow?"}
REPLY = {"role": "assistant", "content": "Sunny."}

# Each history breaks one rule at message 4; the expected decisions of a default pack.
BROKEN: dict[str, tuple[list[dict[str, Any]], dict[str, str]]] = {
    "orphan": (
        [SYSTEM, ASK, call("c1"), result("c1", "sunny"), result("c9", "rain"), REPLY],
        {"msg:4": "tool_result_orphan"},
    ),
    "duplicate": (
        [SYSTEM, ASK, call("c1"), result("c1", "sunny"), result("c1", "sunny again"), REPLY],
        {"msg:4": "tool_result_duplicate"},
    ),
    "misplaced": (
        [SYSTEM, ASK, call("c1"), LATER, result("c1", "sunny"), REPLY],
        {"msg:2": "tool_call_unanswered", "msg:4": "tool_result_orphan"},
    ),
}
RULES = {
    "orphan": "rule tool_result_orphan",
    "duplicate": "rule tool_result_duplicate",
    "misplaced": "rule tool_result_orphan",
}


def decisions(frame: CognitionFrame) -> dict[str, str]:
    pack = frame.pack(500)
    validate_openai_messages(pack.messages)  # what is sent is what the API takes
    return {e.id: e.reason.value for e in pack.manifest.entries if e.decision.value == "excluded"}


def jsonl(tmp_path: Path, messages: list[dict[str, Any]], **kwargs: Any) -> CognitionFrame:
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    return read_openai_jsonl(path, **kwargs)


def items_frame(messages: list[dict[str, Any]], **kwargs: Any) -> CognitionFrame:
    return CognitionFrame.from_items(openai_messages_to_items(messages, **kwargs))


IMPORTERS: dict[str, Callable[..., CognitionFrame]] = {
    "from_openai_messages": lambda _, m, **kw: from_openai_messages(m, **kw),
    "openai_messages_to_items": lambda _, m, **kw: items_frame(m, **kw),
    "read_openai_jsonl": jsonl,
}
EACH_IMPORTER_AND_CASE = pytest.mark.parametrize(
    ("importer", "case"), [(i, c) for c in sorted(BROKEN) for i in sorted(IMPORTERS)]
)


@EACH_IMPORTER_AND_CASE
def test_a_broken_tool_history_is_refused_by_default_and_names_the_way_out(
    tmp_path: Path, importer: str, case: str
) -> None:
    messages, _ = BROKEN[case]
    with pytest.raises(RecordError, match=RULES[case]) as caught:
        IMPORTERS[importer](tmp_path, messages)
    assert caught.value.field == "tool_call_id"
    assert "tool_errors='keep'" in str(caught.value)


@EACH_IMPORTER_AND_CASE
def test_a_kept_broken_tool_history_imports_whole_and_the_pack_mends_it(
    tmp_path: Path, importer: str, case: str
) -> None:
    messages, expected = BROKEN[case]
    frame = IMPORTERS[importer](tmp_path, messages, tool_errors="keep")
    rows = frame.select("id", "role", "group_id").to_polars()
    assert rows["id"].to_list() == [f"msg:{i}" for i in range(len(messages))]  # nothing lost
    assert rows.row(4) == ("msg:4", "tool", None)  # the faulty result stands alone
    assert decisions(frame) == expected
    with pytest.raises(MessageError, match=f"breaks rule ({'|'.join(expected.values())})"):
        frame.pack(500, tool_errors="error")


def test_a_valid_history_imports_the_same_with_either_setting() -> None:
    messages = [SYSTEM, ASK, call("c1"), result("c1", "sunny"), REPLY]
    kept = from_openai_messages(messages, tool_errors="keep").to_polars()
    assert kept.equals(from_openai_messages(messages).to_polars())


@pytest.mark.parametrize("value", ["repair", "", None, 1])
def test_an_unknown_tool_errors_value_is_refused(value: object) -> None:
    with pytest.raises(RecordError, match=r"must be one of \['error', 'keep'\]") as caught:
        from_openai_messages([ASK], tool_errors=value)  # type: ignore[arg-type]
    assert caught.value.field == "tool_errors"
    assert IMPORT_TOOL_ERRORS == ("error", "keep")


def anthropic_orphan() -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": "c1", "name": "weather", "input": {}}
    return [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [use]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}],
        },
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c9", "content": "?"}]},
    ]


def test_an_anthropic_tool_result_without_its_use_is_kept_for_the_pack_to_leave_out() -> None:
    with pytest.raises(RecordError, match="tool_errors='keep'"):
        from_anthropic_messages(anthropic_orphan())
    frame = from_anthropic_messages(anthropic_orphan(), tool_errors="keep")
    assert frame.to_polars().height == 5
    pack = frame.pack(500)
    left = {e.id: e.reason.value for e in pack.manifest.entries if e.decision.value == "excluded"}
    assert left == {"msg:4": "tool_result_orphan"}
    to_anthropic_messages(pack)  # the mended pack converts


def test_only_a_chat_export_error_names_the_command_option_that_reads_it(tmp_path: Path) -> None:
    # `cognoxium pack --conversations` reads a chat export; from a list, an Anthropic history or
    # a file of messages, that option cannot help, so the error names tool_errors='keep' alone.
    messages, _ = BROKEN["orphan"]
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps({"conversation_id": "c", "messages": messages}) + "\n")
    with pytest.raises(RecordError, match="tool_errors='keep'") as caught:
        read_openai_conversations(export)
    assert "cognoxium pack --conversations: --tool-errors repair" in str(caught.value)
    refusals = [lambda: from_anthropic_messages(anthropic_orphan())]
    refusals += [lambda i=i: IMPORTERS[i](tmp_path, messages) for i in sorted(IMPORTERS)]
    for refuse in refusals:
        with pytest.raises(RecordError, match="tool_errors='keep'") as caught:
            refuse()
        assert "--conversations" not in str(caught.value)


def test_a_langchain_tool_message_without_its_call_is_kept_for_the_pack_to_leave_out() -> None:
    m = pytest.importorskip("langchain_core.messages")
    from cognoxium.formats.interop import from_langchain_messages

    history = [
        m.HumanMessage("Weather?"),
        m.AIMessage("", tool_calls=[{"id": "c1", "name": "weather", "args": {}}]),
        m.ToolMessage("sunny", tool_call_id="c1"),
        m.ToolMessage("rain", tool_call_id="c9"),
    ]
    with pytest.raises(RecordError, match="tool_errors='keep'"):
        from_langchain_messages(history)
    frame = from_langchain_messages(history, tool_errors="keep")
    assert decisions(frame) == {"msg:3": "tool_result_orphan"}


@st.composite
def tool_histories(draw: st.DrawFn, reuse: bool = False) -> list[dict[str, Any]]:
    """Histories of user, assistant, call and result messages in any order; results answer a
    call made before, made after, answered already, or none (unique call ids, or with
    ``reuse`` ids that a later call may give again, as providers that number each turn's
    calls from call_0 do)."""
    messages: list[dict[str, Any]] = [SYSTEM]
    made: list[str] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "call", "result", "result"]))
        if kind == "user":
            messages.append({"role": "user", "content": draw(st.sampled_from(["Hi", "And?"]))})
        elif kind == "assistant":
            messages.append(REPLY)
        elif kind == "call":
            ids = [f"c{len(made) + j}" for j in range(draw(st.integers(1, 2)))]
            if reuse:
                ids = [f"c{j}" for j in range(len(ids))] if draw(st.booleans()) else ids
            made += ids
            message = call(ids[0])
            message["tool_calls"] += [{**message["tool_calls"][0], "id": i} for i in ids[1:]]
            messages.append(message)
        else:
            answered = draw(st.sampled_from([*made, "c0", "c1", "nobody"]))
            messages.append(result(answered, draw(st.sampled_from(["sunny", "rain"]))))
    return messages


RESULT_RULES = {"tool_result_orphan", "tool_result_duplicate"}
REPAIRS = {"tool_call_unanswered", *RESULT_RULES}


@reaching(0.6, label="broken")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_histories())
def test_any_tool_history_kept_whole_packs_to_requests_the_apis_take(
    messages: list[dict[str, Any]],
) -> None:
    faults = openai_faults(messages)
    note(f"faults {[(f.index, f.rule) for f in faults]}")
    result_faults = [f for f in faults if f.rule in RESULT_RULES]
    if result_faults:
        with pytest.raises(RecordError, match=result_faults[0].rule):
            from_openai_messages(messages)
    frame = from_openai_messages(messages, tool_errors="keep")
    assert frame.to_polars()["id"].to_list() == [f"msg:{i}" for i in range(len(messages))]
    pack = frame.pack(100_000)
    validate_openai_messages(pack.messages)
    validate_anthropic_messages(to_anthropic_messages(pack))
    entries = {e.id: e for e in pack.manifest.entries}
    assert set(entries) == {f"msg:{i}" for i in range(len(messages))}  # nothing unaccounted
    left = {e.id: e.reason.value for e in entries.values() if e.decision.value == "excluded"}
    assert set(left.values()) <= REPAIRS
    # A repaired pack leaves out exactly what the rules' repair of the whole history does.
    assert set(left) == {f"msg:{i}" for f in faults for i in f.left_out}
    if result_faults:
        reached("broken")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_histories(reuse=True))
def test_a_history_reusing_call_ids_imports_and_packs_as_the_rules_read_it(
    messages: list[dict[str, Any]],
) -> None:
    faults = openai_faults(messages)
    note(f"faults {[(f.index, f.rule) for f in faults]}")
    result_faults = [f for f in faults if f.rule in RESULT_RULES]
    if result_faults:
        with pytest.raises(RecordError, match=result_faults[0].rule):
            from_openai_messages(messages)
    else:
        from_openai_messages(messages)  # a reused id alone is no fault
    frame = from_openai_messages(messages, tool_errors="keep")
    calls = [
        i for m in frame.to_polars()["metadata"] for i in json.loads(m).get("tool_call_ids", [])
    ]
    assert len(calls) == len(set(calls))  # unique in the conversation's items
    pack = frame.pack(100_000)
    validate_openai_messages(pack.messages)
    validate_anthropic_messages(to_anthropic_messages(pack))
    left = {e.id for e in pack.manifest.entries if e.decision.value == "excluded"}
    # The pack leaves out what the rules' repair of the history as given does.
    assert left == {f"msg:{i}" for f in faults for i in f.left_out}
    for_anthropic = frame.pack(100_000, target="anthropic")  # starts on a user message
    validate_anthropic_messages(for_anthropic.to_anthropic())
