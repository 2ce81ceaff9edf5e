"""Reading manifests back and summarising them."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from cognoxium import CognitionFrame
from cognoxium.exceptions import RecordError
from cognoxium.packing import PackManifest
from cognoxium.packing import manifests as manifests_module
from cognoxium.packing._model import Reason
from cognoxium.packing._parts import sweep
from cognoxium.packing.manifests import (
    NO_SOURCE,
    NOT_IN_ITEMS,
    ManifestWriter,
    read_bodies,
    read_manifests,
    scan_manifests,
    scan_packs,
    summarize_manifests,
)

AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
MANIFESTS_PARQUET = "manifests/part-00000.parquet"
MANIFEST_HEADERS = "manifest_headers/part-00000.jsonl"
MANIFESTS_JSONL = "manifests/part-00000.jsonl"
"""Part 0 of each table, what one writer writes by default."""


def files(folder: Path) -> list[str]:
    """Every file under ``folder``, relative, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def frame() -> CognitionFrame:
    return CognitionFrame(
        [
            {"id": "sys", "role": "system", "text": "Be brief.", "retention": "required"},
            {
                "id": "doc",
                "role": "document",
                "text": "Refunds take five days. " * 20,
                "sources": [{"uri": "kb://refunds"}, {"uri": "kb://faq"}],
            },
            {
                "id": "old",
                "role": "user",
                "text": "hello",
                "expires_at": "2001-01-01T00:00:00Z",
                "created_at": "2000-01-01T00:00:00Z",
            },
            {"id": "q", "role": "user", "text": "How long do refunds take?", "rank": 1.0},
        ]
    )


def test_read_manifests_round_trips_byte_identically(tmp_path: Path) -> None:
    cf = frame()
    lines = [cf.pack(b, as_of=AS_OF, label=f"b{b}").manifest.to_json() for b in (30, 60, 400)]
    path = tmp_path / "manifests.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    manifests = read_manifests(path)
    assert [m.to_json() for m in manifests] == lines
    assert manifests[0].to_polars().schema == cf.pack(30, as_of=AS_OF).manifest.to_polars().schema


def test_summary_counts_and_sources(tmp_path: Path) -> None:
    cf = frame()
    manifests = [cf.pack(b, as_of=AS_OF, label=f"b{b}").manifest for b in (30, 400)]
    summary = summarize_manifests(manifests, items=cf.collect())
    assert summary["manifests"] == 2
    assert summary["reasons"] == {"expired": 2, "over_budget": 1, "required": 2, "selected": 3}
    assert summary["decisions"] == {"excluded": 3, "included": 5}
    doc_tokens = manifests[1].to_polars().filter(pl.col("id") == "doc")["tokens"].item()
    # A document with two sources counts under each.
    assert summary["by_source"]["kb://refunds"] == {
        "included": 1,
        "included_tokens": doc_tokens,
        "items": 2,
    }
    assert summary["by_source"]["kb://faq"] == summary["by_source"]["kb://refunds"]
    assert summary["by_source"][NO_SOURCE]["items"] == 6
    assert summary["by_tier"]["required"]["included"] == 2
    used = [m.used_tokens for m in manifests]
    assert summary["budget"]["used_tokens"] == sum(used)
    assert summary["budget"]["used_fraction"]["max"] == pytest.approx(
        max(used[0] / 30, used[1] / 400)
    )
    assert [m["label"] for m in summary["per_manifest"]] == ["b30", "b400"]
    empty = summarize_manifests([])
    assert empty["manifests"] == 0
    assert empty["budget"]["utilization"] is None
    assert empty["reasons"] == {}


def test_read_errors_name_line_and_field(tmp_path: Path) -> None:
    good = frame().pack(400, as_of=AS_OF).manifest.to_json()
    data = json.loads(good)
    data["entries"][2]["extra"] = 1
    path = tmp_path / "m.jsonl"
    path.write_text(good + "\n" + json.dumps(data) + "\n")
    with pytest.raises(RecordError) as info:
        read_manifests(path)
    assert (info.value.line, info.value.field) == (2, "entries[2].extra")
    data["entries"][2].pop("extra")
    data["entries"][1]["id"] = None
    path.write_text(json.dumps([json.loads(good), data]))
    with pytest.raises(RecordError) as info:
        read_manifests(path)
    assert (info.value.row, info.value.field) == (1, "entries[1].id")
    path.write_text("[1]")
    with pytest.raises(RecordError, match="must be a JSON object"):
        read_manifests(path)
    path.write_text("")
    assert read_manifests(path) == []


# ---------------------------------------------------------------------------
# stored forms: Parquet (entries plus headers) and JSONL


def packed() -> list[PackManifest]:
    cf = frame()
    return [cf.pack(b, as_of=AS_OF, label=f"b{b}").manifest for b in (30, 60, 400)]


def write(folder: Path, form: str, manifests: list[PackManifest], part: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with ManifestWriter(folder, form, part=part) as writer:  # type: ignore[arg-type]
        for manifest in manifests:
            writer.write(str(manifest.label), manifest)
    return folder


def test_both_forms_round_trip_and_summarise_alike(tmp_path: Path) -> None:
    manifests = packed()
    parquet = write(tmp_path / "p", "parquet", manifests)
    jsonl = write(tmp_path / "j", "jsonl", manifests)
    assert files(parquet) == [MANIFEST_HEADERS, MANIFESTS_PARQUET]
    assert files(jsonl) == [MANIFESTS_JSONL]
    places = (parquet, parquet / "manifests", parquet / MANIFESTS_PARQUET)
    for where in (*places, jsonl, jsonl / "manifests", jsonl / MANIFESTS_JSONL):
        back = read_manifests(where)
        assert back == manifests
        assert [m.to_json() for m in back] == [m.to_json() for m in manifests]
    headers = [json.loads(line) for line in (parquet / MANIFEST_HEADERS).read_text().splitlines()]
    assert [h["request_id"] for h in headers] == ["b30", "b60", "b400"]
    assert "entries" not in headers[0]
    items = frame().collect()
    expected = summarize_manifests(manifests, items=items)
    assert summarize_manifests(parquet, items=items) == expected
    assert summarize_manifests(jsonl / MANIFESTS_JSONL, items=items) == expected
    lazy = scan_manifests(parquet)
    assert isinstance(lazy, pl.LazyFrame)
    assert lazy.collect().equals(scan_manifests(jsonl).collect())
    # Projections and filters reach the scan; the rows are those of the manifests.
    selected = lazy.filter(pl.col("decision") == "included").select("request_id", "id").collect()
    assert selected.rows() == [
        (str(m.label), row["id"])
        for m in manifests
        for row in m.to_polars().iter_rows(named=True)
        if row["decision"] == "included"
    ]


def test_parquet_row_groups_end_at_a_request_and_bytes_repeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifests_module, "_ROW_GROUP_ROWS", 5)
    manifests = packed()
    first = write(tmp_path / "a", "parquet", manifests)
    second = write(tmp_path / "b", "parquet", manifests)
    for name in (MANIFESTS_PARQUET, MANIFEST_HEADERS):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    meta = pq.ParquetFile(first / MANIFESTS_PARQUET).metadata
    # 4 entries per manifest, a row group once 5 rows are buffered: 8 + 4 rows.
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [8, 4]
    column = meta.row_group(0).column(0)
    assert column.compression == "ZSTD"
    assert column.statistics.min == "b30"
    assert read_manifests(first) == manifests


def test_parquet_headers_and_entries_must_agree(tmp_path: Path) -> None:
    folder = write(tmp_path / "p", "parquet", packed())
    headers = (folder / MANIFEST_HEADERS).read_text().splitlines()
    (folder / MANIFEST_HEADERS).write_text("\n".join(headers[:2]) + "\n")
    for read in (read_manifests, summarize_manifests):
        with pytest.raises(RecordError, match="entries of request 'b400' have no header") as info:
            read(folder)  # type: ignore[operator]
        assert info.value.field == "request_id"
    broken = json.loads(headers[1])
    broken["totals"]["items"] = 3
    lines = [headers[0], json.dumps(broken), headers[2]]
    (folder / MANIFEST_HEADERS).write_text("\n".join(lines) + "\n")
    counted = r"'b60' has 4 entries in part-00000.parquet, its header counts 3"
    with pytest.raises(RecordError, match=counted) as info:
        summarize_manifests(folder)
    assert (info.value.source, info.value.line, info.value.field) == (
        str(folder / MANIFEST_HEADERS),
        2,
        "totals.items",
    )
    lines[1] = headers[0]
    (folder / MANIFEST_HEADERS).write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match="duplicate request id 'b30'"):
        read_manifests(folder)
    (folder / MANIFEST_HEADERS).unlink()
    with pytest.raises(RecordError, match="the manifest_headers table lacks part 0") as info:
        summarize_manifests(folder)
    assert info.value.source == str(folder / MANIFEST_HEADERS)
    with pytest.raises(FileNotFoundError):
        summarize_manifests(folder / MANIFESTS_PARQUET)


def test_a_parquet_file_of_other_columns_is_refused(tmp_path: Path) -> None:
    folder = write(tmp_path / "p", "parquet", packed())
    rows = pl.read_parquet(folder / MANIFESTS_PARQUET)
    rows.drop("tokens").write_parquet(folder / MANIFESTS_PARQUET)
    with pytest.raises(RecordError, match="missing column") as info:
        scan_manifests(folder)
    assert info.value.field == "tokens"
    rows.with_columns(pl.col("priority").cast(pl.String)).write_parquet(folder / MANIFESTS_PARQUET)
    with pytest.raises(RecordError, match="has type String, expected Int64") as info:
        summarize_manifests(folder)
    assert info.value.field == "priority"
    with pytest.raises(RecordError, match=r"holds no manifests \(manifests/part-<n>\.parquet"):
        scan_manifests(tmp_path)


def test_a_parquet_file_of_earlier_reasons_is_read_with_the_current_ones(tmp_path: Path) -> None:
    folder = write(tmp_path / "p", "parquet", packed())
    expected = read_manifests(folder)
    rows = pl.read_parquet(folder / MANIFESTS_PARQUET)
    reasons = [r.value for r in Reason]
    assert rows.schema["reason"] == pl.Enum(reasons)
    assert reasons[-3:] == ["before_tail", "tool_call_arguments_invalid", "tool_use_id_duplicate"]
    for known in (len(reasons) - 2, len(reasons) - 1):  # as written before the newest reasons
        earlier = pl.Enum(reasons[:known])
        rows.with_columns(pl.col("reason").cast(pl.String).cast(earlier)).write_parquet(
            folder / MANIFESTS_PARQUET
        )
        assert pl.read_parquet_schema(folder / MANIFESTS_PARQUET)["reason"] == earlier
        assert scan_manifests(folder).collect().equals(rows)
        assert read_manifests(folder) == expected
    other = pl.Enum([*reasons[1:], reasons[0]])  # not an earlier version's values: refused
    rows.with_columns(pl.col("reason").cast(pl.String).cast(other)).write_parquet(
        folder / MANIFESTS_PARQUET
    )
    with pytest.raises(RecordError, match="has type Enum") as info:
        scan_manifests(folder)
    assert info.value.field == "reason"


def test_jsonl_is_summarised_in_chunks_of_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifests = packed()
    jsonl = write(tmp_path / "j", "jsonl", manifests) / MANIFESTS_JSONL
    items = frame().collect()
    whole = summarize_manifests(jsonl, items=items)
    monkeypatch.setattr(manifests_module, "_CHUNK_BYTES", 1)  # one line per chunk
    assert summarize_manifests(jsonl, items=items) == whole
    assert whole == summarize_manifests(manifests, items=items)


@pytest.mark.parametrize("chunk", [32 * 1024 * 1024, 1])
def test_a_bad_jsonl_value_is_named_by_line_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(manifests_module, "_CHUNK_BYTES", chunk)
    lines = [m.to_json() for m in packed()]
    bad = json.loads(lines[1])
    bad["entries"][1]["id"] = None  # shaped right, so only the scan sees it
    path = tmp_path / MANIFESTS_JSONL
    path.parent.mkdir()
    path.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    with pytest.raises(RecordError) as info:
        summarize_manifests(path)
    assert (info.value.line, info.value.field) == (2, "entries[1].id")
    bad["entries"][1]["id"] = "doc"
    bad["entries"][2]["position"] = "two"
    path.write_text("\n".join([lines[0], json.dumps(bad)]) + "\n")
    with pytest.raises(RecordError) as info:
        summarize_manifests(path)
    assert (info.value.line, info.value.field) == (2, "entries[2].position")
    path.write_text("")
    assert summarize_manifests(path)["manifests"] == 0
    assert scan_manifests(path).collect().height == 0


def test_parquet_bytes_follow_the_manifests_not_their_chunks(tmp_path: Path) -> None:
    # The same entries held in other Arrow chunks (a frame built in pieces, or
    # unpickled in another process) must give the same file: pyarrow's encoding of
    # a column (where a dictionary over 1 MB spills to plain pages) follows chunks.
    cf = CognitionFrame(
        [{"id": f"m{i}", "role": "user", "text": f"note {i}"} for i in range(20_000)]
    )
    manifests = [cf.pack(b, as_of=AS_OF, label=f"b{b}").manifest for b in (100, 5000)]
    copies = []
    for manifest in manifests:
        entries = manifest.to_polars()
        copy = manifest.model_copy()
        copy._entries = pl.concat([entries.slice(k, 700) for k in range(0, entries.height, 700)])
        assert copy.to_polars().n_chunks() > 1
        copies.append(copy)
    first = write(tmp_path / "a", "parquet", manifests)
    second = write(tmp_path / "b", "parquet", copies)
    assert (first / MANIFESTS_PARQUET).read_bytes() == (second / MANIFESTS_PARQUET).read_bytes()
    assert read_manifests(second) == manifests


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cognoxium-manifests"]


def test_a_row_group_that_cannot_be_written_fails_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Row groups are written on a thread of their own; its error must reach the
    # caller (at a later write or at close) and the thread must end.
    monkeypatch.setattr(manifests_module, "_ROW_GROUP_ROWS", 5)
    written: list[int] = []

    def full_disk(writer: pq.ParquetWriter, frames: list[pl.DataFrame]) -> None:
        written.append(sum(f.height for f in frames))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manifests_module, "_write_row_group", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        write(tmp_path / "p", "parquet", packed() * 4)
    assert written == [8]  # after the first error nothing more is written
    assert _writer_threads() == []


def test_an_error_in_the_with_block_is_not_hidden_by_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(writer: pq.ParquetWriter, frames: list[pl.DataFrame]) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(manifests_module, "_write_row_group", broken)
    manifest = packed()[0]

    def interrupted() -> None:
        with ManifestWriter(tmp_path, "parquet") as writer:
            writer.write("r1", manifest)
            raise KeyError("stop")

    with pytest.raises(KeyError, match="stop"):
        interrupted()
    assert _writer_threads() == []


def test_row_groups_written_on_their_thread_keep_the_order_of_the_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifests_module, "_ROW_GROUP_ROWS", 4)
    manifests = [m.model_copy(update={"label": f"r{i}"}) for i, m in enumerate(packed() * 5)]
    folder = write(tmp_path / "p", "parquet", manifests)
    meta = pq.ParquetFile(folder / MANIFESTS_PARQUET).metadata
    assert meta.num_row_groups == 15  # one per request: 4 entries each
    assert scan_manifests(folder).select("request_id").unique(maintain_order=True).collect()[
        "request_id"
    ].to_list() == [f"r{i}" for i in range(15)]
    assert read_manifests(folder) == manifests


def test_entries_missing_from_the_items_count_apart_from_items_without_a_source() -> None:
    cf = frame()
    manifests = [cf.pack(b, as_of=AS_OF, label=f"b{b}").manifest for b in (30, 400)]
    full = summarize_manifests(manifests, items=cf.collect())
    other = cf.collect().filter(pl.col("id") != "doc")
    summary = summarize_manifests(manifests, items=other)
    assert summary["by_source"][NOT_IN_ITEMS]["items"] == 2
    assert summary["by_source"][NO_SOURCE] == full["by_source"][NO_SOURCE]
    assert "kb://refunds" not in summary["by_source"]
    assert NOT_IN_ITEMS not in full["by_source"]
    empty = summarize_manifests(manifests, items=other.clear())
    assert set(empty["by_source"]) == {NOT_IN_ITEMS}
    assert empty["by_source"][NOT_IN_ITEMS]["items"] == full["items"]["entries"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"budget": -5}, "token counts must not be negative"),
        ({"pack_overhead_tokens": -1}, "token counts must not be negative"),
        ({"used_tokens": 99999}, "exceed the budget"),
        ({"remaining_tokens": 7}, "remaining_tokens 7 is not budget"),
    ],
)
def test_a_manifest_whose_token_counts_do_not_add_up_is_refused(
    tmp_path: Path, change: dict[str, int], message: str
) -> None:
    data = json.loads(frame().pack(400, as_of=AS_OF).manifest.to_json())
    data |= change
    text = json.dumps(data)
    with pytest.raises(ValueError, match=message):
        PackManifest.from_json(text)
    path = tmp_path / "manifests.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(RecordError, match=message):
        read_manifests(path)


# ---------------------------------------------------------------------------
# parts: one per task, read in number order as one table


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_parts_are_read_in_number_order_as_one_table(tmp_path: Path, form: str) -> None:
    manifests = [m.model_copy(update={"label": f"r{i}"}) for i, m in enumerate(packed() * 4)]
    # Written out of order; part_files orders by number, whatever the digits.
    for part, group in zip(
        (3, 0, 1, 2),
        (manifests[9:], manifests[:3], manifests[3:6], manifests[6:9]),
        strict=True,
    ):
        write(tmp_path / "p", form, group, part=part)
    folder = tmp_path / "p"
    assert read_manifests(folder) == manifests
    whole = write(tmp_path / "one", form, manifests)
    assert scan_manifests(folder).collect().equals(scan_manifests(whole).collect())
    items = frame().collect()
    assert summarize_manifests(folder, items=items) == summarize_manifests(whole, items=items)
    # One part alone, by its path.
    assert read_manifests(folder / "manifests" / f"part-00002.{form}") == manifests[6:9]


def test_the_parts_of_jsonl_concatenate_to_the_one_file(tmp_path: Path) -> None:
    manifests = packed()
    write(tmp_path / "p", "jsonl", manifests[:1], part=0)
    write(tmp_path / "p", "jsonl", manifests[1:], part=1)
    whole = write(tmp_path / "one", "jsonl", manifests)
    parts = sorted((tmp_path / "p" / "manifests").iterdir())
    joined = b"".join(part.read_bytes() for part in parts)
    assert joined == (whole / MANIFESTS_JSONL).read_bytes()


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_a_part_written_again_replaces_the_first(tmp_path: Path, form: str) -> None:
    # A task run again (its worker died) writes its part again: the part is
    # replaced, never doubled, and no temporary file is left.
    manifests = packed()
    first = files(write(tmp_path / "p", form, manifests[:2], part=0))
    write(tmp_path / "p", form, manifests[:2], part=0)
    assert files(tmp_path / "p") == first
    assert read_manifests(tmp_path / "p") == manifests[:2]


def test_a_part_whose_writing_fails_is_not_left(tmp_path: Path) -> None:
    manifest = packed()[0]
    write(tmp_path, "parquet", [manifest], part=0)
    before = {name: (tmp_path / name).read_bytes() for name in files(tmp_path)}

    def interrupted(part: int) -> None:
        with ManifestWriter(tmp_path, "parquet", part=part) as writer:
            writer.write("other", manifest)
            raise KeyError("stop")

    for part in (1, 0):  # a new part, and one already written
        with pytest.raises(KeyError, match="stop"):
            interrupted(part)
    assert {name: (tmp_path / name).read_bytes() for name in files(tmp_path)} == before


def test_sweep_removes_what_a_dead_writer_left(tmp_path: Path) -> None:
    manifests = packed()
    write(tmp_path, "parquet", manifests, part=0)
    left = ManifestWriter(tmp_path, "parquet", part=1)  # never closed, as if its process died
    left.write("r1", manifests[0])
    assert len(files(tmp_path)) == 4
    sweep(tmp_path)
    assert files(tmp_path) == [MANIFEST_HEADERS, MANIFESTS_PARQUET]
    assert read_manifests(tmp_path) == manifests
    left._discard(KeyError("died"))  # close its files (already removed)
    assert files(tmp_path) == [MANIFEST_HEADERS, MANIFESTS_PARQUET]


def test_scan_packs_reads_the_parts_in_order(tmp_path: Path) -> None:
    table = tmp_path / "packs"
    table.mkdir()
    line = '{"budget":%d,"ids":["a","b"],"request_id":"r%d","used_tokens":3}\n'
    for part, requests in ((1, (3,)), (0, (1, 2)), (2, ())):
        text = "".join(line % (10 * r, r) for r in requests)
        (table / f"part-{part:05d}.jsonl").write_text(text)
    (table / ".part-00003.jsonl.0123456789abcdef.tmp").write_text(line % (1, 9))
    rows = scan_packs(tmp_path).collect()
    assert rows.rows() == [
        (10, ["a", "b"], "r1", 3),
        (20, ["a", "b"], "r2", 3),
        (30, ["a", "b"], "r3", 3),
    ]
    assert scan_packs(table).collect().equals(rows)
    assert scan_packs(table / "part-00001.jsonl").collect()["request_id"].to_list() == ["r3"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordError, match="holds no packs"):
        scan_packs(tmp_path / "empty")


# ---------------------------------------------------------------------------
# bad input read back: a typed error naming the file at fault, in every form


def _run(tmp_path: Path, form: str, parts: int = 3) -> Path:
    """A run of ``parts`` parts (manifests and packs), one manifest of ``packed()`` each."""
    folder = tmp_path / "run"
    for part, manifest in enumerate(packed()[:parts]):
        write(folder, form, [manifest], part=part)
        line = {"body": None, "budget": manifest.budget, "ids": [], "request_id": manifest.label}
        (folder / "packs").mkdir(exist_ok=True)
        (folder / "packs" / f"part-{part:05d}.jsonl").write_text(json.dumps(line) + "\n")
    return folder


def _readers(folder: Path) -> list[object]:
    return [
        lambda: read_manifests(folder),
        lambda: summarize_manifests(folder),
        lambda: scan_manifests(folder).collect(),
    ]


def _manifest_lines(folder: Path, form: str, part: int) -> tuple[Path, list[dict[str, object]]]:
    """The file holding a part's headers (Parquet) or manifests (JSONL), and its objects."""
    table = "manifest_headers" if form == "parquet" else "manifests"
    path = folder / table / f"part-{part:05d}.jsonl"
    return path, [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
@pytest.mark.parametrize("found", ["cognoxium.pack_manifest/9", "something-else", None])
def test_a_manifest_of_another_format_is_refused_naming_its_line(
    tmp_path: Path, form: str, found: str | None
) -> None:
    folder = _run(tmp_path, form)
    path, lines = _manifest_lines(folder, form, 1)
    if found is None:
        del lines[0]["format"]
    else:
        lines[0]["format"] = found
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    for read in (read_manifests, summarize_manifests):
        with pytest.raises(RecordError) as info:
            read(folder)  # type: ignore[operator]
        assert (info.value.source, info.value.line, info.value.field) == (str(path), 1, "format")
        assert info.value.params == {"format": found, "expected": "cognoxium.pack_manifest/1"}
        assert "cognoxium.pack_manifest/1" in str(info.value)
        assert found is None or repr(found) in str(info.value)


@pytest.mark.parametrize("found", ["something-else", None])
def test_from_json_and_a_json_document_refuse_another_format(
    tmp_path: Path, found: str | None
) -> None:
    data = json.loads(packed()[0].to_json())
    data["format"] = found
    if found is None:
        del data["format"]
    with pytest.raises(RecordError) as info:
        PackManifest.from_json(json.dumps(data))
    assert (info.value.field, info.value.params["format"]) == ("format", found)
    path = tmp_path / "many.json"
    path.write_text(json.dumps([json.loads(packed()[0].to_json()), data], indent=1))
    with pytest.raises(RecordError) as info:
        read_manifests(path)
    assert (info.value.source, info.value.row, info.value.field) == (str(path), 1, "format")
    assert info.value.params["format"] == found


def test_from_json_raises_a_record_error_for_what_is_not_a_manifest() -> None:
    manifest = packed()[0]
    header = manifest._header()
    cases = [
        (json.dumps(header), "missing", "entries"),
        ("[1]", "must be a JSON object, got list", None),
        ("{bad", "invalid JSON at line 1 column 2", None),
        ('"text"', "must be a JSON object, got str", None),
    ]
    for text, message, field in cases:
        with pytest.raises(RecordError, match=message) as info:
            PackManifest.from_json(text)
        assert info.value.field == field
    assert PackManifest.from_json(manifest.to_json()) == manifest


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"items": 999}, "totals.items"),
        ({"included": 0, "excluded": 4}, "totals.included"),
        ({"counted": 0}, "totals.counted"),
        ({"not_counted": 9}, "totals.not_counted"),
        ({"by_reason": {"selected": 4}}, "totals.by_reason"),
    ],
)
@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_a_header_whose_totals_its_entries_do_not_add_up_to_is_refused_in_every_form(
    tmp_path: Path, form: str, change: dict[str, object], field: str
) -> None:
    folder = _run(tmp_path, form)
    path, lines = _manifest_lines(folder, form, 2)
    lines[0]["totals"] |= change  # type: ignore[operator]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    for read in (read_manifests, summarize_manifests):
        with pytest.raises(RecordError) as info:
            read(folder)  # type: ignore[operator]
        assert (info.value.source, info.value.line, info.value.field) == (str(path), 1, field)
    whole = json.loads(packed()[2].to_json())
    whole["totals"] |= change
    with pytest.raises(RecordError) as info:
        PackManifest.from_json(json.dumps(whole))
    assert info.value.field == field


@pytest.mark.parametrize("form", ["parquet", "jsonl", "json"])
def test_an_entry_whose_decision_is_not_that_of_its_reason_is_refused(
    tmp_path: Path, form: str
) -> None:
    manifest = packed()[2]
    entries = manifest.to_polars()
    at = entries.get_column("reason").cast(pl.String).index_of("required")
    changed = manifest.model_copy()
    changed._entries = entries.with_columns(
        pl.when(pl.int_range(pl.len()) == at)
        .then(pl.lit("excluded"))
        .otherwise(pl.col("decision"))
        .cast(entries.schema["decision"])
        .alias("decision")
    )
    if form == "json":
        with pytest.raises(RecordError, match="decision 'excluded' and reason 'required'") as info:
            PackManifest.from_json(changed.to_json())
        assert info.value.field == "entries.decision"
        return
    folder = write(tmp_path / "run", form, [changed])
    for read in (read_manifests, summarize_manifests):
        with pytest.raises(RecordError, match="decision 'excluded' and reason 'required'") as info:
            read(folder)  # type: ignore[operator]
        assert (info.value.line, info.value.field) == (1, "entries.decision")


def test_every_parquet_part_is_checked_and_a_bad_one_named(tmp_path: Path) -> None:
    folder = _run(tmp_path, "parquet")
    part = folder / "manifests" / "part-00001.parquet"
    rows = pl.read_parquet(part)
    rows.drop("redactions").write_parquet(part)
    for read in _readers(folder):
        with pytest.raises(RecordError, match="missing column") as info:
            read()  # type: ignore[operator]
        assert (info.value.source, info.value.field) == (str(part), "redactions")
    rows.write_parquet(part)
    assert read_manifests(folder) == packed()
    part.write_bytes(part.read_bytes()[:-50])  # cut short: its footer is gone
    for read in _readers(folder):
        with pytest.raises(RecordError, match="not a readable Parquet file") as info:
            read()  # type: ignore[operator]
        assert info.value.source == str(part)


def test_a_parquet_part_whose_rows_cannot_be_read_is_named(tmp_path: Path) -> None:
    folder = _run(tmp_path, "parquet")
    part = folder / "manifests" / "part-00002.parquet"
    data = bytearray(part.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    data[4 : len(data) - footer - 8] = b"\xff" * (len(data) - footer - 12)  # pages, not footer
    part.write_bytes(bytes(data))
    for read in (read_manifests, summarize_manifests):
        with pytest.raises(RecordError) as info:
            read(folder)  # type: ignore[operator]
        assert info.value.source == str(part)


def test_a_parquet_entry_without_a_required_value_is_named_at_its_part_and_row(
    tmp_path: Path,
) -> None:
    folder = _run(tmp_path, "parquet")
    part = folder / "manifests" / "part-00001.parquet"
    rows = pl.read_parquet(part)
    rows.with_columns(
        pl.when(pl.int_range(pl.len()) == 2).then(None).otherwise(pl.col("id")).alias("id")
    ).write_parquet(part)
    with pytest.raises(RecordError) as info:
        summarize_manifests(folder)
    assert (info.value.source, info.value.row, info.value.field) == (str(part), 2, "id")


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_a_part_cut_short_is_named_at_its_line(tmp_path: Path, form: str) -> None:
    folder = _run(tmp_path, form)
    packs = folder / "packs" / "part-00001.jsonl"
    packs.write_bytes(packs.read_bytes()[:-10])
    for read in (lambda: list(read_bodies(folder)), lambda: scan_packs(folder).collect()):
        with pytest.raises(RecordError, match="invalid JSON at column") as info:
            read()
        assert (info.value.source, info.value.line) == (str(packs), 1)
    part, _ = _manifest_lines(folder, form, 2)
    part.write_bytes(b"\n" + part.read_bytes()[:-30])
    # A scan of Parquet entries reads no header.
    for read in _readers(folder)[: 2 if form == "parquet" else 3]:
        with pytest.raises(RecordError, match="invalid JSON at column") as info:
            read()  # type: ignore[operator]
        assert (info.value.source, info.value.line) == (str(part), 2)


def test_a_pack_line_that_is_not_a_pack_is_named(tmp_path: Path) -> None:
    folder = _run(tmp_path, "jsonl")
    packs = folder / "packs" / "part-00000.jsonl"
    for text, field in (("[1]\n", None), ('{"body": null}\n', "request_id")):
        packs.write_text(text)
        with pytest.raises(RecordError) as info:
            list(read_bodies(folder))
        assert (info.value.source, info.value.line, info.value.field) == (str(packs), 1, field)


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_a_run_missing_a_part_is_refused_naming_it(tmp_path: Path, form: str) -> None:
    folder = _run(tmp_path, form, parts=3)
    suffix = ".parquet" if form == "parquet" else ".jsonl"
    removed = [folder / "manifests" / f"part-00001{suffix}", folder / "packs" / "part-00001.jsonl"]
    if form == "parquet":
        removed.append(folder / "manifest_headers" / "part-00001.jsonl")
    for path in removed:
        path.unlink()  # a middle part of every table
    readers = [*_readers(folder), lambda: scan_packs(folder), lambda: list(read_bodies(folder))]
    for read in readers:
        with pytest.raises(RecordError, match="lacks part 1 of at least 3") as info:
            read()  # type: ignore[operator]
        assert info.value.params == {"part": 1}
        assert Path(info.value.source or "").name in {p.name for p in removed}
    # One table without the last part of the others: the part is named too.
    folder = _run(tmp_path / "last", form, parts=3)
    (folder / "manifests" / f"part-00002{suffix}").unlink()
    with pytest.raises(RecordError, match="lacks part 2") as info:
        read_manifests(folder)
    assert info.value.source == str(folder / "manifests" / f"part-00002{suffix}")
    with pytest.raises(RecordError, match="lacks part 2"):
        scan_packs(folder)
