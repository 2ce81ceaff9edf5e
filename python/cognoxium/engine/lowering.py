"""Lowering: a logical plan to a Polars LazyFrame.

One handler per node type, registered in :data:`HANDLERS`; a handler turns one
node, given its children already lowered, into a LazyFrame. Lowering never
optimizes: it runs the plan as given (Polars' own optimizer still runs on the
result). Scorers run batched over whole columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import polars as pl

from cognoxium._columns import (
    QUARANTINE_COLUMN,
    REDACTED_FROM,
    REDACTIONS,
    UNREDACTED,
)
from cognoxium.engine.plan import (
    Dedupe,
    Demote,
    Expression,
    Filter,
    Join,
    Limit,
    Node,
    Quarantine,
    Redact,
    Scan,
    Select,
    Sort,
    TopK,
    WithColumns,
)
from cognoxium.exceptions import PlanError
from cognoxium.items.schema import mapped_expr, packed_text_expr

__all__ = ["HANDLERS", "Handler", "lower", "lower_node", "register"]

Handler = Callable[..., pl.LazyFrame]
"""``handler(node, *inputs) -> LazyFrame``, one input per child of ``node``."""

HANDLERS: dict[type[Node], Handler] = {}
"""The lowering handler of each node type."""

_N = TypeVar("_N", bound=Handler)


def register(node_type: type[Node]) -> Callable[[_N], _N]:
    """Register the decorated function as the handler of ``node_type``."""

    def decorate(handler: _N) -> _N:
        HANDLERS[node_type] = handler
        return handler

    return decorate


def lower_node(node: Node, inputs: Sequence[pl.LazyFrame]) -> pl.LazyFrame:
    """Lower one node over its already-lowered children.

    Raises
    ------
    PlanError
        If no handler is registered for the node's type.
    """
    handler = HANDLERS.get(type(node))
    if handler is None:
        raise PlanError(
            f"no lowering for plan node {type(node).__name__}; register a handler "
            "in cognoxium.engine.lowering"
        )
    return handler(node, *inputs)


def lower(plan: Node) -> pl.LazyFrame:
    """Lower a whole plan to a Polars LazyFrame, as given (no optimization).

    Raises
    ------
    PlanError
        If the plan holds a node type with no handler.
    """
    if isinstance(plan, Limit):
        plan = _one_window(plan)
    return lower_node(plan, [lower(child) for child in plan.children])


def _one_window(node: Limit) -> Limit:
    """``node`` over the Limits right under it (offsets from the start) as one Limit.

    The rows ``[o2, o2 + n2)`` of the rows ``[o1, o1 + n1)`` are the rows
    ``[o1 + o2, o1 + o2 + min(n2, n1 - o2))``. Lowered as one slice, not
    slices stacked: Polars 2.1's streaming engine panics when two stacked
    slices leave no row and a sort with a limit follows (``slice(2,
    6).slice(7).sort(...).head(6)``), where one ``slice(9, 0)`` runs.
    """
    while isinstance(node.input, Limit) and node.offset >= 0 and node.input.offset >= 0:
        inner = node.input
        room = None if inner.n is None else max(inner.n - node.offset, 0)
        n = node.n if room is None else room if node.n is None else min(room, node.n)
        node = Limit(input=inner.input, n=n, offset=inner.offset + node.offset)
    return node


@register(Scan)
def _scan(node: Scan) -> pl.LazyFrame:
    lf = node.source.lazy()
    return lf if node.columns is None else lf.select(node.columns)


@register(Filter)
def _filter(node: Filter, lf: pl.LazyFrame) -> pl.LazyFrame:
    # A SQL predicate reading metadata.<key> decodes the key from the JSON text
    # itself, so the filter reads stored columns only and Polars can push it
    # into a scan.
    return lf.filter(node.predicate.expr)


@register(Select)
def _select(node: Select, lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.select([e.expr for e in node.exprs])


@register(WithColumns)
def _with_columns(node: WithColumns, lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.with_columns([e.expr for e in node.exprs])


@register(Join)
def _join(node: Join, left: pl.LazyFrame, right: pl.LazyFrame) -> pl.LazyFrame:
    how: Any = node.how
    order: Any = "left" if node.how in ("semi", "anti") else "left_right"
    return left.join(right, on=list(node.on), how=how, suffix="_right", maintain_order=order)


@register(Sort)
def _sort(node: Sort | TopK, lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.sort(
        [e.expr for e in node.by],
        descending=list(node.descending),
        nulls_last=list(node.nulls_last),
        maintain_order=True,
    )


@register(Limit)
def _limit(node: Limit, lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.slice(node.offset, node.n)


@register(TopK)
def _top_k(node: TopK, lf: pl.LazyFrame) -> pl.LazyFrame:
    # Polars runs a stable sort followed by a slice as a partial (top-k) sort.
    return _sort(node, lf).head(node.k)


@register(Dedupe)
def _dedupe(node: Dedupe, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.governance.dedupe import dedupe_frame

    return dedupe_frame(
        lf,
        node.by,
        merge=node.merge,
        normalize=node.normalize,
        threshold=node.threshold,
        as_of=node.as_of,
    )


_MATCH = "__cognoxium_match"


def _with_match(lf: pl.LazyFrame, predicate: Expression) -> pl.LazyFrame:
    """Add the boolean column ``_MATCH``: ``predicate``, with null as false."""
    return lf.with_columns(predicate.expr.fill_null(False).alias(_MATCH))


@register(Quarantine)
def _quarantine(node: Quarantine, lf: pl.LazyFrame) -> pl.LazyFrame:
    schema = lf.collect_schema()
    earlier = (
        pl.col(QUARANTINE_COLUMN) if QUARANTINE_COLUMN in schema else pl.lit(None, dtype=pl.String)
    )
    if node.predicate is None:
        from cognoxium.governance.injection import detect_injection

        signs = _own_calls_kept(
            packed_text_expr().map_batches(
                detect_injection, return_dtype=pl.String, is_elementwise=True
            )
        )
        reason = pl.when(pl.col("trust").cast(pl.String) == "untrusted").then(
            pl.concat_str([pl.lit(f"{node.reason}: "), signs])
        )
        return lf.with_columns(pl.coalesce(earlier, reason).alias(QUARANTINE_COLUMN))
    matched = _with_match(lf, node.predicate)
    reason = pl.when(pl.col(_MATCH)).then(pl.lit(node.reason))
    return matched.with_columns(pl.coalesce(earlier, reason).alias(QUARANTINE_COLUMN)).drop(_MATCH)


def _own_calls_kept(signs: pl.Expr) -> pl.Expr:
    """``signs`` without ``tool_call_json`` for an assistant message's own tool calls.

    A chat's assistant message that calls tools holds them as its JSON
    payload (``{"tool_calls": [...]}``): they are the message, not JSON
    shaped like a tool call inside a text. Its other signs stand.
    """
    own = (pl.col("role").cast(pl.String) == "assistant") & (
        pl.col("payload_kind").cast(pl.String) == "json"
    )
    kept = (
        signs.str.split(",")
        .list.eval(pl.element().filter(pl.element() != "tool_call_json"))
        .list.join(",")
    )
    return pl.when(own).then(pl.when(kept != "").then(kept)).otherwise(signs)


_RETENTION_CODES = {"required": 0, "preferred": 1, "optional": 2}


@register(Demote)
def _demote(node: Demote, lf: pl.LazyFrame) -> pl.LazyFrame:
    match = pl.col(_MATCH)
    changes = []
    if node.retention is not None:
        dtype = lf.collect_schema()["retention"]
        code = mapped_expr("retention", dtype, _RETENTION_CODES, pl.Int8)
        stronger = code < _RETENTION_CODES[node.retention]
        changes.append(
            pl.when(match & stronger)
            .then(pl.lit(node.retention).cast(dtype))
            .otherwise(pl.col("retention"))
            .alias("retention")
        )
    if node.priority_delta:
        changes.append(
            pl.when(match)
            .then(pl.col("priority") + node.priority_delta)
            .otherwise(pl.col("priority"))
            .alias("priority")
        )
    return _with_match(lf, node.predicate).with_columns(changes).drop(_MATCH)


def _with_redact_edges(out: pl.DataFrame, before: pl.Series) -> pl.DataFrame:
    """``out`` with a lineage edge ``redact`` on each row whose hash is no longer ``before``'s.

    The edge's parent is the row's id and hash before, its detail the
    row's ``redactions``. A frame without ``lineage`` is returned as it is.
    """
    if "lineage" not in out.columns:
        return out
    # The edge is built on the changed rows only, then put in place by position.
    rows = (out.get_column("content_hash") != before).fill_null(False).arg_true()
    if rows.len() == 0:
        return out
    edge = pl.struct(
        pl.col("id").alias("parent_id"),
        pl.col("parent_hash"),
        pl.lit("redact").alias("operation"),
        pl.col(REDACTIONS).alias("detail"),
    )
    grown = (
        out.select(pl.col("id", "lineage", REDACTIONS).gather(rows))
        .with_columns(before.gather(rows).alias("parent_hash"))
        .select(pl.col("lineage").list.concat(pl.concat_list(edge)))
        .to_series()
    )
    at = pl.Series([None] * out.height, dtype=pl.UInt32).scatter(
        rows, pl.int_range(rows.len(), dtype=pl.UInt32, eager=True)
    )
    return out.with_columns(
        pl.when(at.is_not_null())
        .then(grown.gather(at))
        .otherwise(pl.col("lineage"))
        .alias("lineage")
    )


@register(Redact)
def _redact(node: Redact, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.governance.redaction import redact_frame

    schema = lf.collect_schema()
    out_schema = pl.Schema(schema)
    out_schema[REDACTIONS] = pl.String()
    out_schema[REDACTED_FROM] = pl.String()
    out_schema[UNREDACTED] = pl.String()

    def run(df: pl.DataFrame) -> pl.DataFrame:
        before = df.get_column("content_hash")
        out = redact_frame(
            df,
            style=node.style,  # type: ignore[arg-type]
            key=node.key,
            types=node.types,
            recognisers=node.recognisers,
            keys=node.keys,
            metadata=node.metadata,
            sources=node.sources,
        )
        return _with_redact_edges(out, before)

    return lf.map_batches(
        run,
        schema=out_schema,
        predicate_pushdown=False,
        projection_pushdown=False,
        slice_pushdown=False,
        streamable=False,
    )
