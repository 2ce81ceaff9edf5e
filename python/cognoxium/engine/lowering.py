"""Lowering: a logical plan to a Polars LazyFrame.

One handler per node type, registered in :data:`HANDLERS`; a handler turns one
node, given its children already lowered, into a LazyFrame. Lowering never
optimizes: it runs the plan as given (Polars' own optimizer still runs on the
result). Scorers run batched over whole columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import polars as pl

from cognoxium._columns import (
    MERGE_CONFLICTS,
    MERGE_DROPPED,
    MERGE_RULES,
    MERGED_IDS,
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
from cognoxium.items.model import canonical_json
from cognoxium.items.schema import POLARS_SCHEMA, mapped_expr, packed_text_expr

__all__ = ["HANDLERS", "Handler", "lower", "lower_node", "register"]

Handler = Callable[..., pl.LazyFrame]
"""``handler(node, *inputs) -> LazyFrame``, one input per child of ``node``."""

HANDLERS: dict[type[Node], Handler] = {}
"""The lowering handler of each node type."""

_N = TypeVar("_N", bound=Handler)

_METADATA_TEXT = "__cognoxium_metadata_text"


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
    return lower_node(plan, [lower(child) for child in plan.children])


@register(Scan)
def _scan(node: Scan) -> pl.LazyFrame:
    lf = node.source.lazy()
    return lf if node.columns is None else lf.select(node.columns)


@register(Filter)
def _filter(node: Filter, lf: pl.LazyFrame) -> pl.LazyFrame:
    if node.metadata_dtype is None:
        return lf.filter(node.predicate.expr)
    # metadata.<key> in SQL is struct field access: run the predicate over the
    # decoded struct, then restore the JSON text in its place.
    decoded = lf.rename({"metadata": _METADATA_TEXT}).with_columns(
        pl.col(_METADATA_TEXT).str.json_decode(node.metadata_dtype).alias("metadata")
    )
    return decoded.filter(node.predicate.expr).drop("metadata").rename({_METADATA_TEXT: "metadata"})


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


def _best_first(schema: pl.Schema) -> dict[str, Any]:
    """Sort arguments putting a group's representative first: best rank, then smallest id."""
    by = [c for c in ("rank", "id") if c in schema]
    return {"by": by, "descending": [c == "rank" for c in by], "nulls_last": True}


_EDGE = "__cognoxium_edge"


def _merge_agg(name: str, dtype: pl.DataType, edges: bool) -> pl.Expr:
    """How Dedupe(merge=True) combines one column over a group of duplicates.

    The group's rows come best first (see :func:`_best_first`).
    """
    col = pl.col(name)
    canonical = POLARS_SCHEMA.get(name)
    if canonical is None or dtype != canonical or name not in MERGE_RULES:
        return col.first()
    if name in ("trust", "sensitivity", "priority", "valid_from", "rank"):
        return col.max()  # untrusted > trusted; restricted is the highest sensitivity
    if name in ("retention", "expires_at"):
        return col.min()  # required is the strongest retention
    union = col.list.explode(keep_nulls=False, empty_as_null=False)
    if name == "lineage" and edges:  # the folded copies become merge edges
        union = union.append(pl.col(_EDGE).slice(1)).drop_nulls()
    union = union.unique()
    if name == "lineage":
        fields = [union.struct.field(f) for f in ("parent_id", "parent_hash", "operation")]
        union = union.sort_by(*fields, union.struct.field("detail"), nulls_last=True)
    elif name == "sources":
        union = union.sort_by(
            union.struct.field("uri"),
            union.struct.field("kind"),
            union.struct.field("title"),
            nulls_last=True,
        )
    else:
        union = union.sort()
    # A row without duplicates keeps its own list, in its own order.
    return pl.when(pl.len() > 1).then(union.implode()).otherwise(col.first())


def _metadata_conflicts(members: pl.Series) -> pl.Series:
    """Canonical JSON {key: {id: value}} of the metadata keys on which duplicates differ."""
    out: list[str | None] = [None] * len(members)
    differs = members.struct.field("metadata").list.n_unique() > 1
    for index in differs.arg_true().to_list():
        row = members[index]
        parsed = {i: json.loads(m) for i, m in zip(row["ids"], row["metadata"], strict=True)}
        keys = sorted({k for meta in parsed.values() for k in meta})
        conflicts = {
            key: {i: meta.get(key) for i, meta in parsed.items()}
            for key in keys
            if len({canonical_json(meta.get(key)) for meta in parsed.values()}) > 1
            or any(key not in meta for meta in parsed.values())
        }
        out[index] = canonical_json(conflicts)
    return pl.Series(out, dtype=pl.String)


_DEDUPE_KEY = "__cognoxium_dedupe_key"


def _normalized_text(steps: tuple[str, ...]) -> pl.Expr:
    """The packed text after the ``normalize`` steps of a dedupe."""
    text = packed_text_expr()
    if "nfc" in steps:
        text = text.str.normalize("NFC")
    if "case" in steps:
        text = text.str.to_lowercase()
    if "whitespace" in steps:
        text = text.str.replace_all(r"\s+", " ").str.strip_chars()
    return text


_CALL_KEY = "__cognoxium_call"
_ASIDE = "__cognoxium_aside"
_TIMES = ("created_at", "valid_from", "expires_at")


def _with_partition(lf: pl.LazyFrame) -> tuple[pl.LazyFrame, list[str]]:
    """Add the columns copies must share to be merged; return ``lf`` and their names.

    ``group_id`` (a null group is one value: ungrouped items merge with each
    other, never with grouped ones) and the tool call a result answers
    (``metadata.tool_call_id``, null for other items), so two results of
    different calls are never folded into one.
    """
    schema = lf.collect_schema()
    keys = ["group_id"] if "group_id" in schema else []
    if schema.get("metadata") == pl.String():
        call = pl.col("metadata").str.json_path_match("$.tool_call_id")
        lf = lf.with_columns(call.alias(_CALL_KEY))
        keys.append(_CALL_KEY)
    return lf, keys


def _near_duplicate_key(lf: pl.LazyFrame, node: Dedupe, partition: list[str]) -> pl.LazyFrame:
    """Add the near-duplicate group of every row (its component's first row) as the key.

    Items are linked only within one payload kind and one ``partition``
    value (see :func:`_with_partition`).
    """
    from cognoxium.retrieval.near_duplicates import near_duplicate_labels

    threshold = float(node.threshold or 1.0)

    def key(df: pl.DataFrame) -> pl.DataFrame:
        texts = df.select(_normalized_text(node.normalize)).to_series()
        parts = [pl.col("payload_kind").cast(pl.String), *map(pl.col, partition)]
        groups = df.select(pl.struct(parts).struct.json_encode()).to_series()
        labels = near_duplicate_labels(texts, threshold, groups=groups)
        return df.with_columns(pl.Series(_DEDUPE_KEY, labels, dtype=pl.Int64))

    schema = pl.Schema(lf.collect_schema())
    schema[_DEDUPE_KEY] = pl.Int64()
    # Links depend on every row reaching the node: nothing may pass it.
    return lf.map_batches(
        key,
        schema=schema,
        predicate_pushdown=False,
        projection_pushdown=False,
        slice_pushdown=False,
        streamable=False,
    )


@register(Dedupe)
def _dedupe(node: Dedupe, lf: pl.LazyFrame) -> pl.LazyFrame:
    lf, partition = _with_partition(lf)
    temporary = [_CALL_KEY] if _CALL_KEY in partition else []
    if node.threshold is not None:
        lf = _near_duplicate_key(lf, node, partition)
        by = [_DEDUPE_KEY]
        temporary.append(_DEDUPE_KEY)
    elif node.normalize:
        # The payload kind and normalised text stand in for the key columns.
        kind = pl.col("payload_kind").cast(pl.String)
        text = _normalized_text(node.normalize)
        lf = lf.with_columns(pl.concat_str([kind, text], separator="\x00").alias(_DEDUPE_KEY))
        by = [_DEDUPE_KEY, *partition]
        temporary.append(_DEDUPE_KEY)
    else:
        by = [*node.by, *(k for k in partition if k not in node.by)]
    return _dedupe_by(lf, by, node.merge, node.as_of).drop(temporary)


def _copy_state(as_of: datetime) -> pl.Expr:
    """``"expired"`` or ``"not_yet_valid"`` at ``as_of`` (pack's rule and order), else null."""
    expired = (pl.col("expires_at") <= as_of).fill_null(False)
    early = ((pl.col("valid_from") > as_of) | (pl.col("created_at") > as_of)).fill_null(False)
    return pl.when(expired).then(pl.lit("expired")).when(early).then(pl.lit("not_yet_valid"))


def _set_aside(lf: pl.LazyFrame, by: list[str], as_of: datetime, record: bool) -> pl.LazyFrame:
    """Drop the copies not valid at ``as_of`` that have a valid copy; record them if ``record``.

    A group whose copies are all invalid at ``as_of`` keeps them all (the
    merged item is then excluded by pack, with its reason). With ``record``,
    every remaining row gets ``_ASIDE``: its group's dropped copies as
    ``{id, reason}`` structs.
    """
    state = _copy_state(as_of)
    aside = state.is_not_null() & state.is_null().any().over(by)
    if not record:
        return lf.filter(~aside)
    # Only the groups with dropped copies get a record: a join, not a window over every group.
    dropped = (
        lf.filter(aside).group_by(by).agg(pl.struct(id=pl.col("id"), reason=state).alias(_ASIDE))
    )
    return lf.filter(~aside).join(
        dropped, on=by, how="left", nulls_equal=True, maintain_order="left"
    )


def _with_drop_record(lf: pl.LazyFrame, judged: bool) -> tuple[pl.LazyFrame, bool]:
    """Give every row ``MERGE_DROPPED``: an earlier dedupe's record and this one's (``_ASIDE``).

    Returns the frame and whether it has the column (only when a dedupe
    judged expiry, now or before).
    """
    schema = lf.collect_schema()
    drops = [pl.col(MERGE_DROPPED)] if MERGE_DROPPED in schema else []
    drops += [pl.col(_ASIDE)] if judged else []
    if not drops:
        return lf, False
    empty = pl.lit([], dtype=_DROPPED_DTYPE)
    record = pl.concat_list([d.fill_null(empty) for d in drops]).list.eval(
        _sorted_drops(pl.element())
    )
    lf = lf.with_columns(record.alias(MERGE_DROPPED))
    return (lf.drop(_ASIDE) if judged else lf), True


_ROW = "__cognoxium_row"
_DROPPED_DTYPE = pl.List(pl.Struct({"id": pl.String(), "reason": pl.String()}))


def _sorted_drops(union: pl.Expr) -> pl.Expr:
    union = union.unique()
    return union.sort_by(union.struct.field("id"))


def _dedupe_by(
    lf: pl.LazyFrame, by: list[str], merge: bool, as_of: datetime | None = None
) -> pl.LazyFrame:
    schema = lf.collect_schema()
    judged = as_of is not None and all(c in schema for c in _TIMES)
    if as_of is not None and judged:
        lf = _set_aside(lf, by, as_of, record=merge and "id" in schema)
    if not merge:
        return lf.unique(subset=by, keep="first", maintain_order=True)
    lf, drops = _with_drop_record(lf, judged)
    schema = lf.collect_schema()
    earlier = MERGED_IDS in schema  # a second dedupe keeps what the first one merged
    edges = "lineage" in schema and "content_hash" in schema
    records_of = (MERGED_IDS, MERGE_CONFLICTS, MERGE_DROPPED)
    kept = [n for n in schema.names() if n not in records_of]
    out = [*kept, MERGED_IDS, MERGE_CONFLICTS, *([MERGE_DROPPED] if drops else []), _ROW]
    lf = lf.with_row_index(_ROW)
    size = pl.len().over(by)

    # A row without duplicates is its own merge: it keeps every value.
    previous_ids = (
        pl.col(MERGED_IDS).list.unique().list.sort()
        if earlier
        else pl.lit([], dtype=pl.List(pl.String))
    )
    previous_conflicts = (
        pl.col(MERGE_CONFLICTS) if MERGE_CONFLICTS in schema else pl.lit(None, dtype=pl.String)
    )
    own = [previous_ids.alias(MERGED_IDS), previous_conflicts.alias(MERGE_CONFLICTS)]
    single = lf.filter(size == 1).with_columns(own)

    # Groups of duplicates, each group's rows best first.
    grouped = lf.filter(size > 1).sort(**_best_first(schema), maintain_order=True)
    aggs = [
        _merge_agg(name, dtype, edges)
        for name, dtype in schema.items()
        if name not in by and name not in (MERGED_IDS, MERGE_DROPPED)
    ]
    if drops:
        union = pl.col(MERGE_DROPPED).list.explode(keep_nulls=False, empty_as_null=False)
        aggs.append(_sorted_drops(union).implode().alias(MERGE_DROPPED))
    others = pl.col("id").slice(1)
    if earlier:
        others = others.append(pl.col(MERGED_IDS).explode(empty_as_null=False)).drop_nulls()
    records = [others.unique().sort().alias(MERGED_IDS), pl.col(_ROW).min()]
    if "metadata" in schema:
        records += [
            pl.col("metadata").sort_by("id").alias("__metadata"),
            pl.col("id").sort().alias("__ids"),
        ]
        conflicts = (
            pl.struct(pl.col("__ids").alias("ids"), pl.col("__metadata").alias("metadata"))
            .map_batches(_metadata_conflicts, return_dtype=pl.String)
            .alias(MERGE_CONFLICTS)
        )
    else:
        conflicts = pl.lit(None, dtype=pl.String).alias(MERGE_CONFLICTS)
    if MERGE_CONFLICTS in schema:
        conflicts = pl.coalesce(conflicts, pl.col(MERGE_CONFLICTS))
    if edges:
        grouped = grouped.with_columns(
            pl.struct(
                pl.col("id").alias("parent_id"),
                pl.col("content_hash").alias("parent_hash"),
                pl.lit("merge").alias("operation"),
                pl.lit(None, pl.String).alias("detail"),
            ).alias(_EDGE)
        )
    merged = grouped.group_by(by).agg(aggs + records).with_columns(conflicts)
    # Each group at its first occurrence's position.
    return pl.concat([single.select(out), merged.select(out)]).sort(_ROW).drop(_ROW)


_MATCH = "__cognoxium_match"


def _with_match(
    lf: pl.LazyFrame, predicate: Expression, metadata_dtype: pl.DataType | None
) -> pl.LazyFrame:
    """Add the boolean column ``_MATCH``: ``predicate``, with null as false."""
    match = predicate.expr.fill_null(False).alias(_MATCH)
    if metadata_dtype is None:
        return lf.with_columns(match)
    decoded = lf.rename({"metadata": _METADATA_TEXT}).with_columns(
        pl.col(_METADATA_TEXT).str.json_decode(metadata_dtype).alias("metadata")
    )
    return decoded.with_columns(match).drop("metadata").rename({_METADATA_TEXT: "metadata"})


@register(Quarantine)
def _quarantine(node: Quarantine, lf: pl.LazyFrame) -> pl.LazyFrame:
    schema = lf.collect_schema()
    earlier = (
        pl.col(QUARANTINE_COLUMN) if QUARANTINE_COLUMN in schema else pl.lit(None, dtype=pl.String)
    )
    if node.predicate is None:
        from cognoxium.governance.injection import detect_injection

        signs = packed_text_expr().map_batches(
            detect_injection, return_dtype=pl.String, is_elementwise=True
        )
        reason = pl.when(pl.col("trust").cast(pl.String) == "untrusted").then(
            pl.concat_str([pl.lit(f"{node.reason}: "), signs])
        )
        return lf.with_columns(pl.coalesce(earlier, reason).alias(QUARANTINE_COLUMN))
    matched = _with_match(lf, node.predicate, node.metadata_dtype)
    reason = pl.when(pl.col(_MATCH)).then(pl.lit(node.reason))
    return matched.with_columns(pl.coalesce(earlier, reason).alias(QUARANTINE_COLUMN)).drop(_MATCH)


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
    return _with_match(lf, node.predicate, node.metadata_dtype).with_columns(changes).drop(_MATCH)


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

    return lf.map_batches(
        run,
        schema=out_schema,
        predicate_pushdown=False,
        projection_pushdown=False,
        slice_pushdown=False,
        streamable=False,
    )
