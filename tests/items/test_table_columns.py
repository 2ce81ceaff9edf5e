"""Tables bring their own column types: a struct column of metadata is JSON objects.

A ``metadata`` column of structs (as Polars, Arrow and Parquet hold JSON
objects) was cast to text as Polars prints it and then refused as invalid
JSON; it is encoded as JSON objects, by every reader of tables.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from cognoxium.exceptions import SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.io import read_parquet
from cognoxium.items.validation import conform

TABLE = pl.DataFrame(
    {
        "id": ["a", "b"],
        "role": ["user", "assistant"],
        "text": ["Where is my refund?", "It was sent."],
        "created_at": ["2025-01-01T00:00:00Z"] * 2,
        "metadata": [{"topic": "billing", "n": 1}, {"topic": None, "n": 2}],
    }
)
ENCODED = ['{"n":1,"topic":"billing"}', '{"n":2,"topic":null}']


def test_a_struct_metadata_column_is_read_as_json_objects(tmp_path: Path) -> None:
    assert conform(TABLE)["metadata"].to_list() == ENCODED
    frame = CognitionFrame.from_polars(TABLE)
    assert frame.collect()["metadata"].to_list() == ENCODED
    assert frame.filter("metadata.n = 2").collect()["id"].to_list() == ["b"]
    path = tmp_path / "items.parquet"
    TABLE.write_parquet(path)
    assert read_parquet(path)["metadata"].to_list() == ENCODED
    stored = conform(TABLE).with_columns(TABLE["metadata"])
    stored.write_parquet(path)
    scan = CognitionFrame.scan_parquet(path)
    assert scan.collect()["metadata"].to_list() == ENCODED
    assert scan.filter("metadata.topic = 'billing'").collect()["id"].to_list() == ["a"]


@pytest.mark.parametrize("values", [[[1], [2]], [1, 2]])
def test_a_metadata_column_of_other_values_is_refused_by_name(values: list[object]) -> None:
    table = TABLE.with_columns(pl.Series("metadata", values))
    with pytest.raises(SchemaError, match=r"column 'metadata' is .*: it holds JSON objects"):
        conform(table)
