"""Rule: fuse adjacent filters into one filter whose predicate is their ``&``.

Two filters in a row become one, whose ``&``-conjuncts
:func:`~cognoxium.engine.optimizer.pushdown_predicates.pushdown_predicates`
then moves one by one.

Examples
--------
>>> from dataclasses import replace
>>> import polars as pl
>>> from cognoxium import CognitionFrame, OptFlags
>>> cf = CognitionFrame([{"id": i, "role": r, "text": i, "priority": p}
...                      for i, r, p in [("a", "user", 1), ("b", "document", 2), ("c", "user", 0)]])
>>> q = cf.filter(pl.col("priority") > 0).filter(pl.col("role") == "user")
>>> print(q.explain(optimized=False))
Filter [(col("role")) == ("user")]
  Filter [(col("priority")) > (dyn int: 0)]
    Scan 3 rows; 23 columns
>>> print(q.explain(optimizations=replace(OptFlags.none(), fuse_filters=True)))
Filter [([(col("priority")) > (dyn int: 0)]) & ([(col("role")) == ("user")])]
  Scan 3 rows; 23 columns
>>> q.collect().equals(q.collect(OptFlags.none()))
True
"""

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
