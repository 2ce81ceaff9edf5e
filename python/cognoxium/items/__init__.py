"""Context items.

The ``ContextItem`` model and payloads, the canonical Arrow schema and its
validation, and the JSONL/Parquet readers and writers.
"""

from cognoxium.items.io import (
    atomic_write,
    read_items,
    read_jsonl,
    read_parquet,
    write_jsonl,
    write_parquet,
)
from cognoxium.items.model import (
    Binary,
    ContextItem,
    Json,
    LineageEdge,
    Payload,
    Reference,
    Retention,
    Role,
    Sensitivity,
    Source,
    Text,
    Trust,
    canonical_json,
    content_hash,
)
from cognoxium.items.schema import (
    COLUMNS,
    PAYLOAD_KINDS,
    POLARS_SCHEMA,
    SCHEMA,
    SCHEMA_VERSION,
    conform,
    frame_to_items,
    item_to_record,
    items_to_frame,
    packed_text_expr,
    records_to_frame,
    to_arrow,
)

__all__ = [
    "COLUMNS",
    "PAYLOAD_KINDS",
    "POLARS_SCHEMA",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Binary",
    "ContextItem",
    "Json",
    "LineageEdge",
    "Payload",
    "Reference",
    "Retention",
    "Role",
    "Sensitivity",
    "Source",
    "Text",
    "Trust",
    "atomic_write",
    "canonical_json",
    "conform",
    "content_hash",
    "frame_to_items",
    "item_to_record",
    "items_to_frame",
    "packed_text_expr",
    "read_items",
    "read_jsonl",
    "read_parquet",
    "records_to_frame",
    "to_arrow",
    "write_jsonl",
    "write_parquet",
]
