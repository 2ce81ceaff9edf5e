"""Conversation integrity in pack: whole turns (turns=True) and a user start (start_on="user")."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cognoxium import CognitionFrame
from cognoxium.exceptions import PackError
from cognoxium.formats.openai import from_openai_messages, to_openai_messages
from cognoxium.packing._checks import check_call
from cognoxium.packing._exclusions import find_exclusions
from cognoxium.packing._policies import review_policies
from cognoxium.packing._units import form_units
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.testing.strategies import chat_histories_strategy
from cognoxium.tokens.profiles import get_profile
from tests.packing.chats import chat
from tests.reach import reached, reaching

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
PROFILE = get_profile("cl100k_base")


def reasons(result: Any) -> dict[str, str]:
    return dict(result.manifest.to_polars().select("id", "reason").iter_rows())


def roles(result: Any) -> list[str]:
    return [m["role"] for m in result.messages]


LONG = "word " * 80  # about 80 tokens
HISTORY = chat(
    [
        ("sys", "system", "You are the support assistant. Be brief."),
        ("q1", "user", "What is the refund window?"),
        ("a1", "assistant", LONG),
        ("q2", "user", "And shipping?"),
        ("a2", "assistant", "Free over 50 EUR."),
    ]
)


def cost(df: pl.DataFrame, *ids: str) -> int:
    """What the rows ``ids`` cost as chat messages, in tokens (framing included)."""
    whole = pack(df, 10_000, PackOptions(as_of=AS_OF)).manifest.to_polars()
    return int(whole.filter(pl.col("id").is_in(ids)).get_column("tokens").sum())


def test_without_turns_pressure_gives_system_user_user() -> None:
    # The fault: the long reply between two questions goes, the model sees two user turns
    # (when older items fill the hole: gaps="fill").
    budget = PROFILE.tokens_per_pack + cost(HISTORY, "sys", "q1", "q2", "a2")
    result = pack(HISTORY, budget, PackOptions(as_of=AS_OF, gaps="fill"))
    assert result.ids == ["sys", "q1", "q2", "a2"]
    assert roles(result)[:3] == ["system", "user", "user"]


def test_whole_turns_never_leave_a_question_without_its_answer() -> None:
    budget = PROFILE.tokens_per_pack + cost(HISTORY, "sys", "q1", "q2", "a2")
    result = pack(HISTORY, budget, PackOptions(as_of=AS_OF, turns=True))
    assert result.ids == ["sys", "q2", "a2"]
    assert roles(result) == ["system", "user", "assistant"]
    why = reasons(result)
    assert why["q1"] == why["a1"] == "group_over_budget"
    assert why["sys"] == "required"
    assert result.used_tokens == budget - cost(HISTORY, "q1")
    assert result.used_tokens == PROFILE.request_tokens(result.messages)


def test_a_turn_that_fits_whole_is_packed_whole() -> None:
    budget = PROFILE.tokens_per_pack + cost(HISTORY, "sys", "q1", "a1", "q2", "a2")
    result = pack(HISTORY, budget, PackOptions(as_of=AS_OF, turns=True))
    assert result.ids == ["sys", "q1", "a1", "q2", "a2"]
    assert result.remaining_tokens == 0


def test_a_turn_takes_its_strongest_retention() -> None:
    df = HISTORY.with_columns(
        pl.when(pl.col("id") == "a1")
        .then(pl.lit("required"))
        .otherwise(pl.col("retention"))
        .cast(HISTORY.schema["retention"])
        .alias("retention")
    )
    budget = PROFILE.tokens_per_pack + cost(HISTORY, "sys", "q1", "a1")
    # Alone, the required reply goes in and the newest reply a2 takes the rest.
    assert pack(df, budget, PackOptions(as_of=AS_OF)).ids == ["sys", "a1", "a2"]
    # As a turn, the reply brings its question in with the required items.
    result = pack(df, budget, PackOptions(as_of=AS_OF, turns=True))
    assert result.ids == ["sys", "q1", "a1"]
    why = reasons(result)
    assert (why["q1"], why["a1"], why["q2"]) == ("selected", "required", "group_over_budget")


def test_a_turn_with_an_expired_reply_is_excluded_whole() -> None:
    df = HISTORY.with_columns(
        pl.when(pl.col("id") == "a2")
        .then(pl.lit(AS_OF - timedelta(days=1)))
        .otherwise(pl.col("expires_at"))
        .alias("expires_at")
    )
    result = pack(df, 10_000, PackOptions(as_of=AS_OF, turns=True))
    assert result.ids == ["sys", "q1", "a1"]
    why = reasons(result)
    assert (why["q2"], why["a2"]) == ("group_incomplete", "expired")


def test_turns_bind_tool_exchanges_and_leave_documents_alone() -> None:
    units = form_units(
        chat(
            [
                ("sys", "system", "s"),
                ("hi", "assistant", "hello"),
                ("q1", "user", "q"),
                ("call", "assistant", "c"),
                ("doc", "document", "d"),
                ("res", "tool", "r"),
                ("q2", "user", "q"),
                ("mem", "memory", "m"),
            ],
            group_id=[None, None, None, "t", None, "t", None, None],
        ),
        grouped=pl.Series([False, False, False, True, False, True, False, False]).to_numpy(),
        turns=True,
    )
    assert units.unit_of_row is not None
    assert units.unit_of_row.tolist() == [0, 1, 2, 2, 3, 2, 4, 5]


def test_a_group_spanning_two_turns_joins_them() -> None:
    messages = [("q1", "user", "a"), ("c", "assistant", "b"), ("q2", "user", "c")]
    df = chat(
        [*messages, ("r", "tool", "d"), ("a2", "assistant", "e")],
        group_id=[None, "g", None, "g", None],
    )
    grouped = pl.Series([False, True, False, True, False]).to_numpy()
    units = form_units(df, grouped, turns=True)
    assert units.unit_of_row is not None
    assert units.unit_of_row.tolist() == [0, 0, 0, 0, 0]


def agent_loop(steps: int, *, answered: bool) -> pl.DataFrame:
    """A chat whose last turn is a task and ``steps`` tool steps, answered or still running."""
    rows = [
        ("sys", "system", "You are an agent."),
        ("q0", "user", "Hi"),
        ("a0", "assistant", "Hi!"),
    ]
    rows.append(("task", "user", "Audit every host. " + LONG))
    groups: list[str | None] = [None] * len(rows)
    for i in range(steps):
        rows += [(f"call{i}", "assistant", f"ssh h{i}"), (f"res{i}", "tool", f"h{i}: " + LONG)]
        groups += [f"s{i}", f"s{i}"]
    if answered:
        rows.append(("done", "assistant", "Every host is fine."))
        groups.append(None)
    return chat(rows, group_id=groups)


def test_a_turn_still_in_progress_packs_its_task_and_newest_steps_with_whole_turns() -> None:
    loop = agent_loop(30, answered=False)
    units = form_units(loop, loop.get_column("group_id").is_not_null().to_numpy(), turns=True)
    assert units.unit_of_row is not None
    assert units.unit_of_row.tolist()[:4] == [0, 1, 1, 2]  # the earlier turn stays whole
    whole = pack(loop, 1000, PackOptions(as_of=AS_OF, turns=True))
    steps = pack(loop, 1000, PackOptions(as_of=AS_OF))
    assert whole.ids == steps.ids
    assert whole.ids[:4] == ["sys", "q0", "a0", "task"]
    assert whole.ids[-2:] == ["call29", "res29"]
    assert len(whole.ids) > 6


def test_an_answered_turn_is_still_packed_whole_or_not_at_all() -> None:
    loop = agent_loop(30, answered=True)
    result = pack(loop, 1000, PackOptions(as_of=AS_OF, turns=True))
    assert result.ids == ["sys"]
    assert reasons(result)["task"] == "group_over_budget"
    filled = pack(loop, 1000, PackOptions(as_of=AS_OF, turns=True, gaps="fill"))
    assert filled.ids == ["sys", "q0", "a0"]
    fits = pack(loop, 100_000, PackOptions(as_of=AS_OF, turns=True))
    assert fits.ids == loop.get_column("id").to_list()


@reaching(0.8, label="some turns packed, some dropped")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat_histories_strategy(max_turns=4, max_parallel_calls=2), st.data())
def test_whole_turns_pack_every_turn_whole_or_not_at_all(
    messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    assume(sum(m["role"] == "user" for m in messages) >= 2)  # a pack can hold part of them
    df = from_openai_messages(
        messages, conversation_id="c", system_retention="optional"
    ).to_polars()
    options = PackOptions(as_of=AS_OF, turns=True, start_on="user")
    # Unranked turns are taken newest first, after the system messages, up to the first
    # that does not fit: a budget that fits the system messages and the last turn and a
    # tenth to nine tenths of the others drops some turns.
    last_user = max(k for k, m in enumerate(messages) if m["role"] == "user")
    system = pl.col("role").cast(pl.String).is_in(["system", "developer"])
    tail = df.with_row_index().filter((pl.col("index") >= last_user) | system).drop("index")
    last = pack(tail, 1_000_000, options).used_tokens
    whole = pack(df, 1_000_000, options).used_tokens
    budget = last + (whole - last) * data.draw(st.integers(1, 9), label="tenths") // 10
    result = pack(df, budget, options)
    turn_of: list[int | None] = []
    turn = None
    for message in messages:
        turn = len(turn_of) if message["role"] == "user" else turn
        turn_of.append(turn if message["role"] in ("user", "assistant", "tool") else None)
    packed = {int(i.split(":")[1]) for i in result.ids}
    entries = result.manifest.to_polars().select("id", pl.col("reason").cast(pl.String))
    left_out = {int(i.split(":")[1]) for i, r in entries.iter_rows() if r.startswith("tool_")}
    for index, owner in enumerate(turn_of):
        # A turn's rows go together (but for the tool messages the APIs reject, left out),
        # and a turn opens with its user.
        if owner is not None and index not in left_out:
            assert (index in packed) == (owner in packed)
    sent = to_openai_messages(result)
    after_system = [m["role"] for m in sent if m["role"] not in ("system", "developer")]
    assert not after_system or after_system[0] == "user"
    assert result.used_tokens == (PROFILE.request_tokens(sent) if sent else 0)
    turns = {owner for owner in turn_of if owner is not None}
    if 0 < len(turns & packed) < len(turns):
        reached("some turns packed, some dropped")


def test_start_on_user_drops_a_leading_reply_and_refills() -> None:
    df = chat(
        [
            ("sys", "system", "Be brief."),
            ("hi", "assistant", "Hello! How can I help?"),
            ("q1", "user", "Refunds?"),
            ("a1", "assistant", "30 days."),
            ("q2", "user", "Shipping?"),
        ],
        rank=[None, 5.0, 1.0, 4.0, 3.0],
    )
    # Room for sys, hi, a1, q2 (by rank); q1 does not fit beside them.
    budget = PROFILE.tokens_per_pack + cost(df, "sys", "hi", "a1", "q2")
    plain = pack(df, budget, PackOptions(as_of=AS_OF))
    assert plain.ids == ["sys", "hi", "a1", "q2"]
    result = pack(df, budget, PackOptions(as_of=AS_OF, start_on="user"))
    # hi and a1 come before the first packed user message. The oldest goes first: with
    # hi gone, q1 fits, and a1 now answers it (before, both went: ["sys", "q1", "q2"]).
    assert result.ids == ["sys", "q1", "a1", "q2"]
    why = reasons(result)
    assert why["hi"] == "before_first_user"
    assert why["q1"] == why["a1"] == why["q2"] == "selected"
    assert result.manifest.totals.by_reason["before_first_user"] == 1
    assert result.used_tokens == PROFILE.request_tokens(result.messages)


def test_start_on_user_keeps_system_messages_and_takes_documents_as_user() -> None:
    df = chat(
        [
            ("sys", "system", "Be brief."),
            ("hi", "assistant", "Hello!"),
            ("dev", "developer", "Answer in French."),
            ("doc", "document", "Refunds: 30 days."),
            ("a", "assistant", "Noted."),
        ]
    )
    result = pack(df, 10_000, PackOptions(as_of=AS_OF, start_on="user"))
    assert result.ids == ["sys", "dev", "doc", "a"]
    assert roles(result) == ["system", "developer", "user", "assistant"]
    assert reasons(result)["hi"] == "before_first_user"


def test_start_on_user_without_any_user_message_keeps_the_system_block() -> None:
    df = chat([("sys", "system", "Be brief."), ("hi", "assistant", "Hello!")])
    result = pack(df, 10_000, PackOptions(as_of=AS_OF, start_on="user"))
    assert result.ids == ["sys"]
    assert reasons(result)["hi"] == "before_first_user"


def test_start_on_user_drops_a_leading_tool_exchange_whole() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": "Hi"},
    ]
    df = from_openai_messages(messages, conversation_id="c").to_polars()
    result = pack(df, 10_000, PackOptions(as_of=AS_OF, start_on="user"))
    assert result.ids == ["c:0", "c:3"]
    why = reasons(result)
    assert why["c:1"] == why["c:2"] == "before_first_user"


def test_start_on_user_refuses_to_drop_a_required_item() -> None:
    df = chat([("sys", "system", "Be brief."), ("hi", "assistant", "Hello!"), ("q", "user", "?")])
    df = df.with_columns(pl.lit("required").cast(df.schema["retention"]).alias("retention"))
    with pytest.raises(PackError, match=r"required items \['hi'\] come before the first user"):
        pack(df, 10_000, PackOptions(as_of=AS_OF, start_on="user"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"start_on": "human"}, "start_on must be None or one of \\['user'\\], got 'human'"),
        ({"turns": "yes"}, "turns must be True or False, got 'yes'"),
        ({"turns": 1}, "turns must be True or False, got 1"),
    ],
)
def test_bad_conversation_options_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(PackError, match=message):
        pack(HISTORY, 100, PackOptions(as_of=AS_OF, **options))


def test_options_enter_the_settings_fingerprint_only_when_set() -> None:
    base = pack(HISTORY, 200, PackOptions(as_of=AS_OF, turns=False, start_on=None))
    default = pack(HISTORY, 200, PackOptions(as_of=AS_OF))
    assert base.manifest.to_json() == default.manifest.to_json()
    prints = {
        pack(HISTORY, 200, PackOptions(as_of=AS_OF, **options)).manifest.fingerprints["settings"]
        for options in (
            {},
            {"turns": True},
            {"start_on": "user"},
            {"turns": True, "start_on": "user"},
        )
    }
    assert len(prints) == 4


def test_conversation_packs_are_byte_identical() -> None:
    budget = PROFILE.tokens_per_pack + cost(HISTORY, "sys", "q1", "q2", "a2")
    first = pack(HISTORY, budget, PackOptions(as_of=AS_OF, turns=True, start_on="user"))
    second = pack(HISTORY.clone(), budget, PackOptions(as_of=AS_OF, turns=True, start_on="user"))
    assert first.manifest.to_json() == second.manifest.to_json()


def test_the_checked_call_carries_the_options() -> None:
    call = check_call(10, PackOptions(as_of=AS_OF, turns=True, start_on="user"))
    assert (call.budget, call.as_of, call.options.turns, call.options.start_on) == (
        10,
        AS_OF,
        True,
        "user",
    )
    rows = find_exclusions(HISTORY, AS_OF, review_policies(HISTORY, None))
    assert form_units(HISTORY, rows.grouped).unit_of_row is None  # no turns: one row, one unit


def test_start_on_user_reselects_within_the_reply_reserve() -> None:
    df = chat(
        [
            ("sys", "system", "Be brief."),
            ("hi", "assistant", "Hello! How can I help?"),
            ("q1", "user", "Refunds?"),
            ("a1", "assistant", "30 days."),
            ("q2", "user", "Shipping?"),
        ],
        rank=[None, 5.0, 1.0, 4.0, 3.0],
    )
    budget = PROFILE.tokens_per_pack + cost(df, "sys", "hi", "a1", "q2")
    result = pack(df, budget + 25, PackOptions(as_of=AS_OF, reserve=25, start_on="user"))
    assert result.ids == ["sys", "q1", "a1", "q2"]  # as without a reserve, in budget - reserve
    assert result.used_tokens + 25 + result.remaining_tokens == budget + 25
    assert result.used_tokens == PROFILE.request_tokens(result.messages)


def test_a_truncatable_reply_is_cut_inside_its_turn() -> None:
    df = HISTORY.with_columns(
        pl.when(pl.col("id") == "a1")
        .then(pl.lit('{"truncate":{"side":"head","min_tokens":5}}'))
        .otherwise(pl.col("metadata"))
        .alias("metadata")
    )
    budget = PROFILE.tokens_per_pack + cost(HISTORY, "sys", "q1", "q2", "a2") + 20
    result = pack(df, budget, PackOptions(as_of=AS_OF, turns=True))
    assert result.ids == ["sys", "q1", "a1", "q2", "a2"]  # the reply is cut, not its question
    (cut,) = result.manifest.truncations
    assert (cut.id, cut.side) == ("a1", "head")
    assert cut.kept_tokens < cut.original_tokens
    assert result.used_tokens == budget
    assert result.used_tokens == PROFILE.request_tokens(result.messages)


@pytest.mark.parametrize("start", [{"start_on": "user"}, {"target": "anthropic"}])
def test_the_oldest_steps_make_room_for_the_task(start: dict[str, str]) -> None:
    # The three steps fill the budget and the task does not fit beside them. Before,
    # the start rule dropped all three (before_first_user) and sent 18 of 404 tokens.
    def step(i: int, words: int) -> list[dict[str, Any]]:
        call = {"id": f"t{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"t{i}", "content": "word " * words},
        ]

    task = [{"role": "system", "content": "Agent."}, {"role": "user", "content": "Fix the bug"}]
    loop = from_openai_messages(task + step(0, 100) + step(1, 100) + step(2, 150))
    result = loop.pack(404, as_of=AS_OF, **start)
    assert result.ids == ["msg:0", "msg:1", "msg:4", "msg:5", "msg:6", "msg:7"]
    # With no start rule too: it sent the three steps without the task.
    assert loop.pack(404, as_of=AS_OF).ids == result.ids
    why = reasons(result)
    assert why["msg:2"] == why["msg:3"] == "gap"  # the oldest step, for the task
    assert [(g.first, g.last) for g in result.manifest.gap_records] == [(2, 3)]
    assert result.used_tokens == PROFILE.request_tokens(result.messages)


@pytest.mark.parametrize("start", [{}, {"start_on": "user"}])
def test_as_few_replies_as_let_the_question_in_when_all_of_them_are_not_needed(
    start: dict[str, str],
) -> None:
    # Four replies fill the budget and the question does not fit beside them. Dropping
    # the oldest three lets it in; before, the search for how many went from two to all
    # four, and the newest reply (45 tokens, with 85 left) was sent with none.
    chat = from_openai_messages(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "word " * 200},
            {"role": "assistant", "content": "ok"},
            {"role": "assistant", "content": "fine"},
            {"role": "assistant", "content": "word " * 200},
            {"role": "assistant", "content": "word " * 40},
        ]
    )
    result = chat.pack(300, as_of=AS_OF, **start)
    # The two short replies dropped for the question come back into what is left.
    assert result.ids == ["msg:0", "msg:1", "msg:2", "msg:3", "msg:5"]
    assert reasons(result)["msg:4"] == "gap"
    assert result.used_tokens == PROFILE.request_tokens(result.messages)


def _agent_loop() -> CognitionFrame:
    """A task, a short step, a step with a long result, and a newer short step."""
    task = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Find the refund policy. " + "word " * 150},
    ]
    return from_openai_messages(task + _loop_step(1, 2) + _loop_step(2, 200) + _loop_step(3, 30))


@pytest.mark.parametrize("gaps", ["stop", "fill"])
def test_a_larger_budget_never_keeps_fewer_steps_of_an_agent_loop(gaps: str) -> None:
    # Before, at 300 tokens and more the oldest step was dropped for the task and
    # stayed out (4 items to 440 tokens), where 260 tokens kept it (6 items); with
    # gaps="fill" the task was left out from 300 to 460 tokens.
    loop = _agent_loop()
    packs = [loop.pack(budget, as_of=AS_OF, gaps=gaps) for budget in range(200, 520, 20)]
    assert all("msg:1" in p.ids for p in packs)  # the task
    sizes = [len(p.ids) for p in packs]
    assert sizes == sorted(sizes)
    at_300 = packs[5]
    assert at_300.ids == ["msg:0", "msg:1", "msg:2", "msg:3", "msg:6", "msg:7"]
    assert reasons(at_300)["msg:4"] == reasons(at_300)["msg:5"] == "gap"


@pytest.mark.parametrize("gaps", ["stop", "fill"])
def test_a_long_last_reply_marked_truncatable_is_cut_beside_its_question(gaps: str) -> None:
    # Before: cut to take the whole budget, it was then dropped for the question (stop),
    # or sent alone without it (fill).
    when = "2024-01-01T00:00:00Z"
    chat = CognitionFrame(
        [
            {"id": "s", "role": "system", "text": "Be brief.", "retention": "required",
             "created_at": when},
            {"id": "u", "role": "user", "text": "Summarise the log", "created_at": when},
            {"id": "a", "role": "assistant", "text": "word " * 500, "created_at": when,
             "metadata": {"truncate": {"side": "tail", "min_tokens": 10}}},
        ]
    )  # fmt: skip
    result = chat.pack(100, as_of=AS_OF, gaps=gaps)
    assert result.ids == ["s", "u", "a"]
    (cut,) = result.manifest.truncations
    assert (cut.id, cut.original_tokens) == ("a", int(PROFILE.count(["word " * 500])[0]))
    assert result.used_tokens == 100 == PROFILE.request_tokens(result.messages)


def _loop_step(i: int, words: int) -> list[dict[str, Any]]:
    call = {"id": f"t{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"t{i}", "content": "word " * words},
    ]


def test_with_no_settings_steps_are_kept_when_the_task_cannot_fit() -> None:
    # No number of dropped steps lets the 600-word task in: the steps go as selected,
    # where a user start sends the system prompt alone.
    messages = [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": "Fix the bug " + "word " * 600},
        *_loop_step(0, 50),
        *_loop_step(1, 50),
    ]
    loop = from_openai_messages(messages)
    assert loop.pack(300, as_of=AS_OF).ids == ["msg:0", "msg:2", "msg:3", "msg:4", "msg:5"]
    assert loop.pack(300, as_of=AS_OF, start_on="user").ids == ["msg:0"]


def test_with_no_settings_a_pack_that_sends_a_user_message_keeps_its_replies() -> None:
    # q1 does not fit beside the newer messages; a1 before q2 is kept (no start rule).
    chat = from_openai_messages(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "q1 " + "word " * 60},
            {"role": "assistant", "content": "a1 " + "word " * 30},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "a2"},
        ]
    )
    assert chat.pack(80, as_of=AS_OF).ids == ["msg:0", "msg:2", "msg:3", "msg:4"]
    assert chat.pack(80, as_of=AS_OF, start_on="user").ids == ["msg:0", "msg:3", "msg:4"]


def test_with_no_settings_a_reply_taken_by_its_priority_is_not_dropped_for_a_question() -> None:
    # a0 comes first by its priority, older than the question q1; only one of them
    # fits. Before, the default's reach for a user message dropped a0 as "the oldest"
    # and sent q1: the caller's order gave way to a rule meant for a tail of steps.
    rows = [
        ("s0", "system", "Be brief."),
        ("a0", "assistant", "The refund window is 30 days."),
        ("q1", "user", "And the fee?"),
    ]
    whole = pack(chat(rows), 10_000, PackOptions(as_of=AS_OF))
    tokens = dict(whole.manifest.to_polars().select("id", "tokens").iter_rows())
    budget = whole.used_tokens - tokens["q1"]  # s0 and a0 fit, not q1 beside them
    chosen = pack(chat(rows, priority=[0, 1, 0]), budget, PackOptions(as_of=AS_OF))
    assert chosen.ids == ["s0", "a0"]
    newest = pack(chat(rows), budget, PackOptions(as_of=AS_OF))
    assert newest.ids == ["s0", "q1"]  # without priorities, the newest comes first


def test_a_selection_kept_as_it_was_keeps_its_own_cuts() -> None:
    # Dropping a0 lets no user message in, so the first selection is kept; the cuts
    # were those of the last one tried (a0 left out), and the pack went over its budget.
    words = {"sys": 80, "u0": 60, "a0": 30}
    roles = {"sys": "system", "u0": "user", "a0": "assistant"}
    frame = CognitionFrame(
        [
            {
                "id": key,
                "role": roles[key],
                "text": " ".join(f"w{k}" for k in range(n)),
                "retention": "preferred" if key == "sys" else "optional",
                "metadata": {"truncate": {"side": "head", "min_tokens": 1}} if key == "a0" else {},
                "created_at": datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=at),
            }
            for at, (key, n) in enumerate(words.items())
        ]
    )
    result = frame.pack(20, as_of=AS_OF, overflow="truncate")
    assert result.ids == ["a0"]
    assert result.used_tokens == 20 == PROFILE.request_tokens(result.messages)
    assert [(t.id, t.kept_tokens, t.original_tokens) for t in result.manifest.truncations] == [
        ("a0", 13, 60)
    ]


@pytest.mark.parametrize("gaps", ["stop", "fill"])
def test_an_agent_loop_keeps_its_task_and_its_newest_step_cut_at_every_larger_budget(
    gaps: str,
) -> None:
    # An earlier exchange, a task, two short steps and a newest step whose 3,000-word log
    # is marked truncatable. Before, 150 tokens sent an older step in its place, and with
    # gaps="fill" 120 tokens sent the steps under the earlier question, not the task.
    log = {"role": "tool", "tool_call_id": "t2", "content": "line " * 3000}
    history = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Earlier question about billing?"},
        {"role": "assistant", "content": "Earlier answer about billing."},
        {"role": "user", "content": "TASK: find the failing test in the repo and explain it."},
        *_loop_step(0, 0),
        *_loop_step(1, 20),
        _loop_step(2, 0)[0],
        log,
    ]
    frame = from_openai_messages(history).to_polars()
    truncatable = json.dumps({"tool_call_id": "t2", "truncate": {"side": "tail", "min_tokens": 10}})
    frame = frame.with_columns(
        metadata=pl.when(pl.col("id") == "msg:9").then(pl.lit(truncatable)).otherwise("metadata")
    )
    loop = CognitionFrame(frame)
    kept = []
    for budget in range(90, 710, 20):
        result = loop.pack(budget, as_of=AS_OF, gaps=gaps)
        assert {"msg:3", "msg:8", "msg:9"} <= set(result.ids), budget  # task and newest step
        (cut,) = result.manifest.truncations
        kept.append(cut.kept_tokens)
        assert result.used_tokens == budget == PROFILE.request_tokens(result.messages)
    assert kept == sorted(kept)  # more budget, more of the log


@pytest.mark.parametrize("option", [{"start_on": "user"}, {"target": "anthropic"}])
def test_with_gaps_stop_the_start_on_a_user_message_leaves_the_tail_unbroken(
    option: dict[str, str],
) -> None:
    # The tail from the newest is a1, q2, a2, q3 (q1 does not fit). Starting on a user
    # message drops a1; q1 then fits in its room, and before, it was taken: q1, then a
    # hole where its reply was, then q2. trim_messages(start_on="human") sends q2 on.
    df = chat(
        [
            ("sys", "system", "Be brief."),
            ("q1", "user", "word " * 60),
            ("a1", "assistant", "word " * 70),
            ("q2", "user", "And shipping?"),
            ("a2", "assistant", "Free over 50 EUR."),
            ("q3", "user", "Thanks."),
        ]
    )
    room = cost(df, "sys", "a1", "q2", "a2", "q3") + PROFILE.tokens_per_pack
    assert cost(df, "q1") > 10
    assert cost(df, "q1") <= cost(df, "a1") + 10
    result = pack(df, room + 10, PackOptions(as_of=AS_OF, **option))  # type: ignore[arg-type]
    assert result.ids == ["sys", "q2", "a2", "q3"]
    assert {k: reasons(result)[k] for k in ("q1", "a1")} == {
        "q1": "over_budget",  # the miss that ended the tail
        "a1": "before_first_user",
    }
    # gaps="fill" fills the room with older messages and marks the hole
    filled = pack(df, room + 10, PackOptions(as_of=AS_OF, gaps="fill", **option))  # type: ignore[arg-type]
    assert filled.ids == ["sys", "q1", "q2", "a2", "q3"]
    assert reasons(filled)["a1"] == "gap"


@pytest.mark.parametrize("option", [{"start_on": "user"}, {"target": "anthropic"}])
def test_with_gaps_fill_the_start_on_a_user_message_keeps_the_tail_and_fills_older(
    option: dict[str, str],
) -> None:
    # Before: the refill meant for an agent loop's task took the older questions first, and
    # at 460 tokens the pack sent six questions and none of the replies (u3 u5 u7 u9 u11 u13).
    words = [10, 17, 90, 12, 90, 12, 18, 45, 90, 90, 18, 12, 90]
    history = [{"role": "system", "content": "Support agent."}] + [
        {"role": ("user", "assistant")[k % 2], "content": f"{'ua'[k % 2]}{k + 1} " + "word " * n}
        for k, n in enumerate(words)
    ]
    frame = from_openai_messages(history)
    for budget in (440, 460, 500, 600):
        packed = frame.pack(budget, as_of=AS_OF, gaps="fill", **option)  # type: ignore[arg-type]
        assert {"msg:8", "msg:10", "msg:12", "msg:13"} <= set(packed.ids), budget  # the tail
        assert roles(packed)[:2] == ["system", "user"]
        left = {k: v for k, v in reasons(packed).items() if k not in packed.ids}
        assert set(left.values()) == {"gap"}, (budget, left)
