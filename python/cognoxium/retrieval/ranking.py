"""Relevance scorers behind :meth:`CognitionFrame.rank <cognoxium.frame.frame.CognitionFrame.rank>`.

Every scorer is column work: BM25 runs through the `bm25s`_ library over a
whole column of texts, recency and priority are Polars expressions. Scores are
``float64`` and higher is better.

BM25 indexes are cached per scope: :func:`bm25_scores` keeps the index of the
last few corpora in a small LRU, so packing many queries over one set of items
tokenizes and indexes the items once.

.. _bm25s: https://github.com/xhluca/bm25s
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl
import regex

from cognoxium.exceptions import PlanError
from cognoxium.items._checks import to_utc

__all__ = [
    "BM25CacheInfo",
    "bm25_cache_clear",
    "bm25_cache_info",
    "bm25_scores",
    "bm25_scores_many",
    "corpus_key",
    "recency_expr",
    "recency_scores",
]

_LN2 = math.log(2.0)
_LARGEST = sys.float_info.max
"""The largest finite float: the cap of a recency score that would overflow."""


# ---------------------------------------------------------------------------
# BM25


class BM25CacheInfo(NamedTuple):
    """Counters of the BM25 index cache (like :func:`functools.lru_cache`'s)."""

    hits: int
    misses: int
    maxsize: int
    currsize: int


class _Index(NamedTuple):
    retriever: Any  # bm25s.BM25, or None when no text has a token
    size: int


class _IndexCache:
    """A small thread-safe LRU of BM25 indexes keyed by scope."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, _Index] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> _Index | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
            return entry

    def put(self, key: Hashable, entry: _Index) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def info(self) -> BM25CacheInfo:
        with self._lock:
            return BM25CacheInfo(self.hits, self.misses, self.maxsize, len(self._entries))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = 0
            self.misses = 0


_CACHE = _IndexCache(maxsize=16)


def bm25_cache_info() -> BM25CacheInfo:
    """Return the hits, misses and size of the BM25 index cache.

    Examples
    --------
    >>> bm25_cache_info().maxsize
    16
    """
    return _CACHE.info()


def bm25_cache_clear() -> None:
    """Empty the BM25 index cache and reset its counters."""
    _CACHE.clear()


def _stemmer() -> Any:
    """PyStemmer's English stemmer if it is installed, else ``None`` (no stemming)."""
    try:
        import Stemmer
    except ImportError:
        return None
    return Stemmer.Stemmer("english")


_WORDS = re.compile(r"(?u)\b\w\w+\b")
"""bm25s' default token pattern: runs of two or more word characters."""

_CJK_RUN = regex.compile(
    r"(?V1)([[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}]&&[\p{L}\p{N}]]+)"
)
"""A run of Han, Hiragana, Katakana and Hangul letters and numbers (Unicode Script_Extensions).

Hangul is among them, as in Lucene's ``CJKBigramFilter`` by default: Korean
puts spaces between words, but a noun carries its particle (환불은, 환불을),
so a query of the bare noun shares a bigram with it and not a word.
"""

_MAYBE_CJK = re.compile("[\u1100-\u11ff\u2e80-\U0010ffff]")
"""A character of Hangul Jamo (U+1100-11FF) or at or past U+2E80: every character
:data:`_CJK_RUN` and :data:`_WIDTH_FORMS` read is one.

A cheap test that a text has none: Latin, Cyrillic, Greek and Arabic text,
with its curly quotes and dashes (U+2000-206F), fails it.
"""

_WIDTH_FORMS = re.compile("[\uff01-\uff5e\uff65-\uff9f]+")
"""Full-width ASCII (U+FF01-FF5E) and half-width Katakana (U+FF65-FF9F)."""


def _folded(text: str) -> str:
    """``text`` in NFC, its full-width ASCII and half-width Katakana folded to their usual width.

    As Lucene's ``CJKWidthFilter`` folds them before its bigrams: input
    methods type ``ＶＩＰ`` and ``ﾎﾟｲﾝﾄ`` for ``VIP`` and ``ポイント``. Only
    those forms are folded (by NFKC), so other text is only composed.

    Examples
    --------
    >>> _folded("ＶＩＰ会员 ﾎﾟｲﾝﾄ")
    'VIP会员 ポイント'
    """
    if not text.isascii() and _MAYBE_CJK.search(text):
        text = _WIDTH_FORMS.sub(lambda run: unicodedata.normalize("NFKC", run.group()), text)
    return unicodedata.normalize("NFC", text)


def _words(text: str) -> list[str]:
    """The BM25 words of ``text``: word runs, and overlapping bigrams of CJK runs.

    Text outside Han, Hiragana, Katakana and Hangul splits as bm25s splits
    it, into runs of two or more word characters. Chinese and Japanese are
    written without spaces, and a Korean noun carries its particle, so a
    CJK run becomes its overlapping character bigrams,
    or the character alone when the run has one, as Lucene's
    ``CJKBigramFilter`` (Elasticsearch's ``cjk_bigram`` token filter) does:
    https://lucene.apache.org/core/9_0_0/analysis/common/org/apache/lucene/analysis/cjk/CJKBigramFilter.html.
    A text without CJK characters splits exactly as bm25s splits it; the test
    for them costs nothing on ASCII text and one scan for a character of
    the blocks that hold them (:data:`_MAYBE_CJK`) on other text.

    Examples
    --------
    >>> _words("東京都は、日本の首都であり")
    ['東京', '京都', '都は', '日本', '本の', 'の首', '首都', '都で', 'であ', 'あり']
    >>> _words("refund 退款 in 5 days, 返金ポリシー")
    ['refund', '退款', 'in', 'days', '返金', '金ポ', 'ポリ', 'リシ', 'シー']
    >>> _words("환불은 정책 a straße")
    ['환불', '불은', '정책', 'straße']
    """
    if text.isascii() or _MAYBE_CJK.search(text) is None:
        return _WORDS.findall(text)
    words: list[str] = []
    for i, part in enumerate(_CJK_RUN.split(text)):  # odd parts are the CJK runs
        if i % 2 == 0:
            words.extend(_WORDS.findall(part))
        elif len(part) == 1:
            words.append(part)
        else:
            words.extend(part[j : j + 2] for j in range(len(part) - 1))
    return words


def _tokenizer() -> Any:
    """A bm25s tokenizer of :func:`_words`: lowercase, English stop words, stemming."""
    import bm25s.tokenization

    return bm25s.tokenization.Tokenizer(splitter=_words, stopwords="en", stemmer=_stemmer())


def _tokenize(texts: list[str], *, ids: bool) -> Any:
    """BM25 tokens of ``texts``, folded (:func:`_folded`: NFC, and the width forms of CJK text).

    ``ids``: a ``bm25s.tokenization.Tokenized`` (token ids and vocabulary) to
    index; otherwise the tokens of each text, to look up in an index.
    """
    composed = [_folded(text) for text in texts]
    return _tokenizer().tokenize(
        composed, return_as="tuple" if ids else "string", show_progress=False, allow_empty=False
    )


def _build_index(texts: list[str]) -> _Index:
    import bm25s

    tokens = _tokenize(texts, ids=True)
    if not tokens.vocab:
        return _Index(None, len(texts))
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    return _Index(retriever, len(texts))


def corpus_key(content_hashes: pl.Series) -> tuple[str, str]:
    """The BM25 cache key of a corpus given by its items' ordered content hashes.

    An item's packed text is a function of its content, so equal ordered
    content hashes mean an equal corpus; the key is much cheaper than hashing
    the texts.

    Parameters
    ----------
    content_hashes
        The items' ``content_hash`` column, in corpus order, shape ``(n,)``.

    Returns
    -------
    tuple of str
        ``("content_hash", <sha256 hex of the hashes joined by newlines>)``.

    Examples
    --------
    >>> corpus_key(pl.Series(["a", "b"])) == corpus_key(pl.Series(["a", "b"]))
    True
    >>> corpus_key(pl.Series(["a", "b"])) == corpus_key(pl.Series(["b", "a"]))
    False
    """
    joined = content_hashes.cast(pl.String).fill_null("").str.join("\n").item()
    return ("content_hash", hashlib.sha256(str(joined).encode("utf-8")).hexdigest())


def _texts_key(texts: list[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return "texts:" + digest.hexdigest()


def bm25_scores(
    texts: Sequence[str] | pl.Series,
    query: str,
    *,
    cache_key: Hashable | None = None,
) -> npt.NDArray[np.float64]:
    """Score each text against ``query`` with Okapi BM25.

    The corpus is exactly ``texts``: document frequencies, and so the IDF of
    every term, come from these texts only. Tokenization is bm25s', of the texts
    in Unicode NFC (a letter and its combining mark read as the composed letter,
    full-width ASCII and half-width Katakana at their usual width):
    lowercase, words of two or more word characters, English stop words
    removed, Snowball stemming when PyStemmer is installed. Chinese and
    Japanese have no spaces between words, and a Korean noun carries its
    particle, so a run of Han, Hiragana, Katakana and Hangul characters is
    read as its overlapping character bigrams (a lone character as itself),
    as Lucene's ``CJKBigramFilter`` reads it by default. Scoring is bm25s' ``lucene`` variant
    (k1 = 1.5, b = 0.75), from Robertson and Zaragoza, *The Probabilistic
    Relevance Framework: BM25 and Beyond* (2009).

    Parameters
    ----------
    texts
        The documents, shape ``(n,)``. Nulls count as empty texts.
    query
        The query text.
    cache_key
        Identity of the corpus for the index cache; equal keys must mean equal
        texts in equal order. Defaults to a sha256 digest of ``texts``.

    Returns
    -------
    numpy.ndarray
        ``float64`` scores, shape ``(n,)``, aligned with ``texts``; ``0.0``
        for a text that shares no term with the query (and for every text
        when the query has no term left after stop-word removal).

    Examples
    --------
    >>> scores = bm25_scores(["the cat sat", "a dog barked", "birds sing"], "barking dog")
    >>> scores.dtype, int(scores.argmax()), scores[0], scores[2]
    (dtype('float64'), 1, np.float64(0.0), np.float64(0.0))
    >>> scores = bm25_scores(["退款政策：重复扣款将在5个工作日内退还。", "配送时间"], "退款")
    >>> int(scores.argmax()), bool(scores[0] > 0), scores[1]
    (0, True, np.float64(0.0))
    """
    return bm25_scores_many(texts, [query], cache_key=cache_key)[0]


def bm25_scores_many(
    texts: Sequence[str] | pl.Series,
    queries: Sequence[str],
    *,
    cache_key: Hashable | None = None,
) -> list[npt.NDArray[np.float64]]:
    """Score each text against each of ``queries`` with Okapi BM25 (see :func:`bm25_scores`).

    The queries are tokenized in one call; each gets what :func:`bm25_scores`
    gives it alone.

    Parameters
    ----------
    texts
        The documents, shape ``(n,)``. Nulls count as empty texts.
    queries
        ``q`` query texts.
    cache_key
        Identity of the corpus for the index cache (see :func:`bm25_scores`).

    Returns
    -------
    list of numpy.ndarray
        ``q`` arrays of ``float64`` scores, shape ``(n,)``, in query order.

    Examples
    --------
    >>> many = bm25_scores_many(["the cat sat", "a dog barked"], ["dog", "cat"])
    >>> [int(s.argmax()) for s in many]
    [1, 0]
    """
    n = len(texts)
    index = _index(texts, cache_key) if n else None
    if index is None or index.retriever is None or not queries:
        return [np.zeros(n, dtype=np.float64) for _ in queries]
    out = []
    for query_tokens in _tokenize(list(queries), ids=False):
        token_ids = index.retriever.get_tokens_ids(query_tokens)
        if not token_ids:
            out.append(np.zeros(n, dtype=np.float64))
            continue
        scores = index.retriever.get_scores_from_ids(token_ids)
        out.append(np.asarray(scores, dtype=np.float64))
    return out


def _index(texts: Sequence[str] | pl.Series, cache_key: Hashable | None) -> _Index:
    """The cached BM25 index of ``texts`` (``n > 0`` of them), built on a miss."""
    n = len(texts)
    index = None if cache_key is None else _CACHE.get(cache_key)
    if index is None:  # the texts are read only to key or build an index
        if isinstance(texts, pl.Series):
            docs: list[str] = texts.cast(pl.String).fill_null("").to_list()
        else:
            docs = ["" if t is None else str(t) for t in texts]
        key = cache_key if cache_key is not None else _texts_key(docs)
        index = _CACHE.get(key) if cache_key is None else None
        if index is None:
            index = _build_index(docs)
            _CACHE.put(key, index)
    if index.size != n:
        raise PlanError(
            f"BM25 cache key {cache_key!r} names a corpus of {index.size} texts, got {n}; "
            "a cache key must identify its texts"
        )
    return index


# ---------------------------------------------------------------------------
# recency


def half_life_seconds(half_life: float | timedelta | None) -> float | None:
    """Return a half-life in seconds, checked to be positive and finite.

    Raises
    ------
    PlanError
        If it is not a positive, finite number of seconds or timedelta.
    """
    if half_life is None:
        return None
    if isinstance(half_life, timedelta):
        seconds = half_life.total_seconds()
    elif isinstance(half_life, int | float) and not isinstance(half_life, bool):
        seconds = float(half_life)
    else:
        raise PlanError(f"half_life must be seconds or a timedelta, got {half_life!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise PlanError(f"half_life must be positive and finite, got {half_life!r}")
    return seconds


def _utc(reference: datetime | None) -> datetime | None:
    if reference is None:
        return None
    if reference.tzinfo is None or reference.utcoffset() is None:
        raise PlanError(f"reference time must be timezone-aware (UTC), got {reference!r}")
    try:
        return to_utc(reference)
    except ValueError as exc:
        raise PlanError(f"reference time {exc}, got {reference!r}") from None


def recency_expr(
    *,
    half_life: float | timedelta | None = None,
    reference: datetime | None = None,
    column: str = "created_at",
) -> pl.Expr:
    """Return an expression scoring how recent each row's ``column`` is.

    With a half-life ``h`` (seconds), the score is exponential decay,
    ``exp(-ln 2 · age / h)`` with ``age = reference - created_at`` in seconds:
    1.0 at the reference time, 0.5 one half-life before it. Rows newer than
    the reference score above 1; a score past the largest float (a row more
    than about 1,024 half-lives newer than the reference) is that largest
    float, so every score is finite. Without a half-life the score is the Unix
    time of ``column`` in seconds: monotonic, newest highest.

    Parameters
    ----------
    half_life
        Seconds (or a timedelta) for the score to halve; ``None`` for raw
        epoch seconds.
    reference
        The UTC time ages are measured from. Defaults to the latest
        ``column`` value among the rows the expression runs over.
    column
        A UTC datetime column.

    Returns
    -------
    polars.Expr
        A Float64 expression; null where ``column`` is null.

    Raises
    ------
    PlanError
        On a non-positive half-life or a naive reference time.

    Examples
    --------
    >>> from datetime import UTC
    >>> df = pl.DataFrame({"created_at": [datetime(2024, 1, 1, tzinfo=UTC),
    ...                                   datetime(2024, 1, 2, tzinfo=UTC)]})
    >>> df.select(recency_expr(half_life=86400)).to_series().to_list()
    [0.5, 1.0]
    """
    seconds = half_life_seconds(half_life)
    ref = _utc(reference)
    created = pl.col(column)
    if seconds is None:
        return (created.dt.epoch("us").cast(pl.Float64) / 1e6).alias("rank")
    anchor = pl.lit(ref).cast(pl.Datetime("us", "UTC")) if ref is not None else created.max()
    age = (anchor - created).dt.total_microseconds().cast(pl.Float64) / 1e6
    score = (-_LN2 * age / seconds).exp()
    return pl.when(score.is_infinite()).then(_LARGEST).otherwise(score).alias("rank")


def recency_scores(
    created_at: pl.Series,
    *,
    half_life: float | timedelta | None = None,
    reference: datetime | None = None,
) -> npt.NDArray[np.float64]:
    """Score timestamps by recency (see :func:`recency_expr` for the formula).

    Parameters
    ----------
    created_at
        UTC datetimes, shape ``(n,)``.
    half_life, reference
        As in :func:`recency_expr`; the reference defaults to the latest
        timestamp in ``created_at``.

    Returns
    -------
    numpy.ndarray
        ``float64`` scores, shape ``(n,)``; NaN where ``created_at`` is null.

    Examples
    --------
    >>> from datetime import UTC
    >>> s = pl.Series([datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 3, tzinfo=UTC)])
    >>> recency_scores(s, half_life=timedelta(days=1)).tolist()
    [0.25, 1.0]
    """
    frame = pl.DataFrame({"created_at": created_at})
    out = frame.select(recency_expr(half_life=half_life, reference=reference)).to_series()
    return out.cast(pl.Float64).to_numpy().astype(np.float64, copy=False)
