"""pack(): properties against a reference packer that counts everything, and fixed cases."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, event, example, given, note, settings
from hypothesis import strategies as st

from cognoxium.exceptions import BudgetError, PackError, RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem
from cognoxium.items.schema import packed_text_expr
from cognoxium.items.validation import conform
from cognoxium.packing import packer
from cognoxium.packing._messages import chat_columns
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import CHAT_ROLES, PackManifest, PackScope, pack
from cognoxium.tokens.profiles import clear_cache, get_profile
from tests.reach import reached, reaching

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
T0 = datetime(2024, 1, 1, tzinfo=UTC)
WORDS = ["refund", "window", "is", "30", "days", "朗琴", "👨‍👩‍👧‍👦", "{json}", "  ", "\n", "ok."]


RETENTIONS = ["required"] + ["preferred"] * 3 + ["optional"] * 4
"""One item in eight is required: the required items of most frames fit the drawn budgets."""


@st.composite
def pack_frames(draw: st.DrawFn) -> pl.DataFrame:
    n = draw(st.integers(0, 14))
    groups = draw(
        st.lists(st.sampled_from([None, None, None, "g1", "g2", "g3"]), min_size=n, max_size=n)
    )
    items = []
    for i in range(n):
        words = draw(st.lists(st.sampled_from(WORDS), max_size=30))
        kind = draw(st.sampled_from(["text"] * 6 + ["json", "reference", "binary"]))
        payload: dict[str, object]
        if kind == "text":
            payload = {"kind": "text", "text": " ".join(words)}
        elif kind == "json":
            payload = {"kind": "json", "value": {"words": words}}
        elif kind == "reference":
            payload = {
                "kind": "reference",
                "uri": f"https://example.org/{i}",
                "title": words[0] if words else None,
            }
        else:
            payload = {"kind": "binary", "data": b"\x00\x01"}
        expiry = draw(
            st.sampled_from(
                [None, None, None, AS_OF - timedelta(days=1), AS_OF + timedelta(days=1)]
            )
        )
        retention = draw(st.sampled_from(RETENTIONS))
        # A required item in a group that cannot be packed is refused (a PackError):
        # one required item in four is grouped, so that most frames pack.
        grouped = retention != "required" or draw(st.integers(0, 3)) == 0
        items.append(
            ContextItem(
                id=draw(st.sampled_from(["a", "b", "c"])) + str(i),
                role=draw(st.sampled_from(list(CHAT_ROLES))),
                payload=payload,
                retention=retention,
                priority=draw(st.integers(0, 2)),
                rank=draw(st.sampled_from([None, 0.5, 1.0, 2.0])),
                created_at=T0 + timedelta(minutes=i),
                expires_at=expiry,
                group_id=groups[i] if grouped else None,
            )
        )
    return items_to_frame(items)


def reference_costs(df: pl.DataFrame) -> dict[str, int]:
    """Each item's cost counted plainly: its packed text's tokens plus its role's framing."""
    prof = get_profile("cl100k_base")
    rows = df.with_columns(packed_text_expr().alias("content")).to_dicts()
    return {
        r["id"]: len(prof.encoding.encode_ordinary(r["content"] or ""))
        + prof.framing(CHAT_ROLES[r["role"]])
        for r in rows
    }


@st.composite
def frames_and_budgets(
    draw: st.DrawFn, *, slack: int = 300, budgets: Literal["mixed", "fit", "short"] = "mixed"
) -> tuple[pl.DataFrame, int]:
    """A :func:`pack_frames` frame and a budget measured on its required items.

    A budget that fits is the required items' cost and the reply priming
    plus 0 to ``slack`` tokens; a short one is 1 to 20 tokens below that, and
    the pack must be refused (a BudgetError) as the reference refuses it.

    Parameters
    ----------
    budgets
        ``"mixed"``: a short budget one time in sixteen (when there are
        required items); ``"fit"``: never short, and only frames the
        reference packs (no required item in a group that cannot be packed);
        ``"short"``: only short budgets, over frames with required items.
    """
    df = draw(pack_frames())
    costs = reference_costs(df)
    rows = df.select("id", "group_id", "retention").to_dicts()
    held = {r["group_id"] for r in rows if r["retention"] == "required" and r["group_id"]}
    # The required items with the groups they hold (an upper bound of what they cost).
    required = [r["id"] for r in rows if r["retention"] == "required" or r["group_id"] in held]
    floor = sum(costs[i] for i in required) + (3 if required else 0)
    if budgets == "short":
        assume(bool(required))
        budget = max(0, floor - draw(st.integers(1, 20)))
        assume(_refused_by_reference(df, budget))
        return df, budget
    if budgets == "mixed" and required and draw(st.sampled_from([False] * 15 + [True])):
        return df, max(0, floor - draw(st.integers(1, 20)))
    budget = floor + draw(st.integers(0, slack))
    if budgets == "fit":
        assume(not _refused_by_reference(df, budget))
    return df, budget


def _refused_by_reference(df: pl.DataFrame, budget: int) -> bool:
    try:
        return reference_pack(df, budget) is None
    except BudgetError:
        return True


def reference_pack(
    df: pl.DataFrame, budget: int, gaps: str = "stop"
) -> tuple[list[str], int, dict[str, str]] | None:
    """The design's algorithm written plainly: count every item, sort, greedy skip.

    Conversation units (every member user, assistant or tool) without a rank
    go after the others of their tier and priority, newest first; with
    ``gaps="stop"`` the first of them that does not fit ends them, but for
    one holding no user message newer than every one taken (passed over).
    With ``gaps="stop"`` a choice that sends no user message may then drop
    units to start on one (``reach_user``): :func:`_reached_user` tells it.
    """
    rows = df.with_columns(packed_text_expr().alias("content")).to_dicts()
    reasons: dict[str, str] = {}
    cost = reference_costs(df)
    for r in rows:
        if r["payload_kind"] == "binary":
            reasons[r["id"]] = "not_packable"
        elif r["expires_at"] is not None and r["expires_at"] <= AS_OF:
            reasons[r["id"]] = "expired"
    units: dict[str, list[dict[str, object]]] = {}
    for at, r in enumerate(rows):
        units.setdefault(r["group_id"] or "\x00" + r["id"], []).append({**r, "at": at})
    tiers = {"required": 0, "preferred": 1, "optional": 2}
    keyed = []
    for members in units.values():
        mids = [str(m["id"]) for m in members]
        if any(i in reasons for i in mids):
            if any(m["retention"] == "required" and m["id"] not in reasons for m in members):
                return None
            for i in mids:
                reasons.setdefault(i, "group_incomplete")
            continue
        tier = min(tiers[str(m["retention"])] for m in members)
        rank = max((m["rank"] if m["rank"] is not None else float("-inf")) for m in members)
        prio = max(int(m["priority"]) for m in members)  # type: ignore[call-overload]
        total = sum(cost[i] for i in mids)
        talk = rank == float("-inf") and all(
            m["role"] in ("user", "assistant", "tool") for m in members
        )
        newest = -min(int(m["at"]) for m in members) if talk else 0  # type: ignore[call-overload]
        user = any(m["role"] == "user" for m in members)
        keyed.append(((tier, -rank, -prio, int(talk), newest, total, min(mids)), mids, total, user))
    keyed.sort(key=lambda k: k[0])
    required = [k for k in keyed if k[0][0] == 0]
    req_cost = sum(k[2] for k in required)
    if required and req_cost + 3 > budget:
        raise BudgetError("reference", costs={}, budget=budget)
    chosen = _greedy(keyed, budget - 3 - req_cost, gaps, set())
    used = sum(cost[i] for i in chosen) + (3 if chosen else 0)
    order = [str(r["id"]) for r in rows if r["id"] in chosen]
    return order, used, reasons


def _greedy(keyed: list[Any], room: int, gaps: str, dropped: set[str]) -> set[str]:
    """The ids the greedy skip takes from the sorted units, but for the ``dropped`` units.

    With ``gaps="stop"`` the skip runs once whole; the first conversation unit
    it misses (in sorted order) that holds a user message, or that is older than
    a user message taken, ends the tail; the units after it are dropped and the
    skip runs again.
    """
    chosen = _skip(keyed, room, dropped)
    if gaps != "stop":
        return chosen
    talks = [k for k in keyed if k[0][0] != 0 and k[0][3] == 1 and k[1][0] not in dropped]
    users = [-k[0][4] for k in talks if k[3] and k[1][0] in chosen]  # the input places taken
    newest = max(users, default=-1)
    for at, k in enumerate(talks):
        if k[1][0] not in chosen and (k[3] or -k[0][4] < newest):
            later = {u[1][0] for u in talks[at + 1 :]}
            return _skip(keyed, room, dropped | later) if later & chosen else chosen
    return chosen


def _skip(keyed: list[Any], room: int, dropped: set[str]) -> set[str]:
    """The ids the greedy skip-and-continue takes from the sorted units, but ``dropped``."""
    chosen = {i for k in keyed if k[0][0] == 0 for i in k[1]}
    for k in keyed:
        if k[0][0] == 0 or k[1][0] in dropped:
            continue
        if k[2] <= room:
            chosen.update(k[1])
            room -= k[2]
    return chosen


def _reached_user(df: pl.DataFrame, expected: list[str], got: list[str]) -> bool:
    """Whether ``got`` is the default's start rule at work on ``expected``.

    The greedy choice ``expected`` sends no user, document or memory item; a
    pack that then drops its oldest units to let a user message in starts on
    one after its system items (see ``reach_user``).
    """
    roles = dict(df.select("id", pl.col("role").cast(pl.String)).iter_rows())
    user = {"user", "document", "memory"}
    if any(roles[i] in user for i in expected) or got == expected:
        return False
    talk = [roles[i] for i in got if roles[i] not in ("system", "developer")]
    return bool(talk) and talk[0] in user


def _question(df: pl.DataFrame) -> str | None:
    """The id of the user item the conversation ends on: the last one sent as user or assistant."""
    sent = df.filter(chat_columns(df).role.is_in(["user", "assistant"]).to_numpy())
    if sent.is_empty() or sent.get_column("role").cast(pl.String)[-1] != "user":
        return None
    return str(sent.get_column("id")[-1])


FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # one grapheme, many tokens
# Found by this test: the user message the input ends on, too large for what is left, is cut.
CUT_QUESTION = conform(
    pl.DataFrame(
        {
            "id": [f"a{k}" for k in range(6)],
            "role": ["system", "system", "user", "user", "system", "system"],
            "text": [
                "refund " * 4 + "refund",
                "refund " * 5 + FAMILY,
                "refund " * 4 + f"{FAMILY} {FAMILY}",
                "refund " * 21 + "30 " + " ".join([FAMILY] * 4),
                "",
                "",
            ],
            "retention": ["preferred"] * 4 + ["required", "preferred"],
            "rank": [None, None, 0.5, None, None, None],
            "created_at": ["2024-01-01T00:00:00Z"] * 6,
        }
    )
)


@reaching(0.8)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=frames_and_budgets(slack=200, budgets="fit"))
@example(drawn=(CUT_QUESTION, 177))
def test_pack_matches_reference_and_holds_invariants(drawn: tuple[pl.DataFrame, int]) -> None:
    df, budget = drawn
    note(
        str(
            df.select(
                "id",
                "role",
                "payload_kind",
                "text",
                "retention",
                "rank",
                "priority",
                "expires_at",
                "group_id",
            ).to_dicts()
        )
    )
    expected = reference_pack(df, budget)  # packs: the budgets drawn fit
    assert expected is not None
    result = pack(df, budget, PackOptions(as_of=AS_OF))
    ids, used, reasons = expected
    if result.manifest.truncations:
        # The user message the conversation ends on, too large for what was left, is cut
        # to fit (the reference does not cut): the pack keeps the invariants below.
        [cut] = result.manifest.truncations
        assert cut.id == _question(df)
        ids, used = result.ids, result.used_tokens
        reasons = {i: why for i, why in reasons.items() if i not in ids and why != "over_budget"}
        reached("cut the question")
    elif _reached_user(df, ids, result.ids):
        ids, used = result.ids, result.used_tokens
        reasons = {i: why for i, why in reasons.items() if i not in ids}
        reached("started on a user message")
    assert result.ids == ids
    assert result.used_tokens == used
    assert result.used_tokens <= budget
    entries = result.manifest.to_polars()
    # Every input item appears exactly once, in input order.
    assert entries.get_column("id").to_list() == df.get_column("id").to_list()
    included = entries.filter(pl.col("decision") == "included")
    assert included.get_column("tokens").sum() + result.manifest.pack_overhead_tokens == used
    # Required packable items are never dropped.
    req = df.filter(pl.col("retention") == "required").get_column("id").to_list()
    assert all(i in ids or i in reasons for i in req)
    # Groups are atomic.
    by_group = (
        entries.join(df.select("id", "group_id"), on="id", suffix="_df")
        .filter(pl.col("group_id").is_not_null())
        .group_by("group_id")
        .agg(pl.col("decision").n_unique().alias("decisions"))
    )
    assert (by_group.get_column("decisions") == 1).all()
    # Pack order is input order.
    assert included.get_column("position").is_sorted()
    for item_id, why in reasons.items():
        assert entries.filter(pl.col("id") == item_id).get_column("reason").item() == why
    reached("compared with the reference")


@reaching(0.8)
@settings(max_examples=40, deadline=None)
@given(drawn=frames_and_budgets(budgets="fit"))
def test_manifest_is_byte_identical_across_runs(drawn: tuple[pl.DataFrame, int]) -> None:
    df, budget = drawn
    first = pack(df, budget, PackOptions(as_of=AS_OF)).manifest.to_json()
    clear_cache()
    second = pack(df.clone(), budget, PackOptions(as_of=AS_OF)).manifest.to_json()
    assert first == second
    assert PackManifest.from_json(first).to_json() == first
    reached("byte-identical")


@reaching(0.8)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=frames_and_budgets(budgets="fit"))
def test_costs_counted_ahead_leave_the_pack_and_manifest_unchanged(
    drawn: tuple[pl.DataFrame, int],
) -> None:
    df, budget = drawn
    # A scope whose every cost is counted first, as a batch counts them, selects with
    # array operations; a cold pack counts lazily, in batches, as the selection reaches.
    clear_cache()
    cold = pack(df, budget, PackOptions(as_of=AS_OF))
    scope = PackScope(df)
    scope.count_tokens()
    counted = scope.pack(budget, PackOptions(as_of=AS_OF))
    again = scope.pack(budget, PackOptions(as_of=AS_OF))  # over the costs the first pack left
    assert counted.ids == cold.ids
    assert counted.manifest.to_json() == cold.manifest.to_json()
    assert again.manifest.to_json() == cold.manifest.to_json()
    entries = cold.manifest.to_polars()
    assert entries.filter(pl.col("decision") == "included")["tokens"].null_count() == 0
    reached("counted ahead equals cold")


@reaching(0.8)
@settings(
    max_examples=60,
    deadline=None,
    # Frames with no required item, or whose required items cost less than counted
    # (expired ones), are rejected: about half the draws.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(drawn=frames_and_budgets(budgets="short"))
def test_a_pack_is_refused_as_the_reference_refuses_it(drawn: tuple[pl.DataFrame, int]) -> None:
    df, budget = drawn
    try:
        expected: type[PackError] = PackError if reference_pack(df, budget) is None else type(None)
    except BudgetError:
        expected = BudgetError
    clear_cache()
    with pytest.raises(PackError) as cold:
        pack(df, budget, PackOptions(as_of=AS_OF))
    # The error exactly: a BudgetError where the required items do not fit, a PackError
    # that is no BudgetError where a required item is in a group that cannot be packed.
    assert type(cold.value) is expected
    match = "required items need" if expected is BudgetError else "are in groups"
    assert match in str(cold.value)
    # A scope whose costs were counted ahead refuses with the same type and message.
    scope = PackScope(df)
    scope.count_tokens()
    with pytest.raises(PackError) as counted:
        scope.pack(budget, PackOptions(as_of=AS_OF))
    assert (type(counted.value), str(counted.value)) == (type(cold.value), str(cold.value))
    event(f"refused: {expected.__name__}")
    reached("refused as the reference")


def test_a_manifest_counts_the_items_whose_cost_was_compared_with_the_budget_left() -> None:
    # After "first", 19 tokens are left. "big" cannot fit by its lower bound alone: it is
    # skipped unread (tokens null). "mid" might (its bound is 6 tokens) and is counted,
    # at 29 tokens, and left out: its tokens are reported. "last" fits.
    df = _frame(
        id=["first", "big", "mid", "last"],
        role=["user"] * 4,
        text=["hello there " * 10, "word " * 2000, "a" * 200, "ok"],
        rank=[4.0, 3.0, 2.0, 1.0],
    )
    result = pack(df, 3 + 25 + 19, PackOptions(as_of=AS_OF))
    entries = result.manifest.to_polars().select("id", "tokens", "reason")
    assert entries.rows() == [
        ("first", 25, "selected"),
        ("big", None, "over_budget"),
        ("mid", 29, "over_budget"),
        ("last", 5, "selected"),
    ]
    assert (result.manifest.totals.counted, result.manifest.totals.not_counted) == (3, 1)


def _frame(**columns: list[object]) -> pl.DataFrame:
    n = len(columns["id"])
    return conform(pl.DataFrame({"created_at": [T0] * n, **columns}))


def test_empty_frame_gives_empty_pack_with_valid_manifest() -> None:
    df = conform(
        pl.DataFrame(
            {"id": [], "role": [], "text": []},
            schema={"id": pl.String, "role": pl.String, "text": pl.String},
        )
    )
    result = pack(df, 0, PackOptions(as_of=AS_OF))
    assert result.ids == []
    assert result.used_tokens == 0
    assert result.manifest.totals.items == 0
    assert PackManifest.from_json(result.manifest.to_json()).totals.items == 0


def test_required_over_budget_names_ids_and_costs() -> None:
    df = _frame(
        id=["sys", "q"],
        role=["system", "user"],
        text=[" ".join(["word"] * 1300), "hi"],
        retention=["required", "optional"],
    )
    with pytest.raises(BudgetError) as info:
        pack(df, 1000, PackOptions(as_of=AS_OF))
    assert set(info.value.costs) == {"sys"}
    assert info.value.costs["sys"] == 1300 + 4
    assert "sys" in str(info.value)


def test_required_question_packed_and_large_document_excluded() -> None:
    df = _frame(
        id=["doc", "q"],
        role=["document", "user"],
        text=["lorem " * 5000, "What is the refund window for orders?"],
        retention=["optional", "required"],
    )
    result = pack(df, 1000, PackOptions(as_of=AS_OF))
    assert result.ids == ["q"]
    reasons = dict(result.manifest.to_polars().select("id", "reason").iter_rows())
    assert reasons == {"doc": "over_budget", "q": "required"}


def test_skip_and_continue_then_input_order() -> None:
    df = _frame(
        id=["a", "b", "c"],
        role=["user", "assistant", "user"],
        text=["one two", "word " * 50, "three"],
        rank=[1.0, 3.0, 2.0],
    )
    result = pack(df, 20, PackOptions(as_of=AS_OF))
    # b ranks first but does not fit; c and a do; the pack keeps input order.
    assert result.ids == ["a", "c"]
    assert result.used_tokens == (2 + 4) + (1 + 4) + 3


def test_tool_call_group_leaves_together() -> None:
    df = _frame(
        id=["call", "result", "q"],
        role=["assistant", "tool", "user"],
        text=["call c1 " * 10, "result " * 40, "question?"],
        group_id=["c1", "c1", None],
        rank=[5.0, 0.0, 1.0],
    )
    result = pack(df, 40, PackOptions(as_of=AS_OF))
    assert result.ids == ["q"]
    reasons = dict(result.manifest.to_polars().select("id", "reason").iter_rows())
    assert reasons["call"] == reasons["result"] == "group_over_budget"


def test_expired_and_binary_are_excluded_with_reasons() -> None:
    df = conform(
        pl.DataFrame(
            {
                "id": ["old", "bin", "ok"],
                "role": ["user", "tool", "user"],
                "text": ["stale", None, "fresh"],
                "binary": [None, b"\x00", None],
                "expires_at": [AS_OF - timedelta(seconds=1), None, AS_OF + timedelta(seconds=1)],
                "created_at": [T0] * 3,
            }
        )
    )
    result = pack(df, 100, PackOptions(as_of=AS_OF))
    reasons = dict(result.manifest.to_polars().select("id", "reason").iter_rows())
    assert reasons == {"old": "expired", "bin": "not_packable", "ok": "selected"}


def test_unicode_costed_by_real_tokenizer_and_recounts_within_budget() -> None:
    texts = ["朗琴是一个用于开发应用程序的框架", "👨‍👩‍👧‍👦", "Refund window is thirty days."]
    df = _frame(id=["zh", "emoji", "en"], role=["document"] * 3, text=texts)
    result = pack(df, 25, PackOptions(as_of=AS_OF))
    enc = get_profile("cl100k_base").encoding
    recount = sum(len(enc.encode_ordinary(m["content"])) + 4 for m in result.messages)
    assert recount + (3 if result.messages else 0) == result.used_tokens <= 25
    assert result.ids


def test_bad_budget_and_naive_as_of_raise() -> None:
    df = _frame(id=["a"], role=["user"], text=["x"])
    with pytest.raises(PackError, match="budget"):
        pack(df, -1, PackOptions(as_of=AS_OF))
    with pytest.raises(PackError, match="as_of"):
        pack(df, 10, PackOptions(as_of=datetime(2024, 1, 1)))


@pytest.mark.parametrize("budget", [2**63, 2**70, -(2**70)])
def test_a_budget_beyond_int64_is_refused_by_every_pack(budget: int) -> None:
    df = _frame(id=["a"], role=["user"], text=["x"])
    cf = CognitionFrame(df)
    for run in (
        lambda: pack(df, budget, PackOptions(as_of=AS_OF)),
        lambda: cf.pack(budget, as_of=AS_OF),
        lambda: cf.filter(pl.col("role") == "user").pack(budget, as_of=AS_OF),
    ):
        with pytest.raises(
            PackError, match=r"budget must be a whole number .* 2\*\*63 - 1"
        ) as info:
            run()
        assert info.value.params["budget"] == budget
    assert pack(df, 2**63 - 1, PackOptions(as_of=AS_OF)).ids == ["a"]


@pytest.mark.parametrize(
    "as_of", ["2026-01-01T00:00:00Z", 1_700_000_000, date(2026, 1, 1), pl.Series([AS_OF])]
)
def test_an_as_of_that_is_not_a_datetime_is_refused_by_every_pack(as_of: object) -> None:
    df = _frame(id=["a"], role=["user"], text=["x"])
    cf = CognitionFrame(df)
    for run in (
        lambda: pack(df, 10, PackOptions(as_of=as_of)),  # type: ignore[arg-type]
        lambda: cf.pack(10, as_of=as_of),  # type: ignore[arg-type]
        lambda: cf.filter(pl.col("role") == "user").pack(10, as_of=as_of),  # type: ignore[arg-type]
    ):
        with pytest.raises(PackError, match=r"as_of must be a timezone-aware datetime") as info:
            run()
        assert f"got {type(as_of).__name__} {as_of!r}" in str(info.value)


def test_large_frame_counts_only_what_can_matter() -> None:
    n = 20_000
    df = conform(
        pl.DataFrame(
            {
                "id": [f"m{i:05d}" for i in range(n)],
                "role": ["user", "assistant"] * (n // 2),
                "text": [f"message {i} " + "word " * (i % 37) for i in range(n)],
                "created_at": [T0 + timedelta(seconds=i) for i in range(n)],
                "rank": [float(i) for i in range(n)],
            }
        )
    )
    clear_cache()
    result = pack(df, 2048, PackOptions(as_of=AS_OF))
    totals = result.manifest.totals
    assert totals.counted < n // 10
    assert totals.counted + totals.not_counted == n
    assert result.used_tokens <= 2048
    assert result.manifest.to_polars().filter(pl.col("tokens").is_null())[
        "decision"
    ].unique().to_list() == ["excluded"]


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=2, max_size=40),
    priorities=st.lists(st.integers(0, 1), min_size=40, max_size=40),
    budget=st.integers(5, 200),
)
def test_ties_are_broken_by_cost_then_id(
    lengths: list[int], priorities: list[int], budget: int
) -> None:
    n = len(lengths)
    df = _frame(
        id=[f"t{(i * 17) % 41:02d}" for i in range(n)],
        role=["document"] * n,  # conversation items without a rank go newest first instead
        text=[" ".join(["word"] * k) for k in lengths],
        priority=priorities[:n],
    )
    expected = reference_pack(df, budget)
    assert expected is not None
    assert pack(df, budget, PackOptions(as_of=AS_OF)).ids == expected[0]


@settings(max_examples=60, deadline=None)
@example(  # the newest reply, passed over, is newer than the users taken first by priority
    lengths=[16, 40, 0, 0, 0, 1],
    roles=["user"] * 5 + ["assistant"] + ["user"] * 34,
    priorities=[1, 1] + [0] * 38,
    budget=71,
    gaps="stop",
)
@example(  # the newest is a reply that fits alone: "fill" too drops it for the question
    lengths=[0, 0, 0, 0],
    roles=["user", "user", "user", "assistant"] + ["user"] * 36,
    priorities=[0] * 40,
    budget=7,
    gaps="fill",
)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=2, max_size=40),
    roles=st.lists(st.sampled_from(["user", "assistant", "document"]), min_size=40, max_size=40),
    priorities=st.lists(st.integers(0, 1), min_size=40, max_size=40),
    budget=st.integers(5, 200),
    gaps=st.sampled_from(["stop", "fill"]),
)
def test_conversation_without_rank_goes_newest_first(
    lengths: list[int], roles: list[str], priorities: list[int], budget: int, gaps: str
) -> None:
    n = len(lengths)
    df = _frame(
        id=[f"t{(i * 17) % 41:02d}" for i in range(n)],
        role=roles[:n],
        text=[" ".join(["word"] * k) for k in lengths],
        priority=priorities[:n],
    )
    expected = reference_pack(df, budget, gaps)
    assert expected is not None
    got = pack(df, budget, PackOptions(as_of=AS_OF, gaps=gaps))  # type: ignore[arg-type]
    if _reached_user(df, expected[0], got.ids):  # both gap modes reach for the task
        assert got.used_tokens <= budget
        return
    assert (got.ids, got.used_tokens) == expected[:2]


def test_items_created_after_as_of_are_not_yet_valid() -> None:
    df = _frame(id=["old", "new"], role=["user", "user"], text=["a", "b"])
    df = df.with_columns(
        pl.Series("created_at", [T0, AS_OF + timedelta(microseconds=1)], df.schema["created_at"])
    )
    reasons = dict(
        pack(df, 100, PackOptions(as_of=AS_OF)).manifest.to_polars().select("id", "reason").rows()
    )
    assert reasons == {"old": "selected", "new": "not_yet_valid"}
    at_creation = pack(df, 100, PackOptions(as_of=AS_OF + timedelta(microseconds=1)))
    assert at_creation.ids == ["old", "new"]


def test_pack_rejects_missing_columns_and_duplicate_ids() -> None:
    df = _frame(id=["a", "b"], role=["user", "user"], text=["x", "y"])
    with pytest.raises(SchemaError, match="payload_kind"):
        pack(df.select("id", "role", "text"), 100, PackOptions(as_of=AS_OF))
    with pytest.raises(PackError, match=r"duplicate ids \['a'\]"):
        pack(pl.concat([df, df.head(1)]), 100, PackOptions(as_of=AS_OF))


def test_pack_rejects_item_columns_of_the_wrong_type() -> None:
    df = _frame(id=["a"], role=["user"], text=["x"])
    with pytest.raises(SchemaError, match="priority"):
        pack(df.with_columns(priority=pl.lit("high")), 100, PackOptions(as_of=AS_OF))
    with pytest.raises(SchemaError, match="retention"):
        pack(df.with_columns(pl.col("retention").cast(pl.String)), 100, PackOptions(as_of=AS_OF))


def test_a_manifest_basis_hashed_ahead_is_the_one_hashed_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    df = _frame(
        id=[f"m{i}" for i in range(40)],
        role=["user", "assistant"] * 20,
        text=[f"message {i} " + "word " * i for i in range(40)],
        rank=[float(i % 7) for i in range(40)],
    )
    in_turn = pack(df, 300, PackOptions(as_of=AS_OF)).manifest.to_json()
    monkeypatch.setattr(packer, "_AHEAD_ROWS", 0)  # every scope hashes on a thread
    scope = PackScope(df)
    assert scope._basis_ahead is not None
    assert scope.pack(300, PackOptions(as_of=AS_OF)).manifest.to_json() == in_turn
    assert pack(df, 300, PackOptions(as_of=AS_OF)).manifest.to_json() == in_turn


def test_an_error_of_the_manifest_basis_ahead_is_raised_by_the_pack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fails(df: pl.DataFrame, review: object) -> None:
        raise PackError("the basis fails")

    monkeypatch.setattr(packer, "_AHEAD_ROWS", 0)
    monkeypatch.setattr(packer, "manifest_basis", fails)
    df = _frame(id=["a", "b"], role=["user", "user"], text=["x", "y"])
    with pytest.raises(PackError, match="the basis fails"):
        pack(df, 100, PackOptions(as_of=AS_OF))


def test_a_content_hash_of_other_content_is_refused_before_its_cached_count_is_used() -> None:
    short = _frame(id=["a"], role=["user"], text=["hi"])
    assert (
        pack(short, 100, PackOptions(as_of=AS_OF)).used_tokens < 20
    )  # "hi" is counted, and cached
    # The text changed in Polars, the hash left as it was: it would cost as "hi" did.
    edited = short.with_columns(text=pl.lit("word " * 200))
    with pytest.raises(RecordError, match=r"row 0: field content_hash: .* does not match"):
        pack(edited, 100, PackOptions(as_of=AS_OF))
    rehashed = pack(conform(edited.drop("content_hash")), 100, PackOptions(as_of=AS_OF))
    # Counted as its own text (201 tokens), the question is cut to fit, not sent as "hi" was.
    assert [(t.id, t.original_tokens) for t in rehashed.manifest.truncations] == [("a", 201)]
