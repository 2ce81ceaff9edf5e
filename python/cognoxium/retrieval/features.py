"""Per-item ranking features over a scope and a query, as Polars columns.

A :class:`FeatureExtractor` is built once for a scope (like a
:class:`~cognoxium.retrieval.scope.ScopeRetriever`, whose ``hybrid-lineage``
lists it reuses) and returns, for each query, one row per scope item with the
columns of :data:`FEATURE_NAMES`. The learned ranker
(:mod:`cognoxium.retrieval.learned`) scores these columns.

Features (``n`` = scope size; "rank" = competition rank, 1 + the number of
items scoring strictly higher, so ties share a rank; ``lrank(s)`` =
``log2(1 + rank)``; ``norm(s)`` = ``s / max(s)`` over the scope, 0 when the
maximum is not positive):

====================== ==========================================================
name                   definition
====================== ==========================================================
fused                  the ``hybrid-lineage`` fused score (reciprocal rank fusion,
                       :data:`~cognoxium.retrieval.scope.RRF_K`), no neighbours
fused_norm             ``norm(fused)``
fused_rank             ``lrank(fused)``
fused_neighbour        the larger ``fused`` of the items just before and after
                       (0 at the ends of the scope)
session_prior          mean of the three highest ``fused`` of the item's session
                       (``metadata.session``; items without one form one group)
bm25                   ``norm`` of Okapi BM25 of the item's packed text
bm25_rank              ``lrank`` of that BM25
bm25_window            ``norm`` of BM25 of the item joined with the item before it
                       (a corpus of these windows)
bm25_window_rank       ``lrank`` of the window BM25
bm25_lineage           ``norm`` of the best BM25 of the item's derived items (a
                       corpus of the derived items); 0 without derived items
bm25_lineage_rank      ``lrank`` of the lineage BM25
cos                    cosine of the item's packed text with the query (the
                       retriever's embedder, rounded to 6 decimals)
cos_gap                ``cos - max(cos)`` over the scope (<= 0)
cos_window             cosine of the item read with the item before it (their
                       vectors' length-weighted mean,
                       :func:`~cognoxium.retrieval.scope.window_vectors`)
cos_window_gap         ``cos_window - max(cos_window)``
cos_unnamed            ``cos`` of the query with the scope's speakers' names
                       taken out (with a possessive ``'s`` or ``'``); ``cos``
                       when the query names none or holds no word but names.
                       Where each text starts with its speaker's name (a
                       transcript), a name in the query pulls ``cos`` toward
                       all of that speaker's turns
cos_unnamed_gap        ``cos_unnamed - max(cos_unnamed)``
cos_window_unnamed     ``cos_window`` of the query without the speaker names
cos_window_unnamed_gap ``cos_window_unnamed - max(cos_window_unnamed)``
cos_lineage            best cosine of the item's derived items; 0 without one
cos_lineage_gap        ``cos_lineage - max(cos_lineage)``; 0 without derived items
cos_summary            cosine of the item's broadest derived item (the one with
                       most parents, first on ties: a session summary); 0 without
has_derived            1 when the item has at least one derived item, else 0
names_speaker          1 when the query names the item's speaker
names_other            1 when the query names another speaker of the scope
has_time               1 when the item's text carries a time expression (a month
                       or weekday name, yesterday, last/next week, "ago", a year)
when_time              ``has_time`` for a "when" question (the query asks when,
                       what date, year or month, or how long ago), else 0
log_cost               natural log of the item's token cost: tokens of its packed
                       text under the token profile plus the chat framing of its
                       role
====================== ==========================================================

All columns are ``Float64`` and finite.

An item's speaker is its ``metadata.speaker`` when that is a string, NFC
normalised and stripped (none when blank or not a string). A query names a
speaker where the name appears in it, in any case, with either apostrophe
(``'`` or ``\u2019``), and not inside a longer word: ``Ann`` is named in
"Ann's cat" and not in "Annie", ``@ann`` in "did @ann say" and ``J.R.`` in
"J.R. read". A name that begins or ends with kana or a CJK ideograph (scripts
written without spaces) is found inside a word too.

Every feature reads at most the first
:data:`~cognoxium.retrieval.embeddings.MAX_READ_CHARS` (65,536) characters of
a text, so a huge item costs what an ordinary one does, and a text of up to
that many characters is read whole. Of a longer text, the BM25 and time
features read that prefix, and ``log_cost`` estimates its tokens as the
prefix's tokens times the text's characters over the prefix's (the packer
still counts the whole text when it packs it); the cosines are those of the
whole text (see :class:`~cognoxium.retrieval.embeddings.MiniLMEmbedder`).
"""

from __future__ import annotations

import re
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from cognoxium.items.schema import packed_text_expr
from cognoxium.retrieval.embeddings import MAX_READ_CHARS, Embedder, EmbeddingCache
from cognoxium.retrieval.ranking import bm25_scores, corpus_key
from cognoxium.retrieval.scope import (
    RetrievalSettings,
    ScopeRetriever,
    frame_key,
    read_texts,
    window_texts,
)
from cognoxium.tokens.profiles import TokenProfile, get_profile

__all__ = [
    "FEATURE_NAMES",
    "FeatureExtractor",
    "feature_extractor",
    "is_when_question",
    "time_expression_expr",
]

FEATURE_NAMES: Final[tuple[str, ...]] = (
    "fused",
    "fused_norm",
    "fused_rank",
    "fused_neighbour",
    "session_prior",
    "bm25",
    "bm25_rank",
    "bm25_window",
    "bm25_window_rank",
    "bm25_lineage",
    "bm25_lineage_rank",
    "cos",
    "cos_gap",
    "cos_window",
    "cos_window_gap",
    "cos_unnamed",
    "cos_unnamed_gap",
    "cos_window_unnamed",
    "cos_window_unnamed_gap",
    "cos_lineage",
    "cos_lineage_gap",
    "cos_summary",
    "has_derived",
    "names_speaker",
    "names_other",
    "has_time",
    "when_time",
    "log_cost",
)
"""The feature columns of :meth:`FeatureExtractor.features`, in this order."""

_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_TIME_PATTERN: Final = (
    r"(?i)\b(?:" + _MONTHS + r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend"
    r"|yesterday|today|tonight|tomorrow|ago|recently|lately"
    r"|(?:last|next|this|past|few|couple of)\s+(?:days?|weeks?|months?|years?|night|summer|"
    r"winter|spring|fall|autumn|weekend)"
    r"|(?:19|20)\d\d)\b"
)
_WHEN = re.compile(
    r"(?i)\b(?:when|what\s+(?:date|day|year|month|time)|which\s+(?:year|month|day)"
    r"|how\s+long\s+ago)\b"
)


def time_expression_expr(text: pl.Expr) -> pl.Expr:
    """Whether each text carries a time expression (the ``has_time`` feature).

    Parameters
    ----------
    text
        A String expression.

    Returns
    -------
    polars.Expr
        Boolean; null texts give false.

    Examples
    --------
    >>> df = pl.DataFrame({"t": ["We met last week.", "Nice bowl!", "Back in 2019"]})
    >>> df.select(time_expression_expr(pl.col("t"))).to_series().to_list()
    [True, False, True]
    """
    return text.str.contains(_TIME_PATTERN).fill_null(False)


def is_when_question(query: str) -> bool:
    """Whether ``query`` asks for a time (when, what date/year/month, how long ago).

    Examples
    --------
    >>> is_when_question("When did Ann move to Lyon?"), is_when_question("Where is Lyon?")
    (True, False)
    """
    return _WHEN.search(query) is not None


def _norm(scores: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    top = float(scores.max()) if scores.size else 0.0
    return scores / top if top > 0 else np.zeros_like(scores)


def _log_rank(scores: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``log2(1 + r)``, ``r`` = 1 + the number of strictly higher scores."""
    ordered = np.sort(scores)
    higher = scores.size - np.searchsorted(ordered, scores, side="right")
    return np.log2(2.0 + higher.astype(np.float64))


def _gap(scores: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return scores - float(scores.max()) if scores.size else scores


def _metadata_field(scope: pl.DataFrame, field: str) -> pl.Series:
    return scope.select(
        pl.col("metadata").str.json_path_match(f"$.{field}").alias(field)
    ).to_series()


def _speaker_names(scope: pl.DataFrame) -> list[str | None]:
    """Each row's string ``metadata.speaker``, NFC and stripped; None if blank or not a string."""
    speaker = pl.col("metadata").str.json_path_match("$.speaker").str.normalize("NFC")
    speaker = speaker.str.strip_chars()
    is_string = pl.col("metadata").str.contains(r'"speaker"\s*:\s*"')
    names: list[str | None] = (
        scope.select(pl.when(is_string & (speaker != "")).then(speaker)).to_series().to_list()
    )
    return names


_UNSPACED: Final = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
"""Kana and CJK ideographs: scripts written without spaces, so a name in them has no word edge."""


def _name_regex(name: str, possessive: bool) -> str:
    """``name`` (not empty) as a regex: not inside a longer word, any apostrophe, maybe ``'s``."""
    body = "".join("['\u2019]" if c in "'\u2019" else re.escape(c) for c in name)
    before = "" if _UNSPACED.match(name[0]) else r"(?<!\w)"
    after = "" if _UNSPACED.match(name[-1]) else r"(?!\w)"
    return before + body + ("(?:['\u2019]s?)?" if possessive else "") + after


def _names_pattern(name: str) -> re.Pattern[str]:
    return re.compile("(?i)" + _name_regex(name, possessive=False))


_WORD: Final = re.compile(r"\w")


def _mentions_pattern(names: list[str]) -> re.Pattern[str] | None:
    """Any of ``names``, any case, with a possessive (``'s``, ``'``); None for no names."""
    if not names:
        return None
    ordered = sorted(names, key=lambda n: (-len(n), n))  # the longest name first
    alternatives = "|".join(_name_regex(n, possessive=True) for n in ordered)
    return re.compile("(?i)(?:" + alternatives + ")")


class FeatureExtractor:
    """Computes the :data:`FEATURE_NAMES` columns of one scope for any query.

    Parameters
    ----------
    scope
        The scope's items, canonical schema, in conversational order
        (``n`` rows); ``metadata.session`` and ``metadata.speaker`` are read
        when present.
    lineage
        The items in which derived items of the scope are looked up (see
        :func:`cognoxium.retrieval.scope.derived_items`), often the whole store.
    settings
        Embedding model and fusion constant of the ``hybrid-lineage`` lists
        (neighbour expansion is not used: ``fused_neighbour`` carries it).
    profile
        Token profile (or its name) of the ``log_cost`` feature.
    embedder, cache
        As for :class:`~cognoxium.retrieval.scope.ScopeRetriever`.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> store = records_to_frame([
    ...     {"id": "t1", "role": "user", "text": "Ann: We moved to Lyon last spring.",
    ...      "metadata": {"speaker": "Ann", "session": 1}},
    ...     {"id": "t2", "role": "assistant", "text": "Bo: How do you like it?",
    ...      "metadata": {"speaker": "Bo", "session": 1}},
    ...     {"id": "o1", "role": "memory", "text": "Ann lives in Lyon.", "parents": ["t1"]},
    ... ])
    >>> scope = store.filter(pl.col("role") != "memory")
    >>> extractor = FeatureExtractor(scope, lineage=store,
    ...     settings=RetrievalSettings(model="local_hash"), cache=EmbeddingCache(persist=False))
    >>> rows = extractor.features("When did Ann move to Lyon?")
    >>> rows.select("id", "bm25", "has_derived", "names_speaker", "when_time").rows()
    [('t1', 1.0, 1.0, 1.0, 1.0), ('t2', 0.0, 0.0, 0.0, 0.0)]
    """

    def __init__(
        self,
        scope: pl.DataFrame,
        *,
        lineage: pl.DataFrame,
        settings: RetrievalSettings | None = None,
        profile: str | TokenProfile = "cl100k_base",
        embedder: Embedder | None = None,
        cache: EmbeddingCache | None = None,
    ) -> None:
        base = settings if settings is not None else RetrievalSettings()
        self.settings = RetrievalSettings(model=base.model, rrf_k=base.rrf_k, neighbours=0.0)
        self.retriever = ScopeRetriever(
            scope,
            "hybrid-lineage",
            self.settings,
            lineage=lineage,
            embedder=embedder,
            cache=cache,
        )
        self.ids = self.retriever.ids
        self.n = scope.height
        hashes = scope.get_column("content_hash").cast(pl.String)
        texts, self._window_key = read_texts(scope, ("window", *corpus_key(hashes)))
        self._windows = window_texts(texts)
        derived = self.retriever.derived
        assert derived is not None
        assert self.retriever.links is not None
        self._derived_texts, self._derived_key = read_texts(
            derived, ("derived", *corpus_key(derived.get_column("content_hash")))
        )
        source, position = self.retriever.links
        self._source, self._position = source, position
        self._has_derived = np.zeros(self.n, dtype=np.float64)
        self._has_derived[position] = 1.0
        self._summary = self._broadest(source, position, derived.height)
        session = _metadata_field(scope, "session").fill_null("")
        self._session = session.rank("dense").cast(pl.Int64).to_numpy() - 1
        self._speakers = _speaker_names(scope)
        names = sorted({s for s in self._speakers if s})
        self._speaker_patterns = {name: _names_pattern(name) for name in names}
        self._unnamed_pattern = _mentions_pattern(names)
        self._has_time = (
            (texts.to_frame("text").select(time_expression_expr(pl.col("text"))).to_series())
            .to_numpy()
            .astype(np.float64)
        )
        self._log_cost = self._costs(scope, texts, hashes, profile)

    @staticmethod
    def _broadest(
        source: npt.NDArray[np.int64], position: npt.NDArray[np.int64], count: int
    ) -> pl.DataFrame:
        """For each scope position, its derived item with the most parents (first on ties)."""
        parents = np.bincount(source, minlength=count)
        return (
            pl.DataFrame({"derived": source, "position": position, "parents": parents[source]})
            .sort(["position", "parents", "derived"], descending=[False, True, False])
            .unique(subset="position", keep="first", maintain_order=True)
        )

    def _costs(
        self,
        scope: pl.DataFrame,
        texts: pl.Series,
        hashes: pl.Series,
        profile: str | TokenProfile,
    ) -> npt.NDArray[np.float64]:
        token_profile = get_profile(profile) if isinstance(profile, str) else profile
        chars = scope.select(packed_text_expr().str.len_chars()).to_series().to_numpy()
        cut = chars > MAX_READ_CHARS
        whole = np.flatnonzero(~cut)
        counts = np.zeros(self.n, dtype=np.int64)
        counts[whole] = token_profile.count_cached(
            hashes.gather(whole).to_list(), texts.gather(whole).fill_null("").to_list()
        )
        if cut.any():
            # Read the first MAX_READ_CHARS characters only: tokens per character of
            # that prefix, times the text's characters.
            long = np.flatnonzero(cut)
            prefix = token_profile.count(texts.gather(long).to_list())
            counts[long] = np.rint(prefix * (chars[long] / MAX_READ_CHARS)).astype(np.int64)
        roles = scope.get_column("role").cast(pl.String).to_list()
        framing = np.array([token_profile.framing(r) for r in roles], dtype=np.int64)
        costs = np.maximum(counts + framing, 1).astype(np.float64)
        out: npt.NDArray[np.float64] = np.log(costs)
        return out

    def _best_derived(self, scores: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        best = np.full(self.n, -np.inf)
        np.maximum.at(best, self._position, scores[self._source])
        return np.where(np.isfinite(best), best, 0.0)

    def _session_prior(self, fused: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        frame = pl.DataFrame({"session": self._session, "fused": fused})
        prior = frame.select(
            pl.col("fused").top_k(3).mean().over("session").alias("prior")
        ).to_series()
        return prior.to_numpy().astype(np.float64)

    def _speaker_features(self, query: str) -> tuple[npt.NDArray[np.float64], ...]:
        text = unicodedata.normalize("NFC", query)
        named = {name for name, pattern in self._speaker_patterns.items() if pattern.search(text)}
        own = np.array([s in named for s in self._speakers], dtype=np.float64)
        other = np.array([bool(named - {s}) for s in self._speakers], dtype=np.float64)
        return own.reshape(self.n), other.reshape(self.n)

    def embed_queries(self, queries: Iterable[str]) -> None:
        """Embed ``queries`` and their forms without the speakers' names in one call.

        For the :meth:`columns` of many queries over the scope (a batch):
        each column is what it is with the queries embedded one at a time
        (see :meth:`ScopeRetriever.embed_queries
        <cognoxium.retrieval.scope.ScopeRetriever.embed_queries>`).

        Parameters
        ----------
        queries
            Query texts, in any order; repeats are embedded once.
        """
        texts = list(queries)
        unnamed = (self._unnamed_query(query) for query in texts)
        self.retriever.embed_queries([*texts, *(u for u in unnamed if u is not None)])

    def _unnamed_query(self, query: str) -> str | None:
        """``query`` without the scope's speaker names; None if it names none or no word is left."""
        if self._unnamed_pattern is None:
            return None
        stripped, count = self._unnamed_pattern.subn(" ", unicodedata.normalize("NFC", query))
        stripped = " ".join(stripped.split())
        return stripped if count and _WORD.search(stripped) else None

    def _unnamed_columns(
        self, query: str, lists: dict[str, npt.NDArray[np.float64]]
    ) -> dict[str, npt.NDArray[np.float64]]:
        """The ``*_unnamed`` cosines: ``lists``' own when the query names no speaker."""
        unnamed = self._unnamed_query(query)
        if unnamed is None:
            cos, window = lists["embedding"], lists["window"]
        else:
            cos = self.retriever.cosines(unnamed, "embedding")
            window = self.retriever.cosines(unnamed, "window")
        return {
            "cos_unnamed": cos,
            "cos_unnamed_gap": _gap(cos),
            "cos_window_unnamed": window,
            "cos_window_unnamed_gap": _gap(window),
        }

    def _lineage_columns(self, query: str) -> dict[str, npt.NDArray[np.float64]]:
        """The features read off each item's derived items (0 for an item without one)."""
        if self._derived_texts.len():
            derived_bm25 = bm25_scores(self._derived_texts, query, cache_key=self._derived_key)
            derived_cos = self.retriever.derived_cosines(query)
        else:
            derived_bm25 = derived_cos = np.zeros(0, dtype=np.float64)
        lineage_bm25 = self._best_derived(derived_bm25)
        cos_lineage = self._best_derived(derived_cos)
        has = self._has_derived > 0
        top = float(cos_lineage[has].max()) if has.any() else 0.0
        summary = np.zeros(self.n, dtype=np.float64)
        if self._summary.height:
            summary[self._summary.get_column("position").to_numpy()] = derived_cos[
                self._summary.get_column("derived").to_numpy()
            ]
        return {
            "bm25_lineage": _norm(lineage_bm25),
            "bm25_lineage_rank": _log_rank(lineage_bm25),
            "cos_lineage": cos_lineage,
            "cos_lineage_gap": np.where(has, cos_lineage - top, 0.0),
            "cos_summary": summary,
        }

    def columns(self, query: str) -> dict[str, npt.NDArray[np.float64]]:
        """The feature columns for ``query`` as ``float64`` arrays of shape ``(n,)``.

        Parameters
        ----------
        query
            The query text.

        Returns
        -------
        dict
            :data:`FEATURE_NAMES` to arrays aligned with the scope's rows.
        """
        lists = self.retriever.list_scores(query)
        fused = self.retriever.fuse(lists)
        neighbour = np.zeros(self.n, dtype=np.float64)
        if self.n > 1:
            neighbour[1:] = fused[:-1]
            neighbour[:-1] = np.maximum(neighbour[:-1], fused[1:])
        bm25 = lists["bm25"]
        window = bm25_scores(self._windows, query, cache_key=self._window_key)
        names_speaker, names_other = self._speaker_features(query)
        when = 1.0 if is_when_question(query) else 0.0
        return {
            "fused": fused,
            "fused_norm": _norm(fused),
            "fused_rank": _log_rank(fused),
            "fused_neighbour": neighbour,
            "session_prior": self._session_prior(fused),
            "bm25": _norm(bm25),
            "bm25_rank": _log_rank(bm25),
            "bm25_window": _norm(window),
            "bm25_window_rank": _log_rank(window),
            "cos": lists["embedding"],
            "cos_gap": _gap(lists["embedding"]),
            "cos_window": lists["window"],
            "cos_window_gap": _gap(lists["window"]),
            **self._unnamed_columns(query, lists),
            **self._lineage_columns(query),
            "has_derived": self._has_derived,
            "names_speaker": names_speaker,
            "names_other": names_other,
            "has_time": self._has_time,
            "when_time": self._has_time * when,
            "log_cost": self._log_cost,
        }

    def matrix(self, query: str) -> npt.NDArray[np.float64]:
        """The features for ``query`` as a matrix, shape ``(n, len(FEATURE_NAMES))``."""
        if self.n == 0:
            return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float64)
        columns = self.columns(query)
        return np.column_stack([columns[name] for name in FEATURE_NAMES])

    def features(self, query: str) -> pl.DataFrame:
        """One row per scope item: ``id`` then the :data:`FEATURE_NAMES` columns.

        Parameters
        ----------
        query
            The query text.

        Returns
        -------
        polars.DataFrame
            ``n`` rows in scope order; ``id`` String, features Float64.
        """
        matrix = self.matrix(query)
        return pl.DataFrame(
            {
                "id": self.ids,
                **{name: matrix[:, j] for j, name in enumerate(FEATURE_NAMES)},
            },
            schema={"id": pl.String, **dict.fromkeys(FEATURE_NAMES, pl.Float64)},
        )


_EXTRACTORS: OrderedDict[tuple[object, ...], FeatureExtractor] = OrderedDict()
_EXTRACTORS_MAX: Final = 16


def feature_extractor(
    scope: pl.DataFrame,
    settings: RetrievalSettings,
    *,
    lineage: pl.DataFrame | Callable[[], pl.DataFrame],
    lineage_key: Hashable | None = None,
    profile: str = "cl100k_base",
) -> FeatureExtractor:
    """A :class:`FeatureExtractor` of ``scope``, reused while the same scope comes back.

    Kept in a small least-recently-used cache (16 extractors, one process)
    keyed like :func:`cognoxium.retrieval.scope.scope_retriever`.

    Parameters
    ----------
    scope, settings, profile
        As for :class:`FeatureExtractor`.
    lineage
        The lineage items, or a function returning them (called only when an
        extractor is built).
    lineage_key
        A hashable naming the lineage items; ``None`` keys them by their ids,
        parents and content hashes.

    Returns
    -------
    FeatureExtractor

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> scope = records_to_frame([{"id": "a", "role": "user", "text": "hello"}])
    >>> settings = RetrievalSettings(model="local_hash")
    >>> one = feature_extractor(scope, settings, lineage=scope)
    >>> one is feature_extractor(scope, settings, lineage=scope)
    True
    """
    if lineage_key is None:
        lineage = lineage() if callable(lineage) else lineage
        lineage_key = frame_key(lineage, ("id", "content_hash", "parents"))
    key = (settings, profile, frame_key(scope, ("id", "content_hash", "metadata")), lineage_key)
    found = _EXTRACTORS.get(key)
    if found is not None:
        _EXTRACTORS.move_to_end(key)
        return found
    items = lineage() if callable(lineage) else lineage
    built = FeatureExtractor(scope, lineage=items, settings=settings, profile=profile)
    _EXTRACTORS[key] = built
    if len(_EXTRACTORS) > _EXTRACTORS_MAX:
        _EXTRACTORS.popitem(last=False)
    return built
