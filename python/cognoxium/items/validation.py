"""Tables of context items checked and cast to the item schema.

:func:`conform` brings an Arrow table or a Polars frame to
:data:`~cognoxium.items.schema.POLARS_SCHEMA`: missing columns get their
defaults, the payload kind is inferred, every value is checked, times are
parsed, JSON is made canonical and content hashes are computed and checked.
:func:`check_items` checks rows a query computed by the same rules, and
:func:`row_checks` gives the checks that read only some columns (for scans).
The rules themselves (:func:`value_checks`, :func:`typed_checks`,
:func:`check_unique_ids`) also check the records of
:mod:`~cognoxium.items.records`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

import polars as pl
import pyarrow as pa
from pydantic import ValidationError

from cognoxium.exceptions import RecordError, SchemaError
from cognoxium.items._checks import (
    CONTROL_PATTERN,
    MAX_ID_LENGTH,
    MAX_JSON_DEPTH,
    NAIVE_TIME_MESSAGE,
    OFFSET_PATTERN,
    TIME_RANGE_MESSAGE,
    json_text_depth,
)
from cognoxium.items._json import canonical_text_list
from cognoxium.items.hashing import checked_content_hashes, row_content_hashes
from cognoxium.items.model import UNDATED, canonical_json
from cognoxium.items.schema import (
    COLUMNS,
    DEFAULTS,
    ENUM_VALUES,
    POLARS_SCHEMA,
    POLARS_TIMESTAMP,
    require_item_columns,
)

__all__ = [
    "DEFAULTED_COLUMNS",
    "DEPTH_MESSAGE",
    "canonical_json_columns",
    "check_items",
    "check_unique_ids",
    "complete_valid_columns",
    "conform",
    "fill_defaults",
    "fill_null_defaults",
    "naive_time_checks",
    "record_error",
    "row_checks",
    "too_deep",
    "typed_checks",
    "value_checks",
]


_REQUIRED = ("id",)
"""The columns refused when null that :func:`value_checks` checks (``role`` is an
enumeration, the payload is checked by kind)."""

DEFAULTED_COLUMNS: tuple[str, ...] = (
    "sources",
    "trust",
    "sensitivity",
    "retention",
    "priority",
    "created_at",
    "parents",
    "lineage",
    "metadata",
)
"""The item columns with a default other than null: a null in one of them reads as
that default, exactly as the column or key left out (:func:`fill_null_defaults`)."""


def _default_value(name: str) -> pl.Expr:
    """The default of defaulted column ``name`` as a literal of its :data:`POLARS_SCHEMA` type."""
    dtype = POLARS_SCHEMA[name]
    if name == "created_at":
        return pl.lit(UNDATED, dtype=POLARS_TIMESTAMP)
    if name in ("sources", "parents", "lineage"):
        return pl.lit([], dtype=dtype)
    return pl.lit(DEFAULTS[name], dtype=dtype)


_PAYLOAD_COLUMN = {"text": "text", "json": "json", "binary": "binary", "reference": "ref_uri"}

DEPTH_MESSAGE = f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
"""The error message of JSON text nested deeper than :data:`~cognoxium.items.MAX_JSON_DEPTH`."""


def record_error(
    exc: ValidationError, source: str | None, *, line: int | None = None, row: int | None = None
) -> RecordError:
    """The first error of an item's validation, as a :class:`~cognoxium.exceptions.RecordError`.

    Parameters
    ----------
    exc
        The error of validating one record or row as a
        :class:`~cognoxium.items.model.ContextItem`.
    source
        Named in the error (a file path, for example).
    line, row
        The record's 1-based line, or the row's 0-based index, if known.

    Returns
    -------
    RecordError
        The message of the first error, its field the dotted location.
    """
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "enum" and field in ENUM_VALUES:
        message = enum_problem(field)
    return RecordError(message, source=source, line=line, row=row, field=field)


def check_unique_ids(df: pl.DataFrame, source: str | None, first_line: int | None) -> None:
    """Raise at the first row whose id an earlier row already has.

    Parameters
    ----------
    df
        ``n`` rows with an ``id`` column.
    source
        Named in the error.
    first_line
        The line number of the first row (records of a file): the error
        names lines; ``None`` (a table): it names 0-based rows.

    Raises
    ------
    RecordError
        Naming the repeated id, the row or line where it repeats and the
        one where it was first, field ``id``.
    """
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
            raise RecordError(DEPTH_MESSAGE, source=source, row=row, field=column) from None
        except ValueError as exc:
            row = int(values.eq(text).arg_true()[0])
            raise RecordError(
                f"invalid JSON ({exc})", source=source, row=row, field=column
            ) from None
    if flags is not None:
        return values.replace(mapping)
    return values.replace_strict(mapping, default=None, return_dtype=pl.String)


def too_deep(df: pl.DataFrame, column: str) -> int | None:
    """The first row whose JSON text in ``column`` nests deeper than the limit, or ``None``.

    Only rows with more opening brackets than the limit are scanned; when
    no text is longer than the limit (in bytes), none has that many.

    Parameters
    ----------
    df
        Rows with ``column`` as JSON text.
    column
        The column to read.

    Returns
    -------
    int or None
        The 0-based row, for an error worded :data:`DEPTH_MESSAGE`.
    """
    texts = df.get_column(column)
    if not (texts.str.len_bytes() > MAX_JSON_DEPTH).any():
        return None
    brackets = texts.str.count_matches(r"[\[{]") > MAX_JSON_DEPTH
    for row in brackets.arg_true().to_list():
        if json_text_depth(texts[row])[0] > MAX_JSON_DEPTH:
            return int(row)
    return None


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


def fill_defaults(df: pl.DataFrame) -> pl.DataFrame:
    """Add every missing item column with its default (random ids, ``created_at`` the epoch).

    Parameters
    ----------
    df
        ``n`` rows with a subset of the item columns.

    Returns
    -------
    polars.DataFrame
        ``df`` with every item column: the given ones as they are, then the
        missing ones with their :data:`~cognoxium.items.schema.DEFAULTS`,
        empty lists, null, a new UUID per row (``id``) or
        :data:`~cognoxium.items.model.UNDATED`, 1970-01-01T00:00:00Z (``created_at``).
    """
    fill: list[pl.Series | pl.Expr] = []
    for name, dtype in POLARS_SCHEMA.items():
        if name in df.columns:
            continue
        if name == "id":
            fill.append(pl.Series(name, [str(uuid.uuid4()) for _ in range(df.height)], pl.String))
        elif name in DEFAULTED_COLUMNS:
            fill.append(_default_value(name).alias(name))
        else:
            fill.append(pl.lit(None, dtype=dtype).alias(name))
    return df.with_columns(fill)


def fill_null_defaults(
    columns: Iterable[str], values: Mapping[str, pl.Expr] | None = None
) -> list[pl.Expr]:
    """Expressions reading a null in each defaulted column of ``columns`` as its default.

    A null in a column of :data:`DEFAULTED_COLUMNS` means what leaving the
    column (or a record's key) out means: ``created_at``
    :data:`~cognoxium.items.model.UNDATED`, empty ``sources``, ``parents``
    and ``lineage``, and the :data:`~cognoxium.items.schema.DEFAULTS` of the
    others, row by row. The other columns are left as they are (their
    default is null, or, as ``id``, ``role`` and the payload, they are
    required).

    Parameters
    ----------
    columns
        Column names; those of :data:`DEFAULTED_COLUMNS` must hold their
        :data:`POLARS_SCHEMA` types (enumerations may also be text).
    values
        The expression to fill for a column (a cast of it, say) in place of
        the column itself; ``None``: the columns as they are.

    Returns
    -------
    list of polars.Expr
        One ``fill_null`` per defaulted column of ``columns``, in
        :data:`DEFAULTED_COLUMNS` order, named as the column.

    Examples
    --------
    >>> df = pl.DataFrame({"priority": [3, None], "rank": [None, 0.5]})
    >>> df.with_columns(fill_null_defaults(df.columns)).rows()
    [(3, None), (0, 0.5)]
    """
    have, given = set(columns), values or {}
    return [
        given.get(name, pl.col(name)).fill_null(_default_value(name)).alias(name)
        for name in DEFAULTED_COLUMNS
        if name in have
    ]


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


def value_checks() -> list[tuple[pl.Expr, str, str]]:
    """Row checks of every input before the cast: (bad-row mask, column, message), in order.

    Enumerations are read as text, so the same checks serve records and tables.

    Returns
    -------
    list of (polars.Expr, str, str)
        ``(bad-row mask, field, message)``: enumeration values outside their
        :data:`~cognoxium.items.schema.ENUM_VALUES` (a null only where the
        column has no default: ``role``, ``payload_kind``), then nulls in
        ``id``.
    """
    checks = [
        (_outside(pl.col(name).cast(pl.String), values, name), name, enum_problem(name))
        for name, values in ENUM_VALUES.items()
    ]
    checks += [(pl.col(name).is_null(), name, "must not be null") for name in _REQUIRED]
    return checks


def _outside(text: pl.Expr, values: tuple[str, ...], name: str) -> pl.Expr:
    """Whether each value of enumeration ``name`` (as text) is not one of ``values``.

    A null is outside unless the column has a default (:data:`DEFAULTED_COLUMNS`).
    """
    if name in DEFAULTED_COLUMNS:
        return text.is_not_null() & ~text.is_in(values)
    return text.is_null() | ~text.is_in(values)


def enum_problem(name: str) -> str:
    """Why a value (or a null, where the column has no default) is refused as enumeration ``name``.

    The one wording of records, tables and scans: a scan reads an
    enumeration with a lenient cast, so a value outside it and a null are
    one fault there.

    Examples
    --------
    >>> enum_problem("retention")
    "must be one of ['required', 'preferred', 'optional']"
    """
    return f"must be one of {list(ENUM_VALUES[name])}"


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


def typed_checks() -> list[tuple[pl.Expr, str, str]]:
    """Row checks of every input once times, numbers and lists have their types.

    Returns
    -------
    list of (polars.Expr, str, str)
        ``(bad-row mask, field, message)``: a rank that is not finite, an
        expiry before creation, times outside the years 1 to 9999, and ids
        (``id``, ``group_id``, parents, lineage parent ids) that are blank,
        too long or hold control characters.
    """
    checks = [
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
    checks += [(_out_of_range(pl.col(name)), name, TIME_RANGE_MESSAGE) for name in TIME_COLUMNS]
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
    values, payloads = value_checks(), _payload_checks()
    _raise_first(df, values, source)
    check_unique_ids(df, source, None)
    _raise_first(df, payloads, source)


TIME_COLUMNS = ("created_at", "valid_from", "expires_at")
"""The item columns of UTC times."""


def check_column_types(schema: pl.Schema, where: str) -> None:
    """Refuse time columns of numbers, and number columns of text or booleans.

    Unix seconds (``1767000000``) cast to a timestamp are 1970-01-01T00:29:27Z,
    and an item would be silently expired; times are datetimes or ISO 8601
    text. A ``priority`` of ``"5"`` or ``true`` would be cast to 5 or 1,
    which a record refuses; numbers are numbers.

    Raises
    ------
    SchemaError
        Naming the columns, their types and what to store.
    """
    numbers = [name for name in TIME_COLUMNS if schema.get(name, pl.Null).is_numeric()]
    if numbers:
        shown = ", ".join(f"{name} ({schema[name]})" for name in numbers)
        raise SchemaError(
            f"{where}time columns hold numbers: {shown}; a time is a datetime or ISO 8601 "
            "text with an offset, not a number, which would be read as microseconds since "
            f"1970; convert epoch numbers first, such as pl.from_epoch({numbers[0]!r}, "
            "time_unit='s')"
        )
    texts = [
        f"{name} ({schema[name]})"
        for name in ("priority", "rank")
        if schema.get(name, pl.Null) in (pl.String, pl.Boolean)
        or isinstance(schema.get(name), pl.Categorical)
    ]
    if texts:
        raise SchemaError(
            f"{where}number columns hold text or booleans: {', '.join(texts)}; store numbers "
            '(a record refuses "5" and true for them too)'
        )


def json_text_expr(name: str, schema: pl.Schema, where: str) -> pl.Expr | None:
    """The JSON text of column ``name`` (``metadata`` or ``json``) when it is a struct column.

    A struct (as Polars and Arrow hold JSON objects) is encoded as JSON,
    each field a key, a null field ``null``, a null row null (not the text
    ``null``: a null ``metadata`` is then its default); text (and a column
    Polars casts to text as it is: null, categorical) is left to the cast
    (``None``).

    Raises
    ------
    SchemaError
        If the column holds numbers, booleans, lists or arrays.
    """
    dtype = schema.get(name)
    if isinstance(dtype, pl.Struct):
        column = pl.col(name)
        return pl.when(column.is_not_null()).then(column.struct.json_encode()).alias(name)
    if dtype is None or not (dtype.is_nested() or dtype.is_numeric() or dtype == pl.Boolean):
        return None  # missing, text, null, categorical: cast to text as it is
    raise SchemaError(
        f"{where}column {name!r} is {dtype}: it holds JSON objects, as JSON text or as a "
        "struct column"
    )


def _cast_to_schema(df: pl.DataFrame, where: str, source: str | None) -> pl.DataFrame:
    """Parse timestamp text, cast to :data:`POLARS_SCHEMA`, check ``created_at`` and ``rank``."""
    check_column_types(df.schema, where)
    encoded = [json_text_expr(name, df.schema, where) for name in ("json", "metadata")]
    df = df.with_columns(e for e in encoded if e is not None)
    _raise_first(df, _whole_number_checks(df.schema) + naive_time_checks(df.schema), source)
    try:
        df = df.select(
            [
                pl.col(name).cast(pl.String).str.to_datetime(time_zone="UTC", time_unit="us")
                if name in TIME_COLUMNS and df.schema[name] == pl.String
                else pl.col(name)
                for name in POLARS_SCHEMA
            ]
        )
        # Structs are matched by field name (a source without its title); Polars casts them
        # strictly only field for field in order.
        structs = [
            pl.col(name).cast(dtype, strict=False)
            for name, dtype in POLARS_SCHEMA.items()
            if dtype.is_nested() and df.schema[name] != dtype and df.schema[name].is_nested()
        ]
        df = df.with_columns(structs).cast(dict(POLARS_SCHEMA.items()))
        df = df.with_columns(fill_null_defaults(POLARS_SCHEMA))
    except pl.exceptions.PolarsError as exc:
        raise SchemaError(f"{where}cannot cast to the item schema: {exc}") from None
    _raise_first(df, typed_checks(), source)
    return df


def naive_time_checks(schema: pl.Schema) -> list[tuple[pl.Expr, str, str]]:
    """Row checks that time columns of text give a UTC offset, as a record's times must.

    ``2025-01-01T10:00:00`` names no instant: it is refused with the
    wording of the records' error (:data:`~cognoxium.items.NAIVE_TIME_MESSAGE`)
    rather than read as UTC. A column of datetimes without a time zone is
    read as UTC, as documented, and is not checked here.

    Parameters
    ----------
    schema
        The columns of the input table.

    Returns
    -------
    list of (polars.Expr, str, str)
        ``(bad-row mask, field, message)``, one per time column of text, in
        :data:`TIME_COLUMNS` order.

    Examples
    --------
    >>> df = pl.DataFrame({"created_at": ["2025-01-01T10:00:00Z", "2025-01-01T10:00:00"]})
    >>> [(field, df.select(bad).to_series().to_list()) for bad, field, _
    ...  in naive_time_checks(df.schema)]
    [('created_at', [False, True])]
    """
    return [
        (
            pl.col(name).str.contains(r"^\s*\d{4}-\d{2}-\d{2}")
            & ~pl.col(name).str.strip_chars().str.contains(OFFSET_PATTERN),
            name,
            NAIVE_TIME_MESSAGE,
        )
        for name in TIME_COLUMNS
        if schema.get(name) == pl.String
    ]


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
        row = too_deep(df, column)
        if row is not None:
            raise RecordError(DEPTH_MESSAGE, source=source, row=row, field=column)
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
        :func:`~cognoxium.items.hashing.digests_in_background`); ``None``: computed here.

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
    >>> from cognoxium.items.records import records_to_frame
    >>> df = complete_valid_columns(pl.DataFrame({
    ...     "id": ["a"], "role": ["user"], "payload_kind": ["text"], "text": ["hi"],
    ...     "created_at": [datetime(2024, 1, 1, tzinfo=UTC)]}))
    >>> df.select("trust", "metadata").row(0), df["content_hash"].item() == records_to_frame(
    ...     [{"id": "a", "role": "user", "text": "hi"}])["content_hash"].item()
    (('untrusted', '{}'), True)
    """
    try:
        df = fill_defaults(df.drop("content_hash", strict=False))
        df = df.with_columns(row_content_hashes(df, digests)).select(POLARS_SCHEMA.names())
        return df.cast(dict(POLARS_SCHEMA.items()))
    except pl.exceptions.PolarsError as exc:
        raise SchemaError(f"cannot cast to the item schema: {exc}") from None


def conform(data: pa.Table | pl.DataFrame, *, source: str | None = None) -> pl.DataFrame:
    """Validate a table of context items and bring it to the canonical schema.

    Missing optional columns get their defaults (``trust`` untrusted,
    ``sensitivity`` internal, ``retention`` optional, ``priority`` 0, empty
    ``sources``/``parents``/``lineage``, ``metadata`` ``{}``); a missing ``id`` gets random
    UUIDs (not reproducible) and a missing ``created_at``
    :data:`~cognoxium.items.model.UNDATED`, the Unix epoch 1970-01-01T00:00:00Z,
    so that undated rows are valid at any ``as_of`` from 1970 on and the same
    on every run. ``payload_kind`` is inferred from the non-null payload
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
    df = fill_defaults(df)
    if infer_kind:
        df = _infer_payload_kind(df, source)
    _check_values(df, source)
    df = _cast_to_schema(df, where, source)
    df = _canonicalise_json(df, source)
    return df.with_columns(checked_content_hashes(df, source))


def check_items(df: pl.DataFrame, *, finite_rank: bool = True) -> pl.DataFrame:
    """Check typed item rows as :func:`conform` checks what the readers read; all or nothing.

    For rows a query computed (``with_columns``, ``select``, ``join``) before
    they are packed or written: the same checks and errors as reading them
    back, including unique ids and content hashes that match the payload.
    A null a query computed in a column with a default is refused (``must
    not be null``), not read as the default as a reader reads a stored one:
    a query computes each value.

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
    >>> from cognoxium.items.records import records_to_frame
    >>> df = records_to_frame([{"id": "a", "role": "system", "text": "Be brief."}])
    >>> check_items(df.with_columns(text=pl.lit(None, pl.String)))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: row 0: field text: a text payload needs a value in ...
    """
    require_item_columns(df.schema)
    items = df.select(COLUMNS)
    # A null a query computed is refused: a reader reads a stored null as the default.
    _raise_first(
        items,
        [(pl.col(name).is_null(), name, "must not be null") for name in DEFAULTED_COLUMNS],
        None,
    )
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
    >>> df = pl.DataFrame({"rank": [1.0, float("nan")]})
    >>> [(field, msg, df.select(bad).to_series().to_list()) for bad, field, msg
    ...  in row_checks(df.columns)]
    [('rank', 'must be a finite number (NaN and infinity are refused)', [False, True])]
    """
    have = set(columns)
    metadata = [(~pl.col("metadata").str.starts_with("{"), "metadata", "must be a JSON object")]
    checks = [*value_checks(), *_payload_checks(), *typed_checks(), *metadata]
    return [check for check in checks if set(check[0].meta.root_names()) <= have]
