"""An integer item column given as floats is never truncated.

A float ``priority`` of 1.5 used to become 1 silently wherever a table was
brought to the item schema. Whole floats are cast; a fraction, NaN or an
infinity is refused with the row and the field, and a Parquet scan, which
casts lazily, refuses a float column outright.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from cognoxium.exceptions import RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.io import read_parquet
from cognoxium.items.validation import conform


def _table(priority: list[float]) -> pl.DataFrame:
    n = len(priority)
    return pl.DataFrame(
        {
            "id": [f"i{k}" for k in range(n)],
            "role": ["user"] * n,
            "text": ["hello"] * n,
            "created_at": ["2024-01-01T00:00:00Z"] * n,
            "priority": priority,
        }
    )


def test_whole_floats_are_cast_to_integers() -> None:
    assert conform(_table([2.0, -3.0, 0.0]))["priority"].to_list() == [2, -3, 0]


@pytest.mark.parametrize(
    ("priority", "row"),
    [([1.0, 1.5], 1), ([float("nan")], 0), ([0.0, 2.0, float("inf")], 2), ([float("-inf")], 0)],
)
def test_a_fraction_nan_or_infinity_is_refused_at_its_row(priority: list[float], row: int) -> None:
    with pytest.raises(RecordError, match=rf"row {row}: field priority: must be a whole number"):
        conform(_table(priority))
    with pytest.raises(RecordError, match="field priority: must be a whole number"):
        CognitionFrame.from_polars(_table(priority)).collect()


def test_read_parquet_refuses_a_fraction(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    _table([1.0, 2.25]).write_parquet(path)
    with pytest.raises(RecordError, match="row 1: field priority: must be a whole number"):
        read_parquet(path)


def test_a_scan_refuses_a_float_integer_column(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    conform(_table([1.0, 2.0])).with_columns(pl.col("priority").cast(pl.Float64)).write_parquet(
        path
    )
    with pytest.raises(SchemaError, match=r"integer columns \['priority'\] are stored as floats"):
        CognitionFrame.scan_parquet(path).collect()


@pytest.mark.parametrize("dtype", [pl.Int64, pl.Int32, pl.UInt32, pl.Float64])
def test_a_time_column_of_numbers_is_refused_not_read_as_microseconds(
    tmp_path: Path, dtype: pl.DataType
) -> None:
    # Unix seconds were cast as microseconds: 1767000000 became 1970-01-01T00:29:27Z, and
    # every item was left out of the pack as expired.
    table = _table([1.0, 2.0]).with_columns(
        pl.Series("created_at", [1767000000, 1767000060]).cast(dtype),
        pl.Series("expires_at", [1798000000, 1798000000]).cast(dtype),
    )
    message = r"time columns hold numbers: created_at \(.+\), expires_at \(.+\);.*pl\.from_epoch"
    with pytest.raises(SchemaError, match=message):
        conform(table)
    with pytest.raises(SchemaError, match=message):
        CognitionFrame.from_polars(table)
    path = tmp_path / "items.parquet"
    table.write_parquet(path)
    with pytest.raises(SchemaError, match=message):
        read_parquet(path)
    stored = conform(_table([1.0, 2.0])).with_columns(
        pl.col("created_at").dt.epoch("s").cast(dtype)
    )
    stored.write_parquet(path)
    with pytest.raises(SchemaError, match=r"time columns hold numbers: created_at"):
        CognitionFrame.scan_parquet(path).collect()
    fixed = table.with_columns(pl.from_epoch("created_at", "s"), pl.from_epoch("expires_at", "s"))
    assert conform(fixed)["created_at"].dt.year().to_list() == [2025, 2025]


@pytest.mark.parametrize(
    ("column", "values"),
    [("priority", ["5", "2"]), ("priority", [True, False]), ("rank", ["0.5", "1"])],
)
def test_a_number_column_of_text_or_booleans_is_refused_as_a_record_refuses_it(
    column: str, values: list[object]
) -> None:
    # A priority of "5" or true was cast to 5 or 1, where a record refuses both.
    table = _table([1.0, 2.0]).with_columns(pl.Series(column, values))
    with pytest.raises(SchemaError, match=rf"number columns hold text or booleans: {column} "):
        conform(table)
