"""String predicates over item columns: an allow-listed SQL grammar lowered to Polars.

A string predicate (a request's ``where``, a SQL string given to
:meth:`~cognoxium.frame.frame.CognitionFrame.filter`, ``quarantine`` or
``demote``) is parsed with `sqlglot <https://sqlglot.com>`_ and lowered,
node by node, to a Polars expression. Only the constructs below are
accepted; anything else is refused with a
:class:`~cognoxium.exceptions.PredicateError` that names the construct, its
position and why, before any data or file is read. A predicate can only read
the columns of the rows it filters: there are no subqueries, no table
functions (``read_csv``, ``read_parquet``, ...), no comments and no second
statement.

==========================  =================================================
construct                   examples
==========================  =================================================
column                      ``role``, ``"ref_title"`` (a column of the frame)
metadata key                ``metadata.topic``, ``metadata."my key"``,
                            ``metadata.a.b`` (a field of the metadata JSON
                            object; nested objects by further dots)
literal                     ``'it''s'``, ``3``, ``-2.5``, ``1e3``, ``TRUE``,
                            ``FALSE``, ``NULL``
timestamp literal           ``TIMESTAMP '2025-03-01'``,
                            ``TIMESTAMP '2025-03-01T12:00:00+02:00'``
                            (ISO 8601; without an offset it is UTC),
                            ``DATE '2025-03-01'``
comparison                  ``=`` ``==`` ``!=`` ``<>`` ``<`` ``<=`` ``>``
                            ``>=``
logic                       ``AND``, ``OR``, ``NOT``, parentheses
list membership             ``x IN ('a', 'b')``, ``x NOT IN (1, 2)``
                            (literals only)
pattern                     ``x LIKE 'a%'``, ``x ILIKE '%b_'``,
                            ``x NOT LIKE ...``, ``x NOT ILIKE ...``
                            (``%`` any run of characters, ``_`` one
                            character; ``ILIKE`` ignores case)
range                       ``x BETWEEN 1 AND 5`` (both ends included),
                            ``x NOT BETWEEN ...``
null test                   ``x IS NULL``, ``x IS NOT NULL``
negation                    ``-x``
==========================  =================================================

The scalar functions are those of :data:`PREDICATE_FUNCTIONS`:

==================  ====================================================
function            meaning
==================  ====================================================
``lower(s)``        ``s`` in lower case
``upper(s)``        ``s`` in upper case
``length(s)``       the number of characters of ``s``
``coalesce(a, …)``  the first of its arguments that is not null
``abs(x)``          the absolute value of ``x``
==================  ====================================================

Null behaves as in SQL: a comparison with null is null, and a filter keeps
only the rows where the predicate is true (null counts as false);
``x IN (1, NULL)`` is true when ``x = 1`` and null otherwise, so
``x NOT IN (1, NULL)`` is never true. Keywords and function names are case
insensitive; column names and metadata keys are case sensitive (quote a name
with double quotes to use spaces or keywords).

Given the columns' types (a frame gives them, and the types of the metadata
keys it infers), each comparison is checked before anything runs: text
(``String`` and enumerations) compares with text, numbers with numbers,
times with ``TIMESTAMP '...'`` or ``DATE '...'`` (a bare ``'2025-11-01'``
is text); ``lower``, ``upper``, ``length``, ``LIKE`` and ``ILIKE`` take
text and read an enumeration column as its text; an enumeration is
compared only with the strings it can hold, and in its own order: ``sensitivity
> 'internal'`` holds ``confidential`` and ``restricted``, as the Polars
expression ``pl.col("sensitivity") > "internal"`` does, and ``retention <
'optional'`` holds ``required`` and ``preferred``. Against other text (a
string column, ``lower(role)``) it is read as its text. A mismatch is refused with
a :class:`~cognoxium.exceptions.PredicateError` naming the clause, each side
and its type, and what to write instead.

Examples
--------
>>> import polars as pl
>>> frame = pl.DataFrame({"role": ["user", "tool", "user"], "priority": [3, 0, None]})
>>> expr = parse_predicate("role = 'user' AND coalesce(priority, 0) > 1", frame.columns)
>>> frame.filter(expr)["priority"].to_list()
[3]
>>> parse_predicate("role IN (SELECT column_1 FROM read_csv('/etc/passwd'))", frame.columns)
Traceback (most recent call last):
...
cognoxium.exceptions.PredicateError: predicate "role IN (SELECT ...)", at character 17:
a subquery is not allowed (it calls the table function read_csv, which reads files): ...
"""

from __future__ import annotations

import difflib
import itertools
import operator
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, date, datetime
from functools import lru_cache, reduce
from types import MappingProxyType
from typing import Any, Final

import polars as pl
from polars.datatypes import DataTypeClass
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from cognoxium.exceptions import PredicateError
from cognoxium.items._checks import FINE_TIME_MESSAGE, finer_than_microseconds
from cognoxium.items.schema import POLARS_SCHEMA

__all__ = [
    "MIXED_JSON",
    "PREDICATE_FUNCTIONS",
    "comparable_types",
    "describe_type",
    "parse_predicate",
    "path_struct",
    "value_dtype",
]

PREDICATE_FUNCTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "abs": "abs(x): the absolute value of x",
        "coalesce": "coalesce(a, b, ...): the first argument that is not null",
        "length": "length(s): the number of characters of s",
        "lower": "lower(s): s in lower case",
        "upper": "upper(s): s in upper case",
    }
)
"""The scalar functions a string predicate may call, each with its meaning."""

_DIALECT: Final = Postgres()

_WHY_TABLE_FUNCTION: Final = (
    "table functions read files, and a predicate reads only the columns of the row it tests"
)
_WHY_SUBQUERY: Final = (
    "a predicate reads only the columns of the row it tests; compare with literals instead"
)
_WHY_GRAMMAR: Final = "it is not part of the predicate grammar (see cognoxium.items.predicate)"

# sqlglot's own nodes for the table functions Polars SQL offers (read_csv,
# read_parquet, ...); a table function sqlglot does not know parses as an
# anonymous function and is refused as an unknown function.
_TABLE_FUNCTIONS: Final = tuple(
    getattr(exp, name)
    for name in ("ReadCSV", "ReadParquet", "ReadJSON", "ReadIPC", "ReadNDJSON")
    if hasattr(exp, name)
)
_MISSING: Final = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
MIXED_JSON: Final = pl.Object()
"""The type of a metadata key whose values across the items have no one JSON type.

A ``metadata.<key>`` predicate reading such a key is refused by name.
"""

_FILE_READER: Final = re.compile(r"^(read|scan)_[a-z_]+$", re.IGNORECASE)


def _sql(node: exp.Expr) -> str:
    """A node as messages show it: SQL with lower-case function names."""
    return node.sql(dialect=_DIALECT, normalize_functions="lower")


def _position(node: exp.Expr) -> int | None:
    """The 0-based character offset of a node: the first offset of its parts, if known."""
    starts = [
        start
        for part in node.walk()
        if isinstance(part, exp.Expr) and isinstance(start := part.meta.get("start"), int)
    ]
    return min(starts) if starts else None


class _Lowering:
    """Lowers one parsed predicate; one method per allowed node type."""

    def __init__(
        self,
        text: str,
        columns: Collection[str],
        dtypes: Mapping[str, pl.DataType] | None,
        *,
        decode: bool = False,
    ) -> None:
        self.text = text
        self.columns = columns
        self.dtypes = dtypes
        self.decode = decode

    def metadata(self, names: Sequence[str]) -> pl.Expr:
        """The struct of which ``metadata.<key>...`` (``names``, ``metadata`` first) is a path.

        The ``metadata`` column itself, or with ``decode`` its JSON text
        decoded to a struct of that one path, typed as the ``metadata``
        struct type types it (the last key's whole type), so the other
        keys are not decoded.
        """
        dtype = None if self.dtypes is None else self.dtypes.get("metadata")
        if not (self.decode and isinstance(dtype, pl.Struct)):
            return pl.col("metadata")
        leaf = self.path_dtype(names)
        if leaf is not None and (leaf.is_numeric() or leaf in (pl.String, pl.Boolean, pl.Null)):
            return _read_path(names[1:], leaf)
        return pl.col("metadata").str.json_decode(path_struct(dtype, names[1:]))

    def error(self, node: exp.Expr | None, message: str) -> PredicateError:
        return PredicateError(
            message, predicate=self.text, position=None if node is None else _position(node)
        )

    def refuse(self, node: exp.Expr) -> PredicateError:
        if isinstance(node, exp.Subquery | exp.Query | exp.Exists | exp.Any | exp.All):
            reads = [
                self.written_name(f)
                for f in node.find_all(exp.Func)
                if isinstance(f, _TABLE_FUNCTIONS) or _FILE_READER.match(self.written_name(f))
            ]
            calls = f" (it calls the table function {reads[0]}, which reads files)" if reads else ""
            return self.error(node, f"a subquery is not allowed{calls}: {_WHY_SUBQUERY}")
        if isinstance(node, _TABLE_FUNCTIONS):
            name = self.written_name(node)
            return self.error(
                node, f"the table function {name} is not allowed: {_WHY_TABLE_FUNCTION}"
            )
        if isinstance(node, exp.Func):
            name = self.written_name(node)
            if _FILE_READER.match(name):
                why = _WHY_TABLE_FUNCTION
            else:
                why = f"the functions are {', '.join(PREDICATE_FUNCTIONS)}"
            return self.error(node, f"the function {name} is not allowed: {why}")
        if isinstance(node, exp.Star):
            return self.error(node, "'*' is not allowed: name the columns")
        sql = node.sql(dialect=_DIALECT)
        shown = sql if len(sql) <= 60 else sql[:57] + "..."
        return self.error(node, f"{shown!r} ({type(node).__name__}) is not allowed: {_WHY_GRAMMAR}")

    def written_name(self, node: exp.Func) -> str:
        """A function's name as the predicate spells it (sqlglot may know it by another)."""
        start, end = node.meta.get("start"), node.meta.get("end")
        if isinstance(start, int) and isinstance(end, int):
            return self.text[start : end + 1].lower()
        return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()

    def only(self, node: exp.Expr, *allowed: str) -> None:
        """Refuse a node with a clause (a set argument) other than ``allowed``."""
        for name in type(node).arg_types:
            value = node.args.get(name)
            if name not in allowed and value not in (None, False, []):
                shown = value.sql(dialect=_DIALECT) if isinstance(value, exp.Expr) else name
                raise self.error(
                    node,
                    f"{node.key.upper()} with {name} ({shown}) is not allowed: {_WHY_GRAMMAR}",
                )

    def lower(self, node: exp.Expr) -> pl.Expr:
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise self.refuse(node)
        return handler(self, node)

    def dtype(self, node: exp.Expr) -> pl.DataType | None:
        """The Polars type of a node's value; None when not known (no column types given)."""
        node = _unparen(node)
        if isinstance(node, exp.Column | exp.Dot):
            return self.column_dtype(node)
        if isinstance(node, exp.Literal | exp.Boolean | exp.Null):
            return value_dtype(self.literal(node))
        if isinstance(node, exp.Neg | exp.Abs):
            return self.dtype(node.this)
        if isinstance(node, exp.Lower | exp.Upper):
            return pl.String()
        if isinstance(node, exp.Length):
            return pl.UInt32()
        if isinstance(node, exp.Cast) and isinstance(node.args.get("to"), exp.DataType):
            kind = node.args["to"].this
            return pl.Date() if kind == exp.DataType.Type.DATE else pl.Datetime("us", "UTC")
        if isinstance(node, exp.Coalesce):
            known = [self.dtype(e) for e in (node.this, *node.expressions)]
            return next((d for d in known if _family(d) is not None), None)
        if isinstance(node, exp.Predicate | exp.Connector | exp.Not):
            return pl.Boolean()
        return None

    def column_dtype(self, node: exp.Expr) -> pl.DataType | None:
        """The type of a column or of a ``metadata.<key>`` field; None when not known."""
        return self.path_dtype(_names(self, node))

    def path_dtype(self, names: Sequence[str]) -> pl.DataType | None:
        """The type of a column (``names`` one name) or of a metadata field; None if not known."""
        if self.dtypes is None:
            return None
        dtype = self.dtypes.get(names[0])
        for key in names[1:]:
            if not isinstance(dtype, pl.Struct):
                return None
            field = next((f.dtype for f in dtype.fields if f.name == key), None)
            dtype = None if field is None else _instance(field)
        return dtype

    def described(self, node: exp.Expr) -> str:
        """How a message names a node and its type: ``column priority is a number (Int64)``."""
        node = _unparen(node)
        sql = _sql(node)
        if isinstance(node, exp.Column) and not self.is_metadata(node):
            sql = f"column {sql}"
        elif _is_literal(node):
            sql = f"the literal {sql}"
        dtype = self.dtype(node)
        return f"{sql} is {describe_type(dtype)}" if dtype is not None else sql

    def clause(self, node: exp.Expr) -> str:
        """The text of a clause, as sqlglot writes it back."""
        return _sql(node)

    def is_metadata(self, node: exp.Expr) -> bool:
        """Whether a node reads a field of the metadata object (``metadata.<key>``)."""
        node = _unparen(node)
        return isinstance(node, exp.Column | exp.Dot) and len(_names(self, node)) > 1

    def comparable(
        self, clause: exp.Expr, left: exp.Expr, right: exp.Expr, *, ordered: bool = False
    ) -> None:
        """Refuse a clause comparing values of two types Polars cannot compare.

        A comparison of an enumeration with a string it cannot hold is
        refused too: no row could match an equality, and the string has no
        place in the enumeration's order.
        """
        a, b = self.dtype(left), self.dtype(right)
        if comparable_types(a, b):
            self.enumerated(clause, (left, a), right, ordered=ordered)
            self.enumerated(clause, (right, b), left, ordered=ordered)
            return
        hint = _mismatch_hint(self, (left, a), (right, b))
        raise self.error(
            clause,
            f"in {self.clause(clause)!r}, {self.described(left)} and {self.described(right)}: "
            f"they cannot be compared; {hint}",
        )

    def condition(self, node: exp.Expr) -> None:
        """Refuse a whole predicate whose value is not a condition (a boolean)."""
        if _family(self.dtype(node)) in (None, "boolean"):
            return
        raise self.error(
            node, f"a predicate is a condition (a boolean), but {self.described(node)}"
        )

    def enumerated(
        self, clause: exp.Expr, side: Side, other: exp.Expr, *, ordered: bool = False
    ) -> None:
        """Refuse a string literal an enumeration side cannot hold.

        No row could equal it, and an ordered comparison (``ordered``) has
        no place for it in the enumeration's order.
        """
        node, dtype = side
        value = _unparen(other)
        if not (isinstance(dtype, pl.Enum) and isinstance(value, exp.Literal) and value.is_string):
            return
        categories = dtype.categories.to_list()
        if str(value.this) in categories:
            return
        close = difflib.get_close_matches(str(value.this), categories, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        order = f" (its order: {' < '.join(categories)})" if ordered else ""
        raise self.error(
            clause,
            f"in {self.clause(clause)!r}, {self.described(node)}, which never holds "
            f"{_sql(value)}{order}{hint}",
        )

    def takes(self, node: exp.Expr, argument: exp.Expr, family: str) -> None:
        """Refuse a function or pattern whose argument is not of ``family`` ('text', ...)."""
        if _family(self.dtype(argument)) in (None, family):
            return
        if isinstance(node, exp.Like | exp.ILike | exp.Connector | exp.Not):
            what = node.key.upper()
        elif isinstance(node, exp.Neg):
            what = "'-'"
        else:
            what = f"{self.written_name(node)}()" if isinstance(node, exp.Func) else node.key
        raise self.error(
            node,
            f"in {self.clause(node)!r}, {what} takes {_ARTICLE[family]}{family}, "
            f"but {self.described(argument)}",
        )

    def literal(self, node: exp.Expr) -> Any:
        """The Python value of a literal node (string, number, bool, None)."""
        if isinstance(node, exp.Paren):
            return self.literal(node.this)
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if isinstance(node, exp.Literal):
            return _literal_value(node)
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
            value = _literal_value(node.this)
            if isinstance(value, int | float):
                return -value
        raise self.error(
            node,
            f"an IN list holds literals only, not {_sql(node)!r}: "
            "use OR for comparisons with columns",
        )


def _literal_value(node: exp.Literal) -> str | int | float:
    text = str(node.this)
    if node.is_string:
        return text
    try:
        return int(text)
    except ValueError:
        return float(text)


# ---------------------------------------------------------------------------
# types: which values a comparison may set side by side

_ARTICLE: Final[Mapping[str, str]] = MappingProxyType(
    {"text": "", "number": "a ", "boolean": "a ", "time": "a ", "object": "an ", "list": "a "}
)


def _family(dtype: pl.DataType | None) -> str | None:
    """The kind of value a type holds, as comparisons group them; None for null or unknown."""
    if dtype is None or dtype == pl.Null:
        return None
    if dtype == pl.String or isinstance(dtype, pl.Enum | pl.Categorical):
        return "text"
    if dtype.is_numeric():
        return "number"
    if dtype == pl.Boolean:
        return "boolean"
    if isinstance(dtype, pl.Datetime | pl.Date):
        return "time"
    if isinstance(dtype, pl.Struct):
        return "object"
    if isinstance(dtype, pl.List | pl.Array):
        return "list"
    return str(dtype)


def value_dtype(value: object) -> pl.DataType:
    """The Polars type of a Python value, as a literal of a predicate or a filter constraint.

    Parameters
    ----------
    value
        A Python value: ``str``, ``int``, ``float``, ``bool``, ``None``,
        ``datetime``, ``date``, a list, ...

    Returns
    -------
    polars.DataType
        The type Polars gives the value (``Null`` for ``None``; ``Object``
        for a value Polars cannot type).

    Examples
    --------
    >>> value_dtype("high"), value_dtype(3), value_dtype(None)
    (String, Int64, Null)
    """
    try:
        return pl.Series([value], strict=False).dtype
    except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError):
        return pl.Object()


def comparable_types(left: pl.DataType | None, right: pl.DataType | None) -> bool:
    """Whether values of two types can be compared (``=``, ``<``, ``IN``, ``BETWEEN``).

    Text (``String``, ``Enum``, ``Categorical``) compares with text, numbers of
    any width with numbers, ``Date`` and ``Datetime`` with each other, and
    any type with itself; null (``Null``) and an unknown type (``None``)
    compare with anything.

    Parameters
    ----------
    left, right
        The two types; ``None`` when a type is not known.

    Returns
    -------
    bool
        False when Polars would refuse the comparison when it runs (or, for
        an object with a number, silently match nothing).

    Examples
    --------
    >>> comparable_types(pl.Int64(), pl.Float64()), comparable_types(pl.Int64(), pl.String())
    (True, False)
    >>> comparable_types(pl.Enum(["user", "tool"]), pl.String())
    True
    """
    a, b = _family(left), _family(right)
    return a is None or b is None or a == b


def describe_type(dtype: pl.DataType) -> str:
    """A type as messages name it: what kind of value, then the Polars type.

    Parameters
    ----------
    dtype
        A Polars type.

    Returns
    -------
    str
        For example ``"a number (Int64)"``, ``"text (String)"``, ``"an
        object with keys a, b (Struct)"``.

    Examples
    --------
    >>> describe_type(pl.Enum(["user", "tool"]))
    "text (Enum of 'user', 'tool')"
    >>> describe_type(pl.Struct({"a": pl.Int64, "b": pl.String}))
    'an object with keys a, b (Struct)'
    """
    family = _family(dtype)
    if isinstance(dtype, pl.Enum):
        categories = ", ".join(repr(c) for c in dtype.categories.to_list())
        return f"text (Enum of {categories})"
    if isinstance(dtype, pl.Struct):
        return f"an object with keys {', '.join(f.name for f in dtype.fields)} (Struct)"
    if family is None:
        return f"null ({dtype})"
    return f"{_ARTICLE.get(family, 'of type ')}{family} ({dtype})"


Side = tuple[exp.Expr, pl.DataType | None]


def _is_literal(node: exp.Expr) -> bool:
    node = _unparen(node)
    if isinstance(node, exp.Neg):
        return _is_literal(node.this)
    return isinstance(node, exp.Literal | exp.Boolean | exp.Null | exp.Cast)


def _mismatch_hint(low: _Lowering, *sides: Side) -> str:
    """What to write instead of a comparison of two types that do not compare."""
    pairs = [(_unparen(node), dtype) for node, dtype in sides]
    for (node, dtype), (other, other_dtype) in (pairs, pairs[::-1]):
        family, other_family = _family(dtype), _family(other_dtype)
        name, other_sql = (
            _sql(node),
            _sql(other),
        )
        if family == "time" and other_family == "text" and _is_literal(other):
            forms = f"TIMESTAMP {other_sql}"
            if _DATE_ONLY.fullmatch(str(_unparen(other).this)):  # DATE takes a date alone
                forms += f" (or DATE {other_sql})"
            return f"write the time as {forms}; a bare string is text, not a time"
        if family == "object":
            return f"{name} is an object: compare one of its keys, as {name}.<key>"
        if low.is_metadata(node) and family == "text" and _is_literal(other):
            return _mixed_metadata_hint(name, other, other_family)
    (node, dtype), (other, other_dtype) = pairs
    if _is_literal(node):
        node, dtype = other, other_dtype
    family = _family(dtype)
    name = _sql(node)
    if family is not None and family in _ARTICLE:
        return f"compare {name} with {_ARTICLE[family]}{family}"
    return f"compare {name} with a value of type {dtype}"


_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _mixed_metadata_hint(name: str, literal: exp.Expr, family: str | None) -> str:
    """What to write for a metadata key read as text, compared with a literal of ``family``.

    Its values are of several JSON types, so each reads as its JSON text: a
    boolean as ``'true'``, a number as its digits. Text orders character by
    character (``'10' < '2'``), so an order of numbers needs a cast.
    """
    value = _unparen(literal)
    text = _sql(value)
    if isinstance(value, exp.Boolean):
        text = "true" if value.this else "false"
    hint = (
        f"when the items give {name} values of several types (text in some, {family} in "
        f"others), every value reads as its JSON text: compare with text for equality, as "
        f"{name} = '{text}'"
    )
    if family != "number":
        return hint
    path = "$" + "".join(f"['{key}']" for key in name.split(".")[1:])
    return (
        f"{hint}; text orders character by character ('10' < '2'), so to order them as "
        f"numbers filter with a Polars expression, as pl.col('metadata').str."
        f'json_path_match("{path}").cast(pl.Float64, strict=False) > {text}'
    )


# ---------------------------------------------------------------------------
# handlers: one per allowed node type


def _names(low: _Lowering, node: exp.Expr) -> list[str]:
    """The names of a column (one) or of ``metadata.<key>...`` (several), as written."""
    parts: list[exp.Expr] = []
    current: exp.Expr = node
    while isinstance(current, exp.Dot):
        parts.insert(0, current.expression)
        current = current.this
    if not isinstance(current, exp.Column):
        raise low.refuse(current)
    low.only(current, "this", "table", "db", "catalog")
    parts[:0] = current.parts
    if not all(isinstance(p, exp.Identifier) for p in parts):
        raise low.refuse(node)
    return [p.name for p in parts]


def _column(low: _Lowering, node: exp.Expr) -> pl.Expr:
    names = _names(low, node)
    if len(names) == 1:
        (name,) = names
        if name not in low.columns:
            close = difflib.get_close_matches(name, list(low.columns), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise low.error(
                node,
                f"unknown column {name!r}: {hint}the columns are {', '.join(low.columns)}",
            )
        return pl.col(name)
    if names[0] == "metadata" and "metadata" not in low.columns:
        raise low.error(
            node,
            f"metadata.<key> needs a 'metadata' column; the columns are {', '.join(low.columns)}",
        )
    if names[0] != "metadata":
        raise low.error(
            node,
            f"{'.'.join(names)} is not allowed: only metadata.<key> reaches into a value "
            "(a field of the metadata JSON object)",
        )
    _check_one_type(low, node, names)
    _check_nested_keys(low, node, names)
    expr = low.metadata(names)
    for key in names[1:]:
        expr = expr.struct.field(key)
    return expr


def path_struct(dtype: pl.Struct, keys: Sequence[str]) -> pl.Struct:
    """``dtype`` with the fields on the path ``keys`` only (the last one's whole type).

    What to decode the metadata JSON to for one path: the other keys are
    not decoded, so a key whose values have no one type elsewhere does not
    fail it.

    Examples
    --------
    >>> path_struct(pl.Struct({"a": pl.Struct({"b": pl.Int64, "c": pl.String}), "d": pl.Int64}),
    ...             ["a", "b"])
    Struct({'a': Struct({'b': Int64})})
    """
    field = next(f for f in dtype.fields if f.name == keys[0])
    inner = field.dtype
    if len(keys) > 1 and isinstance(inner, pl.Struct):
        inner = path_struct(inner, keys[1:])
    return pl.Struct([pl.Field(keys[0], inner)])


def _read_path(keys: Sequence[str], leaf: pl.DataType) -> pl.Expr:
    """The struct of one metadata path to a scalar, its value read as text then as ``leaf``.

    The type is that of the rows a predicate reaches, but Polars may
    evaluate the predicate on more rows (a filter before it is merged with
    it, or it is pushed below a join), whose values of the key may be of
    another JSON type. Read as text (``json_path_match``) and converted
    leniently (a value of another type is null), those rows cannot fail the
    query, and the rows the predicate reaches read as a decode would read
    them.
    """
    quoted = (key.replace("\\", "\\\\").replace("'", "\\'") for key in keys)
    text = pl.col("metadata").str.json_path_match("$" + "".join(f"['{k}']" for k in quoted))
    value: pl.Expr
    if leaf == pl.Boolean:
        value = pl.when(text == "true").then(True).when(text == "false").then(False)
    elif leaf == pl.Null:
        value = pl.when(text.is_null()).then(None)
    else:
        value = text if leaf == pl.String else text.cast(leaf, strict=False)
    for key in reversed(keys):
        value = pl.struct(value.alias(key))
    return value


def _mixed(dtype: pl.DataType | DataTypeClass | None) -> bool:
    """Whether ``dtype`` is or holds :data:`MIXED_JSON`."""
    if dtype is pl.Object or isinstance(dtype, pl.Object):
        return True
    if isinstance(dtype, pl.Struct):
        return any(_mixed(f.dtype) for f in dtype.fields)
    if isinstance(dtype, pl.List | pl.Array):
        return _mixed(dtype.inner)
    return False


def _check_one_type(low: _Lowering, node: exp.Expr, names: list[str]) -> None:
    """Refuse ``metadata.a.b`` when the items' values of ``a.b`` (or in them) have no one type."""
    for depth in range(2, len(names) + 1):
        path = names[:depth]
        dtype = low.path_dtype(path)
        if isinstance(dtype, pl.Object) or (depth == len(names) and _mixed(dtype)):
            raise low.error(
                node,
                f"{'.'.join(path)} holds values of different JSON types across the items (an "
                "object in one and text in another, or a boolean and a number), which no one "
                "type compares; filter on a key whose values share a type, or with a Polars "
                f"expression on the JSON text (pl.col('metadata').str.json_path_match(...))",
            )


def _check_nested_keys(low: _Lowering, node: exp.Expr, names: list[str]) -> None:
    """Refuse ``metadata.a.b`` when the metadata type has no key ``b`` in ``a``.

    Only with the metadata's struct type known, below its first level
    (whose keys the caller checks against every item's keys).
    """
    metadata = None if low.dtypes is None else low.dtypes.get("metadata")
    if not isinstance(metadata, pl.Struct):
        return
    top = next((f.dtype for f in metadata.fields if f.name == names[1]), None)
    dtype = None if top is None else _instance(top)
    for depth in range(2, len(names)):
        parent, key = ".".join(names[:depth]), names[depth]
        if dtype is None:
            return
        if not isinstance(dtype, pl.Struct):
            raise low.error(node, f"{parent} is {describe_type(dtype)}: it has no key {key!r}")
        keys = [f.name for f in dtype.fields]
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise low.error(
                node,
                f"no item has the metadata key {'.'.join(names[1 : depth + 1])!r}: {hint}"
                f"the keys of {parent} are {keys}",
            )
        dtype = _instance(next(f.dtype for f in dtype.fields if f.name == key))


def _literal(low: _Lowering, node: exp.Expr) -> pl.Expr:
    return pl.lit(low.literal(node))


def _comparison(op: Callable[[pl.Expr, pl.Expr], pl.Expr], *, ordered: bool) -> Handler:
    def handle(low: _Lowering, node: exp.Expr) -> pl.Expr:
        low.only(node, "this", "expression")
        left, right = low.lower(node.this), low.lower(node.expression)
        low.comparable(node, node.this, node.expression, ordered=ordered)
        left, right = _compared(low, [(node.this, left), (node.expression, right)], ordered)
        return op(left, right)

    return handle


def _compared(
    low: _Lowering, operands: list[tuple[exp.Expr, pl.Expr]], ordered: bool
) -> list[pl.Expr]:
    """The lowered operands of a comparison, an enumeration read as its text where it must be.

    An enumeration keeps its type when compared with itself or with string
    literals (which it was checked to hold), so an ordered comparison
    (``<``, ``BETWEEN``) follows its order (``public < internal <
    confidential < restricted``), as a Polars expression does. Against
    other text, and a categorical ordered, it is read as its text: text
    order applies and no value is cast into the enumeration.
    """
    dtypes = [low.dtype(node) for node, _ in operands]
    enums = [d for d in dtypes if isinstance(d, pl.Enum | pl.Categorical)]
    others = [
        _unparen(node)
        for (node, _), dtype in zip(operands, dtypes, strict=True)
        if _family(dtype) == "text" and dtype not in enums
    ]
    ranked = not ordered or all(isinstance(d, pl.Enum) for d in enums)
    keep = ranked and all(d == enums[0] for d in enums)
    if keep and all(isinstance(n, exp.Literal) and n.is_string for n in others):
        # A NULL takes the enumeration's type: Polars orders no enumeration against Null.
        return [
            expr.cast(enums[0]) if enums and dtype == pl.Null else expr
            for (_, expr), dtype in zip(operands, dtypes, strict=True)
        ]
    return [
        _text(low, node) if dtype in enums else expr
        for (node, expr), dtype in zip(operands, dtypes, strict=True)
    ]


def _logic(op: Callable[[pl.Expr, pl.Expr], pl.Expr]) -> Handler:
    def handle(low: _Lowering, node: exp.Expr) -> pl.Expr:
        low.only(node, "this", "expression")
        left, right = low.lower(node.this), low.lower(node.expression)
        low.takes(node, node.this, "boolean")
        low.takes(node, node.expression, "boolean")
        return op(left, right)

    return handle


def _text(low: _Lowering, node: exp.Expr) -> pl.Expr:
    """A text value as ``String``: an enumeration or categorical column is cast to it."""
    expr = low.lower(node)
    return expr if low.dtype(node) == pl.String else expr.cast(pl.String)


def _not(low: _Lowering, node: exp.Expr) -> pl.Expr:
    low.only(node, "this")
    inner = low.lower(node.this)
    low.takes(node, node.this, "boolean")
    if isinstance(_unparen(node.this), exp.Column | exp.Dot | exp.Func):
        inner = inner.cast(pl.Boolean)  # a column used as a condition must hold booleans
    return inner.not_()


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _paren(low: _Lowering, node: exp.Expr) -> pl.Expr:
    low.only(node, "this")
    return low.lower(node.this)


def _neg(low: _Lowering, node: exp.Expr) -> pl.Expr:
    low.only(node, "this")
    if isinstance(node.this, exp.Literal) and not node.this.is_string:
        return pl.lit(low.literal(node))  # a negative number, typed as one
    negated = -low.lower(node.this)
    low.takes(node, node.this, "number")
    return negated


def _in(low: _Lowering, node: exp.Expr) -> pl.Expr:
    if node.args.get("query") is not None:
        raise low.refuse(node.args["query"])
    low.only(node, "this", "expressions")
    items = node.expressions
    if not items:
        raise low.error(node, "an IN list needs at least one value")
    values = [low.literal(item) for item in items]
    present = [v for v in values if v is not None]
    kinds = {
        "number" if isinstance(v, int | float) and not isinstance(v, bool) else type(v)
        for v in present
    }
    if len(kinds) > 1:
        raise low.error(node, "an IN list mixes types: give values of one type")
    target = low.lower(node.this)
    for item in items:
        low.comparable(node, node.this, item)
    if not present:
        return pl.lit(None, dtype=pl.Boolean)
    if isinstance(present[0], str):
        member = target.is_in(pl.Series([present]))  # one list value: a literal
    else:  # numbers compare across integer and float types, as with =
        member = reduce(operator.or_, (target == value for value in present))
    if len(present) < len(values):  # SQL: no match against a list with NULL is null, not false
        member = member | pl.lit(None, dtype=pl.Boolean)
    return member


def _like_regex(pattern: str) -> str:
    parts = (".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return "^" + "".join(parts) + "$"


def _like(case_insensitive: bool) -> Handler:
    def handle(low: _Lowering, node: exp.Expr) -> pl.Expr:
        low.only(node, "this", "expression", "negate")
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise low.error(
                node, f"{node.key.upper()} needs a string literal pattern, such as 'a%'"
            )
        low.takes(node, node.this, "text")
        flags = "(?si)" if case_insensitive else "(?s)"
        expr = _text(low, node.this).str.contains(flags + _like_regex(str(pattern.this)))
        return expr.not_() if node.args.get("negate") else expr

    return handle


def _escape(low: _Lowering, node: exp.Expr) -> pl.Expr:
    raise low.error(node, "LIKE ... ESCAPE is not allowed: the patterns have no escape character")


def _between(low: _Lowering, node: exp.Expr) -> pl.Expr:
    low.only(node, "this", "low", "high")
    nodes = [node.args[name] for name in ("this", "low", "high")]
    lowered = [low.lower(n) for n in nodes]
    low.comparable(node, node.this, node.args["low"], ordered=True)
    low.comparable(node, node.this, node.args["high"], ordered=True)
    # As SQL defines it, two comparisons: each bound is compared with the target alone.
    above, start = _compared(low, [(nodes[0], lowered[0]), (nodes[1], lowered[1])], ordered=True)
    below, end = _compared(low, [(nodes[0], lowered[0]), (nodes[2], lowered[2])], ordered=True)
    return (above >= start) & (below <= end)


def _is(low: _Lowering, node: exp.Expr) -> pl.Expr:
    low.only(node, "this", "expression", "negate")
    if not isinstance(node.expression, exp.Null):
        raise low.error(node, "IS takes only NULL (IS NULL, IS NOT NULL); use = for values")
    target = low.lower(node.this)
    return target.is_not_null() if node.args.get("negate") else target.is_null()


def _function(method: Callable[[pl.Expr], pl.Expr], family: str) -> Handler:
    def handle(low: _Lowering, node: exp.Expr) -> pl.Expr:
        low.only(node, "this")
        low.takes(node, node.this, family)
        argument = _text(low, node.this) if family == "text" else low.lower(node.this)
        return method(argument)

    return handle


def _coalesce(low: _Lowering, node: exp.Expr) -> pl.Expr:
    low.only(node, "this", "expressions", "is_nvl", "is_null")
    arguments = [low.lower(node.this), *(low.lower(e) for e in node.expressions)]
    for other in node.expressions:
        low.comparable(node, node.this, other)
    return pl.coalesce(arguments)


_TIMESTAMP_TYPES: Final = frozenset({exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ})


def _cast(low: _Lowering, node: exp.Expr) -> pl.Expr:
    low.only(node, "this", "to")
    to = node.args["to"]
    value = node.this
    kind = to.this if isinstance(to, exp.DataType) else None
    if (
        kind in _TIMESTAMP_TYPES | {exp.DataType.Type.DATE}
        and not to.expressions
        and isinstance(value, exp.Literal)
        and value.is_string
    ):
        text = str(value.this)
        if finer_than_microseconds(text):
            raise low.error(node, f"{text!r} {FINE_TIME_MESSAGE}")
        try:
            if kind == exp.DataType.Type.DATE:
                return pl.lit(date.fromisoformat(text))
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise low.error(
                node, f"{text!r} is not an ISO 8601 {kind.value.lower()}, such as '2025-03-01'"
            ) from None
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        return pl.lit(moment, dtype=pl.Datetime("us", "UTC"))
    shown = to.sql(dialect=_DIALECT) if isinstance(to, exp.Expr) else "?"
    raise low.error(
        node,
        f"a cast to {shown} is not allowed: casts are only TIMESTAMP '...' and DATE '...' "
        "of a string literal",
    )


Handler = Callable[[_Lowering, exp.Expr], pl.Expr]

_HANDLERS: Final[dict[type[exp.Expr], Handler]] = {
    exp.Column: _column,
    exp.Dot: _column,
    exp.Literal: _literal,
    exp.Boolean: _literal,
    exp.Null: _literal,
    exp.EQ: _comparison(lambda a, b: a == b, ordered=False),
    exp.NEQ: _comparison(lambda a, b: a != b, ordered=False),
    exp.LT: _comparison(lambda a, b: a < b, ordered=True),
    exp.LTE: _comparison(lambda a, b: a <= b, ordered=True),
    exp.GT: _comparison(lambda a, b: a > b, ordered=True),
    exp.GTE: _comparison(lambda a, b: a >= b, ordered=True),
    exp.And: _logic(lambda a, b: a & b),
    exp.Or: _logic(lambda a, b: a | b),
    exp.Not: _not,
    exp.Paren: _paren,
    exp.Neg: _neg,
    exp.In: _in,
    exp.Like: _like(case_insensitive=False),
    exp.ILike: _like(case_insensitive=True),
    exp.Escape: _escape,
    exp.Between: _between,
    exp.Is: _is,
    exp.Lower: _function(lambda e: e.str.to_lowercase(), "text"),
    exp.Upper: _function(lambda e: e.str.to_uppercase(), "text"),
    exp.Length: _function(lambda e: e.str.len_chars(), "text"),
    exp.Abs: _function(lambda e: e.abs(), "number"),
    exp.Coalesce: _coalesce,
    exp.Cast: _cast,
}


# ---------------------------------------------------------------------------
# tokens: comments and statement separators are refused before parsing


def _tokens(text: str) -> list[Token]:
    try:
        tokens: list[Token] = _DIALECT.tokenize(text)
    except TokenError as exc:
        raise PredicateError(f"cannot read the predicate: {exc}", predicate=text) from None
    comment = "a comment is not allowed: it would silently cut or hide part of the predicate"
    spans = [(0, 0), *((t.start, t.end + 1) for t in tokens), (len(text), len(text))]
    for (_, end), (start, _) in itertools.pairwise(spans):
        gap = text[end:start]
        if gap.strip():  # the tokenizer skipped something that is not white space: a comment
            offset = end + len(gap) - len(gap.lstrip())
            raise PredicateError(comment, predicate=text, position=offset)
    for token in tokens:
        if token.comments:  # comments sqlglot attached to a token, should a gap not show one
            raise PredicateError(comment, predicate=text, position=token.start)
        if token.token_type == TokenType.SEMICOLON:
            raise PredicateError(
                "';' is not allowed: a predicate is one expression, not statements",
                predicate=text,
                position=token.start,
            )
    if not tokens:
        raise PredicateError("the predicate is empty", predicate=text)
    return tokens


@lru_cache(maxsize=256)
def _parse(
    text: str,
    columns: tuple[str, ...],
    dtypes: tuple[tuple[str, pl.DataType], ...] | None,
    decode: bool = False,
) -> pl.Expr:
    tokens = _tokens(text)
    try:
        trees = _DIALECT.parser().parse(tokens, text)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        description = str(first.get("description") or exc)
        missing = re.match(
            r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>", description
        )
        if missing:
            description = f"{missing[2]} is incomplete (its {missing[1]} is missing)"
        col = first.get("col")
        position = None
        if isinstance(col, int) and first.get("line") == 1:
            position = max(col - 1, 0)
        raise PredicateError(
            f"cannot parse the predicate: {description}", predicate=text, position=position
        ) from None
    except RecursionError:
        raise PredicateError("the predicate is nested too deeply", predicate=text) from None
    if len(trees) != 1 or trees[0] is None:
        raise PredicateError("a predicate is one expression", predicate=text)
    try:
        schema = None if dtypes is None else dict(dtypes)
        lowering = _Lowering(text, columns, schema, decode=decode)
        expr = lowering.lower(trees[0])
        lowering.condition(trees[0])
        return expr
    except RecursionError:
        raise PredicateError("the predicate is nested too deeply", predicate=text) from None


def parse_predicate(
    text: str,
    columns: Sequence[str] | Mapping[str, pl.DataType] = POLARS_SCHEMA,
    *,
    decode_metadata: bool = False,
) -> pl.Expr:
    """Lower a string predicate to a Polars expression, refusing anything outside the grammar.

    Parameters
    ----------
    text
        The predicate, in the grammar of :mod:`cognoxium.items.predicate`
        (for example ``"metadata.topic = 'billing' AND role <> 'tool'"``).
    columns
        The columns the predicate may read: their names, or a mapping of
        each name to its Polars type (a ``polars.Schema``; by default the
        item schema's :data:`~cognoxium.items.schema.POLARS_SCHEMA`).
        ``metadata.<key>`` needs ``metadata`` among them; with types, a
        ``metadata`` of type ``Struct`` gives the types of its keys. With
        types, every comparison is checked: each side's values must compare
        with the other's (see :func:`comparable_types`), ``lower``,
        ``upper``, ``length``, ``LIKE`` and ``ILIKE`` take text (an
        enumeration column is read as its ``String`` value) and ``abs`` a
        number.
    decode_metadata
        With ``metadata`` typed as a ``Struct`` in ``columns``: read
        ``metadata.<key>`` from the JSON text column ``metadata`` itself,
        decoding the key's field to its type there, so the expression runs
        over items as they are stored (and Polars can push it into a
        Parquet scan).

    Returns
    -------
    polars.Expr
        An expression over ``columns``; ``metadata.<key>`` reads
        ``pl.col("metadata").struct.field(key)``, so ``metadata`` must be
        decoded from its JSON text to a struct before the expression runs,
        unless ``decode_metadata`` is given. Nothing runs and no file is
        read here.

    Raises
    ------
    PredicateError
        If the text does not parse, holds a comment or a ``;``, names an
        unknown column, or uses a construct outside the grammar (a subquery,
        a table function such as ``read_csv``, a function not in
        :data:`PREDICATE_FUNCTIONS`, ``*``, a cast other than ``TIMESTAMP
        '...'`` or ``DATE '...'``), or, with types, compares values that
        do not compare (``priority = 'high'``, ``created_at >
        '2025-11-01'``), compares an enumeration column with a string it
        never holds (``role = 'admin'``), or gives a function, ``LIKE``,
        ``AND``, ``OR`` or ``NOT`` an argument of the wrong type.
        The message names the construct, its position and why (for a
        type, the clause, each side and its type, and what to write
        instead); it depends only on ``text`` and ``columns``.

    Examples
    --------
    >>> expr = parse_predicate("metadata.topic = 'billing' AND priority BETWEEN 1 AND 3")
    >>> sorted(set(expr.meta.root_names()))
    ['metadata', 'priority']
    >>> parse_predicate("lower(role) LIKE 'u%'", ["role"])
    <Expr ['col("role").strict_cast(String…'] at ...>
    >>> parse_predicate("role = 'user' -- AND trust = 'trusted'")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PredicateError: predicate "role = 'user' -- AND trust = 'trusted'",
    at character 15: a comment is not allowed: it would silently cut or hide part of the predicate
    """
    if not isinstance(text, str):
        raise PredicateError(f"a predicate is a string, got {type(text).__name__}", predicate="")
    if isinstance(columns, Mapping):
        dtypes = tuple((str(name), _instance(dtype)) for name, dtype in columns.items())
        return _parse(text, tuple(name for name, _ in dtypes), dtypes, decode_metadata)
    return _parse(text, tuple(columns), None)


def _instance(dtype: pl.DataType | DataTypeClass) -> pl.DataType:
    """A type as an instance (``pl.Int64()`` for the class ``pl.Int64``)."""
    return dtype() if isinstance(dtype, DataTypeClass) else dtype
