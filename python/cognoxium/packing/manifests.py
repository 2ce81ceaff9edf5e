r"""Storing pack manifests, reading them back, and summarising many of them.

A batch (``cognoxium pack``, ``cognoxium locomo``) stores its manifests in one
of two forms (:data:`MANIFEST_FORMS`), in parts: each task of the batch
writes its own part of every table, ``part-<number>`` in the table's
directory, with :class:`ManifestWriter`; the parts in number order make the
table (see :func:`part_files`)::

    DIR/manifests/part-00000.parquet  DIR/manifest_headers/part-00000.jsonl   (parquet)
    DIR/manifests/part-00000.jsonl                                            (jsonl)

``parquet`` (the default)
    ``manifests/part-<n>.parquet``: one row per manifest entry, the columns of
    :meth:`PackManifest.to_polars <cognoxium.packing.packer.PackManifest.to_polars>`
    after a ``request_id`` column (:data:`PARQUET_SCHEMA`), requests in
    order, entries in input order; written with fixed settings
    (:data:`PARQUET_SETTINGS`), so the same manifests give the same bytes.
    ``manifest_headers/part-<n>.jsonl``: one canonical JSON object per
    request of the part, the manifest without its entries, with ``request_id``.
``jsonl``
    ``manifests/part-<n>.jsonl``: one canonical manifest
    (:meth:`PackManifest.to_json <cognoxium.packing.packer.PackManifest.to_json>`)
    per line.

:func:`scan_manifests` gives the entries of either form, every part in
order, as one Polars ``LazyFrame`` (nothing is read until it is collected;
Parquet row groups and columns are read as the query needs them);
:func:`read_manifests` rebuilds the
:class:`~cognoxium.packing.packer.PackManifest` objects;
:func:`summarize_manifests` counts what ``cognoxium inspect`` shows (budget
use, decisions, reasons, tokens per role, tier and source) in one pass over
the parts, with Polars aggregations over bounded pieces of the entries, so
its memory does not grow with the number of entries. :func:`scan_packs`
reads the packs table of a batch the same way, and :func:`read_bodies` the
request body of each pack.

Examples
--------
>>> import tempfile, pathlib
>>> from datetime import UTC, datetime
>>> from cognoxium import CognitionFrame
>>> cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi"},
...                      {"id": "b", "role": "document", "text": "word " * 90}])
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> with ManifestWriter(folder, "parquet") as writer:
...     for b in (40, 200):
...         manifest = cf.pack(b, as_of=datetime(2030, 1, 1, tzinfo=UTC), label=f"r{b}").manifest
...         writer.write(f"r{b}", manifest)
>>> sorted(p.relative_to(folder).as_posix() for p in folder.glob("*/*"))
['manifest_headers/part-00000.jsonl', 'manifests/part-00000.parquet']
>>> scan_manifests(folder).select("request_id", "id", "decision").collect().rows()[:3]
[('r40', 'a', 'included'), ('r40', 'b', 'excluded'), ('r200', 'a', 'included')]
>>> summary = summarize_manifests(folder)
>>> summary["budget"]["used_tokens"], summary["budget"]["budget_tokens"]
(111, 240)
>>> summary["reasons"]
{'over_budget': 1, 'selected': 3}
>>> summary["by_role"]["document"]
{'included': 1, 'included_tokens': 95, 'items': 2}
"""

from __future__ import annotations

import json
import os
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from cognoxium.exceptions import PlanError, RecordError
from cognoxium.items.model import canonical_json
from cognoxium.packing._parts import (
    HEADERS,
    MANIFESTS,
    PACKS,
    part_files,
    part_path,
    run_parts,
    staged,
)
from cognoxium.packing._reading import (
    NOT_NULL,
    Tally,
    check_entries,
    header_model,
    invalid_json,
    parse_manifest,
    split_manifest,
    tallies,
    tally_groups,
)
from cognoxium.packing.packer import ENTRY_SCHEMA, ManifestTotals, PackManifest

__all__ = [
    "MANIFESTS",
    "MANIFEST_FORMS",
    "MANIFEST_HEADERS",
    "NOT_IN_ITEMS",
    "NO_SOURCE",
    "PACKS",
    "PACKS_SCHEMA",
    "PARQUET_SCHEMA",
    "PARQUET_SETTINGS",
    "ManifestForm",
    "ManifestWriter",
    "RenderedManifests",
    "part_files",
    "read_bodies",
    "read_manifests",
    "render_manifests",
    "scan_manifests",
    "scan_packs",
    "summarize_manifests",
]

NO_SOURCE = "(none)"
"""The ``by_source`` key of items that have no source."""

NOT_IN_ITEMS = "(not in the items)"
"""The ``by_source`` key of entries whose id the given items lack (other items)."""

ManifestForm = Literal["parquet", "jsonl"]
"""How a batch stores its manifests (see the module docstring)."""

MANIFEST_FORMS: tuple[str, ...] = ("parquet", "jsonl")
"""The accepted values of :data:`ManifestForm` (the first is the default)."""

MANIFEST_HEADERS = HEADERS
"""Directory of the headers (manifests without entries) of the ``parquet`` form, in parts."""

_SUFFIX = {"parquet": ".parquet", "jsonl": ".jsonl"}
"""The suffix of the ``manifests`` parts of each form."""

PARQUET_SCHEMA = pl.Schema({"request_id": pl.String(), **ENTRY_SCHEMA})
"""Columns of the ``parquet`` form's entries: ``request_id``, then :data:`ENTRY_SCHEMA`."""

PACKS_SCHEMA = pl.Schema(
    {
        "budget": pl.Int64(),
        "ids": pl.List(pl.String()),
        "request_id": pl.String(),
        "used_tokens": pl.Int64(),
    }
)
"""Fields of a line of a batch's ``packs`` parts (tokens for ``budget`` and ``used_tokens``).

A line's ``body``, a nested JSON object, is not among them: :func:`read_bodies`
reads it (Polars reads an object as text without its escapes).
"""

PARQUET_SETTINGS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 3,
    "write_statistics": True,
    "use_dictionary": True,
    "version": "2.6",
    "data_page_version": "1.0",
    "store_schema": True,
}
"""The fixed :class:`pyarrow.parquet.ParquetWriter` settings of the ``parquet`` form's parts.

Nothing in the file depends on the time of writing, so the same manifests
written by the same pyarrow version give the same bytes.
"""

_ROW_GROUP_ROWS = 131_072
"""Entries buffered before a row group is written (a row group ends at a request's end)."""

_ARROW_SCHEMA = pl.DataFrame(schema=PARQUET_SCHEMA).to_arrow().schema


@dataclass(frozen=True, slots=True)
class RenderedManifests:
    """Manifests of some requests rendered for one form, ready to append to its files.

    Attributes
    ----------
    form
        The form (:data:`ManifestForm`).
    lines
        The text lines: of the headers part (``parquet``) or of the
        manifests part (``jsonl``), each ending in a newline.
    entries
        ``parquet``: the rows of the entries part (:data:`PARQUET_SCHEMA`),
        request by request; ``jsonl``: ``None``.
    sizes
        The entries of each request, in order (their sum is ``entries.height``).
    """

    form: ManifestForm
    lines: str
    entries: pl.DataFrame | None
    sizes: tuple[int, ...]


def render_manifests(
    form: ManifestForm,
    request_ids: Sequence[str],
    manifests: Sequence[PackManifest],
    entries: pl.DataFrame,
) -> RenderedManifests:
    """Render ``k`` manifests over one scope of ``n`` items, given as columns, for ``form``.

    Parameters
    ----------
    form
        ``"parquet"`` or ``"jsonl"``.
    request_ids
        The ``k`` request ids.
    manifests
        The ``k`` manifests; their entries are not read.
    entries
        ``k * n`` rows of :data:`~cognoxium.packing.packer.ENTRY_SCHEMA`:
        manifest ``i``'s entries are rows ``i * n`` to ``(i + 1) * n - 1``.

    Returns
    -------
    RenderedManifests
        What :meth:`ManifestWriter.append` writes.

    Raises
    ------
    PlanError
        If the lengths disagree or ``form`` is unknown.
    """
    if form not in MANIFEST_FORMS:
        raise PlanError(f"unknown manifest form {form!r}; use one of {list(MANIFEST_FORMS)}")
    k = len(request_ids)
    if len(manifests) != k or (entries.height % k if k else entries.height):
        raise PlanError(
            f"{k} request ids, {len(manifests)} manifests and {entries.height} entries "
            "do not make k manifests of n entries each"
        )
    n = entries.height // k if k else 0
    sizes = (n,) * k
    if form == "jsonl":
        lines = []
        for i, manifest in enumerate(manifests):
            manifest._entries = entries.slice(i * n, n)
            lines.append(manifest.to_json() + "\n")
        return RenderedManifests(form, "".join(lines), None, sizes)
    headers = []
    for request_id, manifest in zip(request_ids, manifests, strict=True):
        header = manifest._header()
        header["request_id"] = request_id
        headers.append(canonical_json(header) + "\n")
    owner = pl.Series("request_id", list(request_ids), pl.String)
    labelled = entries.select(
        owner.gather(np.repeat(np.arange(k, dtype=np.int64), n)).alias("request_id"),
        pl.all(),
    )
    return RenderedManifests(form, "".join(headers), labelled, sizes)


class ManifestWriter:
    """Write one part of a batch's manifests, one request at a time, in one of the two forms.

    A context manager: the part's files appear, complete, when it exits
    without an error (or at :meth:`close`); until then they are written
    under temporary names, which an error removes, so a part is whole or
    missing and writing a part again replaces it. Parquet rows are
    buffered up to a row group (131,072 entries, ending at a request's end);
    row groups are encoded and written on a thread of their own while the
    caller goes on, in order, at most two waiting, so memory holds at most
    four row groups of entries (one filling, two waiting, one being written).
    An error of writing a row group is raised by a later write or by
    :meth:`close`.

    Parameters
    ----------
    folder
        The batch's output directory; the part's files are created in its
        table directories (``manifests/part-<n>.parquet`` and
        ``manifest_headers/part-<n>.jsonl``, or ``manifests/part-<n>.jsonl``;
        see the module docstring), which are made if missing.
    form
        ``"parquet"`` or ``"jsonl"`` (see the module docstring).
    part
        The part's number ``n`` (>= 0): the index of the task that writes it.

    Raises
    ------
    PlanError
        If ``form`` is not one of :data:`MANIFEST_FORMS`.
    OSError
        If a file cannot be created.
    """

    def __init__(
        self, folder: str | os.PathLike[str], form: ManifestForm = "parquet", *, part: int = 0
    ) -> None:
        if form not in MANIFEST_FORMS:
            raise PlanError(f"unknown manifest form {form!r}; use one of {list(MANIFEST_FORMS)}")
        self.form = form
        self.files: dict[str, Path] = {
            "manifests": part_path(folder, MANIFESTS, part, _SUFFIX[form])
        }
        """The files written, by role (``manifests``, and ``manifest_headers`` for Parquet)."""
        if form == "parquet":
            self.files["manifest_headers"] = part_path(folder, HEADERS, part, ".jsonl")
        self._pending: list[pl.DataFrame] = []
        self._rows = 0
        self._parquet: pq.ParquetWriter | None = None
        self._row_groups: _RowGroups | None = None
        self._staged = ExitStack()
        try:
            temporary = {
                role: self._staged.enter_context(staged(path)) for role, path in self.files.items()
            }
            lines = temporary.get("manifest_headers", temporary["manifests"])
            self._lines: IO[str] = self._staged.enter_context(lines.open("w", encoding="utf-8"))
            if form == "parquet":
                self._parquet = pq.ParquetWriter(
                    temporary["manifests"], _ARROW_SCHEMA, **PARQUET_SETTINGS
                )
                self._staged.callback(self._parquet.close)
                self._row_groups = _RowGroups(self._parquet)
        except BaseException as exc:
            self._staged.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def write(self, request_id: str, manifest: PackManifest) -> None:
        """Append one request's manifest (requests are stored in the order written)."""
        if self._parquet is None:
            self._lines.write(manifest.to_json())
            self._lines.write("\n")
            return
        header = manifest._header()
        header["request_id"] = request_id
        self._lines.write(canonical_json(header))
        self._lines.write("\n")
        entries = manifest.to_polars()
        self._pending.append(
            entries.select(pl.lit(request_id, pl.String).alias("request_id"), pl.all())
        )
        self._rows += entries.height
        if self._rows >= _ROW_GROUP_ROWS:
            self._flush()

    def write_many(
        self,
        request_ids: Sequence[str],
        manifests: Sequence[PackManifest],
        entries: pl.DataFrame,
    ) -> None:
        """Append ``k`` manifests over one scope of ``n`` items, given as columns.

        What ``k`` calls of :meth:`write` store, in the same files and row
        groups, without a frame per manifest in the Parquet form.

        Parameters
        ----------
        request_ids
            The ``k`` request ids.
        manifests
            The ``k`` manifests; their entries are not read.
        entries
            ``k * n`` rows of :data:`~cognoxium.packing.packer.ENTRY_SCHEMA`:
            manifest ``i``'s entries are rows ``i * n`` to ``(i + 1) * n - 1``.

        Raises
        ------
        PlanError
            If the lengths disagree.
        """
        self.append(render_manifests(self.form, request_ids, manifests, entries))

    def append(self, rendered: RenderedManifests) -> None:
        """Append manifests rendered by :func:`render_manifests` (in this writer's form).

        What :meth:`write_many` stores for them: the rendering can run in
        another process, and the files and row groups are the same.

        Raises
        ------
        PlanError
            If ``rendered`` is of the other form.
        """
        if rendered.form != self.form:
            raise PlanError(f"manifests rendered as {rendered.form!r} for a {self.form!r} writer")
        self._lines.write(rendered.lines)
        if rendered.entries is None:
            return
        start = offset = 0
        for size in rendered.sizes:  # a row group ends at the end of a request, as write() ends it
            self._rows += size
            offset += size
            if self._rows >= _ROW_GROUP_ROWS:
                self._pending.append(rendered.entries.slice(start, offset - start))
                start = offset
                self._flush()
        if start < rendered.entries.height:
            self._pending.append(rendered.entries.slice(start))

    def _flush(self) -> None:
        if self._row_groups is None or not self._pending:
            return
        self._row_groups.put(self._pending)
        self._pending, self._rows = [], 0

    def close(self) -> None:
        """Write the buffered rows, close the files and give them their names.

        Raises
        ------
        OSError
            Or any other error of writing a row group: the first one met, by
            this call or by a write before it (the part's files are then
            removed).
        """
        try:
            self._flush()
            if self._row_groups is not None:
                self._row_groups.close(surface=True)
        except BaseException as exc:
            self._discard(exc)
            raise
        self._staged.close()  # closes the files, then renames them onto their names

    def _discard(self, exc: BaseException) -> None:
        """Close the files and remove them, after ``exc``; the writer thread's error is dropped."""
        try:
            if self._row_groups is not None:
                self._row_groups.close(surface=False)
        finally:
            self._staged.__exit__(type(exc), exc, exc.__traceback__)

    def __enter__(self) -> ManifestWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        # An error already raised in the with block is the one to see, not a
        # writer's error that may follow from it.
        if exc is None:
            self.close()
        else:
            self._discard(exc)


class _RowGroups:
    """Writes the row groups of an entries part on one thread, in the order given.

    pyarrow encodes, compresses and writes without holding the GIL, so the
    packing of the next requests goes on meanwhile. The queue holds at most
    two row groups waiting, which bounds the memory. The first error of the
    thread is raised by the next :meth:`put` or by :meth:`close`; after it
    the thread writes nothing more.
    """

    def __init__(self, writer: pq.ParquetWriter) -> None:
        self._writer = writer
        self._queue: queue.Queue[list[pl.DataFrame] | None] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="cognoxium-manifests", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (frames := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drain, so that put() never waits on a dead writer
            try:
                _write_row_group(self._writer, frames)
            except BaseException as exc:  # raised in the caller's thread by put/close
                self._error = exc

    def put(self, frames: list[pl.DataFrame]) -> None:
        """Queue one row group's frames (waits while two are queued)."""
        self._raise()
        self._queue.put(frames)

    def close(self, *, surface: bool = True) -> None:
        """Write what is queued and end the thread; ``surface``: raise its error, if any."""
        self._queue.put(None)
        self._thread.join()
        if surface:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


def _write_row_group(writer: pq.ParquetWriter, frames: list[pl.DataFrame]) -> None:
    """Write ``frames``, one after another, as one row group (none when they have no rows)."""
    # One chunk of fresh buffers: pyarrow's encoding follows the Arrow buffers, so
    # the bytes would otherwise depend on how the frames were built (or unpickled).
    table = pl.concat(frames, how="vertical").to_arrow().combine_chunks()
    if table.num_rows:  # requests with empty scopes add no rows
        writer.write_table(table, row_group_size=table.num_rows)


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes, Any]]:
    r"""``(line number, bytes, JSON value)`` of each non-blank line, one line at a time.

    Lines end at ``\n`` only: JSON text may hold U+2028 and other line breaks.
    """
    source = str(path)
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(
                    f"not UTF-8 text ({exc.reason})", source=source, line=number
                ) from None
            if not text.strip():
                continue
            try:
                yield number, raw, json.loads(text)
            except json.JSONDecodeError as exc:
                raise invalid_json(exc, source, number) from None


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, JSON value)`` of each non-blank line (see :func:`_raw_lines`)."""
    for number, _, data in _raw_lines(path):
        yield number, data


def _manifest_tables(folder: Path) -> list[tuple[Path, str]]:
    """The manifests tables of a run's ``folder`` and the suffix of their parts (none: no parts)."""
    table = folder / MANIFESTS
    if part_files(table, ".parquet"):
        return [(table, ".parquet"), (folder / HEADERS, ".jsonl")]
    if part_files(table, ".jsonl"):
        return [(table, ".jsonl")]
    return []


def _is_document(path: Path) -> bool:
    """Whether ``path`` holds one JSON document (a list, or one pretty-printed manifest).

    A file whose first non-blank line is a whole JSON value is JSONL.
    """
    with path.open("rb") as handle:
        for raw in handle:
            first = raw.strip()
            if not first:
                continue
            if first.startswith(b"["):
                return True
            try:
                json.loads(first)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return True
            return False
    return False


def _read_document(path: Path) -> list[PackManifest]:
    """Read a whole file: one manifest (one line or pretty-printed), a list, or JSONL."""
    source = str(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = raw[: exc.start].count(b"\n") + 1
        raise RecordError(f"not UTF-8 text ({exc.reason})", source=source, line=bad_line) from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        lines = [n for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
        return [parse_manifest(whole, source, lines[0] if len(lines) == 1 else None)]
    if isinstance(whole, list):
        manifests = []
        for row, data in enumerate(whole):
            try:
                manifests.append(parse_manifest(data, source, None))
            except RecordError as exc:
                raise RecordError(
                    exc.message, source=source, row=row, field=exc.field, params=exc.params
                ) from None
        return manifests
    return [parse_manifest(data, source, number) for number, data in _lines(path)]


@dataclass(frozen=True, slots=True)
class _Stored:
    """Where stored manifests are: their form and files, in order.

    ``form`` is ``"parquet"``, ``"jsonl"`` or ``"document"`` (one JSON
    value); ``entries`` the entry files (the parts of a batch's table, or
    one file); ``headers`` the header files of the Parquet form, one per
    entry file; ``source`` what errors name for the whole.
    """

    form: str
    entries: tuple[Path, ...]
    headers: tuple[Path, ...] | None
    source: Path


def _parts_of(table: Path, source: Path, packs: Path | None) -> _Stored | None:
    """The parts of a ``manifests`` table directory (``None``: it holds none), checked whole.

    The parts of the run's tables (the headers for Parquet, and ``packs``
    when given) must be numbered 0 to ``n - 1``, the same in every table
    (:func:`~cognoxium.packing._parts.run_parts`).
    """
    parquet = part_files(table, ".parquet")
    jsonl = part_files(table, ".jsonl")
    if parquet and jsonl:
        raise RecordError(
            f"holds parts of both manifest forms ({parquet[0].name}, {jsonl[0].name})",
            source=str(table),
        )
    if not (parquet or jsonl):
        return None
    form: ManifestForm = "parquet" if parquet else "jsonl"
    tables = [(table, _SUFFIX[form])]
    if form == "parquet":
        tables.append((table.parent / HEADERS, ".jsonl"))
    if packs is not None:
        tables.append((packs, ".jsonl"))
    parts = run_parts(tables)
    headers = tuple(parts[1]) if form == "parquet" else None
    return _Stored(form, tuple(parts[0]), headers, source)


def _form(path: str | os.PathLike[str]) -> _Stored:
    """The form and files of a batch's output directory, its ``manifests`` table or a file.

    A Parquet file's headers are its part of the headers table, for a part
    of a batch's table, or ``manifest_headers.jsonl`` beside it.
    """
    given = Path(path)
    if given.is_dir():
        run = (given / MANIFESTS).is_dir()
        table = given / MANIFESTS if run else given
        packs = given / PACKS if run and (given / PACKS).is_dir() else None
        stored = _parts_of(table, given, packs)
        if stored is None:
            raise RecordError(
                f"holds no manifests ({MANIFESTS}/part-<n>.parquet or .jsonl); give the --out "
                "directory of cognoxium pack or cognoxium locomo, its manifests directory, "
                "or a manifests file",
                source=str(given),
            )
        return stored
    if given.suffix.lower() == ".parquet":
        if given.parent.name == MANIFESTS and given in part_files(given.parent, ".parquet"):
            headers = given.parent.parent / HEADERS / f"{given.stem}.jsonl"
        else:
            headers = given.parent / "manifest_headers.jsonl"
        return _Stored("parquet", (given,), (headers,), given)
    return _Stored("document" if _is_document(given) else "jsonl", (given,), None, given)


def _parquet_headers(paths: Sequence[Path]) -> Iterator[tuple[str, PackManifest, Path, int]]:
    """``(request_id, manifest without entries, file, line)`` per header line, file by file."""
    for path in paths:
        source = str(path)
        for number, data in _lines(path):
            if not isinstance(data, dict):
                raise RecordError(
                    f"a manifest header must be a JSON object, got {type(data).__name__}",
                    source=source,
                    line=number,
                )
            header = dict(data)
            request_id = header.pop("request_id", None)
            if not isinstance(request_id, str):
                raise RecordError(
                    "missing" if request_id is None else "must be a string",
                    source=source,
                    line=number,
                    field="request_id",
                )
            yield request_id, header_model(header, source, number), path, number


def _scan_parquet(paths: Sequence[Path], *, part_column: str | None = None) -> pl.LazyFrame:
    """The entries of Parquet files, in order, each file's columns checked.

    Every file's schema is read from its metadata (its footer, not its
    rows), so a file cut short or of other columns is named, whichever part
    it is. An enumeration written with the values of an earlier version (the
    expected values' head: a reason added since, such as ``before_tail``) is
    read as the expected one. ``part_column``: a column of each row's file.
    """
    casts = [_part_casts(path) for path in paths]
    if all(cast == casts[0] for cast in casts):
        return _scan_parts(paths, casts[0], part_column)
    return pl.concat(
        [_scan_parts([path], cast, part_column) for path, cast in zip(paths, casts, strict=True)]
    )


def _scan_parts(
    paths: Sequence[Path], casts: tuple[str, ...], part_column: str | None
) -> pl.LazyFrame:
    """One scan of Parquet files of one schema, ``casts`` read as :data:`PARQUET_SCHEMA`'s types."""
    scan = pl.scan_parquet(list(paths), hive_partitioning=False, include_file_paths=part_column)
    return scan.with_columns(pl.col(name).cast(PARQUET_SCHEMA[name]) for name in casts)


def _part_casts(path: Path) -> tuple[str, ...]:
    """The columns of a Parquet file of entries written with earlier enumerations.

    Raises RecordError naming the file when its metadata cannot be read or
    its columns differ from :data:`PARQUET_SCHEMA`.
    """
    source = str(path)
    try:
        schema = pl.read_parquet_schema(path)
    except pl.exceptions.PolarsError as exc:
        raise RecordError(f"not a readable Parquet file: {exc}", source=source) from None
    casts = []
    for name, dtype in PARQUET_SCHEMA.items():
        if name not in schema:
            raise RecordError("missing column", source=source, field=name)
        if _earlier_enum(schema[name], dtype):
            casts.append(name)
        elif schema[name] != dtype:
            raise RecordError(
                f"has type {schema[name]}, expected {dtype}", source=source, field=name
            )
    extra = [name for name in schema if name not in PARQUET_SCHEMA]
    if extra:
        raise RecordError("unknown column", source=source, field=extra[0])
    return tuple(casts)


def _collected(queries: list[pl.LazyFrame], stored: _Stored) -> list[pl.DataFrame]:
    """Queries over the Parquet entries of ``stored``, collected by the streaming engine.

    When Polars cannot read them, the error names the first part that
    pyarrow cannot read either, row group by row group; else (a value
    Polars refuses) the whole.
    """
    try:
        return pl.collect_all(queries, engine="streaming")
    except pl.exceptions.PolarsError as exc:
        raise _unreadable(stored.entries, exc, stored.source) from None


def _unreadable(parts: Sequence[Path], exc: Exception, source: Path) -> RecordError:
    """The error of Parquet entries Polars could not read: the first bad part, if one is."""
    for part in parts:
        try:
            file = pq.ParquetFile(part)
            for index in range(file.num_row_groups):
                file.read_row_group(index)
        except (pa.ArrowException, OSError) as bad:
            return RecordError(f"not a readable Parquet file: {bad}", source=str(part))
    return RecordError(f"invalid entries: {exc}", source=str(source))


def _earlier_enum(written: pl.DataType, expected: pl.DataType) -> bool:
    """``written`` is an Enum of fewer values than ``expected``, the head of its values."""
    if not (isinstance(written, pl.Enum) and isinstance(expected, pl.Enum)):
        return False
    values, wanted = written.categories.to_list(), expected.categories.to_list()
    return len(values) < len(wanted) and wanted[: len(values)] == values


_JSONL = {"label": pl.String(), "entries": pl.List(pl.Struct(dict(ENTRY_SCHEMA.items())))}
"""What a scan of manifests JSONL reads of each line; the other fields are not parsed."""


def _exploded(scan: pl.LazyFrame, *keep: str) -> pl.LazyFrame:
    """A scan of manifests JSONL as one row per entry; ``request_id`` is the label.

    ``keep``: columns of the lines to keep before ``request_id``.
    """
    return (
        scan.select(*keep, pl.col("label").alias("request_id"), "entries")
        .explode("entries")
        .unnest("entries")
    )


def _scan_jsonl(paths: Sequence[Path]) -> pl.LazyFrame:
    """The entries of manifests JSONL files, in order; ``request_id`` is each manifest's label."""
    return _exploded(pl.scan_ndjson(_whole_lines(paths), schema=_JSONL, infer_schema_length=None))


def _whole_lines(paths: Sequence[Path]) -> list[Path]:
    """``paths``, each checked to end in a whole JSON line (a file cut short is named).

    Reads a file's last line only, unless it is cut short: then the lines
    before it are counted, to name it.

    Raises
    ------
    RecordError
        Naming the file and the line, as :func:`read_manifests` does.
    """
    for path in paths:
        with path.open("rb") as handle:
            start, last = _last_line(handle)
            try:
                json.loads(last) if last.strip() else None
            except json.JSONDecodeError as exc:
                raise invalid_json(exc, str(path), _line_at(handle, start)) from None
            except UnicodeDecodeError as exc:
                raise RecordError(
                    f"not UTF-8 text ({exc.reason})", source=str(path), line=_line_at(handle, start)
                ) from None
    return list(paths)


_BLOCK = 1 << 20
"""Bytes read at once when a file is searched for a line."""


def _last_line(handle: IO[bytes]) -> tuple[int, bytes]:
    r"""``(offset, bytes)`` of a file's last line if it lacks its ``\n``, else ``(0, b"")``."""
    end = handle.seek(0, os.SEEK_END)
    if end == 0:
        return 0, b""
    handle.seek(end - 1)
    if handle.read(1) == b"\n":
        return 0, b""
    start = end
    while start > 0:
        step = min(_BLOCK, start)
        handle.seek(start - step)
        found = handle.read(step).rfind(b"\n")
        if found >= 0:
            start = start - step + found + 1
            break
        start -= step
    handle.seek(start)
    return start, handle.read()


def _line_at(handle: IO[bytes], offset: int) -> int:
    r"""The 1-based number of the line that starts at byte ``offset`` (``\n`` ends a line)."""
    handle.seek(0)
    lines, left = 1, offset
    while left > 0:
        block = handle.read(min(_BLOCK, left))
        lines += block.count(b"\n")
        left -= len(block)
    return lines


def _frames(manifests: Iterable[tuple[str | None, PackManifest]]) -> pl.LazyFrame:
    frames = [
        m.to_polars().lazy().select(pl.lit(rid, pl.String).alias("request_id"), pl.all())
        for rid, m in manifests
    ]
    if not frames:
        return pl.LazyFrame(schema=PARQUET_SCHEMA)
    return pl.concat(frames, how="vertical")


def scan_manifests(path: str | os.PathLike[str]) -> pl.LazyFrame:
    r"""The entries of stored manifests as a lazy Polars frame, one row per (request, item).

    Parameters
    ----------
    path
        The output directory of ``cognoxium pack`` or ``cognoxium locomo``
        (either form: every part of its ``manifests`` table, in order), that
        ``manifests`` directory, one Parquet file of entries (a part, or a
        file with the same columns; no header is read), a manifests JSONL
        file (a part, or any file of one manifest per line), or one manifest
        (or a list of them) saved as JSON.

    Returns
    -------
    polars.LazyFrame
        The columns of :data:`PARQUET_SCHEMA`: ``request_id`` (for JSONL and
        JSON, each manifest's ``label``), then the entry columns of
        :meth:`PackManifest.to_polars <cognoxium.packing.packer.PackManifest.to_polars>`;
        parts in number order, requests in file order, entries in input
        order. Parquet and JSONL are scanned (``pl.scan_parquet``,
        ``pl.scan_ndjson`` with an explicit schema, over the list of parts),
        so filters and projections reach the reader; a JSON document is read
        whole. Polars maps a JSONL file into memory as it scans it;
        :func:`summarize_manifests` reads JSONL in chunks of lines instead,
        so its memory stays bounded.

    Raises
    ------
    RecordError
        If a directory holds no manifests (or parts of both forms), or a
        run's tables lack a part (see :func:`read_manifests`), or a Parquet
        file's metadata cannot be read or its columns differ from
        :data:`PARQUET_SCHEMA` (naming the file and the column: every
        part's footer is read, not its rows), or a JSONL file's last line is
        cut short (naming the file and the line), or a JSON document is
        invalid (see :func:`read_manifests`). Values of entries are checked
        when the frame is collected: a bad value, or a Parquet page that
        cannot be read, raises a Polars error then
        (:func:`read_manifests` and :func:`summarize_manifests` name the file).
    OSError
        If a file cannot be read.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from datetime import UTC, datetime
    >>> from cognoxium import CognitionFrame
    >>> cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi"}])
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "manifests.jsonl"
    >>> _ = path.write_text(cf.pack(5, as_of=datetime(2030, 1, 1, tzinfo=UTC),
    ...                             label="r1").manifest.to_json() + "\n")
    >>> scan_manifests(path).select("request_id", "id", "reason").collect().rows()
    [('r1', 'a', 'over_budget')]
    """
    stored = _form(path)
    if stored.form == "parquet":
        return _scan_parquet(stored.entries)
    if stored.form == "jsonl":
        return _scan_jsonl(stored.entries)
    return _frames((m.label, m) for m in _read_document(stored.entries[0]))


def scan_packs(path: str | os.PathLike[str]) -> pl.LazyFrame:
    r"""The packs of a batch as a lazy Polars frame, one row per request.

    Parameters
    ----------
    path
        The output directory of ``cognoxium pack`` or ``cognoxium locomo``
        (every part of its ``packs`` table, in number order), that ``packs``
        directory, or one JSONL file of pack lines.

    Returns
    -------
    polars.LazyFrame
        The columns of :data:`PACKS_SCHEMA`: ``budget`` and ``used_tokens``
        (tokens), ``ids`` (the packed item ids in pack order) and
        ``request_id``; requests in file order. Scanned with
        ``pl.scan_ndjson`` and the explicit schema, so nothing is read until
        it is collected. The lines' bodies are left out: :func:`read_bodies`
        reads them.

    Raises
    ------
    RecordError
        If a directory holds no pack parts, or a run's tables lack a part
        (see :func:`read_manifests`), or a part's last line is cut short
        (naming the file and the line, as :func:`read_bodies` does). Other
        bad lines raise a Polars error when the frame is collected;
        :func:`read_bodies` names them.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> (folder / "packs").mkdir()
    >>> line = '{"budget":8,"ids":["a"],"request_id":"%s","used_tokens":5}\n'
    >>> _ = (folder / "packs" / "part-00001.jsonl").write_text(line % "r2")
    >>> _ = (folder / "packs" / "part-00000.jsonl").write_text(line % "r1")
    >>> scan_packs(folder).select("request_id", "ids").collect().rows()
    [('r1', ['a']), ('r2', ['a'])]
    """
    return pl.scan_ndjson(_whole_lines(_pack_files(path)), schema=PACKS_SCHEMA)


def read_bodies(path: str | os.PathLike[str]) -> Iterator[tuple[str, dict[str, Any] | None]]:
    r"""The request body of every pack of a batch, as the packs parts hold it.

    Parameters
    ----------
    path
        As for :func:`scan_packs`.

    Yields
    ------
    tuple of (str, dict or None)
        Each request's id and its body (``{"messages": [...]}``, or
        ``{"system", "messages"}`` for Anthropic; see
        :func:`~cognoxium.app.batch.request_body`), read with
        :func:`json.loads`, so every text is as it was packed; ``None`` for a
        batch written without bodies. Requests in file order, one line at a
        time.

    Raises
    ------
    RecordError
        If a directory holds no pack parts, a run's tables lack a part, or
        a line is not UTF-8, not JSON (a part cut short) or not an object
        with a string ``request_id``: the error names the file and the line.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> line = r'{"body":{"messages":[{"content":"C:\\new\tdir","role":"user"}]},"request_id":"r1"}'
    >>> _ = (folder / "part-00000.jsonl").write_text(line + "\n")
    >>> [(request, body["messages"][0]["content"]) for request, body in read_bodies(folder)]
    [('r1', 'C:\\new\tdir')]
    """
    for file in _pack_files(path):
        for number, pack in _lines(file):
            request_id = pack.get("request_id") if isinstance(pack, dict) else None
            if not isinstance(request_id, str):
                raise _bad_pack(pack, str(file), number)
            yield request_id, pack.get("body")


def _bad_pack(pack: Any, source: str, line: int) -> RecordError:
    """The error of a pack line that is not an object with a string ``request_id``."""
    if not isinstance(pack, dict):
        message = f"a pack must be a JSON object, got {type(pack).__name__}"
        return RecordError(message, source=source, line=line)
    found = pack.get("request_id")
    message = "missing" if found is None else f"must be a string, got {type(found).__name__}"
    return RecordError(message, source=source, line=line, field="request_id")


def _pack_files(path: str | os.PathLike[str]) -> list[Path]:
    """The packs parts of ``path``: a batch's ``--out`` directory, its packs or a part.

    The parts of a run's tables are checked whole (:func:`_run_tables`).
    """
    given = Path(path)
    if not given.is_dir():
        return [given]
    run = (given / PACKS).is_dir()
    table = given / PACKS if run else given
    files = run_parts([(table, ".jsonl"), *(_manifest_tables(given) if run else [])])[0]
    if not files:
        raise RecordError(
            f"holds no packs ({PACKS}/part-<n>.jsonl); give the --out directory of "
            "cognoxium pack or cognoxium locomo, or its packs directory",
            source=str(given),
        )
    return files


def read_manifests(path: str | os.PathLike[str]) -> list[PackManifest]:
    r"""Read stored manifests back as :class:`~cognoxium.packing.packer.PackManifest` objects.

    Every manifest is validated and held in memory; to query or summarise
    many manifests, use :func:`scan_manifests` or :func:`summarize_manifests`.

    Parameters
    ----------
    path
        The output directory of ``cognoxium pack`` or ``cognoxium locomo``
        (either form: every part, in order), that ``manifests`` directory, a
        part ``manifests/part-<n>.parquet`` (its headers read from
        ``manifest_headers/part-<n>.jsonl``) or another Parquet file of
        entries with a ``manifest_headers.jsonl`` beside it, a manifests
        JSONL file (one manifest per line, blank lines skipped), or one
        manifest (or a JSON list of them) saved as JSON.

    Returns
    -------
    list of PackManifest
        In part and file order. A manifest rebuilt from Parquet equals the one written
        (``==``, and the same :meth:`~cognoxium.packing.packer.PackManifest.to_json`
        bytes).

    Raises
    ------
    RecordError
        At the first bad manifest: not UTF-8, invalid JSON, not an object,
        a ``format`` missing or other than ``cognoxium.pack_manifest/1``
        (params ``format`` and ``expected``), a missing, unknown or invalid
        field, entries that disagree with the header's ``totals`` (items,
        included, excluded, counted, not counted, by reason; params
        ``found`` and ``recorded``) or an entry whose ``decision`` is not
        that of its ``reason``. The error names the file, the 1-based line
        (for JSONL and the Parquet form's headers; the 0-based row for a
        JSON list) and the field, for example ``entries[3].reason`` or
        ``totals.items``. For Parquet, also a part whose metadata or rows
        cannot be read or whose columns differ from :data:`PARQUET_SCHEMA`,
        naming the part. A run's tables must hold the parts 0 to ``n - 1``,
        the same in every table, as a run writes them: a missing part is
        named (``params["part"]``); nothing records ``n``, so a run whose
        last parts are gone from every table reads as a shorter run.
    OSError
        If a file cannot be read.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "manifests.jsonl"
    >>> _ = path.write_text('{"budget": 10}\n')
    >>> read_manifests(path)
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: ...manifests.jsonl:1: field entries: missing
    """
    stored = _form(path)
    if stored.form == "document":
        return _read_document(stored.entries[0])
    if stored.form == "jsonl":
        return [
            parse_manifest(data, str(part), number)
            for part in stored.entries
            for number, data in _lines(part)
        ]
    assert stored.headers is not None
    read = list(_parquet_headers(stored.headers))
    rows = _collected([_scan_parquet(stored.entries, part_column=_PART)], stored)[0]
    _check_requests(read, tallies(tally_groups(rows.lazy(), _KEYS).collect(), _KEYS), stored)
    by_request = {
        key[0]: frame.drop("request_id", _PART)
        for key, frame in rows.partition_by("request_id", as_dict=True, maintain_order=True).items()
    }
    empty = pl.DataFrame(schema=ENTRY_SCHEMA)
    for request_id, manifest, _, _ in read:
        manifest._entries = by_request.get(request_id, empty)
    return [manifest for _, manifest, _, _ in read]


_PART = "__part"
"""The column of each entry's Parquet file while the entries are checked against the headers."""

_KEYS = (_PART, "request_id")
"""What names a request's entries in a Parquet run: its part and its request id."""


def _check_requests(
    headers: Sequence[tuple[str, PackManifest, Path, int]],
    found: dict[tuple[Any, ...], Tally],
    stored: _Stored,
) -> None:
    """Every header's entries, in the entries part of the same number, match its header.

    ``found``: the tally of the entries per :data:`_KEYS`. Request ids are
    unique; every entry has a header. Raises RecordError naming the
    header's file and line, or the entries part of entries without a header.
    """
    assert stored.headers is not None
    part_of = dict(zip(stored.headers, stored.entries, strict=True))
    seen: dict[str, tuple[Path, int]] = {}
    for request_id, manifest, path, number in headers:
        if request_id in seen:
            first, line = seen[request_id]
            raise RecordError(
                f"duplicate request id {request_id!r} (first in {first.name} on line {line})",
                source=str(path),
                line=number,
                field="request_id",
            )
        seen[request_id] = (path, number)
        part = part_of[path]
        tally = found.pop((str(part), request_id), Tally())
        where = f" in {part.name}"
        check_entries(
            manifest.totals,
            tally,
            str(path),
            number,
            subject=f"request {request_id!r}",
            where=where,
        )
    if found:
        part, request_id = next(iter(found))
        headers_part = {str(e): h for h, e in part_of.items()}[part]
        raise RecordError(
            f"entries of request {request_id!r} have no header in {headers_part.name}",
            source=part,
            field="request_id",
        )


def _figures(manifest: PackManifest) -> dict[str, Any]:
    """What a summary needs of one manifest's header (a few numbers, not its entries)."""
    return {
        "label": manifest.label,
        "budget": manifest.budget,
        "used_tokens": manifest.used_tokens,
        "remaining_tokens": manifest.remaining_tokens,
        "pack_overhead_tokens": manifest.pack_overhead_tokens,
        "profile": manifest.profile,
        "included": manifest.totals.included,
        "excluded": manifest.totals.excluded,
        "redactions": manifest.totals.redactions,
        "actions": [outcome.action for outcome in manifest.policy_outcomes],
        "merges": len(manifest.merges),
    }


_CHUNK_BYTES = 32 * 1024 * 1024
"""Lines of a JSONL file handed to Polars at once by a summary (whole lines, about 32 MB)."""


def _grouped(entries: pl.LazyFrame, *, by_id: bool) -> pl.LazyFrame:
    """Entries, tokens and entries lacking a required value per role, tier, decision, reason.

    The result has a few rows per combination (per item id too with
    ``by_id``), whatever the number of entries.
    """
    keys = ["role", "tier", "decision", "reason", *(["id"] if by_id else [])]
    return entries.group_by(*keys, pl.col("tokens").is_not_null().alias("counted")).agg(
        pl.len().alias("items"),
        pl.col("tokens").sum().alias("tokens"),
        pl.any_horizontal(*(pl.col(name).is_null() for name in NOT_NULL)).sum().alias("invalid"),
    )


def _entry_groups(entries: pl.LazyFrame, *, by_id: bool, source: str) -> pl.DataFrame:
    """:func:`_grouped`, collected by the streaming engine; a bad value is a RecordError."""
    try:
        groups = _grouped(entries, by_id=by_id).collect(engine="streaming")
    except pl.exceptions.PolarsError as exc:
        raise RecordError(f"invalid entries: {exc}", source=source) from None
    return _checked_groups(groups, source)


def _checked_groups(groups: pl.DataFrame, source: str) -> pl.DataFrame:
    """Groups of :func:`_grouped` whose entries all hold the required values (else RecordError)."""
    invalid = int(groups.get_column("invalid").sum())
    if invalid:
        raise RecordError(
            f"{invalid} entries lack a value in one of the required columns {list(NOT_NULL)}",
            source=source,
        )
    return groups


def _merged(parts: list[pl.DataFrame], *, by_id: bool) -> pl.DataFrame:
    """Partial :func:`_entry_groups` of chunks of entries, summed into one."""
    if not parts:
        return _entry_groups(pl.LazyFrame(schema=PARQUET_SCHEMA), by_id=by_id, source="")
    keys = ["role", "tier", "decision", "reason", *(["id"] if by_id else []), "counted"]
    return pl.concat(parts).group_by(keys).agg(pl.col("items", "tokens", "invalid").sum())


_LINE = "__line"
"""The column of each entry's line in a chunk of JSONL (0-based, among the chunk's lines)."""


def _chunk_groups(
    entries: pl.LazyFrame, *, by_id: bool, source: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`_entry_groups` and :func:`tally_groups` per line of a chunk of JSONL entries."""
    queries = [_grouped(entries, by_id=by_id), tally_groups(entries, (_LINE,))]
    try:
        groups, counted = pl.collect_all(queries, engine="streaming")
    except pl.exceptions.PolarsError as exc:
        raise RecordError(f"invalid entries: {exc}", source=source) from None
    return _checked_groups(groups, source), counted


def _jsonl_pass(paths: Sequence[Path], *, by_id: bool) -> tuple[list[dict[str, Any]], pl.DataFrame]:
    """Header figures and entry groups of manifests JSONL files, in one pass, file by file.

    Each line's header is validated as it is read; the entries are
    aggregated by Polars per chunk of whole lines (about 32 MB), so memory
    holds one chunk, whatever the size of the files, and each manifest's
    entries are checked against its header (:func:`check_entries`). A chunk
    whose values Polars refuses is validated line by line, to name the
    file, the line and the field.
    """
    figures: list[dict[str, Any]] = []
    parts: list[pl.DataFrame] = []

    def flush(source: str, chunk: list[tuple[int, bytes, ManifestTotals]]) -> None:
        text = b"".join(raw for _, raw, _ in chunk)
        entries = _exploded(pl.scan_ndjson(text, schema=_JSONL, row_index_name=_LINE), _LINE)
        try:
            groups, counted = _chunk_groups(entries, by_id=by_id, source=source)
        except RecordError:
            for number, raw, _ in chunk:
                parse_manifest(json.loads(raw), source, number)
            raise
        parts.append(groups)
        found = tallies(counted, (_LINE,))
        for index, (number, _, totals) in enumerate(chunk):
            tally = found.get((index,), Tally())
            check_entries(totals, tally, source, number, subject="the manifest")

    for path in paths:
        source = str(path)
        chunk: list[tuple[int, bytes, ManifestTotals]] = []
        size = 0
        for number, raw, data in _raw_lines(path):
            header = split_manifest(data, source, number)[0]
            figures.append(_figures(header))
            chunk.append((number, raw if raw.endswith(b"\n") else raw + b"\n", header.totals))
            size += len(raw)
            if size >= _CHUNK_BYTES:
                flush(source, chunk)
                chunk, size = [], 0
        if chunk:
            flush(source, chunk)
    return figures, _merged(parts, by_id=by_id)


def _parquet_pass(stored: _Stored, *, by_id: bool) -> tuple[list[dict[str, Any]], pl.DataFrame]:
    """Header figures and entry groups of the Parquet form; each request's entries checked."""
    assert stored.headers is not None
    read = list(_parquet_headers(stored.headers))
    scan = _scan_parquet(stored.entries, part_column=_PART)
    groups, counted = _collected([_grouped(scan, by_id=by_id), tally_groups(scan, _KEYS)], stored)
    if groups.get_column("invalid").sum():
        raise _null_entry(stored.entries)
    _check_requests(read, tallies(counted, _KEYS), stored)
    return [_figures(m) for _, m, _, _ in read], groups


def _null_entry(parts: Sequence[Path]) -> RecordError:
    """The error of the first entry, part by part, that lacks a required value (its 0-based row)."""
    for part in parts:
        nulls = [pl.col(name).is_null() for name in NOT_NULL]
        first = (
            pl.scan_parquet(part)
            .with_row_index("__row")
            .filter(pl.any_horizontal(nulls))
            .select(
                "__row", *(null.alias(name) for null, name in zip(nulls, NOT_NULL, strict=True))
            )
            .head(1)
            .collect()
        )
        if first.height:
            row = first.row(0, named=True)
            name = next(name for name in NOT_NULL if row[name])
            return RecordError("missing", source=str(part), row=row["__row"], field=name)
    return RecordError("an entry lacks a required value", source=str(parts[0]))


def _summary_parts(
    manifests: Sequence[PackManifest] | str | os.PathLike[str], *, by_id: bool
) -> tuple[list[dict[str, Any]], pl.DataFrame]:
    """Header figures and entry groups of manifests in memory or stored in any form."""
    if isinstance(manifests, str | os.PathLike):
        stored = _form(manifests)
        if stored.form == "parquet":
            return _parquet_pass(stored, by_id=by_id)
        if stored.form == "jsonl":
            return _jsonl_pass(stored.entries, by_id=by_id)
        manifests = _read_document(stored.entries[0])
    frames = _frames((m.label, m) for m in manifests)
    return [_figures(m) for m in manifests], _entry_groups(frames, by_id=by_id, source="manifests")


def summarize_manifests(
    manifests: Sequence[PackManifest] | str | os.PathLike[str],
    *,
    items: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """Count budget use, decisions, reasons and tokens over many manifests.

    Stored manifests are read in one pass over their parts, in order, so
    memory does not grow with the number of entries: for Parquet, the
    headers files, then one aggregation of the entries of every part by
    Polars' streaming engine (a ``group_by`` over role, tier, decision and
    reason, and a count per request to check the headers); for JSONL, one
    line at a time, each header validated as it is read and the entries
    aggregated by Polars per chunk of whole lines (about 32 MB), the
    chunks' groups then summed.

    Parameters
    ----------
    manifests
        The manifests (for example from :func:`read_manifests`), or where
        they are stored: anything :func:`scan_manifests` reads.
    items
        The items the manifests were packed from (a frame with ``id`` and
        ``sources``, as :func:`cognoxium.items.io.read_items` reads them), to
        count tokens per source; without them ``by_source`` is ``None``
        (manifest entries do not carry sources).

    Returns
    -------
    dict
        JSON-ready, deterministic for the same input:

        ``manifests``
            Number of manifests.
        ``profiles``
            The token profiles named, sorted.
        ``budget``
            ``budget_tokens``, ``used_tokens``, ``remaining_tokens`` and
            ``pack_overhead_tokens`` (sums over manifests, in tokens),
            ``utilization`` (used over budget tokens; ``None`` for a zero
            total) and ``used_fraction`` ``{"min", "mean", "max"}`` of the
            manifests' used/budget (manifests with a zero budget left out;
            ``None`` when none is left).
        ``items``
            ``entries``, ``included``, ``excluded``, ``counted`` (entries
            whose tokens were counted) and ``not_counted``.
        ``decisions``, ``reasons``
            Entry counts per decision and per reason, sorted by name.
        ``by_role``, ``by_tier``, ``by_source``
            Per item role, retention tier and source uri (an item with
            several sources counts under each; :data:`NO_SOURCE` for none,
            :data:`NOT_IN_ITEMS` for an entry whose id ``items`` lacks):
            ``{"items", "included", "included_tokens"}``.
        ``redactions``, ``policy_outcomes``
            Redactions per type and policy outcomes per action, summed.
        ``merges``
            Number of duplicate merges recorded.
        ``per_manifest``
            One ``{"label", "budget", "used_tokens", "remaining_tokens",
            "included", "excluded"}`` per manifest, in order.

    Raises
    ------
    RecordError
        If ``items`` lacks the ``id`` or ``sources`` column, or stored
        manifests are invalid (see :func:`read_manifests`; for JSONL the
        error names the line and the field).
    OSError
        If a file cannot be read.
    """
    if items is not None:
        missing = [c for c in ("id", "sources") if c not in items.columns]
        if missing:
            raise RecordError(f"the items lack the columns {missing}", field=missing[0])
    figures, groups = _summary_parts(manifests, by_id=items is not None)
    redactions: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for figure in figures:
        for kind, n in figure["redactions"].items():
            redactions[kind] = redactions.get(kind, 0) + n
        for action in figure["actions"]:
            outcomes[action] = outcomes.get(action, 0) + 1
    return {
        "manifests": len(figures),
        "profiles": sorted({f["profile"] for f in figures}),
        "budget": _budget(figures),
        "items": _counts(groups),
        "decisions": _value_counts(groups, "decision"),
        "reasons": _value_counts(groups, "reason"),
        "by_role": _groups(groups, "role"),
        "by_tier": _groups(groups, "tier"),
        "by_source": None if items is None else _by_source(groups, items),
        "redactions": dict(sorted(redactions.items())),
        "policy_outcomes": dict(sorted(outcomes.items())),
        "merges": sum(f["merges"] for f in figures),
        "per_manifest": [{key: f[key] for key in _PER_MANIFEST} for f in figures],
    }


_PER_MANIFEST = ("label", "budget", "used_tokens", "remaining_tokens", "included", "excluded")


def _counts(groups: pl.DataFrame) -> dict[str, int]:
    """Entries, included, excluded, counted and not counted entries."""
    items = pl.col("items")
    row = groups.select(
        items.sum().alias("entries"),
        items.filter(pl.col("decision") == "included").sum().alias("included"),
        items.filter(pl.col("decision") == "excluded").sum().alias("excluded"),
        items.filter(pl.col("counted")).sum().alias("counted"),
        items.filter(~pl.col("counted")).sum().alias("not_counted"),
    ).row(0, named=True)
    return {key: int(value) for key, value in row.items()}


def _groups(groups: pl.DataFrame, key: str) -> dict[str, dict[str, int]]:
    """Items, included items and included tokens per value of ``key``, sorted by value."""
    included = pl.col("decision") == "included"
    rows = (
        groups.group_by(pl.col(key).cast(pl.String).fill_null(NO_SOURCE))
        .agg(
            pl.col("items").sum().alias("items"),
            pl.col("items").filter(included).sum().alias("included"),
            pl.col("tokens").filter(included).sum().alias("included_tokens"),
        )
        .sort(key)
        .iter_rows(named=True)
    )
    return {
        row[key]: {
            "included": int(row["included"]),
            "included_tokens": int(row["included_tokens"]),
            "items": int(row["items"]),
        }
        for row in rows
    }


def _budget(figures: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Budget, used, remaining and overhead tokens summed, utilization and used fractions."""
    budgets = [f["budget"] for f in figures]
    used = [f["used_tokens"] for f in figures]
    fractions = [u / b for u, b in zip(used, budgets, strict=True) if b > 0]
    total_budget, total_used = sum(budgets), sum(used)
    return {
        "budget_tokens": total_budget,
        "used_tokens": total_used,
        "remaining_tokens": sum(f["remaining_tokens"] for f in figures),
        "pack_overhead_tokens": sum(f["pack_overhead_tokens"] for f in figures),
        "utilization": total_used / total_budget if total_budget else None,
        "used_fraction": {
            "min": min(fractions),
            "mean": sum(fractions) / len(fractions),
            "max": max(fractions),
        }
        if fractions
        else None,
    }


def _by_source(groups: pl.DataFrame, items: pl.DataFrame) -> dict[str, dict[str, int]]:
    """:func:`_groups` per source uri of the items (``id`` and ``sources`` columns).

    Entries whose id the items lack count under :data:`NOT_IN_ITEMS`, apart
    from the items without a source (:data:`NO_SOURCE`).
    """
    uris = (
        items.select(
            "id", pl.col("sources").list.eval(pl.element().struct.field("uri")).alias("source")
        )
        .explode("source", empty_as_null=True)
        .with_columns(pl.col("source").fill_null(NO_SOURCE))
    )
    joined = groups.join(uris, on="id", how="left")
    return _groups(joined.with_columns(pl.col("source").fill_null(NOT_IN_ITEMS)), "source")


def _value_counts(groups: pl.DataFrame, column: str) -> dict[str, int]:
    """Entries per value of ``column``, sorted by value."""
    counts = groups.group_by(pl.col(column).cast(pl.String)).agg(pl.col("items").sum()).rows()
    return {str(k): int(v) for k, v in sorted(counts)}
