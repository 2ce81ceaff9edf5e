"""Records and tables laid out a column at a time give what item by item validation gives.

The reference validates each record as a ``ContextItem`` and lays the items
out with ``items_to_frame``; JSON helpers are compared with ``canonical_json``.
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cognoxium.exceptions import RecordError
from cognoxium.items import hashing
from cognoxium.items._checks import text_problem
from cognoxium.items._json import canonical_object_column, canonical_text_list
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import (
    ContextItem,
    canonical_json,
    canonical_json_list,
    canonical_objects,
)
from cognoxium.items.records import records_to_frame
from cognoxium.items.validation import canonical_json_columns, conform
from tests.reach import reached, reaching

TEXT = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["", "é", "日本語", "🙂", 'q"uote\\', "a\nb\x00c", "\u2028"]),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXT
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
SOURCE = st.fixed_dictionaries(
    {"uri": TEXT.filter(bool)},
    optional={"kind": TEXT, "title": st.none() | TEXT},
)
PAYLOAD = st.one_of(
    TEXT.map(lambda t: {"text": t}),
    JSON.map(lambda v: {"payload": {"kind": "json", "value": v}}),
    st.binary(max_size=6).map(lambda b: {"payload": {"kind": "binary", "data": b}}),
    st.tuples(TEXT.filter(bool), st.none() | TEXT).map(
        lambda r: {"payload": {"kind": "reference", "uri": r[0], "title": r[1]}}
    ),
)


@st.composite
def record(draw: st.DrawFn, index: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": f"r{index}",
        "role": draw(st.sampled_from(["user", "assistant", "tool", "document"])),
        "created_at": draw(st.sampled_from(["2024-01-01T00:00:00Z", "2024-05-01T12:30:00+02:00"])),
        **draw(PAYLOAD),
    }
    if draw(st.booleans()):
        out["sources"] = draw(st.lists(SOURCE, max_size=2))
    if draw(st.booleans()):
        out["metadata"] = draw(st.dictionaries(TEXT, JSON, max_size=3))
    if draw(st.booleans()):
        out["priority"] = draw(st.integers(-5, 5))
    return out


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 6))
    return [draw(record(i)) for i in range(n)]


def item_by_item(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return items_to_frame([ContextItem.model_validate(r) for r in rows])


@reaching(0.8, label="frames equal")
@settings(max_examples=150, deadline=None)
@given(rows=records())
def test_records_to_frame_equals_item_by_item_validation(rows: list[dict[str, Any]]) -> None:
    try:
        expected = item_by_item(rows)
    except ValueError:  # pydantic's ValidationError: the columns must refuse the record too
        with pytest.raises(RecordError):
            records_to_frame(rows)
        reached("refused alike")
        return
    got = records_to_frame(rows)
    assert_frame_equal(got, expected)
    assert_frame_equal(conform(got.drop("content_hash")), expected)
    reached("frames equal")


@reaching(0.8, label="equal")
@settings(max_examples=200, deadline=None)
@given(values=st.lists(JSON, max_size=6))
def test_canonical_json_list_equals_canonical_json(values: list[Any]) -> None:
    try:
        expected = [canonical_json(v) for v in values]
    except ValueError:
        with pytest.raises((ValueError, TypeError, RecursionError)):
            canonical_json_list(values)
        reached("refused alike")
        return
    assert canonical_json_list(values) == expected
    reached("equal")


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.none() | TEXT, max_size=6), key=TEXT)
def test_canonical_objects_equal_canonical_json(values: list[str | None], key: str) -> None:
    expected = ["{}" if v is None else canonical_json({key: v}) for v in values]
    got = canonical_objects(key, pl.Series("v", values, pl.String))
    assert (got.name, got.to_list()) == ("v", expected)


class _Text(str):
    pass


class _Colour(enum.Enum):
    RED = "red"


SCALAR = st.none() | st.booleans() | st.integers(-(2**64), 2**65) | TEXT
"""The leaves orjson encodes as canonical JSON, with integers beyond orjson's 64 bits."""
EXACT = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXT, inner, max_size=2),
    max_leaves=6,
)
"""Values of an object without floats: leaves, arrays and objects of them, at any depth."""
ODD = st.one_of(
    st.floats(),
    st.just(_Colour.RED),
    st.just(uuid.UUID(int=7)),
    st.builds(_Text, TEXT),
    st.builds(OrderedDict, st.dictionaries(TEXT, SCALAR, max_size=1)),
    st.tuples(SCALAR),
    st.sampled_from(["\ud800", "a\udfff"]),
)
"""Values orjson would encode otherwise, or refuse: each must leave the column to the exact
encoder, also nested in an array or an object."""
KEY = st.one_of(TEXT, TEXT.map(_Text), st.integers(0, 3), st.sampled_from(["\udc00"]))


def _fits(value: Any) -> bool:
    """No integer beyond orjson's 64 bits, at any depth."""
    if type(value) is int:
        return -(2**63) <= value < 2**64
    if type(value) is dict:
        return all(map(_fits, value.values()))
    if type(value) is list:
        return all(map(_fits, value))
    return True


@reaching(0.8, label="encoded")
@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.dictionaries(TEXT, EXACT, max_size=4), max_size=6))
def test_objects_without_floats_encode_as_canonical_json(values: list[dict[str, Any]]) -> None:
    got = canonical_object_column(values, "metadata")
    if not all(map(_fits, values)):
        assert got is None
        reached("left to the exact encoder")
        return
    assert got is not None
    assert got.name == "metadata"
    assert got.dtype == pl.String
    assert got.to_list() == [canonical_json(v) for v in values]
    reached("encoded")


def _exact(values: list[Any]) -> bool:
    """Every value is an object orjson encodes as canonical JSON: a dict (exactly) of text
    keys to text, 64-bit integers, booleans, None, lists and such dicts (exact types, at
    any depth), with no lone surrogate."""

    def text(x: Any) -> bool:
        return type(x) is str and text_problem(x) is None

    def value(x: Any) -> bool:
        if type(x) is int:
            return -(2**63) <= x < 2**64
        if type(x) is list:
            return all(map(value, x))
        if type(x) is dict:
            return all(text(k) and value(v) for k, v in x.items())
        return x is None or type(x) is bool or text(x)

    return all(type(v) is dict and value(v) for v in values)


@reaching(0.8)  # each example checks one of the two claims: None, or exact
@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(
        st.dictionaries(TEXT, EXACT, max_size=3)
        | st.dictionaries(KEY, SCALAR | ODD, max_size=3)
        | st.dictionaries(TEXT, st.lists(SCALAR | ODD, max_size=2), max_size=2)
        | st.dictionaries(TEXT, st.dictionaries(KEY, SCALAR | ODD, max_size=2), max_size=2)
        | st.lists(SCALAR, max_size=2),
        max_size=5,
    )
    | st.lists(st.dictionaries(TEXT, st.none() | st.booleans() | st.integers() | TEXT), max_size=5)
)
def test_object_column_is_exact_or_left_to_the_exact_encoder(values: list[Any]) -> None:
    """Whatever orjson would encode differently (floats, enums, UUIDs, subclasses, tuples,
    keys that are not text, integers beyond 64 bits, lone surrogates), at any depth, gives
    None; what it encodes equals canonical_json."""
    got = canonical_object_column(values, "metadata")
    if not _exact(values):
        assert got is None
        reached("left to the exact encoder")
        return
    assert got is not None
    assert got.to_list() == [canonical_json(v) for v in values]
    reached("exact")


def test_a_column_with_a_float_an_enum_or_a_text_subclass_at_any_depth_is_left_out() -> None:
    assert canonical_object_column([{"a": 1}, {"a": 0.5}], "m") is None
    assert canonical_object_column([{"a": {"b": [1, 0.5]}}], "m") is None
    assert canonical_object_column([{"a": _Colour.RED}], "m") is None
    assert canonical_object_column([{"a": [_Text("x")]}], "m") is None
    assert canonical_object_column([{_Text("a"): 1}], "m") is None
    assert canonical_object_column([{"a": {_Text("b"): 1}}], "m") is None
    assert canonical_object_column([{"a": {"b": "\ud800"}}], "m") is None
    assert canonical_object_column([{"a": [2**64]}], "m") is None
    assert canonical_object_column([{"a": 1}, OrderedDict(b=2)], "m") is None
    assert canonical_object_column([{"a": OrderedDict(b=2)}], "m") is None
    assert canonical_object_column([{"a": 1}, [("b", 2)]], "m") is None
    assert canonical_object_column([], "m") is not None


def test_an_object_holding_itself_or_nested_past_orjson_is_left_out() -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    assert canonical_object_column([looped], "m") is None
    deep: dict[str, Any] = {}
    for _ in range(300):
        deep = {"a": [deep]}
    assert canonical_object_column([deep], "m") is None
    shallow: dict[str, Any] = {}
    for _ in range(60):
        shallow = {"a": [shallow]}
    assert canonical_object_column([shallow], "m").to_list() == [canonical_json(shallow)]


def test_text_holding_line_breaks_and_separators_stays_in_its_row() -> None:
    values = [{"a": ",\n,", "b": "x"}, {"c": "}\n{"}, {}]
    got = canonical_object_column(values, "metadata")
    assert got is not None
    assert got.to_list() == [canonical_json(v) for v in values]


@settings(max_examples=150, deadline=None)
@given(values=st.lists(JSON, min_size=1, max_size=5), spaced=st.booleans())
def test_non_canonical_json_text_is_canonicalised_in_tables(
    values: list[Any], spaced: bool
) -> None:
    texts = [json.dumps(v, indent=1 if spaced else None, ensure_ascii=True) for v in values]
    n = len(texts)
    df = conform(
        pl.DataFrame(
            {
                "id": [f"i{k}" for k in range(n)],
                "role": ["tool"] * n,
                "json": texts,
                "metadata": [json.dumps({"v": v}, indent=2) for v in values],
                "created_at": [datetime(2024, 1, 1, tzinfo=UTC)] * n,
            }
        )
    )
    assert df["json"].to_list() == [canonical_json(v) for v in values]
    assert df["metadata"].to_list() == [canonical_json({"v": v}) for v in values]


def test_pieces_that_are_not_json_alone_are_refused_even_when_they_join_up() -> None:
    with pytest.raises(RecordError, match="invalid JSON"):
        conform(
            pl.DataFrame({"role": ["tool"] * 3, "json": ["1,2", "[3", "4]"], "id": ["a", "b", "c"]})
        )


CLOCK = st.tuples(
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
).map(lambda t: "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}".format(*t))
"""Times with whole seconds, valid or not (month 13, day 32, hour 24, second 60)."""


@reaching(0.8)  # both branches compare: the same frame, or the same error
@settings(max_examples=200, deadline=None)
@given(clocks=st.lists(CLOCK | st.dates().map(lambda d: f"{d}T12:00:00"), min_size=1, max_size=6))
def test_utc_times_with_z_parse_as_the_general_iso_spelling(clocks: list[str]) -> None:
    """``...Z`` (parsed with a fixed format) gives what ``...+00:00`` gives, or the same error."""

    def frame(zone: str) -> pl.DataFrame | RecordError:
        rows = [
            {"id": f"r{i}", "role": "user", "text": "t", "created_at": c + zone}
            for i, c in enumerate(clocks)
        ]
        try:
            return records_to_frame(rows)
        except RecordError as exc:
            return exc

    z, offset = frame("Z"), frame("+00:00")
    if isinstance(offset, RecordError):
        assert isinstance(z, RecordError)
        assert (z.line, z.field, z.message) == (offset.line, offset.field, offset.message)
        reached("refused alike")
    else:
        assert isinstance(z, pl.DataFrame)
        assert_frame_equal(z.drop("content_hash"), offset.drop("content_hash"))
        reached("frames equal")


def test_a_bad_time_among_utc_times_is_named_at_its_line() -> None:
    rows = [
        {"id": "a", "role": "user", "text": "t", "created_at": "2024-01-01T00:00:00Z"},
        {"id": "b", "role": "user", "text": "t", "created_at": "2023-02-29T00:00:00Z"},
    ]
    with pytest.raises(RecordError) as caught:
        records_to_frame(rows)
    assert (caught.value.row, caught.value.field) == (1, "created_at")
    assert caught.value.message.endswith("day value is outside expected range")


@pytest.mark.parametrize(
    "sources",
    [
        [[{"uri": "u", "kind": "k"}, {"uri": "v", "title": "t"}], []],
        [[], []],
        [[{"uri": b"u", "kind": "k"}], [{"uri": "v", "title": None}]],
        [[{"uri": "u", "kind": 3}], []],
        [[{"kind": "k"}], []],
        [[{"uri": None}], []],
        [[{"uri": "u", "retrieved_at": "2024-01-01T00:00:00Z"}], [{"uri": "v"}]],
        # As many keys in every entry, not the same keys: read key by key.
        [[{"uri": "u", "kind": "k"}], [{"uri": "v", "title": "t"}]],
        [[{"uri": "u", "kind": "k"}], [{"uri": "v", "colour": "t"}]],
    ],
)
def test_sources_convert_as_item_by_item_validation(sources: list[list[dict[str, Any]]]) -> None:
    rows = [
        {"id": f"r{i}", "role": "user", "text": "t", "created_at": "2024-01-01T00:00:00Z",
         "sources": given}
        for i, given in enumerate(sources)
    ]  # fmt: skip
    try:
        expected = item_by_item(rows)
    except ValueError:
        with pytest.raises(RecordError, match="sources"):
            records_to_frame(rows)
        return
    assert_frame_equal(records_to_frame(rows), expected)


def test_records_of_as_many_fields_but_other_fields_keep_each_field_apart() -> None:
    rows = [
        {"id": "a", "role": "user", "text": "t", "priority": 2},
        {"id": "b", "role": "user", "text": "u", "rank": 0.5},
        {"id": "c", "role": "user", "text": "v", "priority": 1},
    ]
    got = records_to_frame(rows)
    assert got.get_column("priority").to_list() == [2, 0, 1]
    assert got.get_column("rank").to_list() == [None, 0.5, None]
    assert_frame_equal(got.drop("created_at"), item_by_item(rows).drop("created_at"))


def test_a_record_of_as_many_fields_with_an_unknown_one_is_refused_at_its_line() -> None:
    rows = [
        {"role": "user", "text": "t", "priority": 2},
        {"role": "user", "text": "u", "colour": 1},
    ]
    with pytest.raises(RecordError) as caught:
        records_to_frame(rows)
    assert (caught.value.row, caught.value.field) == (1, "colour")


@pytest.mark.parametrize(("first", "second"), [("id", "created_at"), ("created_at", "id")])
def test_the_first_failing_record_is_named_whichever_check_finds_it(
    first: str, second: str
) -> None:
    """The checks of flat fields run while the rest are laid out; the first row still wins."""
    bad = {"id": " ", "created_at": "yesterday"}
    rows = [{"id": f"r{i}", "role": "user", "text": "t"} for i in range(4)]
    rows[1][first], rows[2][second] = bad[first], bad[second]
    with pytest.raises(RecordError) as caught:
        records_to_frame(rows)
    assert (caught.value.row, caught.value.field) == (1, first)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({}, "role"),
        (
            {"role": "user", "lineage": [{"parent_id": " ", "relation": "r", "step": "s"}]},
            "lineage",
        ),
        ({"role": "user", "parents": [""]}, "parents"),
        ({"role": "user", "group_id": "\x00"}, "group_id"),
        ({"role": "user", "trust": "maybe"}, "trust"),
    ],
)
def test_a_field_given_by_one_record_is_checked(extra: dict[str, Any], field: str) -> None:
    assert_second_record_refused({"text": "u", **extra}, field)


def assert_second_record_refused(record: dict[str, Any], field: str) -> None:
    """``records_to_frame`` of a good record, then ``record``, names row 1 and ``field``."""
    rows = [{"id": "a", "role": "user", "text": "t"}, {"id": "b", **record}]
    with pytest.raises(RecordError) as caught:
        records_to_frame(rows)
    assert caught.value.row == 1
    assert (caught.value.field or "").split(".")[0] == field


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"text": "bad \ud800"}, "text"),  # the record gives text, not a payload
        ({"text": "t", "metadata": {"k": "bad \udfff"}}, "metadata"),
        ({"text": "t", "sources": [{"uri": "u\ud800"}]}, "sources"),
    ],
)
def test_a_lone_surrogate_is_refused_at_its_line(extra: dict[str, Any], field: str) -> None:
    assert_second_record_refused({"role": "user", **extra}, field)


@reaching(0.8, label="flags exact")
@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.dictionaries(TEXT, SCALAR, max_size=3) | JSON, min_size=1, max_size=6),
    spaced=st.booleans(),
    ascii_only=st.booleans(),
)
def test_canonical_texts_are_flagged_exactly(
    values: list[Any], spaced: bool, ascii_only: bool
) -> None:
    """A flagged text equals canonical_json of its value; without integers beyond 64 bits
    (which orjson reads as floats, so they are checked one by one), every such text is flagged."""
    separators = (", ", ": ") if spaced else (",", ":")
    texts = [
        json.dumps(v, separators=separators, ensure_ascii=ascii_only, sort_keys=not spaced)
        for v in values
    ]
    flags = canonical_text_list(texts)
    exact = [text == canonical_json(v) for text, v in zip(texts, values, strict=True)]
    assert flags is not None
    assert all(e for f, e in zip(flags, exact, strict=True) if f)
    if not any(len(d) >= 19 for d in re.findall(r"[0-9]+", "".join(texts))):
        assert flags == exact
        reached("flags exact")


def test_an_integer_beyond_64_bits_in_canonical_text_is_kept() -> None:
    texts = ['{"n":123456789012345678901234567890}', '{"a":1}', '{"n": 18446744073709551616}']
    assert canonical_text_list(texts) == [False, True, False]  # the integers: one by one
    df = canonical_json_columns(pl.DataFrame({"metadata": texts}))
    assert df["metadata"].to_list() == [*texts[:2], '{"n":18446744073709551616}']


def test_content_hashes_hashed_in_parallel_parts_equal_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 3 * hashing._HASH_PART_ROWS + 5  # three parts, the last one longer
    kinds = ["text", "json", "reference", "binary"] * (n // 4) + ["text"] * (n % 4)
    df = pl.DataFrame(
        {
            "payload_kind": kinds,
            "text": [f"t{i}" if k == "text" else None for i, k in enumerate(kinds)],
            "json": [f'{{"i":{i}}}' if k == "json" else None for i, k in enumerate(kinds)],
            "binary": [bytes([i % 256]) if k == "binary" else None for i, k in enumerate(kinds)],
        }
    )
    monkeypatch.setattr(pl, "thread_pool_size", lambda: 3)
    parts = hashing._digest_query(df.lazy(), n).collect()
    assert parts.height == n
    assert parts.to_series().equals(df.select(hashing._digest_expr()).to_series())
    assert parts.to_series().null_count() == n // 4  # the references'
