"""Rule: a limit without offset over a sort becomes a top-k.

Lowered as a stable sort and a head, which Polars runs as a partial sort that
keeps only ``k`` rows.

Examples
--------
>>> from dataclasses import replace
>>> import polars as pl
>>> from cognoxium import CognitionFrame, OptFlags
>>> cf = CognitionFrame([{"id": i, "role": r, "text": i, "priority": p}
...                      for i, r, p in [("a", "user", 1), ("b", "document", 2), ("c", "user", 0)]])
>>> q = cf.sort("priority", descending=True).limit(2)
>>> print(q.explain(optimized=False))
Limit 2
  Sort by col("priority") desc
    Scan 3 rows; 23 columns
>>> print(q.explain(optimizations=replace(OptFlags.none(), sort_limit_to_topk=True)))
TopK 2 by col("priority") desc
  Scan 3 rows; 23 columns
>>> q.collect().equals(q.collect(OptFlags.none()))
True
"""

from __future__ import annotations

from cognoxium.engine.plan import Limit, Node, Sort, TopK, rewrite

__all__ = ["sort_limit_to_topk"]


def _to_topk(node: Node) -> Node:
    if not isinstance(node, Limit) or not isinstance(node.input, Sort):
        return node
    if node.n is None or node.offset != 0:  # a tail or a slice keeps no prefix
        return node
    sort = node.input
    return TopK(
        input=sort.input,
        by=sort.by,
        descending=sort.descending,
        nulls_last=sort.nulls_last,
        k=node.n,
    )


def sort_limit_to_topk(plan: Node) -> Node:
    """Replace ``Limit(Sort(x, keys), n, offset=0)`` with ``TopK(x, keys, k=n)``.

    TopK keeps the sort's stability, so the rows and their order are the
    same. A limit with an offset (a slice, a tail) or without a length stays
    as it is. Returns ``plan`` itself when nothing changed.

    Examples
    --------
    >>> import polars as pl
    >>> from cognoxium.engine.plan import Expression, Scan, Source, format_plan
    >>> scan = Scan(source=Source(pl.DataFrame({"a": [1, 2, 3]})))
    >>> sort = Sort(input=scan, by=(Expression.of("a"),), descending=(True,), nulls_last=(False,))
    >>> print(format_plan(sort_limit_to_topk(Limit(input=sort, n=2))))
    TopK 2 by col("a") desc
      Scan 3 rows; 1 columns
    """
    return rewrite(plan, _to_topk)
