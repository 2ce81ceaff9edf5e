"""The item scans of cognoxium.items.scan and the row checks they apply (schema.row_checks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cognoxium.exceptions import RecordError, SchemaError
from cognoxium.items.io import write_jsonl, write_parquet
from cognoxium.items.records import records_to_frame
from cognoxium.items.scan import (
    KEPT_READS,
    ScanRead,
    atomic_path,
    scan_lazy_items,
    scan_ndjson_items,
    scan_parquet_items,
)
from cognoxium.items.schema import COLUMNS, POLARS_SCHEMA
from cognoxium.items.store import write_partitioned
from cognoxium.items.validation import conform, row_checks


def frame(n: int = 5) -> pl.DataFrame:
    return records_to_frame(
        [
            {
                "id": f"i{k}",
                "role": "user",
                "text": f"t{k}",
                "priority": k,
                "created_at": "2024-01-01T00:00:00Z",
            }
            for k in range(n)
        ]
    )


def test_row_checks_keep_only_the_checks_of_the_given_columns() -> None:
    fields = {field for _, field, _ in row_checks(["role", "rank"])}
    assert fields == {"role", "rank"}
    assert row_checks([]) == []
    # a payload check needs payload_kind and its column
    assert not [c for c in row_checks(["text"]) if c[1] == "text"]
    assert [c[2] for c in row_checks(["payload_kind", "text"]) if c[1] == "text"] == [
        "a text payload needs a value in column 'text'",
        "column 'text' must be null unless payload_kind is 'text'",
    ]
    every = row_checks(COLUMNS)
    assert len(every) == len({(str(bad), field) for bad, field, _ in every})


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("role", "robot", "must be one of"),
        ("rank", float("nan"), "must be a finite number"),
        ("metadata", "[]", "must be a JSON object"),
        ("id", " ", "must not be blank"),
    ],
)
def test_each_row_check_finds_the_row_conform_reports(
    column: str, value: object, message: str
) -> None:
    df = frame().with_columns(pl.col("role").cast(pl.String))
    broken = df.with_columns(
        pl.when(pl.int_range(pl.len()) == 3)
        .then(pl.lit(value))
        .otherwise(pl.col(column))
        .alias(column)
    )
    with pytest.raises(RecordError, match=message) as conformed:
        conform(broken)
    (bad,) = [
        bad for bad, field, text in row_checks(COLUMNS) if field == column and message in text
    ]
    assert broken.select(bad.fill_null(False).arg_true()).to_series().to_list() == [3]
    assert conformed.value.row == 3


def test_a_parquet_scan_records_each_run(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    write_parquet(frame(), path)
    scan = scan_parquet_items(path)
    assert scan.schema == POLARS_SCHEMA
    assert (scan.kind, scan.partitions, scan.label()) == ("parquet", (), f"parquet {path}")
    assert scan.reads == []
    lf = scan.lazy()
    assert lf.filter(pl.col("priority") >= 3).select("id").collect()["id"].to_list() == ["i3", "i4"]
    assert_frame_equal(lf.collect(), frame())
    assert scan.reads == [
        ScanRead((str(path),), 2, ("id", "priority"), '[(col("priority")) >= (3)]'),
        ScanRead((str(path),), 5, tuple(COLUMNS), None),
    ]


def test_enumerations_stored_as_text_are_cast_to_the_canonical_enums(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    frame().with_columns(pl.col(["role", "trust"]).cast(pl.String)).write_parquet(path)
    out = scan_parquet_items(path).lazy().collect()
    assert out.schema == POLARS_SCHEMA
    assert_frame_equal(out, frame())


def test_a_lazyframe_scan_validates_the_rows_it_reads() -> None:
    lf = frame().lazy()
    scan = scan_lazy_items(lf, source="memory")
    assert scan.lazy().select(pl.len()).collect().item() == 5
    assert scan.reads[-1].files == ()
    with pytest.raises(SchemaError, match=r"unknown columns \['x'\]"):
        scan_lazy_items(lf.with_columns(x=pl.lit(1)))
    with pytest.raises(SchemaError, match=r"missing \['rank'\]"):
        scan_lazy_items(lf.drop("rank"))
    broken = lf.with_columns(
        rank=pl.when(pl.col("id") == "i4").then(float("nan")).otherwise("rank")
    )
    with pytest.raises(RecordError) as info:
        scan_lazy_items(broken, source="memory").lazy().select("rank").collect()
    assert (info.value.source, info.value.row, info.value.field) == ("memory", 4, "rank")


def test_an_ndjson_scan_reads_every_file_then_filters(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(
        '{"id": "x", "role": "user", "text": "hi"}\n\n{"id": "y", "role": "tool", "text": "ok"}\n'
    )
    (tmp_path / "notes.txt").write_text("not items")
    scan = scan_ndjson_items(tmp_path)
    assert scan.lazy().filter(pl.col("role") == "tool").select("id").collect().item() == "y"
    assert scan.reads[-1].rows == 1
    assert scan.reads[-1].files == (str(tmp_path / "a.jsonl"),)


def test_atomic_path_renames_on_success_and_removes_the_temporary_file_on_error(
    tmp_path: Path,
) -> None:
    target = tmp_path / "sub" / "out.bin"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"

    def fail() -> None:
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"partial")
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fail()
    assert target.read_bytes() == b"new"
    assert [p.name for p in target.parent.iterdir()] == ["out.bin"]


def test_atomic_path_errors_name_the_path_given_not_the_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.mkdir()
    ran = False
    with pytest.raises(IsADirectoryError) as info, atomic_path(target):
        ran = True  # refused before the block runs
    assert not ran
    assert info.value.filename == str(target)
    assert info.value.filename2 is None
    other = tmp_path / "later.bin"

    def write_while_it_becomes_a_directory() -> None:
        with atomic_path(other) as tmp:
            tmp.write_bytes(b"data")
            other.mkdir()

    with pytest.raises(IsADirectoryError) as info:
        write_while_it_becomes_a_directory()
    assert (info.value.filename, info.value.filename2) == (str(other), None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["later.bin", "out.bin"]


@pytest.mark.parametrize("writer", [write_parquet, write_jsonl])
def test_item_writers_refuse_a_directory_naming_it(
    tmp_path: Path, writer: Callable[[pl.DataFrame, Path], None]
) -> None:
    with pytest.raises(IsADirectoryError) as info:
        writer(frame(), tmp_path)
    assert info.value.filename == str(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_scan_remembers_only_its_latest_runs(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    write_parquet(frame(), path)
    scan = scan_parquet_items(path)
    lf = scan.lazy()
    for n in range(1, KEPT_READS + 6):
        lf.head(n).select("id").collect()
    reads = scan.reads
    assert len(reads) == KEPT_READS
    assert reads[-1].rows == 5  # head(n) with n >= 5 reads every row
    assert reads[0].rows == 5
    lf.head(2).select("id").collect()
    assert scan.reads[-1].rows == 2


def test_a_count_of_a_partitioned_store_reads_it_unordered(tmp_path: Path) -> None:
    items = records_to_frame(
        [
            {
                "id": f"i{k}",
                "role": "user",
                "text": f"t{k}",
                "priority": k % 4,
                "metadata": {"thread": f"t{k % 3}"},
            }
            for k in range(12)
        ]
    )
    write_partitioned(items, tmp_path / "store", key="thread")
    scan = scan_parquet_items(tmp_path / "store")
    reader = scan._reader
    ordered: list[bool] = []

    def recorded(*args: object) -> Iterator[pl.DataFrame]:
        ordered.append(bool(args[-1]))
        return reader(*args)  # type: ignore[arg-type]

    scan._reader = recorded
    lf, kept = scan.lazy(), pl.col("priority") == 1
    assert lf.filter(kept).select(pl.len()).collect().item() == 3
    assert lf.filter(kept).select("id").collect()["id"].to_list() == ["i1", "i5", "i9"]
    assert lf.head(2).select(pl.len()).collect().item() == 2  # a limit picks rows in order
    assert ordered == [False, True, True]
    # the store order is a sort by the stored position, which a count leaves out
    query = reader.query  # type: ignore[attr-defined]
    plans = [query(["priority"], kept, None, False, o).explain() for o in (False, True)]
    assert ["SORT" in plan for plan in plans] == [False, True]


def test_an_enumeration_outside_its_values_is_refused_by_the_check_the_scan_applies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "items.parquet"
    role = pl.when(pl.int_range(pl.len()) == 3).then(pl.lit("robot")).otherwise(pl.col("role"))
    frame().with_columns(pl.col("role").cast(pl.String)).with_columns(role=role).write_parquet(path)
    lf = scan_parquet_items(path).lazy()
    with pytest.raises(RecordError) as info:
        lf.select("role").collect()
    assert (info.value.row, info.value.field) == (3, "role")
    assert info.value.message == (
        "must be one of ['system', 'developer', 'user', 'assistant', 'tool', 'document', 'memory']"
    )


def mixed(n: int = 8) -> pl.DataFrame:
    roles = ("user", "assistant", "tool", "user")
    return records_to_frame(
        [{"id": f"i{k}", "role": roles[k % 4], "text": f"t{k}", "priority": k} for k in range(n)]
    )


ENUM_PREDICATES = [
    pl.col("role") == "user",
    pl.lit("tool") == pl.col("role"),
    pl.col("role").is_in(["user", "tool"]),
    pl.col("role").is_in(["tool"]),
    (pl.col("role") == "user") & (pl.col("priority") > 2),
    (pl.col("priority") > 2)
    & pl.col("role").is_in(["user", "assistant"])
    & (pl.col("role") == "user"),
    (pl.col("role") == "user") & (pl.col("role") == "tool"),
    (pl.col("role") == "user") & (pl.col("role").cast(pl.String) == "user"),
    (pl.col("role") == "user") | (pl.col("priority") > 5),
    pl.col("role") != "user",
    pl.col("role") > "user",
    pl.col("role").is_in(["user", None]),
    pl.col("role").is_in(["user"], nulls_equal=True),
]


@pytest.mark.parametrize("predicate", ENUM_PREDICATES, ids=str)
@pytest.mark.parametrize("stored", [pl.Categorical, pl.String])
def test_a_predicate_on_an_enumeration_keeps_the_rows_of_the_cast_column(
    tmp_path: Path, predicate: pl.Expr, stored: pl.DataType
) -> None:
    path = tmp_path / "items.parquet"
    items = mixed()
    items.with_columns(pl.col("role").cast(stored)).write_parquet(path)
    expected = items.lazy().filter(predicate)
    lf = scan_parquet_items(path).lazy().filter(predicate)
    assert lf.select(pl.len()).collect().item() == expected.select(pl.len()).collect().item()
    assert_frame_equal(lf.collect(), expected.collect())
    assert_frame_equal(lf.select("role", "id").collect(), expected.select("role", "id").collect())
    lazy = scan_lazy_items(items.lazy().with_columns(pl.col("role").cast(stored)))
    assert_frame_equal(lazy.lazy().filter(predicate).collect(), expected.collect())


def test_an_enumeration_equality_is_evaluated_on_the_stored_values(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    write_parquet(mixed(), path)
    scan = scan_parquet_items(path)
    query = scan._reader.query  # type: ignore[attr-defined]
    user = pl.col("role") == "user"
    # the Parquet scan itself selects the rows, before any cast; the role of
    # the rows kept is known, so the column is not read again
    plan = query(["role"], user, None, False, False).explain()
    assert 'SELECTION: col("role") == "user"' in plan
    assert ".cast(" not in plan
    assert "PROJECT 1/24 COLUMNS" in plan
    assert scan.lazy().filter(user).select(pl.len()).collect().item() == 4
    assert scan.reads[-1] == ScanRead((str(path),), 4, ("role",), str(user))
    # several values: the rows are selected as stored, their roles cast
    several = query(["role"], pl.col("role").is_in(["user", "tool"]), None, False, False)
    plan = several.explain()
    assert 'SELECTION: col("role").is_in' in plan
    assert ".cast(Enum" in plan
    assert several.collect()["role"].to_list() == ["user", "tool", "user"] * 2


def test_an_equality_on_an_enumeration_skips_the_rows_it_leaves_out_unchecked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "items.parquet"
    robot = pl.when(pl.int_range(pl.len()) == 2).then(pl.lit("robot")).otherwise("role")
    nan = pl.when(pl.int_range(pl.len()) == 3).then(float("nan")).otherwise("rank")
    items = mixed().with_columns(pl.col("role").cast(pl.String))
    items.with_columns(role=robot, rank=nan).write_parquet(path)
    lf = scan_parquet_items(path).lazy()
    # row 2 is no user (not even a role): left out, so not checked
    users = lf.filter(pl.col("role") == "user").select("id").collect()
    assert users["id"].to_list() == ["i0", "i3", "i4", "i7"]
    with pytest.raises(RecordError) as info:  # row 3 is a user with a NaN rank
        lf.filter(pl.col("role") == "user").select("rank").collect()
    assert (info.value.source, info.value.row, info.value.field) == (str(path), 3, "rank")
    with pytest.raises(RecordError) as info:  # a cast role checked at its own row
        lf.filter(pl.col("role").is_null()).select(pl.len()).collect()
    assert (info.value.row, info.value.field) == (2, "role")


def test_metadata_that_is_no_json_object_is_refused_where_a_run_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    listed = pl.when(pl.int_range(pl.len()) == 3).then(pl.lit("[]")).otherwise("metadata")
    frame().with_columns(metadata=listed).write_parquet(path)
    lf = scan_parquet_items(path).lazy()
    assert lf.filter(pl.col("priority") > 1).select(pl.len()).collect().item() == 3
    for query in (
        lf.select("metadata"),
        lf.filter(pl.col("metadata").str.len_bytes() < 3).select(pl.len()),
    ):
        with pytest.raises(RecordError) as info:
            query.collect()
        assert (info.value.row, info.value.field) == (3, "metadata")
        assert info.value.message == "must be a JSON object"


def test_a_directory_scan_finds_a_file_at_any_depth_and_no_file_through_a_link(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    for k in range(3):
        (store / f"empty={k}").mkdir(parents=True)
    deep = store / "scope=s1" / "day=2"
    deep.mkdir(parents=True)
    write_parquet(frame(2), deep / "part.parquet")
    assert scan_parquet_items(store).lazy().select(pl.len()).collect().item() == 2
    # as Path.rglob: a link to a directory is not followed, a link to a file is a file
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (deep / "part.parquet").rename(elsewhere / "part.parquet")
    (store / "linked").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(FileNotFoundError, match="no file under the directory"):
        scan_parquet_items(store)
    (store / "items.parquet").symlink_to(elsewhere / "part.parquet")
    assert scan_parquet_items(store, hive_partitioning=False).partitions == ()
