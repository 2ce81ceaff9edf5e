"""Context items.

The ``ContextItem`` model and payloads, the canonical Arrow schema and its
validation, the JSONL/Parquet readers and writers, partitioned stores of
Parquet files, and lazy scans of them.
"""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.items.convert import frame_to_items, items_to_frame, to_arrow
    from cognoxium.items.io import (
        MAX_ITEM_BYTES,
        atomic_write,
        read_items,
        read_jsonl,
        read_parquet,
        write_jsonl,
        write_parquet,
    )
    from cognoxium.items.model import (
        MAX_ID_LENGTH,
        MAX_JSON_DEPTH,
        TRUNCATE_KEY,
        UNDATED,
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
        Truncation,
        Trust,
        canonical_json,
        content_hash,
    )
    from cognoxium.items.records import item_to_record, records_to_frame
    from cognoxium.items.scan import (
        ItemScan,
        ScanRead,
        scan_lazy_items,
        scan_ndjson_items,
        scan_parquet_items,
    )
    from cognoxium.items.schema import (
        COLUMNS,
        PAYLOAD_KINDS,
        POLARS_SCHEMA,
        SCHEMA,
        SCHEMA_VERSION,
        packed_text_expr,
    )
    from cognoxium.items.store import check_store, partition_key, read_store, write_partitioned
    from cognoxium.items.validation import conform, row_checks
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.items.io": [
                "MAX_ITEM_BYTES",
                "atomic_write",
                "read_items",
                "read_jsonl",
                "read_parquet",
                "write_jsonl",
                "write_parquet",
            ],
            "cognoxium.items.model": [
                "MAX_ID_LENGTH",
                "MAX_JSON_DEPTH",
                "TRUNCATE_KEY",
                "UNDATED",
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
                "Truncation",
                "Trust",
                "canonical_json",
                "content_hash",
            ],
            "cognoxium.items.scan": [
                "ItemScan",
                "ScanRead",
                "scan_lazy_items",
                "scan_ndjson_items",
                "scan_parquet_items",
            ],
            "cognoxium.items.convert": ["frame_to_items", "items_to_frame", "to_arrow"],
            "cognoxium.items.records": ["item_to_record", "records_to_frame"],
            "cognoxium.items.schema": [
                "COLUMNS",
                "PAYLOAD_KINDS",
                "POLARS_SCHEMA",
                "SCHEMA",
                "SCHEMA_VERSION",
                "packed_text_expr",
            ],
            "cognoxium.items.store": [
                "check_store",
                "partition_key",
                "read_store",
                "write_partitioned",
            ],
            "cognoxium.items.validation": ["conform", "row_checks"],
        },
    )

__all__ = [
    "COLUMNS",
    "MAX_ID_LENGTH",
    "MAX_ITEM_BYTES",
    "MAX_JSON_DEPTH",
    "PAYLOAD_KINDS",
    "POLARS_SCHEMA",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TRUNCATE_KEY",
    "UNDATED",
    "Binary",
    "ContextItem",
    "ItemScan",
    "Json",
    "LineageEdge",
    "Payload",
    "Reference",
    "Retention",
    "Role",
    "ScanRead",
    "Sensitivity",
    "Source",
    "Text",
    "Truncation",
    "Trust",
    "atomic_write",
    "canonical_json",
    "check_store",
    "conform",
    "content_hash",
    "frame_to_items",
    "item_to_record",
    "items_to_frame",
    "packed_text_expr",
    "partition_key",
    "read_items",
    "read_jsonl",
    "read_parquet",
    "read_store",
    "records_to_frame",
    "row_checks",
    "scan_lazy_items",
    "scan_ndjson_items",
    "scan_parquet_items",
    "to_arrow",
    "write_jsonl",
    "write_parquet",
    "write_partitioned",
]
