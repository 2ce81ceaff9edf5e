"""Lazy scans: scan_parquet (file, glob, hive directory), scan_ndjson, lazy from_polars and
sink_parquet; what a scan reads, and the validation of what it reads."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cognoxium.exceptions import PlanError, RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.convert import items_to_frame
from cognoxium.items.io import read_parquet, write_jsonl, write_parquet
from cognoxium.items.model import ContextItem
from cognoxium.items.records import records_to_frame
from cognoxium.items.scan import FILE_COLUMN, ROWS_ONLY
from cognoxium.items.schema import COLUMNS, POLARS_SCHEMA
from cognoxium.testing.strategies import items_strategy

AS_OF = datetime(2025, 1, 1, tzinfo=UTC)
SCOPES = ("s0", "s1", "s2", "s3")
PER_SCOPE = 25


def records(scope: str, n: int = PER_SCOPE) -> list[dict[str, object]]:
    return [
        {
            "id": f"{scope}-{i}",
            "role": "user" if i % 2 else "assistant",
            "text": f"turn {i} of {scope}",
            "priority": i % 5,
            "created_at": f"2024-05-01T10:{i % 60:02d}:00Z",
            "metadata": {"topic": "refund" if i % 3 == 0 else "shipping"},
        }
        for i in range(n)
    ]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A hive-partitioned store: scope=<id>/part.parquet, PER_SCOPE items each."""
    root = tmp_path / "store"
    for scope in SCOPES:
        write_parquet(records_to_frame(records(scope)), root / f"scope={scope}" / "part.parquet")
    return root


@pytest.fixture
def one_file(tmp_path: Path) -> Path:
    path = tmp_path / "items.parquet"
    write_parquet(records_to_frame(records("a", 40)), path)
    return path


def raw_frame(scope: str = "a", n: int = 6) -> pl.DataFrame:
    """Items in the canonical types, as a Polars frame whose values can then be broken."""
    return records_to_frame(records(scope, n))


# ---------------------------------------------------------------------------
# equality with the eager readers


def test_scanned_file_collects_to_the_frame_read_parquet_gives(one_file: Path) -> None:
    scanned = CognitionFrame.scan_parquet(one_file)
    read = CognitionFrame.read_parquet(one_file)
    assert_frame_equal(scanned.collect(), read.collect())
    assert scanned.schema == read.schema == POLARS_SCHEMA


def test_scanned_queries_equal_the_same_queries_over_the_read_frame(one_file: Path) -> None:
    scanned = CognitionFrame.scan_parquet(one_file)
    read = CognitionFrame.read_parquet(one_file)
    for query in (
        lambda cf: cf.filter(pl.col("priority") > 2).select("id", "priority"),
        lambda cf: cf.filter("metadata.topic = 'refund'").sort("id").limit(3),
        lambda cf: cf.rank("bm25", query="turn 7").sort("rank", descending=True).head(4),
    ):
        assert_frame_equal(query(scanned).collect(), query(read).collect())
    assert scanned.filter(pl.col("role") == "user").count() == 20


def test_pack_of_a_scanned_file_equals_pack_of_the_read_file(one_file: Path) -> None:
    scanned = CognitionFrame.scan_parquet(one_file).pack(60, as_of=AS_OF)
    read = CognitionFrame.read_parquet(one_file).pack(60, as_of=AS_OF)
    assert scanned.manifest.to_json() == read.manifest.to_json()
    assert 0 < scanned.manifest.totals.included < 40


def test_scanned_ndjson_equals_read_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_jsonl(records_to_frame(records("a", 12)), path)
    scanned = CognitionFrame.scan_ndjson(path)
    assert_frame_equal(scanned.collect(), CognitionFrame.read_jsonl(path).collect())
    assert scanned.filter(pl.col("priority") == 0).select("id").collect()["id"].to_list() == [
        "a-0",
        "a-5",
        "a-10",
    ]
    (read,) = scanned.read_statistics()
    assert read.files == (str(path),)
    assert read.rows == 3


def test_ndjson_directory_and_glob_read_every_file_in_path_order(tmp_path: Path) -> None:
    for scope in ("s1", "s0"):
        write_jsonl(records_to_frame(records(scope, 3)), tmp_path / f"{scope}.jsonl")
    ids = [f"s{s}-{i}" for s in (0, 1) for i in range(3)]
    for source in (tmp_path, tmp_path / "*.jsonl"):
        cf = CognitionFrame.scan_ndjson(source)
        assert cf.collect()["id"].to_list() == ids
        assert len(cf.read_statistics()[0].files) == 2


# ---------------------------------------------------------------------------
# what is read


def test_a_scope_filter_on_a_hive_store_reads_only_that_scope_file(store: Path) -> None:
    cf = CognitionFrame.scan_parquet(store)
    assert cf.columns == [*COLUMNS, "scope"]
    scoped = cf.filter(pl.col("scope") == "s2")
    pack = scoped.pack(10_000, as_of=AS_OF)
    assert pack.manifest.totals.included == PER_SCOPE
    (read,) = scoped.read_statistics()
    assert read.files == (str(store / "scope=s2" / "part.parquet"),)
    assert read.rows == PER_SCOPE
    assert read.predicate is not None
    assert "s2" in read.predicate


def test_the_whole_store_reads_every_file(store: Path) -> None:
    cf = CognitionFrame.scan_parquet(store)
    assert cf.count() == len(SCOPES) * PER_SCOPE
    (read,) = cf.read_statistics()
    assert len(read.files) == len(SCOPES)
    assert read.predicate is None


def test_a_predicate_and_a_projection_go_into_the_scan(store: Path) -> None:
    cf = CognitionFrame.scan_parquet(store)
    out = cf.filter(pl.col("priority") == 4).select("id").collect()
    (read,) = cf.read_statistics()
    assert out.height == read.rows == len(SCOPES) * 5  # not the 100 rows stored
    assert set(read.columns) == {"id", "priority"}


def test_a_limit_stops_the_scan_early(one_file: Path) -> None:
    cf = CognitionFrame.scan_parquet(one_file)
    assert cf.head(3).collect()["id"].to_list() == ["a-0", "a-1", "a-2"]
    assert cf.read_statistics()[0].rows == 3


def test_a_glob_scans_the_matching_files(store: Path) -> None:
    cf = CognitionFrame.scan_parquet(store / "scope=s[01]" / "*.parquet", hive_partitioning=False)
    assert cf.columns == list(COLUMNS)
    assert cf.count() == 2 * PER_SCOPE
    assert len(cf.read_statistics()[0].files) == 2


def test_explain_shows_the_scan_source(store: Path) -> None:
    plan = CognitionFrame.scan_parquet(store).filter(pl.col("scope") == "s1").explain()
    assert f"Scan parquet {store} hive [scope]; 24 columns" in plan
    lazy = CognitionFrame.scan_parquet(store).lazy().explain()
    assert "PYTHON[cognoxium]" in lazy


def test_a_sql_metadata_filter_works_on_a_scan(one_file: Path) -> None:
    cf = CognitionFrame.scan_parquet(one_file).filter("metadata.topic = 'refund'")
    assert cf.count() == 14


# ---------------------------------------------------------------------------
# validation of what is read


def write_raw(df: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.write_parquet(path)
    return path


def test_an_invalid_row_names_its_file_row_and_field(tmp_path: Path) -> None:
    good = raw_frame("a")
    role = pl.col("role").cast(pl.String)
    bad = raw_frame("b").with_columns(
        role=pl.when(pl.int_range(pl.len()) == 4).then(pl.lit("robot")).otherwise(role)
    )
    write_raw(good.with_columns(pl.col("role").cast(pl.String)), tmp_path / "a.parquet")
    bad_path = write_raw(bad, tmp_path / "b.parquet")
    cf = CognitionFrame.scan_parquet(tmp_path / "*.parquet")
    with pytest.raises(RecordError) as info:
        cf.collect()
    assert (info.value.source, info.value.row, info.value.field) == (str(bad_path), 4, "role")
    assert "must be one of" in str(info.value)
    with pytest.raises(RecordError) as info:  # a partial read checks the columns it reads
        cf.select("role").collect()
    assert (info.value.source, info.value.row, info.value.field) == (str(bad_path), 4, "role")
    # rows the predicate leaves out are not read, so not checked
    assert cf.filter(pl.col("id") != "b-4").count() == 11


def test_a_nan_rank_names_the_row_of_its_partition_file(tmp_path: Path) -> None:
    write_raw(raw_frame("a"), tmp_path / "scope=a" / "part.parquet")
    broken = raw_frame("b").with_columns(
        rank=pl.when(pl.int_range(pl.len()) == 2).then(float("nan")).otherwise(pl.col("rank"))
    )
    bad_path = write_raw(broken, tmp_path / "scope=b" / "part.parquet")
    cf = CognitionFrame.scan_parquet(tmp_path)
    with pytest.raises(RecordError) as info:
        cf.select("id", "rank").collect()
    assert (info.value.source, info.value.row, info.value.field) == (str(bad_path), 2, "rank")
    assert str(info.value) == (
        f"{bad_path}: row 2: field rank: must be a finite number (NaN and infinity are refused)"
    )
    # the other partition alone is never read from the broken file
    assert cf.filter(pl.col("scope") == "a").select("rank").collect().height == 6


def test_a_wrong_content_hash_is_caught_when_every_column_is_read(tmp_path: Path) -> None:
    broken = raw_frame().with_columns(
        content_hash=pl.when(pl.int_range(pl.len()) == 3)
        .then(pl.lit("0" * 64))
        .otherwise(pl.col("content_hash"))
    )
    path = write_raw(broken, tmp_path / "items.parquet")
    cf = CognitionFrame.scan_parquet(path)
    with pytest.raises(RecordError) as info:
        cf.pack(1000, as_of=AS_OF)
    assert (info.value.source, info.value.row, info.value.field) == (str(path), 3, "content_hash")
    with pytest.raises(RecordError) as info:  # the row in the file, not in what was read
        cf.filter(pl.col("id") != "a-0").collect()
    assert info.value.row == 3


def test_duplicate_ids_across_partitions_are_refused(tmp_path: Path) -> None:
    write_raw(raw_frame("a"), tmp_path / "scope=x" / "part.parquet")
    second = write_raw(raw_frame("a"), tmp_path / "scope=y" / "part.parquet")
    first = tmp_path / "scope=x" / "part.parquet"
    with pytest.raises(RecordError) as info:
        CognitionFrame.scan_parquet(tmp_path).filter(pl.col("priority") == 1).collect()
    assert (info.value.source, info.value.row, info.value.field) == (str(second), 1, "id")
    assert info.value.message == f"duplicate id 'a-1' (first at {first}: row 1)"
    with pytest.raises(RecordError, match="duplicate id 'a-0'"):  # a read of the ids alone
        CognitionFrame.scan_parquet(tmp_path).select("id").collect()


def with_ids(ids: dict[int, str | None], n: int = 8) -> pl.DataFrame:
    """Items whose ids at the given rows are replaced (``None``: a null id)."""
    frame = raw_frame("a", n)
    column = [ids.get(row, item_id) for row, item_id in enumerate(frame["id"])]
    return frame.with_columns(id=pl.Series(column, dtype=pl.String))


@pytest.mark.parametrize(
    ("ids", "row", "message"),
    [
        ({1: None, 3: None}, 1, "must not be null"),
        ({2: None, 4: None, 6: None}, 2, "must not be null"),
        ({1: None, 5: "a-0"}, 1, "must not be null"),
        ({2: "a-0", 4: None, 6: None}, 2, "duplicate id 'a-0'"),
    ],
)
@pytest.mark.parametrize("columns", [None, ["id"], ["id", "text"]])
@pytest.mark.filterwarnings("error")
def test_null_ids_are_refused_at_the_first_invalid_row(
    tmp_path: Path,
    ids: dict[int, str | None],
    row: int,
    message: str,
    columns: list[str] | None,
) -> None:
    path = write_raw(with_ids(ids), tmp_path / "items.parquet")
    cf = CognitionFrame.scan_parquet(path)
    with pytest.raises(RecordError) as info:
        (cf if columns is None else cf.select(*columns)).collect()
    assert (info.value.source, info.value.row, info.value.field) == (str(path), row, "id")
    assert info.value.message.startswith(message)


def test_null_ids_in_a_later_batch_are_refused(tmp_path: Path) -> None:
    path = write_raw(with_ids({20: None, 27: None}, 30), tmp_path / "items.parquet")
    with pl.Config(streaming_chunk_size=7), pytest.raises(RecordError) as info:
        CognitionFrame.scan_parquet(path).select("id").collect()
    assert str(info.value) == f"{path}: row 20: field id: must not be null"


def test_an_invalid_ndjson_line_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    write_jsonl(records_to_frame(records("a", 3)), path)
    with path.open("a") as handle:
        handle.write('{"id": "x", "role": "robot", "text": "hi"}\n')
    cf = CognitionFrame.scan_ndjson(path)  # nothing read yet
    with pytest.raises(RecordError) as info:
        cf.count()
    assert (info.value.source, info.value.line, info.value.field) == (str(path), 4, "role")


def test_duplicate_ids_across_ndjson_files_are_refused(tmp_path: Path) -> None:
    for name in ("a.jsonl", "b.jsonl"):
        write_jsonl(records_to_frame(records("a", 2)), tmp_path / name)
    with pytest.raises(RecordError, match="duplicate id 'a-0'") as info:
        CognitionFrame.scan_ndjson(tmp_path).collect()
    assert (info.value.source, info.value.row) == (str(tmp_path / "b.jsonl"), 0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda df: df.drop("group_id"), r"missing \['group_id'\]"),
        (lambda df: df.with_columns(extra=pl.lit(1)), r"unknown columns \['extra'\]"),
    ],
)
def test_files_without_the_item_columns_are_refused_at_scan(
    tmp_path: Path, change: object, message: str
) -> None:
    path = write_raw(change(raw_frame()), tmp_path / "items.parquet")  # type: ignore[operator]
    with pytest.raises(SchemaError, match=message):
        CognitionFrame.scan_parquet(path)


def _no_source(tmp_path: Path, case: str, suffix: str) -> Path:
    """A path that names nothing a scan can read (the kind ``case`` says)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not items\n", encoding="utf-8")
    (tmp_path / "plain.txt").write_text("a file\n", encoding="utf-8")
    return {
        "missing file": tmp_path / f"none{suffix}",
        "glob matching nothing": tmp_path / "none" / f"*{suffix}",
        "empty directory": tmp_path / "empty",
        "missing directory": tmp_path / "none",
        "path under a file": tmp_path / "plain.txt" / f"items{suffix}",
    }[case]


SCANS = {
    "parquet": (CognitionFrame.scan_parquet, CognitionFrame.read_parquet, ".parquet"),
    "ndjson": (CognitionFrame.scan_ndjson, CognitionFrame.read_jsonl, ".jsonl"),
}


@pytest.mark.parametrize("kind", sorted(SCANS))
@pytest.mark.parametrize(
    ("case", "error", "errno_name"),
    [
        ("missing file", FileNotFoundError, "ENOENT"),
        ("glob matching nothing", FileNotFoundError, "ENOENT"),
        ("empty directory", FileNotFoundError, "ENOENT"),
        ("missing directory", FileNotFoundError, "ENOENT"),
        ("path under a file", NotADirectoryError, "ENOTDIR"),
    ],
)
def test_a_scan_of_nothing_readable_raises_the_readers_error_naming_the_path(
    tmp_path: Path, kind: str, case: str, error: type[OSError], errno_name: str
) -> None:
    import errno

    scan, read, suffix = SCANS[kind]
    path = _no_source(tmp_path, case, suffix)
    with pytest.raises(error) as caught:
        scan(path)
    assert not isinstance(caught.value, SchemaError)
    assert caught.value.errno == getattr(errno, errno_name)
    assert caught.value.filename == str(path)
    assert str(path) in str(caught.value)
    if case == "missing file":  # the reader of the same file fails the same way
        with pytest.raises(error):
            read(path)


def test_a_directory_without_item_files_is_named_by_the_ndjson_scan(tmp_path: Path) -> None:
    write_parquet(records_to_frame(records("s0", 2)), tmp_path / "items.parquet")
    with pytest.raises(FileNotFoundError, match=r"no \.jsonl/\.ndjson file under the directory"):
        CognitionFrame.scan_ndjson(tmp_path)


# ---------------------------------------------------------------------------
# from_polars(LazyFrame)


def test_from_polars_keeps_a_lazyframe_lazy(tmp_path: Path) -> None:
    lf = raw_frame(n=10).lazy()
    cf = CognitionFrame.from_polars(lf)
    assert "Scan lazyframe LazyFrame" in cf.explain()
    assert_frame_equal(cf.collect(), CognitionFrame.from_polars(lf.collect()).collect())
    assert cf.filter(pl.col("priority") == 1).count() == 2
    (read,) = cf.read_statistics()
    assert (read.rows, read.files) == (2, ())


def test_a_lazyframe_lacking_columns_is_conformed_now() -> None:
    lf = pl.LazyFrame({"id": ["a"], "role": ["user"], "text": ["hi"]})
    cf = CognitionFrame.from_polars(lf)
    assert cf.read_statistics() == []
    assert "Scan 1 rows" in cf.explain()
    assert cf.collect()["trust"].to_list() == ["untrusted"]


def test_an_invalid_row_of_a_lazyframe_names_its_row_there() -> None:
    broken = raw_frame(n=8).with_columns(
        metadata=pl.when(pl.int_range(pl.len()) == 6).then(pl.lit("[1]")).otherwise("metadata")
    )
    cf = CognitionFrame(broken.lazy())
    with pytest.raises(RecordError) as info:
        cf.filter(pl.col("priority") > 0).collect()
    assert (info.value.source, info.value.row, info.value.field) == ("LazyFrame", 6, "metadata")


# ---------------------------------------------------------------------------
# sink_parquet


def test_sink_parquet_round_trips(store: Path, tmp_path: Path) -> None:
    cf = CognitionFrame.scan_parquet(store).filter(pl.col("scope").is_in(["s1", "s3"]))
    out = tmp_path / "out" / "subset.parquet"
    cf.select(*COLUMNS).sink_parquet(out)
    expected = cf.select(*COLUMNS).collect()
    assert_frame_equal(read_parquet(out), expected)
    assert_frame_equal(CognitionFrame.scan_parquet(out).collect(), expected)
    assert pl.read_parquet_metadata(out)["cognoxium.schema_version"] == "2"


def test_sink_parquet_leaves_no_partial_file_on_error(tmp_path: Path) -> None:
    bad = write_raw(
        raw_frame().with_columns(
            rank=pl.when(pl.int_range(pl.len()) == 5).then(float("nan")).otherwise("rank")
        ),
        tmp_path / "in" / "bad.parquet",
    )
    out = tmp_path / "out"
    out.mkdir()
    target = out / "items.parquet"
    target.write_bytes(b"previous")
    with pytest.raises(RecordError):
        CognitionFrame.scan_parquet(bad).sink_parquet(target)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in out.iterdir()] == ["items.parquet"]
    assert FILE_COLUMN not in CognitionFrame.scan_parquet(bad).columns


def test_read_statistics_has_one_entry_per_scan_even_when_they_read_alike(
    one_file: Path,
) -> None:
    left = CognitionFrame.scan_parquet(one_file).select("id", "priority")
    right = CognitionFrame.scan_parquet(one_file).select("id", "priority")
    joined = left.join(right, on="id")
    assert joined.count() == 40
    reads = joined.read_statistics()
    assert [(r.files, r.rows) for r in reads] == [((str(one_file),), 40)] * 2


def test_json_columns_read_alone_are_canonical_as_in_a_full_read(tmp_path: Path) -> None:
    spaced = raw_frame(n=3).with_columns(
        metadata=pl.lit('{"topic": "refund",  "a": [1, 2]}'), json=pl.lit(None, pl.String)
    )
    path = write_raw(spaced, tmp_path / "items.parquet")
    cf = CognitionFrame.scan_parquet(path)
    canonical = '{"a":[1,2],"topic":"refund"}'
    assert cf.select("metadata").collect()["metadata"].to_list() == [canonical] * 3
    assert cf.collect()["metadata"].to_list() == [canonical] * 3
    assert cf.filter("metadata.topic = 'refund'").count() == 3


def test_a_column_read_with_no_row_check_passes_through(one_file: Path) -> None:
    out = CognitionFrame.scan_parquet(one_file).select("text").collect()
    assert out["text"][0] == "turn 0 of a"


# ---------------------------------------------------------------------------
# reading in batches (Polars asks for batches of streaming_chunk_size rows)


def test_a_scan_read_in_batches_collects_the_same_frame(one_file: Path, tmp_path: Path) -> None:
    cf = CognitionFrame.scan_parquet(one_file)
    with pl.Config(streaming_chunk_size=7):
        batched = cf.collect()
        out = tmp_path / "copy.parquet"
        cf.sink_parquet(out)
    assert_frame_equal(batched, CognitionFrame.read_parquet(one_file).collect())
    assert_frame_equal(read_parquet(out), batched)
    assert cf.read_statistics()[0].rows == 40


def test_sink_parquet_onto_a_directory_names_the_directory(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(IsADirectoryError) as info:
        CognitionFrame(records("a", 3)).sink_parquet(target)
    assert info.value.filename == str(target)
    assert str(target) in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary file left


def test_an_invalid_row_in_a_later_batch_names_its_row_in_the_file(tmp_path: Path) -> None:
    broken = records_to_frame(records("a", 40)).with_columns(
        rank=pl.when(pl.int_range(pl.len()) == 31).then(float("nan")).otherwise("rank")
    )
    path = write_raw(broken, tmp_path / "items.parquet")
    cf = CognitionFrame.scan_parquet(path)
    with pl.Config(streaming_chunk_size=7), pytest.raises(RecordError) as info:
        cf.collect()
    assert (info.value.source, info.value.row, info.value.field) == (str(path), 31, "rank")
    assert cf.read_statistics()[0].rows < 40  # the run stopped at the bad batch


def test_duplicate_ids_in_different_batches_are_refused(tmp_path: Path) -> None:
    rows = records_to_frame(records("a", 30))
    dup = rows.with_columns(
        id=pl.when(pl.int_range(pl.len()) == 20).then(pl.lit("a-3")).otherwise("id")
    )
    path = write_raw(dup, tmp_path / "items.parquet")
    target = tmp_path / "out.parquet"
    with pl.Config(streaming_chunk_size=7), pytest.raises(RecordError) as info:
        CognitionFrame.scan_parquet(path).select("id").sink_parquet(target)
    assert (info.value.source, info.value.row, info.value.field) == (str(path), 20, "id")
    assert info.value.message == f"duplicate id 'a-3' (first at {path}: row 3)"
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["items.parquet"]


def test_a_sql_metadata_filter_after_a_scope_filter_reads_that_scope_alone(store: Path) -> None:
    cf = CognitionFrame.scan_parquet(store).filter(pl.col("scope") == "s1")
    refund = cf.filter("metadata.topic = 'refund'")  # infers the metadata keys: one read
    (read,) = refund.read_statistics()
    assert (read.files, read.rows, read.columns) == (
        (str(store / "scope=s1" / "part.parquet"),),
        PER_SCOPE,
        ("metadata", "scope"),
    )
    assert refund.count() == 9
    with pytest.raises(PlanError, match="no item has the metadata key 'topc'"):
        cf.filter("metadata.topc = 'refund'")


def with_metadata(df: pl.DataFrame, texts: list[str]) -> pl.DataFrame:
    """``df`` with its metadata texts replaced, as stored by another writer."""
    return df.with_columns(metadata=pl.Series(texts, dtype=pl.String))


def test_a_sql_metadata_filter_infers_its_types_from_metadata_stored_in_any_json_form(
    tmp_path: Path,
) -> None:
    texts = ['{ "year": 2024,  "topic": "refund" }', '{"topic":"shipping","year":2025}'] * 3
    path = write_raw(with_metadata(raw_frame("a"), texts), tmp_path / "items.parquet")
    cf = CognitionFrame.scan_parquet(path)
    kept = cf.filter("metadata.year > 2024").collect()
    assert kept.get_column("id").to_list() == ["a-1", "a-3", "a-5"]
    assert kept.get_column("metadata").to_list() == ['{"topic":"shipping","year":2025}'] * 3
    with pytest.raises(PlanError, match=r"no item has the metadata key 'yeer'.*'topic', 'year'"):
        cf.filter("metadata.yeer > 2024")


@pytest.mark.parametrize(
    ("text", "message"),
    [("{not json", "invalid JSON"), ("[1, 2]", "must be a JSON object")],
)
def test_bad_metadata_met_by_a_sql_metadata_filter_names_its_file_row_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    texts = ['{"topic":"refund"}'] * 4 + [text, '{"topic":"refund"}']
    write_raw(raw_frame("a"), tmp_path / "scope=a" / "part.parquet")
    bad = write_raw(with_metadata(raw_frame("b"), texts), tmp_path / "scope=b" / "part.parquet")
    cf = CognitionFrame.scan_parquet(tmp_path)
    with pytest.raises(RecordError, match=message) as info:
        cf.filter("metadata.topic = 'refund'")
    assert (info.value.source, info.value.row, info.value.field) == (str(bad), 4, "metadata")
    # a scope filter first: the broken partition is not read
    scoped = cf.filter(pl.col("scope") == "a").filter("metadata.topic = 'refund'")
    assert scoped.count() == 2


def test_a_sql_metadata_filter_on_a_jsonl_scan_reads_its_metadata_through_the_checks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "items.jsonl"
    rows = records("a", 6)
    rows[4]["metadata"] = "refund"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(RecordError) as info:
        CognitionFrame.scan_ndjson(path).filter("metadata.topic = 'refund'")
    assert str(info.value) == f"{path}:5: field metadata: Input should be a valid dictionary"


@settings(max_examples=25, deadline=None)
@given(items_strategy(min_size=1, max_size=8), st.sampled_from(["user", "tool", "document"]))
def test_any_items_scan_back_as_read_parquet_reads_them(
    items: list[ContextItem], role: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "items.parquet"
        write_parquet(items_to_frame(items), path)
        scanned = CognitionFrame.scan_parquet(path)
        read = CognitionFrame.read_parquet(path)
        assert_frame_equal(scanned.collect(), read.collect())
        columns = ("id", "metadata", "sources", "lineage")
        by_role = [cf.filter(pl.col("role") == role).select(*columns) for cf in (scanned, read)]
        assert_frame_equal(by_role[0].collect(), by_role[1].collect())
        with pl.Config(streaming_chunk_size=3):
            assert_frame_equal(scanned.collect(), read.collect())


# ---------------------------------------------------------------------------
# what a count reads


def test_a_count_reads_only_the_columns_of_its_predicate(one_file: Path) -> None:
    cf = CognitionFrame.scan_parquet(one_file)
    counted = cf.filter(pl.col("priority") > 2)
    plan = counted.lazy().select(pl.len()).explain()
    # Polars asks the scan for the column of nulls, not for an item column
    assert f'simple π 1/1 ["{ROWS_ONLY}"]' in plan
    assert counted.count() == 16
    assert cf.read_statistics()[0].columns == ("priority",)
    assert cf.count() == 40
    assert cf.read_statistics()[0].columns == ()
    assert ROWS_ONLY not in cf.columns


def test_a_count_checks_the_columns_of_its_predicate(tmp_path: Path) -> None:
    broken = raw_frame(n=6).with_columns(
        rank=pl.when(pl.int_range(pl.len()) == 3).then(float("nan")).otherwise(pl.col("rank")),
    )
    path = write_raw(broken, tmp_path / "items.parquet")
    cf = CognitionFrame.scan_parquet(path)
    with pytest.raises(RecordError) as info:
        cf.filter(pl.col("rank").is_nan() | (pl.col("priority") >= 0)).count()
    assert (info.value.source, info.value.row, info.value.field) == (str(path), 3, "rank")


def test_a_count_does_not_check_the_columns_it_does_not_read(tmp_path: Path) -> None:
    role = pl.col("role").cast(pl.String)
    broken = raw_frame(n=6).with_columns(
        role=pl.when(pl.int_range(pl.len()) == 2).then(pl.lit("robot")).otherwise(role)
    )
    path = write_raw(broken, tmp_path / "items.parquet")
    cf = CognitionFrame.scan_parquet(path)
    # no value of the role reaches the answer, so the role is neither read nor checked
    assert cf.filter(pl.col("priority") >= 1).count() == 4
    assert cf.read_statistics()[0].columns == ("priority",)
    with pytest.raises(RecordError) as info:  # a query that returns the roles checks them
        cf.filter(pl.col("priority") >= 1).select("role").collect()
    assert (info.value.row, info.value.field) == (2, "role")


@pytest.mark.parametrize("predicate", [None, pl.col("priority") > 2, pl.col("role") == "user"])
def test_a_count_equals_the_height_of_what_a_collect_returns(
    store: Path, one_file: Path, tmp_path: Path, predicate: pl.Expr | None
) -> None:
    jsonl = tmp_path / "items.jsonl"
    write_jsonl(records_to_frame(records("a", 40)), jsonl)
    frames = [
        CognitionFrame.scan_parquet(store),
        CognitionFrame.scan_parquet(one_file),
        CognitionFrame.scan_ndjson(jsonl),
        CognitionFrame.from_polars(read_parquet(one_file).lazy()),
    ]
    for cf in frames:
        query = cf if predicate is None else cf.filter(predicate)
        assert query.count() == query.collect().height


@pytest.mark.parametrize("how", ["filter", "quarantine", "demote"])
def test_a_sql_metadata_predicate_reads_the_json_text_itself_and_is_pushed_into_the_scan(
    tmp_path: Path, how: str
) -> None:
    from cognoxium.engine.execute import lowered

    rows = [
        {"id": f"i{n}", "role": "user", "text": f"turn {n}",
         "metadata": {"conversation": f"c{n % 3}", "turn": n}}
        for n in range(12)
    ]  # fmt: skip
    path = tmp_path / "items.parquet"
    write_parquet(records_to_frame(rows), path)
    sql = "metadata.conversation = 'c1' AND metadata.turn > 3"
    scanned = CognitionFrame.scan_parquet(path)
    in_memory = CognitionFrame(rows)
    if how == "filter":
        kept = scanned.filter(sql)
        plan = lowered(kept._plan).explain()
        assert "SELECTION:" in plan
        assert "json_path_match" in plan.split("SELECTION:")[1]
        assert kept.collect().get_column("id").to_list() == ["i4", "i7", "i10"]
        assert kept.collect().equals(in_memory.filter(sql).collect())
        return
    if how == "quarantine":
        marked = scanned.quarantine(sql, reason="held").collect()
        held = marked.filter(pl.col("quarantine_reason") == "held").get_column("id")
    else:
        marked = scanned.demote(sql, priority_delta=-2).collect()
        held = marked.filter(pl.col("priority") == -2).get_column("id")
    assert held.to_list() == ["i4", "i7", "i10"]
    assert marked.get_column("metadata").to_list() == in_memory.collect()["metadata"].to_list()
