"""CognitionFrame: constructors, every method's behaviour, explain, SQL filters, errors at the
call that made a bad plan, ranking."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from polars.testing import assert_frame_equal

import cognoxium.packing.packer
import cognoxium.packing.planned
from cognoxium.exceptions import PlanError, RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame, OptFlags
from cognoxium.items.convert import items_to_frame
from cognoxium.items.io import write_jsonl, write_parquet
from cognoxium.items.model import ContextItem
from cognoxium.items.records import records_to_frame
from cognoxium.items.schema import COLUMNS, POLARS_SCHEMA, SCHEMA
from cognoxium.packing.options import PackOptions
from cognoxium.retrieval.ranking import bm25_cache_clear, bm25_cache_info, bm25_scores
from cognoxium.testing.strategies import items_strategy

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def item(id: str, text: str = "", *, hours: int = 0, **fields: Any) -> ContextItem:
    data: dict[str, Any] = {"id": id, "role": "user", "created_at": T0 + timedelta(hours=hours)}
    if "payload" not in fields:
        data["text"] = text or id
    data.update(fields)
    return ContextItem.model_validate(data)


ITEMS = [
    item("sys", "You are a support agent.", role="system", priority=5, retention="required"),
    item(
        "q1",
        "What is the refund window for orders?",
        hours=1,
        priority=1,
        metadata={"conversation": "c1", "turn": 1},
    ),
    item(
        "a1",
        "Let me look that up.",
        hours=2,
        role="assistant",
        metadata={"conversation": "c1", "turn": 2},
    ),
    item(
        "doc",
        "Refunds are accepted within 30 days of the order date.",
        hours=3,
        role="document",
        priority=2,
        metadata={"conversation": "c2", "turn": 3},
    ),
    item(
        "tool",
        "",
        hours=4,
        role="tool",
        payload={"kind": "json", "value": {"status": "ok"}},
        metadata={"conversation": "c2"},
    ),
]


@pytest.fixture
def cf() -> CognitionFrame:
    return CognitionFrame(ITEMS)


def ids(frame: CognitionFrame) -> list[str]:
    return frame.collect()["id"].to_list()


# -- constructors ------------------------------------------------------------------


def test_constructor_dispatches_on_input_kind() -> None:
    expected = items_to_frame(ITEMS)
    records = [i.model_dump(mode="json") for i in ITEMS]
    for data in (
        ITEMS,
        iter(ITEMS),
        records,
        expected,
        expected.lazy(),
        expected.to_arrow(),
        CognitionFrame(ITEMS),
    ):
        assert_frame_equal(CognitionFrame(data).collect(), expected)


def test_empty_input_gives_an_empty_frame_of_the_schema() -> None:
    out = CognitionFrame([]).collect()
    assert out.height == 0
    assert out.schema == POLARS_SCHEMA


def test_classmethod_constructors(tmp_path: Path) -> None:
    expected = items_to_frame(ITEMS)
    assert_frame_equal(CognitionFrame.from_items(ITEMS).collect(), expected)
    records = [i.model_dump(mode="json") for i in ITEMS]
    assert_frame_equal(CognitionFrame.from_records(records).collect(), expected)
    assert_frame_equal(CognitionFrame.from_arrow(expected.to_arrow()).collect(), expected)
    assert_frame_equal(CognitionFrame.from_polars(expected).collect(), expected)
    write_jsonl(expected, tmp_path / "items.jsonl")
    write_parquet(expected, tmp_path / "items.parquet")
    assert_frame_equal(CognitionFrame.read_jsonl(tmp_path / "items.jsonl").collect(), expected)
    assert_frame_equal(CognitionFrame.read_parquet(tmp_path / "items.parquet").collect(), expected)


def test_input_is_validated() -> None:
    with pytest.raises(RecordError, match="role"):
        CognitionFrame([{"id": "x", "role": "king", "text": "hi"}])
    with pytest.raises(RecordError) as info:
        CognitionFrame.from_records([{"role": "user", "text": "a"}, {"role": "user"}])
    assert (info.value.line, info.value.row) == (None, 1)
    with pytest.raises(SchemaError, match="unknown columns"):
        CognitionFrame(pl.DataFrame({"role": ["user"], "text": ["x"], "colour": ["red"]}))
    with pytest.raises(RecordError, match="content_hash"):
        CognitionFrame(pl.DataFrame({"role": ["user"], "text": ["x"], "content_hash": ["0"]}))


@pytest.mark.parametrize(
    "data",
    [
        42,
        "items.jsonl",
        Path("items.jsonl"),
        [ITEMS[0], {"role": "user", "text": "x"}],
        {"role": "user", "text": "x"},
    ],
)
def test_constructor_rejects_other_input(data: object) -> None:
    with pytest.raises(SchemaError):
        CognitionFrame(data)


def test_typed_constructors_reject_other_types() -> None:
    with pytest.raises(SchemaError, match="ContextItems"):
        CognitionFrame.from_items([{"role": "user", "text": "x"}])  # type: ignore[list-item]
    with pytest.raises(SchemaError, match=r"pyarrow\.Table"):
        CognitionFrame.from_arrow(pl.DataFrame())  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="Polars frame"):
        CognitionFrame.from_polars(pa.table({"a": [1]}))  # type: ignore[arg-type]


# -- exports -----------------------------------------------------------------------


def test_exports_round_trip(cf: CognitionFrame) -> None:
    assert cf.to_items() == ITEMS
    records = cf.to_records()
    assert [r["id"] for r in records] == [i.id for i in ITEMS]
    assert records[0]["text"] == "You are a support agent."
    assert records[4]["payload"] == {"kind": "json", "value": {"status": "ok"}}
    assert CognitionFrame(records).to_items() == ITEMS
    table = cf.to_arrow()
    assert table.schema.equals(SCHEMA)
    assert table.num_rows == 5
    assert_frame_equal(cf.to_polars(), cf.collect())


@settings(max_examples=30, deadline=None)
@given(items_strategy())
def test_any_items_round_trip_through_a_frame(items: list[ContextItem]) -> None:
    assert CognitionFrame(items).to_items() == items


def test_schema_columns_and_count_do_not_need_collect(cf: CognitionFrame) -> None:
    narrowed = cf.select("id", n=pl.col("priority") + 1)
    assert narrowed.columns == ["id", "n"]
    assert narrowed.schema == pl.Schema({"id": pl.String, "n": pl.Int64})
    assert cf.count() == 5
    assert cf.filter(pl.col("priority") > 0).count() == 3


# -- every method returns a new frame ------------------------------------------------


def test_methods_return_new_frames_and_leave_the_original(cf: CognitionFrame) -> None:
    before = cf.explain(optimized=False)
    derived = [
        cf.filter(pl.col("priority") > 0),
        cf.select("id"),
        cf.with_columns(x=1),
        cf.join(pl.DataFrame({"id": ["q1"]}), on="id"),
        cf.sort("id"),
        cf.limit(1),
        cf.head(),
        cf.dedupe(),
        cf.rank("priority"),
    ]
    assert all(isinstance(d, CognitionFrame) and d is not cf for d in derived)
    assert cf.explain(optimized=False) == before
    assert ids(cf) == ["sys", "q1", "a1", "doc", "tool"]


# -- filter --------------------------------------------------------------------------


def test_filter_with_expressions(cf: CognitionFrame) -> None:
    assert ids(cf.filter(pl.col("priority") > 0)) == ["sys", "q1", "doc"]
    assert ids(cf.filter(pl.col("priority") > 0, pl.col("role") == "user")) == ["q1"]
    assert ids(cf.filter(pl.col("priority") > 0).filter(pl.col("role") == "user")) == ["q1"]


def test_filter_null_predicate_drops_the_row(cf: CognitionFrame) -> None:
    # expires_at is null everywhere: a comparison with null is null, so no row passes
    assert ids(cf.filter(pl.col("expires_at") > T0)) == []


def test_filter_with_sql(cf: CognitionFrame) -> None:
    assert ids(cf.filter("priority >= 2 AND role <> 'system'")) == ["doc"]
    assert ids(cf.filter("role IN ('assistant', 'tool')")) == ["a1", "tool"]
    assert ids(cf.filter("text LIKE '%refund%'")) == ["q1"]


def test_sql_reaches_metadata_fields(cf: CognitionFrame) -> None:
    assert ids(cf.filter("metadata.conversation = 'c1'")) == ["q1", "a1"]
    assert ids(cf.filter("metadata.turn >= 2")) == ["a1", "doc"]
    assert ids(cf.filter("metadata.conversation = 'c2' AND metadata.turn IS NULL")) == ["tool"]
    # "turn" is a key some items lack: it reads as null for them
    assert ids(cf.filter("metadata.turn IS NULL")) == ["sys", "tool"]
    # metadata keeps its JSON text in the output
    out = cf.filter("metadata.conversation = 'c1'").collect()
    assert out["metadata"].to_list() == [
        '{"conversation":"c1","turn":1}',
        '{"conversation":"c1","turn":2}',
    ]
    assert out.schema == POLARS_SCHEMA


def test_sql_metadata_after_other_steps_and_with_expressions(cf: CognitionFrame) -> None:
    q = cf.sort("created_at", descending=True).filter("metadata.turn > 1").limit(1)
    assert ids(q) == ["doc"]
    conv = pl.col("metadata").str.json_path_match("$.conversation")
    assert ids(cf.filter(conv == "c2")) == ["doc", "tool"]
    derived = cf.with_columns(metadata=pl.lit('{"conversation":"zz"}'))
    assert ids(derived.filter("metadata.conversation = 'zz'")) == [i.id for i in ITEMS]


@pytest.mark.parametrize(
    ("predicates", "message"),
    [
        ((), "at least one predicate"),
        (("role = ",), "cannot parse the predicate: EQ is incomplete"),
        ((pl.col("nope") > 1,), "nope"),
        (("nope > 1",), "nope"),
        ((pl.col("priority") + 1,), "Boolean"),
        ((3,), "Polars expressions or SQL"),
    ],
)
def test_bad_filters_fail_at_the_call(
    cf: CognitionFrame, predicates: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        cf.filter(*predicates)


@pytest.mark.parametrize(
    ("sql", "unknown", "suggestion"),
    [
        ("metadata.nokey = 1", "key 'nokey'", ""),
        ("metadata.nokey IS NULL", "key 'nokey'", ""),
        ("role = 'user' AND metadata.nokey = 'x'", "key 'nokey'", ""),
        ("metadata.conversation = 'c1' OR metadata.nokey = 1", "key 'nokey'", ""),
        ("metadata.nokey.deeper = 1", "key 'nokey'", ""),
        ("metadata.nokey = 1 AND metadata.other = 2", "keys 'nokey', 'other'", ""),
        ("metadata.Conversation = 'c1'", "key 'Conversation'", "did you mean 'conversation'? "),
        ("metadata.trun > 1", "key 'trun'", "did you mean 'turn'? "),
    ],
)
def test_sql_metadata_key_no_item_has_fails_at_the_call(
    cf: CognitionFrame, sql: str, unknown: str, suggestion: str
) -> None:
    with pytest.raises(PlanError) as info:
        cf.filter(sql)
    assert str(info.value) == (
        f"no item has the metadata {unknown} (in SQL predicate {sql!r}), so it would read "
        f"as null for every row; {suggestion}the metadata keys are ['conversation', 'turn']"
    )
    # the same after other steps: the keys come from the frame's source
    with pytest.raises(PlanError, match="the metadata keys are"):
        cf.sort("id").filter(pl.col("role") == "user").limit(3).filter(sql)


def test_sql_metadata_keys_come_from_the_whole_source(cf: CognitionFrame) -> None:
    # "sys" has no metadata, but other items of the source have "turn": not an error
    assert ids(cf.filter(pl.col("id") == "sys").filter("metadata.turn = 1")) == []
    # a step that computes metadata: the keys are those of its output
    derived = cf.with_columns(metadata=pl.lit('{"x":1}'))
    assert ids(derived.filter("metadata.x = 1")) == [i.id for i in ITEMS]
    with pytest.raises(PlanError, match=r"'conversation'.*the metadata keys are \['x'\]"):
        derived.filter("metadata.conversation = 'c1'")
    # items whose metadata is empty have no keys at all
    bare = CognitionFrame([{"id": "a", "role": "user", "text": "hi"}])
    with pytest.raises(PlanError, match="no item has any metadata key"):
        bare.filter("metadata.topic = 'x'")
    # a source without rows has no keys to check against: any key reads as null
    assert CognitionFrame([]).filter("metadata.topic = 'x'").count() == 0


_CONV = pl.col("metadata").struct.field("conversation")
_HINT = "hint: metadata is a JSON string column, not a struct:"
_READ = 'read a key with pl.col("metadata").str.json_path_match("$.{key}") (a string, or null)'
_SQL = "or filter with a SQL predicate such as \"metadata.{key} = '...'\""


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda f: f.filter(_CONV == "c1"),
            f"Filter: StructFieldNotFoundError: conversation; {_HINT} "
            f"{_READ.format(key='conversation')}, {_SQL.format(key='conversation')}",
        ),
        (
            lambda f: f.select("id", _CONV),
            f"Select: StructFieldNotFoundError: conversation; {_HINT} "
            f"{_READ.format(key='conversation')}",
        ),
        (
            lambda f: f.with_columns(c=_CONV),
            f"WithColumns: StructFieldNotFoundError: conversation; {_HINT} "
            f"{_READ.format(key='conversation')}",
        ),
        (
            lambda f: f.sort(_CONV),
            f"Sort: StructFieldNotFoundError: conversation; {_HINT} "
            f"{_READ.format(key='conversation')}",
        ),
        (
            lambda f: f.with_columns(pl.col("metadata").struct.unnest()),
            "WithColumns: InvalidOperationError: struct.field operation not supported for "
            f"dtype `str`; {_HINT} {_READ.format(key='<key>')}",
        ),
    ],
)
def test_metadata_read_as_a_struct_fails_with_the_polars_error_and_a_hint(
    cf: CognitionFrame, build: Any, message: str
) -> None:
    with pytest.raises(PlanError) as info:
        build(cf)
    assert str(info.value) == message.format("metadata is a JSON string column, not a struct:")
    assert isinstance(info.value.__cause__, pl.exceptions.PolarsError)


def test_the_hinted_metadata_reads_work(cf: CognitionFrame) -> None:
    by_path = cf.filter(pl.col("metadata").str.json_path_match("$.conversation") == "c1")
    assert ids(by_path) == ids(cf.filter("metadata.conversation = 'c1'")) == ["q1", "a1"]
    # decoded to a struct first, struct access works
    dtype = pl.Struct({"conversation": pl.String, "turn": pl.Int64})
    decoded = cf.with_columns(pl.col("metadata").str.json_decode(dtype))
    assert ids(decoded.filter(_CONV == "c1")) == ["q1", "a1"]


def test_no_metadata_hint_for_other_polars_errors(cf: CognitionFrame) -> None:
    with pytest.raises(PlanError) as info:
        cf.filter(pl.col("priority") + 1)
    assert str(info.value) == (
        "Filter: InvalidOperationError: filter predicate must be of type `Boolean`, got `Int64`"
    )


def test_sql_metadata_needs_a_metadata_column(cf: CognitionFrame) -> None:
    with pytest.raises(PlanError, match="needs a 'metadata' column"):
        cf.select("id").filter("metadata.turn > 1")


# -- select, with_columns, join --------------------------------------------------------


def test_select_and_with_columns(cf: CognitionFrame) -> None:
    out = cf.select("id", double=pl.col("priority") * 2).collect()
    assert out.columns == ["id", "double"]
    assert out["double"].to_list() == [10, 2, 0, 4, 0]
    added = cf.with_columns(flag=True, p=pl.col("priority") - 1).collect()
    assert added.columns == [*COLUMNS, "flag", "p"]
    assert added["flag"].to_list() == [True] * 5
    assert added["p"].to_list() == [4, 0, -1, 1, -1]
    with pytest.raises(PlanError, match="nope"):
        cf.select("nope")
    with pytest.raises(PlanError, match="at least one"):
        cf.select()
    with pytest.raises(PlanError, match="nope"):
        cf.with_columns(pl.col("nope") + 1)
    with pytest.raises(PlanError, match="expressions or column names"):
        cf.select(3)  # type: ignore[arg-type]


def test_join_with_annotations_and_frames(cf: CognitionFrame) -> None:
    scores = pl.DataFrame({"id": ["doc", "q1", "zzz"], "score": [0.9, 0.4, 1.0]})
    out = cf.join(scores, on="id").select("id", "score").collect()
    assert out.rows() == [("q1", 0.4), ("doc", 0.9)]  # left order
    assert ids(cf.join(scores, on="id", how="left")) == ids(cf)
    assert ids(cf.join(scores, on="id", how="anti")) == ["sys", "a1", "tool"]
    assert ids(cf.join(scores, on="id", how="semi")) == ["q1", "doc"]
    users = cf.filter(pl.col("role") == "user")
    both = cf.join(users, on="id").collect()
    assert both["id"].to_list() == ["q1"]
    assert "role_right" in both.columns
    with pytest.raises(PlanError, match="unknown join strategy"):
        cf.join(scores, on="id", how="cross")
    with pytest.raises(PlanError, match="score"):
        cf.join(scores, on="score")
    with pytest.raises(PlanError, match="CognitionFrame or a Polars DataFrame"):
        cf.join([1, 2], on="id")  # type: ignore[arg-type]


# -- sort, limit, head -----------------------------------------------------------------


def test_sort_is_stable_and_takes_per_key_flags(cf: CognitionFrame) -> None:
    assert ids(cf.sort("priority")) == ["a1", "tool", "q1", "doc", "sys"]
    assert ids(cf.sort("priority", descending=True)) == ["sys", "doc", "q1", "a1", "tool"]
    assert ids(cf.sort("role", "priority", descending=[False, True])) == [
        "sys",
        "q1",
        "a1",
        "tool",
        "doc",
    ]
    assert ids(cf.sort(["role", "priority"])) == ids(cf.sort("role", "priority"))
    assert ids(cf.sort(pl.col("text").str.len_chars())) == ["tool", "a1", "sys", "q1", "doc"]


def test_sort_nulls(cf: CognitionFrame) -> None:
    ranked = cf.with_columns(
        rank=pl.when(pl.col("priority") > 0).then(pl.col("priority").cast(pl.Float64))
    )
    assert ids(ranked.sort("rank", descending=True)) == ["a1", "tool", "sys", "doc", "q1"]
    assert ids(ranked.sort("rank", descending=True, nulls_last=True)) == [
        "sys",
        "doc",
        "q1",
        "a1",
        "tool",
    ]


def test_bad_sorts_fail_at_the_call(cf: CognitionFrame) -> None:
    with pytest.raises(PlanError, match="nope"):
        cf.sort("nope")
    with pytest.raises(PlanError, match="one bool per sort key"):
        cf.sort("id", "role", descending=[True])
    with pytest.raises(PlanError, match="at least one key"):
        cf.sort([])


def test_limit_and_head(cf: CognitionFrame) -> None:
    assert ids(cf.limit(2)) == ["sys", "q1"]
    assert ids(cf.limit(2, offset=2)) == ["a1", "doc"]
    assert ids(cf.limit(10, offset=4)) == ["tool"]
    assert ids(cf.limit(0)) == []
    assert ids(cf.head(3)) == ["sys", "q1", "a1"]
    assert len(ids(cf.head())) == 5
    for bad in ({"n": -1}, {"n": 1, "offset": -1}, {"n": 1.5}):
        with pytest.raises(PlanError, match="non-negative"):
            cf.limit(**bad)


def test_sort_then_head_is_a_stable_top_k(cf: CognitionFrame) -> None:
    q = cf.sort("priority", descending=True).head(4)
    assert q.explain().splitlines()[0].startswith("TopK 4")
    assert ids(q) == ["sys", "doc", "q1", "a1"]  # a1 before tool: tie keeps input order


# -- dedupe ---------------------------------------------------------------------------


def test_dedupe_keeps_first_occurrence_in_order_and_merges_conservatively() -> None:
    items = [
        item(
            "x1",
            "same",
            priority=1,
            trust="trusted",
            sensitivity="public",
            sources=[{"uri": "https://a.org"}],
            parents=["p1"],
            expires_at=T0 + timedelta(days=9),
        ),
        item("y", "other"),
        item(
            "x2",
            "same",
            hours=1,
            priority=4,
            retention="required",
            sensitivity="confidential",
            sources=[{"uri": "https://b.org"}, {"uri": "https://a.org"}],
            parents=["p2"],
            expires_at=T0 + timedelta(days=3),
        ),
        item("x3", "same", hours=2, retention="preferred", valid_from=T0),
    ]
    frame = CognitionFrame(items)
    out = frame.dedupe().collect()
    assert out["id"].to_list() == ["x1", "y"]
    first = out.row(0, named=True)
    assert first["trust"] == "untrusted"
    assert first["sensitivity"] == "confidential"
    assert first["retention"] == "required"
    assert first["priority"] == 4
    assert first["expires_at"] == T0 + timedelta(days=3)
    assert first["valid_from"] == T0
    assert first["created_at"] == T0  # first occurrence's
    assert [s["uri"] for s in first["sources"]] == ["https://a.org", "https://b.org"]
    assert first["parents"] == ["p1", "p2"]
    assert out.row(1, named=True)["retention"] == "optional"  # untouched
    assert first["merged_ids"] == ["x2", "x3"]
    assert out.row(1, named=True)["merged_ids"] == []
    assert out.drop("merged_ids", "merge_conflicts").schema == POLARS_SCHEMA
    plain = frame.dedupe(merge=False).collect()
    assert plain["id"].to_list() == ["x1", "y"]
    assert plain.row(0, named=True)["retention"] == "optional"
    assert ids(frame.dedupe(by=["role"])) == ["x1"]
    with pytest.raises(PlanError, match="nope"):
        frame.dedupe(by="nope")


# -- rank ------------------------------------------------------------------------------


def test_bm25_puts_the_matching_document_first(cf: CognitionFrame) -> None:
    # no stemmer is installed: "refund" matches q1, "order" matches doc only
    ranked = cf.rank("bm25", query="refund window order").sort("rank", descending=True).collect()
    assert ranked["id"].to_list()[:2] == ["q1", "doc"]
    assert ranked.schema["rank"] == pl.Float64
    scores = dict(zip(ranked["id"], ranked["rank"], strict=True))
    assert scores["q1"] > scores["doc"] > 0.0
    assert scores["sys"] == scores["a1"] == scores["tool"] == 0.0


def test_bm25_scores_the_packed_text_of_every_payload_kind() -> None:
    frame = CognitionFrame(
        [
            item("t", "alpha text"),
            item("j", payload={"kind": "json", "value": {"zebra": "giraffe"}}),
            item("r", payload={"kind": "reference", "uri": "https://x.org/p", "title": "Okapi"}),
            item("b", payload={"kind": "binary", "data": b"okapi giraffe"}),
        ]
    )
    by_id = dict(frame.rank("bm25", query="giraffe okapi").select("id", "rank").collect().rows())
    assert by_id["j"] > 0
    assert by_id["r"] > 0
    assert by_id["t"] == 0.0
    assert by_id["b"] == 0.0


def test_bm25_corpus_is_exactly_the_rows_reaching_it(cf: CognitionFrame) -> None:
    query = "refund order"
    kept = cf.filter(pl.col("role") != "system")
    got = kept.rank("bm25", query=query).collect()["rank"].to_numpy()
    texts = [
        i.payload.text if i.payload.kind == "text" else '{"status":"ok"}'
        for i in ITEMS
        if i.role != "system"
    ]
    assert np.allclose(got, bm25_scores(texts, query))
    # a filter after the rank never moves below it: scores stay those of all rows
    after = cf.rank("bm25", query=query).filter(pl.col("role") != "system")
    assert "Rank" in after.explain().splitlines()[1]
    full = cf.rank("bm25", query=query).collect()["rank"].to_list()[1:]
    assert after.collect()["rank"].to_list() == full


def test_bm25_index_is_cached_per_scope(cf: CognitionFrame) -> None:
    bm25_cache_clear()
    first = cf.rank("bm25", query="refund").collect()
    info = bm25_cache_info()
    assert (info.hits, info.misses, info.currsize) == (0, 1, 1)
    again = cf.rank("bm25", query="refund").collect()
    assert bm25_cache_info().hits == 1
    assert_frame_equal(first, again)
    cf.rank("bm25", query="order window").collect()  # same scope, new query: no re-index
    assert (bm25_cache_info().hits, bm25_cache_info().misses) == (2, 1)
    cf.limit(3).rank("bm25", query="refund").collect()  # another scope
    assert bm25_cache_info().misses == 2


def test_bm25_with_no_query_terms_left_scores_zero(cf: CognitionFrame) -> None:
    assert cf.rank("bm25", query="the and of").collect()["rank"].to_list() == [0.0] * 5
    assert CognitionFrame([]).rank("bm25", query="x").collect().height == 0


def test_recency_orders_newest_first(cf: CognitionFrame) -> None:
    ranked = cf.rank("recency", half_life=timedelta(hours=1)).collect()
    assert ranked["rank"].to_list() == pytest.approx([1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0])
    newest = cf.rank("recency", half_life=3600).sort("rank", descending=True)
    assert ids(newest) == ["tool", "doc", "a1", "q1", "sys"]
    epoch = cf.rank("recency").collect()["rank"].to_list()
    assert epoch[0] == T0.timestamp()
    assert epoch == sorted(epoch)


def test_a_reference_time_outside_the_years_1_to_9999_utc_is_a_plan_error(
    cf: CognitionFrame,
) -> None:
    early = datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    with pytest.raises(PlanError, match="reference must fall in the years 1 to 9999 UTC"):
        cf.rank("recency", half_life=3600, reference=early)


def test_recency_reference_time(cf: CognitionFrame) -> None:
    ref = T0 + timedelta(hours=6)
    ranked = cf.rank("recency", half_life=7200, reference=ref).collect()["rank"].to_list()
    assert ranked == pytest.approx([2 ** -(age / 2) for age in (6, 5, 4, 3, 2)])
    # the default reference is the newest row reaching the node
    late = cf.limit(2).rank("recency", half_life=3600).collect()["rank"].to_list()
    assert late == pytest.approx([0.5, 1.0])


def test_priority_rank(cf: CognitionFrame) -> None:
    assert cf.rank("priority").collect()["rank"].to_list() == [5.0, 1.0, 0.0, 2.0, 0.0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cosine",), "unknown rank method"),
        (("bm25",), "non-empty query"),
        (("recency",), None),
    ],
)
def test_rank_arguments(cf: CognitionFrame, args: tuple[str], message: str | None) -> None:
    if message is None:
        cf.rank(*args)
    else:
        with pytest.raises(PlanError, match=message):
            cf.rank(*args)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "recency", "half_life": -5}, "positive"),
        ({"method": "recency", "half_life": timedelta(0)}, "positive"),
        ({"method": "recency", "half_life": "1h"}, "seconds or a timedelta"),
        ({"method": "recency", "reference": datetime(2024, 1, 1)}, "timezone"),
        ({"method": "priority", "query": "x"}, "takes no query"),
        ({"method": "bm25", "query": "x", "half_life": 5}, "takes no half_life"),
    ],
)
def test_bad_ranks_fail_at_the_call(
    cf: CognitionFrame, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        cf.rank(**kwargs)


def test_rank_needs_its_columns(cf: CognitionFrame) -> None:
    with pytest.raises(PlanError, match="needs columns"):
        cf.select("id", "priority").rank("bm25", query="x")
    assert cf.select("id", "priority").rank("priority").columns == ["id", "priority", "rank"]


# -- explain, lazy, collect, group_by, repr, pack -----------------------------------------


def test_explain_shows_logical_and_optimized_plans(cf: CognitionFrame) -> None:
    q = (
        cf.filter("role = 'user'")
        .sort("created_at", descending=True)
        .filter(pl.col("priority") > 0)
        .limit(3)
        .select("id", "text")
    )
    assert q.explain(optimized=False).splitlines() == [
        'Select col("id"), col("text")',
        "  Limit 3",
        '    Filter [(col("priority")) > (dyn int: 0)]',
        '      Sort by col("created_at") desc',
        '        Filter [(col("role")) == ("user")]',
        "          Scan 5 rows; 23 columns",
    ]
    assert q.explain().splitlines() == [
        'Select col("id"), col("text")',
        '  TopK 3 by col("created_at") desc',
        '    Filter [([(col("role")) == ("user")]) & ([(col("priority")) > (dyn int: 0)])]',
        "      Scan 5 rows; columns [id, role, text, priority, created_at]",
    ]
    assert q.explain(optimizations=OptFlags.none()) == q.explain(optimized=False)
    assert ids(q) == ["q1"]


def test_lazy_and_collect(cf: CognitionFrame) -> None:
    q = cf.sort("priority").filter(pl.col("priority") > 0)
    assert isinstance(q.lazy(), pl.LazyFrame)
    assert_frame_equal(q.lazy().collect(), q.lazy(optimized=False).collect())
    assert_frame_equal(q.collect(), q.collect(OptFlags.none()))
    assert ids(q) == ["q1", "doc", "sys"]


def test_group_by_agg_is_eager(cf: CognitionFrame) -> None:
    out = cf.group_by("role").agg(pl.len().alias("n"), top=pl.col("priority").max())
    assert out.rows() == [
        ("system", 1, 5),
        ("user", 1, 1),
        ("assistant", 1, 0),
        ("document", 1, 2),
        ("tool", 1, 0),
    ]
    by_conv = cf.group_by(pl.col("metadata").str.json_path_match("$.conversation")).agg("id")
    assert by_conv.rows() == [(None, ["sys"]), ("c1", ["q1", "a1"]), ("c2", ["doc", "tool"])]
    with pytest.raises(PlanError, match="at least one key"):
        cf.group_by()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda f: f.group_by("nope"), r"group_by: unknown column 'nope'"),
        (lambda f: f.group_by("rol"), r"did you mean 'role'"),
        (lambda f: f.group_by(pl.col("nope")), r"group_by: ColumnNotFoundError.*nope"),
        (lambda f: f.group_by("role", 3), r"group_by takes Polars expressions"),
        (lambda f: f.group_by("role").agg(pl.col("nope").sum()), r"agg: ColumnNotFound.*nope"),
        (lambda f: f.group_by("role").agg(n=pl.col("text") + 1), r"agg: InvalidOperationError"),
        (lambda f: f.group_by("role").agg(3), r"agg takes Polars expressions"),
        (lambda f: f.group_by("role").agg(n=3), r"agg takes Polars expressions"),
    ],
)
def test_group_by_refuses_what_does_not_resolve_before_running(
    cf: CognitionFrame, call: Callable[[CognitionFrame], Any], match: str
) -> None:
    with pytest.raises(PlanError, match=match):
        call(cf)


def test_repr_is_brief(cf: CognitionFrame) -> None:
    text = repr(cf.filter(pl.col("priority") > 0).limit(2))
    assert text == "<CognitionFrame: Limit 2 (3 plan steps); 23 columns>"


def test_pack_collects_and_delegates(cf: CognitionFrame, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[pl.DataFrame, int, PackOptions, dict[str, Any]]] = []

    def fake_pack(df: pl.DataFrame, budget: int, options: PackOptions, **kwargs: Any) -> str:
        calls.append((df, budget, options, kwargs))
        return "packed"

    monkeypatch.setattr(cognoxium.packing.planned, "pack", fake_pack)
    as_of = datetime(2024, 6, 1, tzinfo=UTC)
    out = cf.filter(pl.col("priority") > 0).pack(100, as_of=as_of, label="r1", reserve=16)
    assert out == "packed"
    ((df, budget, options, kwargs),) = calls
    assert df["id"].to_list() == ["sys", "q1", "doc"]
    assert budget == 100
    assert options == PackOptions(as_of=as_of, reserve=16)
    assert kwargs == {"label": "r1", "policy": None}


@pytest.mark.parametrize(
    ("narrow", "kept"),
    [
        (lambda f: f.select("id", "role"), ["id", "role"]),
        (lambda f: f.select(pl.all().exclude("metadata", "priority")), None),
        (lambda f: f.select("id", "role", score=pl.col("priority") * 2), ["id", "role"]),
    ],
)
@pytest.mark.parametrize("what", ["pack", "to_items", "to_records", "to_arrow"])
def test_pack_and_item_exports_need_the_item_columns(
    cf: CognitionFrame, monkeypatch: pytest.MonkeyPatch, narrow: Any, kept: Any, what: str
) -> None:
    frame = narrow(cf)
    kept = kept if kept is not None else [c for c in COLUMNS if c not in ("metadata", "priority")]
    missing = [c for c in COLUMNS if c not in kept]

    def no_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the plan ran before its columns were checked")

    monkeypatch.setattr(CognitionFrame, "collect", no_run)
    monkeypatch.setattr(cognoxium.packing.packer, "pack", no_run)
    call = {
        "pack": lambda: frame.pack(100, as_of=T0),
        "to_items": frame.to_items,
        "to_records": frame.to_records,
        "to_arrow": frame.to_arrow,
    }[what]
    with pytest.raises(SchemaError) as info:
        call()
    assert str(info.value) == (
        f"{what} needs the item columns; the frame lacks {missing}: select them back, "
        "or use with_columns instead of select to add columns"
    )


def test_pack_carries_columns_added_with_with_columns(cf: CognitionFrame) -> None:
    packed = cf.with_columns(score=pl.col("priority") * 2).pack(10_000, as_of=T0 + timedelta(1))
    assert packed.ids == ["sys", "q1", "a1", "doc", "tool"]


def test_pack_end_to_end(cf: CognitionFrame) -> None:
    packed = cf.rank("bm25", query="refund window").pack(
        10_000, as_of=datetime(2024, 6, 1, tzinfo=UTC)
    )
    assert packed.ids == ["sys", "q1", "a1", "doc", "tool"]


def test_recency_half_life_matches_formula() -> None:
    frame = CognitionFrame([item("old", hours=0), item("new", hours=10)])
    got = frame.rank("recency", half_life=36000.0).collect()["rank"].to_list()
    assert got == pytest.approx([math.exp(-math.log(2)), 1.0])


def test_replacing_payload_recomputes_the_content_hash() -> None:
    """A projection that writes a payload column gives the item the hash of its new content."""
    base = CognitionFrame([{"id": "a", "role": "user", "text": "hi"}])
    fresh = CognitionFrame([{"id": "a", "role": "user", "text": "word " * 300}])
    want = fresh.collect()["content_hash"].item()
    assert base.pack(10_000).used_tokens < 20
    replaced = [
        base.with_columns(text=pl.lit("word " * 300)),
        base.with_columns(pl.lit("word " * 300).alias("text")),
        base.select(pl.all().exclude("text"), text=pl.lit("word " * 300)),
    ]
    for frame in replaced:
        assert frame.collect()["content_hash"].item() == want
        # The token cache is keyed by content hash: the new text is counted.
        assert frame.pack(10_000).used_tokens == fresh.pack(10_000).used_tokens
    # Projections that leave the payload alone keep their plan as written.
    kept = base.with_columns(priority=pl.lit(3))
    assert "content_hash" not in kept.explain()
    assert "content_hash" not in base.select("id", "text").explain()
    assert base.with_columns(pl.col("text")).collect()["content_hash"].item() == (
        base.collect()["content_hash"].item()
    )


def test_a_frame_does_not_change_when_the_polars_frame_it_was_built_from_is_written() -> None:
    df = records_to_frame([{"id": "a", "role": "user", "text": "hi"}])
    scores = pl.DataFrame({"id": ["a"], "score": [0.5]})
    frames = [
        CognitionFrame.from_conformed(df),
        CognitionFrame.from_conformed(df).join(scores, on="id"),
        CognitionFrame(df),
        CognitionFrame.from_polars(df),
    ]
    before = [f.collect() for f in frames]
    df[0, "text"] = "changed after the frame was built"
    scores[0, "score"] = 0.9
    for frame, rows in zip(frames, before, strict=True):
        assert frame.collect().equals(rows)
    pack = frames[0].pack(100, as_of=datetime(2025, 1, 1, tzinfo=UTC))
    assert pack.messages == [{"role": "user", "content": "hi"}]


def test_a_keyword_string_names_a_column_as_in_polars() -> None:
    cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi"}])
    polars = cf.collect().lazy()
    assert cf.select("id", speaker="role").collect().rows() == [("a", "user")]
    assert polars.select("id", speaker="role").collect().rows() == [("a", "user")]
    assert cf.with_columns(body="text", n=2).select("body", "n").collect().rows() == [("hi", 2)]
    with pytest.raises(PlanError, match="nope"):
        cf.select(x="nope")


def test_counts_keys_and_queries_are_taken_as_polars_takes_them_or_named_when_refused() -> None:
    cf = CognitionFrame(
        [
            {"id": i, "role": "user", "text": i, "priority": p}
            for i, p in zip("abc", [1, 2, 1], strict=True)
        ]
    )
    ids = lambda frame: frame.collect().get_column("id").to_list()  # noqa: E731
    assert ids(cf.head(np.int64(2))) == ids(cf.limit(np.int32(2), offset=np.int8(0))) == ["a", "b"]
    assert ids(cf.tail(np.uint8(1))) == ["c"]
    assert ids(cf.slice(np.int64(-2), np.int64(1))) == ["b"]
    assert ids(cf.top_k(np.int64(1), by="priority")) == ["b"]
    grouped = cf.group_by(["role", "priority"]).agg([pl.len(), pl.col("id")])
    assert grouped.rows() == [("user", 1, 2, ["a", "c"]), ("user", 2, 1, ["b"])]
    refused = {
        "slice length must be a non-negative whole number, got -1": lambda: cf.slice(1, -1),
        "head n must be a non-negative whole number, got 2.0": lambda: cf.head(2.0),  # type: ignore[arg-type]
        "limit n must be a non-negative whole number, got True": lambda: cf.limit(True),
        "join on takes column names (a name or a list of names), got a Polars expression": (
            lambda: cf.join(cf, on=pl.col("id"))  # type: ignore[arg-type]
        ),
        "rank('bm25') takes the query as a string, got int 5": (
            lambda: cf.rank("bm25", query=5)  # type: ignore[arg-type]
        ),
    }
    for message, call in refused.items():
        with pytest.raises(PlanError) as caught:
            call()
        assert str(caught.value).startswith(message), caught.value


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda f: f.filter(pl.col("priority") == "x"), "Filter: .*cannot compare string"),
        (
            lambda f: f.with_columns(n=pl.col("priority").str.len_chars()),
            "WithColumns: .*expected `String`, got `i64`",
        ),
        (lambda f: f.select(x=pl.col("text").dt.year()), "Select: .*not supported for dtype `str`"),
        (lambda f: f.sort(pl.col("text").dt.year()), "Sort: .*not supported for dtype `str`"),
        (lambda f: f.quarantine(pl.col("priority") == "x"), "Quarantine: .*cannot compare"),
        (lambda f: f.demote(pl.col("priority") == "x", priority_delta=-1), "Demote: .*compare"),
    ],
)
def test_a_type_mismatch_in_an_expression_fails_when_the_node_is_built(
    build: Callable[[CognitionFrame], CognitionFrame], message: str
) -> None:
    frame = CognitionFrame([{"id": "a", "role": "user", "text": "hi", "priority": 1}])
    with pytest.raises(PlanError, match=message):
        build(frame)


def test_what_depends_on_the_rows_is_left_to_the_run() -> None:
    frame = CognitionFrame([{"id": "a", "role": "user", "text": "hi", "priority": 1}])
    gathered = frame.with_columns(first=pl.col("text").gather(0), one=pl.lit(pl.Series([7])))
    assert gathered.select("first", "one").collect().rows() == [("hi", 7)]
    udf = frame.with_columns(x=pl.col("text").map_batches(lambda s: s[0:1]))
    assert udf.select("x").collect().rows() == [("hi",)]
    cast = frame.with_columns(n=pl.col("text").cast(pl.Int64))  # built: a value error
    with pytest.raises(pl.exceptions.InvalidOperationError):
        cast.collect()
