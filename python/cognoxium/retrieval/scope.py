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
    scope (a two-item sliding window, joined by a newline): a reply is often
    only understandable with the turn it answers.
``lineage``
    Lineage expansion: derived items outside the scope (observations,
    summaries) whose ``parents`` include scope items are embedded too, and
    each scope item gets the best cosine of its derived items; items without
    derived items are absent from this list (they gain nothing from it).

Optionally, neighbour expansion then lets each item inherit a share of its
adjacent items' fused score: ``max(s_i, λ·s_{i-1}, λ·s_{i+1})``.

Scores are float64 and higher is better; ties in every list are broken by
id, so the same scope, query and settings give the same scores.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from cognoxium.exceptions import PlanError
from cognoxium.items.schema import packed_text_expr
from cognoxium.retrieval.embeddings import Embedder, EmbeddingCache, default_cache, get_embedder
from cognoxium.retrieval.fusion import rrf_scores
from cognoxium.retrieval.ranking import bm25_scores, corpus_key

__all__ = [
    "RETRIEVAL_LISTS",
    "RetrievalSettings",
    "ScopeRetriever",
    "derived_items",
]

RETRIEVAL_LISTS: Final[tuple[str, ...]] = ("bm25", "embedding", "window", "lineage")
"""The ranked lists a :class:`ScopeRetriever` can fuse."""

_SCORE_DECIMALS: Final = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrievalSettings:
    """What a :class:`ScopeRetriever` fuses, and how.

    Parameters
    ----------
    lists
        The ranked lists to fuse, a non-empty subset of :data:`RETRIEVAL_LISTS`.
    model
        Embedding model name for :func:`cognoxium.retrieval.embeddings.get_embedder`.
    rrf_k
        The reciprocal rank fusion constant (>= 0); small values favour the
        top of each list.
    neighbours
        Neighbour expansion weight ``λ`` in [0, 1]; 0 turns it off.

    Raises
    ------
    PlanError
        On an unknown or empty list selection, or a setting out of range.

    Examples
    --------
    >>> RetrievalSettings(lists=("bm25", "embedding"), model="local_hash").lists
    ('bm25', 'embedding')
    """

    lists: tuple[str, ...] = RETRIEVAL_LISTS
    model: str = "minilm"
    rrf_k: float = 10.0
    neighbours: float = 0.0

    def __post_init__(self) -> None:
        unknown = [name for name in self.lists if name not in RETRIEVAL_LISTS]
        if unknown or not self.lists or len(set(self.lists)) != len(self.lists):
            raise PlanError(
                f"retrieval lists must be distinct names from {list(RETRIEVAL_LISTS)}, "
                f"got {list(self.lists)}"
            )
        if not (isinstance(self.rrf_k, int | float) and 0 <= self.rrf_k < float("inf")):
            raise PlanError(f"rrf_k must be a finite number >= 0, got {self.rrf_k!r}")
        if not (isinstance(self.neighbours, int | float) and 0.0 <= self.neighbours <= 1.0):
            raise PlanError(f"neighbours must be in [0, 1], got {self.neighbours!r}")

    @property
    def uses_embeddings(self) -> bool:
        """Whether any list needs the embedding model."""
        return any(name != "bm25" for name in self.lists)


def derived_items(store: pl.DataFrame, scope_ids: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Items of ``store`` outside the scope derived from scope items, and their links.

    Parameters
    ----------
    store
        Items of the canonical schema (``id``, ``parents`` and the packed-text
        columns are read).
    scope_ids
        The ids of the scope, ``(n,)``.

    Returns
    -------
    tuple of polars.DataFrame
        The derived items (store rows not in the scope with at least one
        parent in it, in store order), and the links: columns ``derived``
        (row index into the derived items) and ``position`` (row index into
        the scope), one row per (derived item, scope parent), sorted.

    Examples
    --------
    >>> from cognoxium.items.schema import records_to_frame
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


def _window_texts(texts: pl.Series) -> pl.Series:
    previous = texts.shift(1)
    joined = pl.concat_str([pl.col("previous"), pl.col("text")], separator="\n")
    return (
        pl.DataFrame({"previous": previous, "text": texts})
        .select(pl.when(pl.col("previous").is_null()).then(pl.col("text")).otherwise(joined))
        .to_series()
        .alias("window")
    )


def _window_keys(hashes: pl.Series) -> list[str]:
    previous = hashes.shift(1).fill_null("").to_list()
    return [
        hashlib.sha256(f"window\x00{p}\x00{h}".encode()).hexdigest()
        for p, h in zip(previous, hashes.to_list(), strict=True)
    ]


class ScopeRetriever:
    """Scores one scope of items against queries by fused hybrid retrieval.

    Parameters
    ----------
    scope
        The scope's items, canonical schema, in the order neighbour windows
        follow (``n`` rows).
    settings
        The lists and constants (see :class:`RetrievalSettings`).
    derived
        Items derived from scope items, with ``links`` as returned by
        :func:`derived_items`; needed for the ``lineage`` list.
    embedder
        An embedder to use instead of ``settings.model``.
    cache
        Embedding cache; defaults to :func:`cognoxium.retrieval.embeddings.default_cache`.

    Raises
    ------
    PlanError
        If ``lineage`` is asked for without derived items and links.

    Examples
    --------
    >>> from cognoxium.items.schema import records_to_frame
    >>> store = records_to_frame([
    ...     {"id": "t1", "role": "user", "text": "We moved to Lyon last spring."},
    ...     {"id": "t2", "role": "assistant", "text": "How do you like it?"},
    ...     {"id": "t3", "role": "user", "text": "The bakery downstairs is great."},
    ...     {"id": "o1", "role": "memory", "text": "Ann lives in Lyon.", "parents": ["t1"]},
    ... ])
    >>> scope = store.filter(pl.col("role") != "memory")
    >>> derived, links = derived_items(store, scope.get_column("id"))
    >>> retriever = ScopeRetriever(
    ...     scope, RetrievalSettings(model="local_hash"), derived=derived, links=links,
    ...     cache=EmbeddingCache(persist=False))
    >>> scores = retriever.scores("Where does Ann live? Lyon")
    >>> int(np.argmax(scores))
    0
    """

    def __init__(
        self,
        scope: pl.DataFrame,
        settings: RetrievalSettings | None = None,
        *,
        derived: pl.DataFrame | None = None,
        links: pl.DataFrame | None = None,
        embedder: Embedder | None = None,
        cache: EmbeddingCache | None = None,
    ) -> None:
        self.settings = settings if settings is not None else RetrievalSettings()
        lists = self.settings.lists
        if "lineage" in lists and (derived is None or links is None):
            raise PlanError("the 'lineage' list needs derived items and their links")
        self.ids = scope.get_column("id").cast(pl.String)
        self.n = scope.height
        self._cache = cache if cache is not None else default_cache()
        self._embedder: Embedder | None = None
        texts = scope.select(packed_text_expr()).to_series()
        self._texts = texts
        self._bm25_key = corpus_key(scope.get_column("content_hash"))
        self._matrices: dict[str, npt.NDArray[np.float32]] = {}
        self._links: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None
        if self.settings.uses_embeddings:
            model = embedder if embedder is not None else get_embedder(self.settings.model)
            self._embedder = model
            hashes = scope.get_column("content_hash").cast(pl.String)
            if "embedding" in lists:
                self._matrices["embedding"] = self._cache.embed(model, texts, hashes)
            if "window" in lists:
                windows = _window_texts(texts)
                self._matrices["window"] = self._cache.embed(model, windows, _window_keys(hashes))
            if "lineage" in lists and derived is not None and links is not None:
                derived_texts = derived.select(packed_text_expr()).to_series()
                self._matrices["lineage"] = self._cache.embed(
                    model, derived_texts, derived.get_column("content_hash").cast(pl.String)
                )
                self._links = (
                    links.get_column("derived").to_numpy().astype(np.int64),
                    links.get_column("position").to_numpy().astype(np.int64),
                )
        self._queries: dict[str, npt.NDArray[np.float32]] = {}

    def _query_vector(self, query: str) -> npt.NDArray[np.float32]:
        vector = self._queries.get(query)
        if vector is None:
            assert self._embedder is not None
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
        for name in self.settings.lists:
            if name == "bm25":
                out[name] = bm25_scores(self._texts, query, cache_key=self._bm25_key)
                continue
            q = self._query_vector(query)
            raw = (self._matrices[name] @ q).astype(np.float64)
            cosine = np.asarray(np.round(raw, _SCORE_DECIMALS), dtype=np.float64)
            if name != "lineage":
                out[name] = cosine
                continue
            best = np.full(self.n, -np.inf)
            assert self._links is not None
            source, position = self._links
            np.maximum.at(best, position, cosine[source])
            out[name] = np.where(np.isfinite(best), best, np.nan)
        return out

    def scores(self, query: str) -> npt.NDArray[np.float64]:
        """Fused scores of the scope for ``query``.

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
        if self.n == 0:
            return np.zeros(0, dtype=np.float64)
        k = float(self.settings.rrf_k)
        columns = list(self.list_scores(query).values())
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
