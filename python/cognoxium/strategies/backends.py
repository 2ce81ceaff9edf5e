"""Retrieval backends over a frame of context items: text, vector, graph and temporal.

Every backend reads one :class:`ItemStore`, built once from a
:class:`~cognoxium.frame.frame.CognitionFrame` or a Polars frame of the canonical
item schema, and answers with *hits*: a Polars frame with the columns ``id``
(String) and ``score`` (Float64), ordered by ``score`` descending, then ``id``
ascending. Binary items are never hits (they are never packed).

============  ==================  =================================================
backend       class               what it indexes
============  ==================  =================================================
text          :class:`TextBackend`      BM25 over the packed text of every item
vector        :class:`VectorBackend`    embeddings, exact cosine search (numpy)
graph         :class:`GraphBackend`     lineage and plan hierarchy, adjacent turns,
                                        same session, same speaker
temporal      :class:`TemporalBackend`  hot, warm and cold tiers by age (seconds, UTC)
============  ==================  =================================================

Item metadata read here (all optional): ``conversation``, ``session``,
``speaker`` (else ``name``), ``kind``, ``parent_id`` and ``parent_ids``.
LoCoMo items (:mod:`cognoxium.app.locomo_dataset`) carry ``conversation``,
``session``, ``speaker``, ``dia_id`` and ``kind``.

Indexes are built once per backend, so one :class:`Backends` serves many
requests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

from cognoxium._columns import CHAT_ROLES
from cognoxium.exceptions import StrategyError
from cognoxium.governance.lineage import lineage_edges
from cognoxium.items._checks import to_utc
from cognoxium.items.hashing import check_content_hashes
from cognoxium.items.schema import COLUMNS, mapped_expr, packed_text_expr
from cognoxium.items.validation import conform
from cognoxium.retrieval.embeddings import (
    Embedder,
    EmbeddingCache,
    embed_frame,
    get_embedder,
    read_prefix_expr,
)
from cognoxium.retrieval.ranking import bm25_scores
from cognoxium.strategies.protocol import BACKEND_KINDS, StrategyCapabilities
from cognoxium.strategies.settings import positive_seconds
from cognoxium.tokens.profiles import TokenProfile, get_profile

if TYPE_CHECKING:
    from cognoxium.frame.frame import CognitionFrame

__all__ = [
    "DEFAULT_EMBEDDER",
    "DEFAULT_HOT_SECONDS",
    "DEFAULT_WARM_SECONDS",
    "HITS_SCHEMA",
    "TIERS",
    "Backends",
    "EdgeWeights",
    "GraphBackend",
    "ItemStore",
    "TemporalBackend",
    "TextBackend",
    "VectorBackend",
]

HITS_SCHEMA = pl.Schema({"id": pl.String(), "score": pl.Float64()})
"""Columns of a hits frame: the item id and its score (higher is better)."""

DEFAULT_EMBEDDER = "minilm"
"""The embedder :meth:`Backends.from_frame` uses by default: a real sentence model."""

DEFAULT_HOT_SECONDS = 86_400.0
"""Items younger than this many seconds (1 day) are in the hot tier."""

DEFAULT_WARM_SECONDS = 2_592_000.0
"""Items younger than this many seconds (30 days), and not hot, are warm; older are cold."""

TIERS: tuple[str, ...] = ("hot", "warm", "cold")
"""The temporal tiers, newest first."""

_CONVERSATIONAL = ("system", "developer", "user", "assistant", "tool")
_SEP = "\x1f"


def empty_hits() -> pl.DataFrame:
    return pl.DataFrame(schema=HITS_SCHEMA)


def order_hits(hits: pl.DataFrame) -> pl.DataFrame:
    return hits.sort(["score", "id"], descending=[True, False], maintain_order=True)


def _positive_hits(
    store: ItemStore, scores: Callable[[], npt.NDArray[np.float64]], k: int | None
) -> pl.DataFrame:
    """Hits of the items of ``store.table`` whose score (``scores()``, one per row) is positive.

    Best first, at most ``k`` (``None``: all); ``scores`` is not called for an
    empty store.
    """
    if not len(store):
        return empty_hits()
    hits = pl.DataFrame(
        {"id": store.table.get_column("id"), "score": scores()}, schema=HITS_SCHEMA
    ).filter(pl.col("score") > 0)
    hits = order_hits(hits)
    return hits if k is None else hits.head(k)


def _both_ways(pairs: pl.DataFrame, one: str, other: str, weight: float) -> pl.DataFrame:
    """Undirected edges as directed pairs ``src``, ``dst``, both ways, of one ``weight``."""
    return pl.concat(
        [
            pairs.select(pl.col(one).alias("src"), pl.col(other).alias("dst")),
            pairs.select(pl.col(other).alias("src"), pl.col(one).alias("dst")),
        ]
    ).with_columns(pl.lit(weight).alias("weight"))


def _utc(value: datetime | None, what: str) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise StrategyError(f"{what} must be timezone-aware (UTC), got {value!r}")
    try:
        return to_utc(value)
    except ValueError as exc:
        raise StrategyError(f"{what} {exc}, got {value!r}") from None


def _meta(path: str) -> pl.Expr:
    return pl.col("metadata").str.json_path_match(path)


def resolve_profile(profile: str | TokenProfile) -> TokenProfile:
    return get_profile(profile) if isinstance(profile, str) else profile


# ---------------------------------------------------------------------------
# the item store


class ItemStore:
    """The context items every backend reads, with the columns retrieval needs.

    Parameters
    ----------
    items
        A :class:`~cognoxium.frame.frame.CognitionFrame` (collected here) or a Polars
        frame with the canonical item columns (:data:`cognoxium.items.schema.COLUMNS`).

    Attributes
    ----------
    items : polars.DataFrame
        The items as given, every column, in input order.
    packable : polars.DataFrame
        The rows of ``items`` that can be packed (every payload but binary).
    table : polars.DataFrame
        One row per packable (non-binary) item, in input order: ``id``,
        ``role``, ``chat_role`` (the role packing renders), ``text`` (the
        packed text), ``content_hash``, ``created_at``, ``conversation``,
        ``session``, ``speaker`` and ``kind`` (metadata, null when absent).
    hierarchy : polars.DataFrame
        Parent links ``child``, ``parent`` (both ids in the store): the
        ``parents`` and ``lineage`` columns (:func:`cognoxium.governance.lineage.lineage_edges`)
        and the metadata keys ``parent_id`` (an id) and ``parent_ids`` (ids).

    Raises
    ------
    StrategyError
        If item columns are missing or two rows share an id.
    RecordError
        If a Polars frame's ``content_hash`` is not the hash of its row's
        payload (see :func:`~cognoxium.items.hashing.check_content_hashes`).

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> store = ItemStore(CognitionFrame([
    ...     {"id": "p", "role": "memory", "text": "Plan: launch in May."},
    ...     {"id": "d", "role": "memory", "text": "Decision: ship.",
    ...      "metadata": {"kind": "decision", "parent_id": "p"}},
    ... ]))
    >>> len(store), store.hierarchy.rows()
    (2, [('d', 'p')])
    """

    def __init__(self, items: CognitionFrame | pl.DataFrame) -> None:
        df = items if isinstance(items, pl.DataFrame) else items.collect()
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise StrategyError(
                f"an item store needs the item columns; missing {missing}: pass a frame of "
                "context items (CognitionFrame, or a frame of cognoxium.items.schema.COLUMNS)"
            )
        repeated = df.get_column("id").is_duplicated()
        if repeated.any():
            first = df.get_column("id").filter(repeated)[0]
            raise StrategyError(f"an item store needs unique ids; {first!r} appears twice")
        if isinstance(items, pl.DataFrame):  # embeddings are cached by content hash
            check_content_hashes(df)
        self.items: pl.DataFrame = df
        self.packable: pl.DataFrame = df.filter(pl.col("payload_kind").cast(pl.String) != "binary")
        speaker = _meta("$.speaker")
        self.table: pl.DataFrame = self.packable.select(
            pl.col("id"),
            pl.col("role").cast(pl.String),
            mapped_expr("role", df.schema["role"], CHAT_ROLES, pl.String).alias("chat_role"),
            packed_text_expr().alias("text"),
            pl.col("content_hash"),
            pl.col("created_at"),
            _meta("$.conversation").alias("conversation"),
            _meta("$.session").alias("session"),
            pl.when(speaker.is_null()).then(_meta("$.name")).otherwise(speaker).alias("speaker"),
            _meta("$.kind").alias("kind"),
        )
        self.hierarchy: pl.DataFrame = self._hierarchy(df)
        digest = hashlib.sha256()
        for value in self.table.get_column("content_hash").to_list():
            digest.update(value.encode("ascii"))
        self.fingerprint: str = digest.hexdigest()
        """sha256 hex of the packable items' content hashes, in order."""

    def __len__(self) -> int:
        return self.table.height

    def _hierarchy(self, df: pl.DataFrame) -> pl.DataFrame:
        known = self.table.get_column("id")
        lineage = lineage_edges(df).select(
            pl.col("child_id").alias("child"), pl.col("parent_id").alias("parent")
        )
        meta = df.select(
            "id", _meta("$.parent_id").alias("one"), _meta("$.parent_ids").alias("many")
        )
        single = meta.select(pl.col("id").alias("child"), pl.col("one").alias("parent"))
        is_list = pl.col("many").str.starts_with("[")
        listed = (
            meta.filter(is_list)
            .select(
                pl.col("id").alias("child"),
                pl.col("many").str.json_decode(pl.List(pl.String)).alias("parent"),
            )
            .explode("parent")
        )
        scalar = meta.filter(pl.col("many").is_not_null() & ~is_list).select(
            pl.col("id").alias("child"), pl.col("many").alias("parent")
        )
        edges = pl.concat([lineage, single, listed, scalar])
        return edges.filter(
            pl.col("parent").is_not_null()
            & (pl.col("child") != pl.col("parent"))
            & pl.col("child").is_in(known.implode())
            & pl.col("parent").is_in(known.implode())
        ).unique(maintain_order=True)

    def has(self, ids: Iterable[str]) -> list[str]:
        """The given ids that are packable items of the store, in the order given, once each."""
        wanted = list(dict.fromkeys(ids))
        present = set(self.table.filter(pl.col("id").is_in(wanted)).get_column("id").to_list())
        return [i for i in wanted if i in present]

    def ancestors(self, ids: Iterable[str], *, max_depth: int | None = None) -> pl.DataFrame:
        """The given items and everything above them in :attr:`hierarchy`.

        Parameters
        ----------
        ids
            Start ids; ids not in the store are ignored.
        max_depth
            Walk at most this many parent links up; ``None`` walks to the roots.
            Cycles are safe: every node is visited once.

        Returns
        -------
        polars.DataFrame
            ``id``, ``depth`` (Int32: 0 for a start id, ``d`` for a node
            ``d`` parent links up, the shortest such ``d``), ordered by depth,
            then id.

        Examples
        --------
        >>> from cognoxium import CognitionFrame
        >>> store = ItemStore(CognitionFrame([
        ...     {"id": "goal", "role": "memory", "text": "Goal"},
        ...     {"id": "plan", "role": "memory", "text": "Plan", "parents": ["goal"]},
        ...     {"id": "step", "role": "memory", "text": "Step", "parents": ["plan"]}]))
        >>> store.ancestors(["step"]).rows()
        [('step', 0), ('plan', 1), ('goal', 2)]
        """
        start = self.has(ids)
        depth_of = dict.fromkeys(start, 0)
        frontier = start
        depth = 0
        while frontier and (max_depth is None or depth < max_depth):
            depth += 1
            parents = (
                self.hierarchy.filter(pl.col("child").is_in(frontier))
                .get_column("parent")
                .unique()
                .to_list()
            )
            frontier = sorted(p for p in parents if p not in depth_of)
            depth_of.update(dict.fromkeys(frontier, depth))
        return pl.DataFrame(
            {"id": list(depth_of), "depth": list(depth_of.values())},
            schema={"id": pl.String, "depth": pl.Int32},
        ).sort(["depth", "id"])

    def of_types(self, resource_types: Sequence[str]) -> pl.Series:
        """The ids of the items whose resource type (role) is in ``resource_types``."""
        return self.table.filter(pl.col("role").is_in(list(resource_types))).get_column("id")

    def costs(self, frame: pl.DataFrame, profile: str | TokenProfile) -> npt.NDArray[np.int64]:
        """The token cost of each row of ``frame``, in tokens.

        ``frame`` has the columns ``text``, ``content_hash`` and ``chat_role``
        of :attr:`table`.

        A cost is the content's tokens (cached by content hash and profile
        fingerprint, :meth:`TokenProfile.count_cached`) plus the chat framing
        of the rendered role (:meth:`TokenProfile.framing`), as
        :func:`cognoxium.packing.packer.pack` costs an item without a policy,
        a name or tool calls (pack also costs those; this does not).

        Parameters
        ----------
        frame
            Rows of :attr:`table` (or any frame with its ``text``,
            ``content_hash`` and ``chat_role`` columns).
        profile
            The token profile: a name for :func:`cognoxium.tokens.profiles.get_profile`
            or a :class:`~cognoxium.tokens.profiles.TokenProfile`.

        Returns
        -------
        numpy.ndarray
            ``int64``, shape ``(frame.height,)``, in tokens.

        Raises
        ------
        ProfileError
            If ``profile`` names no built-in profile.
        """
        prof = resolve_profile(profile)
        content = prof.count_cached(
            frame.get_column("content_hash").to_list(), frame.get_column("text").to_list()
        )
        roles = frame.get_column("chat_role")
        framing = roles.replace_strict(
            {role: prof.framing(role) for role in roles.unique().to_list()},
            return_dtype=pl.Int64,
        ).to_numpy()
        return np.asarray(content + framing, dtype=np.int64)

    def min_cost(self, profile: str | TokenProfile) -> int:
        """A lower bound of any item's cost: the smallest framing of a chat role, in tokens."""
        prof = resolve_profile(profile)
        return min(prof.framing(role) for role in set(CHAT_ROLES.values()))


# ---------------------------------------------------------------------------
# text


class TextBackend:
    """Keyword search with Okapi BM25 over the packed text of every item.

    Scores come from :func:`cognoxium.retrieval.ranking.bm25_scores` (bm25s, ``lucene``
    variant, k1 = 1.5, b = 0.75; Robertson and Zaragoza, *The Probabilistic
    Relevance Framework: BM25 and Beyond*, 2009), over each item's first
    :data:`~cognoxium.retrieval.embeddings.MAX_READ_CHARS` characters, as
    every rank reads them. The index is built once, when the backend is
    made, and cached by the store's fingerprint.

    Parameters
    ----------
    store
        The items.

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> store = ItemStore(CognitionFrame([
    ...     {"id": "a", "role": "user", "text": "I adopted a cat named Miso."},
    ...     {"id": "b", "role": "user", "text": "The weather is nice."}]))
    >>> TextBackend(store).search("cat").get_column("id").to_list()
    ['a']
    """

    kind = "text"

    def __init__(self, store: ItemStore) -> None:
        self.store = store
        self._key = ("cognoxium.strategies.text", store.fingerprint, len(store))
        # Ranking reads at most the first MAX_READ_CHARS characters of an item.
        self._texts = store.table.select(read_prefix_expr(pl.col("text"))).to_series()
        bm25_scores(self._texts, "", cache_key=self._key)

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """The BM25 score of every item of ``store.table`` for ``query``, shape ``(n,)``."""
        return bm25_scores(self._texts, query, cache_key=self._key)

    def search(self, query: str, *, k: int | None = None) -> pl.DataFrame:
        """The items sharing a term with ``query``, best first.

        Parameters
        ----------
        query
            The search text (stop words are dropped).
        k
            Keep at most this many hits; ``None`` keeps all.

        Returns
        -------
        polars.DataFrame
            Hits (:data:`HITS_SCHEMA`) with a positive BM25 score.
        """
        return _positive_hits(self.store, lambda: self.scores(query), k)


# ---------------------------------------------------------------------------
# vector


class VectorBackend:
    """Exact cosine similarity search over item embeddings, in numpy.

    Every item's packed text is embedded once, when the backend is made, into
    an ``(n, dim)`` ``float32`` matrix of L2-normalised rows
    (:func:`cognoxium.retrieval.embeddings.embed_frame`, through the embedding cache, so
    an item already embedded by the same model is not embedded again); a
    search embeds the query and takes one matrix-vector product (cosine
    similarity of unit vectors is their dot product).

    Parameters
    ----------
    store
        The items.
    embedder
        An :class:`~cognoxium.retrieval.embeddings.Embedder` or a name for
        :func:`cognoxium.retrieval.embeddings.get_embedder`; default
        :data:`DEFAULT_EMBEDDER`, a real sentence-embedding model.
    embeddings
        Precomputed embeddings of ``store.table``'s rows, shape
        ``(len(store), embedder.dim)``; computed when ``None``.
    cache
        The embedding cache (:class:`~cognoxium.retrieval.embeddings.EmbeddingCache`);
        default :func:`cognoxium.retrieval.embeddings.default_cache` (on disk).

    Raises
    ------
    StrategyError
        If ``embeddings`` has the wrong shape.
    ModelError
        If the embedder is unknown or its model is not installed.

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> store = ItemStore(CognitionFrame([
    ...     {"id": "a", "role": "user", "text": "my cat sleeps all day"},
    ...     {"id": "b", "role": "user", "text": "stock prices fell"}]))
    >>> from cognoxium.retrieval.embeddings import EmbeddingCache
    >>> vectors = VectorBackend(store, "local_hash", cache=EmbeddingCache(persist=False))
    >>> vectors.similarity_search("cat").row(0)[0]
    'a'
    """

    kind = "vector"

    def __init__(
        self,
        store: ItemStore,
        embedder: Embedder | str = DEFAULT_EMBEDDER,
        *,
        embeddings: npt.NDArray[np.float32] | None = None,
        cache: EmbeddingCache | None = None,
    ) -> None:
        self.store = store
        self.embedder: Embedder = get_embedder(embedder) if isinstance(embedder, str) else embedder
        if embeddings is not None:
            matrix = np.asarray(embeddings, dtype=np.float32)
        elif len(store):
            matrix = embed_frame(store.packable, self.embedder, cache)
        else:
            matrix = np.zeros((0, self.embedder.dim), dtype=np.float32)
        if matrix.shape != (len(store), self.embedder.dim):
            raise StrategyError(
                f"embeddings must have shape ({len(store)}, {self.embedder.dim}) for this store "
                f"and embedder {self.embedder.name!r}, got {matrix.shape}"
            )
        self.matrix: npt.NDArray[np.float32] = matrix

    def similarities(self, query: str) -> npt.NDArray[np.float64]:
        """Cosine similarity of every item to ``query``, shape ``(n,)``, in ``[-1, 1]``."""
        vector = np.asarray(self.embedder.vector(query), dtype=np.float32)
        return np.asarray(self.matrix @ vector, dtype=np.float64)

    def similarity_search(self, query: str, *, k: int | None = None) -> pl.DataFrame:
        """The items most similar to ``query``, best first.

        Parameters
        ----------
        query
            The text to embed and compare.
        k
            Keep at most this many hits; ``None`` keeps all.

        Returns
        -------
        polars.DataFrame
            Hits (:data:`HITS_SCHEMA`) with a positive cosine similarity.
        """
        return _positive_hits(self.store, lambda: self.similarities(query), k)


# ---------------------------------------------------------------------------
# graph


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EdgeWeights:
    """The weight of each kind of graph edge, in ``[0, 1]``; 0 leaves the kind out.

    A node reached over an edge scores ``score(from) × weight``, so weights
    below 1 make relevance decay with every hop.

    Parameters
    ----------
    lineage
        Parent links: ``parents``, ``lineage``, metadata ``parent_id(s)``.
    adjacent
        Consecutive conversational turns of one conversation session.
    session
        Items of the same conversation session.
    speaker
        Items of the same speaker in the same conversation.

    Raises
    ------
    StrategyError
        If a weight is outside ``[0, 1]``.
    """

    lineage: float = 0.9
    adjacent: float = 0.8
    session: float = 0.5
    speaker: float = 0.3

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise StrategyError(f"EdgeWeights.{field.name} must be a number, got {value!r}")
            if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise StrategyError(f"EdgeWeights.{field.name} must be in [0, 1], got {value!r}")
            object.__setattr__(self, field.name, float(value))


class GraphBackend:
    """Traversal over the links between items.

    Two kinds of structure make the graph, all undirected:

    - *edges*: ``lineage`` (child and parent, :attr:`ItemStore.hierarchy`) and
      ``adjacent`` (each conversational turn, roles ``system`` to ``tool``,
      and the next one of the same conversation and session, ordered by
      ``created_at`` then input order);
    - *groups*: ``session`` (the items of one conversation and session) and
      ``speaker`` (the items of one speaker in one conversation). A group links
      every pair of its members without listing the pairs, so a session of
      ``m`` items costs ``m`` rows, not ``m²``.

    Parameters
    ----------
    store
        The items.
    weights
        The weight of each kind (:class:`EdgeWeights`).

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> store = ItemStore(CognitionFrame([
    ...     {"id": f"t{i}", "role": "user", "text": f"turn {i}",
    ...      "created_at": f"2024-01-01T00:0{i}:00Z",
    ...      "metadata": {"conversation": "c", "session": 1}} for i in range(4)]))
    >>> graph = GraphBackend(store, EdgeWeights(session=0.0))
    >>> graph.traverse(["t0"], hops=2).rows()
    [('t0', 1.0, 0), ('t1', 0.8, 1), ('t2', 0.64..., 2)]
    """

    kind = "graph"

    def __init__(self, store: ItemStore, weights: EdgeWeights | None = None) -> None:
        self.store = store
        self.weights = weights or EdgeWeights()
        w = self.weights
        table = store.table
        lineage = _both_ways(store.hierarchy, "child", "parent", w.lineage)
        session_key = pl.concat_str(
            [pl.col("conversation").fill_null(""), pl.col("session").fill_null("")],
            separator=_SEP,
        )
        has_session = pl.col("conversation").is_not_null() | pl.col("session").is_not_null()
        turns = (
            table.with_row_index("__row")
            .filter(has_session & pl.col("role").is_in(list(_CONVERSATIONAL)))
            .with_columns(session_key.alias("__key"))
            .sort(["__key", "created_at", "__row"])
            .with_columns(pl.col("id").shift(-1).over("__key").alias("__next"))
            .filter(pl.col("__next").is_not_null())
        )
        adjacent = _both_ways(turns, "id", "__next", w.adjacent)
        edges = pl.concat([lineage, adjacent]).filter(pl.col("weight") > 0)
        # Keep the strongest edge per pair.
        self.edges: pl.DataFrame = (
            edges.group_by("src", "dst", maintain_order=True)
            .agg(pl.col("weight").max())
            .cast({"weight": pl.Float64})
        )
        """Undirected edges as directed pairs: ``src``, ``dst``, ``weight``."""
        sessions = table.filter(has_session).select(
            "id",
            pl.concat_str([pl.lit("session"), session_key], separator=_SEP).alias("group"),
            pl.lit(w.session).alias("weight"),
        )
        speakers = table.filter(pl.col("speaker").is_not_null()).select(
            "id",
            pl.concat_str(
                [pl.lit("speaker"), pl.col("conversation").fill_null(""), pl.col("speaker")],
                separator=_SEP,
            ).alias("group"),
            pl.lit(w.speaker).alias("weight"),
        )
        self.groups: pl.DataFrame = (
            pl.concat([sessions, speakers])
            .filter(pl.col("weight") > 0)
            .cast({"weight": pl.Float64})
        )
        """Group memberships: ``id``, ``group``, ``weight``."""

    def has(self, ids: Iterable[str]) -> list[str]:
        """The given ids that are nodes of the graph (packable items), in order, once each."""
        return self.store.has(ids)

    def neighbors(self, ids: Iterable[str]) -> pl.DataFrame:
        """The nodes one hop from ``ids``, with the strongest edge weight to each.

        Returns
        -------
        polars.DataFrame
            ``id``, ``weight``, ordered by weight descending then id; the
            given ids themselves are left out.
        """
        seeds = pl.DataFrame({"id": list(dict.fromkeys(ids)), "score": 1.0}, schema=HITS_SCHEMA)
        reached = self._step(seeds).filter(~pl.col("id").is_in(seeds.get_column("id").implode()))
        return order_hits(reached).rename({"score": "weight"})

    def _step(self, frontier: pl.DataFrame) -> pl.DataFrame:
        """Scores one hop from ``frontier`` (id, score): best ``score × weight`` per node."""
        via_edges = frontier.join(self.edges, left_on="id", right_on="src").select(
            pl.col("dst").alias("id"), (pl.col("score") * pl.col("weight")).alias("score")
        )
        via_groups = (
            frontier.join(self.groups, on="id")
            .group_by("group")
            .agg((pl.col("score") * pl.col("weight")).max().alias("score"))
            .join(self.groups.select("id", "group"), on="group")
            .select("id", "score")
        )
        return (
            pl.concat([via_edges, via_groups])
            .group_by("id")
            .agg(pl.col("score").max())
            .cast({"score": pl.Float64})
        )

    def traverse(
        self,
        seeds: pl.DataFrame | Iterable[str],
        *,
        hops: int,
        limit: int | None = None,
    ) -> pl.DataFrame:
        """Breadth-first expansion from ``seeds`` by up to ``hops`` hops.

        A node's score is the best, over the paths found, of its seed's score
        times the weights of the path's edges; a seed keeps its own score.

        Parameters
        ----------
        seeds
            Seed ids (score 1.0 each), or hits (:data:`HITS_SCHEMA`) whose
            scores are the seeds' scores. Ids not in the graph are ignored.
        hops
            How many hops to expand, at least 0.
        limit
            Keep at most this many nodes; ``None`` keeps all.

        Returns
        -------
        polars.DataFrame
            ``id``, ``score``, ``hops`` (the hop at which the best score was
            found, 0 for seeds), ordered by score descending then id.

        Raises
        ------
        StrategyError
            On a negative ``hops``.
        """
        if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
            raise StrategyError(f"hops must be a non-negative int, got {hops!r}")
        if isinstance(seeds, pl.DataFrame):
            start = seeds.select("id", pl.col("score").cast(pl.Float64))
        else:
            start = pl.DataFrame({"id": list(dict.fromkeys(seeds)), "score": 1.0})
        start = (
            start.filter(pl.col("id").is_in(self.store.table.get_column("id").implode()))
            .group_by("id", maintain_order=True)
            .agg(pl.col("score").max())
            .cast({"score": pl.Float64})
        )
        best = start.with_columns(pl.lit(0, pl.Int32).alias("hops"))
        frontier = start
        for hop in range(1, hops + 1):
            if frontier.height == 0:
                break
            reached = self._step(frontier)
            improved = (
                reached.join(best.select("id", pl.col("score").alias("__old")), on="id", how="left")
                .filter(pl.col("__old").is_null() | (pl.col("score") > pl.col("__old")))
                .select("id", "score")
            )
            if improved.height == 0:
                break
            best = pl.concat(
                [
                    best.join(improved.select("id"), on="id", how="anti"),
                    improved.with_columns(pl.lit(hop, pl.Int32).alias("hops")),
                ]
            )
            frontier = improved
        best = best.sort(["score", "id"], descending=[True, False])
        return best if limit is None else best.head(limit)


# ---------------------------------------------------------------------------
# temporal


class TemporalBackend:
    """Hot, warm and cold tiers of items by age.

    The age of an item is ``as_of - created_at`` in seconds (UTC). An item is

    - ``hot`` when ``0 <= age < hot_seconds``,
    - ``warm`` when ``hot_seconds <= age < warm_seconds``,
    - ``cold`` when ``age >= warm_seconds``;

    an item created after ``as_of`` is in no tier.

    Parameters
    ----------
    store
        The items.
    as_of
        The UTC reference time; ``None`` takes the latest ``created_at`` of
        the store (deterministic). A request's ``as_of`` overrides it.
    hot_seconds
        Upper bound of the hot tier, in seconds; default 1 day.
    warm_seconds
        Upper bound of the warm tier, in seconds; default 30 days.

    Raises
    ------
    StrategyError
        If the thresholds are not ``0 < hot_seconds <= warm_seconds`` (finite)
        or ``as_of`` is naive.

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> store = ItemStore(CognitionFrame([
    ...     {"id": "old", "role": "user", "text": "a", "created_at": "2024-01-01T00:00:00Z"},
    ...     {"id": "mid", "role": "user", "text": "b", "created_at": "2024-03-01T00:00:00Z"},
    ...     {"id": "new", "role": "user", "text": "c", "created_at": "2024-03-20T00:00:00Z"}]))
    >>> TemporalBackend(store).tiers().select("id", "tier").rows()
    [('new', 'hot'), ('mid', 'warm'), ('old', 'cold')]
    """

    kind = "temporal"

    def __init__(
        self,
        store: ItemStore,
        *,
        as_of: datetime | None = None,
        hot_seconds: float = DEFAULT_HOT_SECONDS,
        warm_seconds: float = DEFAULT_WARM_SECONDS,
    ) -> None:
        positive_seconds(hot_seconds, "hot_seconds")
        positive_seconds(warm_seconds, "warm_seconds")
        if hot_seconds > warm_seconds:
            raise StrategyError(
                f"hot_seconds ({hot_seconds}) must not exceed warm_seconds ({warm_seconds})"
            )
        self.store = store
        self.as_of = _utc(as_of, "as_of")
        self.hot_seconds = float(hot_seconds)
        self.warm_seconds = float(warm_seconds)

    def reference(self, as_of: datetime | None = None) -> datetime | None:
        """The reference time: ``as_of``, else the backend's, else the latest ``created_at``."""
        given = _utc(as_of, "as_of")
        if given is not None:
            return given
        if self.as_of is not None:
            return self.as_of
        latest = self.store.table.get_column("created_at").max()
        return latest if isinstance(latest, datetime) else None

    def tiers(self, as_of: datetime | None = None) -> pl.DataFrame:
        """Every item in a tier, with its age.

        Returns
        -------
        polars.DataFrame
            ``id``, ``tier`` (``hot``, ``warm`` or ``cold``), ``age_seconds``
            (Float64), ordered by age ascending (newest first), then id.
        """
        ref = self.reference(as_of)
        if ref is None:
            return pl.DataFrame(
                schema={"id": pl.String, "tier": pl.String, "age_seconds": pl.Float64}
            )
        age = (
            pl.lit(ref).cast(pl.Datetime("us", "UTC")) - pl.col("created_at")
        ).dt.total_microseconds().cast(pl.Float64) / 1e6
        return (
            self.store.table.select("id", age.alias("age_seconds"))
            .filter(pl.col("age_seconds") >= 0)
            .select(
                "id",
                pl.when(pl.col("age_seconds") < self.hot_seconds)
                .then(pl.lit("hot"))
                .when(pl.col("age_seconds") < self.warm_seconds)
                .then(pl.lit("warm"))
                .otherwise(pl.lit("cold"))
                .alias("tier"),
                "age_seconds",
            )
            .sort(["age_seconds", "id"])
        )

    def query_by_tier(self, tiers: Iterable[str], *, as_of: datetime | None = None) -> pl.DataFrame:
        """The items of the given tiers (see :meth:`tiers` for the columns and order).

        Raises
        ------
        StrategyError
            On an unknown tier name.
        """
        wanted = list(tiers)
        unknown = sorted(set(wanted) - set(TIERS))
        if unknown:
            raise StrategyError(f"unknown temporal tiers {unknown}; known: {list(TIERS)}")
        return self.tiers(as_of).filter(pl.col("tier").is_in(wanted))

    def recency(self, ids: pl.DataFrame, *, as_of: datetime | None = None) -> pl.DataFrame:
        """Score the items of ``ids`` (column ``id``) by recency: ``2^(-age / warm_seconds)``.

        Returns
        -------
        polars.DataFrame
            Hits (:data:`HITS_SCHEMA`) for the ids in a tier, best first.
        """
        scored = self.tiers(as_of).join(ids.select("id"), on="id", how="semi")
        return order_hits(
            scored.select(
                "id",
                (-math.log(2.0) * pl.col("age_seconds") / self.warm_seconds).exp().alias("score"),
            )
        )


# ---------------------------------------------------------------------------
# the set of backends


@dataclasses.dataclass(frozen=True, slots=True)
class Backends:
    """The backends available to strategies; a missing backend is ``None``.

    Parameters
    ----------
    store
        The items every backend reads.
    text, vector, graph, temporal
        The backends, or ``None`` when unavailable.

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> frame = CognitionFrame([{"id": "a", "role": "user", "text": "hello there"}])
    >>> from cognoxium.retrieval.embeddings import EmbeddingCache
    >>> backends = Backends.from_frame(
    ...     frame, vector="local_hash", embedding_cache=EmbeddingCache(persist=False))
    >>> backends.available
    ('text', 'vector', 'graph', 'temporal')
    >>> backends.without("vector", "graph").available
    ('text', 'temporal')
    """

    store: ItemStore
    text: TextBackend | None = None
    vector: VectorBackend | None = None
    graph: GraphBackend | None = None
    temporal: TemporalBackend | None = None

    @classmethod
    def from_frame(
        cls,
        items: CognitionFrame | pl.DataFrame,
        *,
        text: bool = True,
        vector: bool | str | Embedder = True,
        graph: bool = True,
        temporal: bool = True,
        edge_weights: EdgeWeights | None = None,
        embedding_cache: EmbeddingCache | None = None,
        as_of: datetime | None = None,
        hot_seconds: float = DEFAULT_HOT_SECONDS,
        warm_seconds: float = DEFAULT_WARM_SECONDS,
    ) -> Backends:
        """Build every requested backend over ``items``.

        Parameters
        ----------
        items
            A frame of context items (canonical columns).
        text, graph, temporal
            Build that backend.
        vector
            ``True`` for :data:`DEFAULT_EMBEDDER`, an embedder or its name,
            or ``False`` for no vector backend.
        edge_weights
            Graph edge weights (:class:`EdgeWeights`).
        embedding_cache
            The vector backend's embedding cache (see :class:`VectorBackend`).
        as_of, hot_seconds, warm_seconds
            Temporal settings (:class:`TemporalBackend`), in UTC and seconds.

        Returns
        -------
        Backends
            The store and the backends; indexes and embeddings are built now.
        """
        if isinstance(items, pl.DataFrame) and not set(COLUMNS) <= set(items.columns):
            items = conform(items)
        store = ItemStore(items)
        embedder: Embedder | str | None
        if vector is True:
            embedder = DEFAULT_EMBEDDER
        elif vector is False:
            embedder = None
        else:
            embedder = vector
        return cls(
            store=store,
            text=TextBackend(store) if text else None,
            vector=(
                VectorBackend(store, embedder, cache=embedding_cache)
                if embedder is not None
                else None
            ),
            graph=GraphBackend(store, edge_weights) if graph else None,
            temporal=(
                TemporalBackend(
                    store, as_of=as_of, hot_seconds=hot_seconds, warm_seconds=warm_seconds
                )
                if temporal
                else None
            ),
        )

    @property
    def available(self) -> tuple[str, ...]:
        """The kinds of the backends present, in :data:`BACKEND_KINDS` order."""
        return tuple(kind for kind in BACKEND_KINDS if getattr(self, kind) is not None)

    def missing(self, capabilities: StrategyCapabilities) -> tuple[str, ...]:
        """The backends ``capabilities`` requires that are not present."""
        return tuple(kind for kind in capabilities.backends if getattr(self, kind) is None)

    def supports(self, capabilities: StrategyCapabilities) -> bool:
        """True when every backend ``capabilities`` requires is present."""
        return not self.missing(capabilities)

    def without(self, *kinds: str) -> Backends:
        """A copy with the given backends removed (``"text"``, ``"vector"``, ...).

        Raises
        ------
        StrategyError
            On an unknown backend kind.
        """
        unknown = sorted(set(kinds) - set(BACKEND_KINDS))
        if unknown:
            raise StrategyError(f"unknown backend kinds {unknown}; known: {list(BACKEND_KINDS)}")
        changes: dict[str, Any] = dict.fromkeys(kinds)
        return dataclasses.replace(self, **changes)
