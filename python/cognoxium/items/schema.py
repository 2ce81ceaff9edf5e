"""The canonical columnar schema of context items, and conversions to and from it.

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
"""

from __future__ import annotations

import base64
import binascii
import json
import operator
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from itertools import accumulate, chain
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
from pydantic import BaseModel, ValidationError

from cognoxium.exceptions import RecordError, SchemaError
from cognoxium.items._checks import (
    CONTROL_PATTERN,
    MAX_ID_LENGTH,
    MAX_INT,
    MAX_JSON_DEPTH,
    MIN_INT,
    TIME_RANGE_MESSAGE,
    json_text_depth,
    text_problem,
)
from cognoxium.items._json import (
    canonical_flat_column,
    canonical_json_list,
    canonical_text_list,
)
from cognoxium.items.model import (
    ContextItem,
    Retention,
    Role,
    Sensitivity,
    Trust,
    canonical_json,
    content_hash,
)

if TYPE_CHECKING:
    from polars.lazyframe.in_process import InProcessQuery

__all__ = [
    "COLUMNS",
    "PAYLOAD_COLUMNS",
    "PAYLOAD_KINDS",
    "POLARS_SCHEMA",
    "SCHEMA",
    "SCHEMA_VERSION",
    "canonical_json_columns",
    "check_content_hashes",
    "check_items",
    "complete_valid_columns",
    "conform",
    "content_hash_expr",
    "digests_in_background",
    "frame_to_items",
    "item_to_record",
    "items_to_frame",
    "mapped_expr",
    "packed_text_expr",
    "records_to_frame",
    "require_item_columns",
    "row_checks",
    "to_arrow",
]

SCHEMA_VERSION = 2
"""Version of :data:`SCHEMA`; bumped on any incompatible change."""

PAYLOAD_KINDS: tuple[str, ...] = ("text", "json", "binary", "reference")

_ENUMS: dict[str, tuple[str, ...]] = {
    "role": tuple(r.value for r in Role),
    "payload_kind": PAYLOAD_KINDS,
    "trust": tuple(t.value for t in Trust),
    "sensitivity": tuple(s.value for s in Sensitivity),
    "retention": tuple(r.value for r in Retention),
}

_TS = pa.timestamp("us", tz="UTC")
_DICT = pa.dictionary(pa.int8(), pa.large_string())
_SOURCE = pa.struct(
    [
        ("uri", pa.large_string()),
        ("kind", pa.large_string()),
        ("title", pa.large_string()),
        ("retrieved_at", _TS),
    ]
)

_EDGE = pa.struct(
    [
        ("parent_id", pa.large_string()),
        ("parent_hash", pa.large_string()),
        ("operation", pa.large_string()),
        ("detail", pa.large_string()),
    ]
)

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
        ("sources", pa.large_list(_SOURCE)),
        ("trust", _DICT),
        ("sensitivity", _DICT),
        ("retention", _DICT),
        ("priority", pa.int64()),
        ("rank", pa.float64()),
        ("created_at", _TS),
        ("valid_from", _TS),
        ("expires_at", _TS),
        ("parents", pa.large_list(pa.large_string())),
        ("lineage", pa.large_list(_EDGE)),
        ("group_id", pa.large_string()),
        ("metadata", pa.large_string()),
    ],
    metadata={"cognoxium.schema_version": str(SCHEMA_VERSION)},
)
"""The canonical Arrow schema of context items (see the module docstring)."""

COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)

_PL_TS = pl.Datetime("us", "UTC")
POLARS_SCHEMA = pl.Schema(
    {  # type: ignore[arg-type]
        "id": pl.String,
        "role": pl.Enum(_ENUMS["role"]),
        "payload_kind": pl.Enum(_ENUMS["payload_kind"]),
        "text": pl.String,
        "json": pl.String,
        "binary": pl.Binary,
        "ref_uri": pl.String,
        "ref_title": pl.String,
        "ref_digest": pl.String,
        "content_hash": pl.String,
        "sources": pl.List(
            pl.Struct(
                {"uri": pl.String, "kind": pl.String, "title": pl.String, "retrieved_at": _PL_TS}
            )
        ),
        "trust": pl.Enum(_ENUMS["trust"]),
        "sensitivity": pl.Enum(_ENUMS["sensitivity"]),
        "retention": pl.Enum(_ENUMS["retention"]),
        "priority": pl.Int64,
        "rank": pl.Float64,
        "created_at": _PL_TS,
        "valid_from": _PL_TS,
        "expires_at": _PL_TS,
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

_REQUIRED = ("id", "metadata", "priority", "sources", "parents", "lineage")
_PAYLOAD_COLUMN = {"text": "text", "json": "json", "binary": "binary", "reference": "ref_uri"}
_DEFAULTS: dict[str, Any] = {
    "trust": Trust.UNTRUSTED.value,
    "sensitivity": Sensitivity.INTERNAL.value,
    "retention": Retention.OPTIONAL.value,
    "priority": 0,
    "metadata": "{}",
}


# ---------------------------------------------------------------------------
# items <-> frame


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
    _check_unique_ids(df, None, None)
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
            raise _record_error(exc, None, row=index) from None
    return items


# ---------------------------------------------------------------------------
# records (JSON form)


def item_to_record(item: ContextItem) -> dict[str, Any]:
    """Return the JSON record of an item: the field names, ``text`` for a Text payload.

    Examples
    --------
    >>> rec = item_to_record(ContextItem(id="a", role="user", text="hi",
    ...                                  created_at="2024-01-01T00:00:00Z"))
    >>> rec["text"], rec["created_at"], "payload" in rec
    ('hi', '2024-01-01T00:00:00Z', False)
    """
    record = item.model_dump(mode="json")
    if record["payload"]["kind"] == "text":
        record["text"] = record.pop("payload")["text"]
    return record


def _record_error(
    exc: ValidationError, source: str | None, *, line: int | None = None, row: int | None = None
) -> RecordError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    message = first["msg"].removeprefix("Value error, ")
    return RecordError(message, source=source, line=line, row=row, field=field)


def _check_unique_ids(df: pl.DataFrame, source: str | None, first_line: int | None) -> None:
    """Raise at the first row whose id an earlier row already has."""
    ids = df.get_column("id")
    if ids.n_unique() == ids.len():  # counting distinct ids is cheaper than finding a repeat
        return
    repeated = df.select(pl.col("id").is_first_distinct().not_().arg_true()).to_series()
    if repeated.len():
        row = int(repeated[0])
        item_id = df.get_column("id")[row]
        first = int(df.select((pl.col("id") == item_id).arg_true().first()).item())
        if first_line is None:
            raise RecordError(
                f"duplicate id {item_id!r} (first at row {first})",
                source=source,
                row=row,
                field="id",
            )
        raise RecordError(
            f"duplicate id {item_id!r} (first on line {first + first_line})",
            source=source,
            line=row + first_line,
            field="id",
        )


# ---------------------------------------------------------------------------
# arbitrary tables -> canonical frame (vectorised)


def _fail_rows(
    df: pl.DataFrame, bad: pl.Expr, column: str, message: str, source: str | None
) -> None:
    index = df.with_row_index("__row").filter(bad).select("__row").head(1)
    if index.height:
        row = int(index.item())
        raise RecordError(message, source=source, row=row, field=column)


def _canonical_text(values: pl.Series, column: str, source: str | None) -> pl.Series:
    """Canonicalise JSON text, converting each distinct value once.

    The distinct texts are first checked together (:func:`canonical_text_list`);
    only those that are not canonical yet are parsed and encoded one by one.
    """
    uniques = values.drop_nulls().unique().to_list()
    flags = canonical_text_list(uniques)
    if flags is not None:
        uniques = [text for text, canonical in zip(uniques, flags, strict=True) if not canonical]
        if not uniques:
            return values
    mapping = {}
    for text in uniques:
        try:
            mapping[text] = canonical_json(json.loads(text))
        except RecursionError:
            row = int(values.eq(text).arg_true()[0])
            raise RecordError(_DEPTH_MESSAGE, source=source, row=row, field=column) from None
        except ValueError as exc:
            row = int(values.eq(text).arg_true()[0])
            raise RecordError(
                f"invalid JSON ({exc})", source=source, row=row, field=column
            ) from None
    if flags is not None:
        return values.replace(mapping)
    return values.replace_strict(mapping, default=None, return_dtype=pl.String)


_HASH_CHUNK = 65536

_DEPTH_MESSAGE = f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
_DEPTH_FIELDS = {"metadata": "metadata", "json": "payload.value"}
"""The JSON text columns whose nesting is limited, and the record field of each."""


def _too_deep(df: pl.DataFrame, column: str) -> int | None:
    """The first row whose JSON text in ``column`` nests deeper than the limit, or ``None``.

    Only rows with more opening brackets than the limit are scanned; when
    no text is longer than the limit (in bytes), none has that many.
    """
    texts = df.get_column(column)
    if not (texts.str.len_bytes() > MAX_JSON_DEPTH).any():
        return None
    brackets = texts.str.count_matches(r"[\[{]") > MAX_JSON_DEPTH
    for row in brackets.arg_true().to_list():
        if json_text_depth(texts[row])[0] > MAX_JSON_DEPTH:
            return int(row)
    return None


def _hash_input() -> pl.Expr:
    """Each row's kind, a NUL byte and its canonical payload bytes; null for a reference."""
    kind = pl.col("payload_kind").cast(pl.String)
    return (
        pl.when(kind == "text")
        .then(pl.lit(b"text\x00") + pl.col("text").cast(pl.Binary))
        .when(kind == "json")
        .then(pl.lit(b"json\x00") + pl.col("json").cast(pl.Binary))
        .when(kind == "binary")
        .then(pl.lit(b"binary\x00") + pl.col("binary"))
        .otherwise(None)
    )


def _digest_expr() -> pl.Expr:
    """sha256 hex of each row's kind and canonical payload bytes; null for a reference."""
    from polars_hash import CryptographicHashingNameSpace

    return CryptographicHashingNameSpace(_hash_input()).sha2_256().alias("content_hash")


_HASH_PART_ROWS = 16_384
"""The fewest rows hashed as a part of their own, on a thread of Polars' pool."""


def _digest_query(payload: pl.LazyFrame, n: int) -> pl.LazyFrame:
    """The query of each row's :func:`_digest_expr`, its ``n`` rows hashed in parallel parts.

    A plugin expression runs on one thread per column; slices of the rows
    concatenated in order hash on as many threads as Polars has.
    """
    parts = max(1, min(pl.thread_pool_size(), n // _HASH_PART_ROWS))
    if parts == 1:
        return payload.select(_digest_expr())
    step = -(-n // parts)
    return pl.concat(
        [payload.slice(start, step).select(_digest_expr()) for start in range(0, n, step)]
    )


def digests_in_background(payload: list[pl.Series]) -> InProcessQuery:
    """Start hashing payloads on Polars' threads: each row's sha256 digest, fetched when done.

    Parameters
    ----------
    payload
        The payload columns (``payload_kind``, ``text``, ``json``,
        ``binary``; others are ignored), ``n`` rows each.

    Returns
    -------
    polars.lazyframe.in_process.InProcessQuery
        Its ``fetch_blocking()`` gives one column of ``n`` digests (sha256
        hex of the kind and canonical payload bytes; null for a reference),
        to pass to :func:`complete_valid_columns`.
    """
    query = _digest_query(pl.LazyFrame(payload), len(payload[0]))
    return query.collect(background=True)


def _hashes(df: pl.DataFrame, digests: pl.Series | None = None) -> pl.Series:
    """The content hash of every row: sha256 in bulk (polars-hash), references one by one.

    A Reference's canonical bytes are the canonical JSON of its uri, title
    and digest, built per row in Python; every other kind is hashed in one
    expression (``digests``, when already computed).
    """
    if digests is None:
        digests = _digest_query(df.lazy(), df.height).collect().to_series()
    references = df.get_column("payload_kind").cast(pl.String) == "reference"
    if not references.any():
        return digests
    rows = references.arg_true()
    refs = df.select("ref_uri", "ref_title", "ref_digest").gather(rows)
    values = [
        content_hash(
            "reference",
            canonical_json({"digest": digest, "title": title, "uri": uri}).encode("utf-8"),
        )
        for uri, title, digest in refs.iter_rows()
    ]
    return digests.scatter(rows, values)


PAYLOAD_COLUMNS: tuple[str, ...] = (
    "payload_kind",
    "text",
    "json",
    "binary",
    "ref_uri",
    "ref_title",
    "ref_digest",
)


def _struct_hashes(payload: pl.Series) -> pl.Series:
    return _hashes(payload.struct.unnest())


def content_hash_expr() -> pl.Expr:
    """The ``content_hash`` of each row computed from its payload columns.

    sha256 hex of the payload kind and canonical bytes, as items have it;
    for frames whose payload columns were replaced (JSON text must already
    be canonical).

    Returns
    -------
    polars.Expr
        A String expression named ``content_hash``.

    Examples
    --------
    >>> df = records_to_frame([{"id": "a", "role": "user", "text": "hi"}])
    >>> changed = df.with_columns(text=pl.lit("bye"))
    >>> fresh = records_to_frame([{"id": "a", "role": "user", "text": "bye"}])
    >>> changed.select(content_hash_expr()).item() == fresh["content_hash"].item()
    True
    """
    return (
        pl.struct(list(PAYLOAD_COLUMNS))
        .map_batches(_struct_hashes, return_dtype=pl.String)
        .alias("content_hash")
    )


def _checked_hashes(df: pl.DataFrame, source: str | None) -> pl.Series:
    """Compute every row's content hash, chunk by chunk, and check the ones given.

    Where every row has a hash (a file this package wrote), the given column
    is kept after checking, so no second copy of it outlives a chunk.
    """
    given = df.get_column("content_hash")
    complete = given.null_count() == 0
    chunks = []
    for start in range(0, df.height, _HASH_CHUNK):
        part = df.slice(start, _HASH_CHUNK)
        computed = _hashes(part)
        stated = given.slice(start, _HASH_CHUNK)
        mismatch = stated.is_not_null() & (stated != computed)
        if mismatch.any():
            at = int(mismatch.arg_true()[0])
            raise RecordError(
                f"content_hash {stated[at]!r} does not match the payload "
                f"(computed {computed[at]!r})",
                source=source,
                row=start + at,
                field="content_hash",
            )
        if not complete:
            chunks.append(computed)
    if complete:
        return given
    return pl.concat(chunks) if chunks else pl.Series("content_hash", [], pl.String)


def check_content_hashes(df: pl.DataFrame) -> None:
    """Raise unless every stated ``content_hash`` of ``df`` is the hash of its row's payload.

    For typed rows that reach a cache keyed by content hash (token counts,
    embeddings) without a reader's checks: a hash that belongs to other
    content would give a row that content's cost or vector. A null hash is
    left to the caller. The rows are hashed in bulk (about 20 ms per 100,000
    chat messages on 2 cores).

    Parameters
    ----------
    df
        ``n`` rows with the payload columns and ``content_hash`` in their
        :data:`POLARS_SCHEMA` types.

    Raises
    ------
    RecordError
        Naming the first row (0-based) whose hash does not match, field
        ``content_hash``, with the stated and the computed hash.

    Examples
    --------
    >>> df = records_to_frame([{"id": "a", "role": "user", "text": "hi"}])
    >>> check_content_hashes(df)
    >>> check_content_hashes(df.with_columns(text=pl.lit("bye")))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: row 0: field content_hash: content_hash '...' does not ...
    """
    _checked_hashes(df.select(*PAYLOAD_COLUMNS, "content_hash"), None)


def _table_frame(data: pa.Table | pl.DataFrame, where: str) -> pl.DataFrame:
    """The input as a Polars frame, after checking its column names."""
    df = pl.from_arrow(data) if isinstance(data, pa.Table) else data
    if not isinstance(df, pl.DataFrame):
        raise SchemaError(f"{where}expected a table, got a single column")
    unknown = [c for c in df.columns if c not in POLARS_SCHEMA]
    if unknown:
        raise SchemaError(
            f"{where}unknown columns {unknown}; the item columns are {list(COLUMNS)} "
            "(put free-form fields in 'metadata')"
        )
    if "role" not in df.columns:
        raise SchemaError(f"{where}column 'role' is required")
    payload_cols = [c for c in ("text", "json", "binary", "ref_uri") if c in df.columns]
    if not payload_cols and df.height:
        raise SchemaError(
            f"{where}a payload column is required: one of text, json, binary, ref_uri"
        )
    return df


def _fill_defaults(df: pl.DataFrame) -> pl.DataFrame:
    """Add every missing item column with its default (random ids, the current time)."""
    fill: list[pl.Series | pl.Expr] = []
    for name, dtype in POLARS_SCHEMA.items():
        if name in df.columns:
            continue
        if name == "id":
            fill.append(pl.Series(name, [str(uuid.uuid4()) for _ in range(df.height)], pl.String))
        elif name == "created_at":
            fill.append(pl.lit(datetime.now(UTC), dtype=_PL_TS).alias(name))
        elif name in ("sources", "parents", "lineage"):
            fill.append(pl.lit([], dtype=dtype).alias(name))
        elif name in _DEFAULTS:
            fill.append(pl.lit(_DEFAULTS[name]).alias(name))
        else:
            fill.append(pl.lit(None, dtype=dtype).alias(name))
    return df.with_columns(fill)


def _infer_payload_kind(df: pl.DataFrame, source: str | None) -> pl.DataFrame:
    """Set ``payload_kind`` from the first non-null payload column; every row needs one."""
    inferred = (
        pl.when(pl.col("text").is_not_null())
        .then(pl.lit("text"))
        .when(pl.col("json").is_not_null())
        .then(pl.lit("json"))
        .when(pl.col("binary").is_not_null())
        .then(pl.lit("binary"))
        .when(pl.col("ref_uri").is_not_null())
        .then(pl.lit("reference"))
        .otherwise(None)
    )
    df = df.with_columns(inferred.alias("payload_kind"))
    _fail_rows(
        df,
        pl.col("payload_kind").is_null(),
        "text",
        "no payload: one of the columns text, json, binary, ref_uri must hold a value",
        source,
    )
    return df


def _value_checks() -> list[tuple[pl.Expr, str, str]]:
    """Row checks of every input before the cast: (bad-row mask, column, message), in order.

    Enumerations are read as text, so the same checks serve records and tables.
    """
    checks = [
        (
            pl.col(name).cast(pl.String).is_null() | ~pl.col(name).cast(pl.String).is_in(values),
            name,
            f"must be one of {list(values)}",
        )
        for name, values in _ENUMS.items()
    ]
    checks += [(pl.col(name).is_null(), name, "must not be null") for name in _REQUIRED]
    return checks


def _id_checks(ids: pl.Expr, field: str) -> list[tuple[pl.Expr, str, str]]:
    """Masks of the ids in ``ids`` that are blank, too long or hold control characters."""
    return [
        (ids.str.strip_chars() == "", field, "must not be blank"),
        (
            ids.str.len_chars() > MAX_ID_LENGTH,
            field,
            f"must be at most {MAX_ID_LENGTH} characters long",
        ),
        (ids.str.contains(CONTROL_PATTERN), field, "must not hold control characters"),
    ]


def _any_entry(column: str, bad: pl.Expr) -> pl.Expr:
    """Whether any entry of list column ``column`` is ``bad`` (an expression of the entry)."""
    return pl.col(column).list.eval(bad).list.any().fill_null(False)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIME_RANGE_US = (
    (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1),
    (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1),
)
"""The first and last microsecond of the years 1 to 9999 UTC, since the Unix epoch."""


def _out_of_range(times: pl.Expr) -> pl.Expr:
    """Whether each time falls outside the years 1 to 9999 UTC; null stays null.

    Compares the instants (microseconds since the epoch), not a calendar
    field of each, so it reads no time zone.
    """
    return ~times.dt.epoch("us").is_between(*_TIME_RANGE_US)


def _typed_checks() -> list[tuple[pl.Expr, str, str]]:
    """Row checks of every input once times, numbers and lists have their types."""
    checks = [
        (pl.col("created_at").is_null(), "created_at", "must not be null"),
        (
            pl.col("rank").is_nan() | pl.col("rank").is_infinite(),
            "rank",
            "must be a finite number (NaN and infinity are refused)",
        ),
        (
            pl.col("expires_at") < pl.col("created_at"),
            "expires_at",
            "must not be before created_at",
        ),
    ]
    out_of_range = _out_of_range(pl.element().struct.field("retrieved_at"))
    checks += [
        (_out_of_range(pl.col(name)), name, TIME_RANGE_MESSAGE)
        for name in ("created_at", "valid_from", "expires_at")
    ]
    checks.append(
        (_any_entry("sources", out_of_range), "sources", f"retrieved_at: {TIME_RANGE_MESSAGE}")
    )
    checks += _id_checks(pl.col("id"), "id")
    checks += _id_checks(pl.col("group_id"), "group_id")
    for bad, _, message in _id_checks(pl.element(), "parents"):
        checks.append((_any_entry("parents", bad), "parents", f"each id {message}"))
    for bad, _, message in _id_checks(pl.element().struct.field("parent_id"), "lineage"):
        checks.append((_any_entry("lineage", bad), "lineage", f"parent_id: {message}"))
    return checks


def _raise_first(
    df: pl.DataFrame, checks: list[tuple[pl.Expr, str, str]], source: str | None
) -> None:
    """Evaluate every check in one pass; raise for the first check, in order, that fails.

    The same error as checking one after the other: the first failing
    check, at its first failing row.
    """
    if not df.height or not checks:
        return
    firsts = df.select(
        mask.arg_true().first().alias(str(i)) for i, (mask, _, _) in enumerate(checks)
    ).row(0)
    for (_, column, message), row in zip(checks, firsts, strict=True):
        if row is not None:
            raise RecordError(message, source=source, row=int(row), field=column)


def _payload_checks() -> list[tuple[pl.Expr, str, str]]:
    """Row checks that each row fills exactly the payload columns of its ``payload_kind``."""
    kinds = pl.col("payload_kind").cast(pl.String)
    checks = []
    for kind, column in _PAYLOAD_COLUMN.items():
        checks.append(
            (
                (kinds == kind) & pl.col(column).is_null(),
                column,
                f"a {kind} payload needs a value in column {column!r}",
            )
        )
        checks.append(
            (
                (kinds != kind) & pl.col(column).is_not_null(),
                column,
                f"column {column!r} must be null unless payload_kind is {kind!r}",
            )
        )
    for column in ("ref_title", "ref_digest"):
        checks.append(
            (
                (kinds != "reference") & pl.col(column).is_not_null(),
                column,
                "must be null unless payload_kind is 'reference'",
            )
        )
    return checks


def _check_values(df: pl.DataFrame, source: str | None) -> None:
    """Check enumerations, non-null ``id``/``metadata``/``priority``, unique ids and payloads.

    One pass over the rows; the errors are those of checking in that order.
    """
    values, payloads = _value_checks(), _payload_checks()
    _raise_first(df, values, source)
    _check_unique_ids(df, source, None)
    _raise_first(df, payloads, source)


def _cast_to_schema(df: pl.DataFrame, where: str, source: str | None) -> pl.DataFrame:
    """Parse timestamp text, cast to :data:`POLARS_SCHEMA`, check ``created_at`` and ``rank``."""
    _raise_first(df, _whole_number_checks(df.schema), source)
    try:
        df = df.select(
            [
                pl.col(name).cast(pl.String).str.to_datetime(time_zone="UTC", time_unit="us")
                if name in ("created_at", "valid_from", "expires_at")
                and df.schema[name] == pl.String
                else pl.col(name)
                for name in POLARS_SCHEMA
            ]
        )
        df = df.cast(dict(POLARS_SCHEMA.items()))
    except pl.exceptions.PolarsError as exc:
        raise SchemaError(f"{where}cannot cast to the item schema: {exc}") from None
    _raise_first(df, _typed_checks(), source)
    return df


def _whole_number_checks(schema: pl.Schema) -> list[tuple[pl.Expr, str, str]]:
    """Row checks that float columns cast to an integer column hold whole numbers.

    A cast from float to integer drops the fraction (``1.5`` becomes ``1``)
    and a NaN or infinity cannot be cast: both are refused, not truncated.
    """
    return [
        (
            ~pl.col(name).is_finite() | (pl.col(name) != pl.col(name).floor()),
            name,
            "must be a whole number (a float column is cast to integers only when no "
            "value has a fraction, NaN or infinity)",
        )
        for name, dtype in POLARS_SCHEMA.items()
        if dtype.is_integer() and name in schema and schema[name].is_float()
    ]


def _canonicalise_json(df: pl.DataFrame, source: str | None) -> pl.DataFrame:
    """Bring ``json`` and ``metadata`` to canonical JSON; ``metadata`` must be an object."""
    return canonical_json_columns(df, source=source)


def canonical_json_columns(df: pl.DataFrame, *, source: str | None = None) -> pl.DataFrame:
    """Bring the ``json`` and ``metadata`` columns ``df`` has to canonical JSON, as :func:`conform`.

    Each distinct text is parsed once; ``metadata`` must hold JSON objects,
    and neither column may nest deeper than
    :data:`~cognoxium.items.MAX_JSON_DEPTH` levels. Other columns are left
    as they are.

    Parameters
    ----------
    df
        Rows with any subset of the item columns; ``json`` and ``metadata``
        as text.
    source
        Named in errors.

    Returns
    -------
    polars.DataFrame
        ``df`` with those columns in canonical JSON (sorted keys, no spaces).

    Raises
    ------
    RecordError
        At the first row holding invalid or too deeply nested JSON, or
        metadata that is not an object, naming the 0-based row and the column.

    Examples
    --------
    >>> df = pl.DataFrame({"metadata": ['{"b": 1, "a": [1, 2]}', "{}"]})
    >>> canonical_json_columns(df)["metadata"].to_list()
    ['{"a":[1,2],"b":1}', '{}']
    """
    present = [column for column in ("json", "metadata") if column in df.columns]
    df = df.with_columns(_canonical_text(df[column], column, source) for column in present)
    if "metadata" in present:
        _fail_rows(
            df,
            ~pl.col("metadata").str.starts_with("{"),
            "metadata",
            "must be a JSON object",
            source,
        )
    for column in present:
        row = _too_deep(df, column)
        if row is not None:
            raise RecordError(_DEPTH_MESSAGE, source=source, row=row, field=column)
    return df


def complete_valid_columns(df: pl.DataFrame, digests: pl.Series | None = None) -> pl.DataFrame:
    """Complete item columns whose every value is valid by construction; no row is checked.

    Missing columns get the defaults :func:`conform` gives them,
    ``content_hash`` is computed from the payload columns, and the columns
    take :data:`POLARS_SCHEMA`'s types and order. For converters that build
    each value from checked parts (ids from a checked prefix and an index,
    roles from a fixed set); anything else goes through :func:`conform`.

    Parameters
    ----------
    df
        A subset of :data:`COLUMNS` with ``payload_kind`` and the payload
        columns, ``id`` and ``created_at`` included; ``n`` rows.
    digests
        ``(n,)`` String: the payloads' digests, when already computed (see
        :func:`digests_in_background`); ``None``: computed here.

    Returns
    -------
    polars.DataFrame
        ``n`` rows, in order, with :data:`POLARS_SCHEMA`.

    Raises
    ------
    SchemaError
        If a column cannot take its type.

    Examples
    --------
    >>> df = complete_valid_columns(pl.DataFrame({
    ...     "id": ["a"], "role": ["user"], "payload_kind": ["text"], "text": ["hi"],
    ...     "created_at": [datetime(2024, 1, 1, tzinfo=UTC)]}))
    >>> df.select("trust", "metadata").row(0), df["content_hash"].item() == records_to_frame(
    ...     [{"id": "a", "role": "user", "text": "hi"}])["content_hash"].item()
    (('untrusted', '{}'), True)
    """
    try:
        df = _fill_defaults(df.drop("content_hash", strict=False))
        df = df.with_columns(_hashes(df, digests)).select(POLARS_SCHEMA.names())
        return df.cast(dict(POLARS_SCHEMA.items()))
    except pl.exceptions.PolarsError as exc:
        raise SchemaError(f"cannot cast to the item schema: {exc}") from None


def conform(data: pa.Table | pl.DataFrame, *, source: str | None = None) -> pl.DataFrame:
    """Validate a table of context items and bring it to the canonical schema.

    Missing optional columns get their defaults (``trust`` untrusted,
    ``sensitivity`` internal, ``retention`` optional, ``priority`` 0, empty
    ``sources``/``parents``/``lineage``, ``metadata`` ``{}``); a missing ``id`` gets random
    UUIDs and a missing ``created_at`` the current UTC time (neither is
    reproducible). ``payload_kind`` is inferred from the non-null payload
    column when absent. ``content_hash`` is computed, and checked where given.

    Parameters
    ----------
    data
        An Arrow table or Polars frame with a subset of :data:`COLUMNS`;
        ``role`` and one payload column (``text``, ``json``, ``binary`` or
        ``ref_uri``) are required.
    source
        Named in errors.

    Returns
    -------
    polars.DataFrame
        The same rows, in order, with :data:`POLARS_SCHEMA`.

    Raises
    ------
    SchemaError
        On unknown columns, a missing required column or an uncastable type.
    RecordError
        On an invalid value, naming the 0-based row (``line``) and the column.

    Examples
    --------
    >>> df = conform(pl.DataFrame({"id": ["a", "b"], "role": ["user", "assistant"],
    ...                            "text": ["hi", "hello"],
    ...                            "created_at": ["2024-01-01T00:00:00Z"] * 2}))
    >>> df.select("id", "payload_kind", "retention").rows()
    [('a', 'text', 'optional'), ('b', 'text', 'optional')]
    """
    where = f"{source}: " if source else ""
    df = _table_frame(data, where)
    infer_kind = "payload_kind" not in df.columns
    df = _fill_defaults(df)
    if infer_kind:
        df = _infer_payload_kind(df, source)
    _check_values(df, source)
    df = _cast_to_schema(df, where, source)
    df = _canonicalise_json(df, source)
    return df.with_columns(_checked_hashes(df, source))


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


def check_items(df: pl.DataFrame, *, finite_rank: bool = True) -> pl.DataFrame:
    """Check typed item rows as :func:`conform` checks what the readers read; all or nothing.

    For rows a query computed (``with_columns``, ``select``, ``join``) before
    they are packed or written: the same checks and errors as reading them
    back, including unique ids and content hashes that match the payload.

    Parameters
    ----------
    df
        ``n`` rows holding every column of :data:`COLUMNS` with its
        :data:`POLARS_SCHEMA` type; other columns are carried along.
    finite_rank
        Refuse NaN and infinite ranks, as the readers do; ``False`` leaves
        them as they are (a pack reads NaN as unranked and refuses infinity
        itself).

    Returns
    -------
    polars.DataFrame
        The ``n`` rows, in order: the item columns as :func:`conform` gives
        them (canonical JSON, a null ``content_hash`` computed), then the
        other columns of ``df``.

    Raises
    ------
    SchemaError
        If an item column is missing or has another type.
    RecordError
        At the first invalid row, naming its 0-based ``row`` in ``df`` and
        the field, worded as the readers word it.

    Examples
    --------
    >>> df = records_to_frame([{"id": "a", "role": "system", "text": "Be brief."}])
    >>> check_items(df.with_columns(text=pl.lit(None, pl.String)))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: row 0: field text: a text payload needs a value in ...
    """
    require_item_columns(df.schema)
    items = df.select(COLUMNS)
    rank = items.get_column("rank")
    if not finite_rank:
        items = items.with_columns(rank=pl.when(pl.col("rank").is_finite()).then(pl.col("rank")))
    checked = conform(items)
    if not finite_rank:
        checked = checked.with_columns(rank)
    extra = [name for name in df.columns if name not in POLARS_SCHEMA]
    return checked.hstack(df.select(extra).get_columns()) if extra else checked


def row_checks(columns: Iterable[str]) -> list[tuple[pl.Expr, str, str]]:
    """The row checks of :func:`conform` that read only ``columns``, in the order it runs them.

    For validating part of the columns of typed item rows (a scan that reads
    a few columns): each check is a bad-row mask over columns already in
    :data:`POLARS_SCHEMA` types (enumerations may also be text or
    categorical), the field it reports and the message. The checks that need
    the whole frame (unique ids, content hashes, JSON canonical form and
    nesting depth) are not included; :func:`conform` runs them.

    Parameters
    ----------
    columns
        The item columns available.

    Returns
    -------
    list of (polars.Expr, str, str)
        ``(bad-row mask, field, message)``, a Boolean expression that is true
        on the rows breaking the check.

    Examples
    --------
    >>> df = pl.DataFrame({"priority": [1, None]})
    >>> [(field, msg, df.select(bad).to_series().to_list()) for bad, field, msg
    ...  in row_checks(df.columns)]
    [('priority', 'must not be null', [False, True])]
    """
    have = set(columns)
    metadata = [(~pl.col("metadata").str.starts_with("{"), "metadata", "must be a JSON object")]
    checks = [*_value_checks(), *_payload_checks(), *_typed_checks(), *metadata]
    return [check for check in checks if set(check[0].meta.root_names()) <= have]


# ---------------------------------------------------------------------------
# records (JSON form) -> canonical frame (vectorised)

_RECORD_KEYS = frozenset(ContextItem.model_fields) | {"text", "content_hash"}
_PAYLOAD_KEYS = {
    "text": frozenset({"kind", "text"}),
    "json": frozenset({"kind", "value"}),
    "binary": frozenset({"kind", "data"}),
    "reference": frozenset({"kind", "uri", "title", "digest"}),
}
_SOURCE_KEYS = tuple(_SOURCE.names)
_EDGE_KEYS = tuple(_EDGE.names)
_ISO_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?([Zz]|[+-]\d{2}:?\d{2})$"
_TIME_HINT = (
    "must be an ISO 8601 time with seconds (at most 6 fractional digits: microseconds) and a "
    "UTC offset, such as 2024-01-01T00:00:00Z"
)


class _Failures:
    """The first failing row found so far, its field and a message for it."""

    def __init__(self) -> None:
        self.row: int | None = None
        self.field: str | None = None
        self.message = ""

    def add(self, row: int, field: str | None, message: str) -> None:
        if self.row is None or row < self.row:
            self.row, self.field, self.message = row, field, message

    def add_first(self, bad: Iterable[int], field: str | None, message: str) -> None:
        """Record the first of the rows ``bad`` (in row order), if any."""
        first = next(iter(bad), None)
        if first is not None:
            self.add(first, field, message)


def _plain(value: Any) -> Any:
    """A pydantic model given in place of its dict, as that dict."""
    return value.model_dump() if isinstance(value, BaseModel) else value


def _string_column(
    values: list[Any], name: str, fail: _Failures, field: str | None = None
) -> pl.Series:
    """A String column of ``values``; a non-string or a lone surrogate fails as ``field``."""
    # Only text reaches Polars: it converts other values recursively, so a list
    # nested thousands deep would overflow its stack.
    if all(t is type(None) or issubclass(t, str) for t in set(map(type, values))):
        try:
            return pl.Series(name, values, dtype=pl.String, strict=True)
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            pass  # a lone surrogate: found below
    # Only a failing column is checked value by value.
    problems = (
        (i, "must be a string" if not isinstance(v, str) else text_problem(v))
        for i, v in enumerate(values)
        if v is not None
    )
    row, message = next(((i, m) for i, m in problems if m is not None), (None, None))
    if row is not None and message is not None:
        fail.add(row, field or name, message)
    return pl.Series(
        name,
        [v if isinstance(v, str) and text_problem(v) is None else None for v in values],
        pl.String,
    )


_INTEGER_MESSAGE = (
    f"must be an integer from {MIN_INT} to {MAX_INT} (booleans, floats and text are refused)"
)
_NUMBER_MESSAGE = "must be a number (booleans and text are refused)"


def _integer_column(values: list[Any], name: str, fail: _Failures) -> pl.Series:
    """An Int64 column: Python ints in the int64 range only (no bool, float or text)."""
    if set(map(type, values)) <= {int, type(None)}:
        try:
            return pl.Series(name, values, dtype=pl.Int64, strict=True)
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            pass  # out of the int64 range: found below

    def ok(v: Any) -> bool:
        return v is None or (type(v) is int and MIN_INT <= v <= MAX_INT)

    fail.add_first((i for i, v in enumerate(values) if not ok(v)), name, _INTEGER_MESSAGE)
    return pl.Series(name, [v if ok(v) else None for v in values], pl.Int64)


def _float_column(values: list[Any], name: str, fail: _Failures) -> pl.Series:
    """A Float64 column of Python ints and floats (no bool or text); finiteness is checked later."""
    if set(map(type, values)) <= {float, int, type(None)}:
        try:
            return pl.Series(name, values, dtype=pl.Float64, strict=True)
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            pass  # an integer too large for a float: found below

    def number(v: Any) -> float | None:
        if type(v) is float:
            return v
        if type(v) is int:
            try:
                return float(v)
            except OverflowError:
                return None
        return None

    numbers = [number(v) for v in values]
    pairs = enumerate(zip(values, numbers, strict=True))
    fail.add_first((i for i, (v, x) in pairs if v is not None and x is None), name, _NUMBER_MESSAGE)
    return pl.Series(name, numbers, pl.Float64)


_UTC_SECONDS = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
"""The usual spelling of a time (UTC, whole seconds), which Polars parses without a
general format; it parses to what :data:`_ISO_TIME`'s format gives, and fails alike."""


def _parse_times(texts: pl.Series, name: str, fail: _Failures) -> pl.Series:
    """Parse ISO 8601 text as UTC microseconds; text that is not such a time fails."""
    return _parsed_times(texts, _start_parse(texts), name, fail)


def _start_parse(texts: pl.Series) -> InProcessQuery:
    """Start parsing times on Polars' threads, in the usual spelling (:data:`_UTC_SECONDS`).

    Fetched, the query gives whether every time is so spelled, and the times so parsed.
    """
    text = pl.col(texts.name)
    return (
        texts.to_frame()
        .lazy()
        .select(
            text.str.contains(_UTC_SECONDS).all().alias("usual"),  # nulls are left out
            text.str.to_datetime("%Y-%m-%dT%H:%M:%SZ", time_unit="us", strict=False),
        )
        .collect(background=True)
    )


def _parsed_times(
    texts: pl.Series, started: InProcessQuery, name: str, fail: _Failures
) -> pl.Series:
    """The times of :func:`_start_parse`, or, when one is spelled otherwise, of any ISO 8601."""
    usual, naive = started.fetch_blocking()
    if usual.all():
        parsed = naive.cast(_PL_TS)  # the epoch values are UTC already: a cast, no conversion
        fail.add_first(
            (parsed.is_null() & texts.is_not_null()).arg_true().to_list(), name, _TIME_HINT
        )
        return parsed.alias(name)
    spelled = texts.str.replace(r"^(\d{4}-\d{2}-\d{2})[ t]", "${1}T")
    parsed = spelled.str.to_datetime(
        "%Y-%m-%dT%H:%M:%S%.f%#z", time_unit="us", time_zone="UTC", strict=False
    )
    unparsed = texts.is_not_null() & (parsed.is_null() | ~spelled.str.contains(_ISO_TIME))
    fail.add_first(unparsed.arg_true().to_list(), name, _TIME_HINT)
    return parsed.alias(name)


def _time_column(values: list[Any], name: str, fail: _Failures) -> pl.Series:
    """Parse ISO 8601 text and aware datetimes as UTC microseconds; others fail."""
    return _start_time_column(values, name, fail)()


def _start_time_column(values: list[Any], name: str, fail: _Failures) -> Callable[[], pl.Series]:
    """Start :func:`_time_column`; calling the function returned gives the column.

    Text is parsed on Polars' threads meanwhile.
    """
    first = values[0] if values else None
    # One value on every row (no time given, or the default time): no parsing per row.
    if (first is None or isinstance(first, datetime)) and all(v is first for v in values):
        if first is None:
            return _always(pl.Series(name, [None] * len(values), _PL_TS))
        if first.utcoffset() is not None:
            stamp = pl.from_arrow(pa.array([first], type=_TS))
            assert isinstance(stamp, pl.Series)
            return _always(stamp.cast(_PL_TS).new_from_index(0, len(values)).alias(name))
    if set(map(type, values)) <= {str, type(None)}:
        try:
            texts = pl.Series(name, values, pl.String, strict=True)  # all text: checked above
        except ValueError:
            texts = _string_column(values, name, fail)  # a lone surrogate
        started = _start_parse(texts)
        return lambda: _parsed_times(texts, started, name, fail)
    return _always(_mixed_times(values, name, fail))


def _mixed_times(values: list[Any], name: str, fail: _Failures) -> pl.Series:
    """Times given as text and as datetimes in one column."""
    texts = _string_column([v if isinstance(v, str) else None for v in values], name, fail)
    parsed = _parse_times(texts, name, fail)
    stamps: list[datetime | None] = []
    for i, v in enumerate(values):
        if isinstance(v, datetime) and v.utcoffset() is not None:
            stamps.append(v)
            continue
        stamps.append(None)
        if v is not None and not isinstance(v, str):
            fail.add(i, name, "must have a time zone" if isinstance(v, datetime) else _TIME_HINT)
    objects = pl.from_arrow(pa.array(stamps, type=_TS))
    assert isinstance(objects, pl.Series)
    return parsed.fill_null(objects.cast(_PL_TS)).alias(name)


def _flatten(values: list[Any], name: str, fail: _Failures) -> tuple[list[int], list[Any]]:
    """Offsets and entries of a column of lists; a row that is not a list fails, as empty."""
    if not all(type(v) is list or type(v) is tuple for v in values):
        rows = []
        for row, value in enumerate(values):
            if not isinstance(value, list | tuple):
                fail.add(row, name, "must be a list")
                value = ()
            rows.append(value)
        values = rows
    return list(accumulate(map(len, values), initial=0)), list(chain.from_iterable(values))


def _owner(offsets: list[int], entry: int) -> int:
    """The row holding flattened entry ``entry``."""
    return bisect_right(offsets, entry) - 1


def _parents_column(values: list[Any], fail: _Failures) -> pl.Series:
    offsets, flat = _flatten(values, "parents", fail)
    try:
        ids = pa.array(flat, pa.large_string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        ids = pa.array(
            [x if isinstance(x, str) and text_problem(x) is None else None for x in flat],
            pa.large_string(),
        )
    if ids.null_count:
        bad = next(
            i for i, x in enumerate(flat) if not isinstance(x, str) or text_problem(x) is not None
        )
        fail.add(_owner(offsets, bad), "parents", "must be a list of ids (valid Unicode text)")
    series = pl.from_arrow(pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), ids))
    assert isinstance(series, pl.Series)
    return series.alias("parents").cast(POLARS_SCHEMA["parents"])


def _struct_lists(
    values: list[Any], name: str, keys: tuple[str, ...], fail: _Failures
) -> tuple[list[int], dict[str, list[Any]]]:
    """Flatten a column of lists of objects: offsets, and the entries' values by key."""
    offsets, entries = _flatten(values, name, fail)
    if not all(type(e) is dict for e in entries):
        entries = [_plain(e) for e in entries]
    allowed = frozenset(keys)
    bad = next(
        (i for i, e in enumerate(entries) if not (isinstance(e, Mapping) and e.keys() <= allowed)),
        None,
    )
    if bad is not None:
        fail.add(_owner(offsets, bad), name, f"each entry must be an object with keys {list(keys)}")
        entries = [e if isinstance(e, Mapping) and e.keys() <= allowed else {} for e in entries]
    return offsets, {key: [e.get(key) for e in entries] for key in keys}


def _list_of_structs(
    offsets: list[int], columns: list[pl.Series], dtype: pa.DataType, name: str
) -> pl.Series:
    table = pl.DataFrame(columns).to_arrow()
    struct = pa.StructArray.from_arrays(
        [table.column(f.name).combine_chunks().cast(f.type) for f in dtype], fields=list(dtype)
    )
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), struct)
    series = pl.from_arrow(lists)
    assert isinstance(series, pl.Series)
    return series.alias(name).cast(POLARS_SCHEMA[name])


def _entry_failures(
    offsets: list[int], inner: _Failures, name: str, fail: _Failures, bad: pl.Series | None = None
) -> None:
    """Note, at its owner row under field ``name``, the first failing entry of a flattened list."""
    if bad is not None:
        inner.add_first(bad.arg_true().to_list(), name, f"each entry of {name} needs its keys")
    if inner.row is not None:
        fail.add(_owner(offsets, inner.row), name, f"{inner.field}: {inner.message}")


_SOURCE_TEXT = pa.large_list(pa.struct([(name, pa.large_string()) for name in _SOURCE_KEYS[:3]]))
_SOURCE_TEXT_KEYS = frozenset(_SOURCE_KEYS[:3])


def _text_sources(values: list[Any]) -> pl.Series | None:
    """Sources converted in bulk, or ``None`` to check them one by one.

    Only lists of plain objects holding ``uri`` (and maybe ``kind`` and
    ``title``), without ``retrieved_at``, take this path: each key's texts
    become one column, or, when a value is not text, Arrow converts the
    lists as it converts text (it reads bytes as UTF-8). Any other shape, or
    a bad value, gives ``None``.
    """
    if not set(map(type, values)) <= {list}:
        return None
    entries = list(chain.from_iterable(values))
    if not set(map(type, entries)) <= {dict}:
        return None
    read = _uniform_values(entries, _SOURCE_TEXT_KEYS)
    if read is None:
        keys = frozenset().union(*entries)
        if not keys <= _SOURCE_TEXT_KEYS:
            return None
        read = {key: _values_of(entries, key) for key in keys}
    try:
        fields = [
            pl.Series(key, read.get(key, [None] * len(entries)), pl.String, strict=True)
            for key in _SOURCE_KEYS[:3]
        ]
    except (TypeError, ValueError, pl.exceptions.PolarsError):
        return _arrow_sources(values)
    if fields[0].null_count():
        return None  # a missing uri
    fields.append(pl.Series("retrieved_at", [], _PL_TS).extend_constant(None, len(entries)))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    structs = pl.DataFrame(fields).to_struct("sources").to_arrow()
    series = pl.from_arrow(pa.LargeListArray.from_arrays(pa.array(offsets), structs))
    assert isinstance(series, pl.Series)
    return series.alias("sources").cast(POLARS_SCHEMA["sources"])


def _arrow_sources(values: list[Any]) -> pl.Series | None:
    """Lists of objects of text converted by Arrow, or ``None`` if one does not convert."""
    try:
        lists = pa.array(values, _SOURCE_TEXT)
    except (pa.ArrowException, ValueError, TypeError):
        return None  # a value that is not text, or a lone surrogate
    if lists.flatten().field("uri").null_count:
        return None
    series = pl.from_arrow(lists)
    assert isinstance(series, pl.Series)
    retrieved = pl.element().struct.with_fields(pl.lit(None, _PL_TS).alias("retrieved_at"))
    return series.list.eval(retrieved).alias("sources").cast(POLARS_SCHEMA["sources"])


def _sources_column(values: list[Any], fail: _Failures) -> pl.Series:
    fast = _text_sources(values)
    if fast is not None:
        return fast
    offsets, flat = _struct_lists(values, "sources", _SOURCE_KEYS, fail)
    inner = _Failures()
    uri, kind, title = (_string_column(flat[k], k, inner) for k in ("uri", "kind", "title"))
    at = _time_column(flat["retrieved_at"], "retrieved_at", inner)
    _entry_failures(offsets, inner, "sources", fail, uri.is_null())
    return _list_of_structs(offsets, [uri, kind, title, at], _SOURCE, "sources")


def _lineage_column(values: list[Any], fail: _Failures) -> pl.Series:
    offsets, flat = _struct_lists(values, "lineage", _EDGE_KEYS, fail)
    inner = _Failures()
    columns = [_string_column(flat[k], k, inner) for k in _EDGE_KEYS]
    empty = pl.Series([False] * offsets[-1], dtype=pl.Boolean)
    for column in columns[:3]:
        empty = empty | column.is_null() | (column.str.len_bytes() == 0)
    _entry_failures(offsets, inner, "lineage", fail, empty)
    return _list_of_structs(offsets, columns, _EDGE, "lineage")


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
"""Encodes as :func:`~cognoxium.items.model.canonical_json` does, without its per-call setup."""


def _metadata_column(values: list[Any], fail: _Failures) -> pl.Series:
    flat = canonical_flat_column(values, "metadata")
    if flat is not None:
        return flat  # flat objects (the usual case): encoded by orjson, valid UTF-8
    if all(type(value) is dict for value in values) and all(
        type(key) is str for value in values for key in value
    ):
        try:
            # Plain objects with text keys (the usual case): one encoder for the column.
            return _string_column(canonical_json_list(values), "metadata", fail)
        except (TypeError, ValueError, RecursionError):
            pass  # worded value by value below
    encode = _CANONICAL.encode
    out: list[str | None] = []
    for row, value in enumerate(values):
        if type(value) is dict and not value:
            out.append("{}")  # the default, without the Mapping check
            continue
        if isinstance(value, Mapping) and all(type(key) is str for key in value):
            try:
                out.append(encode(value if type(value) is dict else dict(value)) if value else "{}")
                continue
            except (TypeError, ValueError):
                message = "must be a JSON object of JSON values (NaN and infinity are refused)"
            except RecursionError:
                message = f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
        else:
            message = "must be a JSON object"
        fail.add(row, "metadata", message)
        out.append(None)
    return _string_column(out, "metadata", fail)


_Payload = tuple[str, str | None, str | None, bytes | None, str | None, str | None, str | None]


def _payload_row(record: Mapping[str, Any]) -> _Payload:
    """The payload columns of one record; ValueError if the payload is not valid."""
    if "text" in record:
        if "payload" in record or not isinstance(record["text"], str):
            raise ValueError("text")
        return ("text", record["text"], None, None, None, None, None)
    if "payload" not in record:
        raise ValueError("text")  # no content
    payload = _plain(record["payload"])
    kind = payload.get("kind") if isinstance(payload, Mapping) else None
    if kind not in _PAYLOAD_KEYS or not set(payload) <= _PAYLOAD_KEYS[kind]:
        raise ValueError("payload")
    if kind == "text":
        if not isinstance(payload.get("text"), str):
            raise ValueError("payload.text")
        return ("text", payload["text"], None, None, None, None, None)
    if kind == "json":
        if "value" not in payload:
            raise ValueError("payload.value")
        return ("json", None, canonical_json(payload["value"]), None, None, None, None)
    if kind == "binary":
        data = payload.get("data")
        if isinstance(data, str):
            data = base64.b64decode(data, validate=True)
        if not isinstance(data, bytes | bytearray):
            raise ValueError("payload.data")
        return ("binary", None, None, bytes(data), None, None, None)
    uri, title, digest = payload.get("uri"), payload.get("title"), payload.get("digest")
    if not (isinstance(uri, str) and uri) or not all(
        v is None or isinstance(v, str) for v in (title, digest)
    ):
        raise ValueError("payload.uri")
    return ("reference", None, None, None, uri, title, digest)


def _constant(name: str, value: Any, dtype: pl.DataType | type[pl.DataType], n: int) -> pl.Series:
    """A column of ``n`` copies of ``value``, built without a query."""
    return pl.Series(name, [value], dtype).new_from_index(0, n)


def _payload_columns(
    records: list[Mapping[str, Any]], fields: dict[str, list[Any]], fail: _Failures
) -> list[pl.Series]:
    """The payload columns of the records, whose fields :func:`_record_shapes` read."""
    names = ("payload_kind", "text", "json", "binary", "ref_uri", "ref_title", "ref_digest")
    dtypes = (pl.String, pl.String, pl.String, pl.Binary, pl.String, pl.String, pl.String)
    texts = fields["text"] if "text" in fields else [None] * len(records)
    if "payload" not in fields and set(map(type, texts)) <= {str}:
        # Plain text records (chat messages): two columns to fill, no per-row dispatch.
        n = len(records)
        try:
            text = pl.Series("text", texts, pl.String, strict=True)  # all str: checked above
        except ValueError:
            text = _string_column(texts, "text", fail)  # a lone surrogate
        return [
            _constant("payload_kind", "text", pl.String, n),
            text,
            *(_constant(c, None, d, n) for c, d in zip(names[2:], dtypes[2:], strict=True)),
        ]
    rows: list[_Payload] = []
    empty: _Payload = ("text", "", None, None, None, None, None)
    for row, record in enumerate(records):
        try:
            rows.append(_payload_row(record))
        except (ValueError, TypeError, binascii.Error) as exc:
            fail.add(
                row,
                str(exc) if str(exc).startswith(("text", "payload")) else "payload",
                "not a valid payload",
            )
            rows.append(empty)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    return [
        pl.Series(name, list(values), pl.Binary)
        if name == "binary"
        else _string_column(list(values), name, fail, _PAYLOAD_FIELDS[name])
        for name, values in zip(names, columns, strict=True)
    ]


_PAYLOAD_FIELDS = {
    "payload_kind": "payload.kind",
    "text": "text",
    "json": "payload.value",
    "ref_uri": "payload.uri",
    "ref_title": "payload.title",
    "ref_digest": "payload.digest",
}
"""The record field behind each payload column, named in errors."""


def _record_shapes(
    records: list[Any], fail: _Failures
) -> tuple[list[Mapping[str, Any]], dict[str, list[Any]]]:
    """Check each record is an object with known keys and one content; others become ``{}``.

    Returns the records and, for every field that at least one of them
    gives, each record's value of it (the field's default where a record
    leaves it out).
    """
    if all(issubclass(kind, Mapping) for kind in set(map(type, records))):
        fields = _uniform_values(records, _RECORD_KEYS)
        if fields is not None:
            return records, fields
        given = frozenset().union(*records)
        if given <= _RECORD_KEYS:
            # All objects of known fields: no check per record here; a record
            # without content fails with the payload (:func:`_payload_row`).
            return records, _read_fields(records, given)
    shaped: list[Mapping[str, Any]] = []
    for row, record in enumerate(records):
        if type(record) is not dict and not isinstance(record, Mapping):
            fail.add(row, None, "a record must be a JSON object")
        elif not record.keys() <= _RECORD_KEYS:
            fail.add(row, min(set(record) - _RECORD_KEYS), "unknown field")
        elif "text" not in record and "payload" not in record:
            fail.add(row, "text", "no content")
        else:
            shaped.append(record)
            continue
        shaped.append({"text": ""})
    return shaped, _read_fields(shaped, frozenset().union(*shaped))


def _uniform_values(
    objects: list[Mapping[str, Any]], allowed: frozenset[str]
) -> dict[str, list[Any]] | None:
    """Each key's values, when every object has the keys of the first, all ``allowed``.

    ``None`` when the objects' keys differ or one is not allowed. Objects of
    as many keys as the first, each of which has all of the first's, have
    exactly those: counting keys is cheaper than gathering every object's.
    """
    first = objects[0] if objects else {}
    if not first.keys() <= allowed or set(map(len, objects)) != {len(first)}:
        return None
    try:
        return {key: list(map(operator.itemgetter(key), objects)) for key in first}
    except KeyError:
        return None  # an object of other keys


def _read_fields(records: list[Mapping[str, Any]], given: frozenset[str]) -> dict[str, list[Any]]:
    """Every record's value of each field in ``given``, its default where a record leaves it out.

    A missing ``id`` is a new UUID, a missing ``created_at`` the time now.
    """
    defaults = {name: _always(value) for name, (value, _) in _RECORD_COLUMNS.items()}
    defaults["id"] = lambda: str(uuid.uuid4())
    defaults["created_at"] = _always(datetime.now(UTC))
    return {name: _values_of(records, name, defaults.get(name, _none)) for name in given}


def _always(value: Any) -> Callable[[], Any]:
    return lambda: value


def _none() -> None:
    return None


def _values_of(
    objects: list[Mapping[str, Any]], key: str, default: Callable[[], Any] = _none
) -> list[Any]:
    """Every object's value of ``key``; ``default()`` where an object leaves it out."""
    try:
        return list(map(operator.itemgetter(key), objects))
    except KeyError:
        return [value[key] if key in value else default() for value in objects]


def _record_frame(
    records: list[Mapping[str, Any]],
    fields: dict[str, list[Any]],
    checks: _RowChecks,
    fail: _Failures,
) -> tuple[pl.DataFrame, InProcessQuery]:
    """Lay out checked record fields as columns; bad values are noted in ``fail``.

    ``fields`` holds every field that some record gives, read by
    :func:`_record_shapes`; a field that no record gives becomes its default
    column at once (:func:`_fill_defaults`), without a value per record.
    Also returns the query computing, in the background, the sha256 digest
    of every row's payload (:func:`_digest_expr`).

    Polars' threads work while Python lays out the nested fields: they hash
    the payloads, parse the times and run the ``checks`` of the flat fields.
    """
    payload = _payload_columns(records, fields, fail)
    digests = digests_in_background(payload)
    columns = [*payload]
    if "id" in fields:
        columns.append(_string_column(fields["id"], "id", fail))
    times = [_start_time_column(fields[n], n, fail) for n in _TIME_FIELDS if n in fields]
    for name, (_, column) in _RECORD_COLUMNS.items():
        if name in fields and name not in _NESTED_FIELDS:
            columns.append(column(fields[name], fail))
    checks.start(columns)
    for name in _NESTED_FIELDS:
        if name in fields:
            columns.append(_RECORD_COLUMNS[name][1](fields[name], fail))
    columns += [parsed() for parsed in times]
    df = _fill_defaults(pl.DataFrame(columns))
    return df.select(POLARS_SCHEMA.names()), digests


_TIME_FIELDS = ("created_at", "valid_from", "expires_at")
_NESTED_FIELDS = ("sources", "parents", "lineage", "metadata")
"""The record fields of lists and objects: the most Python work, laid out last."""


class _RowChecks:
    """The first failing row of each row check.

    The checks of the columns laid out first run on Polars' threads while
    the others are laid out.
    """

    def __init__(self, checks: list[tuple[pl.Expr, str, str]]) -> None:
        self.checks = checks
        self.early: list[int] = []
        self.query: InProcessQuery | None = None

    def start(self, columns: list[pl.Series]) -> None:
        """Start the checks that read only ``columns``."""
        names = {column.name for column in columns}
        self.early = [
            i for i, (mask, _, _) in enumerate(self.checks) if set(mask.meta.root_names()) <= names
        ]
        if self.early and len(columns[0]):
            masks = (self.checks[i][0].arg_true().first().alias(str(i)) for i in self.early)
            self.query = pl.LazyFrame(columns).select(masks).collect(background=True)

    def finish(self, df: pl.DataFrame, fail: _Failures) -> None:
        """Run the other checks on ``df`` and note the first failing row of all, in order."""
        if not df.height:
            return
        rows = dict.fromkeys(range(len(self.checks)))
        if self.query is not None:
            rows.update(zip(self.early, self.query.fetch_blocking().row(0), strict=True))
        early = set(self.early)
        late = [i for i in range(len(self.checks)) if i not in early]
        if late:
            masks = (self.checks[i][0].arg_true().first().alias(str(i)) for i in late)
            rows.update(zip(late, df.select(masks).row(0), strict=True))
        for (_, field, message), row in zip(self.checks, rows.values(), strict=True):
            if row is not None:
                fail.add(int(row), field, message)


def _strings(name: str) -> Callable[[list[Any], _Failures], pl.Series]:
    return lambda values, fail: _string_column(values, name, fail)


_RECORD_COLUMNS: dict[str, tuple[Any, Callable[[list[Any], _Failures], pl.Series]]] = {
    "role": (None, _strings("role")),
    "content_hash": (None, _strings("content_hash")),
    "sources": ((), _sources_column),
    "trust": (_DEFAULTS["trust"], _strings("trust")),
    "sensitivity": (_DEFAULTS["sensitivity"], _strings("sensitivity")),
    "retention": (_DEFAULTS["retention"], _strings("retention")),
    "priority": (0, lambda values, fail: _integer_column(values, "priority", fail)),
    "rank": (None, lambda values, fail: _float_column(values, "rank", fail)),
    "parents": ((), _parents_column),
    "lineage": ((), _lineage_column),
    "group_id": (None, _strings("group_id")),
    "metadata": ({}, _metadata_column),
}
"""Per record field (but ``id``, the times and the payload): the value a record
that leaves it out has, and the function that makes its column from every record's value."""


_VALID_DEFAULTS = frozenset(
    {"id", "created_at", "sources", "trust", "sensitivity", "retention", "priority", "rank"}
    | {"valid_from", "expires_at", "parents", "lineage", "group_id", "metadata"}
)
"""The record fields whose default column (:func:`_fill_defaults`) passes every check."""


def _record_checks(given: frozenset[str]) -> list[tuple[pl.Expr, str, str]]:
    """The row checks of records that can fail.

    A check reading only columns valid by construction is left out: default
    columns (fields that no record gives, in :data:`_VALID_DEFAULTS`) and
    ``payload_kind`` (one of the kinds :func:`_payload_columns` writes).
    """
    defaults = (_VALID_DEFAULTS - given) | {"payload_kind"}
    return [
        check
        for check in _value_checks() + _typed_checks()
        if not set(check[0].meta.root_names()) <= defaults
    ]


def _hash_failure(df: pl.DataFrame, digests: pl.Series, fail: _Failures) -> pl.Series:
    """Content hashes of the rows before the first failure; a mismatch with a given one fails.

    ``digests`` holds every row's :func:`_digest_expr`.
    """
    valid = df.head(df.height if fail.row is None else fail.row)
    computed = _hashes(valid, digests.head(valid.height))
    stated = valid.get_column("content_hash")
    mismatch = (stated.is_not_null() & (stated != computed)).arg_true()
    if mismatch.len():
        at = int(mismatch[0])
        fail.add(
            at,
            "content_hash",
            f"content_hash {stated[at]!r} does not match the payload (computed {computed[at]!r})",
        )
    return computed


def _record_error_at(record: Any, fail: _Failures, source: str | None, line: int) -> RecordError:
    """Word the error of a failing record as the item model does, or else from ``fail``."""
    if not isinstance(record, Mapping):
        return RecordError("a record must be a JSON object", source=source, line=line)
    if "text" not in record and "payload" not in record:
        return RecordError(
            "no content: give 'text' for plain text, or 'payload' = "
            '{"kind": "json"|"binary"|"reference", ...}',
            source=source,
            line=line,
            field="text",
        )
    try:
        ContextItem.model_validate(record)
    except ValidationError as exc:
        error = _record_error(exc, source, line=line)
        if error.field is None and fail.field is not None:
            # A whole-record rule of the model: name the field the columns found.
            return RecordError(error.message, source=source, line=line, field=fail.field)
        return error
    except (RecursionError, ValueError, TypeError):
        pass  # worded from the column checks below
    return RecordError(fail.message, source=source, line=line, field=fail.field)


def records_to_frame(
    records: Iterable[Mapping[str, Any]], *, source: str | None = None, first_line: int = 1
) -> pl.DataFrame:
    """Validate JSON records as items and lay them out as a frame; all or nothing.

    The records are checked column by column (payload kinds, canonical JSON,
    enumerations, times and content hashes in bulk), by the same rules as
    :func:`conform`; the first failing record is then validated as a
    :class:`~cognoxium.items.model.ContextItem` to word its error.

    Parameters
    ----------
    records
        Mappings in the JSONL record form (see :func:`item_to_record`).
        Times are ISO 8601 text with seconds and a UTC offset
        (``2024-01-01T00:00:00Z``) or timezone-aware datetimes.
    source
        Named in errors (a file path, for example).
    first_line
        The line number of the first record, for errors.

    Returns
    -------
    polars.DataFrame
        One row per record, in order, with :data:`POLARS_SCHEMA`.

    Raises
    ------
    RecordError
        At the first invalid record, naming its line and field. Nothing is returned.

    Examples
    --------
    >>> records_to_frame([{"id": "a", "role": "user", "text": "hi",
    ...                    "created_at": "2024-01-01T00:00:00Z"}]).select("id", "text").row(0)
    ('a', 'hi')
    """
    rows = list(records)
    fail = _Failures()
    shaped, fields = _record_shapes(rows, fail)
    checks = _RowChecks(_record_checks(frozenset(fields)))
    df, digests = _record_frame(shaped, fields, checks, fail)
    checks.finish(df, fail)
    for column, field in _DEPTH_FIELDS.items():
        row = _too_deep(df, column)
        if row is not None:
            fail.add(row, field, _DEPTH_MESSAGE)
    hashes = _hash_failure(df, digests.fetch_blocking().to_series(), fail)
    if fail.row is not None:
        raise _record_error_at(rows[fail.row], fail, source, first_line + fail.row)
    _check_unique_ids(df, source, first_line)
    return df.with_columns(hashes).cast(dict(POLARS_SCHEMA.items()))


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
    >>> from cognoxium.items.schema import conform
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
