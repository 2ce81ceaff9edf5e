"""Agent loops (a task, then tool steps) packed under a budget, fresh and continued.

For random loops (parallel calls, results from a few words to thousands,
a pending call at the end) and budgets, each pack, fresh and continuing the
pack of the step before:

- renders as the chat APIs accept, within the budget;
- is deterministic (the same manifest bytes when packed again);
- with no settings, or a start on a user message (``start_on="user"``,
  the Anthropic target), keeps the task whenever the system prompt and the
  task fit, and the newest step too whenever the three fit together;
- keeps the newest step with the task whenever its results end the history
  (awaited) and fit cut to 64 tokens each, and cuts no other item;
- continued with nothing new, sends what it sent.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cognoxium.formats.openai import from_openai_messages
from cognoxium.packing.message_rules import validate_anthropic_messages, validate_openai_messages
from cognoxium.packing.packer import ContextPack
from cognoxium.tokens.profiles import get_profile

AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
PROFILE = get_profile("cl100k_base")
SIZES = [1, 5, 40, 150, 600, 2500]  # words of a tool result
START = [{"start_on": "user"}, {"target": "anthropic"}]


def _step(i: int, results: list[int]) -> list[dict[str, Any]]:
    """One step: an assistant message calling ``len(results)`` tools, then their results."""
    calls = [
        {"id": f"c{i}_{k}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        for k in range(len(results))
    ]
    step: list[dict[str, Any]] = [{"role": "assistant", "content": None, "tool_calls": calls}]
    for call, words in zip(calls, results, strict=True):
        step.append({"role": "tool", "tool_call_id": call["id"], "content": "log " * words})
    return step


loops = st.tuples(
    st.integers(1, 80),  # words of the task
    st.lists(st.lists(st.sampled_from(SIZES), min_size=1, max_size=2), min_size=1, max_size=6),
    st.booleans(),  # a pending call at the end
    st.sampled_from([{}, *START]),
    st.sampled_from([150, 400, 1000, 3000]),
)


def _cost(messages: list[dict[str, Any]]) -> int:
    return PROFILE.tokens_per_pack + sum(PROFILE.message_tokens(m) for m in messages)


def _check(packed: ContextPack, history: list[dict[str, Any]], budget: int, options: dict) -> None:
    """Valid within the budget; the task kept when it fits, and the newest step with it."""
    assert packed.used_tokens <= budget
    validate_openai_messages(packed.to_openai())
    if options.get("target") == "anthropic":
        validate_anthropic_messages(packed.to_anthropic())
    task, newest = history[:2], _newest_step(history)
    if _cost(task) <= budget:
        assert "msg:1" in packed.ids, (budget, packed.ids)
    if newest and _cost(task + [history[i] for i in newest]) <= budget:
        assert {f"msg:{i}" for i in newest} <= set(packed.ids), (budget, packed.ids)


def _check_awaited(
    packed: ContextPack,
    history: list[dict[str, Any]],
    budget: int,
    previous: ContextPack | None,
) -> None:
    """The awaited results, cut to 64 tokens if need be, are sent with their call and task.

    No other item is cut, but for those ``previous`` (the pack continued) cut.
    """
    newest = _newest_step(history)
    call, results = history[newest[0]], [history[i] for i in newest[1:]]
    shortest = [_shortest(m) for m in results]
    cut = {t.id for t in packed.manifest.truncations}
    earlier = set() if previous is None else {t.id for t in previous.manifest.truncations}
    assert cut <= {f"msg:{i}" for i in newest[1:]} | earlier, cut
    if _cost([*history[:2], call]) + sum(shortest) <= budget:
        assert {"msg:1", *(f"msg:{i}" for i in newest)} <= set(packed.ids), (budget, packed.ids)


def _check_replayed(packed: ContextPack, previous: ContextPack) -> None:
    """What the earlier pack sent cut is sent cut again, no longer, or left out for room.

    Evicted for the cache, or left out (a unit after the kept prefix is selected as
    usual) only when the room left would not hold its earlier cut: before, a result cut
    without a mark was left out as a gap with its room to spare.
    """
    entries, sent = packed.manifest.to_polars(), previous.manifest.to_polars()
    kept = {t.id: t.kept_tokens for t in packed.manifest.truncations}
    for earlier in previous.manifest.truncations:
        entry = entries.row(by_predicate=pl.col("id") == earlier.id, named=True)
        if entry["decision"] == "included":
            assert earlier.id in packed.manifest.cache.replayed_cuts, entry
            assert kept[earlier.id] <= earlier.kept_tokens, (kept, earlier)
        elif entry["reason"] != "evicted_for_cache":  # its group as sent then did not fit
            unit = pl.col("id") == earlier.id
            if entry["group_id"] is not None:
                unit = pl.col("group_id") == entry["group_id"]
            group = sent.filter(unit & (pl.col("decision") == "included"))
            assert packed.remaining_tokens < group.get_column("tokens").sum(), entry


def _shortest(result: dict[str, Any]) -> int:
    """What an awaited result costs at most cut to 64 tokens, with its note of the tokens cut.

    Whole when that costs less. The note's tokens are counted alone, plus one for a
    token the cut text and the note's line break may share: an upper bound.
    """
    whole = PROFILE.message_tokens(result)
    text = len(PROFILE.encoding.encode_ordinary(result["content"]))
    note = len(PROFILE.encoding.encode_ordinary(f"\n[{text - 64} tokens cut]"))
    return min(whole, PROFILE.message_tokens({**result, "content": ""}) + 64 + note + 1)


def _newest_step(history: list[dict[str, Any]]) -> list[int]:
    """The places of the newest answered step's messages (a call and its results)."""
    calls = [i for i, m in enumerate(history) if m.get("tool_calls")]
    for at in reversed(calls):
        answered = {m.get("tool_call_id") for m in history[at + 1 :]}
        if {c["id"] for c in history[at]["tool_calls"]} <= answered:
            return [at, *range(at + 1, at + 1 + len(history[at]["tool_calls"]))]
    return []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loop=loops)
# Found by this test: dropping the oldest steps let a step passed over before come back
# and take the task's room, so the newest step went too (["msg:0", "msg:1", "msg:4",
# "msg:5", "msg:6"] where the task, steps 3 and 4 fit).
@example(loop=(50, [[1], [1, 1], [40], [40, 40], [150, 600]], False, START[0], 1000))
@example(loop=(26, [[5, 150]], False, {}, 150))  # the note counted in the 64-token floor
# A step passed over after an eviction ended the tail before an older replayed cut.
@example(loop=(1, [[600], [600], [150], [40, 150]], False, {}, 400))
def test_agent_loops_pack_valid_deterministic_and_keep_their_task(loop: tuple) -> None:
    task_words, steps, pending, options, budget = loop
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "task " * task_words},
    ]
    previous = None
    for i, results in enumerate(steps):
        history += _step(i, results)
        sent = history + (_step(len(steps), [1])[:1] if pending else [])
        frame = from_openai_messages(sent)
        fresh = frame.pack(budget, as_of=AS_OF, **options)
        continued = frame.pack(budget, as_of=AS_OF, previous=previous, **options)
        for packed in (fresh, continued):
            _check(packed, history, budget, options)
            if not pending:
                _check_awaited(packed, history, budget, previous if packed is continued else None)
        if previous is not None:
            _check_replayed(continued, previous)
        again = frame.pack(budget, as_of=AS_OF, previous=previous, **options)
        assert again.manifest.to_json() == continued.manifest.to_json()
        if previous is not None:
            same = frame.pack(budget, as_of=AS_OF, previous=continued, **options)
            assert same.ids == continued.ids
        previous = continued
