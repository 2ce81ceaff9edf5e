"""A store of context items: an item file, or Parquet files partitioned by one metadata key.

:func:`write_partitioned` writes items as a hive-partitioned store,
``ROOT/<key>=<value>/part-0.parquet``, each item under the text of its
``metadata.<key>``, with each item's position in the items written (column
``__cognoxium_position``). :func:`read_store` reads a store back whole, in
the order it was written; :func:`check_store` checks every item of one a
batch of rows at a time, without holding it; :func:`partition_key` tells a
store's key, and :func:`scan_store` and :func:`collect_store` read part of
one (the Ray engine, :mod:`cognoxium.app.distributed`, reads only the
partitions a scope needs).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

import polars as pl

from cognoxium._columns import STORE_POSITION
from cognoxium.exceptions import RecordError, SchemaError
from cognoxium.items.convert import to_arrow
from cognoxium.items.io import invalid_utf8_error, read_items
from cognoxium.items.validation import check_unique_ids, conform

__all__ = [
    "CHECK_ROWS",
    "PLAIN_KEY",
    "check_store",
    "collect_store",
    "partition_key",
    "read_store",
    "scan_store",
    "unreadable_store",
    "write_partitioned",
]

PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A metadata key that is a plain name (a letter or ``_``, then letters, digits or ``_``)."""

CHECK_ROWS = 100_000
"""Rows :func:`check_store` checks at a time."""


def partition_key(path: str | os.PathLike[str]) -> str | None:
    """The hive partition key of a store directory; ``None`` for a file.

    Parameters
    ----------
    path
        A ``.parquet``/``.jsonl`` file, or a directory whose entries are
        ``<key>=<value>`` directories of Parquet files, all with one key;
        every item under ``<key>=<value>`` has the text ``<value>`` at
        ``metadata.<key>`` (as :func:`write_partitioned` writes them).

    Raises
    ------
    SchemaError
        If ``path`` is a directory that is not such a store (no partition,
        another entry, or two keys); the message names it.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "conversation=c1").mkdir()
    >>> partition_key(root)
    'conversation'
    """
    root = Path(path)
    if not root.is_dir():
        return None
    names = sorted(entry.name for entry in os.scandir(root) if not entry.name.startswith("."))
    keys = {name.partition("=")[0] for name in names if "=" in name}
    stray = [name for name in names if "=" not in name or not (root / name).is_dir()]
    if len(keys) != 1 or stray:
        raise SchemaError(
            f"{root}: a store directory holds only <key>=<value> partition directories with "
            f"one key; found keys {sorted(keys)} and other entries {stray[:3]}"
        )
    return keys.pop()


def scan_store(path: Path, key: str | None) -> pl.LazyFrame:
    """A lazy scan of a store's Parquet files, the partition column (``key``) as text.

    Parameters
    ----------
    path
        A Parquet file (``key`` ``None``) or a store directory.
    key
        The store's :func:`partition_key`.

    Returns
    -------
    polars.LazyFrame
        The stored columns, the partition column among them for a directory;
        read with :func:`collect_store`.
    """
    if key is None:
        return pl.scan_parquet(path)
    return pl.scan_parquet(
        path / "**" / "*.parquet", hive_partitioning=True, hive_schema={key: pl.String()}
    )


def collect_store(lazy: pl.LazyFrame, key: str | None, source: Path) -> pl.DataFrame:
    """Read a scan of a store (:func:`scan_store`, maybe filtered) as validated items.

    The partition column is dropped, the items are put in their stored
    order (by ``__cognoxium_position``, when the files hold it), and the
    rows are conformed (:func:`~cognoxium.items.validation.conform`).

    Parameters
    ----------
    lazy
        The scan.
    key
        The store's partition key, or ``None`` for a file.
    source
        The store, named in errors.

    Returns
    -------
    polars.DataFrame
        The items, with :data:`~cognoxium.items.schema.POLARS_SCHEMA`.

    Raises
    ------
    SchemaError
        If the files cannot be read as Parquet or do not have item columns.
    RecordError
        If a value is not valid.
    """
    if key is not None:
        lazy = lazy.drop(key)
    try:
        positioned = STORE_POSITION in lazy.collect_schema()
    except pl.exceptions.PolarsError as exc:
        raise unreadable_store(source, exc) from None
    if positioned:  # the items in the order they were written, whatever the partitions
        lazy = lazy.sort(STORE_POSITION).drop(STORE_POSITION)
    try:
        table = lazy.collect()
    except pl.exceptions.PolarsError as exc:
        raise unreadable_store(source, exc) from None
    return conform(table, source=str(source))


def unreadable_store(source: Path, error: Exception) -> SchemaError | RecordError:
    """The error of a store directory Polars cannot read, naming the file at fault if it can.

    Polars reads a store's files as one table and says what failed, not
    where. Each file's Parquet metadata is read in path order: the first
    whose metadata cannot be read, or whose columns differ from the first
    file's, is named (in the message and as the error's ``file``). When
    every file's metadata reads alike, a string that is not UTF-8 is named
    by its file, row and column (a :class:`RecordError`, see
    :func:`~cognoxium.items.io.invalid_utf8_error`).

    Parameters
    ----------
    source
        The store directory (a file is taken as the one file at fault).
    error
        Polars' error.

    Returns
    -------
    SchemaError or RecordError
        ``"<source>: not a readable Parquet store: ..."``, or the value that is not UTF-8.
    """
    fault = _file_at_fault(source)
    if fault is None:
        files = sorted(source.rglob("*.parquet")) if source.is_dir() else [source]
        bad = invalid_utf8_error(files)
        return bad or SchemaError(f"{source}: not a readable Parquet store: {error}")
    file, why = fault
    return SchemaError(
        f"{source}: not a readable Parquet store: {file}: {why} (Polars: {error})", file=str(file)
    )


def _file_at_fault(source: Path) -> tuple[Path, str] | None:
    """The first file of ``source`` whose metadata is unreadable or differs, and how."""
    files = sorted(source.rglob("*.parquet")) if source.is_dir() else [source]
    first: tuple[Path, dict[str, pl.DataType]] | None = None
    for file in files:
        try:
            schema = pl.read_parquet_schema(file)
        except (pl.exceptions.PolarsError, OSError) as exc:
            return file, f"cannot read its Parquet metadata: {exc}"
        if first is None:
            first = (file, schema)
        elif schema != first[1]:
            differ = [
                f"{name} {schema.get(name, 'missing')} (there {first[1].get(name, 'missing')})"
                for name in dict.fromkeys([*first[1], *schema])
                if schema.get(name) != first[1].get(name)
            ]
            return file, f"its columns differ from those of {first[0]}: {', '.join(differ)}"
    return None


def read_store(path: str | os.PathLike[str]) -> pl.DataFrame:
    """Read a whole store: an item file, or a hive-partitioned Parquet directory.

    The items come in the order :func:`write_partitioned` wrote them (by
    their stored position); a directory without positions is read in the
    order of its paths, each file's rows in file order. The partition
    column is dropped (its value is in every item's metadata).

    Raises
    ------
    SchemaError, RecordError
        If the files are not valid items.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from cognoxium.items.records import records_to_frame
    >>> root = pathlib.Path(tempfile.mkdtemp()) / "store"
    >>> write_partitioned(records_to_frame([
    ...     {"id": "b", "role": "user", "text": "yo", "metadata": {"conversation": "c2"}},
    ...     {"id": "a", "role": "user", "text": "hi", "metadata": {"conversation": "c1"}},
    ... ]), root, key="conversation")
    >>> read_store(root)["id"].to_list()
    ['b', 'a']
    """
    source = Path(path)
    key = partition_key(source)
    if key is None:
        return read_items(source)
    return collect_store(scan_store(source, key), key, source)


def check_store(path: str | os.PathLike[str], *, batch_rows: int = CHECK_ROWS) -> None:
    """Check every item of a store directory as :func:`read_store` does, a batch at a time.

    The files are read in batches of about ``batch_rows`` rows (Polars'
    streaming engine), each conformed as :func:`read_store` conforms the
    whole store (:func:`~cognoxium.items.validation.conform`: columns,
    types, values, content hashes), and the ids are checked unique across
    the whole store. Memory follows a batch and the store's ids, not the
    store: for a reader that then reads the store a part at a time.

    Parameters
    ----------
    path
        A store directory (see :func:`partition_key`).
    batch_rows
        Rows per batch, at least 1.

    Raises
    ------
    SchemaError
        If ``path`` is not a store directory, its files cannot be read as
        Parquet or do not have item columns.
    RecordError
        At the first invalid item; its ``row`` counts the store's rows in
        the order of its files' paths, from 0 (:func:`read_store` names
        its row in the store's order).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from cognoxium.items.records import records_to_frame
    >>> def item(text, conversation):
    ...     return records_to_frame([{"id": "a", "role": "user", "text": text,
    ...                               "metadata": {"conversation": conversation}}])
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> write_partitioned(item("hi", "c1"), root / "good", key="conversation")
    >>> check_store(root / "good")
    >>> twice = pl.concat([item("hi", "c1"), item("yo", "c2")])  # one id in two partitions
    >>> write_partitioned(twice, root / "store", key="conversation")
    >>> check_store(root / "store", batch_rows=1)
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: ...store: row 1: field id: duplicate id 'a' (first at row 0)
    """
    source = Path(path)
    key = partition_key(source)
    if key is None:
        raise SchemaError(f"{source}: not a store directory of <key>=<value> partitions")
    lazy = scan_store(source, key).drop(key)
    try:
        if STORE_POSITION in lazy.collect_schema():
            lazy = lazy.drop(STORE_POSITION)
    except pl.exceptions.PolarsError as exc:
        raise unreadable_store(source, exc) from None
    at = (str(source), None)
    ids: list[pl.Series] = []
    offset = 0
    try:
        for batch in lazy.collect_batches(chunk_size=max(int(batch_rows), 1)):
            try:
                ids.append(conform(batch, source=str(source)).get_column("id"))
            except RecordError as exc:
                if exc.field == "id" and exc.message.startswith("duplicate id"):
                    # name both rows in the store, not in the batch
                    check_unique_ids(pl.concat([*ids, batch.get_column("id")]).to_frame(), *at)
                raise _at(exc, offset) from None
            offset += batch.height
    except pl.exceptions.PolarsError as exc:
        raise unreadable_store(source, exc) from None
    if len(ids) > 1:  # each batch was checked alone
        check_unique_ids(pl.concat(ids).to_frame(), *at)


def _at(exc: RecordError, offset: int) -> RecordError:
    """``exc`` (at a row of one batch) at its row in the store, ``offset`` rows before."""
    if exc.row is None or not offset:
        return exc
    params = {name: value for name, value in exc.params.items() if name != "row"}
    return RecordError(
        exc.message,
        source=exc.source,
        row=exc.row + offset,
        field=exc.field,
        code=exc.code,
        params=params,
    )


def write_partitioned(store: pl.DataFrame, root: str | os.PathLike[str], *, key: str) -> None:
    """Write items as a hive-partitioned Parquet store by one metadata key.

    Every item goes to ``root/<key>=<value>/part-0.parquet``, ``<value>``
    being its ``metadata.<key>`` text percent-encoded (RFC 3986: every byte
    of its UTF-8 but letters, digits and ``-._~`` is written ``%XX``), which
    Polars' hive reader decodes: a value holding ``=``, ``/``, spaces or any
    other text reads back as written. Partitions are written in order of
    value, items in store order. A file holds the item columns (canonical
    schema), then the column ``__cognoxium_position``: each item's 0-based
    position in ``store`` (Int64), by which :func:`read_store`,
    :func:`~cognoxium.app.distributed.read_scope` and
    :meth:`~cognoxium.frame.frame.CognitionFrame.scan_parquet` give the items
    back in ``store`` order, so a pack of them is the pack of ``store``.

    Raises
    ------
    SchemaError
        If ``key`` is not a plain name (a letter or ``_``, then letters,
        digits or ``_``), or an item has no text value at
        ``metadata.<key>``; the message names the key or the item.
    FileExistsError
        If ``root`` exists.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from cognoxium.items.records import records_to_frame
    >>> root = pathlib.Path(tempfile.mkdtemp()) / "store"
    >>> write_partitioned(records_to_frame([
    ...     {"id": "a", "role": "user", "text": "hi", "metadata": {"thread": "YWJj=="}},
    ... ]), root, key="thread")
    >>> [path.name for path in root.iterdir()]
    ['thread=YWJj%3D%3D']
    >>> read_store(root)["metadata"].to_list()
    ['{"thread":"YWJj=="}']
    """
    import pyarrow.parquet as pq

    if not PLAIN_KEY.fullmatch(key):
        raise SchemaError(
            f"cannot partition by metadata.{key}: the key {key!r} is not a plain name "
            "(a letter or _, then letters, digits or _)"
        )
    values = store.get_column("metadata").str.json_path_match(f"$.{key}")
    bad = store.filter(values.is_null())
    if bad.height:
        raise SchemaError(
            f"cannot partition by metadata.{key}: item {bad['id'][0]!r} has no text value "
            f"there; {bad.height} such items"
        )
    target = Path(root)
    target.mkdir(parents=True)
    positions = pl.int_range(pl.len(), dtype=pl.Int64).alias(STORE_POSITION)
    parts = store.with_columns(values.alias("__partition"), positions).partition_by(
        "__partition", maintain_order=True, include_key=False, as_dict=True
    )
    for (value,), part in sorted(parts.items(), key=lambda kv: str(kv[0][0])):
        folder = target / f"{key}={urllib.parse.quote(str(value), safe='')}"
        folder.mkdir()
        pq.write_table(to_arrow(part), folder / "part-0.parquet")
