"""A pack over costs counted ahead equals a cold pack: selection, tokens, totals and errors.

A scope whose every cost is counted first (:meth:`PackScope.count_tokens`, as a
batch counts them) orders its candidates in the whole order and selects with
array operations; a cold :func:`pack` counts lazily as its selection reaches.
Both must examine the same units, so their packs and manifests are
byte-identical, and so are the packs of a scope that earlier packs (other
budgets, other ranks) left with some costs known.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import BudgetError, PackError
from cognoxium.governance.policies import BoundaryPolicy
from cognoxium.items.records import records_to_frame
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import CHAT_ROLES, PackScope, pack
from cognoxium.tokens.profiles import PROFILE_NAMES, clear_cache, get_profile
from tests.reach import reached, reaching

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
CL100K = get_profile("cl100k_base")
T0 = datetime(2024, 1, 1, tzinfo=UTC)
# Equal texts give equal costs (ties broken by id); "a" * 200 costs far above its lower
# bound, so a unit can be examined (bound fits) and still be left out (cost does not).
TEXTS = [
    "ok",
    "ok",
    "refund window is 30 days",
    "a" * 200,
    "朗琴 " * 12,
    "👨‍👩‍👧‍👦",
    "word " * 40,
    "",
    "{json} \n  ok.",
]
RANKS = [None, float("nan"), 0.0, -0.0, 0.5, 1.0, 1.0, 2.0, -3.0]
ROLES = ["system", "user", "user", "assistant", "document", "memory", "developer"]
RETENTIONS = ["required"] + ["preferred"] * 3 + ["optional"] * 4
CALL = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": 1}'}}


@dataclass(frozen=True)
class Options:
    """The pack's options: budget and reserve in tokens, and the selection switches."""

    budget: int
    reserve: int = 0
    turns: bool = False
    start_on: str | None = None
    overflow: str = "error"

    def options(self, profile: str) -> PackOptions:
        return PackOptions(profile=profile, **self.kwargs())

    def kwargs(self) -> dict[str, Any]:
        return {
            "as_of": AS_OF,
            "reserve": self.reserve,
            "turns": self.turns,
            "start_on": self.start_on,
            "overflow": self.overflow,
        }


@st.composite
def rows(draw: st.DrawFn, truncatable: bool = False, plain: bool = False) -> pl.DataFrame:
    """Items with groups, tiers, priority and rank ties, NaN, nulls, ±0.0, validity, tool calls."""
    n = draw(st.integers(0, 16))
    records: list[dict[str, Any]] = []
    ranks: list[float | None] = []
    for i in range(n):
        role = draw(st.sampled_from(ROLES if plain else [*ROLES, "tool_call", "tool_result"]))
        record: dict[str, Any] = {
            "id": draw(st.sampled_from(["a", "b", "Z", "é", "日", "a\u0301"])) + str(i),
            "role": role,
            "text": draw(st.sampled_from(TEXTS)),
            "retention": draw(st.sampled_from(RETENTIONS)),
            "priority": draw(st.sampled_from([0, 0, 1, 2])),
            "created_at": T0 + timedelta(minutes=i),
            "group_id": draw(st.sampled_from([None, None, None, "g1", "g2"])),
            "metadata": {},
        }
        if role == "tool_call":
            record["role"] = "assistant"
            record["metadata"] = {"tool_call_ids": ["c1"], "tool_calls": [CALL]}
        elif role == "tool_result":
            record["role"] = "tool"
            record["metadata"] = {"tool_call_id": "c1"}
        elif not plain and role in ("user", "assistant") and draw(st.integers(0, 4)) == 0:
            record["metadata"] = {"name": draw(st.sampled_from(["ann", "Bob_2"]))}
        if not plain:
            record["trust"] = draw(st.sampled_from(["trusted", "trusted", "untrusted"]))
            record["sensitivity"] = draw(st.sampled_from(["internal"] * 5 + ["restricted"]))
        validity = draw(st.sampled_from(["valid"] * 6 + ["expired", "not_yet_valid"]))
        if validity == "expired":
            record["expires_at"] = AS_OF - timedelta(days=1)
        elif validity == "not_yet_valid":
            record["valid_from"] = AS_OF + timedelta(days=1)
        if truncatable and record["text"] and draw(st.booleans()):
            side = draw(st.sampled_from(["head", "tail"]))
            mark = {"side": side, "min_tokens": draw(st.integers(1, 12))}
            record["metadata"] = {**record["metadata"], "truncate": mark}
        records.append(record)
        ranks.append(draw(st.sampled_from(RANKS)))
    if not records:
        return records_to_frame([])
    df = records_to_frame(records)
    return df.with_columns(pl.Series("rank", ranks, dtype=pl.Float64))


@st.composite
def options(draw: st.DrawFn, overflow: bool = False) -> Options:
    budget = draw(st.sampled_from([0, 3, 4, 10, 20, 40, 80, 120, 160, 250, 400, 10_000]))
    return Options(
        budget=budget,
        reserve=min(draw(st.sampled_from([0, 0, 5, 30])), budget // 2),
        turns=draw(st.booleans()),
        start_on=draw(st.sampled_from([None, "user"])),
        overflow=draw(st.sampled_from(["error", "truncate"])) if overflow else "error",
    )


def outcome(call: Any) -> tuple[str, Any]:
    """What a pack call gives: its ids and manifest JSON, or its error's type and message."""
    try:
        result = call()
    except (BudgetError, PackError) as error:
        return type(error).__name__, str(error)
    return "pack", (result.ids, result.used_tokens, result.manifest.to_json())


def assert_known_costs_change_nothing(
    df: pl.DataFrame,
    opts: Options,
    other: Options,
    policy: BoundaryPolicy | None = None,
    profile: str = "cl100k_base",
) -> None:
    clear_cache()
    cold = outcome(
        lambda: pack(df, opts.budget, PackOptions(profile=profile, **opts.kwargs()), policy=policy)
    )
    counted = PackScope(df, policy=policy, profile=profile)
    counted.count_tokens()
    assert outcome(lambda: counted.pack(opts.budget, opts.options(profile))) == cold
    assert outcome(lambda: counted.pack(opts.budget, opts.options(profile))) == cold
    # Counted ahead within a smaller budget (rows proven larger left uncounted), then
    # within this one.
    partly = PackScope(df, policy=policy, profile=profile)
    partly.count_tokens(within=min(opts.budget, other.budget) // 2)
    assert outcome(lambda: partly.pack(opts.budget, opts.options(profile))) == cold
    partly.count_tokens(within=opts.budget)
    assert outcome(lambda: partly.pack(opts.budget, opts.options(profile))) == cold
    # A scope that earlier packs (another budget and options, a reversed rank) left with
    # some costs known, and one that counts them all only afterwards.
    warm = PackScope(df, policy=policy, profile=profile)
    outcome(lambda: warm.pack(other.budget, other.options(profile)))
    flipped = -df.get_column("rank")
    outcome(lambda: warm.pack(other.budget, other.options(profile), rank=flipped))
    assert outcome(lambda: warm.pack(opts.budget, opts.options(profile))) == cold
    warm.count_tokens()
    assert outcome(lambda: warm.pack(opts.budget, opts.options(profile))) == cold
    # With an explicit rank equal to the frame's own, the queue is not the cached one.
    own = df.get_column("rank")
    assert outcome(lambda: warm.pack(opts.budget, opts.options(profile), rank=own)) == cold


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows(),
    options(),
    options(),
    st.sampled_from([None, BoundaryPolicy()]),
    st.sampled_from(PROFILE_NAMES),
)
def test_counted_ahead_and_cold_packs_agree(
    df: pl.DataFrame, opts: Options, other: Options, policy: BoundaryPolicy | None, profile: str
) -> None:
    assert_known_costs_change_nothing(df, opts, other, policy, profile)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows(truncatable=True),
    options(overflow=True),
    options(overflow=True),
    st.sampled_from([None, BoundaryPolicy()]),
)
def test_counted_ahead_and_cold_packs_agree_with_truncatable_items(
    df: pl.DataFrame, opts: Options, other: Options, policy: BoundaryPolicy | None
) -> None:
    assert_known_costs_change_nothing(df, opts, other, policy)


def large_frame(seed: int, n: int) -> pl.DataFrame:
    """``n`` items with few distinct texts and ranks: runs of equal keys cross 512 candidates."""
    rng = random.Random(seed)
    texts = ["ok", "a" * 200, "word " * 8, "refund window is 30 days", "朗琴 " * 5]
    records = [
        {
            "id": f"{rng.choice('abc')}{i:05d}",
            "role": rng.choice(["user", "assistant", "document"]),
            "text": rng.choice(texts),
            "retention": rng.choice(["preferred", "optional", "optional", "optional"]),
            "priority": rng.choice([0, 0, 0, 1]),
            "created_at": T0 + timedelta(seconds=i),
            "group_id": rng.choice([None] * 8 + [f"g{rng.randrange(40)}"]),
        }
        for i in range(n)
    ]
    ranks = [rng.choice([None, 0.0, -0.0, 1.0, 1.0, 2.0]) for _ in range(n)]
    return records_to_frame(records).with_columns(pl.Series("rank", ranks, dtype=pl.Float64))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32),
    st.sampled_from([600, 1300]),
    st.sampled_from([0, 50, 700, 3_000, 9_000]),
    st.booleans(),
)
def test_counted_ahead_and_cold_packs_agree_over_many_candidates(
    seed: int, n: int, budget: int, turns: bool
) -> None:
    df = large_frame(seed, n)
    opts = Options(budget=budget, turns=turns)
    assert_known_costs_change_nothing(df, opts, Options(budget=budget // 2 + 100, turns=turns))


@pytest.mark.parametrize("budget", [30, 60, 200])
def test_a_zero_rank_and_a_negative_zero_rank_tie(budget: int) -> None:
    # -0.0 == 0.0: the two items are one run of equal keys, ordered by cost then id,
    # on both paths.
    df = records_to_frame(
        [
            {"id": "b", "role": "user", "text": "ok", "created_at": T0},
            {"id": "a", "role": "user", "text": "a" * 200, "created_at": T0},
            {"id": "c", "role": "user", "text": "ok", "created_at": T0},
        ]
    ).with_columns(pl.Series("rank", [0.0, -0.0, 0.0], dtype=pl.Float64))
    assert_known_costs_change_nothing(df, Options(budget=budget), Options(budget=budget))


def reference_examined(df: pl.DataFrame, budget: int) -> Examined | type[Exception]:
    """The design's rule written plainly, for text items without tools or cuts.

    Every cost is counted, units are sorted by (tier, rank desc, priority desc,
    recency, cost, id) and taken greedily: conversation units (every member
    ``user``, ``assistant`` or ``tool``) without a rank come after the other
    units of their tier and priority, newest first, and under ``gaps="stop"``
    the first of them that does not fit ends them (the selection runs again
    without the later ones), but for a miss with no user message before the
    first unit taken that holds one (passed over). A unit is examined when
    required or when its lower bound (framing plus the profile's bound of its
    text) does not exceed the budget left at its turn. Returns the packed ids
    and each item's reported tokens, or the error expected: a required item in
    a group that cannot be packed, or required items over the budget.
    """
    profile = CL100K
    records = df.with_columns(
        bound=profile.lower_bound(pl.col("text").fill_null("")),
        valid=pl.col("expires_at").is_null() | (pl.col("expires_at") > AS_OF),
        started=pl.col("valid_from").is_null() | (pl.col("valid_from") <= AS_OF),
    ).to_dicts()
    cost: dict[str, int] = {}
    bound: dict[str, int] = {}
    units: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        framing = profile.framing(CHAT_ROLES[r["role"]])
        cost[r["id"]] = framing + len(profile.encoding.encode_ordinary(r["text"] or ""))
        bound[r["id"]] = framing + int(r["bound"])
        units.setdefault(r["group_id"] or "\x00" + r["id"], []).append(r)
    tiers = {"required": 0, "preferred": 1, "optional": 2}
    keyed = []
    for place, members in enumerate(units.values()):
        if not all(m["valid"] and m["started"] for m in members):
            if any(m["retention"] == "required" and m["valid"] and m["started"] for m in members):
                return PackError
            continue  # expired, not yet valid, or a group with such a member
        ranks = [m["rank"] for m in members if m["rank"] is not None and m["rank"] == m["rank"]]
        ids = [str(m["id"]) for m in members]
        total = sum(cost[i] for i in ids)
        talk = not ranks and all(m["role"] in ("user", "assistant", "tool") for m in members)
        key = (
            min(tiers[str(m["retention"])] for m in members),
            -max(ranks, default=float("-inf")),
            -max(int(m["priority"]) for m in members),
            len(units) - place if talk else 0,  # newest first, after the others
            total,
            min(i.encode() for i in ids),
        )
        keyed.append((key, ids, total, sum(bound[i] for i in ids)))
    keyed.sort(key=lambda k: k[0])
    required = [k for k in keyed if k[0][0] == 0]
    left = budget - profile.tokens_per_pack - sum(k[2] for k in required)
    if required and left < 0:
        return BudgetError
    tokens: dict[str, int | None] = {str(r["id"]): None for r in records}
    tokens.update({i: cost[i] for k in required for i in k[1]})
    rest = [k for k in keyed if k[0][0] != 0]
    users = {str(r["id"]) for r in records if r["role"] == "user"}
    opens = [bool(users.intersection(k[1])) for k in rest]
    taken = _greedy(rest, left)
    end = _tail_end(rest, taken, opens)
    if end is not None:
        # The tail ends at that miss: the selection runs again without the later
        # conversation units, and what the first run examined is reported too.
        tokens.update(_examined(rest, taken, left, cost))
        rest = [k for n, k in enumerate(rest) if not (k[0][3] and n > end)]
        opens = [bool(users.intersection(k[1])) for k in rest]
        taken = _greedy(rest, left)
    tokens.update(_examined(rest, taken, left, cost))
    chosen = {i for k in required for i in k[1]} | {i for n in taken for i in rest[n][1]}
    ids = [str(r["id"]) for r in records if r["id"] in chosen]
    return Examined(ids, tokens, _reaches_user(rest, taken, opens), cost)


@dataclass(frozen=True)
class Examined:
    """The reference's pack: ids, reported tokens, and whether ``reach_user`` may change it.

    ``reaches`` is set when the selection sends no user message and one
    older than every conversation unit taken waits: the default then drops
    the oldest units to let it in, searching by bisection, which examines
    units the reference does not model; the pack is checked by that
    contract instead (:func:`_check_reached`).
    """

    ids: list[str]
    tokens: dict[str, int | None]
    reaches: bool
    cost: dict[str, int]


def _tail_end(rest: list[Any], taken: set[int], opens: list[bool]) -> int | None:
    """The place of the conversation miss that ends the tail, if a later one was taken."""
    talk = [n for n, k in enumerate(rest) if k[0][3]]
    first_user = next((n for n in talk if n in taken and opens[n]), None)
    ends = [
        n
        for n in talk
        if n not in taken and (opens[n] or (first_user is not None and n > first_user))
    ]
    if ends and any(n in taken for n in talk if n > ends[0]):
        return ends[0]
    return None


def _reaches_user(rest: list[Any], taken: set[int], opens: list[bool]) -> bool:
    """Whether a user message older than every conversation unit taken waits, none taken."""
    talk = [n for n, k in enumerate(rest) if k[0][3]]
    chosen = [rest[n][0][3] for n in talk if n in taken]  # higher is older
    waiting = [rest[n][0][3] for n in talk if n not in taken and opens[n]]
    sends_user = any(opens[n] for n in talk if n in taken)
    return not sends_user and bool(chosen) and bool(waiting) and max(waiting) > max(chosen)


def _check_reached(
    expected: Examined, packed: Any, entries: pl.DataFrame, df: pl.DataFrame
) -> None:
    """The contract of ``reach_user``: the pack is the reference's, or sends a user message first.

    Either way every item sent reports its exact cost.
    """
    roles = dict(df.select("id", pl.col("role").cast(pl.String)).iter_rows())
    talk = [roles[i] for i in packed.ids if roles[i] in ("user", "assistant", "tool")]
    assert packed.ids == expected.ids or talk[:1] == ["user"]
    reported = dict(entries.select("id", "tokens").iter_rows())
    assert all(reported[i] == expected.cost[i] for i in packed.ids)


def _examined(
    units: list[tuple[Any, list[str], int, int]], taken: set[int], left: int, cost: dict[str, int]
) -> dict[str, int]:
    """The costs of the units whose bound does not exceed the budget left at their turn."""
    out: dict[str, int] = {}
    for n, (_, ids, _, least) in enumerate(units):
        if least <= left - sum(units[m][2] for m in taken if m < n):
            out.update({i: cost[i] for i in ids})
    return out


def _greedy(units: list[tuple[Any, list[str], int, int]], left: int) -> set[int]:
    """The places of the units taken in order while each fits the budget left."""
    taken = set()
    for n, (_, _, total, _) in enumerate(units):
        if total <= left:
            taken.add(n)
            left -= total
    return taken


@reaching(0.8)  # both outcomes checked exactly: the tokens, or the error type
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(plain=True), st.integers(0, 300))
def test_a_manifest_reports_the_tokens_of_the_examined_units(df: pl.DataFrame, budget: int) -> None:
    expected = reference_examined(df, budget)
    clear_cache()
    scope = PackScope(df)
    scope.count_tokens()
    for result in (
        lambda: pack(df, budget, PackOptions(as_of=AS_OF)),
        lambda: scope.pack(budget, PackOptions(as_of=AS_OF)),
    ):
        if isinstance(expected, type):
            with pytest.raises(PackError) as refused:
                result()
            assert type(refused.value) is expected  # exactly: a PackError is no BudgetError
            reached("refused")
            continue
        packed = result()
        entries = packed.manifest.to_polars()
        if expected.reaches:
            _check_reached(expected, packed, entries, df)
            reached("reaches back for a user message")
            continue
        reported = dict(entries.select("id", "tokens").iter_rows())
        assert (packed.ids, reported) == (expected.ids, expected.tokens)
        counted = sum(t is not None for t in expected.tokens.values())
        assert packed.manifest.totals.counted == counted
        assert packed.manifest.totals.not_counted == df.height - counted
        reached("tokens reported")
