"""The six built-in context strategies.

==========================  =======  ================  =========================================
strategy                    quality  backends          retrieval
==========================  =======  ================  =========================================
``simple-keyword``          0.3      text              BM25 search for the request's keywords
``semantic-embedding``      0.6      vector            cosine search with a sentence embedding
``breadth-depth-navigator`` 0.85     graph             traversal from focus nodes, ``breadth``
                                                       hops out
``arce``                    0.95     text, vector,     text (40 % of the budget), vector (40 %)
                                     graph             and graph (20 %), merged, deduplicated
``temporal-archaeology``    0.5      graph, temporal   cold-tier items, then graph traversal
                                     (cold tier)       from them
``plan-decision-context``   0.7      temporal          decision records of the plan hierarchy,
                                     (warm/cold)       from the warm and cold tiers
==========================  =======  ================  =========================================

Every strategy ranks its candidates, then packs them greedily in
``(relevance DESC, id ASC)`` order: a candidate that does not fit what is left
of the budget is skipped and the next one tried, so the fragments' tokens
(:meth:`~cognoxium.strategies.backends.ItemStore.costs`) never exceed the
budget. Relevance is normalised to ``[0, 1]`` by the best hit of each backend.
Built-ins retrieve every resource type (all item roles) and keep only the
types a request asks for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import polars as pl

from cognoxium.strategies.allocator import split_budget
from cognoxium.strategies.backends import (
    HITS_SCHEMA,
    Backends,
    ItemStore,
    empty_hits,
    order_hits,
    resolve_profile,
)
from cognoxium.strategies.protocol import (
    RESOURCE_TYPES,
    ContextFragment,
    ContextRequest,
    ContextStrategy,
    StrategyCapabilities,
)
from cognoxium.strategies.settings import positive_int

__all__ = [
    "BUILTIN_STRATEGIES",
    "ArceStrategy",
    "BreadthDepthNavigatorStrategy",
    "PlanDecisionContextStrategy",
    "SemanticEmbeddingStrategy",
    "SimpleKeywordStrategy",
    "TemporalArchaeologyStrategy",
    "builtin_strategies",
    "fit_budget",
]

_BATCH = 64


def _normalised(hits: pl.DataFrame) -> pl.DataFrame:
    """Divide scores by the best one, so the best hit scores 1.0; drop scores <= 0."""
    hits = hits.filter(pl.col("score") > 0)
    if hits.height == 0:
        return hits
    return hits.with_columns(pl.col("score") / pl.col("score").max())


def _of_types(hits: pl.DataFrame, store: ItemStore, types: Sequence[str]) -> pl.DataFrame:
    if len(types) == len(RESOURCE_TYPES):
        return hits
    return hits.filter(pl.col("id").is_in(store.of_types(types).implode()))


def _best(*parts: pl.DataFrame) -> pl.DataFrame:
    """Merge hits, keeping each id's best score, ordered."""
    present = [p.select("id", "score") for p in parts if p.height]
    if not present:
        return empty_hits()
    merged = pl.concat(present).group_by("id").agg(pl.col("score").max())
    return order_hits(merged)


def _text_hits(
    request: ContextRequest, backends: Backends, types: Sequence[str] = RESOURCE_TYPES
) -> pl.DataFrame:
    """BM25 hits of the search text among ``types``, raw scores, best first.

    Empty without a text backend or with a blank search text.
    """
    if backends.text is None or not request.search_text.strip():
        return empty_hits()
    return _of_types(backends.text.search(request.search_text), backends.store, types)


def _vector_hits(
    request: ContextRequest, backends: Backends, types: Sequence[str] = RESOURCE_TYPES
) -> pl.DataFrame:
    """Cosine hits of the query among ``types``, raw similarities, best first.

    Empty without a vector backend or with a blank query.
    """
    if backends.vector is None or not request.query.strip():
        return empty_hits()
    return _of_types(backends.vector.similarity_search(request.query), backends.store, types)


def fit_budget(
    store: ItemStore,
    hits: pl.DataFrame,
    budget: int,
    request: ContextRequest,
    *,
    strategy: str,
    backend: str,
    exclude: Iterable[str] = (),
) -> list[ContextFragment]:
    """Pack hits greedily into ``budget`` tokens, best first.

    Candidates are taken in ``(score DESC, id ASC)`` order and costed in
    batches of 64 (token counts are cached); one that does not fit what is
    left is skipped and the next tried; packing stops when what is left is
    below the cheapest possible item.

    Parameters
    ----------
    store
        The items.
    hits
        ``id``, ``score`` (the relevance, ``[0, 1]``) and optionally
        ``backend`` per hit.
    budget
        The token budget, in tokens.
    request
        The request (its token profile counts the tokens).
    strategy, backend
        Recorded on every fragment (``backend`` unless a hit names its own).
    exclude
        Ids never to take (already taken by another part).

    Returns
    -------
    list of ContextFragment
        In packing order; their tokens sum to at most ``budget``.
    """
    if budget <= 0 or hits.height == 0:
        return []
    profile = resolve_profile(request.profile)
    if "backend" not in hits.columns:
        hits = hits.with_columns(pl.lit(backend).alias("backend"))
    skip = list(exclude)
    if skip:
        hits = hits.filter(~pl.col("id").is_in(skip))
    candidates = order_hits(hits).join(
        store.table.select("id", "text", "content_hash", "chat_role"),
        on="id",
        maintain_order="left",
    )
    floor = store.min_cost(profile)
    remaining = budget
    out: list[ContextFragment] = []
    for start in range(0, candidates.height, _BATCH):
        if remaining < floor:
            break
        part = candidates.slice(start, _BATCH)
        costs = store.costs(part, profile).tolist()
        rows = part.select("id", "score", "backend", "text").iter_rows()
        for (node, score, found_by, text), cost in zip(rows, costs, strict=True):
            if cost <= remaining:
                out.append(
                    ContextFragment(
                        node=node,
                        text=text,
                        relevance_score=score,
                        tokens=cost,
                        strategy=strategy,
                        backend=found_by,
                    )
                )
                remaining -= cost
                if remaining < floor:
                    break
    return out


class _Builtin(ABC):
    """Name, capabilities, explanation and packing shared by the built-in strategies.

    A strategy ranks its candidates in :meth:`_hits`; :meth:`assemble` packs
    them into the budget (:func:`fit_budget`), recording ``BACKEND`` on every
    fragment whose hit names no backend of its own. :class:`ArceStrategy`,
    which packs three parts into shares of the budget, overrides
    :meth:`assemble` instead.
    """

    NAME: ClassVar[str]
    CAPABILITIES: ClassVar[StrategyCapabilities]
    DESCRIPTION: ClassVar[str]
    BACKEND: ClassVar[str]

    @property
    def name(self) -> str:
        """The strategy's registry name."""
        return self.NAME

    @property
    def capabilities(self) -> StrategyCapabilities:
        """Backend requirements and quality score."""
        return self.CAPABILITIES

    def explain(self) -> str:
        """A one-paragraph description of the retrieval logic."""
        return self.DESCRIPTION

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def _types(self, request: ContextRequest) -> tuple[str, ...]:
        return self.CAPABILITIES.handles(request.resource_types)

    @abstractmethod
    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        """The confidence, in ``[0, 1]``, that this strategy serves ``request``."""

    def _hits(
        self,
        request: ContextRequest,
        backends: Backends,
        plan_context: Mapping[str, Any] | None,
    ) -> pl.DataFrame:
        """The candidates: ``id``, ``score`` (``[0, 1]``) and optionally ``backend``."""
        raise NotImplementedError(f"{type(self).__name__} overrides assemble, not _hits")

    def assemble(
        self,
        request: ContextRequest,
        backends: Backends,
        budget: int,
        plan_context: Mapping[str, Any] | None,
    ) -> list[ContextFragment]:
        """The candidates of :meth:`_hits` that fit ``budget`` tokens, best first."""
        return fit_budget(
            backends.store,
            self._hits(request, backends, plan_context),
            budget,
            request,
            strategy=self.NAME,
            backend=self.BACKEND,
        )


def _seeds_from_search(
    request: ContextRequest, backends: Backends, types: Sequence[str], k: int
) -> pl.DataFrame:
    """The best ``k`` text hits and ``k`` vector hits, normalised, merged by best score."""
    return _best(
        _normalised(_text_hits(request, backends, types)).head(k),
        _normalised(_vector_hits(request, backends, types)).head(k),
    )


# ---------------------------------------------------------------------------


class SimpleKeywordStrategy(_Builtin):
    """BM25 keyword search (``simple-keyword``, quality 0.3, text backend).

    Searches the request's keywords (the query when it has none) with the text
    backend and packs the hits greedily into the budget. Confidence is 1.0
    when some item shares a term with the search text, else 0.

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> backends = Backends.from_frame(CognitionFrame([
    ...     {"id": "a", "role": "user", "text": "I adopted a cat named Miso."},
    ...     {"id": "b", "role": "user", "text": "The weather is nice."}]), vector=False)
    >>> request = ContextRequest(query="What is the cat called?")
    >>> [f.node for f in SimpleKeywordStrategy().assemble(request, backends, 100, None)]
    ['a']
    """

    NAME = "simple-keyword"
    BACKEND = "text"
    CAPABILITIES = StrategyCapabilities(
        uses_text=True, resource_types=RESOURCE_TYPES, quality_score=0.3
    )
    DESCRIPTION = (
        "simple-keyword: BM25 search (text backend) for the request's keywords, or its query "
        "when it has none; hits packed greedily, best first, into the token budget."
    )

    def _hits(
        self,
        request: ContextRequest,
        backends: Backends,
        plan_context: Mapping[str, Any] | None,
    ) -> pl.DataFrame:
        """The BM25 hits, normalised."""
        return _normalised(_text_hits(request, backends, self._types(request)))

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        """1.0 when some item shares a term with the search text, else 0.0."""
        return 1.0 if self._hits(request, backends, None).height else 0.0


class SemanticEmbeddingStrategy(_Builtin):
    """Embedding similarity search (``semantic-embedding``, quality 0.6, vector backend).

    Embeds the query with the vector backend's embedder (by default a real
    sentence-embedding model, :data:`~cognoxium.strategies.backends.DEFAULT_EMBEDDER`),
    ranks the items by exact cosine similarity and packs them greedily into
    the budget. Confidence is the best cosine similarity, clipped to
    ``[0, 1]``.
    """

    NAME = "semantic-embedding"
    BACKEND = "vector"
    CAPABILITIES = StrategyCapabilities(
        uses_vector=True, resource_types=RESOURCE_TYPES, quality_score=0.6
    )
    DESCRIPTION = (
        "semantic-embedding: exact cosine similarity (vector backend) between the query's "
        "embedding and every item's; hits packed greedily, best first, into the token budget."
    )

    def _hits(
        self,
        request: ContextRequest,
        backends: Backends,
        plan_context: Mapping[str, Any] | None,
    ) -> pl.DataFrame:
        """The most similar items, normalised by the best similarity."""
        return _normalised(_vector_hits(request, backends, self._types(request)))

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        """The best cosine similarity of an item to the query, in ``[0, 1]``."""
        hits = _vector_hits(request, backends, self._types(request))
        return min(1.0, float(hits.get_column("score")[0])) if hits.height else 0.0


class BreadthDepthNavigatorStrategy(_Builtin):
    """Graph traversal from focus nodes (``breadth-depth-navigator``, quality 0.85).

    Starts from the request's focus nodes (score 1.0 each) and expands
    ``request.breadth`` hops over the graph backend (lineage, adjacent turns,
    same session, same speaker); a reached node scores its seed's score times
    the edge weights of its path.

    When the request has no focus node in the graph, the seeds are the best
    ``seed_count`` hits of the text backend and of the vector backend (those
    present), with their normalised scores.

    Confidence: 1.0 with focus nodes, 0.7 when seeding from search, 0 when
    neither is possible.

    Parameters
    ----------
    seed_count
        Hits per search backend used as seeds when there are no focus nodes.
    """

    NAME = "breadth-depth-navigator"
    BACKEND = "graph"
    CAPABILITIES = StrategyCapabilities(
        uses_graph=True,
        resource_types=RESOURCE_TYPES,
        quality_score=0.85,
        supports_depth_breadth=True,
    )
    DESCRIPTION = (
        "breadth-depth-navigator: graph traversal (graph backend) from the request's focus "
        "nodes, request.breadth hops out over lineage, adjacent turns, sessions and speakers; "
        "without focus nodes, seeded from the best text and vector hits."
    )

    def __init__(self, *, seed_count: int = 5) -> None:
        self.seed_count = positive_int(seed_count, "seed_count")

    def _seeds(self, request: ContextRequest, backends: Backends) -> pl.DataFrame:
        if backends.graph is None:
            return empty_hits()
        focus = backends.graph.has(request.focus_nodes)
        if focus:
            return pl.DataFrame({"id": focus, "score": 1.0}, schema=HITS_SCHEMA)
        return _seeds_from_search(request, backends, self._types(request), self.seed_count)

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        """1.0 with focus nodes in the graph, 0.7 when seeding from search, else 0.0."""
        if backends.graph is None:
            return 0.0
        if backends.graph.has(request.focus_nodes):
            return 1.0
        searchable = (backends.text is not None and request.search_text.strip()) or (
            backends.vector is not None and request.query.strip()
        )
        return 0.7 if searchable else 0.0

    def _hits(
        self,
        request: ContextRequest,
        backends: Backends,
        plan_context: Mapping[str, Any] | None,
    ) -> pl.DataFrame:
        """The seeds and their neighbourhood, scored along their paths."""
        if backends.graph is None:
            return empty_hits()
        reached = backends.graph.traverse(self._seeds(request, backends), hops=request.breadth)
        return _of_types(reached.select("id", "score"), backends.store, self._types(request))


class ArceStrategy(_Builtin):
    """Multi-modal retrieval (``arce``, quality 0.95, text + vector + graph).

    1. Text: BM25 hits packed into 40 % of the budget.
    2. Vector: cosine hits not taken yet, packed into 40 % plus what text left.
    3. Graph: from the focus nodes (else from the fragments of steps 1 and 2,
       with their scores), ``request.breadth`` hops out; nodes not taken yet,
       packed into the rest of the budget (20 % plus what was left).

    The three parts are merged and deduplicated: each item appears once, with
    its best normalised score over the three backends as its relevance. The
    percentages are split exactly (:func:`~cognoxium.strategies.allocator.split_budget`).
    Confidence is 1.0 when the three backends are present and the query is
    not blank.
    """

    NAME = "arce"
    SHARES: ClassVar[dict[str, float]] = {"text": 0.4, "vector": 0.4, "graph": 0.2}
    CAPABILITIES = StrategyCapabilities(
        uses_text=True,
        uses_vector=True,
        uses_graph=True,
        resource_types=RESOURCE_TYPES,
        quality_score=0.95,
        supports_depth_breadth=True,
    )
    DESCRIPTION = (
        "arce: text search (40% of the budget), vector similarity (40%) and graph traversal "
        "(20%) from the focus nodes or the search hits; merged and deduplicated, each item "
        "scored by its best normalised score."
    )

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        """1.0 when text, vector and graph backends are present and the query is not blank."""
        present = all(getattr(backends, kind) is not None for kind in ("text", "vector", "graph"))
        return 1.0 if present and request.query.strip() else 0.0

    def assemble(
        self,
        request: ContextRequest,
        backends: Backends,
        budget: int,
        plan_context: Mapping[str, Any] | None,
    ) -> list[ContextFragment]:
        """Text, vector and graph fragments within ``budget`` tokens, merged."""
        if backends.text is None or backends.vector is None or backends.graph is None:
            return []
        store = backends.store
        types = self._types(request)
        shares = split_budget(budget, self.SHARES)
        text_hits = _normalised(_text_hits(request, backends, types))
        vector_hits = _normalised(_vector_hits(request, backends, types))
        taken = fit_budget(
            store, text_hits, shares["text"], request, strategy=self.NAME, backend="text"
        )
        left = shares["text"] - sum(f.tokens for f in taken)
        taken += fit_budget(
            store,
            vector_hits,
            shares["vector"] + left,
            request,
            strategy=self.NAME,
            backend="vector",
            exclude=[f.node for f in taken],
        )
        seeds = _graph_seeds(backends.graph.has(request.focus_nodes), taken)
        graph_hits = _of_types(
            backends.graph.traverse(seeds, hops=request.breadth).select("id", "score"),
            store,
            types,
        )
        taken += fit_budget(
            store,
            graph_hits,
            budget - sum(f.tokens for f in taken),
            request,
            strategy=self.NAME,
            backend="graph",
            exclude=[f.node for f in taken],
        )
        return _rescored(taken, _best(text_hits, vector_hits, graph_hits))


class TemporalArchaeologyStrategy(_Builtin):
    """Cold-tier history and its neighbourhood (``temporal-archaeology``, quality 0.5).

    1. Take the cold-tier items of the temporal backend (age at least
       ``warm_seconds`` before the request's ``as_of``) and score them by
       their BM25 relevance to the search text when the text backend is
       present and some cold item matches, else by cosine similarity when the
       vector backend is present, else by recency (``2^(-age / warm_seconds)``).
       The best ``seed_count`` are the seeds.
    2. Expand ``request.breadth`` hops from them over the graph backend.

    Seeds are recorded with backend ``temporal``, reached nodes with
    ``graph``. Confidence is 1.0 when the cold tier holds a requested item.

    Parameters
    ----------
    seed_count
        How many cold-tier items seed the traversal.
    """

    NAME = "temporal-archaeology"
    BACKEND = "graph"
    CAPABILITIES = StrategyCapabilities(
        uses_graph=True,
        uses_temporal=True,
        resource_types=RESOURCE_TYPES,
        quality_score=0.5,
        supports_temporal=True,
    )
    DESCRIPTION = (
        "temporal-archaeology: cold-tier items (temporal backend) ranked by relevance to the "
        "request, then graph traversal (graph backend) from the best of them."
    )

    def __init__(self, *, seed_count: int = 5) -> None:
        self.seed_count = positive_int(seed_count, "seed_count")

    def _cold(self, request: ContextRequest, backends: Backends) -> pl.DataFrame:
        if backends.temporal is None:
            return empty_hits().select("id")
        cold = backends.temporal.query_by_tier(["cold"], as_of=request.as_of).select("id")
        return _of_types(cold, backends.store, self._types(request))

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        """1.0 when graph and temporal backends are present and the cold tier is not empty."""
        if backends.graph is None or backends.temporal is None:
            return 0.0
        return 1.0 if self._cold(request, backends).height else 0.0

    def _hits(
        self,
        request: ContextRequest,
        backends: Backends,
        plan_context: Mapping[str, Any] | None,
    ) -> pl.DataFrame:
        """Cold-tier seeds (backend ``temporal``) and their graph neighbourhood."""
        if backends.graph is None or backends.temporal is None:
            return empty_hits()
        cold = self._cold(request, backends)
        if cold.height == 0:
            return empty_hits()
        seeds = _normalised(_text_hits(request, backends).join(cold, on="id", how="semi"))
        if seeds.height == 0:
            seeds = _normalised(_vector_hits(request, backends).join(cold, on="id", how="semi"))
        if seeds.height == 0:
            seeds = backends.temporal.recency(cold, as_of=request.as_of)
        seeds = order_hits(seeds).head(self.seed_count)
        reached = backends.graph.traverse(seeds, hops=request.breadth)
        return _of_types(
            reached.select(
                "id",
                "score",
                pl.when(pl.col("hops") == 0)
                .then(pl.lit("temporal"))
                .otherwise(pl.lit("graph"))
                .alias("backend"),
            ),
            backends.store,
            self._types(request),
        )


class PlanDecisionContextStrategy(_Builtin):
    """Decision records of the plan hierarchy (``plan-decision-context``, quality 0.7).

    1. The start nodes are ``plan_context["plan_id"]`` (an id or a list of
       ids) and the request's focus nodes; without any, the best
       ``seed_count`` text hits when the text backend is present.
    2. Walk up the plan hierarchy from them: parents and ancestors through
       the ``parents`` and ``lineage`` columns and the metadata keys
       ``parent_id`` / ``parent_ids``
       (:meth:`~cognoxium.strategies.backends.ItemStore.ancestors`).
    3. Retrieve the decision records (metadata ``kind`` in ``decision_kinds``)
       of the warm and cold tiers that are in the hierarchy or whose parent
       is; a record attached at depth ``d`` scores ``1 / (1 + d)``.

    Without start nodes, every warm or cold decision record is a candidate,
    scored by recency. Confidence: 1.0 with focus nodes, 0.5 without, 0 when
    the warm and cold tiers hold no decision record.

    Parameters
    ----------
    decision_kinds
        The metadata ``kind`` values of decision records.
    seed_count
        Text hits used as start nodes when there are none.
    """

    NAME = "plan-decision-context"
    BACKEND = "temporal"
    CAPABILITIES = StrategyCapabilities(
        uses_temporal=True,
        resource_types=RESOURCE_TYPES,
        quality_score=0.7,
        supports_plan_hierarchy=True,
    )
    DESCRIPTION = (
        "plan-decision-context: walks the parent and ancestor plan hierarchy (lineage and "
        "metadata parent ids) from the current plan node and retrieves its decision records "
        "from the warm and cold tiers (temporal backend)."
    )

    def __init__(
        self, *, decision_kinds: Sequence[str] = ("decision",), seed_count: int = 5
    ) -> None:
        self.decision_kinds = tuple(decision_kinds)
        self.seed_count = positive_int(seed_count, "seed_count")

    def _decisions(self, request: ContextRequest, backends: Backends) -> pl.DataFrame:
        if backends.temporal is None:
            return empty_hits().select("id")
        store = backends.store
        tiers = backends.temporal.query_by_tier(["warm", "cold"], as_of=request.as_of)
        records = store.table.filter(pl.col("kind").is_in(list(self.decision_kinds))).select("id")
        return _of_types(records.join(tiers, on="id", how="semi"), store, self._types(request))

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        """1.0 with focus nodes, 0.5 without, 0.0 when there is no warm/cold decision record."""
        if not self._decisions(request, backends).height:
            return 0.0
        return 1.0 if backends.store.has(request.focus_nodes) else 0.5

    def _start(
        self,
        request: ContextRequest,
        backends: Backends,
        plan_context: Mapping[str, Any] | None,
    ) -> list[str]:
        given: list[str] = []
        plan_id = (plan_context or {}).get("plan_id")
        if isinstance(plan_id, str):
            given.append(plan_id)
        elif isinstance(plan_id, Sequence):
            given.extend(p for p in plan_id if isinstance(p, str))
        given.extend(request.focus_nodes)
        start = backends.store.has(given)
        if not start and backends.text is not None and request.search_text.strip():
            hits = backends.text.search(request.search_text, k=self.seed_count)
            start = hits.get_column("id").to_list()
        return start

    def _hits(
        self,
        request: ContextRequest,
        backends: Backends,
        plan_context: Mapping[str, Any] | None,
    ) -> pl.DataFrame:
        """Decision records of the plan hierarchy, nearest first, normalised."""
        if backends.temporal is None:
            return empty_hits()
        store = backends.store
        decisions = self._decisions(request, backends)
        if decisions.height == 0:
            return empty_hits()
        start = self._start(request, backends, plan_context)
        if start:
            plans = store.ancestors(start)
            attached = pl.concat(
                [
                    plans,
                    store.hierarchy.join(plans, left_on="parent", right_on="id").select(
                        pl.col("child").alias("id"), "depth"
                    ),
                ]
            )
            hits = (
                attached.join(decisions, on="id", how="semi")
                .group_by("id")
                .agg(pl.col("depth").min())
                .select("id", (1.0 / (1.0 + pl.col("depth").cast(pl.Float64))).alias("score"))
            )
        else:
            hits = backends.temporal.recency(decisions, as_of=request.as_of)
        return _normalised(hits)


BUILTIN_STRATEGIES: tuple[type[_Builtin], ...] = (
    SimpleKeywordStrategy,
    SemanticEmbeddingStrategy,
    BreadthDepthNavigatorStrategy,
    ArceStrategy,
    TemporalArchaeologyStrategy,
    PlanDecisionContextStrategy,
)
"""The classes of the six built-in strategies, in the order of docs/strategies.md."""


def builtin_strategies() -> list[ContextStrategy]:
    """One new instance of each built-in strategy, in :data:`BUILTIN_STRATEGIES` order.

    Examples
    --------
    >>> [s.name for s in builtin_strategies()]  # doctest: +NORMALIZE_WHITESPACE
    ['simple-keyword', 'semantic-embedding', 'breadth-depth-navigator', 'arce',
     'temporal-archaeology', 'plan-decision-context']
    """
    return [cls() for cls in BUILTIN_STRATEGIES]


def _graph_seeds(focus: list[str], taken: list[ContextFragment]) -> pl.DataFrame:
    """The graph traversal's seeds: the focus nodes (score 1), else the fragments taken."""
    if focus:
        return pl.DataFrame({"id": focus, "score": 1.0}, schema=HITS_SCHEMA)
    return pl.DataFrame(
        {"id": [f.node for f in taken], "score": [f.relevance_score for f in taken]},
        schema=HITS_SCHEMA,
    )


def _rescored(taken: list[ContextFragment], best: pl.DataFrame) -> list[ContextFragment]:
    """``taken`` with each fragment's best normalised score over the backends (``best``)."""
    relevance = dict(best.filter(pl.col("id").is_in([f.node for f in taken])).iter_rows())
    return [
        ContextFragment(
            node=f.node,
            text=f.text,
            relevance_score=relevance.get(f.node, f.relevance_score),
            tokens=f.tokens,
            strategy=f.strategy,
            backend=f.backend,
        )
        for f in taken
    ]
