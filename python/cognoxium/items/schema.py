"""The canonical columnar schema of context items, and expressions over its columns.

Every frame, Parquet file and Arrow table of context items has the columns of
:data:`SCHEMA`, in that order. Enumerations are dictionary-encoded; sources and
parents are list columns; ``metadata`` and ``json`` hold canonical JSON text.
The schema version is stored in the schema metadata under
``cognoxium.schema_version``.

=============  ===========================  ==============================================
column         Arrow type                   meaning
=============  ===========================  ==============================================
id             large_string                 stable identity
role           dictionary<int8, string>     :class:`~cognoxium.items.model.Role`
payload_kind   dictionary<int8, string>     text, json, binary or reference
text           large_string                 the text of a Text payload, else null
json           large_string                 canonical JSON of a Json payload, else null
binary         large_binary                 the bytes of a Binary payload, else null
ref_uri        large_string                 a Reference's uri, else null
ref_title      large_string                 a Reference's title
ref_digest     large_string                 a Reference's digest
content_hash   large_string                 sha256 hex of kind + canonical bytes
sources        large_list<struct>           uri, kind, title, retrieved_at (UTC)
trust          dictionary<int8, string>     trusted or untrusted
sensitivity    dictionary<int8, string>     public, internal, confidential, restricted
retention      dictionary<int8, string>     required, preferred, optional
priority       int64                        higher first
rank           float64                      relevance score, null if unranked
created_at     timestamp[us, UTC]           creation time
valid_from     timestamp[us, UTC]           start of validity, null for always
expires_at     timestamp[us, UTC]           end of validity (exclusive), null for never
parents        large_list<large_string>     lineage: ids this item derives from
lineage        large_list<struct>           parent_id, parent_hash, operation, detail
group_id       large_string                 items of one group pack or drop together
metadata       large_string                 canonical JSON object
=============  ===========================  ==============================================

The other modules of :mod:`cognoxium.items` work on this schema:
:mod:`~cognoxium.items.convert` lays items out as frames and back,
:mod:`~cognoxium.items.records` validates JSON records into frames,
:mod:`~cognoxium.items.validation` casts and checks user tables
(:func:`~cognoxium.items.validation.conform`) and
:mod:`~cognoxium.items.hashing` computes content hashes in bulk.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pyarrow as pa

from cognoxium.exceptions import SchemaError
from cognoxium.items.model import Retention, Role, Sensitivity, Trust

__all__ = [
    "COLUMNS",
    "DEFAULTS",
    "EDGE_STRUCT",
    "ENUM_VALUES",
    "PAYLOAD_COLUMNS",
    "PAYLOAD_KINDS",
    "POLARS_SCHEMA",
    "POLARS_TIMESTAMP",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SOURCE_STRUCT",
    "TIMESTAMP",
    "mapped_expr",
    "packed_text_expr",
    "require_item_columns",
    "timestamp_literal",
]


SCHEMA_VERSION = 2
"""Version of :data:`SCHEMA`; bumped on any incompatible change."""

PAYLOAD_KINDS: tuple[str, ...] = ("text", "json", "binary", "reference")
"""The payload kinds, in the order of their codes in ``payload_kind``."""

ENUM_VALUES: dict[str, tuple[str, ...]] = {
    "role": tuple(r.value for r in Role),
    "payload_kind": PAYLOAD_KINDS,
    "trust": tuple(t.value for t in Trust),
    "sensitivity": tuple(s.value for s in Sensitivity),
    "retention": tuple(r.value for r in Retention),
}
"""The values of each enumeration column, in the order of their codes."""

TIMESTAMP = pa.timestamp("us", tz="UTC")
"""The Arrow type of every time column: microseconds, UTC."""

_DICT = pa.dictionary(pa.int8(), pa.large_string())

SOURCE_STRUCT = pa.struct(
    [
        ("uri", pa.large_string()),
        ("kind", pa.large_string()),
        ("title", pa.large_string()),
        ("retrieved_at", TIMESTAMP),
    ]
)
"""The Arrow type of one entry of ``sources``."""

EDGE_STRUCT = pa.struct(
    [
        ("parent_id", pa.large_string()),
        ("parent_hash", pa.large_string()),
        ("operation", pa.large_string()),
        ("detail", pa.large_string()),
    ]
)
"""The Arrow type of one lineage edge (an entry of ``lineage``)."""

SCHEMA: pa.Schema = pa.schema(
    [
        ("id", pa.large_string()),
        ("role", _DICT),
        ("payload_kind", _DICT),
        ("text", pa.large_string()),
        ("json", pa.large_string()),
        ("binary", pa.large_binary()),
        ("ref_uri", pa.large_string()),
        ("ref_title", pa.large_string()),
        ("ref_digest", pa.large_string()),
        ("content_hash", pa.large_string()),
        ("sources", pa.large_list(SOURCE_STRUCT)),
        ("trust", _DICT),
        ("sensitivity", _DICT),
        ("retention", _DICT),
        ("priority", pa.int64()),
        ("rank", pa.float64()),
        ("created_at", TIMESTAMP),
        ("valid_from", TIMESTAMP),
        ("expires_at", TIMESTAMP),
        ("parents", pa.large_list(pa.large_string())),
        ("lineage", pa.large_list(EDGE_STRUCT)),
        ("group_id", pa.large_string()),
        ("metadata", pa.large_string()),
    ],
    metadata={"cognoxium.schema_version": str(SCHEMA_VERSION)},
)
"""The canonical Arrow schema of context items (see the module docstring)."""

COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
"""The item columns, in the order of :data:`SCHEMA`."""

POLARS_TIMESTAMP = pl.Datetime("us", "UTC")
"""The Polars type of every time column: microseconds, UTC."""

POLARS_SCHEMA = pl.Schema(
    {  # type: ignore[arg-type]
        "id": pl.String,
        "role": pl.Enum(ENUM_VALUES["role"]),
        "payload_kind": pl.Enum(ENUM_VALUES["payload_kind"]),
        "text": pl.String,
        "json": pl.String,
        "binary": pl.Binary,
        "ref_uri": pl.String,
        "ref_title": pl.String,
        "ref_digest": pl.String,
        "content_hash": pl.String,
        "sources": pl.List(
            pl.Struct(
                {
                    "uri": pl.String,
                    "kind": pl.String,
                    "title": pl.String,
                    "retrieved_at": POLARS_TIMESTAMP,
                }
            )
        ),
        "trust": pl.Enum(ENUM_VALUES["trust"]),
        "sensitivity": pl.Enum(ENUM_VALUES["sensitivity"]),
        "retention": pl.Enum(ENUM_VALUES["retention"]),
        "priority": pl.Int64,
        "rank": pl.Float64,
        "created_at": POLARS_TIMESTAMP,
        "valid_from": POLARS_TIMESTAMP,
        "expires_at": POLARS_TIMESTAMP,
        "parents": pl.List(pl.String),
        "lineage": pl.List(
            pl.Struct(
                {
                    "parent_id": pl.String,
                    "parent_hash": pl.String,
                    "operation": pl.String,
                    "detail": pl.String,
                }
            )
        ),
        "group_id": pl.String,
        "metadata": pl.String,
    }
)
"""The same schema as Polars dtypes (enumerations as ``pl.Enum``)."""

DEFAULTS: dict[str, Any] = {
    "trust": Trust.UNTRUSTED.value,
    "sensitivity": Sensitivity.INTERNAL.value,
    "retention": Retention.OPTIONAL.value,
    "priority": 0,
    "metadata": "{}",
}
"""The value of each optional column with a default that a table or record leaves out
(the list columns default to empty lists, the others to null)."""

PAYLOAD_COLUMNS: tuple[str, ...] = (
    "payload_kind",
    "text",
    "json",
    "binary",
    "ref_uri",
    "ref_title",
    "ref_digest",
)
"""The payload columns: the kind, then the column or columns of each kind."""


def require_item_columns(schema: pl.Schema, *, missing_message: str | None = None) -> None:
    """Raise unless ``schema`` holds every item column with its :data:`POLARS_SCHEMA` type.

    Parameters
    ----------
    schema
        The columns of typed item rows; other columns are allowed.
    missing_message
        The message for missing columns, ``{missing}`` standing for their
        names (default: ``"missing item columns {missing}"``).

    Raises
    ------
    SchemaError
        Naming the missing columns, else the columns of another type.

    Examples
    --------
    >>> require_item_columns(pl.Schema({"id": pl.String}))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.SchemaError: missing item columns ['role', ...]
    """
    missing = [name for name in COLUMNS if name not in schema]
    if missing:
        raise SchemaError(
            (missing_message or "missing item columns {missing}").format(missing=missing)
        )
    wrong = {
        n: f"{schema[n]} (expected {POLARS_SCHEMA[n]})"
        for n in COLUMNS
        if schema[n] != POLARS_SCHEMA[n]
    }
    if wrong:
        raise SchemaError(f"item columns of the wrong type: {wrong}; cast them back")


def mapped_expr(
    name: str,
    dtype: pl.DataType,
    mapping: Mapping[str, Any],
    return_dtype: pl.DataType | type[pl.DataType],
) -> pl.Expr:
    """Column ``name`` (of type ``dtype``) mapped value by value through ``mapping``.

    An enumeration whose every value ``mapping`` holds is looked up by its
    codes, without reading its text; any other column is cast to String and
    replaced strictly. A null stays null.

    Parameters
    ----------
    name, dtype
        The column and its type.
    mapping
        Text -> value, for every value of the column.
    return_dtype
        The type of the values.

    Returns
    -------
    polars.Expr
        ``(n,)`` of ``return_dtype``; raises (at collect) on a value outside
        ``mapping``.

    Examples
    --------
    >>> df = pl.DataFrame({"r": ["b", "a", None]}, schema={"r": pl.Enum(["a", "b"])})
    >>> tier = mapped_expr("r", df.schema["r"], {"a": 1, "b": 2}, pl.Int64)
    >>> df.select(tier).to_series().to_list()
    [2, 1, None]
    """
    if isinstance(dtype, pl.Enum) and set(dtype.categories) <= set(mapping):
        lookup = pl.Series([mapping[value] for value in dtype.categories], dtype=return_dtype)
        return pl.lit(lookup).gather(pl.col(name).to_physical()).alias(name)
    return pl.col(name).cast(pl.String).replace_strict(mapping, return_dtype=return_dtype)


_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp_literal(when: datetime) -> pl.Expr:
    """A literal of :data:`POLARS_TIMESTAMP` for the aware time ``when``, to compare columns to.

    Built from its microseconds since the Unix epoch: the same value as
    ``pl.lit(when)``, at a small part of its cost to build (a packed scope
    builds its validity tests once per pack).

    Parameters
    ----------
    when
        A timezone-aware time; microseconds are its finest unit.

    Returns
    -------
    polars.Expr
        A one-value ``Datetime("us", "UTC")`` expression.

    Raises
    ------
    TypeError
        If ``when`` is naive.

    Examples
    --------
    >>> when = datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    >>> pl.select(timestamp_literal(when)).item() == when
    True
    """
    micros = (when - _UNIX_EPOCH) // timedelta(microseconds=1)
    return pl.lit(micros, pl.Int64).cast(POLARS_TIMESTAMP)


def packed_text_expr() -> pl.Expr:
    """Return an expression for the text that packing renders for each item.

    ============  ==========================================================
    payload_kind  text
    ============  ==========================================================
    text          the ``text`` column
    json          the canonical JSON in the ``json`` column
    reference     ``"<title> <uri>"``, or just the uri when there is no title
    binary        ``""`` (binary payloads are never packed as text)
    ============  ==========================================================

    An image (a Binary image, or a Reference to one) is sent as an image
    part, with the reference's title as its text; see
    :mod:`cognoxium.items.images`.

    The expression reads ``payload_kind``, ``text``, ``json``, ``ref_uri`` and
    ``ref_title``, never yields null for a valid item, and is named
    ``packed_text``.

    Returns
    -------
    polars.Expr
        A String expression, one value per row.

    Examples
    --------
    >>> from cognoxium.items.validation import conform
    >>> df = conform(pl.DataFrame({
    ...     "role": ["user", "tool", "document", "document"],
    ...     "payload_kind": ["text", "json", "reference", "reference"],
    ...     "text": ["hi", None, None, None],
    ...     "json": [None, '{"b": 1, "a": 2}', None, None],
    ...     "ref_uri": [None, None, "https://x.org/a", "https://x.org/b"],
    ...     "ref_title": [None, None, "Spec", None]}))
    >>> df.select(packed_text_expr()).to_series().to_list()
    ['hi', '{"a":2,"b":1}', 'Spec https://x.org/a', 'https://x.org/b']
    """
    kind = pl.col("payload_kind").cast(pl.String)
    reference = (
        pl.when(pl.col("ref_title").is_null())
        .then(pl.col("ref_uri"))
        .otherwise(pl.concat_str([pl.col("ref_title"), pl.col("ref_uri")], separator=" "))
    )
    return (
        pl.when(kind == "text")
        .then(pl.col("text"))
        .when(kind == "json")
        .then(pl.col("json"))
        .when(kind == "reference")
        .then(reference)
        .otherwise(pl.lit(""))
        .fill_null("")
        .alias("packed_text")
    )
