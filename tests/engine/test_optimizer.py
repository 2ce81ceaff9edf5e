"""Optimizer rules: before/after tables with exact plan equality, switches, barriers, and the
property that every rule leaves collect()'s result unchanged."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cognoxium.engine import lowering as _lowering
from cognoxium.engine.optimizer import RULES, OptFlags, optimize
from cognoxium.engine.optimizer.fuse_filters import fuse_filters
from cognoxium.engine.optimizer.prune_projections import prune_projections
from cognoxium.engine.optimizer.pushdown_predicates import pushdown_predicates
from cognoxium.engine.optimizer.sort_limit_to_topk import sort_limit_to_topk
from cognoxium.engine.plan import (
    Dedupe,
    Expression,
    Filter,
    Join,
    Limit,
    Node,
    Scan,
    Select,
    Sort,
    Source,
    TopK,
    WithColumns,
)
from cognoxium.engine.ranks import rank_node
from cognoxium.exceptions import PlanError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem
from cognoxium.items.schema import COLUMNS
from cognoxium.testing.strategies import WORDS, frames_strategy, items_strategy

E = Expression.of
Rule = Callable[[Node], Node]


@dataclass(frozen=True, slots=True, kw_only=True)
class Fence(Node):
    """A barrier standing in for redact: replaces 'secret' in texts."""

    barrier = True
    input: Node


@_lowering.register(Fence)
def _redact(node: Fence, lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.with_columns(pl.col("text").str.replace_all("secret", "[redacted]"))


@pytest.fixture(autouse=True, scope="module")
def _unregister_fence() -> Iterator[None]:
    yield
    _lowering.HANDLERS.pop(Fence, None)


_ITEMS = [
    ContextItem(
        id="a",
        role="user",
        text="the secret refund",
        priority=2,
        created_at="2024-01-01T00:00:00Z",
        metadata={"conversation": "c1"},
    ),
    ContextItem(
        id="b", role="tool", text="shipping", priority=0, created_at="2024-01-02T00:00:00Z"
    ),
    ContextItem(
        id="c",
        role="user",
        text="refund window",
        priority=1,
        created_at="2024-01-03T00:00:00Z",
        metadata={"conversation": "c2"},
    ),
]
SCAN = Scan(source=Source(items_to_frame(_ITEMS)))
OTHER = Scan(source=Source(pl.DataFrame({"id": ["a", "c"], "score": [0.5, 0.9]})))

P_USER = E(pl.col("role") == "user")
P_PRI = E(pl.col("priority") > 0)
P_TEXT = E(pl.col("text").str.contains("refund"))
P_SCORE = E(pl.col("score") > 0.6)
P_MEAN = E(pl.col("priority") >= pl.col("priority").mean())  # not elementwise
META = pl.Struct({"conversation": pl.String})
# metadata.conversation as a SQL predicate reads it: decoded from the JSON text.
CONVERSATION = pl.col("metadata").str.json_decode(META).struct.field("conversation")


def f(node: Node, *preds: Expression, meta: pl.DataType | None = None) -> Filter:
    return Filter(input=node, predicate=Expression.all_of(preds), metadata_dtype=meta)


def srt(node: Node, key: str = "priority", desc: bool = True) -> Sort:
    return Sort(input=node, by=(E(key),), descending=(desc,), nulls_last=(False,))


def topk(node: Node, k: int, key: str = "priority", desc: bool = True) -> TopK:
    return TopK(input=node, by=(E(key),), descending=(desc,), nulls_last=(False,), k=k)


def sel(node: Node, *exprs: str | pl.Expr) -> Select:
    return Select(input=node, exprs=tuple(E(e) for e in exprs))


def wc(node: Node, *exprs: pl.Expr) -> WithColumns:
    return WithColumns(input=node, exprs=tuple(E(e) for e in exprs))


def scan_of(*columns: str) -> Scan:
    return Scan(source=SCAN.source, columns=columns)


def join(left: Node = SCAN, right: Node = OTHER, how: str = "inner") -> Join:
    return Join(input=left, other=right, on=("id",), how=how)


# -- before/after tables ----------------------------------------------------------

FUSE_CASES: list[tuple[str, Node, Node]] = [
    ("two filters", f(f(SCAN, P_USER), P_PRI), f(SCAN, P_USER, P_PRI)),
    ("three filters", f(f(f(SCAN, P_USER), P_PRI), P_TEXT), f(SCAN, P_USER, P_PRI, P_TEXT)),
    (
        "under a limit",
        Limit(input=f(f(SCAN, P_USER), P_PRI), n=1),
        Limit(input=f(SCAN, P_USER, P_PRI), n=1),
    ),
    ("non-elementwise inner", f(f(SCAN, P_MEAN), P_USER), f(SCAN, P_MEAN, P_USER)),
    (
        "same metadata decoding",
        f(f(SCAN, P_USER, meta=META), P_PRI, meta=META),
        f(SCAN, P_USER, P_PRI, meta=META),
    ),
]
FUSE_UNCHANGED: list[tuple[str, Node]] = [
    ("single filter", f(SCAN, P_USER)),
    ("non-elementwise outer", f(f(SCAN, P_USER), P_MEAN)),
    ("different metadata decoding", f(f(SCAN, P_USER, meta=META), P_PRI)),
    ("not adjacent", f(srt(f(SCAN, P_USER)), P_PRI)),
    ("across a barrier", f(Fence(input=f(SCAN, P_USER)), P_PRI)),
]

PUSH_CASES: list[tuple[str, Node, Node]] = [
    ("below sort", f(srt(SCAN), P_USER), srt(f(SCAN, P_USER))),
    ("below two sorts", f(srt(srt(SCAN, "id")), P_USER), srt(srt(f(SCAN, P_USER), "id"))),
    (
        "below select of untouched columns",
        f(sel(SCAN, "id", "priority"), P_PRI),
        sel(f(SCAN, P_PRI), "id", "priority"),
    ),
    (
        "below with_columns not writing its columns",
        f(wc(SCAN, (pl.col("priority") * 2).alias("p2")), P_PRI),
        wc(f(SCAN, P_PRI), (pl.col("priority") * 2).alias("p2")),
    ),
    (
        "conjuncts split across with_columns",
        f(wc(SCAN, (pl.col("priority") * 2).alias("p2")), P_USER, E(pl.col("p2") > 1)),
        f(wc(f(SCAN, P_USER), (pl.col("priority") * 2).alias("p2")), E(pl.col("p2") > 1)),
    ),
    (
        "non-elementwise predicate whole below an elementwise select",
        f(sel(SCAN, "id", "priority"), P_MEAN),
        sel(f(SCAN, P_MEAN), "id", "priority"),
    ),
    ("into the left of an inner join", f(join(), P_USER), join(f(SCAN, P_USER))),
    ("into the right of an inner join", f(join(), P_SCORE), join(right=f(OTHER, P_SCORE))),
    (
        "conjuncts to both sides, mixed stays",
        f(join(), P_USER, P_SCORE, E(pl.col("score") > pl.col("priority"))),
        f(join(f(SCAN, P_USER), f(OTHER, P_SCORE)), E(pl.col("score") > pl.col("priority"))),
    ),
    (
        "metadata decoding follows the conjunct that reads metadata",
        f(join(), P_SCORE, E(CONVERSATION == "c1"), meta=META),
        join(
            f(SCAN, E(CONVERSATION == "c1"), meta=META),
            f(OTHER, P_SCORE),
        ),
    ),
    (
        "below sort, stops at limit",
        f(srt(Limit(input=SCAN, n=2)), P_USER),
        srt(f(Limit(input=SCAN, n=2), P_USER)),
    ),
    (
        "below sort, stops at a barrier",
        f(srt(Fence(input=SCAN)), P_TEXT),
        srt(f(Fence(input=SCAN), P_TEXT)),
    ),
]
PUSH_UNCHANGED: list[tuple[str, Node]] = [
    ("at the scan", f(SCAN, P_USER)),
    ("over a limit", f(Limit(input=SCAN, n=2), P_USER)),
    ("over a tail", f(Limit(input=SCAN, n=2, offset=-2), P_USER)),
    ("over a slice to the end", f(Limit(input=SCAN, n=None, offset=1), P_USER)),
    ("over a top-k", f(topk(SCAN, 2), P_USER)),
    ("over a dedupe", f(Dedupe(input=SCAN), P_USER)),
    ("over bm25", f(rank_node("bm25", input=SCAN, query="refund"), P_USER)),
    ("over a priority rank", f(rank_node("priority", input=SCAN), P_USER)),
    ("over a barrier", f(Fence(input=SCAN), P_TEXT)),
    ("over a filter", f(f(SCAN, P_USER), P_PRI)),
    ("non-elementwise over sort", f(srt(SCAN), P_MEAN)),
    (
        "over sort by a non-elementwise key",
        f(
            Sort(
                input=SCAN,
                by=(E(pl.col("priority").rank()),),
                descending=(False,),
                nulls_last=(False,),
            ),
            P_USER,
        ),
    ),
    (
        "over select that rewrites the column",
        f(sel(SCAN, "id", (pl.col("priority") * 2).alias("priority")), P_PRI),
    ),
    ("over with_columns writing the column", f(wc(SCAN, pl.col("priority") + 1), P_PRI)),
    ("over non-elementwise with_columns", f(wc(SCAN, pl.col("priority").max().alias("m")), P_USER)),
    ("over a left join", f(join(how="left"), P_USER)),
    ("non-elementwise over a join", f(join(), P_MEAN)),
    ("predicate reading both sides of a join", f(join(), E(pl.col("score") > pl.col("priority")))),
    ("constant predicate", f(srt(SCAN), E(pl.lit(True)))),
]

PRUNE_CASES: list[tuple[str, Node, Node]] = [
    ("select over scan", sel(SCAN, "id"), sel(scan_of("id"), "id")),
    (
        "through filter and sort, table order",
        sel(srt(f(SCAN, P_PRI), "created_at"), "text", "id"),
        sel(
            srt(f(scan_of("id", "text", "priority", "created_at"), P_PRI), "created_at"),
            "text",
            "id",
        ),
    ),
    (
        "through limit, top-k and dedupe",
        sel(Limit(input=topk(Dedupe(input=SCAN), 2), n=1), "id"),
        sel(
            Limit(
                input=topk(
                    # a merge reads rank (its representative) and metadata (its conflicts);
                    # every dedupe keys on the group and the tool call (in metadata)
                    Dedupe(
                        input=scan_of(
                            "id", "content_hash", "priority", "rank", "group_id", "metadata"
                        )
                    ),
                    2,
                ),
                n=1,
            ),
            "id",
        ),
    ),
    ("no column read keeps the first", sel(SCAN, pl.len()), sel(scan_of("id"), pl.len())),
    (
        "metadata decoding keeps metadata",
        sel(f(SCAN, E(CONVERSATION == "c1"), meta=META), "id"),
        sel(
            f(
                scan_of("id", "metadata"),
                E(CONVERSATION == "c1"),
                meta=META,
            ),
            "id",
        ),
    ),
]
PRUNE_UNCHANGED: list[tuple[str, Node]] = [
    ("already narrow", sel(scan_of("id"), "id")),
    ("every column", sel(SCAN, *COLUMNS)),
    ("selector", sel(SCAN, pl.all())),
    ("over with_columns", sel(wc(SCAN, (pl.col("priority") + 1).alias("p")), "p")),
    ("over rank", sel(rank_node("priority", input=SCAN), "rank")),
    ("over a barrier", sel(Fence(input=SCAN), "id")),
    ("no select", f(SCAN, P_USER)),
]

TOPK_CASES: list[tuple[str, Node, Node]] = [
    ("limit over sort", Limit(input=srt(SCAN), n=2), topk(SCAN, 2)),
    ("zero rows", Limit(input=srt(SCAN), n=0), topk(SCAN, 0)),
    (
        "nested",
        f(Limit(input=srt(f(SCAN, P_USER)), n=1), P_PRI),
        f(topk(f(SCAN, P_USER), 1), P_PRI),
    ),
]
TOPK_UNCHANGED: list[tuple[str, Node]] = [
    ("with offset", Limit(input=srt(SCAN), n=2, offset=1)),
    ("tail over sort", Limit(input=srt(SCAN), n=2, offset=-2)),
    ("no length over sort", Limit(input=srt(SCAN), n=None)),
    ("limit over filter over sort", Limit(input=f(srt(SCAN), P_USER), n=1)),
    ("limit over barrier", Limit(input=Fence(input=srt(SCAN)), n=1)),
    ("sort alone", srt(SCAN)),
]

TABLES: dict[str, tuple[Rule, list[tuple[str, Node, Node]], list[tuple[str, Node]]]] = {
    "fuse_filters": (fuse_filters, FUSE_CASES, FUSE_UNCHANGED),
    "pushdown_predicates": (pushdown_predicates, PUSH_CASES, PUSH_UNCHANGED),
    "prune_projections": (prune_projections, PRUNE_CASES, PRUNE_UNCHANGED),
    "sort_limit_to_topk": (sort_limit_to_topk, TOPK_CASES, TOPK_UNCHANGED),
}
CHANGED = [(name, *case) for name, (_, cases, _) in TABLES.items() for case in cases]
UNCHANGED = [(name, *case) for name, (_, _, cases) in TABLES.items() for case in cases]


@pytest.mark.parametrize(
    ("rule", "case", "before", "after"), CHANGED, ids=[f"{r}: {c}" for r, c, *_ in CHANGED]
)
def test_rule_rewrites(rule: str, case: str, before: Node, after: Node) -> None:
    out = TABLES[rule][0](before)
    assert out == after, f"\n{out}\n!=\n{after}"
    assert _collect(out).equals(_collect(before))


@pytest.mark.parametrize(
    ("rule", "case", "plan"), UNCHANGED, ids=[f"{r}: {c}" for r, c, _ in UNCHANGED]
)
def test_rule_returns_same_object_when_nothing_changes(rule: str, case: str, plan: Node) -> None:
    assert TABLES[rule][0](plan) is plan


@pytest.mark.parametrize(
    ("rule", "case", "before", "after"), CHANGED, ids=[f"{r}: {c}" for r, c, *_ in CHANGED]
)
def test_rule_is_idempotent(rule: str, case: str, before: Node, after: Node) -> None:
    once = TABLES[rule][0](before)
    assert TABLES[rule][0](once) is once


@pytest.mark.parametrize(
    ("rule", "case", "before", "after"), CHANGED, ids=[f"{r}: {c}" for r, c, *_ in CHANGED]
)
def test_rule_can_be_switched_off(rule: str, case: str, before: Node, after: Node) -> None:
    only_this = OptFlags(**{f.name: f.name == rule for f in fields(OptFlags)})
    assert optimize(before, only_this) == after
    assert optimize(before, OptFlags(**{rule: False})) != after
    assert optimize(before, OptFlags.none()) is before


def _collect(plan: Node) -> pl.DataFrame:
    return _lowering.lower(plan).collect()


# -- the flags and the driver ----------------------------------------------------


def test_flags_name_every_rule_once() -> None:
    assert [f.name for f in fields(OptFlags)] == [r.__name__ for r in RULES]
    assert all(getattr(OptFlags(), r.__name__) for r in RULES)
    assert not any(getattr(OptFlags.none(), r.__name__) for r in RULES)


def test_optimize_runs_rules_to_a_fixpoint() -> None:
    plan = sel(Limit(input=f(f(srt(SCAN), P_USER), P_PRI), n=1), "id")
    out = optimize(plan)
    assert out == sel(topk(f(scan_of("id", "role", "priority"), P_USER, P_PRI), 1), "id")
    assert optimize(out) is out


def test_filters_fused_then_split_into_join_sides() -> None:
    plan = f(f(join(), P_SCORE), P_USER)
    assert optimize(plan) == join(f(SCAN, P_USER), f(OTHER, P_SCORE))


def test_barrier_policy_holds_after_optimizing() -> None:
    # A filter above a redacting barrier must see redacted text: moved below
    # it, the filter would keep the row that mentions the secret.
    secret = E(pl.col("text").str.contains("secret"))
    plan = Limit(input=srt(f(srt(Fence(input=SCAN), "id", desc=False), secret), "id"), n=5)
    out = optimize(plan)
    assert out == topk(srt(f(Fence(input=SCAN), secret), "id", desc=False), 5, "id")
    assert _collect(out).height == 0
    assert _collect(out).equals(_collect(plan))
    assert _collect(Fence(input=f(SCAN, secret)))["id"].to_list() == ["a"]


# -- property: optimizing never changes the result ---------------------------------


def _ops(
    draw: st.DrawFn, base: CognitionFrame
) -> list[tuple[str, Callable[[CognitionFrame], CognitionFrame]]]:
    roles = ["user", "assistant", "tool", "document"]
    word = st.sampled_from([w for w in WORDS if w not in ("the", "and")])
    choices: list[tuple[str, Callable[[CognitionFrame], CognitionFrame]]] = []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(
            st.sampled_from(
                [
                    "filter_role",
                    "filter_priority",
                    "filter_sql",
                    "filter_metadata_sql",
                    "filter_json_path",
                    "filter_mean",
                    "sort",
                    "sort2",
                    "limit",
                    "head",
                    "dedupe",
                    "rank",
                    "rank",
                    "rank",
                    "top_k",
                    "top_k",
                    "top_k_native",
                    "tail",
                    "slice",
                    "drop",
                    "rename",
                    "with_columns",
                    "with_columns_touch",
                    "with_columns_agg",
                    "select",
                    "join",
                    "join",
                    "quarantine",
                    "demote",
                    "redact",
                ]
            )
        )
        if kind == "filter_role":
            r = draw(st.sampled_from(roles))
            choices.append((kind, lambda cf, r=r: cf.filter(pl.col("role") == r)))
        elif kind == "filter_priority":
            k = draw(st.integers(-2, 3))
            choices.append((kind, lambda cf, k=k: cf.filter(pl.col("priority") > k)))
        elif kind == "filter_sql":
            k = draw(st.integers(-2, 3))
            r = draw(st.sampled_from(roles))
            choices.append(
                (kind, lambda cf, k=k, r=r: cf.filter(f"priority >= {k} AND role <> '{r}'"))
            )
        elif kind == "filter_metadata_sql":
            c = draw(st.sampled_from(["c1", "c2"]))
            choices.append(
                (
                    kind,
                    lambda cf, c=c: cf.filter(
                        f"metadata.conversation = '{c}' OR metadata.turn > 2"
                    ),
                )
            )
        elif kind == "filter_json_path":
            choices.append(
                (
                    kind,
                    lambda cf: cf.filter(
                        pl.col("metadata").str.json_path_match("$.conversation") == "c1"
                    ),
                )
            )
        elif kind == "filter_mean":
            choices.append(
                (kind, lambda cf: cf.filter(pl.col("priority") >= pl.col("priority").mean()))
            )
        elif kind in ("sort", "sort2"):
            key = draw(st.sampled_from(["priority", "created_at", "id", "rank", "role"]))
            desc = draw(st.booleans())
            nl = draw(st.booleans())
            if kind == "sort":
                choices.append(
                    (
                        kind,
                        lambda cf, key=key, d=desc, n=nl: cf.sort(key, descending=d, nulls_last=n),
                    )
                )
            else:
                choices.append(
                    (
                        kind,
                        lambda cf, key=key, d=desc: cf.sort(
                            "retention", key, descending=[d, not d]
                        ),
                    )
                )
        elif kind == "limit":
            n, o = draw(st.integers(0, 6)), draw(st.integers(0, 3))
            choices.append((kind, lambda cf, n=n, o=o: cf.limit(n, offset=o)))
        elif kind == "top_k":
            key = draw(st.sampled_from(["priority", "created_at", "rank"]))
            n = draw(st.integers(0, 6))
            choices.append((kind, lambda cf, key=key, n=n: cf.sort(key, descending=True).head(n)))
        elif kind == "head":
            n = draw(st.integers(0, 6))
            choices.append((kind, lambda cf, n=n: cf.head(n)))
        elif kind == "top_k_native":
            key = draw(st.sampled_from(["priority", "created_at", "rank"]))
            n, low = draw(st.integers(0, 6)), draw(st.booleans())
            choices.append(
                (
                    kind,
                    lambda cf, key=key, n=n, low=low: (
                        cf.bottom_k(n, by=key) if low else cf.top_k(n, by=key)
                    ),
                )
            )
        elif kind == "tail":
            n = draw(st.integers(0, 6))
            choices.append((kind, lambda cf, n=n: cf.tail(n)))
        elif kind == "slice":
            o = draw(st.integers(-8, 8))
            length = draw(st.one_of(st.none(), st.integers(0, 6)))
            choices.append((kind, lambda cf, o=o, n=length: cf.slice(o, n)))
        elif kind == "drop":
            col = draw(st.sampled_from(["sources", "group_id", "expires_at"]))
            choices.append((kind, lambda cf, c=col: cf.drop(c, strict=False)))
        elif kind == "rename":
            choices.append((kind, lambda cf: cf.rename({"priority": "p"}, strict=False)))
        elif kind == "dedupe":
            merge = draw(st.booleans())
            threshold = draw(st.sampled_from([None, None, 0.5, 0.9]))
            clock = draw(st.sampled_from([None, datetime(2024, 6, 1, tzinfo=UTC)]))
            choices.append(
                (
                    kind,
                    lambda cf, m=merge, t=threshold, c=clock: cf.dedupe(
                        merge=m, threshold=t, as_of=c
                    ),
                )
            )
        elif kind == "rank":
            method = draw(st.sampled_from(["bm25", "bm25", "recency", "recency_hl", "priority"]))
            if method == "bm25":
                q = " ".join(draw(st.lists(word, min_size=1, max_size=3)))
                choices.append((kind, lambda cf, q=q: cf.rank("bm25", query=q)))
            elif method == "recency_hl":
                choices.append((kind, lambda cf: cf.rank("recency", half_life=timedelta(hours=6))))
            else:
                choices.append((kind, lambda cf, m=method: cf.rank(m)))
        elif kind == "with_columns":
            choices.append((kind, lambda cf: cf.with_columns(p2=pl.col("priority") * 2)))
        elif kind == "with_columns_touch":
            choices.append((kind, lambda cf: cf.with_columns(pl.col("priority") + 1)))
        elif kind == "with_columns_agg":
            choices.append(
                (
                    kind,
                    lambda cf: cf.with_columns(top=pl.col("priority").max(), role=pl.col("role")),
                )
            )
        elif kind == "quarantine":
            k = draw(st.integers(-2, 3))
            choices.append(
                (kind, lambda cf, k=k: cf.quarantine(pl.col("priority") > k, reason=f"p>{k}"))
            )
        elif kind == "redact":
            choices.append((kind, lambda cf: cf.redact(types=["EMAIL", "PHONE"])))
        elif kind == "demote":
            r = draw(st.sampled_from(roles))
            choices.append(
                (
                    kind,
                    lambda cf, r=r: cf.demote(
                        pl.col("role") == r, retention="optional", priority_delta=-1
                    ),
                )
            )
        elif kind == "select":
            cols = draw(
                st.lists(st.sampled_from(list(COLUMNS)), min_size=1, max_size=8, unique=True)
            )
            choices.append((kind, lambda cf, cols=cols: cf.select(*cols)))
        else:
            how = draw(st.sampled_from(["inner", "left", "semi", "anti"]))
            k = draw(st.integers(-2, 3))
            other = base.filter(pl.col("priority") >= k).select(
                "id", score=pl.col("priority") * 10, tag=pl.col("role")
            )
            choices.append((kind, lambda cf, o=other, h=how: cf.join(o, on="id", how=h)))
    return choices


@st.composite
def chains(draw: st.DrawFn) -> tuple[CognitionFrame, list[str]]:
    frame = CognitionFrame.from_items(draw(items_strategy(max_size=10)))
    applied: list[str] = []
    current = frame
    for name, op in _ops(draw, frame):
        try:
            current = op(current)
        except PlanError:
            continue  # e.g. the columns it reads were selected away
        applied.append(name)
    return current, applied


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_optimizing_never_changes_the_result(chain: tuple[CognitionFrame, list[str]]) -> None:
    frame, applied = chain
    note(f"operations: {applied}\n{frame.explain(optimized=False)}")
    expected = frame.collect(OptFlags.none())
    assert_frame_equal(frame.collect(), expected)
    for rule in RULES:
        alone = OptFlags(**{f.name: f.name == rule.__name__ for f in fields(OptFlags)})
        assert_frame_equal(frame.collect(alone), expected)


@settings(max_examples=30, deadline=None)
@given(frames_strategy())
def test_frames_strategy_gives_canonical_frames(df: pl.DataFrame) -> None:
    assert tuple(df.columns) == COLUMNS
    assert df["id"].n_unique() == df.height


def test_collect_equal_on_an_example_with_every_rule_firing() -> None:
    base = CognitionFrame(_ITEMS)
    other = base.select("id", score=pl.col("priority") * 10)
    q = (
        base.join(other, on="id")
        .filter(pl.col("score") > 5)
        .filter("role = 'user'")
        .sort("priority", descending=True)
        .select("id", "score")
        .limit(1)
    )
    plan: Any = q.explain()
    assert "TopK" not in plan  # the select sits between limit and sort
    assert_frame_equal(q.collect(), q.collect(OptFlags.none()))
    assert q.collect()["id"].to_list() == ["a"]


@pytest.mark.parametrize(
    ("reaching", "removed"),
    [
        ({"conversation": None, "turn": 3}, {"conversation": "c1", "turn": 1}),  # null / text
        ({"conversation": "c2", "turn": 3}, {"conversation": 7, "turn": "late"}),  # text / number
        ({"conversation": "c1", "turn": 3}, {"conversation": {"id": 1}, "turn": True}),
        ({"conversation": "c3", "turn": 3.5}, {"conversation": ["c1"], "turn": [3]}),
    ],
)
def test_a_metadata_predicate_after_a_filter_reads_only_the_types_of_the_rows_it_reaches(
    reaching: dict[str, object], removed: dict[str, object]
) -> None:
    # Polars merges the two filters into one expression over every row: the rows the
    # first filter removes hold other JSON types for the keys the second one reads.
    rows = [
        {"id": "kept", "role": "user", "text": "a", "priority": 1, "metadata": reaching},
        {"id": "gone", "role": "tool", "text": "b", "priority": 1, "metadata": removed},
        {"id": "empty", "role": "user", "text": "c", "priority": 0, "metadata": {}},
    ]
    frame = (
        CognitionFrame(rows)
        .filter(pl.col("role") == "user")
        .quarantine(pl.col("priority") > 0, reason="p")
        .filter("metadata.conversation = 'c1' OR metadata.turn > 2")
    )
    for flags in (OptFlags.none(), OptFlags()):
        assert frame.collect(flags).get_column("id").to_list() == ["kept"]
