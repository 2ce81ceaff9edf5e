"""The scopes of a batch: each distinct ``where`` evaluated once, over one split of the store.

A request names its scope with a ``where`` clause, and most clauses select
one conversation, tenant or user by equality on a key
(``metadata.conversation = 'c1'``). Filtering the whole store once per scope
would cost scopes x store; the store is split once instead:

1. *Units.* The requests are grouped by ``where``, scopes in order of their
   first request (:func:`batch_units`).
2. *Checks.* Every distinct clause is parsed and type checked against the
   whole store (its metadata keys and their types) before anything is
   packed, so an invalid clause fails as it fails on the whole store. A
   clause that only fixes one metadata key to text values
   (``metadata.conversation = 'c1'``, ``IN``, ``OR`` of those) differs from
   the first such clause of its key only in its values, which cannot make
   it invalid once that key is text: it is checked once per key.
3. *Split key.* The metadata key that the most clauses fix to text values
   (:func:`scope_values`), provided its values are text in the store.
4. *One pass.* The key's value of every item, decoded as the clauses
   decode it, and the row numbers of each value (one ``group_by``).
5. *Each scope.* The rows of its values, in store order (a slice of the
   store when they are contiguous in it), then filtered by the whole
   clause (checked in step 2): the rows the clause keeps on the whole
   store, since every one of them has one of the values. A clause that
   only fixes the split key keeps exactly those rows, with no filter.

Clauses that fix no split key are filtered over the whole store, once each.
A store that is a lazy scan of files is never read whole: each scope's
clause is pushed into the scan (predicate pushdown, partition pruning).
For a scan of Parquet files (maybe under a selection of its columns), one
streaming pass over its metadata column gives the metadata type every
clause is checked against (so no clause reads the store again), and tells
which text hive partition columns ``<key>`` hold, for every item, the text
of its ``metadata.<key>`` (as :func:`~cognoxium.items.store.write_partitioned`
writes them): a clause that fixes such a key reads only the partitions of
its values.

Examples
--------
>>> from cognoxium.app.batch import Request
>>> store = CognitionFrame([
...     {"id": "a", "role": "user", "text": "hi", "metadata": {"conversation": "c1"}},
...     {"id": "b", "role": "user", "text": "yo", "metadata": {"conversation": "c2"}},
...     {"id": "c", "role": "tool", "text": "{}", "metadata": {"conversation": "c1"}},
... ])
>>> units = batch_units([
...     Request(id="r1", budget=10, where="metadata.conversation = 'c1' AND role = 'user'"),
...     Request(id="r2", budget=10, where="metadata.conversation = 'c2'"),
...     Request(id="r3", budget=10, where="metadata.conversation = 'c1' AND role = 'user'"),
... ])
>>> [(u.positions, u.where) for u in units]  # doctest: +NORMALIZE_WHITESPACE
[((0, 2), "metadata.conversation = 'c1' AND role = 'user'"),
 ((1,), "metadata.conversation = 'c2'")]
>>> index = ScopeIndex(store, units)
>>> index.key
'conversation'
>>> [index.rows(u)["id"].to_list() for u in units]
[['a'], ['b']]
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, reduce
from typing import TYPE_CHECKING

import polars as pl
import sqlglot
from sqlglot import exp

from cognoxium.engine.plan import (
    Expression,
    Filter,
    LazySource,
    Node,
    Scan,
    Select,
    Source,
    polars_error_text,
)
from cognoxium.engine.predicates import infer_metadata_struct, stored_metadata
from cognoxium.exceptions import PlanError, PredicateError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.predicate import path_struct
from cognoxium.items.store import PLAIN_KEY

if TYPE_CHECKING:
    from cognoxium.app.batch import Request

__all__ = [
    "ScopeIndex",
    "Unit",
    "batch_units",
    "collect_scope",
    "conjuncts",
    "fixed_values",
    "key_clause",
    "partition_keys",
    "scope_values",
    "where_filter",
]

_ROW = "__cognoxium_row"
_KEY = "__cognoxium_key"


@dataclass(frozen=True, slots=True)
class Unit:
    """The requests of one scope (one ``where``) and their positions in the batch."""

    where: str | None
    requests: tuple[Request, ...]
    positions: tuple[int, ...]


def batch_units(requests: Sequence[Request]) -> list[Unit]:
    """Group the requests by ``where``: scopes in order of first request, requests in order.

    Examples
    --------
    >>> from cognoxium.app.batch import Request
    >>> [u.positions for u in batch_units([Request(id=str(i), budget=5, where=w)
    ...                                    for i, w in enumerate(["a = 1", None, "a = 1"])])]
    [(0, 2), (1,)]
    """
    groups: dict[str | None, list[int]] = {}
    for position, request in enumerate(requests):
        groups.setdefault(request.where, []).append(position)
    return [
        Unit(where, tuple(requests[p] for p in positions), tuple(positions))
        for where, positions in groups.items()
    ]


# -- keys a clause fixes --------------------------------------------------------


def _parsed(where: str | None) -> exp.Expr | None:
    if where is None:
        return None
    try:
        return sqlglot.parse_one(where)
    except (sqlglot.errors.SqlglotError, RecursionError):
        return None


def conjuncts(node: exp.Expr) -> Iterator[exp.Expr]:
    """The terms of a clause's top-level ``AND`` (parentheses removed), in order."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        yield from conjuncts(node.left)
        yield from conjuncts(node.right)
    else:
        yield node


def _is_key(node: exp.Expr, key: str) -> bool:
    return (
        isinstance(node, exp.Column)
        and node.table == "metadata"
        and not node.args.get("db")
        and isinstance(node.this, exp.Identifier)
        and node.name == key
    )


def _texts(nodes: Sequence[exp.Expr]) -> frozenset[str] | None:
    if all(isinstance(n, exp.Literal) and n.is_string for n in nodes):
        return frozenset(n.this for n in nodes)
    return None


def _values(node: exp.Expr, key: str) -> frozenset[str] | None:
    """The values of ``metadata.<key>`` that a conjunct allows; ``None``: not known."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.EQ):
        for column, literal in ((node.left, node.right), (node.right, node.left)):
            if _is_key(column, key):
                return _texts([literal])
    if isinstance(node, exp.In) and _is_key(node.this, key) and not node.args.get("query"):
        return _texts(node.expressions)
    if isinstance(node, exp.Or):
        left, right = _values(node.left, key), _values(node.right, key)
        return left | right if left is not None and right is not None else None
    return None


def scope_values(where: str | None, key: str) -> frozenset[str] | None:
    """The text values of ``metadata.<key>`` that items of a ``where`` scope can have.

    Read from the conjuncts of the clause that compare ``metadata.<key>``
    with text literals (``=``, ``IN``, ``OR`` of those); the scope is a
    subset of the items whose value is one of them, so a reader may skip
    every other item or partition.

    Parameters
    ----------
    where
        A request's ``where`` clause (``None``: the whole store).
    key
        The metadata key.

    Returns
    -------
    frozenset of str or None
        The values; ``None`` when the clause does not fix them (every item
        may be in the scope). A clause that does not parse gives ``None``:
        filtering the scope then reports the error.

    Examples
    --------
    >>> sorted(scope_values("metadata.conversation = 'c1' AND role <> 'tool'", "conversation"))
    ['c1']
    >>> sorted(scope_values("metadata.conversation IN ('c1', 'c2')", "conversation"))
    ['c1', 'c2']
    >>> scope_values("metadata.conversation = 'c1' OR role = 'user'", "conversation") is None
    True
    """
    tree = _parsed(where)
    return None if tree is None else _fixed(tree, key)


def _fixed(tree: exp.Expr, key: str) -> frozenset[str] | None:
    """:func:`scope_values` of a parsed clause."""
    found: frozenset[str] | None = None
    for conjunct in conjuncts(tree):
        values = _values(conjunct, key)
        if values is not None:
            found = values if found is None else found & values
    return found


def fixed_values(where: str | None) -> dict[str, frozenset[str]]:
    """:func:`scope_values` of every plain metadata key a clause fixes, the clause parsed once.

    Examples
    --------
    >>> found = fixed_values("metadata.user = 'u1' AND metadata.topic IN ('a', 'b')")
    >>> {key: sorted(values) for key, values in found.items()}
    {'topic': ['a', 'b'], 'user': ['u1']}
    >>> fixed_values("metadata.user = 'u1' OR role = 'user'"), fixed_values(None)
    ({}, {})
    """
    tree = _parsed(where)
    if tree is None:
        return {}
    found = {key: _fixed(tree, key) for key in _plain_keys(tree)}
    return {key: values for key, values in found.items() if values is not None}


def partition_keys(where: str | None) -> tuple[str, ...]:
    """The plain metadata keys that a clause names, sorted (candidates for a split).

    Examples
    --------
    >>> partition_keys("metadata.user = 'u1' AND metadata.topic IN ('a', 'b')")
    ('topic', 'user')
    """
    tree = _parsed(where)
    return () if tree is None else _plain_keys(tree)


def _plain_keys(tree: exp.Expr) -> tuple[str, ...]:
    names = {
        column.name
        for column in tree.find_all(exp.Column)
        if column.table == "metadata" and not column.args.get("db")
    }
    # Only plain names: a JSON path of another key could miss the items it names.
    return tuple(sorted(name for name in names if PLAIN_KEY.fullmatch(name)))


# -- the index ------------------------------------------------------------------


def _split_key(
    filters: dict[str, Filter], keyed: dict[str, tuple[str, frozenset[str]]]
) -> tuple[str, pl.Struct] | None:
    """The metadata key, of text type in the store, that the most clauses fix, and that type.

    ``None`` when no clause fixes one. Every clause's metadata type is the
    store's (inferred from all of its items).
    """
    votes: Counter[str] = Counter(key for key, _ in keyed.values())
    struct: pl.Struct | None = None
    for where, node in filters.items():
        if not isinstance(node.metadata_dtype, pl.Struct):
            continue
        struct = node.metadata_dtype
        if where in keyed:
            continue
        for key in partition_keys(where):
            if _text_field(node, key) and scope_values(where, key) is not None:
                votes[key] += 1
    if not votes or struct is None:
        return None
    return min(votes, key=lambda key: (-votes[key], key)), struct


def _text_field(node: Filter, key: str) -> bool:
    """Whether ``metadata.<key>`` is text in the store the filter was checked against."""
    dtype = node.metadata_dtype
    return isinstance(dtype, pl.Struct) and any(
        f.name == key and f.dtype == pl.String() for f in dtype.fields
    )


def key_clause(where: str) -> tuple[str, frozenset[str]] | None:
    """``(key, values)`` when every conjunct of a clause fixes one plain metadata key to text.

    Such a clause keeps exactly the items whose key has one of the values,
    so a split of the store by the key serves it with no filter.

    Examples
    --------
    >>> key_clause("metadata.user = 'u1'")
    ('user', frozenset({'u1'}))
    >>> key_clause("metadata.user = 'u1' AND role = 'user'") is None
    True
    """
    tree = _parsed(where)
    keys = () if tree is None else _plain_keys(tree)
    if tree is None or len(keys) != 1:
        return None
    found = [_values(term, keys[0]) for term in conjuncts(tree)]
    if any(values is None for values in found):
        return None
    return keys[0], frozenset[str].intersection(*(v for v in found if v is not None))


class ScopeIndex:
    """The scope of every unit of a batch, each clause checked once, the store split once.

    See the module docstring for the steps. The split (one pass over the
    store's metadata) is made at the first scope that uses it.

    Parameters
    ----------
    store
        The whole store (a frame of the canonical schema).
    units
        The batch's units (:func:`batch_units`).

    Raises
    ------
    RecordError
        If a clause is not a valid predicate over the items (it does not
        parse, names an unknown column or a ``metadata.<key>`` that no item
        has, or does not type check); it names the first request of the
        first such clause and the field ``where``.
    """

    def __init__(self, store: CognitionFrame, units: Sequence[Unit]) -> None:
        self.store = store
        self.lazy = _scans_files(store._plan)
        """Whether the store is a lazy scan of files: each scope is then read on its own."""
        self.partitions: frozenset[str] = frozenset()
        """The hive partition columns of a lazy store that a scope's read is pruned by."""
        checker = store
        source = _file_scan(store._plan) if self.lazy else None
        if source is not None and any(unit.where is not None for unit in units):
            try:
                dtype, self.partitions = _scan_facts(source)
                checker = _stand_in(store, dtype)
            except PlanError:  # not metadata objects: each clause reports it, as ever
                pass
        self._checker = checker
        self._filters: dict[str, Filter] = {}
        self._keyed: dict[str, tuple[str, frozenset[str]]] = {}
        checked: set[str] = set()
        for unit in units:
            where = unit.where
            if where is None:
                continue
            keyed = None if self.lazy else key_clause(where)
            if keyed is not None and keyed[0] in checked:  # checked with its key's first clause
                self._keyed[where] = keyed
                continue
            node = self._filters[where] = _checked(checker, unit.requests[0])
            if keyed is not None and _text_field(node, keyed[0]):
                checked.add(keyed[0])
                self._keyed[where] = keyed
        split = None if self.lazy else _split_key(self._filters, self._keyed)
        self.key = split[0] if split is not None else None
        """The metadata key the store is split by (``None``: no split)."""
        self._dtype = split[1] if split is not None else None
        self._groups: dict[str, pl.Series] | None = None
        self._links: pl.DataFrame | None = None

    def rows(self, unit: Unit) -> pl.DataFrame:
        """The unit's scope: the store's rows its ``where`` keeps, in store order.

        Raises
        ------
        RecordError
            If Polars fails to run the clause; it names the unit's first request.
        """
        request = unit.requests[0]
        if unit.where is None:
            return self.df
        keyed = self._keyed.get(unit.where)
        if keyed is not None and keyed[0] == self.key:  # the split is the clause
            return self._gather(keyed[1])
        node = self._filters.get(unit.where)
        if node is None:  # a clause of a key that is not the split's
            node = self._filters[unit.where] = _checked(self._checker, request)
        if self.lazy:  # the scan reads only what the clause needs (pushdown, pruning)
            scope = replace(node, input=self._pruned(unit.where))
            return collect_scope(CognitionFrame._wrap(scope), request)
        values = scope_values(unit.where, self.key) if self.key is not None else None
        part = self.df if values is None else self._gather(values)
        return collect_scope(CognitionFrame._wrap(_over(node, part)), request)

    def rows_of(self, units: Sequence[Unit]) -> list[pl.DataFrame]:
        """The scopes of ``units`` (:meth:`rows` of each), their partitions read at once.

        Over a lazy store pruned by a partition column ``<key>``
        (:attr:`partitions`), the units whose clause fixes ``metadata.<key>``
        read their partitions in one scan; each one's scope is then its
        values' rows of that part, filtered by its clause. Any other unit is
        read on its own.

        Raises
        ------
        RecordError
            If Polars fails to run a clause; it names the unit's first request.
        """
        found: dict[int, frozenset[str]] = {}
        key = min(self.partitions) if self.lazy and self.partitions else None
        if key is not None:
            for position, unit in enumerate(units):
                values = scope_values(unit.where, key) if unit.where is not None else None
                if values is not None:
                    found[position] = values
        if len(found) < 2:
            return [self.rows(unit) for unit in units]
        wanted = sorted(frozenset[str]().union(*found.values()))
        assert key is not None
        scan = _scan_node(self.store._plan)
        read = Filter(input=scan, predicate=Expression.of(pl.col(key).is_in(wanted)))
        part = collect_scope(CognitionFrame._wrap(read), units[next(iter(found))].requests[0])
        names = self.store._plan.schema.names()
        scopes = []
        for position, unit in enumerate(units):
            values = found.get(position)
            if values is None:
                scopes.append(self.rows(unit))
                continue
            rows = part.filter(pl.col(key).is_in(sorted(values))).select(names)
            where, request = unit.where, unit.requests[0]
            assert where is not None
            node = self._filters.get(where)
            if node is None:
                node = self._filters[where] = _checked(self._checker, request)
            scopes.append(collect_scope(CognitionFrame._wrap(_over(node, rows)), request))
        return scopes

    def _pruned(self, where: str) -> Node:
        """The lazy store's plan, its scan kept to the partitions ``where`` allows."""
        terms = [
            pl.col(key).is_in(sorted(values))
            for key in sorted(self.partitions)
            if (values := scope_values(where, key)) is not None
        ]
        if not terms:
            return self.store._plan
        return _above_scan(self.store._plan, reduce(operator.and_, terms))

    @cached_property
    def df(self) -> pl.DataFrame:
        """The whole store's rows (read once, when a scope or the split needs them)."""
        return self.store.collect()

    def derived(self, scope: pl.DataFrame) -> pl.DataFrame:
        """The store's items outside ``scope`` with a parent in it, in store order.

        What :func:`~cognoxium.retrieval.scope.derived_items` finds in the
        whole store for ``scope``, read from the store's parent links (one
        pass, made once) rather than from the whole store.
        """
        ids = scope.get_column("id").implode()
        edges = self._edges().filter(pl.col("parent").is_in(ids))
        if self.lazy and edges.is_empty():  # nothing derived: nothing to read
            return pl.DataFrame(schema=self.store._plan.schema)
        if self.lazy:  # read the derived items alone, by id
            found = self.store.filter(pl.col("id").is_in(edges.get_column("id").implode()))
            return found.filter(~pl.col("id").is_in(ids)).collect()
        rows = edges.get_column(_ROW).unique().sort()
        found_rows = _take(self.df, rows, self._empty_lists)
        return found_rows.filter(~pl.col("id").is_in(ids))

    def _edges(self) -> pl.DataFrame:
        """Every parent link of the store: ``parent`` (an id), the child's ``id`` and row."""
        if self._links is None:
            columns = pl.col("id"), pl.col("parents").alias("parent")
            links = self.store.select(*columns).collect() if self.lazy else self.df.select(*columns)
            self._links = (
                links.with_row_index(_ROW).filter(pl.col("parent").list.len() > 0).explode("parent")
            )
        return self._links

    def _gather(self, values: frozenset[str]) -> pl.DataFrame:
        """The store's rows whose split key has one of ``values``, in store order.

        The rows of one value that are contiguous in the store are a slice
        of it (no copy).
        """
        groups = self._split()
        found = [groups[value] for value in sorted(values) if value in groups]
        if not found:
            return self.df.clear()
        if len(found) == 1:
            rows = found[0]
            first, last = rows[0], rows[-1]
            if last - first + 1 == rows.len():
                return self.df.slice(first, rows.len())
        return _take(self.df, pl.concat(found).sort(), self._empty_lists)

    @cached_property
    def _empty_lists(self) -> frozenset[str]:
        """The list columns in which every item holds an empty list (no null)."""
        lists = [name for name, dtype in self.df.schema.items() if isinstance(dtype, pl.List)]
        if not lists or self.df.is_empty():
            return frozenset()
        empty = self.df.select(
            ((pl.col(name).list.len().max() == 0) & (pl.col(name).null_count() == 0)).alias(name)
            for name in lists
        ).row(0, named=True)
        return frozenset(name for name, all_empty in empty.items() if all_empty)

    def _split(self) -> dict[str, pl.Series]:
        """The row numbers of each value of the split key (one pass, made once).

        The key of every item is decoded as the clauses decode it, alone
        (another key's values may have no one type).
        """
        if self._groups is None:
            assert self.key is not None
            assert self._dtype is not None
            decoded = pl.col("metadata").str.json_decode(path_struct(self._dtype, [self.key]))
            grouped = (
                self.df.select(decoded.struct.field(self.key).alias(_KEY))
                .with_row_index(_ROW)
                .drop_nulls(_KEY)
                .group_by(_KEY, maintain_order=True)
                .agg(pl.col(_ROW))
            )
            self._groups = dict(
                zip(grouped.get_column(_KEY).to_list(), grouped.get_column(_ROW), strict=True)
            )
        return self._groups


def _take(df: pl.DataFrame, rows: pl.Series, empty_lists: frozenset[str]) -> pl.DataFrame:
    """``df``'s ``rows``, in order; a column of empty lists only is sliced, not gathered.

    Polars gathers a list-of-struct column far slower than its other
    columns, and every row of such a column is the same empty list.
    """
    n = rows.len()
    return pl.DataFrame(
        [
            df.get_column(name).slice(0, n)
            if name in empty_lists
            else df.get_column(name).gather(rows)
            for name in df.columns
        ]
    )


def _file_scan(plan: Node) -> LazySource | None:
    """The lazy scan of Parquet files that ``plan`` is, maybe under selections of its columns.

    ``None`` for any other plan.
    """
    while isinstance(plan, Select):
        if not all(e.expr.meta.is_column() for e in plan.exprs):
            return None
        plan = plan.input
    if not isinstance(plan, Scan) or not isinstance(plan.source, LazySource):
        return None
    return plan.source if plan.source.scan.kind == "parquet" else None


def _scan_facts(source: LazySource) -> tuple[pl.Struct | None, frozenset[str]]:
    """The metadata type of a scan's items, and the hive columns that hold their metadata key.

    One pass over the distinct pairs of ``metadata`` and the text hive
    partition columns (:func:`_metadata_pairs`). A column ``<key>`` is
    returned when, for every item whose ``metadata.<key>`` is text, that
    text is the item's ``<key>``, and the metadata type has ``<key>`` as
    text: a clause that fixes ``metadata.<key>`` keeps only items of
    partitions of its values.

    Raises
    ------
    PlanError
        If the metadata is not JSON objects.
    RecordError, SchemaError
        If the items read are not valid (the scan's own errors).
    """
    scan = source.scan
    hive = [
        key
        for key in scan.partitions
        if scan.schema[key] == pl.String() and PLAIN_KEY.fullmatch(key)
    ]
    pairs, dtype = _metadata_pairs(source, hive)
    texts = {f.name for f in dtype.fields if f.dtype == pl.String()} if dtype is not None else set()
    keys = set()
    for key in hive:
        if key not in texts:
            continue
        value = pl.col("metadata").str.json_path_match(f"$.{key}")
        agrees = (value.is_null() | (value == pl.col(key))).fill_null(False).all()
        if pairs.select(agrees).item():
            keys.add(key)
    return dtype, frozenset(keys)


def _metadata_pairs(source: LazySource, hive: list[str]) -> tuple[pl.DataFrame, pl.Struct | None]:
    """The distinct pairs of ``metadata`` and the ``hive`` columns, and the metadata type.

    Read as stored (:func:`~cognoxium.engine.predicates.stored_metadata`),
    else through the scan, whose checks name the file, row and field at fault.
    """
    stored = stored_metadata(source, hive)
    if stored is not None:
        return stored
    pairs = source.lazy().select("metadata", *hive).unique().collect(engine="streaming")
    return pairs, infer_metadata_struct(pairs.get_column("metadata"))


def _stand_in(store: CognitionFrame, dtype: pl.Struct | None) -> CognitionFrame:
    """A frame of no rows with the store's columns and metadata type, to check clauses on."""
    empty = pl.DataFrame(schema=store._plan.schema)
    return CognitionFrame._wrap(Scan(source=Source(empty, cache={"metadata_dtype": (dtype,)})))


def _scan_node(plan: Node) -> Scan:
    """The scan under the selections of ``plan`` (see :func:`_file_scan`)."""
    while isinstance(plan, Select):
        plan = plan.input
    assert isinstance(plan, Scan)
    return plan


def _above_scan(plan: Node, predicate: pl.Expr) -> Node:
    """``plan`` (selections over a scan, see :func:`_file_scan`) with ``predicate`` on the scan."""
    if isinstance(plan, Select):
        return replace(plan, input=_above_scan(plan.input, predicate))
    return Filter(input=plan, predicate=Expression.of(predicate))


def _scans_files(plan: Node) -> bool:
    """Whether a plan reads a lazy scan of files anywhere."""
    if isinstance(plan, Scan):
        return isinstance(plan.source, LazySource)
    return any(_scans_files(child) for child in plan.children)


def _over(node: Filter, rows: pl.DataFrame) -> Node:
    """``node`` (a filter) over ``rows`` in place of its input."""
    return replace(node, input=Scan(source=Source(rows)))


def where_filter(store: CognitionFrame, request: Request) -> CognitionFrame:
    """``store`` filtered by the request's ``where``: parsed and type checked, nothing run.

    Raises
    ------
    RecordError
        If ``where`` is not a valid predicate over the items; it names the
        request and the field ``where``, and its cause is the frame's error.
    """
    try:
        return store.filter(request.where)  # type: ignore[arg-type]
    except PredicateError as exc:
        raise request.error(f"invalid where clause: {exc}", field="where") from exc
    except PlanError as exc:
        raise request.error(
            f"invalid where clause {request.where!r}: {exc}", field="where"
        ) from exc
    except pl.exceptions.PolarsError as exc:
        raise request.error(
            f"invalid where clause {request.where!r}: {polars_error_text(exc)}", field="where"
        ) from exc


def _checked(store: CognitionFrame, request: Request) -> Filter:
    """The request's ``where`` over ``store``, a checked filter node (:func:`where_filter`)."""
    plan = where_filter(store, request)._plan
    assert isinstance(plan, Filter)
    return plan


def collect_scope(scope: CognitionFrame, request: Request) -> pl.DataFrame:
    """Run a scope's plan; a Polars error names the request and the field ``where``."""
    try:
        return scope.collect()
    except pl.exceptions.PolarsError as exc:
        raise request.error(
            f"invalid where clause {request.where!r}: {polars_error_text(exc)}", field="where"
        ) from exc
