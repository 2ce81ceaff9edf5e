"""A batch's scopes packed on every core of one machine, in worker processes.

:func:`~cognoxium.app.batch.run_batch` with ``workers=N`` (``N > 1``) cuts its
units (the requests of one scope, see :mod:`cognoxium.app._scopes`) into
tasks of consecutive units of about :data:`TASK_ITEMS` items each, the same
tasks whatever ``N``. A task holds its units' rows (and, for the ranks that
read lineage, the items derived from them), so a worker never reads the
store. ``N`` worker processes (started with ``spawn``, so no lock of Polars'
thread pool is inherited) pack the tasks with the in-process kernel
(:func:`~cognoxium.app.batch.pack_scope`) and render their results for the
files (:meth:`~cognoxium.app.batch.ScopeResult.render`: the ``packs.jsonl``
lines, the manifest lines and the manifest rows). The parent appends each
task's rendered result in task order, so the files are the same, byte for
byte, whatever ``N``; at most ``2 * N`` tasks are in flight, which bounds
the memory. A task's error (a bad budget, an infeasible request) is raised
in the parent, for the first failing task in order.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from cognoxium.app._scopes import Unit

if TYPE_CHECKING:
    from cognoxium.app.batch import BatchSettings, RenderedResult
    from cognoxium.packing.manifests import ManifestForm

__all__ = ["TASK_ITEMS", "Task", "default_workers", "run_tasks", "tasks_of"]

TASK_ITEMS = 20_000
"""Items per task: a task takes units until their scopes hold at least this many."""


def default_workers() -> int:
    """The CPUs this process may run on (its affinity), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - not on Linux
        return max(os.cpu_count() or 1, 1)


@dataclass(frozen=True, slots=True)
class Task:
    """Consecutive units of a batch, with the rows each needs.

    Attributes
    ----------
    units
        The units, in batch order.
    rows
        Per unit, its scope's rows.
    lineage
        Per unit, the items its rank may read lineage from (``None``: the
        rank reads none).
    """

    units: tuple[Unit, ...]
    rows: tuple[pl.DataFrame, ...]
    lineage: tuple[pl.DataFrame | None, ...]


def tasks_of(
    units: Sequence[Unit],
    rows: Callable[[Unit], pl.DataFrame],
    lineage: Callable[[pl.DataFrame], pl.DataFrame | None],
) -> Iterator[Task]:
    """Cut ``units`` into tasks of about :data:`TASK_ITEMS` items, lazily, in order.

    ``rows`` gives a unit's scope and ``lineage`` the lineage items of a
    scope; both run when the task is made.
    """
    batch: list[tuple[Unit, pl.DataFrame, pl.DataFrame | None]] = []
    items = 0
    for unit in units:
        scope = rows(unit)
        batch.append((unit, scope, lineage(scope)))
        items += scope.height
        if items >= TASK_ITEMS:
            yield _task(batch)
            batch, items = [], 0
    if batch:
        yield _task(batch)


def _task(batch: list[tuple[Unit, pl.DataFrame, pl.DataFrame | None]]) -> Task:
    units, rows, lineage = zip(*batch, strict=True)
    return Task(tuple(units), tuple(rows), tuple(lineage))


def pack_units(task: Task, settings: BatchSettings, form: ManifestForm) -> Iterator[RenderedResult]:
    """Pack a task's units one by one, each rendered for the files of ``form``.

    A generator: in this process each unit's result is written (its
    manifest rows encoded on the writer's thread) while the next is packed.
    """
    from cognoxium.app.batch import PreparedScope, pack_scope
    from cognoxium.frame.frame import CognitionFrame

    for unit, rows, lineage in zip(task.units, task.rows, task.lineage, strict=True):
        store = CognitionFrame._of_checked(lineage if lineage is not None else rows)
        prepared = PreparedScope(store, rows, settings)
        yield pack_scope(store, unit.requests, settings, prepared=prepared).render(form)


def pack_task(task: Task, settings: BatchSettings, form: ManifestForm) -> list[RenderedResult]:
    """Every unit of a task packed and rendered: what a worker process sends back."""
    return list(pack_units(task, settings, form))


def run_tasks(
    tasks: Iterator[Task], settings: BatchSettings, form: ManifestForm, workers: int
) -> Iterator[RenderedResult]:
    """Every task's rendered results, in task order, packed here or in ``workers`` processes.

    A batch of one task is packed in this process whatever ``workers``.

    Raises
    ------
    Exception
        The error of the first failing task, in order (re-raised from its worker).
    """
    head = list(itertools.islice(tasks, 2))
    tasks = itertools.chain(head, tasks)
    if workers <= 1 or len(head) < 2:  # a single task is packed here: no process to start
        for task in tasks:
            yield from pack_units(task, settings, form)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending: deque[Future[list[RenderedResult]]] = deque()
        try:
            for task in tasks:
                pending.append(pool.submit(pack_task, task, settings, form))
                while len(pending) >= 2 * workers:
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
