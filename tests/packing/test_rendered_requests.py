"""Packs that render for their target: every rendering of ordinary packs is a valid request.

The sample, the chat fixtures and LoCoMo are packed at several budgets and
rendered with every renderer; the validators of
:mod:`cognoxium.packing.message_rules` (and the SDK types, when installed)
accept each request. ``to_anthropic()`` never needs a placeholder argument,
and a pack built for Anthropic counts what its rendering adds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.exceptions import BudgetError
from cognoxium.formats.openai import from_openai_messages
from cognoxium.packing._renderers import OPENING
from cognoxium.packing.message_rules import validate_anthropic_messages
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.tokens.profiles import get_profile
from tests.app.test_locomo import LOCOMO
from tests.formats.test_chat import WEATHER
from tests.packing.test_conversation import HISTORY, chat
from tests.packing.test_tool_rules import assert_renders_valid

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample" / "items.jsonl"
AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
BUDGETS = (64, 128, 256, 512, 1024, 2048)
OPENING_MESSAGE = {"role": "user", "content": [{"type": "text", "text": OPENING}]}


def sample(ranked: bool) -> CognitionFrame:
    frame = CognitionFrame.read_jsonl(SAMPLE)
    return frame.rank("bm25", query="firmware update failed error E-417") if ranked else frame


@pytest.mark.parametrize("profile", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("ranked", [False, True])
@pytest.mark.parametrize("budget", BUDGETS)
def test_the_sample_renders_valid_requests_at_every_budget(
    profile: str, ranked: bool, budget: int
) -> None:
    result = sample(ranked).pack(budget, as_of=AS_OF, profile=profile)
    assert_renders_valid(result)  # to_anthropic() without a placeholder


@pytest.mark.parametrize("profile", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("ranked", [False, True])
@pytest.mark.parametrize("budget", BUDGETS)
def test_a_sample_pack_built_for_anthropic_starts_on_its_own_user_message(
    profile: str, ranked: bool, budget: int
) -> None:
    result = sample(ranked).pack(budget, as_of=AS_OF, profile=profile, target="anthropic")
    assert_renders_valid(result)
    request = result.to_anthropic()
    sent = [m for m in result.messages if m["role"] not in ("system", "developer")]
    if sent:  # the pack's own first message is a user one: nothing is added
        assert sent[0]["role"] == "user"
        assert request["messages"][0] != OPENING_MESSAGE
    else:  # the opening message is added and counted
        assert request["messages"] == [OPENING_MESSAGE]
    opening = get_profile(profile).message_tokens({"role": "user", "content": OPENING})
    counted = get_profile(profile).request_tokens(result.messages)
    assert result.used_tokens == counted + (0 if sent else opening + (0 if counted else 3))
    assert result.used_tokens <= budget


def test_the_sample_at_512_starts_on_an_assistant_turn_and_renders_without_a_placeholder() -> None:
    # The case of the issue: the pack's first conversation message is an assistant reply.
    result = sample(False).pack(512, as_of=AS_OF)
    sent = [m for m in result.messages if m["role"] not in ("system", "developer")]
    request = result.to_anthropic()
    if sent[0]["role"] == "assistant":
        assert request["messages"][0] == OPENING_MESSAGE
    validate_anthropic_messages(request)
    built = sample(False).pack(512, as_of=AS_OF, target="anthropic")
    assert built.to_anthropic()["messages"][0] != OPENING_MESSAGE
    assert "before_first_user" in built.manifest.totals.by_reason or sent[0]["role"] == "user"


SYSTEM_ONLY = pl.DataFrame(
    {
        "id": ["sys", "q"],
        "role": ["system", "user"],
        "text": ["Be brief.", "word " * 300],
        "retention": ["required", "optional"],
        "created_at": [datetime(2024, 1, 1, tzinfo=UTC)] * 2,
    }
)


def test_a_pack_of_only_system_items_renders_one_opening_user_message() -> None:
    frame = CognitionFrame(SYSTEM_ONLY.to_dicts())
    result = frame.pack(60, as_of=AS_OF)  # too small for the question, even cut to 64 tokens
    assert result.ids == ["sys"]
    assert result.to_anthropic() == {"system": "Be brief.", "messages": [OPENING_MESSAGE]}
    assert result.to_anthropic(placeholder="(start)")["messages"][0]["content"][0]["text"] == (
        "(start)"
    )


def test_a_pack_for_anthropic_of_only_system_items_counts_the_opening_message() -> None:
    frame = CognitionFrame(SYSTEM_ONLY.to_dicts())
    profile = get_profile("cl100k_base")
    plain = frame.pack(60, as_of=AS_OF)
    built = frame.pack(60, as_of=AS_OF, target="anthropic")
    opening = profile.message_tokens({"role": "user", "content": OPENING})
    assert built.ids == ["sys"]
    assert built.used_tokens == plain.used_tokens + opening
    assert built.manifest.pack_overhead_tokens == profile.tokens_per_pack + opening
    assert built.remaining_tokens == 60 - built.used_tokens
    assert built.manifest.fingerprints["settings"] != plain.manifest.fingerprints["settings"]
    validate_anthropic_messages(built.to_anthropic())


def test_an_empty_pack_for_anthropic_counts_the_opening_message_and_the_priming() -> None:
    frame = CognitionFrame(SYSTEM_ONLY.to_dicts()[1:])
    profile = get_profile("cl100k_base")
    built = frame.pack(40, as_of=AS_OF, target="anthropic")
    opening = profile.message_tokens({"role": "user", "content": OPENING})
    assert built.ids == []
    assert built.used_tokens == opening + profile.tokens_per_pack
    assert built.to_anthropic() == {"messages": [OPENING_MESSAGE]}


BLANK_FIRST = {
    "a blank message alone": [{"role": "user", "content": "\n"}],
    "a blank question, then a reply": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": " \t"},
        {"role": "assistant", "content": "Hello."},
    ],
    "a separator only Python strips": [{"role": "user", "content": "\x1c"}],
    "a blank question, then a named reply": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "", "name": "bot"},
    ],
}


@pytest.mark.parametrize("messages", BLANK_FIRST.values(), ids=list(BLANK_FIRST))
def test_a_blank_first_message_is_not_sent_so_the_opening_message_is_counted(
    messages: list[dict[str, str]],
) -> None:
    """A user message of blank text renders no Anthropic block: the opening takes its place."""
    df = from_openai_messages(messages, conversation_id="c", system_retention="optional")
    built = pack(df.collect(), 60, PackOptions(as_of=AS_OF, target="anthropic"))
    profile = get_profile("cl100k_base")
    request = built.to_anthropic()
    assert built.ids == [f"c:{k}" for k in range(len(messages))]
    assert request["messages"][0] == OPENING_MESSAGE
    opening = {"role": "user", "content": OPENING}
    assert built.used_tokens == profile.request_tokens([opening, *built.messages])
    validate_anthropic_messages(request)


def test_a_budget_too_small_for_the_opening_message_is_a_budget_error() -> None:
    frame = CognitionFrame(SYSTEM_ONLY.to_dicts())
    with pytest.raises(BudgetError, match="user message an Anthropic request opens with"):
        frame.pack(15, as_of=AS_OF, target="anthropic")


def test_a_pack_for_anthropic_drops_a_leading_reply_as_start_on_user_does() -> None:
    greeting = chat(
        [
            ("sys", "system", "Be brief."),
            ("hello", "assistant", "Hello! How can I help?"),
            ("q1", "user", "What is the refund window?"),
            ("a1", "assistant", "30 days."),
        ]
    )
    plain = pack(greeting, 1_000, PackOptions(as_of=AS_OF))
    built = pack(greeting, 1_000, PackOptions(as_of=AS_OF, target="anthropic"))
    assert plain.ids == ["sys", "hello", "q1", "a1"]
    assert built.ids == ["sys", "q1", "a1"]
    assert built.manifest.totals.by_reason["before_first_user"] == 1
    assert built.used_tokens == get_profile("cl100k_base").request_tokens(built.messages)
    assert_renders_valid(plain)
    assert_renders_valid(built)


@pytest.mark.parametrize("budget", [0, 20, 40, 60, 100, 200, 400])
@pytest.mark.parametrize("target", ["openai", "anthropic"])
def test_the_chat_fixtures_render_valid_requests(budget: int, target: str) -> None:
    weather = from_openai_messages(WEATHER, conversation_id="w", system_retention="optional")
    for frame in (
        weather.collect(),
        HISTORY.with_columns(
            pl.lit("optional").cast(HISTORY.schema["retention"]).alias("retention")
        ),
    ):
        options = PackOptions(as_of=AS_OF, target=target)  # type: ignore[arg-type]
        if target == "anthropic" and budget == 0:  # no room for the opening user message
            with pytest.raises(BudgetError, match="an Anthropic request needs a user message"):
                pack(frame, budget, options)
            continue
        assert_renders_valid(pack(frame, budget, options))


@pytest.mark.skipif(not LOCOMO.is_file(), reason=f"LoCoMo data not found at {LOCOMO}")
@pytest.mark.parametrize("budget", [256, 2048])
def test_locomo_renders_valid_requests(budget: int) -> None:
    from cognoxium.app.locomo_dataset import load_locomo

    items = load_locomo(LOCOMO)
    first = items.filter(pl.col("id").str.starts_with(items.get_column("id")[0].split(":")[0]))
    for ranked in (False, True):
        frame = CognitionFrame.from_polars(first)
        if ranked:
            frame = frame.rank("bm25", query="What did they talk about?")
        assert_renders_valid(frame.pack(budget, as_of=AS_OF))


@pytest.mark.parametrize("budget", [45, 60, 200, 4_000])
def test_a_pack_for_anthropic_of_an_agent_loop_without_a_user_message_keeps_its_steps(
    budget: int,
) -> None:
    # Every step was left out as before_first_user: a loop driven by its system prompt alone
    # has no user message to start on, and the pack sent the system prompt and a placeholder.
    def call(n: int) -> dict[str, object]:
        return {"id": f"c{n}", "type": "function", "function": {"name": "run", "arguments": "{}"}}

    messages: list[dict[str, object]] = [{"role": "system", "content": "Nightly maintenance."}]
    for n in range(3):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call(n)]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "ok"},
        ]
    loop = from_openai_messages(messages, conversation_id="n")
    plain = loop.pack(budget, as_of=AS_OF)
    built = loop.pack(budget, as_of=AS_OF, target="anthropic")
    profile = get_profile("cl100k_base")
    opening = profile.message_tokens({"role": "user", "content": OPENING})
    assert "before_first_user" not in built.manifest.totals.by_reason
    assert len(built.ids) > 1
    assert built.ids == plain.ids or budget - plain.used_tokens < opening
    assert built.used_tokens == profile.request_tokens(built.messages) + opening
    assert built.used_tokens <= budget
    request = built.to_anthropic()
    assert request["messages"][0] == OPENING_MESSAGE
    assert request["messages"][1]["role"] == "assistant"
    validate_anthropic_messages(request)
