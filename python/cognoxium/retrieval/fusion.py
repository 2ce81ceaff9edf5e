"""Rank fusion and diversity selection.

Fusion merges several ranked lists of the same documents (for example a BM25
list and an embedding list) into one:

- :func:`reciprocal_rank_fusion`: reciprocal rank fusion (RRF), which uses
  only each document's position in each list;
- :func:`weighted_score_fusion`: a weighted sum of min-max normalised scores
  (CombSUM over normalised scores);
- :func:`rrf_scores`: RRF over row-aligned score columns, as used by
  ``CognitionFrame.rank("hybrid", ...)``.

:func:`mmr` selects a diverse subset of documents with maximal marginal
relevance (MMR).

A ranked list is either a sequence of ``(id, score)`` pairs or a Polars
frame with an id column and a score column; higher scores rank first. Within
a list, equal scores are ordered by id (ascending), so every tie is broken
the same way wherever it occurs, and an id listed more than once counts once,
at its best position. A document missing from a list contributes nothing
from that list. Fused results are ordered by fused score (descending), then
id (ascending). Each document's contributions are summed in sorted order, so
the result does not depend on the order in which the lists are given.

Scores must be finite: a NaN, infinite or null score, or a null id, raises
:class:`~cognoxium.exceptions.RankError` naming the list and the id, because
a NaN has no place in an order and silently dropping or ranking it would
hide an upstream bug.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import polars as pl

from cognoxium.exceptions import RankError

__all__ = [
    "RankedList",
    "mmr",
    "reciprocal_rank_fusion",
    "rrf_scores",
    "weighted_score_fusion",
]

RankedList: TypeAlias = Sequence[tuple[Any, float]] | pl.DataFrame
"""A ranked list: ``(id, score)`` pairs, or a frame with id and score columns."""

RRF_K = 60.0
"""The RRF constant of Cormack, Clarke and Büttcher (2009)."""


def _check_weights(weights: Sequence[float] | None, n: int) -> list[float]:
    if weights is None:
        return [1.0] * n
    out = [float(w) for w in weights]
    if len(out) != n:
        raise RankError(f"got {len(out)} weights for {n} ranked lists; give one weight per list")
    for i, w in enumerate(out):
        if not math.isfinite(w) or w < 0:
            raise RankError(f"weight {i} must be finite and non-negative, got {w!r}")
    return out


def _as_frame(ranked: RankedList, index: int, id_column: str, score_column: str) -> pl.DataFrame:
    """One ranked list as a frame ``(id, score: Float64)``, validated."""
    if isinstance(ranked, pl.DataFrame):
        missing = [c for c in (id_column, score_column) if c not in ranked.columns]
        if missing:
            raise RankError(
                f"ranked list {index} has no column {missing[0]!r}; "
                f"its columns are {ranked.columns}"
            )
        frame = ranked.select(pl.col(id_column).alias("id"), pl.col(score_column).alias("score"))
    else:
        if isinstance(ranked, str | bytes):
            raise RankError(f"ranked list {index} must be (id, score) pairs, got a string")
        pairs = list(ranked)
        for pair in pairs:
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise RankError(f"ranked list {index} holds {pair!r}, not an (id, score) pair")
        frame = pl.DataFrame(
            {"id": [p[0] for p in pairs], "score": [p[1] for p in pairs]},
            schema_overrides={"score": pl.Float64} if not pairs else None,
            strict=False,
        )
    if not frame.schema["score"].is_numeric() and frame.schema["score"] != pl.Null:
        raise RankError(
            f"ranked list {index}: scores must be numbers, got {frame.schema['score']} values"
        )
    frame = frame.with_columns(pl.col("score").cast(pl.Float64))
    bad = frame.filter(pl.col("id").is_null())
    if bad.height:
        raise RankError(f"ranked list {index} has a null id")
    bad = frame.filter(pl.col("score").is_null() | ~pl.col("score").is_finite())
    if bad.height:
        row = bad.row(0, named=True)
        raise RankError(
            f"ranked list {index}: id {row['id']!r} has score {row['score']!r}; "
            "scores must be finite numbers (drop or replace NaN, infinite and null scores)"
        )
    return frame


def _stack(lists: Sequence[RankedList], id_column: str, score_column: str) -> pl.DataFrame:
    """All lists as one frame ``(list, id, score)``, ids cast to one dtype."""
    if isinstance(lists, pl.DataFrame):
        raise RankError("give a sequence of ranked lists, e.g. [frame], not a single frame")
    frames = [_as_frame(r, i, id_column, score_column) for i, r in enumerate(lists)]
    dtypes = {f.schema["id"] for f in frames} - {pl.Null()}
    if len(dtypes) > 1:
        found = ", ".join(sorted(str(d) for d in dtypes))
        raise RankError(f"ranked lists have ids of different types ({found}); use one id type")
    id_dtype = dtypes.pop() if dtypes else pl.String()
    return (
        pl.concat(
            [
                f.select(
                    pl.lit(i, pl.UInt32).alias("list"),
                    pl.col("id").cast(id_dtype),
                    pl.col("score"),
                )
                for i, f in enumerate(frames)
            ],
            how="vertical",
        )
        if frames
        else pl.DataFrame(schema={"list": pl.UInt32, "id": id_dtype, "score": pl.Float64})
    )


def _best_per_list(stacked: pl.DataFrame) -> pl.DataFrame:
    """Sort each list by score desc, id asc; keep each id's first occurrence; add 1-based rank."""
    return (
        stacked.sort(["list", "score", "id"], descending=[False, True, False], maintain_order=True)
        .unique(subset=["list", "id"], keep="first", maintain_order=True)
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("list").alias("position"))
    )


def _sum_by_id(contrib: pl.DataFrame) -> pl.DataFrame:
    """Sum each id's contributions in sorted order; order by score desc, id asc."""
    return (
        contrib.group_by("id")
        .agg(pl.col("c").sort().sum().alias("score"))
        .sort(["score", "id"], descending=[True, False])
    )


def reciprocal_rank_fusion(
    lists: Sequence[RankedList],
    *,
    k: float = RRF_K,
    weights: Sequence[float] | None = None,
    id_column: str = "id",
    score_column: str = "score",
) -> pl.DataFrame:
    """Fuse ranked lists with reciprocal rank fusion.

    A document's fused score is ``sum_i w_i / (k + r_i)``, where ``r_i`` is
    its 1-based position in list ``i`` (lists it is missing from add
    nothing) and ``w_i`` is the list's weight (1 by default). Only positions
    matter, not score scales. Source: G. V. Cormack, C. L. A. Clarke and
    S. Büttcher, *Reciprocal Rank Fusion outperforms Condorcet and individual
    Rank Learning Methods*, SIGIR 2009 (``k = 60``).

    Parameters
    ----------
    lists
        The ranked lists (see the module docstring for ties and repeats).
    k
        The RRF constant, finite and ``>= 0``; larger values flatten the
        advantage of top positions.
    weights
        One finite, non-negative weight per list.
    id_column, score_column
        The column names in frame inputs.

    Returns
    -------
    polars.DataFrame
        Columns ``id`` (the inputs' id type; String when every list is
        empty) and ``score`` (Float64), one row per distinct id, ordered by
        score descending then id ascending. Empty when every list is empty.

    Raises
    ------
    RankError
        On a NaN, infinite or null score, a null id, a missing column, ids
        of different types, or a bad ``k`` or weight.

    Examples
    --------
    >>> bm25 = [("a", 12.0), ("b", 7.5), ("c", 1.0)]
    >>> dense = [("c", 0.91), ("a", 0.80)]
    >>> fused = reciprocal_rank_fusion([bm25, dense])
    >>> fused["id"].to_list()
    ['a', 'c', 'b']
    >>> round(fused["score"][0], 6) == round(1 / 61 + 1 / 62, 6)
    True
    >>> reciprocal_rank_fusion([[("b", 0.5), ("c", 0.5), ("a", 0.5)]])["id"].to_list()
    ['a', 'b', 'c']
    """
    if isinstance(k, bool) or not isinstance(k, int | float) or not math.isfinite(k) or k < 0:
        raise RankError(f"RRF k must be a finite number >= 0, got {k!r}")
    stacked = _stack(lists, id_column, score_column)
    w = _check_weights(weights, len(lists))
    ranked = _best_per_list(stacked)
    weight = pl.Series("w", w, dtype=pl.Float64)
    contrib = ranked.select(
        "id",
        (
            pl.lit(weight).gather(pl.col("list")) / (float(k) + pl.col("position").cast(pl.Float64))
            if len(w)
            else pl.lit(0.0)
        ).alias("c"),
    )
    return _sum_by_id(contrib)


def weighted_score_fusion(
    lists: Sequence[RankedList],
    *,
    weights: Sequence[float] | None = None,
    id_column: str = "id",
    score_column: str = "score",
) -> pl.DataFrame:
    """Fuse ranked lists by a weighted sum of min-max normalised scores.

    Each list's scores are rescaled to ``[0, 1]`` with
    ``(s - min) / (max - min)`` over that list; a list whose scores are all
    equal (including a one-document list) maps them all to 1.0. A
    document's fused score is ``sum_i w_i * norm_i``; a list it is missing
    from adds 0. Source: E. A. Fox and J. A. Shaw, *Combination of Multiple
    Searches*, TREC-2 (1994) (CombSUM), with the min-max normalisation of
    J. H. Lee, *Analyses of Multiple Evidence Combination*, SIGIR 1997.

    Parameters
    ----------
    lists
        The ranked lists; an id repeated within one list counts once, with
        its highest score.
    weights
        One finite, non-negative weight per list (default 1 each).
    id_column, score_column
        The column names in frame inputs.

    Returns
    -------
    polars.DataFrame
        Columns ``id`` and ``score`` (Float64, in ``[0, sum(weights)]``),
        one row per distinct id, ordered by score descending then id
        ascending.

    Raises
    ------
    RankError
        As :func:`reciprocal_rank_fusion`.

    Examples
    --------
    >>> bm25 = [("a", 12.0), ("b", 7.0), ("c", 2.0)]
    >>> dense = [("c", 0.9), ("b", 0.5), ("a", 0.1)]
    >>> fused = weighted_score_fusion([bm25, dense], weights=[1.0, 3.0])
    >>> fused.rows()
    [('c', 3.0), ('b', 2.0), ('a', 1.0)]
    """
    stacked = _stack(lists, id_column, score_column)
    w = _check_weights(weights, len(lists))
    ranked = _best_per_list(stacked)
    lo = pl.col("score").min().over("list")
    hi = pl.col("score").max().over("list")
    norm = pl.when(hi > lo).then((pl.col("score") - lo) / (hi - lo)).otherwise(pl.lit(1.0))
    weight = pl.Series("w", w, dtype=pl.Float64)
    contrib = ranked.select(
        "id", (pl.lit(weight).gather(pl.col("list")) * norm if len(w) else pl.lit(0.0)).alias("c")
    )
    return _sum_by_id(contrib)


def _finite_column(values: npt.ArrayLike, index: int, n: int | None) -> npt.NDArray[np.float64]:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise RankError(f"score column {index} must be one-dimensional, got shape {array.shape}")
    if n is not None and array.shape[0] != n:
        raise RankError(f"score column {index} has {array.shape[0]} rows, expected {n}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        row = int(bad[0])
        raise RankError(
            f"score column {index}: row {row} has score {float(array[row])!r}; "
            "scores must be finite"
        )
    return array


def rrf_scores(
    scores: Sequence[npt.ArrayLike],
    ids: pl.Series | Sequence[Any],
    *,
    k: float = RRF_K,
    weights: Sequence[float] | None = None,
) -> npt.NDArray[np.float64]:
    """Reciprocal rank fusion over row-aligned score columns.

    Every row appears in every column. In each column rows are ranked by
    score (descending), then id (ascending), then row position, and the row
    gets ``w_i / (k + r_i)``; its fused score is the sum over columns (in
    sorted order, so it does not depend on the order of the columns).
    Rows sharing an id are still scored separately. Source: Cormack, Clarke
    and Büttcher, SIGIR 2009 (see :func:`reciprocal_rank_fusion`).

    Parameters
    ----------
    scores
        Score columns, each of shape ``(n,)``, higher is better.
    ids
        The row ids, shape ``(n,)``, used to break ties.
    k, weights
        As in :func:`reciprocal_rank_fusion`.

    Returns
    -------
    numpy.ndarray
        ``float64`` fused scores, shape ``(n,)``, aligned with the rows.

    Raises
    ------
    RankError
        On a non-finite score, columns of different lengths, or a bad ``k``
        or weight.

    Examples
    --------
    >>> fused = rrf_scores([[3.0, 1.0, 2.0], [0.1, 0.9, 0.5]], ["a", "b", "c"])
    >>> [round(float(x) * 1e4, 2) for x in fused]  # a, b: 1/61 + 1/63; c: 2/62
    [322.66, 322.66, 322.58]
    """
    if isinstance(k, bool) or not isinstance(k, int | float) or not math.isfinite(k) or k < 0:
        raise RankError(f"RRF k must be a finite number >= 0, got {k!r}")
    id_series = ids if isinstance(ids, pl.Series) else pl.Series("id", list(ids))
    n = id_series.len()
    columns = [_finite_column(s, i, n) for i, s in enumerate(scores)]
    w = _check_weights(weights, len(columns))
    if not columns or n == 0:
        return np.zeros(n, dtype=np.float64)
    contributions = np.empty((len(columns), n), dtype=np.float64)
    positions = np.arange(1, n + 1, dtype=np.float64)
    for i, column in enumerate(columns):
        order = (
            pl.DataFrame({"s": column, "id": id_series})
            .select(pl.arg_sort_by(["s", "id"], descending=[True, False], maintain_order=True))
            .to_series()
            .to_numpy()
        )
        ranks = np.empty(n, dtype=np.float64)
        ranks[order] = positions
        contributions[i] = w[i] / (float(k) + ranks)
    contributions.sort(axis=0)
    fused: npt.NDArray[np.float64] = contributions.sum(axis=0)
    return fused


def mmr(
    embeddings: npt.ArrayLike,
    query: npt.ArrayLike,
    *,
    k: int | None = None,
    lambda_: float = 0.5,
    relevance: npt.ArrayLike | None = None,
) -> npt.NDArray[np.int64]:
    """Select documents by maximal marginal relevance.

    Greedily picks, among the documents not yet selected, the one
    maximising ``lambda_ * sim(d, q) - (1 - lambda_) * max_{s in S} sim(d, s)``
    (the second term is 0 while nothing is selected). Similarities are
    cosines: rows and the query are L2-normalised first (zero vectors stay
    zero, similarity 0). Ties go to the lower row index. Source:
    J. Carbonell and J. Goldstein, *The Use of MMR, Diversity-Based Reranking
    for Reordering Documents and Producing Summaries*, SIGIR 1998.

    Parameters
    ----------
    embeddings
        Document vectors, shape ``(n, dim)``, finite.
    query
        The query vector, shape ``(dim,)``, finite.
    k
        How many documents to select (at most ``n``); ``None`` orders all.
    lambda_
        Trade-off in ``[0, 1]``: 1 is pure relevance, 0 pure diversity.
    relevance
        Optional precomputed ``sim(d, q)``, shape ``(n,)``, used instead of
        the cosine with ``query`` (for example a fused score).

    Returns
    -------
    numpy.ndarray
        ``int64`` row indices, shape ``(min(k, n),)``, in selection order.

    Raises
    ------
    RankError
        On shapes that do not match, non-finite values, a ``lambda_``
        outside ``[0, 1]`` or a negative ``k``.

    Examples
    --------
    >>> docs = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]])
    >>> mmr(docs, np.array([1.0, 0.2]), k=2, lambda_=1.0).tolist()
    [1, 0]
    >>> mmr(docs, np.array([1.0, 0.2]), k=2, lambda_=0.5).tolist()
    [1, 2]
    """
    matrix = np.asarray(embeddings, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    if matrix.ndim != 2:
        raise RankError(f"mmr: embeddings must have shape (n, dim), got {matrix.shape}")
    n, dim = matrix.shape
    if q.shape != (dim,):
        raise RankError(f"mmr: query must have shape ({dim},), got {q.shape}")
    if not (np.isfinite(matrix).all() and np.isfinite(q).all()):
        raise RankError("mmr: embeddings and query must be finite (no NaN or infinity)")
    if isinstance(lambda_, bool) or not 0.0 <= float(lambda_) <= 1.0:
        raise RankError(f"mmr: lambda_ must be in [0, 1], got {lambda_!r}")
    if k is None:
        k = n
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
        raise RankError(f"mmr: k must be a non-negative integer, got {k!r}")
    take = min(int(k), n)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    if relevance is None:
        q_norm = float(np.linalg.norm(q))
        rel = unit @ (q / q_norm) if q_norm > 0 else np.zeros(n)
    else:
        rel = _finite_column(relevance, 0, n)
    lam = float(lambda_)
    selected = np.empty(take, dtype=np.int64)
    available = np.ones(n, dtype=bool)
    redundancy = np.zeros(n, dtype=np.float64)
    for step in range(take):
        objective = lam * rel - (1.0 - lam) * redundancy
        objective[~available] = -np.inf
        pick = int(np.argmax(objective))
        selected[step] = pick
        available[pick] = False
        similarity = unit @ unit[pick]
        redundancy = similarity if step == 0 else np.maximum(redundancy, similarity)
    return selected
