"""User arguments made into plan pieces: expressions, projections, constraints, column names.

What :class:`~cognoxium.frame.CognitionFrame` methods take (Polars
expressions, column names, selectors, ``name=value`` constraints) is
checked here against the plan's schema and turned into
:class:`~cognoxium.engine.plan.Expression` values, with errors that name the
method and the argument; :func:`rehashed` holds the rule that a step writing
a payload column recomputes ``content_hash``.
"""

from __future__ import annotations

import difflib
import functools
import operator
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, SupportsIndex

import polars as pl
import pyarrow as pa

from cognoxium.engine.plan import (
    Expression,
    LazySource,
    Node,
    Scan,
    Select,
    Source,
    WithColumns,
    polars_error_text,
)
from cognoxium.exceptions import PlanError, SchemaError
from cognoxium.items.convert import items_to_frame
from cognoxium.items.hashing import content_hash_expr
from cognoxium.items.model import ContextItem
from cognoxium.items.predicate import comparable_types, describe_type, value_dtype
from cognoxium.items.records import records_to_frame
from cognoxium.items.scan import scan_lazy_items
from cognoxium.items.schema import COLUMNS, PAYLOAD_COLUMNS
from cognoxium.items.validation import conform

__all__ = [
    "check_query",
    "column",
    "column_names",
    "constraint",
    "expression",
    "flags",
    "flatten",
    "input_rows",
    "lazy_scan",
    "projection",
    "rehashed",
    "whole",
]


def expression(value: pl.Expr | str, what: str) -> Expression:
    """``value``, a Polars expression or a column name, as a plan expression for ``what``."""
    if not isinstance(value, pl.Expr | str):
        raise PlanError(f"{what} takes Polars expressions or column names, got {value!r}")
    return Expression.of(value)


def whole(value: object, what: str, *, negative: bool = False) -> int:
    """``value``, a Python or NumPy integer, as an ``int`` (``negative``: below 0 allowed).

    Raises
    ------
    PlanError
        If ``value`` is not a whole number (a bool is not), or is negative
        when ``negative`` is false; the error names ``what``.

    Examples
    --------
    >>> import numpy as np
    >>> whole(np.int64(2), "head n")
    2
    >>> whole(2.0, "head n")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PlanError: head n must be a non-negative whole number, got 2.0
    """
    number = None
    if isinstance(value, SupportsIndex) and not isinstance(value, bool):
        number = operator.index(value)
    if number is None or (number < 0 and not negative):
        kind = "a whole number" if negative else "a non-negative whole number"
        raise PlanError(f"{what} must be {kind}, got {value!r}")
    return int(number)


@functools.lru_cache(maxsize=4096)
def column(name: str) -> Expression:
    """``pl.col(name)`` as a plan expression, built once per name (drop and rename list all)."""
    return Expression.of(pl.col(name))


def flatten(values: Sequence[Any]) -> list[Any]:
    """Arguments given one by one or in lists (as Polars takes them), in order."""
    out: list[Any] = []
    for value in values:
        out.extend(value if isinstance(value, list | tuple) else [value])
    return out


def projection(
    what: str, exprs: Sequence[pl.Expr | str | Sequence[pl.Expr | str]], named: Mapping[str, Any]
) -> tuple[Expression, ...]:
    """The expressions of ``select``/``with_columns``: positional ones, then ``name=value`` ones.

    As in Polars, a string value is a column's name (``speaker="role"``
    copies ``role``) and any other value that is not an expression a literal.
    """
    out = [expression(e, what) for e in flatten(exprs)]
    for name, value in named.items():
        expr = pl.col(value) if isinstance(value, str) else value
        expr = expr if isinstance(expr, pl.Expr) else pl.lit(value)
        out.append(Expression.of(expr.alias(name)))
    if not out:
        raise PlanError(f"{what} needs at least one expression")
    return tuple(out)


def constraint(plan: Node, name: str, value: Any) -> pl.Expr:
    """``pl.col(name).eq(value)``, refusing a value the column cannot equal."""
    dtype = plan.schema.get(name)
    if isinstance(value, list | tuple | set | frozenset | pl.Series):
        raise PlanError(
            f"filter({name}={value!r}): a constraint is equality with one value, as in "
            f"Polars; to keep rows whose {name!r} is one of several values, use "
            f'filter(pl.col({name!r}).is_in({list(value)!r})) or filter("{name} IN (...)")'
        )
    if dtype is not None and not comparable_types(dtype, value_dtype(value)):
        hint = (
            "; give a datetime.datetime (UTC) or write the SQL TIMESTAMP '...'"
            if isinstance(dtype, pl.Datetime | pl.Date) and isinstance(value, str)
            else ""
        )
        raise PlanError(
            f"filter({name}={value!r}): column {name!r} is {describe_type(dtype)} and "
            f"{value!r} is {describe_type(value_dtype(value))}: they cannot be compared{hint}"
        )
    if isinstance(dtype, pl.Enum) and isinstance(value, str):
        categories = dtype.categories.to_list()
        if value not in categories:
            raise PlanError(
                f"filter({name}={value!r}): {name!r} holds one of {categories}, "
                "so no row could match"
            )
    return pl.col(name).eq(value)


def column_names(column: Any, schema: pl.Schema, what: str, *, strict: bool) -> list[str]:
    """The columns a name or a Polars selector names in ``schema``."""
    import polars.selectors as cs

    if cs.is_selector(column):
        try:
            return list(cs.expand_selector(schema, column))
        except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
            raise PlanError(f"{what}: {polars_error_text(exc)}") from exc
    if not isinstance(column, str):
        raise PlanError(f"{what} takes column names or selectors, got {column!r}")
    if column in schema:
        return [column]
    if not strict:
        return []
    close = difflib.get_close_matches(column, schema.names(), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise PlanError(f"{what}: unknown column {column!r}{hint} (the frame has {schema.names()})")


def check_query(
    schema: pl.Schema, build: Callable[[pl.LazyFrame], pl.LazyFrame], what: str
) -> None:
    """Raise PlanError unless the query ``build`` makes over ``schema`` resolves its schema."""
    try:
        build(pl.LazyFrame(schema=schema)).collect_schema()
    except pl.exceptions.PolarsError as exc:
        raise PlanError(f"{what}: {polars_error_text(exc)}") from exc


def _writes(expr: Expression) -> str | None:
    """The column an expression writes, None when not known (a selector, several outputs)."""
    if not expr.exact_columns:
        return None
    try:
        return expr.expr.meta.output_name()
    except pl.exceptions.PolarsError:
        return None


def rehashed(node: Select | WithColumns) -> Node:
    """``node``, then a fresh ``content_hash`` where it may replace a payload column.

    An item's content hash follows its payload: a projection that writes
    ``text``, ``json``, a reference column or ``payload_kind`` (other than
    passing the column through) recomputes it, so token caches, dedupe and
    the manifest see the new content.
    """
    schema = node.schema
    if "content_hash" not in schema or not all(c in schema for c in PAYLOAD_COLUMNS):
        return node
    written = [(_writes(e), e) for e in node.exprs]
    if not any(
        name is None or (name in PAYLOAD_COLUMNS and not e.is_column(name)) for name, e in written
    ):
        return node
    return WithColumns(input=node, exprs=(Expression.of(content_hash_expr()),))


def flags(value: bool | Sequence[bool], n: int, name: str) -> tuple[bool, ...]:
    """One flag per sort key: ``value`` repeated, or its ``n`` bools."""
    if isinstance(value, bool):
        return (value,) * n
    flags = tuple(value)
    if len(flags) != n or not all(isinstance(v, bool) for v in flags):
        raise PlanError(f"{name} needs a bool or one bool per sort key ({n} keys), got {value!r}")
    return flags


def _from_iterable(data: Iterable[Any]) -> pl.DataFrame:
    rows = list(data)
    types = set(map(type, rows))
    if all(issubclass(t, ContextItem) for t in types):
        return items_to_frame(rows)
    if all(issubclass(t, Mapping) for t in types):
        return records_to_frame(rows)
    kinds = sorted({t.__name__ for t in types})
    raise SchemaError(
        f"expected ContextItems or record mappings, got a mix of {kinds}; give one kind per frame"
    )


def lazy_scan(lf: pl.LazyFrame) -> Scan:
    """A lazy scan of ``lf`` when it holds every item column, else its rows conformed now."""
    names = lf.collect_schema().names()
    if all(name in names for name in COLUMNS):
        return Scan(source=LazySource(scan_lazy_items(lf)))
    return Scan(source=Source(conform(lf.collect())))


def input_rows(data: Any) -> pl.DataFrame:
    """The rows of what a frame is built from: a table conformed, or items or records converted."""
    if isinstance(data, pl.DataFrame | pa.Table):
        return conform(data)
    if isinstance(data, Mapping):
        raise SchemaError("got a single record; give a list of records")
    if isinstance(data, str | bytes | os.PathLike) or not isinstance(data, Iterable):
        raise SchemaError(
            f"cannot build a CognitionFrame from {type(data).__name__}; give ContextItems, "
            "records, an Arrow table or a Polars frame (read files with "
            "CognitionFrame.read_jsonl or read_parquet)"
        )
    return _from_iterable(data)
