"""The JSON records of context items, and records validated and laid out as frames.

A record is an item's JSON form (:func:`item_to_record`): its field names,
with ``text`` for a Text payload. :func:`records_to_frame` validates records
column by column, by the rules of
:func:`~cognoxium.items.validation.conform`, and lays them out as rows of
:data:`~cognoxium.items.schema.POLARS_SCHEMA`; Polars' threads hash the
payloads, parse the times and run the checks while Python lays out the
nested fields. The first failing record is validated as a
:class:`~cognoxium.items.model.ContextItem` to word its error.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import polars as pl
from pydantic import ValidationError

from cognoxium.exceptions import RecordError
from cognoxium.items._record_columns import (
    Failures,
    always,
    float_column,
    integer_column,
    lineage_column,
    metadata_column,
    parents_column,
    plain_value,
    sources_column,
    start_time_column,
    string_column,
    uniform_values,
    values_of,
)
from cognoxium.items.hashing import digests_in_background, row_content_hashes
from cognoxium.items.model import UNDATED, ContextItem, canonical_json
from cognoxium.items.schema import DEFAULTS, POLARS_SCHEMA
from cognoxium.items.validation import (
    DEPTH_MESSAGE,
    check_unique_ids,
    fill_defaults,
    fill_null_defaults,
    record_error,
    too_deep,
    typed_checks,
    value_checks,
)

if TYPE_CHECKING:
    from polars.lazyframe.in_process import InProcessQuery

__all__ = ["item_to_record", "records_to_frame"]


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


_DEPTH_FIELDS = {"metadata": "metadata", "json": "payload.value"}
"""The JSON text columns whose nesting is limited, and the record field of each."""

_RECORD_KEYS = frozenset(ContextItem.model_fields) | {"text", "content_hash"}

_PAYLOAD_KEYS = {
    "text": frozenset({"kind", "text"}),
    "json": frozenset({"kind", "value"}),
    "binary": frozenset({"kind", "data"}),
    "reference": frozenset({"kind", "uri", "title", "digest"}),
}

_Payload = tuple[str, str | None, str | None, bytes | None, str | None, str | None, str | None]


def _payload_row(record: Mapping[str, Any]) -> _Payload:
    """The payload columns of one record; ValueError if the payload is not valid."""
    if "text" in record:
        if "payload" in record or not isinstance(record["text"], str):
            raise ValueError("text")
        return ("text", record["text"], None, None, None, None, None)
    if "payload" not in record:
        raise ValueError("text")  # no content
    payload = plain_value(record["payload"])
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
    records: list[Mapping[str, Any]], fields: dict[str, list[Any]], fail: Failures
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
            text = string_column(texts, "text", fail)  # a lone surrogate
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
        else string_column(list(values), name, fail, _PAYLOAD_FIELDS[name])
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
    records: list[Any], fail: Failures
) -> tuple[list[Mapping[str, Any]], dict[str, list[Any]]]:
    """Check each record is an object with known keys and one content; others become ``{}``.

    Returns the records and, for every field that at least one of them
    gives, each record's value of it (the field's default where a record
    leaves it out).
    """
    if all(issubclass(kind, Mapping) for kind in set(map(type, records))):
        fields = uniform_values(records, _RECORD_KEYS)
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


def _read_fields(records: list[Mapping[str, Any]], given: frozenset[str]) -> dict[str, list[Any]]:
    """Every record's value of each field in ``given``, its default where a record leaves it out.

    A missing ``id`` is a new UUID, a missing ``created_at`` :data:`~cognoxium.items.model.UNDATED`.
    """
    defaults = {name: always(value) for name, (value, _) in _RECORD_COLUMNS.items()}
    defaults["id"] = lambda: str(uuid.uuid4())
    defaults["created_at"] = always(UNDATED)
    return {name: values_of(records, name, defaults.get(name, always(None))) for name in given}


def _record_frame(
    records: list[Mapping[str, Any]],
    fields: dict[str, list[Any]],
    checks: _RowChecks,
    fail: Failures,
) -> tuple[pl.DataFrame, InProcessQuery]:
    """Lay out checked record fields as columns; bad values are noted in ``fail``.

    ``fields`` holds every field that some record gives, read by
    :func:`_record_shapes`; a field that no record gives becomes its default
    column at once (:func:`fill_defaults`), without a value per record, and
    a null in a field with a default becomes that default
    (:func:`fill_null_defaults`).
    Also returns the query computing, in the background, the sha256 digest
    of every row's payload (:func:`~cognoxium.items.hashing.digests_in_background`).

    Polars' threads work while Python lays out the nested fields: they hash
    the payloads, parse the times and run the ``checks`` of the flat fields.
    """
    payload = _payload_columns(records, fields, fail)
    digests = digests_in_background(payload)
    columns = [*payload]
    if "id" in fields:
        columns.append(string_column(fields["id"], "id", fail))
    times = [start_time_column(fields[n], n, fail) for n in _TIME_FIELDS if n in fields]
    for name, (_, column) in _RECORD_COLUMNS.items():
        if name in fields and name not in _NESTED_FIELDS:
            columns.append(column(fields[name], fail))
    checks.start(columns)
    for name in _NESTED_FIELDS:
        if name in fields:
            columns.append(_RECORD_COLUMNS[name][1](fields[name], fail))
    columns += [parsed() for parsed in times]
    df = fill_defaults(pl.DataFrame(columns))
    # A null (JSON null) in a field with a default is that default, as the key left out.
    df = df.with_columns(fill_null_defaults(fields))
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

    def finish(self, df: pl.DataFrame, fail: Failures) -> None:
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


def _strings(name: str) -> Callable[[list[Any], Failures], pl.Series]:
    return lambda values, fail: string_column(values, name, fail)


_RECORD_COLUMNS: dict[str, tuple[Any, Callable[[list[Any], Failures], pl.Series]]] = {
    "role": (None, _strings("role")),
    "content_hash": (None, _strings("content_hash")),
    "sources": ((), sources_column),
    "trust": (DEFAULTS["trust"], _strings("trust")),
    "sensitivity": (DEFAULTS["sensitivity"], _strings("sensitivity")),
    "retention": (DEFAULTS["retention"], _strings("retention")),
    "priority": (0, lambda values, fail: integer_column(values, "priority", fail)),
    "rank": (None, lambda values, fail: float_column(values, "rank", fail)),
    "parents": ((), parents_column),
    "lineage": ((), lineage_column),
    "group_id": (None, _strings("group_id")),
    "metadata": ({}, metadata_column),
}
"""Per record field (but ``id``, the times and the payload): the value a record
that leaves it out has, and the function that makes its column from every record's value."""

_VALID_DEFAULTS = frozenset(
    {"id", "created_at", "sources", "trust", "sensitivity", "retention", "priority", "rank"}
    | {"valid_from", "expires_at", "parents", "lineage", "group_id", "metadata"}
)
"""The record fields whose default column (:func:`fill_defaults`) passes every check."""


def _record_checks(given: frozenset[str]) -> list[tuple[pl.Expr, str, str]]:
    """The row checks of records that can fail.

    A check reading only columns valid by construction is left out: default
    columns (fields that no record gives, in :data:`_VALID_DEFAULTS`) and
    ``payload_kind`` (one of the kinds :func:`_payload_columns` writes).
    """
    defaults = (_VALID_DEFAULTS - given) | {"payload_kind"}
    return [
        check
        for check in value_checks() + typed_checks()
        if not set(check[0].meta.root_names()) <= defaults
    ]


def _hash_failure(df: pl.DataFrame, digests: pl.Series, fail: Failures) -> pl.Series:
    """Content hashes of the rows before the first failure; a mismatch with a given one fails.

    ``digests`` holds every row's digest
    (:func:`~cognoxium.items.hashing.digests_in_background`).
    """
    valid = df.head(df.height if fail.row is None else fail.row)
    computed = row_content_hashes(valid, digests.head(valid.height))
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


_CHAT_DATA = {
    "messages": (
        'a chat conversation, not an item: read a file of {"conversation_id", "messages"} '
        "lines with cognoxium.formats.openai.read_openai_conversations, which makes an item "
        "of each message (cognoxium pack reads it with --conversations)"
    ),
    "content": (
        "a chat message, not an item (an item gives 'text'): read a file of OpenAI chat "
        "messages with cognoxium.formats.openai.read_openai_jsonl"
    ),
}
"""Fields of chat data given where an item is expected, and what to read such data with."""


def _record_error_at(
    record: Any, fail: Failures, source: str | None, line: int | None, row: int | None
) -> RecordError:
    """Word the error of a failing record as the item model does, or else from ``fail``.

    The record is named by its 1-based ``line`` in a file, or else its 0-based ``row``.
    """

    def at(message: str, field: str | None = None) -> RecordError:
        return RecordError(message, source=source, line=line, row=row, field=field)

    if not isinstance(record, Mapping):
        return at("a record must be a JSON object")
    if "text" not in record and "payload" not in record:
        for field, hint in _CHAT_DATA.items():
            if field in record:
                return at(hint, field)
        return at(
            "no content: give 'text' for plain text, or 'payload' = "
            '{"kind": "json"|"binary"|"reference", ...}',
            "text",
        )
    try:
        ContextItem.model_validate(record)
    except ValidationError as exc:
        error = record_error(exc, source, line=line, row=row)
        if error.field is None and fail.field is not None:
            # A whole-record rule of the model: name the field the columns found.
            return at(error.message, fail.field)
        if "payload" not in record and (error.field or "").startswith("payload"):
            return at(error.message, "text")  # the model's payload is the record's text
        return error
    except (RecursionError, ValueError, TypeError):
        pass  # worded from the column checks below
    return at(fail.message, fail.field)


def records_to_frame(
    records: Iterable[Mapping[str, Any]],
    *,
    source: str | None = None,
    first_line: int | None = None,
) -> pl.DataFrame:
    """Validate JSON records as items and lay them out as a frame; all or nothing.

    The records are checked column by column (payload kinds, canonical JSON,
    enumerations, times and content hashes in bulk), by the same rules as
    :func:`~cognoxium.items.validation.conform`; the first failing record is then validated as a
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
        The line number of the first record in its file: errors name lines
        from it. ``None`` (records held in memory, the default): errors name
        0-based rows, as indexes of ``records`` and as a table's errors do.

    Returns
    -------
    polars.DataFrame
        One row per record, in order, with :data:`POLARS_SCHEMA`.

    Raises
    ------
    RecordError
        At the first invalid record, naming its line (or row) and field.
        Nothing is returned.

    Examples
    --------
    >>> records_to_frame([{"id": "a", "role": "user", "text": "hi",
    ...                    "created_at": "2024-01-01T00:00:00Z"}]).select("id", "text").row(0)
    ('a', 'hi')
    """
    rows = list(records)
    fail = Failures()
    shaped, fields = _record_shapes(rows, fail)
    checks = _RowChecks(_record_checks(frozenset(fields)))
    df, digests = _record_frame(shaped, fields, checks, fail)
    checks.finish(df, fail)
    for column, field in _DEPTH_FIELDS.items():
        row = too_deep(df, column)
        if row is not None:
            fail.add(row, field, DEPTH_MESSAGE)
    hashes = _hash_failure(df, digests.fetch_blocking().to_series(), fail)
    if fail.row is not None:
        line = None if first_line is None else first_line + fail.row
        row = fail.row if first_line is None else None
        raise _record_error_at(rows[fail.row], fail, source, line, row)
    check_unique_ids(df, source, first_line)
    return df.with_columns(hashes).cast(dict(POLARS_SCHEMA.items()))
