"""Rule: fuse adjacent filters into one filter whose predicate is their ``&``."""

from __future__ import annotations

from cognoxium.engine.plan import Expression, Filter, Node, rewrite

__all__ = ["fuse_filters"]


def _fuse(node: Node) -> Node:
    if not isinstance(node, Filter) or not isinstance(node.input, Filter):
        return node
    inner = node.input
    # The outer predicate would run over the inner filter's input instead of
    # its output: only safe when it looks at each row alone. Both must decode
    # metadata the same way.
    if not node.predicate.elementwise or inner.metadata_dtype != node.metadata_dtype:
        return node
    return Filter(
        input=inner.input,
        predicate=Expression.of(inner.predicate.expr & node.predicate.expr),
        metadata_dtype=node.metadata_dtype,
    )


def fuse_filters(plan: Node) -> Node:
    """Merge ``Filter(Filter(x, p), q)`` into ``Filter(x, p & q)``.

    Only when ``q`` is elementwise (it then gives the same answer on every
    row of ``x``) and both filters decode metadata alike. Returns ``plan``
    itself when nothing changed.

    Examples
    --------
    >>> import polars as pl
    >>> from cognoxium.engine.plan import Scan, Source, format_plan
    >>> scan = Scan(source=Source(pl.DataFrame({"a": [1, 2, 3]})))
    >>> inner = Filter(input=scan, predicate=Expression.of(pl.col("a") > 1))
    >>> plan = Filter(input=inner, predicate=Expression.of(pl.col("a") < 3))
    >>> print(format_plan(fuse_filters(plan)))
    Filter [([(col("a")) > (dyn int: 1)]) & ([(col("a")) < (dyn int: 3)])]
      Scan 3 rows; 1 columns
    """
    return rewrite(plan, _fuse)
