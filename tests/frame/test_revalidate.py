"""Rows a step computed are checked as the readers check them before a pack or a file.

A frame read from a source holds valid items, and filters, sorts, limits and
ranks keep them valid; ``with_columns``, ``select`` and ``join`` can write any
value. :meth:`CognitionFrame.pack`, :meth:`~CognitionFrame.sink_parquet`,
:meth:`~CognitionFrame.to_items` and :meth:`~CognitionFrame.to_records` of
such a frame raise the readers' :class:`RecordError` at the first invalid
row, and write nothing; frames without such a step skip the check.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cognoxium.engine import execute as execute_module
from cognoxium.engine.plan import changes_item_values
from cognoxium.exceptions import RankError, RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.io import read_parquet
from cognoxium.items.schema import COLUMNS, POLARS_SCHEMA
from cognoxium.items.validation import check_items
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.testing import assert_pack_equal

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample" / "items.jsonl"
WHEN = datetime(2026, 1, 1, tzinfo=UTC)
_KIND = POLARS_SCHEMA["payload_kind"]

# (name, columns written, row, field, message start)
FAULTS: list[tuple[str, dict[str, Any], int, str, str]] = [
    (
        "text left null",
        {"text": pl.when(pl.col("role") == "user").then(pl.col("text").str.to_uppercase())},
        0,
        "text",
        "a text payload needs a value in column 'text'",
    ),
    ("null id", {"id": pl.lit(None, pl.String)}, 0, "id", "must not be null"),
    ("metadata NaN", {"metadata": pl.lit('{"x": NaN}')}, 0, "metadata", "invalid JSON"),
    ("metadata not JSON", {"metadata": pl.lit("{bad")}, 0, "metadata", "invalid JSON"),
    (
        "json not JSON",
        {"json": pl.when(pl.col("payload_kind") == "json").then(pl.lit("{bad"))},
        32,
        "json",
        "invalid JSON",
    ),
    (
        "payload_kind overwritten",
        {"payload_kind": pl.lit("json").cast(_KIND)},
        0,
        "text",
        "column 'text' must be null unless payload_kind is 'text'",
    ),
    ("null sources", {"sources": pl.lit(None, POLARS_SCHEMA["sources"])}, 0, "sources", "must"),
    ("null parents", {"parents": pl.lit(None, POLARS_SCHEMA["parents"])}, 0, "parents", "must"),
    ("null lineage", {"lineage": pl.lit(None, POLARS_SCHEMA["lineage"])}, 0, "lineage", "must"),
    (
        "expires before created",
        {"expires_at": pl.col("created_at") - pl.duration(days=1)},
        0,
        "expires_at",
        "must not be before created_at",
    ),
    (
        "id ending in a newline",
        {"id": pl.col("id") + "\n"},
        0,
        "id",
        "must not hold control characters",
    ),
    (
        "content_hash zeros",
        {"content_hash": pl.lit("0" * 64)},
        0,
        "content_hash",
        f"content_hash '{'0' * 64}' does not match the payload",
    ),
    ("duplicate id", {"id": pl.lit("x")}, 1, "id", "duplicate id 'x' (first at row 0)"),
    ("null role", {"role": pl.lit(None, POLARS_SCHEMA["role"])}, 0, "role", "must be one of"),
    (
        "null created_at",
        {"created_at": pl.lit(None, POLARS_SCHEMA["created_at"])},
        0,
        "created_at",
        "must not be null",
    ),
]
_IDS = [fault[0] for fault in FAULTS]


@pytest.fixture(scope="module")
def sample() -> CognitionFrame:
    return CognitionFrame.read_jsonl(SAMPLE)


def _assert_error(
    info: pytest.ExceptionInfo[RecordError], row: int, field: str, message: str
) -> None:
    assert (info.value.row, info.value.field) == (row, field)
    assert info.value.message.startswith(message), info.value.message


@pytest.mark.parametrize(("name", "columns", "row", "field", "message"), FAULTS, ids=_IDS)
def test_pack_refuses_a_computed_invalid_row(
    sample: CognitionFrame, name: str, columns: dict[str, Any], row: int, field: str, message: str
) -> None:
    with pytest.raises(RecordError) as info:
        sample.with_columns(**columns).pack(512, as_of=WHEN)
    _assert_error(info, row, field, message)


@pytest.mark.parametrize(("name", "columns", "row", "field", "message"), FAULTS, ids=_IDS)
def test_sink_parquet_refuses_a_computed_invalid_row_and_writes_nothing(
    sample: CognitionFrame,
    tmp_path: Path,
    name: str,
    columns: dict[str, Any],
    row: int,
    field: str,
    message: str,
) -> None:
    target = tmp_path / "items.parquet"
    with pytest.raises(RecordError) as info:
        sample.with_columns(**columns).sink_parquet(target)
    _assert_error(info, row, field, message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "columns", "row", "field", "message"), FAULTS, ids=_IDS)
def test_to_items_and_to_records_refuse_a_computed_invalid_row(
    sample: CognitionFrame, name: str, columns: dict[str, Any], row: int, field: str, message: str
) -> None:
    changed = sample.with_columns(**columns)
    for export in (changed.to_items, changed.to_records):
        with pytest.raises(RecordError) as info:
            export()
        _assert_error(info, row, field, message)


def test_a_text_left_null_no_longer_empties_the_system_prompt(sample: CognitionFrame) -> None:
    upper = pl.when(pl.col("role") == "user").then(pl.col("text").str.to_uppercase())
    with pytest.raises(RecordError) as info:
        sample.with_columns(text=upper).pack(512, as_of=WHEN)
    assert str(info.value) == ("row 0: field text: a text payload needs a value in column 'text'")
    # Written for every row, the same change is valid and packs the new text.
    kept = pl.when(pl.col("role") == "user").then(pl.col("text").str.to_uppercase())
    whole = sample.with_columns(text=kept.otherwise(pl.col("text")))
    messages = whole.pack(512, as_of=WHEN).messages
    assert messages[0] == {"role": "system", "content": sample.collect()["text"][0]}


def test_a_join_that_repeats_ids_is_refused(sample: CognitionFrame, tmp_path: Path) -> None:
    twice = pl.DataFrame({"id": ["policy", "policy"], "score": [1.0, 2.0]})
    joined = sample.join(twice, on="id").drop("score")
    for run in (lambda: joined.pack(512, as_of=WHEN), joined.to_items):
        with pytest.raises(RecordError) as info:
            run()
        assert (info.value.row, info.value.field) == (1, "id")
    with pytest.raises(RecordError):
        joined.sink_parquet(tmp_path / "out.parquet")
    assert list(tmp_path.iterdir()) == []


def test_zeroed_content_hashes_are_refused_before_dedupe_merges(sample: CognitionFrame) -> None:
    zeroed = sample.with_columns(content_hash=pl.lit("0" * 64)).dedupe()
    with pytest.raises(RecordError) as info:
        zeroed.pack(512, as_of=WHEN)
    assert info.value.field == "content_hash"


def test_metadata_that_is_not_json_is_a_record_error_not_a_json_error(
    sample: CognitionFrame,
) -> None:
    with pytest.raises(RecordError) as info:
        sample.with_columns(metadata=pl.lit("{bad")).pack(512, as_of=WHEN)
    assert (info.value.row, info.value.field) == (0, "metadata")


def test_a_nan_rank_still_packs_as_unranked(sample: CognitionFrame) -> None:
    ranked = sample.with_columns(rank=pl.lit(float("nan")))
    nan = ranked.pack(512, as_of=WHEN)
    null = sample.with_columns(rank=pl.lit(None, pl.Float64)).pack(512, as_of=WHEN)
    assert nan.messages == null.messages
    # The rows reach the packer as they are, NaN ranks included.
    assert_pack_equal(nan, pack(ranked.collect(), 512, PackOptions(as_of=WHEN)))


def test_an_infinite_rank_is_refused_by_the_pack_as_before(sample: CognitionFrame) -> None:
    with pytest.raises(RankError, match="has rank inf"):
        sample.with_columns(rank=pl.lit(float("inf"))).pack(512, as_of=WHEN)


@pytest.mark.parametrize("rank", [float("nan"), float("inf"), float("-inf")])
def test_sink_parquet_refuses_ranks_its_readers_refuse(
    sample: CognitionFrame, tmp_path: Path, rank: float
) -> None:
    with pytest.raises(RecordError) as info:
        sample.with_columns(rank=pl.lit(rank)).sink_parquet(tmp_path / "out.parquet")
    assert (info.value.row, info.value.field) == (0, "rank")
    assert info.value.message == "must be a finite number (NaN and infinity are refused)"
    assert list(tmp_path.iterdir()) == []


def test_sink_parquet_refuses_columns_beyond_the_item_columns(
    sample: CognitionFrame, tmp_path: Path
) -> None:
    with pytest.raises(SchemaError, match=r"columns \['score'\] are not item columns"):
        sample.with_columns(score=pl.lit(1.0)).sink_parquet(tmp_path / "out.parquet")
    assert list(tmp_path.iterdir()) == []
    # Dropped again, the rows are written and read back.
    out = tmp_path / "out.parquet"
    sample.with_columns(score=pl.lit(1.0)).drop("score").sink_parquet(out)
    assert read_parquet(out).equals(sample.collect())


def test_a_valid_computed_frame_is_written_and_read_back(
    sample: CognitionFrame, tmp_path: Path
) -> None:
    changed = sample.with_columns(
        priority=pl.col("priority") + 1, metadata=pl.lit('{"b": 1, "a": 2}')
    )
    out = tmp_path / "out.parquet"
    changed.sink_parquet(out)
    back = read_parquet(out)
    assert back["metadata"].unique().to_list() == ['{"a":2,"b":1}']
    assert back["priority"].to_list() == [p + 1 for p in sample.collect()["priority"]]
    assert CognitionFrame.scan_parquet(out).collect().equals(back)


def test_check_items_keeps_extra_columns_and_a_nan_rank_when_asked() -> None:
    rows = CognitionFrame.read_jsonl(SAMPLE).collect().head(2)
    rows = rows.with_columns(rank=pl.Series([float("nan"), 1.0]), score=pl.lit(3))
    checked = check_items(rows, finite_rank=False)
    assert checked.columns == [*COLUMNS, "score"]
    assert checked["rank"].is_nan().to_list() == [True, False]
    with pytest.raises(RecordError, match="must be a finite number"):
        check_items(rows)


# ---------------------------------------------------------------------------
# frames that no step changed skip the check


def test_the_plan_predicate_marks_only_steps_that_compute_values(
    sample: CognitionFrame,
) -> None:
    kept = [
        sample,
        sample.filter(pl.col("role") == "user").sort("priority").head(5),
        sample.rank("bm25", query="refund"),
        sample.select(*COLUMNS),
        sample.drop("group_id", "metadata").with_columns(pl.col("id")),
        sample.join(sample.select("id").head(3), on="id", how="semi"),
    ]
    assert [changes_item_values(cf._plan) for cf in kept] == [False] * len(kept)
    changed = [
        sample.with_columns(priority=pl.lit(1)),
        sample.select(*COLUMNS[:-1], pl.lit("{}").alias("metadata")),
        sample.rename({"text": "ref_title", "ref_title": "text"}),
        sample.join(pl.DataFrame({"id": ["policy"], "score": [1.0]}), on="id", how="left"),
    ]
    assert [changes_item_values(cf._plan) for cf in changed] == [True] * len(changed)


def test_a_frame_from_a_reader_packs_without_the_extra_check(
    sample: CognitionFrame, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[int] = []

    def counted(df: pl.DataFrame, *, finite_rank: bool = True) -> pl.DataFrame:
        calls.append(df.height)
        return check_items(df, finite_rank=finite_rank)

    monkeypatch.setattr(execute_module, "check_items", counted)
    sample.pack(512, as_of=WHEN)
    sample.rank("bm25", query="refund").pack(512, as_of=WHEN)
    sample.filter(pl.col("role") != "tool").sort("priority").pack(512, as_of=WHEN)
    sample.sink_parquet(tmp_path / "a.parquet")
    sample.to_items()
    assert calls == []
    sample.with_columns(priority=pl.col("priority") + 1).pack(512, as_of=WHEN)
    assert calls == [sample.count()]


def test_sink_parquet_refuses_a_nan_score_of_a_rank_step(
    sample: CognitionFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cognoxium.retrieval import ranking

    out = tmp_path / "ranked.parquet"
    sample.rank("recency").sink_parquet(out)
    assert read_parquet(out)["rank"].is_finite().all()
    out.unlink()

    def unscored(**_: Any) -> pl.Expr:
        return pl.when(pl.int_range(pl.len()) == 3).then(float("nan")).otherwise(1.0).alias("rank")

    monkeypatch.setattr(ranking, "recency_expr", unscored)
    ranked = sample.rank("recency")
    assert not changes_item_values(ranked._plan)
    assert ranked.collect()["rank"].is_nan().sum() == 1  # a pack reads it as unranked
    with pytest.raises(RecordError) as info:
        ranked.sink_parquet(out)
    assert (info.value.row, info.value.field) == (3, "rank")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("column", ["sources", "parents", "lineage"])
def test_readers_read_a_null_list_as_empty_as_the_record_reader_does(
    sample: CognitionFrame, tmp_path: Path, column: str
) -> None:
    raw = sample.collect().with_columns(pl.lit(None, POLARS_SCHEMA[column]).alias(column))
    path = tmp_path / "raw.parquet"
    raw.write_parquet(path)
    empty = sample.collect().with_columns(pl.lit([], POLARS_SCHEMA[column]).alias(column))
    assert_frame_equal(read_parquet(path), empty)
    scanned = CognitionFrame.scan_parquet(path).select("id", column).collect()
    assert_frame_equal(scanned, empty.select("id", column))
