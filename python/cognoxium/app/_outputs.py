"""Output directories committed in one step: a link swapped to a fresh version.

``DIR`` (the ``--out`` of ``cognoxium pack`` and ``cognoxium locomo``) is a
symbolic link to a sibling version directory ``DIR.<run id>`` that holds
every file of one run. A run writes a new version directory, then swaps the
link with one ``rename(2)``, so a reader of ``DIR/packs/`` and
``DIR/manifests/`` (their parts) sees every file of the previous run or every
file of this one, never a mix, whatever stops the run (an error, a kill, a
power loss after the files were synced)::

    out/sample -> sample.20260101T120000Z-1a2b3c4d
    out/sample.20260101T120000Z-1a2b3c4d/{packs,manifests}/part-00000.jsonl
    out/.sample.lock  (while a run writes)

Phases of one commit (:func:`committed_output`), under an exclusive
``flock(2)`` on ``.DIR.lock`` that the kernel releases when the process
ends, however it ends (the run removes the file when it ends; a killed run
leaves it, unlocked):

1. ``_sweep``: remove the version directories and temporary links of runs
   that died (every ``DIR.<run id>`` but the one ``DIR`` names); no live run
   can own them, since each holds the lock while it writes.
2. ``_stage``: make the new version directory; the caller writes into it.
3. ``_publish``: sync the files, make a temporary link to the version
   (``_link``) and rename it onto ``DIR`` (``_swap``).
4. ``_retire``: remove the previous version.

``DIR`` may be missing, an empty directory, or a link made by an earlier
commit; a non-empty directory or another link is refused
(:class:`~cognoxium.exceptions.OutputError`), since replacing it would
take two renames or drop files the run did not write. Needs POSIX
(``flock``, symbolic links).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from cognoxium.exceptions import OutputError

__all__ = ["committed_output", "lock_path", "publications", "version_dirs"]

_RUN_ID = r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}"


def _run_id() -> str:
    """A new run id: the UTC time to the second and 8 random hex digits."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def _version_name(target: Path) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(target.name)}\.{_RUN_ID}")


def _link_name(target: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(target.name)}\.{_RUN_ID}\.link")


def lock_path(target: Path) -> Path:
    """The lock file of the output directory ``target``: ``.<name>.lock`` beside it."""
    return target.parent / f".{target.name}.lock"


def version_dirs(target: Path) -> list[Path]:
    """The version directories ``<name>.<run id>`` beside ``target``, by name."""
    pattern = _version_name(target)
    return sorted(
        target.parent / entry.name
        for entry in os.scandir(target.parent)
        if pattern.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)
    )


def _absolute(out_dir: str | os.PathLike[str]) -> Path:
    target = Path(os.path.abspath(out_dir))
    if not target.name:
        raise OutputError(
            f"{os.fspath(out_dir)!r} cannot be an output directory; name a directory "
            "below it, for example out/run",
            path=os.fspath(out_dir),
        )
    return target


def _make_parent(target: Path) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where a parent directory should be
        raise NotADirectoryError(
            errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(target)
        ) from None


def _current(target: Path) -> Path | None:
    """The version ``target`` links to; ``None`` if missing or an empty directory.

    Raises OutputError for a non-empty directory or a link this module did
    not make, and FileExistsError for a file.
    """
    if target.is_symlink():
        dest = os.readlink(target)
        if not _version_name(target).fullmatch(dest):
            raise OutputError(
                f"{target} is a link to {dest}, not to a version {target.name}.<run id> "
                "written by cognoxium; remove the link or choose another output directory",
                path=str(target),
            )
        return target.parent / dest
    if not target.exists():
        return None
    if not target.is_dir():
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(target))
    held = sorted(entry.name for entry in os.scandir(target))
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        entries = "entry" if len(held) == 1 else "entries"
        raise OutputError(
            f"{target} is a directory holding {len(held)} {entries} ({shown}); outputs are "
            f"committed as a link {target.name} -> {target.name}.<run id>, which cannot replace "
            "a non-empty directory in one step. Move it away or remove it (for outputs of an "
            "earlier cognoxium, rm -r it), or choose another output directory",
            path=str(target),
        )
    return None


@contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the lock file of ``target`` (released on exit or kill).

    The lock file is removed when the run ends (a killed run leaves it, and
    the kernel releases its lock). It is removed while still locked, so a
    run that opened it before and locks it after holds the lock of a file
    no longer there: every run checks, once it holds the lock, that its file
    is the one at the path, and opens it again when not.
    """
    path = lock_path(target)
    fd = _lock_file(target, path)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        with suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)  # releases the lock


def _lock_file(target: Path, path: Path) -> int:
    """Open and lock ``path`` (the file at the path once locked); raise if another run holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            holder = f" (process {pid})" if pid.isdigit() else ""
            raise OutputError(
                f"{target} is being written by another run{holder}, which holds "
                f"{path}; wait for it to end or choose another output directory",
                path=str(target),
                code="output.locked",
            ) from None
        held = os.fstat(fd)
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev):
            return fd
        os.close(fd)  # the run that held it removed it: lock the file now at the path


def _sweep(target: Path, keep: Path | None) -> None:
    """Remove the version directories and temporary links of runs that died."""
    links = _link_name(target)
    for version in version_dirs(target):
        if version != keep:
            shutil.rmtree(version, ignore_errors=True)
    for entry in os.scandir(target.parent):
        if links.fullmatch(entry.name) and entry.is_symlink():
            with suppress(FileNotFoundError):
                os.unlink(entry.path)


def _stage(target: Path) -> Path:
    """Make a new, empty version directory beside ``target``."""
    version = target.parent / f"{target.name}.{_run_id()}"
    version.mkdir()
    return version


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync(version: Path) -> None:
    """Flush every file and directory of ``version`` to disk."""
    for root, _, files in os.walk(version):
        for name in files:
            _fsync(Path(root) / name)
        _fsync(Path(root))


def _link(target: Path, version: Path) -> Path:
    """A temporary link beside ``target`` to ``version`` (relative, by name)."""
    link = target.parent / f".{version.name}.link"
    os.symlink(version.name, link)
    return link


def _swap(link: Path, target: Path) -> None:
    """Rename ``link`` onto ``target``: the one step that makes the new files visible."""
    if not target.is_symlink() and target.is_dir():
        os.rmdir(target)  # empty (checked under the lock): nothing to lose
    os.replace(link, target)


_PUBLISHED = [0]  # how many runs this process has committed


def publications() -> int:
    """How many runs this process has committed so far (:func:`committed_output`).

    A command that reads it before its run and again when a signal comes
    knows whether the signal came after its files were committed.
    """
    return _PUBLISHED[0]


def _publish(target: Path, version: Path) -> None:
    _sync(version)
    link = _link(target, version)
    try:
        _swap(link, target)
        _PUBLISHED[0] += 1
    except BaseException:
        with suppress(OSError):
            os.unlink(link)
        raise
    with suppress(OSError):  # durability of the rename; the swap itself is done
        _fsync(target.parent)


def _retire(previous: Path | None) -> None:
    """Remove the previous version (a later run sweeps it if this fails)."""
    if previous is not None:
        shutil.rmtree(previous, ignore_errors=True)


@contextmanager
def committed_output(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Give a fresh directory to write a run's files into; commit them all in one step.

    On a normal exit, ``out_dir`` becomes a link to the new directory, in
    one rename; on an exception the new directory is removed and
    ``out_dir`` is left as it was. See the module docstring for the layout.

    Parameters
    ----------
    out_dir
        The output directory: missing, an empty directory, or a link made by
        an earlier commit. Its parent is created if missing.

    Yields
    ------
    pathlib.Path
        The new version directory, ``<out_dir>.<run id>``, empty.

    Raises
    ------
    OutputError
        If another run holds ``out_dir``'s lock, or ``out_dir`` is a
        non-empty directory or a link that this function did not make; the
        message names the path.
    FileExistsError
        If ``out_dir`` is a file.
    NotADirectoryError
        If a parent of ``out_dir`` is a file.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
    >>> with committed_output(out) as folder:
    ...     _ = (folder / "a.txt").write_text("one")
    >>> out.is_symlink(), (out / "a.txt").read_text()
    (True, 'one')
    >>> with committed_output(out) as folder:
    ...     _ = (folder / "a.txt").write_text("two")
    ...     raise KeyError("stop")
    Traceback (most recent call last):
    ...
    KeyError: 'stop'
    >>> (out / "a.txt").read_text(), len(version_dirs(out))
    ('one', 1)
    """
    target = _absolute(out_dir)
    _make_parent(target)
    _current(target)  # refuse early, before taking the lock
    with _locked(target):
        previous = _current(target)
        _sweep(target, keep=previous)
        version = _stage(target)
        try:
            yield version
            _publish(target, version)
        except BaseException:
            shutil.rmtree(version, ignore_errors=True)
            raise
        _retire(previous)
