"""The parts of a batch's output tables: one file per task, named by the task's index.

A batch (``cognoxium pack``, ``cognoxium locomo``) is packed in tasks of
consecutive scopes, and each task writes its own part of every output table,
where it runs (a worker process, a Ray task or the calling process)::

    DIR/packs/part-00000.jsonl             DIR/packs/part-00001.jsonl ...
    DIR/manifests/part-00000.parquet       DIR/manifests/part-00001.parquet ...
    DIR/manifest_headers/part-00000.jsonl  DIR/manifest_headers/part-00001.jsonl ...

(``DIR/manifests/part-00000.jsonl`` ... in the ``jsonl`` manifest form, which
has no headers table). A table is its parts in the order of their numbers:
concatenated, they hold what one file written by a single writer holds.
Numbers have at least five digits, so up to 100,000 parts a name sort (what a
glob such as ``pl.scan_parquet("DIR/manifests/part-*.parquet")`` reads) is
the number order; :func:`part_files` orders by number whatever the count.
Every batch writes at least part 0, empty for an empty batch, so a table
always has a part to read.

A run's tasks are numbered from 0, and each writes its part of every table,
so a run's tables hold the same parts, 0 to ``n - 1``: :func:`run_parts`
refuses a table with a gap in its numbers, or tables whose parts differ,
naming the part missing. Nothing records ``n``, so a run that lost its last
parts (of every table) reads as a shorter run.

A part is written under a hidden temporary name in its table's directory and
renamed onto its own name when complete (:func:`staged`), so a part is whole
or missing, and a task run again (a Ray task whose worker died) replaces its
parts instead of adding to them; :func:`sweep` removes the temporary files a
dead task left.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from cognoxium.exceptions import RecordError

__all__ = [
    "HEADERS",
    "MANIFESTS",
    "PACKS",
    "TABLES",
    "part_files",
    "part_path",
    "run_parts",
    "staged",
    "sweep",
]

PACKS = "packs"
"""The table of packs: one JSON line per request (its budget, ids and used tokens)."""
MANIFESTS = "manifests"
"""The table of manifest entries (``parquet``) or manifests (``jsonl``)."""
HEADERS = "manifest_headers"
"""The table of manifest headers (``parquet`` form only)."""
TABLES = (PACKS, MANIFESTS, HEADERS)
"""Every table directory a batch may write."""

_PART = re.compile(r"part-([0-9]{5,})(\.[a-z]+)")
_TEMPORARY = re.compile(r"\.part-[0-9]{5,}\.[a-z]+\.[0-9a-f]{16}\.tmp")


def part_path(folder: str | os.PathLike[str], table: str, index: int, suffix: str) -> Path:
    """The path of part ``index`` of ``table`` under ``folder``.

    Examples
    --------
    >>> part_path("out", "manifests", 17, ".parquet").as_posix()
    'out/manifests/part-00017.parquet'
    """
    if index < 0:
        raise ValueError(f"a part number is at least 0; got {index}")
    return Path(folder) / table / f"part-{index:05d}{suffix}"


def part_files(directory: str | os.PathLike[str], suffix: str) -> list[Path]:
    """The parts ``part-<number><suffix>`` of a table directory, in the order of their numbers.

    Other entries (temporary files, other suffixes) are left out; a missing
    directory has no parts.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> table = pathlib.Path(tempfile.mkdtemp())
    >>> for n in (100000, 2, 99999):
    ...     _ = (table / f"part-{n:05d}.jsonl").write_text("")
    >>> [p.name for p in part_files(table, ".jsonl")]
    ['part-00002.jsonl', 'part-99999.jsonl', 'part-100000.jsonl']
    """
    return [path for _, path in _numbered(directory, suffix)]


def _numbered(directory: str | os.PathLike[str], suffix: str) -> list[tuple[int, Path]]:
    """``(number, path)`` of the parts of a table directory, in number order."""
    found: list[tuple[int, Path]] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for entry in entries:
        match = _PART.fullmatch(entry.name)
        if match is not None and match.group(2) == suffix:
            found.append((int(match.group(1)), Path(directory) / entry.name))
    return sorted(found)


def run_parts(tables: Sequence[tuple[Path, str]]) -> list[list[Path]]:
    """The parts of the tables of one run, each in number order, checked whole.

    Parameters
    ----------
    tables
        ``(table directory, suffix)`` of each table of the run to read;
        every table must hold the parts 0 to ``n - 1``, ``n - 1`` the
        highest part number of any of them.

    Returns
    -------
    list of list of Path
        Each table's parts, in number order.

    Raises
    ------
    RecordError
        If a table lacks one of those parts: the error's ``source`` is the
        first part missing and ``params`` its ``part`` number.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> table = pathlib.Path(tempfile.mkdtemp())
    >>> for n in (0, 2):
    ...     _ = (table / f"part-{n:05d}.jsonl").write_text("")
    >>> run_parts([(table, ".jsonl")])
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: .../part-00001.jsonl: missing: ...
    """
    found = [_numbered(directory, suffix) for directory, suffix in tables]
    count = max((parts[-1][0] + 1 for parts in found if parts), default=0)
    for (directory, suffix), parts in zip(tables, found, strict=True):
        held = {number for number, _ in parts}
        gap = next((n for n in range(count) if n not in held), None)
        if gap is not None:
            raise _missing(directory, suffix, gap, count)
    return [[path for _, path in parts] for parts in found]


def _missing(directory: Path, suffix: str, number: int, count: int) -> RecordError:
    """The error of part ``number`` missing from a table of a run of ``count`` parts or more."""
    return RecordError(
        f"missing: a run writes parts 0 to n - 1 of each of its tables, and the "
        f"{directory.name} table lacks part {number} of at least {count}; "
        "was a part removed, or not copied?",
        source=str(directory / f"part-{number:05d}{suffix}"),
        params={"part": number},
    )


@contextmanager
def staged(path: Path) -> Iterator[Path]:
    r"""Give a temporary path beside ``path``; rename it onto ``path`` on a normal exit.

    The temporary name is hidden and unique to the call, so two writers of
    one part never share a file; on an exception the temporary file is
    removed and ``path`` is left as it was. The table directory is created
    if missing.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "packs" / "part-00000.jsonl"
    >>> with staged(target) as temporary:
    ...     _ = temporary.write_text("one\n")
    >>> target.read_text(), [p.name for p in target.parent.iterdir()]
    ('one\n', ['part-00000.jsonl'])
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def sweep(folder: str | os.PathLike[str]) -> None:
    """Remove the temporary part files that tasks which died left in ``folder``'s tables."""
    for table in TABLES:
        try:
            entries = list(os.scandir(Path(folder) / table))
        except FileNotFoundError:
            continue
        for entry in entries:
            if _TEMPORARY.fullmatch(entry.name):
                with suppress(FileNotFoundError):
                    os.unlink(entry.path)
