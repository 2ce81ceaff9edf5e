"""Typed columns built from the values of JSON records, each bad value noted, not raised.

Each builder takes every record's value of one field (``n`` values) and
gives an ``n``-row Polars column of the item schema's type; a value that
does not fit becomes null and is noted in a :class:`Failures`, which keeps
the first failing row, so :func:`~cognoxium.items.records.records_to_frame`
can check all columns before it words one error. A column of plain values
of the right type is converted in one call; only a failing column is read
value by value.
"""

from __future__ import annotations

import json
import operator
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from itertools import accumulate, chain
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa
from pydantic import BaseModel

from cognoxium.items._checks import MAX_INT, MAX_JSON_DEPTH, MIN_INT, text_problem
from cognoxium.items._json import canonical_json_list, canonical_object_column
from cognoxium.items.schema import (
    EDGE_STRUCT,
    POLARS_SCHEMA,
    POLARS_TIMESTAMP,
    SOURCE_STRUCT,
    TIMESTAMP,
)

if TYPE_CHECKING:
    from polars.lazyframe.in_process import InProcessQuery

__all__ = [
    "Failures",
    "always",
    "float_column",
    "integer_column",
    "lineage_column",
    "metadata_column",
    "parents_column",
    "plain_value",
    "sources_column",
    "start_time_column",
    "string_column",
    "uniform_values",
    "values_of",
]


_SOURCE_KEYS = tuple(SOURCE_STRUCT.names)

_EDGE_KEYS = tuple(EDGE_STRUCT.names)

_ISO_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?([Zz]|[+-]\d{2}:?\d{2})$"

_TIME_HINT = (
    "must be an ISO 8601 time with seconds (at most 6 fractional digits: microseconds) and a "
    "UTC offset, such as 2024-01-01T00:00:00Z"
)


class Failures:
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


def plain_value(value: Any) -> Any:
    """A pydantic model given in place of its dict, as that dict."""
    return value.model_dump() if isinstance(value, BaseModel) else value


def string_column(
    values: list[Any], name: str, fail: Failures, field: str | None = None
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


def integer_column(values: list[Any], name: str, fail: Failures) -> pl.Series:
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


def float_column(values: list[Any], name: str, fail: Failures) -> pl.Series:
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


def _parse_times(texts: pl.Series, name: str, fail: Failures) -> pl.Series:
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
    texts: pl.Series, started: InProcessQuery, name: str, fail: Failures
) -> pl.Series:
    """The times of :func:`_start_parse`, or, when one is spelled otherwise, of any ISO 8601."""
    usual, naive = started.fetch_blocking()
    if usual.all():
        parsed = naive.cast(
            POLARS_TIMESTAMP
        )  # the epoch values are UTC already: a cast, no conversion
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


def _time_column(values: list[Any], name: str, fail: Failures) -> pl.Series:
    """Parse ISO 8601 text and aware datetimes as UTC microseconds; others fail."""
    return start_time_column(values, name, fail)()


def start_time_column(values: list[Any], name: str, fail: Failures) -> Callable[[], pl.Series]:
    """Start :func:`_time_column`; calling the function returned gives the column.

    Text is parsed on Polars' threads meanwhile.
    """
    first = values[0] if values else None
    # One value on every row (no time given, or the default time): no parsing per row.
    if (first is None or isinstance(first, datetime)) and all(v is first for v in values):
        if first is None:
            return always(pl.Series(name, [None] * len(values), POLARS_TIMESTAMP))
        if first.utcoffset() is not None:
            stamp = pl.from_arrow(pa.array([first], type=TIMESTAMP))
            assert isinstance(stamp, pl.Series)
            return always(stamp.cast(POLARS_TIMESTAMP).new_from_index(0, len(values)).alias(name))
    if set(map(type, values)) <= {str, type(None)}:
        try:
            texts = pl.Series(name, values, pl.String, strict=True)  # all text: checked above
        except ValueError:
            texts = string_column(values, name, fail)  # a lone surrogate
        started = _start_parse(texts)
        return lambda: _parsed_times(texts, started, name, fail)
    return always(_mixed_times(values, name, fail))


def _mixed_times(values: list[Any], name: str, fail: Failures) -> pl.Series:
    """Times given as text and as datetimes in one column."""
    texts = string_column([v if isinstance(v, str) else None for v in values], name, fail)
    parsed = _parse_times(texts, name, fail)
    stamps: list[datetime | None] = []
    for i, v in enumerate(values):
        if isinstance(v, datetime) and v.utcoffset() is not None:
            stamps.append(v)
            continue
        stamps.append(None)
        if v is not None and not isinstance(v, str):
            fail.add(i, name, "must have a time zone" if isinstance(v, datetime) else _TIME_HINT)
    objects = pl.from_arrow(pa.array(stamps, type=TIMESTAMP))
    assert isinstance(objects, pl.Series)
    return parsed.fill_null(objects.cast(POLARS_TIMESTAMP)).alias(name)


def _flatten(values: list[Any], name: str, fail: Failures) -> tuple[list[int], list[Any]]:
    """Offsets and entries of a column of lists; a row that is not a list fails, as empty.

    A null (``None``) is an empty list: the default of the list fields.
    """
    if not all(type(v) is list or type(v) is tuple for v in values):
        rows = []
        for row, value in enumerate(values):
            if value is None:
                value = ()
            elif not isinstance(value, list | tuple):
                fail.add(row, name, "must be a list")
                value = ()
            rows.append(value)
        values = rows
    return list(accumulate(map(len, values), initial=0)), list(chain.from_iterable(values))


def _owner(offsets: list[int], entry: int) -> int:
    """The row holding flattened entry ``entry``."""
    return bisect_right(offsets, entry) - 1


def parents_column(values: list[Any], fail: Failures) -> pl.Series:
    """The ``parents`` column: lists of ids; a non-list or an entry that is not text fails."""
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
    values: list[Any], name: str, keys: tuple[str, ...], fail: Failures
) -> tuple[list[int], dict[str, list[Any]]]:
    """Flatten a column of lists of objects: offsets, and the entries' values by key."""
    offsets, entries = _flatten(values, name, fail)
    if not all(type(e) is dict for e in entries):
        entries = [plain_value(e) for e in entries]
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
    offsets: list[int], inner: Failures, name: str, fail: Failures, bad: pl.Series | None = None
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
    read = uniform_values(entries, _SOURCE_TEXT_KEYS)
    if read is None:
        keys = frozenset().union(*entries)
        if not keys <= _SOURCE_TEXT_KEYS:
            return None
        read = {key: values_of(entries, key) for key in keys}
    try:
        fields = [
            pl.Series(key, read.get(key, [None] * len(entries)), pl.String, strict=True)
            for key in _SOURCE_KEYS[:3]
        ]
    except (TypeError, ValueError, pl.exceptions.PolarsError):
        return _arrow_sources(values)
    if fields[0].null_count():
        return None  # a missing uri
    fields.append(
        pl.Series("retrieved_at", [], POLARS_TIMESTAMP).extend_constant(None, len(entries))
    )
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
    retrieved = pl.element().struct.with_fields(
        pl.lit(None, POLARS_TIMESTAMP).alias("retrieved_at")
    )
    return series.list.eval(retrieved).alias("sources").cast(POLARS_SCHEMA["sources"])


def sources_column(values: list[Any], fail: Failures) -> pl.Series:
    """The ``sources`` column: lists of source objects, each with a ``uri``; a bad entry fails."""
    fast = _text_sources(values)
    if fast is not None:
        return fast
    offsets, flat = _struct_lists(values, "sources", _SOURCE_KEYS, fail)
    inner = Failures()
    uri, kind, title = (string_column(flat[k], k, inner) for k in ("uri", "kind", "title"))
    at = _time_column(flat["retrieved_at"], "retrieved_at", inner)
    _entry_failures(offsets, inner, "sources", fail, uri.is_null())
    return _list_of_structs(offsets, [uri, kind, title, at], SOURCE_STRUCT, "sources")


def lineage_column(values: list[Any], fail: Failures) -> pl.Series:
    """The ``lineage`` column: lists of edges, each with a parent id, hash and operation."""
    offsets, flat = _struct_lists(values, "lineage", _EDGE_KEYS, fail)
    inner = Failures()
    columns = [string_column(flat[k], k, inner) for k in _EDGE_KEYS]
    empty = pl.Series([False] * offsets[-1], dtype=pl.Boolean)
    for column in columns[:3]:
        empty = empty | column.is_null() | (column.str.len_bytes() == 0)
    _entry_failures(offsets, inner, "lineage", fail, empty)
    return _list_of_structs(offsets, columns, EDGE_STRUCT, "lineage")


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
"""Encodes as :func:`~cognoxium.items.model.canonical_json` does, without its per-call setup."""


def metadata_column(values: list[Any], fail: Failures) -> pl.Series:
    """The ``metadata`` column: each object as canonical JSON text; a non-object fails.

    A null (``None``) stays null, for the default to fill; the objects are
    encoded together as when there is none.
    """
    if None in values:
        given = [row for row, value in enumerate(values) if value is not None]
        inner = Failures()
        encoded = _metadata_objects([values[row] for row in given], inner)
        if inner.row is not None:
            fail.add(given[inner.row], inner.field, inner.message)
        nulls = pl.Series("metadata", [None] * len(values), pl.String)
        return nulls.scatter(given, encoded) if given else nulls
    return _metadata_objects(values, fail)


def _metadata_objects(values: list[Any], fail: Failures) -> pl.Series:
    """:func:`metadata_column` of values none of which is ``None``."""
    exact = canonical_object_column(values, "metadata")
    if exact is not None:
        return exact  # objects without floats (the usual case): encoded by orjson, valid UTF-8
    if all(type(value) is dict for value in values) and all(
        type(key) is str for value in values for key in value
    ):
        try:
            # Plain objects with text keys (the usual case): one encoder for the column.
            return string_column(canonical_json_list(values), "metadata", fail)
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
    return string_column(out, "metadata", fail)


def uniform_values(
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


def always(value: Any) -> Callable[[], Any]:
    """A function of no arguments that returns ``value``."""
    return lambda: value


def _none() -> None:
    return None


def values_of(
    objects: list[Mapping[str, Any]], key: str, default: Callable[[], Any] = _none
) -> list[Any]:
    """Every object's value of ``key``; ``default()`` where an object leaves it out."""
    try:
        return list(map(operator.itemgetter(key), objects))
    except KeyError:
        return [value[key] if key in value else default() for value in objects]
