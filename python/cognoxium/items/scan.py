"""Lazy scans of context items: Parquet files, JSONL files and Polars LazyFrames.

A scan reads nothing until it is collected. It is registered as a Polars IO
source (:func:`polars.io.plugins.register_io_source`), so Polars' optimizer
hands it the columns a query uses and the query's predicate; a Parquet scan
passes both to Polars' own Parquet scan, which skips the hive partitions and
row groups the predicate rules out and reads only the columns needed.

The rows a run reads are validated then, by the rules of
:func:`~cognoxium.items.validation.conform`: a run that reads every item column
conforms them (unique ids, content hashes, canonical JSON); a run that reads
some columns applies the row checks of those columns
(:func:`~cognoxium.items.validation.row_checks`). A failure raises
:class:`~cognoxium.exceptions.RecordError` naming the file, the 0-based row
in that file (the line for JSONL) and the field. Rows a query's predicate
leaves out are not read, so they are not checked.

A query that needs the number of rows but none of their values (a count:
``select(pl.len())`` over the scan) reads only the columns of its
predicate, checks only those (the rows the predicate keeps), and reads no
other column: Polars' optimizer asks a source for its cheapest column when a
query needs no value of it, and the scan offers :data:`ROWS_ONLY`, a column
of nulls that costs nothing to produce, so the request names it and the scan
knows the query needs only how many rows there are. Such a run also skips
what only orders rows (the store order of a partitioned store), since no
value reaches the query (a row limit still takes the rows in order), and
reads in longer batches, as many values each as a batch of every column. A
count therefore checks fewer columns than a collect of the same rows: every
value a query returns has been checked, and a count returns none; a count
with no predicate reads no item column.

The predicate is applied before the canonical casts where that keeps the
same rows (:func:`_split_predicate`): a term ``col == "user"`` or
``col.is_in([...])`` over an enumeration stored as text or categorical
(Parquet's dictionary encoding) is evaluated by Polars' Parquet scan on the
stored values, and such a column is cast only for the rows it keeps, or
not read at all when the predicate holds it to one value (every row kept
has that value, a valid one).

Rows are handed to Polars in the batches it asks for (its streaming chunk
size), each validated as it is read and the ids checked across batches, so a
streaming sink never holds the whole result; an error raised at a later batch
still fails the whole query.

Every run appends a :class:`ScanRead` to :attr:`ItemScan.reads`: the files
that yielded rows, the rows read and the columns read.
"""

from __future__ import annotations

import errno
import glob
import operator
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, reduce
from pathlib import Path
from typing import Final

import polars as pl
from polars.io.plugins import register_io_source

from cognoxium._columns import STORE_POSITION
from cognoxium.exceptions import RecordError, SchemaError
from cognoxium.items.io import ITEM_FORMATS, atomic_path, read_jsonl
from cognoxium.items.schema import COLUMNS, DEFAULTS, POLARS_SCHEMA
from cognoxium.items.validation import (
    DEFAULTED_COLUMNS,
    canonical_json_columns,
    check_column_types,
    conform,
    fill_null_defaults,
    json_text_expr,
    row_checks,
)

__all__ = [
    "FILE_COLUMN",
    "KEPT_READS",
    "ROWS_ONLY",
    "ItemScan",
    "ScanRead",
    "atomic_path",
    "scan_lazy_items",
    "scan_ndjson_items",
    "scan_parquet_items",
]

FILE_COLUMN: Final = "__cognoxium_file"
"""The column naming each row's file inside a scan; never part of its output."""
_COUNT: Final = "__cognoxium_count"

KEPT_READS: Final = 100
"""How many runs an :class:`ItemScan` remembers in :attr:`ItemScan.reads`."""

ROWS_ONLY: Final = "__cognoxium_rows"
"""A column of nulls (dtype ``Null``) that the Polars source of a scan offers and its
output leaves out. Polars asks a source for its cheapest column when a query needs
the rows but none of their values (a count); a ``Null`` column is the cheapest, so
such a query asks for this one, which tells the scan to read only the predicate's
columns (see :mod:`cognoxium.items.scan`)."""

_ROW: Final = "__cognoxium_row"
_CATEGORIES: Final = {
    name: frozenset(dtype.categories)
    for name, dtype in POLARS_SCHEMA.items()
    if isinstance(dtype, pl.Enum)
}
"""The values of each enumeration column."""
_ENUMS: Final = frozenset(_CATEGORIES)


@dataclass(frozen=True, slots=True)
class ScanRead:
    """What one run of a scan read.

    Attributes
    ----------
    files
        The files that yielded at least one row, sorted; empty for a
        LazyFrame. Files a hive partition filter or row-group statistics
        rule out are never opened, so they are not here.
    rows
        The rows read (after the predicate given to the scan).
    columns
        The columns read, in output order.
    predicate
        The predicate given to the scan, as Polars prints it; ``None`` for none.
    """

    files: tuple[str, ...]
    rows: int
    columns: tuple[str, ...]
    predicate: str | None


Reader = Callable[[list[str], pl.Expr | None, int | None, int | None, bool], Iterator[pl.DataFrame]]
"""``reader(columns, predicate, n_rows, batch_size, ordered)``: one run's validated rows,
with FILE_COLUMN, in batches of about ``batch_size`` rows (``None``: one batch); in the
scan's order if ``ordered``, else in any order (a query that needs only how many rows)."""


class ItemScan:
    """A lazy source of item rows, read and validated each time a query runs.

    Build one with :func:`scan_parquet_items`, :func:`scan_ndjson_items` or
    :func:`scan_lazy_items`.

    Attributes
    ----------
    kind
        ``"parquet"``, ``"ndjson"`` or ``"lazyframe"``.
    source
        What was scanned (a path, a glob, a directory), as given.
    schema
        The output columns: :data:`~cognoxium.items.schema.POLARS_SCHEMA`,
        then any hive partition columns.
    partitions
        The hive partition columns, in path order.
    """

    __slots__ = ("_lazy", "_lock", "_reader", "_reads", "kind", "partitions", "schema", "source")

    def __init__(
        self,
        *,
        kind: str,
        source: str,
        schema: pl.Schema,
        partitions: tuple[str, ...],
        reader: Reader,
    ) -> None:
        self.kind = kind
        self.source = source
        self.schema = schema
        self.partitions = partitions
        self._reads: deque[ScanRead] = deque(maxlen=KEPT_READS)
        self._reader = reader
        self._lock = threading.Lock()
        self._lazy: pl.LazyFrame | None = None

    @property
    def reads(self) -> list[ScanRead]:
        """One :class:`ScanRead` per run, oldest first (the latest :data:`KEPT_READS` runs)."""
        with self._lock:
            return list(self._reads)

    def label(self) -> str:
        """One line naming the scan, for plans: kind, source and hive partition columns."""
        hive = f" hive [{', '.join(self.partitions)}]" if self.partitions else ""
        return f"{self.kind} {self.source}{hive}"

    def lazy(self) -> pl.LazyFrame:
        """The scan as a Polars LazyFrame; each collect reads the source again.

        The Polars source also offers :data:`ROWS_ONLY`, which the frame
        returned leaves out.
        """
        if self._lazy is None:  # one Polars source serves every plan built over the scan
            source = register_io_source(
                self._run,
                schema=pl.Schema([*self.schema.items(), (ROWS_ONLY, pl.Null())]),
                explain_name="cognoxium",
                explain_detail=self.label(),
            )
            self._lazy = source.drop(ROWS_ONLY)
        return self._lazy

    def read_unchecked(
        self, columns: Sequence[str], predicate: pl.Expr | None = None
    ) -> pl.DataFrame | None:
        """The distinct values of ``columns`` in the rows ``predicate`` keeps, not checked.

        For facts about the rows that hand none of their values to the
        caller, such as the type the metadata JSON decodes to: the values
        are read as stored (cast to the canonical types), without the row
        checks and the canonical JSON form that a query's run applies, in
        any order. The read is recorded in :attr:`reads` like a run.

        Parameters
        ----------
        columns
            Output columns.
        predicate
            Over the output columns; ``None`` keeps every row.

        Returns
        -------
        polars.DataFrame or None
            The distinct rows of ``columns``, in any order; ``None`` for a
            JSONL scan, which reads its values only through its checks.

        Raises
        ------
        polars.exceptions.PolarsError
            If Polars cannot read or cast the stored values, or the predicate
            fails on them (a query's run would then raise the scan's error).

        Examples
        --------
        >>> import tempfile
        >>> from cognoxium.items import records_to_frame, write_parquet
        >>> path = tempfile.mkdtemp() + "/items.parquet"
        >>> write_parquet(records_to_frame([{"id": "a", "role": "user", "text": "hi",
        ...                                  "metadata": {"k": 1}}]), path)
        >>> scan_parquet_items(path).read_unchecked(["metadata"]).rows()
        [('{"k":1}',)]
        """
        if not isinstance(self._reader, _Columnar):
            return None
        needed = set(columns)
        if predicate is not None:
            needed.update(predicate.meta.root_names())
        read = [name for name in self.schema.names() if name in needed]
        query = self._reader.query(read, predicate, None, False, ordered=False)
        keys = [*columns, FILE_COLUMN]
        df = query.group_by(keys).agg(pl.len().alias(_COUNT)).collect(engine="streaming")
        files = df.select(pl.col(FILE_COLUMN).drop_nulls().unique()).to_series()
        rows = int(df.get_column(_COUNT).sum())
        text = None if predicate is None else str(predicate)
        with self._lock:
            self._reads.append(ScanRead(tuple(sorted(files.to_list())), rows, tuple(read), text))
        return df.select(columns).unique()

    def _run(
        self,
        with_columns: list[str] | None,
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[pl.DataFrame]:
        # Polars asks for ROWS_ONLY only when the query needs none of the values
        # (besides the predicate's columns, which the scan applies): then the rows
        # may come in any order, unless a row limit picks which rows.
        wanted = [*self.schema.names(), ROWS_ONLY] if with_columns is None else list(with_columns)
        rows_only = with_columns is not None and ROWS_ONLY in wanted
        columns = [name for name in wanted if name != ROWS_ONLY]
        ordered = not rows_only or n_rows is not None
        if rows_only and batch_size is not None:
            # Such a batch holds only the predicate's columns: as many values as a
            # batch of every column holds, in fewer, longer batches.
            batch_size *= len(self.schema) // max(1, len(columns))
        files: set[str] = set()
        rows = 0
        try:
            for df in self._reader(columns, predicate, n_rows, batch_size, ordered):
                # a select keeps Polars' fast path for a column of one file's name
                named = df.select(pl.col(FILE_COLUMN).drop_nulls().unique()).to_series()
                files.update(named.to_list())
                rows += df.height
                yield _output(df, wanted)
        finally:  # what was read, also when the run failed or stopped early
            text = None if predicate is None else str(predicate)
            read = ScanRead(tuple(sorted(files)), rows, tuple(columns), text)
            with self._lock:
                self._reads.append(read)


def _output(df: pl.DataFrame, wanted: list[str]) -> pl.DataFrame:
    """The columns ``wanted`` of rows read (with FILE_COLUMN), ROWS_ONLY as nulls."""
    if wanted == [ROWS_ONLY]:  # no column to broadcast a literal to: give the height
        return pl.select(pl.repeat(None, df.height, dtype=pl.Null).alias(ROWS_ONLY))
    null = pl.lit(None, pl.Null).alias(ROWS_ONLY)
    return df.select([null if name == ROWS_ONLY else pl.col(name) for name in wanted])


# ---------------------------------------------------------------------------
# columnar sources (Parquet, LazyFrame)


def _casts(schema: pl.Schema, where: str) -> list[pl.Expr]:
    """Casts of the item columns whose type differs from the canonical one, and null defaults.

    Enumerations are cast leniently (an unknown value becomes null, which the
    row checks then report); other columns strictly. A null in a column with
    a default is that default (:func:`~cognoxium.items.validation.fill_null_defaults`),
    filled before an enumeration's cast, so an unknown value is still reported.

    Raises
    ------
    SchemaError
        If an item column is missing, or an integer column is stored as floats.
    """
    missing = [name for name in COLUMNS if name not in schema]
    if missing:
        raise SchemaError(
            f"{where}: a scan needs every item column; missing {missing} (read_parquet and "
            "from_polars of a DataFrame fill defaults)"
        )
    check_column_types(schema, f"{where}: ")
    floats = [n for n in COLUMNS if POLARS_SCHEMA[n].is_integer() and schema[n].is_float()]
    if floats:
        raise SchemaError(
            f"{where}: integer columns {floats} are stored as floats, which a cast would "
            "truncate; store them as integers (read_parquet checks each value instead)"
        )
    casts = {
        name: pl.col(name).cast(POLARS_SCHEMA[name], strict=name not in _ENUMS)
        for name in COLUMNS
        if schema[name] != POLARS_SCHEMA[name]
    }
    for name in ("json", "metadata"):
        encoded = json_text_expr(name, schema, f"{where}: ")
        if encoded is not None:
            casts[name] = encoded
    # An enumeration is filled as stored, before its lenient cast; the others once cast.
    stored = {name: pl.col(name) for name in DEFAULTED_COLUMNS if name in _ENUMS and name in casts}
    filled = fill_null_defaults(stored, {name: pl.col(name).cast(pl.String) for name in stored})
    for name, expr in zip(stored, filled, strict=True):
        casts[name] = expr.cast(POLARS_SCHEMA[name], strict=False).alias(name)
    others = [name for name in DEFAULTED_COLUMNS if name not in stored]
    for name, expr in zip(others, fill_null_defaults(others, casts), strict=True):
        casts[name] = expr.alias(name)
    return list(casts.values())


def _text_enums(schema: pl.Schema) -> frozenset[str]:
    """The enumeration columns stored as text or categorical (cast by :func:`_casts`)."""
    return frozenset(
        name for name in _ENUMS if isinstance(schema[name], (pl.String, pl.Categorical))
    )


@dataclass(frozen=True, slots=True)
class _Split:
    """A run's predicate split at the casts of :func:`_casts` (see :func:`_split_predicate`).

    Attributes
    ----------
    stored
        The terms that decide on the stored columns as on the cast ones,
        applied before the casts (so Polars' Parquet scan evaluates them
        where the values are stored); ``None`` for none.
    cast
        The other terms, applied to the cast columns; ``None`` for none.
    fixed
        The enumeration columns that ``stored`` holds to one value and
        ``cast`` does not read, with that value: every row kept has it.
    """

    stored: pl.Expr | None
    cast: pl.Expr | None
    fixed: Mapping[str, str]


def _conjuncts(predicate: pl.Expr) -> list[pl.Expr]:
    """The terms of ``a & b & ...``, left to right; a predicate that is no ``&`` is one term.

    Examples
    --------
    >>> [str(t) for t in _conjuncts(pl.col("a").is_null() & (pl.col("b") == "x") & pl.col("c"))]
    ['col("a").is_null()', '[(col("b")) == ("x")]', 'col("c")']
    """
    inputs = predicate.meta.pop()
    if len(inputs) == 2 and (inputs[1] & inputs[0]).meta.eq(predicate):
        return [*_conjuncts(inputs[1]), *_conjuncts(inputs[0])]
    return [predicate]


def _enum_values(term: pl.Expr, enums: frozenset[str]) -> tuple[str, frozenset[str]] | None:
    """``(column, values)`` of ``col == "v"`` or ``col.is_in([...])`` over a column of ``enums``.

    Only when every value is one of the enumeration's categories: then the
    term keeps the same rows of the stored text (or categorical) as of the
    column cast to its Enum, which turns any other text into null, and every
    row it keeps holds a valid value. ``None`` for any other term.
    """
    inputs = term.meta.pop()
    if len(inputs) != 2:
        return None
    left, right = inputs[1], inputs[0]
    if (left == right).meta.eq(term):
        column, value = (left, right) if left.meta.is_column() else (right, left)
        single = True
    elif left.is_in(right).meta.eq(term):
        column, value, single = left, right, False
    else:
        return None
    if not column.meta.is_column() or not value.meta.is_literal():
        return None
    name = column.meta.output_name()
    if name not in enums:
        return None
    try:
        values = pl.select(value).to_series()
    except pl.exceptions.PolarsError:
        return None
    if not single and values.dtype == pl.List(pl.String) and len(values) == 1:
        values = values.explode()
    if values.dtype != pl.String or values.null_count() or (single and len(values) != 1):
        return None
    allowed = frozenset(values.to_list())
    return (name, allowed) if allowed <= _CATEGORIES[name] else None


def _split_predicate(predicate: pl.Expr | None, enums: frozenset[str]) -> _Split:
    """Split a run's predicate into terms over the stored columns and over the cast ones.

    A term of the conjunction ``predicate`` that is ``col == "v"`` or
    ``col.is_in([...])`` over an enumeration of ``enums``, with values of
    its categories (:func:`_enum_values`), keeps the same rows before the
    cast as after it; such terms go before the casts, where Polars' Parquet
    scan evaluates them on the stored (dictionary-encoded) values, and the
    column is cast only for the rows they keep. A column they hold to a
    single value that no other term reads is not read at all: its value is
    known. A null is the column's default (:func:`_casts` fills it), so a
    term that keeps the default also keeps the stored nulls. Terms over
    columns that are not cast need nothing here: Polars moves them below the
    casts itself.

    Examples
    --------
    >>> split = _split_predicate((pl.col("role") == "user") & pl.col("group_id").is_null(),
    ...                          frozenset({"role"}))
    >>> str(split.stored), str(split.cast), dict(split.fixed)
    ('[(col("role")) == ("user")]', 'col("group_id").is_null()', {'role': 'user'})
    """
    if predicate is None or not enums:
        return _Split(stored=None, cast=predicate, fixed={})
    stored: list[pl.Expr] = []
    rest: list[pl.Expr] = []
    allowed: dict[str, frozenset[str]] = {}
    for term in _conjuncts(predicate):
        match = _enum_values(term, enums)
        if match is None:
            rest.append(term)
            continue
        name, values = match
        if name in DEFAULTED_COLUMNS and DEFAULTS[name] in values:
            term = term | pl.col(name).is_null()  # a null is the default, which the term keeps
        stored.append(term)
        allowed[name] = allowed.get(name, values) & values
    if not stored:
        return _Split(stored=None, cast=predicate, fixed={})
    read = {name for term in rest for name in term.meta.root_names()}
    fixed = {
        name: next(iter(values))
        for name, values in allowed.items()
        if len(values) == 1 and name not in read
    }
    return _Split(
        stored=reduce(operator.and_, stored),
        cast=reduce(operator.and_, rest) if rest else None,
        fixed=fixed,
    )


Frames = Callable[[bool, bool], pl.LazyFrame]
"""``frames(with_row_index, ordered)``: the stored rows, not cast, with FILE_COLUMN (and the
row index); in the scan's order if ``ordered``, else in the order read."""


class _Columnar:
    """Reads and validates the rows of a columnar source (see :class:`ItemScan`).

    ``casts`` bring the stored columns to their canonical types
    (:func:`_casts`); ``enums`` are the enumerations among them stored as
    text or categorical (:func:`_text_enums`).
    """

    __slots__ = ("casts", "enums", "frames", "offsets", "source")

    def __init__(
        self,
        source: str,
        frames: Frames,
        offsets: Callable[[str], int],
        casts: list[pl.Expr],
        enums: frozenset[str],
    ) -> None:
        self.source = source
        self.frames = frames
        self.offsets = offsets
        self.casts = casts
        self.enums = enums

    def query(
        self,
        columns: list[str],
        predicate: pl.Expr | None,
        n_rows: int | None,
        index: bool,
        ordered: bool = True,
    ) -> pl.LazyFrame:
        """The Polars query that reads a run's rows (see :data:`Reader`).

        The predicate's terms that decide on the stored values filter before
        the casts, the others after (:func:`_split_predicate`); a column the
        predicate holds to one value is that value, not read.
        """
        lf = self.frames(index, ordered)
        split = _split_predicate(predicate, self.enums)
        if split.stored is not None:
            lf = lf.filter(split.stored)
        if self.casts:
            lf = lf.with_columns(self.casts)
        if split.cast is not None:
            lf = lf.filter(split.cast)
        values = [
            pl.lit(split.fixed[name], POLARS_SCHEMA[name]).alias(name)
            if name in split.fixed
            else pl.col(name)
            for name in columns
        ]
        lf = lf.select(*values, FILE_COLUMN, *([_ROW] if index else []))
        return lf if n_rows is None else lf.head(n_rows)

    def batches(self, query: pl.LazyFrame, batch_size: int | None) -> Iterator[pl.DataFrame]:
        """The rows of ``query``, streamed in batches of ``batch_size`` rows (None: one batch).

        Raises
        ------
        SchemaError
            If Polars cannot read or cast the stored columns.
        """
        try:
            if batch_size is None:
                yield query.collect()
            else:
                yield from query.collect_batches(chunk_size=batch_size)
        except pl.exceptions.PolarsError as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SchemaError(f"{self.source}: cannot read the items: {text}") from None

    def __call__(
        self,
        columns: list[str],
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
        ordered: bool,
    ) -> Iterator[pl.DataFrame]:
        query = self.query(columns, predicate, n_rows, False, ordered)
        offset = 0
        ids: list[pl.Series] = []

        def relocated(exc: RecordError) -> RecordError:
            return self.relocate(exc, self.query(columns, predicate, n_rows, True, ordered))

        for df in self.batches(query, batch_size):
            try:
                out = _validated(df, columns)
            except RecordError as exc:
                raise relocated(_shifted(exc, offset)) from None
            if "id" in columns:
                ids.append(df.get_column("id"))
            offset += df.height
            yield out
        if len(ids) > 1:  # each batch was checked alone: check ids across batches
            try:
                _check_unique_ids(pl.concat(ids).to_frame())
            except RecordError as exc:
                raise relocated(exc) from None

    def relocate(self, exc: RecordError, indexed: pl.LazyFrame) -> RecordError:
        """``exc`` (at a row of what was read) restated at its file and row there.

        ``indexed`` is the run's query with the row index (see :meth:`query`).
        """
        if exc.row is None:
            return exc
        where = indexed.select(FILE_COLUMN, _ROW).collect()

        def at(row: int) -> tuple[str, int]:
            file, index = where.row(row)
            if file is None:
                return self.source, index
            return str(file), index - self.offsets(file)

        source, row = at(exc.row)
        message = exc.message
        first = exc.params.get(_FIRST)
        if isinstance(first, int):
            first_source, first_row = at(first)
            message = f"{message} (first at {first_source}: row {first_row})"
        return RecordError(message, source=source, row=row, field=exc.field)


_FIRST: Final = "first_row"


def _shifted(exc: RecordError, offset: int) -> RecordError:
    """``exc`` at a row of one batch, restated at its row in the whole run."""
    if exc.row is None or not offset:
        return exc
    first = exc.params.get(_FIRST)
    params = {_FIRST: first + offset} if isinstance(first, int) else None
    return RecordError(exc.message, row=exc.row + offset, field=exc.field, params=params)


def _check_unique_ids(df: pl.DataFrame) -> None:
    """Raise at the first row of ``df`` whose id is null or repeats an earlier row's (in params)."""
    ids = df.get_column("id")
    if not ids.null_count() and ids.n_unique() == ids.len():  # the cheap test first
        return
    id_ = pl.col("id")
    null, repeated = df.select(
        id_.is_null().arg_true().first().alias("null"),
        (id_.is_first_distinct().not_() & id_.is_not_null()).arg_true().first().alias("repeated"),
    ).row(0)
    if null is not None and (repeated is None or null < repeated):
        raise RecordError("must not be null", row=null, field="id")
    if repeated is None:
        return
    item_id = df.get_column("id")[repeated]
    first = df.select((id_ == item_id).arg_true().first()).item()
    raise RecordError(
        f"duplicate id {item_id!r}", row=repeated, field="id", params={_FIRST: int(first)}
    )


_NOT_AN_OBJECT: Final = ~pl.col("metadata").str.starts_with("{")


@lru_cache(maxsize=256)
def _row_checks(columns: tuple[str, ...]) -> list[tuple[pl.Expr, str, str, str | None]]:
    """:func:`~cognoxium.items.validation.row_checks` of ``columns``, built once per set of columns.

    Every batch of every run that reads those columns applies the same checks.
    A scan reads each enumeration with a lenient cast to its canonical Enum
    (:func:`_casts`), which turns a value outside it into null, so the check
    that an enumeration holds one of its values is whether it is null: the
    same rows, field and message, without casting the column back to text.
    The check that metadata is a JSON object is left out:
    :func:`~cognoxium.items.validation.canonical_json_columns`, which
    :func:`_validated` applies first, makes it.

    Returns
    -------
    list of (polars.Expr, str, str, str or None)
        ``(bad-row mask, field, message, nulls)``: ``nulls`` names the column
        whose null values are exactly the bad rows (the mask is its
        ``is_null()``), else ``None``.
    """
    checks = []
    for bad, field, message in row_checks(columns):
        if bad.meta.eq(_NOT_AN_OBJECT):
            continue
        if field in _ENUMS and set(bad.meta.root_names()) == {field}:
            bad = pl.col(field).is_null()
        nulls = field if bad.meta.eq(pl.col(field).is_null()) else None
        checks.append((bad, field, message, nulls))
    return checks


def _validated(df: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """The rows read, conformed when every item column was read.

    Otherwise the JSON columns read are brought to canonical JSON and the
    row checks of the columns read are applied; a check for nulls is
    passed by a column without any (Arrow keeps the count), unread.

    Raises
    ------
    RecordError
        At the first invalid row of ``df`` (its 0-based row in ``df``).
    """
    if "id" in columns:
        _check_unique_ids(df)
    if all(name in columns for name in COLUMNS):
        conformed = conform(df.select(COLUMNS))
        return df.with_columns(conformed.get_columns())
    if df.is_empty():
        return df
    df = canonical_json_columns(df)
    checks = [
        (bad, field, message)
        for bad, field, message, nulls in _row_checks(
            tuple(name for name in columns if name in POLARS_SCHEMA)
        )
        if nulls is None or df.get_column(nulls).null_count()
    ]
    if not checks:
        return df
    firsts = df.select(
        [
            bad.fill_null(False).arg_true().first().alias(str(i))
            for i, (bad, _, _) in enumerate(checks)
        ]
    ).row(0)
    failed = [(row, i) for i, row in enumerate(firsts) if row is not None]
    if failed:
        row, i = min(failed)
        _, field, message = checks[i]
        raise RecordError(message, row=row, field=field)
    return df


_GLOB_CHARS: Final = "*?["


def _missing(source: str, reason: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, reason, source)


def _suffixed(path: Path, suffixes: tuple[str, ...] | None) -> bool:
    return path.is_file() and (suffixes is None or path.suffix.lower() in suffixes)


def _holds_file(directory: str, suffixes: tuple[str, ...] | None) -> bool:
    """Whether ``directory`` holds a file whose suffix is in ``suffixes`` (any for ``None``).

    The tree is walked depth first and the walk stops at the first such
    file, so a store of many partition directories is not listed in full.
    Directories that cannot be listed, and links to directories, are passed
    over, as :meth:`pathlib.Path.rglob` passes them.
    """
    for root, _, names in os.walk(directory):
        for name in names:
            if _suffixed(Path(root, name), suffixes):
                return True
    return False


def _check_source(source: str, suffixes: tuple[str, ...] | None = None) -> None:
    """Check that a scan's source names something to read, as opening a file would.

    ``source`` is a file, a directory (it must hold a file whose suffix is
    in ``suffixes``, any file for ``None``, at any depth) or a glob (``*``,
    ``?``, ``[``; ``**`` recurses), which must match a file. A file is
    opened once; the files of a directory or glob are listed until the
    first, not opened (the scan reads them later).

    Raises
    ------
    FileNotFoundError
        If there is no such path, the glob matches no file or the directory
        holds none (``errno.ENOENT``; ``filename`` is ``source``), as
        :func:`~cognoxium.items.io.read_items` raises for a missing file.
    OSError
        What opening the file or listing the directory raises
        (``PermissionError``, ``NotADirectoryError``, ...), naming it.

    Examples
    --------
    >>> _check_source("/no/such/items.parquet")
    Traceback (most recent call last):
    ...
    FileNotFoundError: [Errno 2] No such file or directory: '/no/such/items.parquet'
    """
    if any(ch in source for ch in _GLOB_CHARS):
        matches = (m for m in glob.iglob(source, recursive=True) if _suffixed(Path(m), suffixes))
        if next(matches, None) is None:
            raise _missing(source, "no file matches the glob")
    elif os.path.isdir(source):
        os.listdir(source)  # a directory that cannot be listed raises PermissionError here
        if not _holds_file(source, suffixes):
            kinds = "file" if suffixes is None else f"{'/'.join(suffixes)} file"
            raise _missing(source, f"no {kinds} under the directory")
    else:
        with open(source, "rb"):
            pass


def _parquet_schema(
    source: str, hive_partitioning: bool | None, hive_schema: Mapping[str, pl.DataType] | None
) -> tuple[pl.Schema, list[str]]:
    """The schema of a Parquet scan with its hive columns, and the names of the hive columns."""
    # Polars reads hive partitions only when asked to, or of a directory when not told.
    hive_possible = hive_partitioning or (hive_partitioning is None and os.path.isdir(source))
    try:
        schema = pl.scan_parquet(
            source, hive_partitioning=hive_partitioning, hive_schema=hive_schema
        ).collect_schema()
        stored = (
            pl.scan_parquet(source, hive_partitioning=False).collect_schema()
            if hive_possible
            else schema
        )
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise SchemaError(f"{source}: cannot scan Parquet: {exc}") from None
    hive = [name for name in schema if name not in stored]
    unknown = [name for name in stored if name not in POLARS_SCHEMA and name != STORE_POSITION]
    if unknown:
        raise SchemaError(
            f"{source}: unknown columns {unknown}; the item columns are {list(COLUMNS)}"
        )
    clash = [name for name in hive if name in POLARS_SCHEMA]
    if clash:
        raise SchemaError(f"{source}: hive partition columns {clash} clash with item columns")
    return schema, hive


def scan_parquet_items(
    source: str | os.PathLike[str],
    *,
    hive_partitioning: bool | None = None,
    hive_schema: Mapping[str, pl.DataType] | None = None,
) -> ItemScan:
    """Scan item rows from Parquet: a file, a glob or a (hive-partitioned) directory.

    Parameters
    ----------
    source
        The path; a directory or glob reads every Parquet file under it.
    hive_partitioning
        Read ``key=value`` directories as columns; ``None`` infers it for a
        directory (Polars' rule).
    hive_schema
        The types of the hive partition columns, such as
        ``{"conversation": pl.String()}`` (``None``: inferred from their
        values, as Polars infers them).

    Returns
    -------
    ItemScan
        Item columns (every item column must be stored, in types castable to
        the canonical ones), then the hive partition columns as strings or
        numbers, as Polars infers them. Files that also store
        the column ``__cognoxium_position`` (a partitioned store
        written by :func:`~cognoxium.items.store.write_partitioned`) give
        their rows in that order, so a store's items come in the order they
        were written, not in the order of its partitions' paths; other files
        give theirs in path order, each file's rows in file order.

    Raises
    ------
    FileNotFoundError
        If there is no such path, the glob matches no file or the directory
        holds no file (``errno.ENOENT``; ``filename`` is ``source``), as
        :func:`~cognoxium.items.io.read_items` raises for a missing file.
    OSError
        If a file cannot be opened (``PermissionError``,
        ``NotADirectoryError``, ...); ``filename`` names the file.
    SchemaError
        If the files are not Parquet, on unknown or missing item columns,
        or if a partition column is named like an item column.

    Examples
    --------
    >>> import tempfile
    >>> from cognoxium.items import records_to_frame, write_parquet
    >>> path = tempfile.mkdtemp() + "/items.parquet"
    >>> write_parquet(records_to_frame([{"id": "a", "role": "user", "text": "hi"}]), path)
    >>> scan = scan_parquet_items(path)
    >>> scan.lazy().filter(pl.col("id") == "a").select("text").collect().item()
    'hi'
    >>> read = scan.reads[-1]
    >>> read.rows, read.columns, len(read.files)
    (1, ('id', 'text'), 1)
    """
    where = str(source)
    _check_source(where)
    schema, hive = _parquet_schema(where, hive_partitioning, hive_schema)
    positioned = STORE_POSITION in schema

    def frames(index: bool, ordered: bool) -> pl.LazyFrame:
        lf = pl.scan_parquet(
            where,
            hive_partitioning=hive_partitioning,
            hive_schema=hive_schema,
            include_file_paths=FILE_COLUMN,
            row_index_name=_ROW if index else None,
        )
        # A partitioned store: its items in the order they were written.
        return lf.sort(STORE_POSITION) if positioned and ordered else lf

    def offset(file: str) -> int:
        # The first global row index of ``file`` (Polars numbers rows across files).
        rows = frames(True, False).filter(pl.col(FILE_COLUMN) == file).select(pl.col(_ROW).min())
        return int(rows.collect().item())

    output = pl.Schema({**dict(POLARS_SCHEMA), **{name: schema[name] for name in hive}})
    return ItemScan(
        kind="parquet",
        source=where,
        schema=output,
        partitions=tuple(hive),
        reader=_Columnar(where, frames, offset, _casts(schema, where), _text_enums(schema)),
    )


def scan_lazy_items(lf: pl.LazyFrame, *, source: str = "LazyFrame") -> ItemScan:
    """Read the item rows of a Polars LazyFrame lazily; errors name the row in ``lf``.

    Parameters
    ----------
    lf
        A LazyFrame with every item column (types castable to the canonical
        ones) and no other column.
    source
        Named in errors and plans.

    Raises
    ------
    SchemaError
        On unknown or missing item columns.
    """
    schema = lf.collect_schema()
    unknown = [name for name in schema if name not in POLARS_SCHEMA]
    if unknown:
        raise SchemaError(
            f"{source}: unknown columns {unknown}; the item columns are {list(COLUMNS)}"
        )
    casts = _casts(schema, source)
    items = lf.select(COLUMNS)

    def frames(index: bool, ordered: bool) -> pl.LazyFrame:
        out = items.with_columns(pl.lit(None, pl.String).alias(FILE_COLUMN))
        return out.with_row_index(_ROW) if index else out

    return ItemScan(
        kind="lazyframe",
        source=source,
        schema=pl.Schema(POLARS_SCHEMA),
        partitions=(),
        reader=_Columnar(source, frames, lambda file: 0, casts, _text_enums(schema)),
    )


# ---------------------------------------------------------------------------
# JSONL


_JSONL_SUFFIXES: Final = tuple(
    suffix for suffix, form in ITEM_FORMATS.items() if form.name == "jsonl"
)


def _jsonl_files(source: str) -> list[str]:
    """The JSONL files of a file, a directory (recursively) or a glob, sorted."""
    _check_source(source, _JSONL_SUFFIXES)
    if any(ch in source for ch in _GLOB_CHARS):
        return sorted(f for f in glob.glob(source, recursive=True) if os.path.isfile(f))
    if Path(source).is_dir():
        return sorted(str(p) for p in Path(source).rglob("*") if _suffixed(p, _JSONL_SUFFIXES))
    return [source]


def _check_ids_across(frames: list[pl.DataFrame], files: list[str]) -> None:
    """Raise at the first id that an earlier file already holds."""
    seen: pl.Series = pl.Series("id", [], pl.String)
    for frame, file in zip(frames, files, strict=True):
        repeated = frame.get_column("id").is_in(seen.implode()).arg_true()
        if repeated.len():
            row = int(repeated[0])
            item_id = frame.get_column("id")[row]
            raise RecordError(
                f"duplicate id {item_id!r} (also in an earlier file)",
                source=file,
                row=row,
                field="id",
            )
        seen = seen.append(frame.get_column("id"))


def scan_ndjson_items(source: str | os.PathLike[str]) -> ItemScan:
    """Scan item records from JSONL: a file, a directory of ``.jsonl``/``.ndjson`` files or a glob.

    Records are in the JSONL record form of
    :func:`~cognoxium.items.io.read_jsonl`, whose nested payloads no
    columnar reader parses; each run reads every file in full (in path
    order) and then applies the predicate, projection and row limit. The
    scan keeps the plan lazy: nothing is read before a query runs.

    Raises
    ------
    FileNotFoundError
        If there is no such path, the glob matches no file or the directory
        holds no ``.jsonl``/``.ndjson`` file (``errno.ENOENT``; ``filename``
        is ``source``), as :func:`~cognoxium.items.io.read_items` raises
        for a missing file.
    OSError
        If a file cannot be opened (``PermissionError``,
        ``NotADirectoryError``, ...); ``filename`` names the file.
    RecordError
        At collect: at the first invalid line, naming the file, the line
        and the field; or at an id another file already holds (naming the
        0-based record).

    Examples
    --------
    >>> import tempfile
    >>> from cognoxium.items import records_to_frame, write_jsonl
    >>> path = tempfile.mkdtemp() + "/items.jsonl"
    >>> write_jsonl(records_to_frame([{"id": "a", "role": "user", "text": "hi"}]), path)
    >>> scan_ndjson_items(path).lazy().select("id", "text").collect().row(0)
    ('a', 'hi')
    """
    where = str(source)
    files = _jsonl_files(where)

    def reader(
        columns: list[str],
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
        ordered: bool,
    ) -> Iterator[pl.DataFrame]:
        frames = [read_jsonl(file) for file in files]
        _check_ids_across(frames, files)
        named = [
            frame.with_columns(pl.lit(file, pl.String).alias(FILE_COLUMN))
            for frame, file in zip(frames, files, strict=True)
        ]
        lf = pl.concat(named).lazy()
        if predicate is not None:
            lf = lf.filter(predicate)
        lf = lf.select(*columns, FILE_COLUMN)
        yield (lf if n_rows is None else lf.head(n_rows)).collect()

    return ItemScan(
        kind="ndjson",
        source=where,
        schema=pl.Schema(POLARS_SCHEMA),
        partitions=(),
        reader=reader,
    )
