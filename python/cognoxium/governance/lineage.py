"""Lineage: where every item's content came from, as a graph of edges.

Two sources make the edges of a frame:

- the ``lineage`` column: content-changing steps (``redact``, ``merge``, ...)
  that name their input by id *and* content hash;
- the ``parents`` column: ids an item was derived from (``derive``), whose
  hash is looked up among the frame's rows (null when the parent is not in
  the frame).

Both columns are part of the item schema, so lineage survives Parquet and
JSONL round trips.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import polars as pl

from cognoxium.items.model import canonical_json

__all__ = ["EDGE_SCHEMA", "ancestors", "descendants", "lineage_edges", "redactions_from_lineage"]

EDGE_SCHEMA = pl.Schema(
    {
        "child_id": pl.String(),
        "child_hash": pl.String(),
        "parent_id": pl.String(),
        "parent_hash": pl.String(),
        "operation": pl.String(),
        "detail": pl.String(),
    }
)
"""Columns of an edge frame; one row per (child, parent) step."""


def lineage_edges(df: pl.DataFrame, known: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every lineage edge of the items in ``df``, children in row order.

    Parameters
    ----------
    df
        Items with ``id``, ``content_hash``, ``parents`` and ``lineage``.
    known
        More items (``id``, ``content_hash``) whose hashes a ``derive``
        edge's parent takes when it is not in ``df``: a pack's input, so a
        parent left out of the pack keeps its hash. ``None``: ``df`` only.
        A parent in neither has a null ``parent_hash``.

    Returns
    -------
    polars.DataFrame
        Columns of :data:`EDGE_SCHEMA`. A ``parents`` id already named by a
        ``lineage`` edge of the same child is not repeated as ``derive``.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> df = records_to_frame([
    ...     {"id": "t1", "role": "user", "text": "I moved to Lyon."},
    ...     {"id": "m1", "role": "memory", "text": "Lives in Lyon.", "parents": ["t1"]},
    ... ])
    >>> lineage_edges(df).select("child_id", "parent_id", "operation").rows()
    [('m1', 't1', 'derive')]
    """
    rows = df.select("id", "content_hash", "parents", "lineage").with_row_index("__row")
    explicit = (
        rows.select("__row", "id", "content_hash", "lineage")
        .explode("lineage")
        .with_columns(pl.int_range(pl.len()).over("__row").alias("__k"))
        .filter(pl.col("lineage").is_not_null())
        .unnest("lineage")
        .rename({"id": "child_id", "content_hash": "child_hash"})
    )
    explicit = _link_steps(explicit)
    hashes = _hashes(df)
    if known is not None:
        more = _hashes(known).join(hashes, on="parent_id", how="anti", maintain_order="left")
        hashes = pl.concat([hashes, more])
    derived = (
        rows.select("__row", "id", "content_hash", "parents")
        .explode("parents")
        .with_columns((pl.int_range(pl.len()).over("__row") + 1_000_000).alias("__k"))
        .filter(pl.col("parents").is_not_null())
        .rename({"id": "child_id", "content_hash": "child_hash", "parents": "parent_id"})
        .join(
            explicit.select("child_id", "parent_id"),
            on=["child_id", "parent_id"],
            how="anti",
            maintain_order="left",
        )
        .join(hashes, on="parent_id", how="left", maintain_order="left")
        .with_columns(pl.lit("derive").alias("operation"), pl.lit(None, pl.String).alias("detail"))
    )
    columns = ["__row", "__k", *EDGE_SCHEMA.names()]
    edges = pl.concat([explicit.select(columns), derived.select(columns)])
    return edges.sort("__row", "__k").drop("__row", "__k").cast(dict(EDGE_SCHEMA.items()))


def _link_steps(edges: pl.DataFrame) -> pl.DataFrame:
    """Each ``lineage`` edge's child: the state its step made, not the item's last.

    An item's ``lineage`` lists its steps in the order they happened (a
    merge lists the kept copy's, then each folded copy's followed by its
    ``merge`` edge). A step of an id (``redact``, ``truncate``: the
    parent's id) made that id's next state: the parent of the id's next
    step, or else its last state (the item's hash, or a folded copy's
    hash in its ``merge`` edge). A ``merge`` made the item's state then. An
    edge from an id that is neither the item nor a folded copy keeps the
    item as its child.

    Parameters
    ----------
    edges
        One row per edge, in order within each ``__row`` (``__k``), with the
        item's ``child_id`` and ``child_hash``.

    Returns
    -------
    polars.DataFrame
        ``edges`` with ``child_id`` and ``child_hash`` of each step's own result.
    """
    merge = pl.col("operation") == "merge"
    folded = (  # a folded copy's last state: the parent of its merge edge
        edges.filter(merge)
        .group_by("__row", "parent_id", maintain_order=True)
        .agg(pl.col("parent_hash").first().alias("__last"))
    )
    edges = edges.join(folded, on=["__row", "parent_id"], how="left", maintain_order="left")
    owner = (
        pl.when(merge | (pl.col("parent_id") == pl.col("child_id")))
        .then(pl.col("child_id"))
        .when(pl.col("__last").is_not_null())
        .then(pl.col("parent_id"))
    )
    step = pl.when(merge.not_()).then(pl.col("parent_hash"))
    next_state = step.shift(-1).backward_fill().over("__row", "__owner", order_by="__k")
    last_state = pl.when(pl.col("__owner") == pl.col("child_id")).then("child_hash")
    made = pl.when(pl.col("__owner").is_not_null()).then(
        pl.coalesce(next_state, last_state.otherwise("__last"))
    )
    return (
        edges.with_columns(owner.alias("__owner"))
        .with_columns(made.alias("__made"))
        .with_columns(
            pl.coalesce("__owner", "child_id").alias("child_id"),
            pl.coalesce("__made", "child_hash").alias("child_hash"),
        )
        .drop("__owner", "__made", "__last")
    )


def _hashes(df: pl.DataFrame) -> pl.DataFrame:
    """The content hash of each item of ``df``, as a parent (``parent_id``, ``parent_hash``)."""
    return df.select(pl.col("id").alias("parent_id"), pl.col("content_hash").alias("parent_hash"))


def _walk(edges: pl.DataFrame, start: Iterable[str], forward: bool) -> pl.DataFrame:
    near, far = ("parent_id", "child_id") if forward else ("child_id", "parent_id")
    seen: set[str] = set()
    frontier = set(start)
    found = []
    depth = 1
    while frontier:
        step = edges.filter(pl.col(near).is_in(sorted(frontier)))
        if step.height == 0:
            break
        found.append(step.with_columns(pl.lit(depth).alias("depth")))
        seen |= frontier
        frontier = set(step.get_column(far).drop_nulls().to_list()) - seen
        depth += 1
    if not found:
        return pl.DataFrame(schema={**EDGE_SCHEMA, "depth": pl.Int32()})
    return pl.concat(found).unique(maintain_order=True).cast({"depth": pl.Int32})


def ancestors(edges: pl.DataFrame, item_id: str) -> pl.DataFrame:
    """The edges leading from ``item_id`` back to everything it came from.

    Returns
    -------
    polars.DataFrame
        Edge rows with a ``depth`` column (1 for the item's own edges), in
        breadth-first order; empty when the item has no lineage.
    """
    return _walk(edges, [item_id], forward=False)


def descendants(edges: pl.DataFrame, item_id: str) -> pl.DataFrame:
    """The edges leading from ``item_id`` to everything made from it (see :func:`ancestors`)."""
    return _walk(edges, [item_id], forward=True)


def redactions_from_lineage(df: pl.DataFrame) -> pl.Series:
    """Each item's redaction counts as its ``lineage`` records them.

    A ``redact`` edge's detail holds the item's counts after that step
    (counts add up over successive redactions), so the counts of an item
    read back from a file are, per type, the most its own ``redact`` edges
    give: what a ``redactions`` column said before the file was written.

    Parameters
    ----------
    df
        ``n`` items with ``id`` and ``lineage`` (without ``lineage``: no counts).

    Returns
    -------
    polars.Series
        ``redactions``: ``n`` canonical JSON objects ``{type: count}``,
        ``"{}"`` for an item its lineage records no redaction of.

    Examples
    --------
    >>> edge = {"parent_id": "a", "parent_hash": "0" * 64, "operation": "redact",
    ...         "detail": '{"EMAIL":1}'}
    >>> df = pl.DataFrame({"id": ["a", "b"], "lineage": [[edge], []]})
    >>> redactions_from_lineage(df).to_list()
    ['{"EMAIL":1}', '{}']
    """
    counts = pl.Series("redactions", ["{}"] * df.height, pl.String)
    if "lineage" not in df.columns or not df.select(pl.col("lineage").list.len().sum()).item():
        return counts
    own = (pl.col("operation") == "redact") & (pl.col("parent_id") == pl.col("id"))
    steps = (
        df.select("id", "lineage")
        .with_row_index("__row")
        .explode("lineage")
        .filter(pl.col("lineage").is_not_null())
        .unnest("lineage")
        .filter(own & pl.col("detail").is_not_null())
        .group_by("__row", maintain_order=True)
        .agg("detail")
    )
    merged = [_most_counts(details) for details in steps.get_column("detail").to_list()]
    return counts.scatter(steps.get_column("__row"), pl.Series(merged, dtype=pl.String))


def _most_counts(details: list[str]) -> str:
    """The per-type most of counts given as JSON objects, as canonical JSON."""
    most: dict[str, int] = {}
    for detail in details:
        for kind, n in json.loads(detail).items():
            most[kind] = max(most.get(kind, 0), n)
    return canonical_json(most)
