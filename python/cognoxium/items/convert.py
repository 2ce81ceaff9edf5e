"""Context items laid out as frames of the item schema, and back.

:func:`items_to_frame` lays validated items out as rows of
:data:`~cognoxium.items.schema.POLARS_SCHEMA`, :func:`frame_to_items` turns
such rows back into items, and :func:`to_arrow` exports a frame as an Arrow
table of :data:`~cognoxium.items.schema.SCHEMA`, the form of the Parquet
files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl
import pyarrow as pa
from pydantic import ValidationError

from cognoxium.exceptions import SchemaError
from cognoxium.items._json import canonical_json_list, canonical_object_column
from cognoxium.items.model import ContextItem
from cognoxium.items.schema import COLUMNS, POLARS_SCHEMA, SCHEMA
from cognoxium.items.validation import check_unique_ids, record_error

__all__ = ["frame_to_items", "items_to_frame", "to_arrow"]


def _item_columns(items: list[ContextItem]) -> dict[str, list[Any]]:
    """The items' values, a list per column of the schema but ``metadata``, in item order."""
    payloads = [item.payload for item in items]

    def of(kind: str, name: str) -> list[Any]:
        return [getattr(p, name) if p.kind == kind else None for p in payloads]

    return {
        "id": [item.id for item in items],
        "role": [item.role.value for item in items],
        "payload_kind": [p.kind for p in payloads],
        "text": of("text", "text"),
        "json": of("json", "canonical"),
        "binary": of("binary", "data"),
        "ref_uri": of("reference", "uri"),
        "ref_title": of("reference", "title"),
        "ref_digest": of("reference", "digest"),
        "content_hash": [item.content_hash for item in items],
        "sources": [[s.model_dump() for s in item.sources] for item in items],
        "trust": [item.trust.value for item in items],
        "sensitivity": [item.sensitivity.value for item in items],
        "retention": [item.retention.value for item in items],
        "priority": [item.priority for item in items],
        "rank": [item.rank for item in items],
        "created_at": [item.created_at for item in items],
        "valid_from": [item.valid_from for item in items],
        "expires_at": [item.expires_at for item in items],
        "parents": [item.parents for item in items],
        "lineage": [[edge.model_dump() for edge in item.lineage] for item in items],
        "group_id": [item.group_id for item in items],
    }


def items_to_frame(items: Iterable[ContextItem]) -> pl.DataFrame:
    """Lay out items as a Polars frame of :data:`POLARS_SCHEMA`, in input order.

    Parameters
    ----------
    items
        Validated context items.

    Returns
    -------
    polars.DataFrame
        One row per item, shape ``(len(items), len(COLUMNS))``.

    Examples
    --------
    >>> df = items_to_frame([ContextItem(id="a", role="user", text="hi",
    ...                                  created_at="2024-01-01T00:00:00Z")])
    >>> df.select("id", "role", "text").row(0)
    ('a', 'user', 'hi')
    """
    df = _items_frame(items)
    check_unique_ids(df, None, None)
    return df


def _items_frame(items: Iterable[ContextItem]) -> pl.DataFrame:
    items = list(items)
    columns = _item_columns(items)
    values = [item.metadata for item in items]
    metadata = canonical_object_column(values, "metadata")
    if metadata is None:
        metadata = pl.Series("metadata", canonical_json_list(values), pl.String)
    frame = pl.DataFrame([_column(name, values) for name, values in columns.items()])
    return frame.with_columns(metadata).select(COLUMNS)


def _column(name: str, values: list[Any]) -> pl.Series:
    """One column of :data:`POLARS_SCHEMA` from its values; nested ones are built by Arrow."""
    dtype = POLARS_SCHEMA[name]
    if not dtype.is_nested():
        return pl.Series(name, values, dtype)
    series = pl.from_arrow(pa.array(values, type=SCHEMA.field(name).type))
    assert isinstance(series, pl.Series)
    return series.alias(name).cast(dtype)


def _row_to_item_data(row: Mapping[str, Any]) -> dict[str, Any]:
    kind = row["payload_kind"]
    payload: dict[str, Any]
    if kind == "text":
        payload = {"kind": "text", "text": row["text"]}
    elif kind == "json":
        payload = {"kind": "json", "value": json.loads(row["json"])}
    elif kind == "binary":
        payload = {"kind": "binary", "data": row["binary"]}
    else:
        payload = {
            "kind": "reference",
            "uri": row["ref_uri"],
            "title": row["ref_title"],
            "digest": row["ref_digest"],
        }
    return {
        "id": row["id"],
        "role": row["role"],
        "payload": payload,
        "sources": row["sources"],
        "trust": row["trust"],
        "sensitivity": row["sensitivity"],
        "retention": row["retention"],
        "priority": row["priority"],
        "rank": row["rank"],
        "created_at": row["created_at"],
        "valid_from": row["valid_from"],
        "expires_at": row["expires_at"],
        "parents": row["parents"],
        "lineage": row["lineage"],
        "group_id": row["group_id"],
        "metadata": json.loads(row["metadata"]),
        "content_hash": row["content_hash"],
    }


def frame_to_items(df: pl.DataFrame) -> list[ContextItem]:
    """Turn a frame of the canonical schema back into validated items.

    Columns beyond :data:`COLUMNS` (added by ``with_columns``) are ignored.

    Raises
    ------
    RecordError
        If a row is not a valid item; ``line`` is its 0-based row index.
    """
    items = []
    for index, row in enumerate(df.select(COLUMNS).iter_rows(named=True)):
        try:
            items.append(ContextItem.model_validate(_row_to_item_data(row)))
        except ValidationError as exc:
            raise record_error(exc, None, row=index) from None
    return items


def to_arrow(df: pl.DataFrame) -> pa.Table:
    """Export a frame of the canonical schema as an Arrow table of :data:`SCHEMA`.

    Columns beyond :data:`COLUMNS` follow, in their order, with Polars' types.

    Raises
    ------
    SchemaError
        If an item column is missing.
    """
    missing = [name for name in COLUMNS if name not in df.columns]
    if missing:
        raise SchemaError(f"missing item columns {missing}")
    table = df.to_arrow()
    extra = [name for name in df.columns if name not in POLARS_SCHEMA]
    fields = [SCHEMA.field(name) for name in COLUMNS] + [table.schema.field(n) for n in extra]
    target = pa.schema(fields, metadata=SCHEMA.metadata)
    return table.select(list(COLUMNS) + extra).cast(target)
