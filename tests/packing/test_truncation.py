"""Reply reserve, truncation of truncatable items and the overflow modes, each with its right value.

Costs under cl100k_base by the cookbook rule: a message costs 3 tokens, its
role (1 token for ``system``, ``user``, ``assistant``, ``tool``) and its
content; a pack adds 3 of reply priming. ``"word " * 100`` is 101 tokens:
``"word"``, 99 times ``" word"`` and a final ``" "``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import BudgetError, PackError, RecordError
from cognoxium.governance.policies import BoundaryPolicy
from cognoxium.items.model import content_hash
from cognoxium.items.records import records_to_frame
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import PackManifest, pack
from cognoxium.tokens.profiles import get_profile
from cognoxium.tokens.truncation import cut_tokens
from tests.image_files import gif

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
CL100K = get_profile("cl100k_base")
WORDS = "word " * 100  # 101 tokens
SYSTEM = {"id": "sys", "role": "system", "text": "Be brief.", "retention": "required"}  # 7


def frame(*records: dict[str, Any]) -> pl.DataFrame:
    return records_to_frame(
        [{"created_at": "2024-01-01T00:00:00Z", **record} for record in records]
    )


def doc(side: str = "head", min_tokens: int = 10, **fields: Any) -> dict[str, Any]:
    mark = {"side": side, "min_tokens": min_tokens}
    return {
        "id": "doc",
        "role": "document",
        "text": WORDS,
        "metadata": {"truncate": mark},
        **fields,
    }


# --- cutting at token boundaries ---------------------------------------------------------


@pytest.mark.parametrize(
    ("keep", "head", "tail"),
    [
        (1, ("", 0), ("。", 1)),  # the first token is only part of 東
        (2, ("東", 2), ("です。", 2)),
        (5, ("東京は日", 5), ("の首都です。", 5)),
        (10, ("東京は日本の首都です", 10), ("京は日本の首都です。", 9)),  # half of 東 dropped
    ],
)
def test_cjk_cuts_drop_a_split_character(
    keep: int, head: tuple[str, int], tail: tuple[str, int]
) -> None:
    text = "東京は日本の首都です。"  # 11 tokens; 東 is two of them
    assert cut_tokens(CL100K, text, keep, "head") == head
    assert cut_tokens(CL100K, text, keep, "tail") == tail


@pytest.mark.parametrize(
    ("keep", "head", "tail"),
    [
        (2, ("", 0), ("", 0)),  # every emoji here is 3 tokens
        (5, ("👍", 3), ("🎉", 3)),
        (6, ("👍🏽", 6), (" 🎉🎉", 6)),
        (10, ("👍🏽 great job ", 9), (" great job 🎉🎉", 8)),
    ],
)
def test_emoji_cuts_keep_whole_code_points(
    keep: int, head: tuple[str, int], tail: tuple[str, int]
) -> None:
    text = "👍🏽 great job 🎉🎉"  # 14 tokens
    assert cut_tokens(CL100K, text, keep, "head") == head
    assert cut_tokens(CL100K, text, keep, "tail") == tail


def test_a_cut_is_a_prefix_or_suffix_that_re_encodes_within_the_count() -> None:
    text = "naïve café 東京 👍🏽 déjà vu " * 7
    total = len(CL100K.encoding.encode_ordinary(text))
    for keep in range(total + 1):
        for side in ("head", "tail"):
            cut, count = cut_tokens(CL100K, text, keep, side)  # type: ignore[arg-type]
            assert count == len(CL100K.encoding.encode_ordinary(cut)) <= keep
            assert text.startswith(cut) if side == "head" else text.endswith(cut)


def whole_text_cut(text: str, keep: int, side: str) -> tuple[str, int]:
    """The cut made from the tokens of the whole text, as a reference."""
    encoding = CL100K.encoding
    tokens = encoding.encode_ordinary(text)
    take = keep
    while take > 0:
        piece = tokens[:take] if side == "head" else tokens[len(tokens) - take :]
        cut = encoding.decode_bytes(piece).decode("utf-8", errors="ignore")
        count = len(encoding.encode_ordinary(cut))
        if count <= keep and (text.startswith(cut) if side == "head" else text.endswith(cut)):
            return cut, count
        take -= max(count - keep, 1)
    return "", 0


PIECES = ["x", " ", "\n", "ab", "東", "👍🏽", "1", "INFO worker-3 latency=12ms ok\n", "    ", "é"]


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(
        st.tuples(st.sampled_from(PIECES), st.sampled_from([1, 3, 50, 2000])), min_size=1
    ),
    keep=st.integers(1, 60),
    side=st.sampled_from(["head", "tail"]),
)
def test_a_cut_of_a_long_text_keeps_as_many_tokens_as_a_cut_of_all_its_tokens(
    parts: list[tuple[str, int]], keep: int, side: str
) -> None:
    text = "".join(piece * n for piece, n in parts)
    if len(CL100K.encoding.encode_ordinary(text)) <= keep:
        return
    cut, count = cut_tokens(CL100K, text, keep, side)  # type: ignore[arg-type]
    assert count == len(CL100K.encoding.encode_ordinary(cut)) <= keep
    assert text.startswith(cut) if side == "head" else text.endswith(cut)
    assert count == whole_text_cut(text, keep, side)[1]


def test_a_cut_of_one_character_repeated_millions_of_times_keeps_its_count() -> None:
    text = "x" * 2_000_000
    for side in ("head", "tail"):
        cut, count = cut_tokens(CL100K, text, 500, side)  # type: ignore[arg-type]
        assert (cut, count) == whole_text_cut(text, 500, side)


def test_cut_refuses_a_negative_count_and_an_unknown_side() -> None:
    with pytest.raises(ValueError, match="keep must be"):
        cut_tokens(CL100K, "abc", -1, "head")
    with pytest.raises(ValueError, match="side must be"):
        cut_tokens(CL100K, "abc", 1, "middle")  # type: ignore[arg-type]


# --- truncation in a pack -----------------------------------------------------------------


def test_a_truncatable_item_is_cut_to_what_is_left_with_hash_and_lineage() -> None:
    result = pack(frame(SYSTEM, doc()), 50, PackOptions(as_of=AS_OF))
    # 50 - 3 priming - 7 system - 4 framing of the document = 36 tokens of text.
    kept = " ".join(["word"] * 36)
    assert result.ids == ["sys", "doc"]
    assert result.messages[1] == {"role": "user", "content": kept}
    assert result.used_tokens == 50 == CL100K.request_tokens(result.messages)
    assert result.remaining_tokens == 0
    original = content_hash("text", WORDS.encode())
    new = content_hash("text", kept.encode())
    (record,) = result.manifest.truncations
    assert record.model_dump() == {
        "id": "doc",
        "side": "head",
        "original_tokens": 101,
        "kept_tokens": 36,
        "parent_hash": original,
        "content_hash": new,
    }
    entry = result.manifest.entries[1]
    assert (entry.tokens, entry.content_hash, entry.reason) == (40, new, "selected")
    assert entry.detail == "truncated: kept 36 of 101 tokens (side head)"
    assert result.manifest.lineage == [
        {
            "child_id": "doc",
            "child_hash": new,
            "parent_id": "doc",
            "parent_hash": original,
            "operation": "truncate",
            "detail": '{"kept_tokens":36,"original_tokens":101,"side":"head"}',
        }
    ]
    packed = result.frame.row(1, named=True)
    assert (packed["text"], packed["content_hash"]) == (kept, new)
    assert result.items[1].content_hash == new  # the packed row is a valid item


def test_tail_keeps_the_end_of_the_text() -> None:
    result = pack(frame(SYSTEM, doc(side="tail")), 50, PackOptions(as_of=AS_OF))
    assert result.messages[1]["content"] == " word" * 35 + " "  # the last 36 tokens
    assert result.manifest.truncations[0].side == "tail"


@pytest.mark.parametrize("side", ["head", "tail"])
def test_a_note_is_sent_on_its_side_of_the_cut_text_and_counted(side: str) -> None:
    record = doc(side=side)
    record["metadata"]["truncate"]["note"] = "[{n} tokens cut]"
    result = pack(frame(SYSTEM, record), 50, PackOptions(as_of=AS_OF))
    # 36 tokens of text without a note: "\n[71 tokens cut]" after it costs 6 of them,
    # "[70 tokens cut]\n" before it 5.
    content = result.messages[1]["content"]
    (cut,) = result.manifest.truncations
    if side == "head":
        assert (cut.kept_tokens, cut.original_tokens) == (30, 101)
        assert content == " ".join(["word"] * 30) + "\n[71 tokens cut]"
    else:
        assert (cut.kept_tokens, cut.original_tokens) == (31, 101)
        assert content == "[70 tokens cut]\n" + " word" * 30 + " "
    assert result.used_tokens == 50 == CL100K.request_tokens(result.messages)
    assert cut.content_hash == content_hash("text", content.encode())
    assert result.frame.row(1, named=True)["text"] == content


def test_min_tokens_refuses_a_cut_that_keeps_too_little() -> None:
    # 30 - 3 - 7 - 4 = 16 tokens would be left for the text: below min_tokens 20.
    result = pack(frame(SYSTEM, doc(min_tokens=20)), 30, PackOptions(as_of=AS_OF))
    assert result.ids == ["sys"]
    assert result.manifest.entries[1].reason == "over_budget"
    assert result.manifest.truncations == []
    # With min_tokens 16 the same budget keeps exactly 16.
    result = pack(frame(SYSTEM, doc(min_tokens=16)), 30, PackOptions(as_of=AS_OF))
    assert result.manifest.truncations[0].kept_tokens == 16
    assert result.used_tokens == 30


def test_an_item_that_fits_whole_is_not_cut() -> None:
    result = pack(frame(SYSTEM, doc()), 200, PackOptions(as_of=AS_OF))
    assert result.messages[1]["content"] == WORDS
    assert result.used_tokens == 3 + 7 + 4 + 101
    assert result.manifest.truncations == []
    assert "truncations" not in result.manifest.to_json()


def test_higher_ranked_truncatable_item_is_cut_before_lower_ranked_items_are_tried() -> None:
    small = {"id": "small", "role": "user", "text": "hello there", "rank": 0.1}  # 6 tokens
    result = pack(frame(SYSTEM, doc(rank=0.9), small), 60, PackOptions(as_of=AS_OF))
    # The document is reached first and takes all that is left: 60 - 3 - 7 - 4 = 46.
    assert result.ids == ["sys", "doc"]
    assert result.manifest.truncations[0].kept_tokens == 46
    assert result.manifest.entries[2].reason == "over_budget"


def test_a_grouped_tool_result_is_cut_and_its_call_kept() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    records = [
        SYSTEM,
        {
            "id": "call",
            "role": "assistant",
            "text": "Searching.",
            "group_id": "g",
            "metadata": {"tool_call_ids": ["c1"], "tool_calls": [call]},
        },
        {
            "id": "result",
            "role": "tool",
            "text": WORDS,
            "group_id": "g",
            "metadata": {"tool_call_id": "c1", "truncate": {"min_tokens": 5}},
        },
    ]
    full = pack(frame(*records), 1000, PackOptions(as_of=AS_OF))
    whole_cost = full.used_tokens - 3 - 7
    cut_by = whole_cost - (80 - 3 - 7)
    result = pack(frame(*records), 80, PackOptions(as_of=AS_OF))
    assert result.ids == ["sys", "call", "result"]
    assert result.used_tokens == 80 == CL100K.request_tokens(result.messages)
    assert result.messages[2]["tool_call_id"] == "c1"
    assert result.manifest.truncations[0].kept_tokens == 101 - cut_by


def test_a_cut_data_block_is_priced_as_sent() -> None:
    policy = BoundaryPolicy(wrap_untrusted=True)
    result = pack(
        frame(SYSTEM | {"trust": "trusted"}, doc()), 90, PackOptions(as_of=AS_OF), policy=policy
    )
    content = result.messages[1]["content"]
    assert content.startswith('<untrusted-data id="doc"')
    assert "word word" in content
    assert result.used_tokens == CL100K.request_tokens(result.messages) <= 90
    kept = result.manifest.truncations[0].kept_tokens
    assert content.count("word") == kept


# --- marks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mark", "match"),
    [
        ({"side": "middle"}, "side"),
        ({"min_tokens": 0}, "min_tokens"),
        ({"min_tokens": "10"}, "min_tokens"),
        ({"sides": "head"}, "sides"),
        ("head", "not a truncation mark"),
        ({"note": "{count} cut"}, "note: Value error, a note's only field is {n}"),
        ({"note": "  "}, "note: Value error, a note must not be blank"),
        ({"note": 5}, "note"),
    ],
)
def test_a_malformed_mark_names_the_row_and_field(mark: Any, match: str) -> None:
    df = frame(SYSTEM, {"id": "doc", "role": "document", "text": "x", "metadata": {}})
    df = df.with_columns(
        pl.when(pl.col("id") == "doc")
        .then(pl.lit(json.dumps({"truncate": mark})))
        .otherwise(pl.col("metadata"))
        .alias("metadata")
    )
    with pytest.raises(RecordError, match=match) as info:
        pack(df, 100, PackOptions(as_of=AS_OF))
    assert (info.value.row, info.value.field) == (1, "metadata.truncate")


def test_a_mark_on_a_json_payload_is_refused() -> None:
    df = records_to_frame(
        [
            {
                "id": "j",
                "role": "tool",
                "payload": {"kind": "json", "value": {"a": 1}},
                "created_at": "2024-01-01T00:00:00Z",
            }
        ]
    ).with_columns(metadata=pl.lit('{"truncate":{}}'))
    with pytest.raises(RecordError, match="only a text payload") as info:
        pack(df, 100, PackOptions(as_of=AS_OF))
    assert (info.value.row, info.value.field) == (0, "metadata.truncate")


def test_a_nested_truncate_key_is_not_a_mark() -> None:
    nested = {"id": "d", "role": "document", "text": WORDS, "metadata": {"x": {"truncate": 1}}}
    result = pack(frame(SYSTEM, nested), 50, PackOptions(as_of=AS_OF))
    assert result.ids == ["sys"]


# --- reserve --------------------------------------------------------------------------------


def test_reserve_is_taken_out_of_the_budget_and_recorded() -> None:
    reserved = pack(frame(SYSTEM, doc()), 80, PackOptions(reserve=30, as_of=AS_OF))
    plain = pack(frame(SYSTEM, doc()), 50, PackOptions(as_of=AS_OF))
    assert reserved.messages == plain.messages
    assert reserved.used_tokens == 50
    assert (reserved.budget, reserved.remaining_tokens) == (80, 0)
    manifest = reserved.manifest
    assert (manifest.budget, manifest.reserve_tokens, manifest.remaining_tokens) == (80, 30, 0)
    data = json.loads(manifest.to_json())
    assert data["reserve_tokens"] == 30
    assert PackManifest.from_json(manifest.to_json()).to_json() == manifest.to_json()
    assert manifest.fingerprints["settings"] != plain.manifest.fingerprints["settings"]


def test_reserve_without_truncation_arithmetic() -> None:
    items = frame(SYSTEM, {"id": "q", "role": "user", "text": "hello there"})  # 7 + 6
    result = pack(items, 30, PackOptions(reserve=10, as_of=AS_OF))
    assert result.used_tokens == 16
    assert result.remaining_tokens == 30 - 10 - 16
    assert "reserve_tokens" not in pack(items, 30, PackOptions(as_of=AS_OF)).manifest.to_json()


def test_reserve_over_the_budget_is_a_budget_error() -> None:
    with pytest.raises(BudgetError, match="reserve must be a whole number of tokens from 0 to"):
        pack(frame(SYSTEM), 30, PackOptions(reserve=31, as_of=AS_OF))


@pytest.mark.parametrize("reserve", [-1, True, 2.0, "5"])
def test_a_reserve_that_is_not_a_whole_number_of_tokens_is_a_pack_error(reserve: Any) -> None:
    with pytest.raises(PackError, match=r"^reserve must be a whole number of tokens >= 0, got "):
        pack(frame(SYSTEM), 30, PackOptions(reserve=reserve, as_of=AS_OF))
    with pytest.raises(PackError, match=r"^reserve must be a whole number of tokens >= 0, got "):
        PackOptions(reserve=reserve)


def test_required_items_must_fit_beside_the_reserve() -> None:
    with pytest.raises(BudgetError, match="budget is 9") as info:
        pack(frame(SYSTEM), 20, PackOptions(reserve=11, as_of=AS_OF))
    assert info.value.costs == {"sys": 7}
    assert pack(frame(SYSTEM), 20, PackOptions(reserve=10, as_of=AS_OF)).used_tokens == 10


# --- overflow -------------------------------------------------------------------------------


def required_doc(min_tokens: int = 10) -> dict[str, Any]:
    return doc(min_tokens=min_tokens, retention="required")


def test_overflow_error_refuses_required_items_that_do_not_fit() -> None:
    with pytest.raises(BudgetError, match="required items need 115 tokens") as info:
        pack(frame(SYSTEM, required_doc()), 50, PackOptions(as_of=AS_OF))
    assert info.value.costs == {"doc": 105, "sys": 7}


def test_overflow_truncate_cuts_required_truncatable_items() -> None:
    result = pack(frame(SYSTEM, required_doc()), 50, PackOptions(overflow="truncate", as_of=AS_OF))
    assert result.ids == ["sys", "doc"]
    assert result.used_tokens == 50
    assert result.manifest.truncations[0].kept_tokens == 36
    assert result.manifest.overflow == "truncate"
    assert json.loads(result.manifest.to_json())["overflow"] == "truncate"


def test_overflow_truncate_cuts_the_unit_considered_last_first() -> None:
    low = required_doc(min_tokens=5) | {"id": "low", "priority": 0}
    high = required_doc(min_tokens=5) | {"id": "high", "priority": 1}
    result = pack(frame(SYSTEM, high, low), 150, PackOptions(overflow="truncate", as_of=AS_OF))
    # 150 - 3 - 7 - 105 (high whole) - 4 = 31 tokens of text left for "low".
    cuts = {t.id: t.kept_tokens for t in result.manifest.truncations}
    assert cuts == {"low": 31}
    assert result.used_tokens == 150


def test_overflow_truncate_fails_when_min_tokens_cannot_be_met() -> None:
    with pytest.raises(BudgetError, match="even cut to their min_tokens") as info:
        pack(
            frame(SYSTEM, required_doc(min_tokens=40)),
            50,
            PackOptions(overflow="truncate", as_of=AS_OF),
        )
    assert info.value.costs == {"doc": 105, "sys": 7}
    # The advice is what is left to do: overflow='truncate' is already given.
    assert "overflow='truncate'" not in str(info.value)
    assert str(info.value).endswith(
        "raise the budget, lower their retention, or mark more of them truncatable or lower "
        "their min_tokens"
    )


def test_overflow_must_be_a_known_mode() -> None:
    with pytest.raises(PackError, match="overflow must be"):
        pack(frame(SYSTEM), 30, PackOptions(overflow="drop", as_of=AS_OF))  # type: ignore[arg-type]


# --- determinism ----------------------------------------------------------------------------


def test_truncated_packs_give_byte_identical_manifests() -> None:
    records = [SYSTEM, doc(rank=0.5), doc(side="tail") | {"id": "doc2", "rank": 0.4}]
    runs = [
        pack(
            frame(*records), 90, PackOptions(reserve=20, overflow="truncate", as_of=AS_OF)
        ).manifest.to_json()
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert PackManifest.from_json(runs[0]).to_json() == runs[0]


# --- property: what is packed is what is sent -----------------------------------------------

PIECES = st.sampled_from(["word", " ", "東京", "👍🏽", "é", "\n", "naïve", "🎉", "data", "."])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.lists(PIECES, min_size=1, max_size=60).map("".join), min_size=1, max_size=4),
    sides=st.lists(st.sampled_from(["head", "tail"]), min_size=4, max_size=4),
    mins=st.lists(st.integers(1, 12), min_size=4, max_size=4),
    notes=st.lists(st.sampled_from([None, "[{n} tokens cut]", "(+{n})"]), min_size=4, max_size=4),
    budget=st.integers(10, 120),
    reserve=st.integers(0, 10),
)
def test_truncated_packs_cost_what_they_send(
    texts: list[str],
    sides: list[str],
    mins: list[int],
    notes: list[str | None],
    budget: int,
    reserve: int,
) -> None:
    marks = [
        {"side": side, "min_tokens": least, **({} if note is None else {"note": note})}
        for side, least, note in zip(sides, mins, notes, strict=True)
    ]
    records = [SYSTEM] + [
        {
            "id": f"d{i}",
            "role": "document",
            "text": text,
            "rank": float(len(texts) - i),
            "metadata": {"truncate": marks[i]},
        }
        for i, text in enumerate(texts)
    ]
    result = pack(frame(*records), budget + reserve, PackOptions(reserve=reserve, as_of=AS_OF))
    assert result.used_tokens == CL100K.request_tokens(result.messages) <= budget
    originals = {r["id"]: r["text"] for r in records}
    for record in result.manifest.truncations:
        sent = result.frame.filter(pl.col("id") == record.id).get_column("text").item()
        note = notes[int(record.id[1:])]
        kept = sent
        if note is not None:  # the note of the tokens cut, on its side, on a line of its own
            line = note.format(n=record.original_tokens - record.kept_tokens)
            head = record.side == "head"
            assert sent.endswith("\n" + line) if head else sent.startswith(line + "\n")
            kept = sent[: -len(line) - 1] if head else sent[len(line) + 1 :]
        original = originals[record.id]
        assert original.startswith(kept) if record.side == "head" else original.endswith(kept)
        assert mins[int(record.id[1:])] <= record.kept_tokens < record.original_tokens
        assert record.kept_tokens == len(CL100K.encoding.encode_ordinary(kept))
        assert record.content_hash == content_hash("text", sent.encode())


def test_a_cut_made_for_a_selection_left_behind_does_not_carry_over() -> None:
    # gaps="stop": the first selection takes the replies m01 and m02 and cuts m03 to
    # what they leave; the image m04 did not fit, so the tail ends before them and the
    # selection runs again without them. m03 now fits whole. It kept the first cut
    # (44 of its 52 tokens) and m05 was cut into the room that cut left.
    def record(item_id: str, role: str, words: int, **more: Any) -> dict[str, Any]:
        body = (
            {"payload": more.pop("payload")}
            if "payload" in more
            else {"text": " ".join(["refund"] * words)}
        )
        return (
            {"id": item_id, "role": role, "retention": "preferred", "trust": "trusted"}
            | body
            | more
        )

    cut = {"truncate": {"side": "head", "min_tokens": 1}}
    image = {"kind": "binary", "data": gif(16, 32)}
    df = frame(
        record("s0", "system", 5, retention="required"),
        record("s1", "system", 4, retention="required"),
        record("m00", "user", 1, retention="required"),
        record("m01", "assistant", 2),
        record("m02", "assistant", 2),
        record("m03", "document", 52, retention="optional", metadata=cut),
        record(
            "m04", "user", 0, payload=image, metadata={"media_type": "image/gif", "detail": "low"}
        ),
        record("m05", "document", 52, retention="optional", metadata=cut),
        record("m06", "user", 1, retention="required"),
    )
    packed = pack(df, 90, PackOptions(as_of=AS_OF, gaps="stop"))
    assert packed.ids == ["s0", "s1", "m00", "m03", "m06"]
    assert packed.manifest.truncations == []
    assert packed.used_tokens == CL100K.request_tokens(packed.messages)


@pytest.mark.parametrize("last", ["result", "question"])
@pytest.mark.parametrize("budget", [140, 160])
def test_a_cut_last_message_leaves_the_history_its_room_when_half_of_it_is_below_its_floor(
    last: str, budget: int
) -> None:
    # The cut of an awaited result (or of the question a chat ends on) keeps half the room
    # so that the history before it keeps the rest. When half the room was below its
    # 64-token floor, the cut took the whole room instead: a 12- and a 10-token message
    # were left out at 140 tokens, where 79 tokens of the log and both fit.
    from cognoxium.formats.openai import from_openai_messages

    log = "line of output " * 300
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Check the logs of the hub please."},
        {"role": "assistant", "content": "Looking at the earlier session."},
    ]
    call = {"id": "c1", "type": "function", "function": {"name": "read_log", "arguments": "{}"}}
    if last == "result":
        history += [
            {"role": "user", "content": "Also the router."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": log},
        ]
    else:
        history.append({"role": "user", "content": "Why does this fail?\n" + log})
    packed = from_openai_messages(history).pack(budget, as_of=AS_OF)
    assert packed.ids == [f"msg:{i}" for i in range(len(history))]
    (cut,) = packed.manifest.truncations
    assert cut.id == f"msg:{len(history) - 1}"
    assert cut.kept_tokens >= 64
    assert packed.used_tokens == budget  # what the history leaves goes back to the cut


def test_parallel_results_are_cut_the_longest_first_not_the_last_first() -> None:
    # Three results of one call: a long log first, then two files of 300 words. The last
    # rows were cut first: both files to their 64-token floor while the log kept 800
    # tokens. The longest is now cut first, toward one level, and the files fit whole.
    from cognoxium.formats.openai import from_openai_messages

    def call(k: int) -> dict[str, Any]:
        return {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}

    log = "".join(f"line {i}: ERROR in module {i % 97}\n" for i in range(3000))
    history = [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": "Why does the build fail?"},
        {"role": "assistant", "content": None, "tool_calls": [call(k) for k in range(3)]},
        {"role": "tool", "tool_call_id": "c0", "content": log},
        {"role": "tool", "tool_call_id": "c1", "content": "word " * 300},
        {"role": "tool", "tool_call_id": "c2", "content": "word " * 300},
    ]
    packed = from_openai_messages(history).pack(1000, as_of=AS_OF)
    assert packed.ids == [f"msg:{i}" for i in range(6)]
    (cut,) = packed.manifest.truncations
    assert cut.id == "msg:3"
    assert cut.kept_tokens > 300  # the log keeps more than a file, and no file is cut
    assert packed.used_tokens >= 1000 - 2
