"""A batch's tasks: cut the same whatever runs them, each writing its own part of the files.

A batch's units (the requests of one scope, see :mod:`cognoxium.app._scopes`)
are cut into tasks of consecutive units (:func:`task_ranges`) by a weight
per unit that depends only on the requests and the store
(:func:`unit_weights`: the items whose value of one metadata key the unit's
clause fixes), so the tasks are the same whatever the number of workers and
whatever the engine (:func:`~cognoxium.app.batch.run_batch` here, or
:func:`~cognoxium.app.distributed.run_batch_ray`). Task ``k`` writes part
``k`` of every table of the batch (:func:`open_part`: ``packs/part-<k>.jsonl``
and the manifests' parts, see :mod:`cognoxium.packing.manifests`) where it
runs, and sends back only its :class:`TaskStats`; so the parts, byte for
byte, do not depend on who packed them, and the process that runs the batch
does no work per request.

:func:`run_tasks` packs the tasks of a local batch in this process or in
``N`` worker processes (started with ``spawn``, so no lock of Polars'
thread pool is inherited), at most ``2 * N`` tasks in flight, which bounds
the memory: a task holds its units' rows (and, for the ranks that read
lineage, the items derived from them), so a worker never reads the store.
A task's error (a bad budget, an infeasible request) is raised in the
parent, for the first failing task in order. An interrupt
(``KeyboardInterrupt``, which the command line also raises on ``SIGTERM``)
ends the workers at once, their running tasks included (:func:`end_workers`):
a task writes its part under a temporary name, so a task cut short leaves no
part that looks complete.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa

from cognoxium.app._scopes import Unit, fixed_values
from cognoxium.app._warnings import plain_warnings
from cognoxium.packing._parts import PACKS, part_path, staged, sweep
from cognoxium.packing.manifests import ManifestWriter

if TYPE_CHECKING:
    from cognoxium.app.batch import BatchSettings
    from cognoxium.frame.frame import CognitionFrame
    from cognoxium.packing.manifests import ManifestForm

__all__ = [
    "INTERRUPT_POLL_SECONDS",
    "PARENT_POLL_SECONDS",
    "TASK_ITEMS",
    "Task",
    "TaskStats",
    "default_workers",
    "end_workers",
    "finish_parts",
    "open_part",
    "pack_task",
    "result_of",
    "run_tasks",
    "start_worker",
    "task_ranges",
    "tasks_of",
    "unit_weights",
    "watch_parent",
]

TASK_ITEMS = 20_000
"""Items per task: a task takes units until their weights add up to at least this many."""


def default_workers() -> int:
    """The CPUs this process may run on (its affinity), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - not on Linux
        return max(os.cpu_count() or 1, 1)


# -- cutting the units into tasks -------------------------------------------------


def unit_weights(units: Sequence[Unit], store: CognitionFrame) -> list[int]:
    """Each unit's weight: the items of the store its clause can keep, by one metadata key.

    The key is the plain metadata key that the most clauses fix to text
    values (:func:`~cognoxium.app._scopes.fixed_values`; ties by name),
    found from the clauses alone. A unit whose clause fixes it weighs the
    items whose ``metadata.<key>`` (as ``json_path_match`` reads it) is one
    of its values; any other unit weighs the whole store. One pass over the
    store's metadata column (a lazy scan reads that column only), so the
    weights are the same whoever computes them over the same items.

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> from cognoxium.app._scopes import batch_units
    >>> from cognoxium.app.batch import Request
    >>> store = CognitionFrame([{"id": str(i), "role": "user", "text": "hi",
    ...                          "metadata": {"c": "a" if i < 3 else "b"}} for i in range(4)])
    >>> units = batch_units([Request(id="r1", budget=5, where="metadata.c = 'a'"),
    ...                      Request(id="r2", budget=5, where="metadata.c IN ('a', 'b')"),
    ...                      Request(id="r3", budget=5, where="role = 'user'")])
    >>> unit_weights(units, store)
    [3, 4, 4]
    """
    fixed = [fixed_values(unit.where) for unit in units]
    votes = Counter(key for found in fixed for key in found)
    lazy = store.lazy()
    if not votes:
        total = lazy.select(pl.len()).collect().item() if units else 0
        return [total] * len(units)
    key = min(votes, key=lambda name: (-votes[name], name))
    value = pl.col("metadata").str.json_path_match(f"$.{key}").alias("value")
    counted = lazy.group_by(value).agg(pl.len()).collect(engine="streaming")
    counts: dict[str | None, int] = dict(counted.iter_rows())
    total = sum(counts.values())
    return [sum(counts.get(v, 0) for v in found[key]) if key in found else total for found in fixed]


def task_ranges(weights: Sequence[int]) -> list[range]:
    """The units of each task: consecutive, until their weights reach :data:`TASK_ITEMS`.

    Examples
    --------
    >>> [list(r) for r in task_ranges([15_000, 15_000, 5, 30_000, 0, 7])]
    [[0, 1], [2, 3], [4, 5]]
    """
    ranges: list[range] = []
    start = items = 0
    for position, weight in enumerate(weights):
        items += weight
        if items >= TASK_ITEMS:
            ranges.append(range(start, position + 1))
            start, items = position + 1, 0
    if start < len(weights):
        ranges.append(range(start, len(weights)))
    return ranges


# -- the tasks of a local batch ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Task:
    """Consecutive units of a batch, with the rows each needs.

    Attributes
    ----------
    index
        The task's position in the batch: the number of the parts it writes.
    units
        The units, in batch order.
    rows
        Per unit, its scope's rows.
    lineage
        Per unit, the items its rank may read lineage from (``None``: the
        rank reads none).
    """

    index: int
    units: tuple[Unit, ...]
    rows: tuple[pl.DataFrame, ...]
    lineage: tuple[pl.DataFrame | None, ...]

    def compacted(self) -> Task:
        """The task with its rows in buffers of their own, to be sent to a worker process.

        The rows of a scope are a filter of the store, whose nested columns
        (``sources``, ``parents``, ``lineage``) still point into the whole
        store's buffers, and Polars pickles those buffers whole: a scope of
        40 rows of a store read from JSONL carried every item's sources.
        """
        return Task(
            self.index,
            self.units,
            tuple(_compact(rows) for rows in self.rows),
            tuple(None if rows is None else _compact(rows) for rows in self.lineage),
        )


def _compact(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with each nested column copied to buffers holding its rows only."""
    nested = [name for name, dtype in df.schema.items() if dtype.is_nested()]
    if not nested or df.is_empty():
        return df
    every = pa.array(np.arange(df.height, dtype=np.int64))
    copies = []
    for name in nested:
        column = df.get_column(name)
        copied = pl.from_arrow(column.to_arrow().take(every))
        assert isinstance(copied, pl.Series)
        copies.append(copied.cast(column.dtype).alias(name))
    return df.with_columns(copies)


@dataclass(frozen=True, slots=True)
class TaskStats:
    """What a task sends back once its parts are written: no result, a few figures.

    Attributes
    ----------
    index
        The task's index.
    latencies_ms
        Per request, in part order, the milliseconds of its rank and
        selection (float64).
    newest_user_left_out
        The ids of its requests whose pack left out the newest user message
        (:attr:`~cognoxium.packing.packer.PackOutcome.newest_user_message_left_out`).
    """

    index: int
    latencies_ms: np.ndarray
    newest_user_left_out: tuple[str, ...] = ()


def tasks_of(
    units: Sequence[Unit],
    ranges: Sequence[range],
    rows: Callable[[Sequence[Unit]], list[pl.DataFrame]],
    lineage: Callable[[pl.DataFrame], pl.DataFrame | None],
) -> Iterator[Task]:
    """The tasks of ``ranges`` (:func:`task_ranges`), lazily, in order.

    ``rows`` gives the scopes of a task's units, in order (so it may read
    them at once), and ``lineage`` the lineage items of a scope; both run
    when the task is made.
    """
    for index, units_range in enumerate(ranges):
        chosen = [units[position] for position in units_range]
        scopes = rows(chosen)
        yield Task(index, tuple(chosen), tuple(scopes), tuple(lineage(s) for s in scopes))


@contextmanager
def open_part(
    folder: str | os.PathLike[str], form: ManifestForm, index: int
) -> Iterator[tuple[IO[str], ManifestWriter]]:
    """Open part ``index`` of a batch's tables: its ``packs`` lines and its manifests.

    Yields the packs file (text) and the :class:`ManifestWriter` of the
    part; on a normal exit every file of the part is renamed onto its name,
    on an error every one is removed (see :func:`~cognoxium.packing._parts.staged`).
    """
    with ExitStack() as stack:
        temporary = stack.enter_context(staged(part_path(folder, PACKS, index, ".jsonl")))
        packs = stack.enter_context(temporary.open("w", encoding="utf-8"))
        manifests = stack.enter_context(ManifestWriter(folder, form, part=index))
        yield packs, manifests


def finish_parts(folder: str | os.PathLike[str], form: ManifestForm, tasks: int) -> None:
    """Make the parts of a batch of ``tasks`` tasks ready to commit.

    A batch of no task writes an empty part 0 of every table (a table
    always has a part); the temporary files of tasks whose process died are
    removed.
    """
    if tasks == 0:
        with open_part(folder, form, 0):
            pass
    sweep(folder)


def pack_task(
    task: Task,
    settings: BatchSettings,
    form: ManifestForm,
    folder: Path,
    done: Callable[[int], None] | None = None,
) -> TaskStats:
    """Pack a task's units one by one into its part of the files, in ``folder``.

    Each unit's manifest rows are encoded on the writer's thread while the
    next unit is packed. ``done``, when given, is called with the number of
    requests of each unit once it is packed.
    """
    from cognoxium.app.batch import PreparedScope, pack_scope
    from cognoxium.frame.frame import CognitionFrame

    latencies: list[float] = []
    left_out: list[str] = []
    with open_part(folder, form, task.index) as (packs, manifests):
        for unit, rows, lineage in zip(task.units, task.rows, task.lineage, strict=True):
            store = CognitionFrame._of_checked(lineage if lineage is not None else rows)
            prepared = PreparedScope(store, rows, settings)
            result = pack_scope(store, unit.requests, settings, prepared=prepared)
            result.write(packs, manifests)
            latencies.extend(result.latencies_ms)
            left_out.extend(result.newest_user_left_out)
            if done is not None:
                done(len(result.latencies_ms))
    return TaskStats(task.index, np.asarray(latencies, dtype=np.float64), tuple(left_out))


PARENT_POLL_SECONDS = 1.0
"""How often (seconds) a worker checks that the process that started it is alive."""


def watch_parent(parent: int, every: float) -> None:
    """End this worker process once ``parent`` (the batch's process) is gone.

    A pool's workers outlive a parent killed by a signal it cannot clean up
    after (``SIGKILL``, or ``SIGTERM`` in a program that leaves it to its
    default, which ends the process at once): they would hold their memory,
    and a pipe the caller reads, for good. A daemon thread checks every
    ``every`` seconds whether this process's parent is still ``parent`` (an
    orphan is adopted by another process) and ends the worker with exit
    status 1 when it is not; the task it was packing writes no part (its
    temporary files stay for the next run into the same directory to sweep).
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, name="cognoxium-parent-watch", daemon=True).start()


def start_worker(parent: int, every: float) -> None:
    """Start a worker: it watches ``parent`` (:func:`watch_parent`) and locks no semaphore.

    tqdm, which bm25s' tokenizer calls with its bar disabled, makes a
    ``multiprocessing`` lock on first use: a named semaphore, registered
    with the resource tracker the workers share. A worker ended by
    ``SIGTERM`` (:func:`end_workers`) never releases it, and the tracker
    reports it leaked on the command's standard error at exit. A worker
    draws no bar, so tqdm gets a thread lock instead (``tqdm.set_lock``),
    when tqdm is installed.
    """
    watch_parent(parent, every)
    plain_warnings()
    try:
        from tqdm import tqdm
    except ImportError:
        return
    tqdm.set_lock(threading.RLock())


INTERRUPT_POLL_SECONDS = 0.25
"""The longest (seconds) the batch's process waits for a task before it sees a pending interrupt."""


def result_of(future: Future[TaskStats]) -> TaskStats:
    """The task's stats, waited for :data:`INTERRUPT_POLL_SECONDS` at a time.

    Polars installs its ``SIGINT`` handler with ``SA_RESTART``
    (https://github.com/pola-rs/polars/issues/21739), so a wait on a lock
    with no timeout is resumed after ``SIGINT`` and never raises
    ``KeyboardInterrupt`` until the task ends (minutes); a timed wait
    returns to Python, which raises it.
    """
    while not future.done():
        wait([future], timeout=INTERRUPT_POLL_SECONDS)
    return future.result()


def end_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel the pool's tasks not started and end its workers now, those packing included.

    ``shutdown(wait=False, cancel_futures=True)`` alone leaves a running
    task packing to its end (minutes), and leaving the pool's ``with`` block
    waits for it. Each worker gets ``SIGTERM``: it writes nothing more, and
    its part stays under its temporary name. The pool is unusable after;
    its workers are reaped in the background (at the latest when this
    process exits).
    """
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:  # Python 3.14+: the documented way
        terminate()
        return
    # Python 3.11-3.13 have no public way to end a running task: what terminate_workers
    # does, over the pool's private map of its processes (missing: no worker to end).
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with suppress(ValueError):  # a process already closed
            process.terminate()


def _counted(stats: TaskStats, done: Callable[[int], None] | None) -> TaskStats:
    """``stats``, once ``done`` is told how many requests its task packed."""
    if done is not None:
        done(len(stats.latencies_ms))
    return stats


def run_tasks(
    tasks: Iterator[Task],
    settings: BatchSettings,
    form: ManifestForm,
    folder: Path,
    workers: int,
    done: Callable[[int], None] | None = None,
) -> Iterator[TaskStats]:
    """Pack every task into its part, here or in ``workers`` processes; their stats in order.

    A batch of one task is packed in this process whatever ``workers``.
    ``done``, when given, is called with the number of requests packed as
    they are: after each unit of a task packed here, after each task packed
    in a worker.
    Interrupted (``KeyboardInterrupt``, or the generator closed before its
    end), it ends the workers at once (:func:`end_workers`) before the
    interrupt goes on; after a task's error it waits for the running tasks.

    Raises
    ------
    Exception
        The error of the first failing task, in order (re-raised from its worker).
    """
    head = list(itertools.islice(tasks, 2))
    tasks = itertools.chain(head, tasks)
    if workers <= 1 or len(head) < 2:  # a single task is packed here: no process to start
        for task in tasks:
            yield pack_task(task, settings, form, folder, done)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=start_worker,
        initargs=(os.getpid(), PARENT_POLL_SECONDS),
    ) as pool:
        pending: deque[Future[TaskStats]] = deque()
        try:
            for task in tasks:
                pending.append(pool.submit(pack_task, task.compacted(), settings, form, folder))
                while len(pending) >= 2 * workers:
                    yield _counted(result_of(pending.popleft()), done)
            while pending:
                yield _counted(result_of(pending.popleft()), done)
        except BaseException as stop:
            if not isinstance(stop, Exception):  # KeyboardInterrupt, GeneratorExit: nobody waits
                end_workers(pool)
            raise
        finally:
            for future in pending:
                future.cancel()
