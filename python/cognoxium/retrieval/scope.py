"""Hybrid retrieval over a scope of items, with neighbour context and lineage expansion.

A :class:`ScopeRetriever` is built once for a scope (the items a request may
pack) and scores it against many queries. It fuses, with reciprocal rank
fusion (Cormack, Clarke and Büttcher, SIGIR 2009), up to four ranked lists:

``bm25``
    Okapi BM25 of each item's packed text (:func:`cognoxium.retrieval.ranking.bm25_scores`).
``embedding``
    Cosine similarity of each item's packed text with the query, by a real
    sentence-embedding model (:mod:`cognoxium.retrieval.embeddings`).
``window``
    Cosine similarity of each item *together with the item before it* in the
    scope (a two-item sliding window): a reply is often only understandable
    with the turn it answers. The window's vector is made from the two
    items' vectors (:func:`window_vectors`), with no second run of the model.
``lineage``
    Lineage expansion: derived items (observations, summaries) whose
    ``parents`` include scope items, looked up in a lineage frame (often the
    whole store, of which the scope is a part), are embedded too, and each
    scope item gets the best cosine of its derived items; items without
    derived items are absent from this list (they gain nothing from it).

A method names the lists it fuses (:data:`RETRIEVAL_METHODS`): ``hybrid``
fuses ``bm25`` and ``embedding``, ``hybrid-lineage`` all four.

Optionally, neighbour expansion then lets each item inherit a share of its
adjacent items' fused score: ``max(s_i, λ·s_{i-1}, λ·s_{i+1})``.

Scores are float64 and higher is better; ties in every list are broken by
id, so the same scope, query and settings give the same scores.

Every list reads at most the first
:data:`~cognoxium.retrieval.embeddings.MAX_READ_CHARS` characters of each
text, so a huge item costs what an ordinary one does; a text of up to that
many characters is read whole.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from cognoxium.exceptions import PlanError
from cognoxium.items.schema import packed_text_expr
from cognoxium.retrieval.embeddings import (
    MAX_READ_CHARS,
    Embedder,
    EmbeddingCache,
    default_cache,
    get_embedder,
    read_prefix_expr,
)
from cognoxium.retrieval.fusion import rrf_scores
from cognoxium.retrieval.ranking import bm25_scores, corpus_key

__all__ = [
    "RETRIEVAL_LISTS",
    "RETRIEVAL_METHODS",
    "RRF_K",
    "RetrievalSettings",
    "ScopeRetriever",
    "derived_items",
    "frame_key",
    "read_texts",
    "scope_retriever",
    "window_texts",
    "window_vectors",
]

RETRIEVAL_LISTS: Final[tuple[str, ...]] = ("bm25", "embedding", "window", "lineage")
"""The ranked lists a :class:`ScopeRetriever` can fuse."""

_SCORE_DECIMALS: Final = 6

WINDOW_WEIGHT_CHARS: Final = 1024
"""The most characters an item weighs in a window's vector: about the 256 word pieces
MiniLM reads of a text (:func:`window_vectors`)."""


RETRIEVAL_METHODS: Final[dict[str, tuple[str, ...]]] = {
    "hybrid": ("bm25", "embedding"),
    "hybrid-lineage": RETRIEVAL_LISTS,
}
"""The ranked lists each fused retrieval method fuses, in this order."""

RRF_K: Final[dict[str, float]] = {
    "hybrid": 5.0,
    "hybrid-lineage": 10.0,
}
"""The reciprocal rank fusion constant ``k`` of each fused retrieval method.

Each is the k of highest mean evidence recall (categories 1-4, at 1,024 and
2,048 tokens) on the LoCoMo conversations conv-26 and conv-30 only (the
tuning split of :func:`cognoxium.app.locomo.run_locomo`; the other five
stay held out), among k in {5, 10, 20, 30, 60}:

======  =====================  =====================
k       hybrid (1,024 / 2,048)  hybrid-lineage
======  =====================  =====================
5       0.750 / 0.829          0.828 / 0.899
10      0.745 / 0.831          0.835 / 0.903
20      0.745 / 0.827          0.817 / 0.909
30      0.748 / 0.829          0.816 / 0.905
60      0.734 / 0.828          0.789 / 0.886
======  =====================  =====================

A small k favours the top of each list. For ``hybrid`` the constants 5 to
30 lie within 0.3 points of each other; 60 (Cormack et al.'s) is lowest.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrievalSettings:
    """How a fused retrieval method embeds and fuses.

    Parameters
    ----------
    model
        Embedding model name for :func:`cognoxium.retrieval.embeddings.get_embedder`.
    rrf_k
        The reciprocal rank fusion constant (>= 0); small values favour the
        top of each list. ``None`` means the method's own constant
        (:data:`RRF_K`).
    neighbours
        Neighbour expansion weight ``λ`` in [0, 1]; 0 turns it off.
    ranker
        The learned ranker's model file (``rank("learned")``); ``None`` for
        the shipped model.

    Raises
    ------
    PlanError
        On a setting out of range.

    Examples
    --------
    >>> RetrievalSettings(model="local_hash").fusion_k("hybrid-lineage")
    10.0
    >>> RetrievalSettings(rrf_k=30).fusion_k("hybrid")
    30.0
    """

    model: str = "minilm"
    rrf_k: float | None = None
    neighbours: float = 0.0
    ranker: str | None = None

    def __post_init__(self) -> None:
        if self.rrf_k is not None and not (
            isinstance(self.rrf_k, int | float)
            and not isinstance(self.rrf_k, bool)
            and 0 <= self.rrf_k < float("inf")
        ):
            raise PlanError(f"rrf_k must be a finite number >= 0, got {self.rrf_k!r}")
        if not (
            isinstance(self.neighbours, int | float)
            and not isinstance(self.neighbours, bool)
            and 0.0 <= self.neighbours <= 1.0
        ):
            raise PlanError(f"neighbours must be in [0, 1], got {self.neighbours!r}")

    def fusion_k(self, method: str) -> float:
        """The reciprocal rank fusion constant used for ``method``.

        Raises
        ------
        PlanError
            If ``method`` is not one of :data:`RETRIEVAL_METHODS`.
        """
        if method not in RRF_K:
            raise PlanError(f"unknown retrieval method {method!r}; use one of {list(RRF_K)}")
        return float(self.rrf_k) if self.rrf_k is not None else RRF_K[method]


def derived_items(store: pl.DataFrame, scope_ids: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Items of ``store`` outside the scope derived from scope items, and their links.

    Parameters
    ----------
    store
        Items of the canonical schema (``id``, ``parents`` and the packed-text
        columns are read), usually the whole store of which the scope is a
        part.
    scope_ids
        The ids of the scope, ``(n,)``.

    Returns
    -------
    tuple of polars.DataFrame
        The derived items (store rows not in the scope with at least one
        parent in it, in store order), and the links: columns
        ``derived`` (row index into the derived items) and ``position`` (row
        index into the scope), one row per (derived item, scope parent),
        sorted.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> store = records_to_frame([
    ...     {"id": "t1", "role": "user", "text": "I adopted a cat."},
    ...     {"id": "t2", "role": "assistant", "text": "Lovely!"},
    ...     {"id": "o1", "role": "memory", "text": "Ann has a cat.", "parents": ["t1"]},
    ... ])
    >>> derived, links = derived_items(store, pl.Series(["t1", "t2"]))
    >>> derived.get_column("id").to_list(), links.rows()
    (['o1'], [(0, 0)])
    """
    positions = pl.DataFrame({"parent": scope_ids.cast(pl.String)}).with_row_index(
        "position", offset=0
    )
    outside = store.filter(~pl.col("id").is_in(scope_ids.cast(pl.String).implode()))
    edges = (
        outside.select("id", "parents")
        .with_row_index("row")
        .explode("parents", empty_as_null=False)
        .rename({"parents": "parent"})
        .join(positions, on="parent", how="inner")
    )
    rows = edges.get_column("row").unique().sort()
    derived = outside.with_row_index("row").filter(pl.col("row").is_in(rows.implode()))
    renumber = derived.select("row").with_row_index("derived")
    links = (
        edges.join(renumber, on="row", how="inner")
        .select(pl.col("derived").cast(pl.Int64), pl.col("position").cast(pl.Int64))
        .unique()
        .sort("derived", "position")
    )
    return derived.drop("row"), links


def read_texts(
    frame: pl.DataFrame, key: tuple[str, ...]
) -> tuple[pl.Series, tuple[str | int, ...]]:
    """The packed texts ranking reads of ``frame``'s rows, and their BM25 cache key.

    Parameters
    ----------
    frame
        Rows with the packed-text columns (see
        :func:`cognoxium.items.schema.packed_text_expr`), ``n`` of them.
    key
        The cache key of the rows' whole texts (such as
        :func:`~cognoxium.retrieval.ranking.corpus_key` of their content hashes).

    Returns
    -------
    texts : polars.Series
        ``(n,)`` String: each text's first
        :data:`~cognoxium.retrieval.embeddings.MAX_READ_CHARS` characters.
    key : tuple
        ``key`` itself when no text was cut, else ``key`` marked with the
        limit, so that a cut corpus never shares a cache entry with the
        whole one.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> rows = records_to_frame([{"id": "a", "role": "user", "text": "hello"}])
    >>> texts, key = read_texts(rows, ("content_hash", "k"))
    >>> texts.to_list(), key
    (['hello'], ('content_hash', 'k'))
    """
    whole = packed_text_expr()
    read = frame.select(
        read_prefix_expr(whole).alias("text"),
        (whole.str.len_chars() > MAX_READ_CHARS).any().alias("cut"),
    )
    texts = read.get_column("text")
    cut = read.height > 0 and bool(read.get_column("cut")[0])
    return texts, (("read", MAX_READ_CHARS, *key) if cut else key)


def window_texts(texts: pl.Series) -> pl.Series:
    r"""Each text joined, after a newline, to the text before it (the first alone).

    Parameters
    ----------
    texts
        ``(n,)`` String.

    Returns
    -------
    polars.Series
        ``(n,)`` String named ``window``: a reply read with the turn it answers.

    Examples
    --------
    >>> window_texts(pl.Series(["Hi", "Where to?"])).to_list()
    ['Hi', 'Hi\nWhere to?']
    """
    previous = texts.shift(1)
    joined = pl.concat_str([pl.col("previous"), pl.col("text")], separator="\n")
    return (
        pl.DataFrame({"previous": previous, "text": texts})
        .select(pl.when(pl.col("previous").is_null()).then(pl.col("text")).otherwise(joined))
        .to_series()
        .alias("window")
    )


def window_vectors(vectors: npt.NDArray[np.float32], texts: pl.Series) -> npt.NDArray[np.float32]:
    """Each item's vector read with the one before it: the vector of a two-item window.

    A sentence embedding mean-pools its text's token vectors, so the vector
    of two texts read together is close to the mean of theirs, each weighted
    by its length (Reimers and Gurevych, *Sentence-BERT*, EMNLP 2019, on mean
    pooling). The window of item ``i`` is ``w[i-1] · v[i-1] + w[i] · v[i]``,
    L2-normalised, with ``w`` each text's characters, at most
    :data:`WINDOW_WEIGHT_CHARS`; the first item's window is its own vector.
    Made from vectors already computed, it costs no run of the model (the
    model read of the joined text cost twice the tokens of the items, for
    the same evidence recall on LoCoMo: ``benchmarks/results/learned.md``).

    Parameters
    ----------
    vectors
        ``(n, d)`` float32, the items' L2-normalised vectors, in scope order.
    texts
        ``(n,)`` String, the texts they embed (null weighs 0).

    Returns
    -------
    numpy.ndarray
        ``(n, d)`` float32, rows L2-normalised (a zero row where both
        items' vectors are zero).

    Examples
    --------
    >>> v = np.array([[1, 0], [0, 1], [1, 0]], dtype=np.float32)
    >>> windows = window_vectors(v, pl.Series(["Hi", "Where to?", "Lyon"]))
    >>> np.round(windows.astype(np.float64), 3).tolist()
    [[1.0, 0.0], [0.217, 0.976], [0.406, 0.914]]
    """
    weights = texts.str.len_chars().fill_null(0).clip(upper_bound=WINDOW_WEIGHT_CHARS)
    weighted = vectors * weights.to_numpy().astype(np.float32)[:, None]
    windows = weighted.copy()
    windows[1:] += weighted[:-1]
    norms = np.linalg.norm(windows, axis=1, keepdims=True)
    out: npt.NDArray[np.float32] = np.divide(
        windows, norms, out=np.zeros_like(windows), where=norms > 0
    )
    return out


class ScopeRetriever:
    """Scores one scope of items against queries by a fused retrieval method.

    Parameters
    ----------
    scope
        The scope's items, canonical schema, in the order neighbour windows
        follow (``n`` rows).
    method
        One of :data:`RETRIEVAL_METHODS`: the lists it fuses.
    settings
        The model and constants (see :class:`RetrievalSettings`).
    lineage
        The items in which derived items of the scope are looked up (see
        :func:`derived_items`); needed for the ``lineage`` list of
        ``hybrid-lineage``.
    embedder
        An embedder to use instead of ``settings.model``.
    cache
        Embedding cache; defaults to :func:`cognoxium.retrieval.embeddings.default_cache`.

    Raises
    ------
    PlanError
        On an unknown method, or ``hybrid-lineage`` without lineage items.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> store = records_to_frame([
    ...     {"id": "t1", "role": "user", "text": "We moved to Lyon last spring."},
    ...     {"id": "t2", "role": "assistant", "text": "How do you like it?"},
    ...     {"id": "t3", "role": "user", "text": "The bakery downstairs is great."},
    ...     {"id": "o1", "role": "memory", "text": "Ann lives in Lyon.", "parents": ["t1"]},
    ... ])
    >>> scope = store.filter(pl.col("role") != "memory")
    >>> retriever = ScopeRetriever(
    ...     scope, "hybrid-lineage", RetrievalSettings(model="local_hash"), lineage=store,
    ...     cache=EmbeddingCache(persist=False))
    >>> scores = retriever.scores("Where does Ann live? Lyon")
    >>> int(np.argmax(scores))
    0
    """

    def __init__(
        self,
        scope: pl.DataFrame,
        method: str = "hybrid-lineage",
        settings: RetrievalSettings | None = None,
        *,
        lineage: pl.DataFrame | None = None,
        embedder: Embedder | None = None,
        cache: EmbeddingCache | None = None,
    ) -> None:
        if method not in RETRIEVAL_METHODS:
            raise PlanError(
                f"unknown retrieval method {method!r}; use one of {list(RETRIEVAL_METHODS)}"
            )
        if "lineage" in RETRIEVAL_METHODS[method] and lineage is None:
            raise PlanError(f"{method!r} needs the lineage items in which to find derived items")
        self.method = method
        self.settings = settings if settings is not None else RetrievalSettings()
        self.lists = RETRIEVAL_METHODS[method]
        self.ids = scope.get_column("id").cast(pl.String)
        self.n = scope.height
        self._cache = cache if cache is not None else default_cache()
        whole_key = corpus_key(scope.get_column("content_hash"))
        self._texts, self._bm25_key = read_texts(scope, whole_key)
        self._embedder = embedder if embedder is not None else get_embedder(self.settings.model)
        self._matrices = self._embed(scope, lineage)
        self._queries: dict[str, npt.NDArray[np.float32]] = {}

    def _embed(
        self, scope: pl.DataFrame, lineage: pl.DataFrame | None
    ) -> dict[str, npt.NDArray[np.float32]]:
        """The embedding matrix of each dense list; sets the lineage links."""
        hashes = scope.get_column("content_hash").cast(pl.String)
        model, out = self._embedder, {}
        out["embedding"] = self._cache.embed(model, self._texts, hashes)
        if "window" in self.lists:
            out["window"] = window_vectors(out["embedding"], self._texts)
        self._links: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None
        self.derived: pl.DataFrame | None = None
        if "lineage" in self.lists:
            assert lineage is not None
            derived, links = derived_items(lineage, self.ids)
            self.derived = derived
            derived_texts = derived.select(read_prefix_expr(packed_text_expr())).to_series()
            out["lineage"] = self._cache.embed(
                model, derived_texts, derived.get_column("content_hash").cast(pl.String)
            )
            self._links = (
                links.get_column("derived").to_numpy().astype(np.int64),
                links.get_column("position").to_numpy().astype(np.int64),
            )
        return out

    def embed_queries(self, queries: Iterable[str]) -> None:
        """Embed the ``queries`` not embedded yet in one call, for the scores to come.

        A query's vector is the same embedded alone or with others (see
        :class:`~cognoxium.retrieval.embeddings.MiniLMEmbedder`), so the
        scores do not change; a batch of many queries over one scope costs
        one run of the model instead of one per query.

        Parameters
        ----------
        queries
            Query texts, in any order; repeats are embedded once.
        """
        todo = [q for q in dict.fromkeys(queries) if q not in self._queries]
        if todo:
            vectors = self._embedder.embed(todo).astype(np.float32, copy=False)
            self._queries.update(zip(todo, vectors, strict=True))

    def _query_vector(self, query: str) -> npt.NDArray[np.float32]:
        vector = self._queries.get(query)
        if vector is None:
            vector = self._embedder.vector(query).astype(np.float32, copy=False)
            self._queries[query] = vector
        return vector

    def list_scores(self, query: str) -> dict[str, npt.NDArray[np.float64]]:
        """The score of every scope item in each list, before fusion.

        Parameters
        ----------
        query
            The query text.

        Returns
        -------
        dict
            List name to ``float64`` scores of shape ``(n,)``. Cosines are
            rounded to 6 decimals so that float noise cannot reorder ties.
            In ``lineage`` an item without derived items scores NaN.
        """
        out: dict[str, npt.NDArray[np.float64]] = {}
        for name in self.lists:
            if name == "bm25":
                out[name] = bm25_scores(self._texts, query, cache_key=self._bm25_key)
                continue
            cosine = self.cosines(query, name)
            out[name] = cosine if name != "lineage" else self._best_derived(cosine)
        return out

    def cosines(self, query: str, name: str) -> npt.NDArray[np.float64]:
        """The cosine of each row that list ``name`` embeds with ``query``, rounded to 6 decimals.

        Parameters
        ----------
        query
            The query text.
        name
            An embedding list of the method: ``"embedding"`` (the items),
            ``"window"`` (each item read with the one before it) or
            ``"lineage"`` (the derived items).

        Returns
        -------
        numpy.ndarray
            ``float64``, shape ``(n,)``, or ``(len(derived),)`` for ``"lineage"``.

        Raises
        ------
        PlanError
            If the method has no embedding list ``name``.
        """
        matrix = self._matrices.get(name)
        if matrix is None:
            raise PlanError(f"{self.method!r} has no embedding list {name!r}")
        raw = (matrix @ self._query_vector(query)).astype(np.float64)
        return np.asarray(np.round(raw, _SCORE_DECIMALS), dtype=np.float64)

    @property
    def links(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """The lineage links ``(derived, position)``, int64 arrays of equal length.

        Row indices into :attr:`derived` and into the scope, one pair per
        (derived item, scope parent), sorted; ``None`` for a method without
        the ``lineage`` list.
        """
        return self._links

    def derived_cosines(self, query: str) -> npt.NDArray[np.float64]:
        """The cosine of each derived item with ``query``, rounded to 6 decimals.

        Returns
        -------
        numpy.ndarray
            ``float64``, shape ``(len(derived),)``, aligned with :attr:`derived`.

        Raises
        ------
        PlanError
            For a method without the ``lineage`` list.
        """
        if "lineage" not in self._matrices:
            raise PlanError(f"{self.method!r} does not embed derived items")
        return self.cosines(query, "lineage")

    def _best_derived(self, cosine: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Each scope item's best cosine among its derived items, NaN without one."""
        best = np.full(self.n, -np.inf)
        assert self._links is not None
        source, position = self._links
        np.maximum.at(best, position, cosine[source])
        return np.where(np.isfinite(best), best, np.nan)

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """Fused scores of the scope for ``query``.

        Each list contributes ``1 / (k + r)`` for an item at 1-based rank
        ``r`` of that list (ties broken by id; items absent from a list
        contribute nothing), ``k`` = :meth:`RetrievalSettings.fusion_k`; then
        neighbour expansion, if set.

        Parameters
        ----------
        query
            The query text.

        Returns
        -------
        numpy.ndarray
            ``float64``, shape ``(n,)``, aligned with the scope's rows,
            higher is better; all zeros for an empty scope.
        """
        return self.fuse(self.list_scores(query))

    def fuse(self, lists: dict[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
        """Fused scores from the per-list scores :meth:`list_scores` returns.

        Parameters
        ----------
        lists
            List name to scores of shape ``(n,)`` (NaN: absent from the list).

        Returns
        -------
        numpy.ndarray
            As :meth:`scores`.
        """
        if self.n == 0:
            return np.zeros(0, dtype=np.float64)
        k = self.settings.fusion_k(self.method)
        columns = list(lists.values())
        contributions = np.zeros((len(columns), self.n), dtype=np.float64)
        for row, column in zip(contributions, columns, strict=True):
            present = ~np.isnan(column)
            if present.all():
                row[:] = rrf_scores([column], self.ids, k=k)
            elif present.any():
                mask = pl.Series(present)
                row[present] = rrf_scores([column[present]], self.ids.filter(mask), k=k)
        # Summed in sorted order, so the result does not depend on the order of the lists.
        contributions.sort(axis=0)
        fused: npt.NDArray[np.float64] = contributions.sum(axis=0)
        weight = float(self.settings.neighbours)
        if weight > 0 and self.n > 1:
            spread = fused.copy()
            spread[1:] = np.maximum(spread[1:], weight * fused[:-1])
            spread[:-1] = np.maximum(spread[:-1], weight * fused[1:])
            fused = spread
        return fused


_RETRIEVERS: OrderedDict[tuple[object, ...], ScopeRetriever] = OrderedDict()
_RETRIEVERS_MAX: Final = 16


def scope_retriever(
    scope: pl.DataFrame,
    method: str,
    settings: RetrievalSettings,
    *,
    lineage: pl.DataFrame | Callable[[], pl.DataFrame] | None = None,
    lineage_key: Hashable | None = None,
) -> ScopeRetriever:
    """A :class:`ScopeRetriever` of ``scope``, reused while the same scope comes back.

    Batch packing ranks many requests over one scope; the retriever (its
    embeddings, windows and lineage links) is built once and kept in a small
    least-recently-used cache (16 retrievers, one process) keyed by the
    scope's ordered ids and content hashes, the lineage items, the method and
    the settings, so a changed scope or lineage builds a new one.

    Parameters
    ----------
    scope, method, settings
        As for :class:`ScopeRetriever`.
    lineage
        The lineage items, or a function returning them (called only when a
        retriever is built).
    lineage_key
        A hashable that identifies the lineage items (such as the plan that
        produces them); ``None`` keys them by their ids, parents and content
        hashes.

    Returns
    -------
    ScopeRetriever
        Built with the default embedding cache.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> scope = records_to_frame([{"id": "a", "role": "user", "text": "hello"}])
    >>> one = scope_retriever(scope, "hybrid", RetrievalSettings(model="local_hash"))
    >>> one is scope_retriever(scope, "hybrid", RetrievalSettings(model="local_hash"))
    True
    """
    key: tuple[object, ...] = (method, settings, frame_key(scope, ("id", "content_hash")))
    uses_lineage = "lineage" in RETRIEVAL_METHODS.get(method, ())
    if uses_lineage and lineage is not None:
        if lineage_key is None:
            lineage = lineage() if callable(lineage) else lineage
            lineage_key = frame_key(lineage, ("id", "content_hash", "parents"))
        key += (lineage_key,)
    found = _RETRIEVERS.get(key)
    if found is not None:
        _RETRIEVERS.move_to_end(key)
        return found
    items = lineage() if callable(lineage) else lineage
    built = ScopeRetriever(scope, method, settings, lineage=items if uses_lineage else None)
    _RETRIEVERS[key] = built
    if len(_RETRIEVERS) > _RETRIEVERS_MAX:
        _RETRIEVERS.popitem(last=False)
    return built


def frame_key(frame: pl.DataFrame, columns: tuple[str, ...]) -> tuple[int, str]:
    """A cache key of a frame: its height and a sha256 of ``columns``, in row order.

    Parameters
    ----------
    frame
        The rows.
    columns
        Names of String columns, or of the ``parents`` list column.

    Returns
    -------
    tuple
        ``(height, sha256 hex digest)``; equal frames give equal keys.

    Examples
    --------
    >>> a = pl.DataFrame({"id": ["x", "y"]})
    >>> frame_key(a, ("id",)) == frame_key(a.reverse().reverse(), ("id",))
    True
    >>> frame_key(a, ("id",)) == frame_key(a.reverse(), ("id",))
    False
    """
    digest = hashlib.sha256()
    for name in columns:
        column = frame.get_column(name)
        if name == "parents":
            column = column.list.join("\x1f")
        digest.update(column.cast(pl.String).fill_null("").str.join("\n").item().encode())
        digest.update(b"\x00")
    return frame.height, digest.hexdigest()
