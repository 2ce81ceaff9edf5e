"""Items, the canonical schema and JSONL/Parquet I/O: round trips and typed errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from pydantic import ValidationError

from cognoxium.exceptions import ConfigError, RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items._checks import id_problem
from cognoxium.items.convert import frame_to_items, items_to_frame, to_arrow
from cognoxium.items.io import (
    ITEM_FORMATS,
    MAX_ITEM_BYTES,
    MAX_ITEM_BYTES_ENV,
    item_format,
    max_item_bytes,
    payload_bytes_expr,
    read_items,
    read_jsonl,
    read_parquet,
    write_jsonl,
    write_parquet,
)
from cognoxium.items.model import (
    UNDATED,
    ContextItem,
    Json,
    Reference,
    Text,
    canonical_json,
    content_hash,
)
from cognoxium.items.records import item_to_record, records_to_frame
from cognoxium.items.schema import COLUMNS, SCHEMA, SCHEMA_VERSION
from cognoxium.items.validation import conform

T0 = datetime(2024, 1, 1, tzinfo=UTC)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
timestamps = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond))
ids = st.text(min_size=1, max_size=4).filter(lambda s: id_problem(s) is None)
"""Valid ids: non-blank, without control characters."""
payloads = st.one_of(
    st.builds(lambda t: {"kind": "text", "text": t}, st.text(max_size=30)),
    st.builds(lambda v: {"kind": "json", "value": v}, json_values),
    st.builds(lambda b: {"kind": "binary", "data": b}, st.binary(max_size=20)),
    st.builds(
        lambda u, t, d: {"kind": "reference", "uri": u, "title": t, "digest": d},
        st.text(min_size=1, max_size=10),
        st.none() | st.text(max_size=10),
        st.none() | st.text(max_size=10),
    ),
)


@st.composite
def items(draw: st.DrawFn) -> list[ContextItem]:
    n = draw(st.integers(0, 6))
    out = []
    for i in range(n):
        out.append(
            ContextItem(
                id=f"i{i}",
                role=draw(
                    st.sampled_from(
                        ["system", "user", "assistant", "tool", "document", "memory", "developer"]
                    )
                ),
                payload=draw(payloads),
                sources=draw(
                    st.lists(
                        st.builds(
                            lambda u, k, r: {"uri": u, "kind": k, "retrieved_at": r},
                            st.text(max_size=6),
                            st.none() | st.text(max_size=4),
                            st.none() | timestamps,
                        ),
                        max_size=2,
                    )
                ),
                trust=draw(st.sampled_from(["trusted", "untrusted"])),
                sensitivity=draw(
                    st.sampled_from(["public", "internal", "confidential", "restricted"])
                ),
                retention=draw(st.sampled_from(["required", "preferred", "optional"])),
                priority=draw(st.integers(-5, 5)),
                rank=draw(st.none() | st.floats(allow_nan=False, allow_infinity=False)),
                created_at=(created := draw(timestamps)),
                valid_from=draw(st.none() | timestamps),
                expires_at=draw(st.none() | timestamps.filter(lambda t: t >= created)),
                parents=draw(st.lists(ids, max_size=2)),
                lineage=draw(
                    st.lists(
                        st.builds(
                            lambda i, h, o, d: {
                                "parent_id": i,
                                "parent_hash": h,
                                "operation": o,
                                "detail": d,
                            },
                            ids,
                            st.text(min_size=1, max_size=8),
                            st.sampled_from(["redact", "merge", "summarise"]),
                            st.none() | st.text(max_size=6),
                        ),
                        max_size=2,
                    )
                ),
                group_id=draw(st.none() | st.sampled_from(["g1", "g2"])),
                metadata=draw(st.dictionaries(st.text(max_size=5), json_values, max_size=3)),
            )
        )
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=items())
def test_round_trips_are_lossless(values: list[ContextItem], tmp_path: Path) -> None:
    df = items_to_frame(values)
    assert frame_to_items(df) == values
    table = to_arrow(df)
    assert table.schema.equals(SCHEMA, check_metadata=True)
    assert conform(table).equals(df)
    write_parquet(df, tmp_path / "items.parquet")
    assert read_parquet(tmp_path / "items.parquet").equals(df)
    write_jsonl(df, tmp_path / "items.jsonl")
    assert read_jsonl(tmp_path / "items.jsonl").equals(df)
    assert frame_to_items(read_items(tmp_path / "items.jsonl")) == values


def test_schema_columns_and_version() -> None:
    assert COLUMNS[:3] == ("id", "role", "payload_kind")
    assert SCHEMA.metadata == {b"cognoxium.schema_version": str(SCHEMA_VERSION).encode()}
    assert pa.types.is_dictionary(SCHEMA.field("role").type)
    assert "group_id" in COLUMNS
    assert "metadata" in COLUMNS


def test_json_payload_is_canonical_and_hash_covers_kind() -> None:
    a = ContextItem(id="a", role="tool", payload=Json(value={"b": 1, "a": "é"}), created_at=T0)
    assert a.payload.canonical == '{"a":"é","b":1}'  # type: ignore[union-attr]
    assert a.content_hash == content_hash("json", '{"a":"é","b":1}'.encode())
    text = ContextItem(id="t", role="tool", payload=Text(text='{"a":"é","b":1}'), created_at=T0)
    assert text.content_hash != a.content_hash
    assert canonical_json({"z": [1.5, None]}) == '{"z":[1.5,null]}'


def test_item_rejects_unknown_fields_naive_times_and_bad_hash() -> None:
    with pytest.raises(ValidationError, match="extra"):
        ContextItem(role="user", text="x", colour="red")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="timezone"):
        ContextItem(role="user", text="x", created_at=datetime(2024, 1, 1))
    with pytest.raises(ValidationError, match="content_hash"):
        ContextItem.model_validate({"role": "user", "text": "x", "content_hash": "0" * 64})
    with pytest.raises(ValidationError):
        ContextItem(role="user", payload=Reference(uri=""))


def test_defaults_are_documented_values() -> None:
    item = ContextItem(role="user", text="x")
    assert item.trust.value == "untrusted"
    assert item.retention.value == "optional"
    assert item.sensitivity.value == "internal"
    assert len(item.id) == 36
    assert item.created_at == datetime(1970, 1, 1, tzinfo=UTC) == UNDATED


def test_jsonl_bad_record_names_line_and_field(tmp_path: Path) -> None:
    good = json.dumps(item_to_record(ContextItem(id="a", role="user", text="x", created_at=T0)))
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n\n" + good.replace('"user"', '"narrator"') + "\n")
    with pytest.raises(RecordError) as info:
        read_jsonl(path)
    assert info.value.line == 3
    assert info.value.field == "role"
    assert str(path) in str(info.value)
    path.write_text(good + "\n{not json\n")
    with pytest.raises(RecordError, match="invalid JSON") as info2:
        read_jsonl(path)
    assert info2.value.line == 2


@pytest.mark.parametrize("ending", ["\n", "\r\n", ""])
def test_jsonl_syntax_errors_give_the_column_on_their_line(tmp_path: Path, ending: str) -> None:
    broken = '{"id": "a", "role": "user", "text": "unterminated"'
    path = tmp_path / "bad.jsonl"
    path.write_bytes(f'{{"id": "z", "role": "user", "text": "ok"}}\n{broken}{ending}'.encode())
    with pytest.raises(json.JSONDecodeError) as parsed:
        json.loads(broken)
    with pytest.raises(RecordError, match=f"at column {parsed.value.colno}$") as info:
        read_jsonl(path)
    assert info.value.line == 2
    # json's message ends on "at" before its position: it read "starting at at column".
    path.write_text('{"id": "b", "role": "user", "text": "cut\n')
    with pytest.raises(RecordError) as cut:
        read_jsonl(path)
    assert str(cut.value).endswith("invalid JSON: Unterminated string starting at column 37")


@pytest.mark.parametrize(
    ("line", "key"),
    [
        # A retention given twice: a reader keeping the last would downgrade it silently.
        ('{"id": "a", "role": "user", "text": "x", "retention": "required", '
         '"retention": "optional"}', "retention"),
        ('{"id": "a", "role": "user", "text": "first", "text": "second"}', "text"),
        ('{"id": "a", "role": "user", "text": "x", "metadata": {"k": 1, "k": 2}}', "k"),
        # A value holding '":' sends the line to the key-by-key reading.
        ('{"id": "a", "role": "user", "text": "say \\": \\"", "id": "b"}', "id"),
        ('{"id" : "a", "role": "user", "text": "x", "id" : "b"}', "id"),
        # One key spaced from its colon, so the count of '":' alone would match.
        ('{"id": "a", "role": "user", "text": "x", "id" : "b"}', "id"),
    ],
)  # fmt: skip
def test_a_key_given_twice_in_a_jsonl_line_is_refused(tmp_path: Path, line: str, key: str) -> None:
    good = '{"id": "z", "role": "user", "text": "ok", "metadata": {"q": "\\"a\\": 1"}}'
    path = tmp_path / "dup.jsonl"
    path.write_text(f"{good}\n{line}\n")
    with pytest.raises(RecordError, match=f"the key '{key}' appears twice") as info:
        read_jsonl(path)
    assert (info.value.line, info.value.field) == (2, key)
    path.write_text(f"{good}\n")  # '":' inside a string is no second key
    assert read_jsonl(path).get_column("metadata").to_list() == ['{"q":"\\"a\\": 1"}']


def test_conform_errors_name_row_and_column() -> None:
    with pytest.raises(SchemaError, match="unknown columns"):
        conform(pl.DataFrame({"role": ["user"], "text": ["x"], "colour": ["red"]}))
    with pytest.raises(SchemaError, match="role"):
        conform(pl.DataFrame({"text": ["x"]}))
    with pytest.raises(RecordError) as info:
        conform(
            pl.DataFrame({"role": ["user", "user"], "text": ["x", None], "created_at": [T0, T0]})
        )
    assert (info.value.row, info.value.field) == (1, "text")
    assert "no payload" in str(info.value)
    with pytest.raises(RecordError, match="content_hash") as info3:
        conform(
            pl.DataFrame(
                {"role": ["user"], "text": ["x"], "content_hash": ["bad"], "created_at": [T0]}
            )
        )
    assert (info3.value.row, info3.value.field) == (0, "content_hash")
    with pytest.raises(RecordError, match="JSON object"):
        conform(
            pl.DataFrame({"role": ["user"], "text": ["x"], "metadata": ["[1]"], "created_at": [T0]})
        )


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    df = items_to_frame([ContextItem(id="a", role="user", text="x", created_at=T0)])
    target = tmp_path / "out.parquet"
    with pytest.raises(SchemaError, match="missing item columns"):
        write_parquet(df.with_columns(pl.lit(1).alias("extra")).drop("id"), target)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_read_parquet_points_a_partitioned_directory_to_scan_parquet(tmp_path: Path) -> None:
    df = records_to_frame(
        [{"id": f"i{n}", "role": "user", "text": "hi", "priority": n % 2} for n in range(4)]
    )
    for value, part in df.partition_by("priority", as_dict=True).items():
        write_parquet(part, tmp_path / f"shard={value[0]}" / "sub" / "part.parquet")
    for read in (read_parquet, CognitionFrame.read_parquet):
        with pytest.raises(SchemaError, match=r"partition columns \['shard'\].*scan_parquet"):
            read(tmp_path)
    with pytest.raises(SchemaError, match="a directory; read_items reads one"):
        read_items(tmp_path)
    scanned = CognitionFrame.scan_parquet(tmp_path).sort("id").collect()
    assert scanned["shard"].to_list() == [0, 1, 0, 1]
    plain = tmp_path / "plain"
    write_parquet(df.head(2), plain / "a.parquet")
    write_parquet(df.tail(2), plain / "b.parquet")
    assert read_parquet(plain).equals(df)  # a directory without partitions reads as one table


def test_read_items_rejects_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="unsupported"):
        read_items(tmp_path / "items.csv")
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"role": ["user"], "text": ["hi"], "shade": [1]}), path)
    with pytest.raises(SchemaError, match="unknown columns"):
        read_parquet(path)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("items.jsonl", "jsonl"),
        ("items.ndjson", "jsonl"),
        ("ITEMS.JSONL", "jsonl"),
        ("items.parquet", "parquet"),
        ("items.Parquet", "parquet"),
    ],
)
def test_each_suffix_reads_and_writes_its_format(tmp_path: Path, name: str, expected: str) -> None:
    form = item_format(tmp_path / name)
    assert form.name == expected
    df = items_to_frame([ContextItem(id="a", role="user", text="hi", created_at=T0)])
    form.write(df, tmp_path / name)
    assert_frame_equal(form.read(tmp_path / name), df)
    assert_frame_equal(read_items(tmp_path / name), df)
    if expected == "jsonl":
        assert json.loads((tmp_path / name).read_text())["text"] == "hi"
    else:
        assert pq.read_schema(tmp_path / name).names == list(COLUMNS)


def test_the_formats_are_jsonl_and_parquet() -> None:
    assert {suffix: form.name for suffix, form in ITEM_FORMATS.items()} == {
        ".jsonl": "jsonl",
        ".ndjson": "jsonl",
        ".parquet": "parquet",
    }
    assert ITEM_FORMATS[".jsonl"].read is read_jsonl
    assert ITEM_FORMATS[".jsonl"].write is write_jsonl
    assert ITEM_FORMATS[".parquet"].read is read_parquet
    assert ITEM_FORMATS[".parquet"].write is write_parquet


@pytest.mark.parametrize("name", ["items.csv", "items", "items.jsonl.gz"])
def test_an_unknown_suffix_is_an_error_naming_the_path_and_the_formats(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    suffix = path.suffix
    with pytest.raises(SchemaError) as caught:
        item_format(path)
    assert str(caught.value) == (
        f"{path}: unsupported file type {suffix!r}; use one of .jsonl, .ndjson, .parquet"
    )
    assert caught.value.params == {"suffix": suffix, "accepted": [".jsonl", ".ndjson", ".parquet"]}
    with pytest.raises(SchemaError, match=r"use one of \.jsonl, \.ndjson, \.parquet$"):
        read_items(path)


def test_written_files_get_the_usual_mode(tmp_path: Path) -> None:
    import os

    df = items_to_frame([ContextItem(id="a", role="user", text="x", created_at=T0)])
    umask = os.umask(0o022)
    try:
        write_jsonl(df, tmp_path / "a.jsonl")
    finally:
        os.umask(umask)
    assert (tmp_path / "a.jsonl").stat().st_mode & 0o777 == 0o644


def test_table_errors_name_the_file_and_the_row(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    pq.write_table(pa.table({"role": ["user", "narrator"], "text": ["a", "b"]}), path)
    with pytest.raises(RecordError) as info:
        read_parquet(path)
    assert (info.value.source, info.value.row, info.value.line) == (str(path), 1, None)
    assert str(info.value).startswith(f"{path}: row 1: field role:")
    pq.write_table(pa.table({"role": ["user"], "text": ["a"], "shade": [1]}), path)
    with pytest.raises(SchemaError, match=str(path)):
        read_parquet(path)


def _latin1_table(rows: int) -> pa.Table:
    """``rows`` items whose last text is Latin-1 bytes (``café``) typed as a string."""
    texts = [b"hello"] * (rows - 1) + [b"caf\xe9"]
    return pa.table(
        {
            "id": [f"i{k}" for k in range(rows)],
            "role": ["user"] * rows,
            "text": pa.array(texts, type=pa.large_binary()).view(pa.large_string()),
        }
    )


@pytest.mark.parametrize("directory", [False, True])
def test_text_that_is_not_utf8_is_named_by_file_row_and_column(
    tmp_path: Path, directory: bool
) -> None:
    # Polars refused the file whole ("String data contained invalid UTF-8"), naming no row
    # nor column, and the command line's --json gave no file.
    folder = tmp_path / "store"
    folder.mkdir()
    pq.write_table(_latin1_table(3).slice(0, 2), folder / "a.parquet")
    bad = folder / "b.parquet"
    pq.write_table(_latin1_table(5), bad, row_group_size=2)  # the bad value in a later chunk
    with pytest.raises(RecordError) as caught:
        read_parquet(folder if directory else bad)
    error = caught.value
    assert (error.source, error.row, error.field) == (str(bad), 4, "text")
    assert "not UTF-8 text" in str(error)
    assert error.to_dict()["file"] == str(bad)


def test_an_unreadable_parquet_file_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.parquet"
    pl.DataFrame({"id": ["a"], "text": ["x"]}).write_parquet(path)
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(SchemaError, match="not a readable Parquet file") as caught:
        read_parquet(path)
    assert caught.value.to_dict()["file"] == str(path)


def test_a_null_role_and_a_lone_surrogate_are_worded_alike_in_records_and_tables(
    tmp_path: Path,
) -> None:
    # A null role was "Input should be 'system', ..." in JSONL and "must be one of [...]"
    # in Parquet (now both the latter); a lone surrogate in a record's text was named
    # field payload.text.text.
    roles = "['system', 'developer', 'user', 'assistant', 'tool', 'document', 'memory']"
    lines = tmp_path / "items.jsonl"
    lines.write_text('{"id": "a", "role": null, "text": "x"}\n')
    table = tmp_path / "items.parquet"
    frame = pl.DataFrame({"id": ["a"], "role": [None], "text": ["x"]})
    frame.cast({"role": pl.String}).write_parquet(table)
    for path, place in ((lines, ":1: field role"), (table, ": row 0: field role")):
        with pytest.raises(RecordError) as caught:
            read_items(path)
        assert str(caught.value) == f"{path}{place}: must be one of {roles}"
    lines.write_text('{"id": "a", "role": "user", "text": "\\ud800 x"}\n')
    with pytest.raises(RecordError) as surrogate:
        read_items(lines)
    assert (surrogate.value.line, surrogate.value.field) == (1, "text")


def test_record_without_content_says_text_or_payload(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"id": "a", "role": "user"}\n')
    with pytest.raises(RecordError, match=r"'text'.*'payload'") as info:
        read_jsonl(path)
    assert (info.value.line, info.value.field) == (1, "text")


def test_duplicate_ids_are_rejected_everywhere(tmp_path: Path) -> None:
    record = {"id": "a", "role": "user", "text": "x", "created_at": "2024-01-01T00:00:00Z"}
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [record, {**record, "id": "b"}, record]))
    with pytest.raises(RecordError, match="duplicate id 'a' \\(first on line 1\\)") as info:
        read_jsonl(path)
    assert (info.value.line, info.value.field) == (3, "id")
    with pytest.raises(RecordError, match="duplicate id") as info2:
        conform(
            pl.DataFrame(
                {
                    "id": ["a", "b", "b"],
                    "role": ["user"] * 3,
                    "text": ["x"] * 3,
                    "created_at": [T0] * 3,
                }
            )
        )
    assert (info2.value.row, info2.value.field) == (2, "id")
    item = ContextItem(id="a", role="user", text="x", created_at=T0)
    with pytest.raises(RecordError, match="duplicate id"):
        items_to_frame([item, item])


def test_jsonl_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_bytes(b'{"role": "user", "text": "ok"}\n{"role": "user", "text": "\xff"}\n')
    with pytest.raises(RecordError, match="not UTF-8") as info:
        read_jsonl(path)
    assert info.value.line == 2


GOOD = {"id": "ok", "role": "user", "text": "fine", "created_at": "2024-01-01T00:00:00Z"}
BAD_RECORDS = [
    ({"id": "b", "role": "narrator", "text": "x"}, "role"),
    ({"id": "b", "role": "user"}, "text"),
    ({"id": "b", "role": "user", "text": "x", "colour": "red"}, "colour"),
    ({"id": "b", "role": "user", "text": "x", "payload": {"kind": "text", "text": "y"}}, "text"),
    ({"id": "b", "role": "user", "text": 5}, "text"),
    ({"id": "", "role": "user", "text": "x"}, "id"),
    ({"id": None, "role": "user", "text": "x"}, "id"),
    ({"id": "b", "role": "user", "text": "x", "created_at": "2024-01-01T00:00:00"}, "created_at"),
    ({"id": "b", "role": "user", "text": "x", "created_at": "yesterday"}, "created_at"),
    ({"id": "b", "role": "user", "text": "x", "priority": 1.5}, "priority"),
    ({"id": "b", "role": "user", "text": "x", "trust": "sure"}, "trust"),
    ({"id": "b", "role": "user", "text": "x", "metadata": [1]}, "metadata"),
    ({"id": "b", "role": "user", "text": "x", "parents": "a"}, "parents"),
    ({"id": "b", "role": "user", "text": "x", "sources": [{"kind": "web"}]}, "sources.0.uri"),
    ({"id": "b", "role": "user", "text": "x", "sources": [{"uri": "u", "x": 1}]}, "sources.0.x"),
    (
        {"id": "b", "role": "user", "text": "x", "lineage": [{"parent_id": "a"}]},
        "lineage.0.parent_hash",
    ),
    ({"id": "b", "role": "user", "payload": {"kind": "sound"}}, "payload"),
    (
        {"id": "b", "role": "user", "payload": {"kind": "binary", "data": "%%"}},
        "payload.binary.data",
    ),
    (
        {"id": "b", "role": "user", "payload": {"kind": "reference", "uri": ""}},
        "payload.reference.uri",
    ),
    (
        {"id": "b", "role": "tool", "payload": {"kind": "json", "value": [float("nan")]}},
        "payload.json.value",
    ),
    ({"id": "b", "role": "user", "text": "x", "content_hash": "0" * 64}, "content_hash"),
    ({"id": "b", "role": "user", "text": "x", "rank": float("nan")}, "rank"),
    ([1, 2], None),
]


@pytest.mark.parametrize(("bad", "field"), BAD_RECORDS)
def test_a_bad_record_gives_the_same_error_as_a_record_and_as_a_jsonl_line(
    bad: object, field: str | None, tmp_path: Path
) -> None:
    records = [GOOD, {**GOOD, "id": "ok2"}, bad, {**GOOD, "id": "after", "role": "narrator"}]
    with pytest.raises(RecordError) as from_records:
        records_to_frame(records, source="items.jsonl", first_line=1)  # type: ignore[list-item]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(RecordError) as from_jsonl:
        read_jsonl(path)
    a, b = from_records.value, from_jsonl.value
    assert (a.line, a.field, a.message) == (b.line, b.field, b.message) == (3, field, a.message)
    assert str(b) == str(a).replace("items.jsonl", str(path), 1)
    if isinstance(bad, dict):
        with pytest.raises(RecordError) as from_frame:
            CognitionFrame(records)
        held = from_frame.value  # records in memory are named by their index
        assert (held.line, held.row, held.message) == (None, 2, a.message)
        assert str(held) == f"row 2: field {field}: {a.message}"


def test_the_first_bad_record_is_named_whatever_check_fails_later() -> None:
    records = [GOOD, {**GOOD, "id": "b", "priority": "high"}, {**GOOD, "id": "c", "role": "x"}]
    with pytest.raises(RecordError) as info:
        records_to_frame(records)
    assert (info.value.row, info.value.field) == (1, "priority")


def test_record_errors_keep_the_item_model_wording() -> None:
    with pytest.raises(RecordError) as info:
        records_to_frame([GOOD, {**GOOD, "id": "b", "priority": "high"}], source="s.jsonl")
    try:
        ContextItem.model_validate({**GOOD, "priority": "high"})
    except ValidationError as exc:
        expected = exc.errors()[0]["msg"]
    assert info.value.message == expected
    assert str(info.value) == f"s.jsonl: row 1: field priority: {expected}"
    # An enumeration is worded as a table's check words it, not as the model does.
    with pytest.raises(RecordError) as role:
        records_to_frame([GOOD, {**GOOD, "id": "b", "role": "narrator"}], source="s.jsonl")
    roles = "['system', 'developer', 'user', 'assistant', 'tool', 'document', 'memory']"
    assert str(role.value) == f"s.jsonl: row 1: field role: must be one of {roles}"


def test_rank_nan_is_rejected_on_every_path(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="finite number") as from_records:
        records_to_frame([{**GOOD, "rank": float("nan")}])
    assert (from_records.value.row, from_records.value.field) == (0, "rank")
    with pytest.raises(RecordError, match="finite number"):
        conform(pl.DataFrame({"role": ["user"], "text": ["x"], "rank": [float("nan")]}))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=items())
def test_valid_records_give_equal_frames_through_records_jsonl_and_parquet(
    values: list[ContextItem], tmp_path: Path
) -> None:
    records = [item_to_record(item) for item in values]
    from_records = records_to_frame(records)
    assert from_records.equals(items_to_frame(values))
    assert_frame_equal(from_records, items_to_frame(values))
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert_frame_equal(read_jsonl(path), from_records)
    write_parquet(from_records, tmp_path / "items.parquet")
    assert_frame_equal(read_parquet(tmp_path / "items.parquet"), from_records)
    assert_frame_equal(CognitionFrame(records).collect(), from_records)
    python_records = [
        {**item.model_dump(exclude={"payload"}), "payload": item.payload.model_dump()}
        for item in values
    ]
    assert_frame_equal(records_to_frame(python_records), from_records)


def test_an_empty_id_is_rejected_by_records_and_tables_alike() -> None:
    with pytest.raises(RecordError) as from_records:
        records_to_frame([{**GOOD, "id": ""}])
    assert (from_records.value.row, from_records.value.field) == (0, "id")
    with pytest.raises(RecordError, match="must not be blank") as from_table:
        conform(pl.DataFrame({"id": ["a", ""], "role": ["user"] * 2, "text": ["x", "y"]}))
    assert (from_table.value.row, from_table.value.field) == (1, "id")


def test_fields_left_out_by_some_or_all_records_take_the_item_defaults() -> None:
    records = [
        GOOD,
        {
            **GOOD,
            "id": "b",
            "role": "assistant",
            "priority": 3,
            "rank": 0.5,
            "metadata": {"k": 1},
            "sources": [{"uri": "https://x.org"}],
            "parents": ["ok"],
            "trust": "trusted",
        },
        {"id": "c", "role": "tool", "payload": {"kind": "json", "value": {"x": 1}}},
    ]
    records[2]["created_at"] = GOOD["created_at"]
    items = [ContextItem.model_validate(r) for r in records]
    assert_frame_equal(records_to_frame(records), items_to_frame(items))
    assert_frame_equal(records_to_frame([GOOD]), items_to_frame(items[:1]))


def test_chat_records_without_ids_or_times_get_distinct_ids_and_the_epoch() -> None:
    df = records_to_frame([{"role": "user", "text": f"m{i}"} for i in range(3)])
    assert df.get_column("id").n_unique() == 3
    assert df.get_column("created_at").to_list() == [datetime(1970, 1, 1, tzinfo=UTC)] * 3
    assert df.get_column("content_hash").to_list() == [
        content_hash("text", f"m{i}".encode()) for i in range(3)
    ]
    assert df.schema == records_to_frame([GOOD]).schema


UNDATED_RECORDS = [
    {"id": "s", "role": "system", "text": "sys", "retention": "required"},
    {"id": "u", "role": "user", "text": "hi"},
]


def test_items_without_created_at_get_the_epoch_the_same_on_every_conversion() -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    from_records = [records_to_frame(UNDATED_RECORDS) for _ in range(2)]
    from_items = [
        items_to_frame([ContextItem.model_validate(r) for r in UNDATED_RECORDS]) for _ in range(2)
    ]
    table = {"id": ["s", "u"], "role": ["system", "user"], "text": ["sys", "hi"]}
    from_table = [conform(pl.DataFrame(table)) for _ in range(2)]
    for frames in (from_records, from_items, from_table):
        first, second = frames
        assert first.get_column("created_at").to_list() == [epoch, epoch]
        assert first.schema["created_at"] == pl.Datetime("us", "UTC")
        assert_frame_equal(first, second)
    hashes = [content_hash("text", b"sys"), content_hash("text", b"hi")]
    assert from_records[0].get_column("content_hash").to_list() == hashes
    assert from_table[0].get_column("content_hash").to_list() == hashes
    assert_frame_equal(from_records[0], from_items[0])


def test_a_given_created_at_is_kept_next_to_undated_records() -> None:
    when = "2025-11-20T17:40:00Z"
    dated = [{**UNDATED_RECORDS[0], "created_at": when}, UNDATED_RECORDS[1]]
    df = records_to_frame(dated)
    assert df.get_column("created_at").to_list() == [
        datetime(2025, 11, 20, 17, 40, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
    ]
    item = ContextItem(role="user", text="x", created_at=when)
    assert item.created_at == datetime(2025, 11, 20, 17, 40, tzinfo=UTC)
    table = conform(pl.DataFrame({"role": ["user"], "text": ["x"], "created_at": [when]}))
    assert table.get_column("created_at").to_list() == [datetime(2025, 11, 20, 17, 40, tzinfo=UTC)]


def test_one_datetime_on_every_record_is_taken_for_each_row() -> None:
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    df = records_to_frame(
        [{"id": f"r{i}", "role": "user", "text": "hi", "created_at": when} for i in range(3)]
    )
    assert df.get_column("created_at").to_list() == [when] * 3
    assert df.get_column("valid_from").to_list() == [None] * 3
    assert df.schema["created_at"] == pl.Datetime("us", "UTC")


def test_one_naive_datetime_on_every_record_fails_at_the_first() -> None:
    naive = datetime(2024, 5, 6, 7, 8, 9)
    with pytest.raises(RecordError) as caught:
        records_to_frame(
            [{"id": f"r{i}", "role": "user", "text": "hi", "created_at": naive} for i in range(3)]
        )
    assert (caught.value.row, caught.value.field) == (0, "created_at")


# Times a Python datetime cannot hold once in UTC: year 0, and offsets that
# carry year 1 back or year 9999 forward. Every reader refuses them with a
# typed error on the field, as the item model does.
OUT_OF_RANGE_TIMES = [
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:30:00+01:00",
    "9999-12-31T23:59:59-01:00",
]


@pytest.mark.parametrize("stamp", OUT_OF_RANGE_TIMES)
@pytest.mark.parametrize("field", ["created_at", "valid_from", "expires_at", "retrieved_at"])
def test_records_refuse_times_outside_the_years_1_to_9999(stamp: str, field: str) -> None:
    record: dict[str, object] = {"id": "a", "role": "user", "text": "x"}
    record["created_at"] = (
        "0001-01-01T00:00:00Z" if field == "expires_at" else "2025-01-01T00:00:00Z"
    )
    if field == "retrieved_at":
        record["sources"] = [{"uri": "https://example.com", "retrieved_at": stamp}]
    else:
        record[field] = stamp
    with pytest.raises(RecordError) as caught:
        records_to_frame([record], source="items.jsonl")
    assert (caught.value.row, caught.value.source) == (0, "items.jsonl")
    assert field in str(caught.value)
    with pytest.raises(ValidationError):
        ContextItem.model_validate(record)


@pytest.mark.parametrize("stamp", OUT_OF_RANGE_TIMES)
def test_tables_refuse_times_outside_the_years_1_to_9999(stamp: str) -> None:
    table = pl.DataFrame(
        {
            "id": ["a", "b"],
            "role": ["user", "user"],
            "payload_kind": ["text", "text"],
            "text": ["x", "y"],
            "created_at": ["2025-01-01T00:00:00Z", stamp],
        }
    )
    with pytest.raises(RecordError, match="row 1: field created_at: must fall in the years"):
        conform(table)


def test_the_first_and_last_representable_utc_times_are_kept() -> None:
    df = records_to_frame(
        [
            {"id": "a", "role": "user", "text": "x", "created_at": "0001-01-01T00:00:00Z"},
            {"id": "b", "role": "user", "text": "y", "created_at": "9999-12-31T23:59:59Z"},
        ]
    )
    assert [item.created_at.year for item in frame_to_items(df)] == [1, 9999]


# ---------------------------------------------------------------------------
# truncation marks (metadata.truncate)


def test_a_truncation_mark_is_checked_on_the_item() -> None:
    item = ContextItem(
        id="d",
        role="document",
        text="long text",
        created_at=T0,
        metadata={"truncate": {"side": "tail", "min_tokens": 8}},
    )
    assert item.metadata["truncate"] == {"min_tokens": 8, "side": "tail"}
    with pytest.raises(ValidationError, match="side"):
        ContextItem(id="d", role="document", text="x", metadata={"truncate": {"side": "mid"}})
    with pytest.raises(ValidationError, match="min_tokens"):
        ContextItem(id="d", role="document", text="x", metadata={"truncate": {"min_tokens": 0}})
    with pytest.raises(ValidationError, match="only a text payload can be truncated, not json"):
        ContextItem(id="d", role="tool", payload=Json(value={"a": 1}), metadata={"truncate": {}})


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_a_truncation_mark_survives_a_round_trip(tmp_path: Path, suffix: str) -> None:
    df = records_to_frame(
        [
            {
                "id": "d",
                "role": "document",
                "text": "word " * 50,
                "created_at": "2024-01-01T00:00:00Z",
                "metadata": {"truncate": {"side": "tail", "min_tokens": 4}},
            }
        ]
    )
    path = tmp_path / f"items.{suffix}"
    (write_jsonl if suffix == "jsonl" else write_parquet)(df, path)
    back = read_items(path)
    assert back.get_column("metadata").to_list() == ['{"truncate":{"min_tokens":4,"side":"tail"}}']
    as_of = T0 + timedelta(days=1)
    again = CognitionFrame(back).pack(20, as_of=as_of).manifest.to_json()
    assert again == CognitionFrame(df).pack(20, as_of=as_of).manifest.to_json()
    assert '"truncations":[{' in again


# -- maximum item size ---------------------------------------------------------------------


def _sized_records() -> list[dict[str, object]]:
    return [
        {"id": "small", "role": "user", "text": "hello"},
        {"id": "log", "role": "document", "text": "é" * 600},  # 1,200 bytes, 600 characters
        {"id": "blob", "role": "tool", "payload": {"kind": "json", "value": {"k": "x" * 5000}}},
    ]


def test_an_item_over_the_maximum_size_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text("\n\n".join(json.dumps(r) for r in _sized_records()) + "\n")
    with pytest.raises(RecordError) as caught:
        read_jsonl(path, max_item_bytes=1_000)
    error = caught.value
    assert error.code == "record.too_large"
    assert (error.source, error.line, error.field) == (str(path), 3, "text")
    assert error.params == {"id": "log", "bytes": 1_200, "max_item_bytes": 1_000}
    assert "item 'log' has 1,200 bytes of payload" in str(error)
    assert "maximum item size of 1,000 bytes" in str(error)
    assert read_jsonl(path, max_item_bytes=6_000).height == 3  # nothing cut: the limit holds
    frame = read_jsonl(path, max_item_bytes=5_008)  # the canonical JSON {"k":"x..."}
    assert frame.filter(pl.col("id") == "log").get_column("text").item() == "é" * 600
    with pytest.raises(RecordError, match="item 'blob' has 5,008 bytes") as json_case:
        read_items(path, max_item_bytes=5_007)
    assert json_case.value.field == "json"


def test_a_parquet_item_over_the_maximum_size_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    write_parquet(records_to_frame(_sized_records()), path)
    with pytest.raises(RecordError) as caught:
        read_items(path, max_item_bytes=1_000)
    assert (caught.value.row, caught.value.params["id"]) == (1, "log")


def test_the_maximum_item_size_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _sized_records()) + "\n")
    assert max_item_bytes() == MAX_ITEM_BYTES == 64 * 1024 * 1024
    monkeypatch.setenv(MAX_ITEM_BYTES_ENV, "1000")
    with pytest.raises(RecordError, match="maximum item size of 1,000 bytes"):
        read_items(path)
    assert read_items(path, max_item_bytes=10_000).height == 3  # the argument wins
    monkeypatch.setenv(MAX_ITEM_BYTES_ENV, "lots")
    with pytest.raises(ConfigError, match="COGNOXIUM_MAX_ITEM_BYTES must be a whole number"):
        read_items(path)


@pytest.mark.parametrize("limit", [0, -5, 1.5, True, "10"])
def test_a_bad_maximum_item_size_is_refused(tmp_path: Path, limit: object) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(_sized_records()[0]) + "\n")
    with pytest.raises(ConfigError, match="max_item_bytes must be a whole number"):
        read_jsonl(path, max_item_bytes=limit)  # type: ignore[arg-type]


def test_payload_bytes_of_every_payload_kind() -> None:
    frame = records_to_frame(
        [
            {"id": "t", "role": "user", "text": "héllo"},
            {"id": "j", "role": "tool", "payload": {"kind": "json", "value": {"a": 1}}},
            {"id": "b", "role": "tool", "payload": {"kind": "binary", "data": "AAEC"}},
            {
                "id": "r",
                "role": "document",
                "payload": {"kind": "reference", "uri": "https://x.org/a", "title": "Spec"},
            },
        ]
    )
    sizes = frame.select(payload_bytes_expr()).to_series().to_list()
    assert sizes == [6, len('{"a":1}'), 3, len("https://x.org/a") + len("Spec")]


# A warehouse export holds nulls where a field has no value. In a column with a
# documented default a null is that default, row by row: the same item as the
# row with the key left out, on every reader.
GIVEN_VALUES: dict[str, object] = {
    "sources": [{"uri": "https://example.org/a"}],
    "trust": "trusted",
    "sensitivity": "public",
    "retention": "required",
    "priority": 5,
    "created_at": "2025-01-01T10:00:00Z",
    "parents": ["p-1"],
    "lineage": [{"parent_id": "p-1", "parent_hash": "h", "operation": "redact"}],
    "metadata": {"topic": "billing"},
}
DEFAULTED = list(GIVEN_VALUES)


def _null_and_left_out(column: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Two records, the first giving ``column``; the second with it null, and left out."""
    given = {"id": "a", "role": "user", "text": "given", column: GIVEN_VALUES[column]}
    left_out = {"id": "b", "role": "assistant", "text": "null here"}
    return [given, {**left_out, column: None}], [given, left_out]


def _null_table(column: str) -> pl.DataFrame:
    """The records of :func:`_null_and_left_out` as a typed table, null in row 1 of ``column``."""
    _, left_out = _null_and_left_out(column)
    given = records_to_frame([left_out[0], {**left_out[1], column: GIVEN_VALUES[column]}])
    second = pl.int_range(pl.len()) == 1
    return given.with_columns(pl.when(~second).then(pl.col(column)).alias(column))


@pytest.mark.parametrize("column", DEFAULTED)
@pytest.mark.parametrize("reader", ["records", "jsonl", "parquet", "scan", "table", "item"])
def test_a_null_in_a_defaulted_column_reads_as_the_key_left_out(
    tmp_path: Path, column: str, reader: str
) -> None:
    with_null, left_out = _null_and_left_out(column)
    expected = records_to_frame(left_out)
    if reader == "records":
        got = records_to_frame(with_null)
    elif reader == "jsonl":
        path = tmp_path / "items.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in with_null), encoding="utf-8")
        got = read_jsonl(path)
    elif reader == "parquet":
        path = tmp_path / "items.parquet"
        _null_table(column).write_parquet(path)
        got = read_parquet(path)
    elif reader == "scan":
        path = tmp_path / "items.parquet"
        _null_table(column).write_parquet(path)
        scan = CognitionFrame.scan_parquet(path)
        assert_frame_equal(scan.select("id", column).collect(), expected.select("id", column))
        got = scan.collect()
    elif reader == "table":
        got = conform(_null_table(column).drop("content_hash"))
    else:
        got = items_to_frame([ContextItem.model_validate(r) for r in with_null])
    assert_frame_equal(got, expected)
    assert got["content_hash"].to_list() == expected["content_hash"].to_list()
    default = ContextItem(id="b", role="assistant", text="null here")
    assert got.row(1, named=True)[column] == items_to_frame([default]).row(0, named=True)[column]


@pytest.mark.parametrize("reader", ["table", "parquet", "scan"])
def test_a_null_row_of_a_struct_metadata_column_reads_as_the_key_left_out(
    tmp_path: Path, reader: str
) -> None:
    """Metadata held as a struct column (as Arrow and Polars hold objects): a null row is ``{}``."""
    _, left_out = _null_and_left_out("metadata")
    expected = records_to_frame(left_out)
    table = expected.with_columns(
        pl.Series("metadata", [{"topic": "billing"}, None], pl.Struct({"topic": pl.String}))
    )
    if reader == "table":
        got = conform(table)
    else:
        path = tmp_path / "items.parquet"
        table.write_parquet(path)
        got = (
            read_parquet(path)
            if reader == "parquet"
            else CognitionFrame.scan_parquet(path).collect()
        )
    assert got.get_column("metadata").to_list() == ['{"topic":"billing"}', "{}"]
    assert got["content_hash"].to_list() == expected["content_hash"].to_list()


@pytest.mark.parametrize("column", DEFAULTED)
def test_a_null_column_reads_as_the_column_left_out(tmp_path: Path, column: str) -> None:
    rows = pl.DataFrame({"id": ["a", "b"], "role": ["user", "tool"], "text": ["x", "y"]})
    nulls = rows.with_columns(pl.lit(None).alias(column))
    path = tmp_path / "items.parquet"
    nulls.write_parquet(path)
    assert_frame_equal(read_parquet(path), conform(rows))
    assert_frame_equal(conform(nulls), conform(rows))


@pytest.mark.parametrize(
    ("column", "message", "field"),
    [
        ("id", "must not be null", "id"),
        ("role", "must be one of ['system', 'developer', 'user', 'assistant', 'tool', ", "role"),
        (
            "text",
            "no payload: one of the columns text, json, binary, ref_uri must hold a value",
            "text",
        ),
    ],
)
def test_a_null_in_a_required_column_is_still_refused(
    tmp_path: Path, column: str, message: str, field: str
) -> None:
    table = records_to_frame([{"id": "a", "role": "user", "text": "x"}]).drop(
        "content_hash", "payload_kind"
    )
    table = table.with_columns(pl.lit(None, table.schema[column]).alias(column))
    path = tmp_path / "items.parquet"
    table.write_parquet(path)
    with pytest.raises(RecordError) as from_parquet:
        read_parquet(path)
    assert (from_parquet.value.row, from_parquet.value.field) == (0, column)
    assert from_parquet.value.message.startswith(message)
    record = {"id": "a", "role": "user", "text": "x", column: None}
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(RecordError) as from_jsonl:
        read_jsonl(path)
    assert (from_jsonl.value.line, from_jsonl.value.field) == (1, field)
    with pytest.raises(RecordError) as from_records:
        records_to_frame([record])
    assert (from_records.value.row, from_records.value.field) == (0, field)


def test_a_text_time_without_an_offset_is_refused_in_parquet_as_in_jsonl(tmp_path: Path) -> None:
    stamps = ["2025-01-01T10:00:00Z", "2025-01-01T12:00:00+02:00", "2025-01-01T10:00:00"]
    table = pl.DataFrame(
        {"id": ["a", "b", "c"], "role": ["user"] * 3, "text": ["x"] * 3, "created_at": stamps}
    )
    path = tmp_path / "items.parquet"
    table.write_parquet(path)
    with pytest.raises(RecordError) as from_parquet:
        read_parquet(path)
    assert (from_parquet.value.row, from_parquet.value.field) == (2, "created_at")
    lines = tmp_path / "items.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in table.to_dicts()), encoding="utf-8")
    with pytest.raises(RecordError) as from_jsonl:
        read_jsonl(lines)
    assert (from_jsonl.value.line, from_jsonl.value.field) == (3, "created_at")
    assert from_parquet.value.message == from_jsonl.value.message
    assert "UTC offset" in from_parquet.value.message
    assert "2024-01-01T00:00:00Z" in from_parquet.value.message  # what to write instead
    with pytest.raises(RecordError, match="UTC offset") as in_memory:
        conform(table.head(2).with_columns(valid_from=pl.lit("2025-01-01 09:00")))
    assert (in_memory.value.row, in_memory.value.field) == (0, "valid_from")
    # With an offset, Z or +02:00, the times read as the instants they name.
    table.head(2).write_parquet(path)
    when = datetime(2025, 1, 1, 10, tzinfo=UTC)
    assert read_parquet(path)["created_at"].to_list() == [when, when]
    # A datetime column without a time zone is read as UTC, as documented.
    naive = table.with_columns(created_at=pl.lit(datetime(2025, 1, 1, 10)))
    assert conform(naive)["created_at"].to_list() == [when] * 3
