"""gap_note: a message in place of each hole of a packed conversation, counted and recorded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.exceptions import PackError
from cognoxium.formats.openai import from_openai_messages
from cognoxium.packing import ContextPack, GapRecord, PackManifest
from cognoxium.packing.message_rules import validate_anthropic_messages, validate_openai_messages
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.tokens.profiles import get_profile

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
LONG = "word " * 80  # about 80 tokens
NOTE = "({n} earlier messages omitted)"
PROFILE = get_profile("cl100k_base")

CHAT = from_openai_messages(
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Refunds?"},
        {"role": "assistant", "content": LONG},
        {"role": "user", "content": "Shipping?"},
        {"role": "assistant", "content": "Free."},
    ]
)


def _call(i: int) -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _agent_history() -> CognitionFrame:
    """Turns with tool exchanges, some with long messages, so a filled pack has holes."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Use the tools."}]
    for i in range(8):
        messages.append(
            {"role": "user", "content": f"Question {i}?" + (LONG if i % 3 == 1 else "")}
        )
        messages.append({"role": "assistant", "content": None, "tool_calls": [_call(i)]})
        messages.append(
            {"role": "tool", "tool_call_id": f"c{i}", "content": LONG if i % 3 == 2 else "ok"}
        )
        messages.append({"role": "assistant", "content": f"Answer {i}."})
    return from_openai_messages(messages)


def _recount(result: ContextPack, target: str) -> int:
    """What the rendered messages cost, counted on their own."""
    messages = list(result.messages)
    if target == "anthropic" and all(m["role"] == "system" for m in messages):
        messages.append({"role": "user", "content": "(earlier messages omitted)"})
    return PROFILE.request_tokens(messages)


def test_the_note_is_in_place_of_the_hole_with_its_count() -> None:
    result = CHAT.pack(60, as_of=AS_OF, gaps="fill", gap_note=NOTE)
    assert result.ids == ["msg:0", "msg:1", "msg:3", "msg:4"]  # what gaps="fill" packs
    note = {"role": "system", "content": "(1 earlier messages omitted)"}
    assert result.messages[2] == note
    assert [m["content"] for m in result.messages] == [
        "Be brief.",
        "Refunds?",
        "(1 earlier messages omitted)",
        "Shipping?",
        "Free.",
    ]
    cost = PROFILE.message_tokens(note)
    assert cost == 10
    (gap,) = result.manifest.gap_records
    assert gap == GapRecord(first=2, last=2, items=1, note_at=2, note_tokens=cost)
    plain = CHAT.pack(60, as_of=AS_OF, gaps="fill")
    assert result.used_tokens == plain.used_tokens + cost
    assert result.used_tokens == _recount(result, "openai")
    manifest = result.manifest
    assert manifest.pack_overhead_tokens == plain.manifest.pack_overhead_tokens + cost
    included = manifest.to_polars().filter(decision="included")
    assert included.get_column("tokens").sum() + manifest.pack_overhead_tokens == result.used_tokens


def test_the_note_counts_the_items_of_its_hole() -> None:
    chat = from_openai_messages(
        [
            {"role": "user", "content": "Refunds?"},
            {"role": "assistant", "content": "Within 30 days."},
            {"role": "user", "content": LONG},
            {"role": "assistant", "content": LONG},
            {"role": "user", "content": "Shipping?"},
            {"role": "assistant", "content": "Free."},
        ]
    )
    result = chat.pack(80, as_of=AS_OF, gaps="fill", gap_note="[{n} skipped]")
    assert result.ids == ["msg:0", "msg:1", "msg:4", "msg:5"]
    assert result.messages[2] == {"role": "system", "content": "[2 skipped]"}
    assert result.manifest.gap_records[0].items == 2


def test_the_notes_tokens_come_out_of_the_budget() -> None:
    # At 39 tokens plain "fill" packs q1 too; the note's 10 tokens leave it out.
    plain = CHAT.pack(39, as_of=AS_OF, gaps="fill")
    assert plain.ids == ["msg:0", "msg:1", "msg:3", "msg:4"]
    assert plain.used_tokens == 29
    result = CHAT.pack(39, as_of=AS_OF, gaps="fill", gap_note=NOTE)
    assert result.used_tokens == 39 == _recount(result, "openai")
    tight = CHAT.pack(38, as_of=AS_OF, gaps="fill", gap_note=NOTE)
    assert tight.ids == ["msg:0", "msg:3", "msg:4"]  # no hole, no note
    assert tight.manifest.gap_records == []
    assert len(tight.messages) == 3
    assert tight.used_tokens == _recount(tight, "openai") <= 38


@pytest.mark.parametrize("target", ["openai", "anthropic"])
@pytest.mark.parametrize("turns", [False, True])
def test_every_budget_renders_valid_requests_that_cost_used_tokens(
    target: str, turns: bool
) -> None:
    frame = _agent_history()
    noted = 0
    for budget in range(40, 700, 7):
        options = PackOptions(
            as_of=AS_OF,
            gaps="fill",
            gap_note=NOTE,
            target=target,
            turns=turns,  # type: ignore[arg-type]
        )
        result = frame.pack(budget, options)
        assert result.used_tokens <= budget
        assert result.used_tokens == _recount(result, target), budget
        validate_openai_messages(result.to_openai())
        validate_anthropic_messages(result.to_anthropic())
        role = "system" if target == "openai" else "user"
        for gap in result.manifest.gap_records:
            assert gap.note_at is not None, (budget, gap)
            note = result.messages[gap.note_at]
            assert note == {"role": role, "content": NOTE.format(n=gap.items)}
            assert gap.note_tokens == PROFILE.message_tokens(note)
            before = result.messages[gap.note_at - 1]
            assert not before.get("tool_calls"), budget  # never between a call and its result
            if gap.note_at + 1 < len(result.messages):
                assert result.messages[gap.note_at + 1]["role"] != "tool", budget
            assert NOTE.format(n=gap.items) in result.to_text()
            noted += 1
        notes = len(result.manifest.gap_records)
        assert len(result.messages) == len(result.ids) + notes
    assert noted >= 10  # the sweep reaches packs with holes


def test_an_anthropic_note_is_a_user_message_merged_into_its_turn() -> None:
    result = CHAT.pack(60, as_of=AS_OF, gaps="fill", gap_note=NOTE, target="anthropic")
    assert result.messages[2] == {"role": "user", "content": "(1 earlier messages omitted)"}
    request = result.to_anthropic()
    validate_anthropic_messages(request)
    texts = [b["text"] for b in request["messages"][0]["content"]]
    assert texts == ["Refunds?", "(1 earlier messages omitted)", "Shipping?"]
    assert result.used_tokens == _recount(result, "anthropic")


def test_notes_are_deterministic_and_read_back_from_json() -> None:
    frame = _agent_history()
    options = PackOptions(as_of=AS_OF, gaps="fill", gap_note=NOTE)
    first = frame.pack(240, options)
    second = _agent_history().pack(240, options)
    assert len(first.manifest.gap_records) == 3
    assert first.manifest.to_json() == second.manifest.to_json()
    assert first.messages == second.messages
    header = first.manifest.to_dict()
    assert all({"note_at", "note_tokens"} <= set(g) for g in header["gap_records"])
    assert PackManifest.from_json(first.manifest.to_json()) == first.manifest


def test_without_a_note_the_records_and_messages_are_as_before() -> None:
    result = CHAT.pack(60, as_of=AS_OF, gaps="fill")
    assert len(result.messages) == len(result.ids)
    assert repr(result.manifest.gap_records) == "[GapRecord(first=2, last=2, items=1)]"
    assert result.manifest.to_dict()["gap_records"] == [{"first": 2, "last": 2, "items": 1}]


def test_stop_puts_no_note_before_the_tail() -> None:
    result = CHAT.pack(40, as_of=AS_OF, gap_note=NOTE)
    assert result.ids == ["msg:0", "msg:3", "msg:4"]
    assert [m["content"] for m in result.messages] == ["Be brief.", "Shipping?", "Free."]


def test_a_continuing_pack_refuses_a_gap_note() -> None:
    first = CHAT.pack(60, as_of=AS_OF)
    with pytest.raises(PackError, match="gap_note is not supported for a pack that continues"):
        CHAT.pack(60, as_of=AS_OF, previous=first, gap_note=NOTE)


@pytest.mark.parametrize("bad", ["", "   ", "({count} omitted)", "{0} omitted", "{n", 3, b"x"])
def test_a_bad_gap_note_is_a_pack_error_naming_the_option(bad: object) -> None:
    with pytest.raises(PackError, match=r"^gap_note must be a text whose only field is \{n\}"):
        PackOptions(gap_note=bad)  # type: ignore[arg-type]
    with pytest.raises(PackError, match=r"^gap_note must be"):
        CHAT.pack(60, as_of=AS_OF, gap_note=bad)  # type: ignore[arg-type]


def test_options_take_and_show_the_note() -> None:
    options = PackOptions(gap_note=NOTE)
    assert options.gap_note == NOTE
    assert f"gap_note={NOTE!r}" in repr(options)
    assert "gap_note" not in repr(PackOptions())
    assert options.merged(gaps="fill").gap_note == NOTE
    assert hash(options) == hash(PackOptions(gap_note=NOTE))
    assert pack(CHAT.collect(), 60, PackOptions(as_of=AS_OF, gaps="fill", gap_note=NOTE)).messages[
        2
    ] == {"role": "system", "content": "(1 earlier messages omitted)"}


def test_the_note_enters_the_settings_fingerprint_only_when_set() -> None:
    plain = CHAT.pack(60, as_of=AS_OF, gaps="fill").manifest.fingerprints
    unset = CHAT.pack(60, as_of=AS_OF, gaps="fill", gap_note=None).manifest.fingerprints
    noted = CHAT.pack(60, as_of=AS_OF, gaps="fill", gap_note=NOTE).manifest.fingerprints
    other = CHAT.pack(60, as_of=AS_OF, gaps="fill", gap_note="[{n}]").manifest.fingerprints
    assert plain == unset
    assert len({plain["settings"], noted["settings"], other["settings"]}) == 3
    assert noted["input"] == plain["input"]


def test_a_note_that_cannot_fit_is_left_out_and_the_pack_stands() -> None:
    # Keeping the long note's tokens would leave too little for the required system
    # item: the selection without them stands, and its hole has no note.
    chat = from_openai_messages(
        [
            {"role": "system", "content": "rule " * 10},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": LONG},
            {"role": "user", "content": "Ok?"},
            {"role": "assistant", "content": "Yes."},
        ]
    )
    rows = chat.collect().with_columns(
        retention=pl.when(pl.col("role") == "system")
        .then(pl.lit("required"))
        .otherwise(pl.col("retention"))
    )
    long_note = "({n} omitted) " + "note " * 20
    result = pack(rows, 35, PackOptions(as_of=AS_OF, gaps="fill", gap_note=long_note))
    plain = pack(rows, 35, PackOptions(as_of=AS_OF, gaps="fill"))
    assert result.ids == plain.ids == ["msg:0", "msg:1", "msg:3", "msg:4"]
    assert result.manifest.gap_records == [GapRecord(first=2, last=2, items=1)]
    assert result.messages == plain.messages
    assert result.used_tokens == plain.used_tokens == 35 == _recount(result, "openai")


def test_notes_after_a_message_of_text_and_image_parts_sit_at_their_holes() -> None:
    # A message of two parts is two rows but one message: the notes' places count messages.
    url = {"url": "https://example.org/a.jpg", "detail": "low"}
    image = {"type": "image_url", "image_url": url}
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for k in range(8):
        parts = [{"type": "text", "text": "look"}, image]
        text = ("word " * (150 if k == 2 else 5)) + str(k)  # a hole right after the image
        messages.append({"role": "user", "content": parts if k == 1 else text})
        messages.append({"role": "assistant", "content": f"ok {k}"})
    frame = from_openai_messages(messages, conversation_id="c")
    placed = 0
    for budget in range(60, 400, 7):
        packed = frame.pack(budget, as_of=AS_OF, gaps="fill", gap_note=NOTE)
        sent = packed.to_openai()
        validate_openai_messages(sent)
        validate_anthropic_messages(packed.to_anthropic())
        assert get_profile("cl100k_base").request_tokens(sent) == packed.used_tokens
        for gap in packed.manifest.gap_records:
            if gap.note_at is not None:
                assert sent[gap.note_at]["content"] == NOTE.format(n=gap.items), budget
                if isinstance(sent[gap.note_at - 2]["content"], list):  # the image's turn
                    assert sent[gap.note_at + 1]["content"] == "ok 2"  # the hole's reply
                    placed += 1
    assert placed  # some note follows the message of two parts
