"""Logical plan nodes of a :class:`~cognoxium.frame.frame.CognitionFrame`.

A plan is a tree of immutable nodes. Every node is a frozen, slotted,
keyword-only dataclass holding only hashable values, so plans compare and hash
structurally: two frames built by the same calls have equal plans. Polars
expressions are held in :class:`Expression`, which compares by the
expression's serialized form.

Every node checks itself when it is built: it resolves its output schema by
lowering itself over empty frames of its inputs' schemas, so a bad plan (an
unknown column, a non-boolean predicate, a negative limit) raises
:class:`~cognoxium.exceptions.PlanError` at the call that made it, not at
``collect()``.

Barrier nodes (``barrier = True``) are never crossed by an optimizer rule:
nothing is moved from one side of them to the other. Redact, quarantine and
demote are barriers. Filters additionally never cross a rank
(:class:`~cognoxium.engine.ranks.Rank`, one node type per rank method, declared
in :mod:`cognoxium.engine.ranks`), :class:`Dedupe`, :class:`Limit` or
:class:`TopK`, because each of those depends on which rows reach it.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from functools import lru_cache, reduce
from typing import TYPE_CHECKING, Any, ClassVar, Final

import polars as pl
from typing_extensions import override

from cognoxium.exceptions import PlanError
from cognoxium.items._checks import to_utc

if TYPE_CHECKING:
    from cognoxium.governance.redaction import Recogniser, RecogniserSet
    from cognoxium.items.scan import ItemScan

__all__ = [
    "JOIN_HOWS",
    "TEXT_COLUMNS",
    "Dedupe",
    "Demote",
    "Expression",
    "Filter",
    "Join",
    "LazySource",
    "Limit",
    "Node",
    "Quarantine",
    "Redact",
    "Scan",
    "Select",
    "Sort",
    "Source",
    "TopK",
    "WithColumns",
    "changes_item_values",
    "check_time",
    "format_plan",
    "polars_error_text",
    "rewrite",
    "walk",
]

JOIN_HOWS: Final = ("inner", "left", "full", "semi", "anti")
"""Join strategies a :class:`Join` accepts."""

# ---------------------------------------------------------------------------
# expressions

# Function nodes of a serialized expression that map each row to one value
# computed from that row alone. Anything not listed counts as not elementwise,
# which only ever makes the optimizer more careful.
_ELEMENTWISE_FUNCTIONS: Final = frozenset(
    {
        "Abs",
        "AsStruct",
        "Ceil",
        "Clip",
        "Coalesce",
        "Exp",
        "FillNull",
        "Floor",
        "Log",
        "Log1p",
        "MaxHorizontal",
        "MeanHorizontal",
        "MinHorizontal",
        "Negate",
        "Round",
        "RoundSF",
        "Sign",
        "SumHorizontal",
        "Boolean.AllHorizontal",
        "Boolean.AnyHorizontal",
        "Boolean.IsBetween",
        "Boolean.IsFinite",
        "Boolean.IsIn",
        "Boolean.IsInfinite",
        "Boolean.IsNan",
        "Boolean.IsNotNan",
        "Boolean.IsNotNull",
        "Boolean.IsNull",
        "Boolean.Not",
    }
)
_NAMESPACES: Final = frozenset(
    {
        "Boolean",
        "Sql",
        "StringExpr",
        "TemporalExpr",
        "StructExpr",
        "ListExpr",
        "Pow",
        "Trigonometry",
    }
)
_ELEMENTWISE_NAMESPACES: Final = frozenset(
    {"StringExpr", "TemporalExpr", "StructExpr", "ListExpr", "Pow", "Trigonometry"}
)
_NOT_ELEMENTWISE: Final = frozenset(
    {
        "StringExpr.ConcatVertical",  # str.join aggregates
        "StringExpr.Strptime",  # may infer its format from the data
        "StringExpr.ToDecimal",  # infers its scale from the data
        "StructExpr.SelectFields",  # several outputs
    }
)


def _function_id(function: Any) -> str:
    if isinstance(function, str):
        return function
    if isinstance(function, dict) and len(function) == 1:
        ((name, body),) = function.items()
        if name in _NAMESPACES:
            if isinstance(body, str):
                return f"{name}.{body}"
            if isinstance(body, dict) and len(body) == 1:
                return f"{name}.{next(iter(body))}"
            return f"{name}.?"
        return str(name)
    return "?"


def _is_literal(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"Literal"}


def _is_elementwise(node: Any) -> bool:
    """Whether a serialized expression maps each row to a value of that row alone."""
    if not isinstance(node, dict) or len(node) != 1:
        return False  # "Len", "Element" and other bare nodes
    ((kind, body),) = node.items()
    if kind == "Column":
        return True
    if kind == "Literal":
        return isinstance(body, dict) and set(body) <= {"Dyn", "Scalar"}
    if kind == "Alias":
        return _is_elementwise(body[0])
    if kind == "KeepName":
        return _is_elementwise(body)
    if kind in ("RenameAlias", "Cast"):
        return _is_elementwise(body["expr"])
    if kind == "BinaryExpr":
        return _is_elementwise(body["left"]) and _is_elementwise(body["right"])
    if kind == "Ternary":
        return all(_is_elementwise(body[k]) for k in ("predicate", "truthy", "falsy"))
    if kind == "Eval":
        # list.eval runs inside each row's list
        return body.get("variant") == "List" and _is_elementwise(body["expr"])
    if kind == "Function":
        fid = _function_id(body["function"])
        inputs = body["input"]
        if fid in ("Boolean.IsIn", "Sql.IsIn"):
            return _is_elementwise(inputs[0]) and all(
                _is_literal(i) or _is_elementwise(i) for i in inputs[1:]
            )
        namespace = fid.partition(".")[0]
        known = fid in _ELEMENTWISE_FUNCTIONS or (
            namespace in _ELEMENTWISE_NAMESPACES and fid not in _NOT_ELEMENTWISE
        )
        return known and all(_is_elementwise(i) for i in inputs)
    return False


def _struct_access(node: Any, column: str, fields: list[str]) -> bool:
    """Whether a serialized expression applies a struct operation to ``column`` directly.

    Appends the field names it reads by name (``struct.field``) to ``fields``.
    """
    if isinstance(node, list):
        children: list[Any] = node
    elif isinstance(node, dict):
        children = list(node.values())
    else:
        return False
    used = False
    for child in children:  # every child, not just up to the first use: fields are collected
        used = _struct_access(child, column, fields) or used
    if not isinstance(node, dict):
        return used
    function = node.get("Function")
    if isinstance(function, dict) and function.get("input", [None])[:1] == [{"Column": column}]:
        op = function.get("function")
        if isinstance(op, dict) and "StructExpr" in op:
            used = True
            body = op["StructExpr"]
            name = body.get("FieldByName") if isinstance(body, dict) else None
            if isinstance(name, str) and name not in fields:
                fields.append(name)
    struct_eval = node.get("StructEval")
    if isinstance(struct_eval, dict) and struct_eval.get("expr") == {"Column": column}:
        used = True
    return used


def _has_key(node: Any, key: str) -> bool:
    if isinstance(node, dict):
        return key in node or any(_has_key(v, key) for v in node.values())
    if isinstance(node, list):
        return any(_has_key(v, key) for v in node)
    return False


@dataclass(frozen=True, slots=True, eq=False)
class Expression:
    """A Polars expression held so that plan nodes stay hashable and comparable.

    Two expressions are equal when their serialized forms are equal (the
    same tree, literals and names). An expression that cannot be serialized
    (one calling a Python function) is equal only to itself.

    Attributes
    ----------
    expr
        The Polars expression.
    key
        The serialized form (JSON text), or the ``id`` of ``expr`` when it
        cannot be serialized.
    columns
        The input columns it reads (``expr.meta.root_names()``).
    elementwise
        Whether every output row depends on the same input row only (no
        aggregation, window, sort, shift or Python function). Decided
        conservatively: ``False`` when unsure.
    exact_columns
        Whether ``columns`` is known to be everything it reads (no selector
        such as ``pl.all()``).

    Examples
    --------
    >>> a = Expression.of(pl.col("priority") > 1)
    >>> a == Expression.of(pl.col("priority") > 1), a.columns, a.elementwise
    (True, ('priority',), True)
    >>> Expression.of(pl.col("priority") > pl.col("priority").mean()).elementwise
    False
    """

    expr: pl.Expr
    key: str | int
    columns: tuple[str, ...]
    elementwise: bool
    exact_columns: bool

    @classmethod
    def of(cls, value: pl.Expr | str) -> Expression:
        """Wrap a Polars expression, or a column name.

        Raises
        ------
        PlanError
            If ``value`` is neither.
        """
        if isinstance(value, str):
            value = pl.col(value)
        if not isinstance(value, pl.Expr):
            raise PlanError(f"expected a Polars expression or a column name, got {value!r}")
        try:
            columns = tuple(value.meta.root_names())
        except pl.exceptions.PolarsError:
            columns = ()
        try:
            text = value.meta.serialize(format="json")
        except (pl.exceptions.PolarsError, TypeError, ValueError):
            return cls(value, id(value), columns, False, False)
        assert isinstance(text, str)
        tree = json.loads(text)
        if _has_key(tree, "AnonymousFunction"):
            # A Python function serializes only where cloudpickle is installed;
            # either way it stays opaque: equal only to itself, reads unknown.
            return cls(value, id(value), columns, False, False)
        return cls(
            value,
            text,
            columns,
            _is_elementwise(tree),
            not _has_key(tree, "Selector"),
        )

    @property
    def serializable(self) -> bool:
        """Whether the expression serializes (it calls no Python function)."""
        return isinstance(self.key, str)

    def conjuncts(self) -> tuple[Expression, ...]:
        """The operands of a top-level chain of ``&`` (SQL ``AND``), in order.

        Returns ``(self,)`` when the expression is not such a chain.

        Examples
        --------
        >>> e = Expression.of((pl.col("a") > 1) & (pl.col("b") == "x") & pl.col("c"))
        >>> [str(p) for p in e.conjuncts()]
        ['[(col("a")) > (dyn int: 1)]', '[(col("b")) == ("x")]', 'col("c")']
        """
        if not isinstance(self.key, str):
            return (self,)
        parts: list[Any] = []

        def split(node: Any) -> None:
            body = node.get("BinaryExpr") if isinstance(node, dict) and len(node) == 1 else None
            if isinstance(body, dict) and body.get("op") == "And":
                split(body["left"])
                split(body["right"])
            else:
                parts.append(node)

        split(json.loads(self.key))
        if len(parts) == 1:
            return (self,)
        return tuple(
            Expression.of(pl.Expr.deserialize(io.StringIO(json.dumps(part)), format="json"))
            for part in parts
        )

    @staticmethod
    def all_of(parts: Sequence[Expression]) -> Expression:
        """The ``&`` of one or more expressions, left to right.

        Raises
        ------
        PlanError
            If ``parts`` is empty.
        """
        if not parts:
            raise PlanError("all_of needs at least one expression")
        if len(parts) == 1:
            return parts[0]
        return Expression.of(reduce(lambda a, b: a & b, (p.expr for p in parts)))

    def struct_fields(self, column: str) -> tuple[str, ...] | None:
        """How this expression reads ``column`` as a struct.

        Returns
        -------
        tuple of str or None
            ``None`` when no struct operation (``struct.field``,
            ``struct.unnest``, ...) is applied to ``column`` itself;
            otherwise the fields read by name, in first-seen order (empty
            for operations that name no field). Also ``None`` for an
            expression that cannot be serialized.

        Examples
        --------
        >>> meta = pl.col("metadata").struct
        >>> Expression.of(meta.field("topic") == "x").struct_fields("metadata")
        ('topic',)
        >>> Expression.of(meta.unnest()).struct_fields("metadata")
        ()
        >>> Expression.of(pl.col("text") == "x").struct_fields("metadata") is None
        True
        """
        if not isinstance(self.key, str):
            return None
        fields: list[str] = []
        return tuple(fields) if _struct_access(json.loads(self.key), column, fields) else None

    def is_column(self, name: str) -> bool:
        """Whether this is exactly ``pl.col(name)``, unaliased."""
        return self.key == Expression.of(pl.col(name)).key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expression) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return str(self.expr)

    def __repr__(self) -> str:
        return f"Expression({self.expr})"


def _exprs(values: tuple[Expression, ...]) -> str:
    return ", ".join(str(v) for v in values)


# ---------------------------------------------------------------------------
# nodes


@dataclass(frozen=True, slots=True, eq=False)
class Source:
    """An in-memory table scanned by :class:`Scan`; equal only to itself.

    It holds a copy of the frame it is given (Polars' ``clone``, which
    shares the column buffers and costs nothing per row): writing into the
    caller's frame afterwards (``df[0, "text"] = ...``) changes no plan
    over it, as a ``LazyFrame`` made from it does not change.

    Attributes
    ----------
    frame
        The rows, usually in the canonical item schema.
    cache
        Facts derived from ``frame`` (for example the inferred metadata struct
        type), computed once.
    """

    frame: pl.DataFrame
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "frame", self.frame.clone())

    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return self.frame.columns

    def lazy(self) -> pl.LazyFrame:
        """The rows as a LazyFrame."""
        return self.frame.lazy()

    def label(self) -> str:
        """What :class:`Scan` shows of it."""
        return f"{self.frame.height} rows"

    def __repr__(self) -> str:
        return f"Source({self.frame.height} rows × {self.frame.width} columns)"


def _run_empty(lowered: pl.LazyFrame) -> None:
    """Run a node's own query on no rows, where Polars checks the types its schema does not.

    Resolving a schema does not check every operation's types: comparing a
    number with a string, ``str`` methods on a number and ``dt`` methods on
    text resolve and fail only when the query runs. Run on no rows, they
    fail here, when the node is built. Errors that depend on the rows (an
    index past the end of no rows, a literal Series longer than no rows)
    are not the node's: left to the run.
    """
    with contextlib.suppress(
        pl.exceptions.OutOfBoundsError, pl.exceptions.ShapeError, pl.exceptions.NoDataError
    ):
        lowered.collect()


@lru_cache(maxsize=64)
def _empty_frame(schema: tuple[tuple[str, pl.DataType], ...]) -> pl.LazyFrame:
    """An empty LazyFrame of ``schema``, built once: each plan node resolves its schema on one."""
    return pl.LazyFrame(schema=dict(schema))


@dataclass(frozen=True, slots=True, eq=False)
class LazySource:
    """Rows read from files or a LazyFrame each time the plan runs; equal only to itself.

    Polars' optimizer pushes the plan's predicates and projections into the
    scan (see :mod:`cognoxium.items.scan`), which validates the rows it reads.

    Attributes
    ----------
    scan
        The item scan.
    cache
        Facts derived from the rows (for example the inferred metadata struct
        type), computed once.
    """

    scan: ItemScan
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return self.scan.schema.names()

    def lazy(self) -> pl.LazyFrame:
        """The scan as a LazyFrame."""
        return self.scan.lazy()

    def label(self) -> str:
        """What :class:`Scan` shows of it."""
        return self.scan.label()

    def __repr__(self) -> str:
        return f"LazySource({self.scan.label()})"


# Where Polars' own message ends and its dump of the plan and context begins.
_POLARS_TRAILERS: Final = (
    "Resolved plan until failure:",
    "This error occurred with the following context stack:",
    "Error originated just after this operation:",
)


def polars_error_text(exc: BaseException) -> str:
    """Polars' own message of ``exc`` on one line: its type and text, without the plan dump.

    Examples
    --------
    >>> try:
    ...     pl.LazyFrame({"a": [1]}).filter(pl.col("a")).collect()
    ... except pl.exceptions.PolarsError as exc:
    ...     print(polars_error_text(exc))
    InvalidOperationError: filter predicate must be of type `Boolean`, got `Int64`
    """
    text = str(exc)
    for trailer in _POLARS_TRAILERS:
        text = text.split(trailer, 1)[0]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {' '.join(lines)}" if lines else type(exc).__name__


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """Base of every plan node: children, output schema and self-checks.

    Attributes
    ----------
    schema
        The output columns and their types, resolved when the node is built.
    barrier
        Class attribute: no optimizer rule moves a node across this one.
    child_fields
        Class attribute: the names of the fields holding child nodes.
    """

    barrier: ClassVar[bool] = False
    child_fields: ClassVar[tuple[str, ...]] = ("input",)
    schema: pl.Schema = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        self._check()
        object.__setattr__(self, "schema", self._resolve_schema())

    def _check(self) -> None:
        """Raise PlanError for arguments that no schema resolution would catch."""

    def _resolve_schema(self) -> pl.Schema:
        from cognoxium.engine.lowering import lower_node

        inputs = [_empty_frame(tuple(child.schema.items())) for child in self.children]
        try:
            for probe in self._probes(inputs):
                probe.collect_schema()
            lowered = lower_node(self, inputs)
            schema = lowered.collect_schema()
            if self._runs_on_empty() and all(e.serializable for e in self._expressions()):
                _run_empty(lowered)
            return schema
        except pl.exceptions.PolarsError as exc:
            raise PlanError(
                f"{type(self).__name__}: {polars_error_text(exc)}{self._metadata_hint()}"
            ) from exc

    def _probes(self, inputs: Sequence[pl.LazyFrame]) -> Sequence[pl.LazyFrame]:
        """Extra queries whose schema must resolve, for checks lowering alone would defer."""
        return ()

    def _runs_on_empty(self) -> bool:
        """Whether the node's own query is run on no rows when it is built (see :func:`_run_empty`).

        True for the nodes that evaluate a user's Polars expressions; a node
        holding an expression that calls a Python function is not run.
        """
        return False

    def _expressions(self) -> Iterator[Expression]:
        """The expressions this node holds, in field order."""
        for f in fields(self):
            value = getattr(self, f.name, None)
            values = value if isinstance(value, tuple) else (value,)
            yield from (v for v in values if isinstance(v, Expression))

    def _metadata_hint(self) -> str:
        """A hint for expressions that read the JSON text column ``metadata`` as a struct."""
        if not self.children or self.children[0].schema.get("metadata") != pl.String():
            return ""
        if getattr(self, "metadata_dtype", None) is not None:
            return ""  # a SQL filter decodes metadata to a struct itself
        names: list[str] = []
        used = False
        for expr in self._expressions():
            access = expr.struct_fields("metadata")
            if access is not None:
                used = True
                names.extend(access)
        if not used:
            return ""
        key = names[0] if names else "<key>"
        sql = (
            f", or filter with a SQL predicate such as \"metadata.{key} = '...'\""
            if isinstance(self, Filter)
            else ""
        )
        return (
            "; hint: metadata is a JSON string column, not a struct: read a key with "
            f'pl.col("metadata").str.json_path_match("$.{key}") (a string, or null){sql}'
        )

    @property
    def children(self) -> tuple[Node, ...]:
        """The child nodes, in ``child_fields`` order."""
        return tuple(getattr(self, name) for name in self.child_fields)

    def with_children(self, children: Sequence[Node]) -> Node:
        """Return this node over ``children``; the same object if they are the same."""
        if len(children) != len(self.child_fields):
            raise PlanError(f"{type(self).__name__} takes {len(self.child_fields)} children")
        if all(new is old for new, old in zip(children, self.children, strict=True)):
            return self
        changes: dict[str, Any] = dict(zip(self.child_fields, children, strict=True))
        return replace(self, **changes)

    def label(self) -> str:
        """One line describing this node (without its children)."""
        return type(self).__name__

    def _require(self, columns: Sequence[str], what: str) -> None:
        schema = self.children[0].schema
        missing = [c for c in columns if c not in schema]
        if missing:
            raise PlanError(
                f"{type(self).__name__}: {what} needs columns {missing}, "
                f"which the input does not have (it has {schema.names()})"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan(Node):
    """Read the rows of an in-memory table or a lazy scan, in their stored order.

    ``columns`` (set only by the optimizer, which keeps the table's order)
    narrows the output to those columns, in that order. Nulls and ties: rows are passed
    through unchanged. A :class:`LazySource` is read when the plan runs.
    """

    child_fields = ()
    source: Source | LazySource
    columns: tuple[str, ...] | None = None

    def _check(self) -> None:
        if not isinstance(self.source, Source | LazySource):
            raise PlanError(f"Scan needs a Source, got {type(self.source).__name__}")
        if self.columns is not None:
            names = self.source.columns
            if not self.columns or len(set(self.columns)) != len(self.columns):
                raise PlanError("Scan columns must be distinct and not empty")
            missing = [c for c in self.columns if c not in names]
            if missing:
                raise PlanError(f"Scan: unknown columns {missing}")

    @override
    def label(self) -> str:
        cols = (
            f"{len(self.source.columns)} columns"
            if self.columns is None
            else "columns [" + ", ".join(self.columns) + "]"
        )
        return f"Scan {self.source.label()}; {cols}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Filter(Node):
    """Keep the rows where ``predicate`` is true, in input order.

    A null predicate value drops the row (SQL semantics).
    ``metadata_dtype`` is the struct type a SQL predicate naming
    ``metadata.<key>`` was checked against; such a predicate decodes the
    fields it reads from the ``metadata`` JSON text itself
    (:func:`~cognoxium.items.predicate.parse_predicate` with
    ``decode_metadata``), so the filter reads stored columns only and
    Polars can push it into a Parquet scan.
    """

    input: Node
    predicate: Expression
    metadata_dtype: pl.DataType | None = None

    @override
    def _runs_on_empty(self) -> bool:
        return True

    @override
    def label(self) -> str:
        decode = " (metadata as struct)" if self.metadata_dtype is not None else ""
        return f"Filter {self.predicate}{decode}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Select(Node):
    """Evaluate ``exprs`` over the input and keep only their outputs.

    Row order follows the expressions (column selections keep input order);
    nulls pass through the expressions as Polars defines.
    """

    input: Node
    exprs: tuple[Expression, ...]

    def _check(self) -> None:
        if not self.exprs:
            raise PlanError("select needs at least one expression")

    @override
    def _runs_on_empty(self) -> bool:
        return True

    @override
    def label(self) -> str:
        return f"Select {_exprs(self.exprs)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WithColumns(Node):
    """Add or replace columns computed by ``exprs``; other columns and row order are kept."""

    input: Node
    exprs: tuple[Expression, ...]

    def _check(self) -> None:
        if not self.exprs:
            raise PlanError("with_columns needs at least one expression")

    @override
    def _runs_on_empty(self) -> bool:
        return True

    @override
    def label(self) -> str:
        return f"WithColumns {_exprs(self.exprs)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Join(Node):
    """Join ``input`` (left) with ``other`` (right) on equal ``on`` columns.

    Output order is left order, then right order for rows of one left row.
    Right columns whose names clash with left ones get the suffix
    ``_right``. Null keys never match.
    """

    child_fields = ("input", "other")
    input: Node
    other: Node
    on: tuple[str, ...]
    how: str = "inner"

    def _check(self) -> None:
        if self.how not in JOIN_HOWS:
            raise PlanError(f"unknown join strategy {self.how!r}; use one of {list(JOIN_HOWS)}")
        if not self.on:
            raise PlanError("join needs at least one key column in 'on'")

    @override
    def label(self) -> str:
        return f"Join {self.how} on [{', '.join(self.on)}]"


def _check_keys(node: Sort | TopK) -> None:
    if not node.by:
        raise PlanError(f"{type(node).__name__} needs at least one key")
    if not len(node.by) == len(node.descending) == len(node.nulls_last):
        raise PlanError(
            f"{type(node).__name__}: 'descending' and 'nulls_last' need one value per key "
            f"({len(node.by)} keys)"
        )


def _key_probe(node: Sort | TopK, lf: pl.LazyFrame) -> pl.LazyFrame:
    # Polars resolves a sort's schema without typing its keys: type them here,
    # so a bad key fails when the node is built, not at collect().
    return lf.select([e.expr.alias(f"__key{i}") for i, e in enumerate(node.by)])


def _keys(node: Sort | TopK) -> str:
    parts = []
    for key, desc, nulls_last in zip(node.by, node.descending, node.nulls_last, strict=True):
        parts.append(f"{key} {'desc' if desc else 'asc'}{' nulls last' if nulls_last else ''}")
    return ", ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sort(Node):
    """Sort rows by ``by`` (then by later keys); stable: ties keep input order.

    Nulls sort first unless ``nulls_last`` is set for that key.
    """

    input: Node
    by: tuple[Expression, ...]
    descending: tuple[bool, ...]
    nulls_last: tuple[bool, ...]

    def _check(self) -> None:
        _check_keys(self)

    def _probes(self, inputs: Sequence[pl.LazyFrame]) -> Sequence[pl.LazyFrame]:
        return (_key_probe(self, inputs[0]),)

    @override
    def _runs_on_empty(self) -> bool:
        return True

    @override
    def label(self) -> str:
        return f"Sort by {_keys(self)}"


def _check_count(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanError(f"{name} must be a non-negative whole number, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit(Node):
    """Keep ``n`` rows starting at row ``offset`` (0-based), in input order.

    Polars' slice rules: a negative ``offset`` counts from the end (``-1``
    is the last row); ``n=None`` keeps every row from ``offset`` on. The
    window is clipped to the rows there are: an offset before the first row
    starts at the first row (and still ends ``n`` rows after ``offset``), an
    offset past the end keeps nothing. ``head`` is ``offset=0``; ``tail(k)``
    is ``offset=-k, n=k``. Nulls and ties: rows pass through unchanged.
    """

    input: Node
    n: int | None
    offset: int = 0

    def _check(self) -> None:
        if self.n is not None:
            _check_count(self.n, "limit n")
        if isinstance(self.offset, bool) or not isinstance(self.offset, int):
            raise PlanError(f"limit offset must be a whole number, got {self.offset!r}")

    @override
    def label(self) -> str:
        count = "all" if self.n is None else str(self.n)
        return f"Limit {count}" + (f" offset {self.offset}" if self.offset else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class TopK(Node):
    """The first ``k`` rows of a stable :class:`Sort` by the same keys (made by the optimizer).

    Same order, null and tie behaviour as ``Limit(Sort(...), k)``: ties keep
    input order, nulls first unless ``nulls_last``.
    """

    input: Node
    by: tuple[Expression, ...]
    descending: tuple[bool, ...]
    nulls_last: tuple[bool, ...]
    k: int

    def _check(self) -> None:
        _check_keys(self)
        _check_count(self.k, "top-k k")

    def _probes(self, inputs: Sequence[pl.LazyFrame]) -> Sequence[pl.LazyFrame]:
        return (_key_probe(self, inputs[0]),)

    @override
    def label(self) -> str:
        return f"TopK {self.k} by {_keys(self)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Dedupe(Node):
    """Keep one row per distinct ``by`` value, at its first occurrence's position.

    Without ``merge`` the first occurrence is kept as it is. With ``merge``
    (the default) the row is the group's representative (best rank, then
    smallest id; nulls rank last) absorbing its duplicates conservatively and
    independently of their order: the least trust, the highest sensitivity,
    the strongest retention, the earliest ``expires_at``, the latest
    ``valid_from``, the highest priority, the best rank, and the sorted union
    of ``sources`` and ``parents``. It also writes ``merged_ids`` (the other
    members' ids, sorted; empty for a row without duplicates) and
    ``merge_conflicts`` (canonical JSON ``{key: {id: value}}`` of metadata keys
    on which the members differ, or null). Null keys count as equal.

    With ``normalize`` (any of ``whitespace``: runs collapsed to one space and
    ends trimmed; ``case``: lower-cased; ``nfc``: Unicode NFC), items are
    duplicates when their payload kind and normalised packed text are equal;
    each keeps its own content, and the representative's is the one kept.

    With ``threshold`` (near-duplicates), items of one payload kind whose
    (normalised) packed texts have an estimated Jaccard similarity of 5-byte
    shingles of at least ``threshold`` are linked (MinHash with LSH banding,
    see :mod:`cognoxium.retrieval.near_duplicates`), and each connected component of
    linked items is one group. Empty texts are never near-duplicates.

    Copies are duplicates only within one ``group_id`` (a null group is one
    value: ungrouped items merge with each other, never with grouped ones)
    and one answered tool call (``metadata.tool_call_id``, null for other
    items): the group and the call (when the rows have ``group_id`` and a
    String ``metadata``) are part of every key, so two results of
    different tool calls are never folded into one and a call never loses
    its result.

    With ``as_of`` (UTC), copies that are expired (``expires_at <= as_of``)
    or not yet valid (``valid_from`` or ``created_at`` after ``as_of``) are
    dropped before merging when their group has a valid copy, so they never
    shorten a live copy's life; a merge records them in ``merge_dropped``
    (``{id, reason}`` structs, sorted by id), which the manifest reports. A
    group with no valid copy is merged whole. Without ``as_of`` expiry is not
    judged (``CognitionFrame.pack`` gives its own ``as_of`` to such a node).
    """

    input: Node
    by: tuple[str, ...] = ("content_hash",)
    merge: bool = True
    normalize: tuple[str, ...] = ()
    threshold: float | None = None
    as_of: datetime | None = None

    def _check(self) -> None:
        from cognoxium.governance.dedupe import check_dedupe

        object.__setattr__(self, "as_of", check_time("dedupe as_of", self.as_of))
        self._require(self.by, "dedupe")
        check_dedupe(self.by, self.normalize, self.threshold)
        if self.normalize or self.threshold is not None:
            self._require(TEXT_COLUMNS, "dedupe(normalize=..., threshold=...)")
        if self.merge:
            self._require(("id",), "dedupe(merge=True)")
        if self.as_of is not None:
            self._require(("created_at", "valid_from", "expires_at"), "dedupe(as_of=...)")

    @override
    def label(self) -> str:
        key = (
            f"normalized text ({', '.join(self.normalize)})"
            if self.normalize
            else "packed text"
            if self.threshold is not None
            else (", ".join(self.by))
        )
        if self.threshold is not None:
            key += f" jaccard>={self.threshold:g}"
        when = f" as of {self.as_of.isoformat()}" if self.as_of is not None else ""
        return f"Dedupe by [{key}]" + (" merge" if self.merge else "") + when


TEXT_COLUMNS: Final = ("payload_kind", "text", "json", "ref_uri", "ref_title", "content_hash")
"""The columns an item's packed text is read from.

See :func:`~cognoxium.items.schema.packed_text_expr`.
"""


def check_time(name: str, value: datetime | None) -> datetime | None:
    """``value`` in UTC, ``None`` kept; a node's check of a time argument named ``name``.

    Raises
    ------
    PlanError
        If ``value`` is not a timezone-aware datetime, or is out of range in UTC.
    """
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise PlanError(f"{name} must be a timezone-aware datetime, got {value!r}")
    try:
        return to_utc(value)
    except ValueError as exc:
        raise PlanError(f"{name} {exc}, got {value!r}") from None


_RETENTIONS: Final = ("required", "preferred", "optional")


@dataclass(frozen=True, slots=True, kw_only=True)
class Quarantine(Node):
    """Hold matching rows out of every pack; rows, order and other columns are kept.

    Sets ``quarantine_reason`` (String) to ``reason`` on rows where
    ``predicate`` holds and no earlier quarantine gave a reason (the first
    reason is kept); a null predicate value counts as false.
    ``metadata_dtype``: as for :class:`Filter`. Without a
    predicate, the default detector
    (:func:`cognoxium.governance.injection.detect_injection`) flags untrusted rows whose
    packed text carries instruction-injection signs, and the reason is
    ``"<reason>: <signs>"``. A barrier: no optimizer rule moves a node across it.
    """

    barrier = True
    input: Node
    predicate: Expression | None = None
    reason: str = "quarantined"
    metadata_dtype: pl.DataType | None = None

    def _check(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise PlanError(f"quarantine reason must be non-empty text, got {self.reason!r}")
        if self.predicate is None:
            self._require(("trust", *TEXT_COLUMNS[:-1]), "the default detector")

    @override
    def _runs_on_empty(self) -> bool:
        return self.predicate is not None

    @override
    def label(self) -> str:
        what = "default detector" if self.predicate is None else str(self.predicate)
        return f"Quarantine {what} reason={self.reason!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Redact(Node):
    """Replace recognised sensitive values in Text and Json payloads; rows and order kept.

    See :func:`cognoxium.governance.redaction.redact_frame`: changed rows get the new
    content hash and a ``redact`` lineage edge to their previous content;
    ``redactions`` counts redactions by type (canonical JSON) and
    ``redacted_from`` holds the previous hash. ``recognisers`` (built-in
    recognisers and recogniser sets, in tie-break order) is ``None`` for the
    built-in ones. ``keys`` redacts the object keys of Json payloads (and of
    metadata), ``metadata`` the ``metadata`` column, ``sources`` the uri and
    title of each source; ``unredacted`` lists, per row, the fields outside
    the payload that hold data and were not redacted. The key of the
    ``hash`` style is never shown. A barrier: no optimizer rule moves a node
    across it.
    """

    barrier = True
    input: Node
    style: str = "placeholder"
    key: bytes | None = field(default=None, repr=False)
    types: tuple[str, ...] | None = None
    recognisers: tuple[Recogniser | RecogniserSet, ...] | None = None
    keys: bool = True
    metadata: bool = False
    sources: bool = False

    def _check(self) -> None:
        from cognoxium.governance.redaction import redact_text

        redact_text(
            "",
            style=self.style,  # type: ignore[arg-type]
            key=self.key,
            types=self.types,
            recognisers=self.recognisers,
        )
        self._require(("id", "payload_kind", "text", "json", "content_hash"), "redact")
        for name in ("keys", "metadata", "sources"):
            if not isinstance(getattr(self, name), bool):
                raise PlanError(f"redact {name} must be True or False, got {getattr(self, name)!r}")
        needed = tuple(c for c in ("metadata", "sources") if getattr(self, c))
        if needed:
            self._require(needed, "redact")

    @override
    def label(self) -> str:
        from cognoxium.governance.redaction import Recogniser

        types = "all types" if self.types is None else ", ".join(self.types)
        scope = ["payload", *(n for n in ("keys", "metadata", "sources") if getattr(self, n))]
        head = f"Redact {types} style={self.style}"
        if scope != ["payload", "keys"]:
            head += f" fields={'+'.join(scope)}"
        if self.recognisers is None:
            return head
        names = dict.fromkeys(
            r.name if isinstance(r, Recogniser) else r.label for r in self.recognisers
        )
        return f"{head} recognisers={'; '.join(names)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Demote(Node):
    """Weaken the retention and lower the priority of rows where ``predicate`` holds.

    A matching row's retention becomes the weaker of its own and
    ``retention`` (``required`` < ``preferred`` < ``optional``), never
    stronger; its priority changes by ``priority_delta`` (<= 0). Other rows,
    the row order and a null predicate value (false) are unchanged. A barrier.
    ``metadata_dtype``: as for :class:`Filter`.
    """

    barrier = True
    input: Node
    predicate: Expression
    retention: str | None = None
    priority_delta: int = 0
    metadata_dtype: pl.DataType | None = None

    def _check(self) -> None:
        if self.retention is not None and self.retention not in _RETENTIONS:
            raise PlanError(f"unknown retention {self.retention!r}; use one of {list(_RETENTIONS)}")
        if isinstance(self.priority_delta, bool) or not isinstance(self.priority_delta, int):
            raise PlanError(f"priority_delta must be an int, got {self.priority_delta!r}")
        if self.priority_delta > 0:
            raise PlanError(
                f"demote lowers priority: priority_delta must be <= 0, got {self.priority_delta}"
            )
        if self.retention is None and self.priority_delta == 0:
            raise PlanError("demote needs a retention or a negative priority_delta")
        self._require(("retention", "priority"), "demote")

    @override
    def _runs_on_empty(self) -> bool:
        return True

    @override
    def label(self) -> str:
        parts = [str(self.predicate)]
        if self.retention is not None:
            parts.append(f"retention={self.retention}")
        if self.priority_delta:
            parts.append(f"priority_delta={self.priority_delta}")
        return "Demote " + " ".join(parts)


# ---------------------------------------------------------------------------
# traversal


def walk(plan: Node) -> Iterator[Node]:
    """Yield every node of ``plan``, parents before children (pre-order)."""
    yield plan
    for child in plan.children:
        yield from walk(child)


def rewrite(plan: Node, rule: Callable[[Node], Node]) -> Node:
    """Apply a local rewrite bottom-up, again wherever it changes something.

    ``rule`` maps one node (whose children are already rewritten) to a
    replacement, or returns it unchanged. The result is ``plan`` itself when
    no node changed.
    """
    node = plan.with_children([rewrite(child, rule) for child in plan.children])
    out = rule(node)
    return node if out is node else rewrite(out, rule)


def _passes_through(expr: Expression) -> bool:
    """Whether ``expr`` is one input column under its own name (``pl.col(name)``)."""
    roots = expr.expr.meta.root_names()
    return len(roots) == 1 and expr.is_column(roots[0])


def changes_item_values(plan: Node) -> bool:
    """Whether a step of ``plan`` may write item values that no reader checked.

    Sources are checked as they are read (in memory at construction, lazy
    scans per batch), and filters, sorts, limits, ranks, dedupes and the
    policy steps keep valid rows valid. A :class:`Select` or
    :class:`WithColumns` computing a column (not only passing one through)
    may break any item rule, and an inner, left or full :class:`Join` may
    repeat ids or leave the left columns null; frames with such a step are
    checked again before they are packed or written.

    Parameters
    ----------
    plan
        The plan as built (before optimizing).

    Returns
    -------
    bool
        ``True`` when some node computes column values or joins in rows.

    Examples
    --------
    >>> import polars as pl
    >>> source = Scan(source=Source(pl.DataFrame({"id": ["a"], "priority": [1]})))
    >>> ranked = Filter(input=source, predicate=Expression.of(pl.col("priority") > 0))
    >>> changes_item_values(ranked)
    False
    >>> changes_item_values(WithColumns(input=ranked, exprs=(Expression.of(pl.lit(2).alias(
    ...     "priority")),)))
    True
    """
    for node in walk(plan):
        if isinstance(node, Select | WithColumns) and not all(
            _passes_through(e) for e in node.exprs
        ):
            return True
        if isinstance(node, Join) and node.how not in ("semi", "anti"):
            return True
    return False


def format_plan(plan: Node) -> str:
    """Render ``plan`` as an indented tree, one node per line, root first.

    Examples
    --------
    >>> src = Scan(source=Source(pl.DataFrame({"a": [3, 1, 2]})))
    >>> print(format_plan(Limit(input=Filter(input=src, predicate=Expression.of(pl.col("a") > 1)),
    ...                         n=1)))
    Limit 1
      Filter [(col("a")) > (dyn int: 1)]
        Scan 3 rows; 1 columns
    """
    lines: list[str] = []

    def visit(node: Node, depth: int) -> None:
        lines.append("  " * depth + node.label())
        for child in node.children:
            visit(child, depth + 1)

    visit(plan, 0)
    return "\n".join(lines)
