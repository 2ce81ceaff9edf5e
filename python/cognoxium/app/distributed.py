"""Batch packing on Ray Data: tasks of several scopes over a partitioned Parquet store.

:func:`run_batch_ray` gives the files of :func:`~cognoxium.app.batch.run_batch`,
byte for byte, with the scopes packed on a Ray cluster (a local one by
default). The phases:

1. *Units.* The requests are grouped by scope (their ``where`` clause), in
   order of first appearance; each group is one unit of work.
   Consecutive units make a task, cut as the local run cuts them (units
   until their weights reach about 20,000 items, the weight of a unit being
   the store's items whose value of one metadata key its clause fixes; the
   driver counts them in one lazy pass over the store's metadata column), so
   the tasks are the same whatever the number of workers, many small scopes
   making as few tasks as few large ones.
2. *Read.* A task reads only its part of the store, in one scan
   (:func:`read_part`): for a hive-partitioned store
   (``ROOT/<key>=<value>/*.parquet``, see :func:`~cognoxium.items.store.write_partitioned`) the
   ``where`` clauses that fix ``metadata.<key>`` to text values read only
   those partitions (:func:`scope_values`; Polars prunes them from the
   scan), and a row filter on the metadata JSON skips the other items
   before they are validated. The part is split once for the task's units
   and each ``where`` clause then selects its scope exactly as the local
   run does.
3. *Pack and write.* Each unit packs its requests with the local run's
   kernel, :func:`~cognoxium.app.batch.pack_scope` (its scope prepared once,
   see :class:`~cognoxium.app.batch.PreparedScope`), and the task writes
   the results into its own part of every table, ``packs/part-<k>.jsonl``
   and the manifests' parts (see :mod:`cognoxium.packing.manifests`), in the
   run's uncommitted version directory; it sends back only its latencies
   and the units that failed or found no item.
4. *Commit.* The driver collects the tasks' figures (no work per request:
   one row per task) and swaps the output link once, as
   :func:`~cognoxium.app.batch.run_batch` commits: the output appears whole
   or not at all. The output directory must be on storage every worker
   writes at the same path (a shared file system), as the store is.

Tasks run as a Ray Data ``map_batches`` over ``ray.data.from_items`` (one
task per batch, at most ``workers`` tasks at once). A task whose worker
process dies is run again (Ray Data's tasks have ``max_retries=-1``:
retried as long as their worker dies, never for an exception of their own);
a task is a pure function of its inputs and writes each part under a
temporary name renamed onto the part's name when complete, so a retried
task replaces its parts with the same bytes, never adds to them; the driver
keeps one row per task and removes the temporary files of attempts that
died before it commits. Before Ray starts, the driver
checks the store's form, the token profile and every request's ``where``
against the item schema (a clause outside the grammar, naming an unknown
column or not type checking raises the local run's error at once). A unit
that raises (a ``where`` over a metadata key no item read has, an
infeasible budget) is run again by the driver, which raises the local run's
error. A request whose scope holds no item (no
partition or no matching item) is an error listing every such request,
never an empty pack (the local run packs it empty); when its clause names
a ``metadata.<key>`` that no item of the store has, the error is the local
run's (the driver scans the store's metadata to tell).

Two conditions keep the packs equal to the local run's. Lineage
(``hybrid-lineage``, ``learned``): a unit's store is the partitions it
read, not the whole store, so partition the store by a key that keeps
derived items (observations, summaries) with their parents, such as the
conversation. Metadata: ``metadata.<key>`` is decoded with the type its
values have in the items read, so give a key one JSON type across the store.
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np
import polars as pl
import pyarrow as pa
import sqlglot

from cognoxium._distribution import install_command
from cognoxium.app._outputs import committed_output
from cognoxium.app._scopes import (
    ScopeIndex,
    Unit,
    batch_units,
    conjuncts,
    key_clause,
    partition_keys,
    scope_values,
)
from cognoxium.app._workers import finish_parts, open_part, task_ranges, unit_weights
from cognoxium.app.batch import (
    BatchSettings,
    BatchStats,
    PreparedScope,
    RankMethod,
    Request,
    ScopeResult,
    pack_scope,
    prepare_requests,
    scope_rows,
)
from cognoxium.engine.plan import polars_error_text
from cognoxium.exceptions import (
    CognoxiumError,
    DependencyError,
    PlanError,
    PredicateError,
    RecordError,
    SchemaError,
)
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.predicate import parse_predicate
from cognoxium.items.schema import POLARS_SCHEMA
from cognoxium.items.store import collect_store, partition_key, scan_store, unreadable_store
from cognoxium.packing.manifests import ManifestForm
from cognoxium.packing.options import PackOptions
from cognoxium.retrieval.embeddings import CACHE_DIR_ENV
from cognoxium.retrieval.scope import RetrievalSettings

__all__ = [
    "ENGINES",
    "Engine",
    "read_scope",
    "run_batch_ray",
    "scope_values",
]

Engine = Literal["local", "ray"]
"""Where a batch is packed: in this process, or on a Ray cluster."""

ENGINES: tuple[str, ...] = ("local", "ray")
"""The accepted values of :data:`Engine` (the first is the default)."""


_STATS = pa.schema(
    [
        ("task", pa.int64()),
        ("failed", pa.large_list(pa.int64())),
        ("messages", pa.large_list(pa.large_string())),
        ("empty", pa.large_list(pa.int64())),
        ("latencies_ms", pa.large_binary()),
        ("newest_user_left_out", pa.large_list(pa.large_string())),
    ]
)
"""One row per task, once its part is written: the positions of its units that failed
(with their errors) or found no item, its latencies (float64 bytes, in part order) and
the requests whose pack left out the newest user message."""


def _ray() -> Any:
    """Import ray (with Ray Data), or raise DependencyError naming the extra."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise DependencyError(
            f"the ray engine needs Ray Data, which is not installed ({exc}); "
            f"install the extra: {install_command('ray')}",
            params={"extra": "ray"},
        ) from None
    return ray


# -- the store ---------------------------------------------------------------


def _check_store(path: Path) -> None:
    """Refuse a store that is neither a partitioned directory nor a Parquet file, at once."""
    if partition_key(path) is not None:
        return
    try:
        pl.read_parquet_schema(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise SchemaError(
            f"{path}: the Ray engine reads a Parquet file or a hive-partitioned directory "
            f"of Parquet files, and this is not one ({exc}); write one with "
            "CognitionFrame.sink_parquet or write_partitioned"
        ) from None


# -- scopes ------------------------------------------------------------------


def read_scope(
    path: str | os.PathLike[str], where: str | None
) -> tuple[CognitionFrame, CognitionFrame]:
    """Read the part of a store that a ``where`` clause needs, and the scope in it.

    Parameters
    ----------
    path
        The store: a Parquet file or a hive-partitioned directory (see
        :func:`~cognoxium.items.store.write_partitioned`).
    where
        The scope's clause (``None``: the whole store).

    Returns
    -------
    tuple of CognitionFrame
        ``(part, scope)``: the items read (the partitions the clause allows,
        less the items whose metadata cannot match), in store order (see
        :func:`~cognoxium.items.store.read_store`), and
        ``part`` filtered by ``where``, equal to the local run's scope.

    Raises
    ------
    RecordError, PlanError
        If the clause is not a valid predicate over the items.
    SchemaError
        If the files are not valid items.
    """
    part = read_part(path, [where])
    scope = part if where is None else CognitionFrame(part.filter(where).collect())
    return part, scope


def read_part(path: str | os.PathLike[str], wheres: Sequence[str | None]) -> CognitionFrame:
    """Read, in one scan, the part of a store that some ``where`` clauses need.

    For each plain metadata key that every clause fixes to text values
    (:func:`scope_values`), only the items with one of the values are read:
    for the store's partition key, only those partitions.

    Parameters
    ----------
    path
        The store: a Parquet file or a hive-partitioned directory (see
        :func:`~cognoxium.items.store.write_partitioned`).
    wheres
        The clauses (``None``: the whole store).

    Returns
    -------
    CognitionFrame
        The items read, in store order (see :func:`~cognoxium.items.store.read_store`).

    Raises
    ------
    SchemaError, RecordError
        If the files are not valid items.
    """
    source = Path(path)
    key = partition_key(source)
    lazy = scan_store(source, key)
    names = set(partition_keys(wheres[0])) if wheres else set()
    for where in wheres[1:]:
        names &= set(partition_keys(where))
    for name in sorted(names):
        fixed = [scope_values(where, name) for where in wheres]
        if any(values is None for values in fixed):
            continue
        values = sorted(frozenset[str]().union(*(v for v in fixed if v is not None)))
        if name == key:
            lazy = lazy.filter(pl.col(key).is_in(values))
        field = pl.col("metadata").str.json_path_match(f"$.{name}")
        lazy = lazy.filter(field.is_in(values))
    return CognitionFrame(collect_store(lazy, key, source))


# -- units of work -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Settings:
    """What every unit packs with (the batch's settings, ``as_of`` fixed)."""

    options: PackOptions
    rank: RankMethod
    retrieval: RetrievalSettings | None
    form: ManifestForm = "parquet"
    bodies: bool = True

    def batch(self) -> BatchSettings:
        """The settings of :func:`~cognoxium.app.batch.pack_scope`."""
        retrieval = self.retrieval if self.retrieval is not None else RetrievalSettings()
        return BatchSettings(self.options, self.rank, retrieval, self.bodies)


@dataclass(frozen=True, slots=True)
class _RayTask:
    """A task as the driver sends it: its index and its units with their positions."""

    index: int
    units: tuple[tuple[int, Unit], ...]


def _indexed(
    part: CognitionFrame, units: Sequence[tuple[int, Unit]]
) -> list[tuple[int, Unit, ScopeIndex | str]]:
    """Each unit with the split of the part that serves it, or the error that split raised.

    The part is split once for all the units; if a unit's clause is
    invalid, each unit is split on its own, so that only the invalid ones fail.
    """
    try:
        index = ScopeIndex(part, [unit for _, unit in units])
    except CognoxiumError as exc:
        if len(units) == 1:
            position, unit = units[0]
            return [(position, unit, f"{type(exc).__name__}: {exc}")]
        return [found for one in units for found in _indexed(part, [one])]
    return [(position, unit, index) for position, unit in units]


def _pack_task(
    part: CognitionFrame, task: _RayTask, settings: _Settings, folder: str
) -> dict[str, Any]:
    """Pack a task's units over the part of the store it read into its part of the files.

    Returns the task's row of :data:`_STATS`: its latencies, and the units
    that failed (with their errors) or whose scope holds no item, which the
    part leaves out (the run then fails, so the part is never committed).
    """
    batch = settings.batch()
    failed: list[int] = []
    messages: list[str] = []
    empty: list[int] = []
    latencies: list[float] = []
    left_out: list[str] = []
    with open_part(folder, settings.form, task.index) as (packs, manifests):
        for position, unit, index in _indexed(part, task.units):
            if isinstance(index, str):
                failed.append(position)
                messages.append(index)
                continue
            try:
                result = _pack_one(part, index, unit, batch)
            except (CognoxiumError, pl.exceptions.PolarsError) as exc:
                failed.append(position)
                messages.append(f"{type(exc).__name__}: {exc}")
                continue
            if result is None:
                empty.append(position)
                continue
            result.write(packs, manifests)
            latencies.extend(result.latencies_ms)
            left_out.extend(result.newest_user_left_out)
    return {
        "task": task.index,
        "failed": failed,
        "messages": messages,
        "empty": empty,
        "latencies_ms": np.asarray(latencies, dtype=np.float64).tobytes(),
        "newest_user_left_out": left_out,
    }


def _pack_one(
    part: CognitionFrame, index: ScopeIndex, unit: Unit, batch: BatchSettings
) -> ScopeResult | None:
    """Pack a unit over the part of the store read for it (``None``: its scope is empty).

    As the local run packs it, with the part in place of the store: the
    lineage ranks read the items of the part derived from the scope's.
    """
    scope = index.rows(unit)
    if scope.height == 0:
        return None
    store = part
    if batch.reads_lineage:
        store = CognitionFrame._of_checked(index.derived(scope))
    return pack_scope(store, unit.requests, batch, prepared=PreparedScope(store, scope, batch))


def _pack_units(batch: pa.Table, *, store: str, settings: _Settings, folder: str) -> pa.Table:
    """The Ray Data map function: read the part of the store a task needs, pack its units.

    Each task writes its part of the files into ``folder``; its row of
    :data:`_STATS` is all it returns.
    """
    rows = []
    for payload in batch.column("payload").to_pylist():
        task: _RayTask = pickle.loads(payload)
        try:
            part = read_part(store, [unit.where for _, unit in task.units])
            rows.append(_pack_task(part, task, settings, folder))
        except (CognoxiumError, pl.exceptions.PolarsError) as exc:
            positions = [position for position, _ in task.units]
            message = f"{type(exc).__name__}: {exc}"
            rows.append(
                {
                    "task": task.index,
                    "failed": positions,
                    "messages": [message] * len(positions),
                    "empty": [],
                    "latencies_ms": b"",
                    "newest_user_left_out": [],
                }
            )
    return pa.Table.from_pylist(rows, schema=_STATS)


# -- the driver ----------------------------------------------------------------


def _reads_metadata(sql: str) -> bool:
    """Whether a predicate reads a ``metadata.<key>`` (``False`` if it does not parse)."""
    try:
        return "metadata" in parse_predicate(sql).meta.root_names()
    except PlanError:
        return False


def _fails(frame: CognitionFrame, sql: str) -> bool:
    try:
        frame.filter(sql).collect()
    except (CognoxiumError, pl.exceptions.PolarsError):
        return True
    return False


def _schema_decides(where: str, error: RecordError, empty: CognitionFrame) -> bool:
    """Whether a clause that fails over no item fails over every store of the item schema.

    Over no item a ``metadata.<key>`` reads as null, so a clause whose
    validity turns on a metadata value's type (``lower(metadata.topic)``)
    fails there and may pass over the items: such a clause is refused only
    when one of its top-level ``AND`` terms that reads no metadata fails on
    its own. A clause outside the grammar, with an unknown column, or that
    reads no metadata fails the same whatever the items.
    """
    if isinstance(error.__cause__, PredicateError) or not _reads_metadata(where):
        return True
    try:
        tree = sqlglot.parse_one(where)
    except (sqlglot.errors.SqlglotError, RecursionError):  # pragma: no cover - parsed above
        return False
    terms = [term.sql() for term in conjuncts(tree)]
    return any(not _reads_metadata(term) and _fails(empty, term) for term in terms)


def _check_wheres(requests: Sequence[Request]) -> None:
    """Raise the local run's error for a ``where`` clause that fails whatever the store holds.

    Each distinct clause is filtered, in request order, over an empty store
    of the item schema (:func:`~cognoxium.app.batch.scope_rows`, as the local
    run filters), so a clause outside the grammar, naming an unknown column
    or not type checking is refused before Ray starts; what turns on the
    items (a metadata key no item has, a metadata value's type) is found by
    the units. A clause that only fixes one metadata key to text values
    (``metadata.conversation = 'c1'``) is checked once per key, as the local
    run checks it: it differs from the first of its key only in its values,
    which cannot make it invalid, so 100,000 scopes of one key cost one check.
    """
    empty = CognitionFrame(pl.DataFrame(schema=POLARS_SCHEMA))
    seen: set[str] = set()
    keys: set[str] = set()
    for request in requests:
        if request.where is None or request.where in seen:
            continue
        seen.add(request.where)
        keyed = key_clause(request.where)
        if keyed is not None and keyed[0] in keys:
            continue
        try:
            scope_rows(empty, request)
        except RecordError as error:
            if _schema_decides(request.where, error, empty):
                raise
        if keyed is not None:
            keys.add(keyed[0])


def _where_error(request: Request, exc: Exception) -> RecordError:
    """The local run's error for a ``where`` clause that cannot filter the store."""
    if isinstance(exc, PredicateError):
        return request.error(f"invalid where clause: {exc}", field="where")
    text = polars_error_text(exc) if isinstance(exc, pl.exceptions.PolarsError) else str(exc)
    return request.error(f"invalid where clause {request.where!r}: {text}", field="where")


def _raise_failure(unit: Unit, store: str, settings: _Settings, message: str) -> NoReturn:
    """Run a unit that failed on a worker here, to raise its error as the local run does."""
    try:
        part = read_part(store, [unit.where])
        index = ScopeIndex(part, [unit])
    except (PlanError, pl.exceptions.PolarsError) as exc:
        raise _where_error(unit.requests[0], exc) from exc
    _pack_one(part, index, unit, settings.batch())
    raise CognoxiumError(f"a scope failed on a Ray worker: {message}")


def _missing(requests: Sequence[Request], positions: Sequence[int]) -> RecordError:
    shown = sorted(positions)
    ids = [requests[p].id for p in shown]
    wheres = sorted({str(requests[p].where) for p in shown})
    return RecordError(
        f"{len(ids)} request(s) have a scope with no item in the store (no partition or no "
        f"matching item): {', '.join(repr(i) for i in ids[:10])}"
        f"{', ...' if len(ids) > 10 else ''}; their where clauses: {wheres[:10]}",
        field="where",
        code="request.invalid",
        params={"request_ids": ids},
    )


def _check_empty_scopes(store: Path, requests: Sequence[Request]) -> None:
    """Raise the local run's error for an empty scope's clause that fails over the whole store.

    A unit reads only the items its clause can match, so a clause over a
    ``metadata.<key>`` that no item of the store has gives an empty scope
    there, where the local run refuses the key. The whole store is scanned
    lazily (the metadata column to learn its keys, then the clause's
    columns); a clause that passes leaves the empty scope to be reported.
    """
    whole = _whole(store)
    checked: set[str | None] = set()
    for request in requests:
        if request.where not in checked:
            checked.add(request.where)
            scope_rows(whole, request)


class _Collected:
    """The tasks' rows as they arrive: latencies by task, and the units that failed or were empty.

    A row that arrives twice (a retried task) is used once. The work is per
    task: a row's latencies are one buffer, never a value per request.
    """

    def __init__(self, tasks: int) -> None:
        self.tasks = tasks
        self.latencies: dict[int, np.ndarray] = {}
        self.failed: dict[int, str] = {}
        self.empty: list[int] = []
        self.left_out: dict[int, list[str]] = {}

    def add(self, batch: pa.Table) -> None:
        """Take a batch of rows of :data:`_STATS`."""
        columns = [batch.column(name).to_pylist() for name in ("task", "failed", "messages")]
        empty = batch.column("empty").to_pylist()
        left_out = batch.column("newest_user_left_out").to_pylist()
        buffers = batch.column("latencies_ms")
        for row, (task, failed, messages) in enumerate(zip(*columns, strict=True)):
            if task in self.latencies:
                continue
            self.latencies[task] = np.frombuffer(buffers[row].as_buffer(), dtype=np.float64)
            self.failed.update(zip(failed, messages, strict=True))
            self.empty.extend(empty[row])
            self.left_out[task] = left_out[row]

    def missing(self) -> list[int]:
        """The tasks without a row."""
        return [task for task in range(self.tasks) if task not in self.latencies]

    def left_out_in_order(self) -> tuple[str, ...]:
        """The requests whose pack left out the newest user message, in task (file) order."""
        return tuple(i for task in range(self.tasks) for i in self.left_out.get(task, ()))

    def in_order(self) -> np.ndarray:
        """Every request's latency, in task (file) order."""
        parts = [self.latencies[task] for task in range(self.tasks)]
        return np.concatenate(parts) if parts else np.empty(0)


_RAY_LOGGERS = ("ray", "ray.data")
"""Ray's driver logger (start-up lines) and Ray Data's (execution messages, its own handlers)."""


@contextmanager
def _ray_logs(quiet: bool) -> Iterator[None]:
    """With ``quiet``, Ray's and Ray Data's records below ERROR are dropped until the exit.

    The loggers' levels are set back on exit, so the process's logging is
    as it was (Ray Data's file log keeps its records outside the call).
    """
    loggers = [logging.getLogger(name) for name in _RAY_LOGGERS]
    saved = [logger.level for logger in loggers]
    if quiet:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, saved, strict=True):
            logger.setLevel(level)


@contextmanager
def _cluster(
    ray: Any, address: str | None, workers: int | None, quiet: bool = False
) -> Iterator[None]:
    """Use the running Ray, connect to ``address``, or start a local Ray for the batch.

    ``ray.init`` sets the ``ray`` logger's level itself: ``quiet`` asks it for ERROR.
    """
    if ray.is_initialized():
        yield
        return
    logs: dict[str, Any] = {"logging_level": logging.ERROR} if quiet else {}
    if address is not None:
        ray.init(address=address, log_to_driver=False, **logs)
    else:
        ray.init(
            num_cpus=workers or os.cpu_count() or 1,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            _temp_dir=tempfile.mkdtemp(prefix="ray-"),
            **logs,
        )
    try:
        yield
    finally:
        ray.shutdown()


def _whole(store: Path) -> CognitionFrame:
    """The whole store as a lazy scan of its files (read only as a query needs)."""
    files = store if partition_key(store) is None else store / "**" / "*.parquet"
    return CognitionFrame.scan_parquet(files, hive_partitioning=False)


def _ray_tasks(units: Sequence[Unit], store: Path) -> list[_RayTask]:
    """The units cut into tasks as the local run cuts them, with their positions.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from cognoxium.items.records import records_to_frame
    >>> from cognoxium.items.store import write_partitioned
    >>> root = pathlib.Path(tempfile.mkdtemp()) / "store"
    >>> write_partitioned(records_to_frame([
    ...     {"id": str(i), "role": "user", "text": "hi", "metadata": {"c": f"c{i % 2}"}}
    ...     for i in range(4)]), root, key="c")
    >>> units = batch_units([Request(id=str(i), budget=5, where=f"metadata.c = 'c{i % 2}'")
    ...                      for i in range(4)])
    >>> [[position for position, _ in task.units] for task in _ray_tasks(units, root)]
    [[0, 1]]
    """
    try:
        ranges = task_ranges(unit_weights(units, _whole(store)))
    except pl.exceptions.PolarsError as exc:
        raise unreadable_store(Path(store), exc) from None
    return [
        _RayTask(k, tuple((position, units[position]) for position in positions))
        for k, positions in enumerate(ranges)
    ]


def _results(
    ray: Any,
    tasks: Sequence[_RayTask],
    store: str,
    settings: _Settings,
    folder: Path,
    *,
    workers: int | None,
    cache_dir: str | None,
) -> Iterator[pa.Table]:
    """The tasks' rows of :data:`_STATS`, in batches, as Ray Data tasks finish them.

    Each task reads the part of the store its units need in one scan and
    writes its part of the files into ``folder``.
    """
    items = [{"task": task.index, "payload": pickle.dumps(task)} for task in tasks]
    if not items:
        return
    env = None if cache_dir is None else {"env_vars": {CACHE_DIR_ENV: cache_dir}}
    mapped = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        _pack_units,
        batch_size=1,
        batch_format="pyarrow",
        fn_kwargs={"store": store, "settings": settings, "folder": str(folder)},
        compute=ray.data.TaskPoolStrategy(size=workers),
        num_cpus=1,
        runtime_env=env,
    )
    yield from mapped.iter_batches(batch_size=None, batch_format="pyarrow")


def _collect(
    rows: Iterator[pa.Table],
    tasks: Sequence[_RayTask],
    units: Sequence[Unit],
    requests: Sequence[Request],
    store: str,
    settings: _Settings,
) -> _Collected:
    """Collect the tasks' rows; raise if a unit failed, a scope is empty or a task is missing."""
    out = _Collected(len(tasks))
    for batch in rows:
        out.add(batch)
    if out.failed:
        first = min(out.failed)
        unit = units[first]
        _raise_failure(unit, store, settings, out.failed[first])
    if out.empty:
        positions = sorted(p for index in out.empty for p in units[index].positions)
        _check_empty_scopes(Path(store), [requests[p] for p in positions])
        raise _missing(requests, positions)
    missing = out.missing()
    if missing:  # pragma: no cover - Ray returned fewer rows than tasks
        raise CognoxiumError(f"task {missing[0]} of the batch has no result from Ray")
    return out


def run_batch_ray(
    store: str | os.PathLike[str],
    requests: Sequence[Request],
    *,
    out_dir: str | os.PathLike[str],
    address: str | None = None,
    workers: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    options: PackOptions | None = None,
    rank: RankMethod = "learned",
    retrieval: RetrievalSettings | None = None,
    manifests: ManifestForm = "parquet",
    bodies: bool = True,
    progress: bool = False,
    quiet: bool = False,
) -> BatchStats:
    """Pack every request with Ray Data, tasks of several scopes; the files of the local run.

    Writes exactly the files of :func:`~cognoxium.app.batch.run_batch` with
    the same arguments (the parts of the packs and the manifests, each part
    byte-identical, committed in one step into ``out_dir``); see the module
    docstring for the phases.

    Parameters
    ----------
    store
        The items: a hive-partitioned Parquet directory
        (:func:`~cognoxium.items.store.write_partitioned`) or a Parquet file, on storage every
        worker reads at the same path.
    requests
        The requests, with unique ids.
    out_dir
        As for :func:`~cognoxium.app.batch.run_batch`, on storage every
        worker writes at the same path (a shared file system): each task
        writes its part of the files into the run's version directory,
        which this process commits.
    address
        A Ray cluster to connect to (``"auto"``, ``"ray://head:10001"``);
        ``None`` starts a local Ray with ``workers`` CPUs for the batch and
        stops it after. A Ray already initialised in this process is used
        as it is.
    workers
        Most tasks run at once (Ray tasks of one CPU each); ``None``: as
        many as the cluster has CPUs.
    cache_dir
        Embedding cache directory on shared storage, set as
        ``COGNOXIUM_CACHE_DIR`` in every worker (content-addressed,
        write-once shard files, renamed into place; see
        :class:`~cognoxium.retrieval.embeddings.EmbeddingCache`); ``None``:
        the workers' own setting.
    options, rank, retrieval, manifests, bodies
        As for :func:`~cognoxium.app.batch.run_batch`. An ``as_of`` of
        ``None`` is the driver's current time, read once.
    progress
        Show Ray Data's progress bars on standard error.
    quiet
        Drop Ray's and Ray Data's log records below ERROR during the call:
        Ray's start-up lines, Ray Data's execution messages and warnings
        (errors still show). ``False`` leaves them as Ray logs them. The
        workers' output never reaches this process (``log_to_driver=False``).

    Returns
    -------
    BatchStats
        Wall time of the whole call (reading, packing, writing), in
        seconds; per-pack latencies as measured on the workers.

    Raises
    ------
    DependencyError
        If Ray Data is not installed (extra ``ray``).
    RecordError
        If requests have a scope with no item (listing them), or as
        :func:`~cognoxium.app.batch.run_batch` raises it; for a ``where``
        clause that fails over any store of the item schema (grammar,
        columns, types), before Ray starts.
    BudgetError, PlanError, OutputError, SchemaError, OSError
        As :func:`~cognoxium.app.batch.run_batch` raises them; nothing is
        committed.
    """
    ray = _ray()
    started = time.perf_counter()
    timed = (options if options is not None else PackOptions()).at_time()
    prepared = prepare_requests(requests, rank=rank, manifests=manifests, options=timed)
    settings = _Settings(timed, rank, retrieval, manifests, bodies)
    units = batch_units(prepared)
    source = os.path.abspath(store)
    _check_store(Path(source))  # refuse a bad store, clause or profile before starting Ray
    _check_wheres(prepared)
    tasks = _ray_tasks(units, Path(source))
    shared = None if cache_dir is None else os.path.abspath(cache_dir)
    with (
        _ray_logs(quiet),
        _cluster(ray, address, workers, quiet),
        _quiet(ray, progress),
        committed_output(out_dir) as folder,
    ):
        rows = _results(ray, tasks, source, settings, folder, workers=workers, cache_dir=shared)
        collected = _collect(rows, tasks, units, prepared, source, settings)
        finish_parts(folder, manifests, len(tasks))
    values = collected.in_order()
    seconds = time.perf_counter() - started
    return BatchStats(
        requests=len(prepared),
        seconds=seconds,
        packs_per_s=len(prepared) / seconds if seconds > 0 else 0.0,
        p50_ms=float(np.percentile(values, 50)) if values.size else 0.0,
        p95_ms=float(np.percentile(values, 95)) if values.size else 0.0,
        latencies_ms=tuple(values.tolist()),
        newest_user_left_out=collected.left_out_in_order(),
    )


@contextmanager
def _quiet(ray: Any, progress: bool) -> Iterator[None]:
    """Ray Data's progress bars only when asked; no execution banner."""
    context = ray.data.DataContext.get_current()
    saved = (context.enable_progress_bars, context.print_on_execution_start)
    context.enable_progress_bars = progress
    context.print_on_execution_start = False
    try:
        yield
    finally:
        context.enable_progress_bars, context.print_on_execution_start = saved
