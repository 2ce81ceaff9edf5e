"""``cognoxium pack`` over a hive-partitioned store: scanned a task at a time, the same files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cognoxium.app import _workers
from cognoxium.app._scopes import ScopeIndex, batch_units
from cognoxium.app.batch import Request, run_batch
from cognoxium.app.cli import EXIT_BAD_INPUT, EXIT_OK, _pack_store, app
from cognoxium.engine.plan import LazySource, Scan, Select
from cognoxium.exceptions import RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.store import check_store, read_store, write_partitioned
from cognoxium.packing.options import PackOptions
from tests.app.parts import layout
from tests.app.stores import WORDS, synthetic

AS_OF = "2026-01-01T00:00:00Z"

runner = CliRunner()


def items(conversations: int = 6, per: int = 12) -> pl.DataFrame:
    """Items of several conversations, interleaved in the store, some derived from others."""
    return synthetic(conversations, per, interleaved=True, derived=True)


def requests(conversations: int = 6) -> list[Request]:
    """Requests of every kind of scope: one partition, several, a clause of other columns."""
    wheres = [
        *(f"metadata.conversation = 'c{(5 * k) % conversations:02d}'" for k in range(8)),
        "metadata.conversation = 'c01' AND role <> 'tool'",
        "metadata.conversation IN ('c02', 'c04')",
        "metadata.conversation = 'c05' OR metadata.turn = 3",
        "role = 'user'",
        None,
    ]
    return [
        Request(id=f"r{k}", budget=40 + 17 * k, query=f"{WORDS[k % 8]} note", where=where)
        for k, where in enumerate(wheres)
    ]


def write_requests(path: Path, batch: list[Request]) -> Path:
    path.write_text("".join(json.dumps(r.to_record()) + "\n" for r in batch))
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    write_partitioned(items(), root, key="conversation")
    return root


@pytest.fixture
def small_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks of a few scopes each, so a task reads the partitions of several at once."""
    monkeypatch.setattr(_workers, "TASK_ITEMS", 30)


def eager(store: Path, out: Path, rank: str) -> Path:
    """The files of run_batch over the whole store read by read_store."""
    run_batch(
        CognitionFrame(read_store(store)),
        requests(),
        out_dir=out,
        rank=rank,
        workers=1,
        options=PackOptions(as_of=datetime(2026, 1, 1, tzinfo=UTC)),
    )
    return out


def pack(store: Path, requests_file: Path, out: Path, rank: str) -> tuple[int, str]:
    args = [str(store), str(requests_file), "--out", str(out), "--rank", rank, "--as-of", AS_OF]
    result = runner.invoke(app, ["pack", *args, "--workers", "1", "--quiet", "--no-progress"])
    return result.exit_code, result.stderr


def assert_same_files(first: Path, second: Path) -> None:
    names = layout(first)
    assert names == layout(second)
    assert len(names) > 3  # several tasks, each with its parts
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


@pytest.mark.parametrize("rank", ["bm25", "learned"])
def test_a_store_packs_through_the_cli_as_run_batch_packs_it_read_whole(
    store: Path, tmp_path: Path, rank: str, small_tasks: None
) -> None:
    code, stderr = pack(
        store, write_requests(tmp_path / "r.jsonl", requests()), tmp_path / "cli", rank
    )
    assert code == EXIT_OK, stderr
    assert_same_files(tmp_path / "cli", eager(store, tmp_path / "eager", rank))


def test_the_cli_scans_a_store_and_a_task_reads_only_its_partitions(
    store: Path, small_tasks: None
) -> None:
    frame = _pack_store(store)
    assert isinstance(frame._plan, Select)
    scan = frame._plan.input
    assert isinstance(scan, Scan)
    assert isinstance(scan.source, LazySource)
    assert frame._plan.schema.names() == read_store(store).columns
    units = batch_units(requests())
    index = ScopeIndex(frame, units)
    assert index.partitions == frozenset({"conversation"})
    whole = CognitionFrame(read_store(store))
    task = [units[0], units[8], units[3], units[7]]  # c00, the OR, c03, c02 or c04
    assert [unit.where for unit in task][1:] == [
        "metadata.conversation = 'c05' OR metadata.turn = 3",
        "metadata.conversation = 'c03'",
        "metadata.conversation IN ('c02', 'c04')",
    ]
    before = len(scan.source.scan.reads)
    scopes = index.rows_of(task)
    part, alone = scan.source.scan.reads[before:]  # the task's partitions, then the OR's read
    folders = {f"conversation=c{c:02d}" for c in (0, 2, 3, 4)}
    assert {Path(file).parent.name for file in part.files} == folders
    assert len(alone.files) == 6
    for unit, rows in zip(task, scopes, strict=True):
        alone = whole.filter(unit.where).collect() if unit.where else whole.collect()
        assert rows.equals(alone), unit.where


def test_a_store_whose_folders_disagree_with_the_metadata_is_read_unpruned(
    tmp_path: Path, small_tasks: None
) -> None:
    root = tmp_path / "store"
    write_partitioned(items(), root, key="conversation")
    moved = root / "conversation=c01" / "part-0.parquet"
    table = pq.read_table(moved)
    folder = root / "conversation=c09"
    folder.mkdir()
    pq.write_table(table, folder / "part-0.parquet")  # c01's items in another folder
    moved.unlink()
    index = ScopeIndex(_pack_store(root), batch_units(requests()))
    assert index.partitions == frozenset()
    code, stderr = pack(
        root, write_requests(tmp_path / "r.jsonl", requests()), tmp_path / "cli", "bm25"
    )
    assert code == EXIT_OK, stderr
    assert_same_files(tmp_path / "cli", eager(root, tmp_path / "eager", "bm25"))


def _rewrite(part: Path, column: str, change: object) -> None:
    table = pq.read_table(part)
    values = table.column(column).to_pylist()
    values[1] = change
    index = table.schema.get_field_index(column)
    field = table.schema.field(index)
    pq.write_table(table.set_column(index, field, pa.array(values, field.type)), part)


@pytest.mark.parametrize(
    ("column", "change"),
    [
        ("role", "narrator"),  # no such role (a null priority is the default, 0)
        ("id", "c3-0"),  # an id of another partition
        ("metadata", "{not json"),
        ("metadata", "[1, 2]"),  # JSON, not an object
    ],
)
def test_a_bad_item_no_request_reads_fails_the_cli_as_read_store_fails(
    store: Path, tmp_path: Path, column: str, change: object
) -> None:
    _rewrite(store / "conversation=c05" / "part-0.parquet", column, change)
    with pytest.raises(RecordError) as caught:
        read_store(store)
    with pytest.raises(RecordError):
        check_store(store)
    one = [Request(id="r", budget=50, where="metadata.conversation = 'c00'")]
    code, stderr = pack(store, write_requests(tmp_path / "r.jsonl", one), tmp_path / "out", "bm25")
    assert code == EXIT_BAD_INPUT
    assert caught.value.message in stderr
    assert f"row {caught.value.row}" in stderr
    assert not (tmp_path / "out").exists()


def test_check_store_names_an_id_repeated_in_a_later_batch_at_its_rows(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rows = items(conversations=3, per=4)
    write_partitioned(rows, root, key="conversation")
    check_store(root, batch_rows=5)  # a valid store passes, batch by batch
    _rewrite(root / "conversation=c02" / "part-0.parquet", "id", "c0-3")
    with pytest.raises(RecordError) as caught:
        check_store(root, batch_rows=5)
    # files in path order: c00 (rows 0-3), c01 (4-7), c02 (8-11); c02's second item is row 9
    assert (caught.value.row, caught.value.field) == (9, "id")
    assert "duplicate id 'c0-3' (first at row 3)" in str(caught.value)
    _rewrite(root / "conversation=c02" / "part-0.parquet", "id", "c2-1")
    _rewrite(root / "conversation=c02" / "part-0.parquet", "role", "narrator")
    with pytest.raises(RecordError) as caught:
        check_store(root, batch_rows=5)
    assert (caught.value.row, caught.value.field) == (9, "role")


def test_a_store_the_scan_refuses_is_read_whole_and_says_why(
    tmp_path: Path, small_tasks: None
) -> None:
    # A store written by Polars' own partition_by, with some item columns, was read whole
    # without a word: memory that followed the scopes then followed the store.
    root = tmp_path / "store"
    few = items().select("id", "role", "text", "created_at", "metadata")
    for (conversation,), part in few.with_columns(
        conversation=pl.col("metadata").str.json_path_match("$.conversation")
    ).group_by("conversation", maintain_order=True):
        folder = root / f"conversation={conversation}"
        folder.mkdir(parents=True)
        part.drop("conversation").write_parquet(folder / "part.parquet")
    batch = write_requests(tmp_path / "r.jsonl", requests())
    args = [str(root), str(batch), "--rank", "bm25", "--as-of", AS_OF, "--workers", "1"]
    result = runner.invoke(app, ["pack", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == EXIT_OK, result.stderr
    warning = " ".join(result.stderr.split())
    assert f"warning: {root} is read whole, not scanned a scope at a time" in warning
    assert "a scan needs every item column; missing" in warning
    assert "cognoxium.items.write_partitioned" in warning
    quiet = runner.invoke(app, ["pack", *args, "--quiet", "--out", str(tmp_path / "q")])
    assert quiet.exit_code == EXIT_OK
    assert "read whole" not in quiet.stderr


def test_a_store_with_text_that_is_not_utf8_names_file_row_and_column(
    store: Path, tmp_path: Path
) -> None:
    bad = sorted(store.rglob("*.parquet"))[2]
    table = pq.read_table(bad)
    texts = [t.encode() for t in table.column("text").to_pylist()]
    texts[3] = "caf\u00e9".encode("latin-1")
    latin1 = pa.array(texts, type=pa.large_binary()).view(table.schema.field("text").type)
    pq.write_table(table.set_column(table.schema.get_field_index("text"), "text", latin1), bad)
    with pytest.raises(RecordError) as caught:
        read_store(store)
    assert (caught.value.source, caught.value.row, caught.value.field) == (str(bad), 3, "text")
    batch = write_requests(tmp_path / "r.jsonl", requests())
    args = [str(store), str(batch), "--out", str(tmp_path / "out"), "--rank", "bm25", "--json"]
    result = runner.invoke(app, ["pack", *args, "--as-of", AS_OF, "--workers", "1"])
    assert result.exit_code == EXIT_BAD_INPUT
    error = json.loads(result.stdout)["error"]
    assert (error["file"], error["field"], error["params"]) == (str(bad), "text", {"row": 3})


@pytest.mark.parametrize("fault", ["epoch times", "truncated"])
def test_a_store_with_one_bad_file_names_that_file(store: Path, tmp_path: Path, fault: str) -> None:
    # Only the store was named: with thousands of partitions, the user had to bisect.
    bad = sorted(store.rglob("*.parquet"))[3]
    if fault == "truncated":
        bad.write_bytes(bad.read_bytes()[:100])
    else:
        pl.read_parquet(bad).with_columns(pl.col("created_at").dt.epoch("s")).write_parquet(bad)
    batch = write_requests(tmp_path / "r.jsonl", requests())
    args = [str(store), str(batch), "--out", str(tmp_path / "out"), "--rank", "bm25", "--json"]
    result = runner.invoke(app, ["pack", *args, "--as-of", AS_OF, "--workers", "1"])
    assert result.exit_code == EXIT_BAD_INPUT
    error = json.loads(result.stdout)["error"]
    assert error["file"] == str(bad)
    assert error["message"].startswith(f"{store}: not a readable Parquet store: {bad}: ")
    with pytest.raises(SchemaError) as caught:
        read_store(store)
    assert caught.value.file == str(bad)
