"""The question a chat ends on is cut to fit, in a conversation packed newest first.

An exported chat whose last message is a user's pasted log longer than the
budget was packed as its system prompt alone: a request asking nothing.
That message is the question the model answers next; as the results a
half-finished agent loop awaits, it is truncatable without a mark (head
kept, at least 64 tokens, a ``[<n> tokens cut]`` line), in a pack newest
first only: in a pack by rank it is one candidate among others. Only a ``user`` item is
a question: a document or memory sent with that role is not.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.formats.openai import from_openai_messages
from cognoxium.packing.message_rules import validate_anthropic_messages
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, PackScope, pack
from cognoxium.tokens.profiles import get_profile
from tests.image_files import png

AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
CL100K = get_profile("cl100k_base")
LOG = "Why does the build fail?\n" + "".join(
    f"12:00:{k:02d} error 42 in step {k}\n" for k in range(3000)
)


def chat(*, last: str = LOG, reply: str | None = None) -> pl.DataFrame:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Refunds?"},
        {"role": "assistant", "content": "Within 30 days."},
        {"role": "user", "content": last},
    ]
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    return from_openai_messages(messages, conversation_id="c").collect()


def reasons(result: ContextPack) -> dict[str, str]:
    return dict(result.manifest.to_polars().select("id", "reason").iter_rows())


@pytest.mark.parametrize("target", ["openai", "anthropic"])
@pytest.mark.parametrize("budget", [100, 1000, 8000])
def test_a_chat_ending_on_a_pasted_log_sends_its_question_cut(target: str, budget: int) -> None:
    result = pack(chat(), budget, PackOptions(as_of=AS_OF, target=target))  # type: ignore[arg-type]
    assert "c:3" in result.ids
    question = result.messages[-1]
    assert question["role"] == "user"
    assert question["content"].startswith("Why does the build fail?\n12:00:00 error 42")
    assert question["content"].endswith(" tokens cut]")
    [cut] = result.manifest.truncations
    assert (cut.id, cut.side) == ("c:3", "head")
    assert cut.kept_tokens < cut.original_tokens == int(CL100K.count([LOG])[0])
    assert result.used_tokens <= budget
    if target == "anthropic":
        validate_anthropic_messages(result.to_anthropic())
    else:
        assert result.used_tokens == CL100K.request_tokens(result.messages)
    if budget >= 1000:  # the question keeps half the room; the older turns fit in the rest
        assert result.ids == ["c:0", "c:1", "c:2", "c:3"]


def test_the_cut_question_is_deterministic() -> None:
    first = pack(chat(), 500, PackOptions(as_of=AS_OF))
    again = pack(chat(), 500, PackOptions(as_of=AS_OF))
    assert first.manifest.to_json() == again.manifest.to_json()


def test_a_budget_too_small_for_64_tokens_of_the_question_leaves_it_out_as_before() -> None:
    result = pack(chat(), 60, PackOptions(as_of=AS_OF))
    assert result.ids == ["c:0"]
    assert reasons(result)["c:3"] == "over_budget"
    assert result.manifest.truncations == []


def test_a_pack_by_rank_does_not_cut_the_last_message() -> None:
    df = chat()
    rank = pl.Series("rank", [0.0, 3.0, 2.0, 1.0])
    result = pack(df.with_columns(rank), 100, PackOptions(as_of=AS_OF))
    assert result.ids == ["c:0", "c:1", "c:2"]
    assert reasons(result)["c:3"] == "over_budget"
    assert result.manifest.truncations == []


def test_a_rank_equal_to_the_rows_own_cuts_the_question_as_no_rank_does() -> None:
    # The question was cut only without a rank argument: a rank of nulls (the rows' own)
    # packs newest first too, yet left the question out whole, and a budget too small for
    # the required items named different remedies (found by test_known_costs).
    df = chat()
    own = pack(df, 300, PackOptions(as_of=AS_OF))
    scope = PackScope(df)
    given = scope.pack(300, PackOptions(as_of=AS_OF), rank=df.get_column("rank"))
    assert given.manifest.to_json() == own.manifest.to_json()
    assert [t.id for t in given.manifest.truncations] == ["c:3"]
    ranks = pl.Series("rank", [1.0, 4.0, 3.0, 2.0])
    ranked = scope.pack(300, PackOptions(as_of=AS_OF), rank=ranks)
    assert ranked.manifest.truncations == []  # ranked, the question is one candidate


def test_a_chat_that_ends_on_a_reply_does_not_cut_its_last_question() -> None:
    result = pack(chat(reply="Send the first error only."), 200, PackOptions(as_of=AS_OF))
    assert "c:3" not in result.ids
    assert result.manifest.truncations == []


@pytest.mark.parametrize("role", ["document", "memory", "tool"])
def test_a_last_item_that_is_not_a_user_message_is_not_cut(role: str) -> None:
    """Items sent with the user role (a document, a memory, a tool output without a call)."""
    rows = [
        {"id": "s", "role": "system", "text": "Be brief."},
        {"id": "q", "role": "user", "text": "short q"},
        {"id": "d", "role": role, "text": LOG},
    ]
    result = CognitionFrame(rows).pack(200, as_of=AS_OF)
    assert result.ids == ["s", "q"]
    assert result.manifest.truncations == []


@pytest.mark.parametrize("image_first", [False, True])
def test_a_last_question_with_an_image_has_its_text_cut(image_first: bool) -> None:
    image = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(8, 8)).decode()},
    }
    text = {"type": "text", "text": LOG}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [image, text] if image_first else [text, image]},
    ]
    result = from_openai_messages(messages, conversation_id="c").pack(3000, as_of=AS_OF)
    assert result.ids == ["c:0", "c:1.0", "c:1.1"]
    [cut] = result.manifest.truncations
    assert cut.id == ("c:1.1" if image_first else "c:1.0")
    assert result.used_tokens <= 3000


FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # one grapheme, many tokens


@pytest.mark.parametrize("last", ["user", "tool"])
def test_an_awaited_cut_given_back_room_it_cannot_use_keeps_its_cut_to_the_cap(last: str) -> None:
    """A cut's cost is not monotonic in what it keeps: regrowing may find no longer cut."""
    text = "refund " * 19 + "refund " + " ".join([FAMILY] * 4)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "refund refund refund refund " + FAMILY},
        {"role": "system", "content": f"refund refund refund refund {FAMILY} {FAMILY}"},
    ]
    if last == "user":
        messages.append({"role": "user", "content": text})
    else:
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages += [
            {"role": "user", "content": "refund?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": text},
        ]
    frame = from_openai_messages(messages, conversation_id="c", system_retention="optional")
    df = frame.collect()
    for budget in range(60, 200):
        result = pack(df, budget, PackOptions(as_of=AS_OF))
        assert result.used_tokens <= budget
        assert result.used_tokens == CL100K.request_tokens(result.messages)
