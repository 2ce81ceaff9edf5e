"""Hostile input: every bad record, request or file is a typed error, never a crash.

Through the Python API (``records_to_frame``, ``CognitionFrame.from_records``,
``read_jsonl``, ``read_requests``, ``run_batch``) every case either succeeds or
raises a :class:`~cognoxium.exceptions.CognoxiumError`. Through the command
line every bad file exits 2 with a message naming the file and the line (the
row, for Parquet), and no traceback.

Two sources of cases: hypothesis strategies that mutate valid records and
requests (wrong types per field, huge numbers, NaN and infinity, lone
surrogates, control characters, deep nesting, huge strings, bad timestamps,
unknown fields, duplicate ids, bad JSON lines, byte order marks, invalid
UTF-8), and a corpus of hostile files built here, one per known class.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cognoxium.app.batch import Request, read_requests, run_batch
from cognoxium.app.cli import EXIT_BAD_INPUT, EXIT_OK, app
from cognoxium.exceptions import CognoxiumError, RecordError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.convert import frame_to_items
from cognoxium.items.io import read_items, read_jsonl
from cognoxium.items.records import records_to_frame
from cognoxium.packing.manifests import scan_packs
from cognoxium.packing.options import PackOptions
from tests.reach import reached, reaching

AS_OF = "2026-01-01T00:00:00Z"
T0 = "2025-01-01T00:00:00Z"
FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
runner = CliRunner()


# ---------------------------------------------------------------------------
# Values too deep for json.dumps are written as text.


@dataclass(frozen=True)
class Deep:
    """A value nested ``depth`` levels of arrays or objects deep."""

    depth: int
    kind: str = "{"

    def text(self) -> str:
        if self.kind == "{":
            return '{"a":' * self.depth + "1" + "}" * self.depth
        return "[" * self.depth + "]" * self.depth

    def value(self) -> Any:
        inner: Any = 1 if self.kind == "{" else []
        for _ in range(self.depth - (0 if self.kind == "{" else 1)):
            inner = {"a": inner} if self.kind == "{" else [inner]
        return inner


_MARK = "\x00deep{}\x00"


def to_line(record: Any) -> str:
    """JSON text of ``record``; Deep values become their text, NaN stays NaN."""
    deep: list[Deep] = []

    def mark(value: Any) -> str:
        if isinstance(value, Deep):
            deep.append(value)
            return _MARK.format(len(deep) - 1)
        raise TypeError(type(value).__name__)

    line = json.dumps(record, default=mark)
    for index, value in enumerate(deep):
        line = line.replace(json.dumps(_MARK.format(index)), value.text())
    return line


def to_python(record: Any) -> Any:
    """``record`` with each Deep value built as nested Python objects."""
    if isinstance(record, Deep):
        return record.value()
    if isinstance(record, dict):
        return {key: to_python(value) for key, value in record.items()}
    if isinstance(record, list):
        return [to_python(value) for value in record]
    return record


# ---------------------------------------------------------------------------
# Strategies of hostile values

surrogates = st.sampled_from(["\ud800", "\udfff", "\udc00", "\udbff"])
hostile_strings = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "\t\n", "\u00a0", "\ufeff", "x" * 1025, "é" * 20_000]),
    st.text(st.characters(categories=["Cc"]), min_size=1, max_size=3),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=3), surrogates, st.text(max_size=3)),
)
hostile_numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**400, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
hostile_times = st.one_of(
    st.sampled_from(
        [
            "2024-13-45T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59+23:59",
            "2024-01-01",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00Z",
            "yesterday",
            "",
            "2024-01-01T00:00:00.1234567Z",
            "+275760-09-13T00:00:00Z",
            "2024-01-01T00:00:00\ud800Z",
        ]
    ),
    st.integers(-(2**40), 2**40),
    st.floats(),
)
deep_values = st.builds(
    Deep, st.sampled_from([63, 64, 65, 66, 67, 200, 5_000, 10_000]), st.sampled_from(["{", "["])
)
scalars = st.one_of(st.none(), hostile_strings, hostile_numbers)
hostile_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(hostile_strings, scalars, max_size=3),
    deep_values,
)
hostile_objects = st.one_of(
    st.dictionaries(hostile_strings, hostile_values, max_size=3),
    st.builds(lambda d: {"nested": d}, deep_values),
    hostile_values,
)

ITEM_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "id": st.one_of(hostile_strings, hostile_numbers, st.none()),
    "role": st.one_of(st.sampled_from(["user", "narrator", "USER", ""]), hostile_values),
    "text": st.one_of(hostile_strings, hostile_values),
    "payload": st.one_of(
        st.builds(lambda v: {"kind": "json", "value": v}, hostile_objects),
        st.builds(lambda t: {"kind": "text", "text": t}, hostile_values),
        st.builds(lambda d: {"kind": "binary", "data": d}, st.one_of(hostile_strings, scalars)),
        st.builds(
            lambda u, t: {"kind": "reference", "uri": u, "title": t}, hostile_strings, scalars
        ),
        st.builds(lambda k: {"kind": k}, hostile_strings),
        hostile_values,
    ),
    "content_hash": st.one_of(hostile_strings, scalars),
    "sources": st.one_of(
        st.lists(
            st.fixed_dictionaries(
                {"uri": hostile_strings},
                optional={"kind": scalars, "title": scalars, "retrieved_at": hostile_times},
            ),
            max_size=2,
        ),
        hostile_values,
    ),
    "trust": st.one_of(st.sampled_from(["trusted", "TRUSTED"]), scalars),
    "sensitivity": st.one_of(st.sampled_from(["public", "secret"]), scalars),
    "retention": st.one_of(st.sampled_from(["required", "never"]), scalars),
    "priority": st.one_of(hostile_numbers, st.sampled_from(["5", "1e3", 2.0, 2.5]), st.none()),
    "rank": st.one_of(hostile_numbers, st.sampled_from(["1.5", "NaN"]), st.none()),
    "created_at": st.one_of(hostile_times, st.none()),
    "valid_from": hostile_times,
    "expires_at": st.one_of(hostile_times, st.just("2024-01-01T00:00:00Z")),
    "parents": st.one_of(st.lists(st.one_of(hostile_strings, scalars), max_size=3), scalars),
    "lineage": st.one_of(
        st.lists(
            st.fixed_dictionaries(
                {"parent_id": hostile_strings, "parent_hash": hostile_strings},
                optional={"operation": hostile_strings, "detail": scalars},
            ),
            max_size=2,
        ),
        hostile_values,
    ),
    "group_id": st.one_of(hostile_strings, scalars),
    "metadata": hostile_objects,
    "qurey": hostile_values,
    "": scalars,
}


@st.composite
def hostile_records(draw: st.DrawFn) -> list[Any]:
    """A list of item records, each valid or with one to three fields made hostile."""
    records: list[Any] = []
    for index in range(draw(st.integers(1, 4))):
        record: dict[str, Any] = {
            "id": f"i{index}",
            "role": "user",
            "text": f"text {index}",
            "created_at": T0,
        }
        for name in draw(st.lists(st.sampled_from(sorted(ITEM_FIELDS)), max_size=3)):
            record[name] = draw(ITEM_FIELDS[name])
        if draw(st.integers(0, 9)) == 0:
            record.pop(draw(st.sampled_from(sorted(record))))
        if records and draw(st.integers(0, 9)) == 0:
            record["id"] = records[0].get("id") if isinstance(records[0], dict) else "i0"
        records.append(record if draw(st.integers(0, 19)) else draw(hostile_values))
    return records


REQUEST_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "id": st.one_of(hostile_strings, hostile_numbers, st.none()),
    "budget": st.one_of(hostile_numbers, st.sampled_from(["64", 64.0, -1, 0]), st.none()),
    "query": st.one_of(hostile_strings, scalars),
    "where": st.one_of(
        st.sampled_from(
            [
                "role = 'user'",
                "metadata.topic = 'x'",
                "priority / 0 = 1",
                "id = ",
                "rank > 'a'",
                "DROP TABLE items",
                "created_at > '2024'",
                "1",
                "text LIKE '%\\'",
                "role IN ()",
                "metadata = 1",
                "(((((",
                "payload_kind = 'text' AND binary IS NULL",
            ]
        ),
        hostile_strings,
        scalars,
    ),
    "as_of": st.one_of(hostile_times, st.none()),
    "evidence": st.one_of(st.lists(st.one_of(hostile_strings, scalars), max_size=3), scalars),
    "labels": hostile_objects,
    "budjet": scalars,
}


@st.composite
def hostile_requests(draw: st.DrawFn) -> list[Any]:
    """A list of request records, each valid or with one to three fields made hostile."""
    requests: list[Any] = []
    for index in range(draw(st.integers(1, 3))):
        record: dict[str, Any] = {"id": f"r{index}", "budget": 64, "query": "refund"}
        for name in draw(st.lists(st.sampled_from(sorted(REQUEST_FIELDS)), max_size=3)):
            record[name] = draw(REQUEST_FIELDS[name])
        if requests and draw(st.integers(0, 9)) == 0:
            record["id"] = "r0"
        requests.append(record if draw(st.integers(0, 19)) else draw(hostile_values))
    return requests


raw_lines = st.sampled_from(
    [
        b"",
        b"   ",
        b"{",
        b"[1, 2]",
        b"null",
        b'"text"',
        b"NaN",
        b"\xef\xbb\xbf{}",
        b"\xff\xfe",
        b'{"id": "\xc3"}',
        b'{"id": "a", "id": "b"}',
        b"{}",
        b'{"id": 1e999}',
        b"\x00",
        b'{"a": "\\ud800"}',
    ]
)


@st.composite
def hostile_files(draw: st.DrawFn, records: st.SearchStrategy[list[Any]]) -> bytes:
    """JSONL bytes: hostile records as JSON lines, with raw hostile lines among them."""
    lines = [to_line(record).encode("utf-8") for record in draw(records)]
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(draw(st.integers(0, len(lines))), draw(raw_lines))
    head = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    return head + b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")


# ---------------------------------------------------------------------------
# Properties


def check_located(error: CognoxiumError, source: str | None, lines: int) -> None:
    """A record error names the source and a line within the input."""
    if isinstance(error, RecordError) and error.line is not None:
        assert 1 <= error.line <= max(lines, 1), error
        assert error.source == source, error


@reaching(0.8)  # each example checks one outcome: read, or refused with a located error
@settings(FUZZ, max_examples=150)
@given(records=hostile_records())
@example(
    records=[
        {
            "id": "i0",
            "role": "user",
            "text": "text 0",
            "created_at": "2025-01-01T00:00:00Z",
            "valid_from": "0000-01-01T00:00:00Z",
        }
    ]
)
def test_records_succeed_or_raise_a_cognoxium_error(records: list[Any]) -> None:
    python_records = [to_python(record) for record in records]
    try:
        df = records_to_frame(python_records, source="<fuzz>")
    except CognoxiumError as exc:
        check_located(exc, "<fuzz>", len(records))
        with pytest.raises(CognoxiumError):
            CognitionFrame.from_records(python_records)
        reached("refused, located")
        return
    assert df.height == len(records)
    # What the bulk path accepts, the item model accepts too.
    assert [item.id for item in frame_to_items(df)] == df["id"].to_list()
    reached("read")


@reaching(0.8)  # each example checks one outcome: read, or refused with a located error
@settings(FUZZ, max_examples=100)
@given(data=hostile_files(hostile_records()))
def test_item_files_succeed_or_raise_a_cognoxium_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "items.jsonl"
    path.write_bytes(data)
    try:
        df = read_jsonl(path)
    except CognoxiumError as exc:
        check_located(exc, str(path), data.count(b"\n") + 1)
        reached("refused, located")
        return
    assert [item.id for item in frame_to_items(df)] == df["id"].to_list()
    reached("read")


@pytest.fixture(scope="module")
def store() -> CognitionFrame:
    return CognitionFrame.from_records(
        [
            {"id": "a", "role": "user", "text": "a refund please", "created_at": T0},
            {"id": "b", "role": "assistant", "text": "refund sent", "created_at": T0},
        ]
    )


@reaching(0.8)  # each example checks one outcome: packed, or refused with a located error
@settings(FUZZ, max_examples=100)
@given(data=hostile_files(hostile_requests()))
def test_request_files_succeed_or_raise_a_cognoxium_error(
    tmp_path: Path, store: CognitionFrame, data: bytes
) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(data)
    try:
        requests = read_requests(path)
        stats = run_batch(
            store,
            requests,
            out_dir=tmp_path / "out",
            rank="none",
            options=PackOptions(as_of=datetime(2026, 1, 1, tzinfo=UTC)),
        )
    except CognoxiumError as exc:
        check_located(exc, str(path), data.count(b"\n") + 1)
        reached("refused, located")
        return
    assert stats.requests == len(requests)
    reached("packed")


@reaching(0.8)  # each example checks one outcome: packed, or refused with a typed error
@settings(FUZZ, max_examples=100)
@given(records=hostile_requests())
def test_requests_from_python_are_pydantic_errors_or_pack(
    tmp_path: Path, store: CognitionFrame, records: list[Any]
) -> None:
    from pydantic import ValidationError

    try:
        requests = [Request.model_validate(to_python(record)) for record in records]
    except ValidationError:
        reached("refused by the model")
        return
    try:
        stats = run_batch(store, requests, out_dir=tmp_path / "out", rank="none")
    except CognoxiumError:
        reached("refused by the batch")
        return
    assert stats.requests == len(requests)
    assert scan_packs(tmp_path / "out").collect().height == len(requests)
    reached("packed")


# ---------------------------------------------------------------------------
# The corpus of hostile files: each bad file fails at a known line.

GOOD_ITEM = {"id": "ok", "role": "user", "text": "a refund please", "created_at": T0}
GOOD_REQUEST = {"id": "ok", "budget": 64, "query": "refund"}


@dataclass(frozen=True)
class Case:
    """One hostile file: what it holds and where reading it must fail (None: it is valid)."""

    name: str
    kind: str  # "items", "requests" or "parquet"
    data: bytes
    line: int | None
    field: str | None = None


def _item_case(name: str, field: str | None, **changes: Any) -> Case:
    """Line 2 is GOOD_ITEM with ``changes``, between two good records."""
    bad = {**GOOD_ITEM, "id": "bad", **changes}
    if "payload" in changes:
        del bad["text"]
    lines = [to_line({**GOOD_ITEM, "id": "one"}), to_line(bad), to_line({**GOOD_ITEM, "id": "3"})]
    return Case(name, "items", "\n".join(lines).encode("utf-8") + b"\n", 2, field)


def _request_case(name: str, field: str | None, **changes: Any) -> Case:
    bad = {**GOOD_REQUEST, "id": "bad", **changes}
    lines = [to_line({**GOOD_REQUEST, "id": "one"}), to_line(bad)]
    return Case(name, "requests", "\n".join(lines).encode("utf-8") + b"\n", 2, field)


def _raw(name: str, kind: str, data: bytes, line: int | None, field: str | None = None) -> Case:
    return Case(name, kind, data, line, field)


def _parquet(name: str, field: str, row: int, **columns: list[Any]) -> Case:
    table = pa.table(
        {
            "id": [f"p{i}" for i in range(2)],
            "role": ["user"] * 2,
            "text": ["one", "two"],
            "created_at": pa.array(
                [datetime(2025, 1, 1, tzinfo=UTC)] * 2, pa.timestamp("us", "UTC")
            ),
            **columns,
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return Case(name, "parquet", sink.getvalue().to_pybytes(), row, field)


def corpus() -> list[Case]:
    """Every known class of hostile file, and a few hostile but valid ones."""
    good_items = to_line(GOOD_ITEM).encode()
    good_request = to_line(GOOD_REQUEST).encode()
    cases = [
        # Deep nesting: metadata, JSON payloads and labels hold at most 64 levels.
        _item_case("metadata 10,000 deep", "metadata", metadata=Deep(10_000)),
        _item_case("metadata 65 deep", "metadata", metadata=Deep(65)),
        _item_case(
            "json payload 10,000 deep",
            "payload",
            text=None,
            payload={"kind": "json", "value": Deep(10_000, "[")},
        ),
        _item_case(
            "json payload 65 deep",
            "payload",
            text=None,
            payload={"kind": "json", "value": Deep(65, "[")},
        ),
        _item_case("unknown field 10,000 deep", None, extra=Deep(10_000)),
        _request_case("labels 10,000 deep", "labels", labels=Deep(10_000)),
        _request_case("labels 65 deep", "labels", labels=Deep(65)),
        # Integers beyond int64; strict integer types.
        _item_case("priority 2**63", "priority", priority=2**63),
        _item_case("priority -2**63-1", "priority", priority=-(2**63) - 1),
        _item_case("priority 10**400", "priority", priority=10**400),
        _item_case("priority text", "priority", priority="5"),
        _item_case("priority true", "priority", priority=True),
        _item_case("priority 2.0", "priority", priority=2.0),
        _item_case("rank true", "rank", rank=True),
        _request_case("budget 2**63", "budget", budget=2**63),
        _request_case("budget true", "budget", budget=True),
        _request_case("budget 64.0", "budget", budget=64.0),
        # Lone surrogates in every text field.
        _item_case("surrogate in text", "text", text="a\ud800"),  # the field the record gives
        _item_case(
            "surrogate in json",
            "payload.json.value",
            text=None,
            payload={"kind": "json", "value": {"k": "\udc00"}},
        ),
        _item_case("surrogate in id", "id", id="\ud800"),
        _item_case("surrogate in metadata key", "metadata", metadata={"\ud800": 1}),
        _item_case("surrogate in metadata value", "metadata", metadata={"k": ["\udfff"]}),
        _item_case("surrogate in source", "sources.0.uri", sources=[{"uri": "\ud800"}]),
        _item_case("surrogate in group", "group_id", group_id="g\ud800"),
        _item_case("surrogate in parents", "parents.0", parents=["\ud800"]),
        _item_case(
            "surrogate in reference",
            "payload.reference.uri",
            text=None,
            payload={"kind": "reference", "uri": "\ud800"},
        ),
        _item_case(
            "surrogate in lineage",
            "lineage.0.operation",
            lineage=[{"parent_id": "p", "parent_hash": "h", "operation": "\ud800"}],
        ),
        _request_case("surrogate in request id", "id", id="\ud800"),
        _request_case("surrogate in query", "query", query="\udc00"),
        _request_case("surrogate in labels", "labels", labels={"k": "\ud800"}),
        # Non-finite ranks.
        _item_case("rank +inf", "rank", rank=float("inf")),
        _item_case("rank -inf", "rank", rank=float("-inf")),
        _item_case("rank NaN", "rank", rank=float("nan")),
        _raw(
            "rank 1e999",
            "items",
            good_items + b'\n{"id": "x", "role": "user", "text": "t", "rank": 1e999}\n',
            2,
            "rank",
        ),
        _request_case("labels NaN", "labels", labels={"x": float("nan")}),
        # Invalid UTF-8 is reported by line.
        _raw(
            "invalid UTF-8 items",
            "items",
            good_items + b"\n\n" + good_items.replace(b"refund", b"\xff\xfe") + b"\n",
            3,
        ),
        _raw(
            "invalid UTF-8 requests",
            "requests",
            good_request + b"\n" + good_request.replace(b"refund", b"\xc3(") + b"\n",
            2,
        ),
        _raw("truncated UTF-8 at the end", "items", good_items + b"\n\xe2\x82", 2),
        # Times.
        _item_case("expires before created", "expires_at", expires_at="2024-12-31T23:59:59Z"),
        _item_case("month 13", "created_at", created_at="2024-13-01T00:00:00Z"),
        _item_case("naive time", "created_at", created_at="2024-01-01T00:00:00"),
        _item_case("number as time", "created_at", created_at=1_700_000_000),
        _request_case("number as as_of", "as_of", as_of=1_700_000_000),
        # Ids.
        _item_case("blank id", "id", id="   "),
        _item_case("control character in id", "id", id="a\x07b"),
        _item_case("id of 1025 characters", "id", id="x" * 1025),
        _item_case("blank parent", "parents.0", parents=[" "]),
        _item_case("blank group", "group_id", group_id=""),
        _item_case("duplicate id", "id", id="one"),
        _request_case("blank request id", "id", id="\t"),
        _request_case("control character in request id", "id", id="r\x1b"),
        _request_case("request id of 1025 characters", "id", id="r" * 1025),
        _request_case("control character in evidence", "evidence.0", evidence=["e\x00"]),
        _request_case("duplicate request id", "id", id="one"),
        # Shapes and JSON.
        _item_case("unknown item field", "qurey", qurey=1),
        _request_case("unknown request field", "qurey", qurey=1),
        _item_case("role not a string", "role", role=["user"]),
        _raw("a line that is not an object", "items", good_items + b"\n[1, 2]\n", 2),
        _raw("truncated JSON", "items", good_items + b'\n{"id": "x", "role"\n', 2),
        _raw("NaN line", "requests", good_request + b"\nNaN\n", 2),
        _raw("BOM in the middle", "items", good_items + b"\n\xef\xbb\xbf" + good_items + b"\n", 2),
        _raw("NUL line", "requests", b"\x00\n", 1),
        _parquet("parquet rank +inf", "rank", 1, rank=[0.5, float("inf")]),
        _parquet("parquet blank id", "id", 0, id=[" ", "p1"]),
        _parquet(
            "parquet expires before created",
            "expires_at",
            1,
            expires_at=pa.array(
                [None, datetime(2024, 1, 1, tzinfo=UTC)], pa.timestamp("us", "UTC")
            ),
        ),
        # Hostile but valid.
        _raw("empty items file", "items", b"", None),
        _raw("empty requests file", "requests", b"", None),
        _raw("blank lines only", "items", b"\n \n\t\n", None),
        _raw("BOM at the start", "items", b"\xef\xbb\xbf" + good_items + b"\n", None),
        _raw(
            "BOM at the start of requests", "requests", b"\xef\xbb\xbf" + good_request + b"\n", None
        ),
        _raw("CRLF line ends", "requests", good_request + b"\r\n", None),
        _raw(
            "U+2028 in text",
            "items",
            json.dumps({**GOOD_ITEM, "text": "a\u2028b\u0085c\rd"}, ensure_ascii=False).encode(),
            None,
        ),
        _raw(
            "surrogate pair", "items", to_line({**GOOD_ITEM, "text": "\U0001f600"}).encode(), None
        ),
        _raw(
            "text of 1 MB",
            "items",
            to_line({**GOOD_ITEM, "text": "word " * 200_000}).encode(),
            None,
        ),
        _raw(
            "metadata 64 deep", "items", to_line({**GOOD_ITEM, "metadata": Deep(64)}).encode(), None
        ),
        _raw(
            "labels 64 deep",
            "requests",
            to_line({**GOOD_REQUEST, "labels": Deep(64)}).encode(),
            None,
        ),
        _raw(
            "id of 1024 characters",
            "items",
            to_line({**GOOD_ITEM, "id": "x" * 1024}).encode(),
            None,
        ),
        _raw(
            "priority at the int64 bounds",
            "items",
            to_line({**GOOD_ITEM, "priority": 2**63 - 1}).encode()
            + b"\n"
            + to_line({**GOOD_ITEM, "id": "lo", "priority": -(2**63)}).encode(),
            None,
        ),
        _raw(
            "budget at the int64 bound",
            "requests",
            to_line({**GOOD_REQUEST, "budget": 2**63 - 1}).encode(),
            None,
        ),
        _raw(
            "expires when created", "items", to_line({**GOOD_ITEM, "expires_at": T0}).encode(), None
        ),
    ]
    return cases


CORPUS = corpus()
BAD = [case for case in CORPUS if case.line is not None]
GOOD = [case for case in CORPUS if case.line is None]


def test_the_corpus_covers_every_class() -> None:
    assert (len(CORPUS), len(BAD), len(GOOD)) == (80, 65, 15)
    assert len({case.name for case in CORPUS}) == len(CORPUS)


def _files(case: Case, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The case's file, and the items and requests files of a run of ``pack``."""
    suffix = ".parquet" if case.kind == "parquet" else ".jsonl"
    path = tmp_path / f"{case.kind}{suffix}"
    path.write_bytes(case.data)
    items = tmp_path / "good-items.jsonl"
    items.write_text(to_line(GOOD_ITEM) + "\n", encoding="utf-8")
    requests = tmp_path / "good-requests.jsonl"
    requests.write_text(to_line(GOOD_REQUEST) + "\n", encoding="utf-8")
    return (
        path,
        path if case.kind != "requests" else items,
        path if case.kind == "requests" else requests,
    )


_READ: dict[str, Callable[[Path], object]] = {
    "items": read_jsonl,
    "parquet": read_items,
    "requests": read_requests,
}


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_the_python_api_raises_a_record_error_at_the_line(case: Case, tmp_path: Path) -> None:
    path, _, _ = _files(case, tmp_path)
    if case.line is None:
        _READ[case.kind](path)
        return
    with pytest.raises(RecordError) as info:
        _READ[case.kind](path)
    error = info.value
    where = error.row if case.kind == "parquet" else error.line
    assert (error.source, where) == (str(path), case.line), error
    if case.field is not None:
        assert error.field == case.field, error


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_the_cli_exits_2_naming_the_file_and_line(case: Case, tmp_path: Path) -> None:
    path, items, requests = _files(case, tmp_path)
    result = runner.invoke(
        app,
        [
            "pack",
            str(items),
            str(requests),
            "--out",
            str(tmp_path / "out"),
            "--rank",
            "none",
            "--as-of",
            AS_OF,
            "--no-progress",
        ],
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if case.line is None:
        assert result.exit_code == EXIT_OK, output
        return
    assert result.exit_code == EXIT_BAD_INPUT, output
    where = f"{path}: row {case.line}:" if case.kind == "parquet" else f"{path}:{case.line}:"
    assert result.stderr.startswith(f"error: {where}"), result.stderr
    if case.field is not None:
        assert f" field {case.field}: " in result.stderr, result.stderr


@settings(FUZZ, max_examples=25)
@given(items=hostile_files(hostile_records()), requests=hostile_files(hostile_requests()))
def test_the_cli_never_shows_a_traceback(tmp_path: Path, items: bytes, requests: bytes) -> None:
    items_path, requests_path = tmp_path / "items.jsonl", tmp_path / "requests.jsonl"
    items_path.write_bytes(items)
    requests_path.write_bytes(requests)
    result = runner.invoke(
        app,
        [
            "pack",
            str(items_path),
            str(requests_path),
            "--out",
            str(tmp_path / "out"),
            "--rank",
            "none",
            "--as-of",
            AS_OF,
            "--no-progress",
        ],
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (EXIT_OK, EXIT_BAD_INPUT, 3), output
    if result.exit_code == EXIT_BAD_INPUT:
        assert re.match(
            rf"error: ({re.escape(str(items_path))}|{re.escape(str(requests_path))}):\d+: ",
            result.stderr,
        ), result.stderr


# ---------------------------------------------------------------------------
# Cases the strategies found, kept as fixed examples.

FOUND = {
    "surrogate in a time": (
        {"created_at": "2024-01-01T00:00:00\ud800Z"},
        "created_at",
        "unable to parse raw data as a unicode string",
    ),
    "an integer beyond int64 as id": ({"id": 10**400}, "id", "valid string"),
    # Polars converts a nested value recursively: 10,000 levels overflowed its stack.
    "a list 10,000 deep as role": ({"role": Deep(10_000, "[")}, "role", "must be a string"),
    "a list 10,000 deep as id": ({"id": Deep(10_000, "[")}, "id", "valid string"),
    "a list 10,000 deep as a parent": ({"parents": [Deep(10_000, "[")]}, "parents.0", "string"),
}


@pytest.mark.parametrize(("changes", "field", "message"), list(FOUND.values()), ids=list(FOUND))
def test_records_found_by_the_strategies_are_record_errors(
    changes: dict[str, Any], field: str, message: str
) -> None:
    record = to_python({**GOOD_ITEM, **changes})
    with pytest.raises(RecordError) as info:
        records_to_frame([GOOD_ITEM, record], source="<found>")
    assert (info.value.source, info.value.row, info.value.field) == ("<found>", 1, field)
    assert message in info.value.message
