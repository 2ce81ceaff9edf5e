"""Lowering: a logical plan to a Polars LazyFrame.

One handler per node type, registered in :data:`HANDLERS`; a handler turns one
node, given its children already lowered, into a LazyFrame. Lowering never
optimizes: it runs the plan as given (Polars' own optimizer still runs on the
result). Scorers run batched over whole columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt
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
    Rank,
    RankBM25,
    RankEmbedding,
    RankHybrid,
    RankHybridLineage,
    RankLearned,
    RankPriority,
    RankRecency,
    RankStrategies,
    Redact,
    Scan,
    Select,
    Sort,
    Source,
    TopK,
    WithColumns,
)
from cognoxium.exceptions import PlanError
from cognoxium.items.schema import mapped_expr, packed_text_expr

if TYPE_CHECKING:
    from cognoxium.retrieval.scope import RetrievalSettings

__all__ = ["HANDLERS", "lower", "lower_node", "rank_batches", "register"]

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
    if handler is None and isinstance(node, RankStrategies):
        handler = _strategies_handler()
    if handler is None:
        raise PlanError(
            f"no lowering for plan node {type(node).__name__}; register a handler "
            "in cognoxium.engine.lowering"
        )
    return handler(node, *inputs)


def _strategies_handler() -> Handler:
    """The handler of ``rank("strategies")``, registered by the strategies layer on import.

    The strategy registry and its backends (BM25, embeddings, graph, temporal
    tiers) load only for a plan that ranks by them.
    """
    import cognoxium.strategies.ranking  # noqa: F401  (registers the handler)

    return HANDLERS[RankStrategies]


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


def _with_rank(schema: pl.Schema) -> pl.Schema:
    out = pl.Schema(schema)
    out["rank"] = pl.Float64()
    return out


def rank_batches(
    lf: pl.LazyFrame, scores: Callable[[pl.DataFrame], npt.NDArray[np.float64]]
) -> pl.LazyFrame:
    """Write ``scores(rows)`` as the ``rank`` column, computed over all rows in one call.

    BM25's IDF and fused ranks depend on every row reaching the rank, so no
    filter, projection or slice may pass it (embedding scores alone are per
    row, but share this one batched call).

    Parameters
    ----------
    lf
        The rows to rank.
    scores
        Maps the collected rows to ``(n,)`` scores, higher is better.

    Returns
    -------
    polars.LazyFrame
        ``lf`` with the float64 ``rank`` column.
    """

    def score(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.Series("rank", scores(df), dtype=pl.Float64))

    return lf.map_batches(
        score,
        schema=_with_rank(lf.collect_schema()),
        predicate_pushdown=False,
        projection_pushdown=False,
        slice_pushdown=False,
        streamable=False,
    )


@register(RankPriority)
def _rank_priority(node: RankPriority, lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.with_columns(pl.col("priority").cast(pl.Float64).alias("rank"))


@register(RankRecency)
def _rank_recency(node: RankRecency, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.ranking import recency_expr

    return lf.with_columns(recency_expr(half_life=node.half_life, reference=node.reference))


_BM25_CORPUS = "bm25_corpus"
"""Key of a table's BM25 corpus (packed texts and index cache key) in its source's cache."""


def _table_cache(node: Rank) -> dict[str, Any] | None:
    """The cache of the in-memory table a rank scores as stored, else None.

    A rank directly over a whole :class:`Source` scores the table's rows,
    which never change, so what they alone decide may be kept with the table.
    """
    scan = node.input
    if isinstance(scan, Scan) and isinstance(scan.source, Source) and scan.columns is None:
        return scan.source.cache
    return None


@register(RankBM25)
def _rank_bm25(node: RankBM25, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.ranking import bm25_scores, corpus_key

    kept = _table_cache(node)

    def corpus(df: pl.DataFrame) -> tuple[pl.Series, tuple[str, str]]:
        found: tuple[pl.Series, tuple[str, str]] | None = (
            None if kept is None else kept.get(_BM25_CORPUS)
        )
        if found is None:
            texts = df.select(packed_text_expr()).to_series()
            found = (texts, corpus_key(df.get_column("content_hash")))
            if kept is not None:
                kept[_BM25_CORPUS] = found
        return found

    def scores(df: pl.DataFrame) -> npt.NDArray[np.float64]:
        texts, key = corpus(df)
        return bm25_scores(texts, node.query, cache_key=key)

    return rank_batches(lf, scores)


@register(RankEmbedding)
def _rank_embedding(node: RankEmbedding, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.embeddings import embedding_scores

    return rank_batches(lf, lambda df: embedding_scores(df, node.query, node.model))


def _settings(node: RankHybrid | RankHybridLineage) -> RetrievalSettings:
    from cognoxium.retrieval.scope import RetrievalSettings

    return RetrievalSettings(model=node.model, rrf_k=node.rrf_k, neighbours=node.neighbours)


@register(RankHybrid)
def _rank_hybrid(node: RankHybrid, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.scope import scope_retriever

    def scores(df: pl.DataFrame) -> npt.NDArray[np.float64]:
        return scope_retriever(df, "hybrid", _settings(node)).scores(node.query)

    return rank_batches(lf, scores)


@register(RankHybridLineage)
def _rank_hybrid_lineage(
    node: RankHybridLineage, lf: pl.LazyFrame, lineage: pl.LazyFrame
) -> pl.LazyFrame:
    from cognoxium.retrieval.scope import scope_retriever

    def scores(df: pl.DataFrame) -> npt.NDArray[np.float64]:
        # The lineage plan identifies its rows (a scan's source is equal only
        # to itself), so a batch over one store collects and links it once.
        retriever = scope_retriever(
            df, "hybrid-lineage", _settings(node), lineage=lineage.collect, lineage_key=node.lineage
        )
        return retriever.scores(node.query)

    return rank_batches(lf, scores)


@register(RankLearned)
def _rank_learned(node: RankLearned, lf: pl.LazyFrame, lineage: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.features import feature_extractor
    from cognoxium.retrieval.learned import learned_scores, load_model
    from cognoxium.retrieval.scope import RetrievalSettings

    def scores(df: pl.DataFrame) -> npt.NDArray[np.float64]:
        model = load_model(node.model)
        settings = RetrievalSettings(model=model.embedding_model)
        extractor = feature_extractor(
            df, settings, lineage=lineage.collect, lineage_key=node.lineage
        )
        return learned_scores(extractor, node.query, model)

    return rank_batches(lf, scores)


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
