"""The pack invariants on every pack path, over generated conversations.

One property draws a conversation (a system block, then user, assistant,
tool, document, memory and developer items with text, JSON, image and
non-packable payloads, groups, truncation marks, expiry, trust and
sensitivity), a query over it (as it is, ranked, filtered and sorted,
demoted, quarantined) and the pack's options (both OpenAI encodings,
reserve, whole turns, ``start_on="user"``, a boundary policy, truncation of
required items, both ``tool_errors`` modes, both targets, both ``gaps``
modes), and checks what every pack must hold:

- the items fit in ``budget - reserve``, and ``used_tokens`` is what the
  sent messages cost;
- a required item is packed unless it is not valid at ``as_of`` or not
  packable;
- groups, and with ``turns`` whole turns, are packed or dropped whole;
- the pack keeps the rows' order, and every row has one manifest entry;
- reason ``before_tail`` only with ``gaps="stop"``, on conversation items
  left out after a conversation item that did not fit;
- ``start_on="user"`` (and the Anthropic target) and the boundary policy hold;
- the sent messages keep the OpenAI tool rules and render as a valid
  Anthropic request (:mod:`cognoxium.packing.message_rules`);
- the same call gives a byte-identical manifest, again and over a new frame;
- continued over the same rows (``previous=``), a pack evicts nothing, holds
  the budget, the start rule and the chat rules, makes the same decisions and
  sends the earlier pack's history first, byte for byte (unless, under a
  start rule, a reply would now open the history: it is dropped; with
  ``gap_note`` the continuation is refused);
- :meth:`CognitionFrame.pack` equals :func:`pack` over the rows the plan
  gives with no optimizer rule (``OptFlags.none()``).

The drawn budgets leave room for the required items, so at least 80% of the
examples pack (``@reaching``); a refused pack must be refused alike on both
paths, with the same error type and message.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from cognoxium import CognitionFrame
from cognoxium.exceptions import BudgetError, MessageError, PackError, PolicyError
from cognoxium.frame.frame import OptFlags
from cognoxium.governance.policies import BoundaryPolicy, Policy
from cognoxium.items.images import data_url_size, is_data_url
from cognoxium.packing._renderers import OPENING, RANKED_ROLES
from cognoxium.packing.message_rules import validate_anthropic_messages, validate_openai_messages
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, pack
from cognoxium.testing import assert_pack_equal
from cognoxium.tokens.images import CLAUDE_IMAGES
from cognoxium.tokens.profiles import TokenProfile, clear_cache
from tests.image_files import gif, jpeg, png
from tests.reach import reached, reaching

T0 = datetime(2024, 1, 1, tzinfo=UTC)
AS_OF = T0 + timedelta(days=30)
WORDS = (
    "refund",
    "window",
    "is",
    "30",
    "days",
    "朗琴",
    "👍🏽",
    "{json}",
    "\n",
    "ok.",
    "naïve",
    " \t",
)
IMAGES = {"image/png": png, "image/jpeg": jpeg, "image/gif": gif}
IMAGE_ROLES = ("user", "document", "memory")
BODY_ROLES = ("user", "user", "assistant", "assistant", "tool", "document", "memory", "developer")
SYSTEM_ROLES = ("system", "developer")

UNPACKED_REASONS = {"expired", "not_yet_valid", "not_packable"}
"""Why a required item may be left out of a pack that succeeds: never budget, policy or order."""


def _text(draw: st.DrawFn, low: int, high: int) -> str:
    """Text of ``low`` to ``high`` words, the number drawn first (lists would stay short)."""
    n = draw(st.integers(low, high))
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n)))


@st.composite
def _payload(draw: st.DrawFn, i: int, role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A payload and the metadata it needs: text, JSON, an image (bytes or URL), or binary.

    Images go to the roles sent as user messages, the only ones the Chat
    Completions API takes them in.
    """
    kinds = ["text"] * 8 + ["json", "binary"]
    if role in IMAGE_ROLES:
        kinds += ["image", "image", "image_url", "image_url"]
    kind = draw(st.sampled_from(kinds))
    if kind == "text":
        return {"kind": "text", "text": _text(draw, 2, 40)}, {}
    if kind == "json":
        return {"kind": "json", "value": {"words": _text(draw, 0, 6).split()}}, {}
    side = draw(st.sampled_from([16, 64, 200, 600]))
    detail = draw(st.sampled_from(["low", "low", "low", "high", "auto"]))
    if kind == "image":
        media = draw(st.sampled_from(sorted(IMAGES)))
        data = IMAGES[media](side, side * 2)
        return {"kind": "binary", "data": data}, {"media_type": media, "detail": detail}
    if kind == "image_url":
        uri = f"https://img.example.org/{i}.png"
        reference = {"kind": "reference", "uri": uri, "title": _text(draw, 0, 3) or None}
        return reference, {"width": side, "height": side * 2, "detail": detail}
    return {"kind": "binary", "data": b"\x00\x01"}, {}


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Records of one conversation: a system block, then 1 to 12 items of any chat role.

    Required items are trusted, public, ungrouped text: system items, or a
    user message now and then, so that their packing is decided by the
    budget and the options, not refused for being unpackable.
    """
    records: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 2))):
        system = {
            "id": f"s{i}",
            "role": "system",
            "text": _text(draw, 1, 8),
            "retention": draw(st.sampled_from(["required", "required", "preferred"])),
            "trust": "trusted",
            "created_at": T0,
        }
        if draw(st.integers(0, 3)) == 0:
            # Long and truncatable: overflow="truncate" cuts it when the required items
            # do not fit; overflow="error" refuses the pack.
            system["text"] += " " + _text(draw, 10, 30)
            system["metadata"] = {"truncate": {"side": "tail", "min_tokens": 4}}
        records.append(system)
    for i in range(draw(st.integers(2, 12))):
        role = draw(st.sampled_from(BODY_ROLES))
        payload, metadata = draw(_payload(i, role))
        required = role == "user" and payload["kind"] == "text" and draw(st.integers(0, 9)) == 0
        if required:
            payload["text"] = _text(draw, 1, 8)
        # Images (85 tokens and more): mostly preferred, public, ungrouped and valid, so
        # that many are sent.
        image = bool(metadata) and payload["kind"] != "text"
        retentions = ["preferred"] * 3 + ["optional"] if image else ["preferred"] + ["optional"] * 2
        levels = (
            ["public"] * 3 + ["internal"] * 2 + ([] if image else ["confidential", "restricted"])
        )
        record: dict[str, Any] = {
            "id": f"m{i:02d}",
            "role": role,
            "payload": payload,
            "retention": "required" if required else draw(st.sampled_from(retentions)),
            "priority": draw(st.integers(0, 2)),
            "rank": draw(st.sampled_from([None, None, 0.5, 1.0, 2.0])),
            "created_at": T0 + timedelta(minutes=i),
        }
        if required:
            record |= {"trust": "trusted", "sensitivity": "public"}
        else:
            record["trust"] = draw(st.sampled_from(["trusted", "untrusted"]))
            record["sensitivity"] = draw(st.sampled_from(levels))
            record["group_id"] = None if image else draw(st.sampled_from([None] * 3 + ["g1", "g2"]))
            when = "now" if image else draw(st.sampled_from(["now"] * 6 + ["expired", "later"]))
            if when == "expired":
                record["expires_at"] = AS_OF - timedelta(days=1)
            elif when == "later":
                record["valid_from"] = AS_OF + timedelta(days=1)
        if payload["kind"] == "text" and role in {"document", "memory"}:
            # A long text, marked truncatable: cut to fit when it does not fit whole.
            payload["text"] += " " + _text(draw, 20, 60)
            side = draw(st.sampled_from(["head", "tail"]))
            metadata["truncate"] = {"side": side, "min_tokens": draw(st.integers(1, 6))}
        if metadata:
            record["metadata"] = metadata
        records.append(record)
    return records


QUERIES = ("as_is", "bm25", "recency", "filter_sort", "demote", "quarantine")


def _query(cf: CognitionFrame, name: str) -> CognitionFrame:
    if name == "bm25":
        return cf.rank("bm25", query="refund window days")
    if name == "recency":
        return cf.rank("recency")
    if name == "filter_sort":
        return cf.filter(pl.col("priority") >= 0).sort("priority", descending=True)
    if name == "demote":
        return cf.demote(pl.col("role") == "memory", retention="optional", priority_delta=-1)
    if name == "quarantine":
        held = (pl.col("retention") != "required") & (pl.col("priority") == 0)
        return cf.quarantine(held, reason="priority 0")
    return cf


POLICIES: dict[str, Policy | None] = {
    "none": None,
    "boundary": BoundaryPolicy(),
    "boundary_as_user": BoundaryPolicy(untrusted_privileged="render_as_user"),
}


@st.composite
def pack_calls(draw: st.DrawFn) -> dict[str, Any]:
    """The options of a pack, its budget, query and policy.

    The budget is the reserve plus 90 to 800 tokens, half the time at most 250,
    which most conversations exceed: the budget and the reserve bind. The
    required items (at most two system texts and a user message) mostly fit.
    """
    reserve = draw(st.sampled_from([0, 1, 8, 64]) | st.integers(0, 100))
    space = draw(st.integers(90, 250) | st.integers(250, 800))
    return {
        "reserve": reserve,
        "budget": reserve + space,
        "profile": draw(st.sampled_from(["cl100k_base", "o200k_base"])),
        "turns": draw(st.booleans()),
        "start_on": draw(st.sampled_from([None, "user"])),
        "overflow": draw(st.sampled_from(["error", "truncate"])),
        "policy": draw(st.sampled_from(sorted(POLICIES))),
        "query": draw(st.sampled_from(QUERIES)),
        "tool_errors": draw(st.sampled_from(["repair", "repair", "repair", "error"])),
        "target": draw(st.sampled_from(["openai", "anthropic"])),
        "gaps": draw(st.sampled_from(["stop", "fill"])),
        "gap_note": draw(st.sampled_from([None, "({n} earlier messages omitted)"])),
        "eviction_share": draw(st.sampled_from([0.25, 0.4, 1.0])),
    }


def _units(rows: pl.DataFrame, turns: bool) -> list[list[str]]:
    """The rows packed or dropped together: groups and, with ``turns``, whole turns, joined.

    The last turn is not bound while in progress: its last message a tool result.
    """
    ids = rows.get_column("id").to_list()
    parent = {i: i for i in ids}
    spoken = rows.filter(pl.col("role").cast(pl.String).is_in(["user", "assistant", "tool"]))
    users = spoken.filter(pl.col("role").cast(pl.String) == "user").get_column("id")
    running = users[-1] if spoken.height and users.len() and spoken["role"][-1] == "tool" else None

    def find(i: str) -> str:
        while parent[i] != i:
            i = parent[i]
        return i

    def join(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    first_of_group: dict[str, str] = {}
    opened_by: str | None = None
    for row in rows.select("id", "role", "group_id").iter_rows(named=True):
        if row["group_id"] is not None:
            join(row["id"], first_of_group.setdefault(row["group_id"], row["id"]))
        if row["role"] == "user":
            opened_by = row["id"]
        elif turns and opened_by not in (None, running) and row["role"] in {"assistant", "tool"}:
            join(row["id"], opened_by)
    units: dict[str, list[str]] = {}
    for i in ids:
        units.setdefault(find(i), []).append(i)
    return list(units.values())


def _image_sizes(rows: pl.DataFrame) -> dict[str, tuple[int, int]]:
    sizes = {}
    for row in rows.filter(pl.col("payload_kind") == "reference").iter_rows(named=True):
        metadata = json.loads(row["metadata"])
        if "width" in metadata:
            sizes[row["ref_uri"]] = (metadata["width"], metadata["height"])
    return sizes


def _exclusion(row: dict[str, Any], boundary: bool) -> str | None:
    """The reason a row can never be packed, the first of those that apply, or None.

    In order: not packable (binary but not an image), quarantined, excluded by
    the boundary policy (sensitivity above internal), expired at ``as_of``,
    not yet valid at ``as_of``.
    """
    metadata = json.loads(row["metadata"])
    if row["payload_kind"] == "binary" and "media_type" not in metadata:
        return "not_packable"
    if row.get("quarantine_reason") is not None:
        return "quarantined"
    if boundary and row["sensitivity"] in {"confidential", "restricted"}:
        return "policy"
    if row["expires_at"] is not None and row["expires_at"] <= AS_OF:
        return "expired"
    if row["valid_from"] is not None and row["valid_from"] > AS_OF:
        return "not_yet_valid"
    return None


def _pack_or_error(run: Any) -> ContextPack | PackError | MessageError:
    try:
        result: ContextPack = run()
    except (BudgetError, PolicyError, PackError, MessageError) as error:
        return error
    return result


def _claude_image_delta(
    messages: list[dict[str, Any]], profile: TokenProfile, sizes: dict[str, tuple[int, int]]
) -> int:
    """What the messages' images cost by Anthropic's rule less what they cost by the profile's."""
    delta = 0
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if part.get("type") != "image_url":
                continue
            url, detail = part["image_url"]["url"], part["image_url"].get("detail", "auto")
            size = data_url_size(url) if is_data_url(url) else sizes.get(url)
            delta += CLAUDE_IMAGES.tokens(detail, size) - profile.image_rule.tokens(detail, size)
    return delta


def _check_invariants(
    result: ContextPack, rows: pl.DataFrame, call: dict[str, Any], options: PackOptions
) -> None:
    budget, reserve = call["budget"], call["reserve"]
    entries = result.manifest.to_polars()
    decisions = dict(zip(entries["id"], entries["decision"].cast(pl.String), strict=True))
    reasons = dict(zip(entries["id"], entries["reason"].cast(pl.String), strict=True))
    # Budget with reserve: the items fit in budget - reserve, and cost what they send.
    assert result.used_tokens + reserve <= budget
    assert result.remaining_tokens == budget - reserve - result.used_tokens
    assert result.manifest.reserve_tokens == reserve
    included = entries.filter(pl.col("decision") == "included")
    overhead = result.manifest.pack_overhead_tokens
    assert included.get_column("tokens").sum() + overhead == result.used_tokens
    profile = options.profile
    assert not isinstance(profile, str)
    messages = list(result.messages)
    conversing = [m["role"] for m in messages if m["role"] not in SYSTEM_ROLES]
    if call["target"] == "anthropic" and conversing[:1] in ([], ["assistant"]):
        messages.append({"role": "user", "content": OPENING})  # the request's opening, counted
    sizes = _image_sizes(rows)
    sent = profile.request_tokens(messages, image_sizes=sizes)
    if call["target"] == "anthropic":  # images cost Anthropic's area rule, not OpenAI's tiles
        sent += _claude_image_delta(messages, profile, sizes)
    assert sent == result.used_tokens
    # Every row has one entry, in row order; the pack keeps the row order.
    row_ids = rows.get_column("id").to_list()
    assert entries.get_column("id").to_list() == row_ids
    assert result.ids == [i for i in row_ids if decisions[i] == "included"]
    # A gap note in place of each hole (with gap_note), where its record says; the rest items.
    noted = [g for g in result.manifest.gap_records if g.note_at is not None]
    if call["gap_note"] is None:
        assert not noted
    for gap in noted:
        note_text = call["gap_note"].format(n=gap.items)
        assert result.messages[gap.note_at]["content"] == note_text
        assert gap.note_tokens == profile.message_tokens(result.messages[gap.note_at])
    notes = {g.note_at for g in noted}
    # before_tail only under gaps="stop", on conversation items left out after a miss of the tail.
    tail = [i for i, reason in reasons.items() if reason == "before_tail"]
    if tail:
        assert call["gaps"] == "stop", tail
        assert result.manifest.order == "recency"
        roles = dict(zip(entries["id"], entries["role"].cast(pl.String), strict=True))
        assert {roles[i] for i in tail} <= {"user", "assistant", "tool"}, tail
        assert all(decisions[i] == "excluded" for i in tail), tail
        missed = {"over_budget", "group_over_budget", "gap"}
        assert any(roles[i] in {"user", "assistant", "tool"} and r in missed
                   for i, r in reasons.items()), reasons  # fmt: skip
    item_messages = [m for k, m in enumerate(result.messages) if k not in notes]
    assert len(item_messages) == len(result.ids)
    # Required items are packed unless not valid at as_of or not packable.
    for row in rows.filter(pl.col("retention") == "required").iter_rows(named=True):
        if decisions[row["id"]] != "included":
            assert reasons[row["id"]] in UNPACKED_REASONS, (row["id"], reasons[row["id"]])
    # What no budget can change: the first exclusion that applies to a row.
    policy = POLICIES[call["policy"]]
    for row in rows.iter_rows(named=True):
        expected = _exclusion(row, policy is not None)
        if expected is not None:
            assert reasons[row["id"]] == expected, (row["id"], reasons[row["id"]], expected)
    # Groups, and with turns whole turns, are packed or dropped whole.
    for unit in _units(rows, call["turns"]):
        assert len({decisions[i] for i in unit}) == 1, (unit, [reasons[i] for i in unit])
    _check_conversation(result)
    _check_start(result, call)
    # The boundary policy: nothing above internal, nothing untrusted sent as system.
    if policy is not None:
        packed = rows.filter(pl.col("id").is_in(result.ids))
        sensitive = packed.filter(
            pl.col("sensitivity").cast(pl.String).is_in(["confidential", "restricted"])
        )
        assert sensitive.height == 0
        trust = dict(zip(packed["id"], packed["trust"].cast(pl.String), strict=True))
        for item_id, message in zip(result.ids, item_messages, strict=True):
            if trust[item_id] == "untrusted":
                assert message["role"] not in {"system", "developer"}, (item_id, message)


_NOT_CANDIDATES = {
    "not_packable", "quarantined", "policy", "expired", "not_yet_valid", "group_incomplete",
    "tool_call_unanswered", "tool_result_orphan", "tool_result_duplicate",
}  # fmt: skip
"""Reasons of rows that were never candidates of the selection."""


def _check_start(result: ContextPack, call: dict[str, Any]) -> None:
    """start_on="user" (and the Anthropic target): after the system block, a user's message.

    The Anthropic target starts on one only when some user message was a candidate.
    """
    roles = [m["role"] for m in result.messages]
    if call["start_on"] == "user":
        assert _opening(roles) in {None, "user"}, roles
    elif call["target"] == "anthropic" and _opening(roles) not in {None, "user"}:
        entries = result.manifest.to_polars()
        users = entries.filter(pl.col("role").cast(pl.String).is_in(["user", "document", "memory"]))
        assert set(users["reason"].cast(pl.String).to_list()) <= _NOT_CANDIDATES, roles


def _opening(roles: list[str]) -> str | None:
    """The first role after the leading system block, or None."""
    return next((r for r in roles if r not in SYSTEM_ROLES), None)


def _check_conversation(result: ContextPack) -> None:
    """What the chat APIs accept: a pack that did not raise keeps their documented rules.

    It keeps the OpenAI tool rules (with ``tool_errors="error"`` it raises
    instead of breaking them) and renders as a valid Anthropic request,
    whatever its target.
    """
    validate_openai_messages(result.messages)
    validate_anthropic_messages(result.to_anthropic())


@reaching(0.8)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=conversations(), call=pack_calls())
def test_every_pack_path_holds_the_pack_invariants(
    records: list[dict[str, Any]], call: dict[str, Any]
) -> None:
    note(f"call: {call}")
    options = PackOptions(
        as_of=AS_OF,
        reserve=call["reserve"],
        profile=call["profile"],
        turns=call["turns"],
        start_on=call["start_on"],
        overflow=call["overflow"],
        tool_errors=call["tool_errors"],
        target=call["target"],
        gaps=call["gaps"],
        gap_note=call["gap_note"],
    )
    budget, policy = call["budget"], POLICIES[call["policy"]]
    frame = _query(CognitionFrame(records), call["query"])
    rows = frame.collect(OptFlags.none())
    result = _pack_or_error(lambda: frame.pack(budget, options, policy=policy))
    unoptimized = _pack_or_error(lambda: pack(rows, budget, options, policy=policy))
    if not isinstance(result, ContextPack):
        event(f"refused: {type(result).__name__}")
        # Refused alike with no optimizer rule: the same error type and message.
        assert type(unoptimized) is type(result), (result, unoptimized)
        assert str(unoptimized) == str(result)
        return
    assert isinstance(unoptimized, ContextPack), unoptimized
    _check_invariants(result, rows, call, options)
    assert_pack_equal(result, unoptimized)
    # Deterministic: the same call again, and over a new frame with cold token caches.
    again = frame.pack(budget, options, policy=policy)
    assert again.manifest.to_json() == result.manifest.to_json()
    clear_cache()
    fresh = _query(CognitionFrame(records), call["query"]).pack(budget, options, policy=policy)
    assert fresh.manifest.to_json() == result.manifest.to_json()
    assert fresh.messages == result.messages
    _check_continued(result, lambda: frame.pack(
        budget, options, policy=policy, previous=result, eviction_share=call["eviction_share"]
    ), call)  # fmt: skip
    reached("invariants")
    _events(result, call)


def _check_continued(result: ContextPack, run: Any, call: dict[str, Any]) -> None:
    """Continued over the same rows with nothing new: no eviction, the same decisions.

    The continued pack holds the budget, ``start_on`` and the chat rules, and
    sends the earlier pack's history (its messages before its first document
    or memory item) again first, byte for byte. One exception: when the
    earlier pack's history, sent first, would not start on a user message
    under a start rule (it opened on a document), its leading replies are
    dropped. A pack with gap notes cannot be continued: the notes would
    move the cached prefix. The earlier pack's cuts are made again: the
    same items, cut to the same lengths.
    """
    if call["gap_note"] is not None:
        with pytest.raises(PackError, match="gap_note"):
            run()
        return
    again = run()
    report = again.manifest.cache
    assert report is not None
    assert report.evicted == [], report
    assert again.used_tokens + call["reserve"] <= call["budget"]
    _check_start(again, call)
    _check_conversation(again)
    sent = result.manifest.to_polars().filter(pl.col("decision") == "included")
    roles = sent.sort("pack_position").get_column("role").cast(pl.String).to_list()
    history = [role for role in roles if role not in RANKED_ROLES]
    started = call["start_on"] == "user" or call["target"] == "anthropic"
    if started and _opening(history) not in {None, "user"}:
        event("continued: reopened on a user message")
        return
    before, after = (p.manifest.to_polars().select("id", "decision") for p in (result, again))
    assert after.equals(before), (before.rows(), after.rows())
    lead = next((k for k, role in enumerate(roles) if role in RANKED_ROLES), len(roles))
    assert again.messages[:lead] == result.messages[:lead]
    assert again.manifest.truncations == result.manifest.truncations
    assert report.replayed_cuts == [cut.id for cut in result.manifest.truncations]
    if result.manifest.truncations:
        event("continued: the earlier pack's cuts made again")


def _events(result: ContextPack, call: dict[str, Any]) -> None:
    """Which paths a checked pack took, for ``pytest --hypothesis-show-statistics``."""
    event(f"profile {call['profile']}, turns {call['turns']}, start_on {call['start_on']}")
    event(f"query {call['query']}, policy {call['policy']}")
    reasons = set(result.manifest.to_polars().get_column("reason").cast(pl.String))
    for reason in sorted(reasons - {"selected"}):
        event(f"reason {reason}")
    if call["reserve"] and "over_budget" in reasons:
        event("reserve binding")
    if result.manifest.truncations:
        event("truncated")
    if any(g.note_at is not None for g in result.manifest.gap_records):
        event(f"gap note, target {call['target']}")
    if any(isinstance(m["content"], list) for m in result.messages):
        event("image sent")
