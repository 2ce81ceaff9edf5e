"""Rule: move filters towards the scan, where they cut the most work.

A filter below a sort leaves fewer rows to sort, and the same rows in the
same order come out.

Examples
--------
>>> from dataclasses import replace
>>> import polars as pl
>>> from cognoxium import CognitionFrame, OptFlags
>>> cf = CognitionFrame([{"id": i, "role": r, "text": i, "priority": p}
...                      for i, r, p in [("a", "user", 1), ("b", "document", 2), ("c", "user", 0)]])
>>> q = cf.sort("priority", descending=True).filter(pl.col("role") == "user")
>>> print(q.explain(optimized=False))
Filter [(col("role")) == ("user")]
  Sort by col("priority") desc
    Scan 3 rows; 23 columns
>>> print(q.explain(optimizations=replace(OptFlags.none(), pushdown_predicates=True)))
Sort by col("priority") desc
  Filter [(col("role")) == ("user")]
    Scan 3 rows; 23 columns
>>> q.collect().equals(q.collect(OptFlags.none()))
True
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from cognoxium.engine.plan import Expression, Filter, Join, Node, Select, Sort, WithColumns, rewrite

__all__ = ["pushdown_predicates"]


def _output_name(expr: Expression) -> str | None:
    if not expr.exact_columns:
        return None
    try:
        return expr.expr.meta.output_name()
    except pl.exceptions.PolarsError:
        return None


def _untouched(node: Select | WithColumns, columns: Sequence[str]) -> bool:
    """Whether every one of ``columns`` leaves ``node`` exactly as it entered."""
    if not columns:
        return False
    if isinstance(node, Select):
        return all(any(e.is_column(c) for e in node.exprs) for c in columns)
    outputs = [_output_name(e) for e in node.exprs]
    return all(out is not None and out not in columns for out in outputs)


def _filter(input: Node, parts: Sequence[Expression], like: Filter) -> Filter:
    """A filter of the ``&`` of ``parts``, decoding metadata only if they read it."""
    predicate = Expression.all_of(parts)
    decode = like.metadata_dtype if "metadata" in predicate.columns else None
    return Filter(input=input, predicate=predicate, metadata_dtype=decode)


def _through_projection(node: Filter, child: Select | WithColumns) -> Node:
    # Row-by-row projections keep every row where it is, so a filter sees the
    # same rows below them if the columns it reads pass through unchanged.
    if not all(e.elementwise for e in child.exprs):
        return node
    if not node.predicate.elementwise:
        if _untouched(child, node.predicate.columns):
            return child.with_children([node.with_children([child.input])])
        return node
    parts = node.predicate.conjuncts()
    moves = [_untouched(child, p.columns) for p in parts]
    if not any(moves):
        return node
    if all(moves):
        return child.with_children([node.with_children([child.input])])
    below = _filter(child.input, [p for p, m in zip(parts, moves, strict=True) if m], node)
    rest = [p for p, m in zip(parts, moves, strict=True) if not m]
    return _filter(child.with_children([below]), rest, node)


def _into_join(node: Filter, child: Join) -> Node:
    # An elementwise conjunct reading only one side's columns keeps or drops
    # a joined row exactly when it keeps or drops that side's row.
    if child.how != "inner" or not node.predicate.elementwise:
        return node
    left, right = child.input.schema, child.other.schema
    to_left: list[Expression] = []
    to_right: list[Expression] = []
    rest: list[Expression] = []
    for part in node.predicate.conjuncts():
        if part.columns and all(c in left for c in part.columns):
            to_left.append(part)
        elif part.columns and all(c in right and c not in left for c in part.columns):
            to_right.append(part)
        else:
            rest.append(part)
    if not to_left and not to_right:
        return node
    joined = child.with_children(
        [
            _filter(child.input, to_left, node) if to_left else child.input,
            _filter(child.other, to_right, node) if to_right else child.other,
        ]
    )
    return _filter(joined, rest, node) if rest else joined


def _push(node: Node) -> Node:
    if not isinstance(node, Filter):
        return node
    child, pred = node.input, node.predicate
    if child.barrier or not pred.columns:
        return node
    if isinstance(child, Sort):
        # A stable sort keeps the order of the rows a filter lets through,
        # provided neither predicate nor keys look beyond their own row.
        if pred.elementwise and all(key.elementwise for key in child.by):
            return child.with_children([node.with_children([child.input])])
        return node
    if isinstance(child, Select | WithColumns):
        return _through_projection(node, child)
    if isinstance(child, Join):
        return _into_join(node, child)
    # Never across Limit, TopK, Dedupe, Rank, another Filter or a barrier:
    # each of them depends on which rows reach it.
    return node


def pushdown_predicates(plan: Node) -> Node:
    """Move each filter, or each ``&``-conjunct of it, below the nodes it commutes with.

    A filter moves below a stable :class:`Sort`; below a :class:`Select` or
    :class:`WithColumns` whose expressions are all elementwise, for the
    conjuncts whose columns pass through untouched; and into the side of an
    inner :class:`Join` whose columns a conjunct alone reads. Only
    elementwise predicates are split or moved across a sort or join. A filter
    never crosses a limit, top-k, dedupe, rank (BM25's IDF depends on the
    rows it sees) or barrier. Returns ``plan`` itself when nothing changed.

    Examples
    --------
    >>> from cognoxium.engine.plan import Scan, Source, format_plan
    >>> scan = Scan(source=Source(pl.DataFrame({"a": [3, 1, 2]})))
    >>> sort = Sort(input=scan, by=(Expression.of("a"),), descending=(False,),
    ...             nulls_last=(False,))
    >>> print(format_plan(pushdown_predicates(
    ...     Filter(input=sort, predicate=Expression.of(pl.col("a") > 1)))))
    Sort by col("a") asc
      Filter [(col("a")) > (dyn int: 1)]
        Scan 3 rows; 1 columns
    """
    return rewrite(plan, _push)
