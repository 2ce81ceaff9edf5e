"""The dedupe kernel: frames in, frames out, the merge record, and the plan node that calls it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cognoxium import CognitionFrame
from cognoxium.exceptions import PlanError, SchemaError
from cognoxium.governance.dedupe import NORMALIZATIONS, check_dedupe, dedupe_frame
from cognoxium.items.records import records_to_frame

AS_OF = datetime(2025, 1, 1, tzinfo=UTC)

RECORDS: list[dict[str, Any]] = [
    {"id": "b", "role": "document", "text": "Lyon is sunny.", "metadata": {"lang": "en"}},
    {"id": "x", "role": "document", "text": "Rain in Oslo."},
    {
        "id": "a",
        "role": "document",
        "text": "Lyon is sunny.",
        "trust": "trusted",
        "priority": 3,
        "metadata": {"lang": "fr"},
        "sources": [{"uri": "https://b.example", "kind": "web"}],
    },
    {"id": "c", "role": "document", "text": "  LYON is sunny. "},
    {"id": "d", "role": "document", "text": "Lyon is sunny!", "expires_at": "2024-01-01T00:00:00Z"},
]


@pytest.fixture
def items() -> pl.DataFrame:
    return records_to_frame([{"created_at": "2023-06-01T00:00:00Z", **r} for r in RECORDS])


def test_a_merge_is_conservative_and_recorded(items: pl.DataFrame) -> None:
    out = dedupe_frame(items)
    assert out["id"].to_list() == ["a", "x", "c", "d"]  # "a" is the representative, at b's place
    first = out.row(0, named=True)
    assert first["trust"] == "untrusted"
    assert first["priority"] == 3
    assert first["merged_ids"] == ["b"]
    assert first["merge_conflicts"] == '{"lang":{"a":"fr","b":"en"}}'
    assert [s["uri"] for s in first["sources"]] == ["https://b.example"]
    assert [(e["parent_id"], e["operation"]) for e in first["lineage"]] == [("b", "merge")]
    assert out.row(1, named=True)["merged_ids"] == []
    assert out.row(1, named=True)["merge_conflicts"] is None


def test_the_result_has_the_kind_of_its_input(items: pl.DataFrame) -> None:
    eager = dedupe_frame(items, normalize=("case", "whitespace"))
    lazy = dedupe_frame(items.lazy(), normalize=("case", "whitespace"))
    assert isinstance(eager, pl.DataFrame)
    assert isinstance(lazy, pl.LazyFrame)
    assert_frame_equal(lazy.collect(), eager)
    assert eager["id"].to_list() == ["a", "x", "d"]
    assert eager["merged_ids"].to_list() == [["b", "c"], [], []]


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"merge": False},
        {"normalize": ("nfc", "case", "whitespace")},
        {"threshold": 0.5},
        {"threshold": 0.5, "normalize": ("case",), "merge": False},
        {"as_of": AS_OF},
        {"by": ("role",), "merge": False},
    ],
)
def test_the_plan_node_lowers_to_the_kernel(items: pl.DataFrame, args: dict[str, Any]) -> None:
    by = args.pop("by", ("content_hash",))
    planned = CognitionFrame(items).dedupe(by=list(by), **args).collect()
    assert_frame_equal(planned, dedupe_frame(items, by, **args))


def test_expired_copies_are_set_aside_when_a_live_copy_exists(items: pl.DataFrame) -> None:
    out = dedupe_frame(items, normalize=("case",), threshold=0.5, as_of=AS_OF)
    kept = out.filter(pl.col("id") == "a").row(0, named=True)
    assert kept["merge_dropped"] == [{"id": "d", "reason": "expired"}]
    assert "d" not in out["id"].to_list()


def test_columns_outside_the_item_schema_come_from_the_representative() -> None:
    df = pl.DataFrame({"id": ["b", "a"], "content_hash": ["h", "h"], "score": [1, 2]})
    out = dedupe_frame(df)
    assert out.rows() == [("a", "h", 2, ["b"], None)]
    assert out.columns == ["id", "content_hash", "score", "merged_ids", "merge_conflicts"]


@pytest.mark.parametrize(
    ("frame", "args", "missing"),
    [
        (pl.DataFrame({"id": ["a"]}), {}, "['content_hash']"),
        (pl.DataFrame({"content_hash": ["h"]}), {}, "['id']"),
        (pl.DataFrame({"content_hash": ["h"]}), {"merge": False}, None),
        (pl.DataFrame({"id": ["a"], "text": ["t"]}), {"normalize": ("case",)}, "'payload_kind'"),
    ],
)
def test_a_missing_column_is_a_schema_error_naming_it(
    frame: pl.DataFrame, args: dict[str, Any], missing: str | None
) -> None:
    if missing is None:
        assert dedupe_frame(frame, **args).height == 1
        return
    with pytest.raises(SchemaError, match=rf"dedupe needs the columns \[?{missing}"):
        dedupe_frame(frame, **args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"by": ()}, "at least one key column"),
        ({"normalize": ("stem",)}, r"unknown normalisation \['stem'\]"),
        ({"threshold": 0.0}, r"must be in \(0, 1\], got 0.0"),
        ({"threshold": True}, r"must be in \(0, 1\], got True"),
        ({"threshold": 0.8, "by": ("role",)}, "they take no 'by' columns"),
    ],
)
def test_bad_arguments_fail_before_any_data_is_read(
    items: pl.DataFrame, args: dict[str, Any], message: str
) -> None:
    by = args.pop("by", ("content_hash",))
    with pytest.raises(PlanError, match=message):
        dedupe_frame(items.lazy(), by, **args)
    with pytest.raises(PlanError, match=message):
        check_dedupe(by, **args)
    with pytest.raises(PlanError, match=message):  # the plan node checks by the same rule
        CognitionFrame(items).dedupe(by=list(by), **args)


def test_every_normalisation_is_applied() -> None:
    df = records_to_frame(
        [
            {"id": "a", "role": "user", "text": "Caf\u00e9  au lait"},
            {"id": "b", "role": "user", "text": "CAFE\u0301 au lait "},
        ]
    )
    assert NORMALIZATIONS == ("whitespace", "case", "nfc")
    for steps, kept in [(NORMALIZATIONS, 1), (("whitespace", "case"), 2), (("nfc", "case"), 2)]:
        assert dedupe_frame(df, normalize=steps).height == kept, steps


def test_a_merge_without_a_clock_keeps_every_row_valid() -> None:
    # The kept row took the newer copy's created_at and the older copy's expiry, so it
    # expired before it was created and to_records() refused it.
    frame = CognitionFrame(
        [
            {"id": "old", "role": "document", "text": "Refund policy: 30 days.",
             "created_at": "2025-01-01T00:00:00Z", "expires_at": "2025-06-01T00:00:00Z"},
            {"id": "new", "role": "document", "text": "Refund policy: 30 days.",
             "created_at": "2025-07-01T00:00:00Z"},
        ]
    )  # fmt: skip
    merged = frame.dedupe()
    row = merged.collect().row(0, named=True)
    assert (row["id"], row["merged_ids"]) == ("new", ["old"])
    assert row["created_at"] == datetime(2025, 1, 1, tzinfo=UTC)
    assert row["expires_at"] == datetime(2025, 6, 1, tzinfo=UTC)
    assert [r["id"] for r in merged.to_records()] == ["new"]
