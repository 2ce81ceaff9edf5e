"""Rule: a select narrows the columns its scan reads.

The scan keeps the columns the select and the nodes between them read, and
no others.

Examples
--------
>>> from dataclasses import replace
>>> import polars as pl
>>> from cognoxium import CognitionFrame, OptFlags
>>> cf = CognitionFrame([{"id": i, "role": r, "text": i, "priority": p}
...                      for i, r, p in [("a", "user", 1), ("b", "document", 2), ("c", "user", 0)]])
>>> q = cf.filter(pl.col("priority") > 0).select("id", "text")
>>> print(q.explain(optimized=False))
Select col("id"), col("text")
  Filter [(col("priority")) > (dyn int: 0)]
    Scan 3 rows; 23 columns
>>> print(q.explain(optimizations=replace(OptFlags.none(), prune_projections=True)))
Select col("id"), col("text")
  Filter [(col("priority")) > (dyn int: 0)]
    Scan 3 rows; columns [id, text, priority]
>>> q.collect().equals(q.collect(OptFlags.none()))
True
"""

from __future__ import annotations

from cognoxium.engine.plan import Dedupe, Filter, Limit, Node, Scan, Select, Sort, TopK, rewrite

__all__ = ["prune_projections"]

_PASS_THROUGH = (Filter, Sort, Limit, TopK, Dedupe)
"""Nodes that keep their input's columns and read only the columns they name."""


def _reads(node: Node) -> set[str] | None:
    """Columns a pass-through node reads, or None if not known exactly."""
    if isinstance(node, Filter):
        return set(node.predicate.columns) if node.predicate.exact_columns else None
    if isinstance(node, Sort | TopK):
        if not all(key.exact_columns for key in node.by):
            return None
        return {c for key in node.by for c in key.columns}
    if isinstance(node, Dedupe):
        # A merge picks its representative by rank and id and reads metadata for conflicts;
        # every dedupe keys on the group and the answered tool call (in metadata), and one
        # with an as_of reads the validity times.
        compares_text = bool(node.normalize) or node.threshold is not None
        text = {"payload_kind", "text", "json", "ref_uri", "ref_title"} if compares_text else set()
        times = {"created_at", "valid_from", "expires_at"} if node.as_of is not None else set()
        merge = {"id", "rank"} if node.merge else set()
        return set(node.by) | text | times | merge | {"group_id", "metadata"}
    return set()


def _with_scan(node: Node, scan: Scan) -> Node:
    if isinstance(node, Scan):
        return scan
    return node.with_children([_with_scan(node.children[0], scan)])


def _prune(node: Node) -> Node:
    if not isinstance(node, Select) or not all(e.exact_columns for e in node.exprs):
        return node
    needed = {c for e in node.exprs for c in e.columns}
    current = node.input
    while isinstance(current, _PASS_THROUGH) and not current.barrier:
        reads = _reads(current)
        if reads is None:
            return node
        needed |= reads
        current = current.children[0]
    if not isinstance(current, Scan):
        return node
    available = current.columns or tuple(current.source.columns)
    # Keep one column even if none is read, so the row count survives.
    keep = tuple(c for c in available if c in needed) or available[:1]
    if len(keep) == len(available):
        return node
    return node.with_children([_with_scan(node.input, Scan(source=current.source, columns=keep))])


def prune_projections(plan: Node) -> Node:
    """Make a scan read only the columns a :class:`Select` above it needs.

    The select may sit above filters, sorts, limits, top-ks and dedupes; the
    scan keeps the columns any of them reads. Expressions that pick columns
    by pattern or type (selectors) stop the rule. Returns ``plan`` itself when
    nothing changed.

    Examples
    --------
    >>> import polars as pl
    >>> from cognoxium.engine.plan import Expression, Source, format_plan
    >>> scan = Scan(source=Source(pl.DataFrame({"a": [1], "b": [2], "c": [3]})))
    >>> filt = Filter(input=scan, predicate=Expression.of(pl.col("b") > 0))
    >>> print(format_plan(prune_projections(Select(input=filt, exprs=(Expression.of("a"),)))))
    Select col("a")
      Filter [(col("b")) > (dyn int: 0)]
        Scan 1 rows; columns [a, b]
    """
    return rewrite(plan, _prune)
