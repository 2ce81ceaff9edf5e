"""Reading and writing context items as JSONL and Parquet.

Readers are all-or-nothing: the first bad record raises a
:class:`~cognoxium.exceptions.RecordError` naming the file, the line and the
field, and nothing is returned. Writers write to a temporary file beside the
target and rename it into place, so a failed write leaves no partial file.
"""

from __future__ import annotations

import codecs
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import polars as pl
import pyarrow.parquet as pq

from cognoxium.exceptions import RecordError, SchemaError
from cognoxium.items._checks import MAX_JSON_DEPTH, json_text_depth
from cognoxium.items.schema import (
    conform,
    frame_to_items,
    item_to_record,
    records_to_frame,
    to_arrow,
)

__all__ = [
    "atomic_write",
    "json_lines",
    "read_items",
    "read_jsonl",
    "read_parquet",
    "write_jsonl",
    "write_parquet",
]


@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` and rename it onto ``path`` on success.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual mode
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_RECORD_DEPTH = MAX_JSON_DEPTH + 2
"""The deepest record a reader parses: a JSON payload's value sits two levels in."""


def json_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    r"""Yield ``(line number, JSON value)`` for each non-blank line of a UTF-8 JSONL file.

    Lines end at ``\n`` only (JSON text may hold U+2028 and other line
    breaks); a UTF-8 byte order mark at the start of the file is skipped.

    Raises
    ------
    RecordError
        At the first line that is not UTF-8, not JSON, or nested deeper than
        :data:`~cognoxium.items.MAX_JSON_DEPTH` (plus the record's own
        levels), naming the file, the 1-based line and, for nesting, the
        top-level field.
    OSError
        If the file cannot be read.
    """
    source = str(path)
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(
                    f"not UTF-8 text (byte {exc.start + 1} of the line)",
                    source=source,
                    line=number,
                ) from None
            if not line.strip():
                continue
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
                yield number, json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                raise RecordError(
                    f"invalid JSON: {exc.msg} at column {exc.colno}", source=source, line=number
                ) from None


def read_jsonl(path: str | os.PathLike[str]) -> pl.DataFrame:
    """Read items from a JSONL file (one record per line, blank lines skipped).

    Parameters
    ----------
    path
        The file. Records use the item field names, with ``text`` as
        shorthand for a Text payload and ``payload`` =
        ``{"kind": "json"|"binary"|"reference", ...}`` for the others.

    Returns
    -------
    polars.DataFrame
        The items in file order, in the canonical schema.

    Raises
    ------
    RecordError
        At the first invalid line, naming the file, the line and the field.
    """
    source = Path(path)
    lines = list(json_lines(source))
    frame_lines = iter(lines)

    def records() -> Iterator[Any]:
        for _, record in frame_lines:
            yield record

    try:
        return records_to_frame(records(), source=str(source))
    except RecordError as exc:
        # records_to_frame numbers records from 1; map back to file lines.
        if exc.line is not None and 1 <= exc.line <= len(lines):
            raise RecordError(
                exc.message, source=str(source), line=lines[exc.line - 1][0], field=exc.field
            ) from None
        raise


def write_jsonl(df: pl.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write items as JSONL records, atomically. Only the item columns are written."""
    with atomic_write(path) as handle:
        for item in frame_to_items(df):
            handle.write(
                json.dumps(item_to_record(item), ensure_ascii=False, separators=(",", ":"))
            )
            handle.write("\n")


def read_parquet(path: str | os.PathLike[str]) -> pl.DataFrame:
    """Read items from a Parquet file and validate them (see :func:`~cognoxium.items.conform`).

    Raises
    ------
    SchemaError, RecordError
        If the file's columns or values are not valid items.
    """
    try:
        table = pl.read_parquet(Path(path))
    except pl.exceptions.PolarsError as exc:
        raise SchemaError(f"{path}: not a readable Parquet file: {exc}") from None
    return conform(table, source=str(path))


def write_parquet(df: pl.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write items to Parquet with the canonical Arrow schema, atomically."""
    with atomic_write(path, "wb") as handle:
        pq.write_table(to_arrow(df), handle)


_READERS: dict[str, Callable[[str | os.PathLike[str]], pl.DataFrame]] = {
    ".jsonl": read_jsonl,
    ".ndjson": read_jsonl,
    ".parquet": read_parquet,
}


def read_items(path: str | os.PathLike[str]) -> pl.DataFrame:
    """Read items from a ``.jsonl``/``.ndjson`` or ``.parquet`` file, by its suffix.

    Raises
    ------
    SchemaError
        For another suffix.
    """
    suffix = Path(path).suffix.lower()
    reader = _READERS.get(suffix)
    if reader is None:
        raise SchemaError(f"{path}: unsupported file type {suffix!r}; use .jsonl or .parquet")
    return reader(path)
