"""filter refuses, when the frame is built, comparisons of values that do not compare."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cognoxium.exceptions import PlanError, PredicateError
from cognoxium.frame.frame import CognitionFrame

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"


@pytest.fixture(scope="module")
def sample() -> CognitionFrame:
    return CognitionFrame.read_jsonl(SAMPLE / "items.jsonl")


def ids(frame: CognitionFrame) -> list[str]:
    return sorted(frame.collect()["id"].to_list())


def role_ids(frame: CognitionFrame, *roles: str) -> list[str]:
    rows = frame.collect()
    return sorted(rows.filter(pl.col("role").cast(pl.String).is_in(roles))["id"].to_list())


@pytest.mark.parametrize(
    ("predicate", "parts"),
    [
        ("priority = 'high'", ["column priority is a number (Int64)", "'high' is text"]),
        ("created_at > '2025-11-01'", ["column created_at is a time", "TIMESTAMP '2025-11-01'"]),
        ("lower(priority) = 'x'", ["lower() takes text", "column priority is a number"]),
        ("trust IN (1, 2)", ["column trust is text (Enum of 'trusted', 'untrusted')"]),
    ],
)
def test_a_sql_type_mismatch_is_refused_when_the_frame_is_built(
    sample: CognitionFrame, predicate: str, parts: list[str]
) -> None:
    with pytest.raises(PredicateError) as info:
        sample.filter(predicate)  # no collect: the schema is known here
    for part in parts:
        assert part in str(info.value), (part, str(info.value))


@pytest.mark.parametrize(
    ("constraints", "parts"),
    [
        ({"priority": "high"}, ["column 'priority' is a number (Int64)", "'high' is text"]),
        ({"role": 3}, ["column 'role' is text (Enum of", "3 is a number (Int64)"]),
        ({"created_at": "2025-11-01"}, ["is a time", "datetime.datetime", "TIMESTAMP"]),
        ({"role": ["user", "assistant"]}, ["equality with one value", "is_in", "role IN"]),
        ({"priority": (1, 2)}, ["equality with one value", "is_in"]),
        ({"role": {"user"}}, ["equality with one value"]),
    ],
)
def test_a_keyword_constraint_the_column_cannot_equal_is_refused(
    sample: CognitionFrame, constraints: dict[str, Any], parts: list[str]
) -> None:
    with pytest.raises(PlanError) as info:
        sample.filter(**constraints)
    for part in parts:
        assert part in str(info.value), (part, str(info.value))


def test_keyword_constraints_of_the_right_type_still_filter(sample: CognitionFrame) -> None:
    assert ids(sample.filter(role="user")) == role_ids(sample, "user")
    high = sorted(sample.collect().filter(pl.col("priority") == 100)["id"].to_list())
    assert high
    assert ids(sample.filter(priority=100)) == high
    assert ids(sample.filter(priority=100.0)) == high
    moment = datetime(2025, 10, 1, tzinfo=UTC)
    at = sorted(sample.collect().filter(pl.col("created_at") == moment)["id"].to_list())
    assert at
    assert ids(sample.filter(created_at=moment)) == at


def test_text_functions_and_patterns_work_on_enumeration_columns(sample: CognitionFrame) -> None:
    users = role_ids(sample, "user")
    assert users
    assert ids(sample.filter("lower(role) = 'user'")) == users
    assert ids(sample.filter("upper(role) = 'USER'")) == users
    assert ids(sample.filter("role LIKE 'us%'")) == users
    assert ids(sample.filter("role ILIKE 'US_R'")) == users
    four = sorted(
        sample.collect().filter(pl.col("role").cast(pl.String).str.len_chars() == 4)["id"]
    )
    assert ids(sample.filter("length(role) = 4")) == four


def test_the_timestamp_form_the_hint_suggests_works(sample: CognitionFrame) -> None:
    moment = datetime(2025, 11, 1, tzinfo=UTC)
    later = sorted(sample.collect().filter(pl.col("created_at") > moment)["id"].to_list())
    assert later
    assert ids(sample.filter("created_at > TIMESTAMP '2025-11-01'")) == later


MIXED = [
    {"id": "a", "role": "user", "text": "x", "metadata": {"x": "a", "n": {"k": 1}}},
    {"id": "b", "role": "user", "text": "y", "metadata": {"x": 1, "n": {"k": 2}}},
]


def test_a_metadata_key_of_mixed_types_reads_as_text_and_says_so() -> None:
    frame = CognitionFrame(MIXED)
    with pytest.raises(PredicateError) as info:
        frame.filter("metadata.x = 1")
    message = str(info.value)
    assert "metadata.x is text (String)" in message
    assert "1 is a number (Int64)" in message
    assert "several types" in message
    assert "metadata.x = '1'" in message
    assert ids(frame.filter("metadata.x = '1'")) == ["b"]  # the form the hint gives


SCORES = [
    {"id": "a", "role": "document", "text": "a", "metadata": {"score": 1, "flag": True}},
    {"id": "b", "role": "document", "text": "b", "metadata": {"score": "3", "flag": "yes"}},
    {"id": "c", "role": "document", "text": "c", "metadata": {"score": 10}},
]


def _hint(frame: CognitionFrame, predicate: str) -> str:
    with pytest.raises(PredicateError) as info:
        frame.filter(predicate)
    return str(info.value)


def test_the_hints_for_mixed_metadata_give_forms_that_find_the_right_items() -> None:
    # The hint said to compare with text, as metadata.score = '2': for an order that
    # compares characters ('10' < '2'), and metadata.score > '2' left out c (10). It said
    # metadata.flag = 'TRUE' for the JSON true, stored as 'true': nothing matched.
    frame = CognitionFrame(SCORES)
    message = _hint(frame, "metadata.score > 2")
    polars_form = message.split("as pl.col")[1]
    assert polars_form == (
        "('metadata').str.json_path_match(\"$['score']\").cast(pl.Float64, strict=False) > 2"
    )
    expr = eval("pl.col" + polars_form)  # the form the hint gives, as written
    assert ids(frame.filter(expr)) == ["b", "c"]
    assert "metadata.flag = 'true'" in _hint(frame, "metadata.flag = true")
    assert ids(frame.filter("metadata.flag = 'true'")) == ["a"]


def test_the_time_hint_gives_the_one_form_that_parses() -> None:
    frame = CognitionFrame(SCORES)
    message = _hint(frame, "created_at > '2025-12-01T00:00:00Z'")
    assert message.endswith("write the time as TIMESTAMP '2025-12-01T00:00:00Z'; a bare "
                            "string is text, not a time")  # fmt: skip
    frame.filter("created_at > TIMESTAMP '2025-12-01T00:00:00Z'").collect()
    forms = "TIMESTAMP '2025-12-01' (or DATE '2025-12-01');"
    assert f"write the time as {forms}" in _hint(frame, "created_at > '2025-12-01'")
    frame.filter("created_at > DATE '2025-12-01'").collect()


def test_a_metadata_object_compared_with_a_value_is_refused_not_empty() -> None:
    frame = CognitionFrame(MIXED)
    with pytest.raises(PredicateError) as info:
        frame.filter("metadata.n = 2")
    message = str(info.value)
    assert "metadata.n is an object with keys k (Struct)" in message
    assert "metadata.n.<key>" in message
    assert ids(frame.filter("metadata.n.k = 2")) == ["b"]


def test_a_metadata_key_of_one_type_compares_with_that_type() -> None:
    frame = CognitionFrame(
        [
            {"id": "a", "role": "user", "text": "x", "metadata": {"n": 1}},
            {"id": "b", "role": "user", "text": "y", "metadata": {"n": 2}},
        ]
    )
    assert ids(frame.filter("metadata.n >= 2")) == ["b"]
    with pytest.raises(PredicateError, match=r"metadata\.n is a number \(Int64\)"):
        frame.filter("metadata.n = 'two'")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "metadata.acl.levl > 2",
            "no item has the metadata key 'acl.levl': did you mean 'level'? "
            "the keys of metadata.acl are ['group', 'level']",
        ),
        ("metadata.acl.level.x = 1", "metadata.acl.level is a number (Int64): it has no key 'x'"),
        ("metadata.page.x = 1", "metadata.page is a number (Int64): it has no key 'x'"),
    ],
)
def test_a_nested_metadata_key_no_item_has_is_named_with_the_keys_there_are(
    tmp_path: Path, sql: str, message: str
) -> None:
    # Before: "Filter: StructFieldNotFoundError: levl", naming neither the predicate nor the keys.
    from cognoxium.items import records_to_frame, write_parquet

    rows = [
        {"id": f"d{n}", "role": "document", "text": "x",
         "metadata": {"acl": {"group": "g", "level": n}, "page": n}}
        for n in range(4)
    ]  # fmt: skip
    write_parquet(records_to_frame(rows), tmp_path / "docs.parquet")
    for frame in (CognitionFrame(rows), CognitionFrame.scan_parquet(tmp_path / "docs.parquet")):
        with pytest.raises(PredicateError) as caught:
            frame.filter(sql)
        assert message in str(caught.value)
        assert sql in str(caught.value)
        assert frame.filter("metadata.acl.level > 1").count() == 2


KEYS_APART = [
    {"id": "a", "role": "document", "text": "x",
     "metadata": {"source": "kb", "links": [{"href": "https://a"}], "vip": True,
                  "acl": {"level": 1, "x": {"k": 1}}}},
    {"id": "b", "role": "document", "text": "y",
     "metadata": {"source": "web", "links": "none", "vip": 1, "acl": {"level": 2, "x": "q"}}},
]  # fmt: skip


@pytest.mark.parametrize(
    ("sql", "kept"),
    [
        ("metadata.source = 'kb'", ["a"]),
        ("metadata.acl.level = 2", ["b"]),
        ("metadata.source = 'web' AND metadata.acl.level > 1", ["b"]),
    ],
)
def test_a_key_of_one_type_filters_beside_keys_whose_types_differ(
    tmp_path: Path, sql: str, kept: list[str]
) -> None:
    # Before: "cannot decode the metadata JSON: ... error deserializing value Object(...) as
    # string. Try increasing `infer_schema_length`", for a key the predicate does not read.
    from cognoxium.items import records_to_frame, write_parquet

    write_parquet(records_to_frame(KEYS_APART), tmp_path / "docs.parquet")
    for frame in (
        CognitionFrame(KEYS_APART),
        CognitionFrame.scan_parquet(tmp_path / "docs.parquet"),
    ):
        assert ids(frame.filter(sql)) == kept
        held = frame.quarantine(sql, reason="r").collect()
        assert held.filter(pl.col("quarantine_reason").is_not_null())["id"].to_list() == kept


@pytest.mark.parametrize(
    ("sql", "path"),
    [
        ("metadata.links = 'none'", "metadata.links"),
        ("metadata.links.href = 'x'", "metadata.links"),  # said links had no key href
        ("metadata.acl.x = 'q'", "metadata.acl.x"),
        ("metadata.acl IS NULL", "metadata.acl"),
        ("metadata.vip = 1", "metadata.vip"),
    ],
)
def test_a_key_whose_values_differ_in_type_is_refused_by_name(sql: str, path: str) -> None:
    # metadata.vip = 1 matched "vip": true, which Polars decodes as 1 in a number key.
    with pytest.raises(PredicateError) as caught:
        CognitionFrame(KEYS_APART).filter(sql)
    assert f"{path} holds values of different JSON types across the items" in str(caught.value)
