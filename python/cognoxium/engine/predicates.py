"""Row predicates from user input: Polars expressions, or SQL with metadata keys resolved.

A SQL predicate that reads ``metadata.<key>`` needs the type the metadata
JSON decodes to; it is inferred from the data that reaches the plan (the
whole table of the scan ``metadata`` comes from, kept with it, or, for a
lazy scan, the rows that pass the filters pushed into it), and a key no
item has is an error rather than a column of nulls.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import orjson
import polars as pl

from cognoxium.engine.arguments import expression
from cognoxium.engine.lowering import lower
from cognoxium.engine.plan import (
    Dedupe,
    Expression,
    Filter,
    Join,
    LazySource,
    Limit,
    Node,
    Scan,
    Select,
    Sort,
    TopK,
    WithColumns,
    polars_error_text,
)
from cognoxium.engine.ranks import Rank
from cognoxium.exceptions import PlanError
from cognoxium.items.predicate import MIXED_JSON, parse_predicate

__all__ = ["infer_metadata_struct", "row_predicate", "sql_predicate", "stored_metadata"]


def _metadata_passes(node: Node) -> Node | None:
    """The child ``metadata`` comes from unchanged, or None if ``node`` computes it."""
    child = node.children[0] if node.children else None
    if child is None or "metadata" not in child.schema:
        return None
    if isinstance(node, Filter | Sort | Limit | TopK | Dedupe | Rank | Join):
        return child
    if isinstance(node, Select) and any(e.is_column("metadata") for e in node.exprs):
        return child
    if isinstance(node, WithColumns):
        for e in node.exprs:
            try:
                name = e.expr.meta.output_name()
            except pl.exceptions.PolarsError:
                return None
            if not e.exact_columns or name == "metadata":
                return None
        return child
    return None


def infer_metadata_struct(values: pl.Series) -> pl.Struct | None:
    """The struct type of the metadata JSON objects; None when there is no metadata at all.

    What a SQL predicate's ``metadata.<key>`` is checked and decoded
    against, inferred from every distinct text of ``values``.

    Raises
    ------
    PlanError
        If ``values`` is not text, or a text is not a JSON object.
    """
    if values.dtype != pl.String:
        raise PlanError(f"metadata.<key> needs 'metadata' to hold JSON text, it is {values.dtype}")
    texts = values.drop_nulls().unique()
    if texts.is_empty():
        return None
    try:
        dtype = texts.str.json_decode(infer_schema_length=None).dtype
    except pl.exceptions.PolarsError as exc:
        dtype = _keywise_dtype(texts, exc)
    if not isinstance(dtype, pl.Struct):
        raise PlanError(f"metadata must hold JSON objects, found {dtype}")
    return _booleans_apart(texts, dtype)


def _keywise_dtype(texts: pl.Series, error: pl.exceptions.PolarsError) -> pl.DataType:
    """The metadata type key by key, when Polars finds no one type for all of it.

    Polars refuses the whole column when one key holds an object in one
    item and text in another; that key alone is typed :data:`MIXED_JSON`, so
    a predicate reading the others still runs and one reading it is refused
    by name. ``error`` is Polars' own, raised again if a text is not JSON.
    """
    values = []
    for text in texts:
        try:
            values.append(orjson.loads(text))
        except orjson.JSONDecodeError:
            raise PlanError(
                f"cannot decode the metadata JSON: {polars_error_text(error)}"
            ) from error
    other = next((v for v in values if not isinstance(v, dict)), None)
    if other is not None:
        raise PlanError(f"metadata must hold JSON objects, found {type(other).__name__}")
    return _fields_dtype(values)  # the objects as a whole have no type: Polars said so


def _json_dtype(values: list[Any]) -> pl.DataType:
    """The Polars type of JSON ``values`` (``MIXED_JSON`` where they have none), key by key."""
    texts = pl.Series([orjson.dumps(value).decode() for value in values], dtype=pl.String)
    try:
        return texts.str.json_decode(infer_schema_length=None).dtype
    except pl.exceptions.PolarsError:
        return _fields_dtype(values)


def _fields_dtype(values: list[Any]) -> pl.DataType:
    """The struct type of JSON objects ``values``, each key's type apart; else ``MIXED_JSON``."""
    objects = [value for value in values if value is not None]
    if not all(isinstance(value, dict) for value in objects):
        return MIXED_JSON
    keys = dict.fromkeys(key for value in objects for key in value)
    return pl.Struct([pl.Field(key, _json_dtype([v.get(key) for v in objects])) for key in keys])


_NUMBERS = (pl.Int64, pl.Float64, pl.UInt64)


def _booleans_apart(texts: pl.Series, dtype: pl.Struct) -> pl.Struct:
    """``dtype`` with :data:`MIXED_JSON` for a number key that some item holds a boolean in.

    Polars decodes ``true`` as 1 in a key it types as a number, so
    ``metadata.vip = 1`` would match ``"vip": true``. Top-level keys only.
    """
    numbers = [f.name for f in dtype.fields if isinstance(f.dtype, _NUMBERS)]
    texts = texts.filter(
        texts.str.contains("true", literal=True) | texts.str.contains("false", literal=True)
    )
    if not numbers or texts.is_empty():
        return dtype
    found = texts.str.json_decode(
        pl.Struct([pl.Field(name, pl.String) for name in numbers])
    ).struct.unnest()
    booleans = found.select(pl.all().is_in(["true", "false"]).any()).row(0)
    mixed = {name for name, has in zip(numbers, booleans, strict=True) if has}
    return pl.Struct(
        [pl.Field(f.name, MIXED_JSON if f.name in mixed else f.dtype) for f in dtype.fields]
    )


def _metadata_dtype(plan: Node) -> pl.Struct | None:
    """The struct type of ``metadata`` reaching ``plan``, inferred from the data.

    Follows ``metadata`` down to the scan it comes from and infers from all
    of that table's metadata (a superset of the rows reaching ``plan``, so
    every key is covered); if a node computes ``metadata``, runs the plan up
    to that node instead. For a lazy scan, reads the metadata of the rows
    that pass the filters right above the scan (pushed into the scan, so a
    filtered partition alone is read). ``None`` when there is no metadata to
    infer from (no rows).
    """
    if "metadata" not in plan.schema:
        raise PlanError(
            f"metadata.<key> needs a 'metadata' column; the frame has {plan.schema.names()}"
        )
    node = plan
    path: list[Node] = []
    while not isinstance(node, Scan):
        child = _metadata_passes(node)
        if child is None:
            return infer_metadata_struct(_metadata_values(node))
        path.append(node)
        node = child
    source = node.source
    if isinstance(source, LazySource):
        filters: list[Filter] = []
        for parent in reversed(path):
            if not isinstance(parent, Filter):
                break
            filters.append(parent)
        predicate = pl.all_horizontal([f.predicate.expr for f in filters]) if filters else None
        stored = stored_metadata(source, predicate=predicate)
        if stored is not None:
            return stored[1]
        return infer_metadata_struct(_metadata_values(filters[-1] if filters else node))
    cached = source.cache.get("metadata_dtype")
    if not isinstance(cached, tuple):
        cached = (infer_metadata_struct(source.frame.get_column("metadata")),)
        source.cache["metadata_dtype"] = cached
    dtype: pl.Struct | None = cached[0]
    return dtype


def stored_metadata(
    source: LazySource, others: Sequence[str] = (), predicate: pl.Expr | None = None
) -> tuple[pl.DataFrame, pl.Struct | None] | None:
    """The distinct rows of ``metadata`` and ``others`` read as stored, and the metadata type.

    Reading the stored values (:meth:`~cognoxium.items.scan.ItemScan.read_unchecked`)
    skips the scan's checks and canonical JSON, which a type does not need
    and which cost more than the read, for every distinct text.

    Parameters
    ----------
    source
        A lazy scan.
    others
        Output columns read with ``metadata``.
    predicate
        The rows to read; ``None`` for all.

    Returns
    -------
    tuple of (polars.DataFrame, polars.Struct or None) or None
        ``None`` when the stored values give no type (a JSONL scan, values
        Polars cannot read or decode, metadata that is not an object): the
        caller reads them through the scan, whose checks name the file,
        row and field at fault.
    """
    try:
        rows = source.scan.read_unchecked(["metadata", *others], predicate)
        if rows is None:
            return None
        return rows, infer_metadata_struct(rows.get_column("metadata"))
    except (PlanError, pl.exceptions.PolarsError):
        return None


def _metadata_values(node: Node) -> pl.Series:
    """The ``metadata`` column of the rows ``node`` outputs (runs the plan up to it)."""
    try:
        return lower(node).select("metadata").collect().to_series()
    except pl.exceptions.PolarsError as exc:
        raise PlanError(
            f"cannot compute the metadata to read keys from: {polars_error_text(exc)}"
        ) from exc


_SHOWN_KEYS = 30


def _unknown_keys(sql: str, unknown: Sequence[str], known: Sequence[str]) -> PlanError:
    names = ", ".join(repr(name) for name in unknown)
    close = difflib.get_close_matches(unknown[0], known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    shown = sorted(known)[:_SHOWN_KEYS]
    more = f" and {len(known) - len(shown)} more" if len(known) > len(shown) else ""
    keys = f"the metadata keys are {shown}{more}" if known else "no item has any metadata key"
    return PlanError(
        f"no item has the metadata key{'s' if len(unknown) > 1 else ''} {names} "
        f"(in SQL predicate {sql!r}), so it would read as null for every row; {hint}{keys}"
    )


def sql_predicate(sql: str, plan: Node) -> tuple[pl.Expr, pl.Struct | None]:
    """A SQL predicate lowered and type-checked against the plan's schema and metadata type."""
    expr = parse_predicate(sql, plan.schema.names())
    fields = Expression.of(expr).struct_fields("metadata")
    if not fields:
        return parse_predicate(sql, plan.schema), None
    dtype = _metadata_dtype(plan)
    if dtype is None:  # no rows, so no keys to check against: every key reads as null
        dtype = pl.Struct([pl.Field(name, pl.Null()) for name in fields])
    known = [f.name for f in dtype.fields]
    unknown = [name for name in fields if name not in known]
    if unknown:
        raise _unknown_keys(sql, unknown, known)
    typed = {**plan.schema, "metadata": dtype}
    return parse_predicate(sql, typed, decode_metadata=True), dtype


def row_predicate(value: pl.Expr | str, plan: Node) -> tuple[Expression, pl.Struct | None]:
    """A row predicate from a Polars expression or a SQL predicate, with its metadata type.

    Parameters
    ----------
    value
        A Polars expression, or a SQL predicate in the grammar of
        :mod:`cognoxium.items.predicate` (``metadata.<key>`` reaches a
        metadata field).
    plan
        The plan the predicate filters.

    Returns
    -------
    tuple of (Expression, polars.Struct or None)
        The predicate, and the type ``metadata`` is decoded to when the SQL
        reads metadata keys (``None`` otherwise).

    Raises
    ------
    PlanError
        If the value is neither, the SQL does not resolve over the plan's
        schema, or it names a metadata key that no item reaching the plan has.
    PredicateError
        If the SQL is not a valid predicate.
    """
    if isinstance(value, str):
        expr, dtype = sql_predicate(value, plan)
        return Expression.of(expr), dtype
    return expression(value, "a predicate"), None
