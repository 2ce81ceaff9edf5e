"""Running a plan: optimize, lower to Polars and collect or sink, with the item checks it needs."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Literal

import polars as pl

from cognoxium.engine.lowering import lower
from cognoxium.engine.optimizer import OptFlags, optimize
from cognoxium.engine.plan import LazySource, Node, Scan, changes_item_values, walk
from cognoxium.engine.ranks import Rank
from cognoxium.exceptions import DependencyError, PlanError, RecordError, SchemaError
from cognoxium.items.scan import ScanRead, atomic_path
from cognoxium.items.schema import COLUMNS, POLARS_SCHEMA, SCHEMA_VERSION
from cognoxium.items.validation import check_items, row_checks

__all__ = [
    "ENGINES",
    "EngineType",
    "checked_rows",
    "collect",
    "lowered",
    "scan_reads",
    "sink_items",
]

EngineType = Literal["auto", "in-memory", "streaming", "gpu"] | pl.GPUEngine
"""A Polars engine: its name or a ``polars.GPUEngine``."""

ENGINES: tuple[str, ...] = ("auto", "in-memory", "streaming", "gpu")
"""The Polars engines a plan runs on, by name."""


def lowered(plan: Node, optimizations: OptFlags | None = None) -> pl.LazyFrame:
    """``plan`` optimized (every rule unless ``optimizations`` says otherwise) and lowered."""
    return lower(optimize(plan, OptFlags() if optimizations is None else optimizations))


def checked_rows(plan: Node, *, finite_rank: bool = True) -> pl.DataFrame:
    """Run ``plan``, checking as readers check the rows a step may have made invalid.

    Only a plan that computes columns or joins in rows
    (:func:`~cognoxium.engine.plan.changes_item_values`) pays for the check;
    its rows come back as :func:`~cognoxium.items.validation.check_items` gives them.

    Parameters
    ----------
    plan
        The plan, run with every optimizer rule.
    finite_rank
        Refuse a NaN rank too (a pack reads one as unranked, a file may not hold one).

    Returns
    -------
    polars.DataFrame
        The plan's rows.

    Raises
    ------
    RecordError
        Naming the 0-based row and the field of the first invalid value.
    """
    rows = lowered(plan).collect()
    if changes_item_values(plan):
        return check_items(rows, finite_rank=finite_rank)
    return rows


def collect(
    plan: Node, optimizations: OptFlags | None = None, engine: EngineType = "auto"
) -> pl.DataFrame:
    """Run ``plan`` on a Polars engine, as :meth:`CognitionFrame.collect` does.

    See :meth:`CognitionFrame.collect <cognoxium.frame.CognitionFrame.collect>`.

    Raises
    ------
    PlanError
        On an engine Polars does not offer.
    DependencyError
        For the GPU engine without ``cudf_polars``, before the plan runs.
    """
    if not isinstance(engine, pl.GPUEngine) and engine not in ENGINES:
        raise PlanError(f"unknown engine {engine!r}; use one of {list(ENGINES)}")
    if (isinstance(engine, pl.GPUEngine) or engine == "gpu") and not _has_gpu_engine():
        raise DependencyError(
            f"collect(engine={engine!r}) needs Polars' GPU engine, whose package "
            "cudf_polars is not installed: install the cuDF Polars distribution matching "
            "the machine's CUDA version (https://docs.pola.rs/user-guide/gpu-support/), "
            'or use engine="auto" or "streaming"'
        )
    return lowered(plan, optimizations).collect(engine=engine)


def sink_items(plan: Node, path: str | os.PathLike[str]) -> None:
    """Run ``plan`` and write its rows to one Parquet file, atomically.

    See :meth:`CognitionFrame.sink_parquet <cognoxium.frame.CognitionFrame.sink_parquet>`.

    Raises
    ------
    SchemaError
        If the rows hold the item columns and others, which the readers refuse.
    RecordError
        If a computed row is not a valid item, or a written rank is NaN or infinite.
    OSError
        If ``path`` cannot be written; ``path`` is left as it was.
    """
    schema = plan.schema
    items = all(name in schema for name in COLUMNS)
    extra = [name for name in schema.names() if name not in POLARS_SCHEMA]
    if items and extra:
        raise SchemaError(
            f"sink_parquet: columns {extra} are not item columns, and the readers refuse "
            "a file of items holding them: drop them, or select the item columns"
        )
    checked = items and changes_item_values(plan)
    lf = checked_rows(plan).lazy() if checked else lowered(plan)
    version = {"cognoxium.schema_version": str(SCHEMA_VERSION)}
    with atomic_path(path) as tmp:
        lf.sink_parquet(tmp, metadata=version)
        if "rank" in schema and any(isinstance(node, Rank) for node in walk(plan)):
            _check_written_ranks(tmp)


def scan_reads(plan: Node) -> list[ScanRead]:
    """The last read of each lazy scan in ``plan``, in plan order.

    See :meth:`CognitionFrame.read_statistics
    <cognoxium.frame.CognitionFrame.read_statistics>`.
    """
    out: list[ScanRead] = []
    seen: set[int] = set()
    for node in walk(plan):
        if isinstance(node, Scan) and isinstance(node.source, LazySource):
            scan = node.source.scan
            reads = scan.reads
            if reads and id(scan) not in seen:
                seen.add(id(scan))
                out.append(reads[-1])
    return out


def _check_written_ranks(path: Path) -> None:
    """Raise as the readers do if a rank written to the Parquet file ``path`` is NaN or infinite.

    A rank step may score an item NaN, which packs read as unranked but a
    file of items may not hold; the file is read back one column only.
    """
    ranks = pl.read_parquet(path, columns=["rank"])
    for bad, field, message in row_checks(["rank"]):
        rows = ranks.select(bad.arg_true()).to_series()
        if rows.len():
            raise RecordError(message, row=int(rows[0]), field=field)


def _has_gpu_engine() -> bool:
    """Whether Polars' GPU engine (the ``cudf_polars`` package) can be imported."""
    return importlib.util.find_spec("cudf_polars") is not None
