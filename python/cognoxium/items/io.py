"""Reading and writing context items as JSONL and Parquet.

:data:`ITEM_FORMATS` holds the reader and the writer of each file suffix;
:func:`item_format` looks a path's up, and :func:`read_items` reads a file
by it. Readers are all-or-nothing: the first bad record raises a
:class:`~cognoxium.exceptions.RecordError` naming the file, the line and the
field, and nothing is returned. Writers write to a temporary file beside the
target and rename it into place, so a failed write leaves no partial file.

Readers refuse an item whose payload holds more than the maximum item size
(:func:`max_item_bytes`: 64 MiB unless ``COGNOXIUM_MAX_ITEM_BYTES`` or the
reader's ``max_item_bytes`` says otherwise) with a RecordError of code
``record.too_large`` naming the item and its size; no item is cut.
"""

from __future__ import annotations

import codecs
import errno
import gc
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from cognoxium._columns import STORE_POSITION
from cognoxium.exceptions import ConfigError, RecordError, SchemaError
from cognoxium.items._checks import MAX_JSON_DEPTH, invalid_json, json_text_depth
from cognoxium.items.convert import frame_to_items, to_arrow
from cognoxium.items.records import item_to_record, records_to_frame
from cognoxium.items.validation import conform

__all__ = [
    "ITEM_FORMATS",
    "MAX_ITEM_BYTES",
    "MAX_ITEM_BYTES_ENV",
    "ItemFormat",
    "atomic_path",
    "atomic_write",
    "check_item_sizes",
    "find_invalid_utf8",
    "invalid_utf8_error",
    "item_format",
    "json_lines",
    "max_item_bytes",
    "parse_json_lines",
    "payload_bytes_expr",
    "read_items",
    "read_jsonl",
    "read_parquet",
    "write_jsonl",
    "write_parquet",
]

MAX_ITEM_BYTES: int = 64 * 1024 * 1024
"""The default maximum item size, in bytes of payload (64 MiB)."""

MAX_ITEM_BYTES_ENV = "COGNOXIUM_MAX_ITEM_BYTES"
"""Environment variable that sets the readers' default maximum item size, in bytes."""


def max_item_bytes() -> int:
    """The readers' default maximum item size, in bytes of payload.

    ``$COGNOXIUM_MAX_ITEM_BYTES`` when set and not empty (a whole number of
    bytes, at least 1), else :data:`MAX_ITEM_BYTES` (64 MiB).

    Raises
    ------
    ConfigError
        If the variable is not a whole number of at least 1; the message
        names the variable.

    Examples
    --------
    >>> import os
    >>> max_item_bytes() == int(os.environ.get(MAX_ITEM_BYTES_ENV) or MAX_ITEM_BYTES)
    True
    """
    raw = os.environ.get(MAX_ITEM_BYTES_ENV, "").strip()
    if not raw:
        return MAX_ITEM_BYTES
    return _checked_limit(
        int(raw) if raw.isdecimal() and raw.isascii() else raw, MAX_ITEM_BYTES_ENV
    )


def _checked_limit(value: object, name: str) -> int:
    """``value`` if it is a whole number of bytes >= 1, else a ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{name} must be a whole number of bytes, at least 1, got {value!r}",
            params={"name": name, "value": str(value)},
        )
    return value


def payload_bytes_expr() -> pl.Expr:
    """The size of each item's payload, in bytes (what the maximum item size limits).

    ============  ==========================================================
    payload_kind  size
    ============  ==========================================================
    text          UTF-8 bytes of ``text``
    json          UTF-8 bytes of the canonical JSON in ``json``
    binary        bytes of ``binary``
    reference     UTF-8 bytes of ``ref_uri`` and ``ref_title``
    ============  ==========================================================

    Returns
    -------
    polars.Expr
        Int64, named ``payload_bytes``; reads the payload columns only (the
        sizes of strings are stored with them, so no text is scanned).

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> rows = records_to_frame([{"id": "a", "role": "user", "text": "héllo"}])
    >>> rows.select(payload_bytes_expr()).item()
    6
    """
    reference = pl.col("ref_uri").str.len_bytes() + pl.col("ref_title").str.len_bytes().fill_null(0)
    return (
        pl.coalesce(
            pl.col("text").str.len_bytes(),
            pl.col("json").str.len_bytes(),
            pl.col("binary").bin.size(),
            reference,
        )
        .fill_null(0)
        .cast(pl.Int64)
        .alias("payload_bytes")
    )


def check_item_sizes(
    df: pl.DataFrame,
    limit: int | None = None,
    *,
    source: str | None = None,
    lines: list[int] | None = None,
) -> None:
    """Raise for the first item whose payload holds more than ``limit`` bytes.

    Parameters
    ----------
    df
        Items in the canonical schema.
    limit
        The maximum item size in bytes of payload (see
        :func:`payload_bytes_expr`); ``None`` for :func:`max_item_bytes`.
    source
        The file the items come from, named in the error.
    lines
        The 1-based line of each row in ``source`` (JSONL); without it the
        error names the 0-based row.

    Raises
    ------
    RecordError
        Code ``record.too_large``, naming the item's id, its size and the
        limit (params ``id``, ``bytes``, ``max_item_bytes``), at its line or
        row; nothing is cut or dropped.
    ConfigError
        If ``limit`` is not a whole number of at least 1.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> rows = records_to_frame([{"id": "log", "role": "document", "text": "x" * 2000}])
    >>> check_item_sizes(rows, 4096)
    >>> try:
    ...     check_item_sizes(rows, 1024)
    ... except RecordError as error:
    ...     print(error.code, error.params)
    record.too_large {'id': 'log', 'bytes': 2000, 'max_item_bytes': 1024, 'row': 0}
    """
    bound = max_item_bytes() if limit is None else _checked_limit(limit, "max_item_bytes")
    sizes = df.select(payload_bytes_expr()).to_series()
    over = (sizes > bound).arg_true()
    if over.len() == 0:
        return
    row = int(over[0])
    size = int(sizes[row])
    kind = str(df.get_column("payload_kind")[row])
    field = {"text": "text", "json": "json", "binary": "binary"}.get(kind, "ref_uri")
    item = str(df.get_column("id")[row])
    raise RecordError(
        f"item {item!r} has {size:,} bytes of payload, more than the maximum item size of "
        f"{bound:,} bytes; split it, or raise the limit (max_item_bytes, or the "
        f"{MAX_ITEM_BYTES_ENV} environment variable)",
        source=source,
        line=None if lines is None else lines[row],
        row=row if lines is None else None,
        field=field,
        code="record.too_large",
        params={"id": item, "bytes": size, "max_item_bytes": bound},
    )


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed onto ``path`` when the block succeeds.

    On an exception the temporary file is removed and ``path`` is untouched.
    The directory of ``path`` is created if needed.

    Raises
    ------
    IsADirectoryError
        If ``path`` is a directory, before the block runs.
    OSError
        If the temporary file cannot be made or renamed onto ``path``; the
        error's ``filename`` is ``path``, never the temporary file.
    """
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(
            errno.EISDIR, "Is a directory; give the path of a file to write", str(target)
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise _naming(exc, target) from None
    os.close(fd)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual mode
        try:
            os.replace(tmp, target)
        except OSError as exc:
            raise _naming(exc, target) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _naming(exc: OSError, target: Path) -> OSError:
    """``exc`` restated at ``target``: the path the caller gave, not a temporary file."""
    if exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, str(target))


@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` and rename it onto ``path`` on success.

    On an exception the temporary file is removed and ``path`` is untouched.

    Raises
    ------
    OSError
        As :func:`atomic_path` does (an ``IsADirectoryError`` for a directory).
    """
    encoding = None if "b" in mode else "utf-8"
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding) as handle:
        yield handle


_RECORD_DEPTH = MAX_JSON_DEPTH + 2
"""The deepest record a reader parses: a JSON payload's value sits two levels in."""


def json_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    r"""Yield ``(line number, JSON value)`` for each non-blank line of a UTF-8 JSONL file.

    Lines end at ``\n`` only (JSON text may hold U+2028 and other line
    breaks); a UTF-8 byte order mark at the start of the file is skipped.

    Raises
    ------
    RecordError
        At the first line that is not UTF-8, not JSON, nested deeper than
        :data:`~cognoxium.items.MAX_JSON_DEPTH` (plus the record's own
        levels), or with a key twice in one object (a reader would keep
        the last), naming the file, the 1-based line and, for nesting, the
        top-level field, for a key given twice, the key.
    OSError
        If the file cannot be read.
    """
    source = str(path)
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            present, value = _line_value(raw, number, source)
            if present:
                yield number, value


def _line_value(raw: bytes, number: int, source: str) -> tuple[bool, Any]:
    """``(False, None)`` for a blank line, else ``(True, its JSON value)`` (:func:`json_lines`)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(
            f"not UTF-8 text (byte {exc.start + 1} of the line)",
            source=source,
            line=number,
        ) from None
    if not line.strip():
        return False, None
    if line.count("{") + line.count("[") > _RECORD_DEPTH:
        depth, key = json_text_depth(line, _RECORD_DEPTH)
        if depth > _RECORD_DEPTH:
            raise RecordError(
                f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects",
                source=source,
                line=number,
                field=key,
            )
    try:
        # Without its line terminator, so an error's column is on this line.
        return True, json.loads(line.rstrip("\r\n"), object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise RecordError(invalid_json(exc), source=source, line=number) from None
    except _DuplicateKeyError as exc:
        raise RecordError(
            f"the key {exc.key!r} appears twice in one object; JSON readers keep the last, "
            "which would drop the first without a word: give each key once",
            source=source,
            line=number,
            field=exc.key,
        ) from None


class _DuplicateKeyError(Exception):
    """A JSON object holds one key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict; :class:`_DuplicateKeyError` if a key appears twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return out


def _keys_unique(raw: bytes, value: Any) -> bool:
    r"""Whether JSON text parsed to ``value`` surely gives each key of its objects once.

    orjson writes ``value`` back with every key once, as ``"key":``, and a
    quote inside a string as ``\"``. Text with no whitespace after a quote
    and no quote written ``\u0022`` writes its keys the same way and holds
    at least as many ``":`` as that writing, one more for each key given
    again; so with as many, no key is there twice. The text of many lines
    is checked at once, with ``value`` the list of their values; text
    that fails the check (whitespace after a quote, as in ``"key" :``,
    which the count would miss, included) is read again key by key
    (:func:`_unique_keys`), which says which key is there twice, if any.
    """
    if b'" ' in raw or b'"\t' in raw or b"\\u0022" in raw:
        return False
    try:
        written = orjson.dumps(value)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits
        return False
    return raw.count(b'":') == written.count(b'":')


_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_INTEGER = b"0" * 19
"""A run of digits (each read as 0) that may be an integer beyond 64 bits, which orjson
reads as a float."""


def _long_integer(data: bytes) -> bool:
    """Whether ``data`` holds 19 digits in a row (one C scan, no regular expression)."""
    return _LONG_INTEGER in data.translate(_DIGITS_AS_ZERO)


def parse_json_lines(path: str | os.PathLike[str]) -> list[tuple[int, Any]]:
    r"""Every ``(line number, JSON value)`` of a JSONL file, as :func:`json_lines` gives them.

    The file is read at once and each line parsed by orjson, which gives the
    value Python's :mod:`json` gives for every line it accepts (the tests of
    ``tests/items/test_items_io.py`` check it), except integers beyond 64
    bits: a line holding 19 digits in a row, nested deeper than the limit,
    refused by orjson (not UTF-8, blank, not JSON, NaN, a lone surrogate)
    or that may give a key twice in one object (which orjson reads as the
    last) goes through :func:`json_lines`' own reading, so its value and its
    error are exactly those.

    Parameters
    ----------
    path
        A UTF-8 JSONL file.

    Returns
    -------
    list of (int, Any)
        The 1-based line number and the value of each non-blank line, in order.

    Raises
    ------
    RecordError
        As :func:`json_lines`, at the first bad line.
    OSError
        If the file cannot be read.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "items.jsonl"
    >>> _ = path.write_text('{"a": 1}\n\n[2, 3.5]\n', encoding="utf-8")
    >>> parse_json_lines(path)
    [(1, {'a': 1}), (3, [2, 3.5])]
    """
    source = str(path)
    data = Path(path).read_bytes().removeprefix(codecs.BOM_UTF8)
    long_integers = _long_integer(data)
    loads, refused = orjson.loads, orjson.JSONDecodeError
    out: list[tuple[int, Any]] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if raw.count(b"{") + raw.count(b"[") <= _RECORD_DEPTH and not (
            long_integers and _long_integer(raw)
        ):
            try:
                out.append((number, loads(raw)))
                continue
            except refused:
                pass  # worded, or read, line by line below
        present, value = _line_value(raw, number, source)
        if present:
            out.append((number, value))
    if not _keys_unique(data, [value for _, value in out]):
        for number, value in out:  # find the line, and word its error
            raw = lines[number - 1]
            if not _keys_unique(raw, value):
                _line_value(raw, number, source)
    return out


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Pause Python's garbage collector, restoring its state on leaving (also on error).

    Reading a file allocates an object per record and field, all kept until
    the frame is built; the collector would traverse them again and again.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_jsonl(path: str | os.PathLike[str], *, max_item_bytes: int | None = None) -> pl.DataFrame:
    """Read items from a JSONL file (one record per line, blank lines skipped).

    Parameters
    ----------
    path
        The file. Records use the item field names, with ``text`` as
        shorthand for a Text payload and ``payload`` =
        ``{"kind": "json"|"binary"|"reference", ...}`` for the others.
    max_item_bytes
        The maximum item size, in bytes of payload (see
        :func:`payload_bytes_expr`); ``None`` for :func:`max_item_bytes`
        (64 MiB by default).

    Returns
    -------
    polars.DataFrame
        The items in file order, in the canonical schema.

    Raises
    ------
    RecordError
        At the first invalid line, naming the file, the line and the field;
        code ``record.too_large`` for an item over the maximum item size
        (see :func:`check_item_sizes`).
    ConfigError
        If the maximum item size is not a whole number of at least 1.
    """
    source = Path(path)
    limit = _limit(max_item_bytes)
    with _collection_paused():
        lines = parse_json_lines(source)
        try:
            records = [record for _, record in lines]
            frame = records_to_frame(records, source=str(source), first_line=1)
        except RecordError as exc:
            # records_to_frame numbers records from 1; map back to file lines.
            if exc.line is not None and 1 <= exc.line <= len(lines):
                raise RecordError(
                    exc.message, source=str(source), line=lines[exc.line - 1][0], field=exc.field
                ) from None
            raise
        numbers = [number for number, _ in lines]
        del lines  # freed while the collector is paused, so it has nothing left to traverse
    check_item_sizes(frame, limit, source=str(source), lines=numbers)
    return frame


def _limit(value: int | None) -> int:
    """The maximum item size a reader was given, or the default, checked."""
    return max_item_bytes() if value is None else _checked_limit(value, "max_item_bytes")


def write_jsonl(df: pl.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write items as JSONL records, atomically. Only the item columns are written."""
    with atomic_write(path) as handle:
        for item in frame_to_items(df):
            handle.write(
                json.dumps(item_to_record(item), ensure_ascii=False, separators=(",", ":"))
            )
            handle.write("\n")


def read_parquet(
    path: str | os.PathLike[str], *, max_item_bytes: int | None = None
) -> pl.DataFrame:
    """Read items from a Parquet file and validate them (see :func:`~cognoxium.items.conform`).

    A file of a partitioned store (see
    :func:`~cognoxium.items.store.write_partitioned`), which also stores
    each item's position in the items written (column
    ``__cognoxium_position``), gives its items in that order, without that
    column.

    A directory of Parquet files is read as one table, its files in path
    order; a hive-partitioned one (``<key>=<value>`` directories) is
    refused, its partition columns not being item columns.

    ``max_item_bytes`` is the maximum item size, as for :func:`read_jsonl`.

    Raises
    ------
    SchemaError, RecordError
        If the file's columns or values are not valid items (code
        ``record.too_large`` for an item over the maximum item size, naming
        its row); for a hive-partitioned directory, a SchemaError naming its
        partition columns and pointing to ``CognitionFrame.scan_parquet``.
    ConfigError
        If the maximum item size is not a whole number of at least 1.
    """
    source = Path(path)
    limit = _limit(max_item_bytes)
    if source.is_dir():
        _refuse_partitions(source)
    try:
        table = pl.read_parquet(source)
    except pl.exceptions.PolarsError as exc:
        bad = invalid_utf8_error(sorted(source.glob("*.parquet")) if source.is_dir() else [source])
        if bad is not None:
            raise bad from None
        raise SchemaError(f"{path}: not a readable Parquet file: {exc}", file=str(path)) from None
    if STORE_POSITION in table.columns:
        table = table.sort(STORE_POSITION).drop(STORE_POSITION)
    items = conform(table, source=str(path))
    check_item_sizes(items, limit, source=str(path))
    return items


_UTF8_AT = re.compile(r"Invalid UTF8 sequence at string index (\d+)")


def invalid_utf8_error(files: Sequence[Path]) -> RecordError | None:
    """A :class:`RecordError` naming the first value of ``files`` that is not UTF-8, if any.

    For Parquet files Polars refuses: its ``source``, ``row`` (from 0) and
    ``field`` (the column) are those of the first string that is not UTF-8
    (see :func:`find_invalid_utf8`).
    """
    found = find_invalid_utf8(files)
    if found is None:
        return None
    file, row, column = found
    return RecordError(
        "not UTF-8 text: Parquet strings are UTF-8; decode the column's bytes (Latin-1, say) "
        "before writing it",
        source=file,
        row=row,
        field=column,
    )


def find_invalid_utf8(files: Sequence[Path]) -> tuple[str, int, str] | None:
    """The first file, row (from 0) and column of ``files`` whose text is not UTF-8, if any.

    Polars refuses such a file whole, naming no row nor column. Arrow reads
    it without checking the strings; a full validation of each string column
    names the first bad value.

    Parameters
    ----------
    files
        Parquet files, in the order they are read.

    Returns
    -------
    tuple of (str, int, str) or None
        The file, the row in it and the column; ``None`` when every string is UTF-8.
    """
    for file in files:
        try:
            table = pq.read_table(file)
        except (pa.ArrowException, OSError):  # unreadable for another reason
            continue
        for name in table.column_names:
            column = table.column(name)
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                continue
            start = 0
            for chunk in column.chunks:
                try:
                    chunk.validate(full=True)
                except pa.ArrowInvalid as exc:
                    at = _UTF8_AT.search(str(exc))
                    if at is not None:
                        return str(file), start + int(at.group(1)), name
                start += len(chunk)
    return None


def _refuse_partitions(directory: Path) -> None:
    """Raise SchemaError if Polars reads ``directory`` with hive partition columns."""
    try:
        hive = pl.scan_parquet(directory).collect_schema()
        stored = pl.scan_parquet(directory, hive_partitioning=False).collect_schema()
    except pl.exceptions.PolarsError:
        return  # the read itself reports what is wrong
    partitions = [name for name in hive if name not in stored]
    if partitions:
        raise SchemaError(
            f"{directory}: a hive-partitioned directory (partition columns {partitions}), "
            "which read_parquet does not read: scan it with CognitionFrame.scan_parquet, "
            "which gives the partition columns as extra columns, or read its files one by one"
        )


def write_parquet(df: pl.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write items to Parquet with the canonical Arrow schema, atomically."""
    import pyarrow.parquet as pq

    with atomic_write(path, "wb") as handle:
        pq.write_table(to_arrow(df), handle)


@dataclass(frozen=True, slots=True)
class ItemFormat:
    """A file format of context items: its name, and the reader and the writer of its files.

    Parameters
    ----------
    name
        ``"jsonl"`` or ``"parquet"``.
    read
        Reads a file of the format as items (a frame of the item schema);
        takes the path and ``max_item_bytes``.
    write
        Writes items (the item columns of a frame) as a file of the format,
        atomically.
    """

    name: str
    read: Callable[..., pl.DataFrame]
    write: Callable[[pl.DataFrame, str | os.PathLike[str]], None]


_JSONL = ItemFormat("jsonl", read_jsonl, write_jsonl)

ITEM_FORMATS: Mapping[str, ItemFormat] = MappingProxyType(
    {
        ".jsonl": _JSONL,
        ".ndjson": _JSONL,
        ".parquet": ItemFormat("parquet", read_parquet, write_parquet),
    }
)
"""The item file formats by file suffix (lower case): what the readers and writers
that go by a path's suffix accept."""


def item_format(path: str | os.PathLike[str]) -> ItemFormat:
    """The format of an item file, by the suffix of its path (in any case).

    Parameters
    ----------
    path
        The file, to read or to write; it need not exist.

    Returns
    -------
    ItemFormat
        The format of :data:`ITEM_FORMATS` for the suffix.

    Raises
    ------
    SchemaError
        For another suffix, naming the path and the accepted suffixes
        (``params``: ``suffix`` and ``accepted``).

    Examples
    --------
    >>> item_format("out/items.NDJSON").name
    'jsonl'
    >>> try:
    ...     item_format("items.csv")
    ... except SchemaError as exc:
    ...     print(exc)
    items.csv: unsupported file type '.csv'; use one of .jsonl, .ndjson, .parquet
    """
    suffix = Path(path).suffix.lower()
    found = ITEM_FORMATS.get(suffix)
    if found is None:
        raise SchemaError(
            f"{path}: unsupported file type {suffix!r}; use one of {', '.join(ITEM_FORMATS)}",
            params={"suffix": suffix, "accepted": list(ITEM_FORMATS)},
        )
    return found


def read_items(path: str | os.PathLike[str], *, max_item_bytes: int | None = None) -> pl.DataFrame:
    """Read items from a ``.jsonl``/``.ndjson`` or ``.parquet`` file, by its suffix.

    The reader is the one :func:`item_format` gives for ``path``;
    ``max_item_bytes`` is the maximum item size, as for :func:`read_jsonl`.

    Raises
    ------
    SchemaError
        For another suffix (naming the accepted ones), or a directory.
    RecordError, ConfigError
        As :func:`read_jsonl` and :func:`read_parquet`.
    """
    if Path(path).is_dir():
        raise SchemaError(
            f"{path}: a directory; read_items reads one .jsonl or .parquet file (scan a "
            "directory of Parquet files with CognitionFrame.scan_parquet)"
        )
    return item_format(path).read(path, max_item_bytes=max_item_bytes)
