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
from cognoxium.items.model import ContextItem, canonical_json
from cognoxium.items.schema import COLUMNS, POLARS_SCHEMA, SCHEMA
from cognoxium.items.validation import check_unique_ids, record_error

__all__ = ["frame_to_items", "items_to_frame", "to_arrow"]


def _item_row(item: ContextItem) -> dict[str, Any]:
    p = item.payload
    return {
        "id": item.id,
        "role": item.role.value,
        "payload_kind": p.kind,
        "text": p.text if p.kind == "text" else None,
        "json": p.canonical if p.kind == "json" else None,
        "binary": p.data if p.kind == "binary" else None,
        "ref_uri": p.uri if p.kind == "reference" else None,
        "ref_title": p.title if p.kind == "reference" else None,
        "ref_digest": p.digest if p.kind == "reference" else None,
        "content_hash": item.content_hash,
        "sources": [s.model_dump() for s in item.sources],
        "trust": item.trust.value,
        "sensitivity": item.sensitivity.value,
        "retention": item.retention.value,
        "priority": item.priority,
        "rank": item.rank,
        "created_at": item.created_at,
        "valid_from": item.valid_from,
        "expires_at": item.expires_at,
        "parents": list(item.parents),
        "lineage": [edge.model_dump() for edge in item.lineage],
        "group_id": item.group_id,
        "metadata": canonical_json(item.metadata),
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
    rows = [_item_row(item) for item in items]
    return pl.DataFrame(rows, schema=POLARS_SCHEMA, orient="row" if not rows else None)


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
